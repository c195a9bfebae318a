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
    data_fields, display_path, latin1_text, oversized_record,
};
use crate::spec::CsvOptions;
use crate::spec::TimestampOptions;

/// A batch is cut early when a column's text exceeds this (checked every 1024 rows),
/// so string offsets stay far below `i32::MAX`.
const BATCH_TEXT_BYTES: usize = 256 << 20;

pub(super) fn decode(
    data: &[u8],
    meta: &FileMeta,
    spec: &ReadSpec,
    schema: &SchemaRef,
) -> Result<DecodedFile, FileReadError> {
    match super::csv_fast::decode(data, meta, spec, schema) {
        Some(decoded) => Ok(decoded),
        None => decode_rescuing(data, meta, spec, schema),
    }
}

/// The rescuing decoder: every file the fast path ([`super::csv_fast`]) declines.
pub(super) fn decode_rescuing(
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
        let names = safe_header(&names, options.null_value.as_deref());
        Layout::by_header(&fields, &names, &mut drift)
    } else {
        Layout::by_position(&fields)
    };
    // Without a header, fields past the schema's width are the new columns `_c<index>`.
    let mut extra_slots: Vec<Option<Slot>> = Vec::new();
    // Columns that keep a quoted empty field as `empty_value` (the others read it as null).
    let text_columns: Vec<bool> = fields
        .iter()
        .map(|f| matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8))
        .collect();

    // Each column's text buffer starts at its share of the file (at most 2 MiB in all),
    // so most columns never grow (each growth is a copy and a malloc).
    let text_hint = data.len().min(2 << 20) / layout.sources.len().max(1);
    let mut batch = BatchBuilder::new(&layout, text_hint);
    let mut out = DecodedFile::default();
    let null_value = options.null_value.as_deref().map(str::as_bytes);
    let empty_value = options.empty_value.as_bytes();
    let mut quoted_empty: Vec<usize> = Vec::new();
    let failfast = spec.text.mode == crate::spec::ParseMode::FailFast;

    loop {
        if !read(&mut reader, &mut record)? {
            break;
        }
        let start = record
            .position()
            .map_or(0, |p| usize::try_from(p.byte()).unwrap_or(usize::MAX));
        let end = record_start(&reader).min(data.len());
        let row = batch.rows;
        let raw_record = || trim_line_end(data.get(start..end).unwrap_or_default());
        let line = record.position().map_or(0, |p| p.line() as usize);
        if let Some(error) = oversized_record(end.saturating_sub(start), spec.text.max_record_bytes)
        {
            let (raw, _) = corrupt_text(raw_record());
            batch.rescues.corrupt(row, raw, error, line);
            for column in batch.columns.iter_mut().flatten() {
                column.push(None);
            }
        } else {
            // Which empty fields were written `""` (a value) rather than left empty (null).
            quoted_empty.clear();
            if record.iter().any(<[u8]>::is_empty) {
                quoted_empty_fields(raw_record(), options, &mut quoted_empty);
            }
            let value = |index: usize, text: bool| -> Option<&[u8]> {
                let f = record.get(index)?;
                if f.is_empty() {
                    let quoted = quoted_empty.contains(&index);
                    return (quoted && text && Some(empty_value) != null_value)
                        .then_some(empty_value)
                        .filter(|v| !v.is_empty() || text);
                }
                (!is_null_value(f, null_value)).then_some(f)
            };
            let mut damaged: Vec<String> = Vec::new();
            for ((column, source), &text) in batch
                .columns
                .iter_mut()
                .zip(&layout.sources)
                .zip(&text_columns)
            {
                if let (Some(column), Some(index)) = (column.as_mut(), source) {
                    let v = value(*index, text);
                    match v {
                        Some(f) if !utf8_ok && std::str::from_utf8(f).is_err() => {
                            column.push(None);
                            let name = layout.name_of(*index, &fields);
                            batch.rescues.field(
                                row,
                                *index,
                                name.clone(),
                                Value::String(latin1_text(f)),
                            );
                            damaged.push(name);
                        }
                        v => column.push(v),
                    }
                }
            }
            for &(index, ref key, slot) in &layout.unmapped {
                if let Some(f) = value(index, false) {
                    if let Some(slot) = slot {
                        absorb_new(&mut drift, slot, f);
                    }
                    if !utf8_ok && std::str::from_utf8(f).is_err() {
                        damaged.push(key.clone());
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
                if let Some(f) = value(index, false) {
                    if let Some(&Some(slot)) = extra_slots.get(index - layout.width) {
                        absorb_new(&mut drift, slot, f);
                    }
                    if !utf8_ok && std::str::from_utf8(f).is_err() {
                        damaged.push(format!("_c{index}"));
                    }
                    batch
                        .rescues
                        .field(row, index, format!("_c{index}"), text_value(f));
                }
            }
            if options.header && record.len() > layout.width {
                batch.rescues.malformed(row, || {
                    format!(
                        "the record has {} fields, the header {}",
                        record.len(),
                        layout.width
                    )
                });
            }
            if !damaged.is_empty() {
                batch
                    .rescues
                    .malformed(row, || format!("invalid UTF-8 in {}", damaged.join(", ")));
                batch.rescues.field(
                    row,
                    usize::MAX,
                    "_error",
                    Value::String(format!(
                        "invalid UTF-8 in {} (line {line}; rescued as the raw bytes decoded as ISO-8859-1, one character per byte)",
                        damaged.join(", ")
                    )),
                );
            }
        }
        if failfast {
            batch.spans.push((line, start, end));
        }
        batch.rows += 1;
        if batch.rows == BATCH_ROWS
            || (batch.rows.is_multiple_of(1024) && batch.text_bytes() > BATCH_TEXT_BYTES)
        {
            let done = std::mem::replace(&mut batch, BatchBuilder::new(&layout, text_hint));
            let context = Context {
                fields: &fields,
                layout: &layout,
                schema,
                spec,
                file_path: &file_path,
                meta,
                data,
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
            data,
        };
        batch.finish(&context, &mut drift, &mut out)?;
    }
    drift.finish(&spec.schema, &file_path, &mut out);
    Ok(out)
}

/// Whether a field is the dialect's `null_value`. The first byte is compared first, so
/// most fields (numbers against `NA`) are told apart without a `memcmp` call.
#[inline]
fn is_null_value(field: &[u8], null_value: Option<&[u8]>) -> bool {
    match null_value {
        Some(null) => field.len() == null.len() && field.first() == null.first() && field == null,
        None => false,
    }
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

/// A rescued CSV field: its text, or its bytes as ISO-8859-1 when not UTF-8 (lossless).
fn text_value(field: &[u8]) -> Value {
    Value::String(match std::str::from_utf8(field) {
        Ok(s) => s.to_string(),
        Err(_) => latin1_text(field),
    })
}

/// Spark's `CSVUtils.makeSafeHeader` (case-insensitive, Spark's default): an empty
/// name, or one equal to `null_value`, is `_c<index>`; a name that occurs more than
/// once (also only by letter case) becomes name + index at every occurrence
/// (`id,ID` -> `id0,ID1`), so no column of the file is left without a name.
pub(crate) fn safe_header(names: &[String], null_value: Option<&str>) -> Vec<String> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for name in names {
        *counts.entry(name.to_lowercase()).or_default() += 1;
    }
    names
        .iter()
        .enumerate()
        .map(|(index, name)| {
            if name.is_empty() || Some(name.as_str()) == null_value {
                format!("_c{index}")
            } else if counts.get(&name.to_lowercase()).is_some_and(|&n| n > 1) {
                format!("{name}{index}")
            } else {
                name.clone()
            }
        })
        .collect()
}

/// The indices of the fields of a raw record that are a quoted empty string (`""`).
fn quoted_empty_fields(raw: &[u8], options: &CsvOptions, out: &mut Vec<usize>) {
    let (delimiter, quote) = (options.delimiter, options.quote);
    let mut index = 0;
    let mut i = 0;
    loop {
        if raw.get(i) == Some(&quote) {
            // A quoted field: find its closing quote.
            let mut j = i + 1;
            let mut content = 0usize;
            loop {
                match raw.get(j) {
                    None => break,
                    Some(&b) if Some(b) == options.escape && j + 1 < raw.len() => {
                        content += 1;
                        j += 2;
                    }
                    Some(&b) if b == quote => {
                        if raw.get(j + 1) == Some(&quote) && options.escape.is_none() {
                            content += 1;
                            j += 2;
                        } else {
                            j += 1;
                            break;
                        }
                    }
                    Some(_) => {
                        content += 1;
                        j += 1;
                    }
                }
            }
            if content == 0 {
                out.push(index);
            }
            i = j;
        }
        // To the end of the field.
        while let Some(&b) = raw.get(i) {
            if b == delimiter {
                break;
            }
            i += 1;
        }
        if i >= raw.len() {
            break;
        }
        i += 1;
        index += 1;
    }
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
    /// Columns by header name (made safe by [`safe_header`] first, as inference
    /// names them); a name still repeated after that is rescued as `_c<index>`; a
    /// name the schema lacks (and that is not a case variant of a schema column) is
    /// a new column.
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

    /// The column name a field index feeds (for messages and rescue keys).
    fn name_of(&self, index: usize, fields: &Fields) -> String {
        self.sources
            .iter()
            .position(|s| *s == Some(index))
            .map(|c| fields[c].name().clone())
            .unwrap_or_else(|| format!("_c{index}"))
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
    /// Built from the first null on (before it, every value was valid).
    valid: Option<BooleanBufferBuilder>,
}

impl TextColumn {
    fn new(text_hint: usize) -> Self {
        let mut offsets = Vec::with_capacity(BATCH_ROWS + 1);
        offsets.push(0);
        TextColumn {
            offsets,
            values: Vec::with_capacity(text_hint),
            valid: None,
        }
    }

    fn push(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.values.extend_from_slice(v);
                if let Some(valid) = self.valid.as_mut() {
                    valid.append(true);
                }
            }
            None => {
                let rows = self.offsets.len() - 1;
                self.valid
                    .get_or_insert_with(|| {
                        let mut valid = BooleanBufferBuilder::new(BATCH_ROWS);
                        valid.append_n(rows, true);
                        valid
                    })
                    .append(false);
            }
        }
        // The batch is cut long before the text reaches i32::MAX (BATCH_TEXT_BYTES).
        self.offsets
            .push(i32::try_from(self.values.len()).unwrap_or(i32::MAX));
    }

    fn finish(mut self) -> Result<StringArray, arrow::error::ArrowError> {
        let nulls = self.valid.as_mut().map(|v| NullBuffer::new(v.finish()));
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
    /// `mode = "failfast"`: each row's line and byte range in the text.
    spans: Vec<(usize, usize, usize)>,
}

impl BatchBuilder {
    /// `text_hint`: the bytes each column's text buffer starts with.
    fn new(layout: &Layout, text_hint: usize) -> Self {
        let mut columns = Vec::with_capacity(layout.sources.len());
        for source in &layout.sources {
            columns.push(source.map(|_| TextColumn::new(text_hint)));
        }
        BatchBuilder {
            columns,
            rescues: Rescues::default(),
            rows: 0,
            spans: Vec::new(),
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
            ..
        } = *context;
        let BatchBuilder {
            columns,
            mut rescues,
            rows,
            spans,
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
                spec,
            ));
        }
        if spec.text.mode == crate::spec::ParseMode::FailFast
            && let Some((row, why)) = rescues.first_malformed()
        {
            let (line, start, end) = spans.get(*row).copied().unwrap_or_default();
            let raw = trim_line_end(context.data.get(start..end).unwrap_or_default());
            return Err(FileReadError::malformed(&meta.path, line, why.clone(), raw));
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
    /// The file's text (for a failfast error's record).
    data: &'a [u8],
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
    spec: &ReadSpec,
) -> ArrayRef {
    if target == &DataType::Utf8 {
        return Arc::new(text);
    }
    // Spark's nanValue / positiveInf / negativeInf spellings, in Arrow's.
    let text = if matches!(target, DataType::Float32 | DataType::Float64) {
        non_finite_spellings(text, &spec.csv)
    } else {
        text
    };
    if let DataType::Timestamp(unit, tz) = target
        && !spec.text.timestamps.is_default()
    {
        return timestamps(
            &text,
            *unit,
            tz.is_none(),
            &spec.text.timestamps,
            name,
            source,
            rescues,
            drift,
        );
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
            rescues.malformed(row, || misfit(text.value(row), name, target));
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
            rescues.malformed(row, || misfit(text.value(row), name, target));
            rescues.field(row, source, name, Value::String(text.value(row).into()));
        }
    }
    cast
}

/// Why a value is malformed (`mode = "failfast"`).
fn misfit(text: &str, name: &str, target: &DataType) -> String {
    format!(
        "{text:?} does not fit column {} ({})",
        crate::schema::ddl::quote_name(name),
        crate::schema::type_to_ddl(target)
    )
}

/// `nan_value` / `positive_inf` / `negative_inf` rewritten as `NaN` / `inf` / `-inf`.
fn non_finite_spellings(text: StringArray, options: &CsvOptions) -> StringArray {
    let hits =
        (0..text.len()).any(|r| text.is_valid(r) && options.non_finite(text.value(r)).is_some());
    if !hits {
        return text;
    }
    text.iter()
        .map(|v| v.map(|s| options.non_finite(s).unwrap_or(s)))
        .collect()
}

/// Timestamp text read with the session time zone / pattern (see [`crate::spec::time`]);
/// values that do not parse are rescued as their text.
#[allow(clippy::too_many_arguments)]
fn timestamps(
    text: &StringArray,
    unit: arrow::datatypes::TimeUnit,
    ntz: bool,
    options: &TimestampOptions,
    name: &str,
    source: usize,
    rescues: &mut Rescues,
    drift: &mut Drift,
) -> ArrayRef {
    use arrow::array::TimestampMicrosecondArray;
    use arrow::datatypes::TimeUnit;
    let mut values: Vec<Option<i64>> = Vec::with_capacity(text.len());
    for row in 0..text.len() {
        if text.is_null(row) {
            values.push(None);
            continue;
        }
        let parsed = options.parse_micros(text.value(row), ntz);
        if parsed.is_none() {
            drift.mismatch_text(&[name], text.value(row));
            rescues.malformed(row, || {
                misfit(
                    text.value(row),
                    name,
                    &DataType::Timestamp(unit, (!ntz).then(|| "UTC".into())),
                )
            });
            rescues.field(row, source, name, Value::String(text.value(row).into()));
        }
        values.push(parsed);
    }
    let micros = TimestampMicrosecondArray::from(values);
    let micros = if ntz {
        micros
    } else {
        micros.with_timezone("UTC")
    };
    let target = DataType::Timestamp(unit, (!ntz).then(|| "UTC".into()));
    if unit == TimeUnit::Microsecond && !ntz {
        return Arc::new(micros);
    }
    cast_with_options(&micros, &target, &CastOptions::default())
        .unwrap_or_else(|_| new_null_array(&target, text.len()))
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
    fn invalid_utf8_field_is_rescued_not_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.csv");
        std::fs::write(&path, b"id,name\n1,ok\n2,\xff\xfe\n3,fine\n").unwrap();
        let decoded = decode_file(&meta(&path), &csv_spec("id BIGINT, name STRING")).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["1", "ok"], ["2", "null"], ["3", "fine"]]
        );
        assert_eq!(decoded.num_records_corrupt, 0);
        assert_eq!(decoded.num_rows_rescued, 1);
        let rescued = rescued(&decoded.batches);
        let row = rescued[1].as_ref().unwrap();
        // Not UTF-8: the raw bytes as ISO-8859-1, one character per byte (lossless).
        assert_eq!(row["name"], json!("\u{ff}\u{fe}"));
        assert!(
            row["_error"]
                .as_str()
                .unwrap()
                .starts_with("invalid UTF-8 in name (line 3;"),
            "{row}"
        );
    }

    #[test]
    fn quoted_empty_fields_and_non_finite_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.csv");
        std::fs::write(
            &path,
            "a,b,c,d\n\"\",,\"x\"\"\",NaN\n,\"\",\"\",-Inf\n\"\"\"\",\"\"\"\"\"\",\"\",Inf\n",
        )
        .unwrap();
        let mut out = Vec::new();
        let options = CsvOptions::default();
        super::quoted_empty_fields(b"\"\",,\"x\"\"\",NaN", &options, &mut out);
        assert_eq!(out, [0]);
        out.clear();
        super::quoted_empty_fields(b",\"\",\"\"\"\",\"\"", &options, &mut out);
        assert_eq!(out, [1, 3]);
        let decoded = decode_file(
            &meta(&path),
            &csv_spec("a STRING, b STRING, c STRING, d DOUBLE"),
        )
        .unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [
                ["", "null", "x\"", "NaN"],
                ["null", "", "", "-inf"],
                ["\"", "\"\"", "", "inf"]
            ]
        );
        assert_eq!(decoded.num_rows_rescued, 0);
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
        // BOM; `id`/`ID` repeat by case and `x` repeats: name + index (Spark's
        // makeSafeHeader); the 3rd name is empty (`_c2`, a schema column); `Photo` is a
        // case variant of the schema's `photo` (rescued); `blank` has no value.
        std::fs::write(
            &path,
            b"\xef\xbb\xbfid,ID,,x,x,Photo,extra,blank,when\n\
              1,2,c,4,5,p.png,s,,2024-01-01 10:00:00\n\
              6,7,h,9,10,q.png,t,,2024-01-02T00:00:00Z\n",
        )
        .unwrap();
        let spec = csv_spec("id0 BIGINT, _c2 STRING, x3 BIGINT, photo STRING");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["1", "c", "4", "null"], ["6", "h", "9", "null"]]
        );
        assert_eq!(
            new_fields(&decoded),
            [
                ("ID1".into(), "BIGINT".into()),
                ("x4".into(), "BIGINT".into()),
                ("extra".into(), "STRING".into()),
                ("blank".into(), "Null".into()),
                ("when".into(), "TIMESTAMP".into()),
            ]
        );
        let r = rescued(&decoded.batches);
        let row0 = r[0].as_ref().unwrap();
        assert_eq!(row0["ID1"], json!("2"));
        assert_eq!(row0["x4"], json!("5"));
        assert_eq!(row0["Photo"], json!("p.png"));
        assert_eq!(row0["extra"], json!("s"));
        assert_eq!(
            super::safe_header(
                &["a".into(), "".into(), "NA".into(), "A".into(), "b".into()],
                Some("NA")
            ),
            ["a0", "_c1", "_c2", "A3", "b"]
        );
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
    fn latin1_csv_fields_are_rescued_and_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("latin1.csv");
        std::fs::write(&path, b"id,city\n1,Z\xfcrich\n2,Paris\n3,S\xe3o Paulo\n").unwrap();
        let decoded = decode_file(&meta(&path), &csv_spec("id BIGINT, city STRING")).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["1", "null"], ["2", "Paris"], ["3", "null"]]
        );
        assert_eq!(decoded.num_records_corrupt, 0);
        assert_eq!(decoded.num_rows_rescued, 2);
        let r = rescued(&decoded.batches);
        assert_eq!(r[0].as_ref().unwrap()["city"], json!("Zürich"));
        assert!(
            r[0].as_ref().unwrap()["_error"]
                .as_str()
                .unwrap()
                .contains("line 2")
        );
        assert_eq!(r[2].as_ref().unwrap()["city"], json!("São Paulo"));
        // With the encoding declared, nothing is rescued.
        let mut spec = csv_spec("id BIGINT, city STRING");
        spec.text.encoding = crate::spec::TextEncoding::Latin1;
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["1", "Zürich"], ["2", "Paris"], ["3", "São Paulo"]]
        );
        assert_eq!(decoded.num_rows_rescued, 0);
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
