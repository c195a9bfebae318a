//! Partition columns from Hive-style directory names (`date=2024-06-03/region=west/f.json`),
//! as Spark's partition discovery and Auto Loader's `cloudFiles.partitionColumns` read them.
//!
//! **Which columns.** `partition_columns = ["date", "region"]` names them; without
//! the key they are discovered when the schema is inferred, from the oldest sampled
//! file's path; `partition_columns = []` turns them off. They are recorded with the
//! schema (`partitionColumns` in `_schemas/<version>`), so a restart never re-discovers.
//! With a given `schema`, only `partition_columns` declares them (their type is the
//! schema's, or STRING when the schema does not name them).
//!
//! **A file's values.** The `key=value` directories are read from the file's directory
//! upwards, as long as they hold a `=` (Spark's `parsePartition`); their keys must be
//! exactly the partition columns (in any order). A value is URL-decoded (`%2F` is `/`,
//! Spark's `unescapePathName`) and `__HIVE_DEFAULT_PARTITION__` is null. A file whose
//! path does not fit (a key missing, an extra key, a file above the partition
//! directories) is failed as a whole with an error naming its path and the expected
//! layout, counted in `numFilesFailed`; the other files go on.
//!
//! **Types.** Inferred from the sampled paths (Spark's
//! `partitionColumnTypeInference`): an integer is BIGINT, another number DOUBLE,
//! `yyyy-MM-dd` DATE, an ISO-8601 date and time TIMESTAMP, anything else STRING (a
//! column whose sampled values disagree is STRING). With
//! `partition_column_type_inference = false` (or `infer_column_types = false`)
//! every partition column is a STRING. A value that does not fit its column's type
//! later is null in the column and kept in `_rescued_data` under the column's name.
//!
//! **Data columns of the same name.** The path wins (as in Spark): a field of the
//! same name inside the file is not a column of its own; its values are in
//! `_rescued_data`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, new_null_array};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde_json::{Map, Value};

use super::read::{DecodedFile, FileMeta, FileReadError, ReadSpec, decode_data, output_schema};
use crate::schema::ddl::timestamp_utc;

/// Spark's and Hive's name for a null partition value.
pub const DEFAULT_PARTITION_NAME: &str = "__HIVE_DEFAULT_PARTITION__";

/// Field metadata key marking a schema column as a partition column.
pub const PARTITION_METADATA_KEY: &str = "weir.partition";

/// The partition layout of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitioning {
    /// The source directory paths are relative to.
    pub root: PathBuf,
    /// The partition columns' names, in schema order.
    pub columns: Vec<String>,
}

impl Partitioning {
    /// The `key=value` pairs of a file's path (raw values, in path order).
    pub fn pairs(root: &Path, path: &Path) -> Vec<(String, String)> {
        let relative = path.strip_prefix(root).unwrap_or(path);
        let dirs: Vec<String> = relative
            .parent()
            .map(|p| {
                p.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let mut pairs = Vec::new();
        for dir in dirs.iter().rev() {
            match dir.split_once('=') {
                Some((k, v)) if !k.is_empty() => pairs.push((unescape(k), v.to_string())),
                _ => break,
            }
        }
        pairs.reverse();
        pairs
    }

    /// The values of the partition columns for a file, in column order (`None` = null);
    /// `Err` says how the path does not fit.
    pub fn values(&self, path: &Path) -> Result<Vec<Option<String>>, String> {
        let pairs = Self::pairs(&self.root, path);
        let mut values = vec![None; self.columns.len()];
        let mut seen = vec![false; self.columns.len()];
        for (key, raw) in &pairs {
            let Some(i) = self.columns.iter().position(|c| c == key) else {
                return Err(self.mismatch(
                    &pairs,
                    &format!("has the key `{key}`, which is not a partition column"),
                ));
            };
            if seen[i] {
                return Err(self.mismatch(&pairs, &format!("has the key `{key}` twice")));
            }
            seen[i] = true;
            values[i] = (raw != DEFAULT_PARTITION_NAME).then(|| unescape(raw));
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(self.mismatch(
                &pairs,
                &format!("has no `{}=...` directory", self.columns[i]),
            ));
        }
        Ok(values)
    }

    fn mismatch(&self, pairs: &[(String, String)], what: &str) -> String {
        let expected: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("{c}=<value>"))
            .collect();
        let found = if pairs.is_empty() {
            "no key=value directory".to_string()
        } else {
            pairs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        format!(
            "does not fit the partition layout {}/<file> below {}: it {what} (found {found}); move it into the layout, \
             or set partition_columns to the keys its directories have",
            expected.join("/"),
            self.root.display()
        )
    }

    /// The partition columns marked in a schema's field metadata.
    pub fn from_schema(root: &Path, schema: &Schema) -> Option<Arc<Partitioning>> {
        let columns: Vec<String> = schema
            .fields()
            .iter()
            .filter(|f| f.metadata().contains_key(PARTITION_METADATA_KEY))
            .map(|f| f.name().clone())
            .collect();
        (!columns.is_empty()).then(|| {
            Arc::new(Partitioning {
                root: root.to_path_buf(),
                columns,
            })
        })
    }
}

/// Marks `columns` as partition columns in the schema's field metadata (appending,
/// as STRING, the ones it lacks).
pub fn mark(schema: Schema, columns: &[String]) -> Schema {
    if columns.is_empty() {
        return schema;
    }
    let mut fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut metadata = f.metadata().clone();
            metadata.remove(PARTITION_METADATA_KEY);
            f.as_ref().clone().with_metadata(metadata)
        })
        .collect();
    for column in columns {
        let marked = |f: Field| {
            let mut metadata = f.metadata().clone();
            metadata.insert(PARTITION_METADATA_KEY.into(), "true".into());
            f.with_metadata(metadata)
        };
        match fields.iter().position(|f| f.name() == column) {
            Some(i) => fields[i] = marked(fields[i].clone()),
            None => fields.push(marked(Field::new(column, DataType::Utf8, true))),
        }
    }
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// The partition column names marked in a schema.
pub fn marked_columns(schema: &Schema) -> Vec<String> {
    schema
        .fields()
        .iter()
        .filter(|f| f.metadata().contains_key(PARTITION_METADATA_KEY))
        .map(|f| f.name().clone())
        .collect()
}

/// Spark's `unescapePathName`: `%XX` hex escapes decoded, anything else kept.
pub fn unescape(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .unwrap_or_else(|_| s.to_string())
}

/// The partition columns and their types from the paths of the sampled files:
/// `columns` when given, else the keys of the first file's path. Data fields of the
/// same name are replaced; the partition columns follow the data columns.
pub fn infer(
    data: Schema,
    root: &Path,
    files: &[PathBuf],
    columns: Option<&[String]>,
    typed: bool,
) -> Schema {
    let columns: Vec<String> = match columns {
        Some(c) => c.to_vec(),
        None => files
            .first()
            .map(|f| {
                Partitioning::pairs(root, f)
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect()
            })
            .unwrap_or_default(),
    };
    if columns.is_empty() {
        return data;
    }
    let layout = Partitioning {
        root: root.to_path_buf(),
        columns: columns.clone(),
    };
    let mut types: Vec<PartitionType> = vec![PartitionType::Null; columns.len()];
    for file in files {
        let Ok(values) = layout.values(file) else {
            continue;
        };
        for (ty, value) in types.iter_mut().zip(values) {
            if let Some(v) = value {
                *ty = ty.merge(if typed {
                    PartitionType::of(&v)
                } else {
                    PartitionType::Str
                });
            }
        }
    }
    let folded: Vec<String> = columns.iter().map(|c| c.to_lowercase()).collect();
    let mut fields: Vec<Field> = data
        .fields()
        .iter()
        .filter(|f| !folded.contains(&f.name().to_lowercase()))
        .map(|f| f.as_ref().clone())
        .collect();
    for (name, ty) in columns.iter().zip(types) {
        fields.push(Field::new(name, ty.into_arrow(), true));
    }
    mark(Schema::new(fields), &columns)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum PartitionType {
    Null,
    Long,
    Double,
    Date,
    Timestamp,
    Str,
}

impl PartitionType {
    fn of(value: &str) -> Self {
        use arrow::compute::kernels::cast_utils::Parser;
        if arrow::datatypes::Int64Type::parse(value).is_some() {
            PartitionType::Long
        } else if value.parse::<f64>().is_ok_and(f64::is_finite) {
            PartitionType::Double
        } else if chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d").is_ok() && value.len() == 10
        {
            PartitionType::Date
        } else if crate::schema::infer::looks_like_timestamp(value) {
            PartitionType::Timestamp
        } else {
            PartitionType::Str
        }
    }

    fn merge(self, other: Self) -> Self {
        use PartitionType::*;
        match (self, other) {
            (Null, x) | (x, Null) => x,
            (a, b) if a == b => a,
            (Long, Double) | (Double, Long) => Double,
            _ => Str,
        }
    }

    fn into_arrow(self) -> DataType {
        match self {
            PartitionType::Null | PartitionType::Str => DataType::Utf8,
            PartitionType::Long => DataType::Int64,
            PartitionType::Double => DataType::Float64,
            PartitionType::Date => DataType::Date32,
            PartitionType::Timestamp => timestamp_utc(),
        }
    }
}

/// Decodes a file of a partitioned source: the data columns from the file, the
/// partition columns from its path.
pub(crate) fn decode(
    meta: &FileMeta,
    spec: &ReadSpec,
    partitions: &Partitioning,
) -> Result<DecodedFile, FileReadError> {
    let values = partitions
        .values(&meta.path)
        .map_err(|message| FileReadError::Layout {
            path: meta.path.clone(),
            message,
        })?;
    let is_partition = |name: &str| partitions.columns.iter().any(|c| c == name);
    let data_schema: SchemaRef = Arc::new(Schema::new(
        spec.schema
            .fields()
            .iter()
            .filter(|f| !is_partition(f.name()))
            .cloned()
            .collect::<Vec<_>>(),
    ));
    let data_spec = ReadSpec {
        schema: data_schema,
        partitions: None,
        ..spec.clone()
    };
    let mut decoded = decode_data(meta, &data_spec)?;
    // A file field named like a partition column is not a new column: the path wins.
    decoded
        .new_fields
        .retain(|f| !f.path.first().is_some_and(|n| is_partition(n)));
    let output = output_schema(spec);
    let file_path = meta.path.to_string_lossy().into_owned();
    let mut batches = Vec::with_capacity(decoded.batches.len());
    for batch in std::mem::take(&mut decoded.batches) {
        let rows = batch.num_rows();
        let mut misfits: Vec<(String, String)> = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(output.fields().len());
        for field in output.fields() {
            if let Some(i) = partitions.columns.iter().position(|c| c == field.name()) {
                let (column, misfit) = partition_column(values[i].as_deref(), field, rows)
                    .map_err(|e| FileReadError::internal(&meta.path, e))?;
                if let Some(text) = misfit {
                    misfits.push((field.name().clone(), text));
                }
                columns.push(column);
            } else {
                let column = batch.column_by_name(field.name()).cloned().ok_or_else(|| {
                    FileReadError::internal(&meta.path, format!("no column {}", field.name()))
                })?;
                columns.push(column);
            }
        }
        if !misfits.is_empty() && rows > 0 {
            decoded.num_rows_rescued += rescue_misfits(&mut columns, &output, &misfits, &file_path);
        }
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
        batches.push(
            RecordBatch::try_new_with_options(output.clone(), columns, &options)
                .map_err(|e| FileReadError::internal(&meta.path, e))?,
        );
    }
    decoded.batches = batches;
    Ok(decoded)
}

/// A constant column of a partition value; the text when it does not fit the type.
fn partition_column(
    value: Option<&str>,
    field: &Field,
    rows: usize,
) -> Result<(ArrayRef, Option<String>), arrow::error::ArrowError> {
    let Some(text) = value else {
        return Ok((new_null_array(field.data_type(), rows), None));
    };
    let strings: ArrayRef = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
        text, rows,
    )));
    if field.data_type() == &DataType::Utf8 {
        return Ok((strings, None));
    }
    let cast = cast_with_options(
        &strings,
        field.data_type(),
        &CastOptions {
            safe: true,
            ..CastOptions::default()
        },
    )?;
    let misfit = (cast.null_count() > 0).then(|| text.to_string());
    Ok((cast, misfit))
}

/// Adds partition values that did not fit their type to every row's `_rescued_data`;
/// returns the rows that had nothing rescued before.
fn rescue_misfits(
    columns: &mut [ArrayRef],
    schema: &Schema,
    misfits: &[(String, String)],
    file_path: &str,
) -> usize {
    let Ok(index) = schema.index_of(crate::schema::RESCUED_DATA_COLUMN) else {
        return 0;
    };
    let current = columns[index].as_string::<i32>().clone();
    let mut newly = 0;
    let values: Vec<String> = (0..current.len())
        .map(|row| {
            let mut object: Map<String, Value> = if current.is_valid(row) {
                serde_json::from_str(current.value(row)).unwrap_or_default()
            } else {
                newly += 1;
                Map::new()
            };
            let path = object.remove("_file_path");
            for (k, v) in misfits {
                object.insert(k.clone(), Value::String(v.clone()));
            }
            object.insert(
                "_file_path".into(),
                path.unwrap_or_else(|| Value::String(file_path.into())),
            );
            Value::Object(object).to_string()
        })
        .collect();
    columns[index] = Arc::new(StringArray::from(values));
    newly
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(columns: &[&str]) -> Partitioning {
        Partitioning {
            root: PathBuf::from("/l"),
            columns: columns.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn values_from_the_path() {
        let p = layout(&["date", "region"]);
        assert_eq!(
            p.values(Path::new("/l/date=2024-06-03/region=west/f.json")),
            Ok(vec![Some("2024-06-03".into()), Some("west".into())])
        );
        // Any order, URL-decoded, the Hive null, directories above the layout ignored.
        assert_eq!(
            p.values(Path::new(
                "/l/2024/region=north%20east/date=__HIVE_DEFAULT_PARTITION__/f.json"
            )),
            Ok(vec![None, Some("north east".into())])
        );
        let e = p
            .values(Path::new("/l/date=2024-06-03/f.json"))
            .unwrap_err();
        assert!(e.contains("no `region=...` directory"), "{e}");
        assert!(e.contains("date=<value>/region=<value>/<file>"), "{e}");
        let e = p.values(Path::new("/l/f.json")).unwrap_err();
        assert!(e.contains("found no key=value directory"), "{e}");
        let e = p
            .values(Path::new("/l/date=1/region=2/hour=3/f.json"))
            .unwrap_err();
        assert!(e.contains("`hour`"), "{e}");
    }

    #[test]
    fn inference_types_and_marks() {
        let files = vec![
            PathBuf::from("/l/date=2024-06-03/region=west/n=1/f.json"),
            PathBuf::from("/l/date=2024-06-04/region=east/n=2.5/g.json"),
            PathBuf::from("/l/date=__HIVE_DEFAULT_PARTITION__/region=7/n=3/h.json"),
        ];
        let data = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("Region", DataType::Utf8, true),
        ]);
        let schema = infer(data.clone(), Path::new("/l"), &files, None, true);
        assert_eq!(
            crate::schema::to_ddl(&schema),
            "id BIGINT, date DATE, region STRING, n DOUBLE"
        );
        assert_eq!(marked_columns(&schema), ["date", "region", "n"]);
        let untyped = infer(data.clone(), Path::new("/l"), &files, None, false);
        assert_eq!(
            crate::schema::to_ddl(&untyped),
            "id BIGINT, date STRING, region STRING, n STRING"
        );
        let none = infer(data.clone(), Path::new("/l"), &files, Some(&[]), true);
        assert_eq!(crate::schema::to_ddl(&none), "id BIGINT, Region STRING");
        assert!(marked_columns(&none).is_empty());
    }
}
