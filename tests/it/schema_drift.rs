//! Schema drift through the real binary: Auto Loader's `addNewColumns` stop
//! (exit code 3, schema version recorded, batch re-read after the restart with
//! nothing lost), quarantine of unparseable records, and `weir schema`.

use std::path::Path;

use crate::support::*;

fn pipeline(dir: &Path, format: &str, extra: &str) -> std::path::PathBuf {
    write_pipeline(
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
{extra}
[flow.sink]
type = "delta"
path = "table"
merge_schema = true
"#
        ),
    )
}

fn land_step(case: &str, step: &str, landing: &Path) {
    for e in std::fs::read_dir(fixture(&format!("cases/{case}/{step}"))).unwrap() {
        let e = e.unwrap();
        land(
            landing,
            &e.file_name().to_string_lossy(),
            &std::fs::read(e.path()).unwrap(),
        );
        std::thread::sleep(std::time::Duration::from_millis(15));
    }
}

fn run(p: &Path) -> std::process::Output {
    weir().args(["run", "--headless"]).arg(p).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b08_new_csv_column_stops_with_exit_3_then_continues_with_nothing_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "");
    let landing = dir.join("landing");
    land_step("B08", "step1", &landing);
    assert!(run(&p).status.success());
    land_step("B08", "step2", &landing);
    assert!(run(&p).status.success());
    land_step("B08", "step3", &landing);
    let stopped = run(&p);
    assert_eq!(
        stopped.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert!(
        stderr.contains("schema changed: new column(s) salinity"),
        "{stderr}"
    );
    assert!(stderr.contains("h3.csv"), "names the file: {stderr}");
    // The restart re-reads the batch with the wider schema.
    let restarted = run(&p);
    assert!(
        restarted.status.success(),
        "{}",
        String::from_utf8_lossy(&restarted.stderr)
    );
    land_step("B08", "step4", &landing);
    assert!(run(&p).status.success());
    let rows = delta_rows(&dir.join("table")).await;
    let out = sql(&rows, "SELECT id, temp, depth, salinity FROM t ORDER BY id").await;
    let cols: Vec<Vec<String>> = ["id", "temp", "depth", "salinity"]
        .iter()
        .map(|c| column_strings(&out, c))
        .collect();
    let lines: Vec<String> = (0..cols[0].len())
        .map(|i| {
            cols.iter()
                .map(|c| c[i].as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            "1,20.5,3,null",
            "2,21.0,4,null",
            "3,19.5,5,null",
            "4,18.0,6,35.1",
            "5,17.5,null,null"
        ]
    );
    // The schema history says when and why.
    let out = weir()
        .args(["schema", "--json"])
        .arg(dir.join("_checkpoints/t"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("salinity") && text.contains("h3.csv"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescue_mode_keeps_the_schema_and_the_values() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "schema_evolution = \"rescue\"");
    let landing = dir.join("landing");
    for step in ["step1", "step2", "step3", "step4"] {
        land_step("B08", step, &landing);
        let out = run(&p);
        assert!(
            out.status.success(),
            "{step}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(num_rows(&rows), 5);
    assert!(rows[0].schema().column_with_name("salinity").is_none());
    let rescued = column_strings(&rows, "_rescued_data");
    assert!(
        rescued.iter().any(|r| r.contains("\"salinity\":\"35.1\"")),
        "{rescued:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparseable_records_go_to_bad_records_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        // Bare NaN (line 3) as a corrupt record too: Spark's allowNonNumericNumbers off.
        "schema = \"sensor STRING, val DOUBLE\"\nbad_records_path = \"quarantine\"\nallow_non_numeric_numbers = false",
    );
    land_step("B11", "step1", &dir.join("landing"));
    let out = run(&p);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = delta_rows(&dir.join("table")).await;
    let mut sensors = column_strings(&rows, "sensor");
    sensors.sort();
    assert_eq!(sensors, vec!["s1", "s2", "s4", "s5"]);
    let quarantined = std::fs::read_to_string(dir.join("quarantine/0.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = quarantined
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{quarantined}");
    assert!(
        lines
            .iter()
            .all(|l| l["file"].as_str().unwrap().ends_with("bad.json"))
    );
    let numbers: Vec<u64> = lines.iter().map(|l| l["line"].as_u64().unwrap()).collect();
    assert_eq!(numbers, vec![3, 5, 7]);
    assert!(lines[1]["raw"].as_str().unwrap().contains("garbage line"));
    // Nothing lost: table rows + quarantined records = input lines.
    assert_eq!(num_rows(&rows) + lines.len(), 7);
    let progress: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(progress[0]["weir"]["numRecordsQuarantined"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_mode_ignores_new_columns_and_counts_them_in_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "schema = \"id BIGINT, name STRING\"\nschema_evolution = \"none\"",
    );
    let landing = dir.join("landing");
    land(&landing, "a.json", b"{\"id\":1,\"name\":\"a\"}\n");
    land(
        &landing,
        "b.json",
        b"{\"id\":2,\"name\":\"b\",\"tier\":\"gold\",\"geo\":{\"lat\":1.5}}\n",
    );
    let out = run(&p);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ignored: Vec<String> = records
        .iter()
        .flat_map(|r| {
            r["weir"]["newColumnsIgnored"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ignored, vec!["tier", "geo"]);
    let count: u64 = records
        .iter()
        .map(|r| r["weir"]["numNewColumnsIgnored"].as_u64().unwrap())
        .sum();
    assert_eq!(count, 2);
    // The table keeps its schema; both rows are there.
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(num_rows(&rows), 2);
    assert!(rows[0].schema().field_with_name("tier").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inference_samples_at_most_the_byte_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Two files: the first alone is within the bound, so `extra` (only in the second) is
    // not in the inferred schema; it is a new column met later (add_new_columns: exit 3).
    let p = pipeline(dir, "json", "schema_inference_max_bytes = 40");
    let landing = dir.join("landing");
    land(&landing, "a.json", b"{\"id\":1,\"name\":\"a\"}\n");
    std::thread::sleep(std::time::Duration::from_millis(20));
    land(
        &landing,
        "b.json",
        b"{\"id\":2,\"name\":\"b\",\"extra\":true}\n",
    );
    let out = run(&p);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let history = weir()
        .args(["schema", "--json"])
        .arg(dir.join("_checkpoints/t"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&history.stdout);
    assert!(text.contains("inferred from 1 file(s)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparseable_records_go_to_a_delta_quarantine_table_once_even_after_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(
        dir,
        "json",
        "schema = \"sensor STRING, val DOUBLE\"\nbad_records_table = \"lake/quarantine\"\nallow_non_numeric_numbers = false",
    );
    land_step("B11", "step1", &dir.join("landing"));
    // Crash after the sink committed: the re-run batch must not quarantine twice.
    let crashed = weir()
        .args(["run", "--headless"])
        .arg(&p)
        .env("WEIR_FAILPOINT", "after_sink_commit:0")
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    let out = run(&p);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let quarantined = delta_rows(&dir.join("lake/quarantine")).await;
    assert_eq!(num_rows(&quarantined), 3, "each record once");
    let mut lines = column_strings(&quarantined, "line");
    lines.sort();
    assert_eq!(lines, vec!["3", "5", "7"]);
    assert!(
        column_strings(&quarantined, "file")
            .iter()
            .all(|f| f.ends_with("bad.json"))
    );
    assert!(
        column_strings(&quarantined, "raw")
            .iter()
            .any(|r| r.contains("garbage line"))
    );
    assert!(
        column_strings(&quarantined, "error")
            .iter()
            .all(|e| !e.is_empty() && e != "null")
    );
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(num_rows(&rows) + num_rows(&quarantined), 7, "nothing lost");
    // The quarantine table has its own app id (issue #18): its batch 0 never stands
    // for the sink's batch 0.
    let metadata: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("_checkpoints/t/metadata")).unwrap(),
    )
    .unwrap();
    let query = metadata["id"].as_str().unwrap();
    let quarantine = dir.join("lake/quarantine");
    let side_app_id = format!("{query}:bad_records_table");
    assert_eq!(
        weir::delta::txn_version(&quarantine, &side_app_id)
            .await
            .unwrap(),
        Some(0)
    );
    assert_eq!(
        weir::delta::txn_version(&quarantine, query).await.unwrap(),
        None
    );
    assert_eq!(
        weir::delta::txn_version(&dir.join("table"), query)
            .await
            .unwrap(),
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b08_with_the_default_sink_continues_after_the_restart() {
    // No `merge_schema` on the sink: with add_new_columns it defaults to true, so the
    // restart Auto Loader asks for (exit code 3) goes on instead of failing at the table.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "csv", "");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("merge_schema = true\n", "");
    std::fs::write(&p, text).unwrap();
    let landing = dir.join("landing");
    for step in ["step1", "step2", "step3", "step4"] {
        land_step("B08", step, &landing);
        let out = run(&p);
        if out.status.code() == Some(3) {
            let again = run(&p);
            assert!(
                again.status.success(),
                "{}",
                String::from_utf8_lossy(&again.stderr)
            );
        } else {
            assert!(
                out.status.success(),
                "{step}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let rows = delta_rows(&dir.join("table")).await;
    assert_eq!(num_rows(&rows), 5, "every row of the four steps, once");
    let mut salinity = column_strings(&rows, "salinity");
    salinity.sort();
    assert_eq!(salinity, vec!["35.1", "null", "null", "null", "null"]);
}
