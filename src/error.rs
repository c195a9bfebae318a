//! Library errors. Every variant carries the path, batch id, line or key
//! involved, and every error says its [`Domain`] and whether retrying can
//! help; the health classifier routes on those two answers.

use std::path::{Path, PathBuf};

use crate::records::ErrorFacts;
pub use crate::records::{Domain, ErrorKind};

/// Spark's advice appended to a Kafka data-loss error (`failOnDataLoss = true`).
pub const FAIL_ON_DATA_LOSS_TRUE_HINT: &str = "Some data may have been lost because they are not available in Kafka any more; \
either the data was aged out by Kafka or the topic may have been deleted before all the data in the topic was processed. \
If you don't want the flow to fail on such cases, set the source option fail_on_data_loss = false";

/// The crate's error type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pipeline file is invalid; the message names file, line and key.
    #[error("{0}")]
    Pipeline(#[from] crate::spec::PipelineError),

    /// Reading or writing a checkpoint file failed, or its content is not in the expected format.
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },

    /// Another live process holds the checkpoint lock.
    #[error(
        "checkpoint {checkpoint} is in use by pid {pid} on {host} (started {started_at}); \
         stop that process first, or attach to it with `weir attach {checkpoint}`"
    )]
    CheckpointLocked {
        checkpoint: PathBuf,
        pid: u32,
        host: String,
        started_at: String,
    },

    /// The source directory cannot be listed or a file cannot be read.
    #[error("source {path}: {source}")]
    SourceIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A malformed record in a source read with `mode = "failfast"` (Spark's FAILFAST):
    /// the batch stops before anything is written and the checkpoint does not advance.
    #[error(
        "source {path}, {location}: malformed record: {message} (record: {record}); \
         mode = \"failfast\" stopped the batch before anything was written (the checkpoint did not advance). {hint}"
    )]
    MalformedRecord {
        /// The file (or `kafka:<topic>/<partition>`).
        path: PathBuf,
        /// `line N` (files) or `offset N` (Kafka).
        location: String,
        /// What is wrong with the record.
        message: String,
        /// The record's text (quoted, cut to 200 characters).
        record: String,
        /// What to do.
        hint: String,
    },

    /// The source or its configuration cannot produce a schema (e.g. no files to infer from).
    #[error("source {path}: {message}")]
    Source { path: PathBuf, message: String },

    /// A Delta table could not be read or written.
    #[error("delta table {path}: {source}")]
    Delta {
        path: String,
        #[source]
        source: deltalake::DeltaTableError,
    },

    /// The sink's table directory cannot be created or written (permissions, a file in its place).
    #[error("delta table {path}: {source}")]
    SinkIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The sink's table exists with a schema the batch cannot be written into.
    #[error("delta table {path}: schema mismatch: {message}")]
    SinkSchemaMismatch { path: String, message: String },

    /// A batch met new columns and the schema was widened (Auto Loader's `addNewColumns`
    /// stop): the flow stops before writing; the next start re-runs the batch with the new schema.
    #[error(
        "flow {flow}: schema changed: new column(s) {} in {file}; recorded schema version {version}. \
         Restart the flow to continue with the wider schema (batch {batch_id} is re-read, nothing is lost)",
        added.join(", ")
    )]
    SchemaChanged {
        flow: String,
        batch_id: u64,
        added: Vec<String>,
        file: String,
        version: u64,
    },

    /// The source's data does not fit its schema and the evolution mode refuses to go on.
    #[error("flow {flow}: {message}")]
    SchemaMismatch { flow: String, message: String },

    /// A SQL expression in the flow failed to plan or evaluate.
    #[error("flow {flow}: {context}: {source}")]
    Sql {
        flow: String,
        context: String,
        #[source]
        source: Box<datafusion::error::DataFusionError>,
    },

    /// An Arrow kernel failed.
    #[error("{context}: {source}")]
    Arrow {
        context: String,
        #[source]
        source: arrow::error::ArrowError,
    },

    /// An I/O error on a path that is neither a source nor a checkpoint (demo dir, log file).
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A row violated an expectation with `on_violation = "fail"` (Lakeflow's
    /// `expect_or_fail`): the batch stopped before anything was written.
    #[error("{0}")]
    ExpectationFailed(Box<ExpectationFailure>),

    /// A stateful operator (watermark, window, aggregation, deduplication) is declared in a way
    /// that cannot run; the message says what to change.
    #[error("flow {flow}: {message}")]
    Plan { flow: String, message: String },

    /// A restart's plan changed a stateful operator, so the state saved in the checkpoint
    /// cannot be reused; the message says what changed and what the options are.
    #[error("checkpoint {path}: {message}")]
    StateIncompatible { path: PathBuf, message: String },

    /// The Kafka cluster could not be reached or refused a request (after the client's retries).
    #[error("kafka {bootstrap}: {message}")]
    KafkaUnavailable { bootstrap: String, message: String },

    /// Offsets the checkpoint expects are gone from Kafka (retention, deleted records, a
    /// deleted topic or partition) and the source has `fail_on_data_loss = true`.
    #[error("kafka {bootstrap}: data loss: {message}. {hint}", hint = FAIL_ON_DATA_LOSS_TRUE_HINT)]
    KafkaDataLoss { bootstrap: String, message: String },

    /// A PostgreSQL sink could not reach its server or the server refused a statement;
    /// `code` is the SQLSTATE (the server's, or libpq's `08001`/`08006` for a connection
    /// that could not be made or was lost).
    #[error("postgres table {table} at {target}: {message} (SQLSTATE {code})")]
    Postgres {
        /// The table as written in the pipeline.
        table: String,
        /// `host:port/database` (never a password).
        target: String,
        code: String,
        message: String,
    },

    /// A ledger (SQLite) operation failed.
    #[error("file ledger {path}: {source}")]
    Ledger {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    /// An object store (or the local disk behind `crate::storage`) could not be reached,
    /// refused a request, or lacks a guarantee weir needs; the message names the URL.
    #[error("{role} {source}")]
    Storage {
        role: StorageRole,
        #[source]
        source: crate::storage::StorageError,
    },
}

/// An expectation with `on_violation = "fail"` that a row violated: which, where, the row.
#[derive(Debug, thiserror::Error)]
#[error(
    "flow {flow}: expectation {name:?} (constraint `{constraint}`, on_violation = \"fail\") failed on {failed} row(s) of batch {batch_id}; \
     the first, from {location}: {row}. Nothing of the batch was written and the checkpoint did not advance: \
     fix the input or the expectation (or make it \"drop\" or \"warn\"), and the next run re-runs batch {batch_id}"
)]
pub struct ExpectationFailure {
    pub flow: String,
    pub name: String,
    pub constraint: String,
    pub batch_id: u64,
    /// Rows of the Arrow batch where the first violation was found.
    pub failed: u64,
    /// `file <path>`, `topic T partition P offset O`, or `source <description>`.
    pub location: String,
    /// The file of the failing row, when it came from one.
    pub path: Option<PathBuf>,
    /// The failing row as JSON (without `_metadata`), cut to 500 characters.
    pub row: String,
}

/// What a store was being used for when it failed: it decides the health state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageRole {
    Source,
    Sink,
    Checkpoint,
}

impl std::fmt::Display for StorageRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StorageRole::Source => "source",
            StorageRole::Sink => "sink",
            StorageRole::Checkpoint => "checkpoint",
        })
    }
}

impl Error {
    /// Who has to act.
    pub fn domain(&self) -> Domain {
        match self {
            Error::Pipeline(_) | Error::Sql { .. } | Error::SinkSchemaMismatch { .. } => {
                Domain::User
            }
            Error::SchemaChanged { .. }
            | Error::SchemaMismatch { .. }
            | Error::MalformedRecord { .. }
            | Error::ExpectationFailed(_) => Domain::User,
            Error::Source { .. } | Error::Plan { .. } | Error::StateIncompatible { .. } => {
                Domain::User
            }
            Error::CheckpointLocked { .. }
            | Error::SourceIo { .. }
            | Error::SinkIo { .. }
            | Error::Delta { .. }
            | Error::Io { .. }
            | Error::Ledger { .. } => Domain::External,
            Error::Checkpoint { .. } => Domain::External,
            Error::KafkaUnavailable { .. } | Error::KafkaDataLoss { .. } => Domain::External,
            Error::Postgres { code, .. } => {
                if postgres_retryable(code) || code.starts_with("3D") || code.starts_with("57") {
                    Domain::External
                } else {
                    Domain::User
                }
            }
            Error::Arrow { .. } => Domain::Internal,
            Error::Storage { source, .. } => match source {
                crate::storage::StorageError::Store { .. } => Domain::External,
                _ => Domain::User,
            },
        }
    }

    /// The disk condition behind this error, if a write failed because the filesystem is
    /// full or read-only (found anywhere in the chain of causes: deltalake, object_store
    /// and parquet wrap the `io::Error` of the write, some of them only as text).
    pub fn disk_condition(&self) -> Option<DiskCondition> {
        DiskCondition::of(self)
    }

    /// Whether retrying the same operation later can succeed without a change by a person.
    pub fn retryable(&self) -> bool {
        if self.disk_condition().is_some() {
            // Space has to be freed (or the disk remounted) by a person first.
            return false;
        }
        matches!(
            self,
            Error::SourceIo { .. }
                | Error::SinkIo { .. }
                | Error::Delta { .. }
                | Error::Io { .. }
                | Error::Ledger { .. }
                | Error::SchemaChanged { .. }
                | Error::KafkaUnavailable { .. }
        ) || matches!(self, Error::Storage { source, .. } if source.retryable())
            || matches!(self, Error::Postgres { code, .. } if postgres_retryable(code))
    }

    /// What went wrong, by kind (events, health evidence, the console's timeline); the
    /// kind knows the health state it leads to ([`ErrorKind::health_state`]).
    pub fn kind(&self) -> ErrorKind {
        if self.disk_condition().is_some() {
            // Not a corrupt checkpoint nor a parse error: the place weir writes to cannot
            // take the write (docs/reliability.md, "Disk full and read-only disks").
            return ErrorKind::SinkUnavailable;
        }
        match self {
            Error::Pipeline(_) => ErrorKind::InvalidPipeline,
            Error::SchemaChanged { .. } => ErrorKind::SchemaChanged,
            Error::SchemaMismatch { .. } => ErrorKind::SchemaMismatch,
            Error::MalformedRecord { .. } => ErrorKind::MalformedRecord,
            Error::ExpectationFailed(_) => ErrorKind::ExpectationFailed,
            Error::Checkpoint { .. } => ErrorKind::CheckpointCorrupt,
            Error::CheckpointLocked { .. } => ErrorKind::CheckpointLocked,
            Error::SourceIo { .. } | Error::KafkaUnavailable { .. } => ErrorKind::SourceUnavailable,
            Error::Source { .. } | Error::KafkaDataLoss { .. } => ErrorKind::SourceError,
            Error::Delta { .. } | Error::SinkIo { .. } => ErrorKind::SinkUnavailable,
            Error::SinkSchemaMismatch { .. } => ErrorKind::SinkSchemaMismatch,
            Error::Sql { .. } => ErrorKind::SqlError,
            Error::Arrow { .. } => ErrorKind::Internal,
            Error::Postgres { code, .. } => {
                // Data that does not fit the table's columns (class 22), a column or type
                // the table lacks (42703, 42804), a constraint the rows break (class 23).
                if code.starts_with("22")
                    || code.starts_with("23")
                    || matches!(code.as_str(), "42703" | "42804" | "42P10" | "21000")
                {
                    ErrorKind::SinkSchemaMismatch
                } else {
                    ErrorKind::SinkUnavailable
                }
            }
            Error::Io { .. } => ErrorKind::IoError,
            Error::Ledger { .. } => ErrorKind::LedgerError,
            Error::Plan { .. } => ErrorKind::InvalidPlan,
            Error::StateIncompatible { .. } => ErrorKind::CheckpointIncompatible,
            Error::Storage { role, source } => match (source, role) {
                (crate::storage::StorageError::Store { .. }, StorageRole::Source) => {
                    ErrorKind::SourceUnavailable
                }
                (crate::storage::StorageError::Store { .. }, StorageRole::Sink) => {
                    ErrorKind::SinkUnavailable
                }
                (crate::storage::StorageError::Store { .. }, StorageRole::Checkpoint) => {
                    ErrorKind::IoError
                }
                _ => ErrorKind::InvalidPipeline,
            },
        }
    }

    /// The file, directory or table the error is about, when it names one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Pipeline(e) => Some(&e.file),
            Error::Checkpoint { path, .. }
            | Error::SourceIo { path, .. }
            | Error::Source { path, .. }
            | Error::SinkIo { path, .. }
            | Error::Io { path, .. }
            | Error::StateIncompatible { path, .. }
            | Error::MalformedRecord { path, .. }
            | Error::Ledger { path, .. } => Some(path),
            Error::CheckpointLocked { checkpoint, .. } => Some(checkpoint),
            Error::Delta { path, .. } | Error::SinkSchemaMismatch { path, .. } => {
                Some(Path::new(path))
            }
            Error::SchemaChanged { file, .. } => Some(Path::new(file)),
            Error::ExpectationFailed(f) => f.path.as_deref(),
            Error::SchemaMismatch { .. }
            | Error::Sql { .. }
            | Error::Arrow { .. }
            | Error::Plan { .. }
            | Error::KafkaUnavailable { .. }
            | Error::KafkaDataLoss { .. }
            | Error::Postgres { .. }
            | Error::Storage { .. } => None,
        }
    }

    /// The facts the health classifier routes on.
    pub fn facts(&self) -> ErrorFacts {
        ErrorFacts {
            kind: self.kind(),
            domain: self.domain(),
            retryable: self.retryable(),
            message: self.to_string(),
            path: self.path().map(|p| p.display().to_string()),
            waiting: false,
        }
    }

    pub(crate) fn checkpoint(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Checkpoint {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A file weir records (checkpoint log, state, schema history, progress, health)
    /// could not be written.
    pub(crate) fn unwritable(path: impl Into<PathBuf>, e: std::io::Error) -> Self {
        Error::checkpoint(path, format!("cannot write: {e}"))
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Why a filesystem refused a write: the condition a person has to clear before the
/// run can go on (issue #47: a full disk read as "Failed to parse parquet").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskCondition {
    /// `ENOSPC` (or `EDQUOT`): no space left on the device (or the quota is used up).
    NoSpace,
    /// `EROFS`: the filesystem is mounted read-only.
    ReadOnly,
}

impl DiskCondition {
    /// The condition named anywhere in `error`'s chain of causes: an `io::Error` of kind
    /// `StorageFull`/`QuotaExceeded`/`ReadOnlyFilesystem`, or its text where a library kept
    /// only the message (`No space left on device (os error 28)`).
    pub fn of(error: &(dyn std::error::Error + 'static)) -> Option<DiskCondition> {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = next {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                        return Some(DiskCondition::NoSpace);
                    }
                    std::io::ErrorKind::ReadOnlyFilesystem => return Some(DiskCondition::ReadOnly),
                    _ => {}
                }
            }
            if let Some(sqlite) = e.downcast_ref::<rusqlite::Error>() {
                match sqlite.sqlite_error_code() {
                    Some(rusqlite::ErrorCode::DiskFull) => return Some(DiskCondition::NoSpace),
                    Some(rusqlite::ErrorCode::ReadOnly) => return Some(DiskCondition::ReadOnly),
                    _ => {}
                }
            }
            let text = e.to_string();
            if text.contains("os error 28")
                || text.contains("No space left on device")
                || text.contains("database or disk is full")
            {
                return Some(DiskCondition::NoSpace);
            }
            if text.contains("os error 122") || text.contains("Disk quota exceeded") {
                return Some(DiskCondition::NoSpace);
            }
            if text.contains("os error 30") || text.contains("Read-only file system") {
                return Some(DiskCondition::ReadOnly);
            }
            next = e.source();
        }
        None
    }

    /// What a person reads first: the condition and the path, and that nothing is lost.
    pub fn headline(self, path: Option<&Path>) -> String {
        let place = path.map_or_else(String::new, |p| format!(" on {}", p.display()));
        match self {
            DiskCondition::NoSpace => format!(
                "no space left{place}: free space on that filesystem, then run again \
                 (the batch that failed is re-run from the checkpoint; nothing is lost or written twice)"
            ),
            DiskCondition::ReadOnly => format!(
                "read-only file system{place}: remount it read-write (or give weir write access), then run again \
                 (the batch that failed is re-run from the checkpoint; nothing is lost or written twice)"
            ),
        }
    }
}

/// Whether a panic is one that a library raises by design and catches itself, so the
/// panic hook must not print it as a crash: object_store's `BufWriter::abort` panics
/// ("Already shut down") once a failed `shutdown` (a full disk) has begun, and
/// deltalake's Parquet writer calls it under `catch_unwind` and returns the write's own
/// error (deltalake-core `datafile/writer.rs`). Anything else is printed as a crash.
pub fn is_caught_library_panic(message: Option<&str>, file: Option<&str>) -> bool {
    message == Some("Already shut down")
        && file.is_some_and(|f| f.contains("object_store") && f.ends_with("buffered.rs"))
}

/// Whether a PostgreSQL error with SQLSTATE `code` can pass by itself: a connection that
/// failed or was lost (class 08), the server shutting down or starting (57P01-57P03), too
/// many connections or out of resources (class 53), a serialization failure or deadlock
/// (40001, 40P01), a lock not available (55P03), an I/O error on the server (58030).
pub fn postgres_retryable(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "55P03" | "58030"
        )
}

/// The crate's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod disk_tests {
    use super::*;

    #[test]
    fn a_full_disk_is_found_under_any_wrapping() {
        let enospc = std::io::Error::from_raw_os_error(28);
        let wrapped = Error::Delta {
            path: "/lake/t".into(),
            source: deltalake::DeltaTableError::Generic(format!(
                "Failed to parse parquet: External: {enospc}"
            )),
        };
        assert_eq!(wrapped.disk_condition(), Some(DiskCondition::NoSpace));
        assert_eq!(wrapped.kind(), ErrorKind::SinkUnavailable);
        assert!(!wrapped.retryable());
        let io = Error::unwritable("/ckpt/offsets/3", std::io::Error::from_raw_os_error(30));
        assert_eq!(io.disk_condition(), Some(DiskCondition::ReadOnly));
        assert_eq!(
            io.kind(),
            ErrorKind::SinkUnavailable,
            "not a corrupt checkpoint"
        );
        let other = Error::unwritable("/ckpt/offsets/3", std::io::Error::from_raw_os_error(13));
        assert_eq!(other.disk_condition(), None);
        assert_eq!(other.kind(), ErrorKind::CheckpointCorrupt);
        let headline = DiskCondition::NoSpace.headline(Some(Path::new("/lake/t")));
        assert!(
            headline.starts_with("no space left on /lake/t: "),
            "{headline}"
        );
    }

    #[test]
    fn only_object_stores_caught_abort_panic_is_silenced() {
        let file = "/root/.cargo/registry/src/x/object_store-0.13.2/src/buffered.rs";
        assert!(is_caught_library_panic(
            Some("Already shut down"),
            Some(file)
        ));
        assert!(!is_caught_library_panic(
            Some("Already shut down"),
            Some("src/engine/mod.rs")
        ));
        assert!(!is_caught_library_panic(
            Some("index out of bounds"),
            Some(file)
        ));
        assert!(!is_caught_library_panic(None, Some(file)));
    }
}
