//! Several sources read as one stream (`[[flow.union]]`): Spark's `unionByName` with
//! `allowMissingColumns = true`. The stream's columns are the first source's, in its
//! order, then each other source's new columns; a column a source lacks is null in its
//! rows. A column present in several sources must have one type there (integers of
//! different widths widen to `BIGINT`, integers and floats to `DOUBLE`, as Spark's type
//! coercion of a union does); names are matched exactly, and two names that differ only
//! by case are refused (Spark matches them case-insensitively, the Delta table could
//! not hold both).

use std::sync::Arc;

use arrow::array::{ArrayRef, new_null_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{Error, Result};

/// The common type of a column that is `a` in one source and `b` in another.
fn common_type(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    if a == b {
        return Some(a.clone());
    }
    let int = |t: &DataType| matches!(t, Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32);
    let float = |t: &DataType| matches!(t, Float16 | Float32 | Float64);
    match (a, b) {
        (Null, t) | (t, Null) => Some(t.clone()),
        (a, b) if int(a) && int(b) => Some(Int64),
        (a, b) if (int(a) || float(a)) && (int(b) || float(b)) => Some(Float64),
        _ => None,
    }
}

/// The union's schema over the sources' batch schemas (`schemas[i]` is source `i`'s);
/// `Err` names the column and the two sources that disagree (numbered from 1).
pub fn union_schema(schemas: &[SchemaRef]) -> std::result::Result<SchemaRef, String> {
    let mut fields: Vec<Field> = Vec::new();
    let mut seen_in: Vec<usize> = Vec::new();
    for (i, schema) in schemas.iter().enumerate() {
        for f in schema.fields() {
            match fields.iter().position(|x| x.name() == f.name()) {
                Some(at) => {
                    let old = &fields[at];
                    let Some(t) = common_type(old.data_type(), f.data_type()) else {
                        return Err(format!(
                            "column `{}` is {} in source {} and {} in source {}; a union needs one type per column \
                             (cast it in one source's `select`, or give the sources a `schema` that agrees)",
                            f.name(),
                            old.data_type(),
                            seen_in[at] + 1,
                            f.data_type(),
                            i + 1
                        ));
                    };
                    let nullable = old.is_nullable() || f.is_nullable();
                    fields[at] = old.clone().with_data_type(t).with_nullable(nullable);
                }
                None => {
                    if let Some(other) = fields
                        .iter()
                        .find(|x| x.name().eq_ignore_ascii_case(f.name()))
                    {
                        return Err(format!(
                            "column `{}` of source {} and column `{}` differ only by letter case; \
                             rename one (the Delta table's column names are case-insensitive)",
                            f.name(),
                            i + 1,
                            other.name()
                        ));
                    }
                    fields.push(f.as_ref().clone());
                    seen_in.push(i);
                }
            }
        }
    }
    // Columns missing from a later source are null in its rows.
    for field in fields.iter_mut() {
        let everywhere = schemas
            .iter()
            .all(|s| s.field_with_name(field.name()).is_ok());
        if !everywhere {
            *field = field.clone().with_nullable(true);
        }
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// One source's batch with the union's columns: its own by name (cast to the union's
/// type), null where it has none.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch.clone());
    }
    let arrow = |source| Error::Arrow {
        context: "matching a union source's columns by name".into(),
        source,
    };
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = match batch.column_by_name(field.name()) {
            Some(c) if c.data_type() == field.data_type() => c.clone(),
            Some(c) => arrow::compute::cast(c, field.data_type()).map_err(arrow)?,
            None => new_null_array(field.data_type(), batch.num_rows()),
        };
        columns.push(column);
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(arrow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array, StringArray};

    fn schema(fields: Vec<(&str, DataType)>) -> SchemaRef {
        Arc::new(Schema::new(
            fields
                .into_iter()
                .map(|(n, t)| Field::new(n, t, false))
                .collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn columns_by_name_missing_ones_null_ints_widened() {
        let a = schema(vec![("id", DataType::Int64), ("name", DataType::Utf8)]);
        let b = schema(vec![("region", DataType::Utf8), ("id", DataType::Int32)]);
        let u = union_schema(&[a.clone(), b.clone()]).unwrap();
        let names: Vec<&str> = u.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "name", "region"]);
        assert!(!u.field(0).is_nullable());
        assert!(u.field(1).is_nullable() && u.field(2).is_nullable());
        let batch = RecordBatch::try_new(
            b,
            vec![
                Arc::new(StringArray::from(vec!["west"])),
                Arc::new(Int32Array::from(vec![7])),
            ],
        )
        .unwrap();
        let c = conform(&batch, &u).unwrap();
        let id = c.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(id.value(0), 7);
        assert!(c.column(1).is_null(0));
        assert_eq!(c.num_rows(), 1);
    }

    #[test]
    fn conflicting_types_and_case_only_names_are_refused() {
        let a = schema(vec![("id", DataType::Int64)]);
        let b = schema(vec![("id", DataType::Utf8)]);
        let e = union_schema(&[a.clone(), b]).unwrap_err();
        assert!(
            e.contains("`id` is Int64 in source 1 and Utf8 in source 2"),
            "{e}"
        );
        let c = schema(vec![("ID", DataType::Int64)]);
        let e = union_schema(&[a, c]).unwrap_err();
        assert!(e.contains("only by letter case"), "{e}");
    }
}
