//! The PostgreSQL sink (docs/sinks.md) against a real cluster (Debian's binaries, a
//! throwaway `initdb` started here: `weir::sink::postgres::test_server`): every row once
//! in append mode (beside the same input in a Delta table), upserts with `keys` and
//! `order_by`, the crash drill at each failpoint of the batch protocol (append and
//! upsert) equal to a crash-free run, the server down at start (a clear error; a server
//! back within the retries is waited for), and the password never printed or written.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use weir::sink::postgres::test_server::{PASSWORD, PgServer, bin_dir};

use crate::support::*;

/// The shared cluster, or `None` (the test prints that it was skipped) when PostgreSQL's
/// binaries are absent and `WEIR_POSTGRES_TESTS` is not `1`; with it, a missing server
/// fails.
fn server() -> Option<&'static PgServer> {
    if !wanted() {
        return None;
    }
    static SHARED: OnceLock<Result<PgServer, String>> = OnceLock::new();
    match SHARED.get_or_init(PgServer::start) {
        Ok(s) => Some(s),
        Err(e) => panic!("cannot start the test PostgreSQL server: {e}"),
    }
}

fn wanted() -> bool {
    let required = std::env::var("WEIR_POSTGRES_TESTS").is_ok_and(|v| v == "1");
    if bin_dir().is_none() && !required {
        eprintln!(
            "skipped: the postgres tests need PostgreSQL's server binaries (apt-get install postgresql; WEIR_POSTGRES_TESTS=1 makes this a failure)"
        );
        return false;
    }
    true
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `weir run --headless --trigger available-now PIPELINE` with `PGPASSWORD` set.
fn run(pipeline: &Path, failpoint: Option<&str>) -> Output {
    let mut c = weir();
    c.env("PGPASSWORD", PASSWORD)
        .env_remove("PGPASSFILE")
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(pipeline);
    if let Some(fp) = failpoint {
        c.env("WEIR_FAILPOINT", fp);
    }
    c.output().expect("run weir")
}

/// A flow reading `id,v,ts` CSV files from `landing`, one file per batch, into the
/// postgres `table` at `url` with `sink_extra` lines.
fn ids_pipeline(dir: &Path, url: &str, table: &str, sink_extra: &str) -> PathBuf {
    write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "ids"
trigger = "available_now"

[flow.health]
retry_attempts = 1
retry_backoff = "50 ms"

[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, v STRING, ts BIGINT"
max_files_per_trigger = 1

[flow.source.csv]
header = true

[flow.sink]
type = "postgres"
url = "{url}"
table = "{table}"
{sink_extra}
"#
        ),
    )
}

fn land_ids(dir: &Path, file: &str, rows: &[(i64, &str, i64)]) {
    let mut body = String::from("id,v,ts\n");
    for (id, v, ts) in rows {
        body.push_str(&format!("{id},{v},{ts}\n"));
    }
    land(&dir.join("landing"), file, body.as_bytes());
}

fn land_range(dir: &Path, file: &str, ids: std::ops::Range<i64>) {
    let rows: Vec<(i64, String, i64)> = ids.map(|i| (i, format!("n{i}"), i)).collect();
    let rows: Vec<(i64, &str, i64)> = rows.iter().map(|(i, v, t)| (*i, v.as_str(), *t)).collect();
    land_ids(dir, file, &rows);
}

/// The table's rows as `id|v|ts` lines by id.
fn table_rows(server: &PgServer, table: &str) -> String {
    server
        .psql(
            "lake",
            &format!("SELECT id, v, ts FROM \"{table}\" ORDER BY id, v, ts"),
        )
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The bronze flights flow of the demo (its schema, without the select) into `sink`.
fn flights_flow(name: &str, sink: &str) -> String {
    let bronze = bronze_flights_only()
        .replace("name = \"bronze_flights\"", &format!("name = \"{name}\""))
        .replace("max_files_per_trigger = 100", "max_files_per_trigger = 4");
    let start = bronze
        .find("select = [")
        .expect("the bronze flow has a select");
    let end = start + bronze[start..].find("]\n").expect("its end") + 2;
    let bronze = format!("{}{}", &bronze[..start], &bronze[end..]);
    let at = bronze.find("[flow.sink]").expect("a sink");
    format!("{}[flow.sink]\n{sink}\n", &bronze[..at])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_lands_every_row_once_as_the_delta_table_holds_them() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let landed = weir::demo::data::land_flights(
        &dir.path().join("landing/flights"),
        &dir.path().join("_staging"),
        Some(10),
    )
    .unwrap();
    let pg = flights_flow(
        "to_postgres",
        &format!(
            "type = \"postgres\"\nurl = \"{}\"\ntable = \"bronze_flights\"",
            server.url()
        ),
    );
    let delta = flights_flow(
        "to_delta",
        "type = \"delta\"\npath = \"lake/bronze/flights\"",
    );
    let p = write_pipeline(dir.path(), &format!("{pg}\n{delta}"));
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));

    // The same facts from PostgreSQL and from the Delta table (DataFusion).
    let facts = "count(*), count(DISTINCT (year, month, day, carrier, flight, sched_dep_time)), \
                 sum(dep_delay), sum(arr_time), count(tailnum), count(DISTINCT dest), \
                 min(time_hour), max(time_hour)";
    let in_pg = server
        .psql(
            "lake",
            &format!(
                "SELECT {} FROM bronze_flights",
                facts.replace(
                    "min(time_hour), max(time_hour)",
                    "to_char(min(time_hour), 'YYYY-MM-DD HH24:MI:SS'), to_char(max(time_hour), 'YYYY-MM-DD HH24:MI:SS')"
                )
            ),
        )
        .unwrap();
    let rows = delta_rows(&dir.path().join("lake/bronze/flights")).await;
    let df_facts = "count(*) AS a, count(DISTINCT concat_ws('/', year, month, day, carrier, flight, sched_dep_time)) AS b, \
                    CAST(sum(dep_delay) AS BIGINT) AS c, sum(arr_time) AS d, count(tailnum) AS e, count(DISTINCT dest) AS f, \
                    to_char(min(time_hour), '%Y-%m-%d %H:%M:%S') AS g, to_char(max(time_hour), '%Y-%m-%d %H:%M:%S') AS h";
    let batches = sql(&rows, &format!("SELECT {df_facts} FROM t")).await;
    let in_delta: Vec<String> = ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .map(|c| column_strings(&batches, c).join(""))
        .collect();
    assert_eq!(in_pg, in_delta.join("|"), "PostgreSQL and Delta disagree");
    assert!(
        in_pg.starts_with(&format!("{0}|{0}|", landed.rows_total)),
        "every landed row once: {in_pg}, landed {}",
        landed.rows_total
    );

    // The marker holds the last batch; a second run writes nothing.
    let last_batch = server
        .psql(
            "lake",
            "SELECT batch_id FROM weir_sink_commits WHERE table_name = 'bronze_flights'",
        )
        .unwrap();
    assert_eq!(last_batch, "2", "10 files, 4 per batch: batches 0..=2");
    let again = run(&p, None);
    assert!(again.status.success(), "{}", text(&again));
    let count = server
        .psql("lake", "SELECT count(*) FROM bronze_flights")
        .unwrap();
    assert_eq!(count, landed.rows_total.to_string());
}

#[test]
fn keys_upsert_the_latest_row_per_key_and_never_an_older_one() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let p = ids_pipeline(
        dir.path(),
        &server.url(),
        "upserted",
        "keys = [\"id\"]\norder_by = \"ts\"",
    );
    land_ids(
        dir.path(),
        "a.csv",
        &[(1, "a1", 10), (2, "a2", 10), (3, "a3", 10)],
    );
    land_ids(
        dir.path(),
        "b.csv",
        // 2 newer, 3 older (kept as it is), 4 new, 5 twice in the batch (the greater ts
        // wins, whatever the order).
        &[
            (2, "b2", 20),
            (3, "b3", 5),
            (4, "b4", 20),
            (5, "late", 30),
            (5, "early", 29),
        ],
    );
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        table_rows(server, "upserted"),
        "1|a1|10\n2|b2|20\n3|a3|10\n4|b4|20\n5|late|30"
    );
    // The table the sink created has a unique constraint on the keys.
    let unique = server
        .psql(
            "lake",
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'upserted'::regclass AND contype = 'u'",
        )
        .unwrap();
    assert_eq!(unique, "1");

    // Without order_by, two rows of one key in a batch fail it, naming the table and code.
    let dir = tempfile::tempdir().unwrap();
    let p = ids_pipeline(dir.path(), &server.url(), "no_order", "keys = [\"id\"]");
    land_ids(dir.path(), "a.csv", &[(1, "x", 1), (1, "y", 2)]);
    let out = run(&p, None);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("postgres table no_order"), "{said}");
    assert!(said.contains("SQLSTATE 21000"), "{said}");
    assert!(said.contains("order_by"), "{said}");
    // Nothing of the failed batch is committed: not the table it created, not its marker.
    assert_eq!(
        server
            .psql(
                "lake",
                "SELECT to_regclass('no_order') IS NULL, count(*) FROM weir_sink_commits WHERE table_name = 'no_order'"
            )
            .unwrap(),
        "t|0"
    );
}

/// The batch protocol's crash drill: the real process aborts at each failpoint of batch
/// 1 (more files landing while it is down), then runs to the end; the table must equal a
/// crash-free run's, in append mode and with keys.
#[test]
fn every_failpoint_recovers_exactly_once_in_postgres() {
    let Some(server) = server() else { return };
    for (mode, sink_extra) in [("append", ""), ("upsert", "keys = [\"id\"]")] {
        let setup = |dir: &Path, table: &str| {
            let p = ids_pipeline(dir, &server.url(), table, sink_extra);
            for f in 0..3 {
                land_range(dir, &format!("f{f}.csv"), f * 40..(f + 1) * 40);
            }
            p
        };
        let clean = tempfile::tempdir().unwrap();
        let clean_table = format!("crash_{mode}_clean");
        let p = setup(clean.path(), &clean_table);
        let out = run(&p, None);
        assert!(out.status.success(), "{}", text(&out));
        land_range(clean.path(), "late.csv", 120..160);
        let out = run(&p, None);
        assert!(out.status.success(), "{}", text(&out));
        let golden = table_rows(server, &clean_table);
        assert_eq!(golden.lines().count(), 160, "{mode}");

        for failpoint in weir::engine::failpoint::FAILPOINTS {
            let dir = tempfile::tempdir().unwrap();
            let table = format!("crash_{mode}_{failpoint}");
            let p = setup(dir.path(), &table);
            let crashed = run(&p, Some(&format!("{failpoint}:1")));
            let said = text(&crashed);
            assert!(!crashed.status.success(), "{mode} {failpoint}: {said}");
            assert!(
                said.contains(&format!("failpoint {failpoint} hit in batch 1")),
                "{said}"
            );
            land_range(dir.path(), "late.csv", 120..160);
            let out = run(&p, None);
            assert!(out.status.success(), "{mode} {failpoint}: {}", text(&out));
            assert_eq!(table_rows(server, &table), golden, "{mode} {failpoint}");
            let progress = weir::checkpoint::progress::read_progress(
                &dir.path().join("_checkpoints/ids/_weir/progress.jsonl"),
            )
            .unwrap();
            let replay = progress
                .iter()
                .find(|p| p.weir.replayed)
                .expect("a replayed batch");
            let skipped = !matches!(failpoint, "after_offsets" | "after_read");
            assert_eq!(
                replay.weir.sink_write_skipped, skipped,
                "{mode} {failpoint}: the replay's write is skipped exactly when its marker is in"
            );
        }
    }
}

/// Nobody listens on the URL's port: the run stops after its retries with an error naming
/// the table, the server and the SQLSTATE, and the flow's health is sink_unavailable.
#[test]
fn a_server_down_at_start_fails_naming_the_table_and_the_sqlstate() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("postgresql://weir@127.0.0.1:{port}/lake");
    let p = ids_pipeline(dir.path(), &url, "down", "");
    land_range(dir.path(), "a.csv", 0..5);
    let out = run(&p, None);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("postgres table down"), "{said}");
    assert!(said.contains(&format!("127.0.0.1:{port}/lake")), "{said}");
    assert!(said.contains("SQLSTATE 08001"), "{said}");
    let health: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("_checkpoints/ids/_weir/health.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(health["state"], "sink_unavailable", "{health}");
}

/// The server down when a run starts and back a moment later: the sink's open is retried
/// with backoff, and the table holds every row once.
#[test]
fn a_server_back_within_the_retries_is_waited_for() {
    if !wanted() {
        return;
    }
    // A server of its own: the shared one must stay up for the other tests.
    let mut server = PgServer::start().expect("start a PostgreSQL server");
    let dir = tempfile::tempdir().unwrap();
    let p = ids_pipeline(dir.path(), &server.url(), "waited", "");
    let toml = std::fs::read_to_string(&p)
        .unwrap()
        .replace("retry_attempts = 1", "retry_attempts = 6")
        .replace("retry_backoff = \"50 ms\"", "retry_backoff = \"500 ms\"");
    std::fs::write(&p, toml).unwrap();
    land_range(dir.path(), "a.csv", 0..40);
    land_range(dir.path(), "b.csv", 40..80);
    server.stop();
    let child = weir()
        .env("PGPASSWORD", PASSWORD)
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    server.restart().expect("restart the PostgreSQL server");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let ids = server
        .psql(
            "lake",
            "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM waited",
        )
        .unwrap();
    assert_eq!(ids, "80|80|0|79");
}

/// The password (PGPASSWORD or a passfile) is never in weir's output, its checkpoint
/// (plan.json, progress, health) or its logs; a wrong one fails with SQLSTATE 28P01; a
/// URL carrying one is refused before anything runs, pointing to PGPASSWORD.
#[test]
fn the_password_is_never_printed_or_written() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let p = ids_pipeline(dir.path(), &server.url(), "secret_kept", "");
    land_range(dir.path(), "a.csv", 0..10);
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD));

    // The passfile instead of PGPASSWORD.
    let passfile = dir.path().join("pgpass");
    std::fs::write(
        &passfile,
        format!("127.0.0.1:{}:lake:weir:{PASSWORD}\n", server.port),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    land_range(dir.path(), "b.csv", 10..20);
    let out = weir()
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", &passfile)
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD));
    assert_eq!(
        server
            .psql("lake", "SELECT count(*) FROM secret_kept")
            .unwrap(),
        "20"
    );

    // A wrong password: refused by the server, named by its SQLSTATE, never printed.
    land_range(dir.path(), "c.csv", 20..30);
    let wrong = "not-the-password-93b1";
    let out = weir()
        .env("PGPASSWORD", wrong)
        .env_remove("PGPASSFILE")
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .output()
        .unwrap();
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("SQLSTATE 28P01"), "{said}");
    assert!(!said.contains(wrong), "{said}");

    // Nothing under the checkpoint holds either password.
    for entry in walk(&dir.path().join("_checkpoints")) {
        let bytes = std::fs::read(&entry).unwrap();
        let content = String::from_utf8_lossy(&bytes);
        assert!(
            !content.contains(PASSWORD) && !content.contains(wrong),
            "{} holds the password",
            entry.display()
        );
    }
    let plan =
        std::fs::read_to_string(dir.path().join("_checkpoints/ids/_weir/plan.json")).unwrap();
    assert!(plan.contains("PostgresSink["), "{plan}");

    // A password in the URL: refused by validate and run, not repeated, PGPASSWORD named.
    let with_password = server.url().replace("weir@", &format!("weir:{PASSWORD}@"));
    let p = ids_pipeline(dir.path(), &with_password, "never", "");
    for args in [&["validate"][..], &["run", "--headless"][..]] {
        let out = weir().args(args).arg(&p).output().unwrap();
        let said = text(&out);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains("PGPASSWORD"), "{said}");
        assert!(!said.contains(PASSWORD), "{said}");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// The count of `table`'s rows once it has `n` (polled: the flow runs on its own).
fn wait_for_rows(server: &PgServer, table: &str, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let count = server.psql("lake", &format!("SELECT count(*) FROM {table}"));
        if count.as_deref() == Ok(n.to_string().as_str()) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{table} never reached {n} rows (now {count:?}); server log: {}",
            server.log_tail()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A running flow whose connection is killed by the server (pg_terminate_backend), then
/// whose server crashes and comes back (immediate shutdown, files landing meanwhile):
/// each next batch is retried on a new connection, and the table holds every row once.
#[test]
fn a_lost_connection_and_a_restarted_server_lose_and_duplicate_nothing() {
    if !wanted() {
        return;
    }
    let mut server = PgServer::start().expect("start a PostgreSQL server");
    let dir = tempfile::tempdir().unwrap();
    let p = ids_pipeline(dir.path(), &server.url(), "resumed", "");
    let toml = std::fs::read_to_string(&p)
        .unwrap()
        .replace("trigger = \"available_now\"", "trigger = \"1 second\"")
        .replace("retry_attempts = 1", "retry_attempts = 8")
        .replace("retry_backoff = \"50 ms\"", "retry_backoff = \"500 ms\"");
    std::fs::write(&p, toml).unwrap();
    let log = std::fs::File::create(dir.path().join("weir.log")).unwrap();
    let mut child = weir()
        .env("PGPASSWORD", PASSWORD)
        .args(["run", "--headless"])
        .arg(&p)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    land_range(dir.path(), "a.csv", 0..40);
    wait_for_rows(&server, "resumed", 40);

    let killed = server
        .psql(
            "lake",
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'weir') AS k",
        )
        .unwrap();
    assert_eq!(killed, "1", "weir's one connection");
    land_range(dir.path(), "b.csv", 40..80);
    wait_for_rows(&server, "resumed", 80);

    server.stop();
    land_range(dir.path(), "c.csv", 80..120);
    std::thread::sleep(std::time::Duration::from_secs(1));
    server.restart().expect("restart the PostgreSQL server");
    wait_for_rows(&server, "resumed", 120);

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = child.wait().unwrap();
    let said = std::fs::read_to_string(dir.path().join("weir.log")).unwrap_or_default();
    assert!(status.success(), "{said}");
    // The failures were retried, each named by the table and its SQLSTATE.
    assert!(
        said.contains("retrying")
            && said.contains("postgres table resumed")
            && said.contains("(SQLSTATE 08"),
        "{said}"
    );
    assert!(!said.contains(PASSWORD));
    assert_eq!(
        server
            .psql(
                "lake",
                "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM resumed"
            )
            .unwrap(),
        "120|120|0|119"
    );
}

/// Every Arrow type the sink maps, written through the sink (binary COPY) and read back
/// by psql as PostgreSQL's text: the table it creates has the documented types, and
/// each value (and null) arrives as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mapped_arrow_type_arrives_as_its_postgresql_type() {
    use arrow::array::*;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;
    let Some(server) = server() else { return };
    let schema = Arc::new(Schema::new(vec![
        Field::new("b", DataType::Boolean, true),
        Field::new("i8", DataType::Int8, true),
        Field::new("i16", DataType::Int16, true),
        Field::new("i32", DataType::Int32, false),
        Field::new("i64", DataType::Int64, true),
        Field::new("u8", DataType::UInt8, true),
        Field::new("u16", DataType::UInt16, true),
        Field::new("u32", DataType::UInt32, true),
        Field::new("u64", DataType::UInt64, true),
        Field::new("f32", DataType::Float32, true),
        Field::new("f64", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("ls", DataType::LargeUtf8, true),
        Field::new("sv", DataType::Utf8View, true),
        Field::new("bin", DataType::Binary, true),
        Field::new("d", DataType::Date32, true),
        Field::new("d64", DataType::Date64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("ntz", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        Field::new("t", DataType::Time64(TimeUnit::Microsecond), true),
        Field::new("dec", DataType::Decimal128(12, 2), true),
        Field::new(
            "dict",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            true,
        ),
    ]));
    let dict: DictionaryArray<arrow::datatypes::Int32Type> =
        vec![Some("x"), None].into_iter().collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(BooleanArray::from(vec![Some(true), None])),
        Arc::new(Int8Array::from(vec![Some(-8), None])),
        Arc::new(Int16Array::from(vec![Some(-16), None])),
        Arc::new(Int32Array::from(vec![32, -32])),
        Arc::new(Int64Array::from(vec![Some(-9_007_199_254_740_993), None])),
        Arc::new(UInt8Array::from(vec![Some(255), None])),
        Arc::new(UInt16Array::from(vec![Some(65_535), None])),
        Arc::new(UInt32Array::from(vec![Some(4_294_967_295), None])),
        Arc::new(UInt64Array::from(vec![Some(u64::MAX), None])),
        Arc::new(Float32Array::from(vec![Some(1.5), None])),
        Arc::new(Float64Array::from(vec![Some(f64::NAN), Some(-0.125)])),
        Arc::new(StringArray::from(vec![Some("é,ü"), None])),
        Arc::new(LargeStringArray::from(vec![Some("large"), None])),
        Arc::new(StringViewArray::from(vec![
            Some("a view longer than twelve bytes"),
            None,
        ])),
        Arc::new(BinaryArray::from(vec![Some(&b"\x00\xff"[..]), None])),
        Arc::new(Date32Array::from(vec![Some(-1), Some(19_723)])),
        Arc::new(Date64Array::from(vec![Some(86_400_000), None])),
        Arc::new(
            TimestampMicrosecondArray::from(vec![Some(1_700_000_000_123_456), Some(-1)])
                .with_timezone("UTC"),
        ),
        Arc::new(TimestampNanosecondArray::from(vec![
            Some(946_684_800_000_001_999),
            None,
        ])),
        Arc::new(Time64MicrosecondArray::from(vec![
            Some(3_723_000_004),
            None,
        ])),
        Arc::new(
            Decimal128Array::from(vec![Some(-123_456), None])
                .with_precision_and_scale(12, 2)
                .unwrap(),
        ),
        Arc::new(dict),
    ];
    let batch = arrow::record_batch::RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut sink = weir::sink::postgres::PostgresSink::open_with_env(
        &server.url(),
        "all_types",
        Vec::new(),
        None,
        "types-query",
        &|k| (k == "PGPASSWORD").then(|| PASSWORD.to_string()),
    )
    .await
    .unwrap();
    let commit = sink
        .add_batch(0, vec![batch.clone()], false, Some(&schema))
        .await
        .unwrap();
    assert_eq!((commit.num_output_rows, commit.skipped), (2, false));
    // The same batch again: its marker is there, nothing is written.
    let again = sink
        .add_batch(0, vec![batch], false, Some(&schema))
        .await
        .unwrap();
    assert!(again.skipped);

    let types = server
        .psql(
            "lake",
            "SELECT string_agg(column_name || ' ' || format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY attnum) \
             FROM pg_attribute JOIN information_schema.columns ON table_name = 'all_types' AND column_name = attname \
             WHERE attrelid = 'all_types'::regclass AND attnum > 0",
        )
        .unwrap();
    assert_eq!(
        types,
        "b boolean, i8 smallint, i16 smallint, i32 integer not null, i64 bigint, u8 smallint, u16 integer, \
         u32 bigint, u64 numeric(20,0), f32 real, f64 double precision, s text, ls text, sv text, bin bytea, \
         d date, d64 date, ts timestamp with time zone, ntz timestamp without time zone, t time without time zone, \
         dec numeric(12,2), dict text"
    );
    let rows = server
        .psql("lake", "SELECT * FROM all_types ORDER BY i32 DESC")
        .unwrap();
    assert_eq!(
        rows,
        "t|-8|-16|32|-9007199254740993|255|65535|4294967295|18446744073709551615|1.5|NaN|é,ü|large|\
         a view longer than twelve bytes|\\x00ff|1969-12-31|1970-01-02|2023-11-14 22:13:20.123456+00|\
         2000-01-01 00:00:00.000001|01:02:03.000004|-1234.56|x\n\
         |||-32|||||||-0.125|||||2024-01-01||1969-12-31 23:59:59.999999+00||||"
    );
}

/// An older checkpoint restored over a table its query wrote further: the next batch
/// finds a later batch in the marker, is refused naming both, and nothing is written
/// (without the check its rows would be skipped as already written, and lost).
#[test]
fn a_checkpoint_behind_the_table_is_refused() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let p = ids_pipeline(dir.path(), &server.url(), "ahead", "");
    land_range(dir.path(), "f0.csv", 0..10);
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));
    let checkpoint = dir.path().join("_checkpoints/ids");
    let backup = dir.path().join("backup");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(&checkpoint)
        .arg(&backup)
        .status()
        .unwrap();
    assert!(copied.success());
    land_range(dir.path(), "f1.csv", 10..20);
    land_range(dir.path(), "f2.csv", 20..30);
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));

    // The backup of batch 0 restored.
    std::fs::remove_dir_all(&checkpoint).unwrap();
    std::fs::rename(&backup, &checkpoint).unwrap();
    let out = run(&p, None);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("ahead of this checkpoint") && said.contains("records batch 2"),
        "{said}"
    );
    assert_eq!(
        server
            .psql("lake", "SELECT count(*), count(DISTINCT id) FROM ahead")
            .unwrap(),
        "30|30"
    );
}

/// The server stopped in the middle of a batch: the batch's `INSERT` is made to wait on
/// a lock another session holds (its marker row and COPY done, uncommitted), the server
/// then shuts down at once and comes back; the batch is retried on a new connection and
/// lands once.
#[test]
fn a_server_stopped_mid_batch_loses_and_duplicates_nothing() {
    if !wanted() {
        return;
    }
    let mut server = PgServer::start().expect("start a PostgreSQL server");
    let dir = tempfile::tempdir().unwrap();
    let p = ids_pipeline(dir.path(), &server.url(), "midbatch", "");
    let toml = std::fs::read_to_string(&p)
        .unwrap()
        .replace("retry_attempts = 1", "retry_attempts = 8")
        .replace("retry_backoff = \"50 ms\"", "retry_backoff = \"500 ms\"");
    std::fs::write(&p, toml).unwrap();
    land_range(dir.path(), "f0.csv", 0..10);
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));

    // Another session holds the table: batch 1's INSERT waits for it.
    let mut holder = std::process::Command::new(bin_dir().unwrap().join("psql"))
        .args([
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            &server.port.to_string(),
            "-U",
            "weir",
            "-d",
            "lake",
        ])
        .args([
            "-c",
            "BEGIN; LOCK TABLE midbatch IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600);",
        ])
        .env("PGPASSWORD", PASSWORD)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    land_range(dir.path(), "f1.csv", 10..20);
    let log = std::fs::File::create(dir.path().join("weir.log")).unwrap();
    let child = weir()
        .env("PGPASSWORD", PASSWORD)
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let waiting = server.psql(
            "lake",
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'weir' AND wait_event_type = 'Lock'",
        );
        if waiting.as_deref() == Ok("1") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "weir's INSERT never waited on the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.stop();
    let _ = holder.wait();
    server.restart().expect("restart the PostgreSQL server");
    let out = child.wait_with_output().unwrap();
    let said = std::fs::read_to_string(dir.path().join("weir.log")).unwrap_or_default();
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("retrying") && said.contains("postgres table midbatch"),
        "{said}"
    );
    assert_eq!(
        server
            .psql(
                "lake",
                "SELECT count(*), count(DISTINCT id), max(id) FROM midbatch"
            )
            .unwrap(),
        "20|20|19"
    );
    assert_eq!(
        server
            .psql(
                "lake",
                "SELECT batch_id FROM weir_sink_commits WHERE table_name = 'midbatch'"
            )
            .unwrap(),
        "1"
    );
}
