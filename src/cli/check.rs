//! `weir check PIPELINE [--flow NAME] [--json]`: before a restart, is each flow's
//! checkpoint compatible with its current plan? Reads only.
//!
//! Exit codes: 0 every flow compatible; 1 at least one incompatible (the reason
//! and the playbook to follow are printed); 2 invalid pipeline file or usage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_INVALID, report, runtime};
use crate::checkpoint_tools::check::{Verdict, check};
use crate::pipeline;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The pipeline file (TOML), or an Apache Spark query's checkpoint directory.
    pub pipeline: PathBuf,
    /// Check only this flow.
    #[arg(long)]
    pub flow: Option<String>,
    /// Print one JSON array of verdicts instead of text.
    #[arg(long)]
    pub json: bool,
    /// A Spark checkpoint's event log (or progress JSON lines): its last progress record
    /// names the stateful operators whose state must be on disk.
    #[arg(long = "event-log", value_name = "PATH")]
    pub event_log: Vec<PathBuf>,
}

pub fn run(args: &CheckArgs) -> ExitCode {
    if crate::spark::is_spark_checkpoint(&args.pipeline) {
        return run_spark(args);
    }
    let pipeline = match pipeline::load(&args.pipeline) {
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
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let mut verdicts = Vec::new();
    for flow in &flows {
        match rt.block_on(check(flow)) {
            Ok(v) => verdicts.push(v),
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&verdicts) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        }
    } else {
        for v in &verdicts {
            print!("{}", render(v, &args.pipeline));
        }
    }
    if verdicts.iter().all(|v| v.compatible) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A Spark checkpoint: the verdict Spark reaches at restart, from the files.
fn run_spark(args: &CheckArgs) -> ExitCode {
    let mut verdict = match crate::spark::check::check(&args.pipeline) {
        Ok(v) => v,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    if !args.event_log.is_empty() {
        let opts = crate::spark::feed::Options {
            event_logs: args.event_log.clone(),
            ..Default::default()
        };
        let now = chrono::Utc::now().timestamp_millis();
        match crate::spark::feed::Feed::open(
            std::slice::from_ref(&args.pipeline),
            opts,
            now,
            &mut |_| {},
        ) {
            Ok(feed) => {
                let ops: Vec<String> = feed
                    .last_progress(0)
                    .map(|p| {
                        p.state_operators
                            .iter()
                            .map(|o| o.operator_name.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                crate::spark::check::check_operators(&mut verdict, &ops);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_INVALID);
            }
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&verdict) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", crate::spark::check::render(&verdict));
    }
    if verdict.compatible {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The human form of a verdict.
pub fn render(v: &Verdict, pipeline: &std::path::Path) -> String {
    let mut out = format!(
        "flow {}: {} (checkpoint {})\n",
        v.flow,
        if v.compatible {
            "compatible"
        } else {
            "incompatible"
        },
        v.checkpoint.display()
    );
    for r in &v.reasons {
        out.push_str(&format!("  reason: {r}\n"));
    }
    for n in &v.notes {
        out.push_str(&format!("  note: {n}\n"));
    }
    if let Some(p) = &v.playbook {
        out.push_str(&format!(
            "  playbook: weir playbook {p} {} --flow {}\n",
            pipeline.display(),
            v.flow
        ));
    }
    out
}
