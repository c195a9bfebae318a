//! Object storage (docs/object-storage.md): URLs refused where a key takes a local path
//! (nothing created beside the pipeline), and Delta tables on a real S3 server
//! (SeaweedFS on loopback, started here; `scripts/object-store-servers.sh` builds it):
//! every landed row once in the table, read back by a second reader, a re-run idempotent,
//! a missing bucket and refused credentials named.

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use weir::storage::test_server::{AzuriteServer, S3Server};

use crate::support::*;

/// The S3 server, or `None` (the test prints that it was skipped) when its binary is not
/// built and `WEIR_OBJECT_STORE_TESTS` is not `1`; with it, a missing server fails.
fn server() -> Option<&'static S3Server> {
    let wanted = std::env::var("WEIR_OBJECT_STORE_TESTS").is_ok_and(|v| v == "1");
    if !weir::storage::test_server::weed_binary().is_file() && !wanted {
        eprintln!(
            "skipped: the object-store tests need scripts/object-store-servers.sh (WEIR_OBJECT_STORE_TESTS=1 makes this a failure)"
        );
        return None;
    }
    match S3Server::shared() {
        Ok(s) => Some(s),
        Err(e) => panic!("cannot start the test S3 server: {e}"),
    }
}

/// Azurite, under the same rule as [`server`].
fn azurite() -> Option<AzuriteServer> {
    let wanted = std::env::var("WEIR_OBJECT_STORE_TESTS").is_ok_and(|v| v == "1");
    if weir::storage::test_server::azurite_binary().is_none() && !wanted {
        eprintln!(
            "skipped: the Azure tests need Azurite (npm install -g azurite; WEIR_OBJECT_STORE_TESTS=1 makes this a failure)"
        );
        return None;
    }
    match AzuriteServer::start() {
        Ok(s) => Some(s),
        Err(e) => panic!("cannot start Azurite: {e}"),
    }
}

/// `weir ARGS` with `env` set (a test server's `options()`, then anything added: a later
/// pair wins).
fn run_env(env: &[(&str, String)], args: &[&str]) -> Output {
    let mut cmd = weir();
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(args).output().expect("run weir")
}

fn run_with(server: &S3Server, args: &[&str], secret: Option<&str>) -> Output {
    let mut env = server.options();
    if let Some(s) = secret {
        env.push(("AWS_SECRET_ACCESS_KEY", s.to_string()));
    }
    run_env(&env, args)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn pipeline(dir: &Path, sink: &str) -> std::path::PathBuf {
    write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "bronze"
trigger = "available_now"

[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, note STRING"

[flow.sink]
type = "delta"
path = "{sink}"
"#
        ),
    )
}

/// [`pipeline`] with bronze at `url`, plus a silver flow streaming it into a local table.
fn two_hops(dir: &Path, url: &str) -> std::path::PathBuf {
    let p = pipeline(dir, url);
    let mut toml = std::fs::read_to_string(&p).unwrap();
    toml.push_str(&format!(
        "\n[[flow]]\nname = \"silver\"\ntrigger = \"available_now\"\n\n[flow.source]\ntype = \"delta\"\npath = \"{url}\"\n\n[flow.sink]\ntype = \"delta\"\npath = \"silver\"\n"
    ));
    std::fs::write(&p, toml).unwrap();
    p
}

fn land_ids(dir: &Path, file: &str, ids: std::ops::Range<i64>) {
    let mut body = String::from("id,note\n");
    for i in ids {
        body.push_str(&format!("{i},n{i}\n"));
    }
    land(&dir.join("landing"), file, body.as_bytes());
}

/// The ids in the table at `url`, read by deltalake (with DataFusion) in this process.
async fn ids_in(server: &S3Server, url: &str) -> Vec<i64> {
    weir::storage::register_delta_stores();
    let options: HashMap<String, String> = server
        .options()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let table = deltalake::DeltaTableBuilder::from_url(url::Url::parse(url).unwrap())
        .unwrap()
        .with_storage_options(options)
        .load()
        .await
        .expect("open the table on the S3 server");
    let ctx = datafusion::prelude::SessionContext::new();
    table.update_datafusion_session(&ctx.state()).unwrap();
    let provider = table.table_provider().await.unwrap();
    ctx.register_table("t", provider).unwrap();
    let batches = ctx
        .sql("SELECT id FROM t ORDER BY id")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for b in &batches {
        let col = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        ids.extend(col.iter().map(|v| v.unwrap()));
    }
    ids
}

#[test]
fn urls_in_keys_that_take_local_paths_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    for (toml_key, value, named) in [
        (
            "checkpoint",
            "s3://bucket/_checkpoints/bronze",
            "checkpoint",
        ),
        ("schema_location", "s3://bucket/schemas/", "schema_location"),
    ] {
        let toml = match toml_key {
            "checkpoint" => format!(
                "[[flow]]\nname = \"b\"\ncheckpoint = \"{value}\"\n[flow.source]\ntype = \"files\"\npath = \"landing\"\nformat = \"csv\"\n[flow.sink]\ntype = \"delta\"\npath = \"t\"\n"
            ),
            _ => format!(
                "[[flow]]\nname = \"b\"\n[flow.source]\ntype = \"files\"\npath = \"s3://bucket/landing/\"\nformat = \"csv\"\nschema_location = \"{value}\"\n[flow.sink]\ntype = \"delta\"\npath = \"t\"\n"
            ),
        };
        let p = write_pipeline(dir.path(), &toml);
        for cmd in [&["validate"][..], &["run", "--headless"][..]] {
            let out = weir().args(cmd).arg(&p).output().unwrap();
            let said = text(&out);
            assert!(!out.status.success(), "{cmd:?} {value}: {said}");
            assert!(said.contains(named) && said.contains(value), "{said}");
            assert!(
                said.contains("pipeline.toml:"),
                "names the file and line: {said}"
            );
        }
        let made: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert!(!made.iter().any(|n| n.starts_with("s3")), "{made:?}");
    }
    // Another scheme, and credentials in the URL (never echoed).
    let p = pipeline(dir.path(), "hdfs://nn/lake/t");
    let said = text(&weir().args(["validate"]).arg(&p).output().unwrap());
    assert!(said.contains("unsupported URL scheme \"hdfs\""), "{said}");
    let p = pipeline(
        dir.path(),
        "s3://AKIAIOSFODNN7:wJalrXUtnFEMIK7MDENG@bucket/t",
    );
    let out = weir().args(["validate"]).arg(&p).output().unwrap();
    let said = text(&out);
    assert!(!out.status.success());
    assert!(said.contains("carries credentials"), "{said}");
    assert!(
        !said.contains("wJalrXUtnFEMIK7MDENG") && !said.contains("AKIAIOSFODNN7"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_sink_on_s3_holds_every_landed_row_once() {
    let Some(server) = server() else { return };
    server.create_bucket("lake").expect("create the bucket");
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://lake/bronze/ids";
    let p = pipeline(dir.path(), url);
    land_ids(dir.path(), "a.csv", 0..100);
    land_ids(dir.path(), "b.csv", 100..250);
    let args = ["run", "--headless", "--trigger", "available-now"];
    let p_arg = p.to_str().unwrap();
    let out = run_with(server, &[&args[..], &[p_arg]].concat(), None);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(ids_in(server, url).await, (0..250).collect::<Vec<_>>());
    // Nothing new: no batch, no commit; then one more file, once.
    let out = run_with(server, &[&args[..], &[p_arg]].concat(), None);
    assert!(out.status.success(), "{}", text(&out));
    land_ids(dir.path(), "c.csv", 250..300);
    let out = run_with(server, &[&args[..], &[p_arg]].concat(), None);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(ids_in(server, url).await, (0..300).collect::<Vec<_>>());
    // Nothing was created locally for the URL, and `weir table history` reads it there.
    assert!(!dir.path().join("s3:").exists());
    let out = run_with(server, &["table", "history", p_arg, url], None);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("STREAMING UPDATE") || said.contains("WRITE"),
        "{said}"
    );
    let out = run_with(
        server,
        &["table", "history", p_arg, "--flow", "bronze"],
        None,
    );
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("STREAMING UPDATE") || said.contains("WRITE"),
        "{said}"
    );
}

#[test]
fn a_missing_bucket_and_refused_credentials_are_named_and_fail_the_run() {
    let Some(server) = server() else { return };
    server.create_bucket("lake").expect("create the bucket");
    let dir = tempfile::tempdir().unwrap();
    land_ids(dir.path(), "a.csv", 0..10);
    let p = pipeline(dir.path(), "s3://no-such-bucket/t");
    let out = run_with(
        server,
        &[
            "run",
            "--headless",
            "--trigger",
            "available-now",
            p.to_str().unwrap(),
        ],
        None,
    );
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("s3://no-such-bucket"), "{said}");

    let dir = tempfile::tempdir().unwrap();
    land_ids(dir.path(), "a.csv", 0..10);
    let p = pipeline(dir.path(), "s3://lake/refused");
    let wrong = "not-the-secret-4711";
    let out = run_with(
        server,
        &[
            "run",
            "--headless",
            "--trigger",
            "available-now",
            p.to_str().unwrap(),
        ],
        Some(wrong),
    );
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("s3://lake/refused"), "{said}");
    assert!(!said.contains(wrong), "the secret is never printed: {said}");
}

/// The batch protocol's crash drill with the table on the S3 server: the process aborts
/// at each failpoint of batch 1 (files landing while it is down), then runs to the end;
/// the table must equal a crash-free run's: every id once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_with_the_table_on_s3_recovers_exactly_once() {
    let Some(server) = server() else { return };
    server.create_bucket("crash").expect("create the bucket");
    let run = |p: &Path, failpoint: Option<&str>| {
        let mut env = server.options();
        if let Some(fp) = failpoint {
            env.push(("WEIR_FAILPOINT", fp.to_string()));
        }
        let args = ["run", "--headless", "--trigger", "available-now"];
        run_env(&env, &[&args[..], &[p.to_str().unwrap()]].concat())
    };
    let setup = |dir: &Path, url: &str| {
        let p = pipeline(dir, url);
        let text = std::fs::read_to_string(&p).unwrap().replace(
            "schema = \"id BIGINT, note STRING\"",
            "schema = \"id BIGINT, note STRING\"\nmax_files_per_trigger = 1",
        );
        std::fs::write(&p, text).unwrap();
        for f in 0..3 {
            land_ids(dir, &format!("f{f}.csv"), f * 40..(f + 1) * 40);
        }
        p
    };
    // The crash-free run.
    let clean = tempfile::tempdir().unwrap();
    let clean_url = "s3://crash/clean";
    let p = setup(clean.path(), clean_url);
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));
    land_ids(clean.path(), "late.csv", 120..160);
    let out = run(&p, None);
    assert!(out.status.success(), "{}", text(&out));
    let golden = ids_in(server, clean_url).await;
    assert_eq!(golden, (0..160).collect::<Vec<_>>());

    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("s3://crash/{failpoint}");
        let p = setup(dir.path(), &url);
        let crashed = run(&p, Some(&format!("{failpoint}:1")));
        let said = text(&crashed);
        assert!(!crashed.status.success(), "{failpoint}: {said}");
        assert!(
            said.contains(&format!("failpoint {failpoint} hit in batch 1")),
            "{said}"
        );
        land_ids(dir.path(), "late.csv", 120..160);
        let out = run(&p, None);
        assert!(out.status.success(), "{failpoint}: {}", text(&out));
        assert_eq!(ids_in(server, &url).await, golden, "{failpoint}");
    }
}

/// Two hops over the S3 server: bronze writes `s3://lake/bronze/hop`, silver streams it
/// as a Delta source into a local table; each run's new bronze rows reach silver once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_source_on_s3_streams_each_commit_once() {
    let Some(server) = server() else { return };
    server.create_bucket("lake").expect("create the bucket");
    let dir = tempfile::tempdir().unwrap();
    let p = two_hops(dir.path(), "s3://lake/bronze/hop");
    let p_arg = p.to_str().unwrap();
    let args = ["run", "--headless", "--trigger", "available-now", p_arg];
    land_ids(dir.path(), "a.csv", 0..70);
    let out = run_with(server, &args, None);
    assert!(out.status.success(), "{}", text(&out));
    land_ids(dir.path(), "b.csv", 70..90);
    let out = run_with(server, &args, None);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("DeltaSource[s3://lake/bronze/hop]"), "{said}");
    let silver = table_lines(&dir.path().join("silver"), &["id"], "id", ",").await;
    let want: Vec<String> = (0..90).map(|i| i.to_string()).collect();
    assert_eq!(silver, want);
}

/// Both hops on Azurite (Azure Blob Storage): bronze writes `az://lake/bronze/ids`,
/// silver streams it into a local table; every landed row reaches silver once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_tables_on_azure_hold_every_landed_row_once() {
    let Some(server) = azurite() else { return };
    server
        .create_container("lake")
        .expect("create the container");
    let dir = tempfile::tempdir().unwrap();
    let p = two_hops(dir.path(), "az://lake/bronze/ids");
    let p_arg = p.to_str().unwrap();
    let run = || {
        run_env(
            &server.options(),
            &["run", "--headless", "--trigger", "available-now", p_arg],
        )
    };
    land_ids(dir.path(), "a.csv", 0..60);
    let out = run();
    assert!(out.status.success(), "{}", text(&out));
    land_ids(dir.path(), "b.csv", 60..75);
    let out = run();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("DeltaSink[az://lake/bronze/ids]"), "{said}");
    let silver = table_lines(&dir.path().join("silver"), &["id"], "id", ",").await;
    let want: Vec<String> = (0..75).map(|i| i.to_string()).collect();
    assert_eq!(silver, want);
}

/// `storage_options` in the pipeline file reach the store (no `AWS_*` variables set), a
/// misspelt key is refused by `weir validate`, and no value is ever printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_options_in_the_pipeline_reach_the_store_and_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let with_options = |path: &str, options: &str| {
        let p = pipeline(dir.path(), path);
        let text = std::fs::read_to_string(&p).unwrap().replace(
            &format!("path = \"{path}\"\n"),
            &format!("path = \"{path}\"\nstorage_options = {{ {options} }}\n"),
        );
        std::fs::write(&p, text).unwrap();
        p
    };
    let secret = "s3cr3t-never-shown";
    let p = with_options(
        "s3://lake/t",
        &format!(r#"aws_endpiont_url = "http://127.0.0.1:1", aws_secret_access_key = "{secret}""#),
    );
    let said = text(&weir().arg("validate").arg(&p).output().unwrap());
    assert!(
        said.contains("aws_endpiont_url") && said.contains("pipeline.toml:"),
        "{said}"
    );
    assert!(!said.contains(secret), "{said}");

    let Some(server) = server() else { return };
    server.create_bucket("lake").expect("create the bucket");
    let options: Vec<String> = server
        .options()
        .into_iter()
        .map(|(k, v)| format!("{} = \"{v}\"", k.to_ascii_lowercase()))
        .collect();
    let url = "s3://lake/options/t";
    let p = with_options(url, &options.join(", "));
    land_ids(dir.path(), "a.csv", 0..30);
    let out = weir()
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        !said.contains(weir::storage::test_server::SECRET_KEY),
        "{said}"
    );
    assert_eq!(ids_in(server, url).await, (0..30).collect::<Vec<_>>());
    let plan =
        std::fs::read_to_string(dir.path().join("_checkpoints/bronze/_weir/plan.json")).unwrap();
    assert!(
        !plan.contains(weir::storage::test_server::SECRET_KEY),
        "{plan}"
    );
}

/// Uploads every file below `dir` to `url` on the server (as a Spark query on S3 writes its
/// checkpoint there).
async fn upload(server: &S3Server, dir: &Path, url: &str) {
    let options: weir::storage::StorageOptions = server
        .options()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let location = weir::storage::Location::parse(url, Path::new("")).unwrap();
    let store = weir::storage::Store::for_location(&location, &options).unwrap();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .to_string();
            let bytes = bytes::Bytes::from(std::fs::read(&path).unwrap());
            store.put(&rel, bytes).await.unwrap();
        }
    }
}

/// `weir inspect` of a Spark query's checkpoint and of a weir flow's checkpoint on the S3
/// server, by URL, says what the same checkpoint says on local disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_a_checkpoint_on_s3_as_on_local_disk() {
    let Some(server) = server() else { return };
    server.create_bucket("attach").expect("create the bucket");
    let cache = tempfile::tempdir().unwrap();
    let inspect = |target: &str| {
        let mut env = server.options();
        env.push(("XDG_CACHE_HOME", cache.path().display().to_string()));
        let out = run_env(&env, &["inspect", "--json", target]);
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let mut json: serde_json::Value = serde_json::from_str(&said)
            .unwrap_or_else(|e| panic!("{e}: {said}{}", String::from_utf8_lossy(&out.stderr)));
        // The paths differ (the local copy); everything read from the files is the same.
        strip_paths(&mut json);
        json
    };
    // A Spark 4.3 query's checkpoint.
    let spark = fixture("spark/checkpoint");
    upload(server, &spark, "s3://attach/spark/checkpoint").await;
    let local = inspect(spark.to_str().unwrap());
    let remote = inspect("s3://attach/spark/checkpoint");
    assert_eq!(remote, local);
    // A weir flow's checkpoint, after two batches.
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(dir.path(), "table");
    land_ids(dir.path(), "a.csv", 0..10);
    assert!(
        weir()
            .args(["run", "--headless"])
            .arg(&p)
            .status()
            .unwrap()
            .success()
    );
    land_ids(dir.path(), "b.csv", 10..20);
    assert!(
        weir()
            .args(["run", "--headless"])
            .arg(&p)
            .status()
            .unwrap()
            .success()
    );
    let cp = dir.path().join("_checkpoints/bronze");
    upload(server, &cp, "s3://attach/weir/bronze").await;
    let local = inspect(cp.to_str().unwrap());
    let remote = inspect("s3://attach/weir/bronze");
    assert_eq!(remote["batches"], local["batches"], "{remote}");
    assert!(
        remote["batches"].as_array().is_some_and(|b| b.len() == 2),
        "{remote}"
    );
}

/// Removes every string that names a local path (they differ between a checkpoint and
/// its copy).
fn strip_paths(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s)
            if s.starts_with('/') || s.contains("/tmp") || s.contains(".cache") =>
        {
            *s = String::new();
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_paths),
        serde_json::Value::Object(o) => o.values_mut().for_each(strip_paths),
        _ => {}
    }
}

/// An endpoint nobody answers on fails the run naming the URL once object_store's retries
/// (bounded here by `storage_options`) are spent; nothing is created locally.
#[test]
fn an_unreachable_endpoint_fails_the_run_naming_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let p = pipeline(dir.path(), "s3://lake/unreachable");
    let toml = std::fs::read_to_string(&p).unwrap().replace(
        "path = \"s3://lake/unreachable\"\n",
        &format!(
            "path = \"s3://lake/unreachable\"\nstorage_options = {{ aws_endpoint_url = \"http://127.0.0.1:{port}\", aws_allow_http = \"true\", aws_access_key_id = \"k\", aws_secret_access_key = \"s\", aws_region = \"us-east-1\", max_retries = \"1\", retry_timeout = \"2s\" }}\n"
        ),
    );
    std::fs::write(&p, toml).unwrap();
    land_ids(dir.path(), "a.csv", 0..5);
    let out = weir()
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .output()
        .unwrap();
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("s3://lake/unreachable"), "{said}");
    assert!(!dir.path().join("s3:").exists());
}

/// The S3 server down when a run starts and back two seconds later: object_store's
/// retries (exponential backoff) ride it out, and the table holds every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_at_the_start_of_a_run_is_waited_for() {
    let wanted = std::env::var("WEIR_OBJECT_STORE_TESTS").is_ok_and(|v| v == "1");
    if !weir::storage::test_server::weed_binary().is_file() && !wanted {
        eprintln!("skipped: the object-store tests need scripts/object-store-servers.sh");
        return;
    }
    // A server of its own: the shared one must stay up for the other tests.
    let mut server = S3Server::start().expect("start an S3 server");
    server.create_bucket("down").expect("create the bucket");
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://down/t";
    let p = pipeline(dir.path(), url);
    land_ids(dir.path(), "a.csv", 0..40);
    server.stop();
    let mut cmd = weir();
    for (k, v) in server.options() {
        cmd.env(k, v);
    }
    let child = cmd
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    server.restart().expect("restart the S3 server");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(ids_in(&server, url).await, (0..40).collect::<Vec<_>>());
}

// ---- The files source on object storage (docs/object-storage.md#files-source) ----

/// The server's options as `storage_options` (keys lower-cased).
fn storage_options(server: &S3Server) -> weir::storage::StorageOptions {
    server
        .options()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect()
}

/// Writes `bytes` at the object `url` (`s3://bucket/key`) on the server, replacing any.
async fn put(server: &S3Server, url: &str, bytes: &[u8]) {
    let rest = url.strip_prefix("s3://").expect("an s3:// URL");
    let (bucket, key) = rest.split_once('/').expect("a key");
    let location = weir::storage::Location::parse(&format!("s3://{bucket}"), Path::new(""))
        .expect("a location");
    let store =
        weir::storage::Store::for_location(&location, &storage_options(server)).expect("the store");
    store
        .put(key, bytes::Bytes::copy_from_slice(bytes))
        .await
        .expect("put the object");
}

/// Lands the same file at `rel` in the local directory `local` and below `url` on the
/// server.
async fn land_both(server: &S3Server, local: &Path, url: &str, rel: &str, body: &str) {
    let path = local.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, body).unwrap();
    put(server, &format!("{url}{rel}"), body.as_bytes()).await;
}

/// A bronze flow reading JSON files at `source` (a local directory or a URL) into the local
/// table `table`, with `_metadata.file_path` kept as `source_file`.
fn json_pipeline(dir: &Path, source: &str, extra: &str) -> std::path::PathBuf {
    write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "bronze"
trigger = "available_now"
select = ["*", "_metadata.file_path AS source_file"]

[flow.source]
type = "files"
path = "{source}"
format = "json"
{extra}

[flow.sink]
type = "delta"
path = "table"
"#
        ),
    )
}

fn run_files(server: &S3Server, p: &Path, failpoint: Option<&str>) -> Output {
    let mut env = server.options();
    if let Some(fp) = failpoint {
        env.push(("WEIR_FAILPOINT", fp.to_string()));
    }
    run_env(
        &env,
        &[
            "run",
            "--headless",
            "--trigger",
            "available-now",
            p.to_str().unwrap(),
        ],
    )
}

/// JSON objects landed below `s3://files/same/landing/` (in `date=` partitions, with
/// hidden and in-progress objects and a file the glob leaves out) are ingested as the same
/// files from a local directory: row by row the same table (schema inferred from the first
/// file, a value that does not fit rescued, the partition column from the key), with
/// `_metadata.file_path` the object's URL; a second run after more objects land takes only
/// the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_objects_on_s3_are_ingested_as_the_same_files_from_local_disk() {
    let Some(server) = server() else { return };
    server.create_bucket("files").expect("create the bucket");
    let url = "s3://files/same/landing/";
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let landing = local.path().join("landing");
    let extra =
        "schema_inference_max_files = 1\nmax_files_per_trigger = 2\npath_glob_filter = \"*.json\"";
    let p_local = json_pipeline(local.path(), landing.to_str().unwrap(), extra);
    let p_remote = json_pipeline(remote.path(), url, extra);
    // Written in key order: the oldest file is the first key on both (the sample).
    let files = [
        (
            "date=2024-01-01/a.json",
            "{\"id\":1,\"name\":\"a\",\"score\":1.5}\n{\"id\":2,\"name\":\"b\",\"score\":2}\n",
        ),
        (
            "date=2024-01-01/b.json",
            "{\"id\":3,\"name\":\"c\",\"score\":\"high\"}\n{\"id\":4,\"name\":null,\"score\":4.25}\n",
        ),
        ("date=2024-01-02/.c.json.inprogress", "{\"id\":100}\n"),
        (
            "date=2024-01-02/c.json",
            "{\"id\":5,\"name\":\"e\",\"score\":5}\n",
        ),
        ("date=2024-01-02/d.json._COPYING_", "{\"id\":101}\n"),
        ("date=2024-01-02/notes.txt", "{\"id\":102}\n"),
        ("_temporary/0/e.json", "{\"id\":103}\n"),
    ];
    for (rel, body) in files {
        land_both(server, &landing, url, rel, body).await;
    }
    let cols = ["id", "name", "score", "date", "_rescued_data"];
    let check = |round: &str| {
        let (l, r) = (
            run_files(server, &p_local, None),
            run_files(server, &p_remote, None),
        );
        assert!(l.status.success(), "{round}, local: {}", text(&l));
        assert!(r.status.success(), "{round}, remote: {}", text(&r));
        r
    };
    let out = check("first run");
    let said = text(&out);
    assert!(
        said.contains("FileStreamSource[s3://files/same/landing]"),
        "{said}"
    );
    assert!(!remote.path().join("s3:").exists());
    let local_path = format!("{}/", landing.display());
    let rows = |dir: std::path::PathBuf| async move {
        table_lines(&dir.join("table"), &cols, "id", "|").await
    };
    let local_rows = rows(local.path().to_path_buf()).await;
    let remote_rows: Vec<String> = rows(remote.path().to_path_buf())
        .await
        .into_iter()
        .map(|r| r.replace(url, &local_path))
        .collect();
    assert_eq!(local_rows.len(), 5, "{local_rows:?}");
    assert_eq!(remote_rows, local_rows);
    assert!(
        remote_rows[2].contains("\"score\":\"high\""),
        "rescued: {remote_rows:?}"
    );
    assert!(remote_rows[0].contains("2024-01-01"), "{remote_rows:?}");
    // `_metadata.file_path` is the object's URL.
    let sources = table_lines(&remote.path().join("table"), &["source_file"], "id", "|").await;
    assert_eq!(sources[0], format!("{url}date=2024-01-01/a.json"));
    assert_eq!(sources[4], format!("{url}date=2024-01-02/c.json"));

    // More objects land: the next run ingests only them.
    land_both(
        server,
        &landing,
        url,
        "date=2024-01-03/f.json",
        "{\"id\":6,\"name\":\"f\",\"score\":6}\n",
    )
    .await;
    check("second run");
    let local_rows = rows(local.path().to_path_buf()).await;
    let remote_rows: Vec<String> = rows(remote.path().to_path_buf())
        .await
        .into_iter()
        .map(|r| r.replace(url, &local_path))
        .collect();
    assert_eq!(local_rows.len(), 6, "{local_rows:?}");
    assert_eq!(remote_rows, local_rows);
    // Nothing new: no batch.
    check("third run");
    assert_eq!(rows(remote.path().to_path_buf()).await.len(), 6);
}

/// An object overwritten with new content (a new ETag) is a modified file, as a local file
/// rewritten in place: ingested again with `allow_overwrites = true`, counted and left
/// alone without it; either way the table equals the local source's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_object_is_a_modified_file_as_on_local_disk() {
    let Some(server) = server() else { return };
    server.create_bucket("files").expect("create the bucket");
    for allow in [true, false] {
        let url = format!("s3://files/overwrite-{allow}/landing/");
        let local = tempfile::tempdir().unwrap();
        let remote = tempfile::tempdir().unwrap();
        let landing = local.path().join("landing");
        let extra = format!("schema = \"id BIGINT, v STRING\"\nallow_overwrites = {allow}");
        let p_local = json_pipeline(local.path(), landing.to_str().unwrap(), &extra);
        let p_remote = json_pipeline(remote.path(), &url, &extra);
        let run_both = |round: &str| {
            [&p_local, &p_remote].map(|p| {
                let out = run_files(server, p, None);
                assert!(out.status.success(), "{allow} {round}: {}", text(&out));
                text(&out)
            })
        };
        land_both(
            server,
            &landing,
            &url,
            "a.json",
            "{\"id\":1,\"v\":\"first\"}\n",
        )
        .await;
        land_both(
            server,
            &landing,
            &url,
            "b.json",
            "{\"id\":2,\"v\":\"other\"}\n",
        )
        .await;
        run_both("first");
        // Rewritten in place with new content (and a new size).
        land_both(
            server,
            &landing,
            &url,
            "a.json",
            "{\"id\":1,\"v\":\"second version\"}\n",
        )
        .await;
        let said = run_both("after the overwrite");
        let lines = |dir: std::path::PathBuf| async move {
            table_lines(&dir.join("table"), &["id", "v"], "id, v", "|").await
        };
        let local_rows = lines(local.path().to_path_buf()).await;
        let remote_rows = lines(remote.path().to_path_buf()).await;
        let want: Vec<&str> = if allow {
            vec!["1|first", "1|second version", "2|other"]
        } else {
            vec!["1|first", "2|other"]
        };
        assert_eq!(local_rows, want, "allow_overwrites = {allow}");
        assert_eq!(remote_rows, local_rows, "allow_overwrites = {allow}");
        // The rewrite was seen by both, and named (the remote one by its URL).
        let warning = if allow {
            "ingesting it again (allow_overwrites = true)"
        } else {
            "not ingested again"
        };
        for s in &said {
            assert!(s.contains(warning), "{s}");
        }
        assert!(said[1].contains(&format!("{url}a.json")), "{}", said[1]);
    }
}

/// The batch protocol's crash drill with the landing zone on the S3 server: the process
/// aborts at each failpoint of batch 1 (an object landing while it is down), then runs to
/// the end; the table equals a crash-free run's, every id once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_with_the_landing_zone_on_s3_recovers_exactly_once() {
    let Some(server) = server() else { return };
    server
        .create_bucket("filescrash")
        .expect("create the bucket");
    let body = |ids: std::ops::Range<i64>| {
        ids.map(|i| format!("{{\"id\":{i},\"v\":\"n{i}\"}}\n"))
            .collect::<String>()
    };
    let setup = async |name: &str| {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("s3://filescrash/{name}/landing/");
        let p = json_pipeline(
            dir.path(),
            &url,
            "schema = \"id BIGINT, v STRING\"\nmax_files_per_trigger = 1",
        );
        for f in 0..3i64 {
            put(
                server,
                &format!("{url}f{f}.json"),
                body(f * 40..(f + 1) * 40).as_bytes(),
            )
            .await;
        }
        (dir, url, p)
    };
    let ids = |dir: std::path::PathBuf| async move {
        table_lines(&dir.join("table"), &["id"], "id", "|").await
    };
    let (clean, url, p) = setup("clean").await;
    let out = run_files(server, &p, None);
    assert!(out.status.success(), "{}", text(&out));
    put(
        server,
        &format!("{url}late.json"),
        body(120..160).as_bytes(),
    )
    .await;
    let out = run_files(server, &p, None);
    assert!(out.status.success(), "{}", text(&out));
    let golden = ids(clean.path().to_path_buf()).await;
    let want: Vec<String> = (0..160).map(|i| i.to_string()).collect();
    let mut sorted = golden.clone();
    sorted.sort_by_key(|s| s.parse::<i64>().unwrap());
    assert_eq!(sorted, want);

    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let (dir, url, p) = setup(failpoint).await;
        let crashed = run_files(server, &p, Some(&format!("{failpoint}:1")));
        let said = text(&crashed);
        assert!(!crashed.status.success(), "{failpoint}: {said}");
        assert!(
            said.contains(&format!("failpoint {failpoint} hit in batch 1")),
            "{said}"
        );
        put(
            server,
            &format!("{url}late.json"),
            body(120..160).as_bytes(),
        )
        .await;
        let out = run_files(server, &p, None);
        assert!(out.status.success(), "{failpoint}: {}", text(&out));
        assert_eq!(ids(dir.path().to_path_buf()).await, golden, "{failpoint}");
    }
}

/// A landing zone in a bucket that does not exist fails the run naming the URL, with the
/// health state `source_unavailable`, and so do refused credentials (the secret never
/// shown) and an endpoint nobody answers on (given in the source's `storage_options`); an
/// object listed and gone when read is an error naming its URL (the file is taken again
/// if it comes back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_or_a_vanished_object_is_named_by_its_url() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://no-such-landing-bucket/landing/";
    let p = json_pipeline(dir.path(), url, "schema = \"id BIGINT\"");
    let out = run_files(server, &p, None);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("s3://no-such-landing-bucket"), "{said}");
    assert!(said.contains("does not exist"), "{said}");
    let health =
        std::fs::read_to_string(dir.path().join("_checkpoints/bronze/_weir/health.json")).unwrap();
    assert!(health.contains("source_unavailable"), "{health}");
    assert!(!dir.path().join("s3:").exists());

    server.create_bucket("files").expect("create the bucket");
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://files/refused/landing/";
    let p = json_pipeline(dir.path(), url, "schema = \"id BIGINT\"");
    let wrong = "not-the-secret-4712";
    let mut env = server.options();
    env.push(("AWS_SECRET_ACCESS_KEY", wrong.to_string()));
    let out = run_env(
        &env,
        &[
            "run",
            "--headless",
            "--trigger",
            "available-now",
            p.to_str().unwrap(),
        ],
    );
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(url.trim_end_matches('/')) && said.contains("access refused"),
        "{said}"
    );
    assert!(!said.contains(wrong), "the secret is never printed: {said}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://files/unreachable/landing/";
    let p = json_pipeline(
        dir.path(),
        url,
        &format!(
            "schema = \"id BIGINT\"\nstorage_options = {{ aws_endpoint_url = \"http://127.0.0.1:{port}\", aws_allow_http = \"true\", aws_access_key_id = \"k\", aws_secret_access_key = \"s\", aws_region = \"us-east-1\", max_retries = \"1\", retry_timeout = \"2s\" }}"
        ),
    );
    let out = weir()
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&p)
        .output()
        .unwrap();
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains(url.trim_end_matches('/')), "{said}");

    let location = weir::storage::Location::parse("s3://files/gone/", Path::new("")).unwrap();
    weir::storage::remember_options(&location, storage_options(server));
    let landing = weir::source::files::remote::Landing::of(Path::new("s3://files/gone/"))
        .unwrap()
        .expect("a landing zone on S3");
    let err = tokio::task::spawn_blocking(move || {
        landing
            .get_blocking(Path::new("s3://files/gone/a.json"))
            .unwrap_err()
    })
    .await
    .unwrap();
    assert!(err.retryable(), "{err}");
    assert!(err.to_string().contains("s3://files/gone/a.json"), "{err}");
}

/// Incremental listing (`use_incremental_listing = "true"`) on the S3 server, driven with
/// a test clock: after the first (full) listing a trigger lists only the keys after the
/// last key seen, so a key landing below it is found by the next full listing,
/// `backfill_interval` later; nothing is taken twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_listing_lists_after_the_last_key_and_backfills_the_rest() {
    let Some(server) = server() else { return };
    server.create_bucket("files").expect("create the bucket");
    let url = "s3://files/incremental/landing/";
    let dir = tempfile::tempdir().unwrap();
    let location = weir::storage::Location::parse(url, Path::new("")).unwrap();
    weir::storage::remember_options(&location, storage_options(server));
    let text = format!(
        "[[flow]]\nname = \"f\"\n[flow.source]\ntype = \"files\"\npath = \"{url}\"\nformat = \"json\"\n\
         schema = \"id BIGINT\"\nuse_incremental_listing = \"true\"\nbackfill_interval = \"1 hour\"\n\
         [flow.sink]\ntype = \"delta\"\npath = \"out\"\n"
    );
    let pipeline = weir::pipeline::parse(&dir.path().join("pipeline.toml"), &text).unwrap();
    let weir::spec::SourceSpec::Files(options) = pipeline.flows[0].source.clone() else {
        panic!("a files source");
    };
    let ledger =
        weir::source::files::ledger::Ledger::open(&dir.path().join("ledger.sqlite")).unwrap();
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, true),
    ]));
    let mut source = weir::source::files::FileSource::new(options, ledger, schema);
    source.on_object_store(
        weir::source::files::remote::Landing::of(Path::new(url))
            .unwrap()
            .expect("a landing zone on S3"),
    );
    const HOUR: i64 = 3_600_000;
    let t0 = weir::clock::now_ms();
    let mut batch = 0u64;
    let mut take = async |source: &mut weir::source::files::FileSource, now: i64| {
        let listing = source.list_remote(now, false).await.unwrap();
        let names: Vec<String> = listing
            .candidates
            .iter()
            .map(|f| f.path.trim_start_matches(url).to_string())
            .collect();
        source
            .ledger
            .plan_batch(batch, &listing.candidates, now)
            .unwrap();
        batch += 1;
        names
    };
    put(server, &format!("{url}2024/06/01/a.json"), b"{\"id\":1}\n").await;
    put(server, &format!("{url}2024/06/02/b.json"), b"{\"id\":2}\n").await;
    assert_eq!(
        take(&mut source, t0).await,
        ["2024/06/01/a.json", "2024/06/02/b.json"],
        "the first listing is full"
    );
    // A later key is found after the last one; a late key in an older date is not.
    put(server, &format!("{url}2024/06/03/c.json"), b"{\"id\":3}\n").await;
    put(
        server,
        &format!("{url}2024/06/01/late.json"),
        b"{\"id\":4}\n",
    )
    .await;
    assert_eq!(take(&mut source, t0 + 1).await, ["2024/06/03/c.json"]);
    assert!(take(&mut source, t0 + 2).await.is_empty());
    // The backfill listing, an hour on, finds it; nothing is taken twice.
    assert_eq!(
        take(&mut source, t0 + HOUR + 3).await,
        ["2024/06/01/late.json"]
    );
    assert!(take(&mut source, t0 + HOUR + 4).await.is_empty());
}

/// The same code on Azure (Azurite) and for Parquet: a Delta table written to
/// `az://lake/objfiles/ids` is read back as a files source over its prefix (`format =
/// "parquet"`: the data files; `_delta_log/` is hidden), into a local table holding every
/// row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_objects_on_azure_are_read_by_the_files_source() {
    let Some(server) = azurite() else { return };
    server
        .create_container("lake")
        .expect("create the container");
    let dir = tempfile::tempdir().unwrap();
    let url = "az://lake/objfiles/ids";
    let p = pipeline(dir.path(), url);
    let mut toml = std::fs::read_to_string(&p).unwrap();
    toml.push_str(&format!(
        "\n[[flow]]\nname = \"reread\"\ntrigger = \"available_now\"\n\n[flow.source]\ntype = \"files\"\npath = \"{url}/\"\nformat = \"parquet\"\nschema = \"id BIGINT, note STRING\"\n\n[flow.sink]\ntype = \"delta\"\npath = \"reread\"\n"
    ));
    std::fs::write(&p, toml).unwrap();
    let p_arg = p.to_str().unwrap();
    let run = |flow: &str| {
        run_env(
            &server.options(),
            &[
                "run",
                "--headless",
                "--trigger",
                "available-now",
                "--flow",
                flow,
                p_arg,
            ],
        )
    };
    land_ids(dir.path(), "a.csv", 0..60);
    land_ids(dir.path(), "b.csv", 60..75);
    let out = run("bronze");
    assert!(out.status.success(), "{}", text(&out));
    let out = run("reread");
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("FileStreamSource[az://lake/objfiles/ids]"),
        "{said}"
    );
    let rows = table_lines(&dir.path().join("reread"), &["id", "note"], "id", ",").await;
    let want: Vec<String> = (0..75).map(|i| format!("{i},n{i}")).collect();
    assert_eq!(rows, want);
}
