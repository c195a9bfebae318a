//! Exactly-once under crashes: the real binary is aborted at each step of the
//! batch protocol (`WEIR_FAILPOINT`) and killed with SIGKILL at random moments;
//! after restarts the Delta table must hold every input row exactly once, with
//! one Delta version per batch.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir::checkpoint::progress::read_progress;

use crate::support::*;

const KEY: &str = "year, month, day, flight, carrier, sched_dep_time";

struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    pipeline: PathBuf,
    rows: u64,
}

fn setup(days: usize, max_files: u32) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let landed = weir::demo::data::land_flights(
        &dir.join("landing/flights"),
        &dir.join("_staging"),
        Some(days),
    )
    .unwrap();
    let pipeline = write_pipeline(&dir, &flights_pipeline(max_files));
    Setup {
        _tmp: tmp,
        dir,
        pipeline,
        rows: landed.rows_total,
    }
}

fn run(pipeline: &Path, failpoint: Option<&str>) -> std::process::Output {
    let mut c = weir();
    c.args(["run", "--headless"]).arg(pipeline);
    if let Some(fp) = failpoint {
        c.env("WEIR_FAILPOINT", fp);
    }
    c.output().unwrap()
}

async fn assert_exactly_once(
    dir: &Path,
    expected_rows: u64,
) -> Vec<arrow::record_batch::RecordBatch> {
    let rows = delta_rows(&dir.join("lake/bronze/flights")).await;
    assert_eq!(num_rows(&rows) as u64, expected_rows, "row count");
    let distinct = sql(
        &rows,
        &format!("SELECT count(*) FROM (SELECT DISTINCT {KEY} FROM t)"),
    )
    .await;
    assert_eq!(scalar(&distinct) as u64, expected_rows, "duplicates found");
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_recovers_exactly_once() {
    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let s = setup(9, 3);
        let crashed = run(&s.pipeline, Some(&format!("{failpoint}:1")));
        assert!(
            !crashed.status.success(),
            "{failpoint}: the process should have aborted"
        );
        let stderr = String::from_utf8_lossy(&crashed.stderr);
        assert!(
            stderr.contains(&format!("failpoint {failpoint} hit in batch 1")),
            "{stderr}"
        );
        // While the process is down, more files land: they must not join the replayed batch.
        let total = weir::demo::data::land_flights(
            &s.dir.join("landing/flights"),
            &s.dir.join("_staging"),
            Some(11),
        )
        .unwrap()
        .rows_total;
        assert!(total > s.rows);
        let restarted = run(&s.pipeline, None);
        assert!(
            restarted.status.success(),
            "{failpoint}: {}",
            String::from_utf8_lossy(&restarted.stderr)
        );
        assert_exactly_once(&s.dir, total).await;

        let checkpoint = s.dir.join("_checkpoints/bronze_flights");
        let progress = read_progress(&checkpoint.join("_weir/progress.jsonl")).unwrap();
        let replay = progress
            .iter()
            .find(|p| p.weir.replayed)
            .expect("a replayed batch");
        assert_eq!(replay.batch_id, 1, "{failpoint}");
        assert_eq!(
            replay.weir.num_files, 3,
            "{failpoint}: the replay reads exactly the planned files"
        );
        let skipped = !matches!(failpoint, "after_offsets" | "after_read");
        assert_eq!(
            replay.weir.sink_write_skipped, skipped,
            "{failpoint}: sink skip on replay"
        );
        // One Delta version per batch: 11 files, 3 per batch -> batches 0..=3 -> versions 0..=3.
        let batches = progress.iter().map(|p| p.batch_id).max().unwrap();
        assert_eq!(batches, 3, "{failpoint}");
        assert_eq!(
            delta_version(&s.dir.join("lake/bronze/flights")).await,
            Some(3),
            "{failpoint}"
        );
    }
}

/// A tiny deterministic generator so a failing seed can be replayed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_keeps_exactly_once() {
    let s = setup(30, 1);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("sigkill seed: {seed}");
    let mut rng = Lcg(seed);
    let mut kills = 0;
    for _ in 0..5 {
        let mut child = weir()
            .args(["run", "--headless"])
            .arg(&s.pipeline)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(150 + rng.next(900)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
    }
    let last = run(&s.pipeline, None);
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    assert_exactly_once(&s.dir, s.rows).await;
    eprintln!("killed {kills} time(s)");
}

#[test]
fn a_second_process_on_a_live_checkpoint_is_refused() {
    let s = setup(2, 1);
    let mut first = weir()
        .args(["run", "--headless", "--trigger", "200ms"])
        .arg(&s.pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lock = s.dir.join("_checkpoints/bronze_flights/_weir/lock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&lock)
        .map(|t| t.is_empty())
        .unwrap_or(true)
    {
        assert!(
            Instant::now() < deadline,
            "first process never took the lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = run(&s.pipeline, None);
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!("is in use by pid {}", first.id())),
        "{stderr}"
    );
    // SIGTERM: the first process finishes its batch and stops cleanly.
    Command::new("kill")
        .arg("-TERM")
        .arg(first.id().to_string())
        .status()
        .unwrap();
    let status = first.wait().unwrap();
    assert!(status.success(), "graceful stop exits 0");
    assert!(
        std::fs::read_to_string(&lock).unwrap().is_empty(),
        "a clean stop releases the lock"
    );
    // And the checkpoint has no pending batch.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let inspection = rt
        .block_on(weir::checkpoint_tools::inspect::inspect(
            &s.dir.join("_checkpoints/bronze_flights"),
        ))
        .unwrap();
    assert_eq!(inspection.pending_batch_id, None);
    // SIGTERM may arrive before the first batch is planned: then nothing ran. Either way
    // every planned batch finished and the ledger agrees with the commits.
    let committed = inspection.last_committed_batch_id.map_or(0, |b| b + 1);
    assert_eq!(
        inspection.ledger.unwrap().files_committed,
        committed,
        "one file per batch"
    );
}

/// The gold aggregation (hourly flights per origin, watermark on time_hour) and a
/// deduplication flow, crashed at every failpoint: output equals the crash-free run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_flows_survive_every_failpoint() {
    let stateful = [
        (
            "aggregation",
            "watermark = { column = \"time_hour\", delay = \"1 hour\" }\n\
             group_by = [\"window(time_hour, '1 hour')\", \"origin\"]\n\
             aggregates = [\"count(*) AS flights\", \"avg(dep_delay) AS avg_dep_delay\"]",
        ),
        (
            "deduplication",
            "watermark = { column = \"time_hour\", delay = \"1 hour\" }\n\
             drop_duplicates = [\"origin\", \"time_hour\"]",
        ),
        (
            // Every key spilled to disk at each commit (docs/state.md).
            "deduplication, spilled",
            "watermark = { column = \"time_hour\", delay = \"1 hour\" }\n\
             drop_duplicates = [\"origin\", \"time_hour\"]\n\
             state_memory_limit = 0",
        ),
    ];
    let mut in_memory_dedup: Option<Vec<String>> = None;
    for (kind, clauses) in stateful {
        let body = crate::support::bronze_flights_only()
            .replace(
                "select = [\n  \"*\",\n  \"_metadata.file_path AS source_file\",\n  \"current_timestamp() AS ingested_at\",\n]",
                clauses,
            )
            .replace("max_files_per_trigger = 100", "max_files_per_trigger = 1");
        let golden = {
            let s = setup(5, 1);
            std::fs::write(&s.pipeline, &body).unwrap();
            let out = run(&s.pipeline, None);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            sorted_rows(&s.dir).await
        };
        assert!(golden.len() > 50, "{kind}: {} rows", golden.len());
        match kind {
            "deduplication" => in_memory_dedup = Some(golden.clone()),
            "deduplication, spilled" => assert_eq!(
                Some(&golden),
                in_memory_dedup.as_ref(),
                "spilled state gives the in-memory output"
            ),
            _ => {}
        }
        for failpoint in weir::engine::failpoint::FAILPOINTS {
            let s = setup(5, 1);
            std::fs::write(&s.pipeline, &body).unwrap();
            let crashed = run(&s.pipeline, Some(&format!("{failpoint}:2")));
            assert!(
                !crashed.status.success(),
                "{kind}/{failpoint}: should abort"
            );
            let restarted = run(&s.pipeline, None);
            assert!(
                restarted.status.success(),
                "{kind}/{failpoint}: {}",
                String::from_utf8_lossy(&restarted.stderr)
            );
            assert_eq!(sorted_rows(&s.dir).await, golden, "{kind}/{failpoint}");
        }
    }
}

async fn sorted_rows(dir: &Path) -> Vec<String> {
    let rows = delta_rows(&dir.join("lake/bronze/flights")).await;
    let schema = rows[0].schema();
    let names: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| n != "_rescued_data")
        .collect();
    let cols: Vec<Vec<String>> = names.iter().map(|n| column_strings(&rows, n)).collect();
    let mut out: Vec<String> = (0..cols[0].len())
        .map(|i| {
            cols.iter()
                .map(|c| c[i].as_str())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    out.sort();
    out
}

/// A re-run batch must end each file as its first attempt did. When the sink already
/// holds the batch and the flow keeps no state, the re-run reads nothing (issue #18: a
/// file removed meanwhile, by retention say, must not crash-loop the flow), and the
/// file is not ingested a second time when it comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_batch_whose_file_is_unreadable_does_not_split_or_loop() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pipeline = write_pipeline(
        dir,
        r#"
[[flow]]
name = "t"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    let landing = dir.join("landing");
    land(&landing, "a.csv", b"id\n1\n2\n");
    land(&landing, "b.csv", b"id\n3\n4\n");
    // Batch 0 reaches the table, then the process dies before commits/0.
    let crashed = run(&pipeline, Some("after_sink_commit:0"));
    assert!(!crashed.status.success());
    // While it is down, one of the batch's files becomes unreadable: the re-run
    // finishes without reading (the table holds batch 0).
    std::fs::rename(landing.join("b.csv"), dir.join("b.csv.away")).unwrap();
    let rerun = run(&pipeline, None);
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    // The file is back: it is not ingested a second time by a later batch.
    std::fs::rename(dir.join("b.csv.away"), landing.join("b.csv")).unwrap();
    let ok = run(&pipeline, None);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let mut ids = column_strings(&delta_rows(&dir.join("table")).await, "id");
    ids.sort();
    assert_eq!(ids, vec!["1", "2", "3", "4"]);
}

/// Issue #18: a file's outcome in batch N is recorded before the sink write and the
/// re-run reproduces it. Batch 0 met a truncated gzip (failed) and reached the table;
/// the process died before `commits/0`; meanwhile the file was replaced by a complete
/// copy. Before, the re-run read the complete copy into its skipped write and the ledger
/// marked it committed: its rows never reached the table. Now the re-run keeps it
/// failed, and the changed file is ingested by the next batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_batch_keeps_the_outcomes_of_its_first_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pipeline = write_pipeline(
        dir,
        r#"
[[flow]]
name = "t"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "id BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    let landing = dir.join("landing");
    land(&landing, "a.json", b"{\"id\":1}\n{\"id\":2}\n");
    let gzip = |ids: std::ops::Range<i32>| {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        for id in ids {
            writeln!(e, "{{\"id\":{id}}}").unwrap();
        }
        e.finish().unwrap()
    };
    let full = gzip(10..40);
    land(&landing, "b.json.gz", &full[..full.len() / 2]);
    let crashed = run(&pipeline, Some("after_sink_commit:0"));
    assert!(!crashed.status.success());
    // An armed failpoint says so before anything runs.
    let stderr = String::from_utf8_lossy(&crashed.stderr);
    assert!(
        stderr.contains("WEIR_FAILPOINT is armed") && stderr.contains("batch 0"),
        "{stderr}"
    );
    std::thread::sleep(Duration::from_millis(20));
    land(&landing, "b.json.gz", &full);
    let ok = run(&pipeline, None);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ids = column_strings(&delta_rows(&dir.join("table")).await, "id");
    assert_eq!(ids.len(), 2 + 30, "every row once: {ids:?}");
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "no row twice");
}
