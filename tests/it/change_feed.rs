//! The Delta change data feed as a source (`read_change_feed = true`), through the real
//! binary: weir's sinks write the feed of a table created with
//! `delta.enableChangeDataFeed` (appends, and delta_merge's MERGE commits with their
//! `_change_data` files; another writer's DELETE and UPDATE), a flow streams it, and what it lands equals deltalake's own
//! `load_cdf` over the same versions, row by row, with a crash at each failpoint of the
//! batch protocol in the middle; the refusal where the table has no feed; `weir validate`'s
//! refusals.

use std::path::Path;

use arrow::datatypes::{DataType, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;

use crate::support::*;

/// customers: files -> delta_merge (MERGE per batch) into a table with the feed on;
/// events: files -> delta (appends) with the feed on; a feed flow reads each table's feed.
const PIPELINE: &str = r#"
[[flow]]
name = "customers"
trigger = "available_now"

[flow.source]
type = "files"
path = "landing/customers"
format = "csv"
schema = "id BIGINT, status STRING, seq BIGINT"
max_files_per_trigger = 1

[flow.source.csv]
header = true

[flow.sink]
type = "delta_merge"
path = "lake/customers"
keys = ["id"]
order_by = "seq"
table_properties = { "delta.enableChangeDataFeed" = "true" }

[[flow]]
name = "events"
trigger = "available_now"

[flow.source]
type = "files"
path = "landing/events"
format = "csv"
schema = "id BIGINT, status STRING, seq BIGINT"
max_files_per_trigger = 1

[flow.source.csv]
header = true

[flow.sink]
type = "delta"
path = "lake/events"
table_properties = { "delta.enableChangeDataFeed" = "true" }

[[flow]]
name = "customers_feed"
trigger = "available_now"
select = ["id", "status", "seq", "_change_type", "_commit_version", "_commit_timestamp"]

[flow.source]
type = "delta"
path = "lake/customers"
read_change_feed = true
starting_version = 0
max_files_per_trigger = 1

[flow.sink]
type = "delta"
path = "lake/customers_feed"

[[flow]]
name = "events_feed"
trigger = "available_now"
select = ["id", "status", "seq", "_change_type", "_commit_version", "_commit_timestamp"]

[flow.source]
type = "delta"
path = "lake/events"
read_change_feed = true
starting_version = 0

[flow.sink]
type = "delta"
path = "lake/events_feed"
"#;

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

const COLUMNS: [&str; 6] = [
    "id",
    "status",
    "seq",
    "_change_type",
    "_commit_version",
    "_commit_timestamp",
];

/// Rows as sorted lines `id|status|seq|_change_type|_commit_version|_commit_timestamp(ms)`.
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let columns: Vec<Vec<String>> = COLUMNS
            .iter()
            .map(|name| {
                let col = b
                    .column_by_name(name)
                    .unwrap_or_else(|| panic!("no column {name}"));
                let col = match col.data_type() {
                    DataType::Timestamp(_, _) => {
                        let ms = arrow::compute::cast(
                            col,
                            &DataType::Timestamp(TimeUnit::Millisecond, None),
                        )
                        .unwrap();
                        arrow::compute::cast(&ms, &DataType::Int64).unwrap()
                    }
                    _ => col.clone(),
                };
                let one = RecordBatch::try_from_iter(vec![(*name, col)]).unwrap();
                column_strings(&[one], name)
            })
            .collect();
        for i in 0..b.num_rows() {
            out.push(
                columns
                    .iter()
                    .map(|c| c[i].as_str())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out.sort();
    out
}

/// The oracle: deltalake's `load_cdf` over every version of the table.
async fn load_cdf(table: &Path) -> Vec<String> {
    let url = url::Url::from_directory_path(std::path::absolute(table).unwrap()).unwrap();
    let t = deltalake::open_table(url).await.unwrap();
    let ctx = SessionContext::new();
    let plan = t
        .scan_cdf()
        .with_starting_version(0)
        .build(&ctx.state(), None)
        .await
        .unwrap();
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap();
    lines(&batches)
}

fn land_changes(dir: &Path, round: usize) {
    let (customers, events): (&[u8], &[u8]) = match round {
        0 => (
            b"id,status,seq\n1,created,1\n2,created,1\n",
            b"id,status,seq\n10,clicked,1\n11,viewed,1\n",
        ),
        1 => (
            // A MERGE: id 2 updated, id 3 inserted.
            b"id,status,seq\n2,shipped,2\n3,created,1\n",
            b"id,status,seq\n12,clicked,2\n",
        ),
        _ => (
            // A MERGE: id 1 updated, an older change of id 2 ignored (order_by).
            b"id,status,seq\n1,paid,3\n2,created,0\n",
            b"id,status,seq\n13,bought,3\n",
        ),
    };
    land(
        &dir.join("landing/customers"),
        &format!("c{round}.csv"),
        customers,
    );
    land(
        &dir.join("landing/events"),
        &format!("e{round}.csv"),
        events,
    );
}

async fn assert_feeds_equal_load_cdf(dir: &Path, context: &str) {
    let customers = load_cdf(&dir.join("lake/customers")).await;
    let got = lines(&delta_rows(&dir.join("lake/customers_feed")).await);
    assert_eq!(got, customers, "{context}: customers' feed");
    let events = load_cdf(&dir.join("lake/events")).await;
    let got = lines(&delta_rows(&dir.join("lake/events_feed")).await);
    assert_eq!(got, events, "{context}: events' feed");
    // The MERGE commits wrote change data files: updates show as pre- and post-images.
    for change in ["update_preimage", "update_postimage", "insert"] {
        assert!(
            customers.iter().any(|l| l.contains(&format!("|{change}|"))),
            "{context}: no {change} in {customers:?}"
        );
    }
    assert!(
        events.iter().all(|l| l.contains("|insert|")),
        "{context}: appends are inserts: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_feed_of_appends_and_merges_equals_deltalakes_load_cdf() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_pipeline(dir, PIPELINE);
    land_changes(dir, 0);
    land_changes(dir, 1);
    ok(&run(dir, None));
    assert_feeds_equal_load_cdf(dir, "first run").await;
    // Another writer's DELETE and UPDATE (deltalake's, with change files): delete and
    // update rows in the feed.
    let url =
        url::Url::from_directory_path(std::path::absolute(dir.join("lake/customers")).unwrap())
            .unwrap();
    let table = deltalake::open_table(url).await.unwrap();
    let (table, _) = table.delete().with_predicate("id = 3").await.unwrap();
    table
        .update()
        .with_predicate("id = 2")
        .with_update("status", "'returned'")
        .await
        .unwrap();
    // A restart resumes from the checkpoint's offset: only the new versions are read.
    land_changes(dir, 2);
    ok(&run(dir, None));
    assert_feeds_equal_load_cdf(dir, "after a restart").await;
    let customers = load_cdf(&dir.join("lake/customers")).await;
    assert_eq!(
        customers
            .iter()
            .filter(|l| l.starts_with("1|paid|3|update_postimage|"))
            .count(),
        1,
        "{customers:?}"
    );
    assert!(
        customers
            .iter()
            .any(|l| l.starts_with("3|created|1|delete|"))
            && customers
                .iter()
                .any(|l| l.starts_with("2|returned|2|update_postimage|")),
        "{customers:?}"
    );
    let offsets =
        std::fs::read_to_string(dir.join("_checkpoints/customers_feed/offsets/0")).unwrap();
    assert!(
        offsets.contains("\"reservoirVersion\":1") && offsets.contains("\"index\":-1"),
        "the first batch reads version 0 alone; its end offset is version 1: {offsets}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_failpoint_of_a_feed_batch_recovers_exactly_once() {
    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write_pipeline(dir, PIPELINE);
        land_changes(dir, 0);
        land_changes(dir, 1);
        // Batch 1 of the customers' feed is the MERGE's version.
        let crashed = run(dir, Some(&format!("{failpoint}:1@customers_feed")));
        assert!(
            !crashed.status.success(),
            "{failpoint}: the process should have aborted: {}",
            String::from_utf8_lossy(&crashed.stderr)
        );
        // More changes land while the process is down: they must not join the replayed batch.
        land_changes(dir, 2);
        ok(&run(dir, None));
        assert_feeds_equal_load_cdf(dir, failpoint).await;
        let progress = weir::checkpoint::progress::read_progress(
            &dir.join("_checkpoints/customers_feed/_weir/progress.jsonl"),
        )
        .unwrap();
        let replay = progress
            .iter()
            .find(|p| p.weir.replayed)
            .unwrap_or_else(|| panic!("{failpoint}: a replayed batch"));
        assert_eq!(replay.batch_id, 1, "{failpoint}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_feed_read_where_the_table_records_none_is_refused_naming_the_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_pipeline(
        dir,
        &PIPELINE.replace(
            "table_properties = { \"delta.enableChangeDataFeed\" = \"true\" }\n\n[[flow]]\nname = \"events\"",
            "\n[[flow]]\nname = \"events\"",
        ),
    );
    land_changes(dir, 0);
    let out = run(dir, None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no change data feed at version 0")
            && stderr.contains("delta.enableChangeDataFeed"),
        "{stderr}"
    );
    assert!(
        !dir.join("lake/customers_feed/_delta_log").exists(),
        "nothing was written"
    );
}

fn validate(dir: &Path, toml: &str) -> String {
    write_pipeline(dir, toml);
    let out = weir()
        .arg("validate")
        .arg(dir.join("pipeline.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "validate accepted:\n{toml}");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn validate_refuses_a_change_feed_on_a_files_source_and_two_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = validate(
        dir,
        r#"
[[flow]]
name = "f"
[flow.source]
type = "files"
path = "in"
format = "csv"
read_change_feed = true
[flow.sink]
type = "memory"
"#,
    );
    assert!(
        files.contains("read_change_feed") && files.contains("Delta-source option"),
        "{files}"
    );
    let both = validate(
        dir,
        r#"
[[flow]]
name = "f"
[flow.source]
type = "delta"
path = "lake/in"
read_change_feed = true
starting_version = 0
starting_timestamp = "2024-06-01T00:00:00Z"
[flow.sink]
type = "memory"
"#,
    );
    assert!(
        both.contains("starting_version and starting_timestamp"),
        "{both}"
    );
    let no_start = validate(
        dir,
        r#"
[[flow]]
name = "f"
[flow.source]
type = "delta"
path = "lake/in"
read_change_feed = true
[flow.sink]
type = "memory"
"#,
    );
    assert!(no_start.contains("needs starting_version"), "{no_start}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_timestamp_starts_at_the_first_version_committed_at_or_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Long ago: every version; the feed equals load_cdf from version 0.
    write_pipeline(
        dir,
        &PIPELINE.replace(
            "path = \"lake/events\"\nread_change_feed = true\nstarting_version = 0",
            "path = \"lake/events\"\nread_change_feed = true\nstarting_timestamp = \"2000-01-01T00:00:00Z\"",
        ),
    );
    land_changes(dir, 0);
    land_changes(dir, 1);
    ok(&run(dir, None));
    assert_feeds_equal_load_cdf(dir, "starting_timestamp in the past").await;
    // After the latest commit: refused, naming the latest version.
    let other = tempfile::tempdir().unwrap();
    let later = other.path();
    write_pipeline(
        later,
        &PIPELINE.replace(
            "path = \"lake/events\"\nread_change_feed = true\nstarting_version = 0",
            "path = \"lake/events\"\nread_change_feed = true\nstarting_timestamp = \"2999-01-01T00:00:00Z\"",
        ),
    );
    land_changes(later, 0);
    let out = run(later, None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("starting_timestamp 2999-01-01T00:00:00+00:00 is after the table's latest commit (version 0"),
        "{stderr}"
    );
}

/// Spark + Delta (`scripts/spark-delta-setup.sh`) as a second oracle, with
/// `WEIR_SPARK_TESTS=1`: `spark.readStream.option("readChangeFeed", "true")` over the same
/// table lands the same rows as weir's flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_feed_equals_sparks_read_change_feed() {
    if !std::env::var("WEIR_SPARK_TESTS").is_ok_and(|v| v == "1") {
        eprintln!(
            "skipped: Spark tests run with WEIR_SPARK_TESTS=1 (after scripts/spark-delta-setup.sh)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_pipeline(dir, PIPELINE);
    land_changes(dir, 0);
    land_changes(dir, 1);
    land_changes(dir, 2);
    ok(&run(dir, None));
    let home = std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default());
    let jars_dir = std::env::var("WEIR_DELTA_JARS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| home.join(".cache/weir-jars/delta"));
    let mut jars: Vec<String> = std::fs::read_dir(&jars_dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run scripts/spark-delta-setup.sh",
                jars_dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jar"))
        .map(|p| p.display().to_string())
        .collect();
    jars.sort();
    let submit = format!(
        "--master local[2] --driver-memory 2g \
         --driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' \
         --conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false \
         --conf spark.sql.shuffle.partitions=2 --jars {} pyspark-shell",
        jars.join(",")
    );
    for table in ["customers", "events"] {
        let out = std::process::Command::new(delta_python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spark/read_change_feed.py"))
            .arg(dir.join("lake").join(table))
            .arg(dir.join("spark").join(table))
            .arg(dir.join("spark_checkpoints").join(table))
            .env("PYSPARK_SUBMIT_ARGS", &submit)
            .env("PYSPARK_PYTHON", delta_python())
            .output()
            .unwrap();
        ok(&out);
        let spark = lines(&delta_rows(&dir.join("spark").join(table)).await);
        let weir = lines(&delta_rows(&dir.join("lake").join(format!("{table}_feed"))).await);
        assert!(!spark.is_empty(), "{table}");
        // `_commit_timestamp` differs by design: Spark's is the commit file's modification
        // time (Delta's commit timestamp without in-commit timestamps), deltalake's (and
        // so weir's) the commit's `commitInfo.timestamp`. Each is checked against its own
        // source; every other column must be equal row by row.
        let log = dir.join("lake").join(table).join("_delta_log");
        let commit_file = |version: &str| log.join(format!("{version:0>20}.json"));
        let mtime_ms = |version: &str| {
            let modified = std::fs::metadata(commit_file(version))
                .unwrap()
                .modified()
                .unwrap();
            let since = modified.duration_since(std::time::UNIX_EPOCH).unwrap();
            since.as_millis().to_string()
        };
        let commit_info_ms = |version: &str| {
            let text = std::fs::read_to_string(commit_file(version)).unwrap();
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find_map(|v| v["commitInfo"]["timestamp"].as_i64())
                .unwrap()
                .to_string()
        };
        let split = |l: &String| {
            let (rest, ts) = l.rsplit_once('|').unwrap();
            let version = rest.rsplit_once('|').unwrap().1.to_string();
            (rest.to_string(), version, ts.to_string())
        };
        let without_ts = |v: &[String]| {
            let mut out: Vec<String> = v.iter().map(|l| split(l).0).collect();
            out.sort();
            out
        };
        assert_eq!(
            without_ts(&weir),
            without_ts(&spark),
            "{table}: weir's feed and Spark's readChangeFeed"
        );
        for l in &spark {
            let (_, version, ts) = split(l);
            assert_eq!(ts, mtime_ms(&version), "{table}: Spark's timestamp of {l}");
        }
        for l in &weir {
            let (_, version, ts) = split(l);
            assert_eq!(
                ts,
                commit_info_ms(&version),
                "{table}: weir's timestamp of {l}"
            );
        }
    }
}
