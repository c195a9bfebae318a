//! Spark's semantics at the edges (issue #14), continued, through the real binary:
//! Spark's `mode` (permissive / failfast; no silent DROPMALFORMED), field names Delta
//! refuses without column mapping (shared case B03), and `prefers_decimal` inference
//! with a value too wide for its decimal (shared case B07). Inputs in
//! `tests/fixtures/edges/failfast/` and `tests/fixtures/cases/`.

use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatch;
use serde_json::Value;

use crate::support::*;

/// A one-flow pipeline: files in `landing` -> Delta `table`, `available_now`.
fn pipeline(dir: &Path, format: &str, source_extra: &str, sink_extra: &str) -> PathBuf {
    files_to_delta_pipeline(dir, format, source_extra, sink_extra)
}

fn run(p: &Path) -> std::process::Output {
    weir().args(["run", "--headless"]).arg(p).output().unwrap()
}

fn run_ok(p: &Path) {
    let out = run(p);
    assert!(
        out.status.success(),
        "weir run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_err(p: &Path) -> String {
    let out = run(p);
    assert!(
        !out.status.success(),
        "expected a failure: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn bytes(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap()
}

/// Lands `rel` under `name` in `landing` (written outside, then renamed in).
fn land_fixture(dir: &Path, rel: &str, name: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes(rel)).unwrap();
    std::fs::create_dir_all(dir.join("landing")).unwrap();
    std::fs::rename(&tmp, dir.join("landing").join(name)).unwrap();
}

/// `SELECT <cols> FROM t ORDER BY <order>` over the table, as comma-joined lines.
async fn lines(batches: &[RecordBatch], cols: &[&str], order: &str) -> Vec<String> {
    let list: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
    let out = sql(
        batches,
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
                .join(",")
        })
        .collect()
}

fn committed(dir: &Path, batch: u64) -> bool {
    dir.join(format!("_checkpoints/t/commits/{batch}")).exists()
}

fn health(dir: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(dir.join("_checkpoints/t/_weir/health.json")).unwrap(),
    )
    .unwrap()
}

/// `mode = "failfast"` (Spark's FAILFAST): the batch holding a malformed JSON line
/// fails before anything is written, naming the file, the line and what is wrong;
/// the checkpoint does not advance; the health is schema_mismatch with the error's
/// kind `malformed_record`; once the file is fixed the batch is re-run and every row
/// is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failfast_stops_the_batch_at_the_first_malformed_json_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "schema = \"id BIGINT, amount DOUBLE\"\nmode = \"failfast\"\nmax_files_per_trigger = 1",
        "",
    );
    land_fixture(dir, "edges/failfast/a.json", "a.json");
    std::thread::sleep(std::time::Duration::from_millis(20));
    land_fixture(dir, "edges/failfast/b.json", "b.json");
    let err = run_err(&p);
    assert!(err.contains("b.json, line 3: malformed record"), "{err}");
    assert!(err.contains("invalid JSON"), "{err}");
    assert!(
        err.contains("mode = \\\"failfast\\\"") || err.contains("failfast"),
        "{err}"
    );
    // Batch 0 (a.json) was committed; batch 1 (b.json) was not, and wrote nothing.
    assert!(committed(dir, 0));
    assert!(!committed(dir, 1), "the checkpoint did not advance");
    let table = dir.join("table");
    assert_eq!(
        lines(&delta_rows(&table).await, &["id"], "id").await,
        ["1", "2"]
    );
    let h = health(dir);
    let text = h.to_string();
    assert!(text.contains("schema_mismatch"), "{h}");
    assert!(text.contains("malformed_record"), "{h}");
    assert!(text.contains("b.json"), "{h}");

    // Fixed in place: the batch is re-run from its recorded files.
    std::fs::write(
        dir.join("landing/b.json"),
        bytes("edges/failfast/b_fixed.json"),
    )
    .unwrap();
    run_ok(&p);
    assert!(committed(dir, 1));
    assert_eq!(
        lines(&delta_rows(&table).await, &["id", "amount"], "id").await,
        ["1,1.5", "2,2.5", "3,3.5", "4,4.5", "5,5.5", "6,6.5"]
    );
}

/// Failfast also stops at a value that does not fit its column (CSV and JSON), which
/// permissive mode rescues; the message names the column, its type and the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failfast_stops_at_a_value_that_does_not_fit_its_column() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "csv",
        "schema = \"id BIGINT, amount DOUBLE\"\nmode = \"FAILFAST\"",
        "",
    );
    land_fixture(dir, "edges/failfast/bad.csv", "bad.csv");
    let err = run_err(&p);
    assert!(err.contains("bad.csv, line 3: malformed record"), "{err}");
    assert!(
        err.contains("\"oops\" does not fit column amount (DOUBLE)"),
        "{err}"
    );
    assert!(
        !dir.join("table/_delta_log").exists(),
        "nothing was written"
    );
    assert!(!committed(dir, 0));

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "schema = \"id BIGINT, amount DOUBLE\"\nmode = \"failfast\"",
        "",
    );
    land_fixture(dir, "edges/failfast/mismatch.json", "m.json");
    let err = run_err(&p);
    assert!(err.contains("m.json, line 2: malformed record"), "{err}");
    assert!(
        err.contains("\"two\" does not fit column id (BIGINT)"),
        "{err}"
    );

    // The same file in permissive mode (the default): the value is rescued, the row kept.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "schema = \"id BIGINT, amount DOUBLE\"", "");
    land_fixture(dir, "edges/failfast/mismatch.json", "m.json");
    run_ok(&p);
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(num_rows(&rows), 2);
    assert!(
        column_strings(&rows, "_rescued_data")
            .iter()
            .any(|r| r.contains("\"id\":\"two\""))
    );
}

/// `mode = "dropmalformed"` is refused when the pipeline is validated, saying why
/// (weir never drops records silently) and what to use instead.
#[test]
fn dropmalformed_is_refused_by_validate_with_the_alternatives() {
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), "json", "mode = \"DROPMALFORMED\"", "");
    let out = weir().arg("validate").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("never drops a record silently"), "{err}");
    assert!(err.contains("mode = \"permissive\""), "{err}");
    assert!(err.contains("mode = \"failfast\""), "{err}");
    // Parquet has no record-level mode; failfast with a quarantine would never use it.
    for (format, extra, says) in [
        ("parquet", "mode = \"failfast\"", "applies to CSV and JSON"),
        (
            "json",
            "mode = \"failfast\"\nbad_records_path = \"bad\"",
            "would never receive one",
        ),
    ] {
        let p = pipeline(tmp.path(), format, extra, "");
        let out = weir().arg("validate").arg(&p).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
}

/// `weir export pyspark` maps `mode` to Spark's `mode` option (OSS and Databricks).
#[test]
fn export_maps_mode_to_spark() {
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(
        tmp.path(),
        "json",
        "schema = \"id BIGINT\"\nschema_evolution = \"none\"\nmode = \"failfast\"",
        "",
    );
    for target in [&[][..], &["--target", "databricks"][..]] {
        let out = weir()
            .args(["export", "pyspark"])
            .arg(&p)
            .args(target)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains(".option(\"mode\", \"FAILFAST\")"),
            "{target:?}: {script}"
        );
        assert!(!script.contains("PERMISSIVE\")"), "{script}");
    }
}

/// B03: names with dots, spaces, parentheses and `=`. Without column mapping the batch
/// fails before any data file is committed, listing the names and both fixes; with
/// `column_mapping_mode = "name"` (Delta's `delta.columnMapping.mode`) the restart
/// writes the row exactly once and it reads back with identical names, the literal
/// `geo.lat` apart from the nested `geo.lat`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b03_names_delta_refuses_are_written_with_column_mapping() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    land_fixture(dir, "cases/B03/step1/names.json", "names.json");
    let p = pipeline(dir, "json", "", "");
    let err = run_err(&p);
    for name in ["`order id`", "`unit price(EUR)`", "`k=v`"] {
        assert!(err.contains(name), "{err}");
    }
    assert!(
        err.contains("column_mapping_mode = \\\"name\\\"") || err.contains("column_mapping_mode"),
        "{err}"
    );
    assert!(
        !dir.join("table/_delta_log").exists(),
        "no data file committed"
    );
    assert!(!committed(dir, 0), "checkpoint not advanced");

    let p = pipeline(dir, "json", "", "column_mapping_mode = \"name\"");
    run_ok(&p);
    assert!(committed(dir, 0));
    let rows = delta_rows_logical(&dir.join("table")).await;
    assert_eq!(num_rows(&rows), 1, "written exactly once");
    let schema = rows[0].schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    for name in ["geo.lat", "geo", "order id", "unit price(EUR)", "k=v"] {
        assert!(names.contains(&name), "{names:?}");
    }
    let out = sql(
        &rows,
        "SELECT \"geo.lat\" AS dotted, geo['lat'] AS nested, \"order id\" AS oid, \
         \"unit price(EUR)\" AS price, \"k=v\" AS kv FROM t",
    )
    .await;
    assert_eq!(column_strings(&out, "dotted"), ["dotted"]);
    assert_eq!(column_strings(&out, "nested"), ["nested"]);
    assert_eq!(column_strings(&out, "oid"), ["7"]);
    assert_eq!(column_strings(&out, "price"), ["1.5"]);
    assert_eq!(column_strings(&out, "kv"), ["eq"]);
    // A restart with nothing new writes nothing more.
    run_ok(&p);
    assert_eq!(num_rows(&delta_rows_logical(&dir.join("table")).await), 1);
}

/// Lands step `n` of case B07 and runs.
fn b07_step(dir: &Path, p: &Path, step: u32) {
    let name = format!("p{step}.json");
    land_fixture(dir, &format!("cases/B07/step{step}/{name}"), &name);
    run_ok(p);
}

fn table_schema(rows: &[RecordBatch]) -> Vec<(String, String)> {
    rows[0]
        .schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect()
}

/// B07: ints mixed with fractions infer DOUBLE by default; with `prefers_decimal`
/// (Spark's prefersDecimal) `DECIMAL(21,1)` as Spark does, `0.1` is exact, and a value
/// that needs 41 digits is null in the column with its literal text in `_rescued_data`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b07_prefers_decimal_infers_spark_decimals_and_rescues_overflow() {
    // Default: doubles, no rescue.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    b07_step(dir, &p, 1);
    b07_step(dir, &p, 2);
    let rows = delta_rows(&dir.join("table")).await;
    let types = table_schema(&rows);
    assert!(
        types.contains(&("price".into(), "Float64".into())),
        "{types:?}"
    );
    assert!(
        types.contains(&("rate".into(), "Float64".into())),
        "{types:?}"
    );
    let got = lines(&rows, &["sku", "price"], "sku").await;
    assert_eq!(got[..3], ["A,3.0", "B,3.1", "C,0.1"]);
    // ≈ 1.2345678901234568e39 (serde_json's default parser may be one ulp off).
    let d: f64 = got[3].strip_prefix("D,").unwrap().parse().unwrap();
    assert!((d / 1.2345678901234568e39 - 1.0).abs() < 1e-15, "{d}");
    assert!(
        column_strings(&rows, "_rescued_data")
            .iter()
            .all(|r| r == "null")
    );

    // prefers_decimal: decimal(21,1); the 41-digit value is null and rescued as its text.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "prefers_decimal = true", "");
    b07_step(dir, &p, 1);
    b07_step(dir, &p, 2);
    let rows = delta_rows(&dir.join("table")).await;
    let types = table_schema(&rows);
    assert!(
        types.contains(&("price".into(), "Decimal128(21, 1)".into())),
        "{types:?}"
    );
    assert!(
        types.contains(&("rate".into(), "Decimal128(21, 1)".into())),
        "{types:?}"
    );
    assert_eq!(
        lines(&rows, &["sku", "price", "rate"], "sku").await,
        ["A,3.0,1.1", "B,3.1,1.0", "C,0.1,2.0", "D,null,1.0"]
    );
    let rescued = sql(&rows, "SELECT _rescued_data FROM t WHERE sku = 'D'").await;
    let text = column_strings(&rescued, "_rescued_data");
    let value: Value = serde_json::from_str(&text[0]).unwrap();
    assert_eq!(
        value["price"], "1234567890123456789012345678901234567890.5",
        "{value}"
    );
    assert!(value["_file_path"].as_str().unwrap().ends_with("p2.json"));
    let others = sql(&rows, "SELECT _rescued_data FROM t WHERE sku <> 'D'").await;
    assert!(
        column_strings(&others, "_rescued_data")
            .iter()
            .all(|r| r == "null")
    );
}

/// With a known schema, `weir validate` refuses names Delta cannot store without
/// column mapping (before any run), naming them and the fix; with
/// `column_mapping_mode = "name"` the same pipeline is valid.
#[test]
fn validate_refuses_names_delta_needs_column_mapping_for() {
    let tmp = tempfile::tempdir().unwrap();
    let source =
        "schema = \"`order id` BIGINT, `unit price(EUR)` DOUBLE, `k=v` STRING, `geo.lat` STRING\"";
    let p = pipeline(tmp.path(), "json", source, "");
    let out = weir().arg("validate").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for name in [
        "`order id`",
        "`unit price(EUR)`",
        "`k=v`",
        "column_mapping_mode",
    ] {
        assert!(err.contains(name), "{err}");
    }
    assert!(!err.contains("`geo.lat`"), "a dot is allowed: {err}");
    let p = pipeline(tmp.path(), "json", source, "column_mapping_mode = \"name\"");
    let out = weir().arg("validate").arg(&p).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
