//! The health verdict of a flow (DESIGN.md §9) as data: its state, the evidence, and
//! the facts of the error behind it. The classifier (`crate::health`) produces it, the
//! engine records it (`_weir/health.json`, progress `weir.health`), the console,
//! `weir attach` and `weir playbook` read it back.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::errors::{Domain, ErrorKind};

/// The six health states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    #[default]
    Healthy,
    Lagging,
    SourceUnavailable,
    SinkUnavailable,
    CheckpointIncompatible,
    SchemaMismatch,
}

impl HealthState {
    pub const ALL: [HealthState; 6] = [
        HealthState::Healthy,
        HealthState::Lagging,
        HealthState::SourceUnavailable,
        HealthState::SinkUnavailable,
        HealthState::CheckpointIncompatible,
        HealthState::SchemaMismatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Lagging => "lagging",
            HealthState::SourceUnavailable => "source_unavailable",
            HealthState::SinkUnavailable => "sink_unavailable",
            HealthState::CheckpointIncompatible => "checkpoint_incompatible",
            HealthState::SchemaMismatch => "schema_mismatch",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim().replace('-', "_");
        Self::ALL.into_iter().find(|s| s.as_str() == t)
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The facts of an error the classifier routes on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorFacts {
    pub kind: ErrorKind,
    pub domain: Domain,
    pub retryable: bool,
    pub message: String,
    /// The file, directory or table the error names, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The flow is waiting for what the error names (a files source's landing directory
    /// that does not exist yet): nothing was retried and nothing failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting: bool,
}

/// The numbers behind a verdict. Every number says its window (`window_batches`,
/// `batches`) and unit (in its name); absent facts are left out of the JSON.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Evidence {
    /// One line per reason, human readable.
    pub reasons: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_batches: Option<usize>,
    /// First and last batch of the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<(u64, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_bytes: Option<u64>,
    /// Backlog files at the start of the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_files_start: Option<u64>,
    /// The backlog after the last batch in its unit (files, Kafka offsets behind the latest,
    /// Delta versions behind, rate-source rows behind), and at the start of the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_unit: Option<super::progress::BacklogUnit>,
    /// Mean over the window, rows/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_rows_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processed_rows_per_second: Option<f64>,
    /// Files per batch over the window and the cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_per_batch: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files_per_trigger: Option<u64>,
    /// Estimated time to drain the backlog at the window's rate, seconds (None: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_secs: Option<f64>,
    /// Wall clock - max event time, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time_delay_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescued_rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorFacts>,
    /// The batch involved (the last one seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<u64>,
    /// The file involved, when one is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// A flow's health: its state and why.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Health {
    pub state: HealthState,
    pub evidence: Evidence,
}

/// `_weir/health.json`: the latest verdict, with when it was made.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HealthRecord {
    pub flow: String,
    pub at: String,
    #[serde(flatten)]
    pub health: Health,
}
