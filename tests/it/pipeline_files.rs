//! One fixture per kind of invalid pipeline file; each error names the file,
//! the line and the key, and says what is allowed. The first line of each
//! fixture is `# expect: <text the message must contain>`.

use crate::support::*;

#[test]
fn every_invalid_fixture_is_refused_with_its_message() {
    let dir = fixture("invalid_pipelines");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: first line must be `# expect: ...`", path.display()));
        let err = weir::pipeline::load(&path)
            .err()
            .unwrap_or_else(|| panic!("{} was accepted", path.display()));
        let message = err.to_string();
        assert!(
            message.starts_with(&path.display().to_string()),
            "{}: message must start with the file: {message}",
            path.display()
        );
        assert!(
            message.contains(expect),
            "{}:\n  expected to contain: {expect}\n  got: {message}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} fixtures");
}

#[test]
fn validate_refuses_before_running_and_exits_2() {
    let out = weir()
        .arg("validate")
        .arg(fixture("invalid_pipelines/bad_trigger.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad_trigger.toml:4:11: flow[0].trigger: invalid trigger"),
        "{stderr}"
    );
}

#[test]
fn validate_plans_select_against_a_given_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(
        tmp.path(),
        r#"
[[flow]]
name = "a"
select = ["id", "no_such_column"]
[flow.source]
type = "files"
path = "in"
format = "json"
schema = "id BIGINT"
[flow.sink]
type = "memory"
"#,
    );
    let out = weir().arg("validate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no_such_column"), "{stderr}");

    let ok = weir()
        .arg("validate")
        .arg(weir_demo_pipeline(tmp.path()))
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        stdout.contains("flow bronze_flights: files (csv)"),
        "{stdout}"
    );
    assert!(stdout.contains("valid (1 flow(s))"), "{stdout}");
}

fn weir_demo_pipeline(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("demo.toml");
    std::fs::write(&p, crate::support::bronze_flights_only()).unwrap();
    p
}

#[test]
fn relative_paths_resolve_against_the_pipeline_file() {
    let p = weir::pipeline::parse(
        std::path::Path::new("/srv/pipes/p.toml"),
        weir::demo::data::FLIGHTS_PIPELINE,
    )
    .unwrap();
    let flow = &p.flows[0];
    let weir::spec::SourceSpec::Files(src) = &flow.source else {
        panic!("expected a files source")
    };
    assert_eq!(src.path, std::path::Path::new("/srv/pipes/landing/flights"));
    assert_eq!(
        flow.checkpoint,
        std::path::Path::new("/srv/pipes/_checkpoints/bronze_flights")
    );
    assert_eq!(src.max_files_per_trigger, 100);
    assert_eq!(src.max_bytes_per_trigger, Some(64 * 1024 * 1024));
    assert_eq!(src.csv.null_value.as_deref(), Some("NA"));
    assert_eq!(flow.trigger, weir::spec::Trigger::AvailableNow);
}

#[test]
fn validate_refuses_a_wrong_output_mode_and_says_which_would_work() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(
        tmp.path(),
        r#"
[[flow]]
name = "gold"
group_by = ["origin"]
aggregates = ["count(*) AS n"]
output_mode = "append"
[flow.source]
type = "files"
path = "in"
format = "json"
schema = "origin STRING, ts TIMESTAMP"
[flow.sink]
type = "memory"
"#,
    );
    let out = weir().arg("validate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("output_mode = \"append\""), "{stderr}");
    assert!(
        stderr.contains("output_mode = \"update\""),
        "says which mode would work: {stderr}"
    );

    let complete = write_pipeline(
        tmp.path(),
        r#"
[[flow]]
name = "copy"
output_mode = "complete"
[flow.source]
type = "files"
path = "in"
format = "json"
[flow.sink]
type = "memory"
"#,
    );
    let out = weir().arg("validate").arg(&complete).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("pipeline.toml:4:15: flow[0].output_mode: output_mode = \"complete\""),
        "{stderr}"
    );
    assert!(stderr.contains("needs an aggregation"), "{stderr}");
}
