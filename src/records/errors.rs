//! The vocabulary of errors as data: who has to act ([`Domain`]) and what went wrong
//! ([`ErrorKind`], which knows the health state it leads to). `crate::error::Error`
//! answers both for every error; events, health evidence and progress carry them.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::health::HealthState;

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

/// What went wrong, by kind: the short name in events, health evidence and the console's
/// timeline, and the health state (and so the playbook) an error of this kind leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "&'static str")]
pub enum ErrorKind {
    InvalidPipeline,
    SchemaChanged,
    SchemaMismatch,
    CheckpointCorrupt,
    CheckpointLocked,
    SourceUnavailable,
    SourceError,
    SinkUnavailable,
    SinkSchemaMismatch,
    SqlError,
    Internal,
    IoError,
    LedgerError,
    InvalidPlan,
    CheckpointIncompatible,
    /// A malformed record in a source with `mode = "failfast"`.
    MalformedRecord,
    /// A row violated an expectation with `on_violation = "fail"`.
    ExpectationFailed,
    /// An Apache Spark driver stopped writing its event log without ending its queries
    /// (killed or lost; `weir attach --spark`).
    DriverLost,
    /// A kind this version does not know (read from a record written by another one).
    Other,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 18] = [
        ErrorKind::InvalidPipeline,
        ErrorKind::SchemaChanged,
        ErrorKind::SchemaMismatch,
        ErrorKind::CheckpointCorrupt,
        ErrorKind::CheckpointLocked,
        ErrorKind::SourceUnavailable,
        ErrorKind::SourceError,
        ErrorKind::SinkUnavailable,
        ErrorKind::SinkSchemaMismatch,
        ErrorKind::SqlError,
        ErrorKind::Internal,
        ErrorKind::IoError,
        ErrorKind::LedgerError,
        ErrorKind::InvalidPlan,
        ErrorKind::CheckpointIncompatible,
        ErrorKind::MalformedRecord,
        ErrorKind::DriverLost,
        ErrorKind::ExpectationFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidPipeline => "invalid_pipeline",
            ErrorKind::SchemaChanged => "schema_changed",
            ErrorKind::SchemaMismatch => "schema_mismatch",
            ErrorKind::CheckpointCorrupt => "checkpoint_corrupt",
            ErrorKind::CheckpointLocked => "checkpoint_locked",
            ErrorKind::SourceUnavailable => "source_unavailable",
            ErrorKind::SourceError => "source_error",
            ErrorKind::SinkUnavailable => "sink_unavailable",
            ErrorKind::SinkSchemaMismatch => "sink_schema_mismatch",
            ErrorKind::SqlError => "sql_error",
            ErrorKind::Internal => "internal",
            ErrorKind::IoError => "io_error",
            ErrorKind::LedgerError => "ledger_error",
            ErrorKind::InvalidPlan => "invalid_plan",
            ErrorKind::CheckpointIncompatible => "checkpoint_incompatible",
            ErrorKind::MalformedRecord => "malformed_record",
            ErrorKind::DriverLost => "driver_lost",
            ErrorKind::ExpectationFailed => "expectation_failed",
            ErrorKind::Other => "other",
        }
    }

    /// The health state an error of this kind puts a flow in; `None` for errors no
    /// playbook covers (a bug, a lock held by another process, a bad pipeline).
    pub fn health_state(self) -> Option<HealthState> {
        match self {
            ErrorKind::CheckpointCorrupt | ErrorKind::CheckpointIncompatible => {
                Some(HealthState::CheckpointIncompatible)
            }
            ErrorKind::SchemaChanged
            | ErrorKind::SchemaMismatch
            | ErrorKind::SinkSchemaMismatch
            | ErrorKind::MalformedRecord => Some(HealthState::SchemaMismatch),
            ErrorKind::SourceUnavailable | ErrorKind::SourceError => {
                Some(HealthState::SourceUnavailable)
            }
            ErrorKind::SinkUnavailable => Some(HealthState::SinkUnavailable),
            _ => None,
        }
    }

    /// Whether a retry with backoff can cure an error of this kind when the error says a
    /// retry can help: the source or the sink was unavailable.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::SourceUnavailable | ErrorKind::SinkUnavailable
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for ErrorKind {
    fn from(text: String) -> Self {
        ErrorKind::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .unwrap_or(ErrorKind::Other)
    }
}

impl From<&str> for ErrorKind {
    fn from(text: &str) -> Self {
        ErrorKind::from(text.to_string())
    }
}

impl From<ErrorKind> for &'static str {
    fn from(kind: ErrorKind) -> Self {
        kind.as_str()
    }
}
