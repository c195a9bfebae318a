//! `weir copy-into`: a one-shot, idempotent load of files into a Delta table, as
//! Databricks' `COPY INTO` (docs/copy-into.md).
//!
//! The files are read by the files source's own reader ([`crate::source::files`]:
//! decoding, schema inference, `_rescued_data`), the rows written by the Delta sink
//! ([`crate::sink::delta`]) in one commit whose `commitInfo` says `COPY INTO`, and the
//! loaded files recorded in a file ledger of the files source's kind
//! ([`crate::source::files::ledger`]) in the table's directory,
//! `TABLE/_weir_copy_into/ledger.sqlite`, keyed by path, size and modification time.
//!
//! # The protocol of one load
//!
//! ```text
//! recover     pending ledger rows of load N: committed if the table's txn
//!             (weir-copy-into) has version >= N, else forgotten
//! list        the files under --from (--pattern), minus those the ledger has
//!             committed with the same size and modification time (all with --force)
//! plan        load N = the table's txn version + 1 (0 without one); its files
//!             recorded pending(N)                       failpoint after_offsets
//! read        every file decoded; a file that cannot be read fails the
//!             whole load (its pending rows forgotten)  failpoint after_read
//! commit      one Delta commit: the rows, txn (weir-copy-into, N), COPY INTO
//!                                                      failpoint after_sink_commit
//! record      the files committed(N) in the ledger
//! ```
//!
//! Loads into one table run one at a time (`_weir_copy_into/lock`, an OS file lock).
//!
//! The Delta commit is the point of no return: a crash before it leaves nothing in the
//! table (the next run plans the same files again), a crash after it and before the
//! ledger update is settled by the next run's recovery from the txn, so no file is
//! loaded twice (a replay of load N finds the txn and writes nothing).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};

use crate::schema::{METADATA_COLUMN, RESCUED_DATA_COLUMN};
use crate::sink::delta::{CommitOperation, DeltaSink};
use crate::source::files::ledger::{FileState, Ledger, ListedFile};
use crate::source::files::{FileSource, list_for_inference, schema_store};
use crate::spec::{FileFormat, FilesSource, SourceSpec};

/// The application id of a load's `txn` action; its version is the load number.
pub const APP_ID: &str = "weir-copy-into";
/// The directory in the table's root holding the ledger of loaded files.
pub const LEDGER_DIR: &str = "_weir_copy_into";
/// The failpoints' flow name (`WEIR_FAILPOINT=after_read@copy_into`).
pub const FLOW: &str = "copy_into";

/// A `COPY INTO` as the command line gives it.
#[derive(Debug, Clone)]
pub struct CopyInto {
    /// The Delta table (a directory; created when absent).
    pub table: PathBuf,
    /// A directory (or one file) to load from.
    pub from: PathBuf,
    pub format: FileFormat,
    /// A glob over the files' names (and paths below `from`): Databricks' `PATTERN`.
    pub pattern: Option<String>,
    /// The columns, as a Spark DDL string; otherwise the table's, else inferred.
    pub schema: Option<String>,
    /// Databricks' `FORMAT_OPTIONS`, in the order given.
    pub format_options: Vec<(String, String)>,
    /// Databricks' `COPY_OPTIONS ('force' = 'true')`: load files loaded before again.
    pub force: bool,
}

/// Why a `COPY INTO` was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyIntoError {
    /// A `--format-option` weir does not know, or whose value does not fit.
    #[error("--format-option {option}: {message}")]
    FormatOption { option: String, message: String },
    /// `--from` does not name a readable directory or file.
    #[error("--from {}: {message}", path.display())]
    From { path: PathBuf, message: String },
    /// `--pattern`, `--schema` or the table path is not valid.
    #[error("{option}: {message}")]
    Option {
        option: &'static str,
        message: String,
    },
    /// Some files could not be read: nothing was loaded.
    #[error(
        "{} file(s) could not be loaded, so nothing was written (COPY INTO loads all its files or none): {}",
        files.len(),
        files.iter().map(|(p, e)| format!("{p}: {e}")).collect::<Vec<_>>().join("; ")
    )]
    FilesFailed { files: Vec<(String, String)> },
    /// No schema given and none to infer.
    #[error(
        "cannot infer a schema: the files under --from hold no record; give the columns with --schema"
    )]
    NoSchema,
    /// The table, the ledger or a file could not be read or written.
    #[error(transparent)]
    Weir(Box<crate::Error>),
}

impl From<crate::Error> for CopyIntoError {
    fn from(e: crate::Error) -> Self {
        CopyIntoError::Weir(Box::new(e))
    }
}

impl CopyIntoError {
    /// Whether the command line is at fault (exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CopyIntoError::FormatOption { .. }
                | CopyIntoError::From { .. }
                | CopyIntoError::Option { .. }
        )
    }
}

type Result<T> = std::result::Result<T, CopyIntoError>;

/// Where a `FORMAT_OPTIONS` name goes in a files source.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// A top-level key of the source.
    Source(&'static str),
    /// A key of its `csv` table.
    Csv(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    Bool,
    Text,
    /// Spark's `PERMISSIVE` / `FAILFAST`, in any letter case.
    Mode,
}

/// Databricks' `FORMAT_OPTIONS` names (Spark's reader options) and weir's own key for
/// each, with the formats that take it.
const FORMAT_OPTIONS: &[(&str, Target, ValueKind, &[FileFormat])] = {
    use FileFormat::{Csv, Json, Parquet};
    use Target::{Csv as C, Source as S};
    use ValueKind::{Bool, Mode, Text};
    &[
        ("header", C("header"), Bool, &[Csv]),
        ("sep", C("delimiter"), Text, &[Csv]),
        ("delimiter", C("delimiter"), Text, &[Csv]),
        ("quote", C("quote"), Text, &[Csv]),
        ("escape", C("escape"), Text, &[Csv]),
        ("nullValue", C("null_value"), Text, &[Csv]),
        ("emptyValue", C("empty_value"), Text, &[Csv]),
        ("nanValue", C("nan_value"), Text, &[Csv]),
        ("positiveInf", C("positive_inf"), Text, &[Csv]),
        ("negativeInf", C("negative_inf"), Text, &[Csv]),
        ("comment", C("comment"), Text, &[Csv]),
        ("encoding", S("encoding"), Text, &[Csv, Json]),
        ("charset", S("encoding"), Text, &[Csv, Json]),
        ("mode", S("mode"), Mode, &[Csv, Json]),
        (
            "inferSchema",
            S("infer_column_types"),
            Bool,
            &[Csv, Json, Parquet],
        ),
        ("timestampFormat", S("timestamp_format"), Text, &[Csv, Json]),
        (
            "allowNonNumericNumbers",
            S("allow_non_numeric_numbers"),
            Bool,
            &[Json],
        ),
        ("prefersDecimal", S("prefers_decimal"), Bool, &[Json]),
        (
            "schemaHints",
            S("schema_hints"),
            Text,
            &[Csv, Json, Parquet],
        ),
    ]
};

/// Databricks options weir refuses with a reason of their own.
const REFUSED_OPTIONS: &[(&str, &str)] = &[
    (
        "multiLine",
        "weir reads JSON lines (one object per line), as its files source does; a multi-line JSON document is not read",
    ),
    (
        "mergeSchema",
        "the table's schema is never changed by a load: new fields go to _rescued_data",
    ),
    (
        "rescuedDataColumn",
        "the rescued data column is always _rescued_data",
    ),
];

/// The option's row: by Databricks' name, or by weir's own key (`null_value`).
fn format_option(
    name: &str,
) -> Option<&'static (&'static str, Target, ValueKind, &'static [FileFormat])> {
    FORMAT_OPTIONS.iter().find(|(n, target, ..)| {
        *n == name || matches!(target, Target::Source(k) | Target::Csv(k) if *k == name)
    })
}

impl CopyInto {
    /// The files source this load reads with: its options checked by the pipeline's
    /// own rules (`crate::pipeline`), each error named by the option given.
    pub fn source(&self) -> Result<FilesSource> {
        if !self.from.exists() {
            return Err(CopyIntoError::From {
                path: self.from.clone(),
                message: "no such directory or file".into(),
            });
        }
        let from = std::path::absolute(&self.from).map_err(|e| CopyIntoError::From {
            path: self.from.clone(),
            message: e.to_string(),
        })?;
        let (root, pattern) = if from.is_file() {
            // One file: its directory, with its name as the pattern.
            let name = from
                .file_name()
                .map(|n| glob::Pattern::escape(&n.to_string_lossy()));
            (
                from.parent().map(Path::to_path_buf).unwrap_or_default(),
                name,
            )
        } else {
            (from, None)
        };
        let pattern = match (&self.pattern, pattern) {
            (Some(_), Some(_)) => {
                return Err(CopyIntoError::Option {
                    option: "--pattern",
                    message: "--from names one file; a pattern applies to a directory".into(),
                });
            }
            (given, own) => given.clone().or(own),
        };
        let mut source = toml::Table::new();
        source.insert("type".into(), "files".into());
        source.insert("path".into(), root.to_string_lossy().into_owned().into());
        source.insert("format".into(), self.format.as_str().into());
        if let Some(p) = &pattern {
            source.insert("path_glob_filter".into(), p.clone().into());
        }
        if let Some(s) = &self.schema {
            source.insert("schema".into(), s.clone().into());
        }
        let mut csv = toml::Table::new();
        let mut given: HashMap<&'static str, String> = HashMap::new();
        for (name, value) in &self.format_options {
            if let Some((_, why)) = REFUSED_OPTIONS.iter().find(|(n, _)| n == name) {
                return Err(CopyIntoError::FormatOption {
                    option: name.clone(),
                    message: format!("not supported: {why}"),
                });
            }
            let Some((_, target, kind, formats)) = format_option(name) else {
                let known: Vec<&str> = FORMAT_OPTIONS
                    .iter()
                    .filter(|(.., f)| f.contains(&self.format))
                    .map(|(n, ..)| *n)
                    .collect();
                return Err(CopyIntoError::FormatOption {
                    option: name.clone(),
                    message: format!(
                        "unknown option for format {}; the options are {}",
                        self.format.as_str(),
                        known.join(", ")
                    ),
                });
            };
            if !formats.contains(&self.format) {
                return Err(CopyIntoError::FormatOption {
                    option: name.clone(),
                    message: format!("does not apply to format {}", self.format.as_str()),
                });
            }
            let value: toml::Value = match kind {
                ValueKind::Bool => match value.to_ascii_lowercase().as_str() {
                    "true" => true.into(),
                    "false" => false.into(),
                    _ => {
                        return Err(CopyIntoError::FormatOption {
                            option: name.clone(),
                            message: format!("`{value}` is not true or false"),
                        });
                    }
                },
                ValueKind::Mode => value.to_ascii_lowercase().into(),
                ValueKind::Text => value.clone().into(),
            };
            let key = match target {
                Target::Source(k) => {
                    source.insert((*k).into(), value);
                    *k
                }
                Target::Csv(k) => {
                    csv.insert((*k).into(), value);
                    *k
                }
            };
            given.insert(key, name.clone());
        }
        if !csv.is_empty() {
            source.insert("csv".into(), csv.into());
        }
        let mut sink = toml::Table::new();
        sink.insert("type".into(), "delta".into());
        sink.insert(
            "path".into(),
            self.table.to_string_lossy().into_owned().into(),
        );
        let mut flow = toml::Table::new();
        flow.insert("name".into(), FLOW.into());
        flow.insert("source".into(), source.into());
        flow.insert("sink".into(), sink.into());
        let mut file = toml::Table::new();
        file.insert("flow".into(), toml::Value::Array(vec![flow.into()]));
        let text = toml::to_string(&file).map_err(|e| CopyIntoError::Option {
            option: "--format-option",
            message: e.to_string(),
        })?;
        let pipeline = crate::pipeline::parse(Path::new("copy-into.toml"), &text).map_err(|e| {
            // The error names weir's key: say it as the option given.
            let key = e.key.rsplit('.').next().unwrap_or_default();
            match given.get(key) {
                Some(option) => CopyIntoError::FormatOption {
                    option: option.clone(),
                    message: e.message.clone(),
                },
                None => CopyIntoError::Option {
                    option: match key {
                        "schema" => "--schema",
                        "path_glob_filter" => "--pattern",
                        "path" => "--from / TABLE",
                        _ => "COPY INTO",
                    },
                    message: e.message.clone(),
                },
            }
        })?;
        let flow = pipeline.flows.into_iter().next();
        match flow.map(|f| f.source) {
            Some(SourceSpec::Files(files)) => Ok(files),
            _ => Err(CopyIntoError::Option {
                option: "--format",
                message: "not a files source".into(),
            }),
        }
    }

    fn ledger_path(&self) -> PathBuf {
        self.table.join(LEDGER_DIR).join("ledger.sqlite")
    }
}

/// What a load did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadReport {
    /// The load's number (its txn version); `None` when there was nothing to load.
    pub load: Option<u64>,
    /// Files loaded, with their rows.
    pub files: Vec<(String, u64)>,
    /// Files skipped because the ledger has them loaded (same size and modification time).
    pub files_skipped: u64,
    /// Rows written (Databricks' `num_inserted_rows`).
    pub num_rows: u64,
    /// Rows with a value in `_rescued_data` (corrupt records apart).
    pub num_rows_rescued: u64,
    /// Records that could not be parsed (all-null rows with `_corrupt_record` in `_rescued_data`).
    pub num_records_corrupt: u64,
    /// The Delta version committed.
    pub delta_version: Option<i64>,
    /// The load had been committed before (recovered from the txn); nothing written.
    pub recovered: bool,
    /// The columns read, as DDL (`_rescued_data` apart).
    pub schema: String,
}

/// What `--validate N` found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ValidateReport {
    /// The columns the rows were parsed with (`_rescued_data` apart), as DDL.
    pub schema: String,
    /// Files that would be loaded.
    pub files: u64,
    /// Rows parsed (at most N).
    pub rows_parsed: u64,
    /// Of those, rows with a rescued value.
    pub rows_rescued: u64,
    /// Of those, records that could not be parsed; their `_rescued_data` follows.
    pub rows_malformed: u64,
    /// `_rescued_data` of each rescued or malformed row (file, line, the raw text).
    pub problems: Vec<String>,
}

/// The files under `from` to load: all listed (`force`), or those the ledger has not
/// committed in the same version (size, modification time), sorted by path.
fn candidates(
    source: &FilesSource,
    ledger: Option<&Ledger>,
    force: bool,
) -> Result<(Vec<ListedFile>, u64)> {
    let mut listed = Vec::new();
    list_for_inference(source, &mut listed)?;
    listed.sort_by(|a, b| a.path.cmp(&b.path));
    let (Some(ledger), false) = (ledger, force) else {
        return Ok((listed, 0));
    };
    let mut out = Vec::new();
    let mut skipped = 0;
    for file in listed {
        match ledger.lookup(&file.path)? {
            Some(entry) if entry.state == FileState::Committed && entry.same_version(&file) => {
                skipped += 1
            }
            _ => out.push(file),
        }
    }
    Ok((out, skipped))
}

/// The data columns to read: `--schema`, else the table's (without `_rescued_data`),
/// else inferred from the files under `from` as the files source infers them.
async fn read_schema(copy: &CopyInto, source: &FilesSource) -> Result<SchemaRef> {
    if let Some(schema) = schema_store::given(source) {
        return Ok(schema);
    }
    if let Some(table) = crate::delta::open_existing(&copy.table).await? {
        let snapshot = table
            .snapshot()
            .map_err(|e| crate::delta::delta_error(&copy.table, e))?;
        let schema = snapshot.snapshot().arrow_schema();
        let fields: Vec<_> = schema
            .fields()
            .iter()
            .filter(|f| f.name() != RESCUED_DATA_COLUMN && f.name() != METADATA_COLUMN)
            .cloned()
            .collect();
        return Ok(Arc::new(Schema::new(fields)));
    }
    let Some((schema, _)) = schema_store::infer(source)? else {
        return Err(CopyIntoError::NoSchema);
    };
    let schema = match &source.schema_hints {
        Some(h) => {
            crate::schema::apply_hints(schema, h).map_err(|e| CopyIntoError::FormatOption {
                option: "schemaHints".into(),
                message: e.to_string(),
            })?
        }
        None => schema,
    };
    Ok(Arc::new(schema))
}

/// The batches without the `_metadata` column (a load writes the data and `_rescued_data`).
fn without_metadata(batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    batches
        .into_iter()
        .map(|b| {
            let Some(i) = b.schema().index_of(METADATA_COLUMN).ok() else {
                return Ok(b);
            };
            let keep: Vec<usize> = (0..b.num_columns()).filter(|&c| c != i).collect();
            b.project(&keep).map_err(|e| {
                CopyIntoError::from(crate::Error::Arrow {
                    context: "COPY INTO: dropping _metadata".into(),
                    source: e,
                })
            })
        })
        .collect()
}

/// The commit's `operationParameters`: Databricks records the source and its options.
fn parameters(copy: &CopyInto, files: usize) -> HashMap<String, serde_json::Value> {
    let mut p = HashMap::new();
    p.insert(
        "source".into(),
        copy.from.to_string_lossy().into_owned().into(),
    );
    p.insert("format".into(), copy.format.as_str().into());
    if let Some(pattern) = &copy.pattern {
        p.insert("pattern".into(), pattern.clone().into());
    }
    if !copy.format_options.is_empty() {
        let options: serde_json::Map<String, serde_json::Value> = copy
            .format_options
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        p.insert(
            "formatOptions".into(),
            serde_json::Value::Object(options).to_string().into(),
        );
    }
    p.insert("force".into(), copy.force.to_string().into());
    p.insert("numSourceFiles".into(), files.to_string().into());
    p
}

/// Runs one load (see the module documentation for the protocol).
pub async fn load(copy: &CopyInto) -> Result<LoadReport> {
    let source = copy.source()?;
    let dir = copy.table.join(LEDGER_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| crate::Error::Io {
        path: dir.clone(),
        source: e,
    })?;
    // One load at a time per table: a second one waits (an OS lock, released when the
    // process ends, however it ends).
    let lock_path = dir.join("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .and_then(|f| f.lock().map(|()| f))
        .map_err(|e| crate::Error::Io {
            path: lock_path.clone(),
            source: e,
        })?;
    let mut ledger = Ledger::open(&copy.ledger_path())?;
    // Recovery: a load whose commit is in the table is settled; any other is forgotten.
    let committed = crate::delta::txn_version(&copy.table, APP_ID).await?;
    let last = committed.and_then(|v| u64::try_from(v).ok());
    ledger.settle_committed_through(last, crate::clock::now_ms())?;
    ledger.discard_unplanned_after(last)?;
    let (files, skipped) = candidates(&source, Some(&ledger), copy.force)?;
    let mut report = LoadReport {
        files_skipped: skipped,
        ..LoadReport::default()
    };
    if files.is_empty() {
        return Ok(report);
    }
    let schema = read_schema(copy, &source).await?;
    report.schema = crate::schema::to_ddl(&schema);
    let load = last.map_or(0, |v| v + 1);
    report.load = Some(load);
    ledger.plan_batch(load, &files, crate::clock::now_ms())?;
    crate::failpoint::hit("after_offsets", FLOW, load);
    let reader = FileSource::new(source, ledger, schema.clone());
    let read = reader.reader().read(&files).await;
    let mut ledger = reader.ledger;
    let read = match read {
        Ok(read) if read.errors.is_empty() => read,
        other => {
            ledger.discard_unplanned_after(last)?;
            return Err(match other {
                Ok(read) => CopyIntoError::FilesFailed { files: read.errors },
                Err(e) => e.into(),
            });
        }
    };
    crate::failpoint::hit("after_read", FLOW, load);
    report.num_rows_rescued = read.num_rows_rescued;
    report.num_records_corrupt = read.num_records_corrupt;
    report.files = read
        .outcomes
        .iter()
        .map(|(path, outcome)| {
            let rows = match outcome {
                crate::source::files::ledger::FileOutcome::Ingested { num_rows } => *num_rows,
                _ => 0,
            };
            (path.clone(), rows)
        })
        .collect();
    let batches = without_metadata(read.batches)?;
    // The data columns and `_rescued_data` (it creates the table when no row was read).
    let output = crate::source::files::read::output_schema(
        &crate::source::files::read::ReadSpec::new(copy.format, schema.clone()),
    );
    let operation = CommitOperation {
        name: "COPY INTO".into(),
        parameters: parameters(copy, files.len()),
        metrics: [
            ("numSourceFiles".to_owned(), files.len().into()),
            ("numSourceBytes".to_owned(), read.num_bytes.into()),
            ("numRescuedRows".to_owned(), read.num_rows_rescued.into()),
            (
                "numCorruptRecords".to_owned(),
                read.num_records_corrupt.into(),
            ),
        ]
        .into_iter()
        .collect(),
    };
    let mut sink = DeltaSink::open(&copy.table, Vec::new(), false, APP_ID)
        .await?
        .operation(operation);
    let commit = sink.add_batch(load, batches, false, Some(&output)).await?;
    crate::failpoint::hit("after_sink_commit", FLOW, load);
    ledger.commit_batch(load, &read.outcomes, crate::clock::now_ms())?;
    sink.settle().await?;
    drop(lock);
    report.num_rows = commit.num_output_rows;
    report.recovered = commit.skipped;
    report.delta_version = commit.delta_version;
    Ok(report)
}

/// `--validate N`: parses up to `limit` rows of the files a load would take and
/// reports; writes nothing (no table, no ledger).
pub async fn validate(copy: &CopyInto, limit: u64) -> Result<ValidateReport> {
    let source = copy.source()?;
    let ledger = Ledger::open_read_only(&copy.ledger_path())?;
    let (files, _) = candidates(&source, ledger.as_ref(), copy.force)?;
    let mut report = ValidateReport {
        files: files.len() as u64,
        ..ValidateReport::default()
    };
    if files.is_empty() {
        return Ok(report);
    }
    let schema = read_schema(copy, &source).await?;
    report.schema = crate::schema::to_ddl(&schema);
    // The reader comes with a ledger of its own, unused: a scratch one, removed after.
    let scratch = tempfile::tempdir().map_err(|e| crate::Error::Io {
        path: std::env::temp_dir(),
        source: e,
    })?;
    let scratch_ledger = Ledger::open(&scratch.path().join("ledger.sqlite"))?;
    let reader = FileSource::new(source, scratch_ledger, schema).reader();
    for file in files {
        if report.rows_parsed >= limit {
            break;
        }
        let read = reader.clone().read(std::slice::from_ref(&file)).await?;
        if let Some((path, error)) = read.errors.into_iter().next() {
            return Err(CopyIntoError::FilesFailed {
                files: vec![(path, error)],
            });
        }
        for batch in &read.batches {
            let rescued = batch
                .column_by_name(RESCUED_DATA_COLUMN)
                .map(|c| c.as_string::<i32>().clone());
            for row in 0..batch.num_rows() {
                if report.rows_parsed >= limit {
                    break;
                }
                report.rows_parsed += 1;
                if let Some(r) = &rescued
                    && r.is_valid(row)
                {
                    let text = r.value(row);
                    if text.contains("\"_corrupt_record\"") {
                        report.rows_malformed += 1;
                    } else {
                        report.rows_rescued += 1;
                    }
                    report.problems.push(text.to_string());
                }
            }
        }
    }
    Ok(report)
}

/// What `weir inspect TABLE` shows of a table loaded by `weir copy-into`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inspection {
    pub table: PathBuf,
    /// The table's latest Delta version.
    pub delta_version: Option<u64>,
    /// The last load committed (the table's txn version for [`APP_ID`]).
    pub last_load: Option<i64>,
    /// The ledger's counts (files committed, pending, failed; bytes committed).
    pub ledger: crate::source::files::ledger::LedgerStats,
}

/// Whether `path` is a table with a `COPY INTO` ledger.
pub fn is_loaded_table(path: &Path) -> bool {
    path.join(LEDGER_DIR).join("ledger.sqlite").is_file()
}

/// Reads a loaded table's ledger and txn; writes nothing.
pub async fn inspect(table: &Path) -> Result<Inspection> {
    let ledger = Ledger::open_read_only(&table.join(LEDGER_DIR).join("ledger.sqlite"))?;
    let ledger = match ledger {
        Some(l) => l.stats()?,
        None => Default::default(),
    };
    let facts = crate::delta::table_facts(table).await?;
    Ok(Inspection {
        table: table.to_path_buf(),
        delta_version: facts.as_ref().map(|f| f.version),
        last_load: facts.and_then(|f| {
            f.transactions
                .into_iter()
                .find(|(id, _)| id == APP_ID)
                .map(|(_, v)| v)
        }),
        ledger,
    })
}

/// The inspection as text.
pub fn render_inspection(i: &Inspection) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    format!(
        "COPY INTO table {}\n  delta version   {}\n  last load       {} (txn {APP_ID})\n  files loaded    {} ({} bytes)\n  files pending   {}\n  files failed    {}\n",
        i.table.display(),
        opt(i.delta_version.map(|v| v.to_string())),
        opt(i.last_load.map(|v| v.to_string())),
        i.ledger.files_committed,
        i.ledger.bytes_committed,
        i.ledger.files_pending,
        i.ledger.files_failed,
    )
}
