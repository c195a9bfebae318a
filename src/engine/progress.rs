//! Progress records in the shape of Spark's `StreamingQueryProgress`
//! (field names, nesting and units as Spark renders them: durations in ms,
//! rates in rows/s, event times as ISO-8601 UTC strings with milliseconds).
//! weir-only fields live under `"weir"`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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
pub use crate::ops::stateful::StateOperatorMetrics as StateOperatorProgress;

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
    pub health: Option<crate::health::Health>,
    /// `schema_evolution = "none"`: columns the batch's files have and the schema lacks,
    /// ignored (not in the table, not rescued).
    #[serde(default)]
    pub num_new_columns_ignored: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_columns_ignored: Vec<String>,
    /// Stream-static join tables: version read, rows, whether this batch re-read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<crate::ops::join::DimensionProgress>,
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

/// `_weir/progress.jsonl`, bounded to the last [`ProgressLog::RETAIN`] records.
pub struct ProgressLog {
    path: PathBuf,
    lines: usize,
}

impl ProgressLog {
    /// Records kept in the file; older ones are dropped when it grows to twice this.
    pub const RETAIN: usize = 1000;

    pub fn open(path: &Path) -> Self {
        let lines = std::fs::File::open(path)
            .map(|f| BufReader::new(f).lines().count())
            .unwrap_or(0);
        ProgressLog {
            path: path.to_path_buf(),
            lines,
        }
    }

    pub fn append(&mut self, record: &StreamingQueryProgress) -> Result<()> {
        let line = serde_json::to_string(record)
            .map_err(|e| Error::checkpoint(&self.path, e.to_string()))?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(|e| Error::checkpoint(&self.path, e.to_string()))?;
        writeln!(file, "{line}").map_err(|e| Error::checkpoint(&self.path, e.to_string()))?;
        self.lines += 1;
        if self.lines >= 2 * Self::RETAIN {
            self.compact()?;
        }
        Ok(())
    }

    fn compact(&mut self) -> Result<()> {
        let records = read_progress(&self.path)?;
        let keep = &records[records.len().saturating_sub(Self::RETAIN)..];
        let mut text = String::new();
        for r in keep {
            if let Ok(line) = serde_json::to_string(r) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        crate::checkpoint::write_atomic(&self.path, text.as_bytes())?;
        self.lines = keep.len();
        Ok(())
    }
}

/// Reads every well-formed record of a progress file (a torn last line is skipped).
pub fn read_progress(path: &Path) -> Result<Vec<StreamingQueryProgress>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::checkpoint(path, e.to_string())),
    };
    Ok(BufReader::new(file)
        .lines()
        .map_while(std::result::Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect())
}
