//! `weir checkpoint backup|reset|rollback|repair`: the playbooks' checkpoint actions.
//!
//! Every action prints its plan first (the dry-run: exactly the operations it
//! then performs); `--dry-run` stops there. Actions that move a checkpoint or
//! change a table need a typed confirmation (the checkpoint directory's name)
//! or `--yes`. Nothing is deleted: see `checkpoint_tools::actions`.
//!
//! Exit codes: 0 done (or dry-run shown); 1 refused or failed (nothing changed
//! when refused); 2 invalid pipeline file or usage.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{EXIT_INVALID, report, runtime};
use crate::checkpoint_tools::actions::{
    ActionPlan, execute, plan_backup, plan_repair, plan_reset, plan_rollback,
};
use crate::pipeline;

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    #[command(subcommand)]
    pub action: CheckpointAction,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointAction {
    /// Copy a checkpoint beside itself (`<dir>.backup-<time>`) and verify the copy.
    Backup {
        checkpoint: PathBuf,
        /// Print what would be done, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Move a flow's checkpoint aside (`<dir>.bak-<time>`) so the next run starts fresh.
    Reset {
        pipeline: PathBuf,
        #[arg(long)]
        flow: String,
        /// Also empty the Delta target in one DELETE commit (time travel can undo it),
        /// so re-reading the source does not duplicate rows.
        #[arg(long)]
        truncate_target: bool,
        #[arg(long)]
        dry_run: bool,
        /// Do not ask for the typed confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Move aside uncommitted offsets beyond a committed batch (a stuck or corrupt last batch).
    Rollback {
        checkpoint: PathBuf,
        /// The committed batch to go back to.
        #[arg(long)]
        to: u64,
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        yes: bool,
    },
    /// Move aside a last `commits/N` or `offsets/N` torn by a power cut (empty or cut
    /// short), so the next run re-runs batch N; the dry-run says whether the table holds it.
    Repair {
        checkpoint: PathBuf,
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        yes: bool,
    },
}

pub fn run(args: &CheckpointArgs) -> ExitCode {
    // weir never writes into a Spark checkpoint (these actions take weir's lock inside it).
    if let CheckpointAction::Backup { checkpoint, .. }
    | CheckpointAction::Rollback { checkpoint, .. } = &args.action
        && crate::spark::is_spark_checkpoint(checkpoint)
    {
        eprintln!(
            "refused: {} is an Apache Spark checkpoint; weir never changes one. Copy it with `cp -a {} <copy>` while the query is stopped (see docs/spark-attach.md)",
            checkpoint.display(),
            checkpoint.display()
        );
        return ExitCode::FAILURE;
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let (plan, dry_run, yes) = match &args.action {
        CheckpointAction::Backup {
            checkpoint,
            dry_run,
        } => (plan_backup(checkpoint), *dry_run, true),
        CheckpointAction::Reset {
            pipeline: path,
            flow,
            truncate_target,
            dry_run,
            yes,
        } => {
            let pipeline = match pipeline::load(path) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_INVALID);
                }
            };
            let Some(spec) = pipeline.flow(flow) else {
                eprintln!(
                    "error: no flow {flow:?} in {}; flows: {}",
                    path.display(),
                    pipeline
                        .flows
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                return ExitCode::from(EXIT_INVALID);
            };
            let target = crate::checkpoint::compat::sink_table(spec);
            (
                rt.block_on(plan_reset(&spec.checkpoint, target, *truncate_target)),
                *dry_run,
                *yes,
            )
        }
        CheckpointAction::Rollback {
            checkpoint,
            to,
            dry_run,
            yes,
        } => (rt.block_on(plan_rollback(checkpoint, *to)), *dry_run, *yes),
        CheckpointAction::Repair {
            checkpoint,
            dry_run,
            yes,
        } => (rt.block_on(plan_repair(checkpoint)), *dry_run, *yes),
    };
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            eprint!("refused: ");
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    print!("{}", plan.render());
    if dry_run {
        println!("dry run: nothing changed");
        return ExitCode::SUCCESS;
    }
    if plan.needs_confirmation && !yes && !confirmed(&plan) {
        eprintln!("not confirmed: nothing changed");
        return ExitCode::FAILURE;
    }
    match rt.block_on(execute(&plan)) {
        Ok(done) => {
            for line in done {
                println!("done: {line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            report(&e);
            ExitCode::FAILURE
        }
    }
}

/// Asks for the checkpoint directory's name on stdin.
fn confirmed(plan: &ActionPlan) -> bool {
    let word = plan
        .checkpoint
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    eprint!("type {word:?} to confirm: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    line.trim() == word
}
