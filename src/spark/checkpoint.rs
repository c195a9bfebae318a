//! A Spark checkpoint directory, read-only.
//!
//! ```text
//! <checkpoint>/
//!   metadata                         {"id":"<query uuid>"}
//!   offsets/<N>                      v1|v2, batch metadata JSON, one offset per source ("-": none; v2: "name:offset")
//!   commits/<N>                      v1|v2, {"nextBatchWatermarkMs":..[,"stateUniqueIds":{op:[[id per store] per partition]}]}
//!   sources/<index|name>/<N>[.compact]  per-source log: file source entries {path,timestamp,batchId}; rate: start ms
//!   state/<op>/_metadata/metadata    operator metadata v1; _metadata/v2/<batch> (transformWithState)
//!   state/<op>/<partition>[/<store>]/<version>.delta|.snapshot          HDFS-backed store
//!   state/<op>/<partition>[/<store>]/<version>[_<uuid>].changelog|.zip   RocksDB store (uuid: format v2)
//! ```
//!
//! Conventions (Spark's `HDFSMetadataLog`): a log file's name is its batch id,
//! line 1 its version, no trailing newline; names starting with `.` (Hadoop
//! `.crc` sidecars, temp files) are ignored. The state version of batch N is
//! N + 1. Every unreadable, torn, missing or too-new file becomes a
//! [`Problem`] naming the file, with the error class Spark raises for it where
//! it has one; nothing here panics on bad input.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checkpoint::log::{self, LogError};

/// Highest versions Spark 4.3 reads: offsets and commits `v2`, source logs `v1`.
pub const MAX_OFFSETS_VERSION: u32 = 2;
pub const MAX_COMMITS_VERSION: u32 = 2;
pub const MAX_SOURCE_LOG_VERSION: u32 = 1;

/// Something wrong with a checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub path: PathBuf,
    pub message: String,
    /// The error class Spark raises at restart for it, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spark_error_class: Option<String>,
}

impl Problem {
    pub fn new(path: &Path, message: impl Into<String>) -> Self {
        Problem {
            path: path.to_path_buf(),
            message: message.into(),
            spark_error_class: None,
        }
    }

    pub fn with_class(mut self, class: &str) -> Self {
        self.spark_error_class = Some(class.to_string());
        self
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)?;
        if let Some(c) = &self.spark_error_class {
            write!(f, " (Spark: {c})")?;
        }
        Ok(())
    }
}

pub use crate::checkpoint::log::SourceOffset;

/// `offsets/N`: Spark's `OffsetSeq`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffsetsFile {
    pub version: u32,
    pub batch_watermark_ms: i64,
    pub batch_timestamp_ms: i64,
    pub conf: BTreeMap<String, String>,
    pub sources: Vec<SourceOffset>,
}

/// `commits/N`: Spark's `CommitMetadata`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommitFile {
    pub version: u32,
    pub next_batch_watermark_ms: i64,
    /// Format v2: per operator, per partition, one unique id per state store (of version N + 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_unique_ids: Option<BTreeMap<String, Vec<Vec<String>>>>,
}

/// A checkpoint directory.
#[derive(Debug, Clone)]
pub struct SparkCheckpoint {
    root: PathBuf,
}

/// Reads a whole small file, or says why not.
fn read_text(path: &Path) -> Result<String, Problem> {
    let bytes = fs::read(path).map_err(|e| Problem::new(path, format!("cannot read: {e}")))?;
    String::from_utf8(bytes).map_err(|_| Problem::new(path, "not UTF-8 text (corrupt?)"))
}

/// The log file's problem, named by its path.
fn problem(path: &Path, e: LogError) -> Problem {
    let p = Problem::new(path, e.message);
    match e.spark_error_class {
        Some(class) => p.with_class(class),
        None => p,
    }
}

/// Splits a metadata-log file into its version and the lines after it.
fn split_log<'a>(path: &Path, text: &'a str, max: u32) -> Result<(u32, Vec<&'a str>), Problem> {
    log::split_log(text, max).map_err(|e| problem(path, e))
}

fn json_line<T: serde::de::DeserializeOwned>(
    path: &Path,
    n: usize,
    line: &str,
) -> Result<T, Problem> {
    log::json_line(n, line).map_err(|e| problem(path, e))
}

/// Names in `dir` that are a batch id, or `<id>.compact` (`compact` true), ascending.
pub fn list_batches(dir: &Path) -> std::io::Result<Vec<(u64, bool)>> {
    Ok(crate::numbered::entries(dir)?
        .into_iter()
        .map(|e| (e.id, e.compact))
        .collect())
}

/// Batch ids of a log directory (plain names only), ascending.
pub fn batch_ids(dir: &Path) -> std::io::Result<Vec<u64>> {
    crate::numbered::ids(dir)
}

impl SparkCheckpoint {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        SparkCheckpoint { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn offsets_dir(&self) -> PathBuf {
        self.root.join("offsets")
    }

    pub fn commits_dir(&self) -> PathBuf {
        self.root.join("commits")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root.join("state")
    }

    pub fn sources_dir(&self) -> PathBuf {
        self.root.join("sources")
    }

    /// The query id (`metadata`).
    pub fn query_id(&self) -> Result<String, Problem> {
        let path = self.root.join("metadata");
        if !path.exists() {
            let has_logs = !batch_ids(&self.offsets_dir())
                .unwrap_or_default()
                .is_empty()
                || !batch_ids(&self.commits_dir())
                    .unwrap_or_default()
                    .is_empty();
            let p = Problem::new(&path, "missing");
            return Err(if has_logs {
                Problem::new(
                    &path,
                    "missing, but offsets/ or commits/ hold files: Spark refuses to start (restore the file or use a new checkpoint)",
                )
                .with_class("STREAMING_CHECKPOINT_MISSING_METADATA_FILE")
            } else {
                p
            });
        }
        let text = read_text(&path)?;
        #[derive(serde::Deserialize)]
        struct Meta {
            id: String,
        }
        let line = text.lines().next().unwrap_or("");
        let m: Meta = json_line(&path, 1, line)?;
        Ok(m.id)
    }

    pub fn offsets_path(&self, batch: u64) -> PathBuf {
        self.offsets_dir().join(batch.to_string())
    }

    pub fn commit_path(&self, batch: u64) -> PathBuf {
        self.commits_dir().join(batch.to_string())
    }

    pub fn read_offsets(&self, batch: u64) -> Result<OffsetsFile, Problem> {
        let path = self.offsets_path(batch);
        let text = read_text(&path)?;
        parse_offsets(&path, &text)
    }

    pub fn read_commit(&self, batch: u64) -> Result<CommitFile, Problem> {
        let path = self.commit_path(batch);
        let text = read_text(&path)?;
        parse_commit(&path, &text)
    }

    /// The per-source log directories (`sources/0`, `sources/src_a`, ...), by name.
    pub fn source_logs(&self) -> Vec<SourceLog> {
        let mut out = Vec::new();
        if let Ok(entries) = fs::read_dir(self.sources_dir()) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') || !e.path().is_dir() {
                    continue;
                }
                out.push(SourceLog::at(e.path(), name));
            }
        }
        out.sort_by(
            |a, b| match (a.name.parse::<u64>(), b.name.parse::<u64>()) {
                (Ok(x), Ok(y)) => x.cmp(&y),
                _ => a.name.cmp(&b.name),
            },
        );
        out
    }

    /// Named sources that earlier batches had and the last planned one does not (removed
    /// at a restart by source evolution), each with the first batch planned without it,
    /// the last batch with it and its end offset there. Only sources whose log
    /// (`sources/<name>/`) is still in the checkpoint are looked for, and at most
    /// [`REMOVED_SOURCE_LOOKBACK`] offsets files are read, newest first.
    pub fn removed_sources(&self) -> Vec<RemovedSourceAt> {
        let Ok(ids) = batch_ids(&self.offsets_dir()) else {
            return Vec::new();
        };
        let Some((&last, earlier)) = ids.split_last() else {
            return Vec::new();
        };
        let Ok(plan) = self.read_offsets(last) else {
            return Vec::new();
        };
        if plan.sources.iter().all(|s| s.name.is_none()) {
            return Vec::new();
        }
        let in_plan = |name: &str| plan.sources.iter().any(|s| s.name.as_deref() == Some(name));
        let mut looked_for: Vec<String> = self
            .source_logs()
            .into_iter()
            .map(|l| l.name)
            .filter(|n| !in_plan(n))
            .collect();
        let mut found = Vec::new();
        let mut after = last;
        for &id in earlier.iter().rev().take(REMOVED_SOURCE_LOOKBACK) {
            if looked_for.is_empty() {
                break;
            }
            if let Ok(o) = self.read_offsets(id) {
                for so in o.sources {
                    if let Some(name) = so.name
                        && let Some(k) = looked_for.iter().position(|n| *n == name)
                    {
                        looked_for.swap_remove(k);
                        found.push(RemovedSourceAt {
                            name,
                            at_batch: after,
                            last_batch: id,
                            last_offset: so.offset,
                        });
                    }
                }
            }
            after = id;
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    /// The source log of source `index` (`name` with named sources).
    pub fn source_log(&self, index: usize, name: Option<&str>) -> Option<SourceLog> {
        let key = name.map_or_else(|| index.to_string(), str::to_string);
        let dir = self.sources_dir().join(&key);
        dir.is_dir().then(|| SourceLog::at(dir, key))
    }
}

/// Offsets files [`SparkCheckpoint::removed_sources`] reads at most (Spark keeps 100 by
/// default, `spark.sql.streaming.minBatchesToRetain`).
pub const REMOVED_SOURCE_LOOKBACK: usize = 1000;

/// A named source removed by source evolution, and where it left the query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemovedSourceAt {
    pub name: String,
    /// The first planned batch without it.
    pub at_batch: u64,
    /// The last planned batch with it.
    pub last_batch: u64,
    /// Its end offset in that batch (`None`: Spark wrote `-`).
    pub last_offset: Option<serde_json::Value>,
}

/// Parses `offsets/N`.
pub fn parse_offsets(path: &Path, text: &str) -> Result<OffsetsFile, Problem> {
    let (version, meta, sources) =
        log::parse_offsets(text, MAX_OFFSETS_VERSION).map_err(|e| problem(path, e))?;
    Ok(OffsetsFile {
        version,
        batch_watermark_ms: meta.batch_watermark_ms,
        batch_timestamp_ms: meta.batch_timestamp_ms,
        conf: meta.conf,
        sources,
    })
}

/// Parses `commits/N`.
pub fn parse_commit(path: &Path, text: &str) -> Result<CommitFile, Problem> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Commit {
        #[serde(default)]
        next_batch_watermark_ms: i64,
        #[serde(default)]
        state_unique_ids: Option<BTreeMap<String, Vec<Vec<String>>>>,
    }
    let (version, c): (u32, Commit) =
        log::parse_commit(text, MAX_COMMITS_VERSION).map_err(|e| problem(path, e))?;
    Ok(CommitFile {
        version,
        next_batch_watermark_ms: c.next_batch_watermark_ms,
        state_unique_ids: c.state_unique_ids,
    })
}

/// What kind of source an offset belongs to, from its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// `FileStreamSource`: `{"logOffset":N}`.
    File,
    /// A single number: the rate source (seconds since its start) or another `LongOffset` source.
    Rate,
    /// Delta: `{"sourceVersion":..,"reservoirId":..,"reservoirVersion":..,"index":..}`.
    Delta,
    /// Kafka: `{"topic":{"partition":offset}}`.
    Kafka,
    Unknown,
}

impl SourceKind {
    pub fn of(offset: &serde_json::Value) -> SourceKind {
        use serde_json::Value;
        match offset {
            Value::Number(_) => SourceKind::Rate,
            Value::Object(m) if m.contains_key("logOffset") => SourceKind::File,
            Value::Object(m) if m.contains_key("reservoirVersion") => SourceKind::Delta,
            Value::Object(m)
                if !m.is_empty()
                    && m.values().all(|v| {
                        v.as_object().is_some_and(|p| {
                            p.iter()
                                .all(|(k, o)| k.parse::<i64>().is_ok() && o.is_i64())
                        })
                    }) =>
            {
                SourceKind::Kafka
            }
            _ => SourceKind::Unknown,
        }
    }

    /// From a progress record's source description (`FileStreamSource[...]`, `KafkaV2[...]`, ...).
    pub fn of_description(description: &str) -> SourceKind {
        let d = description;
        if d.starts_with("FileStreamSource") || d.starts_with("CloudFilesSource") {
            SourceKind::File
        } else if d.starts_with("RateStream") || d.starts_with("RatePerMicroBatch") {
            SourceKind::Rate
        } else if d.starts_with("DeltaSource") {
            SourceKind::Delta
        } else if d.starts_with("Kafka") {
            SourceKind::Kafka
        } else {
            SourceKind::Unknown
        }
    }
}

/// Kafka-style offsets summed over partitions: `latest - end` (records behind), when both parse.
pub fn offsets_behind(end: &serde_json::Value, latest: &serde_json::Value) -> Option<i64> {
    let (e, l) = (end.as_object()?, latest.as_object()?);
    let mut behind = 0i64;
    for (topic, parts) in l {
        let parts = parts.as_object()?;
        let done = e.get(topic).and_then(|p| p.as_object());
        for (p, off) in parts {
            let latest = off.as_i64()?;
            let end = done
                .and_then(|d| d.get(p))
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            behind += (latest - end).max(0);
        }
    }
    Some(behind)
}

/// One input file in a file source's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    pub path: String,
    /// The file's modification time (ms).
    #[serde(default)]
    pub timestamp: i64,
    pub batch_id: u64,
}

/// `sources/<i>/`: a source's metadata log.
#[derive(Debug, Clone)]
pub struct SourceLog {
    pub dir: PathBuf,
    /// `0`, `1`, ... or the source's name.
    pub name: String,
}

/// What a source log holds, for inspect.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SourceLogSummary {
    pub dir: PathBuf,
    /// Plain batch files present.
    pub batch_files: Vec<u64>,
    /// `N.compact` files present.
    pub compact_files: Vec<u64>,
    /// File source: input files recorded (the latest compact file plus the batches after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Rate source: the start time recorded in batch 0 (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<i64>,
}

impl SourceLog {
    pub fn at(dir: PathBuf, name: String) -> Self {
        SourceLog { dir, name }
    }

    fn path(&self, batch: u64, compact: bool) -> PathBuf {
        self.dir.join(if compact {
            format!("{batch}.compact")
        } else {
            batch.to_string()
        })
    }

    /// The lines after the version line of one log file.
    fn read_lines(&self, batch: u64, compact: bool) -> Result<Vec<String>, Problem> {
        let path = self.path(batch, compact);
        let text = read_text(&path)?;
        let (_, lines) = split_log(&path, &text, MAX_SOURCE_LOG_VERSION)?;
        Ok(lines
            .into_iter()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect())
    }

    /// File entries of one log file (a torn last line is a problem).
    pub fn read_entries(&self, batch: u64, compact: bool) -> Result<Vec<FileEntry>, Problem> {
        let path = self.path(batch, compact);
        let mut out = Vec::new();
        for (i, line) in self.read_lines(batch, compact)?.iter().enumerate() {
            out.push(json_line::<FileEntry>(&path, i + 2, line)?);
        }
        Ok(out)
    }

    /// The files of batch `n`: from `n`, else from the first `K.compact` with K >= n.
    pub fn files_of_batch(&self, n: u64) -> Result<Option<Vec<FileEntry>>, Problem> {
        let listing =
            list_batches(&self.dir).map_err(|e| Problem::new(&self.dir, e.to_string()))?;
        if listing.contains(&(n, false)) {
            return self.read_entries(n, false).map(Some);
        }
        match listing.iter().find(|(id, c)| *c && *id >= n) {
            Some((k, _)) => Ok(Some(
                self.read_entries(*k, true)?
                    .into_iter()
                    .filter(|e| e.batch_id == n)
                    .collect(),
            )),
            None => Ok(None),
        }
    }

    /// Every file entry recorded: the latest compact file plus the plain files after it.
    pub fn all_entries(&self) -> Result<Vec<FileEntry>, Problem> {
        let listing =
            list_batches(&self.dir).map_err(|e| Problem::new(&self.dir, e.to_string()))?;
        let last_compact = listing.iter().filter(|(_, c)| *c).map(|(id, _)| *id).max();
        let mut out = match last_compact {
            Some(k) => self.read_entries(k, true)?,
            None => Vec::new(),
        };
        for (id, compact) in &listing {
            if !compact && last_compact.is_none_or(|k| *id > k) {
                out.extend(self.read_entries(*id, false)?);
            }
        }
        Ok(out)
    }

    /// A summary for inspect; problems are pushed, not returned.
    pub fn summary(&self, kind: SourceKind, problems: &mut Vec<Problem>) -> SourceLogSummary {
        let listing = match list_batches(&self.dir) {
            Ok(l) => l,
            Err(e) => {
                problems.push(Problem::new(&self.dir, e.to_string()));
                Vec::new()
            }
        };
        let mut s = SourceLogSummary {
            dir: self.dir.clone(),
            batch_files: listing
                .iter()
                .filter(|(_, c)| !c)
                .map(|(id, _)| *id)
                .collect(),
            compact_files: listing
                .iter()
                .filter(|(_, c)| *c)
                .map(|(id, _)| *id)
                .collect(),
            ..Default::default()
        };
        match kind {
            SourceKind::File => match self.all_entries() {
                Ok(e) => s.files = Some(e.len() as u64),
                Err(p) => problems.push(p),
            },
            SourceKind::Rate if s.batch_files.contains(&0) => match self.read_lines(0, false) {
                Ok(lines) => s.start_ms = lines.first().and_then(|l| l.trim().parse().ok()),
                Err(p) => problems.push(p),
            },
            _ => {}
        }
        s
    }
}

/// How a state store keeps its versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreFormat {
    /// `HDFSBackedStateStoreProvider`: `<v>.delta` every version, `<v>.snapshot` from maintenance.
    Hdfs,
    /// `RocksDBStateStoreProvider`: `<v>.changelog` (changelog checkpointing) and `<v>.zip` snapshots.
    Rocksdb,
    /// No version files yet.
    Empty,
}

/// The files of one state version in one store of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VersionFiles {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changelog_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zip_bytes: Option<u64>,
    /// Checkpoint format v2: the unique ids in the file names (`<v>_<uuid>.changelog`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unique_ids: Vec<String>,
}

impl VersionFiles {
    fn bytes(&self) -> u64 {
        self.delta_bytes.unwrap_or(0)
            + self.snapshot_bytes.unwrap_or(0)
            + self.changelog_bytes.unwrap_or(0)
            + self.zip_bytes.unwrap_or(0)
    }

    /// A full copy of the state at this version (HDFS snapshot, RocksDB zip).
    pub fn is_snapshot(&self) -> bool {
        self.snapshot_bytes.is_some() || self.zip_bytes.is_some()
    }

    /// The changes of this version (HDFS delta, RocksDB changelog).
    pub fn is_delta(&self) -> bool {
        self.delta_bytes.is_some() || self.changelog_bytes.is_some()
    }
}

/// One store (e.g. `default`, `left-keyToNumValues`) of one partition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreFiles {
    pub partition: u64,
    pub store: String,
    pub dir: PathBuf,
    pub versions: BTreeMap<u64, VersionFiles>,
}

impl StoreFiles {
    pub fn format(&self) -> StoreFormat {
        let v = self.versions.values();
        let mut hdfs = false;
        let mut rocks = false;
        for f in v {
            hdfs |= f.delta_bytes.is_some() || f.snapshot_bytes.is_some();
            rocks |= f.changelog_bytes.is_some() || f.zip_bytes.is_some();
        }
        match (hdfs, rocks) {
            (_, true) => StoreFormat::Rocksdb,
            (true, false) => StoreFormat::Hdfs,
            _ => StoreFormat::Empty,
        }
    }

    /// Whether state version `v` can be rebuilt from files: a snapshot at some
    /// S <= v (or S = 0, the empty state) and every delta/changelog S+1..=v.
    /// `Err` names the first missing version.
    pub fn loadable(&self, v: u64) -> Result<(), u64> {
        if v == 0 {
            return Ok(());
        }
        let mut at = v;
        loop {
            match self.versions.get(&at) {
                Some(f) if f.is_snapshot() => return Ok(()),
                Some(f) if f.is_delta() => {}
                _ => return Err(at),
            }
            at -= 1;
            if at == 0 {
                return Ok(());
            }
        }
    }
}

/// One stateful operator: `state/<op>/`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateOperator {
    pub operator_id: u64,
    /// From `_metadata/metadata` (v1) or the newest `_metadata/v2/<batch>`.
    pub operator_name: Option<String>,
    pub metadata_version: Option<u32>,
    /// Store names from the metadata (or found on disk).
    pub store_names: Vec<String>,
    pub num_partitions: Option<u64>,
    pub stores: Vec<StoreFiles>,
    /// State schema files: `<p>/_metadata/schema` (v2), `_stateSchema/<store>/<batch>_<uuid>` (v3).
    pub schema_files: Vec<PathBuf>,
}

impl StateOperator {
    pub fn format(&self) -> StoreFormat {
        let formats: Vec<StoreFormat> = self.stores.iter().map(StoreFiles::format).collect();
        if formats.contains(&StoreFormat::Rocksdb) {
            StoreFormat::Rocksdb
        } else if formats.contains(&StoreFormat::Hdfs) {
            StoreFormat::Hdfs
        } else {
            StoreFormat::Empty
        }
    }

    /// 2 when version files carry unique ids (`stateStore.checkpointFormatVersion=2`).
    pub fn checkpoint_format_version(&self) -> u32 {
        if self
            .stores
            .iter()
            .any(|s| s.versions.values().any(|v| !v.unique_ids.is_empty()))
        {
            2
        } else {
            1
        }
    }

    /// Versions present in every store of every partition... or in any: (min, max) over all files.
    pub fn version_range(&self) -> Option<(u64, u64)> {
        let all = self.stores.iter().flat_map(|s| s.versions.keys().copied());
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut any = false;
        for v in all {
            any = true;
            lo = lo.min(v);
            hi = hi.max(v);
        }
        any.then_some((lo, hi))
    }

    pub fn total_bytes(&self) -> u64 {
        self.stores
            .iter()
            .flat_map(|s| s.versions.values())
            .map(VersionFiles::bytes)
            .sum()
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OperatorMetadata {
    operator_info: OperatorInfo,
    #[serde(default)]
    state_store_info: Vec<StoreInfo>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OperatorInfo {
    #[serde(default)]
    operator_name: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoreInfo {
    store_name: String,
    #[serde(default)]
    num_partitions: Option<u64>,
}

/// Parses a version file name: `12.delta`, `3_<uuid>.changelog`, `4.zip`.
fn parse_version_file(name: &str) -> Option<(u64, Option<&str>, &str)> {
    let (stem, ext) = name.rsplit_once('.')?;
    if !matches!(ext, "delta" | "snapshot" | "changelog" | "zip") {
        return None;
    }
    match stem.split_once('_') {
        Some((v, id)) => Some((v.parse().ok()?, Some(id), ext)),
        None => Some((stem.parse().ok()?, None, ext)),
    }
}

fn read_store(dir: &Path, partition: u64, store: &str, problems: &mut Vec<Problem>) -> StoreFiles {
    let mut versions: BTreeMap<u64, VersionFiles> = BTreeMap::new();
    match fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue;
                }
                let Some((v, id, ext)) = parse_version_file(&name) else {
                    continue;
                };
                let bytes = e.metadata().map(|m| m.len()).unwrap_or(0);
                let f = versions.entry(v).or_default();
                match ext {
                    "delta" => f.delta_bytes = Some(bytes),
                    "snapshot" => f.snapshot_bytes = Some(bytes),
                    "changelog" => f.changelog_bytes = Some(bytes),
                    _ => f.zip_bytes = Some(bytes),
                }
                if let Some(id) = id
                    && !f.unique_ids.iter().any(|x| x == id)
                {
                    f.unique_ids.push(id.to_string());
                }
                if bytes == 0 {
                    problems.push(Problem::new(
                        &e.path(),
                        "empty state file (a torn write): Spark cannot load this version",
                    ));
                }
            }
        }
        Err(e) => problems.push(Problem::new(dir, format!("cannot list: {e}"))),
    }
    StoreFiles {
        partition,
        store: store.to_string(),
        dir: dir.to_path_buf(),
        versions,
    }
}

/// Every `state/<op>/` of a checkpoint.
pub fn state_operators(cp: &SparkCheckpoint, problems: &mut Vec<Problem>) -> Vec<StateOperator> {
    let state = cp.state_dir();
    let mut ops = Vec::new();
    let Ok(ids) = crate::numbered::ids(&state) else {
        return ops;
    };
    for id in ids {
        let dir = state.join(id.to_string());
        let mut op = StateOperator {
            operator_id: id,
            operator_name: None,
            metadata_version: None,
            store_names: Vec::new(),
            num_partitions: None,
            stores: Vec::new(),
            schema_files: Vec::new(),
        };
        // Operator metadata: v1 file, or the newest v2/<batch>.
        let v1 = dir.join("_metadata").join("metadata");
        let v2_dir = dir.join("_metadata").join("v2");
        let newest_v2 = batch_ids(&v2_dir).ok().and_then(|b| b.last().copied());
        let meta_path = match newest_v2 {
            Some(b) => Some(v2_dir.join(b.to_string())),
            None => v1.is_file().then_some(v1),
        };
        if let Some(path) = meta_path {
            match read_text(&path).and_then(|t| {
                let (v, lines) = split_log(&path, &t, 2)?;
                let line = lines.first().copied().unwrap_or("");
                let m: OperatorMetadata = json_line(&path, 2, line)?;
                Ok((v, m))
            }) {
                Ok((v, m)) => {
                    op.metadata_version = Some(v);
                    op.operator_name = Some(m.operator_info.operator_name);
                    op.num_partitions = m.state_store_info.iter().find_map(|s| s.num_partitions);
                    op.store_names = m
                        .state_store_info
                        .into_iter()
                        .map(|s| s.store_name)
                        .collect();
                }
                Err(p) => problems.push(p),
            }
        }
        // Schema files (v3, transformWithState).
        if let Ok(stores) = fs::read_dir(dir.join("_stateSchema")) {
            for s in stores.flatten() {
                if let Ok(files) = fs::read_dir(s.path()) {
                    for f in files.flatten() {
                        if !f.file_name().to_string_lossy().starts_with('.') {
                            op.schema_files.push(f.path());
                        }
                    }
                }
            }
        }
        // Partitions, each with the default store's files or one directory per store.
        for p in crate::numbered::ids(&dir).unwrap_or_default() {
            let pdir = dir.join(p.to_string());
            let schema = pdir.join("_metadata").join("schema");
            if schema.is_file() {
                op.schema_files.push(schema);
            }
            let mut sub: Vec<String> = fs::read_dir(&pdir)
                .map(|e| {
                    e.flatten()
                        .filter(|e| e.path().is_dir())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| !n.starts_with('.') && !n.starts_with('_') && n != "SSTs")
                        .collect()
                })
                .unwrap_or_default();
            sub.sort();
            if sub.is_empty() {
                let store = op
                    .store_names
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "default".to_string());
                op.stores.push(read_store(&pdir, p, &store, problems));
            } else {
                for s in sub {
                    let sdir = pdir.join(&s);
                    let schema = sdir.join("_metadata").join("schema");
                    if schema.is_file() {
                        op.schema_files.push(schema);
                    }
                    op.stores.push(read_store(&sdir, p, &s, problems));
                }
            }
        }
        op.schema_files.sort();
        if op.store_names.is_empty() {
            let mut names: Vec<String> = op.stores.iter().map(|s| s.store.clone()).collect();
            names.sort();
            names.dedup();
            op.store_names = names;
        }
        ops.push(op);
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_v1_v2_named_and_empty_sources() {
        let p = Path::new("offsets/3");
        let v1 = "v1\n{\"batchWatermarkMs\":5,\"batchTimestampMs\":7,\"conf\":{\"a\":\"b\"}}\n{\"logOffset\":3}\n-";
        let o = parse_offsets(p, v1).unwrap();
        assert_eq!(
            (o.version, o.batch_watermark_ms, o.batch_timestamp_ms),
            (1, 5, 7)
        );
        assert_eq!(o.sources.len(), 2);
        assert_eq!(o.sources[1].offset, None);
        let v2 = "v2\n{\"batchWatermarkMs\":0,\"batchTimestampMs\":1,\"conf\":{},\"sourceMetadataInfo\":{}}\nsrc_a:{\"logOffset\":1}\nsrc_c:{\"logOffset\":0}";
        let o = parse_offsets(p, v2).unwrap();
        assert_eq!(o.sources[0].name.as_deref(), Some("src_a"));
        assert_eq!(
            o.sources[1].offset,
            Some(serde_json::json!({"logOffset":0}))
        );
        let rate = "v1\n{\"batchWatermarkMs\":0,\"batchTimestampMs\":1}\n8";
        assert_eq!(
            parse_offsets(p, rate).unwrap().sources[0].offset,
            Some(serde_json::json!(8))
        );
    }

    #[test]
    fn bad_log_files_are_named_problems() {
        let p = Path::new("/c/offsets/0");
        let future = parse_offsets(p, "v99\n{}\n{}").unwrap_err();
        assert_eq!(
            future.spark_error_class.as_deref(),
            Some("INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION")
        );
        assert!(future.to_string().contains("/c/offsets/0"));
        let torn = parse_offsets(p, "v1\n{\"batchWatermarkMs\":0,\"batchTim").unwrap_err();
        assert!(torn.message.contains("torn"), "{torn}");
        assert!(parse_offsets(p, "").unwrap_err().message.contains("empty"));
        assert!(
            parse_commit(p, "hello")
                .unwrap_err()
                .message
                .contains("not a checkpoint log")
        );
        let c = parse_commit(
            p,
            "v2\n{\"nextBatchWatermarkMs\":3,\"stateUniqueIds\":{\"0\":[[\"a\"],[\"b\"]]}}",
        )
        .unwrap();
        assert_eq!(c.state_unique_ids.unwrap()["0"][1][0], "b");
    }

    #[test]
    fn source_kinds_from_offsets() {
        use serde_json::json;
        assert_eq!(SourceKind::of(&json!({"logOffset": 2})), SourceKind::File);
        assert_eq!(SourceKind::of(&json!(16)), SourceKind::Rate);
        assert_eq!(
            SourceKind::of(
                &json!({"sourceVersion":1,"reservoirId":"x","reservoirVersion":3,"index":-1,"isStartingVersion":false})
            ),
            SourceKind::Delta
        );
        assert_eq!(
            SourceKind::of(&json!({"t":{"0":5,"1":7}})),
            SourceKind::Kafka
        );
        assert_eq!(
            offsets_behind(&json!({"t":{"0":5,"1":7}}), &json!({"t":{"0":9,"1":7}})),
            Some(4)
        );
    }

    #[test]
    fn version_files_and_loadability() {
        assert_eq!(parse_version_file("12.delta"), Some((12, None, "delta")));
        assert_eq!(
            parse_version_file("3_ab-c.changelog"),
            Some((3, Some("ab-c"), "changelog"))
        );
        assert_eq!(parse_version_file("3_ab.changelog.crc"), None);
        let mut s = StoreFiles {
            partition: 0,
            store: "default".into(),
            dir: PathBuf::new(),
            versions: BTreeMap::new(),
        };
        for v in 1..=6 {
            s.versions.insert(
                v,
                VersionFiles {
                    delta_bytes: Some(1),
                    ..Default::default()
                },
            );
        }
        s.versions.get_mut(&3).unwrap().snapshot_bytes = Some(1);
        assert_eq!(s.loadable(6), Ok(()));
        s.versions.remove(&2);
        assert_eq!(s.loadable(6), Ok(()), "the snapshot at 3 covers version 2");
        s.versions.remove(&5);
        assert_eq!(s.loadable(6), Err(5));
        assert_eq!(s.format(), StoreFormat::Hdfs);
    }
}
