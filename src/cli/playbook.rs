//! `weir playbook STATE [PIPELINE --flow NAME | --checkpoint DIR]`: prints a
//! state's playbook with the flow's live evidence filled in.
//!
//! The evidence comes from, in order: `weir check` (for an incompatible
//! checkpoint, with a pipeline), the last verdict the engine recorded in
//! `_weir/health.json`, or a classification of `_weir/progress.jsonl`.
//! `STATE` may be `current`: the flow's recorded state.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_INVALID, report, runtime};
use crate::checkpoint::Checkpoint;
use crate::checkpoint::progress::read_progress;
use crate::health::{Inputs, classify};
use crate::playbook::{Context, render};
use crate::records::{Health, HealthState};
use crate::spec::HealthConfig;

#[derive(Debug, Args)]
pub struct PlaybookArgs {
    /// healthy | lagging | source_unavailable | sink_unavailable |
    /// checkpoint_incompatible | schema_mismatch | current
    pub state: String,
    /// The pipeline file, for the flow's commands and checks.
    pub pipeline: Option<PathBuf>,
    /// The flow (needed when the pipeline has several).
    #[arg(long)]
    pub flow: Option<String>,
    /// A checkpoint directory (without a pipeline file): weir's, or an Apache Spark query's.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// With a Spark checkpoint: its event log, for the evidence (default: spark.eventLog.dir).
    #[arg(long = "event-log", value_name = "PATH")]
    pub event_log: Vec<PathBuf>,
}

pub fn run(args: &PlaybookArgs) -> ExitCode {
    let requested = if args.state == "current" {
        None
    } else {
        match HealthState::parse(&args.state) {
            Some(s) => Some(s),
            None => {
                eprintln!(
                    "error: unknown state {:?}; one of: {}, current",
                    args.state,
                    HealthState::ALL.map(|s| s.as_str()).join(", ")
                );
                return ExitCode::from(EXIT_INVALID);
            }
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let (cx, config, verdict) = match &args.pipeline {
        Some(path) => {
            let pipeline = match crate::pipeline::load(path) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_INVALID);
                }
            };
            let flows = match super::run::select_flows(&pipeline, args.flow.as_deref()) {
                Ok(f) => f,
                Err(m) => {
                    eprintln!("error: {m}");
                    return ExitCode::from(EXIT_INVALID);
                }
            };
            let [flow] = flows.as_slice() else {
                eprintln!("error: the pipeline has several flows; choose one with --flow NAME");
                return ExitCode::from(EXIT_INVALID);
            };
            let verdict = match rt.block_on(crate::checkpoint_tools::check::check(flow)) {
                Ok(v) => Some(v),
                Err(e) => {
                    report(&e);
                    None
                }
            };
            (Context::from_flow(flow, path), flow.health.clone(), verdict)
        }
        None => match &args.checkpoint {
            Some(dir) => (context_of_checkpoint(dir), HealthConfig::default(), None),
            None => (Context::default(), HealthConfig::default(), None),
        },
    };
    let (health, source) = match &args.checkpoint {
        Some(dir) if args.pipeline.is_none() && crate::spark::is_spark_checkpoint(dir) => {
            spark_evidence(dir, &args.event_log)
        }
        _ => evidence(&cx, &config, verdict.as_ref()),
    };
    let cx = Context {
        spark: args.pipeline.is_none()
            && args
                .checkpoint
                .as_deref()
                .is_some_and(crate::spark::is_spark_checkpoint),
        ..cx
    };
    let state = requested.unwrap_or(health.state);
    let mut out = format!("playbook: {state}");
    if let Some(f) = &cx.flow {
        out.push_str(&format!(" for flow {f}"));
    }
    out.push_str(&format!(
        " (evidence: {source}; flow state {})\n\n",
        health.state
    ));
    out.push_str(&render(state, &health, &cx));
    print!("{out}");
    ExitCode::SUCCESS
}

/// A Spark query's health, from its checkpoint and event log (as `weir attach --spark` sees it).
fn spark_evidence(dir: &Path, event_logs: &[PathBuf]) -> (Health, &'static str) {
    let mut logs = event_logs.to_vec();
    if logs.is_empty()
        && let Some(d) = crate::spark::feed::default_event_log_dir()
    {
        logs.push(d);
    }
    let opts = crate::spark::feed::Options {
        event_logs: logs,
        ..Default::default()
    };
    let now = chrono::Utc::now().timestamp_millis();
    match crate::spark::feed::Feed::open(&[dir.to_path_buf()], opts, now, &mut |_| {}) {
        Ok(feed) => match feed.health(0) {
            Some(h) => (h.clone(), "the Spark checkpoint and event log"),
            None => (Health::default(), "none"),
        },
        Err(e) => {
            eprintln!("warning: {e}");
            (Health::default(), "none")
        }
    }
}

fn context_of_checkpoint(dir: &Path) -> Context {
    let cp = Checkpoint::at(dir);
    let plan = cp.read_plan().ok().flatten();
    Context {
        flow: plan.as_ref().map(|p| p.flow.clone()),
        // The checkpoint does not record its pipeline file: the commands name the one
        // found beside it, or a placeholder to replace.
        pipeline: Some(
            find_pipeline(dir)
                .map_or_else(|| "PIPELINE.toml".to_owned(), |p| p.display().to_string()),
        ),
        checkpoint: Some(dir.display().to_string()),
        source_path: plan.as_ref().map(|p| p.source_path.display().to_string()),
        sink_path: plan
            .as_ref()
            .and_then(|p| p.sink_path.as_ref())
            .map(|p| p.display().to_string()),
        spark: false,
    }
}

/// The pipeline file with a flow that writes checkpoint `dir`: a `*.toml` file in one
/// of the three directories above the checkpoint that loads as a pipeline and names it.
fn find_pipeline(dir: &Path) -> Option<PathBuf> {
    let target = std::fs::canonicalize(dir).ok()?;
    for ancestor in target.ancestors().skip(1).take(3) {
        let Ok(entries) = std::fs::read_dir(ancestor) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for path in files {
            let Ok(pipeline) = crate::pipeline::load(&path) else {
                continue;
            };
            if pipeline
                .flows
                .iter()
                .any(|f| std::fs::canonicalize(&f.checkpoint).is_ok_and(|c| c == target))
            {
                return Some(path);
            }
        }
    }
    None
}

/// The flow's health and where it came from.
fn evidence(
    cx: &Context,
    config: &HealthConfig,
    verdict: Option<&crate::checkpoint_tools::check::Verdict>,
) -> (Health, &'static str) {
    let now = crate::clock::now_ms();
    let Some(dir) = &cx.checkpoint else {
        return (Health::default(), "none");
    };
    let cp = Checkpoint::at(dir);
    let records = read_progress(&cp.progress_path()).unwrap_or_default();
    if let Some(v) = verdict.filter(|v| !v.compatible) {
        let file = v.file.as_ref().map(|f| f.display().to_string());
        let health = classify(Inputs {
            records: &records,
            error: None,
            checkpoint_problems: &v.reasons,
            checkpoint_file: file.as_deref(),
            now_ms: now,
            config,
        });
        return (health, "weir check");
    }
    if let Some(h) = cp.read_health() {
        return (h.health, "_weir/health.json");
    }
    if records.is_empty() {
        return (Health::default(), "none");
    }
    let health = classify(Inputs {
        records: &records,
        error: None,
        checkpoint_problems: &[],
        checkpoint_file: None,
        now_ms: now,
        config,
    });
    (health, "_weir/progress.jsonl")
}
