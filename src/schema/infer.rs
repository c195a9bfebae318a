//! The rules of schema inference (Auto Loader's), applied to the values of sample files
//! by the file source (`crate::source::files::infer`, which also says what a sample
//! that cannot be read does).
//!
//! Every record of each sample file is looked at (the files are the sample). The
//! result is a schema whose fields are all nullable.
//!
//! # Typed inference (`inferColumnTypes = true`, the default)
//!
//! Each value gets one of: boolean, long (an integer that fits 64 bits), double
//! (any other number), timestamp (a string with an ISO-8601 date **and** time,
//! `T` or space separated, optional `Z`/offset: Spark's instant type, UTC), string,
//! struct (JSON objects), array (JSON arrays). The values of a field across every
//! sampled record are merged:
//!
//! - null with anything gives the other type; a field that is null (or empty, or
//!   `null_value` in CSV) in every sampled record is a **string**, never a null type;
//! - long with double gives double (`3` and `3.1` -> double);
//! - struct with struct merges their fields; array with array merges the elements;
//! - any other mix (long and string, boolean and long, struct and string, timestamp
//!   and string, ...) gives string, so that every value can still be read;
//! - an object that is empty in every record (`{}`) is a string (Delta has no empty struct).
//!
//! Fields keep the order in which they first appear (file order, then record order,
//! then key order). Names are literal: `geo.lat` is a column named `geo.lat`, never a
//! path into `geo`. Two keys that differ only by letter case are one column: the
//! first spelling seen wins and the other spelling is **not** a column (when decoding,
//! values under the other spelling are rescued). This holds at every nesting level.
//!
//! CSV: names come from the header made safe as Spark's `makeSafeHeader` does (an
//! empty name is `_c<index>`; a name repeated, also only by case, is name + index),
//! or `_c0`, `_c1`, ... without a header; values are classified with the same parsers the
//! decoder's `cast` uses, so an inferred type always reads its own sample back. A CSV
//! value is never a struct or an array. JSON: lines that are not JSON objects are
//! skipped (the decoder reports them as corrupt records).
//!
//! # All-strings inference (`typed = false`)
//!
//! Every top-level column is a string; a JSON object or array value is then read as
//! its JSON text.
//!
//! # Parquet
//!
//! The files' own schemas (`typed` does not apply), merged by name with the rules
//! above for nested fields and case, and normalised to the types a Delta table
//! stores: string/binary variants to string/binary, every integer up to 32 bits
//! (signed or not) to BIGINT and `half`/`float` to DOUBLE (the widest of their
//! family, so a later file writing the column as 64 bits fits it; `uint64` to
//! `decimal(20,0)`), timestamps to microseconds
//! (UTC when the file has any zone, no zone otherwise), dictionaries to their
//! values, and types Delta lacks (time, duration, interval) to string. Two files
//! disagreeing on a type widen it (integers to the wider integer, integer and float
//! to double, decimals to a decimal holding both) or, failing that, make it a string.

use std::collections::HashMap;

use arrow::compute::kernels::cast_utils::{Parser, string_to_datetime};
use arrow::datatypes::{DataType, Field, Fields, Float64Type, Int64Type, TimeUnit};
use serde_json::{Map, Value};

use super::ddl::{list_of, map_of, timestamp_utc};
use crate::spec::{CsvOptions, TimestampFormat};

/// The first character of a marker string standing for a bare non-finite JSON token
/// (a private-use character: `"\u{10FF00}NaN"`): the JSON-lines parser writes them,
/// inference types them as doubles.
pub(crate) const NON_FINITE_MARK: char = '\u{10FF00}';

/// The token a marker string stands for (`NaN`, `+INF`, ...).
pub(crate) fn marked_token(s: &str) -> Option<&str> {
    s.strip_prefix(NON_FINITE_MARK)
}

/// The first character of a marker string standing for a JSON number kept as its
/// literal text (`"\u{10FF01}3.10"`): the JSON-lines parser writes them when exact
/// digits matter (a decimal column, `prefers_decimal` inference), as serde_json would
/// otherwise round a fraction or a long literal to a double.
pub(crate) const NUMBER_MARK: char = '\u{10FF01}';

/// The literal a number marker string stands for (`3.10`, `1234567890123456789012.5`).
pub(crate) fn marked_number(s: &str) -> Option<&str> {
    s.strip_prefix(NUMBER_MARK)
}

/// A number literal as a JSON number when serde_json writes it back unchanged,
/// otherwise as a string holding the literal (nothing is rounded).
pub(crate) fn number_value(text: &str) -> Value {
    match serde_json::from_str::<serde_json::Number>(text) {
        Ok(n) if n.to_string() == text => Value::Number(n),
        _ => Value::String(text.to_string()),
    }
}

/// Marker strings back to what they stand for: a bare non-finite token as its text
/// (`"NaN"`), a number literal as [`number_value`].
pub(crate) fn unmark(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Some(token) = marked_token(s) {
                *s = token.to_string();
            } else if let Some(text) = marked_number(s) {
                *value = number_value(text);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(unmark),
        Value::Object(o) => o.values_mut().for_each(unmark),
        _ => {}
    }
}

/// A JSON value's text for a message, markers back to what they stand for.
pub(crate) fn display_json(value: &Value) -> String {
    let mut value = value.clone();
    unmark(&mut value);
    value.to_string()
}

/// Spark's `DecimalType` for a JSON number literal read with `prefersDecimal`
/// (`JsonInferSchema`: `DecimalType(max(precision, scale), scale)` of the literal's
/// `BigDecimal`): `3.1` is `(2,1)`, `0.10` is `(2,2)`, `0.001` is `(3,3)`. A literal
/// with a negative scale (`1.5e3`) is `(precision - scale, 0)` (Spark refuses negative
/// scales). `None` when it needs more than 38 digits (Spark then infers a double).
pub(crate) fn decimal_of_literal(text: &str) -> Option<(u8, i8)> {
    let body = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i64>().ok()?),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !int_part
        .bytes()
        .chain(frac_part.bytes())
        .all(|b| b.is_ascii_digit())
        || int_part.len() + frac_part.len() == 0
    {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let significant = digits.trim_start_matches('0').len().max(1) as i64;
    let scale = frac_part.len() as i64 - exponent;
    let (precision, scale) = if scale < 0 {
        (significant - scale, 0)
    } else {
        (significant.max(scale), scale)
    };
    (precision <= 38).then_some((precision as u8, scale as i8))
}

/// Two decimals merged as Spark's JSON inference does (`compatibleType`): the larger
/// scale and the larger integer range; a double when that needs more than 38 digits.
fn merge_decimals((p1, s1): (u8, i8), (p2, s2): (u8, i8)) -> Ty {
    let scale = s1.max(s2);
    let range = (i16::from(p1) - i16::from(s1)).max(i16::from(p2) - i16::from(s2));
    let precision = range + i16::from(scale);
    if precision > 38 {
        Ty::Double
    } else {
        Ty::Decimal(precision as u8, scale)
    }
}

/// A long as a decimal, as Spark widens it (`DecimalType.forType(LongType)`).
const LONG_AS_DECIMAL: (u8, i8) = (20, 0);

/// What classifies a value beyond its JSON type: a timestamp pattern, CSV's
/// non-finite spellings.
#[derive(Clone, Copy, Default)]
pub(crate) struct Rules<'a> {
    pub(crate) timestamp_format: Option<&'a TimestampFormat>,
    pub(crate) csv: Option<&'a CsvOptions>,
    /// JSON numbers with a fraction (number markers) are decimals (`prefers_decimal`).
    pub(crate) prefers_decimal: bool,
}

/// Whether a string is an ISO-8601 date-time (a date alone is not) that the
/// decoder's timestamp conversion accepts.
pub(crate) fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 16
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b' ')
        && b[..4].iter().all(u8::is_ascii_digit)
        && string_to_datetime(&chrono::Utc, s).is_ok()
}

/// The typed-inference type of one field, accumulated value by value with the
/// rules above (the decoders use it to type the fields a schema lacks).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct InferredType(Ty);

impl InferredType {
    /// Merges a JSON value (null included: it only marks the field as seen).
    pub(crate) fn absorb_json(&mut self, value: &Value) {
        absorb(&mut self.0, value, Rules::default());
    }

    /// Merges a CSV text value (never null: the caller skips empty and `null_value` fields).
    pub(crate) fn absorb_text(&mut self, text: &str) {
        if self.0 != Ty::Str {
            let current = std::mem::take(&mut self.0);
            self.0 = merge(current, classify(text, Rules::default()));
        }
    }

    /// Whether more values can still change the type (it is not string yet).
    pub(crate) fn is_open(&self) -> bool {
        self.0 != Ty::Str
    }

    /// The Arrow type; [`DataType::Null`] when every value seen was null (a null
    /// nested inside a struct or array is a string, as in [`infer_schema`]).
    pub(crate) fn into_arrow(self) -> DataType {
        match self.0 {
            Ty::Null => DataType::Null,
            ty => ty.into_arrow(),
        }
    }
}

/// A Parquet column type as a Delta table stores it (see the module documentation).
pub(crate) fn normalize_parquet_type(data_type: &DataType) -> DataType {
    normalize(data_type)
}

/// Two Arrow types merged with the Parquet rules above (integers widen, integer and
/// float give double, decimals widen, structs merge by name with the case rule, any
/// other disagreement gives string); [`DataType::Null`] merges into anything.
pub(crate) fn merge_types(a: DataType, b: DataType) -> DataType {
    merge_arrow(a, b)
}

/// Replaces a null type left nested in a merged type with string (as inference does).
pub(crate) fn finish_type(data_type: DataType) -> DataType {
    match data_type {
        DataType::Null => DataType::Null,
        other => finish_arrow(other),
    }
}

/// The inference lattice.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum Ty {
    #[default]
    Null,
    Bool,
    Long,
    Double,
    /// `prefers_decimal` only: precision and scale.
    Decimal(u8, i8),
    Timestamp,
    Str,
    Struct(StructTy),
    Array(Box<Ty>),
}

/// Fields in first-appearance order; a key differing from a field only by case has no slot.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StructTy {
    pub(crate) fields: Vec<(String, Ty)>,
    exact: HashMap<String, usize>,
    folded: HashMap<String, usize>,
}

impl StructTy {
    /// The field for `key`, added if new; `None` for a case variant of an existing field.
    pub(crate) fn slot(&mut self, key: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(key) {
            return Some(i);
        }
        let folded = key.to_lowercase();
        if self.folded.contains_key(&folded) {
            return None;
        }
        let i = self.fields.len();
        self.fields.push((key.to_string(), Ty::Null));
        self.exact.insert(key.to_string(), i);
        self.folded.insert(folded, i);
        Some(i)
    }

    pub(crate) fn absorb_object(&mut self, object: &Map<String, Value>, rules: Rules<'_>) {
        for (key, value) in object {
            if let Some(i) = self.slot(key) {
                absorb(&mut self.fields[i].1, value, rules);
            }
        }
    }

    fn merge(mut self, other: StructTy) -> StructTy {
        for (key, ty) in other.fields {
            if let Some(i) = self.slot(&key) {
                let current = std::mem::take(&mut self.fields[i].1);
                self.fields[i].1 = merge(current, ty);
            }
        }
        self
    }

    pub(crate) fn into_fields(self) -> Fields {
        self.fields
            .into_iter()
            .map(|(name, ty)| Field::new(name, ty.into_arrow(), true))
            .collect()
    }
}

impl Ty {
    fn of(value: &Value, rules: Rules<'_>) -> Ty {
        match value {
            Value::Null => Ty::Null,
            Value::Bool(_) => Ty::Bool,
            Value::Number(n) if n.is_i64() => Ty::Long,
            Value::Number(_) => Ty::Double,
            // A bare NaN/Infinity token (read as a marker string) is a number.
            Value::String(s) if marked_token(s).is_some() => Ty::Double,
            // A number literal kept as text: an integer, a decimal with
            // `prefers_decimal` (a double when it needs more than 38 digits), else a double.
            Value::String(s) if marked_number(s).is_some() => {
                let text = marked_number(s).unwrap_or_default();
                if text.parse::<i64>().is_ok() {
                    Ty::Long
                } else if rules.prefers_decimal {
                    match decimal_of_literal(text) {
                        Some((p, s)) => Ty::Decimal(p, s),
                        None => Ty::Double,
                    }
                } else {
                    Ty::Double
                }
            }
            Value::String(s) if is_timestamp(s, rules) => Ty::Timestamp,
            Value::String(_) => Ty::Str,
            Value::Array(_) | Value::Object(_) => {
                let mut ty = Ty::Null;
                absorb(&mut ty, value, rules);
                ty
            }
        }
    }

    fn into_arrow(self) -> DataType {
        match self {
            Ty::Null | Ty::Str => DataType::Utf8,
            Ty::Bool => DataType::Boolean,
            Ty::Long => DataType::Int64,
            Ty::Double => DataType::Float64,
            Ty::Decimal(p, s) => DataType::Decimal128(p, s),
            Ty::Timestamp => timestamp_utc(),
            Ty::Struct(s) if s.fields.is_empty() => DataType::Utf8,
            Ty::Struct(s) => DataType::Struct(s.into_fields()),
            Ty::Array(item) => list_of(item.into_arrow()),
        }
    }
}

/// Merges `value`'s type into `ty` in place.
fn absorb(ty: &mut Ty, value: &Value, rules: Rules<'_>) {
    match (&mut *ty, value) {
        (_, Value::Null) | (Ty::Str, _) => {}
        (Ty::Struct(s), Value::Object(o)) => s.absorb_object(o, rules),
        (Ty::Null, Value::Object(o)) => {
            let mut s = StructTy::default();
            s.absorb_object(o, rules);
            *ty = Ty::Struct(s);
        }
        (Ty::Array(item), Value::Array(a)) => {
            for v in a {
                absorb(item, v, rules);
            }
        }
        (Ty::Null, Value::Array(a)) => {
            let mut item = Ty::Null;
            for v in a {
                absorb(&mut item, v, rules);
            }
            *ty = Ty::Array(Box::new(item));
        }
        (_, value) => {
            let current = std::mem::take(ty);
            *ty = merge(current, Ty::of(value, rules));
        }
    }
}

/// A timestamp by the source's pattern, or ISO-8601 without one.
fn is_timestamp(s: &str, rules: Rules<'_>) -> bool {
    match rules.timestamp_format {
        Some(format) => format.matches(s),
        None => looks_like_timestamp(s),
    }
}

pub(crate) fn merge(a: Ty, b: Ty) -> Ty {
    match (a, b) {
        (Ty::Null, x) | (x, Ty::Null) => x,
        (Ty::Struct(a), Ty::Struct(b)) => Ty::Struct(a.merge(b)),
        (Ty::Array(a), Ty::Array(b)) => Ty::Array(Box::new(merge(*a, *b))),
        (Ty::Long, Ty::Double) | (Ty::Double, Ty::Long) => Ty::Double,
        (Ty::Decimal(p1, s1), Ty::Decimal(p2, s2)) => merge_decimals((p1, s1), (p2, s2)),
        (Ty::Long, Ty::Decimal(p, s)) | (Ty::Decimal(p, s), Ty::Long) => {
            merge_decimals(LONG_AS_DECIMAL, (p, s))
        }
        (Ty::Double, Ty::Decimal(..)) | (Ty::Decimal(..), Ty::Double) => Ty::Double,
        (a, b) if a == b => a,
        _ => Ty::Str,
    }
}

/// The type of one CSV value, by the parsers Arrow's string cast uses (and the
/// dialect's `nan_value` / `positive_inf` / `negative_inf` as doubles).
pub(crate) fn classify(s: &str, rules: Rules<'_>) -> Ty {
    if Int64Type::parse(s).is_some() {
        Ty::Long
    } else if Float64Type::parse(s).is_some()
        || rules.csv.is_some_and(|c| c.non_finite(s).is_some())
    {
        Ty::Double
    } else if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") {
        Ty::Bool
    } else if is_timestamp(s, rules) {
        Ty::Timestamp
    } else {
        Ty::Str
    }
}

/// Struct fields by name with the case rule, for Parquet schemas.
#[derive(Default)]
pub(crate) struct ArrowFields {
    fields: Vec<(String, DataType)>,
    exact: HashMap<String, usize>,
    folded: HashMap<String, usize>,
}

impl ArrowFields {
    pub(crate) fn add(&mut self, name: &str, data_type: DataType) {
        if let Some(&i) = self.exact.get(name) {
            let current = std::mem::replace(&mut self.fields[i].1, DataType::Null);
            self.fields[i].1 = merge_arrow(current, data_type);
            return;
        }
        let folded = name.to_lowercase();
        if self.folded.contains_key(&folded) {
            return;
        }
        self.exact.insert(name.to_string(), self.fields.len());
        self.folded.insert(folded, self.fields.len());
        self.fields.push((name.to_string(), data_type));
    }

    pub(crate) fn into_fields(self) -> Fields {
        self.fields
            .into_iter()
            .map(|(name, data_type)| Field::new(name, finish_arrow(data_type), true))
            .collect()
    }
}

/// A Parquet column type as a Delta table stores it (see the module documentation).
pub(crate) fn normalize(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Null
        | DataType::Boolean
        | DataType::Int64
        | DataType::Float64
        | DataType::Date32
        | DataType::Utf8
        | DataType::Binary => data_type.clone(),
        // The widest of their family, so that a later file writing the same column as
        // int64 (or double) fits it instead of having its large values rescued.
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => DataType::Int64,
        DataType::Float16 | DataType::Float32 => DataType::Float64,
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            DataType::Binary
        }
        DataType::UInt64 => DataType::Decimal128(20, 0),
        DataType::Date64 => DataType::Date32,
        DataType::Timestamp(_, Some(_)) => timestamp_utc(),
        DataType::Timestamp(_, None) => DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s) => {
            DataType::Decimal128(*p, *s)
        }
        DataType::Decimal256(p, s) if *p <= 38 => DataType::Decimal128(*p, *s),
        DataType::List(item)
        | DataType::LargeList(item)
        | DataType::ListView(item)
        | DataType::LargeListView(item)
        | DataType::FixedSizeList(item, _) => list_of(normalize(item.data_type())),
        DataType::Struct(fields) => {
            let mut merged = ArrowFields::default();
            for field in fields {
                merged.add(field.name(), normalize(field.data_type()));
            }
            DataType::Struct(
                merged
                    .fields
                    .into_iter()
                    .map(|(name, data_type)| Field::new(name, data_type, true))
                    .collect(),
            )
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                map_of(normalize(kv[0].data_type()), normalize(kv[1].data_type()))
            }
            _ => DataType::Utf8,
        },
        DataType::Dictionary(_, value) => normalize(value),
        DataType::RunEndEncoded(_, value) => normalize(value.data_type()),
        _ => DataType::Utf8,
    }
}

fn int_width(data_type: &DataType) -> Option<u8> {
    match data_type {
        DataType::Int8 => Some(1),
        DataType::Int16 => Some(2),
        DataType::Int32 => Some(3),
        DataType::Int64 => Some(4),
        _ => None,
    }
}

fn merge_arrow(a: DataType, b: DataType) -> DataType {
    if a == b {
        return a;
    }
    match (a, b) {
        (DataType::Null, x) | (x, DataType::Null) => x,
        (a, b) if int_width(&a).is_some() && int_width(&b).is_some() => {
            if int_width(&a) >= int_width(&b) { a } else { b }
        }
        (a, b)
            if (a.is_floating() || int_width(&a).is_some())
                && (b.is_floating() || int_width(&b).is_some()) =>
        {
            DataType::Float64
        }
        (DataType::Decimal128(p1, s1), DataType::Decimal128(p2, s2)) => {
            let scale = s1.max(s2);
            let integer = (i16::from(p1) - i16::from(s1)).max(i16::from(p2) - i16::from(s2));
            let precision = (integer + i16::from(scale)).clamp(1, 38);
            // Both fit: 1..=38 and the larger of two valid scales.
            DataType::Decimal128(u8::try_from(precision).unwrap_or(38), scale)
        }
        (DataType::Struct(a), DataType::Struct(b)) => {
            let mut merged = ArrowFields::default();
            for field in a.iter().chain(b.iter()) {
                merged.add(field.name(), field.data_type().clone());
            }
            DataType::Struct(
                merged
                    .fields
                    .into_iter()
                    .map(|(name, data_type)| Field::new(name, data_type, true))
                    .collect(),
            )
        }
        (DataType::List(a), DataType::List(b)) => {
            list_of(merge_arrow(a.data_type().clone(), b.data_type().clone()))
        }
        (DataType::Map(a, _), DataType::Map(b, _)) => match (a.data_type(), b.data_type()) {
            (DataType::Struct(a), DataType::Struct(b)) if a.len() == 2 && b.len() == 2 => map_of(
                merge_arrow(a[0].data_type().clone(), b[0].data_type().clone()),
                merge_arrow(a[1].data_type().clone(), b[1].data_type().clone()),
            ),
            _ => DataType::Utf8,
        },
        _ => DataType::Utf8,
    }
}

/// Replaces a remaining null type (a column null in every file) with string.
fn finish_arrow(data_type: DataType) -> DataType {
    match data_type {
        DataType::Null => DataType::Utf8,
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Field::new(f.name(), finish_arrow(f.data_type().clone()), true))
                .collect(),
        ),
        DataType::List(item) => list_of(finish_arrow(item.data_type().clone())),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => map_of(
                finish_arrow(kv[0].data_type().clone()),
                finish_arrow(kv[1].data_type().clone()),
            ),
            _ => DataType::Utf8,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Schema};

    use super::*;
    use crate::schema::{parse_ddl, to_ddl};
    use crate::source::files::infer::{InferError, infer_schema};
    use crate::source::files::read::test_support::{case_file, meta};
    use crate::source::files::read::{FileMeta, FileReadError};
    use crate::spec::FileFormat;

    fn infer(files: &[&str], format: FileFormat, typed: bool) -> Result<Schema, InferError> {
        let metas: Vec<FileMeta> = files.iter().map(|f| meta(&case_file(f))).collect();
        infer_schema(
            &metas,
            format,
            &CsvOptions::default(),
            &crate::spec::TextOptions::default(),
            typed,
        )
    }

    fn ddl(files: &[&str], format: FileFormat) -> String {
        to_ddl(&infer(files, format, true).unwrap())
    }

    #[test]
    fn decimal_of_a_literal_is_sparks_bigdecimal_type() {
        for (text, want) in [
            ("3.1", Some((2, 1))),
            ("0.1", Some((1, 1))),
            ("0.10", Some((2, 2))),
            ("0.001", Some((3, 3))),
            ("-12.345", Some((5, 3))),
            ("100.0", Some((4, 1))),
            ("1.5e3", Some((4, 0))),
            ("1.5E-3", Some((4, 4))),
            ("12345678901234567890", Some((20, 0))),
            ("1234567890123456789012345678901234567890.5", None),
        ] {
            assert_eq!(decimal_of_literal(text), want, "{text}");
        }
    }

    #[test]
    fn b07_ints_with_fractions_infer_double_or_sparks_decimal() {
        assert_eq!(
            ddl(&["B07/step1/p1.json"], FileFormat::Json),
            "sku STRING, price DOUBLE, rate DOUBLE"
        );
        let text = crate::spec::TextOptions {
            prefers_decimal: true,
            ..Default::default()
        };
        let infer = |files: &[&str]| {
            let metas: Vec<FileMeta> = files.iter().map(|f| meta(&case_file(f))).collect();
            to_ddl(
                &infer_schema(
                    &metas,
                    FileFormat::Json,
                    &CsvOptions::default(),
                    &text,
                    true,
                )
                .unwrap(),
            )
        };
        assert_eq!(
            infer(&["B07/step1/p1.json"]),
            "sku STRING, price DECIMAL(21,1), rate DECIMAL(21,1)"
        );
        // The 41-digit literal needs more than 38 digits: DOUBLE, as Spark.
        assert_eq!(
            infer(&["B07/step1/p1.json", "B07/step2/p2.json"]),
            "sku STRING, price DOUBLE, rate DECIMAL(21,1)"
        );
    }

    #[test]
    fn b01_null_only_field_is_string_and_all_strings_mode() {
        assert_eq!(
            ddl(&["B01/step1/orders_1.json"], FileFormat::Json),
            "order_id BIGINT, user_id STRING, qty BIGINT"
        );
        // Both files: qty mixes long, string and double -> string; user_id string and long -> string.
        assert_eq!(
            ddl(
                &["B01/step1/orders_1.json", "B01/step2/orders_2.json"],
                FileFormat::Json
            ),
            "order_id BIGINT, user_id STRING, qty STRING"
        );
        let untyped = infer(&["B01/step1/orders_1.json"], FileFormat::Json, false).unwrap();
        assert_eq!(
            to_ddl(&untyped),
            "order_id STRING, user_id STRING, qty STRING"
        );
    }

    #[test]
    fn b02_first_spelling_wins() {
        assert_eq!(
            ddl(
                &["B02/step1/a.json", "B02/step2/b.json", "B02/step3/c.json"],
                FileFormat::Json
            ),
            "id BIGINT, Photo STRING"
        );
        assert_eq!(
            ddl(&["B02/step2/b.json", "B02/step1/a.json"], FileFormat::Json),
            "id BIGINT, photo STRING"
        );
        assert_eq!(
            ddl(&["B02/variant_single_object/d.json"], FileFormat::Json),
            "Code STRING, Qty BIGINT"
        );
    }

    #[test]
    fn b03_literal_names() {
        let schema = infer(&["B03/step1/names.json"], FileFormat::Json, true).unwrap();
        assert_eq!(
            schema,
            parse_ddl(
                "`geo.lat` STRING, geo STRUCT<lat: STRING>, `order id` BIGINT, \
                 `unit price(EUR)` DOUBLE, `k=v` STRING"
            )
            .unwrap()
        );
    }

    #[test]
    fn b04_null_then_object_then_new_field() {
        assert_eq!(
            ddl(&["B04/step1/n1.json"], FileFormat::Json),
            "id BIGINT, meta STRUCT<src: STRING>"
        );
        assert_eq!(
            ddl(
                &["B04/step1/n1.json", "B04/step2/n2.json"],
                FileFormat::Json
            ),
            "id BIGINT, meta STRUCT<src: STRING, ver: BIGINT>"
        );
        // A struct and a string for the same field: string (every value stays readable).
        assert_eq!(
            ddl(
                &["B04/step1/n1.json", "B04/step3/n3.json"],
                FileFormat::Json
            ),
            "id BIGINT, meta STRING"
        );
    }

    #[test]
    fn b06_null_column_is_string() {
        assert_eq!(
            ddl(
                &["B06/step1/t1.json", "B06/step2/t2.json"],
                FileFormat::Json
            ),
            "id BIGINT, amount BIGINT, coupon STRING"
        );
    }

    #[test]
    fn b07_int_and_float_widen_to_double() {
        assert_eq!(
            ddl(&["B07/step1/p1.json"], FileFormat::Json),
            "sku STRING, price DOUBLE, rate DOUBLE"
        );
    }

    #[test]
    fn csv_cases_b08_b09_b10_b11_b13() {
        assert_eq!(
            ddl(
                &[
                    "B08/step1/h1.csv",
                    "B08/step2/h2.csv",
                    "B08/step3/h3.csv",
                    "B08/step4/h4.csv"
                ],
                FileFormat::Csv
            ),
            "id BIGINT, temp DOUBLE, depth BIGINT, salinity DOUBLE"
        );
        assert_eq!(
            ddl(
                &["B09/step1/bom.csv", "B09/step2/nobom.csv"],
                FileFormat::Csv
            ),
            "id BIGINT, name STRING"
        );
        assert_eq!(
            ddl(&["B09/variant_json/bom.json"], FileFormat::Json),
            "id BIGINT, name STRING"
        );
        assert_eq!(
            ddl(
                &["B10/step1/multiline.csv", "B10/step1/multiline_crlf.csv"],
                FileFormat::Csv
            ),
            "id BIGINT, comment STRING, qty BIGINT"
        );
        assert_eq!(
            ddl(&["B11/step1/bad.json"], FileFormat::Json),
            "sensor STRING, val DOUBLE"
        );
        assert_eq!(
            ddl(&["B13/step1/ragged.csv"], FileFormat::Csv),
            "a BIGINT, b BIGINT, c BIGINT"
        );
    }

    #[test]
    fn b15_gzip_samples_and_a_corrupt_one() {
        assert_eq!(
            ddl(
                &[
                    "B15/step1/a.json.gz",
                    "B15/step2/b.json.gz",
                    "B15/step3/c.json",
                    "B15/step4/d.json.gz"
                ],
                FileFormat::Json
            ),
            "id BIGINT"
        );
        let err = infer(&["B15/step4/d.json.gz"], FileFormat::Json, true).unwrap_err();
        assert!(
            matches!(&err, InferError::File(FileReadError::Corrupt { path, .. }) if path.ends_with("d.json.gz")),
            "{err}"
        );
    }

    #[test]
    fn b16_empty_blank_and_header_only() {
        assert_eq!(
            ddl(
                &[
                    "B16/step1/empty.json",
                    "B16/step1/blank.json",
                    "B16/step1/real.json"
                ],
                FileFormat::Json
            ),
            "id BIGINT, name STRING"
        );
        let err = infer(
            &["B16/step1/empty.json", "B16/step1/blank.json"],
            FileFormat::Json,
            true,
        )
        .unwrap_err();
        assert!(
            matches!(err, InferError::NothingToInfer { files: 2 }),
            "{err}"
        );
        assert!(err.retryable());
        assert_eq!(
            ddl(&["B16/variant_csv/header_only.csv"], FileFormat::Csv),
            "id STRING, name STRING"
        );
    }

    #[test]
    fn flights_like_csv_with_na_and_iso_time_hour() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flights.csv");
        std::fs::write(
            &path,
            "year,dep_time,dep_delay,carrier,tailnum,cancelled,time_hour,note\n\
             2013,517,2,UA,N14228,false,2013-01-01T10:00:00Z,NA\n\
             2013,NA,NA,AA,NA,true,2013-01-01T11:00:00Z,\n\
             2013,533,-1.5,UA,N24211,false,2013-01-01T12:00:00Z,NA\n",
        )
        .unwrap();
        let options = CsvOptions {
            null_value: Some("NA".into()),
            ..CsvOptions::default()
        };
        let schema = infer_schema(
            &[meta(&path)],
            FileFormat::Csv,
            &options,
            &crate::spec::TextOptions::default(),
            true,
        )
        .unwrap();
        assert_eq!(
            to_ddl(&schema),
            "year BIGINT, dep_time BIGINT, dep_delay DOUBLE, carrier STRING, tailnum STRING, \
             cancelled BOOLEAN, time_hour TIMESTAMP, note STRING"
        );
        // Without the null value, `NA` is text.
        let schema = infer_schema(
            &[meta(&path)],
            FileFormat::Csv,
            &CsvOptions::default(),
            &crate::spec::TextOptions::default(),
            true,
        )
        .unwrap();
        assert_eq!(schema.field(1).data_type(), &DataType::Utf8);
    }

    #[test]
    fn real_flights_sample_reads_back_without_rescue() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/nycflights13/flights.csv.gz");
        if !path.exists() {
            return;
        }
        let options = CsvOptions {
            null_value: Some("NA".into()),
            ..CsvOptions::default()
        };
        let schema = infer_schema(
            &[meta(&path)],
            FileFormat::Csv,
            &options,
            &crate::spec::TextOptions::default(),
            true,
        )
        .unwrap();
        assert_eq!(
            to_ddl(&schema),
            "year BIGINT, month BIGINT, day BIGINT, dep_time BIGINT, sched_dep_time BIGINT, \
             dep_delay BIGINT, arr_time BIGINT, sched_arr_time BIGINT, arr_delay BIGINT, \
             carrier STRING, flight BIGINT, tailnum STRING, origin STRING, dest STRING, \
             air_time BIGINT, distance BIGINT, hour BIGINT, minute BIGINT, time_hour TIMESTAMP"
        );
        let spec = crate::source::files::read::ReadSpec {
            csv: options,
            ..crate::source::files::read::ReadSpec::new(FileFormat::Csv, Arc::new(schema))
        };
        let decoded = crate::source::files::read::decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(decoded.num_rows, 336_776);
        assert_eq!(decoded.num_rows_rescued, 0);
        assert_eq!(decoded.num_records_corrupt, 0);
    }

    #[test]
    fn typed_merge_rules() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        std::fs::write(
            &path,
            concat!(
                r#"{"a":1,"b":true,"c":[1],"d":{},"e":"2024-01-01","f":"2024-01-01T00:00:00Z","g":{"x":1,"X":2}}"#,
                "\n",
                r#"{"a":2.5,"b":1,"c":[2.5,null],"d":{},"e":"x","f":"2024-01-01 10:00:00","g":{"y":"s"},"h":null}"#,
                "\n",
                "not json\n",
            ),
        )
        .unwrap();
        let schema = infer_schema(
            &[meta(&path)],
            FileFormat::Json,
            &CsvOptions::default(),
            &crate::spec::TextOptions::default(),
            true,
        )
        .unwrap();
        assert_eq!(
            to_ddl(&schema),
            "a DOUBLE, b STRING, c ARRAY<DOUBLE>, d STRING, e STRING, f TIMESTAMP, \
             g STRUCT<x: BIGINT, y: STRING>, h STRING"
        );
        let untyped = infer_schema(
            &[meta(&path)],
            FileFormat::Json,
            &CsvOptions::default(),
            &crate::spec::TextOptions::default(),
            false,
        )
        .unwrap();
        assert!(
            untyped
                .fields()
                .iter()
                .all(|f| f.data_type() == &DataType::Utf8)
        );
        assert_eq!(untyped.fields().len(), 8);
    }

    #[test]
    fn parquet_schemas_merge_and_normalize() {
        use arrow::array::{Int32Array, Int64Array, RecordBatch, UInt32Array};
        use parquet::arrow::ArrowWriter;

        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, batch: RecordBatch| {
            let path = dir.path().join(name);
            let mut w =
                ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), None)
                    .unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            meta(&path)
        };
        let a = write(
            "a.parquet",
            RecordBatch::try_from_iter(vec![
                ("id", Arc::new(Int32Array::from(vec![1])) as _),
                ("n", Arc::new(UInt32Array::from(vec![1])) as _),
            ])
            .unwrap(),
        );
        let b = write(
            "b.parquet",
            RecordBatch::try_from_iter(vec![
                ("id", Arc::new(Int64Array::from(vec![2])) as _),
                ("ID", Arc::new(Int64Array::from(vec![3])) as _),
                ("extra", Arc::new(Int64Array::from(vec![4])) as _),
            ])
            .unwrap(),
        );
        let empty = dir.path().join("zero.parquet");
        std::fs::write(&empty, b"").unwrap();
        let schema = infer_schema(
            &[a, b, meta(&empty)],
            FileFormat::Parquet,
            &CsvOptions::default(),
            &crate::spec::TextOptions::default(),
            true,
        )
        .unwrap();
        assert_eq!(to_ddl(&schema), "id BIGINT, n BIGINT, extra BIGINT");
        assert!(schema.fields().iter().all(|f| f.is_nullable()));
    }

    #[test]
    fn timestamp_detection() {
        assert!(looks_like_timestamp("2013-01-01T10:00:00Z"));
        assert!(looks_like_timestamp("2013-01-01 10:00:00"));
        assert!(looks_like_timestamp("2013-01-01T10:00:00.123+02:00"));
        assert!(!looks_like_timestamp("2013-01-01"));
        assert!(!looks_like_timestamp("hello world, not a time"));
        assert!(!looks_like_timestamp("2013-13-01T10:00:00Z"));
    }
}
