//! `weir export pyspark`: the refusals (one per construct without a faithful Spark
//! counterpart), and the exported scripts run on real PySpark + Delta Lake over the same
//! landed files as weir, every table compared row by row by a third reader (Python
//! `deltalake` + pyarrow, `tests/spark/compare.py`).
//!
//! The Spark tests need `scripts/spark-delta-setup.sh` (run by `.ci/run`): they run when
//! `WEIR_SPARK_TESTS=1` is set, and fail if Spark is missing then; otherwise they print
//! that they were skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::weir;

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn export(pipeline: &Path, extra: &[&str]) -> Output {
    weir()
        .args(["export", "pyspark"])
        .arg(pipeline)
        .args(extra)
        .output()
        .unwrap()
}

fn write_pipeline(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// The refusal of `text` (a pipeline with one flow), as printed.
fn refused(text: &str, extra: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), text);
    let out = export(&p, extra);
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected a refusal, got:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "no script on a refusal");
    String::from_utf8_lossy(&out.stderr).to_string()
}

const CSV_FLOW: &str = r#"
[[flow]]
name = "bronze"
trigger = "available_now"
{flow}
[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, ts TIMESTAMP, v DOUBLE, name STRING"
{source}
[flow.sink]
type = "delta"
path = "lake/bronze"
{sink}
"#;

fn csv_flow(flow: &str, source: &str, sink: &str) -> String {
    CSV_FLOW
        .replace("{flow}", flow)
        .replace("{source}", source)
        .replace("{sink}", sink)
}

fn assert_refusal(stderr: &str, key: &str, why: &str) {
    assert!(
        stderr.contains(&format!("flow \"bronze\": {key}: ")),
        "the refusal names the flow and key {key}:\n{stderr}"
    );
    assert!(
        stderr.contains(why),
        "the refusal says why ({why}):\n{stderr}"
    );
}

#[test]
fn refuses_min_file_age() {
    let e = refused(&csv_flow("", "min_file_age = \"30 seconds\"", ""), &[]);
    assert_refusal(&e, "source.min_file_age", "no minimum file age");
}

#[test]
fn refuses_allow_overwrites_on_oss_only() {
    let text = csv_flow("", "allow_overwrites = true", "");
    let e = refused(&text, &[]);
    assert_refusal(
        &e,
        "source.allow_overwrites",
        "never reads a rewritten file again",
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = export(
        &write_pipeline(tmp.path(), &text),
        &["--target", "databricks"],
    );
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"cloudFiles.allowOverwrites\", \"true\"")
    );
}

#[test]
fn refuses_bad_records_path_on_oss() {
    let e = refused(&csv_flow("", "bad_records_path = \"quarantine\"", ""), &[]);
    assert_refusal(
        &e,
        "source.bad_records_path",
        "badRecordsPath is a Databricks option",
    );
}

#[test]
fn refuses_bad_records_table() {
    let e = refused(
        &csv_flow("", "bad_records_table = \"lake/quarantine\"", ""),
        &["--target", "databricks"],
    );
    assert_refusal(&e, "source.bad_records_table", "line");
}

#[test]
fn refuses_an_inferred_schema_on_oss() {
    let text = csv_flow("", "", "").replace(
        "schema = \"id BIGINT, ts TIMESTAMP, v DOUBLE, name STRING\"\n",
        "",
    );
    let e = refused(&text, &[]);
    assert_refusal(&e, "source.schema", "needs a fixed schema");
}

#[test]
fn refuses_schema_evolution_that_rescues_on_oss() {
    let e = refused(&csv_flow("", "schema_evolution = \"rescue\"", ""), &[]);
    assert_refusal(
        &e,
        "source.schema_evolution",
        "drops fields its schema lacks",
    );
}

#[test]
fn refuses_an_unsafe_sink() {
    let e = refused(&csv_flow("", "", "idempotent = false"), &[]);
    assert_refusal(&e, "sink.idempotent", "drills only");
}

#[test]
fn refuses_a_function_without_a_spark_equivalent() {
    let e = refused(
        &csv_flow("select = [\"*\", \"concat(name, 'x') AS n\"]", "", ""),
        &[],
    );
    assert_refusal(&e, "select[1]", "`concat` has no verified Spark equivalent");
}

#[test]
fn refuses_integer_division() {
    let e = refused(&csv_flow("where = \"id / 2 > 3\"", "", ""), &[]);
    assert_refusal(&e, "where", "divides two integers as integers");
}

#[test]
fn refuses_an_unnamed_group_key() {
    let flow = r#"watermark = { column = "ts", delay = "1 hour" }
group_by = ["window(ts, '1 hour')", "upper(name)"]
aggregates = ["count(*) AS n"]"#;
    let e = refused(&csv_flow(flow, "", ""), &[]);
    assert_refusal(&e, "group_by[1]", "give the expression a name");
}

/// The script for `text` on `--target databricks` (it must not be refused).
fn databricks_script(text: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let out = export(
        &write_pipeline(tmp.path(), text),
        &["--target", "databricks"],
    );
    ok(&out);
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn refuses_partition_columns_on_oss_and_maps_them_to_auto_loader() {
    let text = csv_flow("", "partition_columns = [\"day\"]", "");
    let e = refused(&text, &[]);
    assert_refusal(
        &e,
        "source.partition_columns",
        "turns off Spark's partition discovery",
    );
    let script = databricks_script(&text);
    assert!(
        script.contains(".option(\"cloudFiles.partitionColumns\", \"day\")"),
        "{script}"
    );
    assert!(
        script.contains("name STRING, `day` STRING\")"),
        "a partition column the schema lacks is a STRING, as in weir: {script}"
    );
    // `[]` turns discovery off: Auto Loader's "".
    let script = databricks_script(&csv_flow("", "partition_columns = []", ""));
    assert!(
        script.contains(".option(\"cloudFiles.partitionColumns\", \"\")"),
        "{script}"
    );
    // No partition columns on OSS is no refusal.
    let tmp = tempfile::tempdir().unwrap();
    ok(&export(
        &write_pipeline(tmp.path(), &csv_flow("", "partition_columns = []", "")),
        &[],
    ));
}

#[test]
fn refuses_max_record_size_on_both_targets() {
    let text = csv_flow("", "max_record_size = \"1 MiB\"", "");
    for extra in [&[][..], &["--target", "databricks"][..]] {
        let e = refused(&text, extra);
        assert_refusal(
            &e,
            "source.max_record_size",
            "no limit on a record's size in bytes",
        );
    }
}

#[test]
fn refuses_skipping_existing_files_on_oss_and_maps_it_to_auto_loader() {
    let text = csv_flow("", "include_existing_files = false", "");
    let e = refused(&text, &[]);
    assert_refusal(
        &e,
        "source.include_existing_files",
        "always reads the files present at its first start",
    );
    let script = databricks_script(&text);
    assert!(
        script.contains(".option(\"cloudFiles.includeExistingFiles\", \"false\")"),
        "{script}"
    );
}

#[test]
fn refuses_modified_after_on_oss_and_maps_it_to_auto_loader() {
    let text = csv_flow("", "modified_after = \"2026-03-01T12:00:00+01:00\"", "");
    let e = refused(&text, &[]);
    assert_refusal(
        &e,
        "source.modified_after",
        "applies modifiedAfter to batch reads only",
    );
    let script = databricks_script(&text);
    assert!(
        script.contains(".option(\"modifiedAfter\", \"2026-03-01T11:00:00.000\")"),
        "the instant in UTC, the script's session time zone: {script}"
    );
}

#[test]
fn refuses_late_rows_of_a_stream_stream_join() {
    let text = r#"
[[flow]]
name = "bronze"
trigger = "available_now"
watermark = { column = "ts", delay = "1 hour" }
late_rows = { path = "lake/late" }
[flow.source]
type = "delta"
path = "lake/a"
[flow.stream_join]
alias = "b"
source = { type = "delta", path = "lake/b" }
watermark = { column = "ts", delay = "1 hour" }
on = ["id"]
time_range = { lower = "0 seconds", upper = "1 hour" }
[flow.sink]
type = "delta"
path = "lake/joined"
"#;
    let e = refused(text, &[]);
    assert_refusal(&e, "late_rows", "watermarks of both sides");
}

#[test]
fn refusals_are_all_listed_at_once() {
    let e = refused(
        &csv_flow(
            "where = \"id / 2 > 3\"",
            "min_file_age = \"1 minute\"",
            "idempotent = false",
        ),
        &[],
    );
    assert!(
        e.contains("3 key(s) have no faithful Spark equivalent"),
        "{e}"
    );
}

#[test]
fn the_demo_pipeline_exports_to_valid_python() {
    let tmp = tempfile::tempdir().unwrap();
    weir::demo::data::prepare(tmp.path(), Some(1)).unwrap();
    for target in ["oss", "databricks"] {
        let script = tmp.path().join(format!("flights_{target}.py"));
        let out = export(
            &tmp.path().join("pipeline.toml"),
            &["--target", target, "-o", script.to_str().unwrap()],
        );
        ok(&out);
        let text = std::fs::read_to_string(&script).unwrap();
        for needle in [
            "def flow_bronze_flights(spark, args):",
            "def flow_gold_departures_hourly(spark, args):",
            ".withWatermark(\"time_hour\", \"2 hours\")",
            "F.window(\"time_hour\", \"1 hour\")",
            ".dropDuplicates([\"carrier\", \"flight\", \"origin\", \"time_hour\"])",
            "LEFT OUTER JOIN `weather` ON batch.`origin` = `weather`.`origin`",
            "ORDER = [\"bronze_flights\", \"bronze_weather\", \"silver_flights\", \"gold_departures_hourly\", \"flights_weather\"]",
        ] {
            assert!(
                text.contains(needle),
                "{target}: missing {needle:?} in\n{text}"
            );
        }
        let compiled = Command::new("python3")
            .args(["-m", "py_compile"])
            .arg(&script)
            .output()
            .unwrap();
        ok(&compiled);
    }
}

/// Every Databricks-only feature at once: inferred CSV with hints and evolution, its
/// quarantine and Auto Loader listing options; JSON with a given schema that rescues;
/// Parquet; a Delta source; the sinks.
const DATABRICKS_PIPELINE: &str = r##"
[[flow]]
name = "bronze_csv"
trigger = { processing_time = "1 minute" }
select = ["*", "_metadata.file_path AS source_file"]
[flow.source]
type = "files"
path = "landing/csv"
format = "csv"
infer_column_types = true
schema_hints = "amount DECIMAL(12,2)"
schema_evolution = "add_new_columns"
schema_location = "_schemas/bronze_csv"
schema_inference_max_files = 20
schema_inference_max_bytes = "1 GiB"
bad_records_path = "quarantine/csv"
allow_overwrites = true
partition_columns = ["day"]
include_existing_files = false
modified_after = "2026-01-01T00:00:00Z"
path_glob_filter = "*.csv"
max_bytes_per_trigger = "64 MiB"
encoding = "ISO-8859-1"
session_time_zone = "Europe/Paris"
timestamp_format = "dd/MM/yyyy HH:mm"
[flow.source.csv]
delimiter = ";"
quote = "'"
escape = "\\"
null_value = "NA"
comment = "#"
empty_value = "-"
nan_value = "nan"
positive_inf = "inf"
negative_inf = "-inf"
[flow.sink]
type = "delta"
path = "lake/bronze/csv"
partition_by = ["day"]

[[flow]]
name = "bronze_json"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing/json"
format = "json"
schema = "id BIGINT, ts TIMESTAMP, v DOUBLE"
schema_evolution = "rescue"
allow_non_numeric_numbers = false
max_files_per_trigger = 10
[flow.sink]
type = "delta_merge"
path = "lake/bronze/json"
keys = ["id"]
order_by = "ts"

[[flow]]
name = "bronze_parquet"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing/parquet"
format = "parquet"
schema = "id BIGINT, name STRING"
[flow.sink]
type = "delta"
path = "lake/bronze/parquet"

[[flow]]
name = "silver"
trigger = "available_now"
[flow.source]
type = "delta"
path = "lake/bronze/json"
starting_version = 3
skip_change_commits = true
max_bytes_per_trigger = "1 MiB"
[flow.sink]
type = "delta"
path = "lake/silver"
"##;

/// The options the Databricks script may pass, each documented by Databricks: Auto
/// Loader's common options and its file format options (docs.databricks.com/ingestion/
/// cloud-object-storage/auto-loader/options: generic, JSON and CSV), the Delta streaming
/// source and sink (docs.databricks.com/structured-streaming/delta-lake), Delta's
/// idempotent writes (txnAppId, txnVersion), and the schema inference sample confs
/// (docs.databricks.com/ingestion/cloud-object-storage/auto-loader/schema).
const DATABRICKS_DOCUMENTED: &[&str] = &[
    // Auto Loader: common options.
    "cloudFiles.format",
    "cloudFiles.schemaLocation",
    "cloudFiles.inferColumnTypes",
    "cloudFiles.schemaEvolutionMode",
    "cloudFiles.schemaHints",
    "cloudFiles.maxFilesPerTrigger",
    "cloudFiles.maxBytesPerTrigger",
    "cloudFiles.allowOverwrites",
    "cloudFiles.includeExistingFiles",
    "cloudFiles.partitionColumns",
    // File format options: generic, JSON, CSV.
    "pathGlobFilter",
    "modifiedAfter",
    "rescuedDataColumn",
    "badRecordsPath",
    "encoding",
    "timeZone",
    "timestampFormat",
    "allowNonNumericNumbers",
    "header",
    "sep",
    "quote",
    "escape",
    "nullValue",
    "comment",
    "emptyValue",
    "nanValue",
    "positiveInf",
    "negativeInf",
    // Delta source and sink, streaming.
    "startingVersion",
    "skipChangeCommits",
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "checkpointLocation",
    "mergeSchema",
    // Idempotent writes in foreachBatch (docs.databricks.com/structured-streaming/foreach).
    "txnAppId",
    "txnVersion",
    // Session confs.
    "spark.databricks.cloudFiles.schemaInference.sampleSize.numFiles",
    "spark.databricks.cloudFiles.schemaInference.sampleSize.numBytes",
    "spark.sql.session.timeZone",
    "spark.databricks.delta.write.txnAppId",
    "spark.databricks.delta.write.txnVersion",
    // Apache Spark's own SQLConf, which Databricks Runtime inherits but does not document:
    // one watermark for late rows and eviction, as weir (docs/spark.md, "Late rows").
    "spark.sql.streaming.statefulOperator.allowMultiple",
];

#[test]
fn the_databricks_script_compiles_and_uses_only_documented_options() {
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), DATABRICKS_PIPELINE);
    let script = tmp.path().join("pipeline.py");
    let out = export(
        &pipeline,
        &["--target", "databricks", "-o", script.to_str().unwrap()],
    );
    ok(&out);
    let compiled = Command::new("python3")
        .args(["-m", "py_compile"])
        .arg(&script)
        .output()
        .unwrap();
    ok(&compiled);
    let text = std::fs::read_to_string(&script).unwrap();
    let used = regex::Regex::new(r#"\.option\("([^"]+)"|conf\.(?:set|unset)\("([^"]+)""#).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for c in used.captures_iter(&text) {
        let key = c.get(1).or(c.get(2)).unwrap().as_str().to_string();
        assert!(
            DATABRICKS_DOCUMENTED.contains(&key.as_str()),
            "{key} is not a documented Databricks option or conf:\n{text}"
        );
        seen.insert(key);
    }
    // The Databricks-only features are all there, with Auto Loader's own names.
    for key in [
        "cloudFiles.schemaLocation",
        "cloudFiles.schemaHints",
        "cloudFiles.schemaEvolutionMode",
        "cloudFiles.allowOverwrites",
        "cloudFiles.includeExistingFiles",
        "cloudFiles.partitionColumns",
        "modifiedAfter",
        "badRecordsPath",
        "rescuedDataColumn",
        "spark.databricks.cloudFiles.schemaInference.sampleSize.numFiles",
        "skipChangeCommits",
    ] {
        assert!(seen.contains(key), "{key} missing:\n{text}");
    }
    for needle in [
        ".option(\"cloudFiles.schemaEvolutionMode\", \"addNewColumns\")",
        ".option(\"cloudFiles.schemaEvolutionMode\", \"rescue\")",
        ".option(\"cloudFiles.schemaHints\", \"amount DECIMAL(12,2)\")",
        ".option(\"rescuedDataColumn\", \"_rescued_data\")",
        ".option(\"encoding\", \"ISO-8859-1\")",
        ".option(\"timeZone\", \"Europe/Paris\")",
        "spark.conf.set(\"spark.databricks.cloudFiles.schemaInference.sampleSize.numFiles\", \"20\")",
        "spark.readStream.format(\"cloudFiles\")",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    assert!(
        !text.contains("recursiveFileLookup") && !text.contains("_corrupt_record STRING"),
        "no OSS-only reading on Databricks:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Real Spark.

/// The venv and jars `scripts/spark-delta-setup.sh` installs, when Spark tests are on.
struct Spark {
    python: PathBuf,
    jars: Vec<PathBuf>,
}

fn spark() -> Option<Spark> {
    let wanted = std::env::var("WEIR_SPARK_TESTS").is_ok_and(|v| v == "1");
    if !wanted {
        eprintln!(
            "skipped: Spark tests run with WEIR_SPARK_TESTS=1 (after scripts/spark-delta-setup.sh)"
        );
        return None;
    }
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_default());
    let venv = std::env::var("WEIR_DELTA_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home.join(".cache/weir-delta-venv"));
    let jars_dir = std::env::var("WEIR_DELTA_JARS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home.join(".cache/weir-jars/delta"));
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "Spark tests are on but {} is missing: run scripts/spark-delta-setup.sh",
        python.display()
    );
    let mut jars: Vec<PathBuf> = std::fs::read_dir(&jars_dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run scripts/spark-delta-setup.sh",
                jars_dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jar"))
        .collect();
    jars.sort();
    assert!(
        jars.iter()
            .any(|j| j.to_string_lossy().contains("delta-spark")),
        "no delta-spark jar in {}",
        jars_dir.display()
    );
    Some(Spark { python, jars })
}

/// The machine-wide Spark lock (`/var/tmp/weir-spark.lock`, or `WEIR_SPARK_LOCK`): one JVM
/// at a time, across test threads and processes (several JVMs at once on a small machine
/// can stall for many minutes). Released on drop.
fn spark_lock() -> nix::fcntl::Flock<std::fs::File> {
    let path = std::env::var("WEIR_SPARK_LOCK")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/var/tmp/weir-spark.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("locking {}: {e}", path.display()))
}

impl Spark {
    /// Runs an exported script on PySpark `local[2]` (one JVM per call), holding the Spark
    /// lock. The confs keep a small run small: 2 shuffle partitions, 2 partitions for
    /// Delta's log replay (default 50), no UI; and the JVM short-lived: the C1 compiler
    /// only and the serial GC (a run of a few minutes spends much of its CPU in C2
    /// compilations it never profits from: 2.5x faster here, same plans and results).
    fn run(&self, script: &Path, args: &[String]) -> Output {
        let jars: Vec<String> = self.jars.iter().map(|j| j.display().to_string()).collect();
        let submit = format!(
            "--master local[2] --driver-memory 2g \
             --driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' \
             --conf spark.ui.enabled=false \
             --conf spark.ui.showConsoleProgress=false --conf spark.sql.shuffle.partitions=2 \
             --conf spark.databricks.delta.snapshotPartitions=2 \
             --jars {} pyspark-shell",
            jars.join(",")
        );
        let _lock = spark_lock();
        let started = std::time::Instant::now();
        let out = Command::new(&self.python)
            .arg(script)
            .args(args)
            .env("PYSPARK_SUBMIT_ARGS", submit)
            .env("PYSPARK_PYTHON", &self.python)
            .output()
            .unwrap();
        eprintln!(
            "spark: {} in {:.0} s",
            script.display(),
            started.elapsed().as_secs_f64()
        );
        out
    }

    /// Compares table pairs with `tests/spark/compare.py`.
    fn compare(&self, pairs: Value) -> Vec<Value> {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            tmp.path(),
            serde_json::json!({"pairs": pairs, "rel_tol": 1e-9}).to_string(),
        )
        .unwrap();
        let out = Command::new(&self.python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spark/compare.py"))
            .arg(tmp.path())
            .output()
            .unwrap();
        ok(&out);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["tables"].as_array().cloned().unwrap_or_default()
    }
}

fn run_weir(pipeline: &Path) {
    let out = weir()
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(pipeline)
        .output()
        .unwrap();
    ok(&out);
}

/// Every table equal, with the row counts, or a message listing the differences.
fn assert_tables_equal(tables: &[Value]) {
    let mut bad = Vec::new();
    for t in tables {
        eprintln!(
            "{}: weir {} rows, spark {} rows, equal: {}",
            t["name"], t["rows_weir"], t["rows_spark"], t["equal"]
        );
        if t["equal"] != Value::Bool(true) || t.get("types").is_some() {
            bad.push(t.to_string());
        }
    }
    assert!(bad.is_empty(), "tables differ:\n{}", bad.join("\n"));
}

#[test]
fn the_demo_pipeline_on_spark_equals_weir() {
    let Some(spark) = spark() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    weir::demo::data::prepare(dir, Some(3)).unwrap();
    let pipeline = dir.join("pipeline.toml");
    run_weir(&pipeline);
    let script = dir.join("flights.py");
    ok(&export(&pipeline, &["-o", script.to_str().unwrap()]));
    let sdir = dir.join("spark");
    let p = |s: &str| dir.join(s).display().to_string();
    let args: Vec<String> = vec![
        "--base".into(),
        sdir.display().to_string(),
        "--path".into(),
        format!("bronze_flights.source={}", p("landing/flights")),
        "--path".into(),
        format!("bronze_weather.source={}", p("landing/weather")),
        "--path".into(),
        format!("silver_flights.join.airlines={}", p("dims/airlines.csv")),
        "--path".into(),
        format!(
            "silver_flights.join.dest_airport={}",
            p("dims/airports.csv")
        ),
    ];
    let out = spark.run(&script, &args);
    ok(&out);
    let pair = |name: &str, ignore: &[&str]| {
        serde_json::json!({
            "name": name,
            "weir": dir.join(name).display().to_string(),
            "spark": sdir.join(name).display().to_string(),
            "ignore": ignore,
        })
    };
    let tables = spark.compare(serde_json::json!([
        pair("lake/bronze/flights", &["ingested_at"]),
        pair("lake/bronze/weather", &[]),
        pair("lake/silver/flights", &["ingested_at"]),
        pair("lake/gold/departures_hourly", &[]),
        pair("lake/late/departures_hourly", &[]),
        pair("lake/gold/flights_weather", &[]),
    ]));
    assert_tables_equal(&tables);
    assert!(
        tables
            .iter()
            .all(|t| t["name"].as_str().is_some_and(|n| n.contains("late"))
                || t["rows_weir"].as_u64() > Some(0))
    );
}

/// Writes `text` to `path` with modification time `base + i` seconds (files are planned
/// oldest first by both engines).
fn land(path: &Path, bytes: &[u8], i: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    let t =
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_790_000_000 + i * 10);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// JSON lines events: ids with a few exact duplicates in one file, increasing event times
/// with jitter under the watermark delay, a null kind and a negative amount (filtered).
fn land_events(dir: &Path) {
    let kinds = ["a", "b", "c"];
    let mut id = 0u64;
    for f in 0..6u64 {
        let mut text = String::new();
        for r in 0..20u64 {
            id += 1;
            let minute = f * 20 + r;
            let jitter = (id * 7) % 4;
            let ts = format!(
                "2026-03-01T10:{:02}:{:02}Z",
                (minute + jitter) % 60,
                id % 60
            );
            let hour_ts = if minute + jitter >= 60 {
                ts.replacen("T10:", "T11:", 1)
            } else {
                ts
            };
            let user = format!("u{}", id % 4);
            let amount = (id * 37 % 1000) as f64 / 10.0 - if id == 17 { 200.0 } else { 0.0 };
            let kind = if id == 23 {
                "null".to_string()
            } else {
                format!("\"{}\"", kinds[(id % 3) as usize])
            };
            let line = format!(
                "{{\"id\":{id},\"ts\":\"{hour_ts}\",\"user\":\"{user}\",\"amount\":{amount},\"kind\":{kind}}}\n"
            );
            text.push_str(&line);
            if id.is_multiple_of(9) {
                text.push_str(&line);
            }
        }
        land(
            &dir.join(format!("landing/events/events_{f}.json")),
            text.as_bytes(),
            f,
        );
    }
    land(
        &dir.join("landing/events/notes.txt"),
        b"not an event file\n",
        7,
    );
}

/// Three files, one per batch: 10:00-10:19, then 11:00-11:19 (the watermark moves to
/// 10:49:xx), then rows at 10:0x (late by ~45 minutes: behind the watermark on both
/// engines' rules, far from its edge), rows at 11:2x (on time) and rows without an event
/// time.
fn land_late_events(dir: &Path) {
    let mut id = 0u64;
    for f in 0..3u64 {
        let mut text = String::new();
        for r in 0..12u64 {
            id += 1;
            let user = format!("u{}", id % 3);
            let amount = (id * 13 % 100) as f64 / 4.0;
            let ts = match (f, r % 4) {
                (0, _) => format!("\"2026-03-01T10:{:02}:00Z\"", r + 2),
                (1, _) => format!("\"2026-03-01T11:{:02}:00Z\"", r + 2),
                (_, 0) => "null".to_string(),
                (_, 1) => format!("\"2026-03-01T10:{:02}:30Z\"", r),
                _ => format!("\"2026-03-01T11:{:02}:00Z\"", r + 20),
            };
            text.push_str(&format!(
                "{{\"id\":{id},\"ts\":{ts},\"user\":\"{user}\",\"amount\":{amount}}}\n"
            ));
        }
        land(
            &dir.join(format!("landing/events/events_{f}.json")),
            text.as_bytes(),
            f,
        );
    }
}

fn write_parquet(path: &Path, batch: arrow::record_batch::RecordBatch, i: u64) {
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    land(path, &buf, i);
}

/// Orders (CSV with `;`, comments, `-` as null), payments (Parquet), customers (CSV), and a
/// Parquet dimension of SKU prices.
fn land_orders(dir: &Path) {
    use arrow::array::{Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;
    let mut order = 0i64;
    let mut payments: Vec<(i64, i64, i64, f64)> = Vec::new();
    for f in 0..3u64 {
        let mut text = String::from("order_id;ts;customer;sku;qty;note\n# comment line\n");
        for r in 0..12i64 {
            order += 1;
            let minute = f as i64 * 12 + r;
            let ts = format!("2026-03-01 09:{:02}:00", minute);
            let customer = format!("c{}", order % 3 + 1);
            let sku = format!("s{}", order % 4 + 1);
            let qty = if order == 5 { 0 } else { order % 5 + 1 };
            let note = if order % 4 == 0 {
                "-".to_string()
            } else {
                format!("\"note; {order}\"")
            };
            text.push_str(&format!("{order};{ts};{customer};{sku};{qty};{note}\n"));
            if order % 3 != 0 {
                let delay_min = (order * 11) % 45;
                let paid_us = (1_772_355_600 + minute * 60 + delay_min * 60) * 1_000_000;
                payments.push((1000 + order, order, paid_us, order as f64 * 2.5));
            }
        }
        land(
            &dir.join(format!("landing/orders/orders_{f}.csv")),
            text.as_bytes(),
            f,
        );
    }
    let ts_type = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("payment_id", DataType::Int64, true),
        Field::new("order_id", DataType::Int64, true),
        Field::new("paid_at", ts_type, true),
        Field::new("amount", DataType::Float64, true),
    ]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(
                payments.iter().map(|p| p.0).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                payments.iter().map(|p| p.1).collect::<Vec<_>>(),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(payments.iter().map(|p| p.2).collect::<Vec<_>>())
                    .with_timezone("UTC"),
            ),
            Arc::new(Float64Array::from(
                payments.iter().map(|p| p.3).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    write_parquet(&dir.join("landing/payments/payments_0.parquet"), batch, 0);
    land(
        &dir.join("landing/customers/customers.csv"),
        b"customer,region\nc1,EU\nc2,US\n",
        0,
    );
    let skus = Arc::new(Schema::new(vec![
        Field::new("sku", DataType::Utf8, true),
        Field::new("price", DataType::Float64, true),
    ]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        skus,
        vec![
            Arc::new(StringArray::from(vec!["s1", "s2", "s3"])),
            Arc::new(Float64Array::from(vec![1.25, 9.99, 0.1])),
        ],
    )
    .unwrap();
    write_parquet(&dir.join("dims/skus.parquet"), batch, 0);
}

/// Runs `pipeline` (a fixture) with weir and with Spark over the same landed files and
/// compares the tables.
fn weir_and_spark_agree(
    spark: &Spark,
    fixture: &str,
    land_input: fn(&Path),
    tables: &[(&str, &[&str])],
    inputs: &[(&str, &str)],
) -> std::collections::BTreeMap<String, u64> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    land_input(dir);
    let pipeline = dir.join("pipeline.toml");
    std::fs::copy(
        crate::support::fixture(&format!("spark_export/{fixture}")),
        &pipeline,
    )
    .unwrap();
    run_weir(&pipeline);
    let script = dir.join("pipeline.py");
    ok(&export(&pipeline, &["-o", script.to_str().unwrap()]));
    let sdir = dir.join("spark");
    let mut args: Vec<String> = vec!["--base".into(), sdir.display().to_string()];
    for (key, rel) in inputs {
        args.push("--path".into());
        args.push(format!("{key}={}", dir.join(rel).display()));
    }
    let out = spark.run(&script, &args);
    ok(&out);
    let pairs: Vec<Value> = tables
        .iter()
        .map(|(name, ignore)| {
            serde_json::json!({
                "name": name,
                "weir": dir.join(name).display().to_string(),
                "spark": sdir.join(name).display().to_string(),
                "ignore": ignore,
            })
        })
        .collect();
    let result = spark.compare(Value::Array(pairs));
    assert_tables_equal(&result);
    assert!(
        result.iter().all(|t| t["rows_weir"].as_u64() > Some(0)),
        "every table has rows: {result:?}"
    );
    result
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or_default().to_string(),
                t["rows_weir"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn a_json_pipeline_with_dedup_windows_and_upserts_on_spark_equals_weir() {
    let Some(spark) = spark() else { return };
    weir_and_spark_agree(
        &spark,
        "events.toml",
        land_events,
        &[
            ("lake/bronze/events", &[]),
            ("lake/silver/events", &[]),
            ("lake/gold/sliding", &[]),
            ("lake/gold/kinds", &[]),
            ("lake/gold/latest_per_user", &[]),
        ],
        &[("bronze_events.source", "landing/events")],
    );
}

/// Real late rows: the windows and the late-rows table (rows behind the watermark and rows
/// without an event time) are equal on Spark's companion query and weir.
#[test]
fn late_rows_on_spark_equal_weirs() {
    let Some(spark) = spark() else { return };
    let late = weir_and_spark_agree(
        &spark,
        "late.toml",
        land_late_events,
        &[("lake/gold/windows", &[]), ("lake/late/windows", &[])],
        &[("windows.source", "landing/events")],
    );
    // 3 late rows and 3 without an event time, in the third file (checked on weir's table
    // by the independent reader, so the comparison above is not vacuous).
    assert_eq!(late["lake/late/windows"], 6, "{late:?}");
}

#[test]
fn a_pipeline_with_parquet_dimensions_and_a_stream_join_on_spark_equals_weir() {
    let Some(spark) = spark() else { return };
    weir_and_spark_agree(
        &spark,
        "joins.toml",
        land_orders,
        &[
            ("lake/bronze/orders", &[]),
            ("lake/bronze/payments", &[]),
            ("lake/dims/customers", &[]),
            ("lake/silver/orders", &[]),
            ("lake/gold/paid_orders", &[]),
        ],
        &[
            ("bronze_orders.source", "landing/orders"),
            ("bronze_payments.source", "landing/payments"),
            ("customers_dim.source", "landing/customers"),
            ("silver_orders.join.s", "dims/skus.parquet"),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Handoff: weir ingests part of the input, Spark resumes from the handed-over checkpoint.

const HANDOFF_PIPELINE: &str = r#"
[[flow]]
name = "bronze"
trigger = "available_now"
select = ["*", "_metadata.file_name AS file_name"]

[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, ts TIMESTAMP, v DOUBLE"
max_files_per_trigger = 2

[flow.sink]
type = "delta"
path = "lake/bronze"

[[flow]]
name = "silver"
trigger = "available_now"
where = "v >= 10.0"

[flow.source]
type = "delta"
path = "lake/bronze"
max_files_per_trigger = 1

[flow.sink]
type = "delta"
path = "lake/silver"

[[flow]]
name = "gold"
trigger = "available_now"
watermark = { column = "ts", delay = "1 hour" }
group_by = ["window(ts, '1 hour')"]
aggregates = ["count(*) AS n"]

[flow.source]
type = "delta"
path = "lake/silver"

[flow.sink]
type = "delta"
path = "lake/gold"
"#;

/// Lands CSV files `from..to` (10 rows each, ids unique), file i modified at i * 10 s.
fn land_handoff_files(dir: &Path, from: u64, to: u64) {
    for f in from..to {
        let mut text = String::from("id,ts,v\n");
        for r in 0..10u64 {
            let id = f * 10 + r;
            text.push_str(&format!(
                "{id},2026-03-01T{:02}:{:02}:00Z,{}\n",
                f % 24,
                r,
                id as f64 * 0.5
            ));
        }
        land(
            &dir.join(format!("landing/part_{f:03}.csv")),
            text.as_bytes(),
            f,
        );
    }
}

/// The `txn` versions of `app_id` in a Delta table's log, in commit order.
fn txn_versions(table: &Path, app_id: &str) -> Vec<i64> {
    let mut commits: Vec<(u64, PathBuf)> = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            p.file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<u64>().ok())
                .map(|v| (v, p.clone()))
        })
        .collect();
    commits.sort();
    let mut out = Vec::new();
    for (_, p) in commits {
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["txn"]["appId"] == app_id {
                out.push(v["txn"]["version"].as_i64().unwrap());
            }
        }
    }
    out
}

fn query_id(checkpoint: &Path) -> String {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(checkpoint.join("metadata")).unwrap())
            .unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// Every id once in the table (read by Python `deltalake`), sorted.
fn ids_once(spark: &Spark, table: &Path) -> Vec<i64> {
    let out = Command::new(&spark.python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spark/compare.py"))
        .arg("--column")
        .arg(table)
        .arg("id")
        .output()
        .unwrap();
    ok(&out);
    let mut ids: Vec<i64> = serde_json::from_slice(&out.stdout).unwrap();
    ids.sort();
    let mut dedup = ids.clone();
    dedup.dedup();
    assert_eq!(ids, dedup, "an id is in {} more than once", table.display());
    ids
}

#[test]
fn a_stateful_flow_is_not_handed_over_and_the_safe_paths_are_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    land_handoff_files(dir, 0, 2);
    let pipeline = write_pipeline(dir, HANDOFF_PIPELINE);
    run_weir(&pipeline);
    let out = export(&pipeline, &["--handoff", "--flow", "gold"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "flow \"gold\": cannot hand over: its aggregation keeps open groups in state",
        "Two safe paths",
        "1. Rebuild from the source with a deliberate reset",
        "dry-run of the reset:",
        "2. Let weir drain, then start Spark after it",
        "startingVersion =",
        "nothing was handed over",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    assert!(
        !dir.join("_checkpoints/gold.spark").exists(),
        "nothing written"
    );
}

#[test]
fn spark_resumes_a_handed_over_flow_exactly_once_also_after_a_crash() {
    let Some(spark) = spark() else { return };
    for crash in [None, Some("after_offsets:1@bronze")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        land_handoff_files(dir, 0, 4);
        let pipeline = write_pipeline(dir, HANDOFF_PIPELINE);
        match crash {
            None => {
                for flow in ["bronze", "silver"] {
                    ok(&weir()
                        .args(["run", "--headless", "--flow", flow])
                        .arg(&pipeline)
                        .output()
                        .unwrap());
                }
            }
            Some(fp) => {
                let out = weir()
                    .args(["run", "--headless", "--flow", "bronze"])
                    .arg(&pipeline)
                    .env("WEIR_FAILPOINT", fp)
                    .output()
                    .unwrap();
                assert!(!out.status.success(), "the failpoint aborts weir");
            }
        }
        let handed: &[&str] = if crash.is_none() {
            &["bronze", "silver"]
        } else {
            &["bronze"]
        };
        let weir_ids = ids_once(&spark, &dir.join("lake/bronze"));
        assert!(
            !weir_ids.is_empty() && weir_ids.len() <= 40,
            "weir ingested part: {}",
            weir_ids.len()
        );
        // The rest lands; Spark takes over.
        land_handoff_files(dir, 4, 8);
        let script = dir.join("pipeline.py");
        let mut args = vec!["pyspark", "--handoff", "-o", script.to_str().unwrap()];
        for f in handed {
            args.extend(["--flow", f]);
        }
        let out = weir()
            .arg("export")
            .args(&args)
            .arg(&pipeline)
            .output()
            .unwrap();
        ok(&out);
        let note = String::from_utf8_lossy(&out.stderr);
        assert!(note.contains("handed over flow bronze"), "{note}");
        if crash.is_some() {
            assert!(note.contains("Spark re-runs batch 1"), "{note}");
        }
        let bronze_ck = dir.join("_checkpoints/bronze.spark");
        assert_eq!(
            query_id(&bronze_ck),
            query_id(&dir.join("_checkpoints/bronze"))
        );
        let mut run_args: Vec<String> = Vec::new();
        for f in handed {
            run_args.push("--flow".into());
            run_args.push(f.to_string());
        }
        let out = spark.run(&script, &run_args);
        ok(&out);
        let ids = ids_once(&spark, &dir.join("lake/bronze"));
        assert_eq!(
            ids,
            (0..80).collect::<Vec<i64>>(),
            "every row once in bronze"
        );
        let versions = txn_versions(&dir.join("lake/bronze"), &query_id(&bronze_ck));
        assert_eq!(
            versions,
            (0..versions.len() as i64).collect::<Vec<_>>(),
            "one continuous txn sequence (weir's batches, then Spark's)"
        );
        assert!(versions.len() >= 4, "8 files, 2 per batch: {versions:?}");
        if crash.is_none() {
            let silver = ids_once(&spark, &dir.join("lake/silver"));
            assert_eq!(
                silver,
                (20..80).collect::<Vec<i64>>(),
                "silver: v >= 10, every row once"
            );
            let sv = txn_versions(
                &dir.join("lake/silver"),
                &query_id(&dir.join("_checkpoints/silver")),
            );
            assert_eq!(sv, (0..sv.len() as i64).collect::<Vec<_>>());
        }
    }
}
