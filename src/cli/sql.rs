//! `weir sql PIPELINE "SELECT ..." [--format table|json|csv] [--limit N] [--timeout D]`:
//! a read-only query over the pipeline's tables, its flows' late rows and quarantine,
//! and their progress records (docs/sql.md). `weir sql PIPELINE --tables` lists them.
//!
//! Exit codes: 0 the query ran (also when its rows were cut at the limit: stderr says
//! so); 1 the query failed, was refused (not read-only) or ran out of time; 2 invalid
//! pipeline file or usage.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::pipeline;
use crate::sql::{
    Catalog, Format, History, HistoryEntry, Limits, TableStatus, history_path, pipeline_tables,
};

#[derive(Debug, Args)]
pub struct SqlArgs {
    /// The pipeline file (TOML).
    pub pipeline: PathBuf,
    /// One query (SELECT, WITH, VALUES, EXPLAIN, SHOW, DESCRIBE); quote it for the shell.
    pub query: Option<String>,
    /// List the tables, their columns and the names left out, instead of a query.
    #[arg(long, conflicts_with = "query")]
    pub tables: bool,
    /// Output: `table` (text), `json` (one object per row) or `csv` (with a header).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Rows shown at most; a query that returns more is cut and says so on stderr.
    #[arg(long, default_value_t = crate::sql::DEFAULT_MAX_ROWS, value_parser = parse_limit)]
    pub limit: usize,
    /// Time limit for opening the tables and running the query, e.g. `30s`, `2m`.
    #[arg(long, default_value = "30s", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Memory the query's operators may use, e.g. `512 MiB`, `2 GiB`.
    #[arg(long = "max-memory", default_value = "1 GiB", value_parser = parse_size)]
    pub max_memory: u64,
    /// Do not record the query in the pipeline's query history.
    #[arg(long)]
    pub no_history: bool,
}

fn parse_limit(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(format!("invalid limit {s:?}; a number of rows, at least 1")),
        Ok(n) => Ok(n),
    }
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = crate::spec::HumanDuration::parse(s)?.0;
    if d.is_zero() {
        return Err("the time limit must be more than 0".into());
    }
    Ok(d)
}

fn parse_size(s: &str) -> Result<u64, String> {
    crate::spec::ByteSize::parse(s).map(|b| b.0)
}

pub fn run(args: &SqlArgs) -> ExitCode {
    init_logging();
    let pipeline = match pipeline::load(&args.pipeline) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let flows = pipeline_tables(&pipeline);
    let limits = Limits {
        timeout: args.timeout,
        max_rows: args.limit,
        max_memory: args.max_memory,
        isolated: true,
        ..Limits::default()
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let code = if args.tables {
        list_tables(&rt, &flows, &limits)
    } else {
        match &args.query {
            Some(q) => query(&rt, &flows, q, &limits, args),
            None => {
                eprintln!(
                    "error: no query; write one, e.g. weir sql {} \"SELECT count(*) FROM progress\", or list the tables with --tables",
                    args.pipeline.display()
                );
                ExitCode::from(EXIT_INVALID)
            }
        }
    };
    // A query cancelled at its time limit may leave a task that stops only at its next
    // yield: the answer is out, so nobody waits for it.
    rt.shutdown_background();
    code
}

fn query(
    rt: &tokio::runtime::Runtime,
    flows: &[crate::sql::FlowTables],
    sql: &str,
    limits: &Limits,
    args: &SqlArgs,
) -> ExitCode {
    let result = rt.block_on(crate::sql::run(flows, sql, limits));
    if !args.no_history {
        let mut history = History::load(&history_path(&args.pipeline));
        let entry = HistoryEntry {
            at: crate::records::iso_millis(crate::clock::now_ms()),
            sql: sql.to_string(),
            rows: result.as_ref().ok().map(|o| o.rows as u64),
            truncated: result.as_ref().is_ok_and(|o| o.truncated),
            ms: result
                .as_ref()
                .map(|o| o.elapsed.as_millis() as u64)
                .unwrap_or(0),
            error: result.as_ref().err().map(|e| e.to_string()),
        };
        if let Err(e) = history.append(entry) {
            tracing::warn!(path = ?history.path(), error = %e, "could not record the query in the history");
        }
    }
    let out = match result {
        Ok(out) => out,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match crate::sql::render(&out, args.format) {
        Ok(text) => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            if stdout.write_all(text.as_bytes()).is_err() {
                // A closed stdout (`| head`): nothing more to say.
                return ExitCode::SUCCESS;
            }
            let _ = stdout.flush();
        }
        Err(e) => {
            eprintln!(
                "error: the rows could not be written as {:?}: {e}",
                args.format
            );
            return ExitCode::FAILURE;
        }
    }
    if out.truncated || args.format == Format::Table {
        eprintln!("{}", crate::sql::summary(&out, limits.max_rows));
    }
    ExitCode::SUCCESS
}

fn list_tables(
    rt: &tokio::runtime::Runtime,
    flows: &[crate::sql::FlowTables],
    limits: &Limits,
) -> ExitCode {
    let catalog = match rt.block_on(async {
        tokio::time::timeout(limits.timeout, Catalog::open(flows, limits)).await
    }) {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        Err(_) => {
            eprintln!(
                "error: the tables could not be opened within the time limit ({})",
                humantime::format_duration(limits.timeout)
            );
            return ExitCode::FAILURE;
        }
    };
    let mut text = String::new();
    for t in &catalog.tables {
        let what = match (&t.entry.backing, &t.entry.flow) {
            (crate::sql::Backing::Progress, _) => "progress records of every flow".to_string(),
            (crate::sql::Backing::Delta(p) | crate::sql::Backing::QuarantineFiles(p), flow) => {
                format!(
                    "{}{}: {}",
                    t.entry.kind.label(),
                    flow.as_ref()
                        .map(|f| format!(" of flow {f}"))
                        .unwrap_or_default(),
                    p.display()
                )
            }
        };
        text.push_str(&format!("{}  ({what})\n", t.entry.name.sql()));
        match &t.status {
            TableStatus::Ready(columns) => {
                let cols: Vec<String> = columns.iter().map(|(n, ty)| format!("{n} {ty}")).collect();
                text.push_str(&format!("    {}\n", cols.join(", ")));
            }
            TableStatus::NotCreated => text.push_str("    not created yet\n"),
            TableStatus::Unavailable(m) => text.push_str(&format!("    cannot be read: {m}\n")),
        }
    }
    for n in &catalog.notes {
        text.push_str(&format!("note: {n}\n"));
    }
    print!("{text}");
    ExitCode::SUCCESS
}
