//! `weir table optimize|vacuum|history PIPELINE (TABLE | --flow NAME)`: Delta table
//! maintenance with deltalake's own operations (docs/maintenance.md).
//!
//! `optimize` and `vacuum` print their plan first and change nothing without `--yes`
//! (or, on a terminal, the table directory's name typed as confirmation): the plan is
//! the dry run. `vacuum` is refused, before any dry run, under the table's
//! `delta.deletedFileRetentionDuration` (7 days by default) without
//! `--allow-short-retention`, and whenever a flow reading the table still has to read
//! files the retention would delete.
//!
//! Exit codes: 0 done (or plan shown); 1 refused or failed (nothing changed); 2 invalid
//! pipeline file or usage.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::maintenance::{self, TableTarget};
use crate::spec::{ByteSize, HumanDuration, Pipeline};

#[derive(Debug, Args)]
pub struct TableArgs {
    #[command(subcommand)]
    pub action: TableAction,
}

/// Which table: a path or a table's directory name, or a flow's sink.
#[derive(Debug, Args)]
pub struct TableTargetArgs {
    /// The pipeline file (TOML): tells which flows read the table.
    pub pipeline: PathBuf,
    /// The Delta table: its path, or the directory name of a table the pipeline names.
    #[arg(conflicts_with = "flow")]
    pub table: Option<String>,
    /// The Delta sink table of this flow.
    #[arg(long)]
    pub flow: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum TableAction {
    /// Compact small files (Delta OPTIMIZE; its commit has dataChange = false, so flows
    /// reading the table skip it). Shows the plan; acts with --yes.
    Optimize {
        #[command(flatten)]
        target: TableTargetArgs,
        /// Size of the compacted files (default: the table's delta.targetFileSize, else 100 MiB).
        #[arg(long, value_parser = parse_size)]
        target_size: Option<u64>,
        /// Act without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Delete files no longer in the table, removed longer ago than --retain (Delta
    /// VACUUM). Shows the files; deletes with --yes.
    Vacuum {
        #[command(flatten)]
        target: TableTargetArgs,
        /// Keep files removed more recently than this (`168h`, `7d`, `36 hours`).
        #[arg(long, default_value = "168h", value_parser = parse_duration)]
        retain: Duration,
        /// Allow a retention under the table's delta.deletedFileRetentionDuration (Delta's
        /// retentionDurationCheck). Never allows deleting files a flow still has to read.
        #[arg(long)]
        allow_short_retention: bool,
        /// Act without asking.
        #[arg(long)]
        yes: bool,
    },
    /// The table's commits, newest first: version, timestamp, operation, metrics.
    History {
        #[command(flatten)]
        target: TableTargetArgs,
        /// How many commits.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// One JSON array instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    ByteSize::parse(s).map(|b| b.0)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    HumanDuration::parse(s).map(|d| d.0)
}

fn load(target: &TableTargetArgs) -> Result<(Pipeline, TableTarget), ExitCode> {
    let pipeline = match crate::pipeline::load(&target.pipeline) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Err(ExitCode::from(EXIT_INVALID));
        }
    };
    match maintenance::resolve(
        &pipeline.flows,
        target.table.as_deref(),
        target.flow.as_deref(),
    ) {
        Ok(t) => Ok((pipeline, t)),
        Err(m) => {
            eprintln!("error: {m} ({})", target.pipeline.display());
            Err(ExitCode::from(EXIT_INVALID))
        }
    }
}

pub fn run(args: &TableArgs) -> ExitCode {
    init_logging();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    match &args.action {
        TableAction::Optimize {
            target,
            target_size,
            yes,
        } => {
            let (pipeline, table) = match load(target) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let plan = match rt.block_on(maintenance::plan_optimize(&pipeline.flows, &table)) {
                Ok(p) => p,
                Err(e) => {
                    report(&e);
                    return ExitCode::FAILURE;
                }
            };
            print!("{}", plan.render());
            if plan.is_noop() && target_size.is_none() {
                return ExitCode::SUCCESS;
            }
            if !confirmed(*yes, &table.path, "compact") {
                return ExitCode::SUCCESS;
            }
            match rt.block_on(maintenance::optimize(&table.path, *target_size)) {
                Ok(done) => {
                    println!(
                        "done: OPTIMIZE committed version {} (was {}): {} file(s) ({}) compacted into {} ({}) in {} partition(s)",
                        done.version_after,
                        done.version_before,
                        done.files_removed,
                        bytesize::ByteSize(done.bytes_removed),
                        done.files_added,
                        bytesize::ByteSize(done.bytes_added),
                        done.partitions_optimized
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    report(&e);
                    ExitCode::FAILURE
                }
            }
        }
        TableAction::Vacuum {
            target,
            retain,
            allow_short_retention,
            yes,
        } => {
            let (pipeline, table) = match load(target) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let plan = match rt.block_on(maintenance::plan_vacuum(
                &pipeline.flows,
                &table,
                *retain,
                *allow_short_retention,
            )) {
                Ok(p) => p,
                Err(e) => {
                    report(&e);
                    return ExitCode::FAILURE;
                }
            };
            print!("{}", plan.render());
            if !plan.refused.is_empty() {
                eprintln!("refused: nothing deleted");
                return ExitCode::FAILURE;
            }
            if plan.files.is_empty() {
                return ExitCode::SUCCESS;
            }
            if !confirmed(*yes, &table.path, "delete these files") {
                return ExitCode::SUCCESS;
            }
            match rt.block_on(maintenance::vacuum(&plan)) {
                Ok(deleted) => {
                    println!("done: VACUUM deleted {} file(s)", deleted.len());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    report(&e);
                    ExitCode::FAILURE
                }
            }
        }
        TableAction::History {
            target,
            limit,
            json,
        } => {
            let (_, table) = match load(target) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let entries = match rt.block_on(maintenance::history(&table.path, *limit)) {
                Ok(e) => e,
                Err(e) => {
                    report(&e);
                    return ExitCode::FAILURE;
                }
            };
            if *json {
                match serde_json::to_string_pretty(&entries) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        report(&e);
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print!("{}", maintenance::render_history(&table.path, &entries));
            }
            ExitCode::SUCCESS
        }
    }
}

/// `--yes`, or on a terminal the table directory's name typed on stdin; otherwise the
/// plan shown was the dry run.
fn confirmed(yes: bool, table: &Path, what: &str) -> bool {
    if yes {
        return true;
    }
    if !std::io::stdin().is_terminal() {
        println!("dry run: nothing changed (add --yes to {what})");
        return false;
    }
    let word = table
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    eprint!("type {word:?} to {what}: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() || line.trim() != word {
        println!("not confirmed: nothing changed");
        return false;
    }
    true
}
