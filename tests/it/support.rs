//! Helpers shared by the integration tests: the real binary, a second reader of
//! Delta tables (the parquet files the Delta log lists, read with the parquet
//! crate), and DataFusion SQL over batches as the oracle.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;

/// The `weir` binary built for this test run.
pub fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env("WEIR_LOG", "warn");
    c.env_remove("WEIR_FAILPOINT");
    c
}

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Reads every active data file of a Delta table directly with the parquet crate.
pub async fn delta_rows(table: &Path) -> Vec<RecordBatch> {
    let url = url::Url::from_directory_path(std::path::absolute(table).unwrap()).unwrap();
    let t = deltalake::open_table(url).await.expect("open delta table");
    let uris: Vec<String> = t.get_file_uris().expect("file uris").collect();
    let mut out = Vec::new();
    for uri in uris {
        let path = match url::Url::parse(&uri) {
            Ok(u) => u.to_file_path().unwrap(),
            Err(_) => table.join(&uri),
        };
        let file = std::fs::File::open(&path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            out.push(b.unwrap());
        }
    }
    // Files written before a schema change lack the new columns: align every batch to the
    // widest column set (by name, missing columns null), as a Delta reader does.
    let mut fields: Vec<arrow::datatypes::FieldRef> = Vec::new();
    for b in &out {
        for f in b.schema().fields() {
            if !fields.iter().any(|x| x.name() == f.name()) {
                fields.push(f.clone());
            }
        }
    }
    let schema = Arc::new(arrow::datatypes::Schema::new(fields));
    out.iter()
        .map(|b| {
            let cols = schema
                .fields()
                .iter()
                .map(|f| match b.column_by_name(f.name()) {
                    Some(c) => c.clone(),
                    None => arrow::array::new_null_array(f.data_type(), b.num_rows()),
                })
                .collect();
            RecordBatch::try_new(schema.clone(), cols).unwrap()
        })
        .collect()
}

/// Reads a Delta table through deltalake's DataFusion provider, as a Delta reader
/// sees it: column-mapped names as their logical names, older files widened to the
/// table's schema (nested fields too).
pub async fn delta_rows_logical(table: &Path) -> Vec<RecordBatch> {
    let url = url::Url::from_directory_path(std::path::absolute(table).unwrap()).unwrap();
    let t = deltalake::open_table(url).await.expect("open delta table");
    let ctx = SessionContext::new();
    t.update_datafusion_session(&ctx.state()).unwrap();
    let provider = t.table_provider().await.unwrap();
    ctx.register_table("d", provider).unwrap();
    ctx.sql("SELECT * FROM d")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
}

/// The latest version of a Delta table, or None.
pub async fn delta_version(table: &Path) -> Option<i64> {
    let url = url::Url::from_directory_path(std::path::absolute(table).unwrap()).unwrap();
    deltalake::open_table(url)
        .await
        .ok()
        .and_then(|t| t.version())
        .map(|v| v as i64)
}

/// Runs SQL over batches registered as table `t`.
pub async fn sql(batches: &[RecordBatch], query: &str) -> Vec<RecordBatch> {
    let ctx = SessionContext::new();
    let schema = batches.first().expect("at least one batch").schema();
    let table = datafusion::datasource::MemTable::try_new(schema, vec![batches.to_vec()]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx.sql(query).await.unwrap().collect().await.unwrap()
}

/// The single i64 value of a one-row, one-column result.
pub fn scalar(batches: &[RecordBatch]) -> i64 {
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    let col = arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::Int64).unwrap();
    col.as_primitive::<Int64Type>().value(0)
}

pub fn num_rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// Column values as strings (nulls as "null"), in row order.
pub fn column_strings(batches: &[RecordBatch], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let col = b
            .column_by_name(name)
            .unwrap_or_else(|| panic!("no column {name}"));
        let s = arrow::compute::cast(col, &arrow::datatypes::DataType::Utf8).unwrap();
        let s = s.as_string::<i32>();
        for i in 0..s.len() {
            out.push(if s.is_null(i) {
                "null".to_string()
            } else {
                s.value(i).to_string()
            });
        }
    }
    out
}

/// Writes a pipeline file into `dir` and returns its path.
/// A one-flow pipeline: files in `landing` -> Delta `table`, `available_now`, with extra
/// lines for the source and the sink.
pub fn files_to_delta_pipeline(
    dir: &Path,
    format: &str,
    source_extra: &str,
    sink_extra: &str,
) -> PathBuf {
    files_to_delta_flow(dir, format, "", source_extra, sink_extra)
}

/// [`files_to_delta_pipeline`] with extra lines for the flow too (`select`, `where`...).
pub fn files_to_delta_flow(
    dir: &Path,
    format: &str,
    flow_extra: &str,
    source_extra: &str,
    sink_extra: &str,
) -> PathBuf {
    write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "t"
trigger = "available_now"
{flow_extra}
[flow.source]
type = "files"
path = "landing"
format = "{format}"
{source_extra}
[flow.sink]
type = "delta"
path = "table"
{sink_extra}
"#
        ),
    )
}

/// `SELECT <cols> FROM table ORDER BY <order>` as lines of values joined by `sep`
/// (nulls `null`); no lines when the table has no data files.
pub async fn table_lines(table: &Path, cols: &[&str], order: &str, sep: &str) -> Vec<String> {
    let batches = delta_rows(table).await;
    if batches.is_empty() {
        return Vec::new();
    }
    let list: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
    let out = sql(
        &batches,
        &format!("SELECT {} FROM t ORDER BY {order}", list.join(", ")),
    )
    .await;
    let columns: Vec<Vec<String>> = cols.iter().map(|c| column_strings(&out, c)).collect();
    (0..columns[0].len())
        .map(|i| {
            columns
                .iter()
                .map(|c| c[i].as_str())
                .collect::<Vec<_>>()
                .join(sep)
        })
        .collect()
}

pub fn write_pipeline(dir: &Path, toml: &str) -> PathBuf {
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

/// Writes a file elsewhere and renames it into `dir` (atomic arrival).
pub fn land(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    let staging = dir.parent().unwrap().join("_staging_test");
    std::fs::create_dir_all(&staging).unwrap();
    let tmp = staging.join(name);
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// The flights pipeline used by the tests: demo schema, memory or delta sink.
pub fn flights_pipeline(max_files: u32) -> String {
    bronze_flights_only().replace(
        "max_files_per_trigger = 100",
        &format!("max_files_per_trigger = {max_files}"),
    )
}

/// The header of the flights CSV, every column as text: oracles count and parse
/// values themselves instead of trusting a CSV reader's type inference.
pub fn raw_flights_schema() -> arrow::datatypes::Schema {
    let header = "year,month,day,dep_time,sched_dep_time,dep_delay,arr_time,sched_arr_time,arr_delay,carrier,flight,tailnum,origin,dest,air_time,distance,hour,minute,time_hour";
    arrow::datatypes::Schema::new(
        header
            .split(',')
            .map(|n| arrow::datatypes::Field::new(n, arrow::datatypes::DataType::Utf8, true))
            .collect::<Vec<_>>(),
    )
}

/// The demo pipeline's first flow (files -> bronze Delta) alone.
pub fn bronze_flights_only() -> String {
    let p = weir::demo::data::FLIGHTS_PIPELINE;
    let end = p
        .find("[[flow]]\nname = \"bronze_weather\"")
        .expect("the demo pipeline has a bronze_weather flow");
    p[..end].to_string()
}

/// The Python of the Spark + Delta venv (`scripts/spark-delta-setup.sh`, which has
/// `deltalake` and PySpark): `$WEIR_DELTA_VENV/bin/python`, by default
/// `~/.cache/weir-delta-venv/bin/python`. A second reader of Delta tables in tests that
/// run with `WEIR_SPARK_TESTS=1`.
pub fn delta_python() -> PathBuf {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_default());
    std::env::var("WEIR_DELTA_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home.join(".cache/weir-delta-venv"))
        .join("bin/python")
}
