//! `weir attach CHECKPOINT... [--ascii] [--retention D]`: the console,
//! read-only, over flows run by another weir process (headless, or on
//! another terminal). It follows each checkpoint's `_weir/progress.jsonl`,
//! `offsets/`, `commits/`, `_schemas/` and `_weir/lock`, and shows their
//! history after the process has stopped. It never writes and never locks.
//!
//! `weir attach --spark CHECKPOINT... [--event-log PATH]...`: the same console
//! over Apache Spark queries, from their checkpoints and event logs
//! (`crate::spark`). Spark checkpoints (`metadata` + `offsets/`, no `_weir/`)
//! are recognised without `--spark`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::checkpoint::Checkpoint;

#[derive(Debug, Clone, Args)]
pub struct AttachArgs {
    /// Checkpoint directories of the flows (or Spark queries) to watch.
    #[arg(required_unless_present = "event_log")]
    pub checkpoints: Vec<PathBuf>,
    /// Apache Spark queries: read Spark checkpoints and event logs (automatic for Spark checkpoints).
    #[arg(long)]
    pub spark: bool,
    /// Spark: an event log (a rolling `eventlog_v2_<app>/` directory, a single file, a directory
    /// of applications, or JSON lines of `progress.json()`); repeatable. Default: `spark.eventLog.dir`
    /// from spark-defaults.conf, else /tmp/spark-events.
    #[arg(long = "event-log", value_name = "PATH")]
    pub event_log: Vec<PathBuf>,
    /// Spark: read a remote path from a local copy, e.g. `s3://bucket/landing=/mnt/landing`; repeatable.
    #[arg(long = "path-map", value_name = "FROM=TO")]
    pub path_map: Vec<String>,
    /// Spark: a running query whose event log stays silent this long is shown as lost (killed).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub stale_after: std::time::Duration,
    #[command(flatten)]
    pub console: crate::console::ConsoleArgs,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::spec::HumanDuration::parse(s).map(|d| d.0)
}

pub fn run(args: &AttachArgs) -> ExitCode {
    init_logging();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    // Checkpoints and event-log directories on an object store are followed through
    // local copies, refreshed every 2 s (docs/object-storage.md#following-a-remote-query).
    let copies = rt.block_on(async {
        let (checkpoints, mut mirrors) =
            crate::storage::mirror::local_copies(&args.checkpoints).await?;
        let (event_log, logs) = crate::storage::mirror::local_copies(&args.event_log).await?;
        mirrors.extend(logs);
        Ok::<_, crate::storage::StorageError>((checkpoints, event_log, mirrors))
    });
    let (checkpoints, event_log, mirrors) = match copies {
        Ok(c) => c,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    rt.spawn(crate::storage::mirror::follow(mirrors));
    let local_args;
    let args = if checkpoints != args.checkpoints || event_log != args.event_log {
        local_args = AttachArgs {
            checkpoints,
            event_log,
            ..args.clone()
        };
        &local_args
    } else {
        args
    };
    for cp in &args.checkpoints {
        if !cp.is_dir() {
            eprintln!("error: {}: no such checkpoint directory", cp.display());
            return ExitCode::from(EXIT_INVALID);
        }
    }
    let spark_dirs = args
        .checkpoints
        .iter()
        .filter(|cp| crate::spark::is_spark_checkpoint(cp))
        .count();
    let spark = args.spark
        || !args.event_log.is_empty()
        || (spark_dirs > 0 && spark_dirs == args.checkpoints.len());
    if !spark && spark_dirs > 0 {
        eprintln!(
            "error: some checkpoints are Spark's and some weir's; attach to them separately (weir attach --spark for Spark's)"
        );
        return ExitCode::from(EXIT_INVALID);
    }
    if !spark {
        for cp in &args.checkpoints {
            if !Checkpoint::at(cp).exists() {
                tracing::warn!(
                    "{} has no metadata file yet; following it anyway",
                    cp.display()
                );
            }
        }
    }
    let spark_opts = if spark {
        match spark_options(args) {
            Ok(o) => Some(o),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_INVALID);
            }
        }
    } else {
        None
    };
    if let Some(why) = crate::console::terminal_unavailable_reason() {
        eprintln!(
            "error: weir attach needs the full-screen console, and {why} (for records as JSON lines, read <checkpoint>/_weir/progress.jsonl)"
        );
        return ExitCode::from(EXIT_INVALID);
    }
    let checkpoints: Vec<PathBuf> = args
        .checkpoints
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let result = if let Some(opts) = spark_opts {
        rt.block_on(crate::console::attach_spark(
            &checkpoints,
            opts,
            &args.console,
        ))
    } else {
        rt.block_on(crate::console::attach(&checkpoints, &args.console))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(&e);
            ExitCode::FAILURE
        }
    }
}

/// The Spark feed's options from the command line.
pub fn spark_options(args: &AttachArgs) -> Result<crate::spark::feed::Options, String> {
    let mut event_logs = args.event_log.clone();
    for p in &event_logs {
        if !p.exists() {
            return Err(format!("{}: no such event log", p.display()));
        }
    }
    if event_logs.is_empty()
        && let Some(d) = crate::spark::feed::default_event_log_dir()
    {
        event_logs.push(d);
    }
    Ok(crate::spark::feed::Options {
        event_logs,
        path_map: crate::spark::backlog::PathMap::parse(&args.path_map)?,
        stale_after_ms: i64::try_from(args.stale_after.as_millis()).unwrap_or(i64::MAX),
        ..Default::default()
    })
}
