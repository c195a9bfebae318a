//! `weir generate DIR`: synthetic event files for drills and tests (see
//! [`crate::generate`] and `docs/generate.md`).
//!
//! stdout: one JSON line per file written ([`crate::generate::FileStats`]);
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
    pub dir: PathBuf,
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
        if args.dir.join(&file.name).exists() {
            // A rewritten file is not new input to a file source: never overwrite.
            eprintln!(
                "error: {} already exists; generate into another directory or with another --prefix",
                args.dir.join(&file.name).display()
            );
            return ExitCode::FAILURE;
        }
        if let Err(e) = write_atomically(&args.dir, &file.name, &file.bytes) {
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
        args.dir.display(),
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
