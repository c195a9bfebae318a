//! `weir drill PIPELINE [--flow NAME] [--kills N] [--seed S] [--key col,...]
//! [--work-dir DIR] [--max-input-bytes SIZE] [--json]`: a restart drill on a copy (see [`crate::drill`]
//! and `docs/drill.md`).
//!
//! Exit codes: 0 the drill passed; 1 it failed (duplicates, losses, or a run
//! that could not finish); 2 invalid pipeline or flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::drill::{DrillError, DrillOptions, render};

#[derive(Debug, Args)]
pub struct DrillArgs {
    /// The pipeline file (TOML). Read only: the drill runs on copies.
    pub pipeline: PathBuf,
    /// Drill only this flow (repeatable). Default: every flow.
    #[arg(long)]
    pub flow: Vec<String>,
    /// Random SIGKILLs, on top of one crash at each failpoint per flow.
    #[arg(long, default_value_t = 3)]
    pub kills: u32,
    /// Seed of the random kill moments (default: from the clock; printed in the report).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Key columns for duplicates and losses, comma-separated. Default: the flow's
    /// `drop_duplicates` columns, else every column but wall-clock ones.
    #[arg(long, value_delimiter = ',')]
    pub key: Vec<String>,
    /// Where copies, checkpoints, tables and logs go (must be new or empty). Default: a new
    /// temporary directory, kept.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Overrides every file source's `max_files_per_trigger` in the copies: small values make
    /// more batches, so every failpoint finds one to crash in.
    #[arg(long)]
    pub max_files_per_trigger: Option<u64>,
    /// Bound on the input copied into the work dir (e.g. "256 MiB", "4 GiB"): a file
    /// source's oldest files up to it; a Delta table input over it is refused. The copy is
    /// removed when the drill ends.
    #[arg(long, default_value = "1 GiB", value_parser = parse_size)]
    pub max_input_bytes: u64,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn parse_size(text: &str) -> Result<u64, String> {
    crate::spec::ByteSize::parse(text).map(|b| b.0)
}

pub fn run(args: &DrillArgs) -> ExitCode {
    init_logging();
    let work_dir = match &args.work_dir {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.clone()),
        None => match tempfile::Builder::new().prefix("weir-drill-").tempdir() {
            Ok(t) => t.keep(),
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        },
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    });
    let options = DrillOptions {
        pipeline: args.pipeline.clone(),
        flows: (!args.flow.is_empty()).then(|| args.flow.clone()),
        kills: args.kills,
        seed,
        key: args.key.clone(),
        work_dir: work_dir.clone(),
        exe,
        max_files_per_trigger: args.max_files_per_trigger,
        max_input_bytes: args.max_input_bytes,
    };
    eprintln!(
        "weir drill: working on copies in {} (the pipeline's own checkpoints and tables are not touched)",
        work_dir.display()
    );
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(crate::drill::run(&options)) {
        Ok(r) => {
            if args.json {
                match serde_json::to_string_pretty(&r) {
                    Ok(j) => println!("{j}"),
                    Err(e) => {
                        report(&e);
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print!("{}", render(&r));
            }
            if r.pass {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(DrillError::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(EXIT_INVALID)
        }
        Err(e) => {
            report(&e);
            ExitCode::FAILURE
        }
    }
}
