//! `weir export pyspark PIPELINE`: the pipeline as a runnable PySpark script
//! (docs/spark.md). Exit 0 with the script on stdout (or in `-o FILE`); exit 2 with
//! one line per key that has no faithful Spark counterpart, naming the flow, the key
//! and why; nothing is written then.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::EXIT_INVALID;
use crate::export::{self, ExportOptions, Target};
use crate::pipeline;

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub what: ExportCommand,
}

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Write the pipeline as one PySpark Structured Streaming script (Spark + Delta Lake).
    Pyspark(PysparkArgs),
}

#[derive(Debug, Args)]
pub struct PysparkArgs {
    /// The pipeline file (TOML).
    pub pipeline: PathBuf,
    /// Export only this flow (repeatable; default: every flow).
    #[arg(long = "flow", value_name = "NAME")]
    pub flows: Vec<String>,
    /// Where the script runs: Apache Spark with Delta Lake, or a Databricks job (Auto Loader).
    #[arg(long, value_enum, default_value = "oss")]
    pub target: Target,
    /// Write the script to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also hand each (stateless) flow's progress over to Spark: write the Spark checkpoint
    /// the script uses (`<checkpoint>.spark`) so that Spark resumes where weir stopped.
    /// A stateful flow is refused with the two safe paths and their dry-runs.
    #[arg(long)]
    pub handoff: bool,
}

pub fn run(args: &ExportArgs) -> ExitCode {
    match &args.what {
        ExportCommand::Pyspark(a) => pyspark(a),
    }
}

fn pyspark(args: &PysparkArgs) -> ExitCode {
    let pipeline = match pipeline::load(&args.pipeline) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let options = ExportOptions {
        target: args.target,
        flows: args.flows.clone(),
    };
    let script = match export::pyspark(&pipeline, &options) {
        Ok(s) => s,
        Err(refusals) => {
            for r in &refusals {
                eprintln!("error: {}: {r}", args.pipeline.display());
            }
            eprintln!(
                "weir export: {} key(s) have no faithful Spark equivalent; nothing was written (docs/spark.md)",
                refusals.len()
            );
            return ExitCode::from(EXIT_INVALID);
        }
    };
    if args.handoff {
        let flows: Vec<&crate::spec::FlowSpec> = pipeline
            .flows
            .iter()
            .filter(|f| args.flows.is_empty() || args.flows.contains(&f.name))
            .collect();
        let stateful: Vec<(&crate::spec::FlowSpec, String)> = flows
            .iter()
            .filter_map(|f| export::handoff::stateful_reason(f).map(|r| (*f, r)))
            .collect();
        if !stateful.is_empty() {
            let rt = match super::runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            for (flow, reason) in &stateful {
                eprintln!(
                    "error: {}",
                    rt.block_on(export::handoff::refusal(&args.pipeline, flow, reason))
                );
            }
            eprintln!(
                "weir export: nothing was handed over; hand over the stateless flows with --flow NAME"
            );
            return ExitCode::FAILURE;
        }
        for flow in flows {
            match export::handoff::write(flow) {
                Ok(h) => eprintln!("weir export: handed over {}", h.describe()),
                Err(e) => {
                    super::report(&e);
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    match &args.output {
        None => {
            print!("{script}");
            ExitCode::SUCCESS
        }
        Some(path) => match std::fs::write(path, &script) {
            Ok(()) => {
                eprintln!("weir export: wrote {}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", path.display());
                ExitCode::FAILURE
            }
        },
    }
}
