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

fn main() {
    support::measure_mode_if_asked();
    let runs: usize = std::env::var("WEIR_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    case(100, 100, runs);
    case(10_000, 1_000_000, runs);
    case(100_000, 1_000_000, runs);
    case(100_000, 100, runs);
}
