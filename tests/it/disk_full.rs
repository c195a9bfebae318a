//! A full disk and a read-only disk under the checkpoint and the table (issue #47, item 3):
//! the real binary runs with its table and checkpoint on a size-limited tmpfs, so space
//! runs out at a different step of the batch protocol for each size of the sweep. Each
//! run must end with exit 1 and one clear error that names the path and says "no space
//! left" (no panic, no backtrace); after the space is given back, a rerun holds every
//! row exactly once (the same oracle as the crash tests).
//!
//! Mounting a tmpfs needs root (CI runs as root); elsewhere the tests print `skipped`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

const KEY: &str = "year, month, day, flight, carrier, sched_dep_time";

/// A size-limited tmpfs, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_kib: u64) -> Option<Tmpfs> {
        if !is_root() {
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "mount -t tmpfs failed as root");
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(self.dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "remount,{options} failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    pipeline: PathBuf,
    table: PathBuf,
    rows: u64,
}

/// Landing files on the ordinary disk; the table and the checkpoint under `mount`.
fn setup(mount: &Path, days: usize) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let landed = weir::demo::data::land_flights(
        &dir.join("landing/flights"),
        &dir.join("_staging"),
        Some(days),
    )
    .unwrap();
    let table = mount.join("lake/bronze/flights");
    let checkpoint = mount.join("_checkpoints/bronze_flights");
    let toml = flights_pipeline(3)
        .replace(
            "path = \"lake/bronze/flights\"",
            &format!("path = {:?}", table.display().to_string()),
        )
        .replace(
            "name = \"bronze_flights\"\n",
            &format!(
                "name = \"bronze_flights\"\ncheckpoint = {:?}\n",
                checkpoint.display().to_string()
            ),
        );
    assert!(toml.contains("checkpoint = "), "{toml}");
    let pipeline = write_pipeline(&dir, &toml);
    Setup {
        _tmp: tmp,
        dir,
        pipeline,
        table,
        rows: landed.rows_total,
    }
}

fn run(pipeline: &Path) -> std::process::Output {
    weir()
        .args(["run", "--headless"])
        .arg(pipeline)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

async fn assert_exactly_once(table: &Path, expected_rows: u64) {
    let rows = delta_rows(table).await;
    assert_eq!(num_rows(&rows) as u64, expected_rows, "row count");
    let distinct = sql(
        &rows,
        &format!("SELECT count(*) FROM (SELECT DISTINCT {KEY} FROM t)"),
    )
    .await;
    assert_eq!(scalar(&distinct) as u64, expected_rows, "duplicates found");
}

/// The failed run's stderr: one clear error, no panic, no backtrace.
fn assert_clear_failure(out: &std::process::Output, mount: &Path, words: &str, case: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{case}: exit code (101 is a panic): {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("stack backtrace"),
        "{case}: a panic on the way: {stderr}"
    );
    assert!(stderr.contains(words), "{case}: says {words:?}: {stderr}");
    assert!(
        stderr.contains(&mount.display().to_string()),
        "{case}: names the path under {}: {stderr}",
        mount.display()
    );
    let headline = stderr
        .lines()
        .find(|l| l.contains("error: "))
        .unwrap_or_default();
    assert!(
        headline.contains(words) && !headline.contains("Failed to parse parquet"),
        "{case}: the first error line says what happened, not a parse error: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_at_each_step_fails_clearly_and_resumes_exactly_once() {
    // Sizes from "not even the checkpoint's metadata fits" to "everything fits" (9 days
    // in 3 batches take about 330 KiB): each stops at a different step of the batch
    // protocol (the ledger, the first Parquet file, a later batch's ledger or file).
    let mut failed = 0;
    for size_kib in [16u64, 48, 96, 160, 200, 256, 320, 1024] {
        let Some(fs) = Tmpfs::mount(size_kib) else {
            return;
        };
        let s = setup(fs.path(), 9);
        let first = run(&s.pipeline);
        let case = format!("tmpfs of {size_kib} KiB");
        if first.status.success() {
            // Everything fitted: the table is complete.
            assert_exactly_once(&s.table, s.rows).await;
            continue;
        }
        failed += 1;
        assert_clear_failure(&first, fs.path(), "no space left", &case);
        fs.remount("size=64m");
        let rerun = run(&s.pipeline);
        assert!(
            rerun.status.success(),
            "{case}: rerun after space was freed: {}",
            String::from_utf8_lossy(&rerun.stderr)
        );
        assert_exactly_once(&s.table, s.rows).await;
        let _ = &s.dir;
    }
    assert!(
        failed >= 3,
        "the sweep must hit the full disk: {failed} runs failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_checkpoint_fails_clearly_and_resumes_exactly_once() {
    let Some(fs) = Tmpfs::mount(64 * 1024) else {
        return;
    };
    let s = setup(fs.path(), 3);
    let first = run(&s.pipeline);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // More files land; the disk under the checkpoint and the table turns read-only.
    let total = weir::demo::data::land_flights(
        &s.dir.join("landing/flights"),
        &s.dir.join("_staging"),
        Some(8),
    )
    .unwrap()
    .rows_total;
    fs.remount("ro");
    let refused = run(&s.pipeline);
    assert_clear_failure(&refused, fs.path(), "read-only", "read-only remount");
    fs.remount("rw");
    let rerun = run(&s.pipeline);
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_exactly_once(&s.table, total).await;
}
