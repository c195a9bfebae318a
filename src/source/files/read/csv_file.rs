//! CSV decoding: fields into string columns, then one `cast` per column; only the
//! values the cast rejects (found with a validity-mask comparison) are touched row by row.
//! New columns are known from the header once per file; only their values (which are
//! rescued anyway) are classified for the new field's type.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanBufferBuilder, StringArray, new_null_array};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::{CastOptions, can_cast_types, cast_with_options};
use arrow::datatypes::{DataType, Fields, SchemaRef};
use serde_json::Value;

use super::drift::{Drift, Slot};
use super::rescue::Rescues;
use super::{
    BATCH_ROWS, DecodedFile, FileMeta, FileReadError, ReadSpec, assemble, corrupt_text,
    data_fields, display_path,
};
use crate::spec::CsvOptions;

/// A batch is cut early when a column's text exceeds this (checked every 1024 rows),
/// so string offsets stay far below `i32::MAX`.
const BATCH_TEXT_BYTES: usize = 256 << 20;

pub(super) fn decode(
    data: &[u8],
    meta: &FileMeta,
    spec: &ReadSpec,
    schema: &SchemaRef,
) -> Result<DecodedFile, FileReadError> {
    let fields = data_fields(&spec.schema);
    let options = &spec.csv;
    let mut reader = reader_builder(options).from_reader(data);
    let utf8_ok = std::str::from_utf8(data).is_ok();
    let file_path = display_path(meta);

    let mut record = csv::ByteRecord::new();
    let read = |reader: &mut csv::Reader<&[u8]>, record: &mut csv::ByteRecord| {
        reader
            .read_byte_record(record)
            .map_err(|e| FileReadError::Corrupt {
                path: meta.path.clone(),
                message: format!("CSV: {e}"),
            })
    };

    // Where each column comes from, and what the other fields are rescued as.
    let mut drift = Drift::default();
    let layout = if options.header {
        if !read(&mut reader, &mut record)? {
            return Ok(DecodedFile::default());
        }
        let names: Vec<String> = record
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        Layout::by_header(&fields, &names, &mut drift)
    } else {
        Layout::by_position(&fields)
    };
    // Without a header, fields past the schema's width are the new columns `_c<index>`.
    let mut extra_slots: Vec<Option<Slot>> = Vec::new();

    let mut batch = BatchBuilder::new(&layout, fields.len());
    let mut out = DecodedFile::default();
    let null_value = options.null_value.as_deref().map(str::as_bytes);
    let is_null = |f: &[u8]| f.is_empty() || Some(f) == null_value;

    loop {
        let start = record_start(&reader);
        if !read(&mut reader, &mut record)? {
            break;
        }
        let row = batch.rows;
        if !utf8_ok && record.iter().any(|f| std::str::from_utf8(f).is_err()) {
            let end = record_start(&reader).min(data.len());
            let raw = data.get(start..end).unwrap_or_default();
            let raw = trim_line_end(raw);
            let line = record.position().map_or(0, |p| p.line() as usize);
            let (raw, error) = corrupt_text(raw);
            let error = error.unwrap_or_else(|| "invalid UTF-8".into());
            batch.rescues.corrupt(row, raw, error, line);
            for column in batch.columns.iter_mut().flatten() {
                column.push(None);
            }
        } else {
            for (column, source) in batch.columns.iter_mut().zip(&layout.sources) {
                if let (Some(column), Some(index)) = (column.as_mut(), source) {
                    column.push(record.get(*index).filter(|f| !is_null(f)));
                }
            }
            for &(index, ref key, slot) in &layout.unmapped {
                if let Some(f) = record.get(index).filter(|f| !is_null(f)) {
                    if let Some(slot) = slot {
                        absorb_new(&mut drift, slot, f);
                    }
                    batch.rescues.field(row, index, key.as_str(), text_value(f));
                }
            }
            for index in layout.width..record.len() {
                if !options.header {
                    while extra_slots.len() <= index - layout.width {
                        let name = format!("_c{}", layout.width + extra_slots.len());
                        extra_slots.push(drift.new_field(vec![name]));
                    }
                }
                if let Some(f) = record.get(index).filter(|f| !is_null(f)) {
                    if let Some(&Some(slot)) = extra_slots.get(index - layout.width) {
                        absorb_new(&mut drift, slot, f);
                    }
                    batch
                        .rescues
                        .field(row, index, format!("_c{index}"), text_value(f));
                }
            }
        }
        batch.rows += 1;
        if batch.rows == BATCH_ROWS
            || (batch.rows.is_multiple_of(1024) && batch.text_bytes() > BATCH_TEXT_BYTES)
        {
            let done = std::mem::replace(&mut batch, BatchBuilder::new(&layout, fields.len()));
            let context = Context {
                fields: &fields,
                layout: &layout,
                schema,
                spec,
                file_path: &file_path,
                meta,
            };
            done.finish(&context, &mut drift, &mut out)?;
        }
    }
    if batch.rows > 0 {
        let context = Context {
            fields: &fields,
            layout: &layout,
            schema,
            spec,
            file_path: &file_path,
            meta,
        };
        batch.finish(&context, &mut drift, &mut out)?;
    }
    drift.finish(&spec.schema, &file_path, &mut out);
    Ok(out)
}

/// A value of a new column, for its type (until the type is string).
fn absorb_new(drift: &mut Drift, slot: Slot, field: &[u8]) {
    if drift.new_is_open(slot)
        && let Ok(text) = std::str::from_utf8(field)
    {
        drift.new_text(slot, text);
    }
}

/// The `csv` reader for a dialect. Headers are handled by the caller, rows may be ragged.
pub(crate) fn reader_builder(options: &CsvOptions) -> csv::ReaderBuilder {
    let mut builder = csv::ReaderBuilder::new();
    builder
        .has_headers(false)
        .flexible(true)
        .delimiter(options.delimiter)
        .quote(options.quote)
        .double_quote(true)
        .escape(options.escape)
        .comment(options.comment);
    builder
}

/// Byte offset where the next record starts.
fn record_start(reader: &csv::Reader<&[u8]>) -> usize {
    usize::try_from(reader.position().byte()).unwrap_or(usize::MAX)
}

fn trim_line_end(mut raw: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r'] = raw {
        raw = rest;
    }
    raw
}

fn text_value(field: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(field).into_owned())
}

/// How one file's fields map onto the schema.
struct Layout {
    /// For each schema column, the index of the field holding it.
    sources: Vec<Option<usize>>,
    /// Fields within the header's width that no column takes: (index, rescue key,
    /// new-field slot when the field is a new column).
    unmapped: Vec<(usize, String, Option<Slot>)>,
    /// Number of named fields; fields from here on are rescued as `_c<index>`.
    width: usize,
}

impl Layout {
    /// Columns by header name. An empty name is `_c<index>` (as inference names it);
    /// a repeated name is rescued as `_c<index>`; a name the schema lacks (and that is
    /// not a case variant of a schema column) is a new column.
    fn by_header(fields: &Fields, names: &[String], drift: &mut Drift) -> Self {
        let by_name: HashMap<&str, usize> = fields
            .iter()
            .enumerate()
            .rev()
            .map(|(i, f)| (f.name().as_str(), i))
            .collect();
        let folded: HashSet<String> = fields.iter().map(|f| f.name().to_lowercase()).collect();
        let mut seen: HashSet<String> = HashSet::with_capacity(names.len());
        let mut sources = vec![None; fields.len()];
        let mut unmapped = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let name = if name.is_empty() {
                format!("_c{index}")
            } else {
                name.clone()
            };
            let repeated = !seen.insert(name.clone());
            match by_name.get(name.as_str()) {
                Some(&column) if !repeated && sources[column].is_none() => {
                    sources[column] = Some(index)
                }
                _ if repeated => unmapped.push((index, format!("_c{index}"), None)),
                Some(_) => unmapped.push((index, format!("_c{index}"), None)),
                None => {
                    let slot = if folded.contains(&name.to_lowercase()) {
                        None
                    } else {
                        drift.new_field(vec![name.clone()])
                    };
                    unmapped.push((index, name, slot));
                }
            }
        }
        Layout {
            sources,
            unmapped,
            width: names.len(),
        }
    }

    fn by_position(fields: &Fields) -> Self {
        Layout {
            sources: (0..fields.len()).map(Some).collect(),
            unmapped: Vec::new(),
            width: fields.len(),
        }
    }
}

/// A string column under construction (offsets, bytes, validity).
struct TextColumn {
    offsets: Vec<i32>,
    values: Vec<u8>,
    valid: BooleanBufferBuilder,
    nulls: usize,
}

impl TextColumn {
    fn new() -> Self {
        let mut offsets = Vec::with_capacity(BATCH_ROWS + 1);
        offsets.push(0);
        TextColumn {
            offsets,
            values: Vec::new(),
            valid: BooleanBufferBuilder::new(BATCH_ROWS),
            nulls: 0,
        }
    }

    fn push(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.values.extend_from_slice(v);
                self.valid.append(true);
            }
            None => {
                self.valid.append(false);
                self.nulls += 1;
            }
        }
        // The batch is cut long before the text reaches i32::MAX (BATCH_TEXT_BYTES).
        self.offsets
            .push(i32::try_from(self.values.len()).unwrap_or(i32::MAX));
    }

    fn finish(mut self) -> Result<StringArray, arrow::error::ArrowError> {
        let nulls = (self.nulls > 0).then(|| NullBuffer::new(self.valid.finish()));
        StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            Buffer::from_vec(self.values),
            nulls,
        )
    }
}

struct BatchBuilder {
    /// One per schema column; `None` when the file lacks the column.
    columns: Vec<Option<TextColumn>>,
    rescues: Rescues,
    rows: usize,
}

impl BatchBuilder {
    fn new(layout: &Layout, width: usize) -> Self {
        let mut columns = Vec::with_capacity(width);
        for source in &layout.sources {
            columns.push(source.map(|_| TextColumn::new()));
        }
        BatchBuilder {
            columns,
            rescues: Rescues::default(),
            rows: 0,
        }
    }

    fn text_bytes(&self) -> usize {
        self.columns
            .iter()
            .flatten()
            .map(|c| c.values.len())
            .max()
            .unwrap_or(0)
    }

    fn finish(
        self,
        context: &Context<'_>,
        drift: &mut Drift,
        out: &mut DecodedFile,
    ) -> Result<(), FileReadError> {
        let Context {
            fields,
            layout,
            schema,
            spec,
            file_path,
            meta,
        } = *context;
        let BatchBuilder {
            columns,
            mut rescues,
            rows,
        } = self;
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for ((field, column), source) in fields.iter().zip(columns).zip(&layout.sources) {
            let (Some(column), Some(source)) = (column, source) else {
                arrays.push(new_null_array(field.data_type(), rows));
                continue;
            };
            let text = column
                .finish()
                .map_err(|e| FileReadError::internal(&meta.path, e))?;
            arrays.push(convert(
                text,
                field.data_type(),
                field.name(),
                *source,
                &mut rescues,
                drift,
            ));
        }
        let rescue = rescues.finish(rows, file_path, spec.rescued_data);
        if let Some(column) = rescue.column {
            arrays.push(column);
        }
        let batch = assemble(schema, arrays, rows, &meta.path)?;
        out.num_rows += rows;
        out.num_rows_rescued += rescue.rows_rescued;
        out.num_records_corrupt += rescue.records_corrupt;
        out.batches.push(batch);
        Ok(())
    }
}

/// What finishing a batch needs besides the batch.
struct Context<'a> {
    fields: &'a Fields,
    layout: &'a Layout,
    schema: &'a SchemaRef,
    spec: &'a ReadSpec,
    file_path: &'a str,
    meta: &'a FileMeta,
}

/// Casts a string column to its type; values the cast turns into null are rescued
/// under `name` (ordered by the field's position `source`) and reported as mismatches.
fn convert(
    text: StringArray,
    target: &DataType,
    name: &str,
    source: usize,
    rescues: &mut Rescues,
    drift: &mut Drift,
) -> ArrayRef {
    if target == &DataType::Utf8 {
        return Arc::new(text);
    }
    let options = CastOptions {
        safe: true,
        ..CastOptions::default()
    };
    let cast = if can_cast_types(&DataType::Utf8, target) {
        cast_with_options(&text, target, &options).ok()
    } else {
        None
    };
    let Some(cast) = cast else {
        // Not castable from text (nested types): every value is rescued.
        for row in (0..text.len()).filter(|r| text.is_valid(*r)) {
            drift.mismatch_text(&[name], text.value(row));
            rescues.field(row, source, name, Value::String(text.value(row).into()));
        }
        return new_null_array(target, text.len());
    };
    if cast.logical_null_count() == text.null_count() {
        return cast;
    }
    let before = text
        .nulls()
        .map(|n| n.inner().clone())
        .unwrap_or_else(|| BooleanBuffer::new_set(text.len()));
    if let Some(after) = cast.logical_nulls() {
        let failed = &before & &!after.inner();
        for row in failed.set_indices() {
            drift.mismatch_text(&[name], text.value(row));
            rescues.field(row, source, name, Value::String(text.value(row).into()));
        }
    }
    cast
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
    use serde_json::json;

    use super::super::test_support::{case_file, meta, rescued, rows, spec};
    use super::super::{BATCH_ROWS, decode_file, output_schema};
    use crate::schema::parse_ddl;
    use crate::spec::{CsvOptions, FileFormat};

    fn csv_spec(ddl: &str) -> super::super::ReadSpec {
        spec(FileFormat::Csv, Arc::new(parse_ddl(ddl).unwrap()))
    }

    #[test]
    fn b08_header_drift_is_matched_by_name() {
        let spec = csv_spec("id BIGINT, temp DOUBLE, depth BIGINT, salinity DOUBLE");
        let mut all = Vec::new();
        for file in [
            "B08/step1/h1.csv",
            "B08/step2/h2.csv",
            "B08/step3/h3.csv",
            "B08/step4/h4.csv",
        ] {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            assert_eq!(decoded.num_rows_rescued, 0, "{file}");
            assert!(
                rescued(&decoded.batches).iter().all(Option::is_none),
                "{file}"
            );
            for batch in &decoded.batches {
                assert_eq!(batch.schema(), output_schema(&spec));
            }
            all.extend(rows(&decoded.batches));
        }
        assert_eq!(
            all,
            [
                ["1", "20.5", "3", "null"],
                ["2", "21.0", "4", "null"],
                ["3", "19.5", "5", "null"],
                ["4", "18.0", "6", "35.1"],
                ["5", "17.5", "null", "null"],
            ]
        );
    }

    #[test]
    fn b08_rescue_mode_keeps_the_new_column_in_rescued_data() {
        let spec = csv_spec("id BIGINT, temp DOUBLE, depth BIGINT");
        let path = case_file("B08/step3/h3.csv");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(rows(&decoded.batches), [["4", "18.0", "6"]]);
        assert_eq!(decoded.num_rows_rescued, 1);
        assert_eq!(
            rescued(&decoded.batches),
            [Some(
                json!({"salinity": "35.1", "_file_path": path.to_string_lossy()})
            )]
        );
    }

    #[test]
    fn b09_csv_bom_is_not_part_of_the_first_name() {
        let spec = csv_spec("id BIGINT, name STRING");
        let mut all = Vec::new();
        for file in ["B09/step1/bom.csv", "B09/step2/nobom.csv"] {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            assert_eq!(decoded.num_rows_rescued, 0);
            assert!(rescued(&decoded.batches).iter().all(Option::is_none));
            all.extend(rows(&decoded.batches));
        }
        assert_eq!(all, [["1", "Ana"], ["2", "Bo"], ["3", "Cy"]]);
    }

    #[test]
    fn b10_quoted_newlines_doubled_quotes_and_crlf() {
        let spec = csv_spec("id BIGINT, comment STRING, qty BIGINT");
        let mut comments = Vec::new();
        let mut qty = Vec::new();
        for file in ["B10/step1/multiline.csv", "B10/step1/multiline_crlf.csv"] {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            assert_eq!(decoded.num_rows_rescued, 0, "{file}");
            assert_eq!(decoded.num_records_corrupt, 0, "{file}");
            for batch in &decoded.batches {
                let c = batch.column(1).as_string::<i32>();
                comments.extend(c.iter().map(|v| v.unwrap().to_string()));
                let q = batch
                    .column(2)
                    .as_primitive::<arrow::datatypes::Int64Type>();
                qty.extend(q.iter().map(Option::unwrap));
            }
        }
        assert_eq!(
            comments,
            [
                "first line\nsecond line",
                "she said \"hi\"",
                "plain",
                "a\r\nb",
                "x"
            ]
        );
        assert_eq!(qty, [5, 6, 7, 8, 9]);
    }

    #[test]
    fn b13_ragged_rows_short_is_null_long_is_rescued() {
        let spec = csv_spec("a BIGINT, b BIGINT, c BIGINT");
        let path = case_file("B13/step1/ragged.csv");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [
                ["1", "2", "3"],
                ["4", "5", "null"],
                ["6", "7", "8"],
                ["10", "11", "12"]
            ]
        );
        assert_eq!(decoded.num_records_corrupt, 0);
        assert_eq!(decoded.num_rows_rescued, 1);
        assert_eq!(
            rescued(&decoded.batches),
            [
                None,
                None,
                Some(json!({"_c3": "9", "_file_path": path.to_string_lossy()})),
                None
            ]
        );
    }

    #[test]
    fn b16_header_only_csv_has_no_rows() {
        let spec = csv_spec("id BIGINT, name STRING");
        let decoded =
            decode_file(&meta(&case_file("B16/variant_csv/header_only.csv")), &spec).unwrap();
        assert_eq!(decoded.num_rows, 0);
        assert!(decoded.batches.is_empty());
    }

    #[test]
    fn flights_like_csv_with_na_nulls_and_utc_time_hour() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flights.csv");
        std::fs::write(
            &path,
            "year,month,day,dep_time,dep_delay,carrier,tailnum,time_hour\n\
             2013,1,1,517,2,UA,N14228,2013-01-01T10:00:00Z\n\
             2013,1,1,NA,NA,AA,NA,2013-01-01 11:00:00\n\
             2013,1,2,533,x,UA,N24211,2013-01-02T12:30:00+02:00\n",
        )
        .unwrap();
        let mut spec = csv_spec(
            "year INT, month INT, day INT, dep_time BIGINT, dep_delay DOUBLE, carrier STRING, \
             tailnum STRING, time_hour TIMESTAMP",
        );
        spec.csv = CsvOptions {
            null_value: Some("NA".into()),
            ..CsvOptions::default()
        };
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        let batch = &decoded.batches[0];
        assert_eq!(
            batch.schema().field(7).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        let ts = batch.column(7).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_357_034_400_000_000); // 2013-01-01T10:00:00Z
        assert_eq!(ts.value(1), 1_357_038_000_000_000); // no zone = UTC
        assert_eq!(ts.value(2), 1_357_122_600_000_000); // 10:30 UTC
        assert!(
            batch.column(3).is_null(1) && batch.column(4).is_null(1) && batch.column(6).is_null(1)
        );
        assert_eq!(
            rows(&decoded.batches)[1],
            [
                "2013",
                "1",
                "1",
                "null",
                "null",
                "AA",
                "null",
                "2013-01-01T11:00:00Z"
            ]
        );
        // `NA` is null, not a failed conversion; `x` is.
        assert_eq!(decoded.num_rows_rescued, 1);
        assert_eq!(
            rescued(&decoded.batches),
            [
                None,
                None,
                Some(json!({"dep_delay": "x", "_file_path": path.to_string_lossy()}))
            ]
        );
    }

    #[test]
    fn many_rows_are_split_into_bounded_batches_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.csv");
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "n,s").unwrap();
        let total = BATCH_ROWS * 2 + 5;
        for n in 0..total {
            if n == BATCH_ROWS + 1 {
                writeln!(file, "oops,{n}").unwrap();
            } else {
                writeln!(file, "{n},{n}").unwrap();
            }
        }
        drop(file);
        let decoded = decode_file(&meta(&path), &csv_spec("n BIGINT, s STRING")).unwrap();
        assert_eq!(decoded.num_rows, total);
        assert_eq!(decoded.batches.len(), 3);
        assert!(decoded.batches.iter().all(|b| b.num_rows() <= BATCH_ROWS));
        let strings: Vec<String> = decoded
            .batches
            .iter()
            .flat_map(|b| {
                b.column(1)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            strings,
            (0..total).map(|n| n.to_string()).collect::<Vec<_>>()
        );
        let rescued = rescued(&decoded.batches);
        assert_eq!(decoded.num_rows_rescued, 1);
        assert_eq!(
            rescued[BATCH_ROWS + 1].as_ref().unwrap()["n"],
            json!("oops")
        );
    }

    #[test]
    fn invalid_utf8_record_is_corrupt_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.csv");
        std::fs::write(&path, b"id,name\n1,ok\n2,\xff\xfe\n3,fine\n").unwrap();
        let decoded = decode_file(&meta(&path), &csv_spec("id BIGINT, name STRING")).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["1", "ok"], ["null", "null"], ["3", "fine"]]
        );
        assert_eq!(decoded.num_records_corrupt, 1);
        assert_eq!(decoded.num_rows_rescued, 0);
        let rescued = rescued(&decoded.batches);
        let corrupt = rescued[1].as_ref().unwrap();
        assert_eq!(corrupt["_line"], json!(3));
        // Not UTF-8: the raw bytes as ISO-8859-1, one character per byte (lossless).
        assert_eq!(corrupt["_corrupt_record"], json!("2,\u{ff}\u{fe}"));
        assert!(
            corrupt["_error"]
                .as_str()
                .unwrap()
                .starts_with("invalid UTF-8 at byte 3"),
            "{corrupt}"
        );
    }

    #[test]
    fn without_rescued_data_misfits_are_counted_and_null() {
        let mut spec = csv_spec("a BIGINT, b BIGINT, c BIGINT");
        spec.rescued_data = false;
        let decoded = decode_file(&meta(&case_file("B13/step1/ragged.csv")), &spec).unwrap();
        assert_eq!(decoded.batches[0].num_columns(), 3);
        assert_eq!(decoded.num_rows_rescued, 1);
    }

    #[test]
    fn nested_columns_from_text_and_an_empty_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested.csv");
        std::fs::write(&path, "id,tags,meta\n1,a,x\n").unwrap();
        let spec = csv_spec("id BIGINT, tags ARRAY<STRING>, meta STRUCT<a: STRING>");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        // Arrow casts text to a one-element array; a struct cannot be cast: rescued.
        assert_eq!(rows(&decoded.batches), [["1", "[a]", "null"]]);
        assert_eq!(
            rescued(&decoded.batches)[0].as_ref().unwrap()["meta"],
            json!("x")
        );

        let mut spec = spec.clone();
        spec.schema = Arc::new(arrow::datatypes::Schema::empty());
        spec.rescued_data = false;
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(decoded.num_rows, 1);
        assert_eq!(decoded.batches[0].num_rows(), 1);
        assert_eq!(decoded.batches[0].num_columns(), 0);
        assert_eq!(decoded.num_rows_rescued, 1);
    }

    fn new_fields(decoded: &super::super::DecodedFile) -> Vec<(String, String)> {
        decoded
            .new_fields
            .iter()
            .map(|f| (f.path_string(), crate::schema::type_to_ddl(&f.data_type)))
            .collect()
    }

    #[test]
    fn drift_b08_header_tells_the_new_column_and_values_its_type() {
        let spec = csv_spec("id BIGINT, temp DOUBLE, depth BIGINT");
        let path = case_file("B08/step3/h3.csv");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(new_fields(&decoded), [("salinity".into(), "DOUBLE".into())]);
        assert_eq!(decoded.new_fields[0].file, path.to_string_lossy());
        assert!(decoded.type_mismatches.is_empty());
        for file in ["B08/step2/h2.csv", "B08/step4/h4.csv"] {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            assert!(decoded.new_fields.is_empty(), "{file}");
        }
    }

    #[test]
    fn drift_csv_names_case_variants_empty_and_repeated_headers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.csv");
        // BOM; `ID` is a case variant of `id`; the 3rd name is empty (`_c2`, a schema
        // column); `x` repeats; `Extra`/`extra` differ by case; `blank` has no value.
        std::fs::write(
            &path,
            b"\xef\xbb\xbfid,ID,,x,x,Extra,extra,blank,when\n\
              1,2,c,4,5,2024-01-01T00:00:00Z,s,,2024-01-01 10:00:00\n\
              6,7,h,9,10,11,t,,2024-01-02T00:00:00Z\n",
        )
        .unwrap();
        let spec = csv_spec("id BIGINT, _c2 STRING, x BIGINT");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(rows(&decoded.batches), [["1", "c", "4"], ["6", "h", "9"]]);
        assert_eq!(
            new_fields(&decoded),
            [
                ("Extra".into(), "STRING".into()),
                ("blank".into(), "Null".into()),
                ("when".into(), "TIMESTAMP".into()),
            ]
        );
        let r = rescued(&decoded.batches);
        let row0 = r[0].as_ref().unwrap();
        assert_eq!(row0["ID"], json!("2"));
        assert_eq!(row0["_c4"], json!("5"));
        assert_eq!(row0["extra"], json!("s"));
        assert_eq!(row0["Extra"], json!("2024-01-01T00:00:00Z"));
    }

    #[test]
    fn drift_csv_without_header_names_wider_rows_like_inference() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nohdr.csv");
        std::fs::write(&path, "1,x\n2,y,3\n4,z,5,\n").unwrap();
        let mut spec = csv_spec("_c0 BIGINT, _c1 STRING");
        spec.csv.header = false;
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            new_fields(&decoded),
            [
                ("_c2".into(), "BIGINT".into()),
                ("_c3".into(), "Null".into())
            ]
        );
        // With a header, a field past the header's width is a ragged row, not a column.
        let decoded = decode_file(
            &meta(&case_file("B13/step1/ragged.csv")),
            &csv_spec("a BIGINT, b BIGINT, c BIGINT"),
        )
        .unwrap();
        assert!(decoded.new_fields.is_empty());
    }

    #[test]
    fn drift_csv_mismatches_epoch_timestamps_and_too_wide_decimals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.csv");
        std::fs::write(
            &path,
            "n,ts,amount\n\
             1,2024-01-02T03:04:05Z,1.25\n\
             2.5,1704164645,12345678901.5\n\
             x,yesterday,-0.005\n",
        )
        .unwrap();
        let decoded = decode_file(
            &meta(&path),
            &csv_spec("n BIGINT, ts TIMESTAMP, amount DECIMAL(10,2)"),
        )
        .unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [
                ["1", "2024-01-02T03:04:05Z", "1.25"],
                ["null", "null", "null"],
                ["null", "null", "-0.01"],
            ]
        );
        let found: Vec<(String, usize, String)> = decoded
            .type_mismatches
            .iter()
            .map(|m| {
                (
                    m.path_string(),
                    m.count,
                    crate::schema::type_to_ddl(&m.found),
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                ("n".into(), 2, "STRING".into()),
                ("ts".into(), 2, "STRING".into()),
                ("amount".into(), 1, "DOUBLE".into()),
            ]
        );
        let r = rescued(&decoded.batches);
        // An epoch number is not a CSV timestamp (documented): rescued as text.
        assert_eq!(r[1].as_ref().unwrap()["ts"], json!("1704164645"));
        // A decimal wider than its precision is rescued, never truncated.
        assert_eq!(r[1].as_ref().unwrap()["amount"], json!("12345678901.5"));
        assert_eq!(r[1].as_ref().unwrap()["n"], json!("2.5"));
    }

    #[test]
    fn latin1_csv_records_are_corrupt_and_readable_in_the_raw_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("latin1.csv");
        std::fs::write(&path, b"id,city\n1,Z\xfcrich\n2,Paris\n3,S\xe3o Paulo\n").unwrap();
        let decoded = decode_file(&meta(&path), &csv_spec("id BIGINT, city STRING")).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["null", "null"], ["2", "Paris"], ["null", "null"]]
        );
        assert_eq!(decoded.num_records_corrupt, 2);
        let r = rescued(&decoded.batches);
        assert_eq!(r[0].as_ref().unwrap()["_corrupt_record"], json!("1,Zürich"));
        assert_eq!(r[0].as_ref().unwrap()["_line"], json!(2));
        assert_eq!(
            r[2].as_ref().unwrap()["_corrupt_record"],
            json!("3,São Paulo")
        );
        assert_eq!(r[2].as_ref().unwrap()["_line"], json!(4));
    }

    #[test]
    fn no_header_matches_by_position_and_names_extras() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nohdr.csv");
        std::fs::write(&path, "1;x\n2;y;extra\n").unwrap();
        let mut spec = csv_spec("id BIGINT, v STRING");
        spec.csv = CsvOptions {
            header: false,
            delimiter: b';',
            ..CsvOptions::default()
        };
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(rows(&decoded.batches), [["1", "x"], ["2", "y"]]);
        assert_eq!(
            rescued(&decoded.batches)[1].as_ref().unwrap()["_c2"],
            json!("extra")
        );
    }
}
