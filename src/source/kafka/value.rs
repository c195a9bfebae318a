//! The `format = "json"|"csv"` shortcut: a Kafka record's `value` parsed with the
//! files source's decoders (the same `_rescued_data`, corrupt records and type
//! rules), one row per record, the record's Kafka columns in the hidden `_metadata`
//! struct (`_metadata.offset`, `_metadata.timestamp`, ...), as Spark's
//! `from_json(CAST(value AS STRING), schema)` next to the Kafka columns.
//!
//! A batch of values is decoded as one text, one value per line (JSON: line breaks
//! inside a value are JSON whitespace and become spaces; a null or blank value is
//! `{}`, a row of nulls, as `from_json(null)`). A CSV value with a quote or a line
//! break, or any batch whose rows do not match its records one to one, is decoded
//! value by value instead. In `_rescued_data`, `_file_path` is `kafka:<topic>/<partition>`
//! and a corrupt record's `_line` is its offset.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, StructArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::schema::{METADATA_COLUMN, RESCUED_DATA_COLUMN};
use crate::source::files::read::{DecodedFile, FieldMismatch, FileMeta, ReadSpec};
use crate::spec::{FileFormat, KafkaValueFormat};

/// The Kafka columns kept in `_metadata` (Spark's Kafka schema without `value`).
const METADATA_KAFKA_COLUMNS: [&str; 6] = [
    "key",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
];

/// The fields of `_metadata` for a Kafka source with `format`.
pub fn metadata_fields() -> Fields {
    let kafka = super::rows::kafka_schema(false);
    METADATA_KAFKA_COLUMNS
        .iter()
        .filter_map(|name| kafka.field_with_name(name).ok().cloned())
        .collect()
}

/// Decodes the values of a Kafka source's batches.
#[derive(Debug, Clone)]
pub struct ValueDecoder {
    spec: Arc<ReadSpec>,
    schema: SchemaRef,
}

/// What decoding a batch found.
#[derive(Debug, Default)]
pub struct Decoded {
    pub batches: Vec<RecordBatch>,
    pub num_rows_rescued: u64,
    pub num_records_corrupt: u64,
    pub type_mismatches: Vec<FieldMismatch>,
}

impl ValueDecoder {
    pub fn new(format: &KafkaValueFormat) -> Self {
        let mut spec = ReadSpec::new(format.format, format.schema.clone());
        spec.csv = format.csv.clone();
        spec.csv.header = false;
        spec.text = format.text.clone();
        let read_schema = crate::source::files::read::output_schema(&spec);
        let mut fields: Vec<Arc<Field>> = read_schema.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(
            METADATA_COLUMN,
            DataType::Struct(metadata_fields()),
            false,
        )));
        ValueDecoder {
            spec: Arc::new(spec),
            schema: Arc::new(Schema::new(fields)),
        }
    }

    /// The batches' schema: the value's columns, `_rescued_data`, `_metadata`.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Decodes batches of Kafka rows (each of one partition, as the source reads them).
    pub fn decode(&self, batches: &[RecordBatch]) -> Result<Decoded> {
        let mut out = Decoded::default();
        for batch in batches {
            self.decode_one(batch, &mut out)?;
        }
        Ok(out)
    }

    fn decode_one(&self, batch: &RecordBatch, out: &mut Decoded) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let column = |name: &str| -> Result<&ArrayRef> {
            batch.column_by_name(name).ok_or_else(|| Error::Source {
                path: std::path::PathBuf::from("kafka"),
                message: format!("Kafka rows without a {name} column"),
            })
        };
        let values = column("value")?.as_binary::<i32>();
        let topic = column("topic")?.as_string::<i32>();
        let partition = column("partition")?.as_primitive::<arrow::datatypes::Int32Type>();
        let offsets = column("offset")?.as_primitive::<arrow::datatypes::Int64Type>();
        let source = format!("kafka:{}/{}", topic.value(0), partition.value(0));
        let meta = FileMeta {
            path: std::path::PathBuf::from(&source),
            size: 0,
            modification_time_ms: 0,
        };
        let json = self.spec.format == FileFormat::Json;
        let blank = |v: &[u8]| v.iter().all(u8::is_ascii_whitespace);
        // One text, one value per line, when every value is one line.
        let whole = json
            || (0..n).all(|i| {
                !values.is_null(i)
                    && !blank(values.value(i))
                    && !values
                        .value(i)
                        .iter()
                        .any(|b| matches!(b, b'"' | b'\n' | b'\r'))
            });
        let mut decoded: Option<(DecodedFile, Vec<u32>)> = None;
        if whole {
            let mut text = Vec::with_capacity(values.value_data().len() + 3 * n);
            for i in 0..n {
                if values.is_null(i) || blank(values.value(i)) {
                    text.extend_from_slice(b"{}");
                } else if json {
                    text.extend(values.value(i).iter().map(|b| match b {
                        b'\n' | b'\r' => b' ',
                        b => *b,
                    }));
                } else {
                    text.extend_from_slice(values.value(i));
                }
                text.push(b'\n');
            }
            let d =
                crate::source::files::read::decode_text(&text, &meta, &self.spec).map_err(|e| {
                    // Line L of the text is the batch's record L - 1.
                    decode_error(&source, e, |line| {
                        let i = line.saturating_sub(1).min(n - 1);
                        offsets.value(i)
                    })
                })?;
            if d.num_rows == n {
                decoded = Some((d, (0..n as u32).collect()));
            }
        }
        let (d, rows_of) = match decoded {
            Some(d) => d,
            None => self.one_by_one(values, offsets, &meta, &source)?,
        };
        out.num_rows_rescued += d.num_rows_rescued as u64;
        out.num_records_corrupt += d.num_records_corrupt as u64;
        out.type_mismatches.extend(d.type_mismatches);
        // The Kafka columns of each row's record.
        let indices = UInt32Array::from(rows_of);
        let metadata_columns: Vec<ArrayRef> = METADATA_KAFKA_COLUMNS
            .iter()
            .map(|name| {
                let c = column(name)?;
                arrow::compute::take(c.as_ref(), &indices, None).map_err(|source| Error::Arrow {
                    context: format!("Kafka metadata of {source_name}", source_name = source),
                    source,
                })
            })
            .collect::<Result<_>>()?;
        let metadata =
            StructArray::try_new(metadata_fields(), metadata_columns, None).map_err(|e| {
                Error::Arrow {
                    context: format!("building _metadata for {source}"),
                    source: e,
                }
            })?;
        let mut start = 0usize;
        for b in d.batches {
            let len = b.num_rows();
            let mut columns: Vec<ArrayRef> = b.columns().to_vec();
            if let Ok(rescued_at) = b.schema().index_of(RESCUED_DATA_COLUMN) {
                columns[rescued_at] = with_offsets(
                    columns[rescued_at].as_string::<i32>(),
                    offsets,
                    &indices,
                    start,
                );
            }
            columns.push(Arc::new(metadata.slice(start, len)));
            start += len;
            out.batches.push(
                RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| Error::Arrow {
                    context: format!("decoded values of {source}"),
                    source: e,
                })?,
            );
        }
        Ok(())
    }

    /// Each value decoded alone: a value with no row (blank CSV) is a row of nulls; a
    /// value with several (CSV lines) keeps them all, with the same Kafka columns.
    fn one_by_one(
        &self,
        values: &arrow::array::BinaryArray,
        offsets: &arrow::array::Int64Array,
        meta: &FileMeta,
        source: &str,
    ) -> Result<(DecodedFile, Vec<u32>)> {
        let mut all = DecodedFile::default();
        let mut rows_of = Vec::with_capacity(values.len());
        let out_schema = crate::source::files::read::output_schema(&self.spec);
        for i in 0..values.len() {
            let mut d = if values.is_null(i) || values.value(i).iter().all(u8::is_ascii_whitespace)
            {
                DecodedFile::default()
            } else {
                crate::source::files::read::decode_text(values.value(i), meta, &self.spec)
                    .map_err(|e| decode_error(source, e, |_| offsets.value(i)))?
            };
            if d.num_rows == 0 {
                let nulls: Vec<ArrayRef> = out_schema
                    .fields()
                    .iter()
                    .map(|f| arrow::array::new_null_array(f.data_type(), 1))
                    .collect();
                d.batches = vec![
                    RecordBatch::try_new(out_schema.clone(), nulls).map_err(|e| Error::Arrow {
                        context: format!("a null row for {source}"),
                        source: e,
                    })?,
                ];
                d.num_rows = 1;
            }
            rows_of.extend(std::iter::repeat_n(i as u32, d.num_rows));
            all.num_rows += d.num_rows;
            all.num_rows_rescued += d.num_rows_rescued;
            all.num_records_corrupt += d.num_records_corrupt;
            all.type_mismatches.extend(d.type_mismatches);
            all.batches.extend(d.batches);
        }
        let one = arrow::compute::concat_batches(&out_schema, &all.batches).map_err(|e| {
            Error::Arrow {
                context: format!("decoded values of {source}"),
                source: e,
            }
        })?;
        all.batches = vec![one];
        Ok((all, rows_of))
    }
}

/// A decoding error of a batch's values; `offset_of` turns a line of the decoded text
/// into its record's offset (`mode = "failfast"` names the malformed record's offset).
fn decode_error(
    source: &str,
    e: crate::source::files::read::FileReadError,
    offset_of: impl Fn(usize) -> i64,
) -> Error {
    match e {
        crate::source::files::read::FileReadError::Malformed {
            line,
            message,
            record,
            ..
        } => Error::MalformedRecord {
            path: std::path::PathBuf::from(source),
            location: format!("offset {}", offset_of(line)),
            message,
            record,
            hint: "A Kafka record cannot be fixed in place: set mode = \"permissive\" to keep malformed records in _rescued_data (or quarantine them with bad_records_path) and restart; the batch re-reads the same offsets".into(),
        },
        e => Error::Source {
            path: std::path::PathBuf::from(source),
            message: format!("cannot decode the values: {e}"),
        },
    }
}

/// `_rescued_data` with a corrupt record's `_line` set to its record's offset.
fn with_offsets(
    rescued: &StringArray,
    offsets: &arrow::array::Int64Array,
    rows_of: &UInt32Array,
    start: usize,
) -> ArrayRef {
    const CORRUPT: &str = "{\"_corrupt_record\":";
    if !rescued.iter().flatten().any(|v| v.starts_with(CORRUPT)) {
        return Arc::new(rescued.clone());
    }
    let fixed: StringArray = rescued
        .iter()
        .enumerate()
        .map(|(j, v)| match v {
            Some(text) if text.starts_with(CORRUPT) => {
                match serde_json::from_str::<serde_json::Value>(text) {
                    Ok(serde_json::Value::Object(mut o)) => {
                        let record = rows_of.value(start + j) as usize;
                        o.insert("_line".into(), offsets.value(record).into());
                        Some(serde_json::Value::Object(o).to_string())
                    }
                    _ => Some(text.to_string()),
                }
            }
            other => other.map(str::to_string),
        })
        .collect();
    Arc::new(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kafka::rows::RowsBuilder;

    fn rows(values: &[Option<&str>]) -> RecordBatch {
        let mut b = RowsBuilder::new("events", 2, false);
        for (i, v) in values.iter().enumerate() {
            b.append(
                Some(format!("k{i}").as_bytes()),
                v.map(str::as_bytes),
                100 + i as i64,
                1_700_000_000_000,
                &mut std::iter::empty(),
            );
        }
        b.finish().unwrap()
    }

    fn format(f: FileFormat) -> KafkaValueFormat {
        KafkaValueFormat {
            format: f,
            schema: Arc::new(crate::schema::parse_ddl("id BIGINT, name STRING").unwrap()),
            csv: Default::default(),
            text: Default::default(),
        }
    }

    fn column_text(b: &RecordBatch, name: &str) -> Vec<String> {
        let c = b.column_by_name(name).unwrap();
        let f = arrow::util::display::ArrayFormatter::try_new(
            c.as_ref(),
            &arrow::util::display::FormatOptions::default().with_null("null"),
        )
        .unwrap();
        (0..b.num_rows()).map(|i| f.value(i).to_string()).collect()
    }

    #[test]
    fn json_values_one_row_each_with_rescue_and_corrupt_records_at_their_offset() {
        let d = ValueDecoder::new(&format(FileFormat::Json));
        let batch = rows(&[
            Some(r#"{"id":1,"name":"a"}"#),
            Some("{\"id\":2,\n \"name\":\"b\"}"),
            None,
            Some(r#"{"id":"x","name":"c","extra":true}"#),
            Some("not json"),
            Some("  "),
        ]);
        let out = d.decode(&[batch]).unwrap();
        let b = arrow::compute::concat_batches(d.schema(), &out.batches).unwrap();
        assert_eq!(b.num_rows(), 6);
        assert_eq!(
            column_text(&b, "id"),
            ["1", "2", "null", "null", "null", "null"]
        );
        let rescued = column_text(&b, RESCUED_DATA_COLUMN);
        assert!(rescued[3].contains("\"extra\":true") && rescued[3].contains("\"id\":\"x\""));
        let corrupt: serde_json::Value = serde_json::from_str(&rescued[4]).unwrap();
        assert_eq!(corrupt["_corrupt_record"], "not json");
        assert_eq!(
            corrupt["_line"], 104,
            "a corrupt record's _line is its offset"
        );
        assert_eq!(corrupt["_file_path"], "kafka:events/2");
        assert_eq!(out.num_records_corrupt, 1);
        assert_eq!(out.num_rows_rescued, 1);
        let meta = b.column_by_name(METADATA_COLUMN).unwrap().as_struct();
        let offsets = meta
            .column_by_name("offset")
            .unwrap()
            .as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(
            offsets.values().to_vec(),
            vec![100, 101, 102, 103, 104, 105]
        );
    }

    #[test]
    fn failfast_names_the_offset_of_the_first_malformed_value() {
        let mut f = format(FileFormat::Json);
        f.text.mode = crate::spec::ParseMode::FailFast;
        let d = ValueDecoder::new(&f);
        let batch = rows(&[
            Some(r#"{"id":1,"name":"a"}"#),
            Some(r#"{"id":"x","name":"b"}"#),
            Some("not json"),
        ]);
        let e = d.decode(&[batch]).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::MalformedRecord);
        let text = e.to_string();
        assert!(text.starts_with("source kafka:events/2, offset 101: malformed record: \"x\" does not fit column id (BIGINT)"), "{text}");
        // CSV values decoded one by one (a quoted value) name their offset too.
        let mut f = format(FileFormat::Csv);
        f.text.mode = crate::spec::ParseMode::FailFast;
        let d = ValueDecoder::new(&f);
        let batch = rows(&[Some("1,\"a, b\""), Some("oops,c")]);
        let text = d.decode(&[batch]).unwrap_err().to_string();
        assert!(
            text.contains("offset 101: malformed record: \"oops\" does not fit column id (BIGINT)"),
            "{text}"
        );
    }

    #[test]
    fn csv_values_by_position_quoted_ones_alone() {
        let d = ValueDecoder::new(&format(FileFormat::Csv));
        let batch = rows(&[
            Some("1,a"),
            Some("2,\"b, with a comma\""),
            Some("3,\"two\nlines\""),
            None,
            Some("oops,d"),
        ]);
        let out = d.decode(&[batch]).unwrap();
        let b = arrow::compute::concat_batches(d.schema(), &out.batches).unwrap();
        assert_eq!(b.num_rows(), 5);
        assert_eq!(column_text(&b, "id"), ["1", "2", "3", "null", "null"]);
        assert_eq!(
            column_text(&b, "name"),
            ["a", "b, with a comma", "two\nlines", "null", "d"]
        );
        assert!(column_text(&b, RESCUED_DATA_COLUMN)[4].contains("oops"));
    }
}
