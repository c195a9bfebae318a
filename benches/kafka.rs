//! Kafka ingest benchmark (`cargo bench --bench kafka`), issue 19.
//!
//! A real broker (Apache Kafka 4.4, KRaft, loopback, `BENCH_JVM_OPTS`) is started;
//! `weir generate --kafka` produces `WEIR_BENCH_KAFKA_EVENTS` (default 3,400,000)
//! JSON events (`event_id, key, event_time, amount`; 10,000 keys) into a 4-partition
//! topic. Then, on that same topic:
//!
//! 1. **The console's lag** (`bench_lag`): `kafka-lag-measure`, what one lag
//!    measurement costs; `kafka-lag-visible`, the time from a record produced to the
//!    console's model counting it (the console's own follower, on its thread), idle and while a
//!    `weir run` ingests the big topic.
//! 2. **weir**: `weir run --headless` with `available_now`, `format = "json"` and a
//!    given schema, into a fresh Delta table, for each `max_offsets_per_trigger` of
//!    `WEIR_BENCH_KAFKA_LIMITS` (default `500000,100000,1700000`) on the whole
//!    backlog, and the first one again on the topic's last quarter: peak RSS
//!    (getrusage of the child) follows the limit, not the backlog. Wall time, rows/s,
//!    and per setting the medians of the runs (`kafka-ingest-median`).
//! 3. **Spark** (when `bench/spark/kafka-setup.sh` made the PySpark 4.2.0 venv
//!    `~/.cache/weir-delta-venv` and the jars of `jars/spark-kafka/pom.xml`):
//!    `bench/spark/bench_spark_kafka.py`, Spark's Kafka source with `from_json` and
//!    `maxOffsetsPerTrigger` = 500,000, `availableNow`, `local[2]`, into Delta, under
//!    `/var/tmp/weir-spark.lock`, `WEIR_BENCH_RUNS` warm runs in one JVM.
//!
//! Prints one JSON line per measurement. `WEIR_BENCH_RUNS` (default 2) runs each.
//! `WEIR_BIN` names the weir binary to measure (default: this build's);
//! `WEIR_BENCH_KAFKA_ENGINES` = `weir`, `spark` or `weir,spark` (default);
//! `WEIR_BENCH_KAFKA_LAG_SAMPLES` (default 20) records per lag measurement.

mod support;

use std::path::Path;
use std::time::Instant;

use support::{measured, median, round2};
use weir::source::kafka::broker::{BENCH_JVM_OPTS, LocalBroker};

const SCHEMA: &str = "event_id BIGINT, key STRING, event_time TIMESTAMP, amount DOUBLE";
const TOPIC: &str = "bench-events";

fn main() {
    support::measure_mode_if_asked();
    let events: u64 = std::env::var("WEIR_BENCH_KAFKA_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_400_000);
    let runs: usize = std::env::var("WEIR_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let broker = LocalBroker::start_with(BENCH_JVM_OPTS).expect("start the Kafka broker");
    // `WEIR_BIN`: a release binary when this harness itself is built in another profile.
    let weir_bin = std::env::var("WEIR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_weir").into());
    let weir = weir_bin.as_str();
    let rows_per_file = 10_000u64;
    let t = Instant::now();
    let out = std::process::Command::new(weir)
        .args(["generate", "--kafka", &broker.bootstrap, "--topic", TOPIC])
        .args([
            "--partitions",
            "4",
            "--once",
            "--keys",
            "10000",
            "--seed",
            "1",
        ])
        .args(["--rows", &rows_per_file.to_string()])
        .args(["--files", &events.div_ceil(rows_per_file).to_string()])
        .output()
        .expect("weir generate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let produced = events.div_ceil(rows_per_file) * rows_per_file;
    println!(
        "{}",
        serde_json::json!({"case": "kafka-produce", "engine": "weir generate --kafka", "events": produced,
            "partitions": 4, "wall_s": round2(t.elapsed().as_secs_f64())})
    );

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    bench_lag(&rt, &broker.bootstrap);

    // `WEIR_BENCH_KAFKA_ENGINES`: `weir,spark` (default), or one of them.
    let engines = std::env::var("WEIR_BENCH_KAFKA_ENGINES").unwrap_or_else(|_| "weir,spark".into());
    // `WEIR_BENCH_KAFKA_LIMITS`: the `max_offsets_per_trigger` values to run, the first
    // one also on a quarter of the backlog (the topic's last quarter): peak memory
    // follows the limit, not the backlog.
    let limits: Vec<u64> = std::env::var("WEIR_BENCH_KAFKA_LIMITS")
        .unwrap_or_else(|_| "500000,100000,1700000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    if engines.contains("weir") {
        let latest = rt.block_on(latest_offsets(&broker.bootstrap));
        let quarter: Vec<(i32, i64)> = latest.iter().map(|(p, l)| (*p, l - l / 4)).collect();
        let quarter_rows: u64 = latest.iter().map(|(_, l)| (l / 4) as u64).sum();
        let starting = serde_json::json!({ TOPIC: quarter
            .iter()
            .map(|(p, o)| (p.to_string(), serde_json::json!(o)))
            .collect::<serde_json::Map<_, _>>() })
        .to_string();
        let mut cases: Vec<(u64, Option<&str>, u64)> =
            limits.iter().map(|max| (*max, None, produced)).collect();
        if let Some(first) = limits.first() {
            cases.insert(1, (*first, Some(starting.as_str()), quarter_rows));
        }
        for (max, start, expected) in cases {
            let mut secs = Vec::new();
            let mut rss = Vec::new();
            for run in 0..runs {
                let (s, r, rows) = run_weir(weir, &broker.bootstrap, max, start);
                assert_eq!(rows, expected, "weir read every event once");
                println!(
                    "{}",
                    serde_json::json!({"case": "kafka-ingest", "engine": "weir", "run": run,
                        "max_offsets_per_trigger": max, "backlog": expected, "rows": rows, "wall_s": round2(s),
                        "rows_per_s": (rows as f64 / s).round(), "peak_rss_mib": r / 1024})
                );
                secs.push(s);
                rss.push((r / 1024) as f64);
            }
            println!(
                "{}",
                serde_json::json!({"case": "kafka-ingest-median", "engine": "weir", "runs": runs,
                    "max_offsets_per_trigger": max, "backlog": expected,
                    "median_wall_s": round2(median(&secs)),
                    "median_rows_per_s": (expected as f64 / median(&secs)).round(),
                    "median_peak_rss_mib": median(&rss), "max_peak_rss_mib": rss.iter().copied().fold(0.0, f64::max)})
            );
        }
    }

    let home = std::env::var("HOME").unwrap_or_default();
    let python = Path::new(&home).join(".cache/weir-delta-venv/bin/python");
    let jars = Path::new(&home).join(".cache/weir-jars/spark-kafka");
    if !engines.contains("spark") {
        return;
    }
    if python.exists() && jars.is_dir() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/spark/bench_spark_kafka.py");
        let (secs, rss, stdout) = measured(
            std::process::Command::new("flock")
                .args(["-x", "/var/tmp/weir-spark.lock"])
                .arg(&python)
                .arg(&script)
                .args(["--bootstrap", &broker.bootstrap, "--topic", TOPIC])
                .args(["--max-offsets", "500000", "--repeat", &runs.to_string()])
                .arg("--jars")
                .arg(&jars),
        );
        let mut walls = Vec::new();
        for line in String::from_utf8_lossy(&stdout).lines() {
            println!("{line}");
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
                && v["engine"] == "spark"
                && let Some(w) = v["query_wall_s"].as_f64()
            {
                walls.push(w);
            }
        }
        if !walls.is_empty() {
            println!(
                "{}",
                serde_json::json!({"case": "kafka-ingest-median", "engine": "spark", "runs": walls.len(),
                    "max_offsets_per_trigger": 500_000, "median_wall_s": round2(median(&walls)),
                    "median_rows_per_s": (produced as f64 / median(&walls)).round()})
            );
        }
        println!(
            "{}",
            serde_json::json!({"case": "kafka-ingest", "engine": "spark", "process_wall_s": round2(secs),
                "peak_rss_mib": rss / 1024})
        );
    } else {
        eprintln!(
            "Spark skipped: needs {} and {} (bench/spark/kafka-setup.sh)",
            python.display(),
            jars.display()
        );
    }
}

/// One `available_now` run into a fresh table; (seconds, peak RSS KiB, rows read).
/// `starting`: Spark's per-partition starting offsets JSON (default `earliest`).
fn run_weir(
    weir: &str,
    bootstrap: &str,
    max_offsets: u64,
    starting: Option<&str>,
) -> (f64, u64, u64) {
    let starting = match starting {
        Some(json) => format!("'{json}'"),
        None => "\"earliest\"".into(),
    };
    let dir = tempfile::tempdir().expect("tmp");
    let pipeline = dir.path().join("pipeline.toml");
    std::fs::write(
        &pipeline,
        ingest_pipeline(bootstrap, max_offsets, &starting),
    )
    .expect("pipeline");
    let (secs, rss, stdout) = measured(
        std::process::Command::new(weir)
            .args(["run", "--headless"])
            .arg(&pipeline)
            .env("WEIR_LOG", "warn"),
    );
    let rows = String::from_utf8_lossy(&stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["numInputRows"].as_u64())
        .sum();
    (secs, rss, rows)
}

/// The latest offset of each partition of [`TOPIC`].
async fn latest_offsets(bootstrap: &str) -> Vec<(i32, i64)> {
    use weir::source::kafka::{KafkaClient, KafkaConnection, TopicPartition};
    let client = KafkaClient::connect(&KafkaConnection::plaintext(bootstrap))
        .await
        .expect("connect");
    let parts: Vec<TopicPartition> = client.topics().await.expect("topics")[TOPIC]
        .iter()
        .map(|p| TopicPartition::new(TOPIC, *p))
        .collect();
    client
        .offsets(parts.iter(), true)
        .await
        .expect("offsets")
        .into_iter()
        .map(|(tp, o)| (tp.partition, o))
        .collect()
}

/// The console's lag: what one measurement costs (`kafka-lag-measure`), and how long
/// after a record is produced the console's model has a lag that counts it
/// (`kafka-lag-visible`): the console's own follower (`console::follow::spawn_kafka_lag`,
/// every `KAFKA_LAG_INTERVAL`) on a topic of 4 partitions, one record produced at a
/// time at varying moments of the follower's interval; idle, then while a `weir run`
/// ingests the big topic in another process. A frame draws the model at most
/// `DATA_FRAME` + `FRAME` later.
fn bench_lag(rt: &tokio::runtime::Runtime, bootstrap: &str) {
    use weir::console::app::Report;
    use weir::console::event_loop::{DATA_FRAME, FRAME};
    use weir::console::follow::{KAFKA_LAG_INTERVAL, spawn_kafka_lag};
    use weir::source::kafka::lag::LagProbe;
    use weir::source::kafka::{
        KafkaClient, KafkaConnection, KafkaSource, KafkaSourceOptions, PartitionOffsets,
        Subscription, TopicPartition,
    };

    let samples: usize = std::env::var("WEIR_BENCH_KAFKA_LAG_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    // One measurement, on the big topic with nothing committed: the first one asks
    // every timestamp, the next ones only the latest offsets (nothing moved).
    let mut lag_ms = Vec::new();
    let mut first_ms = 0.0;
    rt.block_on(async {
        let mut source = KafkaSource::new(KafkaSourceOptions::new(
            KafkaConnection::plaintext(bootstrap),
            Subscription::Topics(vec![TOPIC.into()]),
        ))
        .expect("source");
        let committed: PartitionOffsets =
            (0..4).map(|p| (TopicPartition::new(TOPIC, p), 0)).collect();
        let mut probe = LagProbe::new();
        for i in 0..samples {
            let t = Instant::now();
            probe
                .measure(&mut source, Some(&committed))
                .await
                .expect("lag");
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if i == 0 {
                first_ms = ms;
            } else {
                lag_ms.push(ms);
            }
        }
    });
    println!(
        "{}",
        serde_json::json!({"case": "kafka-lag-measure", "partitions": 4, "first_ms": round2(first_ms),
            "median_ms": round2(median(&lag_ms)), "max_ms": round2(lag_ms.iter().copied().fold(0.0, f64::max)),
            "poll_interval_ms": KAFKA_LAG_INTERVAL.as_millis()})
    );

    const LAG_TOPIC: &str = "bench-lag";
    let dir = tempfile::tempdir().expect("tmp");
    let pipeline = dir.path().join("pipeline.toml");
    let text = format!(
        r#"
[[flow]]
name = "lag"
[flow.source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
subscribe = ["{LAG_TOPIC}"]
[flow.sink]
type = "delta"
path = "lake/lag"
"#
    );
    let spec = weir::pipeline::parse(&pipeline, &text).expect("pipeline");
    let weir::spec::SourceSpec::Kafka(kafka) = spec.flows[0].source.clone() else {
        panic!("a Kafka source")
    };
    let weir_bin = std::env::var("WEIR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_weir").into());
    for load in ["idle", "weir ingest running"] {
        let mut ingest = (load != "idle").then(|| {
            let d = tempfile::tempdir().expect("tmp");
            let p = d.path().join("pipeline.toml");
            std::fs::write(&p, ingest_pipeline(bootstrap, 500_000, "\"earliest\""))
                .expect("pipeline");
            let child = std::process::Command::new(&weir_bin)
                .args(["run", "--headless"])
                .arg(&p)
                .env("WEIR_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("weir run");
            (d, child)
        });
        if ingest.is_some() {
            // Into its first batch.
            std::thread::sleep(std::time::Duration::from_secs(3));
        }
        let visible: Vec<f64> = rt.block_on(async {
            let client = KafkaClient::connect(&KafkaConnection::plaintext(bootstrap))
                .await
                .expect("connect");
            client.create_topic(LAG_TOPIC, 4, 1).await.expect("topic");
            let (tx, mut rx) = tokio::sync::mpsc::channel(64);
            let follower = spawn_kafka_lag(
                "lag".into(),
                kafka.clone(),
                dir.path().join("checkpoint"),
                KAFKA_LAG_INTERVAL,
                tx,
            );
            let total = |r: &Report| match r {
                Report::KafkaLag { lag: Ok(l), .. } => {
                    Some(l.iter().map(|p| p.latest).sum::<i64>())
                }
                _ => None,
            };
            // The follower's first measurement.
            let mut seen = loop {
                if let Some(t) = rx.recv().await.as_ref().and_then(total) {
                    break t;
                }
            };
            let mut out = Vec::new();
            for i in 0..samples {
                // A different moment of the follower's interval each time.
                tokio::time::sleep(std::time::Duration::from_millis(
                    300 + (i as u64 * 137) % 500,
                ))
                .await;
                while let Ok(r) = rx.try_recv() {
                    if let Some(t) = total(&r) {
                        seen = t;
                    }
                }
                let tp = TopicPartition::new(LAG_TOPIC, (i % 4) as i32);
                let record = rskafka::record::Record {
                    key: Some(format!("k{i}").into_bytes()),
                    value: Some(br#"{"lag":1}"#.to_vec()),
                    headers: Default::default(),
                    timestamp: rskafka::chrono::Utc::now(),
                };
                client
                    .produce(
                        &tp,
                        vec![record],
                        rskafka::client::partition::Compression::NoCompression,
                    )
                    .await
                    .expect("produce");
                let t = Instant::now();
                loop {
                    let r = rx.recv().await.expect("the follower reports");
                    if let Some(total) = total(&r)
                        && total > seen
                    {
                        seen = total;
                        break;
                    }
                }
                out.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            drop(follower);
            out
        });
        if let Some((_dir, mut child)) = ingest.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let max = visible.iter().copied().fold(0.0, f64::max);
        let frame = (DATA_FRAME + FRAME).as_millis() as f64;
        println!(
            "{}",
            serde_json::json!({"case": "kafka-lag-visible", "load": load, "samples": visible.len(),
                "poll_interval_ms": KAFKA_LAG_INTERVAL.as_millis(),
                "median_ms": round2(median(&visible)), "max_ms": round2(max),
                "frame_bound_ms": frame, "max_with_frame_ms": round2(max + frame)})
        );
    }
}

/// A pipeline reading [`TOPIC`] with `available_now` into a Delta table.
fn ingest_pipeline(bootstrap: &str, max_offsets: u64, starting: &str) -> String {
    format!(
        r#"
[[flow]]
name = "bench_events"
trigger = "available_now"
[flow.source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
subscribe = ["{TOPIC}"]
starting_offsets = {starting}
max_offsets_per_trigger = {max_offsets}
format = "json"
schema = "{SCHEMA}"
[flow.sink]
type = "delta"
path = "lake/events"
"#
    )
}
