//! Health states caused for real through the binary: each test brings a flow
//! into a state, asserts the classified state and its evidence (`_weir/health.json`,
//! `weir.health` in progress records, `weir check`, `weir playbook`), applies the
//! playbook's first fitting action and asserts the flow recovers with every
//! source row in the Delta table exactly once (read back with DataFusion).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const ROWS_PER_FILE: i64 = 10;

fn json_file(i: i64, extra: bool) -> Vec<u8> {
    let mut s = String::new();
    for j in 0..ROWS_PER_FILE {
        let k = if j % 2 == 0 { "a" } else { "b" };
        if extra {
            s.push_str(&format!(
                "{{\"id\": {}, \"k\": \"{k}\", \"v\": {j}, \"extra\": \"x{j}\"}}\n",
                i * ROWS_PER_FILE + j
            ));
        } else {
            s.push_str(&format!(
                "{{\"id\": {}, \"k\": \"{k}\", \"v\": {j}}}\n",
                i * ROWS_PER_FILE + j
            ));
        }
    }
    s.into_bytes()
}

fn land_files(landing: &Path, range: std::ops::Range<i64>) {
    for i in range {
        land(landing, &format!("f{i:03}.json"), &json_file(i, false));
        // Distinct modification times keep the arrival order stable.
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Scene {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Scene {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        Scene { _tmp: tmp, dir }
    }
    fn landing(&self) -> PathBuf {
        self.dir.join("landing")
    }
    fn table(&self) -> PathBuf {
        self.dir.join("table")
    }
    fn checkpoint(&self) -> PathBuf {
        self.dir.join("_checkpoints").join("f")
    }
    fn pipeline(&self) -> PathBuf {
        self.dir.join("pipeline.toml")
    }
    fn write(&self, body: &str) -> PathBuf {
        write_pipeline(&self.dir, body)
    }
    fn run(&self, extra: &[&str]) -> Output {
        weir()
            .arg("run")
            .arg(self.pipeline())
            .args(["--headless", "--trigger", "available-now"])
            .args(extra)
            .output()
            .unwrap()
    }
    fn weir(&self, args: &[&str]) -> Output {
        weir().args(args).output().unwrap()
    }
    fn health(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.checkpoint().join("_weir/health.json"))
            .expect("_weir/health.json");
        serde_json::from_str(&text).unwrap()
    }
    fn progress(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.checkpoint().join("_weir/progress.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Every `id` in the table, sorted.
async fn ids(table: &Path) -> Vec<i64> {
    let rows = delta_rows(table).await;
    if rows.is_empty() {
        return Vec::new();
    }
    let out = sql(&rows, "SELECT id FROM t ORDER BY id").await;
    column_strings(&out, "id")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect()
}

fn expected_ids(files: i64) -> Vec<i64> {
    (0..files * ROWS_PER_FILE).collect()
}

const SCHEMA: &str = "id BIGINT, k STRING, v BIGINT";

fn simple_pipeline(extra_flow: &str, extra_source: &str) -> String {
    format!(
        r#"
[[flow]]
name = "f"
trigger = "available_now"
{extra_flow}
[flow.health]
retry_attempts = 2
retry_backoff = "20 ms"
window_batches = 3

[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "{SCHEMA}"
{extra_source}

[flow.sink]
type = "delta"
path = "table"
"#
    )
}

/// Replaces timestamps in generated names (`-20261130T143501Z`) so two plans compare.
fn normalize(text: &str) -> String {
    regex::Regex::new(r"\d{8}T\d{6}Z(-\d+)?")
        .unwrap()
        .replace_all(text, "<time>")
        .to_string()
}

#[test]
fn lagging_capped_backlog_is_classified_and_drained_by_a_larger_batch_size() {
    let sc = Scene::new();
    sc.write(
        &simple_pipeline("", "max_files_per_trigger = 1")
            .replace("trigger = \"available_now\"", "trigger = \"300 ms\""),
    );
    land_files(&sc.landing(), 0..20);
    let mut child = weir()
        .arg("run")
        .arg(sc.pipeline())
        .arg("--headless")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let lagging = loop {
        if let Some(r) = sc
            .progress()
            .into_iter()
            .find(|r| r["weir"]["health"]["state"] == "lagging")
        {
            break r;
        }
        assert!(Instant::now() < deadline, "no lagging record in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success(), "SIGTERM stops cleanly");

    let ev = &lagging["weir"]["health"]["evidence"];
    assert_eq!(ev["window_batches"], 3);
    assert_eq!(ev["max_files_per_trigger"], 1);
    assert_eq!(ev["files_per_batch"], 1.0);
    let backlog = ev["backlog_files"].as_u64().unwrap();
    assert!(backlog > 0 && backlog < 20, "{ev}");
    assert!(
        ev["reasons"][0]
            .as_str()
            .unwrap()
            .contains("took max_files_per_trigger = 1 file(s)"),
        "{ev}"
    );
    // The first two batches do not fill the window: healthy until the third.
    let first = &sc.progress()[0];
    assert_eq!(first["weir"]["health"]["state"], "healthy");

    // The playbook, headless, with the flow's numbers.
    let pb = sc.weir(&["playbook", "lagging", s(&sc.pipeline()), "--flow", "f"]);
    assert!(pb.status.success());
    let text = stdout(&pb);
    assert!(text.contains("cap `max_files_per_trigger` = 1"), "{text}");
    assert!(
        text.contains(&format!(
            "weir run {} --flow f --trigger available-now --max-files-per-trigger 1000",
            s(&sc.pipeline())
        )),
        "{text}"
    );

    // First action: drain with a larger batch size for one run.
    let out = sc.run(&["--max-files-per-trigger", "1000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let last = sc.progress().pop().unwrap();
    assert_eq!(last["sources"][0]["metrics"]["numFilesOutstanding"], "0");
    assert_eq!(last["weir"]["health"]["state"], "healthy");
    assert_eq!(sc.health()["state"], "healthy");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(20));
}

#[test]
fn freshness_target_makes_old_event_time_lagging() {
    let sc = Scene::new();
    sc.write(
        &simple_pipeline(
            "freshness = \"15 minutes\"\nwatermark = { column = \"ts\", delay = \"1 minute\" }",
            "",
        )
        .replace(SCHEMA, "id BIGINT, k STRING, v BIGINT, ts TIMESTAMP"),
    );
    let old = chrono::Utc::now() - chrono::Duration::hours(2);
    let line = format!(
        "{{\"id\": 0, \"k\": \"a\", \"v\": 1, \"ts\": \"{}\"}}\n",
        old.format("%Y-%m-%dT%H:%M:%SZ")
    );
    land(&sc.landing(), "old.json", line.as_bytes());
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let h = sc.health();
    assert_eq!(h["state"], "lagging");
    assert_eq!(h["evidence"]["freshness_ms"], 15 * 60_000);
    let delay = h["evidence"]["event_time_delay_ms"].as_i64().unwrap();
    assert!((7_100_000..7_400_000).contains(&delay), "{delay}");

    // Fresh data arrives: the flow is within its target again.
    let line = format!(
        "{{\"id\": 1, \"k\": \"a\", \"v\": 1, \"ts\": \"{}\"}}\n",
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
    );
    land(&sc.landing(), "new.json", line.as_bytes());
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sc.health()["state"], "healthy");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), vec![0, 1]);
}

#[test]
fn source_replaced_by_a_file_is_source_unavailable_until_restored() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", ""));
    land_files(&sc.landing(), 0..2);
    assert!(sc.run(&[]).status.success());

    // The source directory disappears and a file takes its place (fails for root too).
    let moved = sc.dir.join("landing.moved");
    std::fs::rename(sc.landing(), &moved).unwrap();
    std::fs::write(sc.landing(), b"not a directory").unwrap();
    let t = Instant::now();
    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "retried with backoff (20 + 40 ms) before failing"
    );
    let h = sc.health();
    assert_eq!(h["state"], "source_unavailable");
    let err = &h["evidence"]["error"];
    assert_eq!(err["kind"], "source_unavailable");
    assert_eq!(err["domain"], "external");
    assert_eq!(err["retryable"], true);
    assert_eq!(h["evidence"]["file"], s(&sc.landing()));

    let pb = sc.weir(&["playbook", "current", "--checkpoint", s(&sc.checkpoint())]);
    let text = stdout(&pb);
    assert!(
        text.starts_with("playbook: source_unavailable for flow f"),
        "{text}"
    );
    assert!(
        text.contains("Error kind source_unavailable, domain external, retry can help: yes"),
        "{text}"
    );
    // The checkpoint does not record its pipeline file: the one beside it that names it.
    assert!(
        text.contains(&format!(
            "weir run {} --flow f --trigger available-now",
            s(&sc.pipeline())
        )),
        "{text}"
    );

    // First action: restore access and restart.
    std::fs::remove_file(sc.landing()).unwrap();
    std::fs::rename(&moved, sc.landing()).unwrap();
    land_files(&sc.landing(), 2..3);
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sc.health()["state"], "healthy");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(3));
}

#[test]
fn table_path_taken_by_a_file_is_sink_unavailable_and_the_batch_is_rerun_once() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", ""));
    land_files(&sc.landing(), 0..2);
    std::fs::write(sc.table(), b"in the way").unwrap();
    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let h = sc.health();
    assert_eq!(h["state"], "sink_unavailable");
    assert_eq!(h["evidence"]["error"]["kind"], "sink_unavailable");
    assert_eq!(h["evidence"]["error"]["retryable"], true);
    assert!(
        h["evidence"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains(s(&sc.table())),
        "{h}"
    );
    // No commit was made: the batch is planned, not committed.
    let inspect = sc.weir(&["inspect", s(&sc.checkpoint()), "--json"]);
    let i: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(i["pending_batch_id"], 0);
    assert_eq!(i["last_committed_batch_id"], serde_json::Value::Null);

    // First action: restore write access (move the stray file aside) and restart.
    std::fs::rename(sc.table(), sc.dir.join("stray-file")).unwrap();
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let last = sc.progress().pop().unwrap();
    assert_eq!(last["batchId"], 0);
    assert_eq!(last["weir"]["replayed"], true);
    assert_eq!(last["weir"]["health"]["state"], "healthy");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(2));
}

fn aggregation_pipeline(group_by: &str) -> String {
    simple_pipeline(
        &format!(
            "group_by = [{group_by}]\naggregates = [\"count(*) AS n\", \"max(id) AS max_id\"]\noutput_mode = \"complete\""
        ),
        "",
    )
}

#[test]
fn changed_aggregation_key_is_incompatible_fails_fast_and_reverting_recovers() {
    let sc = Scene::new();
    sc.write(&aggregation_pipeline("\"k\""));
    land_files(&sc.landing(), 0..2);
    assert!(sc.run(&[]).status.success());

    sc.write(&aggregation_pipeline("\"k\", \"v\""));
    let check = sc.weir(&["check", s(&sc.pipeline())]);
    assert_eq!(check.status.code(), Some(1));
    let verdict = stdout(&check);
    assert!(verdict.contains("flow f: incompatible"), "{verdict}");
    let reason = verdict
        .lines()
        .find_map(|l| l.trim().strip_prefix("reason: "))
        .unwrap()
        .to_string();
    assert!(reason.contains("stateful operator changed"), "{reason}");
    assert!(
        verdict.contains("playbook: weir playbook checkpoint_incompatible"),
        "{verdict}"
    );

    // A restart fails fast with the same verdict; nothing new is planned.
    land_files(&sc.landing(), 2..3);
    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&reason), "{}", stderr(&out));
    assert_eq!(sc.health()["state"], "checkpoint_incompatible");
    assert!(!sc.checkpoint().join("offsets/1").exists());

    let pb = sc.weir(&["playbook", "current", s(&sc.pipeline()), "--flow", "f"]);
    let text = stdout(&pb);
    assert!(text.contains("(evidence: weir check"), "{text}");
    assert!(text.contains(&reason), "{text}");

    // First action: revert the change.
    sc.write(&aggregation_pipeline("\"k\""));
    assert!(sc.weir(&["check", s(&sc.pipeline())]).status.success());
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sc.health()["state"], "healthy");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rows = rt.block_on(delta_rows(&sc.table()));
    let out = rt.block_on(sql(&rows, "SELECT k, n, max_id FROM t ORDER BY k"));
    assert_eq!(column_strings(&out, "k"), vec!["a", "b"]);
    assert_eq!(
        column_strings(&out, "n"),
        vec!["15", "15"],
        "30 rows counted once"
    );
    assert_eq!(column_strings(&out, "max_id"), vec!["28", "29"]);
}

#[test]
fn a_changed_source_is_incompatible_with_the_exact_reason() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", ""));
    land_files(&sc.landing(), 0..1);
    assert!(sc.run(&[]).status.success());
    sc.write(&simple_pipeline("", "").replace("path = \"landing\"", "path = \"landing2\""));
    let check = sc.weir(&["check", s(&sc.pipeline()), "--json"]);
    assert_eq!(check.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let reason = v[0]["reasons"][0].as_str().unwrap();
    assert!(
        reason.starts_with("source path changed from ") && reason.ends_with("landing2"),
        "{reason}"
    );
    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(reason), "{}", stderr(&out));
    // Reverting the change makes the checkpoint usable again.
    sc.write(&simple_pipeline("", ""));
    assert!(sc.weir(&["check", s(&sc.pipeline())]).status.success());
}

#[test]
fn reset_with_truncate_target_moves_the_checkpoint_aside_and_replays_exactly_once() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", ""));
    land_files(&sc.landing(), 0..3);
    assert!(sc.run(&[]).status.success());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let version_before = rt.block_on(delta_version(&sc.table())).unwrap();

    let pipeline = sc.pipeline();
    let args = [
        "checkpoint",
        "reset",
        s(&pipeline),
        "--flow",
        "f",
        "--truncate-target",
    ];
    let dry = weir().args(args).arg("--dry-run").output().unwrap();
    assert!(dry.status.success(), "{}", stderr(&dry));
    let plan = stdout(&dry);
    assert!(plan.ends_with("dry run: nothing changed\n"), "{plan}");
    assert!(
        plan.contains("(30 row(s)) with one DELETE commit"),
        "{plan}"
    );
    assert!(
        sc.checkpoint().join("metadata").exists(),
        "dry run changes nothing"
    );

    // Without --yes and a wrong confirmation: refused, nothing changed.
    let mut child = weir()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"nope\n").unwrap();
    let refused = child.wait_with_output().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(sc.checkpoint().join("metadata").exists());

    let real = weir().args(args).arg("--yes").output().unwrap();
    assert!(real.status.success(), "{}", stderr(&real));
    let done = stdout(&real);
    let planned = plan.trim_end_matches("dry run: nothing changed\n");
    assert!(
        normalize(&done).starts_with(&normalize(planned)),
        "dry run:\n{planned}\naction:\n{done}"
    );
    // The plan's operations happened: checkpoint moved (kept), table emptied by a commit.
    assert!(!sc.checkpoint().exists());
    let moved: Vec<_> = std::fs::read_dir(sc.dir.join("_checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(moved.len(), 1);
    assert!(moved[0].starts_with("f.bak-"), "{moved:?}");
    assert!(
        done.contains(&format!("moved {} to", s(&sc.checkpoint()))),
        "{done}"
    );
    assert_eq!(
        rt.block_on(delta_version(&sc.table())),
        Some(version_before + 1)
    );
    assert!(rt.block_on(ids(&sc.table())).is_empty());
    // Time travel still reads the rows.
    let url = url::Url::from_directory_path(std::path::absolute(sc.table()).unwrap()).unwrap();
    let mut old = rt.block_on(deltalake::open_table(url)).unwrap();
    rt.block_on(old.load_version(version_before as u64))
        .unwrap();
    let rows: i64 = old
        .snapshot()
        .unwrap()
        .log_data()
        .iter()
        .filter_map(|a| a.num_records())
        .sum::<usize>() as i64;
    assert_eq!(rows, 30);

    // The replay writes every row once.
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(3));
}

#[test]
fn a_missing_target_table_is_sink_unavailable_and_a_reset_replays_it_once() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", ""));
    land_files(&sc.landing(), 0..2);
    assert!(sc.run(&[]).status.success());
    std::fs::rename(sc.table(), sc.dir.join("table.lost")).unwrap();

    let check = sc.weir(&["check", s(&sc.pipeline())]);
    assert_eq!(check.status.code(), Some(1));
    let verdict = stdout(&check);
    assert!(verdict.contains("is gone, but query"), "{verdict}");
    // A restart fails fast instead of writing a table that misses the earlier rows. The
    // table's directory is missing: most often unmounted or being restored, so the state
    // is sink_unavailable (retryable), not an incompatible checkpoint.
    land_files(&sc.landing(), 2..3);
    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("directory is missing"),
        "{}",
        stderr(&out)
    );
    assert!(!sc.table().exists(), "nothing written");
    assert_eq!(sc.health()["state"], "sink_unavailable");

    // Playbook action 3: reset (the table is gone: nothing to empty) and replay.
    let out = sc.weir(&[
        "checkpoint",
        "reset",
        s(&sc.pipeline()),
        "--flow",
        "f",
        "--truncate-target",
        "--yes",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("is not a Delta table yet: nothing to empty"));
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(3));
}

/// `weir attach` follows `_weir/health.json`: a flow that failed (no progress record
/// for the failure) still shows its state and evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_follows_the_recorded_health_of_a_failed_flow() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", ""));
    land_files(&sc.landing(), 0..1);
    std::fs::write(sc.table(), b"in the way").unwrap();
    assert_eq!(sc.run(&[]).status.code(), Some(1));
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let task = tokio::spawn(weir::console::follow::follow(
        "f".into(),
        sc.checkpoint(),
        weir::console::follow::FollowOptions {
            progress: true,
            lock: false,
            interval: Duration::from_millis(20),
        },
        tx,
    ));
    let health = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match rx.recv().await {
                Some(weir::console::app::Report::Engine(
                    weir::engine::control::FlowEvent::Health { health, .. },
                )) => break health,
                Some(_) => continue,
                None => panic!("follow ended"),
            }
        }
    })
    .await
    .expect("a health event");
    task.abort();
    assert_eq!(health.state, weir::records::HealthState::SinkUnavailable);
    assert_eq!(
        health.evidence.error.as_ref().unwrap().kind,
        weir::error::ErrorKind::SinkUnavailable
    );
}

#[test]
fn truncated_offsets_are_incompatible_and_rollback_repairs_them() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", "max_files_per_trigger = 1"));
    land_files(&sc.landing(), 0..2);
    assert!(sc.run(&[]).status.success());
    land_files(&sc.landing(), 2..3);
    // Crash right after offsets/2 is written, then damage it.
    let crash = weir()
        .arg("run")
        .arg(sc.pipeline())
        .args(["--headless", "--trigger", "available-now"])
        .env("WEIR_FAILPOINT", "after_offsets")
        .output()
        .unwrap();
    assert!(!crash.status.success());
    let offsets2 = sc.checkpoint().join("offsets/2");
    std::fs::write(&offsets2, "v1\n").unwrap();

    let check = sc.weir(&["check", s(&sc.pipeline()), "--json"]);
    assert_eq!(check.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(v[0]["compatible"], false);
    let reason = v[0]["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("offsets/2") && reason.contains("truncated"),
        "{reason}"
    );
    assert_eq!(v[0]["playbook"], "checkpoint_incompatible");

    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let h = sc.health();
    assert_eq!(h["state"], "checkpoint_incompatible");
    assert_eq!(h["evidence"]["file"], s(&offsets2));

    // Rollback to the last committed batch: dry run, then the same operations for real.
    let checkpoint = sc.checkpoint();
    let args = ["checkpoint", "rollback", s(&checkpoint), "--to", "1"];
    let dry = weir().args(args).arg("--dry-run").output().unwrap();
    assert!(dry.status.success(), "{}", stderr(&dry));
    let plan = stdout(&dry);
    assert!(
        plan.contains(&format!("1. move {} to", s(&offsets2))),
        "{plan}"
    );
    assert!(offsets2.exists());
    let real = weir().args(args).arg("--yes").output().unwrap();
    assert!(real.status.success(), "{}", stderr(&real));
    let done = stdout(&real);
    let planned = plan.trim_end_matches("dry run: nothing changed\n");
    assert!(normalize(&done).starts_with(&normalize(planned)), "{done}");
    assert!(!offsets2.exists());
    let aside = done
        .lines()
        .find_map(|l| l.strip_prefix(&format!("done: moved {} to ", s(&offsets2))))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(aside).unwrap(),
        "v1\n",
        "moved, not deleted"
    );

    assert!(sc.weir(&["check", s(&sc.pipeline())]).status.success());
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sc.health()["state"], "healthy");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(3));
}

#[test]
fn rollback_refuses_batches_the_sink_already_committed() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", "max_files_per_trigger = 1"));
    land_files(&sc.landing(), 0..1);
    assert!(sc.run(&[]).status.success());
    land_files(&sc.landing(), 1..2);
    let crash = weir()
        .arg("run")
        .arg(sc.pipeline())
        .args(["--headless", "--trigger", "available-now"])
        .env("WEIR_FAILPOINT", "after_sink_commit")
        .output()
        .unwrap();
    assert!(!crash.status.success());
    let out = sc.weir(&[
        "checkpoint",
        "rollback",
        s(&sc.checkpoint()),
        "--to",
        "0",
        "--yes",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("already committed batch 1 of this query"),
        "{}",
        stderr(&out)
    );
    assert!(sc.checkpoint().join("offsets/1").exists(), "nothing moved");
    // The flow finishes the batch without writing it twice.
    assert!(sc.run(&[]).status.success());
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(2));
}

#[test]
fn new_column_is_schema_mismatch_and_a_restart_evolves() {
    let sc = Scene::new();
    // merge_schema = false explicitly (the default with add_new_columns is true).
    let inferred = simple_pipeline("", "")
        .replace(&format!("schema = \"{SCHEMA}\""), "")
        .replace("path = \"table\"", "path = \"table\"\nmerge_schema = false");
    sc.write(&inferred);
    land_files(&sc.landing(), 0..2);
    assert!(sc.run(&[]).status.success());
    land(&sc.landing(), "f002.json", &json_file(2, true));
    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let h = sc.health();
    assert_eq!(h["state"], "schema_mismatch");
    assert_eq!(h["evidence"]["error"]["kind"], "schema_changed");
    assert!(
        h["evidence"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("f002.json"),
        "{h}"
    );
    let pb = sc.weir(&["playbook", "current", s(&sc.pipeline()), "--flow", "f"]);
    let text = stdout(&pb);
    assert!(text.starts_with("playbook: schema_mismatch"), "{text}");
    assert!(text.contains("new column(s) extra"), "{text}");

    // First action: restart with the wider schema. The table refuses the new column
    // (no merge_schema): still schema_mismatch, now from the sink, nothing written.
    let out = sc.run(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let h = sc.health();
    assert_eq!(h["state"], "schema_mismatch");
    assert_eq!(h["evidence"]["error"]["kind"], "sink_schema_mismatch");
    assert_eq!(h["evidence"]["error"]["retryable"], false);
    // Second action: let the table take new columns.
    sc.write(&inferred.replace("merge_schema = false", "merge_schema = true"));
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sc.health()["state"], "healthy");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(ids(&sc.table())), expected_ids(3));
    let rows = rt.block_on(delta_rows(&sc.table()));
    let extra = rt.block_on(sql(&rows, "SELECT count(extra) AS n FROM t"));
    assert_eq!(scalar(&extra), ROWS_PER_FILE);
}

#[test]
fn backup_copies_and_verifies_and_refuses_a_running_flow() {
    let sc = Scene::new();
    sc.write(&simple_pipeline("", ""));
    land_files(&sc.landing(), 0..2);
    assert!(sc.run(&[]).status.success());
    let dry = sc.weir(&["checkpoint", "backup", s(&sc.checkpoint()), "--dry-run"]);
    assert!(dry.status.success());
    let out = sc.weir(&["checkpoint", "backup", s(&sc.checkpoint())]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let planned = stdout(&dry);
    let planned = planned.trim_end_matches("dry run: nothing changed\n");
    assert!(normalize(&text).starts_with(&normalize(planned)), "{text}");
    let copy = text
        .lines()
        .find_map(|l| l.split(" file(s) to ").nth(1))
        .unwrap();
    for f in [
        "metadata",
        "offsets/0",
        "commits/0",
        "sources/0/ledger.sqlite",
    ] {
        assert_eq!(
            std::fs::read(sc.checkpoint().join(f)).unwrap(),
            std::fs::read(Path::new(copy).join(f)).unwrap(),
            "{f}"
        );
    }

    // A running flow holds the lock: every action is refused.
    let mut child = weir()
        .arg("run")
        .arg(sc.pipeline())
        .args(["--headless", "--trigger", "1 hour"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let lock = sc.checkpoint().join("_weir/lock");
    while !std::fs::read_to_string(&lock)
        .unwrap_or_default()
        .contains("pid")
    {
        assert!(Instant::now() < deadline, "the lock was never taken");
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused = sc.weir(&["checkpoint", "backup", s(&sc.checkpoint())]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("is in use by pid"),
        "{}",
        stderr(&refused)
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn inspect_reports_state_schema_history_health_and_diff_compares_batches() {
    let sc = Scene::new();
    let body = aggregation_pipeline("\"k\"")
        .replace(&format!("schema = \"{SCHEMA}\""), "")
        .replace("[flow.source]", "[flow.source]\nmax_files_per_trigger = 1");
    sc.write(&body);
    land_files(&sc.landing(), 0..2);
    assert!(sc.run(&[]).status.success());
    land(&sc.landing(), "f002.json", &json_file(2, true));
    assert_eq!(sc.run(&[]).status.code(), Some(3), "schema changed");
    let out = sc.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));

    let inspect = sc.weir(&["inspect", s(&sc.checkpoint()), "--json"]);
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let i: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let op = &i["state_operators"][0];
    assert!(op["operator_name"].is_string(), "{op}");
    assert_eq!(op["key_columns"][0], "k");
    let versions = op["versions"].as_array().unwrap();
    assert!(versions.len() >= 3, "{op}");
    assert!(op["total_bytes"].as_u64().unwrap() > 0);
    let history = i["schema_history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1]["added"][0], "extra");
    assert_eq!(i["health"]["state"], "healthy");
    assert_eq!(i["sink"]["txn_version"], 2);
    let text = stdout(&sc.weir(&["inspect", s(&sc.checkpoint())]));
    assert!(
        text.contains("schema history") && text.contains("(added extra)"),
        "{text}"
    );
    assert!(text.contains("keyed by [k]"), "{text}");

    // Two batches of one checkpoint: offsets, files, state and the schema that changed.
    let d = sc.weir(&["diff", s(&sc.checkpoint()), "--batches", "0", "2", "--json"]);
    assert_eq!(d.status.code(), Some(1), "differences: {}", stderr(&d));
    let d: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
    let fields: Vec<&str> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"end offset"), "{fields:?}");
    assert!(fields.contains(&"schema version"), "{fields:?}");
    assert!(
        d["schema_changes"][0]
            .as_str()
            .unwrap()
            .starts_with("+ extra"),
        "{d}"
    );
    // A checkpoint against itself: nothing differs.
    let same = sc.weir(&["diff", s(&sc.checkpoint()), s(&sc.checkpoint())]);
    assert!(same.status.success());
    assert!(stdout(&same).ends_with("no differences\n"));
}

mod console_view {
    //! The console's playbook view: opened with `b` beside the flow's live
    //! evidence, steps checked off with Space; snapshots at 80x24 and 120x40.

    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use weir::console::app::{App, Mode, Report};
    use weir::console::model::FlowModel;
    use weir::console::session::Session;
    use weir::console::theme::Theme;
    use weir::engine::control::FlowEvent;
    use weir::records::{Evidence, Health, HealthState};

    use crate::support::weir;

    const NOW_MS: i64 = 1_796_033_200_000;

    fn lagging() -> Health {
        Health {
            state: HealthState::Lagging,
            evidence: Evidence {
                reasons: vec![
                    "backlog grew from 120 to 160 file(s) over the last 5 batches".into(),
                ],
                window_batches: Some(5),
                batches: Some((35, 39)),
                backlog_files: Some(160),
                backlog_bytes: Some(66_000_000),
                backlog_files_start: Some(120),
                input_rows_per_second: Some(1040.0),
                processed_rows_per_second: Some(610.5),
                files_per_batch: Some(100.0),
                max_files_per_trigger: Some(100),
                batch_id: Some(39),
                ..Default::default()
            },
        }
    }

    fn session() -> Session {
        let mut flow = FlowModel::new("bronze_events");
        flow.checkpoint = Some("/data/_checkpoints/bronze_events".into());
        let app = App::new(
            Mode::Run,
            "/data/pipeline.toml",
            vec![flow, FlowModel::new("silver_orders")],
            Theme {
                color: true,
                ascii: false,
            },
            3_600_000,
            NOW_MS,
        );
        let mut s = Session::new(app, None);
        s.ingest(Report::Engine(FlowEvent::Health {
            flow: "bronze_events".into(),
            health: Box::new(lagging()),
            at_ms: NOW_MS - 5_000,
        }));
        s
    }

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    fn screen(session: &Session, w: u16, h: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
        session.render(&mut terminal).unwrap();
        let buf = terminal.backend().buffer();
        let mut out = String::new();
        for y in 0..h {
            let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
            out.push_str(line.trim_end());
            out.push('\n');
        }
        regex::Regex::new(r"\d\d:\d\d:\d\dZ")
            .unwrap()
            .replace_all(&out, "[clock]  ")
            .to_string()
    }

    /// From the playbook: `x` shows the dry-run of the step's checkpoint action, which
    /// runs only on Enter (backup) or after typing the checkpoint's name (rollback).
    #[test]
    fn playbook_actions_show_their_dry_run_and_need_confirmation() {
        let sc = super::Scene::new();
        sc.write(&super::simple_pipeline("", "max_files_per_trigger = 1"));
        super::land_files(&sc.landing(), 0..2);
        assert!(sc.run(&[]).status.success());
        super::land_files(&sc.landing(), 2..3);
        let crash = weir()
            .arg("run")
            .arg(sc.pipeline())
            .args(["--headless", "--trigger", "available-now"])
            .env("WEIR_FAILPOINT", "after_offsets")
            .output()
            .unwrap();
        assert!(!crash.status.success());
        let offsets2 = sc.checkpoint().join("offsets/2");
        std::fs::write(&offsets2, "v1\n").unwrap();
        assert_eq!(sc.run(&[]).status.code(), Some(1));
        let health: Health = serde_json::from_value(sc.health()).unwrap();
        assert_eq!(health.state, HealthState::CheckpointIncompatible);

        let mut flow = FlowModel::new("f");
        flow.checkpoint = Some(sc.checkpoint());
        let app = App::new(
            Mode::Run,
            sc.pipeline().display().to_string(),
            vec![flow],
            Theme {
                color: false,
                ascii: true,
            },
            3_600_000,
            NOW_MS,
        );
        let mut s = Session::new(app, None);
        s.ingest(Report::Engine(FlowEvent::Health {
            flow: "f".into(),
            health: Box::new(health),
            at_ms: NOW_MS,
        }));
        s.key(key('b'));
        assert!(
            s.key(key('x')).is_none(),
            "step 1 names no action: x is not live"
        );
        s.key(key('j'));
        s.key(key('x'));
        let dialog = screen(&s, 120, 40);
        assert!(dialog.contains("Dry run: backup"), "{dialog}");
        assert!(dialog.contains("1. copy "), "{dialog}");
        assert!(dialog.contains("Enter runs it"), "{dialog}");
        s.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        let backups: Vec<_> = std::fs::read_dir(sc.dir.join("_checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("f.backup-"))
            .collect();
        assert_eq!(backups.len(), 1, "the backup ran once");
        let timeline = screen(&s, 120, 40);
        assert!(timeline.contains("backup: done"), "{timeline}");

        // The rollback step: a typed confirmation is needed.
        for _ in 0..5 {
            s.key(key('j'));
        }
        s.key(key('x'));
        let dialog = screen(&s, 120, 40);
        assert!(dialog.contains("Dry run: rollback to batch 1"), "{dialog}");
        assert!(dialog.contains("Type f and Enter"), "{dialog}");
        s.key(key('n'));
        s.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert!(offsets2.exists(), "a wrong confirmation changes nothing");
        s.key(KeyEvent::new(KeyCode::Backspace, KeyModifiers::NONE));
        s.key(key('f'));
        s.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert!(
            !offsets2.exists(),
            "moved aside after the typed confirmation"
        );

        let out = sc.run(&[]);
        assert!(out.status.success(), "{}", super::stderr(&out));
        let rt = tokio::runtime::Runtime::new().unwrap();
        assert_eq!(rt.block_on(super::ids(&sc.table())), super::expected_ids(3));
    }

    #[test]
    fn health_shows_in_the_overview_row_and_the_timeline() {
        let s = session();
        let text = screen(&s, 120, 40);
        let row = text.lines().find(|l| l.contains("│bronze_events")).unwrap();
        assert!(row.contains("lagging"), "{row}");
        assert!(
            text.contains("health: lagging: backlog grew from 120 to 160 file(s)"),
            "{text}"
        );
    }

    #[test]
    fn playbook_view_with_evidence_and_checked_steps() {
        let mut s = session();
        assert!(s.key(key('b')).is_some(), "b opens the playbook");
        assert!(matches!(
            s.snapshot().overlay,
            weir::console::snapshot::OverlaySnap::Playbook(_)
        ));
        // Check off the first step, move to the second.
        s.key(key(' '));
        s.key(key('j'));
        let wide = screen(&s, 120, 40);
        assert!(wide.contains("Live evidence"), "{wide}");
        assert!(wide.contains("160 files / 66.0 MB"), "{wide}");
        assert!(wide.contains("1 of "), "one step checked: {wide}");
        assert!(
            wide.contains("Backlog: 160 file(s), 66.0 MB outstanding"),
            "evidence filled into the text: {wide}"
        );
        insta::assert_snapshot!("playbook_lagging_120x40", wide);
        insta::assert_snapshot!("playbook_lagging_80x24", screen(&s, 80, 24));
        // Space again un-checks; Esc closes.
        s.key(key('k'));
        s.key(key(' '));
        assert!(screen(&s, 120, 40).contains("0 of "));
        s.key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert!(matches!(
            s.snapshot().overlay,
            weir::console::snapshot::OverlaySnap::None
        ));
    }
}
