//! Apache Spark queries in weir's console, inspect, check and health, from real
//! Spark 4.3 checkpoints and event logs (`tests/fixtures/spark-queries/`, made
//! by the PySpark scripts in its `gen/`):
//!
//! - every fixture's overview and detail at 80x24 and 120x40 (insta), its
//!   health state and playbook;
//! - `weir inspect --json` against an independent reader of the same files
//!   (`tests/spark/oracle.py`);
//! - `weir check` against the errors real Spark raised restarting damaged copies;
//! - both renderings of progress (listener `progress.json()`, event log) against
//!   each other;
//! - malformed input: a truncated zstd frame, a half-written last line, an
//!   unknown event type, a future log version, another application's log.
//!
//! The live test (a real PySpark query followed in tmux) is `spark_live.rs`.

use std::path::{Path, PathBuf};

use weir::console::action::Action;
use weir::console::app::{App, Pane};
use weir::console::session::Session;
use weir::spark::backlog::PathMap;
use weir::spark::feed::Options;

use crate::console::{screen, unicode};
use crate::support::*;

/// A fixture path relative to the package root (the tests' working directory), so
/// the paths the console shows are the same on every machine.
fn sq(rel: &str) -> PathBuf {
    PathBuf::from("tests/fixtures/spark-queries").join(rel)
}

/// Paths in the fixtures point at the machines that wrote them; make sure no
/// listing finds a directory of the same name here.
fn unreachable_map() -> PathMap {
    PathMap::parse(&[
        "/tmp/weir-spark-gen=/nonexistent/weir-test".into(),
        "/data/spark-fixtures=/nonexistent/weir-test".into(),
    ])
    .unwrap()
}

fn options(logs: &[PathBuf], map: PathMap) -> Options {
    Options {
        event_logs: logs.to_vec(),
        path_map: map,
        stale_after_ms: 30_000,
        file_clock: false,
        ..Default::default()
    }
}

/// The console over Spark queries with a fixed clock: a minute after the newest batch.
fn spark_app(checkpoints: &[PathBuf], logs: &[PathBuf], map: PathMap) -> App {
    let far = 4_102_444_800_000; // 2100-01-01
    let (probe, _, _) = weir::console::spark::open(
        checkpoints,
        options(logs, map.clone()),
        unicode(),
        3_600_000,
        far,
    )
    .expect("open");
    let newest = probe
        .flows
        .iter()
        .filter_map(|f| f.samples.back().map(|s| s.t_ms))
        .max()
        .unwrap_or(1_796_033_200_000);
    let now = newest + 60_000;
    let (mut app, _, _) =
        weir::console::spark::open(checkpoints, options(logs, map), unicode(), 3_600_000, now)
            .expect("open");
    app.tick(now);
    app
}

struct Case {
    name: &'static str,
    checkpoints: Vec<&'static str>,
    logs: Vec<&'static str>,
    /// (row, health state, playbook title)
    health: Vec<(&'static str, &'static str)>,
}

fn cases() -> Vec<Case> {
    let c = |name, checkpoints: Vec<&'static str>, logs: Vec<&'static str>, health| Case {
        name,
        checkpoints,
        logs,
        health,
    };
    vec![
        c(
            "windowed_agg",
            vec!["windowed_agg/checkpoint"],
            vec!["windowed_agg/eventlog"],
            vec![("windowed_agg", "healthy")],
        ),
        c(
            "failed_batch_exception",
            vec!["failed_batch/exception/checkpoint"],
            vec!["failed_batch/exception/eventlog"],
            vec![("failed_batch_exception", "sink_unavailable")],
        ),
        c(
            "failed_batch_killed",
            vec!["failed_batch/killed/checkpoint"],
            vec!["failed_batch/killed/eventlog"],
            vec![("failed_batch_killed", "healthy")],
        ),
        c(
            "failed_batch_recovered",
            vec!["failed_batch/recovered/checkpoint"],
            vec!["failed_batch/recovered/eventlog"],
            vec![("failed_batch_recovered", "healthy")],
        ),
        c(
            "rate_progress",
            vec![
                "rate_progress/checkpoint_window",
                "rate_progress/checkpoint_dedup",
                "rate_progress/checkpoint_idle",
            ],
            vec!["rate_progress/eventlog/local-1796033672291"],
            vec![
                ("rate_window", "healthy"),
                ("rate_dedup", "healthy"),
                ("idle_file", "healthy"),
            ],
        ),
        c(
            "rolling_eventlog",
            vec!["rolling_eventlog/checkpoint"],
            vec!["rolling_eventlog/eventlog"],
            // A rate query stopped by its script (QueryTerminatedEvent without exception),
            // read across the rolled zstd files: healthy, Spark's healthy playbook.
            vec![("rolling_rate", "healthy")],
        ),
        c(
            "dedup_stateful",
            vec![
                "dedup_stateful/hdfs_dropdup/checkpoint",
                "dedup_stateful/hdfs_within_wm/checkpoint",
            ],
            vec!["dedup_stateful/eventlog"],
            // Both HDFS-store dedups ran to their no-data batch 8 (state eviction) and
            // stopped cleanly; the log's RocksDB applications are other queries, ignored.
            vec![
                ("dedup_stateful_hdfs_dropdup", "healthy"),
                ("dedup_stateful_hdfs_within_wm", "healthy"),
            ],
        ),
        c(
            "join_rocksdb",
            vec!["join_rocksdb/checkpoint"],
            vec!["join_rocksdb/eventlog"],
            vec![("ad_clicks", "healthy")],
        ),
        c(
            "session_window",
            vec!["session_window/checkpoint"],
            vec!["session_window/eventlog"],
            vec![("sessions", "healthy")],
        ),
        c(
            "tws",
            vec!["tws/checkpoint"],
            vec!["tws/eventlog"],
            vec![("plant_counter", "healthy")],
        ),
        c(
            "dedup_v2",
            vec!["dedup_v2/checkpoint"],
            vec!["dedup_v2/eventlog"],
            vec![("dedup_v2", "healthy")],
        ),
        c(
            "named_sources",
            vec!["named_sources/checkpoint"],
            vec!["named_sources/eventlog"],
            vec![("named_union", "healthy")],
        ),
        c(
            "incompatible",
            vec![
                "incompatible/agg_fn_change/checkpoint",
                "incompatible/add_stateful_operator/checkpoint",
            ],
            vec!["incompatible/eventlog"],
            vec![
                ("agg_fn_change", "checkpoint_incompatible"),
                ("add_stateful_operator", "checkpoint_incompatible"),
            ],
        ),
        c(
            "delta_sink",
            vec!["delta_sink/checkpoint_rate", "delta_sink/checkpoint_delta"],
            vec!["delta_sink/eventlog"],
            vec![("rate_to_delta", "healthy"), ("delta_to_delta", "healthy")],
        ),
        c(
            "failures",
            vec![
                "failures/sink_unavailable/checkpoint",
                "failures/schema_failfast/checkpoint",
            ],
            vec!["failures/eventlog"],
            vec![
                ("sink_unavailable", "sink_unavailable"),
                ("schema_failfast", "schema_mismatch"),
            ],
        ),
    ]
}

fn health_of(app: &App, row: &str) -> String {
    let f = app.flows.iter().find(|f| f.name == row).unwrap_or_else(|| {
        panic!(
            "no row {row}; rows: {:?}",
            app.flows.iter().map(|f| &f.name).collect::<Vec<_>>()
        )
    });
    f.health
        .as_ref()
        .map_or("-".to_string(), |h| h.state.to_string())
}

fn snapshots(name: &str, app: App) {
    let flows: Vec<String> = app.flows.iter().map(|f| f.name.clone()).collect();
    let mut s = Session::new(app, None);
    for (w, h) in [(80, 24), (120, 40)] {
        insta::assert_snapshot!(format!("spark_{name}_overview_{w}x{h}"), screen(&s, w, h));
    }
    for flow in flows {
        s.act(Action::SelectFlow(flow.clone()));
        for (w, h) in [(80, 24), (120, 40)] {
            insta::assert_snapshot!(
                format!("spark_{name}_{flow}_detail_{w}x{h}"),
                screen(&s, w, h)
            );
        }
        // At 80x24 the panes are one at a time: the history and the timeline too.
        for pane in [Pane::History, Pane::Timeline] {
            s.act(Action::GoPane(pane.index() as u8));
            insta::assert_snapshot!(
                format!("spark_{name}_{flow}_{}_80x24", pane.short()),
                screen(&s, 80, 24)
            );
        }
        s.act(Action::Back);
    }
}

#[test]
fn spark_fixtures_in_the_console_with_health_and_playbooks() {
    for case in cases() {
        let cps: Vec<PathBuf> = case.checkpoints.iter().map(|c| sq(c)).collect();
        let logs: Vec<PathBuf> = case.logs.iter().map(|c| sq(c)).collect();
        let app = spark_app(&cps, &logs, unreachable_map());
        assert_eq!(
            app.flows.len(),
            cps.len(),
            "{}: one row per checkpoint",
            case.name
        );
        for (row, state) in &case.health {
            assert_eq!(health_of(&app, row), *state, "{}: {row}", case.name);
            // The playbook the console opens for it is Spark's, for that state.
            let f = app.flows.iter().find(|f| f.name == *row).unwrap();
            assert!(f.spark);
            let mut a = app.clone();
            a.selected = a.flows.iter().position(|x| x.name == *row).unwrap();
            weir::console::update::update(&mut a, Action::OpenPlaybook);
            let weir::console::app::Overlay::Playbook(view) = &a.overlay else {
                panic!("no playbook overlay");
            };
            let (text, _) = view.rendered(&a);
            assert!(
                text.starts_with(&format!("# {state}")) && text.contains("Spark"),
                "{}: {row}: {}",
                case.name,
                &text[..200.min(text.len())]
            );
            assert!(
                !text.contains("weir run "),
                "Spark playbooks name Spark's commands"
            );
        }
        snapshots(case.name, app);
    }
}

#[test]
fn spark_rolling_eventlog_and_dedup_stateful_health_and_batches() {
    // rolling_eventlog: every rolled file read in order; the last batch, stopped, healthy.
    let app = spark_app(
        &[sq("rolling_eventlog/checkpoint")],
        &[sq("rolling_eventlog/eventlog")],
        unreachable_map(),
    );
    let f = &app.flows[0];
    assert_eq!(f.name, "rolling_rate");
    assert_eq!(f.status.label(), "stopped");
    assert_eq!(f.last_progress.as_ref().unwrap().batch_id, 24);
    // Stopped while batch 25 was planned (offsets/25, no commits/25): pending, re-run at
    // restart; a clean stop all the same.
    assert_eq!(f.batches.pending(), Some(25));
    let h = f.health.as_ref().unwrap();
    assert_eq!(h.state.to_string(), "healthy");
    assert!(h.evidence.reasons.is_empty(), "{:?}", h.evidence.reasons);
    // The rate source: Spark's latestOffset = endOffset in every batch: 0 rows behind.
    assert_eq!(h.evidence.backlog, Some(0));

    // dedup_stateful: two HDFS dedups; the log also holds the RocksDB runs (other
    // applications, named once and ignored).
    let app = spark_app(
        &[
            sq("dedup_stateful/hdfs_dropdup/checkpoint"),
            sq("dedup_stateful/hdfs_within_wm/checkpoint"),
        ],
        &[sq("dedup_stateful/eventlog")],
        unreachable_map(),
    );
    for f in &app.flows {
        assert_eq!(f.status.label(), "stopped", "{}", f.name);
        let last = f.last_progress.as_ref().unwrap();
        assert_eq!(
            last.batch_id, 8,
            "{}: the no-data batch that evicts state",
            f.name
        );
        assert_eq!(last.num_input_rows, 0);
        assert_eq!(f.batches.pending(), None);
        assert_eq!(
            f.health.as_ref().unwrap().state.to_string(),
            "healthy",
            "{}",
            f.name
        );
    }
    let all: String = (0..app.flows.len()).map(|i| timeline(&app, i)).collect();
    let overview = screen(&Session::new(app, None), 200, 40);
    assert!(
        overview.contains("runs none of the attached queries")
            || all.contains("runs none of the attached queries"),
        "{overview}"
    );
}

#[test]
fn spark_failed_queries_show_their_error_class_and_pending_batch() {
    let app = spark_app(
        &[sq("failed_batch/exception/checkpoint")],
        &[sq("failed_batch/exception/eventlog")],
        unreachable_map(),
    );
    let f = &app.flows[0];
    assert_eq!(f.status.label(), "failed");
    assert_eq!(f.batches.pending(), Some(2), "offsets/2 without commits/2");
    let err = f.last_error.as_ref().expect("last error").text.clone();
    assert!(err.contains("FOREACH_BATCH_USER_FUNCTION_ERROR"), "{err}");
    assert!(err.contains("simulated sink failure in batch 2"), "{err}");
    // SIGKILL of the driver: no QueryTerminatedEvent; the log stops: lost, batch 2 pending.
    let app = spark_app(
        &[sq("failed_batch/killed/checkpoint")],
        &[sq("failed_batch/killed/eventlog")],
        unreachable_map(),
    );
    let f = &app.flows[0];
    assert_eq!(f.status.label(), "failed");
    assert_eq!(f.batches.pending(), Some(2));
    assert!(
        f.last_error
            .as_ref()
            .unwrap()
            .text
            .contains("killed or lost"),
        "{:?}",
        f.last_error
    );
    // An incompatible restart: Spark's error class on the timeline and in the verdict.
    let app = spark_app(
        &[sq("incompatible/agg_fn_change/checkpoint")],
        &[sq("incompatible/eventlog")],
        unreachable_map(),
    );
    let h = app.flows[0].health.clone().unwrap();
    assert!(
        h.evidence.reasons[0].contains("STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"),
        "{:?}",
        h.evidence.reasons
    );
}

#[test]
fn spark_lagging_file_source_backlog_from_the_directory_listing() {
    // The input files' modification times are recorded (git does not keep them).
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    std::fs::create_dir_all(&input).unwrap();
    let mtimes: std::collections::BTreeMap<String, i64> =
        serde_json::from_str(&std::fs::read_to_string(sq("lagging/input_mtimes.json")).unwrap())
            .unwrap();
    for (name, ms) in &mtimes {
        let to = input.join(name);
        std::fs::copy(sq(&format!("lagging/input/{name}")), &to).unwrap();
        let f = std::fs::File::options().write(true).open(&to).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_millis(*ms as u64))
            .unwrap();
    }
    let map = PathMap::parse(&[format!(
        "/tmp/weir-spark-gen/lagging/input={}",
        input.display()
    )])
    .unwrap();
    let app = spark_app(&[sq("lagging/checkpoint")], &[sq("lagging/eventlog")], map);
    let f = &app.flows[0];
    let h = f.health.clone().unwrap();
    assert_eq!(h.state.to_string(), "lagging", "{:?}", h.evidence);
    assert!(
        h.evidence.reasons[0].contains("backlog grew"),
        "{:?}",
        h.evidence.reasons
    );
    // Every batch took one file (maxFilesPerTrigger=1), from the source log.
    let last = f.last_progress.as_ref().unwrap();
    assert_eq!(last.weir.num_files, 1);
    // The backlog after the last batch = files that had arrived minus files logged up to it.
    let logged = weir::spark::checkpoint::SparkCheckpoint::at(sq("lagging/checkpoint"))
        .source_log(0, None)
        .unwrap()
        .all_entries()
        .unwrap()
        .iter()
        .filter(|e| e.batch_id <= last.batch_id)
        .count() as u64;
    let start = chrono::DateTime::parse_from_rfc3339(&last.timestamp)
        .unwrap()
        .timestamp_millis();
    let arrived = mtimes.values().filter(|t| **t <= start).count() as u64;
    assert_eq!(
        f.samples.back().unwrap().backlog_files,
        Some(arrived - logged)
    );
    snapshots("lagging", app);
}

#[test]
fn spark_source_directory_removed_while_running_is_source_unavailable() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("f_0000.json"), "{}\n").unwrap();
    let map = PathMap::parse(&[format!(
        "/tmp/weir-spark-gen/lagging/input={}",
        input.display()
    )])
    .unwrap();
    // Listed once while it exists; then it is removed; the next listing finds it gone.
    let mut feed = weir::spark::feed::Feed::open(
        &[sq("lagging/checkpoint")],
        Options {
            event_logs: vec![sq("lagging/eventlog")],
            path_map: map,
            list_every_ms: 0,
            file_clock: false,
            ..Default::default()
        },
        1_796_187_600_000,
        &mut |_| {},
    )
    .unwrap();
    assert_ne!(
        feed.health(0).unwrap().state.to_string(),
        "source_unavailable"
    );
    std::fs::remove_dir_all(&input).unwrap();
    feed.poll(1_796_187_610_000, &mut |_| {});
    let health = feed.health(0).unwrap();
    assert_eq!(health.state.to_string(), "source_unavailable");
    assert!(
        health.evidence.reasons[0].contains("no longer exists"),
        "{:?}",
        health.evidence.reasons
    );
}

#[test]
fn spark_both_progress_renderings_agree() {
    // The listener's progress.json() lines and the event log's QueryProgressEvents of the
    // same runs give the same batches, rows and offsets.
    for (log, listener) in [
        (
            "windowed_agg/eventlog",
            "windowed_agg/progress_round1.jsonl",
        ),
        (
            "rate_progress/eventlog/local-1796033672291",
            "rate_progress/recentProgress_rate_window.jsonl",
        ),
        ("join_rocksdb/eventlog", "join_rocksdb/progress.jsonl"),
        ("dedup_v2/eventlog", "dedup_v2/progress.jsonl"),
    ] {
        let read = |path: PathBuf| {
            let mut out = Vec::new();
            let mut feed = weir::spark::feed::Feed::open(
                &[],
                options(&[path], unreachable_map()),
                4_102_444_800_000,
                &mut |u| {
                    if let weir::spark::feed::Update::Progress { progress, .. } = u {
                        out.push(*progress);
                    }
                },
            )
            .unwrap();
            feed.poll(4_102_444_800_000, &mut |_| {});
            out
        };
        let from_log = read(sq(log));
        let from_listener = read(sq(listener));
        assert!(!from_listener.is_empty(), "{listener}");
        for p in &from_listener {
            let q = from_log
                .iter()
                .find(|q| q.run_id == p.run_id && q.batch_id == p.batch_id)
                .unwrap_or_else(|| panic!("{log}: no batch {} of run {}", p.batch_id, p.run_id));
            assert_eq!(
                q.num_input_rows, p.num_input_rows,
                "{log} batch {}",
                p.batch_id
            );
            assert_eq!(q.batch_duration, p.batch_duration);
            assert_eq!(q.duration_ms, p.duration_ms);
            assert_eq!(q.event_time, p.event_time);
            assert_eq!(q.state_operators, p.state_operators);
            assert_eq!(q.sink, p.sink);
            for (a, b) in q.sources.iter().zip(&p.sources) {
                assert_eq!(a.start_offset, b.start_offset);
                assert_eq!(a.end_offset, b.end_offset);
                assert_eq!(a.num_input_rows, b.num_input_rows);
                // Rates: full precision in the log, one decimal in json().
                assert!((a.processed_rows_per_second - b.processed_rows_per_second).abs() < 0.051);
            }
        }
    }
}

fn python() -> Option<String> {
    for p in ["python3", "python"] {
        if std::process::Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(p.to_string());
        }
    }
    None
}

#[test]
fn spark_inspect_json_matches_an_independent_reader() {
    let Some(py) = python() else {
        panic!("python3 is needed for the inspect oracle (the CI script installs it)");
    };
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spark/oracle.py");
    for cp in [
        "windowed_agg/checkpoint",
        "failed_batch/exception/checkpoint",
        "failed_batch/recovered/checkpoint",
        "rate_progress/checkpoint_window",
        "rate_progress/checkpoint_dedup",
        "rolling_eventlog/checkpoint",
        "dedup_stateful/hdfs_dropdup/checkpoint",
        "dedup_stateful/hdfs_within_wm/checkpoint",
        "join_rocksdb/checkpoint",
        "session_window/checkpoint",
        "tws/checkpoint",
        "dedup_v2/checkpoint",
        "named_sources/checkpoint",
        "lagging/checkpoint",
        "delta_sink/checkpoint_rate",
        "delta_sink/checkpoint_delta",
    ] {
        let dir = sq(cp);
        let out = weir()
            .args(["inspect", "--json"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cp}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let o = std::process::Command::new(&py)
            .arg(&oracle)
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(w["engine"], "spark");
        for key in [
            "query_id",
            "last_batch_id",
            "last_committed_batch_id",
            "pending_batch_id",
            "watermark_ms",
            "next_watermark_ms",
            "offset_log_version",
            "shuffle_partitions",
        ] {
            assert_eq!(w[key], o[key], "{cp}: {key}");
        }
        assert_eq!(
            w["batches"].as_array().unwrap().len() as u64,
            o["batches"].as_u64().unwrap(),
            "{cp}"
        );
        let ws = w["sources"].as_array().unwrap();
        for (i, os) in o["sources"].as_array().unwrap().iter().enumerate() {
            let s = &ws[i];
            for key in ["name", "kind", "latest_offset", "committed_offset"] {
                assert_eq!(s[key], os[key], "{cp}: sources[{i}].{key}");
            }
            if !os["files"].is_null() {
                assert_eq!(s["log"]["files"], os["files"], "{cp}: sources[{i}] files");
            }
        }
        let wo = w["state_operators"].as_array().unwrap();
        let oo = o["state_operators"].as_array().unwrap();
        assert_eq!(wo.len(), oo.len(), "{cp}: operators");
        for (a, b) in wo.iter().zip(oo) {
            for key in [
                "operator_id",
                "operator_name",
                "store_format",
                "checkpoint_format_version",
                "min_version",
                "max_version",
            ] {
                assert_eq!(a[key], b[key], "{cp}: state {key}");
            }
            let parts: std::collections::BTreeSet<u64> = a["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["partition"].as_u64().unwrap())
                .collect();
            assert_eq!(
                parts.len() as u64,
                b["partitions"].as_u64().unwrap(),
                "{cp}"
            );
        }
        assert!(
            w["problems"].as_array().unwrap().is_empty(),
            "{cp}: {}",
            w["problems"]
        );
    }
}

#[test]
fn spark_inspect_names_the_pending_batch_and_text_form() {
    let out = weir()
        .arg("inspect")
        .arg(sq("failed_batch/exception/checkpoint"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("offsets/2 without commits/2: Spark re-runs batch 2 on restart"),
        "{text}"
    );
    assert!(text.contains("(Apache Spark)"), "{text}");
    // diff: two batches of one checkpoint.
    let out = weir()
        .arg("diff")
        .arg(sq("windowed_agg/checkpoint"))
        .args(["--batches", "1", "5"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "differences: exit 1\n{text}");
    assert!(
        text.contains("source 0 end offset  {\"logOffset\":1} -> {\"logOffset\":5}"),
        "{text}"
    );
    let out = weir()
        .args(["diff", "--json"])
        .arg(sq("windowed_agg/checkpoint"))
        .arg(sq("windowed_agg/checkpoint"))
        .output()
        .unwrap();
    assert!(out.status.success(), "a checkpoint equals itself");
}

/// The error class in Spark's text (`[CLASS] ...` after `terminated with exception:`).
fn spark_class(error: &str) -> Option<String> {
    let inner = error
        .split_once("terminated with exception: ")
        .map_or(error, |(_, r)| r);
    let head = inner.lines().next().unwrap_or("");
    let head = head
        .split_once("Failed to read log file")
        .map_or(head, |(_, r)| r);
    weir::spark::errors::class_in(head)
}

#[test]
fn spark_check_predicts_what_spark_said_at_restart() {
    let root = sq("restart_checks");
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for e in std::fs::read_dir(&root).unwrap() {
        let dir = e.unwrap().path();
        let damage = dir.join("damage.json");
        let cp = if damage.is_file() {
            // A copy of the base checkpoint, damaged as the generator damaged it.
            let name = dir.file_name().unwrap();
            let cp = tmp.path().join(name);
            damaged_copy(&root, &damage, &cp);
            cp
        } else {
            dir.join("checkpoint")
        };
        if !cp.is_dir() {
            continue;
        }
        seen += 1;
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let spark_error = std::fs::read_to_string(dir.join("error.txt")).ok();
        // The queries' progress records name their stateful operators (a deleted state/
        // directory is not visible in the files alone).
        let out = weir()
            .args(["check", "--json", "--event-log"])
            .arg(root.join("progress.jsonl"))
            .arg(&cp)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{name}: {}", String::from_utf8_lossy(&out.stderr)));
        let compatible = v["compatible"].as_bool().unwrap();
        match &spark_error {
            None => {
                assert!(compatible, "{name}: Spark restarted fine; weir says {v:#}");
                assert_eq!(out.status.code(), Some(0));
            }
            Some(text) => {
                assert!(
                    !compatible,
                    "{name}: Spark failed ({text}); weir says compatible"
                );
                assert_eq!(out.status.code(), Some(1));
                let predicted: Vec<Option<String>> = v["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["spark_error_class"].as_str().map(str::to_string))
                    .collect();
                let actual = spark_class(text);
                assert!(
                    predicted.contains(&actual),
                    "{name}: Spark raised {actual:?}; weir predicted {predicted:?}\n{text}"
                );
                assert_eq!(v["playbook"], "checkpoint_incompatible");
            }
        }
    }
    assert!(seen >= 10, "restart scenarios: {seen}");
}

/// `damage.json` of a restart scenario (written by `gen/cases.py`): the base checkpoint
/// it starts from and the damage done (`rm`, `truncate` to N characters,
/// `set_first_line`), applied to a copy at `to`.
fn damaged_copy(root: &Path, damage: &Path, to: &Path) {
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(damage).unwrap()).unwrap();
    copy_dir(&root.join(spec["base"].as_str().unwrap()), to);
    for op in spec["damage"].as_array().unwrap() {
        let path = to.join(op[1].as_str().unwrap());
        match op[0].as_str().unwrap() {
            "rm" if path.is_dir() => std::fs::remove_dir_all(&path).unwrap(),
            "rm" => std::fs::remove_file(&path).unwrap(),
            "truncate" => {
                let text = std::fs::read_to_string(&path).unwrap();
                let keep = op[2].as_u64().unwrap() as usize;
                std::fs::write(&path, &text[..keep.min(text.len())]).unwrap();
            }
            "set_first_line" => {
                let text = std::fs::read_to_string(&path).unwrap();
                let rest = text.split_once('\n').map_or("", |(_, r)| r);
                std::fs::write(&path, format!("{}\n{rest}", op[2].as_str().unwrap())).unwrap();
            }
            other => panic!("{}: unknown damage {other}", damage.display()),
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

fn timeline(app: &App, row: usize) -> String {
    app.flows[row]
        .timeline
        .iter()
        .map(|e| e.text.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn spark_malformed_input_is_named_and_the_rest_shown() {
    let tmp = tempfile::tempdir().unwrap();
    // 1. A truncated zstd frame in a finished application's rolling log.
    let log = tmp.path().join("truncated");
    copy_dir(
        &sq("windowed_agg/eventlog/eventlog_v2_local-1796033239533"),
        &log,
    );
    let events = log.join("events_1_local-1796033239533.zstd");
    let bytes = std::fs::read(&events).unwrap();
    std::fs::write(&events, &bytes[..bytes.len() - 60]).unwrap();
    let app = spark_app(
        &[sq("windowed_agg/checkpoint")],
        std::slice::from_ref(&log),
        unreachable_map(),
    );
    let t = timeline(&app, 0);
    assert!(t.contains("ends inside a zstd frame"), "{t}");
    assert!(t.contains("the file was cut short"), "{t}");
    assert!(
        !app.flows[0].samples.is_empty() && t.contains("starting"),
        "the rest is shown:\n{t}"
    );
    // 2. A half-written last line, an unknown event type and a line that is not an event,
    //    in a finished legacy (uncompressed) log.
    let legacy = tmp.path().join("local-1796033672291");
    let mut text =
        std::fs::read_to_string(sq("rate_progress/eventlog/local-1796033672291")).unwrap();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut damaged = String::new();
    for (i, l) in lines.iter().enumerate() {
        damaged.push_str(l);
        damaged.push('\n');
        if i == 3 {
            damaged.push_str("{\"Event\":\"org.apache.spark.sql.streaming.StreamingQueryListener$QueryRewoundEvent\",\"id\":\"x\"}\n");
            damaged.push_str("garbage that is not json\n");
        }
    }
    damaged.push_str("{\"Event\":\"org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent\",\"progress\":{\"id\":\"9aea");
    std::fs::write(&legacy, damaged).unwrap();
    let app = spark_app(
        &[sq("rate_progress/checkpoint_window")],
        std::slice::from_ref(&legacy),
        unreachable_map(),
    );
    let t = timeline(&app, 0);
    assert!(
        t.contains("unknown streaming event type \"QueryRewoundEvent\""),
        "{t}"
    );
    assert!(t.contains("not a Spark listener event"), "{t}");
    assert!(t.contains("half-written line"), "{t}");
    assert_eq!(
        app.flows[0].samples.back().unwrap().batch_id,
        14,
        "the rest is shown:\n{t}"
    );
    // 3. A checkpoint written by a future Spark (offsets v99).
    let cp = tmp.path().join("future");
    copy_dir(&sq("windowed_agg/checkpoint"), &cp);
    let off = cp.join("offsets/5");
    let body = std::fs::read_to_string(&off).unwrap();
    std::fs::write(&off, body.replacen("v1", "v99", 1)).unwrap();
    let out = weir()
        .args(["inspect", "--json"])
        .arg(&cp)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = v["problems"].to_string();
    assert!(
        problems.contains("offsets/5") && problems.contains("v99"),
        "{problems}"
    );
    assert!(
        problems.contains("INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION"),
        "{problems}"
    );
    assert_eq!(v["last_batch_id"], 5, "the rest is read");
    let app = spark_app(
        std::slice::from_ref(&cp),
        &[sq("windowed_agg/eventlog")],
        unreachable_map(),
    );
    assert_eq!(health_of(&app, "windowed_agg"), "checkpoint_incompatible");
    // 4. Another application's event log.
    let app = spark_app(
        &[sq("windowed_agg/checkpoint")],
        &[sq("failed_batch/exception/eventlog")],
        unreachable_map(),
    );
    let notices: Vec<String> = weir::console::app::merged_events(&app, i64::MAX, 100)
        .iter()
        .map(|e| e.text.clone())
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("runs none of the attached queries")
                && n.contains("failed_batch_exception")),
        "{notices:?}"
    );
    assert!(app.flows[0].samples.is_empty());
}

#[test]
fn spark_attach_refuses_missing_paths_with_a_clear_message() {
    let out = weir()
        .args(["attach", "--spark", "/nonexistent/checkpoint"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such checkpoint directory"));
    let out = weir()
        .args(["attach", "--event-log", "/nonexistent/log"])
        .arg(sq("windowed_agg/checkpoint"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such event log"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One zstd frame per line, as a flushing writer leaves them.
fn zstd_frames(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend(zstd::encode_all(format!("{l}\n").as_bytes(), 3).unwrap());
    }
    out
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn spark_follows_a_rolling_zstd_log_as_it_grows_rolls_ends_and_restarts() {
    // The events of rate_progress (three queries in one application), rewritten as the
    // rolling zstd layout of a running application and handed to the feed in steps: a
    // torn frame, the rest of events_1, a roll to events_2, the application's end, then
    // a restart of one query as a new application in the same spark.eventLog.dir.
    let text = std::fs::read_to_string(sq("rate_progress/eventlog/local-1796033672291")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let terminated = lines
        .iter()
        .position(|l| l.contains("QueryTerminatedEvent"))
        .unwrap();
    let half = terminated / 2;
    let batches_in = |ls: &[&str]| -> Vec<u64> {
        ls.iter()
            .filter(|l| l.contains("QueryProgressEvent") && l.contains("\"name\":\"rate_window\""))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["progress"]["batchId"].as_u64().unwrap()
            })
            .collect()
    };
    let tmp = tempfile::tempdir().unwrap();
    let events = tmp.path().join("spark-events");
    let app = "local-1796033672291";
    let dir = events.join(format!("eventlog_v2_{app}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("appstatus_{app}.inprogress")), "").unwrap();
    let events_1 = dir.join(format!("events_1_{app}.zstd"));
    let events_2 = dir.join(format!("events_2_{app}.zstd"));
    let torn = zstd_frames(&lines[half..half + 1]);
    append(&events_1, &zstd_frames(&lines[..half]));
    append(&events_1, &torn[..torn.len() / 2]);

    let cps = [
        sq("rate_progress/checkpoint_window"),
        sq("rate_progress/checkpoint_dedup"),
        sq("rate_progress/checkpoint_idle"),
    ];
    let seen = std::cell::RefCell::new(Vec::<(usize, u64)>::new());
    let statuses = std::cell::RefCell::new(Vec::<(usize, String)>::new());
    let problems = std::cell::RefCell::new(Vec::<String>::new());
    let mut out = |u: weir::spark::feed::Update| match u {
        weir::spark::feed::Update::Progress { query, progress } => {
            seen.borrow_mut().push((query, progress.batch_id))
        }
        weir::spark::feed::Update::Status { query, status, .. } => statuses
            .borrow_mut()
            .push((query, status.label().to_string())),
        weir::spark::feed::Update::Note {
            kind: weir::spark::feed::NoteKind::Problem,
            text,
            ..
        } => problems.borrow_mut().push(text),
        _ => {}
    };
    let opts = Options {
        event_logs: vec![events.clone()],
        path_map: unreachable_map(),
        stale_after_ms: i64::MAX / 4,
        list_every_ms: 0,
        file_clock: false,
        ..Default::default()
    };
    let window = |seen: &Vec<(usize, u64)>| -> Vec<u64> {
        seen.iter()
            .filter(|(q, _)| *q == 0)
            .map(|(_, b)| *b)
            .collect()
    };
    let mut now = 1_796_033_700_000;
    let mut feed = weir::spark::feed::Feed::open(&cps, opts, now, &mut out).unwrap();
    // 1. The complete frames are read; the torn one waits (the file may still grow).
    assert!(!batches_in(&lines[..half]).is_empty());
    assert_eq!(window(&seen.borrow()), batches_in(&lines[..half]));
    assert!(problems.borrow().is_empty(), "{:?}", problems.borrow());
    let last = |statuses: &Vec<(usize, String)>, q: usize| {
        statuses
            .iter()
            .rev()
            .find(|(i, _)| *i == q)
            .map(|(_, s)| s.clone())
    };
    assert_eq!(last(&statuses.borrow(), 0).as_deref(), Some("idle"));
    // 2. The rest of the frame and of events_1, then Spark rolls to events_2.
    let mid = (half + 1 + terminated) / 2;
    append(&events_1, &torn[torn.len() / 2..]);
    append(&events_1, &zstd_frames(&lines[half + 1..mid]));
    append(&events_2, &zstd_frames(&lines[mid..terminated]));
    now += 1_000;
    feed.poll(now, &mut out);
    assert_eq!(window(&seen.borrow()), batches_in(&lines[..terminated]));
    assert!(problems.borrow().is_empty(), "{:?}", problems.borrow());
    assert_eq!(
        feed.last_progress(0).unwrap().batch_id,
        *batches_in(&lines).last().unwrap()
    );
    // 3. The queries terminate and the application ends.
    append(&events_2, &zstd_frames(&lines[terminated..]));
    std::fs::rename(
        dir.join(format!("appstatus_{app}.inprogress")),
        dir.join(format!("appstatus_{app}")),
    )
    .unwrap();
    now += 1_000;
    feed.poll(now, &mut out);
    for q in 0..3 {
        assert_eq!(
            last(&statuses.borrow(), q).as_deref(),
            Some("stopped"),
            "row {q}"
        );
    }
    // 4. rate_window restarts: a new application in the same directory, a new run id,
    //    its next batch.
    let started = lines
        .iter()
        .find(|l| l.contains("QueryStartedEvent") && l.contains("rate_window"))
        .unwrap();
    let last_progress = lines
        .iter()
        .rev()
        .find(|l| l.contains("QueryProgressEvent") && l.contains("\"name\":\"rate_window\""))
        .unwrap();
    let mut p: serde_json::Value = serde_json::from_str(last_progress).unwrap();
    let old_run = p["progress"]["runId"].as_str().unwrap().to_string();
    let new_run = "00000000-0000-4000-8000-000000000001";
    let next = p["progress"]["batchId"].as_u64().unwrap() + 1;
    p["progress"]["batchId"] = next.into();
    p["progress"]["runId"] = new_run.into();
    let restart_app = "local-1796033999999";
    let rdir = events.join(format!("eventlog_v2_{restart_app}"));
    std::fs::create_dir_all(&rdir).unwrap();
    std::fs::write(rdir.join(format!("appstatus_{restart_app}.inprogress")), "").unwrap();
    let p = p.to_string();
    let started = started.replace(&old_run, new_run);
    append(
        &rdir.join(format!("events_1_{restart_app}.zstd")),
        &zstd_frames(&[lines[0], &started, &p]),
    );
    now += 1_000;
    feed.poll(now, &mut out);
    assert_eq!(feed.last_progress(0).unwrap().batch_id, next);
    assert_eq!(feed.last_progress(0).unwrap().run_id, new_run);
    assert_eq!(last(&statuses.borrow(), 0).as_deref(), Some("idle"));
    assert_eq!(last(&statuses.borrow(), 1).as_deref(), Some("stopped"));
    assert!(problems.borrow().is_empty(), "{:?}", problems.borrow());
}

#[test]
fn spark_delta_sink_inspect_attach_and_the_sink_tables_transactions() {
    // `weir inspect`: the Delta source's offsets (reservoirVersion/index) and the batch
    // Spark re-runs at restart (both queries were stopped mid-batch).
    let inspect = |cp: &str| -> serde_json::Value {
        let out = weir()
            .args(["inspect", "--json"])
            .arg(sq(cp))
            .output()
            .unwrap();
        assert!(out.status.success(), "{cp}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let d = inspect("delta_sink/checkpoint_delta");
    assert_eq!(d["engine"], "spark");
    assert_eq!(d["last_committed_batch_id"], 5);
    assert_eq!(d["pending_batch_id"], 6);
    assert_eq!(d["sources"][0]["kind"], "delta");
    assert_eq!(d["sources"][0]["committed_offset"]["reservoirVersion"], 6);
    assert_eq!(d["sources"][0]["committed_offset"]["index"], -1);
    let r = inspect("delta_sink/checkpoint_rate");
    assert_eq!(r["sources"][0]["kind"], "rate");
    assert_eq!(r["last_committed_batch_id"], 4);
    assert_eq!(r["pending_batch_id"], 5);

    // The console: one row per query, named by the queries, DeltaSink as the sink, the
    // batch ids of the checkpoints, and health.
    let app = spark_app(
        &[
            sq("delta_sink/checkpoint_rate"),
            sq("delta_sink/checkpoint_delta"),
        ],
        &[sq("delta_sink/eventlog")],
        unreachable_map(),
    );
    for (row, table, committed, pending) in [
        ("rate_to_delta", "sink_rate", 4u64, 5u64),
        ("delta_to_delta", "sink_delta", 5, 6),
    ] {
        let f = app.flows.iter().find(|f| f.name == row).unwrap();
        let last = f.last_progress.as_ref().expect("progress");
        assert_eq!(last.batch_id, committed, "{row}");
        assert!(
            last.sink
                .description
                .starts_with("DeltaSink[/tmp/weir-spark-gen/delta_sink/"),
            "{row}: {}",
            last.sink.description
        );
        assert_eq!(
            f.sink_path.as_deref(),
            Some(Path::new(&format!(
                "/nonexistent/weir-test/delta_sink/{table}"
            ))),
            "{row}: the sink path through --path-map"
        );
        assert_eq!(f.batches.pending(), Some(pending), "{row}");
        assert_eq!(health_of(&app, row), "healthy", "{row}");
        // The Delta sink's own log: each commit's `txn` is (query id, batch id); the last
        // is the checkpoint's last committed batch.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let facts = rt
            .block_on(weir::delta::table_facts(&sq(&format!(
                "delta_sink/{table}"
            ))))
            .unwrap()
            .expect("a Delta table");
        let query_id = std::fs::read_to_string(
            sq(&format!(
                "delta_sink/checkpoint_{}",
                if table == "sink_rate" {
                    "rate"
                } else {
                    "delta"
                }
            ))
            .join("metadata"),
        )
        .unwrap();
        let (app_id, version) = facts.transactions[0].clone();
        assert!(
            query_id.contains(&app_id),
            "{row}: txn appId is the query id"
        );
        assert_eq!(
            version as u64, committed,
            "{row}: txn version = last committed batch"
        );
    }
    // The rate source: Spark's latestOffset equals the batch's endOffset: 0 rows behind.
    let f = app
        .flows
        .iter()
        .find(|f| f.name == "rate_to_delta")
        .unwrap();
    let s = f.samples.back().unwrap();
    assert_eq!(
        (s.backlog, s.backlog_unit),
        (Some(0), Some(weir::records::BacklogUnit::Rows))
    );
    // OSS Delta 4.4 records no latestOffset for its source: the backlog is unknown, not 0.
    let f = app
        .flows
        .iter()
        .find(|f| f.name == "delta_to_delta")
        .unwrap();
    assert_eq!(f.samples.back().unwrap().backlog, None);
}

#[test]
fn spark_kafka_and_delta_backlog_from_latest_offset_in_the_console_and_health() {
    // A listener file of a Kafka query falling behind: Spark's latestOffset runs ahead of
    // each batch's endOffset (real shape: progress.json() of a KafkaV2 source).
    let tmp = tempfile::tempdir().unwrap();
    let mut lines = String::new();
    for b in 0..6u64 {
        let end = 1000 * (b + 1);
        let latest = end + 400 * (b + 1);
        lines.push_str(&format!(
            concat!(
                r#"{{"id":"4b8b4c4e-54c5-4a59-9b1d-5f0c0a2d1e01","runId":"1d5c7a5e-3b0c-4f5e-8d7f-0a1b2c3d4e5f","name":"orders_kafka","#,
                r#""timestamp":"2026-12-01T10:00:{:02}.000Z","batchId":{},"batchDuration":900,"numInputRows":2000,"#,
                r#""inputRowsPerSecond":2000.0,"processedRowsPerSecond":2222.2,"durationMs":{{"triggerExecution":900}},"#,
                r#""stateOperators":[],"sources":[{{"description":"KafkaV2[Subscribe[orders]]","#,
                r#""startOffset":{{"orders":{{"0":{},"1":{}}}}},"endOffset":{{"orders":{{"0":{},"1":{}}}}},"#,
                r#""latestOffset":{{"orders":{{"0":{},"1":{}}}}},"numInputRows":2000,"#,
                r#""inputRowsPerSecond":2000.0,"processedRowsPerSecond":2222.2}}],"#,
                r#""sink":{{"description":"DeltaSink[s3://lake/orders]","numOutputRows":-1}}}}"#,
                "\n"
            ),
            b * 10,
            b,
            end - 1000,
            end - 1000,
            end,
            end,
            latest,
            latest,
        ));
    }
    let path = tmp.path().join("progress.jsonl");
    std::fs::write(&path, lines).unwrap();
    let app = spark_app(&[], &[path], unreachable_map());
    let f = &app.flows[0];
    let s = f.samples.back().unwrap();
    // Batch 5: two partitions, 2400 behind each.
    assert_eq!(
        (s.backlog, s.backlog_unit),
        (Some(4800), Some(weir::records::BacklogUnit::Offsets))
    );
    let h = f.health.as_ref().unwrap();
    assert_eq!(h.state.to_string(), "lagging");
    assert_eq!(h.evidence.backlog, Some(4800));
    assert!(
        h.evidence.reasons.iter().any(|r| r.contains(
            "backlog grew from 1600 to 4800 Kafka offsets behind the latest over the last 5 batches"
        )),
        "{:?}",
        h.evidence.reasons
    );
    // The overview and the backlog pane say it in offsets.
    let mut s = Session::new(app, None);
    let overview = screen(&s, 120, 40);
    assert!(overview.contains("4.8k offsets"), "{overview}");
    s.act(Action::SelectFlow("orders_kafka".into()));
    s.act(Action::GoPane(Pane::Backlog.index() as u8));
    let pane = screen(&s, 120, 40);
    assert!(
        pane.contains("behind the latest offset after batch 5: 4800 offsets"),
        "{pane}"
    );
}

#[test]
fn spark_checkpoint_is_recognised_without_dash_dash_spark() {
    // inspect: Spark's reader for `metadata` + `offsets/` without `_weir/`.
    let out = weir()
        .args(["inspect", "--json"])
        .arg(sq("windowed_agg/checkpoint"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "spark");
    // The same directory with a `_weir/` is weir's own checkpoint: not Spark's reader.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("cp");
    copy_dir(&sq("windowed_agg/checkpoint"), &copy);
    assert!(weir::spark::is_spark_checkpoint(&copy));
    std::fs::create_dir_all(copy.join("_weir")).unwrap();
    assert!(!weir::spark::is_spark_checkpoint(&copy));
    let out = weir()
        .args(["inspect", "--json"])
        .arg(&copy)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_ne!(
        v["engine"],
        "spark",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // attach, in a terminal, without --spark and without --event-log: the Spark console,
    // with the event log found through $SPARK_CONF_DIR/spark-defaults.conf.
    if !crate::console::Tmux::available() {
        panic!("tmux is needed (the CI script installs it)");
    }
    let conf = tmp.path().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let events = std::path::absolute(sq("windowed_agg/eventlog")).unwrap();
    std::fs::write(
        conf.join("spark-defaults.conf"),
        format!(
            "spark.eventLog.enabled true\nspark.eventLog.dir file:{}\n",
            events.display()
        ),
    )
    .unwrap();
    let cp = std::path::absolute(sq("windowed_agg/checkpoint")).unwrap();
    let t = crate::console::Tmux::start(
        "autodetect",
        120,
        40,
        tmp.path(),
        &format!(
            "SPARK_CONF_DIR={} {} attach {}",
            conf.display(),
            crate::console::weir_bin(),
            cp.display()
        ),
    );
    // The row of the query with its last batch, and the event log's events: found
    // through spark-defaults.conf.
    t.wait_for(
        "the Spark query's row",
        std::time::Duration::from_secs(30),
        |s| {
            s.contains("weir attach (read-only) · spark:")
                && s.lines()
                    .any(|l| l.contains("windowed_agg") && l.contains(" 5 "))
                && s.contains("QueryTerminatedEvent")
        },
    );
    let screen = t.capture();
    assert!(!screen.contains("WEIR-EXITED"), "{screen}");
}

/// The console after a progressive load: opened with a zero read budget (one step of the
/// event logs per poll), then stepped as `attach --spark`'s follower steps until the whole
/// history is read. Returns the app and the number of polls after `open`.
fn progressive_app(checkpoints: &[PathBuf], opts: Options, now: i64) -> (App, usize) {
    let opts = Options {
        read_budget: Some(std::time::Duration::ZERO),
        ..opts
    };
    let (mut app, mut feed, mut names) =
        weir::console::spark::open(checkpoints, opts, unicode(), 3_600_000, now).expect("open");
    let mut loading = feed.loading();
    assert_eq!(app.loading, loading);
    let mut polls = 0;
    while loading.is_some() {
        polls += 1;
        assert!(polls < 10_000, "the history never finished loading");
        weir::console::spark::step(&mut feed, &mut names, &mut loading, now, &mut |r| {
            app.ingest(r);
            true
        });
    }
    assert_eq!(app.loading, None);
    app.tick(now);
    (app, polls)
}

#[test]
fn spark_progressive_load_reaches_the_same_console_as_reading_the_logs_whole() {
    // Every fixture (one application, several, rolled files, a directory of applications,
    // none matching): loaded step by step, the console ends where the synchronous load is.
    for case in cases() {
        let cps: Vec<PathBuf> = case.checkpoints.iter().map(|c| sq(c)).collect();
        let logs: Vec<PathBuf> = case.logs.iter().map(|c| sq(c)).collect();
        let whole = spark_app(&cps, &logs, unreachable_map());
        let (stepped, _) = progressive_app(&cps, options(&logs, unreachable_map()), whole.now_ms);
        assert_eq!(
            format!("{:?}", stepped.flows),
            format!("{:?}", whole.flows),
            "{}",
            case.name
        );
        let (a, b) = (Session::new(whole, None), Session::new(stepped, None));
        assert_eq!(screen(&a, 120, 40), screen(&b, 120, 40), "{}", case.name);
    }
}

#[test]
fn spark_first_frame_is_drawn_before_a_long_event_log_is_read() {
    // A checkpoint of 5,000 batches and a rolling zstd log of their 5,000 progress events
    // (one frame per event, as a flushing writer leaves them), in the shapes of
    // rate_progress. The first frame: the query's name, the checkpoint's last batch, the
    // history loading, no health verdict yet; then the same console as a whole read.
    const BATCHES: u64 = 5_000;
    const T0: i64 = 1_796_000_000_000;
    const APP_ID: &str = "local-1796000000000";
    let text = std::fs::read_to_string(sq("rate_progress/eventlog/local-1796033672291")).unwrap();
    let line_of = |needle: &str| -> serde_json::Value {
        let l = text
            .lines()
            .find(|l| l.contains(needle) && l.contains("\"rate_window\""))
            .unwrap();
        serde_json::from_str(l).unwrap()
    };
    let started = line_of("QueryStartedEvent");
    let progress = line_of("QueryProgressEvent");
    let id = progress["progress"]["id"].as_str().unwrap().to_string();
    let iso = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };

    let tmp = tempfile::tempdir().unwrap();
    let cp = tmp.path().join("rate_window").join("checkpoint");
    for d in ["offsets", "commits", "sources/0"] {
        std::fs::create_dir_all(cp.join(d)).unwrap();
    }
    std::fs::write(cp.join("metadata"), format!("{{\"id\":\"{id}\"}}")).unwrap();
    std::fs::write(cp.join("sources/0/0"), format!("v1\n{T0}")).unwrap();
    let log_dir = tmp
        .path()
        .join("events")
        .join(format!("eventlog_v2_{APP_ID}"));
    std::fs::create_dir_all(&log_dir).unwrap();
    std::fs::write(log_dir.join(format!("appstatus_{APP_ID}.inprogress")), "").unwrap();
    let mut lines = vec![
        format!(r#"{{"Event":"SparkListenerLogStart","Spark Version":"4.3.0"}}"#),
        format!(
            r#"{{"Event":"SparkListenerApplicationStart","App Name":"t","App ID":"{APP_ID}","Timestamp":{T0},"User":"t"}}"#
        ),
    ];
    let mut s = started.clone();
    s["timestamp"] = iso(T0).into();
    lines.push(s.to_string());
    for b in 0..BATCHES {
        let ts = T0 + b as i64 * 1000;
        std::fs::write(
            cp.join("offsets").join(b.to_string()),
            format!(
                "v1\n{{\"batchWatermarkMs\":0,\"batchTimestampMs\":{ts},\"conf\":{{}}}}\n{}",
                b * 2 + 2
            ),
        )
        .unwrap();
        std::fs::write(
            cp.join("commits").join(b.to_string()),
            "v1\n{\"nextBatchWatermarkMs\":0}",
        )
        .unwrap();
        let mut p = progress.clone();
        p["progress"]["batchId"] = b.into();
        p["progress"]["timestamp"] = iso(ts).into();
        lines.push(p.to_string());
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    std::fs::write(
        log_dir.join(format!("events_1_{APP_ID}.zstd")),
        zstd_frames(&refs),
    )
    .unwrap();

    let now = T0 + BATCHES as i64 * 1000 + 60_000;
    let opts = Options {
        stale_after_ms: i64::MAX / 4,
        ..options(&[tmp.path().join("events")], unreachable_map())
    };
    let cps = [cp.clone()];
    let last = (BATCHES - 1).to_string();

    // The first frame, as `attach --spark` draws it.
    let (first, mut feed, mut names) = weir::console::spark::open(
        &cps,
        Options {
            read_budget: Some(std::time::Duration::ZERO),
            ..opts.clone()
        },
        unicode(),
        3_600_000,
        now,
    )
    .unwrap();
    let pct = first.loading.expect("the history is still loading");
    assert!(pct < 100);
    let f = &first.flows[0];
    assert_eq!(
        f.name, "rate_window",
        "the query's name, from its start event"
    );
    assert_eq!(f.batches.last_committed, Some(BATCHES - 1));
    let read = f.samples.back().map(|s| s.batch_id).expect("some history");
    assert!(
        read < BATCHES - 1,
        "only the start of the log is read: {read}"
    );
    assert!(f.health.is_none(), "no verdict on part of the history");
    let mut frame = Session::new(first.clone(), None);
    frame.tick(now);
    let shown = screen(&frame, 120, 40);
    assert!(shown.contains("rate_window"), "{shown}");
    assert!(
        shown.contains(&last),
        "the checkpoint's last batch:\n{shown}"
    );
    assert!(
        shown.contains(&format!("loading event log {pct}%")),
        "{shown}"
    );

    // Stepping on: the loading goes up, and the end is the same as a whole read.
    let mut loading = feed.loading();
    let mut app = first;
    let mut seen = vec![pct];
    while loading.is_some() {
        weir::console::spark::step(&mut feed, &mut names, &mut loading, now, &mut |r| {
            app.ingest(r);
            true
        });
        if let Some(p) = loading {
            seen.push(p);
        }
        assert!(seen.len() < 1_000);
    }
    assert!(seen.len() >= 2, "loaded in several steps: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    app.tick(now);
    let (whole, _, _) =
        weir::console::spark::open(&cps, opts.clone(), unicode(), 3_600_000, now).unwrap();
    let mut whole = whole;
    whole.tick(now);
    assert_eq!(
        whole.flows[0].samples.back().map(|s| s.batch_id),
        Some(BATCHES - 1)
    );
    assert!(whole.flows[0].health.is_some());
    assert_eq!(format!("{:?}", app.flows), format!("{:?}", whole.flows));
    let (a, b) = (Session::new(app, None), Session::new(whole, None));
    let done = screen(&a, 120, 40);
    assert_eq!(done, screen(&b, 120, 40));
    assert!(!done.contains("loading event log"), "{done}");
}

/// A Spark 4.x checkpoint with named sources where `src_b` was dropped at a restart
/// (source evolution) before batch 2: offsets v2 name `src_a` and `src_b` in batches 0
/// and 1, only `src_a` from batch 2 on; both source logs stay.
fn source_removed_checkpoint(root: &Path) {
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "metadata",
        r#"{"id":"0b7c1c9e-5a34-4c1e-9a57-0e9b1f3c2d11"}"#,
    );
    let meta = |b: u64| {
        format!(
            r#"{{"batchWatermarkMs":0,"batchTimestampMs":{},"conf":{{"spark.sql.streaming.queryEvolution.enableSourceEvolution":"true","spark.sql.shuffle.partitions":"2"}},"sourceMetadataInfo":{{}}}}"#,
            1_796_187_437_000 + b * 1000
        )
    };
    for b in 0..4u64 {
        let mut text = format!("v2\n{}\nsrc_a:{{\"logOffset\":{b}}}", meta(b));
        if b < 2 {
            text.push_str(&format!("\nsrc_b:{{\"logOffset\":{b}}}"));
        }
        write(&format!("offsets/{b}"), &text);
        write(&format!("commits/{b}"), "v1\n{\"nextBatchWatermarkMs\":0}");
        let entry = |src: &str| {
            format!(
                "v1\n{{\"path\":\"file:///data/in_{src}/part_{b}.json\",\"timestamp\":1796187436743,\"batchId\":{b}}}"
            )
        };
        write(&format!("sources/src_a/{b}"), &entry("a"));
        if b < 2 {
            write(&format!("sources/src_b/{b}"), &entry("b"));
        }
    }
}

#[test]
fn spark_inspect_shows_a_source_removed_by_evolution_and_names_every_offset_column() {
    let tmp = tempfile::tempdir().unwrap();
    let cp = tmp.path().join("checkpoint");
    source_removed_checkpoint(&cp);

    let out = weir()
        .args(["inspect", "--json"])
        .arg(&cp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sources = j["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2, "{sources:#?}");
    assert_eq!(sources[0]["name"], "src_a");
    assert!(sources[0].get("removed").is_none(), "{}", sources[0]);
    assert_eq!(
        sources[0]["latest_offset"],
        serde_json::json!({"logOffset": 3})
    );
    assert_eq!(sources[1]["name"], "src_b");
    assert_eq!(sources[1]["kind"], "file");
    assert_eq!(
        sources[1]["removed"],
        serde_json::json!({"at_batch": 2, "last_batch": 1, "last_offset": {"logOffset": 1}})
    );
    assert_eq!(sources[1]["log"]["batch_files"], serde_json::json!([0, 1]));
    assert_eq!(
        j["batches"][1]["end_offset_sources"],
        serde_json::json!(["src_a", "src_b"])
    );
    assert_eq!(
        j["batches"][3]["end_offset_sources"],
        serde_json::json!(["src_a"])
    );
    assert!(
        j["problems"].as_array().unwrap().is_empty(),
        "{}",
        j["problems"]
    );

    let out = weir().arg("inspect").arg(&cp).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "source src_b File: removed (source evolution) at batch 2; last offset {\"logOffset\":1} in batch 1"
        ),
        "{text}"
    );
    // Every column of the batch table has a name, and the rows line up under them.
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.trim_start().starts_with("batch "))
        .unwrap_or_else(|| panic!("no batch table:\n{text}"));
    let head = lines[header];
    for column in [
        "batch",
        "state",
        "planned (UTC)",
        "watermark ms",
        "files",
        "src_a end offset",
        "src_b end offset",
    ] {
        assert!(head.contains(column), "no column {column:?} in {head:?}");
    }
    let b_at = head.find("src_b end offset").unwrap();
    let rows = &lines[header + 1..header + 5];
    assert_eq!(&rows[1][b_at..], "{\"logOffset\":1}", "{text}");
    assert_eq!(&rows[3][b_at..], "n/a", "{text}");
    let a_at = head.find("src_a end offset").unwrap();
    assert!(rows[3][a_at..].starts_with("{\"logOffset\":3}"), "{text}");

    // weir attach says so on the query's timeline.
    let app = spark_app(std::slice::from_ref(&cp), &[], unreachable_map());
    let line = timeline(&app, 0);
    assert!(
        line.contains(
            "source src_b removed (source evolution) at batch 2; last offset {\"logOffset\":1} in batch 1"
        ),
        "{line}"
    );

    // The same in the fixture Spark 4.3 wrote: src_b left at batch 1, after batch 0.
    let out = weir()
        .args(["inspect", "--json"])
        .arg(sq("named_sources/checkpoint"))
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = j["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "src_b")
        .unwrap();
    assert_eq!(
        b["removed"],
        serde_json::json!({"at_batch": 1, "last_batch": 0, "last_offset": {"logOffset": 0}})
    );
}
