//! Beside the lake's other writers (issue #46, item 1): a full VACUUM by another tool
//! (delta-rs, retention 0, not enforced) runs while a batch is between writing its data
//! files and committing them. The pause failpoint (`WEIR_FAILPOINT=
//! pause_before_sink_commit:N`, `WEIR_FAILPOINT_RESUME=<file>`) holds the batch in that
//! window so the test is deterministic. Before, the flow committed `add` actions for the
//! deleted files and every later read of the table failed (delta-io/delta-rs#3835); now
//! the batch sees its files gone, writes them again, and the table holds every row once.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

const KEY: &str = "year, month, day, flight, carrier, sched_dep_time";

async fn vacuum_everything_unreferenced(table: &Path) -> usize {
    let url = url::Url::from_directory_path(std::path::absolute(table).unwrap()).unwrap();
    let t = deltalake::open_table(url).await.expect("open the table");
    let (_, metrics) = t
        .vacuum()
        .with_retention_period(chrono::Duration::zero())
        .with_enforce_retention_duration(false)
        .with_mode(deltalake::operations::vacuum::VacuumMode::Full)
        .await
        .expect("vacuum");
    metrics.files_deleted.len()
}

/// Which way the paused batch is written.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// Files source, files written per range while read (src/engine/streamed.rs).
    Streamed,
    /// A Delta source's batch: rows, then files, then the commit (src/sink/delta.rs).
    Ordinary,
}

async fn run_with_vacuum_in_the_window(way: Way) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landed = weir::demo::data::land_flights(
        &dir.join("landing/flights"),
        &dir.join("_staging"),
        Some(3),
    )
    .unwrap();
    let bronze = write_pipeline(dir, &flights_pipeline(1));
    let (pipeline, table) = match way {
        Way::Streamed => (bronze, dir.join("lake/bronze/flights")),
        Way::Ordinary => {
            // Bronze first, whole; then a flow that reads it as a Delta source, one
            // bronze version per batch, is paused in its batch 1.
            let out = weir()
                .args(["run", "--headless"])
                .arg(&bronze)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let silver_dir = dir.join("silver");
            std::fs::create_dir_all(&silver_dir).unwrap();
            let toml = format!(
                r#"
[[flow]]
name = "silver"
trigger = "available_now"

[flow.source]
type = "delta"
path = {:?}
max_files_per_trigger = 1

[flow.sink]
type = "delta"
path = "lake/silver/flights"
"#,
                dir.join("lake/bronze/flights").display().to_string()
            );
            (
                write_pipeline(&silver_dir, &toml),
                silver_dir.join("lake/silver/flights"),
            )
        }
    };
    let resume = dir.join("resume");
    let paused = dir.join("resume.paused");
    let mut child = weir()
        .args(["run", "--headless"])
        .arg(&pipeline)
        .env("WEIR_FAILPOINT", "pause_before_sink_commit:1")
        .env("WEIR_FAILPOINT_RESUME", &resume)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !paused.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("weir ended ({status}) before it paused batch 1");
        }
        assert!(Instant::now() < deadline, "batch 1 never paused");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Batch 1's files are written and in no commit: a full VACUUM deletes them.
    let deleted = vacuum_everything_unreferenced(&table).await;
    assert!(
        deleted >= 1,
        "the VACUUM found batch 1's staged files to delete"
    );
    std::fs::write(&resume, "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said = match way {
        Way::Streamed => "it runs again the ordinary way",
        Way::Ordinary => "were deleted before the commit that adds them",
    };
    assert!(
        stderr.contains(said),
        "the batch saw its files gone: {stderr}"
    );
    // Every row once, and every file the log lists is there to read.
    let rows = delta_rows_logical(&table).await;
    assert_eq!(
        num_rows(&rows) as u64,
        landed.rows_total,
        "row count: {stderr}"
    );
    let distinct = sql(
        &rows,
        &format!("SELECT count(*) FROM (SELECT DISTINCT {KEY} FROM t)"),
    )
    .await;
    assert_eq!(scalar(&distinct) as u64, landed.rows_total, "duplicates");
}

/// A Delta source's batch, written the ordinary way: the write fails as transient and
/// the sink's retry writes the batch again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vacuum_between_write_and_commit_loses_nothing() {
    run_with_vacuum_in_the_window(Way::Ordinary).await;
}

/// A files source's batch, streamed (files written per range of input files, then one
/// commit): it runs again the ordinary way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vacuum_between_a_streamed_write_and_its_commit_loses_nothing() {
    run_with_vacuum_in_the_window(Way::Streamed).await;
}
