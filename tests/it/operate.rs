//! Operating a pipeline through the binary (docs/operate.md): the Prometheus endpoint
//! scraped with a real HTTP client during a run, alert rules firing once and resolving
//! once to a local HTTP listener and to a command, a stuck HTTP target that does not hold
//! back a single batch, `weir watch` over another process's checkpoints, and rules
//! refused before anything runs.
//!
//! Waits on the listeners and on the endpoint have generous deadlines only so that a
//! broken build fails instead of hanging; nothing here asserts a duration.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::*;

/// Long enough for any healthy run on a loaded machine; a deadline, not a measurement.
const PATIENCE: Duration = Duration::from_secs(180);

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A local HTTP endpoint that answers 200 to every request and hands over the bodies.
struct Listener {
    url: String,
    bodies: mpsc::Receiver<serde_json::Value>,
}

fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

impl Listener {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let (tx, bodies) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                if let Some(body) = read_request(&mut stream) {
                    // Handed over before the answer: once the sender has its 200, the
                    // body is here.
                    let _ = tx.send(serde_json::from_slice(&body).unwrap_or_default());
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            }
        });
        Listener { url, bodies }
    }

    fn next(&self) -> serde_json::Value {
        self.bodies
            .recv_timeout(PATIENCE)
            .expect("no alert notification arrived at the listener")
    }

    fn none_left(&self) {
        if let Ok(extra) = self.bodies.try_recv() {
            panic!("one notification too many: {extra}");
        }
    }
}

/// A local HTTP endpoint that accepts connections and never answers.
struct Stuck {
    url: String,
    accepted: mpsc::Receiver<()>,
}

impl Stuck {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let (tx, accepted) = mpsc::channel();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                held.push(stream);
                let _ = tx.send(());
            }
        });
        Stuck { url, accepted }
    }
}

const SCHEMA: &str = "id BIGINT, k STRING, ts TIMESTAMP";

/// One flow `f`: JSON files in `landing` -> Delta `table`, one file per batch.
fn pipeline(dir: &Path, flow_extra: &str, alerts: &str) -> PathBuf {
    write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "f"
trigger = "available_now"
{flow_extra}
[flow.health]
retry_attempts = 1
retry_backoff = "20 ms"

[flow.source]
type = "files"
path = "landing"
format = "json"
schema = "{SCHEMA}"
max_files_per_trigger = 1

[flow.sink]
type = "delta"
path = "table"

{alerts}
"#
        ),
    )
}

/// `files` files of 10 rows each, event times `age` before now.
fn land_rows(dir: &Path, first: usize, files: usize, age: chrono::Duration) {
    let ts = (chrono::Utc::now() - age).format("%Y-%m-%dT%H:%M:%SZ");
    for i in first..first + files {
        let mut text = String::new();
        for j in 0..10 {
            text.push_str(&format!(
                "{{\"id\": {}, \"k\": \"k{j}\", \"ts\": \"{ts}\"}}\n",
                i * 10 + j
            ));
        }
        land(
            &dir.join("landing"),
            &format!("f{i:03}.json"),
            text.as_bytes(),
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run(p: &Path, extra: &[&str]) -> Output {
    weir()
        .arg("run")
        .arg(p)
        .args(["--headless"])
        .args(extra)
        .stdout(Stdio::null())
        .output()
        .unwrap()
}

fn lines_of(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn terminate(child: &mut Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

/// The value of the sample line `name{labels} value` in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn metrics_are_scraped_with_a_real_client_during_a_run_and_match_the_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "", "").to_path_buf();
    land_rows(dir, 0, 3, chrono::Duration::zero());
    // A continuous run (a trigger interval), so the endpoint lives until it is stopped.
    let mut child = weir()
        .arg("run")
        .arg(&p)
        .args([
            "--headless",
            "--trigger",
            "100ms",
            "--metrics",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, addr) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    let logs = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("weir: metrics at ") {
                let _ = tx.send(rest.trim().to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let url = addr
        .recv_timeout(PATIENCE)
        .expect("the run printed no metrics address");
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/metrics"),
        "{url}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let scrape = |u: &str| {
        rt.block_on(async {
            let r = client.get(u).send().await.expect("scrape");
            let status = r.status().as_u16();
            let content_type = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            (status, content_type, r.text().await.expect("body"))
        })
    };
    // Scrape until the three batches are committed (each file is a batch).
    let start = Instant::now();
    let text = loop {
        let (status, content_type, text) = scrape(&url);
        assert_eq!(status, 200);
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        if sample(&text, "weir_flow_batches_total{flow=\"f\"}") == Some(3.0) {
            break text;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "three batches never showed:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for (series, value) in [
        ("weir_flow_input_rows_total{flow=\"f\"}", 30.0),
        ("weir_flow_output_rows_total{flow=\"f\"}", 30.0),
        ("weir_flow_input_files_total{flow=\"f\"}", 3.0),
        ("weir_flow_failures_total{flow=\"f\"}", 0.0),
        ("weir_flow_backlog_files{flow=\"f\"}", 0.0),
        ("weir_flow_backlog_seconds{flow=\"f\"}", 0.0),
        ("weir_flow_last_batch_id{flow=\"f\"}", 2.0),
        ("weir_flow_batch_duration_seconds_count{flow=\"f\"}", 3.0),
        (
            "weir_flow_batch_duration_seconds_bucket{le=\"+Inf\",flow=\"f\"}",
            3.0,
        ),
        ("weir_flow_health{flow=\"f\",state=\"healthy\"}", 1.0),
        ("weir_flow_health{flow=\"f\",state=\"lagging\"}", 0.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    for line in [
        "# TYPE weir_flow_input_rows counter",
        "# TYPE weir_flow_batch_duration_seconds histogram",
        "# TYPE weir_flow_health gauge",
        "# TYPE weir_flow_freshness_seconds gauge",
        "# EOF",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line:?} missing in\n{text}"
        );
    }
    assert!(
        text.contains("# HELP weir_flow_input_rows Rows read"),
        "{text}"
    );
    let rate = sample(&text, "weir_flow_processed_rows_per_second{flow=\"f\"}").unwrap();
    assert!(rate > 0.0, "{text}");
    let other = url.replace("/metrics", "/other");
    assert_eq!(scrape(&other).0, 404);

    terminate(&mut child);
    let status = child.wait().unwrap();
    let logs = logs.join().unwrap();
    assert!(status.success(), "{logs}");
}

const FAILED_AND_SINK_RULES: &str = r#"
[alerts]
evaluate_every = "100 ms"

[[alerts.rule]]
name = "failed"
failed_batches = 1
url = "URL"

[[alerts.rule]]
name = "sink-down"
flows = ["f"]
health = ["sink_unavailable"]
command = ["sh", "-c", "cat >> 'OUT'; echo >> 'OUT'"]
"#;

#[test]
fn a_failed_batch_fires_once_and_resolves_once_to_a_url_and_to_a_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let listener = Listener::start();
    let out = dir.join("alerts-from-command.jsonl");
    let alerts = FAILED_AND_SINK_RULES
        .replace("URL", &listener.url)
        .replace("OUT", s(&out));
    let p = pipeline(dir, "", &alerts);
    land_rows(dir, 0, 2, chrono::Duration::zero());
    // The sink's path is taken by a file: the batch fails (sink_unavailable).
    std::fs::write(dir.join("table"), b"in the way").unwrap();

    let o = run(&p, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let fired = listener.next();
    assert_eq!(fired["status"], "firing", "{fired}");
    assert_eq!(fired["rule"], "failed");
    assert_eq!(fired["flow"], "f");
    assert_eq!(fired["condition"], "failed_batches");
    assert_eq!(fired["value"], 1);
    assert_eq!(fired["threshold"], 1);
    assert_eq!(fired["by"], "run");
    assert!(
        fired["summary"]
            .as_str()
            .unwrap()
            .contains(s(&dir.join("table"))),
        "{fired}"
    );
    listener.none_left();
    let from_command = lines_of(&out);
    assert_eq!(from_command.len(), 1, "{from_command:?}");
    assert_eq!(from_command[0]["status"], "firing");
    assert_eq!(from_command[0]["rule"], "sink-down");
    assert_eq!(from_command[0]["value"], "sink_unavailable");

    // The path is freed; the next run commits the batch: each alert resolves, once.
    std::fs::rename(dir.join("table"), dir.join("stray")).unwrap();
    let o = run(&p, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let resolved = listener.next();
    assert_eq!(resolved["status"], "resolved", "{resolved}");
    assert_eq!(resolved["rule"], "failed");
    assert_eq!(resolved["value"], 0);
    assert_eq!(resolved["fired_at"], fired["fired_at"]);
    listener.none_left();
    let from_command = lines_of(&out);
    assert_eq!(from_command.len(), 2, "{from_command:?}");
    assert_eq!(from_command[1]["status"], "resolved");
    assert_eq!(from_command[1]["value"], "healthy");

    // More data, another run: nothing to say.
    land_rows(dir, 2, 1, chrono::Duration::zero());
    let o = run(&p, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    listener.none_left();
    assert_eq!(lines_of(&out).len(), 2);

    // Every notification is recorded for the timeline.
    let recorded = lines_of(&dir.join("_checkpoints/f/_weir/alerts.jsonl"));
    let seen: Vec<(String, String)> = recorded
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap().into(),
                r["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut seen_sorted = seen.clone();
    seen_sorted.sort();
    assert_eq!(
        seen_sorted,
        [
            ("failed".to_string(), "firing".to_string()),
            ("failed".into(), "resolved".into()),
            ("sink-down".into(), "firing".into()),
            ("sink-down".into(), "resolved".into()),
        ]
    );
}

#[test]
fn a_stuck_http_target_does_not_hold_back_a_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let stuck = Stuck::start();
    let out = dir.join("alerts-from-command.jsonl");
    // Event times two hours old against a 1-minute freshness target: lagging from the
    // first batch on, so both rules fire while nine more batches are to come.
    let alerts = format!(
        r#"
[alerts]
evaluate_every = "50 ms"
queue = 1

[[alerts.rule]]
name = "lagging-url"
health = ["lagging"]
url = "{}"
timeout = "1 hour"

[[alerts.rule]]
name = "lagging-command"
health = ["lagging"]
command = ["sh", "-c", "cat >> '{}'; echo >> '{}'"]
"#,
        stuck.url,
        s(&out),
        s(&out)
    );
    let p = pipeline(
        dir,
        "freshness = \"1 minute\"\nwatermark = { column = \"ts\", delay = \"1 minute\" }",
        &alerts,
    );
    land_rows(dir, 0, 10, chrono::Duration::hours(2));
    let o = run(&p, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Every batch committed, every row is in the table once.
    let progress = lines_of(&dir.join("_checkpoints/f/_weir/progress.jsonl"));
    assert_eq!(progress.len(), 10);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ids = rt.block_on(table_lines(&dir.join("table"), &["id"], "id", ","));
    assert_eq!(ids, (0..100).map(|i| i.to_string()).collect::<Vec<_>>());
    // The stuck target was called and never answered; the other target got its alert.
    stuck
        .accepted
        .recv_timeout(PATIENCE)
        .expect("the stuck target was never called");
    assert!(
        stderr(&o).contains("not delivered before exit"),
        "{}",
        stderr(&o)
    );
    let from_command = lines_of(&out);
    assert_eq!(from_command.len(), 1, "{from_command:?}");
    assert_eq!(from_command[0]["rule"], "lagging-command");
    assert_eq!(from_command[0]["status"], "firing");
}

#[test]
fn watch_fires_and_resolves_over_the_checkpoints_of_another_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let listener = Listener::start();
    let alerts = format!(
        r#"
[alerts]
evaluate_every = "100 ms"

[[alerts.rule]]
name = "lagging"
health = ["lagging"]
url = "{}"
"#,
        listener.url
    );
    let p = pipeline(
        dir,
        "freshness = \"1 minute\"\nwatermark = { column = \"ts\", delay = \"1 minute\" }",
        &alerts,
    );
    land_rows(dir, 0, 1, chrono::Duration::hours(2));
    // The engine runs elsewhere (here: before), without evaluating the rules itself.
    let o = run(&p, &["--no-alerts"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut watch = weir()
        .arg("watch")
        .arg(&p)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let fired = listener.next();
    assert_eq!(fired["status"], "firing", "{fired}");
    assert_eq!(fired["rule"], "lagging");
    assert_eq!(fired["value"], "lagging");
    assert_eq!(fired["by"], "watch");
    assert!(
        fired["summary"]
            .as_str()
            .unwrap()
            .contains("above the freshness target"),
        "{fired}"
    );

    land_rows(dir, 1, 1, chrono::Duration::zero());
    let o = run(&p, &["--no-alerts"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let resolved = listener.next();
    assert_eq!(resolved["status"], "resolved", "{resolved}");
    assert_eq!(resolved["value"], "healthy");

    terminate(&mut watch);
    let output = watch.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    listener.none_left();
    let printed: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed.len(), 2, "{printed:?}");
    assert_eq!(printed[0]["status"], "firing");
    assert_eq!(printed[1]["status"], "resolved");
}

#[test]
fn a_bad_rule_is_refused_before_anything_runs_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (rule, key, words) in [
        (
            "name = \"r\"\nhealth = [\"laggy\"]\nurl = \"http://127.0.0.1:1/\"",
            "alerts.rule[0].health[0]",
            "unknown health state \"laggy\"",
        ),
        (
            "name = \"r\"\nfreshness = \"soon\"\nurl = \"http://127.0.0.1:1/\"",
            "alerts.rule[0].freshness",
            "invalid duration",
        ),
        (
            "name = \"r\"\nbacklog_seconds = 60\nurl = \"ftp://example.com/\"",
            "alerts.rule[0].url",
            "not an http:// or https:// URL",
        ),
        (
            "name = \"r\"\nfailed_batches = 0\ncommand = [\"true\"]",
            "alerts.rule[0].failed_batches",
            "must be 1 or more",
        ),
        (
            "name = \"r\"\nflows = [\"nope\"]\nfailed_batches = 1\ncommand = [\"true\"]",
            "alerts.rule[0].flows[0]",
            "no flow named \"nope\"",
        ),
        (
            "name = \"r\"\nhealth = [\"lagging\"]\nfreshness = \"1m\"\ncommand = [\"true\"]",
            "alerts.rule[0].name",
            "give exactly one of health, freshness, backlog_seconds, failed_batches",
        ),
        (
            "name = \"r\"\nhealth = [\"lagging\"]",
            "alerts.rule[0].name",
            "has no target",
        ),
    ] {
        let p = pipeline(dir, "", &format!("[[alerts.rule]]\n{rule}\n"));
        for args in [vec!["validate"], vec!["run", "--headless"]] {
            let o = weir().args(&args).arg(&p).output().unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?} {rule}: {err}");
            assert!(err.contains(key), "{key} not named: {err}");
            assert!(err.contains(words), "{words:?} not in: {err}");
        }
        assert!(
            !dir.join("_checkpoints").exists(),
            "nothing may run: {rule}"
        );
    }
}

#[test]
fn alert_rules_are_read_with_their_defaults() {
    use weir::spec::{AlertCondition, AlertTarget};
    let text = r#"
[[flow]]
name = "bronze"
[flow.source]
type = "files"
path = "landing"
format = "json"
[flow.sink]
type = "delta"
path = "lake/bronze"

[alerts]
queue = 8

[[alerts.rule]]
name = "stale"
flows = ["bronze"]
freshness = "15 minutes"
url = "https://hooks.example.com/weir"

[[alerts.rule]]
name = "behind"
backlog_seconds = 600
command = ["/usr/local/bin/page", "--team", "data"]
timeout = "30 seconds"

[[alerts.rule]]
name = "unhealthy"
health = ["lagging", "sink-unavailable"]
command = ["true"]
"#;
    let p = weir::pipeline::parse(Path::new("/etc/weir/pipeline.toml"), text).unwrap();
    let a = &p.alerts;
    assert_eq!(a.queue, 8);
    assert_eq!(a.evaluate_every, Duration::from_secs(5));
    assert_eq!(a.rules.len(), 3);
    assert_eq!(a.rules[0].flows, ["bronze"]);
    assert_eq!(
        a.rules[0].condition,
        AlertCondition::Freshness(Duration::from_secs(900))
    );
    assert_eq!(
        a.rules[0].target,
        AlertTarget::Url("https://hooks.example.com/weir".into())
    );
    assert_eq!(a.rules[0].timeout, Duration::from_secs(10));
    assert_eq!(a.rules[1].condition, AlertCondition::BacklogSeconds(600.0));
    assert_eq!(a.rules[1].timeout, Duration::from_secs(30));
    assert!(a.rules[1].flows.is_empty() && a.rules[1].watches("bronze"));
    assert_eq!(
        a.rules[2].condition,
        AlertCondition::Health(vec!["lagging".into(), "sink_unavailable".into()])
    );
    // No [alerts]: no rules.
    let bare = text.split("[alerts]").next().unwrap();
    let p = weir::pipeline::parse(Path::new("/etc/weir/pipeline.toml"), bare).unwrap();
    assert!(p.alerts.rules.is_empty());
}

/// Threads, open descriptors, RSS (KiB) of a process, and how many of its threads are
/// named `name`, from /proc.
fn proc_figures(pid: u32, name: &str) -> (usize, usize, u64, usize) {
    let count = |d: String| std::fs::read_dir(d).map_or(0, |e| e.count());
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let named = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name)
                })
                .count()
        })
        .unwrap_or(0);
    (
        count(format!("/proc/{pid}/task")),
        count(format!("/proc/{pid}/fd")),
        rss,
        named,
    )
}

/// One scrape on a new connection: (status line, body, how long it took).
fn timed_scrape(addr: std::net::SocketAddr) -> (String, String, Duration) {
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: weir\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let took = started.elapsed();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
        took,
    )
}

#[test]
fn the_metrics_endpoint_holds_against_a_thousand_slow_half_open_and_oversized_clients() {
    // The endpoint's bounds (src/metrics/server.rs, Limits::default): one thread of its
    // own, at most 64 connections (so at most 64 descriptors beyond the listener), a
    // request head of at most 8 KiB read within 5 s.
    const MAX_CONNECTIONS: usize = 64;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = pipeline(dir, "", "").to_path_buf();
    land_rows(dir, 0, 3, chrono::Duration::zero());
    let mut child = weir()
        .arg("run")
        .arg(&p)
        .args([
            "--headless",
            "--trigger",
            "100ms",
            "--metrics",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, addr) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    let logs = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("weir: metrics at http://") {
                let _ = tx.send(rest.trim().trim_end_matches("/metrics").to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let addr: std::net::SocketAddr = addr
        .recv_timeout(PATIENCE)
        .expect("the run printed no metrics address")
        .parse()
        .unwrap();
    let batches = |body: &str| sample(body, "weir_flow_batches_total{flow=\"f\"}");
    let start = Instant::now();
    while batches(&timed_scrape(addr).1) != Some(3.0) {
        assert!(start.elapsed() < PATIENCE, "three batches never showed");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The figures before: the most seen over a second of the idle run.
    let mut base = (0, 0, 0);
    for _ in 0..10 {
        let (threads, fds, rss, _) = proc_figures(pid, "weir-metrics");
        base = (base.0.max(threads), base.1.max(fds), base.2.max(rss));
        std::thread::sleep(Duration::from_millis(100));
    }

    // 1,000 clients: 500 connect and send nothing, 400 send a head byte by byte, 100
    // send a 64 KiB header line at once.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX-Huge: {}\r\n\r\n",
        "h".repeat(64 * 1024)
    );
    let mut held = Vec::new();
    let mut slow = Vec::new();
    for i in 0..1000 {
        let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            continue;
        };
        c.set_write_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        match i % 10 {
            0 => {
                let _ = c.write_all(huge.as_bytes());
            }
            1..=4 => {
                let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: weir\r\nX-Slow: ");
                slow.push(c.try_clone().unwrap());
            }
            _ => {}
        }
        held.push(c);
    }
    assert!(held.len() >= 900, "only {} connections opened", held.len());
    // The slow clients keep sending a byte every 100 ms for 4 s.
    let trickle = std::thread::spawn(move || {
        for _ in 0..40 {
            for c in &mut slow {
                let _ = c.write(b"x");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    // New data meanwhile: the engine must keep committing batches.
    land_rows(dir, 3, 3, chrono::Duration::zero());

    let mut worst = (0, 0, 0);
    let mut slowest = Duration::ZERO;
    let mut caught_up = false;
    for _ in 0..20 {
        let (threads, fds, rss, endpoint_threads) = proc_figures(pid, "weir-metrics");
        assert_eq!(endpoint_threads, 1, "the endpoint runs on one thread");
        worst = (worst.0.max(threads), worst.1.max(fds), worst.2.max(rss));
        let (status, body, took) = timed_scrape(addr);
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        assert!(body.contains("# EOF"), "{body}");
        slowest = slowest.max(took);
        caught_up |= batches(&body) == Some(6.0);
        std::thread::sleep(Duration::from_millis(150));
    }
    // An oversized head on a fresh connection is refused with 431, flood or not.
    let mut big = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    big.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = big.write_all(huge.as_bytes());
    let mut answer = String::new();
    let _ = big.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 431"),
        "an oversized head got: {answer:.200}"
    );
    trickle.join().unwrap();

    eprintln!(
        "idle run: {} threads, {} descriptors, {} KiB RSS; under the flood at most {} threads, {} descriptors, {} KiB RSS; slowest scrape {slowest:?}",
        base.0, base.1, base.2, worst.0, worst.1, worst.2
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a scrape took {slowest:?} under the flood"
    );
    assert!(
        worst.0 <= base.0 + 8,
        "threads grew from {} to {} (the endpoint adds none; 8 spare for the engine's pools)",
        base.0,
        worst.0
    );
    assert!(
        worst.1 <= base.1 + MAX_CONNECTIONS + 16,
        "descriptors grew from {} to {} (at most {MAX_CONNECTIONS} connections + 16)",
        base.1,
        worst.1
    );
    assert!(
        worst.2 <= base.2 + 64 * 1024,
        "RSS grew from {} KiB to {} KiB (bound: + 64 MiB)",
        base.2,
        worst.2
    );
    // The flood did not stop the engine: the three new files are committed.
    let start = Instant::now();
    while !caught_up {
        assert!(
            start.elapsed() < PATIENCE,
            "the new files were never committed"
        );
        caught_up = batches(&timed_scrape(addr).1) == Some(6.0);
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(held);
    terminate(&mut child);
    let status = child.wait().unwrap();
    let logs = logs.join().unwrap();
    assert!(status.success(), "{logs}");
}
