//! Stream-stream joins through the real binary: two file sources (daily flights and
//! weather CSV files, one file per side per batch) joined with a time range, against
//! DataFusion's batch join of the same files; a crash at every failpoint in the join
//! flow gives the same table as a crash-free run; `weir validate` refuses unbounded joins.

use std::path::{Path, PathBuf};

use datafusion::prelude::SessionContext;
use weir::checkpoint::progress::read_progress;

use crate::multihop::{raw_flights, register, strings};
use crate::support::*;

/// Each flight with the weather observations at its origin in the hour up to its
/// scheduled hour (two per flight when none is missing), left outer.
const JOIN_FLOW: &str = r#"
[[flow]]
name = "fw"
trigger = "available_now"
watermark = { column = "time_hour", delay = "2 hours" }
select = ["batch.carrier", "batch.flight", "batch.origin", "batch.time_hour",
          "weather.time_hour AS weather_hour", "weather.temp"]

[flow.source]
type = "files"
path = "landing/flights"
format = "csv"
path_glob_filter = "*.csv"
max_files_per_trigger = 1
schema = """year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay DOUBLE, \
arr_time INT, sched_arr_time INT, arr_delay DOUBLE, carrier STRING, flight INT, tailnum STRING, \
origin STRING, dest STRING, air_time DOUBLE, distance DOUBLE, hour INT, minute INT, \
time_hour TIMESTAMP"""

[flow.source.csv]
null_value = "NA"

[flow.stream_join]
alias = "weather"
watermark = { column = "time_hour", delay = "2 hours" }
on = ["origin"]
time_range = { lower = "-1 hour", upper = "0 seconds" }
how = "left"

[flow.stream_join.source]
type = "files"
path = "landing/weather"
format = "csv"
path_glob_filter = "*.csv"
max_files_per_trigger = 1
schema = """origin STRING, year INT, month INT, day INT, hour INT, temp DOUBLE, dewp DOUBLE, \
humid DOUBLE, wind_dir DOUBLE, wind_speed DOUBLE, wind_gust DOUBLE, precip DOUBLE, \
pressure DOUBLE, visib DOUBLE, time_hour TIMESTAMP"""

[flow.stream_join.source.csv]
null_value = "NA"

[flow.sink]
type = "delta"
path = "lake/fw"
"#;

fn join_dir(days: usize) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    weir::demo::data::prepare(&dir, Some(days)).unwrap();
    std::fs::write(dir.join("pipeline.toml"), JOIN_FLOW).unwrap();
    // No observation at LGA on Jan 2: its flights that day get nulls (left outer). The file
    // keeps its modification time, so files are still read in day order.
    let day2 = dir.join("landing/weather/2013-01/weather_2013-01-02.csv");
    let mtime = std::fs::metadata(&day2).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&day2).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("LGA,")).collect();
    assert!(kept.len() < text.lines().count());
    std::fs::write(&day2, kept.join("\n") + "\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&day2)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    (tmp, dir)
}

fn run(dir: &Path, failpoint: Option<&str>) -> std::process::Output {
    let mut c = weir();
    c.args(["run", "--headless"]).arg(dir.join("pipeline.toml"));
    if let Some(fp) = failpoint {
        c.env("WEIR_FAILPOINT", fp);
    }
    c.output().unwrap()
}

fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "weir failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn fw_rows(dir: &Path) -> Vec<String> {
    let ctx = SessionContext::new();
    register(&ctx, "fw", delta_rows(&dir.join("lake/fw")).await).await;
    strings(
        &ctx,
        "SELECT carrier, flight, origin, time_hour, weather_hour, temp FROM fw",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stream_join_of_two_file_streams_equals_the_batch_join() {
    let (_tmp, dir) = join_dir(5);
    ok(&run(&dir, None));
    let checkpoint = dir.join("_checkpoints/fw");
    let progress = read_progress(&checkpoint.join("_weir/progress.jsonl")).unwrap();
    let data_batches = progress.iter().filter(|p| p.num_input_rows > 0).count();
    assert_eq!(
        data_batches, 5,
        "one flights file and one weather file per batch"
    );
    assert!(progress.iter().all(|p| p.sources.len() == 2));
    assert!(
        progress.iter().any(|p| p.num_input_rows == 0),
        "no-data batches emit outer rows"
    );
    for p in &progress {
        let sum: u64 = p.sources.iter().map(|s| s.num_input_rows).sum();
        assert_eq!(sum, p.num_input_rows);
    }
    let ops: Vec<_> = progress
        .iter()
        .flat_map(|p| p.state_operators.iter())
        .collect();
    assert!(ops.iter().all(|o| o.operator_name == "symmetricHashJoin"));
    assert_eq!(
        ops.iter()
            .map(|o| o.num_rows_dropped_by_watermark)
            .sum::<u64>(),
        0
    );
    assert!(
        ops.iter().any(|o| o.num_rows_removed > 0),
        "state is evicted"
    );
    // Each side's own watermark is in the progress record, the lower one holding the
    // flow's (what the console's watermark pane shows); the flow's next watermark is it.
    let last = progress.last().unwrap();
    let sides = &last.weir.source_watermarks;
    assert_eq!(sides.len(), 2, "{sides:?}");
    assert_eq!(sides[0].source, last.sources[0].description);
    assert_eq!(sides[1].source, last.sources[1].description);
    let holder = sides.iter().find(|s| s.holds_watermark).unwrap();
    assert_eq!(
        last.weir.watermark_held_by.as_deref(),
        Some(holder.source.as_str())
    );
    let ms = |s: &weir::records::SourceWatermark| {
        chrono::DateTime::parse_from_rfc3339(s.watermark.as_deref().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    assert_eq!(ms(holder), sides.iter().map(ms).min().unwrap());
    // Two offsets per batch: [flights, weather], the file source's {"logOffset": N}.
    let offsets = std::fs::read_to_string(checkpoint.join("offsets/1")).unwrap();
    assert_eq!(offsets.lines().count(), 4, "{offsets}");
    assert!(checkpoint.join("sources/1/ledger.sqlite").is_file());

    let cp = weir::checkpoint::Checkpoint::at(&checkpoint);
    let watermark = cp
        .latest_commit()
        .unwrap()
        .unwrap()
        .1
        .next_batch_watermark_ms;
    assert_eq!(
        watermark,
        ms(holder),
        "the holder's watermark is the flow's"
    );
    let ctx = SessionContext::new();
    raw_flights(&ctx, &dir).await;
    let expected = strings(
        &ctx,
        &format!(
            "SELECT f.carrier, f.flight, f.origin, f.time_hour, w.time_hour, w.temp FROM flights f \
             LEFT JOIN weather w ON f.origin = w.origin \
             AND w.time_hour >= f.time_hour - INTERVAL '1 hour' AND w.time_hour <= f.time_hour \
             WHERE w.origin IS NOT NULL OR f.time_hour < to_timestamp_millis({watermark})"
        ),
    )
    .await;
    let got = fw_rows(&dir).await;
    assert!(got.len() > 5000, "{}", got.len());
    assert_eq!(
        got, expected,
        "the join = DataFusion's batch join minus flights still held"
    );
    assert!(
        got.iter().any(|r| r.ends_with("|null|null")),
        "some flights have no observation"
    );
    // A second run finds nothing new: no new version of the table.
    let before = delta_version(&dir.join("lake/fw")).await;
    ok(&run(&dir, None));
    assert_eq!(delta_version(&dir.join("lake/fw")).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_join_flow_at_every_failpoint_is_exactly_once() {
    let (_ref_tmp, reference) = join_dir(4);
    ok(&run(&reference, None));
    let expected = fw_rows(&reference).await;
    assert!(!expected.is_empty());
    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let (_tmp, dir) = join_dir(4);
        let crashed = run(&dir, Some(&format!("{failpoint}:2@fw")));
        assert!(
            !crashed.status.success(),
            "{failpoint}: should have aborted"
        );
        let stderr = String::from_utf8_lossy(&crashed.stderr);
        assert!(
            stderr.contains(&format!("failpoint {failpoint} hit in batch 2 of flow fw")),
            "{stderr}"
        );
        ok(&run(&dir, None));
        assert_eq!(
            fw_rows(&dir).await,
            expected,
            "{failpoint}: differs from the crash-free run"
        );
        let progress = read_progress(&dir.join("_checkpoints/fw/_weir/progress.jsonl")).unwrap();
        let replay = progress
            .iter()
            .find(|p| p.weir.replayed)
            .expect("a replayed batch");
        assert_eq!(replay.batch_id, 2, "{failpoint}");
        assert_eq!(replay.sources.len(), 2);
        assert_eq!(
            replay.weir.sink_write_skipped,
            !matches!(failpoint, "after_offsets" | "after_read"),
            "{failpoint}"
        );
    }
}

#[test]
fn validate_refuses_an_unbounded_stream_stream_join() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (edit, needle) in [
        (
            JOIN_FLOW.replace("time_range = { lower = \"-1 hour\", upper = \"0 seconds\" }\n", ""),
            "There is no time_range",
        ),
        (
            JOIN_FLOW.replacen("watermark = { column = \"time_hour\", delay = \"2 hours\" }\nselect", "select", 1),
            "The left side (the flow's source) has no watermark",
        ),
        (
            JOIN_FLOW.replace(
                "alias = \"weather\"\nwatermark = { column = \"time_hour\", delay = \"2 hours\" }\n",
                "alias = \"weather\"\n",
            ),
            "The right side `weather` has no watermark",
        ),
    ] {
        assert_ne!(edit, JOIN_FLOW);
        let p = write_pipeline(dir, &edit);
        let out = weir().arg("validate").arg(&p).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
        assert!(stderr.contains("grows without limit"), "{stderr}");
        assert!(stderr.contains("flow[0].stream_join"), "the key is named: {stderr}");
    }
    let p = write_pipeline(dir, JOIN_FLOW);
    let out = weir().arg("validate").arg(&p).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("stream-stream join (left outer)"),
        "{stdout}"
    );
}

/// `weir inspect` shows a stream-stream join's state (both sides and the sides' event
/// times, with keys and versions) and the right side's offsets and ledger; the run
/// summary counts the files of both sides.
#[test]
fn inspect_shows_both_sides_of_a_join_and_the_summary_counts_both_sides_files() {
    let (_tmp, dir) = join_dir(2);
    let out = weir()
        .args(["run", "--headless"])
        .arg(dir.join("pipeline.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flights = std::fs::read_dir(dir.join("landing/flights/2013-01"))
        .unwrap()
        .count();
    let weather = std::fs::read_dir(dir.join("landing/weather/2013-01"))
        .unwrap()
        .count();
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains(&format!("{} file(s)", flights + weather)),
        "both sides' files: {summary}"
    );
    let inspect = weir()
        .args(["inspect"])
        .arg(dir.join("_checkpoints/fw"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    for part in [
        "state 0 (left): symmetricHashJoin",
        "state 0 (right): symmetricHashJoin",
        "state 0 (watermarks)",
        "source 1 (the stream_join's right side)",
    ] {
        assert!(text.contains(part), "missing {part:?}:\n{text}");
    }
    assert!(
        text.contains(&format!("ledger {weather} committed")),
        "the right side's ledger:\n{text}"
    );
}
