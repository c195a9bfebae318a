//! The live demo: the flights replayed as a stream ([`replay`]) into whatever
//! flows the demo pipeline declares, with faults to inject ([`fault`]).
//!
//! ```text
//!  Replay ──(files in arrival order, paced by --speed)──► DIR/landing/flights ─► flows (processing time)
//!  --inject NAME@SECS ──► fault::inject ─────────────────┘                       │
//!  --until-drained: replay done ─► stop the flows ─► one available_now pass ─► summary
//! ```
//!
//! While live, every flow of the pipeline runs concurrently with a processing-time
//! trigger of [`LIVE_INTERVAL`]; a flow that stops on a schema change (exit 3 in
//! `weir run`) or fails (a fault) is restarted after [`RESTART_AFTER`], as a
//! supervisor would, and the failure stays in its progress and timeline.

pub mod data;
pub mod fault;
pub mod replay;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::{FlowSummary, RunOptions, run_flow};
use crate::records::StreamingQueryProgress;
use crate::spec::{FlowSpec, SinkSpec, Trigger};
use fault::{ScheduledFault, Target};
use replay::{Replay, ReplayStatus};

/// Processing-time trigger of the flows while the replay is live.
pub const LIVE_INTERVAL: Duration = Duration::from_millis(500);
/// Pause before a failed or schema-stopped flow is started again.
pub const RESTART_AFTER: Duration = Duration::from_secs(2);

/// How a live demo runs.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Simulated seconds per wall second (`f64::INFINITY`: as fast as possible).
    pub speed: f64,
    pub days: Option<usize>,
    /// Stop once every file landed and the flows drained it (else: until a signal).
    pub until_drained: bool,
    /// Print each progress record on stdout.
    pub print_progress: bool,
    pub faults: Vec<ScheduledFault>,
    /// `weir demo --kafka`: the flights go through this topic instead of landing files.
    pub kafka: Option<replay::KafkaReplay>,
}

/// The fault target of a demo directory and its flows.
pub fn target(dir: &Path, flows: &[FlowSpec], replay: &Replay) -> Target {
    Target {
        landing: dir.join("landing").join("flights"),
        staging: dir.join("_staging"),
        tables: flows
            .iter()
            .filter_map(|f| match &f.sink {
                SinkSpec::Delta { path, .. } => Some(path.clone()),
                _ => None,
            })
            .collect(),
        header: replay.header.clone(),
        sample_line: replay
            .files
            .first()
            .and_then(|f| f.body.lines().nth(1))
            .unwrap_or_default()
            .to_string(),
    }
}

/// The tasks of a live replay.
pub struct Live {
    /// The replay's progress, updated after each file.
    pub status: watch::Receiver<ReplayStatus>,
    pub replay: tokio::task::JoinHandle<crate::Result<ReplayStatus>>,
    /// One task per scheduled fault; it ends when the fault is over.
    pub faults: Vec<tokio::task::JoinHandle<()>>,
    /// Each fault as it is injected (bounded; for a console timeline).
    pub injected: tokio::sync::mpsc::Receiver<fault::Injected>,
}

/// Starts the replay and the scheduled faults as tasks. `stop` ends the replay early.
pub fn start_replay(
    replay: Replay,
    dir: &Path,
    flows: &[FlowSpec],
    options: &LiveOptions,
    stop: watch::Receiver<bool>,
) -> Live {
    let target = target(dir, flows, &replay);
    let mut faults = Vec::new();
    let (injected_tx, injected) = tokio::sync::mpsc::channel(64);
    for scheduled in options.faults.clone() {
        let target = target.clone();
        let injected_tx = injected_tx.clone();
        faults.push(tokio::spawn(async move {
            tokio::time::sleep(scheduled.after).await;
            match fault::inject_notify(scheduled.fault, &target, Some(&injected_tx)).await {
                Ok(_) => {}
                Err(e) => {
                    eprintln!(
                        "weir: fault {} could not be injected: {e}",
                        scheduled.fault.name()
                    );
                }
            }
        }));
    }
    let (status_tx, status_rx) = watch::channel(ReplayStatus::default());
    let landing = target.landing.clone();
    let staging = target.staging.clone();
    let speed = options.speed;
    let kafka = options.kafka.clone();
    let task = tokio::spawn(async move {
        match kafka {
            Some(to) => replay.run_kafka(&to, speed, stop, status_tx).await,
            None => replay.run(&landing, &staging, speed, stop, status_tx).await,
        }
    });
    Live {
        status: status_rx,
        replay: task,
        faults,
        injected,
    }
}

fn progress_printer(print: bool) -> Option<crate::engine::ProgressCallback> {
    print.then(|| {
        // A closed stdout (`| head -1`) ends the progress output, never the demo.
        let mut closed = false;
        Box::new(move |p: &StreamingQueryProgress| {
            use std::io::Write;
            if closed {
                return;
            }
            if let Ok(line) = serde_json::to_string(p) {
                let mut out = std::io::stdout().lock();
                closed = writeln!(out, "{line}").and_then(|()| out.flush()).is_err();
            }
        }) as crate::engine::ProgressCallback
    })
}

/// Runs the live demo without a console: replay, flows, faults; then (with
/// `until_drained`) a final `available_now` pass. `signal` becomes `true` to stop (the
/// CLI's SIGINT/SIGTERM handling). Returns each flow's last result.
pub async fn run_headless(
    dir: &Path,
    flows: &[FlowSpec],
    options: &LiveOptions,
    signal: watch::Receiver<bool>,
) -> crate::Result<(ReplayStatus, Vec<(String, crate::Result<FlowSummary>)>)> {
    let started_ms = crate::clock::now_ms();
    let replay = Replay::flights(options.days, Duration::from_secs(3600))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let Live {
        status,
        replay: replay_task,
        faults,
        ..
    } = start_replay(replay, dir, flows, options, stop_rx.clone());

    // The supervisor: each flow in its own task, restarted after a failure while live.
    let mut set = tokio::task::JoinSet::new();
    let spawn = |set: &mut tokio::task::JoinSet<(FlowSpec, crate::Result<FlowSummary>)>,
                 flow: FlowSpec,
                 delay: Duration| {
        let stop = stop_rx.clone();
        let print = options.print_progress;
        set.spawn(async move {
            tokio::time::sleep(delay).await;
            let options = RunOptions {
                trigger: Some(Trigger::ProcessingTime(LIVE_INTERVAL)),
                stop: Some(stop),
                on_progress: progress_printer(print),
                ..Default::default()
            };
            let r = run_flow(&flow, options).await;
            (flow, r)
        });
    };
    for flow in flows {
        spawn(&mut set, flow.clone(), Duration::ZERO);
    }
    // Stop when asked (a signal), or when the replay is done and `until_drained`.
    {
        let stop_tx = stop_tx.clone();
        let mut signal = signal.clone();
        let mut status = status.clone();
        let until_drained = options.until_drained;
        tokio::spawn(async move {
            tokio::select! {
                _ = signal.wait_for(|s| *s) => {}
                _ = async {
                    if until_drained {
                        let _ = status.wait_for(|s| s.done).await;
                        for f in faults {
                            let _ = f.await;
                        }
                    } else {
                        std::future::pending::<()>().await;
                    }
                } => {}
            }
            let _ = stop_tx.send(true);
        });
    }
    let mut last: Vec<(String, crate::Result<FlowSummary>)> = Vec::new();
    while let Some(joined) = set.join_next().await {
        let Ok((flow, result)) = joined else {
            continue;
        };
        let stopping = *stop_rx.borrow();
        if let Err(e) = &result
            && !stopping
        {
            eprintln!(
                "weir: flow {} stopped ({}): {e}; restarting in {} s",
                flow.name,
                e.kind(),
                RESTART_AFTER.as_secs()
            );
            spawn(&mut set, flow.clone(), RESTART_AFTER);
            continue;
        }
        last.retain(|(n, _)| n != &flow.name);
        last.push((flow.name.clone(), result));
    }
    let status = match replay_task.await {
        Ok(r) => r?,
        Err(e) => {
            return Err(crate::Error::Source {
                path: dir.to_path_buf(),
                message: format!("the replay task failed: {e}"),
            });
        }
    };
    if options.until_drained && !*signal.borrow() {
        // What landed after the last live batch: one bounded pass, flows in file order.
        last.clear();
        for flow in flows {
            let mut result = Err(crate::Error::Source {
                path: PathBuf::from(&flow.name),
                message: "not run".into(),
            });
            for _ in 0..20 {
                let options = RunOptions {
                    trigger: Some(Trigger::AvailableNow),
                    stop: Some(signal.clone()),
                    on_progress: progress_printer(options.print_progress),
                    ..Default::default()
                };
                result = run_flow(flow, options).await;
                match &result {
                    Err(e) if e.kind() == crate::error::ErrorKind::SchemaChanged => continue,
                    _ => break,
                }
            }
            last.push((flow.name.clone(), result));
        }
    }
    // Keep file order. The counts cover every process run of the demo, restarts
    // included: they come from the progress records written since it started.
    last.sort_by_key(|(n, _)| flows.iter().position(|f| &f.name == n));
    for (name, result) in &mut last {
        if let (Ok(summary), Some(flow)) = (result, flows.iter().find(|f| &f.name == name)) {
            count_since(summary, &flow.checkpoint, started_ms);
        }
    }
    Ok((status, last))
}

/// Sets a summary's counts from the flow's progress records since `since_ms` (each
/// batch once: a replayed batch's last record counts).
fn count_since(summary: &mut FlowSummary, checkpoint: &Path, since_ms: i64) {
    let path = crate::checkpoint::Checkpoint::at(checkpoint).progress_path();
    let Ok(records) = crate::checkpoint::progress::read_progress(&path) else {
        return;
    };
    let since = crate::records::iso_millis(since_ms);
    let mut batches = std::collections::BTreeMap::new();
    let mut replayed = 0;
    for r in records.into_iter().filter(|r| r.timestamp >= since) {
        replayed += u64::from(r.weir.replayed);
        batches.insert(r.batch_id, r);
    }
    summary.batches = batches.len() as u64;
    summary.replayed_batches = replayed;
    summary.num_input_rows = batches.values().map(|r| r.num_input_rows).sum();
    summary.num_output_rows = batches
        .values()
        .map(|r| u64::try_from(r.sink.num_output_rows).unwrap_or(0))
        .sum();
    summary.num_files = batches.values().map(|r| r.weir.num_files).sum();
    summary.num_files_failed = batches.values().map(|r| r.weir.num_files_failed).sum();
}

/// Set in the environment of a demo started by [`supervise_crash`], so it does not
/// supervise again.
pub const CHILD_ENV: &str = "WEIR_DEMO_CHILD";

/// The `crash` fault without a console: runs the same demo as a child process
/// (`args`, without the crash), kills it with SIGKILL `after` the start (mid-stream,
/// usually mid-batch), announces it, and starts it again, which recovers from the
/// checkpoints and resumes the replay at the first missing file. Returns the exit
/// code of the restarted child.
pub fn supervise_crash(
    args: &[std::ffi::OsString],
    after: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    let exe = std::env::current_exe()?;
    let spawn = || {
        std::process::Command::new(&exe)
            .args(args)
            .env(CHILD_ENV, "1")
            .spawn()
    };
    let mut child = spawn()?;
    let deadline = std::time::Instant::now() + after;
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            eprintln!("weir: fault crash: the demo ended before the crash was due");
            return Ok(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = child.id();
    child.kill()?;
    child.wait()?;
    eprintln!(
        "weir: fault injected: crash: process {pid} killed with SIGKILL mid-stream; restarting it"
    );
    spawn()?.wait()
}

/// The command line of a demo without its `crash` faults (and with `--dir`).
pub fn args_without_crash(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    dir: &Path,
) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut has_dir = false;
    let mut it = args.into_iter().peekable();
    while let Some(a) = it.next() {
        let text = a.to_string_lossy().into_owned();
        if text == "--inject"
            && it
                .peek()
                .is_some_and(|v| v.to_string_lossy().starts_with("crash"))
        {
            it.next();
            continue;
        }
        if text.starts_with("--inject=crash") {
            continue;
        }
        has_dir |= text == "--dir" || text.starts_with("--dir=");
        out.push(a);
    }
    if !has_dir {
        out.push("--dir".into());
        out.push(dir.as_os_str().to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_runs_without_the_crash_and_in_the_same_dir() {
        let args = [
            "demo",
            "--headless",
            "--inject",
            "crash@2",
            "--inject=crash",
            "--inject",
            "malformed@1",
        ]
        .map(std::ffi::OsString::from);
        let out = args_without_crash(args, Path::new("/tmp/d"));
        let out: Vec<String> = out
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            out,
            [
                "demo",
                "--headless",
                "--inject",
                "malformed@1",
                "--dir",
                "/tmp/d"
            ]
        );
    }
}
