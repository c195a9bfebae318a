//! Event time and state through the whole engine: watermark kept in the
//! checkpoint across `available_now` runs, no-data batches, deduplication
//! across restarts, and a windowed aggregation over the real flights that must
//! equal DataFusion's batch GROUP BY over the on-time rows.

use std::path::Path;

use weir::checkpoint::progress::read_progress;
use weir::engine::{RunOptions, run_flow};

use crate::support::*;

fn flow(dir: &Path, body: &str) -> weir::spec::FlowSpec {
    let p = write_pipeline(dir, body);
    weir::pipeline::load(&p).unwrap().flows.remove(0)
}

fn copy_case(case: &str, step: &str, landing: &Path) {
    let src = fixture(&format!("cases/{case}/{step}"));
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        land(
            landing,
            &e.file_name().to_string_lossy(),
            &std::fs::read(e.path()).unwrap(),
        );
    }
}

async fn table_rows(path: &Path, order: &str) -> Vec<String> {
    let rows = delta_rows(path).await;
    if rows.is_empty() {
        return Vec::new();
    }
    let out = sql(&rows, &format!("SELECT * FROM t ORDER BY {order}")).await;
    let mut lines = Vec::new();
    for b in &out {
        let cols: Vec<Vec<String>> = (0..b.num_columns())
            .map(|i| column_strings(std::slice::from_ref(b), b.schema().field(i).name()))
            .collect();
        for r in 0..b.num_rows() {
            lines.push(
                cols.iter()
                    .map(|c| c[r].clone())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b20_idle_source_emits_closed_windows_and_keeps_the_watermark_across_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = flow(
        dir,
        r#"
[[flow]]
name = "w"
trigger = "available_now"
watermark = { column = "ts", delay = "5 seconds" }
group_by = ["window(ts, '10 seconds')"]
aggregates = ["sum(v) AS total"]
output_mode = "append"
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "ts TIMESTAMP, v BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    copy_case("B20", "step1", &dir.join("landing"));
    let run1 = run_flow(&f, RunOptions::default()).await.unwrap();
    assert_eq!(run1.batches, 2, "one data batch and one no-data batch");
    assert_eq!(run1.watermark_ms, 1714557615000, "10:00:20 - 5 s");
    assert_eq!(
        table_rows(&dir.join("table"), "window_start").await,
        vec!["2024-05-01T10:00:00Z|2024-05-01T10:00:10Z|1"]
    );
    let run2 = run_flow(&f, RunOptions::default()).await.unwrap();
    assert_eq!(run2.batches, 0, "nothing new, nothing closes");
    copy_case("B20", "step3", &dir.join("landing"));
    let run3 = run_flow(&f, RunOptions::default()).await.unwrap();
    assert_eq!(
        run3.watermark_ms, 1714557636000,
        "the restored watermark moved on to 10:00:36"
    );
    assert_eq!(
        table_rows(&dir.join("table"), "window_start").await,
        vec![
            "2024-05-01T10:00:00Z|2024-05-01T10:00:10Z|1",
            "2024-05-01T10:00:20Z|2024-05-01T10:00:30Z|2"
        ]
    );
    // The watermark is in the WAL (offsets/N batchWatermarkMs) and progress.
    let p = read_progress(&f.checkpoint.join("_weir/progress.jsonl")).unwrap();
    let last = p.last().unwrap();
    // The last batch is run 3's no-data batch: it runs with the watermark 10:00:36.
    assert_eq!(last.event_time["watermark"], "2024-05-01T10:00:36.000Z");
    assert_eq!(last.state_operators[0].operator_name, "stateStoreSave");
    let offsets =
        std::fs::read_to_string(f.checkpoint.join(format!("offsets/{}", last.batch_id))).unwrap();
    assert!(
        offsets.contains("\"batchWatermarkMs\":1714557636000"),
        "{offsets}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b19_late_rows_go_to_the_late_table_and_never_change_results() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = flow(
        dir,
        r#"
[[flow]]
name = "w"
trigger = "available_now"
watermark = { column = "ts", delay = "0 seconds" }
group_by = ["window(ts, '10 seconds')", "k"]
aggregates = ["count(*) AS n"]
late_rows = { path = "late" }
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "k STRING, ts TIMESTAMP"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    for step in ["step1", "step2", "step3"] {
        copy_case("B19", step, &dir.join("landing"));
        run_flow(&f, RunOptions::default()).await.unwrap();
    }
    assert_eq!(
        table_rows(&dir.join("table"), "window_start").await,
        vec![
            "2024-05-01T10:00:00Z|2024-05-01T10:00:10Z|x|2",
            "2024-05-01T10:00:10Z|2024-05-01T10:00:20Z|x|1"
        ]
    );
    let late = table_rows(&dir.join("late"), "ts").await;
    assert_eq!(late.len(), 1);
    assert!(
        late[0].starts_with("x|2024-05-01T10:00:09.999Z"),
        "{late:?}"
    );
    let p = read_progress(&f.checkpoint.join("_weir/progress.jsonl")).unwrap();
    let dropped: u64 = p
        .iter()
        .map(|r| r.state_operators[0].num_rows_dropped_by_watermark)
        .sum();
    assert_eq!(dropped, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b22_drop_duplicates_across_a_restart_with_state_cleanup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = flow(
        dir,
        r#"
[[flow]]
name = "d"
trigger = "available_now"
watermark = { column = "ts", delay = "1 minute" }
drop_duplicates = ["eid", "ts"]
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "eid STRING, ts TIMESTAMP"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    for step in ["step1", "step2", "step3"] {
        copy_case("B22", step, &dir.join("landing"));
        run_flow(&f, RunOptions::default()).await.unwrap(); // each run is a new start
    }
    let rows = table_rows(&dir.join("table"), "eid").await;
    let eids: Vec<&str> = rows.iter().map(|r| r.split('|').next().unwrap()).collect();
    assert_eq!(eids, vec!["e1", "e2", "e3", "e4"]);
    let p = read_progress(&f.checkpoint.join("_weir/progress.jsonl")).unwrap();
    assert_eq!(
        p.last().unwrap().state_operators[0].num_rows_total,
        2,
        "only e3, e4 kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_departures_per_origin_equal_the_batch_group_by_minus_late_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing/flights");
    // Days 1-3, 5, 6 first, then day 4 arrives last: all its rows are behind the watermark.
    let staging = dir.join("_staging");
    let all = weir::demo::data::land_flights(&dir.join("all"), &staging, Some(6)).unwrap();
    assert_eq!(all.files_total, 6);
    let month = dir.join("all/2013-01");
    for d in [1, 2, 3, 5, 6, 4] {
        let name = format!("flights_2013-01-{d:02}.csv");
        land(&landing, &name, &std::fs::read(month.join(&name)).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(15));
    }
    let body = crate::support::bronze_flights_only()
        .replace("name = \"bronze_flights\"", "name = \"gold\"")
        .replace(
            "select = [\n  \"*\",\n  \"_metadata.file_path AS source_file\",\n  \"current_timestamp() AS ingested_at\",\n]",
            "watermark = { column = \"time_hour\", delay = \"1 hour\" }\n\
             group_by = [\"window(time_hour, '1 hour')\", \"origin\"]\n\
             aggregates = [\"count(*) AS flights\", \"avg(dep_delay) AS avg_dep_delay\"]\n\
             output_mode = \"append\"",
        )
        .replace("max_files_per_trigger = 100", "max_files_per_trigger = 1")
        .replace("lake/bronze/flights", "lake/gold/hourly");
    let f = flow(dir, &body);
    let summary = run_flow(&f, RunOptions::default()).await.unwrap();
    let day4_rows = std::fs::read_to_string(month.join("flights_2013-01-04.csv"))
        .unwrap()
        .lines()
        .count() as u64
        - 1;
    assert_eq!(
        summary.num_rows_dropped_by_watermark, day4_rows,
        "day 4 is entirely late"
    );

    // Oracle: DataFusion over the raw CSV text, excluding day 4 and the windows the
    // final watermark has not closed yet.
    let schema = raw_flights_schema();
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_csv(
        "raw",
        month.to_str().unwrap(),
        datafusion::prelude::CsvReadOptions::new()
            .has_header(true)
            .schema(&schema),
    )
    .await
    .unwrap();
    let watermark_us = summary.watermark_ms * 1000;
    let expected = ctx
        .sql(&format!(
            "SELECT CAST(date_bin(INTERVAL '1 hour', CAST(time_hour AS TIMESTAMP)) AS BIGINT) / 1000 AS ws, origin, \
             count(*) AS flights, \
             round(avg(CASE WHEN dep_delay = 'NA' THEN NULL ELSE CAST(dep_delay AS DOUBLE) END), 6) AS d \
             FROM raw WHERE day <> '4' \
             GROUP BY 1, 2 HAVING CAST(date_bin(INTERVAL '1 hour', CAST(time_hour AS TIMESTAMP)) AS BIGINT) / 1000 + 3600000000 <= {watermark_us} \
             ORDER BY 1, 2"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let got = delta_rows(&dir.join("lake/gold/hourly")).await;
    let got = sql(
        &got,
        "SELECT CAST(window_start AS BIGINT) AS ws, origin, flights, round(avg_dep_delay, 6) AS d FROM t ORDER BY 1, 2",
    )
    .await;
    let flat = |b: &[arrow::record_batch::RecordBatch]| -> Vec<String> {
        let (ws, o, n, d) = (
            column_strings(b, "ws"),
            column_strings(b, "origin"),
            column_strings(b, "flights"),
            column_strings(b, "d"),
        );
        (0..ws.len())
            .map(|i| format!("{}|{}|{}|{}", ws[i], o[i], n[i], d[i]))
            .collect()
    };
    let (expected, got) = (flat(&expected), flat(&got));
    assert!(expected.len() > 200, "{} windows", expected.len());
    assert_eq!(got, expected);
}
