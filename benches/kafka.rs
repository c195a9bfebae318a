//! Kafka ingest benchmark (`cargo bench --bench kafka`), issue 19.
//!
//! A real broker (Apache Kafka 4.4, KRaft, loopback, `BENCH_JVM_OPTS`) is started;
//! `weir generate --kafka` produces `WEIR_BENCH_KAFKA_EVENTS` (default 3,400,000)
//! JSON events (`event_id, key, event_time, amount`; 10,000 keys) into a 4-partition
//! topic. Then, on that same topic:
//!
//! 1. **weir**: the release binary, `weir run --headless` with `available_now`,
//!    `format = "json"` and a given schema, into a fresh Delta table, with
//!    `max_offsets_per_trigger` = 500,000 and = 100,000 (peak memory follows the
//!    bound, not the backlog). Wall time and peak RSS (getrusage of the child).
//! 2. **Spark** (when `bench/spark/kafka-setup.sh` made the PySpark 4.2.0 venv
//!    `~/.cache/weir-delta-venv` and the jars of `jars/spark-kafka/pom.xml`):
//!    `bench/spark/bench_spark_kafka.py`, Spark's Kafka source with `from_json` and
//!    `maxOffsetsPerTrigger` = 500,000, `availableNow`, `local[2]`, into Delta, under
//!    `/var/tmp/weir-spark.lock`.
//!
//! Prints one JSON line per measurement. `WEIR_BENCH_RUNS` (default 2) runs each.
//! `WEIR_BIN` names the weir binary to measure (default: this build's);
//! `WEIR_BENCH_KAFKA_ENGINES` = `weir`, `spark` or `weir,spark` (default).

use std::path::Path;
use std::time::Instant;

use weir::source::kafka::broker::{BENCH_JVM_OPTS, LocalBroker};

const SCHEMA: &str = "event_id BIGINT, key STRING, event_time TIMESTAMP, amount DOUBLE";
const TOPIC: &str = "bench-events";

/// Runs `cmd` as a child of a fresh process so getrusage(RUSAGE_CHILDREN) is this
/// child's alone; returns (seconds, max RSS in KiB, stdout).
fn measured(cmd: &mut std::process::Command) -> (f64, u64, Vec<u8>) {
    let start = Instant::now();
    let exe = std::env::current_exe().expect("current exe");
    let mut wrapper = std::process::Command::new(exe);
    wrapper
        .arg("--measure")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapper.env(k, v);
        }
    }
    let out = wrapper
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("measure");
    let secs = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "benchmarked command failed: {stderr}");
    let rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("MAXRSS_KIB "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (secs, rss, out.stdout)
}

fn measure_mode(args: &[String]) -> ! {
    let status = std::process::Command::new(&args[0])
        .args(&args[1..])
        .status()
        .expect("spawn");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("rusage");
    eprintln!("MAXRSS_KIB {}", usage.max_rss());
    std::process::exit(status.code().unwrap_or(1));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure") {
        measure_mode(&args[1..]);
    }
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

    // What the console's lag follower does twice a second: the latest offsets of every
    // partition and the timestamps of the newest and the oldest unread record.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut lag_ms = Vec::new();
    rt.block_on(async {
        use weir::source::kafka::{
            KafkaConnection, KafkaSource, KafkaSourceOptions, Subscription, lag,
        };
        let mut source = KafkaSource::new(KafkaSourceOptions::new(
            KafkaConnection::plaintext(&broker.bootstrap),
            Subscription::Topics(vec![TOPIC.into()]),
        ))
        .expect("source");
        let committed: weir::source::kafka::PartitionOffsets = (0..4)
            .map(|p| (weir::source::kafka::TopicPartition::new(TOPIC, p), 0))
            .collect();
        for _ in 0..20 {
            let t = Instant::now();
            lag::measure(&mut source, Some(&committed))
                .await
                .expect("lag");
            lag_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    });
    lag_ms.sort_by(f64::total_cmp);
    println!(
        "{}",
        serde_json::json!({"case": "kafka-lag-measure", "partitions": 4, "median_ms": round2(lag_ms[lag_ms.len() / 2]),
            "max_ms": round2(lag_ms[lag_ms.len() - 1]), "poll_interval_ms": 500, "frame_ms": 250})
    );

    // `WEIR_BENCH_KAFKA_ENGINES`: `weir,spark` (default), or one of them.
    let engines = std::env::var("WEIR_BENCH_KAFKA_ENGINES").unwrap_or_else(|_| "weir,spark".into());
    for max in [500_000u64, 100_000] {
        if !engines.contains("weir") {
            break;
        }
        for run in 0..runs {
            let (secs, rss, rows) = run_weir(weir, &broker.bootstrap, max);
            assert_eq!(rows, produced, "weir read every event once");
            println!(
                "{}",
                serde_json::json!({"case": "kafka-ingest", "engine": "weir", "run": run,
                    "max_offsets_per_trigger": max, "rows": rows, "wall_s": round2(secs),
                    "rows_per_s": (rows as f64 / secs).round(), "peak_rss_mib": rss / 1024})
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
        for line in String::from_utf8_lossy(&stdout).lines() {
            println!("{line}");
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

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// One `available_now` run into a fresh table; (seconds, peak RSS KiB, rows read).
fn run_weir(weir: &str, bootstrap: &str, max_offsets: u64) -> (f64, u64, u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let pipeline = dir.path().join("pipeline.toml");
    std::fs::write(
        &pipeline,
        format!(
            r#"
[[flow]]
name = "bench_events"
trigger = "available_now"
[flow.source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
subscribe = ["{TOPIC}"]
starting_offsets = "earliest"
max_offsets_per_trigger = {max_offsets}
format = "json"
schema = "{SCHEMA}"
[flow.sink]
type = "delta"
path = "lake/events"
"#
        ),
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
