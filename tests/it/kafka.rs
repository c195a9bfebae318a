//! `type = "kafka"` flows against a real broker (Apache Kafka 4.4, KRaft, loopback; one
//! broker for this whole test binary): the real binary reads a topic of several
//! partitions into Delta, crashed at every failpoint of the batch protocol; the table
//! must hold every produced key exactly once, and a re-run batch must read exactly the
//! ranges its `offsets/N` records (records produced while the process was down wait
//! for the next batch). Malformed values are rescued as corrupt records.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rskafka::client::partition::Compression;
use rskafka::record::Record;
use weir::checkpoint::progress::read_progress;
use weir::source::kafka::broker::LocalBroker;
use weir::source::kafka::{KafkaClient, KafkaConnection, TopicPartition};

use crate::support::*;

const PARTITIONS: i32 = 3;

fn topic_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

async fn client() -> KafkaClient {
    let broker = LocalBroker::shared();
    KafkaClient::connect(&KafkaConnection::plaintext(&broker.bootstrap))
        .await
        .expect("connect to the test broker")
}

/// Produces events `from..until` round-robin over the partitions, key `k<i>`; every
/// `malformed_every`-th value is not JSON. Returns the keys produced.
async fn produce(
    c: &KafkaClient,
    topic: &str,
    from: usize,
    until: usize,
    malformed_every: usize,
) -> Vec<String> {
    let mut per_partition: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    let mut keys = Vec::new();
    for i in from..until {
        let key = format!("k{i}");
        let value = if malformed_every > 0 && i % malformed_every == 0 {
            format!("{{\"id\":{i}, oops")
        } else {
            format!("{{\"id\":{i},\"name\":\"n{i}\",\"extra\":{i}}}")
        };
        per_partition
            .entry(i as i32 % PARTITIONS)
            .or_default()
            .push(Record {
                key: Some(key.clone().into_bytes()),
                value: Some(value.into_bytes()),
                headers: BTreeMap::new(),
                timestamp: chrono::Utc::now(),
            });
        keys.push(key);
    }
    for (p, records) in per_partition {
        for chunk in records.chunks(16) {
            c.produce(
                &TopicPartition::new(topic, p),
                chunk.to_vec(),
                Compression::NoCompression,
            )
            .await
            .expect("produce");
        }
    }
    keys
}

fn pipeline(dir: &Path, topic: &str, max_offsets: u64) -> PathBuf {
    pipeline_with(
        dir,
        &LocalBroker::shared().bootstrap,
        topic,
        max_offsets,
        "available_now",
        "",
    )
}

/// The test flow: JSON values, the Kafka key, partition and offset selected.
fn pipeline_with(
    dir: &Path,
    bootstrap: &str,
    topic: &str,
    max_offsets: u64,
    trigger: &str,
    more: &str,
) -> PathBuf {
    write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "events"
trigger = "{trigger}"
select = ["*", "CAST(_metadata.key AS STRING) AS kafka_key", "_metadata.partition AS kafka_partition", "_metadata.offset AS kafka_offset"]
[flow.health]
retry_attempts = 8
retry_backoff = "500 ms"
[flow.source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
subscribe = ["{topic}"]
starting_offsets = "earliest"
max_offsets_per_trigger = {max_offsets}
format = "json"
schema = "id BIGINT, name STRING"
{more}
[flow.sink]
type = "delta"
path = "lake/events"
"#
        ),
    )
}

fn run(pipeline: &Path, failpoint: Option<&str>) -> std::process::Output {
    let mut c = weir();
    c.args(["run", "--headless"]).arg(pipeline);
    if let Some(fp) = failpoint {
        c.env("WEIR_FAILPOINT", fp);
    }
    c.output().unwrap()
}

/// Every produced key once in the table, and the corrupt records rescued.
async fn assert_exactly_once(dir: &Path, keys: &[String], malformed: usize) {
    let rows = delta_rows(&dir.join("lake/events")).await;
    assert_eq!(num_rows(&rows), keys.len(), "row count");
    let distinct = sql(&rows, "SELECT count(DISTINCT kafka_key) FROM t").await;
    assert_eq!(scalar(&distinct) as usize, keys.len(), "duplicates found");
    let mut got = column_strings(&rows, "kafka_key");
    got.sort();
    let mut want = keys.to_vec();
    want.sort();
    assert_eq!(got, want, "the table's keys are the produced keys");
    let corrupt = sql(
        &rows,
        r#"SELECT count(*) FROM t WHERE _rescued_data LIKE '{"_corrupt_record":%' AND id IS NULL"#,
    )
    .await;
    assert_eq!(
        scalar(&corrupt) as usize,
        malformed,
        "corrupt records rescued"
    );
    let rescued_extra = sql(
        &rows,
        r#"SELECT count(*) FROM t WHERE _rescued_data LIKE '%"extra":%' AND id IS NOT NULL"#,
    )
    .await;
    assert_eq!(
        scalar(&rescued_extra) as usize,
        keys.len() - malformed,
        "unknown fields rescued"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_recovers_exactly_once_with_the_recorded_ranges() {
    let c = client().await;
    for failpoint in weir::engine::failpoint::FAILPOINTS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let topic = topic_name("crash");
        c.create_topic(&topic, PARTITIONS, 1)
            .await
            .expect("create topic");
        // 90 records, 30 per partition, 30 offsets per batch: batches 0, 1, 2.
        let mut keys = produce(&c, &topic, 0, 90, 7).await;
        let p = pipeline(dir, &topic, 30);
        let crashed = run(&p, Some(&format!("{failpoint}:1")));
        assert!(!crashed.status.success(), "{failpoint}: should abort");
        let stderr = String::from_utf8_lossy(&crashed.stderr);
        assert!(
            stderr.contains(&format!("failpoint {failpoint} hit in batch 1")),
            "{stderr}"
        );
        // Produced while the process is down: must not join the re-run batch.
        keys.extend(produce(&c, &topic, 90, 150, 7).await);
        let restarted = run(&p, None);
        assert!(
            restarted.status.success(),
            "{failpoint}: {}",
            String::from_utf8_lossy(&restarted.stderr)
        );
        let malformed = (0..150).filter(|i| i % 7 == 0).count();
        assert_exactly_once(dir, &keys, malformed).await;

        let checkpoint = dir.join("_checkpoints/events");
        let progress = read_progress(&checkpoint.join("_weir/progress.jsonl")).unwrap();
        let replay = progress
            .iter()
            .find(|p| p.weir.replayed)
            .expect("a replayed batch");
        assert_eq!(replay.batch_id, 1, "{failpoint}");
        assert_eq!(
            replay.num_input_rows, 30,
            "{failpoint}: the re-run batch reads exactly its recorded ranges"
        );
        assert_eq!(
            replay.weir.sink_write_skipped,
            !matches!(failpoint, "after_offsets" | "after_read"),
            "{failpoint}: sink skip on replay"
        );
        // offsets/N in Spark's KafkaSourceOffset JSON, and the progress says the same.
        let offsets1 = weir::checkpoint::Checkpoint::at(&checkpoint)
            .read_offsets(1)
            .unwrap();
        let end = offsets1.offsets[0].clone().unwrap();
        assert_eq!(end[&topic].as_object().unwrap().len(), PARTITIONS as usize);
        assert_eq!(replay.sources[0].end_offset, end);
        let initial = std::fs::read(checkpoint.join("sources/0/0")).unwrap();
        assert!(
            initial.starts_with(b"\0v1\n{"),
            "Spark's initial offset file"
        );
        // 150 records at 30 per batch: batches 0..=4, one Delta version each.
        assert_eq!(
            progress.iter().map(|p| p.batch_id).max(),
            Some(4),
            "{failpoint}"
        );
        assert_eq!(delta_version(&dir.join("lake/events")).await, Some(4));
        let last = progress.last().unwrap();
        assert_eq!(
            last.sources[0]
                .metrics
                .get("maxOffsetsBehindLatest")
                .map(String::as_str),
            Some("0"),
            "{failpoint}: caught up"
        );
    }
}

/// `weir inspect` shows the Kafka offsets; `weir check` and a restart refuse a changed
/// subscription (Spark: changing subscribed topics is not allowed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_offsets_and_a_changed_subscription_is_refused() {
    let c = client().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let topic = topic_name("inspect");
    c.create_topic(&topic, PARTITIONS, 1).await.unwrap();
    let keys = produce(&c, &topic, 0, 30, 0).await;
    let p = pipeline(dir, &topic, 100);
    let out = run(&p, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_exactly_once(dir, &keys, 0).await;
    let checkpoint = dir.join("_checkpoints/events");
    let out = weir()
        .args(["inspect", "--json"])
        .arg(&checkpoint)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let offsets = &j["sources"][0]["latest_offset"][&topic];
    assert_eq!(
        (0..PARTITIONS)
            .map(|p| offsets[p.to_string()].as_i64().unwrap())
            .sum::<i64>(),
        30,
        "{j}"
    );
    // Per partition: where it started, the committed offset, the latest at the last batch.
    let parts = j["sources"][0]["kafka"]["partitions"]
        .as_array()
        .expect("kafka partitions");
    assert_eq!(parts.len(), PARTITIONS as usize, "{j}");
    assert!(
        parts.iter().all(|p| p["topic"] == topic.as_str()
            && p["initial"] == 0
            && p["committed"] == 10
            && p["pending"].is_null()
            && p["latest"] == 10),
        "{j}"
    );
    let text = weir().arg("inspect").arg(&checkpoint).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("kafka partition") && text.contains(&format!("{topic}-2")),
        "{text}"
    );
    // `weir diff` of two batches: each partition's offset side by side.
    produce(&c, &topic, 30, 60, 0).await;
    let out = run(&p, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diff = weir()
        .args(["diff", "--json"])
        .arg(&checkpoint)
        .args(["--batches", "0", "1"])
        .output()
        .unwrap();
    let d: serde_json::Value = serde_json::from_slice(&diff.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&diff.stderr)));
    let fields: Vec<&str> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["field"].as_str())
        .collect();
    assert!(!fields.contains(&"end offset"), "{d}");
    let partition0 = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["field"] == format!("kafka {topic}-0").as_str())
        .unwrap_or_else(|| panic!("{d}"));
    assert_eq!(
        (&partition0["a"], &partition0["b"]),
        (&"10".into(), &"20".into()),
        "{d}"
    );
    let other = topic_name("other");
    c.create_topic(&other, 1, 1).await.unwrap();
    let changed = std::fs::read_to_string(&p)
        .unwrap()
        .replace(&format!("[\"{topic}\"]"), &format!("[\"{other}\"]"));
    std::fs::write(&p, changed).unwrap();
    let check = weir().arg("check").arg(&p).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(!check.status.success(), "{text}");
    assert!(
        text.contains(&format!("kafka:Subscribe[{topic}]")) && text.contains(&other),
        "{text}"
    );
}

/// A cluster that cannot be reached: the flow fails as `source_unavailable` (after its
/// retries), and its health says so.
#[test]
fn an_unreachable_cluster_is_source_unavailable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "events"
trigger = "available_now"
[flow.source]
type = "kafka"
bootstrap_servers = "127.0.0.1:{port}"
subscribe = ["events"]
[flow.source.kafka]
"request.timeout.ms" = "500"
[flow.health]
retry_attempts = 1
retry_backoff = "100 ms"
[flow.sink]
type = "delta"
path = "lake/events"
"#
        ),
    );
    let out = run(&p, None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Connection refused"), "{stderr}");
    let health =
        std::fs::read_to_string(dir.join("_checkpoints/events/_weir/health.json")).unwrap();
    assert!(health.contains("\"source_unavailable\""), "{health}");
}

/// A tiny deterministic generator so a failing seed can be replayed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_with_several_partitions_keeps_exactly_once() {
    use std::process::Stdio;
    let c = client().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let topic = topic_name("sigkill");
    c.create_topic(&topic, PARTITIONS, 1).await.unwrap();
    let p = pipeline(dir, &topic, 15);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("sigkill seed: {seed}");
    let mut rng = Lcg(seed);
    let mut keys = Vec::new();
    let mut kills = 0;
    for round in 0..5 {
        keys.extend(produce(&c, &topic, round * 60, (round + 1) * 60, 11).await);
        let mut child = weir()
            .args(["run", "--headless"])
            .arg(&p)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100 + rng.next(900)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
    }
    let last = run(&p, None);
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let malformed = (0..300).filter(|i| i % 11 == 0).count();
    assert_exactly_once(dir, &keys, malformed).await;
    eprintln!("killed {kills} time(s)");
}

/// Retention (here DeleteRecords) removes offsets the checkpoint expects: with
/// `fail_on_data_loss = true` the flow fails naming the partition and the range; with
/// `false` it skips them, counts them in progress, and reads the rest once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_offsets_fail_the_flow_or_are_skipped_and_counted() {
    let c = client().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let topic = topic_name("retention");
    c.create_topic(&topic, PARTITIONS, 1).await.unwrap();
    let mut keys = produce(&c, &topic, 0, 30, 0).await;
    let p = pipeline(dir, &topic, 1000);
    let out = run(&p, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 30 more (10 per partition); partition 0's first 6 of them are deleted unread.
    let more = produce(&c, &topic, 30, 60, 0).await;
    c.delete_records(&TopicPartition::new(&topic, 0), 16)
        .await
        .unwrap();
    // `weir check` asks the cluster: the restart would fail on the deleted range.
    let check = weir().args(["check", "--json"]).arg(&p).output().unwrap();
    assert!(!check.status.success());
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let v = if v.is_array() { v[0].clone() } else { v };
    let reasons = v["reasons"].to_string();
    assert!(
        reasons.contains(&format!("offsets [10, 16) of partition {topic}-0"))
            && reasons.contains("deleted before they were read"),
        "{v}"
    );
    assert_eq!(v["playbook"], "source_unavailable", "{v}");
    let failed = run(&p, None);
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains(&format!("offsets [10, 16) of partition {topic}-0"))
            && stderr.contains("fail_on_data_loss = false"),
        "{stderr}"
    );
    let lenient = std::fs::read_to_string(&p).unwrap().replace(
        "format = \"json\"",
        "format = \"json\"\nfail_on_data_loss = false",
    );
    std::fs::write(&p, lenient).unwrap();
    // With fail_on_data_loss = false the loss is a note, not a reason.
    let check = weir().args(["check", "--json"]).arg(&p).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let v = if v.is_array() { v[0].clone() } else { v };
    assert!(check.status.success(), "{v}");
    assert!(
        v["notes"]
            .to_string()
            .contains(&format!("offsets [10, 16) of partition {topic}-0")),
        "{v}"
    );
    let out = run(&p, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Keys 30..60 on partition 0 are 30, 33, ..., 57: offsets 10..20; 10..16 are gone.
    let lost: Vec<String> = (30..60)
        .filter(|i| i % PARTITIONS as usize == 0)
        .take(6)
        .map(|i| format!("k{i}"))
        .collect();
    keys.extend(more.into_iter().filter(|k| !lost.contains(k)));
    assert_exactly_once(dir, &keys, 0).await;
    let progress = read_progress(&dir.join("_checkpoints/events/_weir/progress.jsonl")).unwrap();
    let counted: u64 = progress
        .iter()
        .filter_map(|p| p.sources[0].metrics.get("numOffsetsLost"))
        .map(|v| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, 6, "the skipped offsets are counted");
    let out = weir()
        .args(["inspect", "--json"])
        .arg(dir.join("_checkpoints/events"))
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["sources"][0]["kafka"]["offsets_lost"], 6, "{j}");
}

/// Partitions added to the topic while the flow runs are read from their start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_added_while_running_is_read_from_its_start() {
    let c = client().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let topic = topic_name("grow");
    c.create_topic(&topic, 2, 1).await.unwrap();
    let broker = LocalBroker::shared();
    let p = pipeline_with(dir, &broker.bootstrap, &topic, 1000, "1 second", "");
    let mut keys = Vec::new();
    for (i, p) in [(0, 0), (1, 1)] {
        keys.push(produce_one(&c, &topic, p, i).await);
    }
    let mut child = weir()
        .args(["run", "--headless"])
        .arg(&p)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_rows_or_exit(dir, keys.len(), &mut child).await,
        "the run ended early"
    );
    broker.add_partitions(&topic, 3).unwrap();
    // A new client once the new partition is in the metadata.
    let mut fresh = None;
    for _ in 0..100 {
        let c = client().await;
        if c.topics()
            .await
            .unwrap()
            .get(&topic)
            .is_some_and(|p| p.len() == 3)
        {
            fresh = Some(c);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let c = fresh.expect("the topic has 3 partitions");
    keys.push(produce_one(&c, &topic, 2, 2).await);
    keys.push(produce_one(&c, &topic, 0, 3).await);
    assert!(
        wait_for_rows_or_exit(dir, keys.len(), &mut child).await,
        "the run ended early"
    );
    stop(&mut child);
    assert_exactly_once(dir, &keys, 0).await;
    let rows = delta_rows(&dir.join("lake/events")).await;
    let new = sql(
        &rows,
        "SELECT min(kafka_offset) FROM t WHERE kafka_partition = 2",
    )
    .await;
    assert_eq!(scalar(&new), 0, "the new partition is read from its start");
}

/// The broker stops mid-stream and comes back: the flow retries (`source_unavailable`
/// meanwhile); a run that gave up is started again; nothing is lost or duplicated.
/// Its own broker (the shared one serves the other tests meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_stopped_and_restarted_mid_stream_loses_nothing() {
    let mut broker = LocalBroker::start().expect("a second test broker");
    let c = KafkaClient::connect(&KafkaConnection::plaintext(&broker.bootstrap))
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let topic = topic_name("restart");
    c.create_topic(&topic, PARTITIONS, 1).await.unwrap();
    let mut keys = produce(&c, &topic, 0, 90, 0).await;
    let p = pipeline_with(
        dir,
        &broker.bootstrap,
        &topic,
        9,
        "1 second",
        "[flow.source.kafka]\n\"request.timeout.ms\" = \"2000\"",
    );
    let mut child = weir()
        .args(["run", "--headless"])
        .arg(&p)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("run.log")).unwrap())
        .spawn()
        .unwrap();
    assert!(
        wait_for_rows_or_exit(dir, 18, &mut child).await,
        "the run ended early: {}",
        std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
    );
    broker.stop();
    std::thread::sleep(std::time::Duration::from_secs(3));
    broker.restart().unwrap();
    drop(c);
    let c = KafkaClient::connect(&KafkaConnection::plaintext(&broker.bootstrap))
        .await
        .unwrap();
    keys.extend(produce(&c, &topic, 90, 120, 0).await);
    if child.try_wait().unwrap().is_none() {
        // Still running (it retried through the outage): let it catch up, then stop it.
        let caught_up = wait_for_rows_or_exit(dir, keys.len(), &mut child).await;
        if caught_up {
            stop(&mut child);
        }
    }
    let _ = child.wait();
    let stderr = std::fs::read_to_string(dir.join("run.log")).unwrap();
    assert!(stderr.contains("kafka"), "the outage was seen: {stderr}");
    // Whatever the first process did, a run to the end reads the rest exactly once.
    let drain = std::fs::read_to_string(&p)
        .unwrap()
        .replace("trigger = \"1 second\"", "trigger = \"available_now\"");
    std::fs::write(&p, drain).unwrap();
    let last = run(&p, None);
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    assert_exactly_once(dir, &keys, 0).await;
}

async fn produce_one(c: &KafkaClient, topic: &str, partition: i32, i: usize) -> String {
    let key = format!("k{i}");
    c.produce(
        &TopicPartition::new(topic, partition),
        vec![Record {
            key: Some(key.clone().into_bytes()),
            value: Some(format!("{{\"id\":{i},\"name\":\"n{i}\",\"extra\":{i}}}").into_bytes()),
            headers: BTreeMap::new(),
            timestamp: chrono::Utc::now(),
        }],
        Compression::NoCompression,
    )
    .await
    .unwrap();
    key
}

async fn table_rows(dir: &Path) -> usize {
    let table = dir.join("lake/events");
    if !table.join("_delta_log").exists() {
        return 0;
    }
    num_rows(&delta_rows(&table).await)
}

/// Waits (up to two minutes) until the table has `n` rows; `false` when the process
/// exited first.
async fn wait_for_rows_or_exit(dir: &Path, n: usize, child: &mut std::process::Child) -> bool {
    for _ in 0..600 {
        if table_rows(dir).await >= n {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("the table never reached {n} rows");
}

/// Stops a headless run as an operator would (SIGTERM: the batch in flight finishes).
fn stop(child: &mut std::process::Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}

/// `weir generate --kafka` produces the generator's events into a topic, one record
/// per line keyed by `key`; a kafka flow reads them all, malformed ones rescued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_kafka_produces_the_events_a_flow_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let broker = LocalBroker::shared();
    let topic = topic_name("generated");
    let out = weir()
        .args(["generate", "--kafka", &broker.bootstrap, "--topic", &topic])
        .args([
            "--partitions",
            "3",
            "--once",
            "--files",
            "3",
            "--rows",
            "50",
        ])
        .args(["--malformed", "0.1", "--duplicates", "0.1", "--seed", "7"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rows: u64 = stats.iter().map(|s| s["rows"].as_u64().unwrap()).sum();
    let malformed: u64 = stats.iter().map(|s| s["malformed"].as_u64().unwrap()).sum();
    assert_eq!(rows, 150);
    assert!(malformed > 0);
    let p = write_pipeline(
        dir,
        &format!(
            r#"
[[flow]]
name = "generated"
trigger = "available_now"
select = ["*", "_metadata.partition AS kafka_partition", "CAST(_metadata.key AS STRING) AS kafka_key"]
[flow.source]
type = "kafka"
bootstrap_servers = "{}"
subscribe = ["{topic}"]
starting_offsets = "earliest"
format = "json"
schema = "event_id BIGINT, key STRING, event_time TIMESTAMP, amount DOUBLE"
[flow.sink]
type = "delta"
path = "lake/generated"
"#,
            broker.bootstrap
        ),
    );
    let out = run(&p, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = delta_rows(&dir.join("lake/generated")).await;
    assert_eq!(num_rows(&table) as u64, rows);
    let corrupt = sql(
        &table,
        r#"SELECT count(*) FROM t WHERE _rescued_data LIKE '{"_corrupt_record":%'"#,
    )
    .await;
    assert_eq!(scalar(&corrupt) as u64, malformed);
    // Keyed records: one key always lands on one partition.
    let spread = sql(
        &table,
        "SELECT max(n) FROM (SELECT kafka_key, count(DISTINCT kafka_partition) AS n FROM t WHERE kafka_key IS NOT NULL GROUP BY kafka_key)",
    )
    .await;
    assert_eq!(scalar(&spread), 1);
}

/// `weir demo --kafka`: the flights replayed through a topic; bronze reads them with a
/// kafka source, every flight once, and the gold tables follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_replays_the_flights_through_a_topic() {
    let broker = LocalBroker::shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let topic = topic_name("flights");
    let out = weir()
        .args([
            "demo",
            "--headless",
            "--until-drained",
            "--days",
            "2",
            "--speed",
            "max",
        ])
        .args(["--kafka", &broker.bootstrap, "--kafka-topic", &topic])
        .arg("--dir")
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("through kafka"), "{stderr}");
    let expected =
        weir::demo::data::land_flights(&tmp.path().join("x"), &tmp.path().join("y"), Some(2))
            .unwrap()
            .rows_total;
    let table = delta_rows(&dir.join("lake/bronze/flights")).await;
    assert_eq!(num_rows(&table) as u64, expected, "every flight once");
    let lineage = sql(
        &table,
        "SELECT count(*) FROM t WHERE source_file LIKE 'flights-%@%'",
    )
    .await;
    assert_eq!(
        scalar(&lineage) as u64,
        expected,
        "source_file names topic-partition@offset"
    );
    assert!(dir.join("lake/gold/departures_hourly/_delta_log").exists());
    let pipeline = std::fs::read_to_string(dir.join("pipeline.toml")).unwrap();
    assert!(pipeline.contains("type = \"kafka\""), "{pipeline}");
}
