//! Parquet decoding: the Parquet Arrow reader, then columns matched by name and
//! converted with the `cast` kernel; rejected values and unknown columns are rescued.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, StructArray, UInt32Array, new_null_array,
};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{CastOptions, can_cast_types, cast_with_options, take};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value};

use super::drift::Drift;
use super::rescue::Rescues;
use super::{
    BATCH_ROWS, DecodedFile, FileMeta, FileReadError, ReadSpec, assemble, data_fields, display_path,
};
use crate::schema::infer::normalize_parquet_type;

/// Runs `read` on a Parquet file, turning a panic inside the parquet or arrow crates
/// into that file's error. A corrupt file can reach an `unimplemented!` there (found by
/// the `parquet` fuzz target: an embedded Arrow schema with a field of type NONE), and
/// one bad file in a landing directory must fail alone, quarantined and named, not
/// crash every replay of its batch.
pub(crate) fn guarded<T>(
    path: &std::path::Path,
    read: impl FnOnce() -> Result<T, FileReadError>,
) -> Result<T, FileReadError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown reason".into());
        Err(FileReadError::Corrupt {
            path: path.to_path_buf(),
            message: format!("Parquet: the reader could not read this file ({why})"),
        })
    })
}

pub(super) fn decode(
    meta: &FileMeta,
    spec: &ReadSpec,
    schema: &SchemaRef,
) -> Result<DecodedFile, FileReadError> {
    guarded(&meta.path, || decode_unguarded(meta, spec, schema))
}

fn decode_unguarded(
    meta: &FileMeta,
    spec: &ReadSpec,
    schema: &SchemaRef,
) -> Result<DecodedFile, FileReadError> {
    let io = |source| FileReadError::Io {
        path: meta.path.clone(),
        source,
    };
    let corrupt = |e: parquet::errors::ParquetError| FileReadError::Corrupt {
        path: meta.path.clone(),
        message: format!("Parquet: {e}"),
    };
    let reader = match &spec.remote {
        // On object storage: the object fetched whole, read from its bytes.
        Some(landing) => {
            let bytes = landing.get_blocking(&meta.path)?;
            if bytes.is_empty() {
                return Ok(DecodedFile::default());
            }
            ParquetRecordBatchReaderBuilder::try_new(bytes)
                .map_err(corrupt)?
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(corrupt)?
        }
        None => {
            let file = super::open_listed(&meta.path, spec.follow_links)?;
            if file.metadata().map_err(io)?.len() == 0 {
                return Ok(DecodedFile::default());
            }
            ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(corrupt)?
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(corrupt)?
        }
    };
    let fields = data_fields(&spec.schema);
    let file_path = display_path(meta);
    let mut out = DecodedFile::default();
    let mut drift = Drift::default();
    let mut diffed = false;
    for batch in reader {
        let batch = batch.map_err(|e| FileReadError::Corrupt {
            path: meta.path.clone(),
            message: format!("Parquet: {e}"),
        })?;
        let rows = batch.num_rows();
        let file_schema = batch.schema();
        if !diffed {
            diffed = true;
            new_fields(&fields, file_schema.fields(), &mut Vec::new(), &mut drift);
        }
        let mut rescues = Rescues::default();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for field in &fields {
            let Some((index, _)) = file_schema.column_with_name(field.name()) else {
                columns.push(new_null_array(field.data_type(), rows));
                continue;
            };
            columns.push(convert(
                batch.column(index),
                field.data_type(),
                field.name(),
                index,
                &mut rescues,
                &mut drift,
            ));
        }
        for (index, file_field) in file_schema.fields().iter().enumerate() {
            if fields.find(file_field.name()).is_none() {
                let column = batch.column(index);
                let valid: Vec<usize> = (0..rows).filter(|r| column.is_valid(*r)).collect();
                rescue_rows(column, file_field.name(), index, &valid, &mut rescues);
            }
        }
        let rescue = rescues.finish(rows, &file_path, spec.rescued_data);
        if let Some(column) = rescue.column {
            columns.push(column);
        }
        let batch = assemble(schema, columns, rows, &meta.path)?;
        out.num_rows += rows;
        out.num_rows_rescued += rescue.rows_rescued;
        out.num_records_corrupt += rescue.records_corrupt;
        if rows > 0 {
            out.batches.push(batch);
        }
    }
    drift.finish(&spec.schema, &file_path, &mut out);
    Ok(out)
}

/// Reports the fields of a file's (struct) fields that the schema's lack: by exact
/// name, case variants excepted, recursing into structs and list items.
fn new_fields(schema: &Fields, file: &Fields, path: &mut Vec<String>, drift: &mut Drift) {
    for file_field in file {
        match schema.find(file_field.name()) {
            Some((_, field)) => {
                path.push(file_field.name().clone());
                nested_new_fields(field.data_type(), file_field.data_type(), path, drift);
                path.pop();
            }
            None => {
                let folded = file_field.name().to_lowercase();
                if schema.iter().any(|f| f.name().to_lowercase() == folded) {
                    continue;
                }
                let mut full = path.clone();
                full.push(file_field.name().clone());
                if let Some(slot) = drift.new_field(full) {
                    drift.new_declared(slot, normalize_parquet_type(file_field.data_type()));
                }
            }
        }
    }
}

fn nested_new_fields(
    schema: &DataType,
    file: &DataType,
    path: &mut Vec<String>,
    drift: &mut Drift,
) {
    match (schema, file) {
        (DataType::Struct(schema), DataType::Struct(file)) => new_fields(schema, file, path, drift),
        (
            DataType::List(schema) | DataType::LargeList(schema),
            DataType::List(file) | DataType::LargeList(file),
        ) => {
            path.push("element".into());
            nested_new_fields(schema.data_type(), file.data_type(), path, drift);
            path.pop();
        }
        _ => {}
    }
}

/// Converts a file column to the schema's type; values that do not fit are rescued
/// under `name` (nested struct fields as nested objects) and reported as mismatches.
fn convert(
    column: &ArrayRef,
    target: &DataType,
    name: &str,
    index: usize,
    rescues: &mut Rescues,
    drift: &mut Drift,
) -> ArrayRef {
    let mut path = vec![name.to_string()];
    let (array, misfits) = fit_column(column, target, &mut path, drift);
    for (row, value) in misfits {
        rescues.field(row, index, name, value);
    }
    array
}

/// `column` as `target`, and the values (by row) that did not fit. Structs are
/// matched field by field by exact name: a field the target lacks is returned as
/// part of a nested object (`{"ver": 2}` for `meta`), a missing one is null. Any
/// other type goes through the `cast` kernel; the values it rejects are returned.
fn fit_column(
    column: &ArrayRef,
    target: &DataType,
    path: &mut Vec<String>,
    drift: &mut Drift,
) -> (ArrayRef, Vec<(usize, Value)>) {
    if column.data_type() == target {
        return (Arc::clone(column), Vec::new());
    }
    if let (Some(file), DataType::Struct(target_fields)) = (column.as_struct_opt(), target)
        && let Some(fitted) = fit_struct(file, target_fields, path, drift)
    {
        return fitted;
    }
    let options = CastOptions {
        safe: true,
        ..CastOptions::default()
    };
    let cast = if can_cast_types(column.data_type(), target) {
        cast_with_options(column, target, &options).ok()
    } else {
        None
    };
    let failed: Vec<usize> = match &cast {
        None => (0..column.len()).filter(|r| column.is_valid(*r)).collect(),
        Some(cast) if cast.logical_null_count() == column.logical_null_count() => Vec::new(),
        Some(cast) => {
            let before = column
                .logical_nulls()
                .map(|n| n.inner().clone())
                .unwrap_or_else(|| BooleanBuffer::new_set(column.len()));
            match cast.logical_nulls() {
                Some(after) => (&before & &!after.inner()).set_indices().collect(),
                None => Vec::new(),
            }
        }
    };
    let array = cast.unwrap_or_else(|| new_null_array(target, column.len()));
    if failed.is_empty() {
        return (array, Vec::new());
    }
    let names: Vec<&str> = path.iter().map(String::as_str).collect();
    drift.mismatch_declared(
        &names,
        failed.len(),
        normalize_parquet_type(column.data_type()),
    );
    let values = json_values(column, &failed).unwrap_or_else(|| display_values(column, &failed));
    (array, failed.into_iter().zip(values).collect())
}

/// A file struct as a target struct (see [`fit_column`]); `None` when the result
/// cannot be assembled (the caller falls back to a cast).
fn fit_struct(
    file: &StructArray,
    target: &Fields,
    path: &mut Vec<String>,
    drift: &mut Drift,
) -> Option<(ArrayRef, Vec<(usize, Value)>)> {
    let rows = file.len();
    let mut nested: BTreeMap<usize, Map<String, Value>> = BTreeMap::new();
    let mut children: Vec<ArrayRef> = Vec::with_capacity(target.len());
    for field in target {
        let Some(child) = file.column_by_name(field.name()) else {
            children.push(new_null_array(field.data_type(), rows));
            continue;
        };
        path.push(field.name().clone());
        let (array, misfits) = fit_column(child, field.data_type(), path, drift);
        path.pop();
        for (row, value) in misfits {
            if file.is_valid(row) {
                nested
                    .entry(row)
                    .or_default()
                    .insert(field.name().clone(), value);
            }
        }
        children.push(array);
    }
    let DataType::Struct(file_fields) = file.data_type() else {
        return None;
    };
    for (i, field) in file_fields.iter().enumerate() {
        if target.find(field.name()).is_some() {
            continue;
        }
        let child = file.column(i);
        let valid: Vec<usize> = (0..rows)
            .filter(|r| file.is_valid(*r) && child.is_valid(*r))
            .collect();
        if valid.is_empty() {
            continue;
        }
        let values = json_values(child, &valid).unwrap_or_else(|| display_values(child, &valid));
        for (row, value) in valid.into_iter().zip(values) {
            nested
                .entry(row)
                .or_default()
                .insert(field.name().clone(), value);
        }
    }
    let array = StructArray::try_new(target.clone(), children, file.nulls().cloned()).ok()?;
    let misfits = nested
        .into_iter()
        .map(|(row, object)| (row, Value::Object(object)))
        .collect();
    Some((Arc::new(array), misfits))
}

/// Rescues `rows` of `column` under `name`, each as the JSON arrow-json writes for it.
fn rescue_rows(column: &ArrayRef, name: &str, index: usize, rows: &[usize], rescues: &mut Rescues) {
    if rows.is_empty() {
        return;
    }
    let values = json_values(column, rows).unwrap_or_else(|| display_values(column, rows));
    for (&row, value) in rows.iter().zip(values) {
        rescues.field(row, index, name, value);
    }
}

fn json_values(column: &ArrayRef, rows: &[usize]) -> Option<Vec<Value>> {
    let indices =
        UInt32Array::from_iter_values(rows.iter().map(|r| u32::try_from(*r).unwrap_or(u32::MAX)));
    let taken = take(column.as_ref(), &indices, None).ok()?;
    let schema = Arc::new(Schema::new(vec![Field::new(
        "v",
        taken.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(schema, vec![taken]).ok()?;
    let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
    writer.write(&batch).ok()?;
    writer.finish().ok()?;
    let text = writer.into_inner();
    let values: Vec<Value> = text
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            serde_json::from_slice::<Value>(line)
                .ok()
                .and_then(|mut v| v.get_mut("v").map(Value::take))
                .unwrap_or(Value::Null)
        })
        .collect();
    (values.len() == rows.len()).then_some(values)
}

fn display_values(column: &ArrayRef, rows: &[usize]) -> Vec<Value> {
    let options = FormatOptions::default();
    match ArrayFormatter::try_new(column.as_ref(), &options) {
        Ok(formatter) => rows
            .iter()
            .map(|r| Value::String(formatter.value(*r).to_string()))
            .collect(),
        Err(_) => rows.iter().map(|_| Value::Null).collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use serde_json::json;

    use super::super::test_support::{meta, rescued, rows, spec};
    use super::super::{FileReadError, decode_file};
    use crate::schema::parse_ddl;
    use crate::spec::FileFormat;

    #[test]
    fn columns_by_name_cast_rescue_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.parquet");
        let file_schema = Arc::new(Schema::new(vec![
            Field::new("extra", DataType::Int64, true),
            Field::new("amount", DataType::Utf8, true),
            Field::new("id", DataType::Int32, false),
            Field::new("ratio", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            file_schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(7), None])),
                Arc::new(StringArray::from(vec!["1.5", "x"])),
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(Float64Array::from(vec![0.5, 0.25])),
            ],
        )
        .unwrap();
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), file_schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();

        let spec = spec(
            FileFormat::Parquet,
            Arc::new(parse_ddl("id BIGINT, amount DOUBLE, ratio DOUBLE, missing STRING").unwrap()),
        );
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        assert_eq!(
            rows(&decoded.batches),
            [["1", "1.5", "0.5", "null"], ["2", "null", "0.25", "null"]]
        );
        let file = path.to_string_lossy();
        assert_eq!(
            rescued(&decoded.batches),
            [
                Some(json!({"extra": 7, "_file_path": file})),
                Some(json!({"amount": "x", "_file_path": file})),
            ]
        );
        assert_eq!(decoded.num_rows_rescued, 2);
        assert!(decoded.batches[0].schema().field(0).is_nullable());
    }

    #[test]
    fn drift_new_columns_nested_fields_and_mismatches() {
        use arrow::array::{ArrayRef, StructArray};
        use arrow::datatypes::Fields;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.parquet");
        let meta_fields = Fields::from(vec![
            Field::new("src", DataType::Utf8, true),
            Field::new("ver", DataType::Int32, true),
        ]);
        let meta_array = StructArray::new(
            meta_fields.clone(),
            vec![
                Arc::new(StringArray::from(vec!["web", "app"])) as ArrayRef,
                Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
            ],
            None,
        );
        let file_schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("amount", DataType::Utf8, true),
            Field::new("meta", DataType::Struct(meta_fields), true),
            Field::new("Id", DataType::Int64, true),
            Field::new("extra", DataType::UInt32, true),
        ]));
        let batch = RecordBatch::try_new(
            file_schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec!["1.5", "x"])),
                Arc::new(meta_array),
                Arc::new(Int64Array::from(vec![9, 9])),
                Arc::new(arrow::array::UInt32Array::from(vec![None, Some(3)])),
            ],
        )
        .unwrap();
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), file_schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();

        let spec = spec(
            FileFormat::Parquet,
            Arc::new(parse_ddl("id BIGINT, amount DOUBLE, meta STRUCT<src: STRING>").unwrap()),
        );
        let decoded = decode_file(&meta(&path), &spec).unwrap();
        let new: Vec<(String, String)> = decoded
            .new_fields
            .iter()
            .map(|f| (f.path_string(), crate::schema::type_to_ddl(&f.data_type)))
            .collect();
        assert_eq!(
            new,
            [
                // An int32 field is typed as BIGINT (the widest integer): see `normalize`.
                ("meta.ver".into(), "BIGINT".into()),
                ("extra".into(), "BIGINT".into())
            ]
        );
        let mismatched: Vec<(String, usize)> = decoded
            .type_mismatches
            .iter()
            .map(|m| (m.path_string(), m.count))
            .collect();
        // Every value is either in a column or in `_rescued_data`.
        let r = rescued(&decoded.batches);
        assert_eq!(r[1].as_ref().unwrap()["amount"], json!("x"));
        assert_eq!(r[1].as_ref().unwrap()["extra"], json!(3));
        assert_eq!(r[0].as_ref().unwrap()["Id"], json!(9));
        let values = rows(&decoded.batches);
        // `meta` keeps `src`; the new nested `ver` is rescued under its path.
        assert_eq!(
            values,
            [["1", "1.5", "{src: web}"], ["2", "null", "{src: app}"]]
        );
        assert_eq!(r[0].as_ref().unwrap()["meta"], json!({"ver": 1}));
        assert!(
            r[1].as_ref().unwrap().get("meta").is_none(),
            "a null is not rescued"
        );
        assert_eq!(mismatched, [("amount".to_string(), 1)]);
    }

    #[test]
    fn zero_byte_parquet_is_empty_and_bad_footer_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec(
            FileFormat::Parquet,
            Arc::new(parse_ddl("id BIGINT").unwrap()),
        );
        let empty = dir.path().join("zero.parquet");
        std::fs::write(&empty, b"").unwrap();
        let decoded = decode_file(&meta(&empty), &spec).unwrap();
        assert_eq!(decoded.num_rows, 0);
        assert!(decoded.batches.is_empty());

        let bad = dir.path().join("bad.parquet");
        std::fs::write(&bad, b"PAR1 this is not really parquet").unwrap();
        let err = decode_file(&meta(&bad), &spec).unwrap_err();
        assert!(matches!(err, FileReadError::Corrupt { .. }), "{err}");
    }
}

#[cfg(test)]
mod guard_tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};

    /// Issue #18, found by the `parquet` fuzz target: a footer whose embedded Arrow
    /// schema has a field of type NONE makes arrow-ipc panic (`unimplemented!`); the file
    /// fails alone with an error naming it instead of taking the batch down.
    #[test]
    fn a_parquet_file_the_reader_panics_on_fails_alone_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.parquet");
        std::fs::write(
            &path,
            include_bytes!("../../../../fuzz/corpus/parquet/crash-arrow-schema-type-none"),
        )
        .unwrap();
        let meta = super::super::FileMeta::from_path(&path).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        let spec = super::super::ReadSpec::new(crate::spec::FileFormat::Parquet, schema);
        let Err(err) = super::super::decode_file(&meta, &spec) else {
            panic!("a corrupt file is an error");
        };
        let err = err.to_string();
        assert!(err.contains("bad.parquet"), "{err}");
        assert!(err.contains("Type NONE not supported"), "{err}");
    }
}
