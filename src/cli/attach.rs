//! `weir attach CHECKPOINT... [--ascii] [--retention D]`: the console,
//! read-only, over flows run by another weir process (headless, or on
//! another terminal). It follows each checkpoint's `_weir/progress.jsonl`,
//! `offsets/`, `commits/`, `_schemas/` and `_weir/lock`, and shows their
//! history after the process has stopped. It never writes and never locks.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::checkpoint::Checkpoint;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Checkpoint directories of the flows to watch.
    #[arg(required = true)]
    pub checkpoints: Vec<PathBuf>,
    #[command(flatten)]
    pub console: crate::console::ConsoleArgs,
}

pub fn run(args: &AttachArgs) -> ExitCode {
    init_logging();
    for cp in &args.checkpoints {
        if !cp.is_dir() {
            eprintln!("error: {}: no such checkpoint directory", cp.display());
            return ExitCode::from(EXIT_INVALID);
        }
        if !Checkpoint::at(cp).exists() {
            tracing::warn!(
                "{} has no metadata file yet; following it anyway",
                cp.display()
            );
        }
    }
    if !crate::console::terminal_available() {
        eprintln!(
            "error: weir attach needs a terminal on stdin and stdout (for records as JSON lines, read <checkpoint>/_weir/progress.jsonl)"
        );
        return ExitCode::from(EXIT_INVALID);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let checkpoints: Vec<PathBuf> = args
        .checkpoints
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    match rt.block_on(crate::console::attach(&checkpoints, &args.console)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(&e);
            ExitCode::FAILURE
        }
    }
}
