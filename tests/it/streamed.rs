//! Streamed batches (docs/architecture.md, "Streamed batches"): a files-to-Delta flow
//! reads, transforms and writes its batch file by file, one writer per core, through
//! the real binary. The oracle is the same flow written the ordinary way (a
//! partitioned sink is never streamed) and the known row counts of the data.

use std::path::Path;

use weir::checkpoint::progress::read_progress;

use crate::support::*;

fn run(pipeline: &Path) -> std::process::Output {
    weir()
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(pipeline)
        .output()
        .unwrap()
}

fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The bronze flights flow into `lake/bronze/flights`, `sink_extra` added to its sink.
fn bronze(dir: &Path, sink_extra: &str) -> std::path::PathBuf {
    let toml = format!("{}{sink_extra}\n", flights_pipeline(1000));
    write_pipeline(dir, &toml)
}

fn land_days(dir: &Path, days: usize) -> u64 {
    weir::demo::data::land_flights(
        &dir.join("landing/flights"),
        &dir.join("_staging"),
        Some(days),
    )
    .unwrap()
    .rows_total
}

/// The data files a Delta table's log adds, and the Parquet files in its directory.
fn data_files(table: &Path) -> (Vec<String>, Vec<String>) {
    let mut added = Vec::new();
    for entry in std::fs::read_dir(table.join("_delta_log")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let action: serde_json::Value = serde_json::from_str(line).unwrap();
                if let Some(p) = action["add"]["path"].as_str() {
                    added.push(p.to_string());
                }
            }
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(table)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    added.sort();
    on_disk.sort();
    (added, on_disk)
}

/// The adds of one Delta version.
fn adds_in_version(table: &Path, version: u64) -> usize {
    std::fs::read_to_string(table.join(format!("_delta_log/{version:020}.json")))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("{\"add\""))
        .count()
}

/// `column` (as text) of every row of one Delta version's added files, file by file in
/// the log's order (each file's rows in their order).
fn column_in_log_order(table: &Path, version: u64, column: &str) -> Vec<Vec<String>> {
    use arrow::array::{Array, StringArray};
    let log =
        std::fs::read_to_string(table.join(format!("_delta_log/{version:020}.json"))).unwrap();
    let mut files = Vec::new();
    for line in log.lines() {
        let action: serde_json::Value = serde_json::from_str(line).unwrap();
        let Some(path) = action["add"]["path"].as_str() else {
            continue;
        };
        let file = std::fs::File::open(table.join(path)).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let mut values = Vec::new();
        for batch in reader {
            let batch = batch.unwrap();
            let text = arrow::compute::cast(
                batch.column_by_name(column).unwrap(),
                &arrow::datatypes::DataType::Utf8,
            )
            .unwrap();
            let text = text.as_any().downcast_ref::<StringArray>().unwrap();
            values.extend((0..text.len()).map(|i| text.value(i).to_string()));
        }
        files.push(values);
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bronze_batch_streams_file_by_file_into_the_rows_the_ordinary_path_writes() {
    let cols = [
        "year",
        "month",
        "day",
        "dep_time",
        "sched_dep_time",
        "dep_delay",
        "arr_time",
        "sched_arr_time",
        "arr_delay",
        "carrier",
        "flight",
        "tailnum",
        "origin",
        "dest",
        "air_time",
        "distance",
        "hour",
        "minute",
        "time_hour",
        "source_file",
    ];
    let mut tables = Vec::new();
    // Streamed, then the ordinary way (a sink without the txn check is not streamed).
    for sink_extra in ["", "idempotent = false"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let pipeline = bronze(dir, sink_extra);
        // Batch 0 creates the table (never streamed: there is no table to stream into).
        land_days(dir, 1);
        ok(&run(&pipeline));
        // Batch 1: 120 days, ~11 MB of CSV, a writer per core.
        let rows = land_days(dir, 121);
        ok(&run(&pipeline));
        let table = dir.join("lake/bronze/flights");
        let progress =
            read_progress(&dir.join("_checkpoints/bronze_flights/_weir/progress.jsonl")).unwrap();
        let streamed: Vec<bool> = progress.iter().map(|p| p.weir.streamed).collect();
        let batches = delta_rows(&table).await;
        assert_eq!(num_rows(&batches) as u64, rows, "{sink_extra}");
        // One `current_timestamp()` per batch, whatever the writer.
        let instants = sql(&batches, "SELECT count(DISTINCT ingested_at) FROM t").await;
        assert_eq!(scalar(&instants), 2, "{sink_extra}");
        let (added, on_disk) = data_files(&table);
        if sink_extra.is_empty() {
            assert_eq!(streamed, [false, true]);
            assert_eq!(
                progress[1].sink.num_output_rows as u64,
                rows - progress[0].sink.num_output_rows as u64
            );
            assert_eq!(progress[1].weir.num_files, 120);
            assert_eq!(progress[1].duration_ms.get("getBatch"), Some(&0));
            // A Parquet file per writer (a writer per core), and one more per range of
            // files a writer took from another's.
            let writers = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
            let adds = adds_in_version(&table, 1);
            assert!(
                (writers..=120).contains(&adds),
                "{adds} files for {writers} writers"
            );
            assert_eq!(added, on_disk, "every Parquet file written is in the log");
            // The rows keep the input files' order (landed one by one, day by day: the
            // batch's order is the paths'), across the Parquet files in the log's order,
            // whichever writer wrote which file.
            let in_log_order: Vec<String> = column_in_log_order(&table, 1, "source_file")
                .into_iter()
                .flatten()
                .collect();
            assert_eq!(
                in_log_order.len() as u64,
                progress[1].sink.num_output_rows as u64
            );
            assert!(
                in_log_order.is_sorted(),
                "rows out of the files' order across the batch's Parquet files"
            );
            let ledger = rusqlite::Connection::open(
                dir.join("_checkpoints/bronze_flights/sources/0/ledger.sqlite"),
            )
            .unwrap();
            let ingested: i64 = ledger
                .query_row(
                    "SELECT count(*) FROM files WHERE state = 'committed' AND batch_id = 1",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(
                ingested, 120,
                "the ledger records the streamed batch's files"
            );
        } else {
            assert_eq!(streamed, [false, false]);
        }
        let order = cols.join(", ");
        // `source_file` is the file's full path: the directories differ.
        let lines = table_lines(&table, &cols, &order, "|").await;
        let prefix = dir.display().to_string();
        tables.push(
            lines
                .into_iter()
                .map(|l| l.replace(&prefix, "DIR"))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(tables[0].len(), tables[1].len());
    assert!(
        tables[0] == tables[1],
        "streamed and ordinary tables differ"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_column_declines_the_streamed_batch_leaving_no_file_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pipeline = files_to_delta_flow(
        dir,
        "csv",
        "select = [\"*\", \"_metadata.file_name AS f\"]",
        "[flow.source.csv]\nheader = true",
        "",
    );
    let landing = dir.join("landing");
    land(&landing, "a.csv", b"id,name\n1,a\n");
    ok(&run(&pipeline));
    let table = dir.join("table");
    assert_eq!(delta_version(&table).await, Some(0));
    // Batch 1: b.csv streams first (files in order), c.csv brings a new column.
    land(&landing, "b.csv", b"id,name\n2,b\n");
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(&landing, "c.csv", b"id,name,extra\n3,c,x\n");
    let stopped = weir()
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&pipeline)
        .env("WEIR_LOG", "weir=debug")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&stopped.stderr).contains("streamed batch declined"));
    assert_eq!(
        stopped.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    assert!(
        String::from_utf8_lossy(&stopped.stderr).contains("schema changed: new column(s) extra")
    );
    assert_eq!(delta_version(&table).await, Some(0), "nothing committed");
    let (added, on_disk) = data_files(&table);
    assert_eq!(
        added, on_disk,
        "the declined batch's Parquet files are removed"
    );
    // The restart re-runs batch 1 with the wider schema: every row once.
    ok(&run(&pipeline));
    let lines = table_lines(&table, &["id", "name", "extra", "f"], "id", ",").await;
    assert_eq!(lines, ["1,a,null,a.csv", "2,b,null,b.csv", "3,c,x,c.csv"]);
}

/// CSV text of `rows` lines under `header`, each line `i` then `rest`.
fn csv(header: &str, rows: usize, rest: &str) -> Vec<u8> {
    let mut text = format!("{header}\n");
    for i in 0..rows {
        text.push_str(&format!("{i},{rest}\n"));
    }
    text.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_first_batch_that_stops_on_a_new_column_creates_no_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Two runs of ~4.5 MB: a large first batch, whose table the commit would create.
    let pipeline = files_to_delta_flow(
        dir,
        "csv",
        "",
        "schema_inference_max_files = 1\n[flow.source.csv]\nheader = true",
        "merge_schema = false",
    );
    let landing = dir.join("landing");
    land(&landing, "a.csv", &csv("id,name", 300_000, "aaaaaaaa"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(
        &landing,
        "b.csv",
        &csv("id,name,extra", 300_000, "bbbbbbbb,x"),
    );
    let stopped = run(&pipeline);
    assert_eq!(
        stopped.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let table = dir.join("table");
    assert_eq!(
        delta_version(&table).await,
        None,
        "no table before the schema is settled"
    );
    // The restart writes the batch with the wider schema, every row once.
    ok(&run(&pipeline));
    let batches = delta_rows(&table).await;
    assert_eq!(num_rows(&batches), 600_000);
    let extra = sql(&batches, "SELECT count(*) FROM t WHERE extra = 'x'").await;
    assert_eq!(scalar(&extra), 300_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_first_batch_with_a_name_delta_forbids_is_refused_as_the_ordinary_write_refuses_it()
{
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pipeline = files_to_delta_flow(dir, "csv", "", "[flow.source.csv]\nheader = true", "");
    let landing = dir.join("landing");
    land(&landing, "a.csv", &csv("id,dep delay", 300_000, "5"));
    land(&landing, "b.csv", &csv("id,dep delay", 300_000, "6"));
    let out = run(&pipeline);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("dep delay") && stderr.contains("column_mapping_mode"),
        "{stderr}"
    );
    assert_eq!(delta_version(&dir.join("table")).await, None);
}

/// A CSV files-to-Delta flow of `id BIGINT, note STRING` rows with a header;
/// `source_extra` goes into `[flow.source]`.
fn id_note_flow(dir: &Path, source_extra: &str) -> std::path::PathBuf {
    files_to_delta_flow(
        dir,
        "csv",
        "",
        &format!(
            "schema = \"id BIGINT, note STRING\"\n{source_extra}[flow.source.csv]\nheader = true"
        ),
        "",
    )
}

/// Lands `files` CSV files `fNN.csv` of `id,note` rows, each at least `min_bytes` long,
/// file `f`'s rows with the note `note(f)` and the ids counting up across the files;
/// returns the number of rows.
fn land_id_note_files(
    landing: &Path,
    files: usize,
    min_bytes: usize,
    note: impl Fn(usize) -> String,
) -> u64 {
    let mut id = 0u64;
    for f in 0..files {
        let note = note(f);
        let mut text = String::from("id,note\n");
        while text.len() < min_bytes {
            text.push_str(&format!("{id},{note}\n"));
            id += 1;
        }
        land(landing, &format!("f{f:02}.csv"), text.as_bytes());
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_done_early_takes_half_the_slower_range_and_the_rows_keep_their_order() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return; // one writer: nothing to share
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pipeline = id_note_flow(dir, "");
    // Twenty files of ~420 KB (a large first batch: two runs of ten files). The first
    // ten hold ~47 K short rows each, the last ten ~100 long rows each: the second
    // writer's run decodes far faster, so it takes the back half of the first's.
    let id = land_id_note_files(&dir.join("landing"), 20, 420_000, |f| {
        if f < 10 {
            "1".to_string()
        } else {
            "b".repeat(4000)
        }
    });
    ok(&run(&pipeline));
    let table = dir.join("table");
    let progress = read_progress(&dir.join("_checkpoints/t/_weir/progress.jsonl")).unwrap();
    assert_eq!(progress.len(), 1);
    assert!(progress[0].weir.streamed, "the batch is streamed");
    // The table is created at the commit: empty in version 0, the rows in version 1.
    assert_eq!(delta_version(&table).await, Some(1));
    let files = column_in_log_order(&table, 1, "id");
    assert!(
        files.len() > 2,
        "a writer took files from the other's range into a Parquet file of its own: {} files",
        files.len()
    );
    // Every row once, in the input files' order, across the Parquet files in the log.
    let ids: Vec<u64> = files.iter().flatten().map(|v| v.parse().unwrap()).collect();
    assert_eq!(ids, (0..id).collect::<Vec<_>>());
    let (added, on_disk) = data_files(&table);
    assert_eq!(added, on_disk, "every Parquet file written is in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_streamed_batch_begins_with_the_first_files_the_batch_before_decoded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pipeline = id_note_flow(dir, "max_files_per_trigger = 16\n");
    // Four batches of 16 files of ~40 KB. The first creates the table the ordinary way
    // (a small batch), the next three are streamed; a head start decodes the first four
    // files (a quarter of the bytes) of each batch after a streamed one.
    let id = land_id_note_files(&dir.join("landing"), 64, 40_000, |f| format!("n{f}"));
    let out = weir()
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&pipeline)
        .env("WEIR_LOG", "weir=debug")
        .output()
        .unwrap();
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let heads: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("streamed batch begins with a head start"))
        .collect();
    assert_eq!(heads.len(), 2, "batches 2 and 3: {stderr}");
    assert!(heads.iter().all(|l| l.contains("files=4")), "{heads:?}");
    let progress = read_progress(&dir.join("_checkpoints/t/_weir/progress.jsonl")).unwrap();
    let streamed: Vec<bool> = progress.iter().map(|p| p.weir.streamed).collect();
    assert_eq!(streamed, [false, true, true, true]);
    // Every row once; the streamed batches' rows (versions 1 to 3) in the input files'
    // order, version after version (the ordinary path's batch 0 may reorder its own).
    let table = dir.join("table");
    let ids_of = |version| -> Vec<u64> {
        column_in_log_order(&table, version, "id")
            .iter()
            .flatten()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let mut first = ids_of(0);
    first.sort_unstable();
    let streamed: Vec<u64> = (1..=3).flat_map(ids_of).collect();
    let from = first.len() as u64;
    assert_eq!(first, (0..from).collect::<Vec<_>>(), "batch 0's rows");
    let first_wrong = streamed
        .iter()
        .zip(from..)
        .position(|(got, want)| *got != want);
    assert_eq!(
        (from + streamed.len() as u64, first_wrong),
        (id, None),
        "every row once, the streamed batches' in order"
    );
}
