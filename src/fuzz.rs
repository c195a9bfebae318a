//! Fuzz harnesses (issue #18): each function takes arbitrary bytes and must never
//! panic, abort or allocate without bound; an `Err` is a fine answer. The same
//! functions run under libFuzzer (`fuzz/`, `cargo +nightly fuzz run TARGET`) and replay
//! the committed corpus in `cargo test` (`tests/it/fuzz_corpus.rs`), so every crash a
//! fuzzer finds becomes a regression test by adding its input to `fuzz/corpus/TARGET/`.
//!
//! | target | what it feeds |
//! |---|---|
//! | `json_lines` | the JSON-lines decoder with rescue (a typed schema with nested columns) |
//! | `json_fast_path` | the JSON-lines fast path (arrow-json) against the rescuing decoder alone, permissive and failfast: any difference in rows, `_rescued_data`, counts, drift or error panics |
//! | `csv` | the CSV decoder with rescue |
//! | `gzip` | gzip detection and bounded decompression, then the JSON-lines decoder |
//! | `parquet` | the Parquet reader with rescue (bytes written to a temporary file) |
//! | `pipeline` | pipeline TOML loading and validation (window and duration strings included) |
//! | `checkpoint` | every checkpoint file reader: `offsets/N`, `commits/N`, `metadata`, `_weir/health.json`, `_weir/plan.json`, progress lines, and Spark's `offsets/N` / `commits/N` and event-log lines |
//! | `delta_log` | a Delta source table's log: the bytes as `_delta_log/…0.json` (and, after a NUL byte, `…1.json`), planned by the Delta source (delta-rs reads the log) |

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};

use crate::source::files::read::{FileMeta, ReadSpec, decode_contents, decode_file, decode_text};
use crate::spec::{FileFormat, TextEncoding};

/// The fuzz targets, by name (the directories of `fuzz/corpus/`).
pub const TARGETS: [&str; 9] = [
    "json_lines",
    "json_fast_path",
    "csv",
    "csv_fast_path",
    "gzip",
    "parquet",
    "pipeline",
    "checkpoint",
    "delta_log",
];

/// Runs target `name` on `data`; false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "json_lines" => json_lines(data),
        "json_fast_path" => json_fast_path(data),
        "csv" => csv(data),
        "csv_fast_path" => csv_fast_path(data),
        "gzip" => gzip(data),
        "parquet" => parquet(data),
        "pipeline" => pipeline(data),
        "checkpoint" => checkpoint(data),
        "delta_log" => delta_log(data),
        _ => return false,
    }
    true
}

/// Decoded bytes at most per input (the decoders' own bound, `max_file_size`).
const MAX_BYTES: u64 = 1 << 20;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new(
            "ts",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("price", DataType::Decimal128(10, 2), true),
        Field::new(
            "nested",
            DataType::Struct(Fields::from(vec![
                Field::new("a", DataType::Int32, true),
                Field::new(
                    "tags",
                    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                    true,
                ),
            ])),
            true,
        ),
    ]))
}

fn meta(name: &str, data: &[u8]) -> FileMeta {
    FileMeta {
        path: Path::new("/fuzz").join(name),
        size: data.len() as u64,
        modification_time_ms: 0,
    }
}

fn spec(format: FileFormat) -> ReadSpec {
    let mut spec = ReadSpec::new(format, schema());
    spec.text.max_file_bytes = MAX_BYTES;
    spec
}

/// The JSON-lines decoder with rescue.
pub fn json_lines(data: &[u8]) {
    let _ = decode_text(data, &meta("f.json", data), &spec(FileFormat::Json));
}

/// A schema the JSON-lines fast path reads (no DECIMAL, no nested DOUBLE).
fn fast_path_schema() -> SchemaRef {
    let ts = |tz: Option<&str>| {
        DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, tz.map(Into::into))
    };
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("small", DataType::Int8, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("ts", ts(Some("UTC")), true),
        Field::new("ntz", ts(None), true),
        Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
        Field::new(
            "nested",
            DataType::Struct(Fields::from(vec![
                Field::new("a", DataType::Int32, true),
                Field::new(
                    "list",
                    DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
                    true,
                ),
                Field::new(
                    "deep",
                    DataType::Struct(Fields::from(vec![Field::new(
                        "b",
                        ts(Some("+02:00")),
                        true,
                    )])),
                    true,
                ),
            ])),
            true,
        ),
    ]))
}

/// The JSON-lines fast path against the rescuing decoder alone: panics when they differ.
pub fn json_fast_path(data: &[u8]) {
    let mut spec = ReadSpec::new(FileFormat::Json, fast_path_schema());
    spec.text.max_file_bytes = MAX_BYTES;
    let meta = meta("f.json", data);
    for mode in [
        crate::spec::ParseMode::Permissive,
        crate::spec::ParseMode::FailFast,
    ] {
        spec.text.mode = mode;
        if let Err(e) = crate::source::files::read::json_lines::compare_paths(data, &meta, &spec) {
            panic!("the JSON-lines fast path differs from the rescuing decoder ({mode:?}): {e}");
        }
    }
}

/// The CSV decoder with rescue (header line, the default dialect).
pub fn csv(data: &[u8]) {
    let _ = decode_text(data, &meta("f.csv", data), &spec(FileFormat::Csv));
}

/// The CSV fast path (arrow-csv) against the rescuing decoder alone, over dialects
/// and a schema it takes: panics when it takes the input and reads it otherwise.
pub fn csv_fast_path(data: &[u8]) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("small", DataType::Int8, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
        Field::new("ratio", DataType::Float32, true),
        Field::new(
            "ts",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new(
            "ntz",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
            true,
        ),
    ]));
    let meta = meta("f.csv", data);
    for (header, null_value, comment) in [
        (true, None, None),
        (true, Some("NA"), None),
        (false, Some("NA"), Some(b'#')),
    ] {
        let mut spec = ReadSpec::new(FileFormat::Csv, schema.clone());
        spec.text.max_file_bytes = MAX_BYTES;
        spec.csv.header = header;
        spec.csv.null_value = null_value.map(str::to_string);
        spec.csv.comment = comment;
        if let Err(e) = crate::source::files::read::csv_fast::compare_paths(data, &meta, &spec) {
            panic!("the CSV fast path differs from the rescuing decoder: {e}");
        }
    }
}

/// Gzip detection and bounded decompression, then JSON lines.
pub fn gzip(data: &[u8]) {
    let path = Path::new("/fuzz/f.json.gz");
    if let Ok(text) = decode_contents(path, data.to_vec(), TextEncoding::Utf8, MAX_BYTES) {
        let _ = decode_text(&text, &meta("f.json.gz", data), &spec(FileFormat::Json));
    }
}

/// The Parquet reader with rescue, on the bytes as a file.
pub fn parquet(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = dir.path().join("f.parquet");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(meta) = FileMeta::from_path(&path) {
        let _ = decode_file(&meta, &spec(FileFormat::Parquet));
    }
}

/// Pipeline TOML: parsing and every validation rule (no file is read).
pub fn pipeline(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::pipeline::parse(Path::new("/fuzz/pipeline.toml"), text);
    }
}

/// Every checkpoint file reader, weir's and Spark's, on the same bytes.
pub fn checkpoint(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::checkpoint::OffsetSeq::parse(text);
        let _ = crate::checkpoint::CommitMetadata::parse(text);
        let _ = serde_json::from_str::<crate::checkpoint::Metadata>(text);
        let _ = serde_json::from_str::<crate::checkpoint::PlanRecord>(text);
        let _ = serde_json::from_str::<crate::records::HealthRecord>(text);
        for line in text.lines() {
            let _ = serde_json::from_str::<crate::records::StreamingQueryProgress>(line);
        }
        let path = Path::new("/fuzz/0");
        let _ = crate::spark::checkpoint::parse_offsets(path, text);
        let _ = crate::spark::checkpoint::parse_commit(path, text);
    }
    for line in data.split(|&b| b == b'\n') {
        let _ = crate::spark::eventlog::parse_line(line);
        let _ = crate::spark::eventlog::parse_progress_line(line);
    }
}

/// A Delta source table's log: the bytes up to the first NUL are the table's commit 0
/// (`_delta_log/00000000000000000000.json`), the rest its commit 1. The Delta source
/// loads the table (delta-rs parses the log) and plans up to three batches from the
/// start, as a stream reading the table would.
pub fn delta_log(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let log = dir.path().join("_delta_log");
    if std::fs::create_dir(&log).is_err() {
        return;
    }
    let (first, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    if std::fs::write(log.join(format!("{:020}.json", 0)), first).is_err() {
        return;
    }
    if let Some(rest) = rest
        && std::fs::write(log.join(format!("{:020}.json", 1)), rest).is_err()
    {
        return;
    }
    let _ = crate::background::block_on(async {
        let mut source = crate::source::delta::DeltaSource::new(
            crate::spec::DeltaSourceOptions::new(dir.path()),
        );
        let mut from = None;
        for _ in 0..3 {
            match source.plan(from.as_ref()).await {
                Ok(Some(batch)) => from = Some(batch.end),
                _ => break,
            }
        }
    });
}
