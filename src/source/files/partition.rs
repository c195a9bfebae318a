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
//! upwards, as long as they hold a `=` (Spark's `parsePartition`), in any order. A value
//! is URL-decoded (`%2F` is `/`, Spark's `unescapePathName`) and
//! `__HIVE_DEFAULT_PARTITION__` is null. A file whose path does not fit (a key missing,
//! an extra key, a file above the partition directories) gets null for the columns its
//! path lacks, its extra keys are ignored, and one warning names the keys and the file
//! (as Auto Loader reads it); only a key given twice fails the file.
//!
//! **Types.** Inferred from the sampled paths as Spark's `inferPartitionColumnValue`
//! does: INT, then BIGINT, then DECIMAL(p, 0) for a longer whole number, DOUBLE,
//! `yyyy-MM-dd` DATE, an ISO-8601 date and time TIMESTAMP, anything else STRING;
//! disagreeing values of a column merge as its `findWiderTypeForPartitionColumn`.
//! With `partition_column_type_inference = false` (or `infer_column_types = false`)
//! every partition column is a STRING. A value that does not fit its column's type
//! later is null in the column and kept in `_rescued_data` under the column's name.
//! A recorded schema is never re-inferred, so older checkpoints keep their BIGINT.
//!
//! **Data columns of the same name** (ignoring case) keep their place and take the
//! partition column's name and type (Spark's `mergeDataAndPartitionSchema`); the values
//! come from the path and the file's own are in `_rescued_data`.

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

/// A file's partition values as its path gives them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PathValues {
    /// In column order; `None` is null (the Hive null, or a key the path lacks).
    pub values: Vec<Option<String>>,
    /// Partition columns with no `key=value` directory in the path (null in every row).
    pub missing: Vec<String>,
    /// `key=value` directories whose key is not a partition column (ignored).
    pub extra: Vec<String>,
}

impl PathValues {
    /// The warning for a path that does not fit the layout, naming the keys; `None` when it fits.
    fn misfit(&self, layout: &Partitioning, path: &Path) -> Option<String> {
        if self.missing.is_empty() && self.extra.is_empty() {
            return None;
        }
        let keys = |keys: &[String]| {
            keys.iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut what = Vec::new();
        if !self.missing.is_empty() {
            what.push(format!(
                "has no directory for the partition key(s) {} (null in its rows)",
                keys(&self.missing)
            ));
        }
        if !self.extra.is_empty() {
            what.push(format!(
                "has the key(s) {}, not partition columns (ignored)",
                keys(&self.extra)
            ));
        }
        Some(format!(
            "source file {} does not fit the partition layout {}: it {}",
            path.display(),
            layout.expected(),
            what.join(" and ")
        ))
    }
}

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

    /// The values of the partition columns for a file, in column order (`None` = null),
    /// with the partition columns its path lacks and the keys it has beyond them; `Err`
    /// only when a key is there twice (which of the two values is meant is unknown).
    pub fn values(&self, path: &Path) -> Result<PathValues, String> {
        let pairs = Self::pairs(&self.root, path);
        let mut values = vec![None; self.columns.len()];
        let mut seen = vec![false; self.columns.len()];
        let mut extra = Vec::new();
        for (key, raw) in &pairs {
            let Some(i) = self.columns.iter().position(|c| c == key) else {
                extra.push(key.clone());
                continue;
            };
            if seen[i] {
                return Err(self.mismatch(&pairs, &format!("has the key `{key}` twice")));
            }
            seen[i] = true;
            values[i] = (raw != DEFAULT_PARTITION_NAME).then(|| unescape(raw));
        }
        let missing = self
            .columns
            .iter()
            .zip(&seen)
            .filter(|(_, s)| !**s)
            .map(|(c, _)| c.clone())
            .collect();
        Ok(PathValues {
            values,
            missing,
            extra,
        })
    }

    /// `date=<value>/region=<value>/<file> below <root>`.
    fn expected(&self) -> String {
        let expected: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("{c}=<value>"))
            .collect();
        format!(
            "{}/<file> below {}",
            expected.join("/"),
            self.root.display()
        )
    }

    fn mismatch(&self, pairs: &[(String, String)], what: &str) -> String {
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
            "does not fit the partition layout {}: it {what} (found {found}); move it into the layout, \
             or set partition_columns to the keys its directories have",
            self.expected()
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
/// `columns` when given, else the keys of the first file's path. A data field of the
/// same name (ignoring case) keeps its place and takes the partition column's name and
/// type; the other partition columns follow the data columns (Spark's
/// `PartitioningUtils.mergeDataAndPartitionSchema`).
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
        let Ok(path) = layout.values(file) else {
            continue;
        };
        for (ty, value) in types.iter_mut().zip(path.values) {
            if let Some(v) = value {
                *ty = ty.merge(if typed {
                    PartitionType::of(&v)
                } else {
                    PartitionType::Str
                });
            }
        }
    }
    let partition_fields: Vec<Field> = columns
        .iter()
        .zip(types)
        .map(|(name, ty)| Field::new(name, ty.into_arrow(), true))
        .collect();
    let overlapping = |name: &str| {
        partition_fields
            .iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    };
    let mut fields: Vec<Field> = Vec::with_capacity(data.fields().len() + columns.len());
    for f in data.fields() {
        let field = overlapping(f.name()).unwrap_or(f);
        // Two data fields that differ only in case and match one partition column: the
        // first takes its place, the other's values are rescued.
        if !fields.iter().any(|g| g.name() == field.name()) {
            fields.push(field.clone());
        }
    }
    for field in &partition_fields {
        if !fields.iter().any(|f| f.name() == field.name()) {
            fields.push(field.clone());
        }
    }
    mark(Schema::new(fields), &columns)
}

/// An inferred partition column type: Spark's `inferPartitionColumnValue` and, for
/// two values of one column, its `findWiderTypeForPartitionColumn`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PartitionType {
    Null,
    Int,
    Long,
    /// An integer beyond 64 bits: `DECIMAL(precision, 0)`.
    Decimal(u8),
    Double,
    Date,
    Timestamp,
    Str,
}

impl PartitionType {
    fn of(value: &str) -> Self {
        if value.parse::<i32>().is_ok() {
            PartitionType::Int
        } else if value.parse::<i64>().is_ok() {
            PartitionType::Long
        } else if let Some(precision) = whole_number_digits(value) {
            PartitionType::Decimal(precision)
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

    /// Spark's table: integers widen to BIGINT then DECIMAL, INT and DOUBLE give DOUBLE,
    /// but BIGINT or DECIMAL with DOUBLE give STRING (no precision is lost), DATE with
    /// TIMESTAMP gives TIMESTAMP, anything else STRING.
    fn merge(self, other: Self) -> Self {
        use PartitionType::*;
        let digits = |t: Self| match t {
            Int => Some(10),
            Long => Some(20),
            Decimal(p) => Some(p),
            _ => None,
        };
        match (self, other) {
            (Null, x) | (x, Null) => x,
            (a, b) if a == b => a,
            (Int, Long) | (Long, Int) => Long,
            (Int, Double) | (Double, Int) => Double,
            (Date, Timestamp) | (Timestamp, Date) => Timestamp,
            (a, b) => match (digits(a), digits(b)) {
                (Some(p), Some(q)) => Decimal(p.max(q).min(38)),
                _ => Str,
            },
        }
    }

    fn into_arrow(self) -> DataType {
        match self {
            PartitionType::Null | PartitionType::Str => DataType::Utf8,
            PartitionType::Int => DataType::Int32,
            PartitionType::Long => DataType::Int64,
            PartitionType::Decimal(precision) => DataType::Decimal128(precision, 0),
            PartitionType::Double => DataType::Float64,
            PartitionType::Date => DataType::Date32,
            PartitionType::Timestamp => timestamp_utc(),
        }
    }
}

/// The digits of a whole number that fits `DECIMAL(38, 0)` (Spark reads such a value
/// as a `BigDecimal` of scale 0); `None` for anything else.
fn whole_number_digits(value: &str) -> Option<u8> {
    let digits = value.strip_prefix(['-', '+']).unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = digits.trim_start_matches('0').len().max(1);
    u8::try_from(significant).ok().filter(|p| *p <= 38)
}

/// Decodes a file of a partitioned source: the data columns from the file, the
/// partition columns from its path.
pub(crate) fn decode(
    meta: &FileMeta,
    spec: &ReadSpec,
    partitions: &Partitioning,
) -> Result<DecodedFile, FileReadError> {
    let path = partitions
        .values(&meta.path)
        .map_err(|message| FileReadError::Layout {
            path: meta.path.clone(),
            message,
        })?;
    // Once per file: a file is decoded once per batch that takes it.
    if let Some(warning) = path.misfit(partitions, &meta.path) {
        tracing::warn!("{warning}");
    }
    let values = path.values;
    // A data field named like a partition column (ignoring case) is the partition column.
    let is_partition = |name: &str| {
        partitions
            .columns
            .iter()
            .any(|c| c.eq_ignore_ascii_case(name))
    };
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

    fn fits(values: Vec<Option<&str>>) -> Result<PathValues, String> {
        Ok(PathValues {
            values: values.into_iter().map(|v| v.map(String::from)).collect(),
            ..PathValues::default()
        })
    }

    #[test]
    fn values_from_the_path() {
        let p = layout(&["date", "region"]);
        assert_eq!(
            p.values(Path::new("/l/date=2024-06-03/region=west/f.json")),
            fits(vec![Some("2024-06-03"), Some("west")])
        );
        // Any order, URL-decoded, the Hive null, directories above the layout ignored.
        assert_eq!(
            p.values(Path::new(
                "/l/2024/region=north%20east/date=__HIVE_DEFAULT_PARTITION__/f.json"
            )),
            fits(vec![None, Some("north east")])
        );
        let e = p
            .values(Path::new("/l/date=1/date=2/region=3/f.json"))
            .unwrap_err();
        assert!(e.contains("has the key `date` twice"), "{e}");
        assert!(e.contains("date=<value>/region=<value>/<file>"), "{e}");
    }

    /// A path that does not fit gets nulls for the keys it lacks, ignores the keys it
    /// has beyond the layout, and the warning names the keys and the file.
    #[test]
    fn misfit_paths_get_nulls_and_a_warning() {
        let p = layout(&["date", "region"]);
        let path = Path::new("/l/date=2024-06-03/f.json");
        let values = p.values(path).unwrap();
        assert_eq!(values.values, [Some("2024-06-03".to_string()), None]);
        assert_eq!(values.missing, ["region"]);
        let warning = values.misfit(&p, path).unwrap();
        assert!(
            warning.contains("/l/date=2024-06-03/f.json")
                && warning.contains("partition key(s) `region` (null in its rows)"),
            "{warning}"
        );
        let stray = Path::new("/l/f.json");
        let values = p.values(stray).unwrap();
        assert_eq!(values.values, [None, None]);
        assert_eq!(values.missing, ["date", "region"]);
        let path = Path::new("/l/date=1/region=2/hour=3/f.json");
        let values = p.values(path).unwrap();
        assert_eq!(values.extra, ["hour"]);
        let warning = values.misfit(&p, path).unwrap();
        assert!(
            warning.contains("`hour`, not partition columns"),
            "{warning}"
        );
        let fitting = Path::new("/l/date=1/region=2/f.json");
        assert_eq!(p.values(fitting).unwrap().misfit(&p, fitting), None);
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
        // `Region` of the data keeps its place; the partition column's name and type win.
        let schema = infer(data.clone(), Path::new("/l"), &files, None, true);
        assert_eq!(
            crate::schema::to_ddl(&schema),
            "id BIGINT, region STRING, date DATE, n DOUBLE"
        );
        assert_eq!(marked_columns(&schema), ["region", "date", "n"]);
        let untyped = infer(data.clone(), Path::new("/l"), &files, None, false);
        assert_eq!(
            crate::schema::to_ddl(&untyped),
            "id BIGINT, region STRING, date STRING, n STRING"
        );
        let twice = Schema::new(vec![
            Field::new("REGION", DataType::Utf8, true),
            Field::new("id", DataType::Int64, true),
            Field::new("region", DataType::Utf8, true),
        ]);
        assert_eq!(
            crate::schema::to_ddl(&infer(twice, Path::new("/l"), &files, None, true)),
            "region STRING, id BIGINT, date DATE, n DOUBLE"
        );
        let none = infer(data.clone(), Path::new("/l"), &files, Some(&[]), true);
        assert_eq!(crate::schema::to_ddl(&none), "id BIGINT, Region STRING");
        assert!(marked_columns(&none).is_empty());
    }

    /// Spark's `inferPartitionColumnValue` and `findWiderTypeForPartitionColumn`.
    #[test]
    fn inferred_types_follow_spark() {
        let ddl = |values: &[&str]| {
            let files: Vec<PathBuf> = values
                .iter()
                .map(|v| PathBuf::from(format!("/l/k={v}/f.json")))
                .collect();
            crate::schema::to_ddl(&infer(Schema::empty(), Path::new("/l"), &files, None, true))
        };
        assert_eq!(ddl(&["1", "-2147483648", "+7"]), "k INT");
        assert_eq!(ddl(&["1", "2147483648"]), "k BIGINT");
        assert_eq!(ddl(&["1", "12345678901234567890123"]), "k DECIMAL(23,0)");
        assert_eq!(ddl(&["9223372036854775808", "1"]), "k DECIMAL(19,0)");
        assert_eq!(
            ddl(&["9223372036854775808", "2147483648"]),
            "k DECIMAL(20,0)"
        );
        assert_eq!(ddl(&["1", "2.5"]), "k DOUBLE");
        // No precision lost: BIGINT or DECIMAL with DOUBLE is a STRING.
        assert_eq!(ddl(&["2147483648", "2.5"]), "k STRING");
        assert_eq!(ddl(&["12345678901234567890123", "2.5"]), "k STRING");
        assert_eq!(ddl(&["1", "2024-06-03"]), "k STRING");
        assert_eq!(ddl(&["2024-06-03"]), "k DATE");
        assert_eq!(ddl(&["__HIVE_DEFAULT_PARTITION__"]), "k STRING");
    }

    /// A checkpoint whose recorded schema says BIGINT (inferred before INT was) keeps
    /// reading the column as BIGINT: the recorded schema wins over a new inference.
    #[test]
    fn a_recorded_bigint_partition_column_stays_bigint() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("landing");
        let dir = root.join("n=5");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.json");
        std::fs::write(&file, "{\"id\":1}\n").unwrap();
        let location = tmp.path().join("cp");
        let recorded = mark(
            crate::schema::parse_ddl("id BIGINT, n BIGINT").unwrap(),
            &["n".to_string()],
        );
        super::super::schema_store::record_version(&location, &recorded, "old", &[], &[]).unwrap();
        let resolved = super::super::schema_store::resolve_with(&location, None, &root, || {
            let data = crate::schema::parse_ddl("id BIGINT").unwrap();
            Ok(Some((
                infer(data, &root, std::slice::from_ref(&file), None, true),
                vec![],
            )))
        })
        .unwrap()
        .unwrap();
        assert_eq!(crate::schema::to_ddl(&resolved), "id BIGINT, n BIGINT");
        let mut spec = ReadSpec::new(crate::spec::FileFormat::Json, resolved.clone());
        spec.partitions = Partitioning::from_schema(&root, &resolved);
        let decoded =
            super::super::read::decode_file(&FileMeta::from_path(&file).unwrap(), &spec).unwrap();
        let n = decoded.batches[0].column_by_name("n").unwrap();
        assert_eq!(n.data_type(), &DataType::Int64);
        assert_eq!(n.as_primitive::<arrow::datatypes::Int64Type>().value(0), 5);
    }
}
