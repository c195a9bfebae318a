//! Progress records in the shape of Spark's `StreamingQueryProgress`
//! (field names, nesting and units as Spark renders them: durations in ms,
//! rates in rows/s, event times as ISO-8601 UTC strings with milliseconds).
//! weir-only fields live under `"weir"`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct StreamingQueryProgress {
    pub id: String,
    pub run_id: String,
    pub name: String,
    pub timestamp: String,
    pub batch_id: u64,
    pub batch_duration: u64,
    pub num_input_rows: u64,
    pub input_rows_per_second: f64,
    pub processed_rows_per_second: f64,
    pub duration_ms: BTreeMap<String, u64>,
    pub event_time: BTreeMap<String, String>,
    pub state_operators: Vec<StateOperatorProgress>,
    pub sources: Vec<SourceProgress>,
    pub sink: SinkProgress,
    pub weir: WeirProgress,
}

/// Per stateful operator, as Spark's `StateOperatorProgress`.
pub type StateOperatorProgress = StateOperatorMetrics;

/// Per-operator metrics of the last batch, named as Spark's `StateOperatorProgress`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateOperatorMetrics {
    pub operator_name: String,
    /// Keys (groups) held after the batch.
    pub num_rows_total: u64,
    /// Keys inserted or changed by the batch.
    pub num_rows_updated: u64,
    pub all_updates_time_ms: u64,
    /// Keys dropped by the batch (windows closed by the watermark, expired dedup keys).
    pub num_rows_removed: u64,
    pub all_removals_time_ms: u64,
    pub commit_time_ms: u64,
    /// Bytes of the in-memory state (Arrow buffers of the open keys and values, key index).
    pub memory_used_bytes: u64,
    /// Input rows behind the watermark. The operator does not see them: the engine sets
    /// this from the watermark split (`ops::watermark::Split::num_late`).
    pub num_rows_dropped_by_watermark: u64,
    pub num_shuffle_partitions: u64,
    pub num_state_store_instances: u64,
    /// `stateOnCurrentVersionSizeBytes`: bytes on disk of the files that make up the
    /// current state version (snapshot + deltas); `snapshotWrittenLastCommit` (0/1).
    pub custom_metrics: BTreeMap<String, i64>,
}

/// A dimension's state in one batch's progress (`weir.dimensions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DimensionProgress {
    pub alias: String,
    pub path: String,
    /// Delta version read (Delta dimensions only).
    pub version: Option<i64>,
    pub num_rows: u64,
    /// Whether this batch re-read the dimension (its version or file changed).
    pub reloaded: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SourceProgress {
    pub description: String,
    pub start_offset: serde_json::Value,
    pub end_offset: serde_json::Value,
    pub latest_offset: serde_json::Value,
    pub num_input_rows: u64,
    pub input_rows_per_second: f64,
    pub processed_rows_per_second: f64,
    /// As in Auto Loader, metric values are strings: `numFilesOutstanding`, `numBytesOutstanding`.
    pub metrics: BTreeMap<String, String>,
}

/// What a source's backlog is counted in (see [`SourceProgress::backlog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BacklogUnit {
    /// Files listed and not read yet (`numFilesOutstanding`: file sources, Auto Loader, Delta).
    Files,
    /// Kafka offsets between the batch's end and the latest, summed over partitions
    /// (`numOffsetsBehindLatest`).
    Offsets,
    /// Delta table versions not fully read (`numVersionsBehind`).
    Versions,
    /// Rows the rate source had made available and the batch did not read (`numRowsBehindLatest`).
    Rows,
}

impl BacklogUnit {
    /// In the order [`SourceProgress::backlog`] prefers them.
    pub const ALL: [BacklogUnit; 4] = [
        BacklogUnit::Files,
        BacklogUnit::Offsets,
        BacklogUnit::Versions,
        BacklogUnit::Rows,
    ];

    /// The source metric that carries it.
    pub fn metric(self) -> &'static str {
        match self {
            BacklogUnit::Files => "numFilesOutstanding",
            BacklogUnit::Offsets => "numOffsetsBehindLatest",
            BacklogUnit::Versions => "numVersionsBehind",
            BacklogUnit::Rows => "numRowsBehindLatest",
        }
    }

    /// The plural noun: `files`, `offsets`, `versions`, `rows`.
    pub fn noun(self) -> &'static str {
        match self {
            BacklogUnit::Files => "files",
            BacklogUnit::Offsets => "offsets",
            BacklogUnit::Versions => "versions",
            BacklogUnit::Rows => "rows",
        }
    }

    /// `n` with its noun, singular when 1: `1 file`, `1200 offsets`.
    pub fn count(self, n: u64) -> String {
        let noun = self.noun();
        if n == 1 {
            format!("{n} {}", &noun[..noun.len() - 1])
        } else {
            format!("{n} {noun}")
        }
    }
}

impl SourceProgress {
    /// The source's backlog after the batch, in the first unit a metric of the record
    /// gives: files outstanding, else Kafka offsets behind the latest, else Delta versions
    /// behind, else rate-source rows behind.
    pub fn backlog(&self) -> Option<(u64, BacklogUnit)> {
        BacklogUnit::ALL.iter().find_map(|u| {
            self.metrics
                .get(u.metric())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|n| (n, *u))
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SinkProgress {
    pub description: String,
    /// -1 when unknown, like Spark.
    pub num_output_rows: i64,
}

/// weir-only fields of a progress record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct WeirProgress {
    pub trigger: String,
    /// Delta version this batch committed (or found, when the write was skipped).
    pub delta_version: Option<i64>,
    /// The batch was already in the sink (replay after a crash); nothing was written.
    pub sink_write_skipped: bool,
    /// The batch re-ran offsets planned by an earlier process.
    pub replayed: bool,
    /// The batch was read, transformed and written file by file (docs/architecture.md,
    /// "Streamed batches").
    #[serde(default)]
    pub streamed: bool,
    pub num_files: u64,
    pub num_bytes: u64,
    pub num_rows_rescued: u64,
    pub num_records_corrupt: u64,
    pub num_files_failed: u64,
    pub num_files_retried: u64,
    pub num_files_modified_after_ingestion: u64,
    /// Rows whose event time is null or unparseable (never aggregated; see docs/event-time.md).
    #[serde(default)]
    pub num_rows_invalid_event_time: u64,
    /// Rows whose event time is beyond `watermark.max_future` ahead of the wall clock
    /// (set apart; never move the watermark).
    #[serde(default)]
    pub num_rows_future_event_time: u64,
    /// Records that could not be parsed at all, written to `bad_records_path`.
    #[serde(default)]
    pub num_records_quarantined: u64,
    /// Late and invalid-event-time rows written to the flow's `late_rows` table.
    #[serde(default)]
    pub num_late_rows_written: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FileError>,
    /// The flow's health after this batch (docs/health.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<super::health::Health>,
    /// `schema_evolution = "none"`: columns the batch's files have and the schema lacks,
    /// ignored (not in the table, not rescued).
    #[serde(default)]
    pub num_new_columns_ignored: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_columns_ignored: Vec<String>,
    /// Stream-static join tables: version read, rows, whether this batch re-read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<DimensionProgress>,
    /// A flow of several sources (`[[flow.union]]`): each source's own watermark after
    /// the batch, and which one the flow's watermark follows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_watermarks: Vec<SourceWatermark>,
    /// The description of the source whose watermark is the flow's (`min`: the slowest,
    /// holding it back; `max`: the fastest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_held_by: Option<String>,
    /// Each `[[flow.expect]]`'s rows that passed and failed in this batch, under
    /// Lakeflow's event-log names (`flow_progress.data_quality.expectations`); Spark's
    /// own `observedMetrics` has no such entry (docs/expectations.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<ExpectationProgress>,
    /// Rows the `drop` expectations removed (Lakeflow's `data_quality.dropped_records`;
    /// a row failing two of them counts once).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub num_rows_dropped_by_expectations: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One expectation's counts in one batch, named as Lakeflow's event log names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectationProgress {
    pub name: String,
    /// The flow (Lakeflow's dataset: the table the flow writes).
    pub dataset: String,
    pub passed_records: u64,
    pub failed_records: u64,
}

/// One source's own watermark in a flow of several sources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceWatermark {
    /// The source's description (as in `sources[i].description`).
    pub source: String,
    /// ISO-8601; `None` while the source has had no data (it counts as 0, as in Spark).
    pub watermark: Option<String>,
    /// This source's watermark is the flow's.
    pub holds_watermark: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileError {
    pub path: String,
    pub error: String,
}

/// ISO-8601 UTC with milliseconds, as Spark renders timestamps in progress.
pub fn iso_millis(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
