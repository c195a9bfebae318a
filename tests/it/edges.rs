//! Spark's semantics at the edges (issue #14), through the real binary: what real
//! files do to a pipeline. Inputs in `tests/fixtures/edges/` (one folder per kind).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

/// A one-flow pipeline: files in `landing` -> Delta `table`, `available_now`.
fn pipeline(dir: &Path, format: &str, source_extra: &str) -> PathBuf {
    files_to_delta_pipeline(dir, format, source_extra, "")
}

fn run_ok(p: &Path) -> std::process::Output {
    let out = weir().args(["run", "--headless"]).arg(p).output().unwrap();
    assert!(
        out.status.success(),
        "weir run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn edge(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(&format!("edges/{rel}"))).unwrap()
}

/// `_rescued_data` of the rows ordered by `order`, parsed (None where null).
async fn rescued(table: &Path, order: &str) -> Vec<Option<Value>> {
    table_lines(table, &["_rescued_data"], order, ",")
        .await
        .into_iter()
        .map(|s| (s != "null").then(|| serde_json::from_str(&s).unwrap()))
        .collect()
}

fn progress(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Hadoop's in-flight copies (`*._COPYING_`) and `_`/`.` names are skipped at every
/// depth; the copy is ingested once, after its rename. A `_key=value` directory is data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_skips_in_flight_copies_and_hidden_names_at_every_depth() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "partition_columns = []");
    let landing = dir.join("landing");
    land(&landing, "a.json", b"{\"id\":1}\n");
    // `hadoop fs -put b.json` writes b.json._COPYING_, then renames it.
    land(&landing, "b.json._COPYING_", b"{\"id\":2}\n{\"id\":3}\n");
    for (sub, name) in [
        ("sub", "c.json._COPYING_"),
        ("sub/_temporary", "d.json"),
        ("sub/.staging", "e.json"),
        ("sub", "_SUCCESS"),
        ("sub", ".f.json.crc"),
    ] {
        land(&landing.join(sub), name, b"{\"id\":99}\n");
    }
    land(&landing.join("_part=1"), "g.json", b"{\"id\":4}\n");
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id"], "id", ",").await,
        ["1", "4"]
    );
    std::fs::rename(landing.join("b.json._COPYING_"), landing.join("b.json")).unwrap();
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id"], "id", ",").await,
        ["1", "2", "3", "4"],
        "the renamed copy is ingested exactly once"
    );
}

/// Spark's makeSafeHeader: a blank name is `_c<i>`; a name repeated (also only by
/// case) is name + index at every occurrence; no value goes to `_rescued_data`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_blank_and_repeated_headers_become_columns_as_in_spark() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "");
    land(
        &dir.join("landing"),
        "dup.csv",
        &edge("csv_headers/dup.csv"),
    );
    run_ok(&p);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["id0", "_c1", "name2", "Name3", "id4"], "id0", ",").await,
        ["1,x,Ana,ANA,7", "2,y,Bo,BO,8"]
    );
    assert_eq!(rescued(&table, "id0").await, [None, None]);
}

/// An unquoted empty field is null, `""` is the empty string (`empty_value`), and the
/// null marker is null, quoted or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_empty_field_quoted_empty_string_and_null_marker_are_three_things() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "[flow.source.csv]\nnull_value = \"NA\"");
    land(
        &dir.join("landing"),
        "empty.csv",
        &edge("csv_empty/empty.csv"),
    );
    run_ok(&p);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["id", "note", "qty"], "id", ",").await,
        ["1,null,5", "2,,6", "3,null,7", "4,null,null", "5,x,9"]
    );
    // `""` in the numeric column is no number and no loss: null, nothing rescued.
    assert!(rescued(&table, "id").await.iter().all(Option::is_none));

    // empty_value chooses what `""` reads as.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "csv",
        "[flow.source.csv]\nnull_value = \"NA\"\nempty_value = \"<empty>\"",
    );
    land(
        &dir.join("landing"),
        "empty.csv",
        &edge("csv_empty/empty.csv"),
    );
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id", "note"], "id", ",").await,
        ["1,null", "2,<empty>", "3,null", "4,null", "5,x"]
    );
}

/// JSON: bare NaN / Infinity / -Infinity / +INF are numbers (Spark's
/// allowNonNumericNumbers, on by default); a bare NaN no longer makes its line corrupt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_non_finite_numbers_are_values_not_corrupt_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "");
    let landing = dir.join("landing");
    land(&landing, "nan.json", &edge("non_finite/nan.json"));
    let out = run_ok(&p);
    assert_eq!(progress(&out)[0]["weir"]["numRecordsCorrupt"], 0);
    let table = dir.join("table");
    let rows = delta_rows(&table).await;
    for column in ["val", "note"] {
        assert_eq!(
            rows[0]
                .schema()
                .field_with_name(column)
                .unwrap()
                .data_type(),
            &arrow::datatypes::DataType::Float64,
            "a bare token infers as a double"
        );
    }
    // Quoted spellings read into a double column too (Spark's JSON reader does).
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(&landing, "quoted.json", &edge("non_finite/quoted.json"));
    run_ok(&p);
    assert_eq!(
        table_lines(&table, &["sensor", "val", "note"], "sensor", ",").await,
        [
            "s1,2.0,null",
            "s2,NaN,null",
            "s3,inf,null",
            "s4,-inf,null",
            "s5,NaN,null",
            "s6,inf,NaN",
            "s7,-inf,null"
        ]
    );
    assert!(rescued(&table, "sensor").await.iter().all(Option::is_none));

    // Turned off: the lines with bare tokens are corrupt records, the others stay.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "schema = \"sensor STRING, val DOUBLE\"\nallow_non_numeric_numbers = false",
    );
    land(
        &dir.join("landing"),
        "nan.json",
        &edge("non_finite/nan.json"),
    );
    let out = run_ok(&p);
    assert_eq!(progress(&out)[0]["weir"]["numRecordsCorrupt"], 4);
    assert_eq!(
        table_lines(
            &dir.join("table"),
            &["sensor", "val"],
            "sensor NULLS LAST",
            ","
        )
        .await,
        ["s1,2.0", "null,null", "null,null", "null,null", "null,null"]
    );
}

/// CSV: nan_value / positive_inf / negative_inf (Spark's NaN, Inf, -Inf), and Java's
/// Infinity; a column of them is inferred as DOUBLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_non_finite_spellings_read_as_doubles() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "[flow.source.csv]\nnan_value = \"n/a\"");
    land(&dir.join("landing"), "nan.csv", &edge("non_finite/nan.csv"));
    run_ok(&p);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["sensor", "val"], "sensor", ",").await,
        ["s1,1.5", "s2,NaN", "s3,inf", "s4,-inf", "s5,inf", "s6,NaN"]
    );
    assert!(rescued(&table, "sensor").await.iter().all(Option::is_none));
}

/// A Parquet column written as int32 in one file and int64 in the next: the inferred
/// column is BIGINT, so the second file's large values land in it, not in _rescued_data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_int32_then_int64_widens_instead_of_rescuing() {
    use std::sync::Arc;

    use arrow::array::{Float32Array, Int32Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;

    fn parquet(batch: &RecordBatch) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
        buf
    }
    let small = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int32, false),
            Field::new("x", DataType::Float32, false),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(Float32Array::from(vec![0.5, 1.5])),
        ],
    )
    .unwrap();
    let large = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("x", DataType::Float64, false),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![3_000_000_000, -5_000_000_000])),
            Arc::new(arrow::array::Float64Array::from(vec![1e300, 2.25])),
        ],
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "parquet", "");
    let landing = dir.join("landing");
    land(&landing, "p1.parquet", &parquet(&small));
    run_ok(&p);
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(&landing, "p2.parquet", &parquet(&large));
    let out = run_ok(&p);
    assert_eq!(progress(&out)[0]["weir"]["numRowsRescued"], 0);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["n", "x"], "n", ",").await,
        ["-5000000000,2.25", "1,0.5", "2,1.5", "3000000000,1e300"]
    );
    let rows = delta_rows(&table).await;
    assert_eq!(
        rows[0].schema().field_with_name("n").unwrap().data_type(),
        &DataType::Int64
    );
}

/// `encoding = "ISO-8859-1"` reads Latin-1 CSV and JSON; without it, an invalid UTF-8
/// byte rescues that one field (as its bytes in ISO-8859-1), not the whole row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encodings_and_one_invalid_utf8_field_rescued_not_the_row() {
    for (format, file) in [("csv", "latin1.csv"), ("json", "latin1.json")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let p = pipeline(dir, format, "encoding = \"ISO-8859-1\"");
        land(
            &dir.join("landing"),
            file,
            &edge(&format!("encoding/{file}")),
        );
        let out = run_ok(&p);
        assert_eq!(progress(&out)[0]["weir"]["numRecordsCorrupt"], 0);
        let lines = table_lines(&dir.join("table"), &["id", "city"], "id", ",").await;
        assert_eq!(lines[0], "1,Zürich", "{format}");
        assert_eq!(lines[1], "2,São Paulo", "{format}");
        if format == "csv" {
            assert_eq!(lines[2], "3,© Café");
        }
    }
    for (format, file) in [("csv", "bad_utf8.csv"), ("json", "bad_utf8.json")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let p = pipeline(
            dir,
            format,
            "schema = \"id BIGINT, city STRING, qty BIGINT\"",
        );
        land(
            &dir.join("landing"),
            file,
            &edge(&format!("encoding/{file}")),
        );
        let out = run_ok(&p);
        assert_eq!(
            progress(&out)[0]["weir"]["numRecordsCorrupt"],
            0,
            "{format}"
        );
        let table = dir.join("table");
        assert_eq!(
            table_lines(&table, &["id", "city", "qty"], "id", ",").await,
            ["1,null,5", "2,Paris,6"],
            "{format}"
        );
        let r = rescued(&table, "id").await;
        let first = r[0].as_ref().expect("the bad field is rescued");
        assert_eq!(first["city"], "Zürich", "{format}: {first}");
        assert!(
            first["_error"]
                .as_str()
                .unwrap()
                .contains("invalid UTF-8 in city"),
            "{first}"
        );
        assert!(r[1].is_none());
    }
}

/// Zone-less timestamp text in `session_time_zone`, with Spark's DST rules (a time in
/// the spring-forward gap moves later by the gap; one in the fall-back overlap takes
/// the earlier offset); text with a zone keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_time_zone_resolves_dst_gaps_and_overlaps_as_spark() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "session_time_zone = \"America/New_York\"");
    land(&dir.join("landing"), "ny.csv", &edge("time_zones/ny.csv"));
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id", "ts"], "id", ",").await,
        [
            "1,2024-03-10T07:30:00Z",
            "2,2024-11-03T05:30:00Z",
            "3,2024-07-01T12:00:00Z",
            "4,2024-01-15T14:00:00Z"
        ]
    );
}

/// `timestamp_format` (a Spark pattern): matching text is inferred and read as a
/// timestamp in the session zone; text that does not match is rescued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamp_format_reads_spark_patterns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "session_time_zone = \"Europe/Paris\"\ntimestamp_format = \"dd/MM/yyyy HH:mm\"",
    );
    let landing = dir.join("landing");
    land(&landing, "paris.json", &edge("time_zones/paris.json"));
    run_ok(&p);
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(
        &landing,
        "paris_iso.json",
        &edge("time_zones/paris_iso.json"),
    );
    run_ok(&p);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["id", "ts"], "id", ",").await,
        ["1,2024-06-03T12:05:00Z", "2,2024-03-31T01:30:00Z", "3,null"]
    );
    let r = rescued(&table, "id").await;
    assert_eq!(r[2].as_ref().unwrap()["ts"], "2024-06-03T14:05:00");
}

/// Hive-style directories are columns (Spark's partition discovery): typed, the Hive
/// null, URL-decoded; a file that does not fit the layout gets nulls with a warning
/// naming the keys and the file; a header of the same name keeps its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_columns_from_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "");
    let landing = dir.join("landing");
    for rel in [
        "date=2024-06-03/region=west/a.json",
        "date=2024-06-04/region=east%20side/b.json",
        "date=__HIVE_DEFAULT_PARTITION__/region=north/c.json",
    ] {
        let path = Path::new(rel);
        land(
            &landing.join(path.parent().unwrap()),
            &path.file_name().unwrap().to_string_lossy(),
            &edge(&format!("partitions/{rel}")),
        );
        std::thread::sleep(std::time::Duration::from_millis(15));
    }
    run_ok(&p);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["id", "amount", "date", "region"], "id", ",").await,
        [
            "1,10,2024-06-03,west",
            "2,20,2024-06-03,west",
            "3,30,2024-06-04,east side",
            "4,40,null,north"
        ]
    );
    let rows = delta_rows(&table).await;
    assert_eq!(
        rows[0]
            .schema()
            .field_with_name("date")
            .unwrap()
            .data_type(),
        &arrow::datatypes::DataType::Date32
    );
    // The file's own `region` field is not a second column: the path wins, the value is kept.
    let r = rescued(&table, "id").await;
    assert_eq!(r[2].as_ref().unwrap()["region"], "ignored");

    // A file outside the layout gets nulls for the keys it lacks, with a warning naming
    // the keys and the file (Auto Loader's nulls; no file is failed).
    land(&landing, "stray.json", &edge("partitions/stray.json"));
    land(
        &landing.join("date=2024-06-05/region=south"),
        "d.json",
        b"{\"id\":6,\"amount\":60}\n",
    );
    let out = run_ok(&p);
    let records = progress(&out);
    assert_eq!(records[0]["weir"]["numFilesFailed"], 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warning = stderr
        .lines()
        .find(|l| l.contains("stray.json") && l.contains("does not fit the partition layout"))
        .unwrap_or_else(|| panic!("no warning for stray.json: {stderr}"));
    assert!(
        warning.contains("`date`")
            && warning.contains("`region`")
            && warning.contains("null in its rows"),
        "{warning}"
    );
    assert_eq!(
        stderr.matches("does not fit the partition layout").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        table_lines(&table, &["id", "date", "region"], "id", ",").await,
        [
            "1,2024-06-03,west",
            "2,2024-06-03,west",
            "3,2024-06-04,east side",
            "4,null,north",
            "5,null,null",
            "6,2024-06-05,south"
        ]
    );

    // A CSV header named like a partition column keeps its place; an integer key is an
    // INT, as Spark infers it.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "infer_column_types = true");
    land(
        &dir.join("landing/Hour=7"),
        "a.csv",
        b"hour,id\n99,1\n99,2\n",
    );
    run_ok(&p);
    let rows = delta_rows(&dir.join("table")).await;
    let fields: Vec<(String, arrow::datatypes::DataType)> = rows[0]
        .schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    assert_eq!(
        fields[..2],
        [
            ("Hour".to_string(), arrow::datatypes::DataType::Int32),
            ("id".to_string(), arrow::datatypes::DataType::Int64),
        ]
    );
    assert_eq!(
        table_lines(&dir.join("table"), &["Hour", "id"], "id", ",").await,
        ["7,1", "7,2"]
    );

    // Type inference off: every partition column is a string.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "partition_columns = [\"date\", \"region\"]\npartition_column_type_inference = false",
    );
    land(
        &dir.join("landing/date=2024-06-03/region=west"),
        "a.json",
        &edge("partitions/date=2024-06-03/region=west/a.json"),
    );
    run_ok(&p);
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(
        rows[0]
            .schema()
            .field_with_name("date")
            .unwrap()
            .data_type(),
        &arrow::datatypes::DataType::Utf8
    );
}

/// `max_record_size`: a longer JSON line or CSV record (a runaway quote) is a corrupt
/// record with its file and line, quarantined with `bad_records_path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_record_size_rescues_longer_records_with_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "schema = \"id BIGINT, text STRING\"\nmax_record_size = \"100 B\"\nbad_records_path = \"quarantine\"",
    );
    land(
        &dir.join("landing"),
        "long.json",
        &edge("max_record/long.json"),
    );
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id"], "id", ",").await,
        ["1", "3"]
    );
    let q = std::fs::read_to_string(dir.join("quarantine/0.jsonl")).unwrap();
    let q: Value = serde_json::from_str(q.lines().next().unwrap()).unwrap();
    assert_eq!(q["line"], 2);
    assert!(q["file"].as_str().unwrap().ends_with("long.json"));
    assert!(
        q["error"].as_str().unwrap().contains("max_record_size"),
        "{q}"
    );
    assert!(q["raw"].as_str().unwrap().len() > 300, "kept whole");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "csv",
        "schema = \"id BIGINT, text STRING\"\nmax_record_size = \"20\"",
    );
    land(
        &dir.join("landing"),
        "runaway.csv",
        &edge("max_record/runaway.csv"),
    );
    let out = run_ok(&p);
    assert_eq!(progress(&out)[0]["weir"]["numRecordsCorrupt"], 1);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["id", "text"], "id NULLS LAST", ",").await,
        ["1,fine", "null,null"]
    );
    let r = rescued(&table, "id NULLS LAST").await;
    let corrupt = r[1].as_ref().unwrap();
    assert_eq!(corrupt["_line"], 3);
    assert!(
        corrupt["_corrupt_record"]
            .as_str()
            .unwrap()
            .contains("lost too")
    );
}

fn run_err(p: &Path) -> String {
    let out = weir().args(["run", "--headless"]).arg(p).output().unwrap();
    assert!(
        !out.status.success(),
        "expected a refusal: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A new checkpoint over a table that already has data (the checkpoint was deleted
/// "to fix it") is refused with the table's facts and the ways on, instead of
/// re-ingesting every file; the flow says where to start with include_existing_files,
/// modified_after or allow_existing_table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_checkpoint_over_a_table_with_data_is_refused_with_the_facts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    let table = dir.join("table");
    land(&landing, "a.json", b"{\"id\":1}\n{\"id\":2}\n");
    let p = pipeline(dir, "json", "");
    run_ok(&p);
    let old_query: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("_checkpoints/t/metadata")).unwrap(),
    )
    .unwrap();
    let old_query = old_query["id"].as_str().unwrap().to_string();
    let version = delta_version(&table).await;
    std::fs::remove_dir_all(dir.join("_checkpoints")).unwrap();

    let stderr = run_err(&p);
    for fact in [
        "already has data".to_string(),
        format!("version {}", version.unwrap()),
        "2 row(s)".to_string(),
        old_query.clone(),
        "include_existing_files = false".to_string(),
        "allow_existing_table = true".to_string(),
        "--truncate-target".to_string(),
    ] {
        assert!(stderr.contains(&fact), "missing {fact:?}: {stderr}");
    }
    assert_eq!(delta_version(&table).await, version, "nothing written");
    assert_eq!(table_lines(&table, &["id"], "id", ",").await, ["1", "2"]);

    // Only the files landing from now on.
    std::fs::remove_dir_all(dir.join("_checkpoints")).ok();
    let p = pipeline(dir, "json", "include_existing_files = false");
    run_ok(&p);
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(&landing, "b.json", b"{\"id\":3}\n");
    run_ok(&p);
    assert_eq!(
        table_lines(&table, &["id"], "id", ",").await,
        ["1", "2", "3"]
    );
    let inspect = weir()
        .args(["inspect", "--json"])
        .arg(dir.join("_checkpoints/t"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("\"files_existing_skipped\": 1"), "{text}");

    // Only the files modified after a timestamp.
    std::fs::remove_dir_all(dir.join("_checkpoints")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let after = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(&landing, "c.json", b"{\"id\":4}\n");
    let p = pipeline(dir, "json", &format!("modified_after = \"{after}\""));
    run_ok(&p);
    assert_eq!(
        table_lines(&table, &["id"], "id", ",").await,
        ["1", "2", "3", "4"]
    );

    // Or append anyway (two flows writing one table, a deliberate backfill).
    std::fs::remove_dir_all(dir.join("_checkpoints")).unwrap();
    let p = write_pipeline(
        dir,
        r#"
[[flow]]
name = "t"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "json"
[flow.sink]
type = "delta"
path = "table"
allow_existing_table = true
"#,
    );
    run_ok(&p);
    assert_eq!(
        num_rows(&delta_rows(&table).await),
        8,
        "every file again, as asked"
    );
}

/// `include_existing_files = false` added to a flow that has already run is ignored
/// with a warning, as Auto Loader reads `includeExistingFiles` only at a stream's first
/// start: the files that landed since then are ingested, not recorded as existing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_existing_files_added_at_a_restart_is_ignored_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    let table = dir.join("table");
    land(&landing, "a.json", b"{\"id\":1}\n");
    run_ok(&pipeline(dir, "json", ""));
    land(&landing, "b.json", b"{\"id\":2}\n");

    let p = pipeline(dir, "json", "include_existing_files = false");
    let out = run_ok(&p);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("include_existing_files = false is ignored"),
        "{stderr}"
    );
    assert_eq!(table_lines(&table, &["id"], "id", ",").await, ["1", "2"]);

    // The decision stays: a later restart neither warns again nor skips new files.
    land(&landing, "c.json", b"{\"id\":3}\n");
    let out = run_ok(&p);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("is ignored"), "{stderr}");
    assert_eq!(
        table_lines(&table, &["id"], "id", ",").await,
        ["1", "2", "3"]
    );
    let inspect = weir()
        .args(["inspect", "--json"])
        .arg(dir.join("_checkpoints/t"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("\"files_existing_skipped\": 0"), "{text}");
}

const MERGE: &str = r#"
[[flow]]
name = "m"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, status STRING"
[flow.sink]
type = "delta_merge"
path = "table"
keys = ["id"]
"#;

/// MERGE with several rows of one key in a batch and no order_by fails before any
/// commit, naming the key (Delta's MERGE refuses it too); null keys follow SQL's `=`
/// (each is inserted) unless null_safe_keys = true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_refuses_ambiguous_keys_and_treats_null_keys_as_sql() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(dir, MERGE);
    let landing = dir.join("landing");
    land(&landing, "a.csv", b"id,status\n1,new\n,x\n");
    run_ok(&p);
    land(&landing, "b.csv", b"id,status\n2,new\n1,paid\n1,shipped\n");
    let version = delta_version(&dir.join("table")).await;
    let stderr = run_err(&p);
    assert!(
        stderr.contains("2 rows of the batch have the key id=1") && stderr.contains("order_by"),
        "{stderr}"
    );
    assert_eq!(
        delta_version(&dir.join("table")).await,
        version,
        "no commit"
    );
    // The batch fails the same way until the flow says which row is newest.
    assert!(run_err(&p).contains("id=1"));
    std::fs::write(
        &p,
        MERGE.replace("keys = [\"id\"]", "keys = [\"id\"]\norder_by = \"status\""),
    )
    .unwrap();
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id", "status"], "id, status", ",").await,
        ["1,shipped", "2,new", "null,x"]
    );

    // Null keys: `=` never matches null, so each such row is inserted.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(dir, MERGE);
    let landing = dir.join("landing");
    land(&landing, "a.csv", b"id,status\n1,new\n,x\n");
    run_ok(&p);
    land(&landing, "c.csv", b"id,status\n,y\n1,paid\n");
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id", "status"], "id, status", ",").await,
        ["1,paid", "null,x", "null,y"]
    );

    // null_safe_keys = true: null is a key like any other.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(dir, &format!("{MERGE}null_safe_keys = true\n"));
    let landing = dir.join("landing");
    land(&landing, "a.csv", b"id,status\n1,new\n,x\n");
    run_ok(&p);
    land(&landing, "c.csv", b"id,status\n,y\n");
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["id", "status"], "id, status", ",").await,
        ["1,new", "null,y"]
    );
}

/// With `order_by`, a later batch never overwrites a newer table row with an older one
/// (the MERGE updates only when `t.o IS NULL OR s.o >= t.o`): an older change is
/// ignored, a tie goes to the later batch, a null order value is the oldest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_with_order_by_never_overwrites_a_newer_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(
        dir,
        &MERGE
            .replace(
                "id BIGINT, status STRING",
                "id BIGINT, v BIGINT, status STRING",
            )
            .replace("keys = [\"id\"]", "keys = [\"id\"]\norder_by = \"v\""),
    );
    let landing = dir.join("landing");
    let cols = ["id", "v", "status"];
    land(
        &landing,
        "a.csv",
        b"id,v,status\n1,5,new\n2,,unordered\n3,7,kept\n",
    );
    run_ok(&p);
    // Older than the table (1), newer than a null (2), null against a value (3).
    land(
        &landing,
        "b.csv",
        b"id,v,status\n1,3,stale\n2,1,ordered\n3,,nulled\n",
    );
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &cols, "id", ",").await,
        ["1,5,new", "2,1,ordered", "3,7,kept"]
    );
    // A tie goes to the later batch (as the later arrival wins inside a batch).
    land(&landing, "c.csv", b"id,v,status\n1,5,tie\n3,8,newer\n");
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &cols, "id", ",").await,
        ["1,5,tie", "2,1,ordered", "3,8,newer"]
    );
}

/// Float keys are normalised as Spark does (`NormalizeFloatingNumbers`): `-0.0` and
/// `0.0` are one key, NaN and NaN are one key, in group-by, dedup and join keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn float_keys_group_dedup_and_join_as_spark() {
    let rows = concat!(
        "{\"k\":0.0,\"ts\":\"2024-05-01T10:00:00Z\",\"v\":1}\n",
        "{\"k\":-0.0,\"ts\":\"2024-05-01T10:00:00Z\",\"v\":2}\n",
        "{\"k\":NaN,\"ts\":\"2024-05-01T10:00:01Z\",\"v\":3}\n",
        "{\"k\":NaN,\"ts\":\"2024-05-01T10:00:01Z\",\"v\":4}\n",
        "{\"k\":1.5,\"ts\":\"2024-05-01T10:00:02Z\",\"v\":5}\n",
    );
    // Group by.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(
        dir,
        r#"
[[flow]]
name = "g"
trigger = "available_now"
group_by = ["k"]
aggregates = ["count(*) AS n", "sum(v) AS total"]
output_mode = "complete"
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "k DOUBLE, ts TIMESTAMP, v BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    land(&dir.join("landing"), "a.json", rows.as_bytes());
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["k", "n", "total"], "k", ",").await,
        ["0.0,2,3", "1.5,1,5", "NaN,2,7"]
    );

    // Dedup on (k, ts): the -0.0 row repeats the 0.0 row, the second NaN the first.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(
        dir,
        r#"
[[flow]]
name = "d"
trigger = "available_now"
watermark = { column = "ts", delay = "1 minute" }
drop_duplicates = ["k", "ts"]
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "k DOUBLE, ts TIMESTAMP, v BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    land(&dir.join("landing"), "a.json", rows.as_bytes());
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["v"], "v", ",").await,
        ["1", "3", "5"]
    );

    // Join: a dimension keyed by 0.0 and NaN matches -0.0 and NaN.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("dim.csv"), "k,label\n0.0,zero\nNaN,not a number\n").unwrap();
    let p = write_pipeline(
        dir,
        r#"
[[flow]]
name = "j"
trigger = "available_now"
select = ["v", "label"]
[[flow.join]]
table = "dim.csv"
alias = "dim"
on = ["k"]
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "k DOUBLE, ts TIMESTAMP, v BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    land(&dir.join("landing"), "a.json", rows.as_bytes());
    run_ok(&p);
    assert_eq!(
        table_lines(&dir.join("table"), &["v", "label"], "v", ",").await,
        ["1,zero", "2,zero", "3,not a number", "4,not a number"]
    );
}

/// A deduplicating flow keeps corrupt records (they go around the operator to the
/// table with their raw text), so a bad line neither vanishes for its missing event
/// time nor takes the place of a real row whose key is null.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_keeps_corrupt_records_and_real_rows_with_null_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(
        dir,
        r#"
[[flow]]
name = "d"
trigger = "available_now"
watermark = { column = "ts", delay = "1 minute" }
drop_duplicates = ["eid", "ts"]
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "eid STRING, ts TIMESTAMP, x BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    land(
        &dir.join("landing"),
        "a.json",
        concat!(
            "{\"eid\":\"e1\",\"ts\":\"2024-05-01T10:00:00Z\",\"x\":1}\n",
            "not json at all\n",
            "{\"eid\":null,\"ts\":\"2024-05-01T10:00:01Z\",\"x\":2}\n",
            "{\"eid\":\"e1\",\"ts\":\"2024-05-01T10:00:00Z\",\"x\":3}\n",
        )
        .as_bytes(),
    );
    run_ok(&p);
    let table = dir.join("table");
    assert_eq!(
        table_lines(&table, &["x"], "x NULLS LAST", ",").await,
        ["1", "2", "null"],
        "e1 once, the null-key row, the corrupt record"
    );
    let r = rescued(&table, "x NULLS LAST").await;
    assert_eq!(r[2].as_ref().unwrap()["_corrupt_record"], "not json at all");
}

/// Renaming only an aggregate's output column keeps the state usable: the restart is
/// allowed (`weir check` agrees); changing the aggregate itself is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_an_aggregate_alias_is_a_compatible_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let flow = |aggregate: &str| {
        format!(
            r#"
[[flow]]
name = "w"
trigger = "available_now"
watermark = {{ column = "ts", delay = "0 seconds" }}
group_by = ["window(ts, '10 seconds')", "k"]
aggregates = ["{aggregate}"]
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "k STRING, ts TIMESTAMP"
[flow.sink]
type = "console"
"#
        )
    };
    let p = write_pipeline(dir, &flow("count(*) AS n"));
    let landing = dir.join("landing");
    land(
        &landing,
        "a.json",
        b"{\"k\":\"x\",\"ts\":\"2024-05-01T10:00:01Z\"}\n",
    );
    run_ok(&p);
    let p = write_pipeline(dir, &flow("count(*)  AS  num"));
    let check = weir().args(["check"]).arg(&p).output().unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    land(
        &landing,
        "b.json",
        b"{\"k\":\"x\",\"ts\":\"2024-05-01T10:00:21Z\"}\n",
    );
    let out = run_ok(&p);
    // The window [10:00:00, 10:00:10) closes in the second run, counted from the
    // state, under its new name (the console sink prints it).
    let printed = String::from_utf8_lossy(&out.stderr);
    assert!(
        printed.contains("num") && printed.contains("2024-05-01T10:00:00"),
        "{printed}"
    );
    let p = write_pipeline(dir, &flow("sum(1) AS num"));
    let stderr = run_err(&p);
    assert!(stderr.contains("aggregates changed"), "{stderr}");
}

/// A files source whose landing directory does not exist yet waits for it (health
/// `source_unavailable`, naming the path) instead of failing; once the directory
/// appears its files are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_landing_directory_is_waited_for_as_source_unavailable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "json", "schema = \"id BIGINT\"");
    run_ok(&p);
    let health: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("_checkpoints/t/_weir/health.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(health["state"], "source_unavailable", "{health}");
    assert!(health.to_string().contains("landing"), "{health}");

    // A processing-time flow keeps waiting, and reads the files once they come.
    let p = write_pipeline(
        dir,
        &std::fs::read_to_string(&p)
            .unwrap()
            .replace("trigger = \"available_now\"", "trigger = \"200 ms\""),
    );
    let mut child = weir()
        .args(["run", "--headless"])
        .arg(&p)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "still waiting");
    land(&dir.join("landing"), "a.json", b"{\"id\":1}\n");
    let table = dir.join("table");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while delta_version(&table).await.is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(table_lines(&table, &["id"], "id", ",").await, ["1"]);
}

const TWO_HOPS: &str = r#"
[[flow]]
name = "bronze"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "json"
[flow.sink]
type = "delta"
path = "bronze"

[[flow]]
name = "silver"
trigger = "available_now"
[flow.source]
type = "delta"
path = "bronze"
STARTING
[flow.sink]
type = "delta"
path = "silver"
"#;

fn run_flow_named(p: &Path, flow: &str) -> std::process::Output {
    weir()
        .args(["run", "--headless", "--flow", flow])
        .arg(p)
        .output()
        .unwrap()
}

/// A Delta source meeting a schema change names what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_source_schema_change_names_the_new_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(dir, &TWO_HOPS.replace("STARTING", ""));
    let landing = dir.join("landing");
    land(&landing, "a.json", b"{\"id\":1}\n");
    assert!(run_flow_named(&p, "bronze").status.success());
    assert!(run_flow_named(&p, "silver").status.success());
    // Silver streams on (processing time) while bronze's schema changes under it.
    let silver = weir()
        .args([
            "run",
            "--headless",
            "--flow",
            "silver",
            "--trigger",
            "200ms",
        ])
        .arg(&p)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    land(&landing, "b.json", b"{\"id\":2,\"coupon\":\"SAVE5\"}\n");
    // Bronze stops once on the new column (exit 3), then writes it.
    assert_eq!(run_flow_named(&p, "bronze").status.code(), Some(3));
    assert!(run_flow_named(&p, "bronze").status.success());
    let out = silver.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("schema changed at version")
            && stderr.contains("new column(s) coupon string"),
        "{stderr}"
    );
}

/// A `starting_version` whose files VACUUM removed: the error says from which version
/// on the table is still whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vacuumed_starting_version_suggests_the_earliest_that_works() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(dir, &TWO_HOPS.replace("STARTING", "starting_version = 0"));
    let landing = dir.join("landing");
    for (i, name) in ["a.json", "b.json", "c.json"].iter().enumerate() {
        land(&landing, name, format!("{{\"id\":{i}}}\n").as_bytes());
        assert!(run_flow_named(&p, "bronze").status.success());
    }
    // Compact (the old files leave the snapshot), then VACUUM them away.
    let url = url::Url::from_directory_path(dir.join("bronze")).unwrap();
    let table = deltalake::open_table(url).await.unwrap();
    let (table, _) = table.optimize().await.unwrap();
    let compacted = table.version().unwrap();
    let (_table, _) = table
        .vacuum()
        .with_retention_period(chrono::Duration::zero())
        .with_enforce_retention_duration(false)
        .await
        .unwrap();
    let out = run_flow_named(&p, "silver");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("VACUUM removed them")
            && stderr.contains(&format!("starting_version = {compacted}")),
        "{stderr}"
    );
}

/// The future-skew guard: a row whose event time is far ahead of the wall clock (a
/// producer's clock error) goes to the late-rows table and never moves the watermark,
/// which would otherwise make every real row late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_event_time_goes_to_late_rows_not_to_the_watermark() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = write_pipeline(
        dir,
        r#"
[[flow]]
name = "w"
trigger = "available_now"
watermark = { column = "ts", delay = "0 seconds", max_future = "1 day" }
group_by = ["window(ts, '10 seconds')"]
aggregates = ["count(*) AS n"]
late_rows = { path = "late" }
[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "ts TIMESTAMP, v BIGINT"
[flow.sink]
type = "delta"
path = "table"
"#,
    );
    let landing = dir.join("landing");
    land(
        &landing,
        "a.json",
        concat!(
            "{\"ts\":\"2024-05-01T10:00:01Z\",\"v\":1}\n",
            "{\"ts\":\"2099-01-01T00:00:00Z\",\"v\":2}\n",
        )
        .as_bytes(),
    );
    let out = run_ok(&p);
    let records = progress(&out);
    assert_eq!(records[0]["weir"]["numRowsFutureEventTime"], 1);
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(
        &landing,
        "b.json",
        b"{\"ts\":\"2024-05-01T10:00:05Z\",\"v\":3}\n{\"ts\":\"2024-05-01T10:00:21Z\",\"v\":4}\n",
    );
    run_ok(&p);
    // 10:00:05 was not late: the watermark never jumped to 2099.
    assert_eq!(
        table_lines(&dir.join("table"), &["n"], "window_start", ",").await,
        ["2"]
    );
    assert_eq!(
        table_lines(&dir.join("late"), &["v"], "v", ",").await,
        ["2"]
    );
}

/// Issue #46: a sink table whose `delta.setTransactionRetentionDuration` let Delta drop
/// the query's txn is refused naming the property and what to do, not only as "recreated".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txn_missing_under_a_transaction_retention_names_the_property() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    let table = dir.join("table");
    land(&landing, "a.json", b"{\"id\":1}\n");
    let p = pipeline(dir, "json", "");
    run_ok(&p);

    // The same rows, in a table whose log no longer holds the query's txn (what an
    // expired transaction id leaves), with the retention property set.
    std::fs::remove_dir_all(&table).unwrap();
    std::fs::create_dir_all(&table).unwrap();
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, true),
    ]));
    let rows = arrow::array::RecordBatch::try_new(
        schema,
        vec![std::sync::Arc::new(arrow::array::Int64Array::from(vec![1]))],
    )
    .unwrap();
    let mut delta =
        deltalake::DeltaTable::try_from_url(url::Url::from_directory_path(&table).unwrap())
            .await
            .unwrap()
            .write(vec![rows.clone()])
            .with_configuration([(
                "delta.setTransactionRetentionDuration".to_string(),
                Some("interval 1 seconds".to_string()),
            )])
            .await
            .unwrap();
    for _ in 0..2 {
        delta = delta.write(vec![rows.clone().slice(0, 0)]).await.unwrap();
    }
    let version = delta_version(&table).await;

    land(&landing, "b.json", b"{\"id\":2}\n");
    let stderr = run_err(&p);
    for fact in [
        "no transaction id of query",
        "delta.setTransactionRetentionDuration = interval 1 seconds",
        "may have expired",
        "weir playbook checkpoint_incompatible",
    ] {
        assert!(stderr.contains(fact), "missing {fact:?}: {stderr}");
    }
    assert!(!stderr.contains("different query id"), "{stderr}");
    assert_eq!(delta_version(&table).await, version, "nothing written");
}

/// Issue #46, item 3: a sink table that expires transaction ids is named at start, with
/// its retention and what to do, before a long pause makes the restart impossible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_retention_on_the_sink_is_warned_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let table = dir.join("table");
    std::fs::create_dir_all(&table).unwrap();
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, true),
    ]));
    let empty = arrow::array::RecordBatch::new_empty(schema);
    deltalake::DeltaTable::try_from_url(url::Url::from_directory_path(&table).unwrap())
        .await
        .unwrap()
        .write(vec![empty])
        .with_configuration([(
            "delta.setTransactionRetentionDuration".to_string(),
            Some("interval 2 days".to_string()),
        )])
        .await
        .unwrap();
    land(&dir.join("landing"), "a.json", b"{\"id\":1}\n");
    let p = pipeline(dir, "json", "");
    let out = run_ok(&p);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sets delta.setTransactionRetentionDuration = interval 2 days")
            && stderr.contains("raise it above the longest pause"),
        "{stderr}"
    );
    assert_eq!(num_rows(&delta_rows(&table).await), 1);
}

/// Copies a directory tree (a checkpoint "backup" taken by hand).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Issue #18: a checkpoint restored from an older backup is behind its sink table (the
/// table's txn records a later batch of the same query). Before, the next batch id was
/// taken for "already written" and the newly landed file was marked ingested but never
/// reached the table; now the start is refused naming both versions, nothing is written,
/// and the newest checkpoint carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_behind_its_table_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    let table = dir.join("table");
    let checkpoint = dir.join("_checkpoints/t");
    land(&landing, "a.json", b"{\"id\":1}\n{\"id\":2}\n");
    let p = pipeline(dir, "json", "");
    run_ok(&p);
    let old = dir.join("old-checkpoint");
    copy_tree(&checkpoint, &old);
    land(&landing, "b.json", b"{\"id\":3}\n");
    run_ok(&p);
    let newest = dir.join("newest-checkpoint");
    copy_tree(&checkpoint, &newest);
    let version = delta_version(&table).await;

    // The old backup restored over the checkpoint, and a new file lands.
    std::fs::remove_dir_all(&checkpoint).unwrap();
    copy_tree(&old, &checkpoint);
    land(&landing, "c.json", b"{\"id\":4}\n");
    let stderr = run_err(&p);
    for fact in [
        "ahead of this checkpoint",
        "records batch 1",
        "last batch is 0",
        "checkpoint_incompatible",
    ] {
        assert!(stderr.contains(fact), "missing {fact:?}: {stderr}");
    }
    assert_eq!(delta_version(&table).await, version, "nothing written");

    // Offsets and commits deleted, metadata kept: the same refusal, and the ledger
    // is left as it was (recovery has not run).
    std::fs::remove_dir_all(checkpoint.join("offsets")).unwrap();
    std::fs::remove_dir_all(checkpoint.join("commits")).unwrap();
    let ledger_before = std::fs::read(checkpoint.join("sources/0/ledger.sqlite")).unwrap();
    let stderr = run_err(&p);
    assert!(stderr.contains("last batch is none"), "{stderr}");
    assert_eq!(
        std::fs::read(checkpoint.join("sources/0/ledger.sqlite")).unwrap(),
        ledger_before
    );

    // The newest checkpoint restored: c.json is ingested, nothing twice.
    std::fs::remove_dir_all(&checkpoint).unwrap();
    copy_tree(&newest, &checkpoint);
    run_ok(&p);
    assert_eq!(
        table_lines(&table, &["id"], "id", ",").await,
        ["1", "2", "3", "4"]
    );
}

/// Issue #18: a checkpoint with batches whose file ledger is gone is refused (a new,
/// empty ledger would ingest every file again), never recreated silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_ledger_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    let table = dir.join("table");
    land(&landing, "a.json", b"{\"id\":1}\n");
    let p = pipeline(dir, "json", "");
    run_ok(&p);
    let ledger = dir.join("_checkpoints/t/sources/0/ledger.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let mut name = ledger.as_os_str().to_owned();
        name.push(suffix);
        std::fs::remove_file(PathBuf::from(name)).ok();
    }
    land(&landing, "b.json", b"{\"id\":2}\n");
    let stderr = run_err(&p);
    assert!(stderr.contains("the file ledger is missing"), "{stderr}");
    assert!(stderr.contains("ledger.sqlite"), "{stderr}");
    assert!(!ledger.exists(), "not recreated");
    assert_eq!(table_lines(&table, &["id"], "id", ",").await, ["1"]);
}

/// Issue #18: a gzip bomb (a small file that inflates past `max_file_size`) and a
/// plain file over the limit fail as a whole, named, without being held in memory;
/// the other files of the batch are ingested, and nothing is silently dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_bomb_fails_alone_within_max_file_size() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    land(&landing, "good.json", b"{\"id\":1}\n{\"id\":2}\n");
    // 64 MiB of JSON lines from a gzip of well under 1 MiB.
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let line = b"{\"id\":3}\n";
    for _ in 0..(64 << 20) / line.len() {
        e.write_all(line).unwrap();
    }
    let bomb = e.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    land(&landing, "bomb.json.gz", &bomb);
    land(&landing, "big.json", &b"{\"id\":4}\n".repeat(200_000));
    let p = pipeline(
        dir,
        "json",
        "schema = \"id BIGINT\"\nmax_file_size = \"1 MiB\"",
    );
    let out = run_ok(&p);
    let records = progress(&out);
    let failed: u64 = records
        .iter()
        .map(|r| r["weir"]["numFilesFailed"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(failed, 2, "{records:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("decompresses to more than max_file_size"),
        "{text}"
    );
    assert!(text.contains("bytes, over max_file_size"), "{text}");
    assert_eq!(
        table_lines(&dir.join("table"), &["id"], "id", ",").await,
        ["1", "2"]
    );
    let inspect = weir()
        .args(["inspect", "--json"])
        .arg(dir.join("_checkpoints/t"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("\"files_failed\": 2"), "{text}");
}

/// A flow's query reads some of `_metadata`'s fields (the source fills only those,
/// BENCHMARKS.md "File sources: only the `_metadata` fields a flow reads"): each read field still
/// holds the file's value, by `_metadata.<field>`, in `where`, or with the whole struct.
#[tokio::test]
async fn metadata_fields_a_flow_reads_hold_the_files_values() {
    for (select, where_) in [
        (
            r#"["v", "_metadata.file_name AS name", "_metadata.file_size AS size"]"#,
            "_metadata.file_modification_time > TIMESTAMP '2000-01-01T00:00:00Z'",
        ),
        (
            r#"["v", "_metadata AS m", "_metadata.file_size AS size", "_metadata['file_name'] AS name"]"#,
            "v > 0",
        ),
        // The outer `_metadata` in a correlated subquery (found in review: it once
        // read as empty, dropping every row).
        (
            r#"["v", "_metadata.file_name AS name", "_metadata.file_size AS size"]"#,
            "EXISTS (SELECT 1 FROM batch b2 WHERE b2.v = batch.v AND batch._metadata['file_modification_time'] > TIMESTAMP '2000-01-01T00:00:00Z')",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        land(&dir.join("landing"), "a.csv", b"v\n1\n2\n");
        land(&dir.join("landing"), "bb.csv", b"v\n3\n");
        let p = files_to_delta_flow(
            dir,
            "csv",
            &format!("select = {select}\nwhere = \"{where_}\""),
            "schema = \"v BIGINT\"\n[flow.source.csv]\nheader = true",
            "",
        );
        run_ok(&p);
        assert_eq!(
            table_lines(&dir.join("table"), &["v", "name", "size"], "v", " ").await,
            ["1 a.csv 6", "2 a.csv 6", "3 bb.csv 4"],
            "{select}"
        );
        if select.contains("_metadata AS m") {
            let rows = delta_rows(&dir.join("table")).await;
            let out = sql(
                &rows,
                "SELECT count(*) FROM t WHERE m['file_name'] = name AND m['file_size'] = size \
                 AND m['file_path'] LIKE ('file:/%/landing/' || name) \
                 AND m['file_modification_time'] > TIMESTAMP '2000-01-01T00:00:00Z'",
            )
            .await;
            assert_eq!(scalar(&out), 3, "the whole struct holds every field");
        }
    }
}
