//! The fast path of the JSON-lines reader (issue #16): a batch of lines that all fit
//! the schema is decoded by arrow-json's [`Decoder`] straight from the bytes, without
//! building a `serde_json::Value` per line.
//!
//! "Fit" is decided per line by a serde visitor over the line's tokens (nothing is
//! allocated): one object, every key a column of the schema (exact spelling, once),
//! and every value of a kind that the rescuing decoder keeps *and* arrow-json reads to
//! the same value:
//!
//! | column | fits | the rescuing decoder would instead |
//! |---|---|---|
//! | STRING | a string (not a marker string) or null | turn numbers, booleans, objects into text |
//! | TINYINT..BIGINT | an integer token in the type's range, or null | rescue; arrow-json would cast `"12"` or `1.5` |
//! | DOUBLE (top level) | a number, or null | rescue strings; keep `"NaN"` with `allowNonNumericNumbers` |
//! | BOOLEAN | `true`, `false`, null | rescue |
//! | TIMESTAMP / TIMESTAMP_NTZ (default parsing) | a string, or null | read numbers as epoch seconds (arrow-json: as ticks) |
//! | STRUCT / ARRAY of the above | an object / array whose members fit | rescue the misfits |
//!
//! Any other column type (DECIMAL, FLOAT, DATE, BINARY, MAP, nested DOUBLE, a session
//! time zone or timestamp pattern) disables the fast path for the file. A timestamp
//! string is parsed by the same function (`string_to_datetime`) on both paths; one that
//! does not parse makes arrow-json fail, and a DOUBLE is compared bit for bit with
//! serde_json's reading (which the rescuing decoder stores; the two can differ by one
//! ulp on long literals). Any such difference, a line that does not fit, or an arrow-json
//! error sends the whole batch to the rescuing decoder, so `_rescued_data`, corrupt
//! records, drift and every column are exactly what the rescuing decoder produces.

use std::collections::HashMap;
use std::fmt;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Fields, Float64Type, SchemaRef};
use arrow::json::ReaderBuilder;
use arrow::json::reader::Decoder;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::schema::infer::{marked_number, marked_token};

/// What a column accepts on the fast path.
enum Kind {
    Utf8,
    Int {
        min: i64,
        max: i64,
    },
    /// A top-level DOUBLE: its slot in [`FastPath::floats`].
    Float(usize),
    Bool,
    Timestamp,
    List(Box<Kind>),
    Struct(Struct),
}

struct Struct {
    names: Vec<String>,
    /// Name to index, for wide structs (a narrow one is searched in order).
    index: HashMap<String, usize>,
    kinds: Vec<Kind>,
}

/// Up to this many fields, a key is looked up by comparing it with each name.
const SCAN_FIELDS: usize = 16;

impl Struct {
    fn position(&self, key: &str) -> Option<usize> {
        if self.names.len() <= SCAN_FIELDS {
            self.names.iter().position(|name| name == key)
        } else {
            self.index.get(key).copied()
        }
    }
}

impl Struct {
    /// `floats` collects the top-level DOUBLE columns (`None` below the top level).
    fn new(fields: &Fields, mut floats: Option<&mut Vec<usize>>) -> Option<Self> {
        let mut index = HashMap::with_capacity(fields.len());
        let names = fields.iter().map(|f| f.name().clone()).collect();
        let mut kinds = Vec::with_capacity(fields.len());
        for (i, field) in fields.iter().enumerate() {
            if index.insert(field.name().clone(), i).is_some() {
                return None;
            }
            let kind = match field.data_type() {
                DataType::Float64 => {
                    let slots = floats.as_deref_mut()?;
                    slots.push(i);
                    Kind::Float(slots.len() - 1)
                }
                other => Kind::new(other)?,
            };
            kinds.push(kind);
        }
        Some(Struct {
            names,
            index,
            kinds,
        })
    }
}

impl Kind {
    /// `None` for a type the fast path does not read (nested DOUBLE included).
    fn new(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Utf8 => Kind::Utf8,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                let (min, max) = super::json_lines::int_bounds(data_type)?;
                Kind::Int { min, max }
            }
            DataType::Boolean => Kind::Bool,
            DataType::Timestamp(..) => Kind::Timestamp,
            DataType::List(item) => Kind::List(Box::new(Kind::new(item.data_type())?)),
            DataType::Struct(fields) => Kind::Struct(Struct::new(fields, None)?),
            _ => return None,
        })
    }
}

/// The fast path of one file.
pub(super) struct FastPath {
    shape: Struct,
    schema: SchemaRef,
    batch_rows: usize,
    decoder: Decoder,
    /// Column index of each top-level DOUBLE.
    float_columns: Vec<usize>,
    /// serde_json's reading of each DOUBLE of the batch, per slot.
    floats: Vec<Vec<Option<f64>>>,
}

impl FastPath {
    /// `None` when a column's type (or `default_timestamps` being false with a
    /// timestamp column) is outside what the fast path reads the way the rescuing
    /// decoder does.
    pub fn new(schema: SchemaRef, default_timestamps: bool, batch_rows: usize) -> Option<Self> {
        let mut float_columns = Vec::new();
        let shape = Struct::new(schema.fields(), Some(&mut float_columns))?;
        if !default_timestamps && schema.fields().iter().any(|f| has_timestamp(f.data_type())) {
            return None;
        }
        let decoder = build_decoder(&schema, batch_rows)?;
        Some(FastPath {
            floats: vec![Vec::new(); float_columns.len()],
            float_columns,
            shape,
            schema,
            batch_rows,
            decoder,
        })
    }

    /// The data columns of `lines` (non-blank lines, each within `max_record_bytes`),
    /// or `None` when a line does not fit or arrow-json reads something differently:
    /// the caller then decodes the batch with the rescuing decoder.
    pub fn decode(&mut self, lines: &[&[u8]]) -> Option<Vec<ArrayRef>> {
        for floats in &mut self.floats {
            floats.clear();
        }
        let mut line_floats = vec![None; self.float_columns.len()];
        for line in lines {
            line_floats.iter_mut().for_each(|f| *f = None);
            let mut deserializer = serde_json::Deserializer::from_slice(line);
            let fits = TopSeed {
                shape: &self.shape,
                floats: &mut line_floats,
            }
            .deserialize(&mut deserializer)
            .and_then(|()| deserializer.end())
            .is_ok();
            if !fits {
                return None;
            }
            for (column, value) in self.floats.iter_mut().zip(&line_floats) {
                column.push(*value);
            }
        }
        let batch = match self.decode_lines(lines) {
            Some(batch) => batch,
            None => {
                // The decoder may hold part of the batch: start afresh.
                self.decoder = build_decoder(&self.schema, self.batch_rows)?;
                return None;
            }
        };
        if batch.num_rows() != lines.len() {
            return None;
        }
        for (slot, &column) in self.float_columns.iter().enumerate() {
            let decoded = batch.column(column).as_primitive_opt::<Float64Type>()?;
            let same = decoded.len() == self.floats[slot].len()
                && self.floats[slot]
                    .iter()
                    .enumerate()
                    .all(|(row, expected)| match expected {
                        None => decoded.is_null(row),
                        Some(v) => {
                            decoded.is_valid(row) && decoded.value(row).to_bits() == v.to_bits()
                        }
                    });
            if !same {
                return None;
            }
        }
        Some(batch.columns().to_vec())
    }

    fn decode_lines(&mut self, lines: &[&[u8]]) -> Option<arrow::array::RecordBatch> {
        for line in lines {
            let mut rest: &[u8] = line;
            while !rest.is_empty() {
                let used = self.decoder.decode(rest).ok()?;
                if used == 0 {
                    return None;
                }
                rest = &rest[used..];
            }
            // Each line is one whole record.
            if self.decoder.has_partial_record() {
                return None;
            }
        }
        self.decoder.flush().ok()?
    }
}

fn build_decoder(schema: &SchemaRef, batch_rows: usize) -> Option<Decoder> {
    // One more than a batch holds, so that the decoder never stops short of a line's end.
    ReaderBuilder::new(schema.clone())
        .with_batch_size(batch_rows + 1)
        .with_strict_mode(true)
        .build_decoder()
        .ok()
}

fn has_timestamp(data_type: &DataType) -> bool {
    match data_type {
        DataType::Timestamp(..) => true,
        DataType::Struct(fields) => fields.iter().any(|f| has_timestamp(f.data_type())),
        DataType::List(item) => has_timestamp(item.data_type()),
        _ => false,
    }
}

/// A value that does not fit: parsing stops there (the message is never shown).
fn misfit<E: de::Error>() -> E {
    E::custom("")
}

/// The line: an object whose members fit (top-level DOUBLEs recorded).
struct TopSeed<'a> {
    shape: &'a Struct,
    floats: &'a mut [Option<f64>],
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(ObjectVisitor {
            shape: self.shape,
            floats: Some(self.floats),
        })
    }
}

struct ObjectVisitor<'a, 'f> {
    shape: &'a Struct,
    /// The line's DOUBLE readings (top level only).
    floats: Option<&'f mut [Option<f64>]>,
}

impl<'de> Visitor<'de> for ObjectVisitor<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        // Each key at most once (the rescuing decoder keeps the last of duplicates).
        let n = self.shape.kinds.len();
        let mut seen_narrow: u64 = 0;
        let mut seen_wide = if n > 64 { vec![false; n] } else { Vec::new() };
        while let Some(i) = map.next_key_seed(KeySeed(self.shape))? {
            let again = if n > 64 {
                std::mem::replace(&mut seen_wide[i], true)
            } else {
                let bit = 1u64 << i;
                let again = seen_narrow & bit != 0;
                seen_narrow |= bit;
                again
            };
            if again {
                return Err(misfit());
            }
            let kind = &self.shape.kinds[i];
            if let Kind::Float(slot) = kind {
                let value = map.next_value_seed(FloatSeed)?;
                match self.floats.as_deref_mut().and_then(|f| f.get_mut(*slot)) {
                    Some(cell) => *cell = value,
                    None => return Err(misfit()),
                }
            } else {
                map.next_value_seed(ValueSeed(kind))?;
            }
        }
        Ok(())
    }
}

/// A key: its column index; a key the struct lacks does not fit.
struct KeySeed<'a>(&'a Struct);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a column name")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<usize, E> {
        self.0.position(key).ok_or_else(misfit)
    }
}

/// A top-level DOUBLE: serde_json's reading of the number (`None` for null).
struct FloatSeed;

impl<'de> DeserializeSeed<'de> for FloatSeed {
    type Value = Option<f64>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<f64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FloatSeed {
    type Value = Option<f64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<f64>, E> {
        Ok(None)
    }
    // What arrow-json makes of the value the rescuing decoder hands it.
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<f64>, E> {
        Ok(Some(v as f64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<f64>, E> {
        Ok(Some(v as f64))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<f64>, E> {
        Ok(Some(v))
    }
}

/// Any other value: fits its kind, or parsing stops.
struct ValueSeed<'a>(&'a Kind);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value of the column's type")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        match self.0 {
            // A string that looks like one of the rescuing decoder's markers is not taken as is there.
            Kind::Utf8 if marked_token(s).is_none() && marked_number(s).is_none() => Ok(()),
            // Parsed by arrow-json with the rescuing decoder's own function; one that
            // does not parse fails the batch.
            Kind::Timestamp => Ok(()),
            _ => Err(misfit()),
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        match self.0 {
            Kind::Int { min, max } if (*min..=*max).contains(&v) => Ok(()),
            _ => Err(misfit()),
        }
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        match (self.0, i64::try_from(v)) {
            (Kind::Int { min, max }, Ok(v)) if (*min..=*max).contains(&v) => Ok(()),
            _ => Err(misfit()),
        }
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        match self.0 {
            Kind::Bool => Ok(()),
            _ => Err(misfit()),
        }
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Kind::List(item) = self.0 else {
            return Err(misfit());
        };
        while seq.next_element_seed(ValueSeed(item))?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let Kind::Struct(shape) = self.0 else {
            return Err(misfit());
        };
        ObjectVisitor {
            shape,
            floats: None,
        }
        .visit_map(map)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::Schema;

    use super::super::json_lines::compare_paths;
    use super::super::{BATCH_ROWS, FileMeta, ReadSpec};
    use super::FastPath;
    use crate::schema::parse_ddl;
    use crate::spec::{FileFormat, ParseMode};

    const DDL: &str = "id BIGINT, small TINYINT, name STRING, amount DOUBLE, ok BOOLEAN, \
        ts TIMESTAMP, ntz TIMESTAMP_NTZ, tags ARRAY<STRING>, \
        nested STRUCT<a: INT, list: ARRAY<BIGINT>, deep: STRUCT<b: STRING>>";

    fn spec(ddl: &str) -> ReadSpec {
        ReadSpec::new(FileFormat::Json, Arc::new(parse_ddl(ddl).unwrap()))
    }

    fn fast_path(ddl: &str) -> Option<FastPath> {
        let schema = parse_ddl(ddl).unwrap();
        FastPath::new(
            Arc::new(Schema::new(schema.fields().clone())),
            true,
            BATCH_ROWS,
        )
    }

    /// Whether the fast path takes `line` (in a batch of its own).
    fn fits(line: &str) -> bool {
        fast_path(DDL).unwrap().decode(&[line.as_bytes()]).is_some()
    }

    /// The fast path and the rescuing decoder agree on `text`, permissive and failfast.
    fn same(ddl: &str, text: impl AsRef<[u8]>) {
        let text = text.as_ref();
        let meta = FileMeta {
            path: "/l/f.json".into(),
            size: text.len() as u64,
            modification_time_ms: 0,
        };
        let mut spec = spec(ddl);
        if let Err(e) = compare_paths(text, &meta, &spec) {
            panic!("{:?}: {e}", String::from_utf8_lossy(text));
        }
        spec.text.mode = ParseMode::FailFast;
        if let Err(e) = compare_paths(text, &meta, &spec) {
            panic!("failfast {:?}: {e}", String::from_utf8_lossy(text));
        }
    }

    const FITTING: &[&str] = &[
        r#"{"id":1,"small":-128,"name":"a","amount":12.5,"ok":true,"ts":"2026-03-01T00:00:00.006Z","ntz":"2026-03-01 10:00:00","tags":["x",null],"nested":{"a":1,"list":[1,2],"deep":{"b":"c"}}}"#,
        r#"{}"#,
        r#"{"id":null,"small":null,"name":null,"amount":null,"ok":null,"ts":null,"ntz":null,"tags":null,"nested":null}"#,
        r#"  {"name":"üñí\u00e9\ud83d\ude00 \"q\" \\ \n \t","amount":-0.0}  "#,
        r#"{"amount":1.5e39,"id":9223372036854775807,"small":127}"#,
        r#"{"amount":18446744073709551615,"id":-9223372036854775808}"#,
        r#"{"amount":0.1,"ts":"2026-03-01T01:00:00+02:00","ntz":"2026-03-01T01:00:00+02:00"}"#,
        r#"{"ts":"2026-03-01 00:00:00","ntz":"1969-12-31T23:59:59.999999999Z","nested":{}}"#,
        r#"{"tags":[],"nested":{"list":[],"deep":null}}"#,
        r#"{"amount":-3,"name":""}"#,
        "{\"name\":\"\u{10FF80}x\"}",
    ];

    const MISFITS: &[&str] = &[
        r#"{"id":1,"extra":2}"#,
        r#"{"Id":1}"#,
        r#"{"id":"12"}"#,
        r#"{"id":1.0}"#,
        r#"{"id":1e3}"#,
        r#"{"id":-0}"#,
        r#"{"id":9223372036854775808}"#,
        r#"{"small":200}"#,
        r#"{"name":12}"#,
        r#"{"name":true}"#,
        r#"{"name":{"a":1.50}}"#,
        r#"{"name":["a"]}"#,
        "{\"name\":\"\u{10FF01}3.10\"}",
        "{\"name\":\"\u{10FF00}NaN\"}",
        r#"{"amount":"1.5"}"#,
        r#"{"amount":"NaN"}"#,
        r#"{"amount":NaN}"#,
        r#"{"amount":1e400}"#,
        r#"{"amount":true}"#,
        r#"{"ok":1}"#,
        r#"{"ok":"true"}"#,
        r#"{"ts":1700000000}"#,
        r#"{"ts":"yesterday"}"#,
        r#"{"tags":"a"}"#,
        r#"{"tags":[1]}"#,
        r#"{"nested":{"a":1,"z":2}}"#,
        r#"{"nested":{"a":2147483648}}"#,
        r#"{"nested":"legacy"}"#,
        r#"{"nested":{"deep":{"b":1}}}"#,
        r#"{"id":1,"id":2}"#,
        r#"{"id":1} trailing"#,
        r#"{"id":1}{"id":2}"#,
        r#"{"id":1"#,
        r#"[{"id":1}]"#,
        "null",
        "42",
        r#""text""#,
        "{\"name\":\"\u{7}\"}",
        r#"{"name":"\ud800"}"#,
        "\u{feff}{\"id\":1}",
    ];

    /// Either way, as long as both paths agree.
    const EITHER: &[&str] = &[
        r#"{"amount":1.2345678901234567890123e39}"#,
        r#"{"amount":5e-324}"#,
        r#"{"amount":2.2250738585072011e-308}"#,
        r#"{"amount":9007199254740993}"#,
        r#"{"ts":"10000-01-01T00:00:00Z"}"#,
        r#"{"ts":"2026-03-01"}"#,
        r#"{"ts":"2026-03-01T00:00:00.123456789123Z"}"#,
        r#"{"ntz":"+262143-01-01T00:00:00Z"}"#,
        r#"{"ts":" 2026-03-01T00:00:00Z"}"#,
    ];

    #[test]
    fn lines_that_fit_take_the_fast_path_and_misfits_do_not() {
        for line in FITTING {
            assert!(fits(line), "should fit: {line}");
        }
        for line in MISFITS {
            assert!(!fits(line), "should not fit: {line}");
        }
        // Not UTF-8.
        let latin1 = b"{\"name\":\"caf\xe9\"}";
        assert!(fast_path(DDL).unwrap().decode(&[latin1]).is_none());
    }

    #[test]
    fn the_fast_path_gives_what_the_rescuing_decoder_gives() {
        for line in FITTING.iter().chain(MISFITS).chain(EITHER) {
            same(DDL, format!("{line}\n"));
        }
        // Whole files: every fitting line, then each misfit among them (the batch falls back).
        let fitting = FITTING.join("\n");
        same(DDL, &fitting);
        same(DDL, format!("{fitting}\n").repeat(3));
        same(DDL, format!("\n\r\n  \n{fitting}\r\n\n"));
        for misfit in MISFITS {
            same(DDL, format!("{fitting}\n{misfit}\n{fitting}"));
        }
        for either in EITHER {
            same(DDL, format!("{fitting}\n{either}\n{fitting}"));
        }
        let mut latin1 = format!("{fitting}\n").into_bytes();
        latin1.extend_from_slice(b"{\"name\":\"caf\xe9\"}\n");
        same(DDL, latin1);
    }

    #[test]
    fn doubles_are_compared_with_serde_json_reading_of_them() {
        // serde_json's default float parser may be one ulp off arrow-json's on long
        // literals: such a batch falls back, so the column is serde_json's either way.
        let lines: Vec<String> = (0..2000)
            .map(|i: i64| format!("{{\"amount\":{i}.{:0>20}e{}}}", i * 7919, i % 600 - 300))
            .collect();
        same("amount DOUBLE", lines.join("\n"));
    }

    #[test]
    fn batches_fall_back_one_at_a_time() {
        // A full batch that fits, then one with a misfit, then one that fits again.
        let good = r#"{"id":1,"name":"a","amount":2.5}"#;
        let mut text = String::new();
        for i in 0..BATCH_ROWS * 2 + 10 {
            if i == BATCH_ROWS + 3 {
                text.push_str("{\"id\":\"x\",\"new\":1}\n");
            } else if i == BATCH_ROWS + 5 {
                text.push_str("{oops\n");
            } else {
                text.push_str(good);
                text.push('\n');
            }
        }
        same(DDL, &text);
        let spec = spec(DDL);
        let decoded = super::super::decode_text(
            text.as_bytes(),
            &FileMeta {
                path: "/l/f.json".into(),
                size: text.len() as u64,
                modification_time_ms: 0,
            },
            &spec,
        )
        .unwrap();
        assert_eq!(decoded.num_rows, BATCH_ROWS * 2 + 10);
        assert_eq!(decoded.num_rows_rescued, 1);
        assert_eq!(decoded.num_records_corrupt, 1);
        assert_eq!(decoded.batches.len(), 3);
    }

    #[test]
    fn the_fuzz_corpora_decode_the_same_on_both_paths() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        let mut inputs = 0;
        for target in ["json_fast_path", "json_lines", "gzip"] {
            for entry in std::fs::read_dir(root.join(target)).unwrap() {
                let data = std::fs::read(entry.unwrap().path()).unwrap();
                crate::fuzz::json_fast_path(&data);
                inputs += 1;
            }
        }
        assert!(inputs > 80, "{inputs} inputs");
    }

    #[test]
    fn schemas_outside_the_fast_path_use_the_rescuing_decoder() {
        for ddl in [
            "price DECIMAL(10,2)",
            "x FLOAT",
            "d DATE",
            "b BINARY",
            "m MAP<STRING, BIGINT>",
            "s STRUCT<x: DOUBLE>",
            "l ARRAY<DOUBLE>",
        ] {
            assert!(fast_path(ddl).is_none(), "{ddl}");
            same(
                ddl,
                "{\"price\":1.5,\"x\":1,\"d\":\"2026-01-01\",\"s\":{\"x\":1}}\n",
            );
        }
        assert!(fast_path("a STRING, n BIGINT, s STRUCT<t: TIMESTAMP>").is_some());
        let schema = parse_ddl("t TIMESTAMP").unwrap();
        assert!(
            FastPath::new(
                Arc::new(Schema::new(schema.fields().clone())),
                false,
                BATCH_ROWS
            )
            .is_none()
        );
    }
}
