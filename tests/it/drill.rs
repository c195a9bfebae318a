//! `weir drill`: crashes at every failpoint and at random moments on a copy; passes
//! on the demo pipeline, and catches the duplicates of a non-idempotent sink.

use std::path::Path;

use crate::support::*;

fn setup(dir: &Path, idempotent: bool) -> std::path::PathBuf {
    weir::demo::data::land_flights(&dir.join("landing/flights"), &dir.join("_staging"), Some(5))
        .unwrap();
    let mut body = flights_pipeline(1);
    if !idempotent {
        body = body.replace(
            "path = \"lake/bronze/flights\"",
            "path = \"lake/bronze/flights\"\nidempotent = false",
        );
    }
    write_pipeline(dir, &body)
}

fn drill(pipeline: &Path, work: &Path, kills: &str) -> (std::process::Output, serde_json::Value) {
    let out = weir()
        .args([
            "drill",
            "--json",
            "--seed",
            "7",
            "--kills",
            kills,
            "--work-dir",
        ])
        .arg(work)
        .arg(pipeline)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        let logs: Vec<String> = std::fs::read_dir(work.join("logs"))
            .map(|d| {
                d.map(|e| {
                    let p = e.unwrap().path();
                    format!(
                        "{}:\n{}",
                        p.display(),
                        std::fs::read_to_string(&p).unwrap_or_default()
                    )
                })
                .collect()
            })
            .unwrap_or_default();
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs.join("\n")
        )
    });
    (out, report)
}

#[test]
fn the_demo_pipeline_passes_the_drill_and_is_not_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = setup(&tmp.path().join("user"), true);
    let work = tmp.path().join("work");
    let (out, report) = drill(&pipeline, &work, "2");
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["pass"], true);
    let flow = &report["flows"][0];
    assert_eq!(flow["flow"], "bronze_flights");
    assert_eq!(flow["duplicates"], 0);
    assert_eq!(flow["lost"], 0);
    let expected =
        weir::demo::data::land_flights(&tmp.path().join("x"), &tmp.path().join("y"), Some(5))
            .unwrap()
            .rows_total;
    assert_eq!(flow["rows_out"], expected);
    assert_eq!(flow["reference_rows_out"], expected);
    assert_eq!(flow["rows_in"], expected);
    // Every failpoint was hit once, and the crashed batches were replayed.
    assert_eq!(
        report["failpoints_hit"],
        weir::engine::failpoint::FAILPOINTS.len(),
        "{report:#}"
    );
    // A replay killed between its commit and its progress record (a random SIGKILL can
    // land there) is counted in batches_without_progress instead.
    assert!(
        flow["batches_replayed"].as_u64().unwrap()
            + flow["batches_without_progress"].as_u64().unwrap()
            >= 4,
        "{flow:#}"
    );
    // One Delta version per batch, as in the crash-free run; the txn records the last batch.
    assert_eq!(flow["delta_version"], flow["reference_delta_version"]);
    assert_eq!(flow["txn_version"], flow["last_committed_batch"]);
    assert!(
        !flow["key"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "ingested_at"),
        "the wall-clock column is not part of the key"
    );
    // The user's pipeline directory got no checkpoint and no table.
    assert!(!tmp.path().join("user/_checkpoints").exists());
    assert!(!tmp.path().join("user/lake").exists());
    assert!(work.join("drill/pipeline.toml").is_file());
    // Issue #18: the input copy is counted and removed when the drill ends.
    assert_eq!(report["input_files"], 5, "{report:#}");
    assert!(report["input_bytes"].as_u64().unwrap() > 0);
    assert!(!work.join("input").exists());
}

/// Issue #18: the input copy is bounded; an input whose oldest file alone is over the
/// bound is refused before any process runs (exit 2), naming the input and the flag.
#[test]
fn an_input_over_the_drill_bound_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = setup(&tmp.path().join("user"), true);
    let work = tmp.path().join("work");
    let out = weir()
        .args([
            "drill",
            "--kills",
            "0",
            "--max-input-bytes",
            "10 B",
            "--work-dir",
        ])
        .arg(&work)
        .arg(&pipeline)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("landing/flights"), "{stderr}");
    assert!(stderr.contains("--max-input-bytes"), "{stderr}");
    assert!(!work.join("logs").exists(), "no process ran");
    assert!(!work.join("input").exists(), "the partial copy is removed");
}

#[test]
fn a_non_idempotent_sink_fails_the_drill_with_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = setup(&tmp.path().join("user"), false);
    let work = tmp.path().join("work");
    let (out, report) = drill(&pipeline, &work, "0");
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(report["pass"], false);
    let flow = &report["flows"][0];
    // after_sink_commit, after_state and before_commit each crash after the Delta commit:
    // without the txn check the replay appends the batch again.
    assert!(flow["duplicates"].as_u64().unwrap() > 0, "{flow:#}");
    assert_eq!(flow["lost"], 0);
    assert!(
        flow["rows_out"].as_u64().unwrap() > flow["reference_rows_out"].as_u64().unwrap(),
        "{flow:#}"
    );
    // The human report says FAIL too.
    let text = weir()
        .args(["drill", "--seed", "7", "--kills", "0", "--work-dir"])
        .arg(tmp.path().join("work2"))
        .arg(&pipeline)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("RESULT: FAIL"), "{stdout}");
    assert!(stdout.contains("bronze_flights"), "{stdout}");
}

/// Generated events with duplicates through a deduplicating flow: the drill keys on
/// the flow's `drop_duplicates` columns and passes; the table holds each event once.
#[test]
fn a_deduplicating_flow_on_generated_events_passes_the_drill() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("user");
    let out = weir()
        .args([
            "generate", "--once", "--files", "6", "--rows", "300", "--seed", "3",
        ])
        .args([
            "--duplicates",
            "0.1",
            "--late-fraction",
            "0.05",
            "--lateness-mean",
            "1m",
        ])
        .args(["--max-lateness", "5m"])
        .arg(user.join("landing/events"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let duplicates: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["duplicates"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(duplicates > 50);
    let pipeline = write_pipeline(
        &user,
        r#"
[[flow]]
name = "dedup_events"
trigger = "available_now"
watermark = { column = "event_time", delay = "10 minutes" }
drop_duplicates = ["event_id", "event_time"]

[flow.source]
type = "files"
path = "landing/events"
format = "json"
schema = "event_id BIGINT, key STRING, event_time TIMESTAMP, amount DOUBLE"
max_files_per_trigger = 1

[flow.sink]
type = "delta"
path = "lake/events"
"#,
    );
    let (out, report) = drill(&pipeline, &tmp.path().join("work"), "1");
    assert!(out.status.success(), "{report:#}");
    let flow = &report["flows"][0];
    assert_eq!(flow["key"], serde_json::json!(["event_id", "event_time"]));
    assert_eq!(flow["duplicates"], 0);
    assert_eq!(flow["lost"], 0);
    assert_eq!(flow["rows_in"], 1800);
    assert_eq!(flow["rows_out"], 1800 - duplicates, "{flow:#}");
    assert_eq!(
        report["failpoints_hit"],
        weir::engine::failpoint::FAILPOINTS.len(),
        "{report:#}"
    );
}

/// The whole demo pipeline (bronze, silver with joins and dedup, gold windows): every
/// table passes, and the user's own tables and checkpoints are left as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multi_hop_demo_passes_and_its_tables_are_not_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("user");
    let demo = weir()
        .args(["demo", "--batch", "--headless", "--days", "3", "--dir"])
        .arg(&user)
        .output()
        .unwrap();
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let before = delta_version(&user.join("lake/silver/flights")).await;
    assert!(before.is_some());
    let out = weir()
        .args([
            "drill",
            "--json",
            "--seed",
            "5",
            "--kills",
            "0",
            "--max-files-per-trigger",
            "1",
        ])
        .arg("--work-dir")
        .arg(tmp.path().join("work"))
        .arg(user.join("pipeline.toml"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{report:#}");
    let flows = report["flows"].as_array().unwrap();
    assert!(flows.len() >= 4, "{report:#}");
    for f in flows {
        assert_eq!(f["duplicates"], 0, "{f:#}");
        assert_eq!(f["lost"], 0, "{f:#}");
        assert_eq!(f["rows_out"], f["reference_rows_out"], "{f:#}");
        assert!(f["rows_out"].as_u64().unwrap() > 0, "{f:#}");
    }
    let silver = flows
        .iter()
        .find(|f| f["flow"] == "silver_flights")
        .unwrap();
    assert_eq!(
        silver["key"],
        serde_json::json!(["carrier", "flight", "origin", "time_hour"]),
        "a dedup flow is keyed by its drop_duplicates columns"
    );
    assert_eq!(
        delta_version(&user.join("lake/silver/flights")).await,
        before
    );
}
