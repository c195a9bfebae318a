//! Multi-hop pipelines through the real binary: the demo pipeline (bronze ->
//! silver -> gold, weather-enriched) against DataFusion batch computations over
//! the same input, crashes in the middle hop, Delta sources across restarts and
//! rewrites, stream-static joins picking up dimension updates, and the
//! `delta_merge` upsert sink under replay.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use datafusion::prelude::{CsvReadOptions, SessionContext};
use weir::checkpoint::progress::read_progress;

use crate::support::*;

/// A demo directory with `days` days landed and the demo pipeline, edited by `edit`.
fn demo_dir(days: usize, edit: impl Fn(String) -> String) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    weir::demo::data::prepare(&dir, Some(days)).unwrap();
    let pipeline = edit(weir::demo::data::FLIGHTS_PIPELINE.to_string());
    std::fs::write(dir.join("pipeline.toml"), pipeline).unwrap();
    (tmp, dir)
}

fn run_pipeline(dir: &Path, extra: &[&str], failpoint: Option<&str>) -> std::process::Output {
    let mut c = weir();
    c.args(["run", "--headless"]).arg(dir.join("pipeline.toml"));
    c.args(extra);
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

/// The landed flights and weather, read by DataFusion's own CSV reader as text and
/// typed in SQL (`NA` is null), as views `flights` and `weather`.
pub(crate) async fn raw_flights(ctx: &SessionContext, dir: &Path) {
    for (name, sub) in [
        ("flights_raw", "landing/flights"),
        ("weather_raw", "landing/weather"),
    ] {
        let mut paths: Vec<String> = Vec::new();
        for month in std::fs::read_dir(dir.join(sub)).unwrap() {
            for f in std::fs::read_dir(month.unwrap().path()).unwrap() {
                paths.push(f.unwrap().path().display().to_string());
            }
        }
        let header = std::fs::read_to_string(&paths[0]).unwrap();
        let header = header.lines().next().unwrap();
        let schema = arrow::datatypes::Schema::new(
            header
                .split(',')
                .map(|n| arrow::datatypes::Field::new(n, arrow::datatypes::DataType::Utf8, true))
                .collect::<Vec<_>>(),
        );
        let options = CsvReadOptions::new()
            .has_header(true)
            .file_extension(".csv");
        let df = ctx.read_csv(paths, options.schema(&schema)).await.unwrap();
        ctx.register_table(name, df.into_view()).unwrap();
    }
    let typed = |c: &str, t: &str| format!("CAST(NULLIF({c}, 'NA') AS {t}) AS {c}");
    let flights = format!(
        "CREATE VIEW flights AS SELECT carrier, {}, origin, dest, {}, {}, {}, day FROM flights_raw",
        typed("flight", "INT"),
        typed("dep_time", "INT"),
        typed("dep_delay", "DOUBLE"),
        "CAST(time_hour AS TIMESTAMP) AT TIME ZONE 'UTC' AS time_hour"
    );
    ctx.sql(&flights).await.unwrap();
    let weather = format!(
        "CREATE VIEW weather AS SELECT origin, {}, {} FROM weather_raw",
        typed("temp", "DOUBLE"),
        "CAST(time_hour AS TIMESTAMP) AT TIME ZONE 'UTC' AS time_hour"
    );
    ctx.sql(&weather).await.unwrap();
}

pub(crate) async fn register(ctx: &SessionContext, name: &str, batches: Vec<RecordBatch>) {
    let schema = batches.first().expect("rows").schema();
    let t = datafusion::datasource::MemTable::try_new(schema, vec![batches]).unwrap();
    ctx.register_table(name, Arc::new(t)).unwrap();
}

async fn query(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

pub(crate) async fn strings(ctx: &SessionContext, sql: &str) -> Vec<String> {
    let batches = query(ctx, sql).await;
    let mut out = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            let row: Vec<String> = b
                .columns()
                .iter()
                .map(|c| {
                    let s = arrow::compute::cast(&c.slice(i, 1), &arrow::datatypes::DataType::Utf8)
                        .unwrap();
                    let s = arrow::array::AsArray::as_string::<i32>(&s);
                    if arrow::array::Array::is_null(s, 0) {
                        "null".to_string()
                    } else {
                        s.value(0).to_string()
                    }
                })
                .collect();
            out.push(row.join("|"));
        }
    }
    out.sort();
    out
}

/// The watermark after the last batch of a flow (commits/N's nextBatchWatermarkMs).
fn final_watermark_ms(checkpoint: &Path) -> i64 {
    let cp = weir::checkpoint::Checkpoint::at(checkpoint);
    cp.latest_commit()
        .unwrap()
        .map(|(_, c)| c.next_batch_watermark_ms)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_pipeline_equals_batch_computations_over_the_same_input() {
    let (_tmp, dir) = demo_dir(30, |p| p);
    let out = run_pipeline(&dir, &[], None);
    ok(&out);
    // What `weir attach` draws from the checkpoints' plan records is the graph `weir run`
    // draws from the pipeline file: sources, union and stream-join sides, dimensions.
    let pipeline = weir::pipeline::load(&dir.join("pipeline.toml")).unwrap();
    for spec in &pipeline.flows {
        let plan = weir::checkpoint::Checkpoint::at(&spec.checkpoint)
            .read_plan()
            .unwrap()
            .unwrap();
        assert_eq!(
            weir::console::graph::inputs_of_plan(&plan),
            weir::console::graph::inputs_of_spec(spec),
            "flow {}",
            spec.name
        );
        // ...and the tables `weir sql` registers for an attached flow are the run's.
        let (of_spec, of_plan) = (
            weir::sql::FlowTables::of(spec),
            weir::sql::FlowTables::from_checkpoint(&spec.name, &spec.checkpoint),
        );
        let sorted = |mut v: Vec<PathBuf>| {
            v.sort();
            v
        };
        assert_eq!(
            sorted(of_plan.reads),
            sorted(of_spec.reads),
            "{}",
            spec.name
        );
        assert_eq!(of_plan.sink, of_spec.sink, "{}", spec.name);
        assert_eq!(of_plan.late_rows, of_spec.late_rows, "{}", spec.name);
    }
    let ctx = SessionContext::new();
    raw_flights(&ctx, &dir).await;
    register(
        &ctx,
        "silver",
        delta_rows(&dir.join("lake/silver/flights")).await,
    )
    .await;
    register(
        &ctx,
        "gold",
        delta_rows(&dir.join("lake/gold/departures_hourly")).await,
    )
    .await;
    register(
        &ctx,
        "fw",
        delta_rows(&dir.join("lake/gold/flights_weather")).await,
    )
    .await;
    let airlines = format!("{}", dir.join("dims/airlines.csv").display());
    ctx.register_csv("airlines", &airlines, CsvReadOptions::new())
        .await
        .unwrap();

    // Silver: the departed flights, each key once, with the airline's name.
    let expected_silver = strings(
        &ctx,
        "SELECT DISTINCT f.carrier, f.flight, f.origin, f.time_hour, a.name \
         FROM flights f LEFT JOIN airlines a ON f.carrier = a.carrier WHERE f.dep_time IS NOT NULL",
    )
    .await;
    let silver = strings(
        &ctx,
        "SELECT carrier, flight, origin, time_hour, airline_name FROM silver",
    )
    .await;
    assert!(expected_silver.len() > 25_000, "{}", expected_silver.len());
    assert_eq!(
        silver, expected_silver,
        "silver = distinct departed flights + airline"
    );

    // Gold: per origin and hour, over silver, for the windows the watermark closed.
    let watermark = final_watermark_ms(&dir.join("_checkpoints/gold_departures_hourly"));
    let expected_gold = strings(
        &ctx,
        &format!(
            "SELECT origin, date_bin(INTERVAL '1 hour', time_hour) AS ws, count(*), round(avg(dep_delay), 6) \
             FROM silver GROUP BY 1, 2 \
             HAVING date_bin(INTERVAL '1 hour', time_hour) + INTERVAL '1 hour' <= to_timestamp_millis({watermark})"
        ),
    )
    .await;
    let gold = strings(
        &ctx,
        "SELECT origin, window_start, departures, round(avg_dep_delay, 6) FROM gold",
    )
    .await;
    assert!(expected_gold.len() > 1000, "{}", expected_gold.len());
    assert_eq!(gold, expected_gold, "gold = hourly GROUP BY over silver");

    // Weather-enriched, a stream-stream left outer join of silver with the weather stream
    // on origin and the scheduled hour: the batch LEFT JOIN, minus the outer rows of flights
    // still held in the join's state (hour at or after the final watermark: an observation
    // could still arrive). No row was late (the engine would report it).
    let fw_checkpoint = dir.join("_checkpoints/flights_weather");
    let fw_watermark = final_watermark_ms(&fw_checkpoint);
    let fw_progress = read_progress(&fw_checkpoint.join("_weir/progress.jsonl")).unwrap();
    let late: u64 = fw_progress
        .iter()
        .flat_map(|p| p.state_operators.iter())
        .map(|o| o.num_rows_dropped_by_watermark)
        .sum();
    assert_eq!(late, 0, "no late rows in flights_weather");
    assert!(fw_progress.iter().all(|p| p.sources.len() == 2));
    let expected_fw = strings(
        &ctx,
        &format!(
            "SELECT s.carrier, s.flight, s.origin, s.time_hour, w.temp FROM silver s \
             LEFT JOIN weather w ON s.origin = w.origin AND s.time_hour = w.time_hour \
             WHERE w.origin IS NOT NULL OR s.time_hour < to_timestamp_millis({fw_watermark})"
        ),
    )
    .await;
    let fw = strings(
        &ctx,
        "SELECT carrier, flight, origin, time_hour, temp FROM fw",
    )
    .await;
    assert_eq!(
        fw, expected_fw,
        "flights_weather = silver LEFT JOIN weather, minus flights still in state"
    );
    assert!(fw.iter().filter(|r| !r.ends_with("|null")).count() > fw.len() / 2);
    let held = fw_progress
        .last()
        .and_then(|p| p.state_operators.first())
        .map(|o| o.custom_metrics["leftNumRowsTotal"])
        .unwrap();
    let in_state = strings(
        &ctx,
        &format!(
            "SELECT s.carrier FROM silver s WHERE s.time_hour >= to_timestamp_millis({fw_watermark})"
        ),
    )
    .await;
    assert_eq!(
        held as usize,
        in_state.len(),
        "flights held = flights at or after the watermark"
    );
    assert!(fw_watermark > 0);

    // A second run finds nothing new anywhere: no table gets a new version.
    let before: Vec<Option<i64>> = futures_versions(&dir).await;
    ok(&run_pipeline(&dir, &[], None));
    assert_eq!(futures_versions(&dir).await, before);
}

async fn futures_versions(dir: &Path) -> Vec<Option<i64>> {
    let mut v = Vec::new();
    for t in [
        "lake/bronze/flights",
        "lake/bronze/weather",
        "lake/silver/flights",
        "lake/gold/departures_hourly",
        "lake/gold/flights_weather",
    ] {
        v.push(delta_version(&dir.join(t)).await);
    }
    v
}

/// Bronze in several versions, silver one bronze file per batch.
fn small_batches(p: String) -> String {
    p.replace("max_files_per_trigger = 100\nmax_bytes_per_trigger", "max_files_per_trigger = 3\nmax_bytes_per_trigger")
        .replace(
            "[flow.source]\ntype = \"delta\"\npath = \"lake/bronze/flights\"\n",
            "[flow.source]\ntype = \"delta\"\npath = \"lake/bronze/flights\"\nmax_files_per_trigger = 1\n",
        )
}

async fn table_keys(dir: &Path) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ctx = SessionContext::new();
    for (name, t, cols) in [
        (
            "silver",
            "lake/silver/flights",
            "carrier, flight, origin, time_hour, airline_name",
        ),
        (
            "gold",
            "lake/gold/departures_hourly",
            "origin, window_start, departures",
        ),
        (
            "fw",
            "lake/gold/flights_weather",
            "carrier, flight, origin, time_hour, temp",
        ),
    ] {
        register(&ctx, name, delta_rows(&dir.join(t)).await).await;
        out.push(strings(&ctx, &format!("SELECT {cols} FROM {name}")).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_middle_hop_at_every_failpoint_is_exactly_once() {
    let (_ref_tmp, reference) = demo_dir(8, small_batches);
    ok(&run_pipeline(&reference, &[], None));
    let expected = table_keys(&reference).await;
    let silver_batches =
        read_progress(&reference.join("_checkpoints/silver_flights/_weir/progress.jsonl"))
            .unwrap()
            .iter()
            .filter(|p| p.num_input_rows > 0)
            .count();
    assert!(
        silver_batches >= 3,
        "silver should take several batches: {silver_batches}"
    );

    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let (_tmp, dir) = demo_dir(8, small_batches);
        let crashed = run_pipeline(&dir, &[], Some(&format!("{failpoint}:1@silver_flights")));
        assert!(
            !crashed.status.success(),
            "{failpoint}: should have aborted"
        );
        let stderr = String::from_utf8_lossy(&crashed.stderr);
        assert!(
            stderr.contains(&format!(
                "failpoint {failpoint} hit in batch 1 of flow silver_flights"
            )),
            "{stderr}"
        );
        ok(&run_pipeline(&dir, &[], None));
        assert_eq!(
            table_keys(&dir).await,
            expected,
            "{failpoint}: tables differ from the crash-free run"
        );
        let progress =
            read_progress(&dir.join("_checkpoints/silver_flights/_weir/progress.jsonl")).unwrap();
        let replay = progress
            .iter()
            .find(|p| p.weir.replayed)
            .expect("a replayed batch");
        assert_eq!(replay.batch_id, 1, "{failpoint}");
        assert_eq!(
            replay.weir.sink_write_skipped,
            !matches!(failpoint, "after_offsets" | "after_read"),
            "{failpoint}"
        );
    }
}

/// A one-flow pipeline streaming `lake/bronze/flights` into `lake/copy`.
const COPY_FLOW: &str = r#"
[[flow]]
name = "copy"
trigger = "available_now"
select = ["year", "month", "day", "carrier", "flight", "origin", "time_hour"]

[flow.source]
type = "delta"
path = "lake/bronze/flights"
SOURCE_EXTRA

[flow.sink]
type = "delta"
path = "lake/copy"
"#;

fn bronze_only(days: usize, copy_extra: &str) -> (tempfile::TempDir, PathBuf) {
    let (tmp, dir) = demo_dir(days, |p| {
        let bronze_end = p.find("[[flow]]\nname = \"bronze_weather\"").unwrap();
        p[..bronze_end].replace("max_files_per_trigger = 100", "max_files_per_trigger = 2")
    });
    let copy = COPY_FLOW.replace("SOURCE_EXTRA", copy_extra);
    std::fs::write(dir.join("copy.toml"), copy).unwrap();
    (tmp, dir)
}

fn run_file(dir: &Path, file: &str) -> std::process::Output {
    weir()
        .args(["run", "--headless"])
        .arg(dir.join(file))
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_source_resumes_between_versions_and_refuses_rewrites() {
    let (_tmp, dir) = bronze_only(4, "max_files_per_trigger = 1");
    ok(&run_pipeline(&dir, &[], None)); // bronze: versions 0, 1
    ok(&run_file(&dir, "copy.toml"));
    let copied = num_rows(&delta_rows(&dir.join("lake/copy")).await);
    let bronze = num_rows(&delta_rows(&dir.join("lake/bronze/flights")).await);
    assert_eq!(copied, bronze);

    // More days land; bronze commits new versions; the copy resumes where it stopped.
    weir::demo::data::land_flights(&dir.join("landing/flights"), &dir.join("_staging"), Some(9))
        .unwrap();
    ok(&run_pipeline(&dir, &[], None));
    ok(&run_file(&dir, "copy.toml"));
    let ctx = SessionContext::new();
    register(&ctx, "c", delta_rows(&dir.join("lake/copy")).await).await;
    register(
        &ctx,
        "b",
        delta_rows(&dir.join("lake/bronze/flights")).await,
    )
    .await;
    let cols = "year, month, day, carrier, flight, origin, time_hour";
    assert_eq!(
        strings(&ctx, &format!("SELECT {cols} FROM c")).await,
        strings(&ctx, &format!("SELECT {cols} FROM b")).await,
        "the copy holds each bronze row exactly once"
    );
    let progress = read_progress(&dir.join("_checkpoints/copy/_weir/progress.jsonl")).unwrap();
    let last = progress.last().unwrap();
    let end = &last.sources[0].end_offset;
    assert_eq!(end["sourceVersion"], 1, "{end}");
    assert!(end["reservoirId"].is_string(), "{end}");
    assert!(last.sources[0].description.starts_with("DeltaSource["));

    // A DELETE on the source is a rewrite: refused, naming the version and operation.
    let url = url::Url::from_directory_path(dir.join("lake/bronze/flights")).unwrap();
    let table = deltalake::open_table(url).await.unwrap();
    let (table, _) = table.delete().with_predicate("day = 1").await.unwrap();
    let deleted_at = table.version().unwrap();
    let refused = run_file(&dir, "copy.toml");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!("version {deleted_at}")),
        "{stderr}"
    );
    assert!(stderr.contains("DELETE"), "{stderr}");
    assert!(stderr.contains("skip_change_commits"), "{stderr}");

    // With skip_change_commits the rewrite is skipped, later appends still flow.
    let copy = std::fs::read_to_string(dir.join("copy.toml")).unwrap();
    std::fs::write(
        dir.join("copy.toml"),
        copy.replace(
            "max_files_per_trigger = 1",
            "max_files_per_trigger = 1\nskip_change_commits = true",
        ),
    )
    .unwrap();
    weir::demo::data::land_flights(
        &dir.join("landing/flights"),
        &dir.join("_staging"),
        Some(11),
    )
    .unwrap();
    ok(&run_pipeline(&dir, &[], None));
    ok(&run_file(&dir, "copy.toml"));
    let ctx = SessionContext::new();
    register(&ctx, "c", delta_rows(&dir.join("lake/copy")).await).await;
    let days = strings(&ctx, "SELECT DISTINCT day FROM c").await;
    assert_eq!(
        days.len(),
        11,
        "days 1..=11 copied (day 1 was copied before the DELETE): {days:?}"
    );
    let dupes = strings(
        &ctx,
        &format!("SELECT {cols}, count(*) FROM c GROUP BY {cols} HAVING count(*) > 1"),
    )
    .await;
    assert!(dupes.is_empty(), "{dupes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_version_chooses_where_a_new_flow_starts() {
    // Bronze: 4 days, 2 files per batch -> versions 0 (days 1-2) and 1 (days 3-4).
    let (_tmp, dir) = bronze_only(4, "starting_version = 1");
    ok(&run_pipeline(&dir, &[], None));
    ok(&run_file(&dir, "copy.toml"));
    let ctx = SessionContext::new();
    register(&ctx, "c", delta_rows(&dir.join("lake/copy")).await).await;
    assert_eq!(
        strings(&ctx, "SELECT DISTINCT day FROM c").await,
        vec!["3", "4"]
    );

    // "latest": only commits after the flow's first run. The first run finds nothing
    // new, and still records where it starts (a batch without files), so the commits
    // made before the next run are read, not skipped by taking "latest" afresh.
    let latest = std::fs::read_to_string(dir.join("copy.toml"))
        .unwrap()
        .replace("starting_version = 1", "starting_version = \"latest\"")
        .replace("name = \"copy\"", "name = \"copy_latest\"")
        .replace("lake/copy", "lake/copy_latest");
    std::fs::write(dir.join("copy.toml"), latest).unwrap();
    ok(&run_file(&dir, "copy.toml"));
    assert_eq!(
        num_rows(&delta_rows(&dir.join("lake/copy_latest")).await),
        0,
        "nothing read yet"
    );
    weir::demo::data::land_flights(&dir.join("landing/flights"), &dir.join("_staging"), Some(6))
        .unwrap();
    ok(&run_pipeline(&dir, &[], None));
    ok(&run_file(&dir, "copy.toml"));
    let ctx = SessionContext::new();
    register(&ctx, "l", delta_rows(&dir.join("lake/copy_latest")).await).await;
    assert_eq!(
        strings(&ctx, "SELECT DISTINCT day FROM l ORDER BY day").await,
        vec!["5", "6"],
        "the commits after the first run, none before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_dimension_update_is_picked_up_and_not_reread_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The dimension is a Delta table written by deltalake (as another pipeline would).
    let dim_schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("carrier", arrow::datatypes::DataType::Utf8, true),
        arrow::datatypes::Field::new("name", arrow::datatypes::DataType::Utf8, true),
    ]));
    let dim = |carriers: &[&str], names: &[&str]| {
        RecordBatch::try_new(
            dim_schema.clone(),
            vec![
                Arc::new(arrow::array::StringArray::from(carriers.to_vec())),
                Arc::new(arrow::array::StringArray::from(names.to_vec())),
            ],
        )
        .unwrap()
    };
    let dim_path = dir.join("lake/airlines");
    std::fs::create_dir_all(&dim_path).unwrap();
    let table =
        deltalake::DeltaTable::try_from_url(url::Url::from_directory_path(&dim_path).unwrap())
            .await
            .unwrap();
    let table = table
        .write(vec![dim(&["UA", "AA"], &["United (v0)", "American (v0)"])])
        .await
        .unwrap();
    weir::demo::data::land_flights(&dir.join("landing/flights"), &dir.join("_staging"), Some(3))
        .unwrap();
    let pipeline = weir::demo::data::FLIGHTS_PIPELINE;
    let bronze_end = pipeline
        .find("[[flow]]\nname = \"bronze_weather\"")
        .unwrap();
    let toml = format!(
        "{}\n[[flow]]\nname = \"named\"\ntrigger = \"available_now\"\n\
         select = [\"carrier\", \"flight\", \"day\", \"airlines.name AS airline\"]\n\
         [flow.source]\ntype = \"delta\"\npath = \"lake/bronze/flights\"\nmax_files_per_trigger = 1\n\
         [[flow.join]]\ntable = \"lake/airlines\"\nalias = \"airlines\"\non = \"carrier\"\nhow = \"left\"\n\
         [flow.sink]\ntype = \"delta\"\npath = \"lake/named\"\n",
        pipeline[..bronze_end].replace("max_files_per_trigger = 100", "max_files_per_trigger = 1")
    );
    std::fs::write(dir.join("pipeline.toml"), toml).unwrap();
    ok(&run_pipeline(dir, &[], None));
    let progress = read_progress(&dir.join("_checkpoints/named/_weir/progress.jsonl")).unwrap();
    let reloads: Vec<bool> = progress
        .iter()
        .filter(|p| p.num_input_rows > 0)
        .map(|p| p.weir.dimensions[0].reloaded)
        .collect();
    assert_eq!(
        reloads,
        vec![true, false, false],
        "loaded once, then reused"
    );
    assert_eq!(progress[0].weir.dimensions[0].version, Some(0));

    // The dimension changes (a new version); the next batch sees it.
    table
        .write(vec![dim(&["UA"], &["United (v1)"])])
        .with_save_mode(deltalake::protocol::SaveMode::Overwrite)
        .await
        .unwrap();
    weir::demo::data::land_flights(&dir.join("landing/flights"), &dir.join("_staging"), Some(4))
        .unwrap();
    ok(&run_pipeline(dir, &[], None));
    let ctx = SessionContext::new();
    register(&ctx, "n", delta_rows(&dir.join("lake/named")).await).await;
    let by_day = strings(
        &ctx,
        "SELECT day, airline, count(*) FROM n WHERE carrier IN ('UA', 'AA') GROUP BY 1, 2",
    )
    .await;
    // Days 1-3 were joined with version 0 (and keep it, as in Spark); day 4 with version 1.
    assert!(
        by_day.iter().any(|r| r.starts_with("1|United (v0)|")),
        "{by_day:?}"
    );
    assert!(
        by_day.iter().any(|r| r.starts_with("4|United (v1)|")),
        "{by_day:?}"
    );
    assert!(
        by_day.iter().any(|r| r.starts_with("4|null|")),
        "AA left the dimension: {by_day:?}"
    );
    assert!(
        !by_day.iter().any(|r| r.starts_with("4|United (v0)")),
        "{by_day:?}"
    );
}

const MERGE_FLOW: &str = r#"
[[flow]]
name = "upsert"
trigger = "available_now"

[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, status STRING, seq BIGINT"
max_files_per_trigger = 1

[flow.source.csv]
header = true

[flow.sink]
type = "delta_merge"
path = "lake/status"
keys = ["id"]
order_by = "seq"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_merge_upserts_by_key_and_a_replayed_batch_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("pipeline.toml"), MERGE_FLOW).unwrap();
    // Batch 0 creates the table; id 1 appears twice: the greatest seq wins.
    land(
        &dir.join("landing"),
        "a.csv",
        b"id,status,seq\n1,created,1\n2,created,1\n1,paid,2\n",
    );
    ok(&run_pipeline(dir, &[], None));
    // Batch 1 updates id 2, inserts id 3; a null key matches nothing (SQL's `=`): inserted.
    land(
        &dir.join("landing"),
        "b.csv",
        b"id,status,seq\n2,shipped,3\n3,created,1\n,orphan,1\n",
    );
    // Crash after the sink committed batch 1: the replay must not merge again.
    let crashed = run_pipeline(dir, &[], Some("after_sink_commit:1"));
    assert!(!crashed.status.success());
    let version_after_crash = delta_version(&dir.join("lake/status")).await;
    ok(&run_pipeline(dir, &[], None));
    assert_eq!(
        delta_version(&dir.join("lake/status")).await,
        version_after_crash,
        "the replayed batch wrote no new version"
    );
    land(
        &dir.join("landing"),
        "c.csv",
        b"id,status,seq\n,orphan-again,2\n1,refunded,5\n",
    );
    ok(&run_pipeline(dir, &[], None));
    let rows = delta_rows(&dir.join("lake/status")).await;
    let got = strings_of(&rows, "SELECT id, status FROM t").await;
    assert_eq!(
        got,
        vec![
            "1|refunded",
            "2|shipped",
            "3|created",
            "null|orphan",
            "null|orphan-again"
        ],
        "one row per key, latest values; each null-key row is its own (null_safe_keys = true merges them)"
    );
    let progress = read_progress(&dir.join("_checkpoints/upsert/_weir/progress.jsonl")).unwrap();
    let replay = progress.iter().find(|p| p.weir.replayed).expect("replayed");
    assert!(replay.weir.sink_write_skipped);
    assert!(progress[0].sink.description.starts_with("DeltaMergeSink["));
}

async fn strings_of(batches: &[RecordBatch], sql_text: &str) -> Vec<String> {
    let ctx = SessionContext::new();
    register(&ctx, "t", batches.to_vec()).await;
    strings(&ctx, sql_text).await
}

#[test]
fn available_now_drains_flows_in_dependency_order_whatever_the_file_order() {
    // gold first in the file, silver, then bronze: the run still goes bronze -> silver -> gold.
    let (_tmp, dir) = demo_dir(3, |p| {
        let parts: Vec<&str> = p.split("\n[[flow]]\n").collect();
        let reversed: Vec<&str> = parts[1..].iter().rev().copied().collect();
        format!("{}\n[[flow]]\n{}", parts[0], reversed.join("\n[[flow]]\n"))
    });
    let out = run_pipeline(&dir, &[], None);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let pos = |name: &str| {
        stderr
            .find(&format!("flow {name}:"))
            .unwrap_or_else(|| panic!("{name}: {stderr}"))
    };
    assert!(pos("bronze_flights") < pos("silver_flights"));
    assert!(pos("silver_flights") < pos("gold_departures_hourly"));
    assert!(pos("bronze_weather") < pos("flights_weather"));
    assert!(dir.join("lake/gold/departures_hourly/_delta_log").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_time_hops_run_concurrently_and_pick_up_upstream_commits() {
    processing_time_hops(false).await;
}

/// The same with file notifications on the bronze flows' files sources: the day landed
/// while the process runs is taken from its notices (the backfill listing is an hour
/// away), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_time_hops_with_file_notifications_take_each_landed_file_once() {
    processing_time_hops(true).await;
}

async fn processing_time_hops(notifications: bool) {
    // bronze -> silver -> gold, all with processing_time "0 seconds", in one process.
    let (_tmp, dir) = demo_dir(2, |p| {
        let p = p.replace("trigger = \"available_now\"", "trigger = \"0 seconds\"");
        if notifications {
            p.replace(
                "type = \"files\"",
                "type = \"files\"\nuse_notifications = true\nbackfill_interval = \"1 hour\"",
            )
        } else {
            p
        }
    });
    if notifications {
        assert!(
            std::fs::read_to_string(dir.join("pipeline.toml"))
                .unwrap()
                .contains("use_notifications = true")
        );
    }
    let mut child = weir()
        .args(["run", "--headless"])
        .arg(dir.join("pipeline.toml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let silver = dir.join("lake/silver/flights");
    let days_in_silver = |dir: PathBuf| async move {
        if !dir.join("_delta_log").is_dir() {
            return Vec::new();
        }
        let ctx = SessionContext::new();
        let rows = delta_rows(&dir).await;
        if rows.is_empty() {
            return Vec::new();
        }
        register(&ctx, "s", rows).await;
        strings(&ctx, "SELECT DISTINCT day FROM s").await
    };
    // Wait (bounded) until the two landed days reach silver.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while days_in_silver(silver.clone()).await.len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "silver never got days 1-2"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // A new day lands while the process runs: it flows through bronze into silver.
    weir::demo::data::land_flights(&dir.join("landing/flights"), &dir.join("_staging"), Some(3))
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while days_in_silver(silver.clone()).await.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "day 3 never reached silver"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
    // Each flow ran several batches of its own (concurrently, not one after another).
    for flow in ["bronze_flights", "silver_flights"] {
        let p =
            read_progress(&dir.join(format!("_checkpoints/{flow}/_weir/progress.jsonl"))).unwrap();
        assert!(
            p.iter().filter(|r| r.num_input_rows > 0).count() >= 2,
            "{flow}: {}",
            p.len()
        );
    }
    // Exactly once in silver after the stop.
    let ctx = SessionContext::new();
    register(&ctx, "s", delta_rows(&silver).await).await;
    let dupes = strings(
        &ctx,
        "SELECT carrier, flight, origin, time_hour FROM s GROUP BY 1, 2, 3, 4 HAVING count(*) > 1",
    )
    .await;
    assert!(dupes.is_empty(), "{dupes:?}");
}

#[test]
fn check_sees_a_changed_aggregation_of_a_flow_reading_a_delta_table() {
    let (_tmp, dir) = demo_dir(3, |p| p);
    ok(&run_pipeline(&dir, &[], None));
    let check = |dir: &Path| {
        weir()
            .args(["check"])
            .arg(dir.join("pipeline.toml"))
            .args(["--flow", "gold_departures_hourly"])
            .output()
            .unwrap()
    };
    let same = check(&dir);
    assert!(
        same.status.success(),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );
    let text = std::fs::read_to_string(dir.join("pipeline.toml")).unwrap();
    std::fs::write(
        dir.join("pipeline.toml"),
        text.replace(
            "group_by = [\"window(time_hour, '1 hour')\", \"origin\"]",
            "group_by = [\"window(time_hour, '1 hour')\", \"origin\", \"dest\"]",
        ),
    )
    .unwrap();
    let changed = check(&dir);
    assert_eq!(changed.status.code(), Some(1));
    let out = String::from_utf8_lossy(&changed.stdout);
    assert!(out.contains("group_by"), "{out}");
}
