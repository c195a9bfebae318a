//! The quarantine of corrupt records (`bad_records_path`, after Spark's
//! `badRecordsPath`): whole records that could not be parsed at all (a broken
//! JSON line, invalid UTF-8; see [`crate::source::files::read`]) leave the batch
//! and land in a directory of JSON-lines files instead of the table, with the
//! file, line, raw text and error; the flow goes on.
//!
//! - [`split_corrupt`] / [`split_batches`] split decoded batches into the good rows
//!   and the corrupt records, found by the `_corrupt_record` marker at the start of
//!   `_rescued_data` with Arrow's `starts_with` and `filter` kernels (a batch
//!   without corrupt records is passed through untouched). Rows whose rescued
//!   values merely include a field named `_corrupt_record` are not taken: a
//!   candidate must carry the decoder's `_line` and `_file_path` too.
//! - [`QuarantineWriter`] writes one file per batch, `<bad_records_path>/<batch_id>.jsonl`,
//!   atomically (temp file, fsync, rename), so a batch re-run after a crash
//!   overwrites its file instead of adding duplicates. One line per record:
//!
//! ```json
//! {"file":"/landing/bad.json","line":5,"raw":"garbage line, not json","error":"invalid JSON: expected value at line 1 column 1","batch_id":3}
//! ```
//!
//! - `bad_records_table` instead (or as well): the same records appended to a Delta
//!   table (`file STRING, line BIGINT, raw STRING, error STRING, batch_id BIGINT`), one
//!   commit per batch with the flow's application transaction, so a re-run batch is
//!   not appended twice.
//!
//! Accounting: rows written to the sink + records quarantined = records read.
//! Give each flow its own `bad_records_path` (file names are batch ids).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, Scalar, StringArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::comparison::starts_with;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::durable::create_dir_private;
use crate::error::{Error, Result};
use crate::schema::RESCUED_DATA_COLUMN;

/// How a corrupt record's `_rescued_data` starts (the decoders write this key first).
pub const CORRUPT_MARKER: &str = "{\"_corrupt_record\":";

/// One quarantined record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedRecord {
    /// The source file (as in `_rescued_data`'s `_file_path`).
    pub file: String,
    /// Line in the (decompressed) file where the record starts, counting from 1.
    pub line: Option<u64>,
    /// The record's text (bytes that are not UTF-8 shown as ISO-8859-1, one character per byte).
    pub raw: String,
    pub error: String,
    pub batch_id: u64,
}

/// A batch without its corrupt records, and those records.
#[derive(Debug, Clone)]
pub struct Split {
    pub good: RecordBatch,
    pub quarantined: Vec<QuarantinedRecord>,
}

/// Splits one decoded batch (any schema with a `_rescued_data` string column; without
/// one, nothing is corrupt) into its good rows and its corrupt records.
pub fn split_corrupt(batch: &RecordBatch, batch_id: u64) -> Result<Split> {
    let arrow_error = |source| Error::Arrow {
        context: "splitting corrupt records from a batch".into(),
        source,
    };
    let untouched = || Split {
        good: batch.clone(),
        quarantined: Vec::new(),
    };
    let Some(column) = batch.column_by_name(RESCUED_DATA_COLUMN) else {
        return Ok(untouched());
    };
    if column.null_count() == column.len() {
        return Ok(untouched());
    }
    let column = if column.data_type() == &DataType::Utf8 {
        Arc::clone(column)
    } else {
        arrow::compute::cast(column, &DataType::Utf8).map_err(arrow_error)?
    };
    let marker = Scalar::new(StringArray::from(vec![CORRUPT_MARKER]));
    let hits = starts_with(&column, &marker).map_err(arrow_error)?;
    let candidates = match hits.nulls() {
        Some(nulls) => hits.values() & nulls.inner(),
        None => hits.values().clone(),
    };
    if candidates.count_set_bits() == 0 {
        return Ok(untouched());
    }
    let text = column.as_string::<i32>();
    let mut corrupt = vec![false; batch.num_rows()];
    let mut quarantined = Vec::new();
    for row in candidates.set_indices() {
        if let Some(record) = parse_corrupt(text.value(row), batch_id) {
            corrupt[row] = true;
            quarantined.push(record);
        }
    }
    if quarantined.is_empty() {
        return Ok(untouched());
    }
    let keep = BooleanArray::new(!&BooleanBuffer::from(corrupt), None);
    let good = filter_record_batch(batch, &keep).map_err(arrow_error)?;
    Ok(Split { good, quarantined })
}

/// [`split_corrupt`] over a batch's decoded batches (empty good batches are dropped).
pub fn split_batches(
    batches: Vec<RecordBatch>,
    batch_id: u64,
) -> Result<(Vec<RecordBatch>, Vec<QuarantinedRecord>)> {
    let mut good = Vec::with_capacity(batches.len());
    let mut quarantined = Vec::new();
    for batch in &batches {
        let split = split_corrupt(batch, batch_id)?;
        if split.good.num_rows() > 0 {
            good.push(split.good);
        }
        quarantined.extend(split.quarantined);
    }
    Ok((good, quarantined))
}

/// Splits batches into their data rows and their corrupt-record rows (kept as rows).
pub fn split_corrupt_rows(
    batches: Vec<RecordBatch>,
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    let mut good = Vec::with_capacity(batches.len());
    let mut corrupt = Vec::new();
    for batch in batches {
        let split = split_corrupt(&batch, 0)?;
        if split.quarantined.is_empty() {
            good.push(batch);
            continue;
        }
        let Some(text) = batch
            .column_by_name(crate::schema::RESCUED_DATA_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<arrow::array::StringArray>())
        else {
            good.push(batch);
            continue;
        };
        let mask: BooleanArray = (0..batch.num_rows())
            .map(|r| Some(text.is_valid(r) && parse_corrupt(text.value(r), 0).is_some()))
            .collect();
        corrupt.push(
            filter_record_batch(&batch, &mask).map_err(|source| Error::Arrow {
                context: "splitting corrupt records from a batch".into(),
                source,
            })?,
        );
        if split.good.num_rows() > 0 {
            good.push(split.good);
        }
    }
    Ok((good, corrupt))
}

/// The record of a `_rescued_data` text written by the decoders for a corrupt record.
fn parse_corrupt(text: &str, batch_id: u64) -> Option<QuarantinedRecord> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let raw = object.get("_corrupt_record")?.as_str()?.to_string();
    let file = object.get("_file_path")?.as_str()?.to_string();
    let line = object.get("_line")?.as_u64()?;
    let error = object
        .get("_error")
        .and_then(Value::as_str)
        .unwrap_or("the record could not be parsed")
        .to_string();
    Some(QuarantinedRecord {
        file,
        line: Some(line),
        raw,
        error,
        batch_id,
    })
}

/// The columns of a quarantine Delta table (`bad_records_table`).
pub fn records_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new("file", DataType::Utf8, true),
        Field::new("line", DataType::Int64, true),
        Field::new("raw", DataType::Utf8, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("batch_id", DataType::Int64, true),
    ]))
}

/// Quarantined records as one Arrow batch of [`records_schema`].
pub fn records_batch(records: &[QuarantinedRecord]) -> Result<RecordBatch> {
    use arrow::array::{Int64Array, StringArray};
    let columns: Vec<arrow::array::ArrayRef> = vec![
        std::sync::Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| r.file.as_str()),
        )),
        std::sync::Arc::new(Int64Array::from_iter(
            records.iter().map(|r| r.line.map(|l| l as i64)),
        )),
        std::sync::Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| r.raw.as_str()),
        )),
        std::sync::Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| r.error.as_str()),
        )),
        std::sync::Arc::new(Int64Array::from_iter_values(
            records.iter().map(|r| r.batch_id as i64),
        )),
    ];
    RecordBatch::try_new(records_schema(), columns).map_err(|source| Error::Arrow {
        context: "building the quarantine batch".into(),
        source,
    })
}

/// Writes quarantined records under a `bad_records_path` directory.
#[derive(Debug, Clone)]
pub struct QuarantineWriter {
    dir: PathBuf,
}

impl QuarantineWriter {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        QuarantineWriter { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<batch_id>.jsonl`.
    pub fn path_for(&self, batch_id: u64) -> PathBuf {
        self.dir.join(format!("{batch_id}.jsonl"))
    }

    /// Writes batch `batch_id`'s records, replacing any earlier file of that batch (a
    /// re-run after a crash writes the same records). No records: no file, and nothing
    /// is removed: the writer never deletes a file it did not write in this batch (an
    /// earlier attempt's, or another flow's).
    /// Returns the file written.
    pub fn write(&self, batch_id: u64, records: &[QuarantinedRecord]) -> Result<Option<PathBuf>> {
        let path = self.path_for(batch_id);
        if records.is_empty() {
            return Ok(None);
        }
        let mut text = Vec::with_capacity(records.len() * 128);
        for record in records {
            serde_json::to_writer(&mut text, record).map_err(|e| Error::io(&path, e.into()))?;
            text.push(b'\n');
        }
        create_dir_private(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        crate::durable::write_atomic(&path, &text).map_err(|e| Error::io(&path, e))?;
        Ok(Some(path))
    }

    /// Every record in the directory, by batch id, in file order.
    pub fn read_all(&self) -> Result<Vec<QuarantinedRecord>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&self.dir, e)),
        };
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, e))?;
            let name = entry.file_name();
            let id = name
                .to_str()
                .and_then(|n| n.strip_suffix(".jsonl"))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(id) = id {
                files.push((id, entry.path()));
            }
        }
        files.sort();
        let mut out = Vec::new();
        for (_, path) in files {
            let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                out.push(serde_json::from_str(line).map_err(|e| Error::io(&path, e.into()))?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;
    use crate::schema::parse_ddl;
    use crate::source::files::read::decode_file;
    use crate::source::files::read::test_support::{meta, spec};
    use crate::spec::FileFormat;

    fn batch(ids: Vec<Option<i64>>, rescued: Vec<Option<&str>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new(RESCUED_DATA_COLUMN, DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(rescued)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn splits_by_the_marker_and_keeps_order() {
        let corrupt = r#"{"_corrupt_record":"{oops","_error":"invalid JSON: EOF","_file_path":"/l/a.json","_line":2}"#;
        let old_style = r#"{"_corrupt_record":"x","_file_path":"/l/a.json","_line":4}"#;
        let user_field = r#"{"_corrupt_record":"a user's own field","_file_path":"/l/a.json"}"#;
        let b = batch(
            vec![Some(1), None, Some(3), None, Some(5)],
            vec![
                None,
                Some(corrupt),
                Some(r#"{"x":1,"_file_path":"/l/a.json"}"#),
                Some(old_style),
                Some(user_field),
            ],
        );
        let split = split_corrupt(&b, 7).unwrap();
        let ids = split
            .good
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(ids.iter().collect::<Vec<_>>(), [Some(1), Some(3), Some(5)]);
        assert_eq!(
            split.quarantined,
            [
                QuarantinedRecord {
                    file: "/l/a.json".into(),
                    line: Some(2),
                    raw: "{oops".into(),
                    error: "invalid JSON: EOF".into(),
                    batch_id: 7
                },
                QuarantinedRecord {
                    file: "/l/a.json".into(),
                    line: Some(4),
                    raw: "x".into(),
                    error: "the record could not be parsed".into(),
                    batch_id: 7
                },
            ]
        );
        assert_eq!(split.good.schema(), b.schema());
    }

    #[test]
    fn batches_without_corrupt_records_pass_through() {
        let b = batch(vec![Some(1), Some(2)], vec![None, Some(r#"{"x":1}"#)]);
        let split = split_corrupt(&b, 0).unwrap();
        assert!(split.quarantined.is_empty());
        assert_eq!(split.good, b);
        let no_column = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        assert_eq!(split_corrupt(&no_column, 0).unwrap().good, no_column);
    }

    #[test]
    fn decoded_b11_accounting_and_replay_overwrites() {
        let path = crate::source::files::read::test_support::case_file("B11/step1/bad.json");
        let mut spec = spec(
            FileFormat::Json,
            Arc::new(parse_ddl("sensor STRING, val DOUBLE").unwrap()),
        );
        // Bare NaN as a corrupt record (Spark's allowNonNumericNumbers off).
        spec.text.allow_non_numeric_numbers = false;
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        let (good, quarantined) = split_batches(decoded.batches, 3).unwrap();
        let good_rows: usize = good.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(good_rows + quarantined.len(), lines, "nothing lost");
        assert_eq!(quarantined.len(), decoded.num_records_corrupt);
        let lines_quarantined: Vec<_> = quarantined.iter().map(|r| r.line).collect();
        assert_eq!(lines_quarantined, [Some(3), Some(5), Some(7)]);
        assert_eq!(quarantined[1].raw, "garbage line, not json");
        assert!(
            quarantined[1].error.starts_with("invalid JSON"),
            "{:?}",
            quarantined[1]
        );
        assert!(quarantined.iter().all(|r| r.file.ends_with("bad.json")));

        let tmp = tempfile::tempdir().unwrap();
        let writer = QuarantineWriter::new(tmp.path().join("bad_records"));
        let written = writer.write(3, &quarantined).unwrap().unwrap();
        assert_eq!(written, tmp.path().join("bad_records/3.jsonl"));
        // A re-run of batch 3 overwrites; nothing is duplicated.
        writer.write(3, &quarantined).unwrap();
        writer.write(4, &quarantined[..1]).unwrap();
        let back = writer.read_all().unwrap();
        assert_eq!(back.len(), quarantined.len() + 1);
        assert_eq!(&back[..3], quarantined.as_slice());
        let text = std::fs::read_to_string(&written).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["file", "line", "raw", "error", "batch_id"]);
        // No records: no file written, and a file already there (another writer's, or an
        // earlier attempt's) is never deleted.
        assert_eq!(writer.write(4, &[]).unwrap(), None);
        assert!(writer.path_for(4).exists());
        assert!(
            QuarantineWriter::new(tmp.path().join("none"))
                .read_all()
                .unwrap()
                .is_empty()
        );
    }
}
