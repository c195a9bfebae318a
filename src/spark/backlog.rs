//! A Spark source's backlog. Kafka, Delta and rate sources: Spark's
//! `latestOffset` against the batch's `endOffset` ([`OffsetBacklog`]). A file
//! source: the files in its directory that its source log does not hold yet. Spark's `FileStreamSource` reports no backlog in
//! its progress (Auto Loader does, as `numFilesOutstanding` /
//! `numBytesOutstanding`); weir lists the directory, when it is reachable
//! from here (directly or through `--path-map`), and fills the same metrics.
//!
//! For batch N planned at time T the backlog is the files that had arrived by
//! T (modification time at or before T) minus the files the log assigns to
//! batches up to N, counted among the files present now:
//! `|{f : mtime(f) <= T}| - |{f : batch(f) <= N}|`, both by binary search over
//! sorted arrays, so a long history costs O(log n) per record. Files Spark
//! ignores (names starting with `.` or `_`) are not counted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::checkpoint::{FileEntry, SourceLog, list_batches};

/// Entries kept when listing a directory; a larger one is counted up to here (and said so).
const MAX_FILES: usize = 2_000_000;

/// Maps Spark's paths (`file:/x`, `s3://b/x`, `dbfs:/x`) to local paths.
#[derive(Debug, Clone, Default)]
pub struct PathMap {
    pub rules: Vec<(String, PathBuf)>,
}

impl PathMap {
    /// `FROM=TO` rules, as given on the command line.
    pub fn parse(rules: &[String]) -> Result<PathMap, String> {
        let mut out = Vec::new();
        for r in rules {
            let (from, to) = r.split_once('=').ok_or_else(|| {
                format!("--path-map {r:?}: expected FROM=TO, e.g. s3://bucket/landing=/mnt/landing")
            })?;
            if from.is_empty() || to.is_empty() {
                return Err(format!("--path-map {r:?}: FROM and TO must not be empty"));
            }
            out.push((from.trim_end_matches('/').to_string(), PathBuf::from(to)));
        }
        // Longest prefix first.
        out.sort_by_key(|(f, _)| std::cmp::Reverse(f.len()));
        Ok(PathMap { rules: out })
    }

    /// The local path of a Spark path; `None` when it is remote and unmapped.
    pub fn local(&self, spark_path: &str) -> Option<PathBuf> {
        for (from, to) in &self.rules {
            if let Some(rest) = spark_path.strip_prefix(from.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return Some(to.join(rest.trim_start_matches('/')));
            }
        }
        // A rule written without the scheme also matches `file:` paths.
        let local = spark_path
            .strip_prefix("file://")
            .or_else(|| spark_path.strip_prefix("file:"))
            .or_else(|| spark_path.starts_with('/').then_some(spark_path))?;
        let local = if local.starts_with("//") {
            &local[1..]
        } else {
            local
        };
        for (from, to) in &self.rules {
            if let Some(rest) = local.strip_prefix(from.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return Some(to.join(rest.trim_start_matches('/')));
            }
        }
        Some(PathBuf::from(local))
    }
}

/// The path inside a progress description: `FileStreamSource[file:/x]` -> `file:/x`.
pub fn described_path(description: &str) -> Option<&str> {
    let start = description.find('[')? + 1;
    let inner = &description[start..];
    let inner = inner.strip_suffix(']').unwrap_or(inner);
    (inner.contains(':') || inner.starts_with('/')).then_some(inner)
}

/// Delta's `DeltaSourceOffset.END_INDEX` (`Long.MaxValue - 100`): the version was read whole.
const DELTA_END_INDEX: i64 = i64::MAX - 100;

/// A source's backlog from its offsets in a progress record: the latest offset Spark saw
/// when it planned the batch (`sources[].latestOffset`) against the batch's `endOffset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetBacklog {
    /// Kafka: `latest - end` per partition (a partition the end offset lacks counts from 0),
    /// summed, and Spark's own min/max over partitions.
    Kafka {
        sum: u64,
        min: u64,
        max: u64,
        partitions: u64,
    },
    /// Delta: table versions not fully read (`reservoirVersion`/`index` of both offsets).
    Delta { versions: u64 },
    /// The rate source: `(latest - end)` seconds at `rowsPerSecond` from its description.
    Rate { rows: u64 },
}

/// A Delta source offset's position: the last version read whole and whether a later one
/// was read in part; `None` when the JSON is not a `DeltaSourceOffset`.
fn delta_position(v: &serde_json::Value) -> Option<(i64, bool)> {
    let m = v.as_object()?;
    let version = m.get("reservoirVersion")?.as_i64()?;
    let index = m.get("index").and_then(|i| i.as_i64()).unwrap_or(-1);
    Some(if index == -1 {
        // Before the first file of `version`: every earlier version is read.
        (version - 1, false)
    } else if index >= DELTA_END_INDEX {
        (version, false)
    } else {
        // Inside `version` (or the starting snapshot at `version`).
        (version - 1, true)
    })
}

/// `rowsPerSecond=N` in a rate source's description (`RateStreamV2[rowsPerSecond=20, ...`).
fn rate_rows_per_second(description: &str) -> Option<u64> {
    let at = description.find("rowsPerSecond=")? + "rowsPerSecond=".len();
    let digits: String = description[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

impl OffsetBacklog {
    /// The backlog of a source, from its description and offsets; `None` when Spark recorded
    /// no latest offset (`null`: OSS Delta 4.4, a source without `ReportLatestOffset`) or the
    /// offsets are not of a kind weir knows.
    pub fn of(
        description: &str,
        end: &serde_json::Value,
        latest: &serde_json::Value,
    ) -> Option<OffsetBacklog> {
        use super::checkpoint::SourceKind;
        if latest.is_null() || end.is_null() {
            return None;
        }
        let kind = match SourceKind::of(end) {
            SourceKind::Unknown => SourceKind::of_description(description),
            k => k,
        };
        match kind {
            SourceKind::Kafka => {
                let (e, l) = (end.as_object()?, latest.as_object()?);
                let mut behind = Vec::new();
                for (topic, parts) in l {
                    let done = e.get(topic).and_then(|p| p.as_object());
                    for (p, off) in parts.as_object()? {
                        let latest = off.as_i64()?;
                        let end = done
                            .and_then(|d| d.get(p))
                            .and_then(serde_json::Value::as_i64)
                            .unwrap_or(0);
                        behind.push(u64::try_from(latest - end).unwrap_or(0));
                    }
                }
                Some(OffsetBacklog::Kafka {
                    sum: behind.iter().sum(),
                    min: behind.iter().copied().min().unwrap_or(0),
                    max: behind.iter().copied().max().unwrap_or(0),
                    partitions: behind.len() as u64,
                })
            }
            SourceKind::Delta => {
                let (done, _) = delta_position(end)?;
                let (latest_done, latest_part) = delta_position(latest)?;
                // The newest version the latest offset shows: read whole, or in part.
                let available = latest_done + i64::from(latest_part);
                Some(OffsetBacklog::Delta {
                    versions: u64::try_from(available - done).unwrap_or(0),
                })
            }
            SourceKind::Rate => {
                let secs = latest.as_i64()? - end.as_i64()?;
                let rps = rate_rows_per_second(description)?;
                Some(OffsetBacklog::Rate {
                    rows: u64::try_from(secs).unwrap_or(0).saturating_mul(rps),
                })
            }
            SourceKind::File | SourceKind::Unknown => None,
        }
    }

    /// The source metrics it fills (Spark's names where Spark has one: Kafka's
    /// `minOffsetsBehindLatest`, `maxOffsetsBehindLatest`, `avgOffsetsBehindLatest`).
    pub fn metrics(&self) -> Vec<(&'static str, String)> {
        match *self {
            OffsetBacklog::Kafka {
                sum,
                min,
                max,
                partitions,
            } => vec![
                ("numOffsetsBehindLatest", sum.to_string()),
                ("minOffsetsBehindLatest", min.to_string()),
                ("maxOffsetsBehindLatest", max.to_string()),
                (
                    "avgOffsetsBehindLatest",
                    (sum as f64 / partitions.max(1) as f64).to_string(),
                ),
            ],
            OffsetBacklog::Delta { versions } => vec![("numVersionsBehind", versions.to_string())],
            OffsetBacklog::Rate { rows } => vec![("numRowsBehindLatest", rows.to_string())],
        }
    }
}

/// One file of the directory.
#[derive(Debug, Clone)]
struct Listed {
    mtime_ms: i64,
    bytes: u64,
}

/// A file source followed: its directory listing and its log.
#[derive(Debug)]
pub struct FileBacklog {
    /// The source directory, locally.
    pub dir: PathBuf,
    log: Option<SourceLog>,
    /// Files of the log by local path -> batch id.
    logged: HashMap<PathBuf, u64>,
    /// Per batch: files and bytes (bytes of files still present).
    per_batch: std::collections::BTreeMap<u64, (u64, u64)>,
    /// Log files already read (plain ids), and the newest compact read.
    read_plain: std::collections::BTreeSet<u64>,
    read_compact: Option<u64>,
    listing: HashMap<PathBuf, Listed>,
    /// Sorted arrival times with byte prefix sums, and sorted batch ids with byte prefix sums
    /// (files present only).
    arrivals: Vec<(i64, u64)>,
    batches: Vec<(u64, u64)>,
    pub listed_at_ms: Option<i64>,
    /// The directory existed at some listing.
    pub seen: bool,
    /// It existed, and the last listing found it gone.
    pub missing: bool,
    pub truncated: bool,
    map: PathMap,
}

impl FileBacklog {
    pub fn new(dir: PathBuf, log: Option<SourceLog>, map: PathMap) -> Self {
        FileBacklog {
            dir,
            log,
            logged: HashMap::new(),
            per_batch: Default::default(),
            read_plain: Default::default(),
            read_compact: None,
            listing: HashMap::new(),
            arrivals: Vec::new(),
            batches: Vec::new(),
            listed_at_ms: None,
            seen: false,
            missing: false,
            truncated: false,
            map,
        }
    }

    fn add_entries(&mut self, entries: Vec<FileEntry>) {
        for e in entries {
            if let Some(local) = self.map.local(&e.path)
                && !self.logged.contains_key(&local)
            {
                self.logged.insert(local, e.batch_id);
                self.per_batch.entry(e.batch_id).or_default().0 += 1;
            }
        }
    }

    /// Reads log files not read yet. Returns problems as text.
    pub fn refresh_log(&mut self) -> Vec<String> {
        let Some(log) = self.log.clone() else {
            return Vec::new();
        };
        let mut problems = Vec::new();
        let listing = match list_batches(&log.dir) {
            Ok(l) => l,
            Err(e) => return vec![format!("{}: cannot list: {e}", log.dir.display())],
        };
        let newest_compact = listing.iter().filter(|(_, c)| *c).map(|(id, _)| *id).max();
        if let Some(k) = newest_compact
            && self.read_compact.is_none_or(|r| k > r)
        {
            match log.read_entries(k, true) {
                Ok(e) => {
                    self.add_entries(e);
                    self.read_compact = Some(k);
                }
                Err(p) => problems.push(p.to_string()),
            }
        }
        for (id, compact) in listing {
            if compact
                || self.read_plain.contains(&id)
                || self.read_compact.is_some_and(|k| id <= k)
            {
                continue;
            }
            match log.read_entries(id, false) {
                Ok(e) => {
                    self.add_entries(e);
                    self.read_plain.insert(id);
                }
                Err(p) => problems.push(p.to_string()),
            }
        }
        problems
    }

    /// Lists the directory (recursively; Spark's hidden names skipped).
    pub fn relist(&mut self, now_ms: i64) {
        self.listed_at_ms = Some(now_ms);
        if !self.dir.is_dir() {
            self.missing = self.seen;
            self.listing.clear();
            self.rebuild();
            return;
        }
        self.seen = true;
        self.missing = false;
        self.truncated = false;
        let mut listing = HashMap::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') || name.starts_with('_') {
                    continue;
                }
                let Ok(meta) = e.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(e.path());
                } else if listing.len() < MAX_FILES {
                    let mtime_ms = meta
                        .modified()
                        .map(|t| chrono::DateTime::<chrono::Utc>::from(t).timestamp_millis())
                        .unwrap_or(0);
                    listing.insert(
                        e.path(),
                        Listed {
                            mtime_ms,
                            bytes: meta.len(),
                        },
                    );
                } else {
                    self.truncated = true;
                }
            }
        }
        self.listing = listing;
        self.rebuild();
    }

    fn rebuild(&mut self) {
        let mut arrivals: Vec<(i64, u64)> = self
            .listing
            .values()
            .map(|l| (l.mtime_ms, l.bytes))
            .collect();
        arrivals.sort_unstable();
        let mut batches: Vec<(u64, u64)> = self
            .listing
            .iter()
            .filter_map(|(p, l)| self.logged.get(p).map(|b| (*b, l.bytes)))
            .collect();
        batches.sort_unstable();
        // Prefix sums of bytes.
        let mut acc = 0;
        for a in &mut arrivals {
            acc += a.1;
            a.1 = acc;
        }
        let mut acc = 0;
        for b in &mut batches {
            acc += b.1;
            b.1 = acc;
        }
        self.arrivals = arrivals;
        self.batches = batches;
        for v in self.per_batch.values_mut() {
            v.1 = 0;
        }
        for (p, b) in &self.logged {
            if let Some(l) = self.listing.get(p)
                && let Some(v) = self.per_batch.get_mut(b)
            {
                v.1 += l.bytes;
            }
        }
    }

    /// Files and bytes outstanding after batch `batch` planned at `at_ms`; `None` before a listing.
    pub fn outstanding(&self, batch: u64, at_ms: i64) -> Option<(u64, u64)> {
        if self.listed_at_ms.is_none() || !self.seen {
            return None;
        }
        let n_arr = self.arrivals.partition_point(|(t, _)| *t <= at_ms);
        let bytes_arr = n_arr.checked_sub(1).map_or(0, |i| self.arrivals[i].1);
        let n_done = self.batches.partition_point(|(b, _)| *b <= batch);
        let bytes_done = n_done.checked_sub(1).map_or(0, |i| self.batches[i].1);
        Some((
            (n_arr as u64).saturating_sub(n_done as u64),
            bytes_arr.saturating_sub(bytes_done),
        ))
    }

    /// Files (and bytes of those still present) the log assigns to batch `n`.
    pub fn batch_files(&self, n: u64) -> Option<(u64, u64)> {
        self.log.as_ref()?;
        Some(self.per_batch.get(&n).copied().unwrap_or((0, 0)))
    }

    pub fn has_log(&self) -> bool {
        self.log.is_some()
    }
}

/// Whether `dir` is reachable as a directory.
pub fn reachable(dir: &Path) -> bool {
    dir.is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_maps() {
        let m = PathMap::parse(&[
            "s3://bucket/landing=/mnt/landing".into(),
            "/data=/copy".into(),
        ])
        .unwrap();
        assert_eq!(
            m.local("s3://bucket/landing/a/b.json"),
            Some(PathBuf::from("/mnt/landing/a/b.json"))
        );
        assert_eq!(
            m.local("file:///data/in/x"),
            Some(PathBuf::from("/copy/in/x"))
        );
        assert_eq!(m.local("file:/tmp/x"), Some(PathBuf::from("/tmp/x")));
        assert_eq!(m.local("s3://other/x"), None);
        assert!(PathMap::parse(&["nope".into()]).is_err());
        assert_eq!(
            described_path("FileStreamSource[file:/data/in]"),
            Some("file:/data/in")
        );
        assert_eq!(
            described_path("RateStreamV2[rowsPerSecond=20, rampUpTimeSeconds=0, numPartitions=2"),
            None
        );
        assert_eq!(described_path("ForeachBatchSink"), None);
    }

    /// Real shapes: Spark 4.x Kafka progress (event-log rendering, offsets as JSON strings,
    /// decoded by `progress::normalise`), Delta's `DeltaSourceOffset`, the rate source.
    #[test]
    fn backlog_from_latest_offset_vs_end_offset() {
        let rec = r#"{"id":"q","runId":"r","timestamp":"2026-12-01T10:00:00.000Z","batchId":7,
            "sources":[{"description":"KafkaV2[Subscribe[orders]]",
              "startOffset":"{\"orders\":{\"2\":400,\"1\":380,\"0\":410}}",
              "endOffset":"{\"orders\":{\"2\":500,\"1\":480,\"0\":510}}",
              "latestOffset":"{\"orders\":{\"2\":900,\"1\":480,\"0\":530}}",
              "numInputRows":300,"metrics":{"avgOffsetsBehindLatest":"140.0","maxOffsetsBehindLatest":"400","minOffsetsBehindLatest":"0"}}]}"#;
        let p = super::super::progress::from_json(rec).unwrap();
        let s = &p.sources[0];
        let b = OffsetBacklog::of(&s.description, &s.end_offset, &s.latest_offset).unwrap();
        assert_eq!(
            b,
            OffsetBacklog::Kafka {
                sum: 420,
                min: 0,
                max: 400,
                partitions: 3
            }
        );
        assert_eq!(b.metrics()[0], ("numOffsetsBehindLatest", "420".into()));
        // A partition added since the end offset counts from 0 (Spark reads it from earliest).
        let b = OffsetBacklog::of(
            "KafkaV2[Subscribe[orders]]",
            &serde_json::json!({"orders": {"0": 10}}),
            &serde_json::json!({"orders": {"0": 12, "1": 5}}),
        );
        assert!(matches!(b, Some(OffsetBacklog::Kafka { sum: 7, .. })));

        let delta = |v: i64, i: i64, starting: bool| {
            serde_json::json!({"sourceVersion":1,"reservoirId":"a35e99ab-aedf-4e6a-8662-19e056d70141",
                "reservoirVersion":v,"index":i,"isStartingVersion":starting})
        };
        let d = "DeltaSource[file:/data/events]";
        // End before version 6, latest before 29: versions 6..=28 unread.
        assert_eq!(
            OffsetBacklog::of(d, &delta(6, -1, false), &delta(29, -1, false)),
            Some(OffsetBacklog::Delta { versions: 23 })
        );
        // Inside the starting snapshot at version 5 (file 2 of 5), latest = its last file.
        assert_eq!(
            OffsetBacklog::of(d, &delta(5, 2, true), &delta(5, 4, true)),
            Some(OffsetBacklog::Delta { versions: 1 })
        );
        // Version 9 read whole (END_INDEX) and nothing newer: caught up.
        assert_eq!(
            OffsetBacklog::of(d, &delta(9, i64::MAX - 100, false), &delta(10, -1, false)),
            Some(OffsetBacklog::Delta { versions: 0 })
        );
        // OSS Delta 4.4 writes no latest offset: unknown, not 0.
        assert_eq!(
            OffsetBacklog::of(d, &delta(6, -1, false), &serde_json::Value::Null),
            None
        );

        let rate = "RateStreamV2[rowsPerSecond=20, rampUpTimeSeconds=0, numPartitions=2";
        assert_eq!(
            OffsetBacklog::of(rate, &serde_json::json!(16), &serde_json::json!(18)),
            Some(OffsetBacklog::Rate { rows: 40 })
        );
        assert_eq!(
            OffsetBacklog::of(rate, &serde_json::json!(18), &serde_json::json!(18)),
            Some(OffsetBacklog::Rate { rows: 0 })
        );
        // A file source's backlog comes from its directory listing, not its offsets.
        assert_eq!(
            OffsetBacklog::of(
                "FileStreamSource[file:/in]",
                &serde_json::json!({"logOffset": 3}),
                &serde_json::json!({"logOffset": 5})
            ),
            None
        );
    }

    #[test]
    fn outstanding_counts_arrived_minus_logged() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join("log");
        std::fs::create_dir_all(&log_dir).unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir_all(&input).unwrap();
        let mut t0 = 0;
        for i in 0..5 {
            let p = input.join(format!("f{i}.json"));
            std::fs::write(&p, "x".repeat(10)).unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i);
            f.set_modified(t).unwrap();
            t0 = 1_000_000;
        }
        std::fs::write(input.join("_SUCCESS"), "").unwrap();
        std::fs::write(
            log_dir.join("0"),
            format!(
                "v1\n{{\"path\":\"file://{}\",\"timestamp\":1,\"batchId\":0}}",
                input.join("f0.json").display()
            ),
        )
        .unwrap();
        std::fs::write(
            log_dir.join("1"),
            format!(
                "v1\n{{\"path\":\"file://{}\",\"timestamp\":1,\"batchId\":1}}",
                input.join("f1.json").display()
            ),
        )
        .unwrap();
        let mut b = FileBacklog::new(
            input.clone(),
            Some(SourceLog::at(log_dir, "0".into())),
            PathMap::default(),
        );
        assert!(b.refresh_log().is_empty());
        b.relist(0);
        // Batch 0 at t=1002.5 s: f0..f2 arrived, f0 logged -> 2 outstanding.
        assert_eq!(b.outstanding(0, t0 + 2_500), Some((2, 20)));
        // Batch 1 at t=1010 s: all 5 arrived, 2 logged -> 3.
        assert_eq!(b.outstanding(1, t0 + 10_000), Some((3, 30)));
        assert_eq!(b.batch_files(1), Some((1, 10)));
        std::fs::remove_dir_all(&input).unwrap();
        b.relist(1);
        assert!(b.missing);
    }
}
