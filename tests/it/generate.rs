//! `weir generate` as a user runs it: reproducible bytes, and every generated
//! record accounted for after `weir run` (rows in Delta + quarantined = written).

use std::path::Path;

use crate::support::*;

fn generate(dir: &Path, format: &str, seed: &str) -> Vec<serde_json::Value> {
    let out = weir()
        .args([
            "generate", "--once", "--files", "6", "--rows", "400", "--keys", "50",
        ])
        .args([
            "--duplicates",
            "0.05",
            "--malformed",
            "0.03",
            "--late-fraction",
            "0.1",
        ])
        .args(["--skew", "2s", "--format", format, "--seed", seed])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn same_seed_gives_the_same_files_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    for format in ["json", "csv", "parquet"] {
        let a = tmp.path().join(format!("{format}-a"));
        let b = tmp.path().join(format!("{format}-b"));
        let c = tmp.path().join(format!("{format}-c"));
        let malformed_ok = format != "parquet";
        let run = |dir: &Path, seed: &str| {
            let mut cmd = weir();
            cmd.args(["generate", "--once", "--files", "3", "--rows", "200"])
                .args([
                    "--late-fraction",
                    "0.2",
                    "--duplicates",
                    "0.1",
                    "--drift-at",
                    "2",
                ])
                .args(["--format", format, "--seed", seed])
                .arg(dir);
            if malformed_ok {
                cmd.args(["--malformed", "0.05"]);
            }
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&a, "9");
        run(&b, "9");
        run(&c, "10");
        let (fa, fb, fc) = (files_of(&a), files_of(&b), files_of(&c));
        assert_eq!(fa.len(), 3, "{format}: no temp file left behind");
        assert!(fa.iter().all(|(n, _)| !n.starts_with('.')));
        assert_eq!(fa, fb, "{format}: same seed, same bytes");
        assert_ne!(fa, fc, "{format}: another seed, other bytes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_records_are_all_accounted_for_after_a_run() {
    for format in ["json", "csv"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let stats = generate(&dir.join("landing/events"), format, "21");
        assert_eq!(stats.len(), 6);
        let sum = |k: &str| stats.iter().map(|s| s[k].as_u64().unwrap()).sum::<u64>();
        let (rows, malformed, duplicates) = (sum("rows"), sum("malformed"), sum("duplicates"));
        assert_eq!(rows, 2400);
        assert!(
            malformed > 20 && duplicates > 50,
            "{malformed} {duplicates}"
        );
        let csv = if format == "csv" {
            "\n[flow.source.csv]\nheader = true\n"
        } else {
            ""
        };
        let pipeline = write_pipeline(
            dir,
            &format!(
                r#"
[[flow]]
name = "bronze_events"
trigger = "available_now"

[flow.source]
type = "files"
path = "landing/events"
format = "{format}"
schema = "event_id BIGINT, key STRING, event_time TIMESTAMP, amount DOUBLE"
bad_records_path = "bad_records"
max_files_per_trigger = 2
{csv}
[flow.sink]
type = "delta"
path = "lake/events"
"#
            ),
        );
        let out = weir()
            .args(["run", "--headless"])
            .arg(&pipeline)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table = delta_rows(&dir.join("lake/events")).await;
        // JSON: a damaged line is a corrupt record (quarantined). CSV: the damage is
        // invalid UTF-8 in the key, which is rescued while the row is kept.
        let (corrupt, rescued_keys) = if format == "json" {
            (malformed, 0)
        } else {
            (0, malformed)
        };
        assert_eq!(
            num_rows(&table) as u64,
            rows - corrupt,
            "{format}: rows in Delta"
        );
        let quarantined: usize = std::fs::read_dir(dir.join("bad_records"))
            .map(|dir| {
                dir.map(|e| {
                    std::fs::read_to_string(e.unwrap().path())
                        .unwrap()
                        .lines()
                        .count()
                })
                .sum()
            })
            .unwrap_or(0);
        assert_eq!(quarantined as u64, corrupt, "{format}: quarantined");
        // Duplicates repeat a record exactly: distinct event ids = fresh, well-formed records.
        let distinct = sql(&table, "SELECT count(DISTINCT event_id) FROM t").await;
        assert_eq!(
            scalar(&distinct) as u64,
            rows - corrupt - duplicates,
            "{format}"
        );
        // Only the damaged keys were rescued: the schema fits every other value.
        let rescued = sql(
            &table,
            "SELECT count(*) FROM t WHERE _rescued_data IS NOT NULL",
        )
        .await;
        assert_eq!(scalar(&rescued) as u64, rescued_keys, "{format}");
    }
}

/// Schema drift at the requested file, end to end: the flow stops with exit code 3 at
/// the batch holding it (the schema is widened), and the restart ingests `region`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_at_a_file_widens_the_schema_at_that_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = weir()
        .args([
            "generate",
            "--once",
            "--files",
            "4",
            "--rows",
            "50",
            "--drift-at",
            "2",
        ])
        .args(["--drift", "add-column", "--seed", "4"])
        .arg(dir.join("landing/events"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pipeline = write_pipeline(
        dir,
        r#"
[[flow]]
name = "bronze_events"
trigger = "available_now"

[flow.source]
type = "files"
path = "landing/events"
format = "json"
schema_inference_max_files = 1
max_files_per_trigger = 1

[flow.sink]
type = "delta"
path = "lake/events"
merge_schema = true
"#,
    );
    let first = weir()
        .args(["run", "--headless"])
        .arg(&pipeline)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("region") && stderr.contains("events-000002.json"),
        "{stderr}"
    );
    let second = weir()
        .args(["run", "--headless"])
        .arg(&pipeline)
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let table = delta_rows(&dir.join("lake/events")).await;
    assert_eq!(num_rows(&table), 200);
    let with_region = sql(&table, "SELECT count(*) FROM t WHERE region IS NOT NULL").await;
    assert_eq!(scalar(&with_region), 100, "files 2 and 3 carry region");
}
