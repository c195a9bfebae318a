//! `weir watch PIPELINE [--flow NAME] [--metrics ADDR]`: the pipeline's `[alerts]` rules
//! over the checkpoints of flows that another process runs (a `weir run --headless`
//! under systemd, say), until SIGINT/SIGTERM. Each notification is also printed on
//! stdout as a JSON line (the journal keeps it). Reads `_weir/progress.jsonl` and
//! `_weir/health.json`; writes only `_weir/alerts.jsonl`. docs/operate.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use clap::Args;

use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::checkpoint::Checkpoint;
use crate::engine::board::{Board, FlowSnapshot};

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The pipeline file (TOML) whose flows run elsewhere.
    pub pipeline: PathBuf,
    /// Watch only this flow.
    #[arg(long)]
    pub flow: Option<String>,
    /// Also serve the flows' metrics, read from their checkpoints, at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub metrics_access: super::run::MetricsAccessArgs,
}

/// What a flow's files looked like when last read: (length, modified) of
/// `progress.jsonl` and `health.json`.
type Seen = [(u64, Option<SystemTime>); 2];

fn seen(cp: &Checkpoint) -> Seen {
    let stat =
        |p: PathBuf| std::fs::metadata(p).map_or((0, None), |m| (m.len(), m.modified().ok()));
    [stat(cp.progress_path()), stat(cp.health_path())]
}

pub fn run(args: &WatchArgs) -> ExitCode {
    init_logging();
    let pipeline = match crate::pipeline::load(&args.pipeline) {
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
    if pipeline.alerts.rules.is_empty() && args.metrics.is_none() {
        eprintln!(
            "error: {}: no [[alerts.rule]] to evaluate and no --metrics to serve; nothing to watch (docs/operate.md)",
            args.pipeline.display()
        );
        return ExitCode::from(EXIT_INVALID);
    }
    let board = Arc::new(Board::default());
    board.enable();
    let watched: Vec<(String, PathBuf)> = flows
        .iter()
        .map(|f| (f.name.clone(), f.checkpoint.clone()))
        .collect();
    // The board follows the checkpoints' files (re-read when they change).
    let mut last: Vec<Option<Seen>> = vec![None; watched.len()];
    let files = watched.clone();
    let mut refresh = move |board: &Board| {
        for (i, (flow, cp)) in files.iter().enumerate() {
            let cp = Checkpoint::at(cp);
            let now = seen(&cp);
            if last[i].as_ref() != Some(&now) {
                last[i] = Some(now);
                board.put(FlowSnapshot::from_checkpoint(flow, &cp));
            }
        }
    };
    let board_ref: &Board = &board;
    refresh(board_ref);
    let _metrics = match &args.metrics {
        Some(addr) => match super::run::start_metrics(addr, &args.metrics_access, board.clone()) {
            Ok(server) => Some(server),
            Err(m) => {
                eprintln!("error: {m}");
                return ExitCode::from(EXIT_INVALID);
            }
        },
        None => None,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let rules = pipeline.alerts.rules.len();
    let every = pipeline.alerts.evaluate_every;
    let options = crate::alerts::AlertOptions {
        spec: pipeline.alerts.clone(),
        pipeline: args.pipeline.clone(),
        flows: watched,
        by: crate::alerts::Evaluator::Watch,
        print: true,
        refresh: Some(Box::new(refresh)),
    };
    let alerts = match crate::alerts::start(options, board) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: cannot start the alert rules: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "weir watch: {rules} rule(s) over {} flow(s), evaluated every {}; notifications print here as JSON lines; stop with Ctrl-C",
        flows.len(),
        humantime::format_duration(every)
    );
    rt.block_on(async {
        let mut stop = super::run::stop_on_signals();
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
    });
    alerts.finish();
    ExitCode::SUCCESS
}
