//! `weir demo --live`: the flights replayed as a stream, run headless to the end at
//! high speed; the tables equal a DataFusion batch computation over the same input.

use std::path::Path;
use std::sync::Arc;

use datafusion::prelude::{CsvReadOptions, SessionContext};

use crate::support::*;

/// Flights per origin and carrier, their distance and distinct flights: over `t`, filtered.
fn by_origin(filter: &str) -> String {
    format!(
        "SELECT origin, carrier, count(*) AS n, sum(CAST(distance AS DOUBLE)) AS d, \
         count(DISTINCT CAST(flight AS VARCHAR)) AS f FROM t {filter} \
         GROUP BY origin, carrier ORDER BY origin, carrier"
    )
}

async fn batch_over_input(landing: &Path) -> Vec<String> {
    let ctx = SessionContext::new();
    let schema = Arc::new(raw_flights_schema());
    let mut files = Vec::new();
    csv_files(landing, &mut files);
    assert!(!files.is_empty());
    let options = CsvReadOptions::new()
        .has_header(true)
        .schema(&schema)
        .file_extension(".csv");
    let df = ctx.read_csv(files, options).await.unwrap();
    ctx.register_table("t", df.into_view()).unwrap();
    let out = ctx
        .sql(&by_origin(""))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    lines(&out)
}

fn csv_files(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "faults") {
                continue; // injected files: counted apart
            }
            csv_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "csv") {
            out.push(p.display().to_string());
        }
    }
}

fn lines(batches: &[arrow::record_batch::RecordBatch]) -> Vec<String> {
    arrow::util::pretty::pretty_format_batches(batches)
        .unwrap()
        .to_string()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_replay_drains_and_equals_the_batch_computation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = weir()
        .args([
            "demo",
            "--headless",
            "--until-drained",
            "--days",
            "3",
            "--speed",
            "max",
        ])
        .args([
            "--inject",
            "late-and-future@0",
            "--inject",
            "schema-drift@0",
        ])
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("fault injected: late-and-future"),
        "{stderr}"
    );
    assert!(stderr.contains("fault injected: schema-drift"), "{stderr}");
    let expected =
        weir::demo::data::land_flights(&tmp.path().join("x"), &tmp.path().join("y"), Some(3))
            .unwrap()
            .rows_total;
    // Every replayed flight and the 4 injected rows, exactly once.
    let table = delta_rows(&dir.join("lake/bronze/flights")).await;
    assert_eq!(num_rows(&table) as u64, expected + 4);
    // The replayed files (hourly, by arrival) hold the same flights as the daily split.
    let daily = batch_over_input(&tmp.path().join("x")).await;
    let replayed = batch_over_input(&dir.join("landing/flights")).await;
    assert!(daily.len() > 10, "{daily:?}");
    assert_eq!(replayed, daily);
    // The table without the injected rows (rescued values, event times outside 2013)
    // equals the batch computation over the replayed input.
    let in_table = lines(
        &sql(
            &table,
            &by_origin(
                "WHERE _rescued_data IS NULL AND time_hour >= TIMESTAMP '2013-01-01T00:00:00Z' \
                 AND time_hour < TIMESTAMP '2014-01-01T00:00:00Z'",
            ),
        )
        .await,
    );
    assert_eq!(in_table, replayed);
    // Gold equals the hourly GROUP BY over silver, without the rows gold reported late
    // (its late_rows table), for the windows its final watermark closed.
    let silver = delta_rows(&dir.join("lake/silver/flights")).await;
    let gold = delta_rows(&dir.join("lake/gold/departures_hourly")).await;
    let late_dir = dir.join("lake/late/departures_hourly");
    let late = if late_dir.join("_delta_log").is_dir() {
        delta_rows(&late_dir).await
    } else {
        Vec::new()
    };
    let watermark =
        weir::checkpoint::Checkpoint::at(dir.join("_checkpoints/gold_departures_hourly"))
            .latest_commit()
            .unwrap()
            .map(|(_, c)| c.next_batch_watermark_ms)
            .unwrap();
    let ctx = datafusion::prelude::SessionContext::new();
    let reg = |name: &str, batches: Vec<arrow::record_batch::RecordBatch>| {
        let schema = batches[0].schema();
        let t = datafusion::datasource::MemTable::try_new(schema, vec![batches]).unwrap();
        ctx.register_table(name, std::sync::Arc::new(t)).unwrap();
    };
    reg("silver", silver);
    reg("gold", gold);
    let late_filter = if late.is_empty() {
        String::new()
    } else {
        reg("late", late);
        "WHERE NOT EXISTS (SELECT 1 FROM late l WHERE l.carrier = s.carrier AND l.flight = s.flight \
         AND l.origin = s.origin AND l.time_hour = s.time_hour)"
            .to_string()
    };
    let q = |sql: String| {
        let ctx = ctx.clone();
        async move {
            let b = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
            lines(&b)
        }
    };
    let expected_gold = q(format!(
        "SELECT origin, CAST(w AS VARCHAR) AS ws, count(*) AS n FROM \
         (SELECT origin, date_bin(INTERVAL '1 hour', time_hour) AS w FROM silver s {late_filter}) \
         GROUP BY origin, w HAVING w + INTERVAL '1 hour' <= to_timestamp_millis({watermark}) \
         ORDER BY 1, 2"
    ))
    .await;
    let got_gold = q(
        "SELECT origin, CAST(window_start AS VARCHAR) AS ws, departures AS n FROM gold ORDER BY 1, 2".to_string(),
    )
    .await;
    assert!(!expected_gold.is_empty());
    assert_eq!(
        got_gold, expected_gold,
        "gold = GROUP BY over silver minus its late rows"
    );
    // Progress records on stdout, one per batch.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: u64 = stdout
        .lines()
        .filter(|l| l.contains("\"name\":\"bronze_flights\""))
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["numInputRows"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(rows, expected + 4);
}

/// The crash fault headless: the demo process is killed with SIGKILL mid-stream and
/// restarted; the table still holds every flight exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_stream_is_followed_by_a_restart_and_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = weir()
        .args([
            "demo",
            "--headless",
            "--until-drained",
            "--days",
            "2",
            "--speed",
            "60000",
        ])
        .args(["--inject", "crash@1"])
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let expected =
        weir::demo::data::land_flights(&tmp.path().join("x"), &tmp.path().join("y"), Some(2))
            .unwrap()
            .rows_total;
    let table = delta_rows(&dir.join("lake/bronze/flights")).await;
    assert_eq!(num_rows(&table) as u64, expected);
    let distinct = sql(
        &table,
        "SELECT count(*) FROM (SELECT DISTINCT year, month, day, flight, carrier, sched_dep_time FROM t)",
    )
    .await;
    assert_eq!(scalar(&distinct) as u64, expected, "no duplicate");
    // The silver hop (streamed from the bronze table, deduplicated with a 1-day watermark
    // that no replayed delay exceeds) equals the batch computation over bronze.
    let silver = delta_rows(&dir.join("lake/silver/flights")).await;
    let batch = sql(
        &table,
        "SELECT count(*) FROM (SELECT DISTINCT carrier, flight, origin, time_hour FROM t \
         WHERE dep_time IS NOT NULL)",
    )
    .await;
    assert_eq!(num_rows(&silver) as i64, scalar(&batch), "silver");
    // Either the crash came mid-stream and was announced, or the demo had ended first.
    assert!(
        stderr.contains("fault injected: crash") || stderr.contains("ended before the crash"),
        "{stderr}"
    );
}
