//! `weir drill`: crashes at every failpoint and at random moments on a copy; passes
//! on the demo pipeline, and catches the duplicates of a non-idempotent sink.

use std::path::Path;

use crate::support::*;

fn setup(dir: &Path, idempotent: bool) -> std::path::PathBuf {
    weir::cli::demo::land_flights(&dir.join("landing/flights"), &dir.join("_staging"), Some(5))
        .unwrap();
    let mut body = flights_pipeline(1);
    if !idempotent {
        body = body.replace(
            "path = \"lake/bronze/flights\"",
            "path = \"lake/bronze/flights\"\nidempotent = false",
        );
    }
    write_pipeline(dir, &body)
}

fn drill(pipeline: &Path, work: &Path, kills: &str) -> (std::process::Output, serde_json::Value) {
    let out = weir()
        .args([
            "drill",
            "--json",
            "--seed",
            "7",
            "--kills",
            kills,
            "--work-dir",
        ])
        .arg(work)
        .arg(pipeline)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out, report)
}

#[test]
fn the_demo_pipeline_passes_the_drill_and_is_not_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = setup(&tmp.path().join("user"), true);
    let work = tmp.path().join("work");
    let (out, report) = drill(&pipeline, &work, "2");
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["pass"], true);
    let flow = &report["flows"][0];
    assert_eq!(flow["flow"], "bronze_flights");
    assert_eq!(flow["duplicates"], 0);
    assert_eq!(flow["lost"], 0);
    let expected =
        weir::cli::demo::land_flights(&tmp.path().join("x"), &tmp.path().join("y"), Some(5))
            .unwrap()
            .rows_total;
    assert_eq!(flow["rows_out"], expected);
    assert_eq!(flow["reference_rows_out"], expected);
    assert_eq!(flow["rows_in"], expected);
    // Every failpoint was hit once, and the crashed batches were replayed.
    assert_eq!(report["failpoints_hit"], 4, "{report:#}");
    assert!(flow["batches_replayed"].as_u64().unwrap() >= 4, "{flow:#}");
    // One Delta version per batch, as in the crash-free run; the txn records the last batch.
    assert_eq!(flow["delta_version"], flow["reference_delta_version"]);
    assert_eq!(flow["txn_version"], flow["last_committed_batch"]);
    assert!(
        !flow["key"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "ingested_at"),
        "the wall-clock column is not part of the key"
    );
    // The user's pipeline directory got no checkpoint and no table.
    assert!(!tmp.path().join("user/_checkpoints").exists());
    assert!(!tmp.path().join("user/lake").exists());
    assert!(work.join("drill/pipeline.toml").is_file());
}

#[test]
fn a_non_idempotent_sink_fails_the_drill_with_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = setup(&tmp.path().join("user"), false);
    let work = tmp.path().join("work");
    let (out, report) = drill(&pipeline, &work, "0");
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(report["pass"], false);
    let flow = &report["flows"][0];
    // after_sink_commit, after_state and before_commit each crash after the Delta commit:
    // without the txn check the replay appends the batch again.
    assert!(flow["duplicates"].as_u64().unwrap() > 0, "{flow:#}");
    assert_eq!(flow["lost"], 0);
    assert!(
        flow["rows_out"].as_u64().unwrap() > flow["reference_rows_out"].as_u64().unwrap(),
        "{flow:#}"
    );
    // The human report says FAIL too.
    let text = weir()
        .args(["drill", "--seed", "7", "--kills", "0", "--work-dir"])
        .arg(tmp.path().join("work2"))
        .arg(&pipeline)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("RESULT: FAIL"), "{stdout}");
    assert!(stdout.contains("bronze_flights"), "{stdout}");
}
