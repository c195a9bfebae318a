//! Library errors. Every variant carries the path, batch id, line or key
//! involved, and every error says its [`Domain`] and whether retrying can
//! help; the health classifier routes on those two answers.

use std::path::PathBuf;

/// Who has to act on an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Domain {
    /// The pipeline file, the input data or an operator's command is wrong.
    User,
    /// Something outside weir: a file system, permissions, a full disk, another writer.
    External,
    /// A bug in weir.
    Internal,
}

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

    /// A stateful operator (watermark, window, aggregation, deduplication) is declared in a way
    /// that cannot run; the message says what to change.
    #[error("flow {flow}: {message}")]
    Plan { flow: String, message: String },

    /// A restart's plan changed a stateful operator, so the state saved in the checkpoint
    /// cannot be reused; the message says what changed and what the options are.
    #[error("checkpoint {path}: {message}")]
    StateIncompatible { path: PathBuf, message: String },

    /// A ledger (SQLite) operation failed.
    #[error("file ledger {path}: {source}")]
    Ledger {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
}

impl Error {
    /// Who has to act.
    pub fn domain(&self) -> Domain {
        match self {
            Error::Pipeline(_) | Error::Sql { .. } | Error::SinkSchemaMismatch { .. } => {
                Domain::User
            }
            Error::SchemaChanged { .. } | Error::SchemaMismatch { .. } => Domain::User,
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
            Error::Arrow { .. } => Domain::Internal,
        }
    }

    /// Whether retrying the same operation later can succeed without a change by a person.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Error::SourceIo { .. }
                | Error::SinkIo { .. }
                | Error::Delta { .. }
                | Error::Io { .. }
                | Error::Ledger { .. }
                | Error::SchemaChanged { .. }
        )
    }

    /// Short machine-readable kind, used in progress records and the console timeline.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Pipeline(_) => "invalid_pipeline",
            Error::SchemaChanged { .. } => "schema_changed",
            Error::SchemaMismatch { .. } => "schema_mismatch",
            Error::Checkpoint { .. } => "checkpoint_corrupt",
            Error::CheckpointLocked { .. } => "checkpoint_locked",
            Error::SourceIo { .. } => "source_unavailable",
            Error::Source { .. } => "source_error",
            Error::Delta { .. } | Error::SinkIo { .. } => "sink_unavailable",
            Error::SinkSchemaMismatch { .. } => "sink_schema_mismatch",
            Error::Sql { .. } => "sql_error",
            Error::Arrow { .. } => "internal",
            Error::Io { .. } => "io_error",
            Error::Ledger { .. } => "ledger_error",
            Error::Plan { .. } => "invalid_plan",
            Error::StateIncompatible { .. } => "checkpoint_incompatible",
        }
    }

    pub(crate) fn checkpoint(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Checkpoint {
            path: path.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// The crate's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
