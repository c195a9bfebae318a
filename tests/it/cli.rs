//! The CLI as a user meets it: `demo`, `run` on what the demo left, `inspect`.

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_then_run_again_then_inspect() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = weir()
        .args(["demo", "--batch", "--headless", "--days", "12", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // stdout: one progress record per batch, as JSON lines in Spark's shape.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!records.is_empty());
    let rows: u64 = records
        .iter()
        .filter(|r| r["name"] == "bronze_flights")
        .map(|r| r["numInputRows"].as_u64().unwrap())
        .sum();
    let expected =
        weir::demo::data::land_flights(&tmp.path().join("x"), &tmp.path().join("y"), Some(12))
            .unwrap()
            .rows_total;
    assert_eq!(rows, expected);
    for key in [
        "id",
        "runId",
        "batchId",
        "durationMs",
        "sources",
        "sink",
        "inputRowsPerSecond",
        "processedRowsPerSecond",
    ] {
        assert!(records[0].get(key).is_some(), "progress lacks {key}");
    }
    assert_eq!(
        records[0]["sources"][0]["metrics"]["numFilesOutstanding"],
        "0"
    );
    assert!(
        stderr.contains("lake/bronze/flights"),
        "summary names the table: {stderr}"
    );
    assert!(
        stderr.contains(&format!("{expected} input rows")),
        "{stderr}"
    );
    assert!(dir.join("pipeline.toml").is_file());
    let version = delta_version(&dir.join("lake/bronze/flights")).await;
    assert_eq!(version, Some(0));
    // `ingested_at` is a TIMESTAMP (UTC instant) like Spark's current_timestamp(), so the
    // table needs no timestampNtz feature and stays readable by older Delta readers.
    let log = std::fs::read_to_string(
        dir.join("lake/bronze/flights/_delta_log/00000000000000000000.json"),
    )
    .unwrap();
    assert!(!log.contains("timestampNtz"), "{log}");
    assert!(
        log.contains(r#"\"name\":\"ingested_at\",\"type\":\"timestamp\""#),
        "{log}"
    );

    // `weir run DIR/pipeline.toml` runs the same flow: nothing new, nothing committed.
    let again = weir()
        .args(["run", "--headless"])
        .arg(dir.join("pipeline.toml"))
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(again.stdout.is_empty(), "no batch ran");
    assert_eq!(
        delta_version(&dir.join("lake/bronze/flights")).await,
        version
    );

    // A copy of the landing folder and pipeline.toml elsewhere is an independent pipeline.
    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(dir.join("pipeline.toml"), copy.join("pipeline.toml")).unwrap();
    for sub in ["landing", "dims"] {
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(dir.join(sub))
            .arg(copy.join(sub))
            .status()
            .unwrap();
        assert!(status.success());
    }
    let copied = weir()
        .args(["run", "--headless"])
        .arg(copy.join("pipeline.toml"))
        .output()
        .unwrap();
    assert!(
        copied.status.success(),
        "{}",
        String::from_utf8_lossy(&copied.stderr)
    );
    assert_eq!(
        num_rows(&delta_rows(&copy.join("lake/bronze/flights")).await) as u64,
        expected
    );

    // inspect --json: read-only facts about the checkpoint.
    let checkpoint = dir.join("_checkpoints/bronze_flights");
    let before = std::fs::read_dir(checkpoint.join("offsets"))
        .unwrap()
        .count();
    let out = weir()
        .args(["inspect", "--json"])
        .arg(&checkpoint)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["last_batch_id"], 0);
    assert_eq!(j["last_committed_batch_id"], 0);
    assert_eq!(j["pending_batch_id"], serde_json::Value::Null);
    assert_eq!(j["watermark_ms"], 0);
    assert_eq!(j["sources"][0]["latest_offset"]["logOffset"], 0);
    assert_eq!(j["ledger"]["files_committed"], 12);
    assert_eq!(j["ledger"]["files_pending"], 0);
    assert_eq!(j["sink"]["delta_version"], 0);
    assert!(j["query_id"].as_str().unwrap().len() == 36);
    assert_eq!(
        std::fs::read_dir(checkpoint.join("offsets"))
            .unwrap()
            .count(),
        before
    );
    let text = weir().arg("inspect").arg(&checkpoint).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("last planned 0, last committed 0, pending -"),
        "{text}"
    );
}

#[test]
fn spark_checkpoint_files_are_read_by_inspect() {
    // The real Spark checkpoint (metadata, offsets/5, commits/5) is understood.
    let out = weir()
        .args(["inspect", "--json"])
        .arg(fixture("spark/checkpoint"))
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["query_id"], "1205752e-e38e-4271-b7f6-78041c8283cc");
    assert_eq!(j["last_batch_id"], 5);
    assert_eq!(j["last_committed_batch_id"], 5);
    assert_eq!(j["watermark_ms"], 1772362150000_i64);
    assert_eq!(j["sources"][0]["latest_offset"]["logOffset"], 5);
}

/// `weir run --headless ... | head -1`: a closed stdout ends the progress output and
/// the run stops cleanly after the batch in flight (exit 0, no panic); the next run
/// ingests the rest, each row exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_run_survives_a_closed_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    std::fs::create_dir_all(&landing).unwrap();
    for i in 0..3 {
        std::fs::write(
            landing.join(format!("f{i}.csv")),
            format!("id,v\n{i},1\n{}0,2\n", i + 1),
        )
        .unwrap();
    }
    let p = dir.join("p.toml");
    std::fs::write(
        &p,
        r#"[[flow]]
name = "f"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, v BIGINT"
max_files_per_trigger = 1
[flow.sink]
type = "delta"
path = "table"
"#,
    )
    .unwrap();
    // The reader is gone before the first record is written: every write fails (EPIPE).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = weir()
        .args(["run", "--headless"])
        .arg(&p)
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("stdout is closed"), "{stderr}");
    let rows: usize = delta_rows(&dir.join("table"))
        .await
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 2, "one batch (one file) committed, then a clean stop");
    // The next run goes on from there: every row once.
    let out = weir().args(["run", "--headless"]).arg(&p).output().unwrap();
    assert!(out.status.success());
    let batches = delta_rows(&dir.join("table")).await;
    let ids = sql(
        &batches,
        "SELECT count(*) AS n, count(DISTINCT id) AS d FROM t",
    )
    .await;
    assert_eq!(column_strings(&ids, "n"), ["6"]);
    assert_eq!(column_strings(&ids, "d"), ["6"]);
}
