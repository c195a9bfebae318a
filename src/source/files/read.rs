//! Decoding one source file (JSON lines, CSV, Parquet) into Arrow batches of a
//! given schema, with Auto Loader's `_rescued_data` so that no value is lost.
//!
//! [`decode_file`] is a pure function of the file's bytes and a [`ReadSpec`]; the
//! engine decides which files to read and bounds how many bytes a batch reads.
//!
//! # The rules
//!
//! **Whole file, then bytes.** A JSON or CSV file is read into memory in one go. If its first
//! two bytes are the gzip magic `1F 8B` it is gunzipped, whatever its name says,
//! and every gzip member is decoded (concatenated gzip files are one stream). A
//! truncated or damaged gzip makes the whole file [`FileReadError::Corrupt`]: no
//! row of it is returned, not even the lines that were decodable before the damage,
//! so the file can be re-ingested whole once a complete copy lands. A UTF-8 byte-order
//! mark at the start of the (decompressed) text is dropped. A 0-byte or blank file
//! has 0 rows and no error.
//!
//! **Output.** Every batch has the schema [`output_schema`]: the spec's columns,
//! all nullable (like Spark, a file source reads every column as nullable, whatever
//! the declared schema says), followed by `_rescued_data: Utf8` when
//! [`ReadSpec::rescued_data`] is on. Rows keep the file's order. Batches hold at
//! most [`BATCH_ROWS`] rows; a file with no rows yields no batch.
//!
//! **`_rescued_data`.** A value that does not fit its column, and a field the schema
//! does not have, is moved to `_rescued_data` instead of being dropped: a JSON object
//! text with the rescued fields in file order, followed by `"_file_path": "<path>"`.
//! The column is null for a row where nothing was rescued. A null value is never
//! rescued (nothing is lost by dropping it). Names are matched exactly: a field
//! whose name differs from a column only by letter case is rescued under its own
//! spelling (weir's Delta tables are case-insensitive, so it can never become a
//! second column). [`DecodedFile::num_rows_rescued`] counts rows with at least one
//! rescued value (corrupt records are counted apart).
//!
//! **Corrupt records.** A JSON line that is not a JSON object (broken syntax; bare
//! `NaN`/`Infinity` tokens when [`TextOptions::allow_non_numeric_numbers`] is off),
//! and a JSON line or CSV record longer than [`TextOptions::max_record_bytes`],
//! becomes a row whose data columns are all null and whose `_rescued_data` is
//! `{"_corrupt_record": "<raw text>", "_error": "<why>", "_file_path": "<path>", "_line": N}`
//! (keys in this order; N counts lines from 1 in the decompressed file; for CSV it is
//! the line where the record starts; raw bytes that are not UTF-8 are shown decoded as
//! ISO-8859-1). It is counted in [`DecodedFile::num_records_corrupt`]; the other
//! records of the file are kept. With a `bad_records_path` the engine moves these rows
//! to the quarantine instead of the table ([`crate::sink::quarantine`]).
//!
//! **Encodings.** Files are read as [`TextOptions::encoding`] (UTF-8 by default; a
//! leading byte-order mark is dropped), transcoded to UTF-8 before parsing. In a
//! UTF-8 file, a field whose bytes are not UTF-8 (a Latin-1 `ü`, a cut multi-byte
//! character) is null in its column and rescued under its name as the raw bytes
//! decoded as ISO-8859-1 (one character per byte, U+0000..U+00FF, so the original
//! bytes can be recovered exactly), with an `_error` naming the field(s); the rest
//! of the row is kept. weir never decodes lossily into the table.
//!
//! The other text options (non-finite numbers, `""` vs empty vs null in CSV,
//! Spark's safe CSV header names, the session time zone and `timestamp_format`,
//! partition columns from `key=value` directories) are documented with their
//! Spark / Auto Loader sources in `docs/sources.md`; see also [`crate::spec::time`] and
//! [`super::partition`].
//!
//! **Drift.** Besides the rows, each file reports what it shows beyond the schema:
//! [`DecodedFile::new_fields`], the fields the schema lacks (top level, and nested
//! inside structs, list items and map values), each once with the type the typed
//! inference rules of [`crate::schema::infer`] give its values in this file
//! ([`DataType::Null`] when every value is null); and
//! [`DecodedFile::type_mismatches`], per known field the number of values that did
//! not fit its type. A name differing from a known field only by letter case is not
//! a new field (its values are rescued), and between two new spellings the first one
//! in the file wins; CSV fields without a name of their own (past the header's
//! width, an empty or repeated header name) are not new fields either, except in a
//! file without a header, where a field past the schema's width is the new column
//! `_c<index>` as inference names it. The values themselves are rescued as always;
//! [`crate::schema::evolve`] decides what the new fields do to the schema.
//!
//! **Without `_rescued_data`** ([`ReadSpec::rescued_data`] = false) a value that does
//! not fit leaves its column null and is still counted in `num_rows_rescued`;
//! corrupt records are still all-null rows counted in `num_records_corrupt`. The
//! counts are the only trace, which is why the engine enables the column by default.
//!
//! ## JSON lines
//!
//! One JSON object per line; `\r\n` line ends are accepted; blank lines are skipped.
//! Each line is parsed with `serde_json` and every field is checked against its column:
//!
//! | column type | accepted JSON values | stored as |
//! |---|---|---|
//! | string | any value | strings as is; numbers and booleans as their JSON text (`19` -> `"19"`); objects and arrays as their compact JSON text (Spark does the same) |
//! | bigint, int, smallint, tinyint | integer literals within the type's range | the integer; `5.5`, `4.0`, `"3"` and out-of-range integers are rescued, never truncated |
//! | double, float | any number (integers included); bare `NaN`/`Infinity`/`+INF`/... tokens and those spellings as strings | the number; other strings are rescued; a value beyond `float`'s range is rescued |
//! | boolean | `true`, `false` | the value |
//! | date | `"YYYY-MM-DD"` | the day |
//! | timestamp, timestamp_ntz | ISO-8601 strings (`T` or space; `Z`, `+hh:mm` or no zone = the session time zone, UTC by default) or `timestamp_format` text; integers = **seconds** since the epoch (Spark's cast of a number to timestamp) | microseconds; fractional numbers are rescued, and so is any value outside years 0001..=9999 (Spark's and Delta's range), which is how a number in milliseconds or microseconds (year 50,000+ when read as seconds) ends in `_rescued_data` instead of a wrong date |
//! | decimal(p,s) | numbers (written without an exponent) | rounded half-up to `s` digits like Spark's cast; rescued when more than `p - s` integer digits |
//! | binary | base64 strings (Spark's JSON encoding of binary) | the decoded bytes |
//! | array<T> | arrays whose every element fits `T` | otherwise the whole array is rescued |
//! | map<string,T> | objects whose every value fits `T` | otherwise the whole object is rescued |
//! | struct<...> | objects | fields matched by exact name, recursively |
//!
//! A field inside a struct that the struct does not have is rescued with its nested
//! path written as nested objects: `{"id":3,"meta":{"src":"app","ver":2}}` read with
//! `meta struct<src>` keeps `meta.src` and rescues `{"meta":{"ver":2}}`. A dotted key
//! is never a path (a top-level field literally named `meta.ver` is rescued as
//! `"meta.ver"`), so the two cannot be confused. JSON numbers are parsed as 64-bit
//! integers or doubles: a number with more significant digits than a double holds
//! reaches a double or decimal column (and `_rescued_data`) as a double (serde_json's
//! default parser may be one unit in the last place off for such long literals).
//! The cleaned objects are then turned into columns by arrow-json's `Decoder::serialize`.
//!
//! ## CSV
//!
//! Parsed with the `csv` crate in flexible mode with the dialect of [`CsvOptions`]:
//! quoted fields may hold the delimiter, doubled quotes and line breaks (kept as in
//! the file, `\r\n` included); lines may end in `\n`, `\r\n` or `\r`. With a header,
//! columns are matched **by name, per file**: a file may order its columns
//! differently, lack some (they are null) or have more (rescued under their header
//! name). Header names are first made safe as Spark does ([`safe_header`]: empty ->
//! `_c<index>`, repeated also by case -> name + index). Without a header, fields are
//! matched by position. A field past the header's width is rescued as `_c<index>`
//! (0-based field index). A short row has its missing fields null. An unquoted
//! empty field and a field equal to `null_value` are null; a quoted `""` is
//! `empty_value` in a string column and null elsewhere.
//!
//! Each column is first built as strings and then converted with Arrow's `cast`
//! kernel (safe mode). A value that was not null before the cast and is null after
//! it did not fit, and is rescued as its original string (`"salinity":"35.1"`).
//! Conversions are therefore Arrow's: numbers as Arrow's parsers read them,
//! `true`/`false` (and Arrow's other boolean spellings) for booleans, ISO-8601
//! text for timestamps (no zone = UTC; a number is not read as epoch seconds in
//! CSV), decimals rounded half-up. An array column gets a one-element array per
//! value (Arrow's cast); struct and map columns cannot be cast from text, so all
//! their values are rescued.
//!
//! ## Parquet
//!
//! Read with the Parquet Arrow reader straight from the file (Parquet compresses
//! internally, so the gzip sniffing above does not apply). Columns are matched by
//! exact name; a column whose type differs is converted with the `cast` kernel;
//! values the cast rejects, and non-null values of columns the schema lacks, are
//! rescued as their JSON form (as written by arrow-json). Missing columns are null.
//! Struct columns are matched field by field by name (recursively), like JSON
//! objects: a nested field the schema lacks is rescued under its nested path
//! (`{"meta":{"ver":1}}`) while the known fields stay in the column.
//! A 0-byte Parquet file has 0 rows; a file whose footer cannot be read is
//! [`FileReadError::Corrupt`].

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};

use super::partition::Partitioning;
use crate::schema::RESCUED_DATA_COLUMN;
use crate::spec::{CsvOptions, FileFormat, TextEncoding, TextOptions};

pub(crate) mod csv_fast;
mod csv_file;
mod drift;
mod json_fast;
pub(crate) mod json_lines;
pub(crate) mod parquet_file;
mod rescue;

pub use crate::schema::evolve::{FieldMismatch, NewField};

pub(crate) use csv_file::{reader_builder as csv_reader_builder, safe_header};

/// Most rows in one decoded batch.
pub const BATCH_ROWS: usize = 8192;

/// Characters of a malformed record shown in a failfast error.
pub const MALFORMED_RECORD_SHOWN: usize = 200;

/// How to decode a file.
#[derive(Debug, Clone)]
pub struct ReadSpec {
    pub format: FileFormat,
    /// CSV dialect (ignored for other formats).
    pub csv: CsvOptions,
    /// The data columns (without `_rescued_data`), partition columns included.
    pub schema: SchemaRef,
    /// Append the `_rescued_data` column.
    pub rescued_data: bool,
    /// Encoding, non-finite numbers, record size and timestamps of CSV and JSON.
    pub text: TextOptions,
    /// Columns whose values come from `key=value` directories (none: every column is data).
    pub partitions: Option<Arc<Partitioning>>,
    /// Open a listed path through a symbolic link (`follow_symlinks = "inside_root"`,
    /// whose listing checked the link's target); otherwise `O_NOFOLLOW`.
    pub follow_links: bool,
    /// The landing zone on object storage the files are objects of (their paths are
    /// URLs): each is fetched whole and decoded from its bytes.
    pub remote: Option<super::remote::Landing>,
}

impl ReadSpec {
    /// A spec with the default options (no partition columns).
    pub fn new(format: FileFormat, schema: SchemaRef) -> Self {
        ReadSpec {
            format,
            csv: CsvOptions::default(),
            schema,
            rescued_data: true,
            text: TextOptions::default(),
            partitions: None,
            follow_links: false,
            remote: None,
        }
    }
}

/// The listing's view of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub path: PathBuf,
    pub size: u64,
    pub modification_time_ms: i64,
}

impl FileMeta {
    /// Reads size and modification time from the file system.
    pub fn from_path(path: impl Into<PathBuf>) -> Result<Self, FileReadError> {
        let path = path.into();
        let metadata = std::fs::metadata(&path).map_err(|source| FileReadError::Io {
            path: path.clone(),
            source,
        })?;
        let modification_time_ms = metadata
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .unwrap_or(0);
        Ok(FileMeta {
            path,
            size: metadata.len(),
            modification_time_ms,
        })
    }
}

/// The rows of one file.
#[derive(Debug, Clone, Default)]
pub struct DecodedFile {
    /// Each with schema [`output_schema`]; at most [`BATCH_ROWS`] rows each; none when the file has no rows.
    pub batches: Vec<RecordBatch>,
    /// All rows, corrupt records included.
    pub num_rows: usize,
    /// Rows (not corrupt records) with at least one rescued value.
    pub num_rows_rescued: usize,
    /// Records that could not be parsed at all.
    pub num_records_corrupt: usize,
    /// Fields present in the file and absent from the schema (see "Drift" above).
    pub new_fields: Vec<NewField>,
    /// Known fields with values that did not fit their type (all rescued), with counts.
    pub type_mismatches: Vec<FieldMismatch>,
}

/// Why a file could not be decoded.
#[derive(thiserror::Error, Debug)]
pub enum FileReadError {
    /// The file could not be read (permission denied, vanished, ...). Retrying may help.
    #[error("cannot read source file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The whole file is unusable (truncated gzip, bad Parquet footer). No row of it is returned.
    #[error("source file {path} is corrupt: {message}")]
    Corrupt { path: PathBuf, message: String },
    /// The file's path does not fit the source's partition layout (`date=.../region=...`).
    #[error("source file {path} {message}")]
    Layout { path: PathBuf, message: String },
    /// The schema has a column type this format's reader cannot produce.
    #[error("source file {path}: {message}")]
    Unsupported { path: PathBuf, message: String },
    /// `mode = "failfast"`: the first malformed record of the file (a record that cannot
    /// be parsed, or a value that does not fit its column). No row of the file is returned.
    #[error("source file {path}, line {line}: malformed record: {message} (record: {record})")]
    Malformed {
        path: PathBuf,
        /// Counted from 1 in the decompressed text (CSV: where the record starts).
        line: usize,
        /// What is wrong with it.
        message: String,
        /// The record's text, cut to [`MALFORMED_RECORD_SHOWN`] characters.
        record: String,
    },
    /// An Arrow kernel failed where it should not: a bug in weir, not in the data.
    #[error("internal error decoding {path}: {message}")]
    Internal { path: PathBuf, message: String },
    /// The object store failed to answer for the object (not found is [`FileReadError::Io`]):
    /// the batch stops, nothing of it is recorded, and it is read again later.
    #[error("cannot read source object {path}: {source}")]
    Store {
        path: PathBuf,
        #[source]
        source: Box<crate::storage::StorageError>,
    },
}

impl FileReadError {
    /// The file involved.
    pub fn path(&self) -> &std::path::Path {
        match self {
            FileReadError::Io { path, .. }
            | FileReadError::Corrupt { path, .. }
            | FileReadError::Layout { path, .. }
            | FileReadError::Unsupported { path, .. }
            | FileReadError::Malformed { path, .. }
            | FileReadError::Internal { path, .. }
            | FileReadError::Store { path, .. } => path,
        }
    }

    /// Whether reading the same file again later can succeed without a change by a person
    /// (a corrupt file is retried only when a new version of it lands).
    pub fn retryable(&self) -> bool {
        matches!(self, FileReadError::Io { .. } | FileReadError::Store { .. })
    }

    /// The failfast error of the record `raw` at `line`.
    pub(crate) fn malformed(
        path: &std::path::Path,
        line: usize,
        message: impl Into<String>,
        raw: &[u8],
    ) -> Self {
        let (text, _) = corrupt_text(raw);
        let mut record: String = text.chars().take(MALFORMED_RECORD_SHOWN).collect();
        if text.chars().nth(MALFORMED_RECORD_SHOWN).is_some() {
            record.push_str("...");
        }
        FileReadError::Malformed {
            path: path.to_path_buf(),
            line,
            message: message.into(),
            record: format!("{record:?}"),
        }
    }

    pub(crate) fn internal(path: &std::path::Path, error: impl std::fmt::Display) -> Self {
        FileReadError::Internal {
            path: path.to_path_buf(),
            message: error.to_string(),
        }
    }
}

/// The schema of the decoded batches: the spec's data columns made nullable, then
/// `_rescued_data: Utf8` when enabled. A data column named `_rescued_data` in the
/// spec is dropped (the column is the reader's, not the file's).
pub fn output_schema(spec: &ReadSpec) -> SchemaRef {
    let mut fields: Vec<FieldRef> = data_fields(&spec.schema).iter().cloned().collect();
    if spec.rescued_data {
        fields.push(Arc::new(Field::new(
            RESCUED_DATA_COLUMN,
            DataType::Utf8,
            true,
        )));
    }
    Arc::new(Schema::new(fields))
}

/// The spec's data columns, all nullable, without a `_rescued_data` column.
fn data_fields(schema: &Schema) -> Fields {
    schema
        .fields()
        .iter()
        .filter(|f| f.name() != RESCUED_DATA_COLUMN)
        .map(|f| Arc::new(nullable_field(f)))
        .collect()
}

fn nullable_field(field: &Field) -> Field {
    field
        .clone()
        .with_data_type(nullable_type(field.data_type()))
        .with_nullable(true)
}

/// The same type with every nested field nullable (map keys and entries excepted: Arrow requires them).
pub(crate) fn nullable_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(|f| Arc::new(nullable_field(f))).collect())
        }
        DataType::List(item) => DataType::List(Arc::new(nullable_field(item))),
        DataType::LargeList(item) => DataType::LargeList(Arc::new(nullable_field(item))),
        DataType::Map(entries, sorted) => {
            let entries_type = match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => DataType::Struct(Fields::from(vec![
                    kv[0].as_ref().clone(),
                    nullable_field(&kv[1]),
                ])),
                other => other.clone(),
            };
            DataType::Map(
                Arc::new(entries.as_ref().clone().with_data_type(entries_type)),
                *sorted,
            )
        }
        other => other.clone(),
    }
}

/// Decodes one file into batches of [`output_schema`].
pub fn decode_file(meta: &FileMeta, spec: &ReadSpec) -> Result<DecodedFile, FileReadError> {
    match &spec.partitions {
        Some(partitions) if !partitions.columns.is_empty() => {
            super::partition::decode(meta, spec, partitions)
        }
        _ => decode_data(meta, spec),
    }
}

/// `data` (CSV text) with every field that is exactly `null_value` made empty, as the
/// CSV fast path reads a file (arrow-csv then needs no null regex); `None` when the
/// bytes alone do not tell the fields (the fast path then uses the regex). For the
/// ingest bench's limit, which does weir's work without the engine.
pub fn blank_csv_null_values<'a>(
    data: &'a [u8],
    null_value: &str,
    options: &CsvOptions,
) -> Option<std::borrow::Cow<'a, [u8]>> {
    csv_fast::blank_null_values(data, null_value.as_bytes(), options)
}

/// [`decode_file`] for a spec whose columns all come from the file.
pub(crate) fn decode_data(meta: &FileMeta, spec: &ReadSpec) -> Result<DecodedFile, FileReadError> {
    let schema = output_schema(spec);
    match spec.format {
        FileFormat::Parquet => parquet_file::decode(meta, spec, &schema),
        FileFormat::Json => {
            let text = listed_contents(meta, spec)?;
            json_lines::decode(&text, meta, spec, &schema)
        }
        FileFormat::Csv => {
            let text = listed_contents(meta, spec)?;
            csv_file::decode(&text, meta, spec, &schema)
        }
    }
}

/// The text of a listed JSON or CSV file as the decoders see it ([`read_contents`]): read
/// from disk, or fetched whole from object storage ([`ReadSpec::remote`]; the listed size
/// is checked against `max_file_size` before the `GET`, the fetched one after it).
fn listed_contents(meta: &FileMeta, spec: &ReadSpec) -> Result<Vec<u8>, FileReadError> {
    let Some(landing) = &spec.remote else {
        return read_listed(&meta.path, spec);
    };
    let max_bytes = spec.text.max_file_bytes;
    if meta.size > max_bytes {
        return Err(too_large(
            &meta.path,
            &format!("is {} bytes, over", meta.size),
            max_bytes,
        ));
    }
    let raw = landing.get_blocking(&meta.path)?;
    if raw.len() as u64 > max_bytes {
        return Err(too_large(
            &meta.path,
            &format!("is {} bytes, over", raw.len()),
            max_bytes,
        ));
    }
    // The object's buffer itself (no copy: the fetched `Bytes` is its only owner).
    decode_contents(&meta.path, Vec::from(raw), spec.text.encoding, max_bytes)
}

/// Decodes JSON lines or CSV text already in memory, UTF-8 (the Kafka source's values,
/// one record per line), with the same rescue rules as a file at `meta.path`.
pub fn decode_text(
    data: &[u8],
    meta: &FileMeta,
    spec: &ReadSpec,
) -> Result<DecodedFile, FileReadError> {
    let schema = output_schema(spec);
    match spec.format {
        FileFormat::Json => json_lines::decode(data, meta, spec, &schema),
        FileFormat::Csv => csv_file::decode(data, meta, spec, &schema),
        FileFormat::Parquet => Err(FileReadError::Unsupported {
            path: meta.path.clone(),
            message: "Parquet is not a text format".into(),
        }),
    }
}

/// The bytes of a JSON or CSV file as the decoders see them: gunzipped when the
/// file starts with the gzip magic, transcoded to UTF-8 from `encoding`, without a
/// leading byte-order mark. A file larger than `max_bytes`, on disk or once
/// decompressed (a gzip bomb), fails as a whole before it is held in memory
/// (`max_file_size`).
pub fn read_contents(
    path: &std::path::Path,
    encoding: TextEncoding,
    max_bytes: u64,
) -> Result<Vec<u8>, FileReadError> {
    read_contents_opened(path, encoding, max_bytes, open_listed(path, false)?)
}

/// [`read_contents`] of a listed file, opened as `spec` says ([`ReadSpec::follow_links`]).
fn read_listed(path: &std::path::Path, spec: &ReadSpec) -> Result<Vec<u8>, FileReadError> {
    let file = open_listed(path, spec.follow_links)?;
    read_contents_opened(path, spec.text.encoding, spec.text.max_file_bytes, file)
}

fn read_contents_opened(
    path: &std::path::Path,
    encoding: TextEncoding,
    max_bytes: u64,
    mut file: std::fs::File,
) -> Result<Vec<u8>, FileReadError> {
    let io = |source| FileReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = file.metadata().map_err(io)?.len();
    if size > max_bytes {
        return Err(too_large(
            path,
            &format!("is {size} bytes, over"),
            max_bytes,
        ));
    }
    let mut raw = Vec::with_capacity(size as usize);
    file.read_to_end(&mut raw).map_err(io)?;
    decode_contents(path, raw, encoding, max_bytes)
}

/// Opens a listed file for reading without following a symbolic link in its place
/// (`O_NOFOLLOW`): the listing skipped links, so a link swapped in between the
/// listing and the read (to `/etc/shadow`, say) is refused, not read. Such a file
/// fails as a whole and is named. `follow_links`: the listing followed links inside the
/// source root (`follow_symlinks = "inside_root"`), so a link is opened as one.
pub fn open_listed(
    path: &std::path::Path,
    follow_links: bool,
) -> Result<std::fs::File, FileReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = if follow_links {
        0
    } else {
        nix::libc::O_NOFOLLOW
    };
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(nix::libc::ELOOP) {
                FileReadError::Unsupported {
                    path: path.to_path_buf(),
                    message:
                        "is a symbolic link now (it was a file when the directory was listed); \
                              links are not followed"
                            .into(),
                }
            } else {
                FileReadError::Io {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })
}

/// [`read_contents`] for bytes already in memory.
pub fn decode_contents(
    path: &std::path::Path,
    raw: Vec<u8>,
    encoding: TextEncoding,
    max_bytes: u64,
) -> Result<Vec<u8>, FileReadError> {
    let text = gunzip(path, raw, max_bytes)?;
    let mut text = match encoding {
        TextEncoding::Utf8 => text,
        TextEncoding::Latin1 => latin1_text(&text).into_bytes(),
        TextEncoding::Other(e) => e.decode_with_bom_removal(&text).0.into_owned().into_bytes(),
    };
    if text.starts_with(UTF8_BOM) {
        text.drain(..UTF8_BOM.len());
    }
    Ok(text)
}

/// Bytes as ISO-8859-1 text: one character per byte (lossless, and how Java reads ISO-8859-1).
pub(crate) fn latin1_text(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// The corrupt-record error of a record longer than `max_record_bytes`, if it is.
pub(crate) fn oversized_record(len: usize, max: Option<u64>) -> Option<String> {
    let max = max?;
    (len as u64 > max).then(|| {
        format!(
            "record of {len} bytes is longer than max_record_size ({max} bytes); kept whole here so nothing is lost"
        )
    })
}

/// The error of a file over `max_file_size`: it fails as a whole (not retried until it
/// changes), named, and none of its rows is ingested.
fn too_large(path: &std::path::Path, what: &str, max_bytes: u64) -> FileReadError {
    FileReadError::Corrupt {
        path: path.to_path_buf(),
        message: format!(
            "the file {what} max_file_size ({max_bytes} bytes): not read, so that one file \
             cannot exhaust memory (a file is decoded whole). Split it, or raise max_file_size on the source"
        ),
    }
}

fn gunzip(path: &std::path::Path, raw: Vec<u8>, max_bytes: u64) -> Result<Vec<u8>, FileReadError> {
    let text = if raw.starts_with(&[0x1F, 0x8B]) {
        let capacity = raw.len().saturating_mul(4).min(max_bytes as usize);
        let mut out = Vec::with_capacity(capacity);
        // Decompress at most one byte past the limit: a gzip bomb stops there.
        flate2::read::MultiGzDecoder::new(raw.as_slice())
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| FileReadError::Corrupt {
                path: path.to_path_buf(),
                message: format!("gzip stream is damaged or truncated: {e}"),
            })?;
        if out.len() as u64 > max_bytes {
            return Err(too_large(path, "decompresses to more than", max_bytes));
        }
        out
    } else {
        raw
    };
    Ok(text)
}

const UTF8_BOM: &[u8] = &[0xEF, 0xBB, 0xBF];

/// A batch of `rows` rows (also when the schema has no column at all).
fn assemble(
    schema: &SchemaRef,
    columns: Vec<arrow::array::ArrayRef>,
    rows: usize,
    path: &std::path::Path,
) -> Result<RecordBatch, FileReadError> {
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
        .map_err(|e| FileReadError::internal(path, e))
}

/// The `_file_path` written into `_rescued_data`.
fn display_path(meta: &FileMeta) -> String {
    meta.path.to_string_lossy().into_owned()
}

/// The `_corrupt_record` text of a raw line: as is when it is UTF-8, otherwise
/// decoded as ISO-8859-1 (lossless), with the error saying so.
fn corrupt_text(raw: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(raw) {
        Ok(text) => (text.to_string(), None),
        Err(e) => (
            latin1_text(raw),
            Some(format!(
                "invalid UTF-8 at byte {} of the record (the raw text is shown decoded as \
                 ISO-8859-1, one character per byte)",
                e.valid_up_to() + 1
            )),
        ),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::{Path, PathBuf};

    use arrow::array::{Array, AsArray, RecordBatch};
    use arrow::datatypes::SchemaRef;
    use arrow::util::display::{ArrayFormatter, FormatOptions};

    use super::{FileMeta, ReadSpec};
    use crate::spec::FileFormat;

    pub fn case_file(relative: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/cases")
            .join(relative)
    }

    pub fn meta(path: &Path) -> FileMeta {
        FileMeta::from_path(path).unwrap()
    }

    pub fn spec(format: FileFormat, schema: SchemaRef) -> ReadSpec {
        ReadSpec::new(format, schema)
    }

    /// Every row as display strings ("null" for nulls), `_rescued_data` excluded.
    pub fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
        let options = FormatOptions::default().with_null("null");
        let mut out = Vec::new();
        for batch in batches {
            let n = batch
                .schema()
                .fields()
                .iter()
                .filter(|f| f.name() != "_rescued_data")
                .count();
            let formatters: Vec<_> = batch.columns()[..n]
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
                .collect();
            for row in 0..batch.num_rows() {
                out.push(
                    formatters
                        .iter()
                        .map(|f| f.value(row).to_string())
                        .collect(),
                );
            }
        }
        out
    }

    /// `_rescued_data` of every row, parsed.
    pub fn rescued(batches: &[RecordBatch]) -> Vec<Option<serde_json::Value>> {
        let mut out = Vec::new();
        for batch in batches {
            let column = batch
                .column_by_name("_rescued_data")
                .unwrap()
                .as_string::<i32>();
            for row in 0..batch.num_rows() {
                out.push(
                    column
                        .is_valid(row)
                        .then(|| serde_json::from_str(column.value(row)).unwrap()),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #18: a link put in a listed file's place is not read through.
    #[test]
    fn a_link_swapped_in_after_the_listing_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"{\"id\":1}\n").unwrap();
        let listed = dir.path().join("a.json");
        std::os::unix::fs::symlink(&secret, &listed).unwrap();
        match read_contents(&listed, TextEncoding::Utf8, 1 << 20) {
            Err(FileReadError::Unsupported { message, .. }) => {
                assert!(message.contains("symbolic link"), "{message}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(read_contents(&secret, TextEncoding::Utf8, 1 << 20).is_ok());
    }

    /// `max_file_size` stops a gzip bomb one byte past the limit.
    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![b'\n'; 8 << 20]).unwrap();
        let gz = e.finish().unwrap();
        let path = std::path::Path::new("bomb.json.gz");
        match decode_contents(path, gz.clone(), TextEncoding::Utf8, 1 << 20) {
            Err(FileReadError::Corrupt { message, .. }) => {
                assert!(message.contains("max_file_size"), "{message}")
            }
            other => panic!("expected a refusal, got {:?}", other.map(|t| t.len())),
        }
        assert_eq!(
            decode_contents(path, gz, TextEncoding::Utf8, 8 << 20)
                .unwrap()
                .len(),
            8 << 20
        );
    }
}
