//! Arrow columns as PostgreSQL columns: the type each Arrow type becomes, and each value
//! written in `COPY ... (FORMAT binary)`'s encoding of that type (docs/sinks.md, "Types").
//!
//! | Arrow | PostgreSQL |
//! |---|---|
//! | Boolean | `boolean` |
//! | Int8, Int16, UInt8 | `smallint` |
//! | Int32, UInt16 | `integer` |
//! | Int64, UInt32 | `bigint` |
//! | UInt64 | `numeric(20,0)` |
//! | Float16, Float32 | `real` |
//! | Float64 | `double precision` |
//! | Utf8, LargeUtf8, Utf8View | `text` |
//! | Binary, LargeBinary, BinaryView | `bytea` |
//! | Date32, Date64 | `date` |
//! | Timestamp without zone | `timestamp` (microseconds: nanoseconds are truncated) |
//! | Timestamp with a zone | `timestamptz` |
//! | Time32, Time64 | `time` |
//! | Decimal128(p,s), Decimal256(p,s) | `numeric(p,s)` |
//!
//! Dictionary columns are written as their values. Nested types (List, Struct, Map),
//! durations and intervals are refused before anything is written, naming the column.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Decimal256Type, Field, Float16Type,
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, Time32MillisecondType,
    Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimeUnit, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (PostgreSQL's).
const PG_EPOCH_DAYS: i64 = 10_957;
/// The same in microseconds.
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * 86_400_000_000;

/// How one Arrow column is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enc {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    /// Staged as text, cast to `numeric(20,0)`.
    U64,
    F16,
    F32,
    F64,
    Utf8,
    LargeUtf8,
    Utf8View,
    Binary,
    LargeBinary,
    BinaryView,
    Date32,
    Date64,
    Timestamp(TimeUnit),
    Time(TimeUnit),
    /// Staged as text, cast to `numeric(p,s)`.
    Decimal128,
    Decimal256,
    /// Arrow's Null type: every value null.
    Null,
}

/// One column of the stream as the sink writes it.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub enc: Enc,
    pub nullable: bool,
    /// The type of the column in the staging table (what `COPY` writes).
    pub staged: Type,
    /// The type of the column in a table the sink creates.
    pub target: String,
}

impl Column {
    /// The column for `field`, or why it cannot be written.
    pub fn of(field: &Field) -> Result<Column, String> {
        let (enc, staged, target): (Enc, Type, String) = match field.data_type() {
            DataType::Boolean => (Enc::Bool, Type::BOOL, "boolean".into()),
            DataType::Int8 => (Enc::I8, Type::INT2, "smallint".into()),
            DataType::Int16 => (Enc::I16, Type::INT2, "smallint".into()),
            DataType::UInt8 => (Enc::U8, Type::INT2, "smallint".into()),
            DataType::Int32 => (Enc::I32, Type::INT4, "integer".into()),
            DataType::UInt16 => (Enc::U16, Type::INT4, "integer".into()),
            DataType::Int64 => (Enc::I64, Type::INT8, "bigint".into()),
            DataType::UInt32 => (Enc::U32, Type::INT8, "bigint".into()),
            DataType::UInt64 => (Enc::U64, Type::TEXT, "numeric(20,0)".into()),
            DataType::Float16 => (Enc::F16, Type::FLOAT4, "real".into()),
            DataType::Float32 => (Enc::F32, Type::FLOAT4, "real".into()),
            DataType::Float64 => (Enc::F64, Type::FLOAT8, "double precision".into()),
            DataType::Utf8 => (Enc::Utf8, Type::TEXT, "text".into()),
            DataType::LargeUtf8 => (Enc::LargeUtf8, Type::TEXT, "text".into()),
            DataType::Utf8View => (Enc::Utf8View, Type::TEXT, "text".into()),
            DataType::Binary => (Enc::Binary, Type::BYTEA, "bytea".into()),
            DataType::LargeBinary => (Enc::LargeBinary, Type::BYTEA, "bytea".into()),
            DataType::BinaryView => (Enc::BinaryView, Type::BYTEA, "bytea".into()),
            DataType::Date32 => (Enc::Date32, Type::DATE, "date".into()),
            DataType::Date64 => (Enc::Date64, Type::DATE, "date".into()),
            DataType::Timestamp(unit, None) => {
                (Enc::Timestamp(*unit), Type::TIMESTAMP, "timestamp".into())
            }
            DataType::Timestamp(unit, Some(_)) => (
                Enc::Timestamp(*unit),
                Type::TIMESTAMPTZ,
                "timestamptz".into(),
            ),
            DataType::Time32(unit) | DataType::Time64(unit) => {
                (Enc::Time(*unit), Type::TIME, "time".into())
            }
            DataType::Decimal128(p, s) => {
                (Enc::Decimal128, Type::TEXT, format!("numeric({p},{s})"))
            }
            DataType::Decimal256(p, s) => {
                (Enc::Decimal256, Type::TEXT, format!("numeric({p},{s})"))
            }
            DataType::Null => (Enc::Null, Type::TEXT, "text".into()),
            DataType::Dictionary(_, value) => {
                let mut c = Column::of(&Field::new(field.name(), (**value).clone(), true))?;
                c.nullable = field.is_nullable();
                return Ok(c);
            }
            other => {
                return Err(format!(
                    "column {:?} has type {other}, which the postgres sink does not map \
                     (nested types, durations and intervals are not written); select its fields \
                     in the flow's `select` instead (e.g. \"{0}.city AS city\" for a struct)",
                    field.name(),
                ));
            }
        };
        Ok(Column {
            name: field.name().clone(),
            enc,
            nullable: field.is_nullable(),
            staged,
            target,
        })
    }

    /// Whether the staged column is text cast to the target type in the `INSERT`.
    pub fn cast(&self) -> Option<&str> {
        matches!(self.enc, Enc::U64 | Enc::Decimal128 | Enc::Decimal256).then_some(&self.target)
    }
}

/// A value of a column, for `BinaryCopyInWriter::write`.
#[derive(Debug)]
pub struct Cell<'a> {
    pub array: &'a dyn Array,
    pub enc: Enc,
    pub row: usize,
}

fn micros(unit: TimeUnit, v: i64) -> i64 {
    match unit {
        TimeUnit::Second => v.saturating_mul(1_000_000),
        TimeUnit::Millisecond => v.saturating_mul(1_000),
        TimeUnit::Microsecond => v,
        TimeUnit::Nanosecond => v.div_euclid(1_000),
    }
}

impl ToSql for Cell<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let (a, i) = (self.array, self.row);
        if self.enc == Enc::Null || a.is_null(i) {
            return Ok(IsNull::Yes);
        }
        match self.enc {
            Enc::Bool => out.put_u8(u8::from(a.as_boolean().value(i))),
            Enc::I8 => out.put_i16(i16::from(a.as_primitive::<Int8Type>().value(i))),
            Enc::I16 => out.put_i16(a.as_primitive::<Int16Type>().value(i)),
            Enc::U8 => out.put_i16(i16::from(a.as_primitive::<UInt8Type>().value(i))),
            Enc::I32 => out.put_i32(a.as_primitive::<Int32Type>().value(i)),
            Enc::U16 => out.put_i32(i32::from(a.as_primitive::<UInt16Type>().value(i))),
            Enc::I64 => out.put_i64(a.as_primitive::<Int64Type>().value(i)),
            Enc::U32 => out.put_i64(i64::from(a.as_primitive::<UInt32Type>().value(i))),
            Enc::U64 => out.put_slice(
                a.as_primitive::<UInt64Type>()
                    .value(i)
                    .to_string()
                    .as_bytes(),
            ),
            Enc::F16 => out.put_f32(a.as_primitive::<Float16Type>().value(i).to_f32()),
            Enc::F32 => out.put_f32(a.as_primitive::<Float32Type>().value(i)),
            Enc::F64 => out.put_f64(a.as_primitive::<Float64Type>().value(i)),
            Enc::Utf8 => out.put_slice(a.as_string::<i32>().value(i).as_bytes()),
            Enc::LargeUtf8 => out.put_slice(a.as_string::<i64>().value(i).as_bytes()),
            Enc::Utf8View => out.put_slice(a.as_string_view().value(i).as_bytes()),
            Enc::Binary => out.put_slice(a.as_binary::<i32>().value(i)),
            Enc::LargeBinary => out.put_slice(a.as_binary::<i64>().value(i)),
            Enc::BinaryView => out.put_slice(a.as_binary_view().value(i)),
            Enc::Date32 => {
                let days = i64::from(a.as_primitive::<Date32Type>().value(i)) - PG_EPOCH_DAYS;
                out.put_i32(i32::try_from(days)?)
            }
            Enc::Date64 => {
                let ms = a.as_primitive::<Date64Type>().value(i);
                let days = ms.div_euclid(86_400_000) - PG_EPOCH_DAYS;
                out.put_i32(i32::try_from(days)?)
            }
            Enc::Timestamp(unit) => {
                let v = match a.data_type() {
                    DataType::Timestamp(TimeUnit::Second, _) => a
                        .as_primitive::<arrow::datatypes::TimestampSecondType>()
                        .value(i),
                    DataType::Timestamp(TimeUnit::Millisecond, _) => a
                        .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
                        .value(i),
                    DataType::Timestamp(TimeUnit::Microsecond, _) => a
                        .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                        .value(i),
                    _ => a
                        .as_primitive::<arrow::datatypes::TimestampNanosecondType>()
                        .value(i),
                };
                out.put_i64(micros(unit, v).saturating_sub(PG_EPOCH_MICROS))
            }
            Enc::Time(unit) => {
                let v = match unit {
                    TimeUnit::Second => i64::from(a.as_primitive::<Time32SecondType>().value(i)),
                    TimeUnit::Millisecond => {
                        i64::from(a.as_primitive::<Time32MillisecondType>().value(i))
                    }
                    TimeUnit::Microsecond => a.as_primitive::<Time64MicrosecondType>().value(i),
                    TimeUnit::Nanosecond => a.as_primitive::<Time64NanosecondType>().value(i),
                };
                out.put_i64(micros(unit, v))
            }
            Enc::Decimal128 => out.put_slice(
                a.as_primitive::<Decimal128Type>()
                    .value_as_string(i)
                    .as_bytes(),
            ),
            Enc::Decimal256 => out.put_slice(
                a.as_primitive::<Decimal256Type>()
                    .value_as_string(i)
                    .as_bytes(),
            ),
            Enc::Null => {}
        }
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        // The staging table's types are the ones `Column::of` chose for each encoding.
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_types_are_refused_naming_the_column() {
        let f = Field::new(
            "tags",
            DataType::List(std::sync::Arc::new(Field::new(
                "item",
                DataType::Utf8,
                true,
            ))),
            true,
        );
        let e = Column::of(&f).unwrap_err();
        assert!(e.contains("\"tags\""), "{e}");
    }

    #[test]
    fn decimals_and_unsigned_64_are_staged_as_text_and_cast() {
        let c = Column::of(&Field::new("p", DataType::Decimal128(12, 2), true)).unwrap();
        assert_eq!(
            (c.staged.clone(), c.cast()),
            (Type::TEXT, Some("numeric(12,2)"))
        );
        let c = Column::of(&Field::new("n", DataType::Int64, false)).unwrap();
        assert_eq!(
            (c.staged.clone(), c.cast(), c.nullable),
            (Type::INT8, None, false)
        );
    }

    #[test]
    fn timestamps_are_microseconds_from_2000() {
        assert_eq!(micros(TimeUnit::Nanosecond, -1), -1);
        assert_eq!(micros(TimeUnit::Second, 946_684_800) - PG_EPOCH_MICROS, 0);
    }
}
