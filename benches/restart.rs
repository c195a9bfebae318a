//! Restart time against checkpoint history (`cargo bench --bench restart`, issue #17):
//! does a flow that has run for a long time start as fast as on day one?
//!
//! A files -> Delta flow runs one real batch; its checkpoint is then given a history of
//! H batches (`offsets/N`, `commits/N` written as weir writes them, `{"logOffset": N}`),
//! and the measurement is one `weir run --headless --trigger once` over one new file:
//! the restart (lock, the restart checks that read every `offsets/` and `commits/` entry,
//! recovery, the Delta table's txn) up to the first batch committed, and that batch.
//!
//! Cases: H = 100 (what `min_batches_to_retain = 100`, the default, keeps at any age), and
//! H = 10,000 and 100,000 with `min_batches_to_retain` above H (a checkpoint without
//! retention, as weir kept them before). Then the 100,000 case once more with the
//! default retention: that run's commit purges the history down to 100 entries, and
//! the time of that first purge is reported.
//!
//! **Restart at scale** (issue #16): a deduplicating flow (`drop_duplicates = ["id", "ts"]`,
//! a 1-day watermark) whose checkpoint holds 1,000,000 keys of state (one batch of 1 M
//! rows) and whose file ledger holds 1,000,000 files (the real one plus 999,999 rows added
//! to `sources/0/ledger.sqlite` as weir writes them), then one `weir run` over one new
//! file: restart to the first batch committed.
//!
//! `WEIR_BENCH_CASES` (default `history,scale`) selects the cases.
//!
//! Prints one JSON line per case: history, retention, seconds (best and median of
//! `WEIR_BENCH_RUNS`, default 3), and the entries left in `offsets/`.

use std::path::{Path, PathBuf};

mod support;

use support::{median, round2};

const PIPELINE: &str = r#"
[[flow]]
name = "t"
trigger = "once"
min_batches_to_retain = RETAIN
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "id BIGINT, v STRING"
[flow.sink]
type = "delta"
path = "table"
"#;

fn weir() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env("WEIR_LOG", "warn");
    c
}

fn write_pipeline(dir: &Path, retain: u64) -> PathBuf {
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, PIPELINE.replace("RETAIN", &retain.to_string())).expect("pipeline");
    p
}

fn land(dir: &Path, name: &str) {
    let landing = dir.join("landing");
    std::fs::create_dir_all(&landing).expect("landing");
    let tmp = dir.join(format!(".{name}"));
    std::fs::write(&tmp, b"{\"id\": 1, \"v\": \"x\"}\n").expect("file");
    std::fs::rename(&tmp, landing.join(name)).expect("rename");
}

fn run(p: &Path) {
    let out = weir()
        .args(["run", "--headless"])
        .arg(p)
        .output()
        .expect("weir");
    assert!(
        out.status.success(),
        "weir run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A checkpoint whose last committed batch is `history - 1`: batch 0 is real, the rest
/// repeat its files' shape.
fn with_history(dir: &Path, history: u64) {
    let cp = dir.join("_checkpoints/t");
    let offsets0 = std::fs::read_to_string(cp.join("offsets/0")).expect("offsets/0");
    let commit0 = std::fs::read_to_string(cp.join("commits/0")).expect("commits/0");
    for id in 1..history {
        let offsets = offsets0.replace("{\"logOffset\":0}", &format!("{{\"logOffset\":{id}}}"));
        std::fs::write(cp.join("offsets").join(id.to_string()), offsets).expect("offsets");
        std::fs::write(cp.join("commits").join(id.to_string()), &commit0).expect("commits");
    }
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn case(history: u64, retain: u64, runs: usize) {
    let mut secs = Vec::new();
    let mut left = 0;
    for _ in 0..runs {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        // Batch 0 with the largest retention, so nothing is purged while building.
        let p = write_pipeline(dir, u64::from(u32::MAX));
        land(dir, "a.json");
        run(&p);
        with_history(dir, history);
        let p = write_pipeline(dir, retain);
        land(dir, "b.json");
        let (s, _, _) = support::measured(weir().args(["run", "--headless"]).arg(&p));
        secs.push(s);
        left = entries(&dir.join("_checkpoints/t/offsets"));
    }
    let best = secs.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{}",
        serde_json::json!({
            "bench": "restart",
            "history_batches": history,
            "min_batches_to_retain": retain,
            "seconds_best": round2(best),
            "seconds_median": round2(median(&secs)),
            "offsets_entries_after": left,
            "runs": runs,
        })
    );
}

const SCALE_PIPELINE: &str = r#"
[[flow]]
name = "t"
trigger = "available_now"
drop_duplicates = ["id", "ts"]
watermark = { column = "ts", delay = "1 day" }
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "id BIGINT, ts TIMESTAMP, v STRING"
[flow.sink]
type = "delta"
path = "table"
"#;

/// Restart with 1 M keys of dedup state and 1 M files in the ledger (issue #16).
fn scale(runs: usize) {
    const KEYS: u64 = 1_000_000;
    const FILES: u64 = 1_000_000;
    let mut secs = Vec::new();
    let (mut state_rows, mut ledger_files) = (0u64, 0u64);
    for _ in 0..runs {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let p = dir.join("pipeline.toml");
        std::fs::write(&p, SCALE_PIPELINE).expect("pipeline");
        let landing = dir.join("landing");
        std::fs::create_dir_all(&landing).expect("landing");
        let mut big = String::with_capacity(60 * KEYS as usize);
        for id in 0..KEYS {
            big.push_str(&format!(
                "{{\"id\": {id}, \"ts\": \"2024-01-01T00:{:02}:{:02}Z\", \"v\": \"x\"}}\n",
                id / 60 % 60,
                id % 60
            ));
        }
        std::fs::write(dir.join(".big"), big).expect("big file");
        std::fs::rename(dir.join(".big"), landing.join("big.json")).expect("rename");
        run(&p);
        let ledger = dir.join("_checkpoints/t/sources/0/ledger.sqlite");
        {
            let conn = rusqlite::Connection::open(&ledger).expect("ledger");
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO files (path, size, modification_time_ms, batch_id, state,
                                    discovered_at_ms, committed_at_ms, num_rows, error, outcome, attempts)
                 SELECT f.path || '.old-' || n.i, f.size, f.modification_time_ms, f.batch_id, f.state,
                        f.discovered_at_ms, f.committed_at_ms, f.num_rows, f.error, f.outcome, f.attempts
                 FROM n, (SELECT * FROM files ORDER BY id LIMIT 1) f",
                [FILES as i64 - 1],
            )
            .expect("ledger rows");
            ledger_files = conn
                .query_row("SELECT count(*) FROM files", [], |r| r.get::<_, i64>(0))
                .expect("count") as u64;
        }
        std::fs::write(
            dir.join(".new"),
            b"{\"id\": -1, \"ts\": \"2024-01-01T01:00:00Z\", \"v\": \"y\"}\n",
        )
        .expect("new file");
        std::fs::rename(dir.join(".new"), landing.join("new.json")).expect("rename");
        let m = support::measured_cpu(weir().args(["run", "--headless"]).arg(&p));
        secs.push(m.secs);
        // The last progress record: the batch ran with the whole state behind it.
        let last: serde_json::Value = String::from_utf8_lossy(&m.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .next_back()
            .expect("a progress record");
        assert_eq!(last["sources"][0]["numInputRows"], 1, "{last}");
        state_rows = last["stateOperators"][0]["numRowsTotal"]
            .as_u64()
            .expect("state rows");
    }
    assert!(state_rows > KEYS, "state holds {state_rows} keys");
    assert!(ledger_files >= FILES, "ledger holds {ledger_files} files");
    println!(
        "{}",
        serde_json::json!({
            "bench": "restart at scale",
            "state_keys": state_rows,
            "ledger_files": ledger_files,
            "seconds_best": round2(secs.iter().copied().fold(f64::INFINITY, f64::min)),
            "seconds_median": round2(median(&secs)),
            "runs": runs,
        })
    );
}

fn main() {
    support::measure_mode_if_asked();
    let runs: usize = std::env::var("WEIR_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let cases = std::env::var("WEIR_BENCH_CASES").unwrap_or_else(|_| "history,scale".into());
    if cases.contains("history") {
        case(100, 100, runs);
        case(10_000, 1_000_000, runs);
        case(100_000, 1_000_000, runs);
        case(100_000, 100, runs);
    }
    if cases.contains("scale") {
        scale(runs);
    }
}
