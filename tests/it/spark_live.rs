//! A real PySpark query (local[2], rate source, 1 s trigger) followed live by
//! `weir attach --spark` in tmux: the console's batch ids and input rows equal
//! the listener's progress records, and after a SIGKILL of the driver inside a
//! batch the query shows as failed with that batch pending.
//!
//! Needs Java 17 and a Python with PySpark (4.2 or 4.3): `.ci/run` sources
//! `tests/spark/ci-setup.sh`, which reuses the PySpark 4.2 venv of
//! `scripts/spark-delta-setup.sh` and sets `WEIR_SPARK_ATTACH_TESTS=1`. Without
//! that variable the test is skipped, so a plain local `cargo test` starts no JVM.
//! One JVM at a time on the machine: the test holds `/var/tmp/weir-spark.lock`
//! (exclusive `flock`) while its Spark query runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::console::{Tmux, weir_bin};

fn spark_python() -> Option<PathBuf> {
    if std::env::var("WEIR_SPARK_ATTACH_TESTS").ok().as_deref() != Some("1") {
        return None;
    }
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let py = std::env::var_os("WEIR_SPARK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/weir-delta-venv/bin/python"));
    let ok = std::process::Command::new(&py)
        .args(["-c", "import pyspark"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import pyspark: run scripts/spark-delta-setup.sh (tests/spark/ci-setup.sh)",
        py.display()
    );
    Some(py)
}

/// The machine-wide lock serializing JVM runs (shared with `flock -x
/// /var/tmp/weir-spark.lock` in scripts): held until dropped.
fn spark_lock() -> Option<nix::fcntl::Flock<std::fs::File>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/var/tmp/weir-spark.lock")
        .ok()?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).ok()
}

fn wait(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The listener's records: batch id -> input rows.
fn listener_rows(dir: &Path) -> std::collections::BTreeMap<u64, u64> {
    std::fs::read_to_string(dir.join("progress.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| weir::spark::progress::from_json(l).ok())
        .map(|p| (p.batch_id, p.num_input_rows))
        .collect()
}

/// History rows on screen: (batch, input rows, state).
fn history_rows(screen: &str) -> Vec<(u64, Option<u64>, String)> {
    let mut out = Vec::new();
    for line in screen.lines() {
        let cells: Vec<&str> = line
            .split(['│', '|'])
            .flat_map(str::split_whitespace)
            .collect();
        // BATCH OFFSETS FILES IN OUT TIME DELTA STATE (TIME may hold a space: "1.2s").
        let Some(batch) = cells.first().and_then(|c| c.parse::<u64>().ok()) else {
            continue;
        };
        let state = if line.contains("pending") {
            "pending"
        } else if line.contains("committed") {
            "committed"
        } else {
            continue;
        };
        let rows = cells.get(3).and_then(|c| c.parse::<u64>().ok());
        out.push((batch, rows, state.to_string()));
    }
    out
}

#[test]
fn spark_live_query_followed_in_tmux_then_killed() {
    let Some(py) = spark_python() else {
        println!(
            "skipping spark_live_query_followed_in_tmux_then_killed: set WEIR_SPARK_ATTACH_TESTS=1 (CI does)"
        );
        return;
    };
    assert!(
        Tmux::available(),
        "tmux is needed (the CI script installs it)"
    );
    let _lock = spark_lock();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spark/live_query.py");
    let mut child = std::process::Command::new(&py)
        .arg(&script)
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("spark.log")).unwrap())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    wait(
        "the first progress record",
        Duration::from_secs(180),
        || listener_rows(&dir).len() >= 2 || child.try_wait().is_ok_and(|s| s.is_some()),
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the query died: {}",
        std::fs::read_to_string(dir.join("spark.log")).unwrap_or_default()
    );
    let child = Reap(child);
    let t = Tmux::start(
        "spark",
        120,
        40,
        &dir,
        &format!(
            "{} attach --spark checkpoint --event-log events --stale-after 6s",
            weir_bin()
        ),
    );
    t.wait_for("the live query's row", Duration::from_secs(60), |s| {
        s.contains("live_rate") && (s.contains("running") || s.contains("idle"))
    });
    // The history pane, zoomed: every batch the listener reported, with its input rows.
    t.keys(&["Enter", "6", "Enter"]);
    t.wait_for("the history pane", Duration::from_secs(20), |s| {
        s.contains("BATCH") && s.contains("committed")
    });
    let start = Instant::now();
    let mut compared = 0;
    while start.elapsed() < Duration::from_secs(60) && compared < 4 {
        std::thread::sleep(Duration::from_secs(1));
        let screen = t.capture();
        let listener = listener_rows(&dir);
        compared = 0;
        for (batch, rows, state) in history_rows(&screen) {
            if state != "committed" {
                continue;
            }
            if let Some(expected) = listener.get(&batch) {
                assert_eq!(rows, Some(*expected), "batch {batch} on screen:\n{screen}");
                compared += 1;
            }
        }
    }
    assert!(
        compared >= 4,
        "batches compared with the listener: {compared}"
    );
    // Kill the driver inside a batch: its offsets are written, its commit never will be.
    let pid: i32 = std::fs::read_to_string(dir.join("jvm.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut killed_in = None;
    wait("a batch in its sink", Duration::from_secs(60), || {
        let done = weir::spark::checkpoint::batch_ids(&dir.join("checkpoint/commits")).unwrap();
        let running = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("in_batch_"))
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .max();
        match running {
            Some(b) if !done.contains(&b) => {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .unwrap();
                killed_in = Some(b);
                true
            }
            _ => false,
        }
    });
    let killed_in = killed_in.unwrap();
    drop(child);
    let screen = t.wait_for("the killed query as failed", Duration::from_secs(60), |s| {
        s.contains("failed") && s.contains("pending")
    });
    let pending: Vec<u64> = history_rows(&screen)
        .into_iter()
        .filter(|(_, _, s)| s == "pending")
        .map(|(b, _, _)| b)
        .collect();
    assert_eq!(pending, vec![killed_in], "{screen}");
    t.keys(&["Escape", "q"]);
    let end = t.wait_for("weir to exit", Duration::from_secs(30), |s| {
        s.contains("WEIR-EXITED-")
    });
    assert!(end.contains("WEIR-EXITED-0"), "{end}");
    assert!(!t.alternate_on(), "the terminal is restored");
}
