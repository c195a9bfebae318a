//! Several sources in one flow (`[[flow.union]]`, issue #14), through the real binary:
//! rows matched by column name (Spark's `unionByName`), each source with its own
//! watermark combined by `multiple_watermark_policy` (an idle source holds the
//! watermark back under "min"), offsets per source, a crash replayed exactly once per
//! source, and a source added or removed refused as an incompatible restart.

use std::path::Path;

use serde_json::Value;

use crate::support::*;

fn run(p: &Path, args: &[&str]) -> std::process::Output {
    weir()
        .args(["run", "--headless"])
        .args(args)
        .arg(p)
        .output()
        .unwrap()
}

fn ok(out: std::process::Output) -> std::process::Output {
    assert!(
        out.status.success(),
        "weir failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn progress(checkpoint: &Path) -> Vec<Value> {
    std::fs::read_to_string(checkpoint.join("_weir/progress.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `SELECT cols FROM table ORDER BY order`, one `a|b|c` line per row.
async fn lines(table: &Path, cols: &str, order: &str) -> Vec<String> {
    let rows = delta_rows(table).await;
    if rows.iter().all(|b| b.num_rows() == 0) {
        return Vec::new();
    }
    let out = sql(&rows, &format!("SELECT {cols} FROM t ORDER BY {order}")).await;
    let names: Vec<String> = out
        .first()
        .map(|b| {
            b.schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect()
        })
        .unwrap_or_default();
    let columns: Vec<Vec<String>> = names.iter().map(|n| column_strings(&out, n)).collect();
    (0..columns.first().map_or(0, Vec::len))
        .map(|i| {
            columns
                .iter()
                .map(|c| c[i].as_str())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

const WINDOWED: &str = r#"
[[flow]]
name = "u"
trigger = "available_now"
POLICY
watermark = { column = "ts", delay = "0 seconds" }
group_by = ["window(ts, '10 seconds')"]
aggregates = ["count(*) AS n"]
output_mode = "append"
[flow.source]
type = "files"
path = "landing/eu"
format = "json"
schema = "k STRING, ts TIMESTAMP"
[[flow.union]]
source = { type = "files", path = "landing/us", format = "json", schema = "k STRING, ts TIMESTAMP" }
[flow.sink]
type = "delta"
path = "table"
"#;

fn windowed(dir: &Path, policy: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("landing/us")).unwrap();
    land(
        &dir.join("landing/eu"),
        "a.json",
        b"{\"k\":\"eu\",\"ts\":\"2024-05-01T10:00:01Z\"}\n{\"k\":\"eu\",\"ts\":\"2024-05-01T10:00:25Z\"}\n",
    );
    write_pipeline(dir, &WINDOWED.replace("POLICY", policy))
}

/// Spark's default policy, `min`: a source that has had no data counts as 0 and holds
/// the flow's watermark back, so no window closes on one source's event times alone;
/// the progress record, `weir inspect` and the console say which source holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_source_holds_the_watermark_back_under_min() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = windowed(dir, "");
    ok(run(&p, &[]));
    let table = dir.join("table");
    assert_eq!(
        lines(&table, "window_start, n", "window_start").await,
        Vec::<String>::new(),
        "the idle source holds the watermark at 0: no window is final"
    );
    let checkpoint = dir.join("_checkpoints/u");
    let p1 = progress(&checkpoint);
    let last = p1.last().unwrap();
    let held = last["weir"]["watermarkHeldBy"].as_str().unwrap();
    assert!(held.contains("landing/us"), "{held}");
    let wms = last["weir"]["sourceWatermarks"].as_array().unwrap();
    assert_eq!(wms.len(), 2);
    assert_eq!(wms[0]["watermark"], "2024-05-01T10:00:25.000Z");
    assert_eq!(wms[0]["holdsWatermark"], false);
    assert!(wms[1]["watermark"].is_null());
    assert_eq!(wms[1]["holdsWatermark"], true);
    // commits/N keeps each source's watermark, so a restart combines them the same way.
    let commit = std::fs::read_to_string(checkpoint.join("commits/0")).unwrap();
    assert!(
        commit.contains("\"sourceWatermarksMs\":[1714557625000,null]"),
        "{commit}"
    );
    let inspect = ok(weir().arg("inspect").arg(&checkpoint).output().unwrap());
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        text.contains("watermark - (no data yet: counts as 0), holds the flow's watermark"),
        "{text}"
    );
    assert!(text.contains("watermark 1714557625000 ms"), "{text}");

    // The other source's first data (after a restart): the watermark is the slower
    // source's, 10:00:25 (eu), and the windows before it close. us's 10:00:12 is on time.
    land(
        &dir.join("landing/us"),
        "b.json",
        b"{\"k\":\"us\",\"ts\":\"2024-05-01T10:00:12Z\"}\n{\"k\":\"us\",\"ts\":\"2024-05-01T10:00:30Z\"}\n",
    );
    ok(run(&p, &[]));
    assert_eq!(
        lines(&table, "window_start, n", "window_start").await,
        vec!["2024-05-01T10:00:00Z|1", "2024-05-01T10:00:10Z|1"]
    );
    let last = progress(&checkpoint).last().cloned().unwrap();
    assert!(
        last["weir"]["watermarkHeldBy"]
            .as_str()
            .unwrap()
            .contains("landing/eu"),
        "{last}"
    );
    let commits: Vec<u64> = batch_ids(&checkpoint.join("commits"));
    let offsets =
        std::fs::read_to_string(checkpoint.join(format!("offsets/{}", commits.last().unwrap())))
            .unwrap();
    assert_eq!(
        offsets.lines().count(),
        4,
        "offsets/N: version, metadata, one line per source: {offsets}"
    );
}

fn batch_ids(dir: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_string_lossy().parse().ok())
        .collect();
    ids.sort();
    ids
}

/// `multiple_watermark_policy = "max"`: the fastest source's watermark; the window
/// closes in the first run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_max_policy_follows_the_fastest_source() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = windowed(dir, "multiple_watermark_policy = \"max\"");
    ok(run(&p, &[]));
    // The policy is in the offsets' conf (as Spark records it) and cannot change later.
    let offsets = std::fs::read_to_string(dir.join("_checkpoints/u/offsets/0")).unwrap();
    assert!(
        offsets.contains("\"spark.sql.streaming.multipleWatermarkPolicy\":\"max\""),
        "{offsets}"
    );
    let min = write_pipeline(dir, &WINDOWED.replace("POLICY", ""));
    let refused = run(&min, &[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("multiple_watermark_policy changed from \"max\" to \"min\""),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    write_pipeline(
        dir,
        &WINDOWED.replace("POLICY", "multiple_watermark_policy = \"max\""),
    );
    assert_eq!(
        lines(&dir.join("table"), "window_start, n", "window_start").await,
        vec!["2024-05-01T10:00:00Z|1"]
    );
    let last = progress(&dir.join("_checkpoints/u"))
        .last()
        .cloned()
        .unwrap();
    assert!(
        last["weir"]["watermarkHeldBy"]
            .as_str()
            .unwrap()
            .contains("landing/eu")
    );
}

const FILES_AND_DELTA: &str = r#"
[[flow]]
name = "bronze"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing/us"
format = "csv"
[flow.sink]
type = "delta"
path = "lake/us"

[[flow]]
name = "all"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing/eu"
format = "json"
[[flow.union]]
source = { type = "delta", path = "lake/us" }
EXTRA
[flow.sink]
type = "delta"
path = "lake/all"
"#;

/// A files source and a Delta source with different columns: one stream by column
/// name (missing columns null); a crash after the sink commit re-runs the batch with
/// each source's recorded offsets (files landed while down wait for the next batch),
/// and the table has every row once. Adding or removing a source is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_delta_by_name_exactly_once_across_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(dir, &FILES_AND_DELTA.replace("EXTRA", ""));
    let eu = dir.join("landing/eu");
    let us = dir.join("landing/us");
    land(
        &eu,
        "a.json",
        b"{\"id\":1,\"name\":\"ana\"}\n{\"id\":2,\"name\":\"bo\"}\n",
    );
    land(&us, "u1.csv", b"name,id,region\ncy,3,west\n");
    ok(run(&p, &["--flow", "bronze"]));
    ok(run(&p, &["--flow", "all"]));
    let all = dir.join("lake/all");
    assert_eq!(
        lines(&all, "id, name, region", "id").await,
        vec!["1|ana|null", "2|bo|null", "3|cy|west"]
    );
    ok(run(&p, &["--flow", "all"]));
    assert_eq!(
        lines(&all, "id", "id").await.len(),
        3,
        "a restart reads nothing again"
    );

    // Batch 1 plans a file of each source, commits to the sink, and the process dies.
    land(&eu, "b.json", b"{\"id\":4,\"name\":\"di\"}\n");
    land(&us, "u2.csv", b"name,id,region\ned,5,east\n");
    ok(run(&p, &["--flow", "bronze"]));
    let crashed = weir()
        .args(["run", "--headless", "--flow", "all"])
        .arg(&p)
        .env("WEIR_FAILPOINT", "after_sink_commit:1@all")
        .output()
        .unwrap();
    assert!(!crashed.status.success(), "the failpoint aborts the run");
    // While it is down both sources move on.
    land(&eu, "c.json", b"{\"id\":6,\"name\":\"fa\"}\n");
    land(&us, "u3.csv", b"name,id,region\ngi,7,west\n");
    ok(run(&p, &["--flow", "bronze"]));
    ok(run(&p, &["--flow", "all"]));
    assert_eq!(
        lines(&all, "id", "id").await,
        ["1", "2", "3", "4", "5", "6", "7"],
        "every row once"
    );
    let checkpoint = dir.join("_checkpoints/all");
    let p_all = progress(&checkpoint);
    let replayed: Vec<&Value> = p_all
        .iter()
        .filter(|p| p["weir"]["replayed"] == true)
        .collect();
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0]["batchId"], 1);
    assert_eq!(replayed[0]["weir"]["sinkWriteSkipped"], true);
    assert_eq!(
        replayed[0]["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["numInputRows"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 1],
        "the re-run reads exactly batch 1's recorded part of each source"
    );
    let offsets = std::fs::read_to_string(checkpoint.join("offsets/1")).unwrap();
    assert_eq!(offsets.lines().count(), 4, "{offsets}");

    // A third source: the checkpoint's offsets name two.
    let extra =
        "[[flow.union]]\nsource = { type = \"files\", path = \"landing/asia\", format = \"json\" }";
    let p3 = write_pipeline(dir, &FILES_AND_DELTA.replace("EXTRA", extra));
    let check = weir().arg("check").arg(&p3).output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success(), "{text}");
    assert!(
        text.contains("there are 2 source(s) in the checkpoint's offsets and the flow now has 3"),
        "{text}"
    );
    let refused = run(&p3, &["--flow", "all"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("flow now has 3"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // Removing the union source is refused the same way.
    let one = FILES_AND_DELTA.replace(
        "[[flow.union]]\nsource = { type = \"delta\", path = \"lake/us\" }\nEXTRA\n",
        "",
    );
    let p1 = write_pipeline(dir, &one);
    let refused = run(&p1, &["--flow", "all"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("flow now has 1"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(lines(&all, "id", "id").await.len(), 7, "nothing written");
}

fn validate(dir: &Path, toml: &str) -> (bool, String) {
    let p = write_pipeline(dir, toml);
    let out = weir().arg("validate").arg(&p).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `weir validate` refuses a union that cannot run, before anything runs.
#[test]
fn validate_refuses_unions_that_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = r#"
[[flow]]
name = "u"
FLOWWM
POLICY
[flow.source]
type = "files"
path = "a"
format = "json"
schema = "id BIGINT, ts TIMESTAMP"
[[flow.union]]
source = { type = "files", path = "B", format = "json", schema = "SCHEMA" }
UNIONWM
[flow.sink]
type = "delta"
path = "t"
"#;
    let toml = |wm: &str, policy: &str, b: &str, schema: &str, uwm: &str| {
        base.replace("FLOWWM", wm)
            .replace("POLICY", policy)
            .replace("path = \"B\"", &format!("path = \"{b}\""))
            .replace("SCHEMA", schema)
            .replace("UNIONWM", uwm)
    };
    let good = toml(
        "watermark = { column = \"ts\", delay = \"1 minute\" }",
        "multiple_watermark_policy = \"max\"",
        "b",
        "ts TIMESTAMP, id BIGINT, region STRING",
        "watermark = { column = \"ts\", delay = \"5 minutes\" }",
    );
    let (valid, text) = validate(dir, &good);
    assert!(valid, "{text}");
    assert!(text.contains("union of 2 sources"), "{text}");

    for (toml, expected) in [
        (
            toml(
                "",
                "",
                "b",
                "id BIGINT, ts TIMESTAMP",
                "watermark = { column = \"ts\", delay = \"5 minutes\" }",
            ),
            "the flow's own source has none",
        ),
        (
            toml(
                "",
                "multiple_watermark_policy = \"avg\"",
                "b",
                "id BIGINT, ts TIMESTAMP",
                "",
            ),
            "invalid multiple_watermark_policy \"avg\"",
        ),
        (
            toml("", "", "a", "id BIGINT, ts TIMESTAMP", ""),
            "is already a source of this flow",
        ),
        (
            toml("", "", "b", "id STRING, ts TIMESTAMP", ""),
            "column `id` is Int64 in source 1 and Utf8 in source 2",
        ),
        (
            toml(
                "watermark = { column = \"ts\", delay = \"1 minute\" }",
                "",
                "b",
                "id BIGINT, ts TIMESTAMP, t2 TIMESTAMP",
                "watermark = { column = \"t3\", delay = \"5 minutes\" }",
            ),
            "the watermark column `t3` of [[flow.union]] source 2",
        ),
    ] {
        let (valid, text) = validate(dir, &toml);
        assert!(!valid, "{toml}\n{text}");
        assert!(text.contains(expected), "expected {expected:?} in:\n{text}");
    }
    // The policy on a flow with one source is refused with its line.
    let one = "[[flow]]\nname = \"u\"\nmultiple_watermark_policy = \"min\"\n[flow.source]\ntype = \"files\"\npath = \"a\"\nformat = \"json\"\n[flow.sink]\ntype = \"delta\"\npath = \"t\"\n";
    let (valid, text) = validate(dir, one);
    assert!(!valid);
    assert!(text.contains("pipeline.toml:3:"), "{text}");
    assert!(text.contains("this flow has one"), "{text}");
}
