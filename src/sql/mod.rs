//! `weir sql` and the console's SQL pane: DataFusion over every table a pipeline
//! writes or reads, its flows' late-rows and quarantine tables and their progress
//! history (`progress`); read-only, time-limited, row-limited and memory-limited.
//! Table names, columns, limits and errors: docs/sql.md.
//!
//! ```text
//!  FlowTables (per flow) ─► tables::name_tables ─► open: Delta tables through deltalake's
//!                                                  DataFusion provider, quarantine files,
//!                                                  progress as a MemTable
//!  SQL ─► read-only check (statement kind, then SQLOptions) ─► stream ─► first N rows
//!         └───────────────────── within the time limit ───────────────────────┘
//! ```

mod history;
pub mod isolated;
pub mod peek;
mod progress;
mod tables;

pub use history::{HISTORY_KEPT, History, HistoryEntry, history_path};
pub use progress::{progress_batch, progress_schema};
pub use tables::{
    Backing, FlowTables, Naming, PROGRESS_TABLE, TableEntry, TableKind, TableName, name_tables,
    path_name, pipeline_tables, quote_ident,
};

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{JsonReadOptions, SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;

/// The default time limit of a query.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default number of rows a query shows.
pub const DEFAULT_MAX_ROWS: usize = 1000;
/// The default memory a query may use (bytes): 1 GiB.
pub const DEFAULT_MAX_MEMORY: u64 = 1 << 30;

/// The limits every query runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Opening the tables and running the query, together.
    pub timeout: Duration,
    /// Rows shown; a query that returns more is cut and says so.
    pub max_rows: usize,
    /// Memory DataFusion's operators may reserve (sorts, joins, aggregations), bytes.
    pub max_memory: u64,
    /// Partitions DataFusion runs a query with (threads it may keep busy).
    pub partitions: usize,
    /// Run the query in a child process whose whole memory is limited ([`isolated`]):
    /// `weir sql` and the console do; the library's own callers (tests, peeks) run in
    /// process.
    pub isolated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            max_rows: DEFAULT_MAX_ROWS,
            max_memory: DEFAULT_MAX_MEMORY,
            partitions: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .min(4),
            isolated: false,
        }
    }
}

/// Why a query gave no rows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum SqlError {
    #[error(
        "weir sql is read-only: {what} is refused; only queries run (SELECT, WITH, VALUES, EXPLAIN, SHOW, DESCRIBE)"
    )]
    ReadOnly { what: String },
    #[error(
        "the query ran longer than the time limit ({limit}) and was cancelled; narrow it (WHERE, LIMIT) or raise the limit (--timeout)"
    )]
    Timeout { limit: String },
    #[error("no table named {name}; the tables are: {tables}")]
    UnknownTable { name: String, tables: String },
    #[error("table {name} ({path}) does not exist yet: its flow has not written it")]
    NotCreated { name: String, path: String },
    #[error("table {name} ({path}) cannot be read: {message}")]
    Unavailable {
        name: String,
        path: String,
        message: String,
    },
    #[error(
        "the query needs more memory than its limit ({limit}): {message}; narrow it or raise --max-memory"
    )]
    Memory { limit: String, message: String },
    #[error("{0}")]
    Query(String),
    #[error("the query was cancelled")]
    Cancelled,
}

/// A table of the catalog and whether it could be registered.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub entry: TableEntry,
    pub status: TableStatus,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableStatus {
    /// Registered, with its columns (name, type).
    Ready(Vec<(String, String)>),
    /// No table at the path yet.
    NotCreated,
    Unavailable(String),
}

/// A session over a pipeline's tables.
pub struct Catalog {
    pub ctx: SessionContext,
    pub tables: Vec<TableInfo>,
    /// Names left out (ambiguous or taken), with why.
    pub notes: Vec<String>,
    limits: Limits,
}

/// What a query returned, cut at the row limit.
#[derive(Debug, Clone)]
pub struct QueryOutput {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// Rows in `batches`.
    pub rows: usize,
    /// The query had more rows than the limit.
    pub truncated: bool,
    pub elapsed: Duration,
}

pub(crate) fn session(limits: &Limits) -> Result<SessionContext, SqlError> {
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_target_partitions(limits.partitions.max(1));
    // Names are matched as written: `batchId`, `numInputRows` (Spark's names) work unquoted.
    config.options_mut().sql_parser.enable_ident_normalization = false;
    let memory = usize::try_from(limits.max_memory).unwrap_or(usize::MAX);
    // No spilling: a query that needs more than its memory fails (and writes no file).
    let disk = DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled);
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(memory, 1.0)
        .with_disk_manager_builder(disk)
        .build_arc()
        .map_err(|e| SqlError::Query(e.to_string()))?;
    Ok(SessionContext::new_with_config_rt(config, runtime))
}

fn path_text(backing: &Backing) -> String {
    match backing {
        Backing::Delta(p) | Backing::QuarantineFiles(p) => p.display().to_string(),
        Backing::Progress => "progress records".into(),
    }
}

/// The quarantine files' columns (`bad_records_path`, docs/pipeline.md).
fn quarantine_schema() -> Schema {
    Schema::new(vec![
        Field::new("file", DataType::Utf8, true),
        Field::new("line", DataType::Int64, true),
        Field::new("raw", DataType::Utf8, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("batch_id", DataType::Int64, true),
    ])
}

fn columns_of(schema: &Schema) -> Vec<(String, String)> {
    schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect()
}

impl Catalog {
    /// Opens every table of the flows: Delta tables through deltalake's DataFusion table
    /// provider (each at its latest version), quarantine files, the progress records. A
    /// table that cannot be opened is listed with why; queries over the others run.
    pub async fn open(flows: &[FlowTables], limits: &Limits) -> Result<Catalog, SqlError> {
        let ctx = session(limits)?;
        let Naming { entries, notes } = name_tables(flows);
        let mut opened: std::collections::BTreeMap<std::path::PathBuf, TableStatus> =
            Default::default();
        let mut providers: std::collections::BTreeMap<
            std::path::PathBuf,
            Arc<dyn datafusion::datasource::TableProvider>,
        > = Default::default();
        let mut tables = Vec::new();
        for entry in entries {
            let status = match &entry.backing {
                Backing::Progress => match progress_batch(flows) {
                    Ok(batch) => {
                        let schema = batch.schema();
                        match MemTable::try_new(schema.clone(), vec![vec![batch]]) {
                            Ok(t) => match tables::register(&ctx, &entry.name, Arc::new(t)) {
                                Ok(()) => TableStatus::Ready(columns_of(&schema)),
                                Err(e) => TableStatus::Unavailable(e.to_string()),
                            },
                            Err(e) => TableStatus::Unavailable(e.to_string()),
                        }
                    }
                    Err(e) => TableStatus::Unavailable(e),
                },
                Backing::QuarantineFiles(dir) => {
                    let has_files = std::fs::read_dir(dir).is_ok_and(|d| {
                        d.filter_map(Result::ok)
                            .any(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
                    });
                    if !has_files {
                        TableStatus::NotCreated
                    } else {
                        let schema = quarantine_schema();
                        let options = JsonReadOptions::default()
                            .file_extension(".jsonl")
                            .schema(&schema);
                        let url = format!("{}/", dir.display());
                        match ctx
                            .register_json(entry.name.reference(), url, options)
                            .await
                        {
                            Ok(()) => TableStatus::Ready(columns_of(&schema)),
                            Err(e) => TableStatus::Unavailable(e.to_string()),
                        }
                    }
                }
                Backing::Delta(path) => {
                    if !opened.contains_key(path) {
                        let status = match crate::delta::open_existing(path).await {
                            Ok(None) => TableStatus::NotCreated,
                            Err(e) => TableStatus::Unavailable(e.to_string()),
                            Ok(Some(table)) => {
                                match table.update_datafusion_session(&ctx.state()) {
                                    Err(e) => TableStatus::Unavailable(e.to_string()),
                                    Ok(()) => match table.table_provider().await {
                                        Ok(provider) => {
                                            let columns = columns_of(&provider.schema());
                                            providers.insert(path.clone(), provider);
                                            TableStatus::Ready(columns)
                                        }
                                        Err(e) => TableStatus::Unavailable(e.to_string()),
                                    },
                                }
                            }
                        };
                        opened.insert(path.clone(), status);
                    }
                    let status = opened.get(path).cloned().unwrap_or(TableStatus::NotCreated);
                    match (status, providers.get(path)) {
                        (TableStatus::Ready(columns), Some(provider)) => {
                            match tables::register(&ctx, &entry.name, provider.clone()) {
                                Ok(()) => TableStatus::Ready(columns),
                                Err(e) => TableStatus::Unavailable(e.to_string()),
                            }
                        }
                        (other, _) => other,
                    }
                }
            };
            tables.push(TableInfo { entry, status });
        }
        Ok(Catalog {
            ctx,
            tables,
            notes,
            limits: *limits,
        })
    }

    /// The registered names, as written in a query.
    pub fn names(&self) -> Vec<String> {
        self.tables
            .iter()
            .filter(|t| matches!(t.status, TableStatus::Ready(_)))
            .map(|t| t.entry.name.sql())
            .collect()
    }

    /// Runs one read-only query; at most `limits.max_rows` rows come back.
    pub async fn query(&self, sql: &str) -> Result<QueryOutput, SqlError> {
        let start = Instant::now();
        check_read_only(sql)?;
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let df = self
            .ctx
            .sql_with_options(sql, options)
            .await
            .map_err(|e| self.error(e))?;
        let mut out = collect(df, self.limits.max_rows)
            .await
            .map_err(|e| self.error(e))?;
        out.elapsed = start.elapsed();
        Ok(out)
    }

    /// A DataFusion error in weir's words: read-only refusals, unknown tables (with the
    /// tables there are), tables not created yet, the memory limit.
    fn error(&self, e: DataFusionError) -> SqlError {
        let text = e.to_string();
        for marker in [
            "DDL not supported: ",
            "DML not supported: ",
            "Statement not supported: ",
        ] {
            if let Some(i) = text.find(marker) {
                let what = match text[i + marker.len()..].split_whitespace().next() {
                    Some("CreateMemoryTable") => "CREATE TABLE (or SELECT ... INTO)",
                    Some(w) => w,
                    None => "the statement",
                }
                .to_string();
                return SqlError::ReadOnly { what };
            }
        }
        if let Some(name) = not_found_table(&text) {
            if let Some(t) = self
                .tables
                .iter()
                .find(|t| t.entry.name.matches_reference(&name))
            {
                let path = path_text(&t.entry.backing);
                return match &t.status {
                    TableStatus::Unavailable(message) => SqlError::Unavailable {
                        name: t.entry.name.sql(),
                        path,
                        message: message.clone(),
                    },
                    _ => SqlError::NotCreated {
                        name: t.entry.name.sql(),
                        path,
                    },
                };
            }
            let shown = name
                .strip_prefix("datafusion.")
                .unwrap_or(&name)
                .to_string();
            let shown = shown.strip_prefix("public.").unwrap_or(&shown).to_string();
            return SqlError::UnknownTable {
                name: shown,
                tables: self.names().join(", "),
            };
        }
        if text.contains("Resources exhausted") {
            return SqlError::Memory {
                limit: crate::spec::ByteSize(self.limits.max_memory).to_string(),
                message: text,
            };
        }
        SqlError::Query(text)
    }
}

/// Runs a planned query and keeps its first `max_rows` rows (the rest is not computed:
/// the stream is dropped as soon as one more row shows up).
pub(crate) async fn collect(
    df: datafusion::dataframe::DataFrame,
    max_rows: usize,
) -> Result<QueryOutput, DataFusionError> {
    let start = Instant::now();
    let mut stream = df.execute_stream().await?;
    let schema = stream.schema();
    let mut batches = Vec::new();
    let mut rows = 0usize;
    let mut truncated = false;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        if rows == max_rows {
            truncated = true;
            break;
        }
        let room = max_rows - rows;
        if batch.num_rows() > room {
            batches.push(batch.slice(0, room));
            rows += room;
            truncated = true;
            break;
        }
        rows += batch.num_rows();
        batches.push(batch);
    }
    Ok(QueryOutput {
        schema,
        batches,
        rows,
        truncated,
        elapsed: start.elapsed(),
    })
}

/// The table name of DataFusion's "table 'datafusion.public.x' not found".
fn not_found_table(text: &str) -> Option<String> {
    let i = text.find("table '")?;
    let rest = &text[i + "table '".len()..];
    let end = rest.find('\'')?;
    rest[end..]
        .starts_with("' not found")
        .then(|| rest[..end].to_string())
}

/// Refuses anything but a query before it is planned, naming the statement's kind
/// (DataFusion's SQLOptions refuse DDL, DML and statements again when the plan is made).
fn check_read_only(sql: &str) -> Result<(), SqlError> {
    use datafusion::sql::parser::{DFParser, Statement as DFStatement};
    use datafusion::sql::sqlparser::ast::Statement;
    let statements = DFParser::parse_sql(sql).map_err(|e| SqlError::Query(e.to_string()))?;
    if statements.len() > 1 {
        return Err(SqlError::Query(format!(
            "one statement at a time ({} given)",
            statements.len()
        )));
    }
    let Some(statement) = statements.front() else {
        return Err(SqlError::Query("no query given".into()));
    };
    fn allowed(s: &DFStatement) -> bool {
        match s {
            DFStatement::Statement(s) => sql_allowed(s),
            DFStatement::Explain(e) => allowed(&e.statement),
            _ => false,
        }
    }
    fn sql_allowed(s: &Statement) -> bool {
        match s {
            Statement::Query(_)
            | Statement::ExplainTable { .. }
            | Statement::ShowTables { .. }
            | Statement::ShowColumns { .. }
            | Statement::ShowFunctions { .. } => true,
            Statement::Explain { statement, .. } => sql_allowed(statement),
            _ => false,
        }
    }
    if allowed(statement) {
        return Ok(());
    }
    let what = sql
        .split_whitespace()
        .find(|w| !w.eq_ignore_ascii_case("explain") && !w.eq_ignore_ascii_case("analyze"))
        .unwrap_or("the statement")
        .to_ascii_uppercase();
    Err(SqlError::ReadOnly { what })
}

/// Opens the tables and runs one query, all within the time limit.
///
/// The query runs as a task of its own on the runtime's workers, and the limit is kept
/// by a plain thread: a DataFusion operator that loops without yielding (a join that
/// fans out, a large sort) holds its worker, so neither the caller's task nor tokio's
/// timer may run until it yields. The answer comes at the limit regardless; the task is
/// aborted and stops at its next yield. Call it on a multi-threaded runtime (on a
/// current-thread one the task shares the caller's thread and the limit is kept only
/// at the query's yields).
pub async fn run(
    flows: &[FlowTables],
    sql: &str,
    limits: &Limits,
) -> Result<QueryOutput, SqlError> {
    if limits.isolated {
        return isolated::run(flows, sql, limits).await;
    }
    let (flows, sql, task_limits) = (flows.to_vec(), sql.to_string(), *limits);
    let mut work = tokio::spawn(async move {
        let catalog = Catalog::open(&flows, &task_limits).await?;
        catalog.query(&sql).await
    });
    let (expired_tx, expired) = tokio::sync::oneshot::channel::<()>();
    let (done, done_rx) = std::sync::mpsc::channel::<()>();
    let limit = limits.timeout;
    let timer = std::thread::Builder::new()
        .name("weir-sql-limit".into())
        .spawn(move || {
            // Returns early (disconnected) when the query ends first.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                let _ = expired_tx.send(());
            }
        });
    let timed_out = || SqlError::Timeout {
        limit: humantime::format_duration(limits.timeout).to_string(),
    };
    let result = match timer {
        Ok(_) => tokio::select! {
            r = &mut work => r,
            _ = expired => {
                work.abort();
                return Err(timed_out());
            }
        },
        // No thread for the timer: tokio's, which fires at the query's yields.
        Err(_) => match tokio::time::timeout(limits.timeout, &mut work).await {
            Ok(r) => r,
            Err(_) => {
                work.abort();
                return Err(timed_out());
            }
        },
    };
    drop(done);
    match result {
        Ok(r) => r,
        Err(e) if e.is_cancelled() => Err(SqlError::Cancelled),
        Err(e) => Err(SqlError::Query(format!("the query stopped: {e}"))),
    }
}

/// Output formats of `weir sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A text table (Arrow's pretty printer).
    Table,
    /// One JSON object per row (JSON lines).
    Json,
    /// CSV with a header line; nested values as text.
    Csv,
}

/// The rows in a format.
pub fn render(out: &QueryOutput, format: Format) -> Result<String, String> {
    match format {
        Format::Table => {
            arrow::util::pretty::pretty_format_batches_with_schema(out.schema.clone(), &out.batches)
                .map(|t| format!("{t}\n"))
                .map_err(|e| e.to_string())
        }
        Format::Json => {
            let mut buf = Vec::new();
            {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut buf);
                for b in &out.batches {
                    w.write(b).map_err(|e| e.to_string())?;
                }
                w.finish().map_err(|e| e.to_string())?;
            }
            String::from_utf8(buf).map_err(|e| e.to_string())
        }
        Format::Csv => {
            let flat = flatten_nested(out)?;
            let mut buf = Vec::new();
            {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut buf);
                if flat.is_empty() {
                    w.write(&RecordBatch::new_empty(text_schema(&out.schema)))
                        .map_err(|e| e.to_string())?;
                }
                for b in &flat {
                    w.write(b).map_err(|e| e.to_string())?;
                }
            }
            String::from_utf8(buf).map_err(|e| e.to_string())
        }
    }
}

fn nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::FixedSizeList(_, _)
            | DataType::Map(_, _)
            | DataType::Union(_, _)
            | DataType::Dictionary(_, _)
            | DataType::RunEndEncoded(_, _)
    )
}

/// The schema with nested columns as text.
fn text_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                if nested(f.data_type()) {
                    Field::new(f.name(), DataType::Utf8, true)
                } else {
                    f.as_ref().clone()
                }
            })
            .collect::<Vec<_>>(),
    ))
}

/// Nested columns rendered as text (CSV has no nesting).
fn flatten_nested(out: &QueryOutput) -> Result<Vec<RecordBatch>, String> {
    let schema = text_schema(&out.schema);
    out.batches
        .iter()
        .map(|b| {
            let columns: Vec<ArrayRef> = b
                .columns()
                .iter()
                .map(|c| {
                    if nested(c.data_type()) {
                        let f = ArrayFormatter::try_new(c.as_ref(), &FormatOptions::default())
                            .map_err(|e| e.to_string())?;
                        let values: Vec<Option<String>> = (0..c.len())
                            .map(|i| (!c.is_null(i)).then(|| f.value(i).to_string()))
                            .collect();
                        Ok(Arc::new(StringArray::from(values)) as ArrayRef)
                    } else {
                        Ok(c.clone())
                    }
                })
                .collect::<Result<_, String>>()?;
            RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
        })
        .collect()
}

/// The rows as text cells for a terminal: column names, then each row's values
/// (`null` for nulls), each cut to `max_chars` characters (`…` marks a cut).
pub fn cells(out: &QueryOutput, max_chars: usize) -> (Vec<String>, Vec<Vec<String>>) {
    let header = out
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let options = FormatOptions::default().with_null("null");
    let cut = |s: String| {
        let s = s.replace(['\n', '\r', '\t'], " ");
        if s.chars().count() > max_chars {
            let mut t: String = s.chars().take(max_chars.saturating_sub(1)).collect();
            t.push('…');
            t
        } else {
            s
        }
    };
    let mut rows = Vec::with_capacity(out.rows);
    for b in &out.batches {
        let formatters: Vec<Option<ArrayFormatter>> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).ok())
            .collect();
        for i in 0..b.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| match f {
                        Some(f) => cut(f.value(i).to_string()),
                        None => "?".to_string(),
                    })
                    .collect(),
            );
        }
    }
    (header, rows)
}

/// `1234567` -> `1,234,567`.
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1,000 rows` / `1 row`.
pub fn rows_label(n: usize) -> String {
    if n == 1 {
        "1 row".into()
    } else {
        format!("{} rows", grouped(n))
    }
}

/// What a query returned, in a line: `12 rows in 35 ms`, or `1,000 rows shown
/// (truncated: the query returned more than the row limit 1,000) in 2.1 s`.
pub fn summary(out: &QueryOutput, max_rows: usize) -> String {
    let ms = out.elapsed.as_millis();
    let took = if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", out.elapsed.as_secs_f64())
    };
    if out.truncated {
        format!(
            "{} shown (truncated: the query returned more than the row limit {}) in {took}",
            rows_label(out.rows),
            grouped(max_rows)
        )
    } else {
        format!("{} in {took}", rows_label(out.rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_queries_pass_the_read_only_check() {
        for ok in [
            "SELECT 1",
            "WITH a AS (SELECT 1 AS x) SELECT x FROM a",
            "VALUES (1), (2)",
            "EXPLAIN SELECT 1",
            "SHOW TABLES",
            "DESCRIBE progress",
        ] {
            assert_eq!(check_read_only(ok), Ok(()), "{ok}");
        }
        for (bad, what) in [
            ("CREATE TABLE t AS SELECT 1", "CREATE"),
            ("INSERT INTO t VALUES (1)", "INSERT"),
            ("DELETE FROM t", "DELETE"),
            ("UPDATE t SET a = 1", "UPDATE"),
            ("DROP TABLE t", "DROP"),
            ("COPY t TO '/tmp/x.csv'", "COPY"),
            ("SET datafusion.execution.batch_size = 1", "SET"),
            (
                "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/etc/passwd'",
                "CREATE",
            ),
            ("EXPLAIN ANALYZE INSERT INTO t VALUES (1)", "INSERT"),
        ] {
            assert_eq!(
                check_read_only(bad),
                Err(SqlError::ReadOnly { what: what.into() }),
                "{bad}"
            );
        }
        assert!(check_read_only("SELECT 1; SELECT 2").is_err());
    }

    #[test]
    fn not_found_names_the_table() {
        assert_eq!(
            not_found_table("Error during planning: table 'datafusion.public.nope' not found"),
            Some("datafusion.public.nope".into())
        );
        assert_eq!(not_found_table("Schema error: No field named x"), None);
    }

    #[tokio::test]
    async fn limits_hold_and_ddl_is_refused_by_the_plan_too() {
        let limits = Limits {
            max_rows: 5,
            ..Default::default()
        };
        let catalog = Catalog::open(&[], &limits).await.unwrap();
        let out = catalog
            .query("SELECT * FROM generate_series(1, 100)")
            .await
            .unwrap();
        assert_eq!((out.rows, out.truncated), (5, true));
        let out = catalog
            .query("SELECT * FROM generate_series(1, 5)")
            .await
            .unwrap();
        assert_eq!((out.rows, out.truncated), (5, false));
        assert!(summary(&out, 5).starts_with("5 rows in "));
        // `SELECT ... INTO` parses as a query and plans as a CREATE: SQLOptions refuse it.
        let err = catalog.query("SELECT 1 AS a INTO t2").await.unwrap_err();
        assert!(matches!(err, SqlError::ReadOnly { .. }), "{err}");
        let err = catalog.query("SELECT * FROM nope").await.unwrap_err();
        assert_eq!(
            err,
            SqlError::UnknownTable {
                name: "nope".into(),
                tables: "progress".into()
            }
        );
        // Spark's camelCase names work unquoted.
        let out = catalog
            .query("SELECT batchId, numInputRows FROM progress")
            .await
            .unwrap();
        assert_eq!(out.rows, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_query_is_cancelled_at_the_time_limit() {
        let limits = Limits {
            timeout: Duration::from_millis(300),
            ..Default::default()
        };
        let err = run(
            &[],
            "SELECT max(a.value + b.value) FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 1000000000) b",
            &limits,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, SqlError::Timeout { .. }), "{err}");
    }

    #[test]
    fn formats_and_cells() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(arrow::array::Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("x,y"), Some("a long value")])),
            ],
        )
        .unwrap();
        let out = QueryOutput {
            schema,
            batches: vec![batch],
            rows: 2,
            truncated: false,
            elapsed: Duration::from_millis(3),
        };
        assert_eq!(
            render(&out, Format::Csv).unwrap(),
            "a,s\n1,\"x,y\"\n,a long value\n"
        );
        assert_eq!(
            render(&out, Format::Json).unwrap(),
            "{\"a\":1,\"s\":\"x,y\"}\n{\"s\":\"a long value\"}\n"
        );
        assert!(render(&out, Format::Table).unwrap().contains("| 1 | x,y"));
        let (header, rows) = cells(&out, 6);
        assert_eq!(header, ["a", "s"]);
        assert_eq!(rows, [["1", "x,y"], ["null", "a lon…"]]);
        assert_eq!(rows_label(1234567), "1,234,567 rows");
    }
}
