//! The command line: one module per subcommand. `main.rs` only parses and
//! calls [`run`].
//!
//! Exit codes: 0 success; 1 a flow or command failed; 2 invalid pipeline file
//! or usage; 3 a flow stopped on a schema change (restart it to go on with the
//! wider schema); 130 aborted by a second SIGINT/SIGTERM.

pub mod attach;
pub mod check;
pub mod checkpoint;
pub mod copy_into;
pub mod demo;
pub mod diff;
pub mod drill;
pub mod export;
pub mod generate;
pub mod inspect;
pub mod playbook;
pub mod run;
pub mod schema;
pub mod sql;
pub mod table;
pub mod validate;
pub mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// weir: incremental data pipelines into Delta Lake, with an operations console.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the flows of a pipeline file.
    Run(run::RunArgs),
    /// Check a pipeline file without running it.
    Validate {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
    },
    /// Show a flow's checkpoint: batches, offsets, ledger, sink. Reads only.
    Inspect(inspect::InspectArgs),
    /// The nycflights13 pipeline (bronze -> silver -> gold, weather) over a live replay of the flights, in the console.
    Demo(demo::DemoArgs),
    /// Open the console, read-only, over flows run by another process (their checkpoints).
    Attach(attach::AttachArgs),
    /// Show a file source's schema history (versions, why, diffs). Reads only.
    Schema(schema::SchemaArgs),
    /// Write synthetic event files (rate, keys, lateness, duplicates, drift, malformed; seeded).
    Generate(generate::GenerateArgs),
    /// Crash a pipeline at every failpoint and at random moments, on a copy, and report
    /// duplicates and losses against a crash-free run.
    Drill(drill::DrillArgs),
    /// Before a restart: is each flow's checkpoint compatible with its plan? Reads only.
    Check(check::CheckArgs),
    /// Print a health state's playbook with the flow's live evidence filled in.
    Playbook(playbook::PlaybookArgs),
    /// Checkpoint actions with a dry-run: backup, reset, rollback, repair. Never deletes data.
    Checkpoint(checkpoint::CheckpointArgs),
    /// Two checkpoints, or two batches of one, side by side. Reads only.
    Diff(diff::DiffArgs),
    /// Export the pipeline for another engine: `weir export pyspark` (docs/spark.md).
    Export(export::ExportArgs),
    /// Evaluate the pipeline's [alerts] rules over the checkpoints of flows run elsewhere
    /// (headless, until stopped; docs/operate.md). Writes only their _weir/alerts.jsonl.
    Watch(watch::WatchArgs),
    /// Delta table maintenance with a dry run: optimize (compaction), vacuum, history.
    Table(table::TableArgs),
    /// Load files into a Delta table once each, idempotently, as Databricks' COPY INTO
    /// (docs/copy-into.md).
    CopyInto(copy_into::CopyIntoArgs),
    /// A read-only SQL query over the pipeline's tables and progress (docs/sql.md).
    Sql(sql::SqlArgs),
    /// The child process one query of `weir sql` or the console runs in (docs/sql.md,
    /// "Limits"); not for people.
    #[command(name = "sql-worker", hide = true)]
    SqlWorker,
}

/// Exit code for an invalid pipeline file or usage.
pub const EXIT_INVALID: u8 = 2;
/// Exit code when a flow stopped because its source schema changed (Auto Loader's
/// `addNewColumns` stop): restart it to continue with the wider schema.
pub const EXIT_SCHEMA_CHANGED: u8 = 3;
/// Exit code after an abort by a second signal.
pub const EXIT_ABORTED: u8 = 130;

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Validate { pipeline } => validate::run(&pipeline),
        Command::Inspect(args) => inspect::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Attach(args) => attach::run(&args),
        Command::Schema(args) => schema::run(&args),
        Command::Generate(args) => generate::run(&args),
        Command::Drill(args) => drill::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Playbook(args) => playbook::run(&args),
        Command::Checkpoint(args) => checkpoint::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Export(args) => export::run(&args),
        Command::Watch(args) => watch::run(&args),
        Command::Table(args) => table::run(&args),
        Command::Sql(args) => sql::run(&args),
        Command::CopyInto(args) => copy_into::run(&args),
        Command::SqlWorker => crate::sql::isolated::worker_main(),
    }
}

/// Logs go to stderr (or a file), never to stdout, which carries progress records.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "info,deltalake=warn,deltalake_core=warn,delta_kernel=warn,buoyant_kernel=warn,datafusion=warn,object_store=warn",
        )
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// A multi-threaded tokio runtime sized to the machine.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Prints an error with its chain of causes to stderr. A full or read-only disk is
/// said first, in plain words with the path, whatever library's error carried it.
pub fn report(error: &(dyn std::error::Error + 'static)) {
    if let Some(condition) = crate::error::DiskCondition::of(error) {
        let path = error.downcast_ref::<crate::Error>().and_then(|e| e.path());
        eprintln!("error: {}", condition.headline(path));
        eprintln!("  caused by: {error}");
    } else {
        eprintln!("error: {error}");
    }
    let mut source = error.source();
    while let Some(s) = source {
        eprintln!("  caused by: {s}");
        source = s.source();
    }
}
