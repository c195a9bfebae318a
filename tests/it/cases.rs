//! The shared real-world cases (`tests/fixtures/cases/<case>/steps.md`, a copy of the
//! originals kept outside the repo), each driven through the real binary as its
//! steps.md says: land a step (write outside, rename in), trigger (an `available_now`
//! run; a schema-change stop, exit code 3, is followed by the restart it asks for),
//! restart, and the expected rows, schema and signals.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::support::*;

/// A one-flow pipeline named `t`: files in `landing` -> Delta `table`.
fn pipeline(dir: &Path, format: &str, source_extra: &str, flow_extra: &str) -> PathBuf {
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
"#
        ),
    )
}

/// Lands every file of `<case>/<step>` into `landing` (written outside, renamed in), in
/// name order, each with a later modification time.
fn land_step(dir: &Path, case: &str, step: &str) {
    let src = fixture(&format!("cases/{case}/{step}"));
    let mut names: Vec<_> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for path in names {
        std::thread::sleep(std::time::Duration::from_millis(15));
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        land(&dir.join("landing"), &name, &std::fs::read(&path).unwrap());
    }
}

fn run(p: &Path) -> Output {
    weir().args(["run", "--headless"]).arg(p).output().unwrap()
}

/// One trigger; a schema-change stop (exit 3) is restarted once, as the cases allow.
fn trigger(p: &Path) -> Output {
    let mut out = run(p);
    if out.status.code() == Some(3) {
        out = run(p);
    }
    assert!(
        out.status.success(),
        "weir run failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn fails(p: &Path) -> String {
    let out = run(p);
    assert!(
        !out.status.success(),
        "expected a failure: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `SELECT <cols> ... ORDER BY <order>` over the table as `a|b|c` lines (nulls `null`).
async fn rows(dir: &Path, cols: &[&str], order: &str) -> Vec<String> {
    table_lines(&dir.join("table"), cols, order, "|").await
}

/// `_rescued_data` in row order by `order`, parsed (None where null).
async fn rescued(dir: &Path, order: &str) -> Vec<Option<Value>> {
    rows(dir, &["_rescued_data"], order)
        .await
        .into_iter()
        .map(|s| (s != "null").then(|| serde_json::from_str(&s).unwrap()))
        .collect()
}

/// The table's columns and Arrow types (data files' schema, `_rescued_data` excluded).
async fn schema(dir: &Path) -> Vec<String> {
    let batches = delta_rows(&dir.join("table")).await;
    batches[0]
        .schema()
        .fields()
        .iter()
        .filter(|f| f.name() != "_rescued_data")
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect()
}

fn progress(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("_checkpoints/t/_weir/progress.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn sum_progress(dir: &Path, key: &str) -> u64 {
    progress(dir)
        .iter()
        .map(|p| p["weir"][key].as_u64().unwrap_or(0))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b01_a_fields_type_differs_between_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    land_step(dir, "B01", "step1");
    trigger(&p);
    assert_eq!(
        schema(dir).await,
        ["order_id:Int64", "user_id:Utf8", "qty:Int64"]
    );
    land_step(dir, "B01", "step2");
    trigger(&p);
    trigger(&p);
    assert_eq!(
        rows(dir, &["order_id", "user_id", "qty"], "order_id").await,
        [
            "1|null|1",
            "2|null|2",
            "3|u-17|null",
            "4|u-18|4",
            "5|19|null"
        ]
    );
    let r = rescued(dir, "order_id").await;
    assert_eq!(r[2].as_ref().unwrap()["qty"], "3");
    assert_eq!(r[4].as_ref().unwrap()["qty"], 5.5);
    assert!(r[3].is_none());

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "infer_column_types = false", "");
    land_step(dir, "B01", "step1");
    trigger(&p);
    land_step(dir, "B01", "step2");
    trigger(&p);
    assert_eq!(
        rows(dir, &["qty"], "order_id").await,
        ["1", "2", "3", "4", "5.5"]
    );
    assert!(rescued(dir, "order_id").await.iter().all(Option::is_none));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b02_keys_that_differ_only_by_case() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    for step in ["step1", "step2", "step3"] {
        land_step(dir, "B02", step);
        trigger(&p);
    }
    trigger(&p);
    assert_eq!(schema(dir).await, ["id:Int64", "Photo:Utf8"]);
    assert_eq!(
        rows(dir, &["id", "Photo"], "id").await,
        ["1|p1.png", "2|null", "3|p3.png"]
    );
    let r = rescued(dir, "id").await;
    assert_eq!(r[1].as_ref().unwrap()["photo"], "p2.png");
    assert_eq!(r[2].as_ref().unwrap()["photo"], "p3-thumb.png");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    land_step(dir, "B02", "variant_single_object");
    trigger(&p);
    assert_eq!(schema(dir).await, ["Code:Utf8", "Qty:Int64"]);
    assert_eq!(rows(dir, &["Code", "Qty"], "\"Code\"").await, ["K1|5"]);
    assert_eq!(
        rescued(dir, "\"Code\"").await[0].as_ref().unwrap()["qty"],
        7
    );
}

/// B03's Delta half (column mapping) is `edges_modes::b03_*`; here the inferred schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b03_literal_dotted_names_are_not_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(
        dir,
        r#"
[[flow]]
name = "t"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "json"
[flow.sink]
type = "delta"
path = "table"
column_mapping_mode = "name"
"#,
    );
    land_step(dir, "B03", "step1");
    trigger(&p);
    let out = weir()
        .args(["schema"])
        .arg(dir.join("_checkpoints/t"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "`geo.lat` STRING, geo STRUCT<lat: STRING>, `order id` BIGINT, `unit price(EUR)` DOUBLE, `k=v` STRING"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b04_nested_struct_null_then_object_then_new_field_then_wrong_type() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    land_step(dir, "B04", "step1");
    trigger(&p);
    assert_eq!(
        schema(dir).await,
        ["id:Int64", "meta:Struct(\"src\": Utf8)"]
    );
    land_step(dir, "B04", "step2");
    trigger(&p);
    land_step(dir, "B04", "step3");
    trigger(&p);
    trigger(&p);
    // Read through deltalake's provider: the older files lack `meta.ver`.
    let batches = delta_rows_logical(&dir.join("table")).await;
    let out = sql(
        &batches,
        "SELECT id, meta IS NULL AS no_meta, meta['src'] AS src, meta['ver'] AS ver FROM t ORDER BY id",
    )
    .await;
    assert_eq!(column_strings(&out, "id"), ["1", "2", "3", "4"]);
    assert_eq!(
        column_strings(&out, "no_meta"),
        ["true", "false", "false", "true"]
    );
    assert_eq!(column_strings(&out, "src"), ["null", "web", "app", "null"]);
    assert_eq!(column_strings(&out, "ver"), ["null", "null", "2", "null"]);
    let r = sql(&batches, "SELECT _rescued_data FROM t WHERE id = 4").await;
    let r: Value = serde_json::from_str(&column_strings(&r, "_rescued_data")[0]).unwrap();
    assert_eq!(r["meta"], "legacy-string");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b06_a_new_column_null_in_its_first_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    for step in ["step1", "step2", "step3"] {
        land_step(dir, "B06", step);
        trigger(&p);
    }
    assert_eq!(
        rows(dir, &["id", "amount", "coupon"], "id").await,
        ["1|10|null", "2|20|null", "3|30|SAVE5"]
    );
    assert!(
        schema(dir).await.contains(&"coupon:Utf8".to_string()),
        "{:?}",
        schema(dir).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b08_csv_header_drift() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "", "");
    for step in ["step1", "step2", "step3", "step4"] {
        land_step(dir, "B08", step);
        trigger(&p);
    }
    assert_eq!(
        rows(dir, &["id", "temp", "depth", "salinity"], "id").await,
        [
            "1|20.5|3|null",
            "2|21.0|4|null",
            "3|19.5|5|null",
            "4|18.0|6|35.1",
            "5|17.5|null|null"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b09_a_byte_order_mark() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "", "");
    land_step(dir, "B09", "step1");
    trigger(&p);
    land_step(dir, "B09", "step2");
    trigger(&p);
    assert_eq!(schema(dir).await, ["id:Int64", "name:Utf8"]);
    assert_eq!(
        rows(dir, &["id", "name"], "id").await,
        ["1|Ana", "2|Bo", "3|Cy"]
    );
    assert!(rescued(dir, "id").await.iter().all(Option::is_none));

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    land_step(dir, "B09", "variant_json");
    trigger(&p);
    assert_eq!(rows(dir, &["id", "name"], "id").await, ["4|Di", "5|Ed"]);
    assert_eq!(sum_progress(dir, "numRecordsCorrupt"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b10_quoted_newlines_doubled_quotes_crlf() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "", "");
    land_step(dir, "B10", "step1");
    trigger(&p);
    assert_eq!(
        rows(dir, &["id", "comment", "qty"], "id").await,
        [
            "1|first line\nsecond line|5",
            "2|she said \"hi\"|6",
            "3|plain|7",
            "4|a\r\nb|8",
            "5|x|9"
        ]
    );
    assert!(schema(dir).await.contains(&"qty:Int64".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b11_malformed_lines_in_ndjson_permissive_and_failfast() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    land_step(dir, "B11", "step1");
    trigger(&p);
    let all = rows(dir, &["sensor", "val"], "sensor NULLS LAST").await;
    assert_eq!(
        &all[..5],
        ["s1|2.0", "s2|2.5", "s3|NaN", "s4|3.0", "s5|3.5"]
    );
    assert_eq!(all.len(), 7);
    let corrupt: Vec<Value> = rescued(dir, "sensor NULLS LAST")
        .await
        .into_iter()
        .flatten()
        .collect();
    let lines: Vec<u64> = corrupt
        .iter()
        .map(|c| c["_line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [5, 7]);
    assert!(
        corrupt
            .iter()
            .all(|c| c["_file_path"].as_str().unwrap().ends_with("bad.json"))
    );
    assert_eq!(sum_progress(dir, "numRecordsCorrupt"), 2);

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "mode = \"failfast\"", "");
    land_step(dir, "B11", "step1");
    let err = fails(&p);
    assert!(err.contains("bad.json, line 5: malformed record"), "{err}");
    assert!(!dir.join("table/_delta_log").exists(), "nothing committed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b13_ragged_csv_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "", "");
    land_step(dir, "B13", "step1");
    trigger(&p);
    assert_eq!(
        rows(dir, &["a", "b", "c"], "a").await,
        ["1|2|3", "4|5|null", "6|7|8", "10|11|12"]
    );
    let r = rescued(dir, "a").await;
    assert_eq!(r[2].as_ref().unwrap()["_c3"], "9");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "mode = \"failfast\"", "");
    land_step(dir, "B13", "step1");
    let err = fails(&p);
    assert!(
        err.contains("ragged.csv, line 4: malformed record: the record has 4 fields, the header 3"),
        "{err}"
    );
    assert!(!dir.join("table/_delta_log").exists(), "nothing committed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b15_gzip_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "schema = \"id BIGINT\"", "");
    for step in ["step1", "step2", "step3", "step4"] {
        land_step(dir, "B15", step);
        trigger(&p);
    }
    trigger(&p);
    assert_eq!(rows(dir, &["id"], "id").await, ["1", "2", "3", "4", "5"]);
    assert_eq!(sum_progress(dir, "numFilesFailed"), 1);
    let errors: Vec<String> = progress(dir)
        .iter()
        .flat_map(|p| p["weir"]["errors"].as_array().cloned().unwrap_or_default())
        .map(|e| e.to_string())
        .collect();
    assert!(errors.iter().any(|e| e.contains("d.json.gz")), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b16_empty_blank_zero_byte_files_and_a_late_placeholder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "", "");
    land_step(dir, "B16", "step1");
    trigger(&p);
    assert_eq!(rows(dir, &["id", "name"], "id").await, ["1|x"]);
    land_step(dir, "B16", "step2");
    trigger(&p);
    // Overwritten in place (not atomic), with a later modification time.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(
        dir.join("landing/late.json"),
        std::fs::read(fixture("cases/B16/step3/late.json")).unwrap(),
    )
    .unwrap();
    trigger(&p);
    trigger(&p);
    assert_eq!(rows(dir, &["id", "name"], "id").await, ["1|x", "9|z"]);

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "", "");
    land_step(dir, "B16", "variant_csv");
    trigger(&p);
    let out = weir()
        .args(["schema"])
        .arg(dir.join("_checkpoints/t"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("id STRING, name STRING"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b17_same_name_overwritten() {
    for allow in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let p = pipeline(
            dir,
            "csv",
            if allow { "allow_overwrites = true" } else { "" },
            "",
        );
        land_step(dir, "B17", "step1");
        trigger(&p);
        std::thread::sleep(std::time::Duration::from_millis(20));
        land_step(dir, "B17", "step2");
        let out = trigger(&p);
        trigger(&p);
        let after = rows(dir, &["id", "val"], "id, val").await;
        if allow {
            assert_eq!(after, ["1|a", "1|a", "2|B", "2|b", "3|c"]);
        } else {
            assert_eq!(after, ["1|a", "2|b"]);
            // A warning, and the ledger's count (progress has it with the next batch).
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("file modified after ingestion"), "{err}");
            let inspect = weir()
                .arg("inspect")
                .arg(dir.join("_checkpoints/t"))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&inspect.stdout);
            assert!(text.contains("1 modified after ingestion"), "{text}");
        }
        // Touch (mtime only): the key is path + size + mtime.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let f = std::fs::File::options()
            .write(true)
            .open(dir.join("landing/daily.csv"))
            .unwrap();
        f.set_modified(std::time::SystemTime::now()).unwrap();
        trigger(&p);
        trigger(&p);
        let touched = rows(dir, &["id"], "id").await.len();
        assert_eq!(
            touched,
            if allow { 8 } else { 2 },
            "allow_overwrites = {allow}"
        );
    }
}

/// A windowed count with a 0 s watermark (B19) and a sum with 5 s (B20).
fn window_flow(dir: &Path, delay: &str, aggregate: &str, schema: &str, extra: &str) -> PathBuf {
    pipeline(
        dir,
        "json",
        &format!("schema = \"{schema}\""),
        &format!(
            "watermark = {{ column = \"ts\", delay = \"{delay}\" }}\n\
             group_by = [\"window(ts, '10 seconds')\"]\n\
             aggregates = [\"{aggregate}\"]\n{extra}"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b19_event_at_the_watermark_and_at_a_window_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = window_flow(
        dir,
        "0 seconds",
        "count(*) AS n",
        "k STRING, ts TIMESTAMP",
        "late_rows = { path = \"late\" }",
    );
    for step in ["step1", "step2", "step3"] {
        land_step(dir, "B19", step);
        trigger(&p);
    }
    assert_eq!(
        rows(dir, &["window_start", "n"], "window_start").await,
        ["2024-05-01T10:00:00Z|2", "2024-05-01T10:00:10Z|1"]
    );
    let late = delta_rows(&dir.join("late")).await;
    assert_eq!(num_rows(&late), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b20_idle_source_and_run_once_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = window_flow(
        dir,
        "5 seconds",
        "sum(v) AS total",
        "ts TIMESTAMP, v BIGINT",
        "",
    );
    land_step(dir, "B20", "step1");
    trigger(&p);
    assert_eq!(
        rows(dir, &["window_start", "total"], "window_start").await,
        ["2024-05-01T10:00:00Z|1"]
    );
    trigger(&p);
    assert_eq!(
        rows(dir, &["window_start"], "window_start").await,
        ["2024-05-01T10:00:00Z"]
    );
    land_step(dir, "B20", "step3");
    trigger(&p);
    assert_eq!(
        rows(dir, &["window_start", "total"], "window_start").await,
        ["2024-05-01T10:00:00Z|1", "2024-05-01T10:00:20Z|2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b22_drop_duplicates_across_a_kill_and_state_cleanup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "schema = \"eid STRING, ts TIMESTAMP\"",
        "watermark = { column = \"ts\", delay = \"1 minute\" }\ndrop_duplicates = [\"eid\", \"ts\"]",
    );
    land_step(dir, "B22", "step1");
    trigger(&p);
    // kill -9 between runs: the next run restores the state from the checkpoint.
    for step in ["step2", "step3"] {
        land_step(dir, "B22", step);
        trigger(&p);
    }
    assert_eq!(rows(dir, &["eid"], "eid").await, ["e1", "e2", "e3", "e4"]);
    let last = progress(dir).last().cloned().unwrap();
    assert_eq!(last["stateOperators"][0]["numRowsTotal"], 2, "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b24_crash_between_the_delta_commit_and_the_checkpoint_commit() {
    for failpoint in ["after_sink_commit:1", "after_offsets:1"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let p = pipeline(dir, "json", "max_files_per_trigger = 1", "");
        land_step(dir, "B24", "step1");
        trigger(&p);
        land_step(dir, "B24", "step2");
        let crashed = weir()
            .args(["run", "--headless"])
            .arg(&p)
            .env("WEIR_FAILPOINT", failpoint)
            .output()
            .unwrap();
        assert!(!crashed.status.success(), "{failpoint}");
        land_step(dir, "B24", "step3");
        trigger(&p);
        assert_eq!(
            rows(dir, &["id"], "id").await,
            ["1", "2", "3", "4", "5", "6"],
            "{failpoint}"
        );
        let versions = delta_version(&dir.join("table")).await.unwrap();
        assert_eq!(versions, 2, "{failpoint}: one Delta version per batch");
    }
}
