//! JSON lines decoding: each line is parsed with `serde_json`, every value is
//! checked against its column (a misfit moves to `_rescued_data`), and the cleaned
//! objects are turned into columns by arrow-json's `Decoder::serialize`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::timezone::Tz;
use arrow::compute::kernels::cast_utils::string_to_datetime;
use arrow::compute::parse_string_to_decimal_native;
use arrow::datatypes::{
    DataType, Decimal128Type, DecimalType, Fields, Schema, SchemaRef, TimeUnit,
};
use arrow::json::ReaderBuilder;
use arrow::json::reader::Decoder;
use chrono::{DateTime, NaiveDate, TimeZone};
use serde_json::{Map, Value};

use super::drift::Drift;
use super::json_fast::FastPath;
use super::rescue::Rescues;
use super::{
    BATCH_ROWS, DecodedFile, FileMeta, FileReadError, ReadSpec, assemble, corrupt_text,
    data_fields, display_path, latin1_text, oversized_record,
};
use crate::schema::infer::{marked_number, unmark};
use crate::spec::{ParseMode, TimestampOptions};

pub(super) fn decode(
    data: &[u8],
    meta: &FileMeta,
    spec: &ReadSpec,
    schema: &SchemaRef,
) -> Result<DecodedFile, FileReadError> {
    decode_with(data, meta, spec, schema, true)
}

/// [`decode`], with (`fast`) or without the fast path of [`super::json_fast`]; both
/// give the same result (the differential tests and the `json_fast_path` fuzz target).
pub(crate) fn decode_with(
    data: &[u8],
    meta: &FileMeta,
    spec: &ReadSpec,
    schema: &SchemaRef,
    fast: bool,
) -> Result<DecodedFile, FileReadError> {
    let fields = data_fields(&spec.schema);
    let options = ShapeOptions {
        non_numeric: spec.text.allow_non_numeric_numbers,
        timestamps: (!spec.text.timestamps.is_default())
            .then(|| Arc::new(spec.text.timestamps.clone())),
    };
    // A decimal column needs a number's exact digits, which serde_json's f64 would round.
    let exact_numbers = fields.iter().any(|f| has_decimal(f.data_type()));
    let shape =
        StructShape::new(&fields, &options).map_err(|message| FileReadError::Unsupported {
            path: meta.path.clone(),
            message,
        })?;
    let data_schema = Arc::new(Schema::new(fields.clone()));
    let decoder = ReaderBuilder::new(data_schema.clone())
        .with_batch_size(BATCH_ROWS)
        .build_decoder()
        .map_err(|e| FileReadError::Unsupported {
            path: meta.path.clone(),
            message: e.to_string(),
        })?;
    let mut fast = if fast {
        FastPath::new(data_schema, options.timestamps.is_none(), BATCH_ROWS)
    } else {
        None
    };
    let lines = Lines {
        shape,
        non_numeric: options.non_numeric,
        exact_numbers,
        failfast: spec.text.mode == ParseMode::FailFast,
        max_record: spec.text.max_record_bytes,
    };
    let mut state = State {
        decoder,
        rows: Vec::with_capacity(BATCH_ROWS.min(data.len() / 16 + 1)),
        rescues: Rescues::default(),
        out: DecodedFile::default(),
        drift: Drift::default(),
        file_path: display_path(meta),
        meta,
        spec,
        schema,
    };

    // The non-blank lines of a batch: (index from 0, text without its line end).
    let mut batch: Vec<(usize, &[u8])> = Vec::with_capacity(BATCH_ROWS.min(data.len() / 16 + 1));
    for (index, line) in data.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        batch.push((index, line));
        if batch.len() == BATCH_ROWS {
            lines.decode_batch(&batch, fast.as_mut(), &mut state)?;
            batch.clear();
        }
    }
    lines.decode_batch(&batch, fast.as_mut(), &mut state)?;
    let mut out = state.out;
    state.drift.finish(&spec.schema, &state.file_path, &mut out);
    Ok(out)
}

/// The rescuing decoder's view of the lines.
struct Lines {
    shape: StructShape,
    non_numeric: bool,
    exact_numbers: bool,
    failfast: bool,
    max_record: Option<u64>,
}

impl Lines {
    /// One batch of non-blank lines: by the fast path when every line fits, otherwise
    /// line by line with rescue.
    fn decode_batch(
        &self,
        batch: &[(usize, &[u8])],
        fast: Option<&mut FastPath>,
        state: &mut State<'_>,
    ) -> Result<(), FileReadError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(fast) = fast
            && batch
                .iter()
                .all(|(_, line)| oversized_record(line.len(), self.max_record).is_none())
        {
            let texts: Vec<&[u8]> = batch.iter().map(|(_, line)| *line).collect();
            if let Some(columns) = fast.decode(&texts) {
                return state.push_batch(columns, batch.len());
            }
        }
        let mut path: Vec<&str> = Vec::new();
        for &(index, line) in batch {
            self.line(index, line, &mut path, state)?;
        }
        state.flush()
    }

    /// One non-blank line (`index` from 0) as a row of `state`.
    fn line<'a>(
        &'a self,
        index: usize,
        line: &[u8],
        path: &mut Vec<&'a str>,
        state: &mut State<'_>,
    ) -> Result<(), FileReadError> {
        let meta = state.meta;
        let spec = state.spec;
        let failfast = self.failfast;
        let malformed = |line: usize, message: String, raw: &[u8]| {
            FileReadError::malformed(&meta.path, line, message, raw)
        };
        let row = state.rows.len();
        if let Some(error) = oversized_record(line.len(), self.max_record) {
            if failfast {
                return Err(malformed(index + 1, error, line));
            }
            let (raw, _) = corrupt_text(line);
            state.rescues.corrupt(row, raw, error, index + 1);
            state.rows.push(Value::Object(Map::new()));
            return Ok(());
        }
        match parse_line(line, self.non_numeric, self.exact_numbers) {
            Ok(Line {
                object,
                marked,
                invalid_utf8,
            }) => {
                let mut object = object;
                // Fields holding bytes that are not UTF-8: rescued whole as ISO-8859-1 text.
                let mut damaged = Vec::new();
                if invalid_utf8 {
                    let keys: Vec<String> = object
                        .iter()
                        .filter(|(k, v)| has_raw_bytes(k) || value_has_raw_bytes(v))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for key in keys {
                        if let Some(mut value) = object.remove(&key) {
                            restore_raw_bytes(&mut value);
                            damaged.push((raw_bytes_text(&key), value));
                        }
                    }
                }
                let (cleaned, rescued) = self.shape.fit_object(object, path, &mut state.drift);
                if failfast {
                    if let Some((field, value)) = state.drift.take_first_mismatch() {
                        let column = crate::schema::evolve::type_at(&spec.schema, &field)
                            .map(crate::schema::type_to_ddl)
                            .unwrap_or_default();
                        return Err(malformed(
                            index + 1,
                            format!(
                                "{value} does not fit column {} ({column})",
                                crate::schema::path_to_string(&field)
                            ),
                            line,
                        ));
                    }
                    if !damaged.is_empty() {
                        let names: Vec<&str> = damaged.iter().map(|(k, _)| k.as_str()).collect();
                        return Err(malformed(
                            index + 1,
                            format!("invalid UTF-8 in {}", names.join(", ")),
                            line,
                        ));
                    }
                }
                let mut order = 0;
                for (key, mut value) in rescued {
                    if marked {
                        unmark(&mut value);
                    }
                    state.rescues.field(row, order, key, value);
                    order += 1;
                }
                if !damaged.is_empty() {
                    let names: Vec<&str> = damaged.iter().map(|(k, _)| k.as_str()).collect();
                    let error = format!(
                        "invalid UTF-8 in {} (rescued as the raw bytes decoded as ISO-8859-1, one character per byte)",
                        names.join(", ")
                    );
                    for (key, mut value) in damaged {
                        if marked {
                            unmark(&mut value);
                        }
                        state.rescues.field(row, order, key, value);
                        order += 1;
                    }
                    state
                        .rescues
                        .field(row, usize::MAX, "_error", Value::String(error));
                }
                state.rows.push(Value::Object(cleaned));
            }
            Err(parsed) => {
                let (raw, utf8_error) = corrupt_text(line);
                let error = match (utf8_error, parsed) {
                    (Some(e), _) => e,
                    (None, Err(e)) => format!("invalid JSON: {e}"),
                    (None, Ok(other)) => format!(
                        "not a JSON object: a JSON lines record is one object per line, found {}",
                        json_kind(&other)
                    ),
                };
                if failfast {
                    return Err(malformed(index + 1, error, line));
                }
                state.rescues.corrupt(row, raw, error, index + 1);
                state.rows.push(Value::Object(Map::new()));
            }
        }
        Ok(())
    }
}

/// Decodes `data` with the fast path and with the rescuing decoder alone; `Err` says
/// how the two results differ (rows, `_rescued_data`, counts, drift, or the error).
pub(crate) fn compare_paths(data: &[u8], meta: &FileMeta, spec: &ReadSpec) -> Result<(), String> {
    let schema = super::output_schema(spec);
    let fast = decode_with(data, meta, spec, &schema, true);
    let slow = decode_with(data, meta, spec, &schema, false);
    match (fast, slow) {
        (Ok(fast), Ok(slow)) => {
            if fast.batches != slow.batches {
                return Err(format!(
                    "batches differ:\nfast {:?}\nslow {:?}",
                    fast.batches, slow.batches
                ));
            }
            let counts = |d: &DecodedFile| {
                format!(
                    "rows {} rescued {} corrupt {} new {:?} mismatches {:?}",
                    d.num_rows,
                    d.num_rows_rescued,
                    d.num_records_corrupt,
                    d.new_fields,
                    d.type_mismatches
                )
            };
            let (fast, slow) = (counts(&fast), counts(&slow));
            if fast != slow {
                return Err(format!("counts differ: fast {fast}, slow {slow}"));
            }
            Ok(())
        }
        (Err(fast), Err(slow)) if fast.to_string() == slow.to_string() => Ok(()),
        (fast, slow) => Err(format!(
            "outcomes differ: fast {:?}, slow {:?}",
            fast.map(|d| d.num_rows),
            slow.map(|d| d.num_rows)
        )),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A parsed JSON lines record.
pub(crate) struct Line {
    pub object: Map<String, Value>,
    /// Bare non-finite tokens were replaced by marker strings ([`NON_FINITE_MARK`]).
    pub marked: bool,
    /// The line was not UTF-8: each invalid byte is a character of [`RAW_BYTE_BASE`]`..`.
    pub invalid_utf8: bool,
}

/// Parses one line into an object. A line that `serde_json` refuses is tried again
/// with its bare `NaN`/`Infinity` tokens as marker strings (when `non_numeric`), and
/// a line that is not UTF-8 with each invalid byte as a private-use character, so
/// that only the fields holding them are rescued. `Err` carries what the strict
/// parse said (the record is corrupt).
pub(crate) fn parse_line(
    line: &[u8],
    non_numeric: bool,
    exact_numbers: bool,
) -> Result<Line, Result<Value, serde_json::Error>> {
    // Numbers whose digits a double would change kept as marker strings (their literal).
    if exact_numbers
        && let Ok(text) = std::str::from_utf8(line)
        && let Some(marked) = mark_numbers(text)
    {
        let marked = if non_numeric {
            mark_non_finite(&marked).unwrap_or(marked)
        } else {
            marked
        };
        if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(&marked) {
            return Ok(Line {
                object,
                marked: true,
                invalid_utf8: false,
            });
        }
    }
    let first = serde_json::from_slice::<Value>(line);
    let strict = match first {
        Ok(Value::Object(object)) => {
            return Ok(Line {
                object,
                marked: false,
                invalid_utf8: false,
            });
        }
        other => other,
    };
    let (text, invalid_utf8) = match std::str::from_utf8(line) {
        Ok(t) => (std::borrow::Cow::Borrowed(t), false),
        Err(_) => (std::borrow::Cow::Owned(mark_raw_bytes(line)), true),
    };
    let (text, marked) = if non_numeric {
        match mark_non_finite(&text) {
            Some(t) => (std::borrow::Cow::Owned(t), true),
            None => (text, false),
        }
    } else {
        (text, false)
    };
    if !marked && !invalid_utf8 {
        return Err(strict);
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(object)) => Ok(Line {
            object,
            marked,
            invalid_utf8,
        }),
        _ => Err(strict),
    }
}

pub(crate) use crate::schema::infer::{NON_FINITE_MARK, marked_token};
/// Invalid byte `b` (0x80..=0xFF) of a non-UTF-8 line is the character `RAW_BYTE_BASE + b`.
const RAW_BYTE_BASE: u32 = 0x10_FF00;

/// The spellings Spark's `allowNonNumericNumbers` accepts, and what Arrow's float parser reads for each.
const NON_FINITE: [(&str, &str); 6] = [
    ("NaN", "NaN"),
    ("Infinity", "inf"),
    ("+Infinity", "inf"),
    ("+INF", "inf"),
    ("-Infinity", "-inf"),
    ("-INF", "-inf"),
];

/// Arrow's spelling of a non-finite spelling Spark accepts.
fn non_finite(token: &str) -> Option<&'static str> {
    NON_FINITE
        .iter()
        .find(|(spelling, _)| *spelling == token)
        .map(|(_, arrow)| *arrow)
}

/// Replaces bare non-finite tokens outside strings by marker strings; `None` when there is none.
fn mark_non_finite(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut changed = false;
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        // An ASCII byte starts a character, so `i` is a char boundary here.
        if matches!(b, b'N' | b'I' | b'+' | b'-') && text[..i].trim_end().ends_with([':', '[', ','])
        {
            let rest = &text[i..];
            let found = NON_FINITE.iter().map(|(s, _)| *s).find(|s| {
                rest.starts_with(s)
                    && rest[s.len()..]
                        .chars()
                        .next()
                        .is_none_or(|c| c == ',' || c == '}' || c == ']' || c.is_whitespace())
            });
            if let Some(token) = found {
                out.push_str(&text[last..i]);
                out.push('"');
                out.push(NON_FINITE_MARK);
                out.push_str(token);
                out.push('"');
                i += token.len();
                last = i;
                changed = true;
                continue;
            }
        }
        i += 1;
    }
    changed.then(|| {
        out.push_str(&text[last..]);
        out
    })
}

/// Replaces number literals outside strings that a double may not hold exactly (a
/// fraction or an exponent, or more than 18 digits) by number marker strings
/// ([`crate::schema::infer::NUMBER_MARK`] + the literal); `None` when there is none.
fn mark_numbers(text: &str) -> Option<String> {
    use crate::schema::infer::NUMBER_MARK;
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut last = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if b == b'-' || b.is_ascii_digit() {
            let end = bytes[i..]
                .iter()
                .position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .map_or(bytes.len(), |n| i + n);
            let token = &text[i..end];
            let digits = token.bytes().filter(u8::is_ascii_digit).count();
            if digits > 0 && (token.contains(['.', 'e', 'E']) || digits > 18) {
                if out.is_empty() {
                    out.reserve(text.len() + 16);
                }
                out.push_str(&text[last..i]);
                out.push('"');
                out.push(NUMBER_MARK);
                out.push_str(token);
                out.push('"');
                last = end;
            }
            i = end.max(i + 1);
            continue;
        }
        i += 1;
    }
    (last > 0).then(|| {
        out.push_str(&text[last..]);
        out
    })
}

/// A value's compact JSON text with its markers undone: a number marker is the number
/// as written (`1.50`, not `"1.50"` nor `1.5`), a non-finite marker its token as a string.
fn json_text(value: &Value) -> String {
    use crate::schema::infer::{NON_FINITE_MARK, NUMBER_MARK};
    let text = value.to_string();
    if !text.contains([NUMBER_MARK, NON_FINITE_MARK]) {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    // serde_json writes a marker string as `"` + marker + literal + `"` (a literal
    // holds no quote or backslash, so the next `"` ends it).
    while let Some(i) = rest.find(['"']) {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let marked = after
            .strip_prefix(NUMBER_MARK)
            .map(|t| (t, true))
            .or_else(|| after.strip_prefix(NON_FINITE_MARK).map(|t| (t, false)));
        match marked.and_then(|(t, number)| t.find('"').map(|end| (t, end, number))) {
            Some((t, end, true)) => {
                out.push_str(&t[..end]);
                rest = &t[end + 1..];
            }
            Some((t, end, false)) => {
                out.push('"');
                out.push_str(&t[..end]);
                out.push('"');
                rest = &t[end + 1..];
            }
            None => {
                // An ordinary string: copy it whole (escapes included).
                let mut end = 0;
                let bytes = after.as_bytes();
                while end < bytes.len() {
                    match bytes[end] {
                        b'\\' => end += 2,
                        b'"' => break,
                        _ => end += 1,
                    }
                }
                let end = end.min(after.len());
                out.push('"');
                out.push_str(&after[..end]);
                out.push('"');
                rest = after.get(end + 1..).unwrap_or_default();
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether a type holds a decimal anywhere (so its JSON numbers are read exactly).
fn has_decimal(data_type: &DataType) -> bool {
    match data_type {
        DataType::Decimal128(..) | DataType::Decimal256(..) => true,
        DataType::Struct(fields) => fields.iter().any(|f| has_decimal(f.data_type())),
        DataType::List(item) | DataType::LargeList(item) => has_decimal(item.data_type()),
        DataType::Map(entries, _) => has_decimal(entries.data_type()),
        _ => false,
    }
}

/// The line as UTF-8 text with each invalid byte as the character `RAW_BYTE_BASE + byte`.
fn mark_raw_bytes(line: &[u8]) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    let mut rest = line;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                let n = e.error_len().unwrap_or(bad.len()).max(1);
                for &b in &bad[..n] {
                    out.push(char::from_u32(RAW_BYTE_BASE + u32::from(b)).unwrap_or('\u{FFFD}'));
                }
                rest = &bad[n..];
            }
        }
    }
    out
}

fn is_raw_byte(c: char) -> bool {
    (RAW_BYTE_BASE + 0x80..=RAW_BYTE_BASE + 0xFF).contains(&u32::from(c))
}

pub(crate) fn has_raw_bytes(s: &str) -> bool {
    s.chars().any(is_raw_byte)
}

pub(crate) fn value_has_raw_bytes(v: &Value) -> bool {
    match v {
        Value::String(s) => has_raw_bytes(s),
        Value::Array(a) => a.iter().any(value_has_raw_bytes),
        Value::Object(o) => o
            .iter()
            .any(|(k, v)| has_raw_bytes(k) || value_has_raw_bytes(v)),
        _ => false,
    }
}

/// A string with raw-byte characters as its original bytes decoded as ISO-8859-1.
fn raw_bytes_text(s: &str) -> String {
    if !has_raw_bytes(s) {
        return s.to_string();
    }
    let mut bytes = Vec::with_capacity(s.len());
    for c in s.chars() {
        if is_raw_byte(c) {
            bytes.push((u32::from(c) - RAW_BYTE_BASE) as u8);
        } else {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    latin1_text(&bytes)
}

/// Every string (and key) holding raw bytes, as [`raw_bytes_text`].
fn restore_raw_bytes(value: &mut Value) {
    match value {
        Value::String(s) if has_raw_bytes(s) => *s = raw_bytes_text(s),
        Value::Array(a) => a.iter_mut().for_each(restore_raw_bytes),
        Value::Object(o) => {
            let entries = std::mem::take(o);
            for (k, mut v) in entries {
                restore_raw_bytes(&mut v);
                o.insert(raw_bytes_text(&k), v);
            }
        }
        _ => {}
    }
}

struct State<'a> {
    decoder: Decoder,
    rows: Vec<Value>,
    rescues: Rescues,
    out: DecodedFile,
    drift: Drift,
    file_path: String,
    meta: &'a FileMeta,
    spec: &'a ReadSpec,
    schema: &'a SchemaRef,
}

impl State<'_> {
    fn flush(&mut self) -> Result<(), FileReadError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let internal = |e: arrow::error::ArrowError| FileReadError::internal(&self.meta.path, e);
        let num_rows = self.rows.len();
        self.decoder.serialize(&self.rows).map_err(internal)?;
        self.rows.clear();
        let data = self.decoder.flush().map_err(internal)?;
        let columns = match data {
            Some(batch) => batch.columns().to_vec(),
            None => Vec::new(),
        };
        self.push_batch(columns, num_rows)
    }

    /// A batch of `num_rows` rows from its data `columns` and the rescues collected for it.
    fn push_batch(
        &mut self,
        mut columns: Vec<arrow::array::ArrayRef>,
        num_rows: usize,
    ) -> Result<(), FileReadError> {
        let rescue = std::mem::take(&mut self.rescues).finish(
            num_rows,
            &self.file_path,
            self.spec.rescued_data,
        );
        if let Some(column) = rescue.column {
            columns.push(column);
        }
        let batch = assemble(self.schema, columns, num_rows, &self.meta.path)?;
        self.out.num_rows += num_rows;
        self.out.num_rows_rescued += rescue.rows_rescued;
        self.out.num_records_corrupt += rescue.records_corrupt;
        self.out.batches.push(batch);
        Ok(())
    }
}

/// Reader options the shapes need.
struct ShapeOptions {
    /// Spark's `allowNonNumericNumbers`.
    non_numeric: bool,
    /// The session time zone / pattern, when not the defaults.
    timestamps: Option<Arc<TimestampOptions>>,
}

/// What a column accepts, compiled once per file from its Arrow type.
enum Shape {
    Utf8,
    Int {
        min: i64,
        max: i64,
    },
    Float32 {
        non_numeric: bool,
    },
    Float64 {
        non_numeric: bool,
    },
    Boolean,
    Date32,
    Timestamp {
        tz: Option<Tz>,
        per_second: i64,
        text: Option<Arc<TimestampOptions>>,
    },
    Decimal {
        precision: u8,
        scale: i8,
    },
    Binary,
    List(Box<Shape>),
    Map(Box<Shape>),
    Struct(StructShape),
}

struct StructShape {
    names: Vec<String>,
    shapes: Vec<Shape>,
    index: HashMap<String, usize>,
    /// Lower-cased names: an unknown key folding to one of them is a case variant, not a new field.
    folded: HashSet<String>,
}

/// The result of checking one value against its column.
enum Fit {
    /// The value fits (possibly converted to what arrow-json expects).
    Keep(Value),
    /// The value does not fit; here it is, unchanged.
    Rescue(Value),
    /// The value is rescued whole because of nested values that did not fit, which
    /// were already reported as drift (the caller records no mismatch of its own).
    RescueReported(Value),
    /// An object that fits except for some nested fields (rescued as nested objects).
    Partial(Value, Map<String, Value>),
}

impl StructShape {
    fn new(fields: &Fields, options: &ShapeOptions) -> Result<Self, String> {
        let mut shape = StructShape {
            names: Vec::with_capacity(fields.len()),
            shapes: Vec::with_capacity(fields.len()),
            index: HashMap::with_capacity(fields.len()),
            folded: HashSet::with_capacity(fields.len()),
        };
        for field in fields {
            let column = Shape::new(field.data_type(), options).map_err(|t| {
                format!("column `{}`: JSON cannot be decoded into {t}", field.name())
            })?;
            shape
                .index
                .entry(field.name().clone())
                .or_insert(shape.names.len());
            shape.folded.insert(field.name().to_lowercase());
            shape.names.push(field.name().clone());
            shape.shapes.push(column);
        }
        Ok(shape)
    }

    /// Splits an object into the part that fits (keys in the schema, converted) and
    /// the rescued part (unknown keys, misfits, and nested rescues), in key order.
    /// `path` leads to this object (schema names); unknown keys and misfits are
    /// reported to `drift`.
    fn fit_object<'a>(
        &'a self,
        object: Map<String, Value>,
        path: &mut Vec<&'a str>,
        drift: &mut Drift,
    ) -> (Map<String, Value>, Map<String, Value>) {
        let mut cleaned = Map::with_capacity(object.len());
        let mut rescued = Map::new();
        for (key, value) in object {
            let Some(&i) = self.index.get(&key) else {
                self.unknown(&key, &value, path, drift);
                if !value.is_null() {
                    rescued.insert(key, value);
                }
                continue;
            };
            if value.is_null() {
                continue;
            }
            path.push(&self.names[i]);
            match self.shapes[i].fit(value, path, drift) {
                Fit::Keep(v) => {
                    cleaned.insert(key, v);
                }
                Fit::Rescue(v) => {
                    drift.mismatch_json(path, &v);
                    rescued.insert(key, v);
                }
                Fit::RescueReported(v) => {
                    rescued.insert(key, v);
                }
                Fit::Partial(v, nested) => {
                    cleaned.insert(key.clone(), v);
                    rescued.insert(key, Value::Object(nested));
                }
            }
            path.pop();
        }
        (cleaned, rescued)
    }

    /// Reports a key this struct does not have as a new field, unless it is a case
    /// variant of one it has.
    fn unknown(&self, key: &str, value: &Value, path: &[&str], drift: &mut Drift) {
        if self.folded.contains(&key.to_lowercase()) {
            return;
        }
        let mut full: Vec<String> = Vec::with_capacity(path.len() + 1);
        full.extend(path.iter().map(|s| (*s).to_string()));
        full.push(key.to_string());
        if let Some(slot) = drift.new_field(full) {
            drift.new_json(slot, value);
        }
    }
}

/// The range of a signed integer column (`None` for other types): what both decoders
/// accept in it before a value is rescued.
pub(super) fn int_bounds(data_type: &DataType) -> Option<(i64, i64)> {
    Some(match data_type {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => (i64::MIN, i64::MAX),
        _ => return None,
    })
}

impl Shape {
    /// `Err` carries the unsupported type's name.
    fn new(data_type: &DataType, options: &ShapeOptions) -> Result<Self, String> {
        Ok(match data_type {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Shape::Utf8,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                let (min, max) = int_bounds(data_type).unwrap_or((i64::MIN, i64::MAX));
                Shape::Int { min, max }
            }
            DataType::Float32 => Shape::Float32 {
                non_numeric: options.non_numeric,
            },
            DataType::Float64 => Shape::Float64 {
                non_numeric: options.non_numeric,
            },
            DataType::Boolean => Shape::Boolean,
            DataType::Date32 => Shape::Date32,
            DataType::Timestamp(unit, tz) => Shape::Timestamp {
                tz: match tz {
                    Some(tz) => Some(tz.parse::<Tz>().map_err(|e| format!("{data_type} ({e})"))?),
                    None => None,
                },
                per_second: match unit {
                    TimeUnit::Second => 1,
                    TimeUnit::Millisecond => 1_000,
                    TimeUnit::Microsecond => 1_000_000,
                    TimeUnit::Nanosecond => 1_000_000_000,
                },
                text: options.timestamps.clone(),
            },
            DataType::Decimal128(precision, scale) if *scale >= 0 => Shape::Decimal {
                precision: *precision,
                scale: *scale,
            },
            DataType::Binary | DataType::LargeBinary => Shape::Binary,
            DataType::List(item) | DataType::LargeList(item) => {
                Shape::List(Box::new(Shape::new(item.data_type(), options)?))
            }
            DataType::Map(entries, _) => match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 && kv[0].data_type() == &DataType::Utf8 => {
                    Shape::Map(Box::new(Shape::new(kv[1].data_type(), options)?))
                }
                _ => return Err(data_type.to_string()),
            },
            DataType::Struct(fields) => Shape::Struct(StructShape::new(fields, options)?),
            other => return Err(other.to_string()),
        })
    }

    /// Checks a non-null value against the column at `path`.
    fn fit<'a>(&'a self, value: Value, path: &mut Vec<&'a str>, drift: &mut Drift) -> Fit {
        if value.is_null() {
            return Fit::Keep(value);
        }
        match self {
            Shape::Utf8 => Fit::Keep(match value {
                Value::String(s) => match (marked_token(&s), marked_number(&s)) {
                    // A bare NaN/Infinity token is read as its text, like any number.
                    (Some(token), _) => Value::String(token.to_string()),
                    // A number as its literal text.
                    (_, Some(text)) => Value::String(text.to_string()),
                    _ => Value::String(s),
                },
                Value::Bool(b) => Value::String(if b { "true" } else { "false" }.into()),
                // An object or array as its compact JSON text, numbers as written.
                other => Value::String(json_text(&other)),
            }),
            Shape::Int { min, max } => {
                let v = match &value {
                    Value::String(s) => marked_number(s).and_then(|t| t.parse::<i64>().ok()),
                    other => other.as_i64(),
                };
                match v {
                    Some(v) if (*min..=*max).contains(&v) => Fit::Keep(Value::from(v)),
                    _ => Fit::Rescue(value),
                }
            }
            Shape::Float64 { non_numeric } => match non_finite_value(&value, *non_numeric) {
                Some(arrow) => Fit::Keep(Value::String(arrow.into())),
                None => match value.as_str().and_then(marked_number) {
                    // arrow-json parses the literal (correctly rounded).
                    Some(text) => Fit::Keep(Value::String(text.to_string())),
                    None => keep_if(value.is_number(), value),
                },
            },
            Shape::Float32 { non_numeric } => match non_finite_value(&value, *non_numeric) {
                Some(arrow) => Fit::Keep(Value::String(arrow.into())),
                None => {
                    let number = match value.as_str().and_then(marked_number) {
                        Some(text) => text.parse::<f64>().ok(),
                        None => value.as_f64(),
                    };
                    let fits = number.is_some_and(|v| v.is_finite() && (v as f32).is_finite());
                    match (fits, value.as_str().and_then(marked_number)) {
                        (true, Some(text)) => Fit::Keep(Value::String(text.to_string())),
                        _ => keep_if(fits, value),
                    }
                }
            },
            Shape::Boolean => keep_if(value.is_boolean(), value),
            Shape::Date32 => match value.as_str().and_then(parse_date) {
                Some(days) => Fit::Keep(Value::from(days)),
                None => Fit::Rescue(value),
            },
            Shape::Timestamp {
                tz,
                per_second,
                text,
            } => {
                let ticks = match &value {
                    Value::String(s) => match text {
                        // Session time zone or pattern: microseconds, scaled to the unit.
                        Some(text) => text
                            .parse_micros(s, tz.is_none())
                            .and_then(|us| scale_micros(us, *per_second)),
                        None => parse_timestamp(s, tz.as_ref(), *per_second),
                    },
                    Value::Number(n) => n
                        .as_i64()
                        .filter(|s| (MIN_EPOCH_SECONDS..=MAX_EPOCH_SECONDS).contains(s))
                        .and_then(|s| s.checked_mul(*per_second)),
                    _ => None,
                };
                match ticks {
                    Some(t) => Fit::Keep(Value::from(t)),
                    None => Fit::Rescue(value),
                }
            }
            Shape::Decimal { precision, scale } => {
                let text = match &value {
                    Value::Number(n) => Some(n.to_string()),
                    // The literal's exact digits.
                    Value::String(s) => marked_number(s).map(str::to_string),
                    _ => None,
                };
                match text.and_then(|t| parse_decimal(&t, *precision, *scale)) {
                    Some(canonical) => Fit::Keep(Value::String(canonical)),
                    None => Fit::Rescue(value),
                }
            }
            Shape::Binary => match value.as_str().and_then(base64_to_hex) {
                Some(hex) => Fit::Keep(Value::String(hex)),
                None => Fit::Rescue(value),
            },
            // A list or map is kept or rescued whole; every element is still checked,
            // so that all of its drift is reported (`element` / `value` in the path).
            Shape::List(item) => {
                let Value::Array(items) = value else {
                    return Fit::Rescue(value);
                };
                let original = items.clone();
                let mut cleaned = Vec::with_capacity(items.len());
                let mut whole = false;
                path.push("element");
                for v in items {
                    match item.fit(v, path, drift) {
                        Fit::Keep(v) => cleaned.push(v),
                        Fit::Rescue(v) => {
                            drift.mismatch_json(path, &v);
                            whole = true;
                        }
                        Fit::RescueReported(_) | Fit::Partial(..) => whole = true,
                    }
                }
                path.pop();
                if whole {
                    Fit::RescueReported(Value::Array(original))
                } else {
                    Fit::Keep(Value::Array(cleaned))
                }
            }
            Shape::Map(values) => {
                let Value::Object(entries) = value else {
                    return Fit::Rescue(value);
                };
                let original = entries.clone();
                let mut cleaned = Map::with_capacity(entries.len());
                let mut whole = false;
                path.push("value");
                for (k, v) in entries {
                    match values.fit(v, path, drift) {
                        Fit::Keep(v) => {
                            cleaned.insert(k, v);
                        }
                        Fit::Rescue(v) => {
                            drift.mismatch_json(path, &v);
                            whole = true;
                        }
                        Fit::RescueReported(_) | Fit::Partial(..) => whole = true,
                    }
                }
                path.pop();
                if whole {
                    Fit::RescueReported(Value::Object(original))
                } else {
                    Fit::Keep(Value::Object(cleaned))
                }
            }
            Shape::Struct(shape) => {
                let Value::Object(object) = value else {
                    return Fit::Rescue(value);
                };
                let (cleaned, rescued) = shape.fit_object(object, path, drift);
                if rescued.is_empty() {
                    Fit::Keep(Value::Object(cleaned))
                } else {
                    Fit::Partial(Value::Object(cleaned), rescued)
                }
            }
        }
    }
}

/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z in seconds: the range of Spark's
/// and Delta's timestamps; an epoch number outside it is rescued.
const MIN_EPOCH_SECONDS: i64 = -62_135_596_800;
const MAX_EPOCH_SECONDS: i64 = 253_402_300_799;

/// Arrow's spelling (`NaN`, `inf`, `-inf`) of a non-finite JSON value: a bare token
/// (a marker string) or, as Spark's JSON reader accepts too, a string spelled
/// like one; `None` for anything else or when `non_numeric` is off.
fn non_finite_value(value: &Value, non_numeric: bool) -> Option<&'static str> {
    let Value::String(s) = value else {
        return None;
    };
    if !non_numeric {
        return None;
    }
    non_finite(marked_token(s).unwrap_or(s))
}

/// Microseconds in a column's unit.
fn scale_micros(micros: i64, per_second: i64) -> Option<i64> {
    match per_second {
        1 => Some(micros.div_euclid(1_000_000)),
        1_000 => Some(micros.div_euclid(1_000)),
        1_000_000 => Some(micros),
        _ => micros.checked_mul(1_000),
    }
}

fn keep_if(fits: bool, value: Value) -> Fit {
    if fits {
        Fit::Keep(value)
    } else {
        Fit::Rescue(value)
    }
}

/// `YYYY-MM-DD` as days since the epoch.
fn parse_date(s: &str) -> Option<i32> {
    let date = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from(date.signed_duration_since(epoch).num_days()).ok()
}

/// An ISO-8601 string as ticks since the epoch: a string without a zone is in
/// `tz` (UTC for `TIMESTAMP`), and `TIMESTAMP_NTZ` keeps the wall-clock time.
pub(crate) fn parse_timestamp(s: &str, tz: Option<&Tz>, per_second: i64) -> Option<i64> {
    match tz {
        Some(tz) => ticks(string_to_datetime(tz, s).ok()?, per_second),
        None => ticks(string_to_datetime(&chrono::Utc, s).ok()?, per_second),
    }
}

fn ticks<T: TimeZone>(datetime: DateTime<T>, per_second: i64) -> Option<i64> {
    match per_second {
        1 => Some(datetime.timestamp()),
        1_000 => Some(datetime.timestamp_millis()),
        1_000_000 => Some(datetime.timestamp_micros()),
        _ => datetime.timestamp_nanos_opt(),
    }
}

/// A number as a decimal(p, s) the way Arrow's string cast reads it (rounded
/// half-up to the scale), written back with exactly `scale` digits so arrow-json
/// stores it unchanged; `None` when it does not fit the precision.
fn parse_decimal(text: &str, precision: u8, scale: i8) -> Option<String> {
    let scale_digits = usize::try_from(scale).ok()?;
    let native = parse_string_to_decimal_native::<Decimal128Type>(text, scale_digits).ok()?;
    Decimal128Type::is_valid_decimal_precision(native, precision).then_some(())?;
    let digits = native.unsigned_abs().to_string();
    let sign = if native < 0 { "-" } else { "" };
    if scale_digits == 0 {
        return Some(format!("{sign}{digits}"));
    }
    let padded = format!("{digits:0>width$}", width = scale_digits + 1);
    let (int_part, frac_part) = padded.split_at(padded.len() - scale_digits);
    Some(format!("{sign}{int_part}.{frac_part}"))
}

/// Standard base64 (padding optional) to the hex text arrow-json reads binary from.
fn base64_to_hex(s: &str) -> Option<String> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(s.len() / 4 * 6);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &c in s.trim_end_matches('=').as_bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            let byte = ((buffer >> bits) & 0xFF) as usize;
            hex.push(char::from(HEX[byte >> 4]));
            hex.push(char::from(HEX[byte & 0xF]));
        }
    }
    // Leftover bits must be padding zeros, and a lone 6-bit group is not a byte.
    (bits < 6 && buffer & ((1 << bits) - 1) == 0).then_some(hex)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int64Type};
    use serde_json::json;

    use super::super::test_support::{case_file, meta, rescued, rows, spec};
    use super::super::{FileReadError, decode_file, output_schema};
    use super::{base64_to_hex, parse_decimal};
    use crate::schema::parse_ddl;
    use crate::spec::FileFormat;

    fn json_spec(ddl: &str) -> super::super::ReadSpec {
        spec(FileFormat::Json, Arc::new(parse_ddl(ddl).unwrap()))
    }

    fn decode_text(
        text: &str,
        spec: &super::super::ReadSpec,
    ) -> Result<super::super::DecodedFile, FileReadError> {
        let meta = super::super::FileMeta {
            path: "/l/f.json".into(),
            size: text.len() as u64,
            modification_time_ms: 0,
        };
        super::super::decode_text(text.as_bytes(), &meta, spec)
    }

    #[test]
    fn numbers_are_read_from_their_literal_when_the_schema_has_a_decimal() {
        assert_eq!(
            super::mark_numbers(r#"{"a":1,"b":"3.1","c":[2.50,-1e3],"d":12345678901234567890}"#)
                .as_deref(),
            Some(
                "{\"a\":1,\"b\":\"3.1\",\"c\":[\"\u{10FF01}2.50\",\"\u{10FF01}-1e3\"],\"d\":\"\u{10FF01}12345678901234567890\"}"
            )
        );
        assert_eq!(super::mark_numbers(r#"{"a":1,"b":-2}"#), None);
        let spec = json_spec("sku STRING, price DECIMAL(21,1), rate DOUBLE, n BIGINT");
        let d = decode_text(
            "{\"sku\":\"C\",\"price\":0.1,\"rate\":2.50,\"n\":9000000000000000000}\n\
             {\"sku\":\"D\",\"price\":1234567890123456789012345678901234567890.5,\"rate\":1,\"n\":5.0}\n",
            &spec,
        )
        .unwrap();
        assert_eq!(
            rows(&d.batches),
            [
                ["C", "0.1", "2.5", "9000000000000000000"],
                ["D", "null", "1.0", "null"]
            ]
        );
        let r = rescued(&d.batches);
        assert_eq!(r[0], None);
        let d_row = r[1].as_ref().unwrap();
        assert_eq!(
            d_row["price"],
            json!("1234567890123456789012345678901234567890.5")
        );
        assert_eq!(d_row["n"], json!(5.0));
        assert_eq!(d.num_rows_rescued, 1);
    }

    #[test]
    fn a_string_column_keeps_nested_numbers_as_written() {
        let spec = json_spec("amount DECIMAL(10,2), raw STRING");
        let d = decode_text(
            "{\"amount\":1.50,\"raw\":{\"x\":1.50,\"s\":\"a\\\"b\",\"n\":[NaN,2e3,3]}}\n",
            &spec,
        )
        .unwrap();
        assert_eq!(
            rows(&d.batches),
            [["1.50", r#"{"x":1.50,"s":"a\"b","n":["NaN",2e3,3]}"#]]
        );
    }

    #[test]
    fn failfast_returns_the_first_malformed_line() {
        let mut spec = json_spec("id BIGINT");
        spec.text.mode = crate::spec::ParseMode::FailFast;
        let e = decode_text("{\"id\":1}\n\n{\"id\":2.5}\n{oops\n", &spec).unwrap_err();
        assert_eq!(
            e.to_string(),
            "source file /l/f.json, line 3: malformed record: 2.5 does not fit column id (BIGINT) (record: \"{\\\"id\\\":2.5}\")"
        );
        let e = decode_text("{\"id\":1}\n{oops\n", &spec).unwrap_err();
        assert!(
            e.to_string()
                .contains("line 2: malformed record: invalid JSON"),
            "{e}"
        );
        // A field the schema lacks is not malformed (schema evolution decides).
        let d = decode_text("{\"id\":1,\"new\":true}\n", &spec).unwrap();
        assert_eq!(d.num_rows, 1);
    }

    #[test]
    fn b01_step2_with_step1_schema_rescues_misfits_and_keeps_numbers_as_text() {
        let spec = json_spec("order_id BIGINT, user_id STRING, qty BIGINT");
        let path = case_file("B01/step2/orders_2.json");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [
                ["3", "u-17", "null"],
                ["4", "u-18", "4"],
                ["5", "19", "null"]
            ]
        );
        let file = path.to_string_lossy();
        assert_eq!(
            rescued(&decoded.batches),
            [
                Some(json!({"qty": "3", "_file_path": file})),
                None,
                Some(json!({"qty": 5.5, "_file_path": file})),
            ]
        );
        assert_eq!(decoded.num_rows, 3);
        assert_eq!(decoded.num_rows_rescued, 2);
        assert_eq!(decoded.num_records_corrupt, 0);
        assert_eq!(decoded.batches[0].schema(), output_schema(&spec));
    }

    #[test]
    fn b01_all_strings_schema_rescues_nothing() {
        let spec = json_spec("order_id STRING, user_id STRING, qty STRING");
        let decoded = decode_file(&meta(&case_file("B01/step2/orders_2.json")), &spec).unwrap();
        let qty: Vec<String> = rows(&decoded.batches)
            .into_iter()
            .map(|r| r[2].clone())
            .collect();
        assert_eq!(qty, ["3", "4", "5.5"]);
        assert_eq!(decoded.num_rows_rescued, 0);
    }

    #[test]
    fn b02_case_variant_keys_are_rescued() {
        let spec = json_spec("id BIGINT, Photo STRING");
        let mut all = Vec::new();
        let mut rescues = Vec::new();
        for file in ["B02/step1/a.json", "B02/step2/b.json", "B02/step3/c.json"] {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            all.extend(rows(&decoded.batches));
            rescues.extend(rescued(&decoded.batches).into_iter().map(|r| {
                r.map(|mut v| {
                    v.as_object_mut().unwrap().remove("_file_path");
                    v
                })
            }));
        }
        assert_eq!(all, [["1", "p1.png"], ["2", "null"], ["3", "p3.png"]]);
        assert_eq!(
            rescues,
            [
                None,
                Some(json!({"photo": "p2.png"})),
                Some(json!({"photo": "p3-thumb.png"}))
            ]
        );

        let spec = json_spec("Code STRING, Qty BIGINT");
        let decoded =
            decode_file(&meta(&case_file("B02/variant_single_object/d.json")), &spec).unwrap();
        assert_eq!(rows(&decoded.batches), [["K1", "5"]]);
        assert_eq!(
            rescued(&decoded.batches)[0].as_ref().unwrap()["qty"],
            json!(7)
        );
    }

    #[test]
    fn b03_dotted_names_are_literal() {
        let spec = json_spec(
            "`geo.lat` STRING, geo STRUCT<lat: STRING>, `order id` BIGINT, \
             `unit price(EUR)` DOUBLE, `k=v` STRING",
        );
        let decoded = decode_file(&meta(&case_file("B03/step1/names.json")), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["dotted", "{lat: nested}", "7", "1.5", "eq"]]
        );
        assert_eq!(decoded.num_rows_rescued, 0);
    }

    #[test]
    fn b04_nested_rescue_keeps_the_path_and_scalar_for_struct_is_rescued() {
        let spec = json_spec("id BIGINT, meta STRUCT<src: STRING>");
        let step1 = decode_file(&meta(&case_file("B04/step1/n1.json")), &spec).unwrap();
        assert_eq!(rows(&step1.batches), [["1", "null"], ["2", "{src: web}"]]);
        assert_eq!(step1.num_rows_rescued, 0);

        let step2 = decode_file(&meta(&case_file("B04/step2/n2.json")), &spec).unwrap();
        assert_eq!(rows(&step2.batches), [["3", "{src: app}"]]);
        let r = rescued(&step2.batches)[0].clone().unwrap();
        assert_eq!(r["meta"], json!({"ver": 2}));

        let step3 = decode_file(&meta(&case_file("B04/step3/n3.json")), &spec).unwrap();
        assert_eq!(rows(&step3.batches), [["4", "null"]]);
        assert_eq!(
            rescued(&step3.batches)[0].as_ref().unwrap()["meta"],
            json!("legacy-string")
        );

        // With the evolved schema the new field is a column.
        let evolved = json_spec("id BIGINT, meta STRUCT<src: STRING, ver: BIGINT>");
        let step2 = decode_file(&meta(&case_file("B04/step2/n2.json")), &evolved).unwrap();
        assert_eq!(rows(&step2.batches), [["3", "{src: app, ver: 2}"]]);
        assert_eq!(step2.num_rows_rescued, 0);
    }

    #[test]
    fn b07_default_mode_doubles() {
        let spec = json_spec("sku STRING, price DOUBLE, rate DOUBLE");
        let decoded = decode_file(&meta(&case_file("B07/step2/p2.json")), &spec).unwrap();
        let batch = &decoded.batches[0];
        let price = batch.column(1).as_primitive::<Float64Type>();
        assert_eq!(price.value(0), 0.1);
        // serde_json's default float parser is within one ulp for such long
        // literals (its `float_roundtrip` feature would make it exact).
        assert!((price.value(1) / 1.2345678901234568e39 - 1.0).abs() < 1e-15);
        let rate = batch.column(2).as_primitive::<Float64Type>();
        assert_eq!(rate.values().to_vec(), [2.0, 1.0]);
        assert_eq!(decoded.num_rows_rescued, 0);
    }

    #[test]
    fn b07_prefer_decimal_overflow_is_rescued() {
        let spec = json_spec("sku STRING, price DECIMAL(21,1), rate DECIMAL(21,1)");
        let decoded = decode_file(&meta(&case_file("B07/step2/p2.json")), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["C", "0.1", "2.0"], ["D", "null", "1.0"]]
        );
        let r = rescued(&decoded.batches);
        assert!(r[0].is_none());
        // Its literal text: a double would round it.
        assert_eq!(
            r[1].as_ref().unwrap()["price"],
            json!("1234567890123456789012345678901234567890.5")
        );
    }

    #[test]
    fn b09_json_bom_first_line_is_not_corrupt() {
        let spec = json_spec("id BIGINT, name STRING");
        let decoded = decode_file(&meta(&case_file("B09/variant_json/bom.json")), &spec).unwrap();
        assert_eq!(rows(&decoded.batches), [["4", "Di"], ["5", "Ed"]]);
        assert_eq!(decoded.num_records_corrupt, 0);
        assert_eq!(decoded.num_rows_rescued, 0);
    }

    #[test]
    fn b11_bare_nan_is_a_value_by_default() {
        let spec = json_spec("sensor STRING, val DOUBLE");
        let path = case_file("B11/step1/bad.json");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        let rows = rows(&decoded.batches);
        assert_eq!(rows[2], ["s3", "NaN"]);
        assert_eq!(decoded.num_records_corrupt, 2);
        assert_eq!(decoded.num_rows_rescued, 0);
    }

    #[test]
    fn non_finite_tokens_in_every_column_type() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.json");
        std::fs::write(
            &path,
            concat!(
                r#"{"d":NaN,"f":-INF,"s":Infinity,"i":NaN,"l":[1.5, +Infinity],"new":-Infinity,"q":"NaN"}"#,
                "\n",
                r#"{"d":"+INF","f":"Infinity","s":"NaN is text","i":1,"l":[NaN],"t":"[NaN]"}"#,
                "\n",
            ),
        )
        .unwrap();
        let spec =
            json_spec("d DOUBLE, f FLOAT, s STRING, i BIGINT, l ARRAY<DOUBLE>, q STRING, t STRING");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(decoded.num_records_corrupt, 0);
        assert_eq!(
            rows(&decoded.batches),
            [
                [
                    "NaN",
                    "-inf",
                    "Infinity",
                    "null",
                    "[1.5, inf]",
                    "NaN",
                    "null"
                ],
                ["inf", "inf", "NaN is text", "1", "[NaN]", "null", "[NaN]"]
            ]
        );
        let r = rescued(&decoded.batches);
        let row0 = r[0].as_ref().unwrap();
        assert_eq!(row0["i"], json!("NaN"));
        assert_eq!(row0["new"], json!("-Infinity"));
        assert_eq!(
            new_fields_of(&decoded),
            [("new".to_string(), "DOUBLE".to_string())]
        );
    }

    fn new_fields_of(decoded: &super::super::DecodedFile) -> Vec<(String, String)> {
        decoded
            .new_fields
            .iter()
            .map(|f| (f.path_string(), crate::schema::type_to_ddl(&f.data_type)))
            .collect()
    }

    #[test]
    fn b11_malformed_lines_are_corrupt_records_and_the_rest_is_kept() {
        let mut spec = json_spec("sensor STRING, val DOUBLE");
        spec.text.allow_non_numeric_numbers = false;
        let path = case_file("B11/step1/bad.json");
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [
                ["s1", "2.0"],
                ["s2", "2.5"],
                ["null", "null"],
                ["s4", "3.0"],
                ["null", "null"],
                ["s5", "3.5"],
                ["null", "null"],
            ]
        );
        assert_eq!(decoded.num_records_corrupt, 3);
        assert_eq!(decoded.num_rows_rescued, 0);
        let file = path.to_string_lossy();
        let r = rescued(&decoded.batches);
        let corrupt = |row: usize| {
            let mut v = r[row].clone().unwrap();
            let error = v.as_object_mut().unwrap().remove("_error").unwrap();
            (v, error.as_str().unwrap().to_string())
        };
        let (row, error) = corrupt(2);
        assert_eq!(
            row,
            json!({"_corrupt_record": "{\"sensor\":\"s3\",\"val\":NaN}", "_file_path": file, "_line": 3})
        );
        assert!(error.starts_with("invalid JSON: "), "{error}");
        let (row, error) = corrupt(4);
        assert_eq!(
            row,
            json!({"_corrupt_record": "garbage line, not json", "_file_path": file, "_line": 5})
        );
        assert!(error.starts_with("invalid JSON: "), "{error}");
        let (row, error) = corrupt(6);
        assert_eq!(
            row,
            json!({"_corrupt_record": "{\"sensor\":\"s6\",\"val\":4.0", "_file_path": file, "_line": 7})
        );
        assert!(error.contains("EOF"), "{error}");
        // The keys in the documented order: `_corrupt_record` first.
        let text = decoded.batches[0]
            .column_by_name("_rescued_data")
            .unwrap()
            .as_string::<i32>()
            .value(4)
            .to_string();
        assert!(
            text.starts_with("{\"_corrupt_record\":\"garbage line, not json\",\"_error\":"),
            "{text}"
        );
    }

    #[test]
    fn b15_gzip_members_sniffing_and_truncation() {
        let spec = json_spec("id BIGINT");
        let ids = |file: &str| -> Vec<i64> {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            decoded
                .batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect()
        };
        assert_eq!(ids("B15/step1/a.json.gz"), [1, 2]);
        assert_eq!(ids("B15/step2/b.json.gz"), [3, 4]);
        assert_eq!(ids("B15/step3/c.json"), [5]);
        let path = case_file("B15/step4/d.json.gz");
        let err = decode_file(&meta(&path), &spec).unwrap_err();
        assert!(
            matches!(&err, FileReadError::Corrupt { path: p, .. } if p == &path),
            "{err}"
        );
        assert!(!err.retryable());
        assert!(err.to_string().contains("d.json.gz"), "{err}");
    }

    #[test]
    fn b16_empty_and_blank_files_have_no_rows() {
        let spec = json_spec("id BIGINT, name STRING");
        for file in [
            "B16/step1/empty.json",
            "B16/step1/blank.json",
            "B16/step2/late.json",
        ] {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            assert_eq!(decoded.num_rows, 0, "{file}");
            assert!(decoded.batches.is_empty(), "{file}");
        }
        let decoded = decode_file(&meta(&case_file("B16/step1/real.json")), &spec).unwrap();
        assert_eq!(rows(&decoded.batches), [["1", "x"]]);
    }

    #[test]
    fn missing_file_is_a_retryable_io_error() {
        let spec = json_spec("id BIGINT");
        let missing = super::super::FileMeta {
            path: case_file("B16/step1/does-not-exist.json"),
            size: 0,
            modification_time_ms: 0,
        };
        let err = decode_file(&missing, &spec).unwrap_err();
        assert!(
            matches!(err, FileReadError::Io { .. }) && err.retryable(),
            "{err}"
        );
    }

    #[test]
    fn typed_values_timestamps_dates_lists_maps_binary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(
            &path,
            concat!(
                r#"{"ts":"2024-01-02T03:04:05Z","d":"2024-01-02","tags":["a",1],"m":{"k":1},"b":"aGk=","n":true,"big":9223372036854775808}"#,
                "\n",
                r#"{"ts":1704164645,"d":"02/01/2024","tags":["a",{"x":1}],"m":{"k":"x"},"b":"!!","n":"yes","ntz":"2024-01-02 03:04:05+01:00"}"#,
                "\r\n",
                r#"{"ts":"2024-01-02 03:04:05","tags":"solo","m":[1],"ts2":1.5,"ntz":"2024-01-02T03:04:05"}"#,
                "\n",
                r#"[1,2]"#,
                "\n",
            ),
        )
        .unwrap();
        let spec = json_spec(
            "ts TIMESTAMP, d DATE, tags ARRAY<STRING>, m MAP<STRING, BIGINT>, b BINARY, n BOOLEAN, \
             big BIGINT, ntz TIMESTAMP_NTZ",
        );
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        let r = rows(&decoded.batches);
        assert_eq!(r[0][0], "2024-01-02T03:04:05Z");
        assert_eq!(r[1][0], "2024-01-02T03:04:05Z"); // epoch seconds
        assert_eq!(r[2][0], "2024-01-02T03:04:05Z"); // no zone = UTC
        assert_eq!(r[0][1], "2024-01-02");
        assert_eq!(r[0][2], "[a, 1]"); // a number in a string array is its text
        assert_eq!(r[1][2], "[a, {\"x\":1}]");
        assert_eq!(r[0][3], "{k: 1}");
        assert_eq!(r[0][4], "6869");
        assert_eq!(r[0][5], "true");
        assert_eq!(r[1][7], "2024-01-02T02:04:05");
        assert_eq!(r[2][7], "2024-01-02T03:04:05");
        assert_eq!(r[3], ["null"; 8]);
        let rescued = rescued(&decoded.batches);
        let row0 = rescued[0].as_ref().unwrap();
        assert_eq!(row0["big"], json!(9223372036854775808u64));
        let row1 = rescued[1].as_ref().unwrap();
        assert_eq!(row1["d"], json!("02/01/2024"));
        assert_eq!(row1["m"], json!({"k": "x"}));
        assert_eq!(row1["b"], json!("!!"));
        assert_eq!(row1["n"], json!("yes"));
        let row2 = rescued[2].as_ref().unwrap();
        assert_eq!(row2["tags"], json!("solo"));
        assert_eq!(row2["m"], json!([1]));
        assert_eq!(row2["ts2"], json!(1.5));
        assert_eq!(
            rescued[3].as_ref().unwrap()["_corrupt_record"],
            json!("[1,2]")
        );
        assert_eq!(decoded.num_rows_rescued, 3);
        assert_eq!(decoded.num_records_corrupt, 1);
        let b = decoded.batches[0].column(4).as_binary::<i32>();
        assert_eq!(b.value(0), b"hi");
        assert!(b.is_null(1));
    }

    fn new_fields(decoded: &super::super::DecodedFile) -> Vec<(String, String)> {
        decoded
            .new_fields
            .iter()
            .map(|f| (f.path_string(), crate::schema::type_to_ddl(&f.data_type)))
            .collect()
    }

    fn mismatches(decoded: &super::super::DecodedFile) -> Vec<(String, usize, String, String)> {
        decoded
            .type_mismatches
            .iter()
            .map(|m| {
                (
                    m.path_string(),
                    m.count,
                    crate::schema::type_to_ddl(&m.expected),
                    crate::schema::type_to_ddl(&m.found),
                )
            })
            .collect()
    }

    #[test]
    fn drift_b04_new_nested_field_and_struct_turned_string() {
        let spec = json_spec("id BIGINT, meta STRUCT<src: STRING>");
        let step2 = decode_file(&meta(&case_file("B04/step2/n2.json")), &spec).unwrap();
        assert_eq!(new_fields(&step2), [("meta.ver".into(), "BIGINT".into())]);
        assert!(step2.type_mismatches.is_empty());
        let path = case_file("B04/step3/n3.json");
        let step3 = decode_file(&meta(&path), &spec).unwrap();
        assert!(step3.new_fields.is_empty());
        assert_eq!(
            mismatches(&step3),
            [(
                "meta".into(),
                1,
                "STRUCT<src: STRING>".into(),
                "STRING".into()
            )]
        );
        assert_eq!(step3.type_mismatches[0].file, path.to_string_lossy());
        let step1 = decode_file(&meta(&case_file("B04/step1/n1.json")), &spec).unwrap();
        assert!(step1.new_fields.is_empty() && step1.type_mismatches.is_empty());
    }

    #[test]
    fn drift_b01_mismatches_merge_their_found_types() {
        let spec = json_spec("order_id BIGINT, user_id STRING, qty BIGINT");
        let decoded = decode_file(&meta(&case_file("B01/step2/orders_2.json")), &spec).unwrap();
        // "3" and 5.5 in a BIGINT column: a string and a double merge to string.
        assert_eq!(
            mismatches(&decoded),
            [("qty".into(), 2, "BIGINT".into(), "STRING".into())]
        );
        assert!(decoded.new_fields.is_empty());
    }

    #[test]
    fn drift_b06_null_only_new_field_is_reported_as_null() {
        let spec = json_spec("id BIGINT, amount BIGINT");
        let t2 = decode_file(&meta(&case_file("B06/step2/t2.json")), &spec).unwrap();
        assert_eq!(new_fields(&t2), [("coupon".into(), "Null".into())]);
        assert_eq!(t2.new_fields[0].data_type, arrow::datatypes::DataType::Null);
        assert_eq!(t2.num_rows_rescued, 0, "a null is never rescued");
        let t3 = decode_file(&meta(&case_file("B06/step3/t3.json")), &spec).unwrap();
        assert_eq!(new_fields(&t3), [("coupon".into(), "STRING".into())]);
    }

    #[test]
    fn drift_b02_case_variants_are_not_new_fields() {
        let spec = json_spec("id BIGINT, Photo STRING");
        for file in ["B02/step2/b.json", "B02/step3/c.json"] {
            let decoded = decode_file(&meta(&case_file(file)), &spec).unwrap();
            assert!(decoded.new_fields.is_empty(), "{file}");
            assert_eq!(decoded.num_rows_rescued, 1, "{file}");
        }
        // Two new spellings in one object: the first wins.
        let spec = json_spec("Code STRING");
        let decoded =
            decode_file(&meta(&case_file("B02/variant_single_object/d.json")), &spec).unwrap();
        assert_eq!(new_fields(&decoded), [("Qty".into(), "BIGINT".into())]);
        let r = rescued(&decoded.batches)[0].clone().unwrap();
        assert_eq!((r["Qty"].clone(), r["qty"].clone()), (json!(5), json!(7)));
    }

    #[test]
    fn drift_b03_dotted_names_are_single_fields() {
        let spec = json_spec("geo STRUCT<lat: STRING>");
        let decoded = decode_file(&meta(&case_file("B03/step1/names.json")), &spec).unwrap();
        assert_eq!(
            new_fields(&decoded),
            [
                ("`geo.lat`".into(), "STRING".into()),
                ("`order id`".into(), "BIGINT".into()),
                ("`unit price(EUR)`".into(), "DOUBLE".into()),
                ("`k=v`".into(), "STRING".into()),
            ]
        );
        assert_eq!(decoded.new_fields[0].path, ["geo.lat"]);
        assert_eq!(rows(&decoded.batches), [["{lat: nested}"]]);
    }

    #[test]
    fn drift_inside_lists_and_maps_and_typed_new_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.json");
        std::fs::write(
            &path,
            concat!(
                r#"{"items":[{"a":1},{"a":2,"b":"x"}],"tags":[1,"two",3],"m":{"k":{"j":1,"z":true}}}"#,
                "\n",
                r#"{"items":[{"a":"bad"}],"ts":"2024-01-02T03:04:05Z","n":{"deep":{"x":null}},"f":1}"#,
                "\n",
                r#"{"f":2.5,"e":{},"arr":[null]}"#,
                "\n",
            ),
        )
        .unwrap();
        let spec = json_spec(
            "items ARRAY<STRUCT<a: BIGINT>>, tags ARRAY<BIGINT>, m MAP<STRING, STRUCT<j: BIGINT>>",
        );
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            new_fields(&decoded),
            [
                ("items.element.b".into(), "STRING".into()),
                ("m.value.z".into(), "BOOLEAN".into()),
                ("ts".into(), "TIMESTAMP".into()),
                ("n".into(), "STRUCT<deep: STRUCT<x: STRING>>".into()),
                ("f".into(), "DOUBLE".into()),
                ("e".into(), "STRING".into()),
                ("arr".into(), "ARRAY<STRING>".into()),
            ]
        );
        assert_eq!(
            mismatches(&decoded),
            [
                ("tags.element".into(), 1, "BIGINT".into(), "STRING".into()),
                (
                    "items.element.a".into(),
                    1,
                    "BIGINT".into(),
                    "STRING".into()
                ),
            ]
        );
        // Lists and maps are kept or rescued whole.
        let r = rescued(&decoded.batches);
        let row0 = r[0].as_ref().unwrap();
        assert_eq!(row0["items"], json!([{"a":1},{"a":2,"b":"x"}]));
        assert_eq!(row0["tags"], json!([1, "two", 3]));
        assert_eq!(row0["m"], json!({"k":{"j":1,"z":true}}));
    }

    #[test]
    fn epoch_numbers_in_a_timestamp_column_are_seconds_within_years_1_to_9999() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.json");
        std::fs::write(
            &path,
            "{\"ts\":1704164645}\n{\"ts\":1704164645000}\n{\"ts\":-62135596800}\n{\"ts\":253402300800}\n{\"ts\":1.5}\n",
        )
        .unwrap();
        let decoded = decode_file(&meta(&path), &json_spec("ts TIMESTAMP")).unwrap();
        let r = rows(&decoded.batches);
        assert_eq!(r[0], ["2024-01-02T03:04:05Z"]);
        // Milliseconds read as seconds would be year 55,975: rescued, not a wrong date.
        assert_eq!(r[1], ["null"]);
        assert_eq!(r[2], ["0001-01-01T00:00:00Z"]);
        assert_eq!(r[3], ["null"]);
        assert_eq!(r[4], ["null"]);
        let rescued = rescued(&decoded.batches);
        assert_eq!(rescued[1].as_ref().unwrap()["ts"], json!(1704164645000i64));
        assert_eq!(rescued[3].as_ref().unwrap()["ts"], json!(253402300800i64));
        assert_eq!(
            mismatches(&decoded),
            [("ts".into(), 3, "TIMESTAMP".into(), "DOUBLE".into())]
        );
    }

    #[test]
    fn latin1_fields_are_rescued_with_lossless_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("latin1.json");
        std::fs::write(
            &path,
            b"{\"id\":1,\"name\":\"caf\xe9\"}\n{\"id\":2,\"name\":\"ok\"}\n",
        )
        .unwrap();
        let decoded = decode_file(&meta(&path), &json_spec("id BIGINT, name STRING")).unwrap();
        assert_eq!(rows(&decoded.batches), [["1", "null"], ["2", "ok"]]);
        assert_eq!(decoded.num_records_corrupt, 0);
        assert_eq!(decoded.num_rows_rescued, 1);
        let r = rescued(&decoded.batches)[0].clone().unwrap();
        assert_eq!(r["name"], json!("café"));
        let bytes: Vec<u8> = r["name"]
            .as_str()
            .unwrap()
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap())
            .collect();
        assert_eq!(bytes, b"caf\xe9");
        assert!(
            r["_error"]
                .as_str()
                .unwrap()
                .starts_with("invalid UTF-8 in name"),
            "{r}"
        );
        // Broken JSON that is also not UTF-8 is still one corrupt record, raw text kept.
        std::fs::write(&path, b"{\"id\":1,\"name\":caf\xe9}\n").unwrap();
        let decoded = decode_file(&meta(&path), &json_spec("id BIGINT, name STRING")).unwrap();
        assert_eq!(decoded.num_records_corrupt, 1);
        let r = rescued(&decoded.batches)[0].clone().unwrap();
        assert!(
            r["_error"]
                .as_str()
                .unwrap()
                .contains("invalid UTF-8 at byte 19"),
            "{r}"
        );
    }

    #[test]
    fn decimal_and_base64_helpers() {
        assert_eq!(parse_decimal("3", 21, 1).as_deref(), Some("3.0"));
        assert_eq!(parse_decimal("0.1", 21, 1).as_deref(), Some("0.1"));
        assert_eq!(parse_decimal("-0.05", 5, 1).as_deref(), Some("-0.1"));
        assert_eq!(parse_decimal("12.345", 5, 2).as_deref(), Some("12.35"));
        assert_eq!(parse_decimal("1234.5", 4, 1), None);
        assert_eq!(parse_decimal("1e5", 10, 0), None);
        assert_eq!(parse_decimal("42", 2, 0).as_deref(), Some("42"));
        assert_eq!(base64_to_hex("aGk="), Some("6869".into()));
        assert_eq!(base64_to_hex("aGk"), Some("6869".into()));
        assert_eq!(base64_to_hex(""), Some(String::new()));
        assert_eq!(base64_to_hex("a"), None);
    }
}
