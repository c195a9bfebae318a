//! Synthetic event files for drills and tests (`weir generate`).
//!
//! A [`Generator`] turns a [`GenerateSpec`] and a seed into a sequence of files,
//! each a [`GeneratedFile`] (name, bytes, and what it holds). Everything random
//! comes from one ChaCha8 stream seeded with `seed`, and nothing reads the wall
//! clock, so the same spec and seed give the same bytes on every machine.
//!
//! The rows: `event_id BIGINT, key STRING, event_time TIMESTAMP, amount DOUBLE`
//! (plus `region STRING` from the drift file on). Fresh rows take consecutive
//! `event_id`s from 0; row `n` sits on the generator's event-time clock at
//! `start + n * event_interval`.
//!
//! - **on time**: event time = clock + a uniform jitter in `[-skew, +skew]`;
//! - **late** (probability `late_fraction`): event time = clock - lateness, the
//!   lateness drawn from an exponential distribution of mean `lateness_mean`
//!   truncated at `max_lateness` (inverse-CDF sampling, so no value is clamped);
//! - **duplicate** (probability `duplicate_ratio`): an exact copy of one of the
//!   last [`RECENT`] rows, `event_id` included, so a flow deduplicating on
//!   `event_id` removes it;
//! - **malformed** (probability `malformed_ratio`): a fresh row's line is
//!   damaged. JSON: cut in the middle, so a reader turns it into a corrupt record.
//!   CSV: invalid UTF-8 in the key, so a reader keeps the row and rescues the key
//!   (its bytes as ISO-8859-1 in `_rescued_data`, docs/sources.md). Not available for Parquet.
//! - **drift** from file `drift_at` on: a new column `region` and/or `amount`
//!   changing type from a number to a string such as `"12.50 EUR"`.
//!
//! Files are written atomically and durably (`crate::durable`): under a name starting
//! with `.`, which file sources skip, fsynced, renamed, and the directory fsynced.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::error::{Error, Result};

/// How many recent rows a duplicate is drawn from.
pub const RECENT: usize = 1024;

/// File format of generated files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Json,
    Csv,
    Parquet,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        }
    }
}

/// What changes at the drift file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Drift {
    /// A new column `region STRING`.
    AddColumn,
    /// `amount` becomes a string such as `"12.50 EUR"`.
    ChangeType,
    /// Both.
    Both,
}

impl Drift {
    fn adds_column(self) -> bool {
        matches!(self, Drift::AddColumn | Drift::Both)
    }
    fn changes_type(self) -> bool {
        matches!(self, Drift::ChangeType | Drift::Both)
    }
}

/// Everything that shapes the generated files. Times are in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerateSpec {
    pub format: Format,
    /// Lines (records) per file, malformed and duplicate ones included.
    pub rows_per_file: usize,
    /// Distinct values of `key` (`k00000` ..), drawn uniformly.
    pub keys: u64,
    /// Event time of the first fresh row (ms since the epoch).
    pub start_ms: i64,
    /// Event-time distance between consecutive fresh rows (ms).
    pub event_interval_ms: i64,
    /// Uniform jitter of on-time rows, `[-skew, +skew]` (ms).
    pub skew_ms: i64,
    /// Probability that a fresh row is late.
    pub late_fraction: f64,
    /// Mean of the (truncated) exponential lateness (ms).
    pub lateness_mean_ms: i64,
    /// Largest lateness (ms).
    pub max_lateness_ms: i64,
    /// Probability that a row is a copy of a recent row.
    pub duplicate_ratio: f64,
    /// Probability that a fresh row's line is damaged.
    pub malformed_ratio: f64,
    /// 0-based index of the first file with the drifted schema.
    pub drift_at: Option<u64>,
    pub drift: Drift,
    pub seed: u64,
    /// File names are `<prefix>-<index:06>.<ext>`.
    pub prefix: String,
}

impl Default for GenerateSpec {
    fn default() -> Self {
        GenerateSpec {
            format: Format::Json,
            rows_per_file: 1000,
            keys: 100,
            start_ms: 1_767_225_600_000, // 2026-01-01T00:00:00Z
            event_interval_ms: 1000,
            skew_ms: 0,
            late_fraction: 0.0,
            lateness_mean_ms: 60_000,
            max_lateness_ms: 600_000,
            duplicate_ratio: 0.0,
            malformed_ratio: 0.0,
            drift_at: None,
            drift: Drift::Both,
            seed: 0,
            prefix: "events".into(),
        }
    }
}

impl GenerateSpec {
    /// Checks ranges and combinations; the message names the flag.
    pub fn validate(&self) -> std::result::Result<(), String> {
        for (name, p) in [
            ("--late-fraction", self.late_fraction),
            ("--duplicates", self.duplicate_ratio),
            ("--malformed", self.malformed_ratio),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} must be between 0 and 1, got {p}"));
            }
        }
        if self.rows_per_file == 0 {
            return Err("--rows must be at least 1".into());
        }
        if self.keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        if self.late_fraction > 0.0 && (self.lateness_mean_ms <= 0 || self.max_lateness_ms <= 0) {
            return Err(
                "--lateness-mean and --max-lateness must be positive with --late-fraction".into(),
            );
        }
        if self.format == Format::Parquet && self.malformed_ratio > 0.0 {
            return Err("--malformed is for json and csv: a Parquet file has no lines to damage (truncate a file instead)".into());
        }
        if self.prefix.starts_with(['.', '_']) || self.prefix.contains('/') {
            return Err("--prefix must not start with '.' or '_' (file sources skip such names) nor contain '/'".into());
        }
        Ok(())
    }
}

/// One generated row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub event_id: i64,
    pub key: u64,
    pub event_time_ms: i64,
    /// Cents, so every rendering is exact.
    pub amount_cents: i64,
}

/// What one file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileStats {
    pub index: u64,
    pub file: String,
    /// Lines (records) written, malformed and duplicates included.
    pub rows: u64,
    pub late: u64,
    pub duplicates: u64,
    pub malformed: u64,
    pub drifted: bool,
    pub bytes: u64,
    /// Smallest and largest event time of the file's well-formed rows (ms).
    pub min_event_time_ms: i64,
    pub max_event_time_ms: i64,
}

/// A file before it is written.
#[derive(Debug, Clone)]
pub struct GeneratedFile {
    pub name: String,
    pub bytes: Vec<u8>,
    pub stats: FileStats,
}

/// Totals over files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub files: u64,
    pub rows: u64,
    pub late: u64,
    pub duplicates: u64,
    pub malformed: u64,
    pub bytes: u64,
}

impl Totals {
    pub fn add(&mut self, s: &FileStats) {
        self.files += 1;
        self.rows += s.rows;
        self.late += s.late;
        self.duplicates += s.duplicates;
        self.malformed += s.malformed;
        self.bytes += s.bytes;
    }
}

/// The deterministic file generator.
pub struct Generator {
    spec: GenerateSpec,
    rng: ChaCha8Rng,
    next_event_id: i64,
    next_index: u64,
    recent: VecDeque<Row>,
}

enum Line {
    Good(Row),
    Malformed(Row),
}

impl Generator {
    pub fn new(spec: GenerateSpec) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(spec.seed);
        Generator {
            spec,
            rng,
            next_event_id: 0,
            next_index: 0,
            recent: VecDeque::with_capacity(RECENT),
        }
    }

    pub fn spec(&self) -> &GenerateSpec {
        &self.spec
    }

    /// The event-time clock of fresh row `event_id` (ms).
    pub fn clock_ms(spec: &GenerateSpec, event_id: i64) -> i64 {
        spec.start_ms
            .saturating_add(event_id.saturating_mul(spec.event_interval_ms))
    }

    fn lateness_ms(&mut self) -> i64 {
        // Inverse CDF of the exponential truncated at max: F(x) = (1 - e^(-x/m)) / (1 - e^(-M/m)).
        let mean = self.spec.lateness_mean_ms as f64;
        let max = self.spec.max_lateness_ms as f64;
        let u: f64 = self.rng.random();
        let x = -mean * (1.0 - u * (1.0 - (-max / mean).exp())).ln();
        (x.round() as i64).clamp(1, self.spec.max_lateness_ms)
    }

    fn fresh_row(&mut self, stats: &mut FileStats) -> Row {
        let event_id = self.next_event_id;
        self.next_event_id += 1;
        let clock = Self::clock_ms(&self.spec, event_id);
        let key = self.rng.random_range(0..self.spec.keys);
        let amount_cents = self.rng.random_range(100..100_000);
        let event_time_ms =
            if self.spec.late_fraction > 0.0 && self.rng.random_bool(self.spec.late_fraction) {
                stats.late += 1;
                clock - self.lateness_ms()
            } else if self.spec.skew_ms > 0 {
                clock
                    + self
                        .rng
                        .random_range(-self.spec.skew_ms..=self.spec.skew_ms)
            } else {
                clock
            };
        Row {
            event_id,
            key,
            event_time_ms,
            amount_cents,
        }
    }

    fn next_line(&mut self, stats: &mut FileStats) -> Line {
        if self.spec.duplicate_ratio > 0.0
            && !self.recent.is_empty()
            && self.rng.random_bool(self.spec.duplicate_ratio)
        {
            let i = self.rng.random_range(0..self.recent.len());
            stats.duplicates += 1;
            return Line::Good(self.recent[i].clone());
        }
        let row = self.fresh_row(stats);
        if self.spec.malformed_ratio > 0.0 && self.rng.random_bool(self.spec.malformed_ratio) {
            stats.malformed += 1;
            return Line::Malformed(row);
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(row.clone());
        Line::Good(row)
    }

    /// The next file: its name, bytes and statistics.
    pub fn next_file(&mut self) -> Result<GeneratedFile> {
        let index = self.next_index;
        self.next_index += 1;
        let drifted = self.spec.drift_at.is_some_and(|at| index >= at);
        let name = format!(
            "{}-{index:06}.{}",
            self.spec.prefix,
            self.spec.format.extension()
        );
        let mut stats = FileStats {
            index,
            file: name.clone(),
            drifted,
            min_event_time_ms: i64::MAX,
            max_event_time_ms: i64::MIN,
            ..Default::default()
        };
        let lines: Vec<Line> = (0..self.spec.rows_per_file)
            .map(|_| self.next_line(&mut stats))
            .collect();
        for line in &lines {
            if let Line::Good(r) = line {
                stats.min_event_time_ms = stats.min_event_time_ms.min(r.event_time_ms);
                stats.max_event_time_ms = stats.max_event_time_ms.max(r.event_time_ms);
            }
        }
        stats.rows = lines.len() as u64;
        let shape = Shape {
            region: drifted && self.spec.drift.adds_column(),
            amount_text: drifted && self.spec.drift.changes_type(),
        };
        let bytes = match self.spec.format {
            Format::Json => render_json(&lines, shape),
            Format::Csv => render_csv(&lines, shape)?,
            Format::Parquet => render_parquet(&lines, shape)?,
        };
        stats.bytes = bytes.len() as u64;
        Ok(GeneratedFile { name, bytes, stats })
    }
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    region: bool,
    amount_text: bool,
}

const REGIONS: [&str; 4] = ["north", "south", "east", "west"];

fn key_text(key: u64) -> String {
    format!("k{key:05}")
}

fn time_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn amount_text(cents: i64, as_string: bool) -> String {
    let number = format!("{}.{:02}", cents / 100, cents % 100);
    if as_string {
        format!("{number} EUR")
    } else {
        number
    }
}

fn region_of(row: &Row) -> &'static str {
    REGIONS[(row.event_id.unsigned_abs() % REGIONS.len() as u64) as usize]
}

fn render_json(lines: &[Line], shape: Shape) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len() * 96);
    for line in lines {
        let (row, damaged) = match line {
            Line::Good(r) => (r, false),
            Line::Malformed(r) => (r, true),
        };
        let amount = if shape.amount_text {
            format!("\"{}\"", amount_text(row.amount_cents, true))
        } else {
            amount_text(row.amount_cents, false)
        };
        let mut text = format!(
            "{{\"event_id\":{},\"key\":\"{}\",\"event_time\":\"{}\",\"amount\":{amount}",
            row.event_id,
            key_text(row.key),
            time_text(row.event_time_ms)
        );
        if shape.region {
            text.push_str(&format!(",\"region\":\"{}\"", region_of(row)));
        }
        text.push('}');
        if damaged {
            // Cut inside the object: never valid JSON.
            text.truncate(text.len() / 2);
        }
        out.extend_from_slice(text.as_bytes());
        out.push(b'\n');
    }
    out
}

fn render_csv(lines: &[Line], shape: Shape) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(lines.len() * 64);
    let mut header = vec!["event_id", "key", "event_time", "amount"];
    if shape.region {
        header.push("region");
    }
    let csv_err = |e: std::io::Error| Error::io("generated csv", e);
    {
        let mut w = csv::Writer::from_writer(&mut out);
        w.write_record(&header).map_err(|e| csv_err(e.into()))?;
        w.flush().map_err(csv_err)?;
    }
    for line in lines {
        let (row, damaged) = match line {
            Line::Good(r) => (r, false),
            Line::Malformed(r) => (r, true),
        };
        let mut record: Vec<Vec<u8>> = vec![
            row.event_id.to_string().into_bytes(),
            key_text(row.key).into_bytes(),
            time_text(row.event_time_ms).into_bytes(),
            amount_text(row.amount_cents, shape.amount_text).into_bytes(),
        ];
        if shape.region {
            record.push(region_of(row).as_bytes().to_vec());
        }
        if damaged {
            // Bytes that are not UTF-8: the reader rescues the key, keeps the row.
            record[1].splice(0..0, [0xFF, 0xFE]);
        }
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(&mut out);
        w.write_record(&record).map_err(|e| csv_err(e.into()))?;
        w.flush().map_err(csv_err)?;
    }
    Ok(out)
}

fn render_parquet(lines: &[Line], shape: Shape) -> Result<Vec<u8>> {
    let rows: Vec<&Row> = lines
        .iter()
        .map(|l| match l {
            Line::Good(r) | Line::Malformed(r) => r,
        })
        .collect();
    let mut fields = vec![
        Field::new("event_id", DataType::Int64, true),
        Field::new("key", DataType::Utf8, true),
        Field::new(
            "event_time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| r.event_id),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| key_text(r.key)),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                rows.iter().map(|r| r.event_time_ms * 1000),
            )
            .with_timezone("UTC"),
        ),
    ];
    if shape.amount_text {
        fields.push(Field::new("amount", DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| amount_text(r.amount_cents, true)),
        )));
    } else {
        fields.push(Field::new("amount", DataType::Float64, true));
        columns.push(Arc::new(Float64Array::from_iter_values(
            rows.iter().map(|r| r.amount_cents as f64 / 100.0),
        )));
    }
    if shape.region {
        fields.push(Field::new("region", DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| region_of(r)),
        )));
    }
    let arrow_err = |source| Error::Arrow {
        context: "building a generated Parquet file".into(),
        source,
    };
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(arrow_err)?;
    let mut out = Vec::new();
    let parquet_err = |e: parquet::errors::ParquetError| {
        Error::io("generated parquet", std::io::Error::other(e.to_string()))
    };
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None)
        .map_err(parquet_err)?;
    writer.write(&batch).map_err(parquet_err)?;
    writer.close().map_err(parquet_err)?;
    Ok(out)
}

/// Writes a file into `dir` atomically and durably ([`crate::durable::write_atomic`]:
/// a hidden temp file, fsync, rename, fsync of `dir`). Returns its path.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let target = dir.join(name);
    crate::durable::write_atomic(&target, bytes).map_err(|e| Error::io(&target, e))?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn files(spec: &GenerateSpec, n: usize) -> Vec<GeneratedFile> {
        let mut g = Generator::new(spec.clone());
        (0..n).map(|_| g.next_file().unwrap()).collect()
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        for format in [Format::Json, Format::Csv, Format::Parquet] {
            let spec = GenerateSpec {
                format,
                rows_per_file: 300,
                late_fraction: 0.2,
                duplicate_ratio: 0.1,
                malformed_ratio: if format == Format::Parquet { 0.0 } else { 0.05 },
                skew_ms: 500,
                drift_at: Some(2),
                seed: 7,
                ..Default::default()
            };
            let a = files(&spec, 4);
            let b = files(&spec, 4);
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.name, y.name);
                assert_eq!(x.bytes, y.bytes, "{format:?} {}", x.name);
            }
            let c = files(&GenerateSpec { seed: 8, ..spec }, 4);
            assert_ne!(a[0].bytes, c[0].bytes, "{format:?}");
        }
    }

    #[test]
    fn ratios_are_within_tolerance() {
        let spec = GenerateSpec {
            rows_per_file: 10_000,
            late_fraction: 0.1,
            duplicate_ratio: 0.05,
            malformed_ratio: 0.02,
            seed: 3,
            ..Default::default()
        };
        let mut totals = Totals::default();
        for f in files(&spec, 5) {
            totals.add(&f.stats);
            // Counted lines equal the file's lines.
            let text = String::from_utf8(f.bytes).unwrap();
            assert_eq!(text.lines().count() as u64, f.stats.rows);
            let broken = text
                .lines()
                .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_err())
                .count() as u64;
            assert_eq!(broken, f.stats.malformed);
        }
        let rows = totals.rows as f64;
        let dup = totals.duplicates as f64 / rows;
        assert!((dup - 0.05).abs() < 0.005, "duplicates {dup}");
        let fresh = rows - totals.duplicates as f64;
        let bad = totals.malformed as f64 / fresh;
        assert!((bad - 0.02).abs() < 0.003, "malformed {bad}");
        let late = totals.late as f64 / fresh;
        assert!((late - 0.1).abs() < 0.008, "late {late}");
    }

    /// Lateness is read back from the bytes: with no skew, an on-time row's event time is
    /// its clock (`start + event_id * interval`); a late row is behind it.
    #[test]
    fn lateness_follows_the_truncated_exponential() {
        let spec = GenerateSpec {
            rows_per_file: 20_000,
            late_fraction: 0.2,
            lateness_mean_ms: 30_000,
            max_lateness_ms: 60_000,
            seed: 11,
            ..Default::default()
        };
        let mut lateness = Vec::new();
        let mut rows = 0usize;
        for f in files(&spec, 2) {
            for line in String::from_utf8(f.bytes).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let id = v["event_id"].as_i64().unwrap();
                let t = chrono::DateTime::parse_from_rfc3339(v["event_time"].as_str().unwrap())
                    .unwrap()
                    .timestamp_millis();
                let behind = Generator::clock_ms(&spec, id) - t;
                assert!((0..=60_000).contains(&behind), "{behind}");
                if behind > 0 {
                    lateness.push(behind as f64);
                }
                rows += 1;
            }
        }
        let fraction = lateness.len() as f64 / rows as f64;
        assert!((fraction - 0.2).abs() < 0.01, "late fraction {fraction}");
        // Mean of an exponential (mean m) truncated at M: m - M e^(-M/m) / (1 - e^(-M/m)).
        let (m, big) = (30_000.0f64, 60_000.0f64);
        let expected = m - big * (-big / m).exp() / (1.0 - (-big / m).exp());
        let mean = lateness.iter().sum::<f64>() / lateness.len() as f64;
        assert!(
            (mean - expected).abs() / expected < 0.03,
            "mean {mean} vs {expected}"
        );
        // Median of the truncated exponential: F(x) = 1/2.
        let median_expected = -m * (1.0 - 0.5 * (1.0 - (-big / m).exp())).ln();
        lateness.sort_by(f64::total_cmp);
        let median = lateness[lateness.len() / 2];
        assert!(
            (median - median_expected).abs() / median_expected < 0.05,
            "median {median} vs {median_expected}"
        );
    }

    #[test]
    fn drift_starts_at_the_requested_file() {
        for format in [Format::Json, Format::Csv] {
            let spec = GenerateSpec {
                format,
                rows_per_file: 5,
                drift_at: Some(3),
                ..Default::default()
            };
            for f in files(&spec, 5) {
                let text = String::from_utf8(f.bytes).unwrap();
                let drifted = f.stats.index >= 3;
                assert_eq!(f.stats.drifted, drifted);
                assert_eq!(text.contains("region"), drifted, "{format:?} {}", f.name);
                assert_eq!(text.contains(" EUR"), drifted, "{format:?} {}", f.name);
            }
        }
        let spec = GenerateSpec {
            format: Format::Parquet,
            rows_per_file: 5,
            drift_at: Some(1),
            drift: Drift::AddColumn,
            ..Default::default()
        };
        let schemas: Vec<_> = files(&spec, 2)
            .into_iter()
            .map(|f| {
                let mut file = tempfile::tempfile().unwrap();
                file.write_all(&f.bytes).unwrap();
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .schema()
                    .clone()
            })
            .collect();
        assert!(schemas[0].field_with_name("region").is_err());
        assert!(schemas[1].field_with_name("region").is_ok());
        assert_eq!(
            schemas[1].field_with_name("amount").unwrap().data_type(),
            &DataType::Float64
        );
    }

    #[test]
    fn invalid_specs_name_the_flag() {
        let bad = GenerateSpec {
            format: Format::Parquet,
            malformed_ratio: 0.1,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("--malformed"));
        let bad = GenerateSpec {
            duplicate_ratio: 1.5,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("--duplicates"));
        let bad = GenerateSpec {
            prefix: "_x".into(),
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("--prefix"));
    }
}
