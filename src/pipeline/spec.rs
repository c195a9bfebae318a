//! The pipeline file as written (TOML), before paths are resolved.
//! Documented in `docs/pipeline.md`; keep the two in step.

use serde::Deserialize;
use toml::Spanned;

use super::units::{ByteSize, HumanDuration};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// One `[[flow]]` table per streaming query.
    #[serde(default)]
    pub flow: Vec<Spanned<FlowFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowFile {
    pub name: Spanned<String>,
    pub source: SourceFile,
    #[serde(rename = "where")]
    pub where_: Option<Spanned<String>>,
    pub select: Option<Vec<Spanned<String>>>,
    pub sink: SinkFile,
    pub trigger: Option<Spanned<TriggerFile>>,
    pub checkpoint: Option<String>,
    /// `{ column = "event_time", delay = "10 minutes" }` (Spark's `withWatermark`).
    pub watermark: Option<WatermarkFile>,
    /// Grouping keys (SQL), may include `window(col, '5 minutes'[, '1 minute'])`.
    pub group_by: Option<Vec<String>>,
    /// Aggregate expressions with `AS name`.
    pub aggregates: Option<Vec<String>>,
    /// Key columns of `dropDuplicates` (empty = all columns).
    pub drop_duplicates: Option<Vec<String>>,
    #[serde(default)]
    pub drop_duplicates_within_watermark: bool,
    pub output_mode: Option<Spanned<String>>,
    /// Where rows behind the watermark go instead of being dropped (a Delta table).
    pub late_rows: Option<LateRowsFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkFile {
    pub column: String,
    pub delay: HumanDuration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateRowsFile {
    pub path: String,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum TriggerFile {
    /// `"available_now"`, `"once"`, or a processing-time interval such as `"10 seconds"`.
    Word(String),
    /// `{ processing_time = "10 seconds" }`.
    ProcessingTime { processing_time: HumanDuration },
}

/// A source table. Only `type = "files"` exists today; the type is checked after parsing
/// (a serde-tagged enum would lose the value spans that error messages need).
pub type SourceFile = FilesSourceFile;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSourceFile {
    #[serde(rename = "type")]
    pub kind: Spanned<String>,
    pub path: String,
    pub format: FormatFile,
    /// Spark DDL, e.g. `"id BIGINT, ts TIMESTAMP"`. Inferred from the first files when absent.
    pub schema: Option<Spanned<String>>,
    #[serde(default = "default_true")]
    pub infer_column_types: bool,
    /// How many files schema inference samples (default 50).
    pub schema_inference_max_files: Option<usize>,
    pub path_glob_filter: Option<Spanned<String>>,
    pub max_files_per_trigger: Option<Spanned<u64>>,
    pub max_bytes_per_trigger: Option<ByteSize>,
    pub min_file_age: Option<HumanDuration>,
    #[serde(default)]
    pub allow_overwrites: bool,
    pub csv: Option<CsvFile>,
    /// `add_new_columns` | `rescue` | `fail_on_new_columns` | `none` (Auto Loader's `schemaEvolutionMode`).
    pub schema_evolution: Option<Spanned<String>>,
    /// DDL pinning some columns' types while the rest is inferred (Auto Loader's `schemaHints`).
    pub schema_hints: Option<Spanned<String>>,
    /// Directory holding `_schemas/` (default: the checkpoint).
    pub schema_location: Option<String>,
    /// Directory receiving records that cannot be parsed at all (JSON lines per batch).
    pub bad_records_path: Option<String>,
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FormatFile {
    Json,
    Csv,
    Parquet,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvFile {
    pub header: Option<bool>,
    pub delimiter: Option<Spanned<String>>,
    pub quote: Option<Spanned<String>>,
    pub escape: Option<Spanned<String>>,
    pub null_value: Option<String>,
    pub comment: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SinkFile {
    /// Append each batch to a Delta table in one commit.
    Delta {
        path: String,
        #[serde(default)]
        partition_by: Vec<String>,
        #[serde(default)]
        merge_schema: bool,
        /// UNSAFE when false: skip the application-transaction check, so a batch replayed
        /// after a crash is appended again (duplicates). Only for proving `weir drill` can fail.
        #[serde(default = "default_true")]
        idempotent: bool,
    },
    /// Keep rows in memory (tests, `weir run --headless` debugging).
    Memory { name: Option<String> },
    /// Print each batch to stderr.
    Console {
        #[serde(default = "default_console_rows")]
        num_rows: usize,
    },
}

fn default_console_rows() -> usize {
    20
}
