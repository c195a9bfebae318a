//! Joins a flow declares: stream-static (`[[flow.join]]`, docs/joins.md) and
//! stream-stream (`[flow.stream_join]`, docs/stream-joins.md).

use std::path::PathBuf;

use super::{SourceSpec, WatermarkSpec};

/// How a dimension is joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinType {
    Inner,
    Left,
}

impl JoinType {
    pub fn sql(self) -> &'static str {
        match self {
            JoinType::Inner => "INNER JOIN",
            JoinType::Left => "LEFT JOIN",
        }
    }
}

/// What the dimension file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DimensionFormat {
    Delta,
    Csv,
    Parquet,
}

impl DimensionFormat {
    /// `delta`, `csv` or `parquet`: the pipeline's `format` value.
    pub fn name(self) -> &'static str {
        match self {
            DimensionFormat::Delta => "delta",
            DimensionFormat::Csv => "csv",
            DimensionFormat::Parquet => "parquet",
        }
    }
}

/// The join condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinOn {
    /// Columns of the same name on both sides (`USING`-like; the dimension's copies are dropped).
    Columns(Vec<String>),
    /// A SQL condition over `batch.<col>` and `<alias>.<col>`.
    Condition(String),
}

/// One `[[flow.join]]`, resolved.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub table: PathBuf,
    pub format: DimensionFormat,
    pub alias: String,
    pub on: JoinOn,
    pub how: JoinType,
    /// CSV only: the text that means null (e.g. `NA`).
    pub null_value: Option<String>,
}

/// `time_range`: `right.time BETWEEN left.time + lower AND left.time + upper`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeRange {
    /// The left side's event-time column (its watermark column).
    pub left: String,
    /// The right side's event-time column (its watermark column).
    pub right: String,
    pub lower_ms: i64,
    pub upper_ms: i64,
}

/// `[flow.stream_join]`, resolved.
#[derive(Debug, Clone)]
pub struct StreamJoinSpec {
    /// The right stream's name in SQL.
    pub alias: String,
    pub source: SourceSpec,
    /// The right side's watermark (the flow's `watermark` is the left's).
    pub watermark: Option<WatermarkSpec>,
    pub on: JoinOn,
    pub time_range: Option<TimeRange>,
    pub how: JoinType,
}
