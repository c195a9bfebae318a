//! `weir sql` through the real binary, the peeks, and the console's SQL pane:
//!
//! - answers equal a second reader's (the parquet files the Delta log lists, read with
//!   the parquet crate; and Python deltalake when `WEIR_SPARK_TESTS=1`) and known counts;
//! - the row limit cuts and says so, the time limit cancels a slow query, DDL and DML
//!   are refused and change nothing, errors name the table or column;
//! - the peeks return the last commit's rows and the last input files' rows;
//! - the pane at 80x24 and 120x40 (insta), and `:sql` in the real console (tmux).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

/// Landing files: 3 x 20 events (`kind` cycles click/view/buy), and in the last file a
/// row whose `n` is not a number (rescued) and a line that is not JSON (quarantined).
fn land_events(dir: &Path) {
    let landing = dir.join("landing/events");
    std::fs::create_dir_all(&landing).unwrap();
    let kinds = ["click", "view", "buy"];
    for f in 0..3 {
        let mut text: String = (0..20)
            .map(|i| {
                format!(
                    "{{\"id\":{},\"kind\":\"{}\",\"n\":{i}}}\n",
                    f * 100 + i,
                    kinds[i % 3]
                )
            })
            .collect();
        if f == 2 {
            text.push_str("{\"id\":999,\"kind\":\"click\",\"n\":\"oops\"}\n");
            text.push_str("garbage, not json\n");
        }
        std::fs::write(landing.join(format!("part-{f}.json")), text).unwrap();
    }
}

const PIPELINE: &str = r#"
[[flow]]
name = "bronze_events"
trigger = "available_now"

[flow.source]
type = "files"
path = "landing/events"
format = "json"
schema = "id BIGINT, kind STRING, n BIGINT"
max_files_per_trigger = 1
bad_records_path = "quarantine/events"

[flow.sink]
type = "delta"
path = "lake/bronze/events"

[[flow]]
name = "silver-clicks"
trigger = "available_now"
where = "kind = 'click'"

[flow.source]
type = "delta"
path = "lake/bronze/events"

[flow.sink]
type = "delta"
path = "lake/silver/clicks"
"#;

/// The pipeline, run to the end (bronze, then silver).
fn ran_pipeline(dir: &Path) -> PathBuf {
    land_events(dir);
    let p = write_pipeline(dir, PIPELINE);
    for flow in ["bronze_events", "silver-clicks"] {
        let out = weir()
            .args(["run", "--headless", "--flow", flow])
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "weir run {flow}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    p
}

fn sql(p: &Path, args: &[&str]) -> Output {
    weir().arg("sql").arg(p).args(args).output().unwrap()
}

fn sql_ok(p: &Path, args: &[&str]) -> String {
    let out = sql(p, args);
    assert!(
        out.status.success(),
        "weir sql {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_answers_equal_a_second_reader_and_known_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = ran_pipeline(dir);

    // The known answer: 61 rows (60 events and the rescued one), the broken line quarantined.
    let csv = sql_ok(
        &p,
        &[
            "--format",
            "csv",
            "SELECT kind, count(*) AS n FROM bronze_events GROUP BY kind ORDER BY kind",
        ],
    );
    assert_eq!(csv, "kind,n\nbuy,18\nclick,22\nview,21\n");

    // A second reader: the parquet files the Delta log lists, grouped here.
    let batches = delta_rows(&dir.join("lake/bronze/events")).await;
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for k in column_strings(&batches, "kind") {
        *counts.entry(k).or_default() += 1;
    }
    let oracle: String = std::iter::once("kind,n\n".to_string())
        .chain(counts.iter().map(|(k, n)| format!("{k},{n}\n")))
        .collect();
    assert_eq!(csv, oracle);

    // The same table by its path's last two components; the dashed flow name quoted.
    let json = sql_ok(
        &p,
        &[
            "--format",
            "json",
            "SELECT count(*) AS n FROM bronze.events",
        ],
    );
    assert_eq!(json.trim(), "{\"n\":61}");
    let json = sql_ok(
        &p,
        &[
            "--format",
            "json",
            "SELECT (SELECT count(*) FROM \"silver-clicks\") AS a, (SELECT count(*) FROM silver.clicks) AS b",
        ],
    );
    assert_eq!(json.trim(), "{\"a\":22,\"b\":22}");
    // The rescued row and the quarantine.
    let json = sql_ok(
        &p,
        &[
            "--format",
            "json",
            "SELECT id FROM bronze_events WHERE _rescued_data IS NOT NULL",
        ],
    );
    assert_eq!(json.trim(), "{\"id\":999}");
    let json = sql_ok(
        &p,
        &[
            "--format",
            "json",
            "SELECT raw, line FROM bronze_events_quarantine",
        ],
    );
    assert_eq!(json.trim(), "{\"raw\":\"garbage, not json\",\"line\":22}");

    // progress: one row per record, Spark's names unquoted, against the records' file.
    let mut oracle = std::collections::BTreeMap::<String, (u64, u64)>::new();
    for (flow, cp) in [
        ("bronze_events", "_checkpoints/bronze_events"),
        ("silver-clicks", "_checkpoints/silver-clicks"),
    ] {
        let text = std::fs::read_to_string(dir.join(cp).join("_weir/progress.jsonl")).unwrap();
        for l in text.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            let e = oracle.entry(flow.to_string()).or_default();
            e.0 += 1;
            e.1 += v["numInputRows"].as_u64().unwrap();
        }
    }
    let json = sql_ok(
        &p,
        &[
            "--format",
            "json",
            "SELECT flow, count(*) AS batches, sum(numInputRows) AS input_rows, max(sink['numOutputRows']) AS most \
             FROM progress GROUP BY flow ORDER BY flow",
        ],
    );
    let rows: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{json}");
    for r in &rows {
        let (batches, input) = oracle[r["flow"].as_str().unwrap()];
        assert_eq!(r["batches"].as_u64(), Some(batches), "{r}");
        assert_eq!(r["input_rows"].as_u64(), Some(input), "{r}");
    }
    assert_eq!(rows[0]["flow"], "bronze_events");
    assert_eq!(rows[0]["batches"], 3, "one batch per file");

    // The history: every query above, in the pipeline's .weir directory.
    let history =
        std::fs::read_to_string(dir.join(".weir/pipeline.toml.sql_history.jsonl")).unwrap();
    let queries: Vec<String> = history
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["sql"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(queries.len(), 6, "{history}");
    assert!(queries[0].starts_with("SELECT kind, count(*)"));

    // A third reader, independent of weir and of Rust: Python deltalake (when installed).
    if std::env::var("WEIR_SPARK_TESTS").is_ok_and(|v| v == "1") {
        let script = "import sys, json, collections\nfrom deltalake import DeltaTable\n\
            t = DeltaTable(sys.argv[1]).to_pyarrow_table()\n\
            c = collections.Counter(t.column('kind').to_pylist())\n\
            print(''.join(f'{k},{c[k]}\\n' for k in sorted(c)), end='')\n\
            import os; sys.stdout.flush(); os._exit(0)\n";
        let out = Command::new(crate::support::delta_python())
            .args(["-c", script])
            .arg(dir.join("lake/bronze/events"))
            .output()
            .expect("python3 with deltalake (WEIR_SPARK_TESTS=1)");
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            format!("kind,n\n{}", String::from_utf8_lossy(&out.stdout)),
            csv
        );
    }
}

/// Runs a command with a guard against hanging forever (no assertion on its speed).
fn output_within(mut cmd: Command, guard: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > guard {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "weir sql did not stop at its time limit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sql_limits_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let p = ran_pipeline(tmp.path());
    // More rows than the limit: cut, and stderr says so.
    let out = sql(
        &p,
        &[
            "--limit",
            "5",
            "--format",
            "csv",
            "SELECT * FROM bronze_events",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 6);
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));
    // Exactly as many rows as the limit: not cut.
    let out = sql(
        &p,
        &[
            "--limit",
            "61",
            "--format",
            "csv",
            "SELECT * FROM bronze_events",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 62);
    assert!(!stderr(&out).contains("truncated"), "{}", stderr(&out));
    // The table format says how many rows there are.
    let out = sql(
        &p,
        &["--limit", "3", "SELECT id FROM bronze_events ORDER BY id"],
    );
    assert!(
        stderr(&out).contains("3 rows shown (truncated"),
        "{}",
        stderr(&out)
    );
    // A query that would run for hours is cancelled at the time limit.
    let mut cmd = weir();
    cmd.arg("sql").arg(&p).args([
        "--timeout",
        "2s",
        "SELECT max(a.value + b.value) FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 1000000000) b",
    ]);
    let out = output_within(cmd, Duration::from_secs(300));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("time limit (2s)"), "{}", stderr(&out));
    // A memory-hungry query stops at the memory limit with a clear error.
    let out = sql(
        &p,
        &[
            "--max-memory",
            "1 MiB",
            "SELECT a.value, count(*) FROM generate_series(1, 3000000) a GROUP BY a.value ORDER BY 2 DESC",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("memory"), "{}", stderr(&out));
}

/// Issue #47, item 2: one limit covers everything a query allocates, not only what
/// DataFusion's operators reserve. Each query runs in a child process (`weir
/// sql-worker`) whose data segment is capped, so an expression that builds a 400 MB
/// string fails with the memory error instead of taking 1.5 GiB; so does a cross join
/// that materialises its rows, and a query under the limit still answers.
#[test]
fn one_memory_limit_covers_expressions_and_joins() {
    let tmp = tempfile::tempdir().unwrap();
    let p = ran_pipeline(tmp.path());
    for query in [
        "SELECT length(repeat('x', 400000000))",
        "SELECT string_agg(repeat(a.kind, 2000), ',') FROM bronze_events a CROSS JOIN generate_series(1, 20000) b",
    ] {
        let out = sql(&p, &["--max-memory", "16MiB", query]);
        assert_eq!(out.status.code(), Some(1), "{query}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("needs more memory than its limit (16.0 MiB)"),
            "{query}: {err}"
        );
        assert!(!err.contains("panicked"), "{query}: {err}");
    }
    // Under the limit: the same process path answers, rows intact.
    let out = sql(
        &p,
        &[
            "--max-memory",
            "16MiB",
            "--format",
            "csv",
            "SELECT length(repeat('x', 1000)) AS n",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n\n1000\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_refuses_ddl_and_dml_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = ran_pipeline(dir);
    let table = dir.join("lake/bronze/events");
    let version = delta_version(&table).await;
    for statement in [
        "INSERT INTO bronze_events VALUES (1, 'x', 1, NULL)",
        "DELETE FROM bronze_events",
        "UPDATE bronze_events SET n = 0",
        "DROP TABLE bronze_events",
        "CREATE TABLE t AS SELECT * FROM bronze_events",
        "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/etc'",
        "COPY bronze_events TO '/tmp/weir-sql-copy.parquet'",
        "SET datafusion.execution.batch_size = 1",
        "SELECT * INTO t2 FROM bronze_events",
        "EXPLAIN ANALYZE INSERT INTO bronze_events VALUES (1, 'x', 1, NULL)",
    ] {
        let out = sql(&p, &[statement]);
        assert_eq!(out.status.code(), Some(1), "{statement}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("read-only"),
            "{statement}: {}",
            stderr(&out)
        );
    }
    assert_eq!(delta_version(&table).await, version);
    assert_eq!(num_rows(&delta_rows(&table).await), 61);
    assert!(!Path::new("/tmp/weir-sql-copy.parquet").exists());
}

#[test]
fn sql_errors_name_the_table_and_the_column() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Before any run: the tables are named but not created yet.
    land_events(dir);
    let p = write_pipeline(dir, PIPELINE);
    let out = sql(&p, &["SELECT * FROM bronze_events"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("table bronze_events") && stderr(&out).contains("does not exist yet"),
        "{}",
        stderr(&out)
    );
    let listing = sql_ok(&p, &["--tables"]);
    for name in [
        "progress",
        "bronze_events  (sink of flow bronze_events",
        "\"silver-clicks\"",
        "bronze_events_quarantine",
        "bronze.events",
        "silver.clicks",
        "not created yet",
    ] {
        assert!(listing.contains(name), "{name} not in\n{listing}");
    }
    let p = ran_pipeline(&tempfile::tempdir().unwrap().keep());
    let out = sql(&p, &["SELECT * FROM nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("no table named nope") && err.contains("bronze_events"),
        "{err}"
    );
    let out = sql(&p, &["SELECT nope FROM bronze_events"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
    let out = sql(&p, &[]);
    assert_eq!(out.status.code(), Some(2), "no query is a usage error");
    let listing = sql_ok(&p, &["--tables"]);
    assert!(
        listing.contains("    id Int64, kind ") && listing.contains("_rescued_data "),
        "{listing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peeks_show_the_last_commit_and_the_last_input_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = ran_pipeline(dir);
    let pipeline = weir::pipeline::load(&p).unwrap();
    let flows = weir::sql::pipeline_tables(&pipeline);
    let limits = weir::sql::Limits::default();
    // What the engine recorded for each flow's last batch: its Delta version and rows.
    let last = |flow: &str| -> Value {
        let text = std::fs::read_to_string(
            dir.join("_checkpoints")
                .join(flow)
                .join("_weir/progress.jsonl"),
        )
        .unwrap();
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    };
    // The last commit of bronze holds part-2.json: 20 events and the rescued row.
    let out = weir::sql::peek::latest_output(&flows[0], &limits)
        .await
        .unwrap();
    assert_eq!(out.output.rows, 21, "{}", out.title);
    let version = last("bronze_events")["weir"]["deltaVersion"]
        .as_i64()
        .unwrap();
    assert!(
        out.title.contains(&format!("Delta version {version} ")),
        "{}",
        out.title
    );
    let ids = column_strings(&out.output.batches, "id");
    assert!(ids.contains(&"999".to_string()) && ids.contains(&"219".to_string()));
    assert!(
        !ids.contains(&"0".to_string()),
        "only the last commit's rows"
    );
    // Silver's last commit: as many rows as its last batch wrote.
    let out = weir::sql::peek::latest_output(&flows[1], &limits)
        .await
        .unwrap();
    let silver = last("silver-clicks");
    assert_eq!(
        out.output.rows as i64,
        silver["sink"]["numOutputRows"].as_i64().unwrap(),
        "{}",
        out.title
    );
    assert!(out.output.rows > 0);
    // The last input file, as the flow decodes it: the rescued row and the corrupt record
    // with its line.
    let out = weir::sql::peek::latest_input(&flows[0], &limits)
        .await
        .unwrap();
    assert!(out.title.contains("batch 2"), "{}", out.title);
    assert_eq!(out.output.rows, 22, "{}", out.title);
    let files = column_strings(&out.output.batches, "_file");
    assert!(
        files.iter().all(|f| f.ends_with("part-2.json")),
        "{files:?}"
    );
    let lines = column_strings(&out.output.batches, "_line");
    let rescued = column_strings(&out.output.batches, "_rescued_data");
    let corrupt = rescued
        .iter()
        .position(|r| r.contains("_corrupt_record"))
        .expect("the corrupt record");
    assert_eq!(lines[corrupt], "22");
    assert!(rescued.iter().any(|r| r.contains("oops")), "{rescued:?}");
    // Row limit.
    let small = weir::sql::Limits {
        max_rows: 5,
        ..Default::default()
    };
    let out = weir::sql::peek::latest_output(&flows[0], &small)
        .await
        .unwrap();
    assert_eq!((out.output.rows, out.output.truncated), (5, true));
    // A Delta-source flow has no input files to show: said so.
    let err = weir::sql::peek::latest_input(&flows[1], &limits)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not read files"), "{err}");
}

// --- The console's pane -------------------------------------------------------------

mod pane {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use weir::console::app::{App, Mode, Report, SqlState};
    use weir::console::model::FlowModel;
    use weir::console::session::{Session, sql_result};

    use crate::console::{screen, unicode};

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    fn typed(s: &mut Session, text: &str) {
        for c in text.chars() {
            s.key(key(KeyCode::Char(c)));
        }
    }

    fn app() -> App {
        let flows = ["bronze_events", "silver_flights"]
            .iter()
            .map(|n| FlowModel::new(*n))
            .collect();
        let mut app = App::new(
            Mode::Run,
            "pipeline.toml",
            flows,
            unicode(),
            3_600_000,
            1_796_033_200_000,
        );
        let tables = ["bronze_events", "silver_flights"]
            .iter()
            .map(|f| weir::sql::FlowTables {
                flow: f.to_string(),
                sink: Some(format!("/srv/lake/{}", f.replace('_', "/")).into()),
                ..Default::default()
            })
            .collect();
        app.sql = SqlState::new(tables, vec!["SELECT 1".into()]);
        app
    }

    /// A result of `n` rows of a wide table (more columns than 80 columns show).
    fn result(n: i64) -> weir::console::app::SqlResult {
        use arrow::array::{ArrayRef, Int64Array, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};
        use std::sync::Arc;
        let schema = Arc::new(Schema::new(vec![
            Field::new("origin", DataType::Utf8, true),
            Field::new("departures", DataType::Int64, true),
            Field::new("avg_dep_delay", DataType::Utf8, true),
            Field::new("dest_name", DataType::Utf8, true),
            Field::new("airline_name", DataType::Utf8, true),
        ]));
        let origins = ["EWR", "JFK", "LGA"];
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(
                (0..n).map(|i| origins[i as usize % 3]).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                (0..n).map(|i| 100 + i).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                (0..n).map(|i| format!("{}.25", i % 17)).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                (0..n)
                    .map(|i| format!("Hartsfield Jackson Atlanta Intl #{i}"))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                (0..n)
                    .map(|_| "ExpressJet Airlines Inc.")
                    .collect::<Vec<_>>(),
            )),
        ];
        let batch = arrow::record_batch::RecordBatch::try_new(schema.clone(), columns).unwrap();
        let out = weir::sql::QueryOutput {
            schema,
            batches: vec![batch],
            rows: n as usize,
            truncated: n == 1000,
            elapsed: std::time::Duration::from_millis(42),
        };
        sql_result(None, &out, 1000)
    }

    /// A session whose queries run on their thread and answer into a channel nobody
    /// reads: the tests inject the answers.
    fn session() -> (Session, tokio::sync::mpsc::Receiver<Report>) {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        (Session::new(app(), None).with_inputs(tx), rx)
    }

    #[test]
    fn sql_pane_snapshots() {
        // Opened with :sql: the query line and the tables.
        let (mut s, _rx) = session();
        s.key(key(KeyCode::Char(':')));
        typed(&mut s, "sql");
        s.key(key(KeyCode::Enter));
        typed(
            &mut s,
            "SELECT origin, count(*) FROM silver_flights GROUP BY origin",
        );
        insta::assert_snapshot!("sql_pane_typing_80x24", screen(&s, 80, 24));
        // History: Up recalls the previous query.
        s.key(key(KeyCode::Up));
        assert!(screen(&s, 80, 24).contains("SQL> SELECT 1"));
        s.key(key(KeyCode::Down));
        typed(&mut s, "SELECT * FROM gold");
        // Enter runs it (no engine here: the answer is injected as the thread would send it).
        s.key(key(KeyCode::Enter));
        assert!(screen(&s, 80, 24).contains("running for"));
        s.ingest(Report::Sql {
            id: 1,
            result: Ok(result(1000)),
        });
        insta::assert_snapshot!("sql_pane_rows_80x24", screen(&s, 80, 24));
        insta::assert_snapshot!("sql_pane_rows_120x40", screen(&s, 120, 40));
        // Scrolled down a page and right a column.
        s.key(key(KeyCode::PageDown));
        s.key(key(KeyCode::Right));
        let text = screen(&s, 80, 24);
        assert!(text.contains("rows 11-"), "{text}");
        assert!(text.contains("110") && !text.contains("EWR "), "{text}");
        s.key(key(KeyCode::End));
        assert!(screen(&s, 80, 24).contains("rows 1000-1000 of 1000"));
        // An error names what is wrong.
        s.key(key(KeyCode::Enter));
        s.ingest(Report::Sql {
            id: 2,
            result: Err(
                "no table named gold; the tables are: progress, bronze_events, silver_flights"
                    .into(),
            ),
        });
        insta::assert_snapshot!("sql_pane_error_80x24", screen(&s, 80, 24));
        // A late answer to an older query is ignored.
        s.ingest(Report::Sql {
            id: 1,
            result: Ok(result(3)),
        });
        assert!(screen(&s, 80, 24).contains("no table named gold"));
        // Esc closes.
        s.key(key(KeyCode::Esc));
        assert!(!screen(&s, 80, 24).contains("SQL>"));
    }

    #[test]
    fn peek_snapshots() {
        let (mut s, _rx) = session();
        s.key(key(KeyCode::Enter));
        s.key(key(KeyCode::Char('o')));
        assert!(screen(&s, 80, 24).contains("Peek: latest output rows of bronze_events"));
        let mut r = result(37);
        r.title = Some("bronze_events: rows added by Delta version 12 (WRITE, 2 files)".into());
        s.ingest(Report::Sql {
            id: 1,
            result: Ok(r),
        });
        insta::assert_snapshot!("peek_output_80x24", screen(&s, 80, 24));
        insta::assert_snapshot!("peek_output_120x40", screen(&s, 120, 40));
        s.key(key(KeyCode::Char('j')));
        assert!(screen(&s, 80, 24).contains("rows 2-"));
        s.key(key(KeyCode::Char('q')));
        assert!(screen(&s, 80, 24).contains("Rates"), "back to the detail");
    }
}

// --- :sql in the real console ---------------------------------------------------------

#[test]
fn sql_pane_in_tmux() {
    use crate::console::{Tmux, weir_bin};
    if !Tmux::available() {
        println!("skipping sql_pane_in_tmux: tmux is not installed (the CI script installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    crate::console::json_pipeline(tmp.path(), "available_now");
    let t = Tmux::start(
        "sql",
        80,
        24,
        tmp.path(),
        &format!("{} run pipeline.toml", weir_bin()),
    );
    let commits = tmp.path().join("checkpoints/bronze_events/commits");
    t.wait_for("three committed batches", Duration::from_secs(90), |s| {
        commits.join("2").exists() && s.contains("bronze_events")
    });
    t.keys(&[":"]);
    t.keys(&["sql SELECT kind, count(*) AS n FROM bronze_events GROUP BY kind"]);
    t.keys(&["Enter"]);
    let screen = t.wait_for("the query's rows", Duration::from_secs(60), |s| {
        s.contains("1 row in") || s.contains("error")
    });
    assert!(
        screen.contains("click") && screen.contains("60"),
        "{screen}"
    );
    // The history: Up brings the query back after clearing the line.
    t.keys(&["C-u", "Up"]);
    t.wait_for("the query from the history", Duration::from_secs(10), |s| {
        s.contains("SQL> SELECT kind, count(*)")
    });
    // Read-only.
    t.keys(&["C-u", "DROP TABLE bronze_events", "Enter"]);
    t.wait_for("the refusal", Duration::from_secs(30), |s| {
        s.contains("read-only")
    });
    t.keys(&["Escape"]);
    t.wait_for("the pane closed", Duration::from_secs(10), |s| {
        !s.contains("SQL>")
    });
    t.keys(&["q"]);
    let end = t.wait_for("weir to exit", Duration::from_secs(60), |s| {
        s.contains("WEIR-EXITED-")
    });
    assert!(end.contains("WEIR-EXITED-0"), "{end}");
    let history =
        std::fs::read_to_string(tmp.path().join(".weir/pipeline.toml.sql_history.jsonl")).unwrap();
    assert!(
        history.contains("GROUP BY kind") && history.contains("DROP TABLE"),
        "{history}"
    );
}
