//! A flow's sources: files (Auto Loader's options, docs/sources.md) or a Delta table
//! read as a stream (docs/delta-source.md).

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
}

impl SourceSpec {
    /// `files:csv`, `files:json`, `files:parquet` or `delta` (the plan record's source).
    pub fn kind(&self) -> String {
        match self {
            SourceSpec::Files(f) => format!("files:{}", f.format.as_str()),
            SourceSpec::Delta(_) => "delta".to_string(),
        }
    }

    /// The directory the source reads.
    pub fn path(&self) -> &Path {
        match self {
            SourceSpec::Files(f) => &f.path,
            SourceSpec::Delta(d) => &d.path,
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
    pub allow_overwrites: bool,
    pub schema_evolution: EvolutionMode,
    pub schema_hints: Option<String>,
    pub schema_location: Option<PathBuf>,
    pub bad_records_path: Option<PathBuf>,
    /// Delta table receiving unparseable records (`file`, `line`, `raw`, `error`, `batch_id`).
    pub bad_records_table: Option<PathBuf>,
}

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
    /// A field equal to this string is null (e.g. `NA`). The empty field is always null.
    pub null_value: Option<String>,
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
            comment: None,
        }
    }
}

/// Auto Loader's `cloudFiles.schemaEvolutionMode`, named in snake case in pipeline files.
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
        }
    }
}
