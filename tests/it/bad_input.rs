//! One fixture per kind of bad input: each ends as a clear error or a rescued
//! row naming the file (and line), never as silently lost rows, and is counted
//! in the progress record.

use std::path::Path;
use std::sync::Arc;

use weir::checkpoint::progress::read_progress;
use weir::engine::{RunOptions, run_flow};

use crate::support::*;

fn pipeline(dir: &Path, format: &str, schema: Option<&str>) -> weir::spec::FlowSpec {
    let schema = schema.map_or(String::new(), |s| format!("schema = \"{s}\"\n"));
    let p = write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "t"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "{format}"
{schema}
[flow.sink]
type = "delta"
path = "table"
"#
        ),
    );
    weir::pipeline::load(&p).unwrap().flows.remove(0)
}

fn progress(dir: &Path) -> Vec<weir::records::StreamingQueryProgress> {
    read_progress(&dir.join("_checkpoints/t/_weir/progress.jsonl")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_lines_are_rescued_with_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    land(
        &dir.join("landing"),
        "bad.json",
        &std::fs::read(fixture("cases/B11/step1/bad.json")).unwrap(),
    );
    let flow = pipeline(dir, "json", Some("sensor STRING, val DOUBLE"));
    let summary = run_flow(&flow, RunOptions::default()).await.unwrap();
    assert_eq!(summary.batches, 1);
    let rows = delta_rows(&dir.join("table")).await;
    let sensors = column_strings(&rows, "sensor");
    for s in ["s1", "s2", "s4", "s5"] {
        assert!(sensors.contains(&s.to_string()), "{s} lost: {sensors:?}");
    }
    let rescued: Vec<String> = column_strings(&rows, "_rescued_data")
        .into_iter()
        .filter(|r| r.contains("_corrupt_record"))
        .collect();
    assert!(
        rescued
            .iter()
            .any(|r| r.contains("garbage line") && r.contains("\"_line\":5")),
        "{rescued:?}"
    );
    assert!(
        rescued.iter().any(|r| r.contains("\"_line\":7")),
        "{rescued:?}"
    );
    assert!(
        rescued.iter().all(|r| r.contains("bad.json")),
        "{rescued:?}"
    );
    let p = progress(dir);
    assert!(p[0].weir.num_records_corrupt >= 2);
    assert_eq!(
        p[0].num_input_rows as usize,
        num_rows(&rows),
        "every line is a row"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ragged_csv_rows_keep_their_extra_values() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    land(
        &dir.join("landing"),
        "ragged.csv",
        &std::fs::read(fixture("cases/B13/step1/ragged.csv")).unwrap(),
    );
    let flow = pipeline(dir, "csv", Some("a BIGINT, b BIGINT, c BIGINT"));
    run_flow(&flow, RunOptions::default()).await.unwrap();
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(column_strings(&rows, "a"), vec!["1", "4", "6", "10"]);
    assert_eq!(column_strings(&rows, "c"), vec!["3", "null", "8", "12"]);
    let rescued = column_strings(&rows, "_rescued_data");
    assert!(
        rescued[2].contains('9') && rescued[2].contains("ragged.csv"),
        "{rescued:?}"
    );
    assert_eq!(rescued[0], "null");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_gzip_fails_alone_and_is_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    land(
        &landing,
        "a.json.gz",
        &std::fs::read(fixture("cases/B15/step1/a.json.gz")).unwrap(),
    );
    land(
        &landing,
        "d.json.gz",
        &std::fs::read(fixture("cases/B15/step4/d.json.gz")).unwrap(),
    );
    let flow = pipeline(dir, "json", Some("id BIGINT"));
    let summary = run_flow(&flow, RunOptions::default()).await.unwrap();
    assert_eq!(summary.num_files_failed, 1);
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(
        column_strings(&rows, "id"),
        vec!["1", "2"],
        "none of the truncated file's lines"
    );
    let p = progress(dir);
    assert_eq!(p[0].weir.num_files_failed, 1);
    assert!(p[0].weir.errors[0].path.ends_with("d.json.gz"));
    let inspection = weir::checkpoint_tools::inspect::inspect(&flow.checkpoint)
        .await
        .unwrap();
    let ledger = inspection.ledger.unwrap();
    assert_eq!((ledger.files_committed, ledger.files_failed), (1, 1));
    // A later complete copy under the same name is ingested.
    let full = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        for id in 6..30 {
            writeln!(e, "{{\"id\":{id}}}").unwrap();
        }
        e.finish().unwrap()
    };
    land(&landing, "d.json.gz", &full);
    run_flow(&flow, RunOptions::default()).await.unwrap();
    assert_eq!(num_rows(&delta_rows(&dir.join("table")).await), 2 + 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_column_of_another_type_is_rescued() {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("qty", DataType::Int64, true),
    ]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["7", "x-8"])),
            Arc::new(Int64Array::from(vec![1, 2])),
        ],
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    land(&dir.join("landing"), "p.parquet", &buf);
    let flow = pipeline(dir, "parquet", Some("id BIGINT, qty BIGINT"));
    run_flow(&flow, RunOptions::default()).await.unwrap();
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(column_strings(&rows, "id"), vec!["7", "null"]);
    assert_eq!(
        column_strings(&rows, "qty"),
        vec!["1", "2"],
        "the rest of the row is kept"
    );
    let rescued = column_strings(&rows, "_rescued_data");
    assert!(
        rescued[1].contains("x-8") && rescued[1].contains("p.parquet"),
        "{rescued:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_checkpoint_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    land(&dir.join("landing"), "a.json", b"{\"id\":1}\n");
    let flow = pipeline(dir, "json", Some("id BIGINT"));
    run_flow(&flow, RunOptions::default()).await.unwrap();
    let offsets = flow.checkpoint.join("offsets/0");
    std::fs::write(&offsets, "v1\n").unwrap();
    let err = run_flow(&flow, RunOptions::default()).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("offsets/0") && message.contains("line 2"),
        "{message}"
    );
    assert_eq!(err.kind(), weir::error::ErrorKind::CheckpointCorrupt);
    let inspection = weir::checkpoint_tools::inspect::inspect(&flow.checkpoint)
        .await
        .unwrap();
    assert!(
        inspection.problems.iter().any(|p| p.contains("offsets/0")),
        "{:?}",
        inspection.problems
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewritten_zero_byte_and_hidden_files_follow_the_listing_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    land(&landing, "a.json", b"{\"id\":1}\n");
    land(&landing, "late.json", b"");
    land(&landing, "_SUCCESS", b"{\"id\":100}\n");
    land(&landing, ".hidden.json", b"{\"id\":101}\n");
    let flow = pipeline(dir, "json", Some("id BIGINT"));
    run_flow(&flow, RunOptions::default()).await.unwrap();
    assert_eq!(
        column_strings(&delta_rows(&dir.join("table")).await, "id"),
        vec!["1"]
    );
    // The 0-byte placeholder gets content: picked up once.
    std::fs::write(landing.join("late.json"), b"{\"id\":9}\n").unwrap();
    // A rewritten file is not ingested again (default), but counted.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(landing.join("a.json"), b"{\"id\":1}\n{\"id\":2}\n").unwrap();
    run_flow(&flow, RunOptions::default()).await.unwrap();
    let mut ids = column_strings(&delta_rows(&dir.join("table")).await, "id");
    ids.sort();
    assert_eq!(ids, vec!["1", "9"]);
    let p = progress(dir);
    assert_eq!(p.last().unwrap().weir.num_files_modified_after_ingestion, 1);
    // Nothing new on a third run.
    let third = run_flow(&flow, RunOptions::default()).await.unwrap();
    assert_eq!(third.batches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_names_delta_forbids_are_refused_before_anything_is_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    land(
        &dir.join("landing"),
        "names.json",
        &std::fs::read(fixture("cases/B03/step1/names.json")).unwrap(),
    );
    let flow = pipeline(dir, "json", None);
    let err = run_flow(&flow, RunOptions::default()).await.unwrap_err();
    let message = err.to_string();
    for name in ["`order id`", "`unit price(EUR)`", "`k=v`"] {
        assert!(message.contains(name), "{message}");
    }
    assert_eq!(err.kind(), weir::error::ErrorKind::SinkSchemaMismatch);
    assert!(!dir.join("table/_delta_log").exists(), "no commit was made");
    let inspection = weir::checkpoint_tools::inspect::inspect(&flow.checkpoint)
        .await
        .unwrap();
    assert_eq!(
        inspection.last_committed_batch_id, None,
        "checkpoint not advanced"
    );
    assert_eq!(
        inspection.pending_batch_id,
        Some(0),
        "the batch is re-run after a fix"
    );
}

/// Symbolic links in a landing directory are not followed by default: a link to a
/// secret outside the source, to a directory outside it, a loop and an alias directory
/// are all skipped (the run succeeds, each real file is ingested once).
/// `follow_symlinks = "inside_root"` follows links whose target is inside the source's
/// path, each real file once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_in_the_landing_directory_are_not_followed() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing");
    let outside = dir.join("outside");
    std::fs::create_dir_all(landing.join("sub")).unwrap();
    std::fs::create_dir_all(landing.join(".staging")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(landing.join("a.csv"), "id,src\n1,a\n").unwrap();
    std::fs::write(landing.join("sub/b.csv"), "id,src\n2,b\n").unwrap();
    std::fs::write(landing.join(".staging/c.csv"), "id,src\n3,staged\n").unwrap();
    std::fs::write(outside.join("shadow.csv"), "id,src\n666,secret\n").unwrap();
    std::fs::write(outside.join("o.csv"), "id,src\n667,outside\n").unwrap();
    symlink(outside.join("shadow.csv"), landing.join("shadow.csv")).unwrap();
    symlink(&outside, landing.join("root")).unwrap();
    symlink(".", landing.join("loop")).unwrap();
    symlink("sub", landing.join("alias")).unwrap();
    symlink("a.csv", landing.join("a_again.csv")).unwrap();
    symlink(".staging/c.csv", landing.join("c.csv")).unwrap();
    let pipeline = |extra: &str| {
        format!(
            r#"[[flow]]
name = "f"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, src STRING"
{extra}
[flow.sink]
type = "delta"
path = "table"
"#
        )
    };
    let run = |text: &str| {
        let p = dir.join("p.toml");
        std::fs::write(&p, text).unwrap();
        let _ = std::fs::remove_dir_all(dir.join("table"));
        let _ = std::fs::remove_dir_all(dir.join("_checkpoints"));
        let out = weir().args(["run", "--headless"]).arg(&p).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ids = || async {
        let rows = delta_rows(&dir.join("table")).await;
        column_strings(&sql(&rows, "SELECT id FROM t ORDER BY id").await, "id")
    };
    run(&pipeline(""));
    assert_eq!(ids().await, ["1", "2"]);
    run(&pipeline("follow_symlinks = \"never\""));
    assert_eq!(ids().await, ["1", "2"]);
    run(&pipeline("follow_symlinks = \"inside_root\""));
    assert_eq!(
        ids().await,
        ["1", "2", "3"],
        "the staged file once, nothing outside"
    );
    // A bad value names the key.
    let p = dir.join("p.toml");
    std::fs::write(&p, pipeline("follow_symlinks = \"always\"")).unwrap();
    let out = weir().arg("validate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("flow[0].source.follow_symlinks"));
}
