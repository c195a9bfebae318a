//! A flow's event time and stateful query (docs/event-time.md): watermark,
//! aggregation, deduplication, output mode.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// `watermark = { column = "...", delay = "..." }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkSpec {
    pub column: String,
    pub delay_ms: i64,
    /// The future-skew guard: rows whose event time is more than this ahead of the wall
    /// clock are set apart (late-rows table) and never move the watermark.
    pub max_future_ms: Option<i64>,
}

impl WatermarkSpec {
    /// Parses a delay such as `"10 minutes"`, `"5 s"`, `"0"`.
    pub fn new(column: &str, delay: &str) -> std::result::Result<Self, String> {
        let delay = super::units::HumanDuration::parse(delay)?;
        Ok(WatermarkSpec {
            column: column.to_string(),
            delay_ms: delay.as_millis(),
            max_future_ms: None,
        })
    }
}

/// How the watermarks of several sources make the flow's one watermark (Spark's
/// `spark.sql.streaming.multipleWatermarkPolicy`, default `min`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatermarkPolicy {
    /// The slowest source's watermark: nothing of a slower source is late. A source
    /// without data yet counts as 0 and holds the watermark back.
    #[default]
    Min,
    /// The fastest source's watermark: rows of slower sources may become late.
    Max,
}

impl WatermarkPolicy {
    pub fn as_str(&self) -> &'static str {
        match self {
            WatermarkPolicy::Min => "min",
            WatermarkPolicy::Max => "max",
        }
    }
}

impl FromStr for WatermarkPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "min" => Ok(WatermarkPolicy::Min),
            "max" => Ok(WatermarkPolicy::Max),
            other => Err(format!(
                "invalid multiple_watermark_policy {other:?}; allowed: \"min\" (the slowest source's watermark, Spark's default) or \"max\" (the fastest's)"
            )),
        }
    }
}

/// How a stateful query writes its result (Spark's `outputMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Only final rows, each once.
    #[default]
    Append,
    /// The rows changed by each batch.
    Update,
    /// The whole result table, every batch.
    Complete,
}

impl OutputMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            OutputMode::Append => "append",
            OutputMode::Update => "update",
            OutputMode::Complete => "complete",
        }
    }
}

impl fmt::Display for OutputMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OutputMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "append" => Ok(OutputMode::Append),
            "update" => Ok(OutputMode::Update),
            "complete" => Ok(OutputMode::Complete),
            other => Err(format!(
                "unknown output mode {other:?}; use \"append\", \"update\" or \"complete\""
            )),
        }
    }
}

/// A flow's stateful query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatefulSpec {
    /// Flow name, for error messages.
    pub flow: String,
    pub watermark: Option<WatermarkSpec>,
    /// SQL expressions, optionally `AS name`; may include one `window(col, 'size'[, 'slide'[, 'offset']])`.
    pub group_by: Vec<String>,
    /// SQL aggregate expressions with `AS name`, e.g. `count(*) AS n`, `avg(dep_delay) AS avg_delay`.
    pub aggregates: Vec<String>,
    /// `dropDuplicates(cols)`; an empty list means all columns.
    pub drop_duplicates: Option<Vec<String>>,
    /// Spark 3.5 `dropDuplicatesWithinWatermark`.
    pub drop_duplicates_within_watermark: bool,
    pub output_mode: OutputMode,
    /// Bytes of state the operator keeps in memory; beyond them its state spills to
    /// disk (`state_memory_limit`, docs/state.md). `None`: all in memory.
    pub state_memory_limit: Option<u64>,
}

impl StatefulSpec {
    pub fn has_aggregation(&self) -> bool {
        !self.group_by.is_empty() || !self.aggregates.is_empty()
    }

    pub fn has_deduplication(&self) -> bool {
        self.drop_duplicates.is_some()
    }

    /// Whether the flow has a stateful operator at all.
    pub fn is_stateful(&self) -> bool {
        self.has_aggregation() || self.has_deduplication()
    }

    /// Whether rows behind the watermark are dropped before the operator (all modes but
    /// complete, as in Spark).
    pub fn drops_late_rows(&self) -> bool {
        self.watermark.is_some() && self.output_mode != OutputMode::Complete
    }
}
