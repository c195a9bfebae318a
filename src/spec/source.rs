//! A flow's sources: files (Auto Loader's options, docs/sources.md), a Delta table
//! read as a stream (docs/delta-source.md), or Kafka topics (Spark's Kafka source,
//! docs/kafka.md).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per flow, built once
pub enum SourceSpec {
    Files(FilesSource),
    /// A Delta table read as a stream (docs/delta-source.md).
    Delta(DeltaSourceOptions),
    /// Kafka topics (Spark's Kafka source, docs/kafka.md).
    Kafka(KafkaSourceSpec),
}

impl SourceSpec {
    /// `files:csv`, `files:json`, `files:parquet` or `delta` (the plan record's source).
    pub fn kind(&self) -> String {
        match self {
            SourceSpec::Files(f) => format!("files:{}", f.format.as_str()),
            SourceSpec::Delta(_) => "delta".to_string(),
            SourceSpec::Kafka(k) => match &k.value_format {
                None => "kafka".to_string(),
                Some(v) => format!("kafka:{}", v.format.as_str()),
            },
        }
    }

    /// Where the source's unparseable records go: `bad_records_path` (a directory of JSON
    /// files) and `bad_records_table` (a Delta table); none for a Delta source.
    pub fn quarantine(&self) -> (Option<&Path>, Option<&Path>) {
        match self {
            SourceSpec::Files(f) => (
                f.bad_records_path.as_deref(),
                f.bad_records_table.as_deref(),
            ),
            SourceSpec::Kafka(k) => (
                k.bad_records_path.as_deref(),
                k.bad_records_table.as_deref(),
            ),
            SourceSpec::Delta(_) => (None, None),
        }
    }

    /// The directory the source reads; for Kafka, [`KafkaSourceSpec::locator`].
    pub fn path(&self) -> &Path {
        match self {
            SourceSpec::Files(f) => &f.path,
            SourceSpec::Delta(d) => &d.path,
            SourceSpec::Kafka(k) => &k.locator,
        }
    }
}

/// Auto Loader-style file source options.
#[derive(Debug, Clone)]
pub struct FilesSource {
    pub path: PathBuf,
    pub format: FileFormat,
    pub csv: CsvOptions,
    /// Given schema (data columns), or `None` to infer from the first files.
    pub schema: Option<SchemaRef>,
    pub infer_column_types: bool,
    pub schema_inference_max_files: usize,
    /// Bytes sampled for inference at most (Auto Loader's `sampleSize.numBytes`; at least one file).
    pub schema_inference_max_bytes: u64,
    pub path_glob_filter: Option<glob::Pattern>,
    pub max_files_per_trigger: u64,
    pub max_bytes_per_trigger: Option<u64>,
    pub min_file_age: Duration,
    /// Symbolic links below `path`: skipped (default) or followed inside the root.
    pub follow_symlinks: FollowSymlinks,
    pub allow_overwrites: bool,
    pub schema_evolution: EvolutionMode,
    pub schema_hints: Option<String>,
    pub schema_location: Option<PathBuf>,
    pub bad_records_path: Option<PathBuf>,
    /// Delta table receiving unparseable records (`file`, `line`, `raw`, `error`, `batch_id`).
    pub bad_records_table: Option<PathBuf>,
    /// Encoding, non-finite numbers, record size, time zone and timestamp pattern.
    pub text: TextOptions,
    /// Columns read from `key=value` directories; `None`: discovered at inference.
    pub partition_columns: Option<Vec<String>>,
    /// Infer the partition columns' types (else STRING).
    pub partition_column_type_inference: bool,
    /// Auto Loader's `includeExistingFiles`: `false` skips the files present when the
    /// stream first starts (they are recorded in the ledger as `existing`).
    pub include_existing_files: bool,
    /// Auto Loader's `modifiedAfter`: only files modified after this instant (ms since the epoch).
    pub modified_after_ms: Option<i64>,
    /// Auto Loader's `cloudFiles.useNotifications`: learn of new files from file-system
    /// notifications (inotify) instead of listing the directory every trigger.
    pub use_notifications: bool,
    /// Auto Loader's `cloudFiles.backfillInterval`: with notifications, a full listing
    /// this often finds files the notifications missed; on object storage with
    /// incremental listing, a full listing this often finds keys listed out of order.
    pub backfill_interval: Duration,
    /// Auto Loader's `cloudFiles.useIncrementalListing` (object storage only): list the
    /// keys after the last key seen instead of the whole prefix.
    pub use_incremental_listing: IncrementalListing,
}

/// Default `backfill_interval` with `use_notifications` (Auto Loader has none by default).
pub const DEFAULT_BACKFILL_INTERVAL: Duration = Duration::from_secs(60);

/// Default bound on the bytes schema inference reads (Auto Loader's default, 50 GB).
pub const DEFAULT_INFERENCE_MAX_BYTES: u64 = 50_000_000_000;

/// Default `max_files_per_trigger` (Auto Loader's default).
pub const DEFAULT_MAX_FILES_PER_TRIGGER: u64 = 1000;

/// File format of a file source (Auto Loader's `cloudFiles.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// Newline-delimited JSON (JSON lines), one object per line.
    Json,
    /// Delimited text with an optional header line.
    Csv,
    /// Apache Parquet.
    Parquet,
}

impl FileFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            FileFormat::Json => "json",
            FileFormat::Csv => "csv",
            FileFormat::Parquet => "parquet",
        }
    }
}

/// CSV dialect. Defaults follow Spark's CSV reader: header on, `,`, `"`, `\`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CsvOptions {
    /// The first line names the columns; columns are matched to the schema by name per file.
    pub header: bool,
    pub delimiter: u8,
    pub quote: u8,
    /// Escape character inside quoted fields; `None` means quotes are doubled (RFC 4180).
    pub escape: Option<u8>,
    /// A field equal to this string is null (e.g. `NA`), quoted or not (Spark's `nullValue`).
    /// An unquoted empty field is always null.
    pub null_value: Option<String>,
    /// What a quoted empty field (`""`) reads as in a string column (Spark's `emptyValue`,
    /// default the empty string); in other columns it is null.
    pub empty_value: String,
    /// The text of a not-a-number in a float or double column (Spark's `nanValue`).
    pub nan_value: String,
    /// The text of positive infinity (Spark's `positiveInf`).
    pub positive_inf: String,
    /// The text of negative infinity (Spark's `negativeInf`).
    pub negative_inf: String,
    /// Lines starting with this byte are skipped.
    pub comment: Option<u8>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            header: true,
            delimiter: b',',
            quote: b'"',
            escape: None,
            null_value: None,
            empty_value: String::new(),
            nan_value: "NaN".into(),
            positive_inf: "Inf".into(),
            negative_inf: "-Inf".into(),
            comment: None,
        }
    }
}

impl CsvOptions {
    /// The canonical spelling (`NaN`, `inf`, `-inf`, which Arrow's float parser reads)
    /// of a non-finite value written with this dialect's `nan_value` / `positive_inf`
    /// / `negative_inf`; `None` for any other text.
    pub fn non_finite(&self, text: &str) -> Option<&'static str> {
        if text == self.nan_value {
            Some("NaN")
        } else if text == self.positive_inf {
            Some("inf")
        } else if text == self.negative_inf {
            Some("-inf")
        } else {
            None
        }
    }
}

/// Options of the text formats (CSV and JSON lines) that are not part of a CSV dialect.
#[derive(Debug, Clone, PartialEq)]
pub struct TextOptions {
    /// The files' character encoding (Spark's `encoding` / `charset`); UTF-8 by default.
    pub encoding: TextEncoding,
    /// JSON: read the bare tokens `NaN`, `Infinity`, `+Infinity`, `-Infinity`, `+INF`,
    /// `-INF` (and those spellings as strings in a float column) as values (Spark's
    /// `allowNonNumericNumbers`, default true).
    pub allow_non_numeric_numbers: bool,
    /// A record (JSON line, CSV record) longer than this many bytes is a corrupt record.
    pub max_record_bytes: Option<u64>,
    /// A CSV or JSON file larger than this many bytes once decompressed is not read (a
    /// gzip bomb, a runaway export): it fails as a whole, named, and its rows are not
    /// ingested ([`DEFAULT_MAX_FILE_BYTES`] unless `max_file_size` says otherwise).
    pub max_file_bytes: u64,
    /// How timestamp text is read.
    pub timestamps: super::time::TimestampOptions,
    /// What a malformed record does (Spark's `mode`): kept (`permissive`) or fatal (`failfast`).
    pub mode: ParseMode,
    /// JSON inference: a number with a fraction is a `DECIMAL(p,s)` instead of a `DOUBLE`
    /// (Spark's `prefersDecimal`, default false).
    pub prefers_decimal: bool,
}

/// `max_file_size`'s default: 1 GiB of decompressed CSV or JSON per file. A file is
/// decoded whole, so this bounds the memory one file can take (about 2-3x this while
/// its Arrow columns are built).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 30;

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            encoding: TextEncoding::Utf8,
            allow_non_numeric_numbers: true,
            max_record_bytes: None,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            timestamps: Default::default(),
            mode: ParseMode::Permissive,
            prefers_decimal: false,
        }
    }
}

/// What a CSV or JSON reader does with a malformed record (Spark's `mode` option).
/// Spark's third mode, `DROPMALFORMED`, is not offered: weir never drops a record silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParseMode {
    /// Keep it: a corrupt record is a row of nulls with its raw text in `_rescued_data`
    /// (or in the quarantine), a value that does not fit its column is rescued.
    #[default]
    Permissive,
    /// Fail the batch at the first malformed record, before anything is written, naming
    /// the file and the line.
    FailFast,
}

impl ParseMode {
    /// The values a pipeline file may use, for error messages.
    pub const ALLOWED: &'static str = "\"permissive\" (the default) or \"failfast\"";

    pub fn as_str(self) -> &'static str {
        match self {
            ParseMode::Permissive => "permissive",
            ParseMode::FailFast => "failfast",
        }
    }

    /// Spark's spelling (`PERMISSIVE`, `FAILFAST`).
    pub fn spark_name(self) -> &'static str {
        match self {
            ParseMode::Permissive => "PERMISSIVE",
            ParseMode::FailFast => "FAILFAST",
        }
    }
}

impl FromStr for ParseMode {
    type Err = String;

    /// Case-insensitive, as Spark's `ParseMode.fromString`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "permissive" => Ok(ParseMode::Permissive),
            "failfast" => Ok(ParseMode::FailFast),
            "dropmalformed" => Err(
                "mode = \"dropmalformed\" is not offered: Spark's DROPMALFORMED discards malformed \
                 records without a trace, and weir never drops a record silently. Use mode = \"permissive\" \
                 (the default: a malformed record is kept, its raw text in _rescued_data, or in the \
                 quarantine with bad_records_path / bad_records_table, and counted in numRecordsCorrupt) \
                 or mode = \"failfast\" (the batch stops at the first malformed record, naming file and line)"
                    .to_string(),
            ),
            other => Err(format!("invalid mode {other:?}; allowed: {}", Self::ALLOWED)),
        }
    }
}

/// A character encoding of text files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEncoding {
    /// UTF-8 (a leading byte-order mark is dropped); invalid bytes are rescued, never replaced.
    Utf8,
    /// ISO-8859-1 as Java reads it: one character per byte, U+0000..=U+00FF.
    Latin1,
    /// Any other WHATWG encoding (windows-1252, UTF-16LE, Shift_JIS, ...), decoded with
    /// `encoding_rs`; a byte sequence the encoding does not define becomes U+FFFD.
    Other(&'static encoding_rs::Encoding),
}

impl TextEncoding {
    /// The encoding a Spark `encoding` name means; `Err` says what is allowed.
    pub fn from_label(label: &str) -> Result<Self, String> {
        let folded = label.trim().to_ascii_lowercase().replace('_', "-");
        match folded.as_str() {
            "utf-8" | "utf8" => return Ok(TextEncoding::Utf8),
            // Java's ISO-8859-1 is byte = code point; WHATWG maps the label to windows-1252.
            "iso-8859-1" | "iso8859-1" | "latin1" | "latin-1" | "l1" | "8859-1" | "cp819"
            | "iso-ir-100" => return Ok(TextEncoding::Latin1),
            _ => {}
        }
        match encoding_rs::Encoding::for_label(folded.as_bytes()) {
            Some(e) if e == encoding_rs::UTF_8 => Ok(TextEncoding::Utf8),
            Some(e) if e == encoding_rs::REPLACEMENT => Err(format!(
                "encoding {label:?} cannot be decoded safely; use UTF-8, ISO-8859-1, windows-1252, UTF-16LE, ..."
            )),
            Some(e) => Ok(TextEncoding::Other(e)),
            None => Err(format!(
                "unknown encoding {label:?}; use a standard name such as \"UTF-8\", \"ISO-8859-1\", \"windows-1252\", \"UTF-16LE\", \"Shift_JIS\""
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TextEncoding::Utf8 => "UTF-8",
            TextEncoding::Latin1 => "ISO-8859-1",
            TextEncoding::Other(e) => e.name(),
        }
    }
}

/// Auto Loader's `cloudFiles.schemaEvolutionMode`, named in snake case in pipeline files.
/// How a files source's listing treats symbolic links below its `path`
/// (docs/sources.md#symbolic-links).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FollowSymlinks {
    /// Links are skipped (and logged once): a link to `/etc/shadow` or `/` is never read.
    #[default]
    Never,
    /// Links whose real target is inside the source's path are followed; each real
    /// directory and file is listed once (loops and aliases are cut).
    InsideRoot,
}

/// Whether a files source on object storage lists only the keys after the last one seen
/// (Auto Loader's `cloudFiles.useIncrementalListing`; docs/object-storage.md#files-source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncrementalListing {
    /// Incrementally while a full listing finds the keys in arrival order (modification
    /// times never decreasing in key order), else the whole prefix.
    #[default]
    Auto,
    /// Always from the last key seen (keys are lexically ordered by arrival, e.g. dates),
    /// with a full listing every `backfill_interval`.
    True,
    /// The whole prefix every trigger.
    False,
}

impl std::str::FromStr for IncrementalListing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(IncrementalListing::Auto),
            "true" => Ok(IncrementalListing::True),
            "false" => Ok(IncrementalListing::False),
            other => Err(format!(
                "invalid use_incremental_listing {other:?}; use \"auto\" (the default), \"true\" or \"false\" (Auto Loader's cloudFiles.useIncrementalListing)"
            )),
        }
    }
}

impl std::str::FromStr for FollowSymlinks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "never" => Ok(FollowSymlinks::Never),
            "inside_root" => Ok(FollowSymlinks::InsideRoot),
            other => Err(format!(
                "invalid follow_symlinks {other:?}; use \"never\" (the default: links are skipped) or \"inside_root\" (links whose target is inside the source's path are followed)"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvolutionMode {
    /// Record a wider schema with the new fields (and stop, so the next start uses it).
    #[serde(alias = "addNewColumns")]
    AddNewColumns,
    /// Never change the schema; new fields stay in `_rescued_data`.
    Rescue,
    /// Stop with an error naming the new fields until the schema is updated.
    #[serde(alias = "failOnNewColumns")]
    FailOnNewColumns,
    /// Never change the schema and ignore new fields (their values are still rescued).
    None,
}

impl EvolutionMode {
    /// The values a pipeline file may use, for error messages.
    pub const ALLOWED: &'static str =
        "\"add_new_columns\", \"rescue\", \"fail_on_new_columns\", \"none\"";

    /// Auto Loader's default: `add_new_columns` when the schema is inferred, `none` when it is given.
    pub fn default_for(schema_given: bool) -> Self {
        if schema_given {
            EvolutionMode::None
        } else {
            EvolutionMode::AddNewColumns
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EvolutionMode::AddNewColumns => "add_new_columns",
            EvolutionMode::Rescue => "rescue",
            EvolutionMode::FailOnNewColumns => "fail_on_new_columns",
            EvolutionMode::None => "none",
        }
    }
}

impl fmt::Display for EvolutionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EvolutionMode {
    type Err = String;

    /// The snake-case names, and Auto Loader's camel-case spellings.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "add_new_columns" | "addNewColumns" => Ok(EvolutionMode::AddNewColumns),
            "rescue" => Ok(EvolutionMode::Rescue),
            "fail_on_new_columns" | "failOnNewColumns" => Ok(EvolutionMode::FailOnNewColumns),
            "none" => Ok(EvolutionMode::None),
            other => Err(format!(
                "invalid schema_evolution {other:?}; allowed: {}",
                Self::ALLOWED
            )),
        }
    }
}

/// Spark's default `maxFilesPerTrigger` for the Delta source.
pub const DEFAULT_DELTA_MAX_FILES_PER_TRIGGER: u64 = 1000;

/// Where a new query (no offset yet) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingVersion {
    /// The changes committed at this version and after (`startingVersion = V`).
    Version(u64),
    /// Only commits after the table's version when the query starts (`startingVersion = latest`).
    Latest,
}

/// Options of a Delta source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaSourceOptions {
    /// The table's directory.
    pub path: PathBuf,
    /// `None`: the first batch is a snapshot of the table, then its later commits.
    pub starting_version: Option<StartingVersion>,
    /// Upper bound on the files of a batch (at least 1 is taken).
    pub max_files_per_trigger: u64,
    /// Soft upper bound on the bytes of a batch: a batch always takes at least one file.
    pub max_bytes_per_trigger: Option<u64>,
    /// Skip commits that remove data (Delta's `skipChangeCommits`) instead of failing.
    pub skip_change_commits: bool,
    /// Read the table's change data feed (Delta's `readChangeFeed`): rows with
    /// `_change_type`, `_commit_version`, `_commit_timestamp` (docs/delta-source.md).
    pub read_change_feed: bool,
    /// Delta's `startingTimestamp` (ms since the epoch, UTC): the first version committed
    /// at or after it (change data feed reads only).
    pub starting_timestamp_ms: Option<i64>,
}

impl DeltaSourceOptions {
    /// The defaults (snapshot first, 1,000 files per batch, no byte bound, rewrites refused).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        DeltaSourceOptions {
            path: path.into(),
            starting_version: None,
            max_files_per_trigger: DEFAULT_DELTA_MAX_FILES_PER_TRIGGER,
            max_bytes_per_trigger: None,
            skip_change_commits: false,
            read_change_feed: false,
            starting_timestamp_ms: None,
        }
    }
}

/// Spark's default `maxTriggerDelay` of the Kafka source (15 minutes).
pub const DEFAULT_KAFKA_MAX_TRIGGER_DELAY: Duration = Duration::from_secs(15 * 60);

/// Which topics a Kafka source reads (Spark's `subscribe` / `subscribePattern`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaSubscribe {
    Topics(Vec<String>),
    /// A regular expression matched against whole topic names.
    Pattern(String),
}

/// A Kafka source as declared (Spark's option names in snake case, docs/kafka.md);
/// `source::kafka` turns it into a client's options.
#[derive(Debug, Clone)]
pub struct KafkaSourceSpec {
    /// `host:port[,host:port...]` (Spark's `kafka.bootstrap.servers`).
    pub bootstrap_servers: String,
    pub subscribe: KafkaSubscribe,
    /// `"earliest"`, `"latest"` (default) or Spark's per-partition JSON.
    pub starting_offsets: String,
    pub max_offsets_per_trigger: Option<u64>,
    pub min_offsets_per_trigger: Option<u64>,
    pub max_trigger_delay: Duration,
    /// Default true.
    pub fail_on_data_loss: bool,
    /// Spark's `includeHeaders` (default false).
    pub include_headers: bool,
    /// Client settings under Kafka's names (`security.protocol`, `sasl.*`, `ssl.ca.location`,
    /// `request.timeout.ms`), `[flow.source.kafka]`.
    pub client: std::collections::BTreeMap<String, String>,
    /// `format = "json"|"csv"`: `value` parsed with the files source's rescuing decoders.
    pub value_format: Option<KafkaValueFormat>,
    /// Where records that cannot be parsed at all go (with `format`), as for files.
    pub bad_records_path: Option<PathBuf>,
    pub bad_records_table: Option<PathBuf>,
    /// What the checkpoint's plan records as the source's "path": `kafka:Subscribe[a,b]` or
    /// `kafka:SubscribePattern[p]` (a changed subscription is refused at restart, as
    /// Spark's guide says changing subscribed topics is not allowed).
    pub locator: PathBuf,
}

impl KafkaSourceSpec {
    /// The locator of a subscription (see [`KafkaSourceSpec::locator`]).
    pub fn locator_of(subscribe: &KafkaSubscribe) -> PathBuf {
        PathBuf::from(match subscribe {
            KafkaSubscribe::Topics(t) => format!("kafka:Subscribe[{}]", t.join(",")),
            KafkaSubscribe::Pattern(p) => format!("kafka:SubscribePattern[{p}]"),
        })
    }
}

/// How a Kafka source parses `value` (the `format` shortcut).
#[derive(Debug, Clone)]
pub struct KafkaValueFormat {
    /// `Json` or `Csv`.
    pub format: FileFormat,
    /// The value's columns (Spark DDL `schema`, required).
    pub schema: SchemaRef,
    /// CSV dialect (`header` is always false: a value is one record).
    pub csv: CsvOptions,
    pub text: TextOptions,
}
