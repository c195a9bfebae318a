//! The pipeline file as written (TOML), before paths are resolved.
//! Documented in `docs/pipeline.md`; keep the two in step.

use serde::Deserialize;
use toml::Spanned;

use crate::spec::{ByteSize, HumanDuration};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// One `[[flow]]` table per streaming query.
    #[serde(default)]
    pub flow: Vec<Spanned<FlowFile>>,
    /// `[alerts]` with `[[alerts.rule]]` tables (docs/operate.md).
    pub alerts: Option<Spanned<AlertsFile>>,
}

/// `[alerts]`: how often rules are evaluated, the delivery queue, the rules.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsFile {
    pub evaluate_every: Option<Spanned<String>>,
    pub queue: Option<Spanned<i64>>,
    /// The default delivery timeout of the rules.
    pub timeout: Option<Spanned<String>>,
    #[serde(default)]
    pub rule: Vec<Spanned<AlertRuleFile>>,
}

/// `[[alerts.rule]]`: a name, one condition, one target.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleFile {
    pub name: Spanned<String>,
    pub flows: Option<Spanned<Vec<Spanned<String>>>>,
    pub health: Option<Spanned<Vec<Spanned<String>>>>,
    pub freshness: Option<Spanned<String>>,
    pub backlog_seconds: Option<Spanned<f64>>,
    pub failed_batches: Option<Spanned<i64>>,
    pub command: Option<Spanned<Vec<String>>>,
    pub url: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowFile {
    pub name: Spanned<String>,
    pub source: SourceFile,
    /// Data-quality constraints on the input rows (`[[flow.expect]]`, Lakeflow's
    /// expectations; docs/expectations.md).
    pub expect: Option<Vec<Spanned<ExpectFile>>>,
    /// A Delta table receiving the rows the `drop` expectations remove, with the names of
    /// the expectations each failed (docs/expectations.md).
    pub quarantine_path: Option<Spanned<String>>,
    #[serde(rename = "where")]
    pub where_: Option<Spanned<String>>,
    pub select: Option<Vec<Spanned<String>>>,
    pub sink: SinkFile,
    pub trigger: Option<Spanned<TriggerFile>>,
    pub checkpoint: Option<String>,
    /// `{ column = "event_time", delay = "10 minutes" }` (Spark's `withWatermark`).
    pub watermark: Option<WatermarkFile>,
    /// Grouping keys (SQL), may include `window(col, '5 minutes'[, '1 minute'])`.
    pub group_by: Option<Vec<Spanned<String>>>,
    /// Aggregate expressions with `AS name`.
    pub aggregates: Option<Vec<Spanned<String>>>,
    /// Key columns of `dropDuplicates` (empty = all columns).
    pub drop_duplicates: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pub drop_duplicates_within_watermark: bool,
    pub output_mode: Option<Spanned<String>>,
    /// Where rows behind the watermark go instead of being dropped (a Delta table).
    pub late_rows: Option<LateRowsFile>,
    /// Target for wall clock - max event time; beyond it the flow is `lagging` (docs/health.md).
    pub freshness: Option<HumanDuration>,
    /// Thresholds of the health classifier and the retries (docs/health.md).
    pub health: Option<Spanned<HealthFile>>,
    /// Stream-static joins, applied to each batch in order (`[[flow.join]]`).
    pub join: Option<Vec<Spanned<JoinFile>>>,
    /// A stream-stream join with a second stream (`[flow.stream_join]`, docs/stream-joins.md).
    pub stream_join: Option<Spanned<StreamJoinFile>>,
    /// More sources read as one stream with the flow's source, columns matched by name
    /// (`[[flow.union]]`, Spark's `unionByName`).
    pub union: Option<Vec<Spanned<UnionFile>>>,
    /// `"min"` (default) or `"max"`: how the sources' watermarks make the flow's
    /// (Spark's `spark.sql.streaming.multipleWatermarkPolicy`).
    pub multiple_watermark_policy: Option<Spanned<String>>,
    /// Batches the checkpoint keeps in `offsets/`, `commits/` and `state/` (Spark's
    /// `spark.sql.streaming.minBatchesToRetain`, default 100; docs/maintenance.md).
    pub min_batches_to_retain: Option<Spanned<i64>>,
    /// Bytes of deduplication state kept in memory, e.g. `"256 MiB"`; beyond them the
    /// state spills to disk (docs/state.md).
    pub state_memory_limit: Option<Spanned<ByteSize>>,
}

/// `[[flow.expect]]`: a named constraint and what a violating row does.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectFile {
    pub name: Spanned<String>,
    /// A SQL boolean expression over the input row.
    pub constraint: Spanned<String>,
    /// `"warn"` (default), `"drop"` or `"fail"`.
    pub on_violation: Option<Spanned<String>>,
}

/// `[[flow.union]]`: one more source of the flow, with its own watermark.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnionFile {
    pub source: SourceFile,
    /// This source's watermark (default: the flow's column and delay, on its own rows).
    pub watermark: Option<WatermarkFile>,
}

/// `[flow.stream_join]`: the flow's source (left) joined with a second stream (right).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamJoinFile {
    /// The right stream's name in SQL (the left is `batch`).
    pub alias: Spanned<String>,
    /// The right stream's source (any source type).
    pub source: SourceFile,
    /// The right side's watermark.
    pub watermark: Option<WatermarkFile>,
    /// Column names present on both sides, or a SQL condition over `batch.` and the alias.
    pub on: Spanned<JoinOnFile>,
    /// `right.time BETWEEN left.time + lower AND left.time + upper`.
    pub time_range: Option<Spanned<TimeRangeFile>>,
    /// `inner` (default) or `left`.
    pub how: Option<Spanned<String>>,
}

/// `time_range = { left = "t", right = "t", lower = "-1 hour", upper = "0 seconds" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeRangeFile {
    /// Default: the left side's watermark column.
    pub left: Option<String>,
    /// Default: the right side's watermark column.
    pub right: Option<String>,
    /// A signed duration, e.g. `"-1 hour"`.
    pub lower: Spanned<String>,
    pub upper: Spanned<String>,
}

/// `[flow.health]`: the classifier's windows and thresholds, the retries' budget.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthFile {
    pub window_batches: Option<Spanned<u64>>,
    pub rate_tolerance: Option<Spanned<f64>>,
    pub max_rescued_ratio: Option<Spanned<f64>>,
    pub retry_attempts: Option<Spanned<u64>>,
    pub retry_backoff: Option<HumanDuration>,
}

/// `[[flow.join]]`: a dimension table joined with each batch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinFile {
    /// A Delta table directory, or a CSV or Parquet file.
    pub table: String,
    /// `delta`, `csv` or `parquet` (default: from the path).
    pub format: Option<Spanned<String>>,
    /// The name the dimension has in SQL (default: the file or directory name).
    pub alias: Option<Spanned<String>>,
    /// Column names present on both sides, or a SQL condition over `batch.` and the alias.
    pub on: Spanned<JoinOnFile>,
    /// `inner` (default) or `left`.
    pub how: Option<Spanned<String>>,
    /// CSV only: the text that means null.
    pub null_value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum JoinOnFile {
    Columns(Vec<String>),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkFile {
    pub column: String,
    pub delay: HumanDuration,
    /// Rows whose event time is more than this ahead of the wall clock are set apart.
    pub max_future: Option<HumanDuration>,
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

/// A source: `type = "files"`, `"delta"` or `"kafka"`. One struct holds the keys of all; the
/// type is checked after parsing (a serde-tagged enum would lose the value spans that
/// error messages need), and keys its kind does not take are refused then, as the table
/// of keys (`pipeline::keys`) says: a new field here needs its row there.
pub type SourceFile = FilesSourceFile;

/// Delta's `startingVersion`: a version number or `"latest"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StartingVersionFile {
    Version(i64),
    Word(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSourceFile {
    #[serde(rename = "type")]
    pub kind: Spanned<String>,
    /// Files and Delta: the directory read.
    pub path: Option<String>,
    /// Kafka only (docs/kafka.md): `host:port[,host:port...]`.
    pub bootstrap_servers: Option<Spanned<String>>,
    /// Kafka only: the topics read.
    pub subscribe: Option<Spanned<Vec<String>>>,
    /// Kafka only: a regular expression matched against whole topic names.
    pub subscribe_pattern: Option<Spanned<String>>,
    /// Kafka only: `"earliest"`, `"latest"` (default) or per-partition JSON.
    pub starting_offsets: Option<Spanned<String>>,
    /// Kafka only: at most this many offsets per batch over all partitions.
    pub max_offsets_per_trigger: Option<Spanned<u64>>,
    /// Kafka only: wait for this many offsets (or `max_trigger_delay`) before a batch.
    pub min_offsets_per_trigger: Option<Spanned<u64>>,
    pub max_trigger_delay: Option<HumanDuration>,
    /// Kafka only: fail (default) or skip when offsets the checkpoint expects are gone.
    pub fail_on_data_loss: Option<Spanned<bool>>,
    /// Kafka only: add the `headers` column (Spark's `includeHeaders`).
    pub include_headers: Option<Spanned<bool>>,
    /// Kafka only: client settings under Kafka's names (`security.protocol`, `sasl.*`, ...).
    pub kafka: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    /// Files only: `csv`, `json` or `parquet`.
    pub format: Option<Spanned<FormatFile>>,
    /// Delta only: where a new flow starts (a version, or `"latest"`).
    pub starting_version: Option<Spanned<StartingVersionFile>>,
    /// Delta only: skip commits that rewrite data (Delta's `skipChangeCommits`).
    pub skip_change_commits: Option<Spanned<bool>>,
    /// Delta only: read the change data feed (Delta's `readChangeFeed`).
    pub read_change_feed: Option<Spanned<bool>>,
    /// Delta only, with `read_change_feed`: start at the first version committed at or
    /// after this ISO-8601 timestamp (Delta's `startingTimestamp`).
    pub starting_timestamp: Option<Spanned<String>>,
    /// Spark DDL, e.g. `"id BIGINT, ts TIMESTAMP"`. Inferred from the first files when absent.
    pub schema: Option<Spanned<String>>,
    #[serde(default = "default_true")]
    pub infer_column_types: bool,
    /// How many files schema inference samples (default 50).
    pub schema_inference_max_files: Option<usize>,
    /// How many bytes schema inference samples at most (at least one file is read).
    pub schema_inference_max_bytes: Option<ByteSize>,
    pub path_glob_filter: Option<Spanned<String>>,
    pub max_files_per_trigger: Option<Spanned<u64>>,
    pub max_bytes_per_trigger: Option<ByteSize>,
    pub min_file_age: Option<HumanDuration>,
    /// `"never"` (default) or `"inside_root"` (docs/sources.md#symbolic-links).
    pub follow_symlinks: Option<Spanned<String>>,
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
    /// A Delta table receiving records that cannot be parsed at all (one commit per batch).
    pub bad_records_table: Option<String>,
    /// Delta: object_store / deltalake options of the table's store (docs/object-storage.md).
    pub storage_options: Option<std::collections::BTreeMap<String, String>>,
    /// CSV and JSON: the files' character encoding (Spark's `encoding`, alias `charset`).
    #[serde(alias = "charset")]
    pub encoding: Option<Spanned<String>>,
    /// JSON: bare `NaN` / `Infinity` tokens are numbers (Spark's `allowNonNumericNumbers`).
    pub allow_non_numeric_numbers: Option<Spanned<bool>>,
    /// CSV and JSON: a longer record is a corrupt record (rescued or quarantined).
    pub max_record_size: Option<ByteSize>,
    /// CSV and JSON: a file larger than this once decompressed fails as a whole.
    pub max_file_size: Option<ByteSize>,
    /// CSV and JSON: `permissive` (default) or `failfast` (Spark's `mode`).
    pub mode: Option<Spanned<String>>,
    /// JSON inference: numbers with a fraction are decimals (Spark's `prefersDecimal`).
    pub prefers_decimal: Option<Spanned<bool>>,
    /// The zone of timestamp text without one (Spark's `spark.sql.session.timeZone`).
    pub session_time_zone: Option<Spanned<String>>,
    /// A Spark datetime pattern for timestamp text (Spark's `timestampFormat`).
    pub timestamp_format: Option<Spanned<String>>,
    /// Columns read from `key=value` directories (Auto Loader's `cloudFiles.partitionColumns`).
    pub partition_columns: Option<Spanned<Vec<String>>>,
    /// Infer partition column types (Spark's `partitionColumnTypeInference.enabled`).
    pub partition_column_type_inference: Option<Spanned<bool>>,
    /// Auto Loader's `includeExistingFiles`: `false` skips the files present at the first start.
    pub include_existing_files: Option<Spanned<bool>>,
    /// Auto Loader's `modifiedAfter`: only files modified after this timestamp.
    pub modified_after: Option<Spanned<String>>,
    /// Auto Loader's `cloudFiles.useNotifications`: file-system notifications instead of
    /// a listing per trigger.
    pub use_notifications: Option<Spanned<bool>>,
    /// Auto Loader's `cloudFiles.backfillInterval`: with notifications, a full listing this often.
    pub backfill_interval: Option<Spanned<HumanDuration>>,
    /// Auto Loader's `cloudFiles.useIncrementalListing` (object storage): `auto`, `true`, `false`.
    pub use_incremental_listing: Option<Spanned<String>>,
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

impl FormatFile {
    /// The value as written (`format = "csv"`).
    pub fn as_str(self) -> &'static str {
        match self {
            FormatFile::Json => "json",
            FormatFile::Csv => "csv",
            FormatFile::Parquet => "parquet",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvFile {
    pub header: Option<bool>,
    pub delimiter: Option<Spanned<String>>,
    pub quote: Option<Spanned<String>>,
    pub escape: Option<Spanned<String>>,
    pub null_value: Option<String>,
    /// What a quoted empty field `""` reads as in a string column (Spark's `emptyValue`).
    pub empty_value: Option<String>,
    /// Spark's `nanValue`, `positiveInf`, `negativeInf`.
    pub nan_value: Option<String>,
    pub positive_inf: Option<String>,
    pub negative_inf: Option<String>,
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
        /// Add new columns to the table (Delta `mergeSchema`). Default: true when the
        /// source evolves its schema (`schema_evolution = "add_new_columns"`), else false.
        merge_schema: Option<bool>,
        /// UNSAFE when false: skip the application-transaction check, so a batch replayed
        /// after a crash is appended again (duplicates). Only for proving `weir drill` can fail.
        #[serde(default = "default_true")]
        idempotent: bool,
        /// A new checkpoint may write into a table that already has data.
        #[serde(default)]
        allow_existing_table: bool,
        /// `"name"` / `"id"`: create the table with Delta column mapping
        /// (`delta.columnMapping.mode`), so any column name can be stored.
        column_mapping_mode: Option<String>,
        /// Delta table properties set when the sink creates the table
        /// (`delta.enableChangeDataFeed = "true"`, ...).
        #[serde(default)]
        table_properties: std::collections::BTreeMap<String, String>,
        /// Compact the table's small files (Delta OPTIMIZE) between batches this often.
        optimize_every: Option<HumanDuration>,
        /// object_store / deltalake options of the table's store (docs/object-storage.md).
        storage_options: Option<std::collections::BTreeMap<String, String>>,
    },
    /// Upsert each batch into a Delta table on `keys` (Delta MERGE) in one commit.
    DeltaMerge {
        path: String,
        keys: Vec<String>,
        /// Within a batch, the row with the greatest value of this column wins per key.
        order_by: Option<String>,
        #[serde(default)]
        partition_by: Vec<String>,
        /// A new checkpoint may write into a table that already has data.
        #[serde(default)]
        allow_existing_table: bool,
        /// Keys match when both are null (`<=>`); by default `=` never matches a null key.
        #[serde(default)]
        null_safe_keys: bool,
        /// Delta table properties set when the sink creates the table.
        #[serde(default)]
        table_properties: std::collections::BTreeMap<String, String>,
        /// Compact the table's small files (Delta OPTIMIZE) between batches this often.
        optimize_every: Option<HumanDuration>,
        /// object_store / deltalake options of the table's store (docs/object-storage.md).
        storage_options: Option<std::collections::BTreeMap<String, String>>,
    },
    /// Each batch into a PostgreSQL table in one transaction with its marker row
    /// (docs/sinks.md).
    Postgres {
        /// A libpq URL (`postgresql://user@host:port/db`); the password comes from
        /// `PGPASSWORD` or a passfile, never from the URL.
        url: String,
        table: String,
        /// Upsert on these columns (`INSERT ... ON CONFLICT (keys) DO UPDATE`).
        #[serde(default)]
        keys: Vec<String>,
        /// With `keys`: within a batch, the row with the greatest value of this column
        /// wins per key; a table row is never overwritten by an older one.
        order_by: Option<String>,
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
