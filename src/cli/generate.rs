//! `weir generate DIR`: synthetic event files for drills and tests (see
//! [`crate::generate`] and `docs/generate.md`); `weir generate --kafka BOOTSTRAP
//! --topic T`: the same events produced into a Kafka topic, one record per line.
//!
//! stdout: one JSON line per file written (or batch produced) ([`crate::generate::FileStats`]);
//! stderr: a summary. Exit codes: 0 done (or stopped by SIGINT/SIGTERM between
//! files); 1 a file could not be written (or already exists: never overwritten);
//! 2 invalid flags.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use super::{EXIT_INVALID, report};
use crate::generate::{Drift, Format, GenerateSpec, Generator, Totals, write_atomically};
use crate::spec::HumanDuration;

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Directory the files land in (created if missing).
    #[arg(required_unless_present = "kafka")]
    pub dir: Option<PathBuf>,
    /// Produce the events into a Kafka topic instead (`host:port[,host:port]`): each
    /// "file" is one batch of records, one line (JSON object or CSV record) each, keyed
    /// by the event's `key` (malformed records have no key).
    #[arg(
        long,
        value_name = "BOOTSTRAP",
        conflicts_with = "dir",
        requires = "topic"
    )]
    pub kafka: Option<String>,
    /// The topic (`--kafka`); created with `--partitions` when missing.
    #[arg(long)]
    pub topic: Option<String>,
    /// Partitions of a topic `--kafka` creates.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// File format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
    /// Number of files to write, then exit. Default: 10 with `--once`, unlimited otherwise.
    #[arg(long)]
    pub files: Option<u64>,
    /// Write the files as fast as possible and exit (no pacing).
    #[arg(long)]
    pub once: bool,
    /// Files per second (pacing; fractions allowed, e.g. 0.5 = one file every 2 s).
    #[arg(long, default_value_t = 1.0)]
    pub rate: f64,
    /// Records per file (malformed and duplicate records included).
    #[arg(long, default_value_t = 1000)]
    pub rows: usize,
    /// Distinct values of `key`.
    #[arg(long, default_value_t = 100)]
    pub keys: u64,
    /// Event time of the first row: RFC 3339 (e.g. 2026-01-01T00:00:00Z) or `now`
    /// (`now` makes a run depend on the clock, so not reproducible).
    #[arg(long, default_value = "2026-01-01T00:00:00Z")]
    pub start: String,
    /// Event-time step between consecutive rows (e.g. "1s", "250ms").
    #[arg(long, default_value = "1s")]
    pub event_interval: String,
    /// Uniform jitter of on-time rows' event time, ± this (e.g. "2s"; 0 = none).
    #[arg(long, default_value = "0")]
    pub skew: String,
    /// Fraction of rows (0..1) that arrive late.
    #[arg(long, default_value_t = 0.0)]
    pub late_fraction: f64,
    /// Mean lateness of late rows (exponential distribution).
    #[arg(long, default_value = "1m")]
    pub lateness_mean: String,
    /// Largest lateness (the exponential is truncated here).
    #[arg(long, default_value = "10m")]
    pub max_lateness: String,
    /// Fraction of records (0..1) that repeat a recent record exactly.
    #[arg(long, default_value_t = 0.0)]
    pub duplicates: f64,
    /// Fraction of new records (0..1) written damaged (json, csv).
    #[arg(long, default_value_t = 0.0)]
    pub malformed: f64,
    /// 0-based index of the first file with the drifted schema.
    #[arg(long)]
    pub drift_at: Option<u64>,
    /// What drifts at `--drift-at`.
    #[arg(long, value_enum, default_value = "both")]
    pub drift: Drift,
    /// Seed of the random stream: the same flags and seed give the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// File name prefix: `<prefix>-<index:06>.<format>`.
    #[arg(long, default_value = "events")]
    pub prefix: String,
}

fn duration_ms(flag: &str, text: &str) -> Result<i64, String> {
    HumanDuration::parse(text)
        .map(|d| d.as_millis())
        .map_err(|e| format!("{flag}: {e}"))
}

impl GenerateArgs {
    /// The generator's spec, or a message naming the wrong flag.
    pub fn spec(&self) -> Result<GenerateSpec, String> {
        let start_ms = if self.start == "now" {
            crate::clock::now_ms()
        } else {
            chrono::DateTime::parse_from_rfc3339(&self.start)
                .map(|t| t.timestamp_millis())
                .map_err(|e| {
                    format!(
                        "--start {:?}: {e}; write RFC 3339 such as 2026-01-01T00:00:00Z, or now",
                        self.start
                    )
                })?
        };
        let spec = GenerateSpec {
            format: self.format,
            rows_per_file: self.rows,
            keys: self.keys,
            start_ms,
            event_interval_ms: duration_ms("--event-interval", &self.event_interval)?,
            skew_ms: duration_ms("--skew", &self.skew)?,
            late_fraction: self.late_fraction,
            lateness_mean_ms: duration_ms("--lateness-mean", &self.lateness_mean)?,
            max_lateness_ms: duration_ms("--max-lateness", &self.max_lateness)?,
            duplicate_ratio: self.duplicates,
            malformed_ratio: self.malformed,
            drift_at: self.drift_at,
            drift: self.drift,
            seed: self.seed,
            prefix: self.prefix.clone(),
        };
        spec.validate()?;
        if self.kafka.is_some() && self.format == Format::Parquet {
            return Err("--kafka produces one record per line: use --format json or csv".into());
        }
        if self.partitions < 1 {
            return Err(format!(
                "--partitions must be at least 1, got {}",
                self.partitions
            ));
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!(
                "--rate must be a positive number of files per second, got {}",
                self.rate
            ));
        }
        Ok(spec)
    }
}

pub fn run(args: &GenerateArgs) -> ExitCode {
    super::init_logging();
    let spec = match args.spec() {
        Ok(s) => s,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(generate(args, spec))
}

async fn generate(args: &GenerateArgs, spec: GenerateSpec) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    let limit = args.files.or(args.once.then_some(10));
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        eprintln!("error: cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    let kafka = match (&args.kafka, &args.topic) {
        (Some(bootstrap), Some(topic)) => {
            match KafkaOut::connect(bootstrap, topic, args.partitions).await {
                Ok(k) => Some(k),
                Err(e) => {
                    report(&e);
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    let dir = args.dir.clone().unwrap_or_default();
    let mut generator = Generator::new(spec);
    let mut totals = Totals::default();
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let mut index = 0u64;
    while limit.is_none_or(|n| index < n) {
        if !args.once {
            // Pace against the start, so slow writes do not drift the rate.
            let due = started + interval.mul_f64(index as f64);
            tokio::select! {
                _ = tokio::time::sleep_until(due.into()) => {}
                _ = int.recv() => break,
                _ = term.recv() => break,
            }
        }
        let file = match generator.next_file() {
            Ok(f) => f,
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        };
        if let Some(k) = &kafka {
            if let Err(e) = k.produce(&file.bytes, args.format == Format::Csv).await {
                report(&e);
                return ExitCode::FAILURE;
            }
        } else if dir.join(&file.name).exists() {
            // A rewritten file is not new input to a file source: never overwrite.
            eprintln!(
                "error: {} already exists; generate into another directory or with another --prefix",
                dir.join(&file.name).display()
            );
            return ExitCode::FAILURE;
        } else if let Err(e) = write_atomically(&dir, &file.name, &file.bytes) {
            report(&e);
            return ExitCode::FAILURE;
        }
        totals.add(&file.stats);
        if let Ok(line) = serde_json::to_string(&file.stats) {
            println!("{line}");
        }
        index += 1;
    }
    eprintln!(
        "weir generate: {} file(s), {} record(s) ({} late, {} duplicate, {} malformed), {:.1} MB into {} in {:.1} s",
        totals.files,
        totals.rows,
        totals.late,
        totals.duplicates,
        totals.malformed,
        totals.bytes as f64 / 1e6,
        match (&args.kafka, &args.topic) {
            (Some(b), Some(t)) => format!("kafka {b} topic {t}"),
            _ => dir.display().to_string(),
        },
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// Where `--kafka` produces: a topic's partitions.
struct KafkaOut {
    client: crate::source::kafka::KafkaClient,
    topic: String,
    partitions: i32,
}

impl KafkaOut {
    async fn connect(bootstrap: &str, topic: &str, partitions: i32) -> crate::Result<Self> {
        use crate::source::kafka::{KafkaClient, KafkaConnection};
        let client = KafkaClient::connect(&KafkaConnection::plaintext(bootstrap)).await?;
        let existing = client.topics().await?.get(topic).map(|p| p.len() as i32);
        let partitions = match existing {
            Some(n) => n,
            None => {
                client.create_topic(topic, partitions.max(1), 1).await?;
                partitions.max(1)
            }
        };
        Ok(KafkaOut {
            client,
            topic: topic.to_string(),
            partitions,
        })
    }

    /// One record per line of `bytes`, to the partition of its `key` (a stable hash;
    /// round robin for lines without one), one produce request per partition.
    async fn produce(&self, bytes: &[u8], csv_header: bool) -> crate::Result<()> {
        use crate::source::kafka::TopicPartition;
        use rskafka::client::partition::Compression;
        use rskafka::record::Record;
        let mut per_partition: Vec<Vec<Record>> = vec![Vec::new(); self.partitions as usize];
        let now = chrono::Utc::now();
        for (i, line) in bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .skip(usize::from(csv_header))
            .enumerate()
        {
            let key = if csv_header {
                // CSV: event_id, key, ... (docs/generate.md).
                std::str::from_utf8(line)
                    .ok()
                    .and_then(|l| l.split(',').nth(1))
                    .map(str::to_string)
            } else {
                serde_json::from_slice::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| {
                        v.get("key")
                            .map(|k| k.to_string().trim_matches('"').to_string())
                    })
            };
            let partition = match &key {
                Some(k) => (fnv1a(k.as_bytes()) % self.partitions as u64) as usize,
                None => i % self.partitions as usize,
            };
            per_partition[partition].push(Record {
                key: key.map(String::into_bytes),
                value: Some(line.to_vec()),
                headers: Default::default(),
                timestamp: now,
            });
        }
        for (p, records) in per_partition.into_iter().enumerate() {
            // Requests well below the broker's 1 MiB default message size.
            let mut chunk = Vec::new();
            let mut size = 0usize;
            for r in records {
                size += r.value.as_ref().map_or(0, Vec::len) + 64;
                chunk.push(r);
                if size > 512 * 1024 {
                    self.client
                        .produce(
                            &TopicPartition::new(&self.topic, p as i32),
                            std::mem::take(&mut chunk),
                            Compression::NoCompression,
                        )
                        .await?;
                    size = 0;
                }
            }
            if !chunk.is_empty() {
                self.client
                    .produce(
                        &TopicPartition::new(&self.topic, p as i32),
                        chunk,
                        Compression::NoCompression,
                    )
                    .await?;
            }
        }
        Ok(())
    }
}

/// FNV-1a, a stable hash of a key to its partition.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}
