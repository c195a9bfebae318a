//! Delta table maintenance (`weir table optimize|vacuum|history`, docs/maintenance.md):
//! deltalake's own OPTIMIZE and VACUUM operations and the table's commit history, with
//! what a pipeline knows on top: which flows read the table as a stream, and how far.
//!
//! ```text
//! optimize  plan: files, small files (< the table's target file size) per partition
//!           act:  deltalake OPTIMIZE (compaction): one commit, adds and removes with
//!                 dataChange = false, which the Delta source of downstream flows skips
//! vacuum    plan: refused under the table's delta.deletedFileRetentionDuration (Delta's
//!                 retention check, 7 days by default) unless allowed, and refused when a
//!                 flow reading the table still has to read a version older than the
//!                 retention keeps; else deltalake's VACUUM dry run (the files it deletes)
//!           act:  deltalake VACUUM (lite: only files a commit removed from the table)
//! history   the commits: version, timestamp, operation, parameters, metrics, data change
//! ```
//!
//! Every read and write goes through `deltalake` (`crate::delta`); weir never writes the
//! Delta log itself. Nothing here runs without the command's `--yes` or a confirmation.

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::Duration;

use deltalake::DeltaTable;
use deltalake::kernel::Action;
use deltalake::table::config::TablePropertiesExt as _;
use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::delta::delta_error;
use crate::error::{Error, Result};
use crate::source::delta::{DeltaOffset, DeltaSource, PlanBounds};
use crate::spec::{FlowSpec, SourceSpec, StartingVersion};

/// Databricks' auto compaction threshold (`spark.databricks.delta.autoCompact.minNumFiles`):
/// this many small files in one partition is worth an OPTIMIZE; `weir inspect` warns.
pub const SMALL_FILES_WARNING: u64 = 50;

/// A table the commands act on, as resolved from the command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableTarget {
    pub path: PathBuf,
    /// How the pipeline knows it: `sink of flow bronze`, `source of flow silver`, ...
    pub role: String,
}

fn same_path(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| {
        crate::spec::normalize(&std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
    };
    norm(a) == norm(b)
}

/// Every Delta table a pipeline names, with its role (sinks, late rows, quarantine
/// tables, Delta sources).
fn pipeline_tables(flows: &[FlowSpec]) -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    let mut add = |path: &Path, role: String| {
        if !out.iter().any(|(p, _)| same_path(p, path)) {
            out.push((path.to_path_buf(), role));
        }
    };
    for f in flows {
        if let Some(sink) = crate::checkpoint::compat::sink_table(f) {
            add(sink, format!("sink of flow {}", f.name));
        }
        if let Some(late) = &f.late_rows {
            add(late, format!("late rows of flow {}", f.name));
        }
        for s in f.sources() {
            match s {
                SourceSpec::Delta(d) => add(&d.path, format!("source of flow {}", f.name)),
                SourceSpec::Files(files) => {
                    if let Some(t) = &files.bad_records_table {
                        add(t, format!("quarantine of flow {}", f.name));
                    }
                }
                SourceSpec::Kafka(_) => {}
            }
        }
    }
    out
}

/// The table meant by `TABLE` (a path, or the directory name of a table the pipeline
/// names) or `--flow NAME` (the flow's Delta sink). The message says what exists.
pub fn resolve(
    flows: &[FlowSpec],
    table: Option<&str>,
    flow: Option<&str>,
) -> std::result::Result<TableTarget, String> {
    let known = pipeline_tables(flows);
    let listing = || {
        if known.is_empty() {
            "the pipeline names no Delta table".to_string()
        } else {
            format!(
                "its tables: {}",
                known
                    .iter()
                    .map(|(p, r)| format!("{} ({r})", p.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    };
    match (table, flow) {
        (Some(_), Some(_)) => Err("give a TABLE or --flow NAME, not both".into()),
        (None, None) => Err(format!(
            "which table? give a TABLE or --flow NAME; {}",
            listing()
        )),
        (None, Some(name)) => {
            let Some(spec) = flows.iter().find(|f| f.name == name) else {
                return Err(format!(
                    "no flow {name:?} in the pipeline; flows: {}",
                    flows
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            match crate::checkpoint::compat::sink_table(spec) {
                Some(path) => Ok(TableTarget {
                    path: path.to_path_buf(),
                    role: format!("sink of flow {name}"),
                }),
                None => Err(format!(
                    "flow {name:?} writes no Delta table ({}); {}",
                    spec.sink.describe(),
                    listing()
                )),
            }
        }
        (Some(t), None) => {
            let given = Path::new(t);
            if let Some((p, role)) = known.iter().find(|(p, _)| same_path(p, given)) {
                return Ok(TableTarget {
                    path: p.clone(),
                    role: role.clone(),
                });
            }
            let by_name: Vec<&(PathBuf, String)> = known
                .iter()
                .filter(|(p, _)| p.file_name().is_some_and(|n| n == t))
                .collect();
            match by_name.as_slice() {
                [(p, role)] => Ok(TableTarget {
                    path: p.clone(),
                    role: role.clone(),
                }),
                [] if given.join("_delta_log").is_dir()
                    || crate::storage::location::is_remote_text(t) =>
                {
                    Ok(TableTarget {
                        path: given.to_path_buf(),
                        role: "not named by the pipeline".into(),
                    })
                }
                [] => Err(format!("no table {t:?}; {}", listing())),
                many => Err(format!(
                    "{t:?} names {} tables; give its path: {}",
                    many.len(),
                    many.iter()
                        .map(|(p, _)| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
    }
}

async fn open(path: &Path) -> Result<DeltaTable> {
    crate::delta::open_existing(path)
        .await?
        .ok_or_else(|| Error::Delta {
            path: path.display().to_string(),
            source: deltalake::DeltaTableError::NotATable(format!(
                "no Delta table at {} (no _delta_log)",
                path.display()
            )),
        })
}

fn version_of(table: &DeltaTable) -> u64 {
    table.version().unwrap_or_default()
}

/// Files, bytes and small files of a table's current version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    pub path: PathBuf,
    pub version: u64,
    pub files: u64,
    pub bytes: u64,
    /// The table's `delta.targetFileSize` (deltalake's default when unset): OPTIMIZE
    /// compacts files smaller than this.
    pub target_file_size: u64,
    /// Files smaller than the target size.
    pub small_files: u64,
    pub small_bytes: u64,
    /// Per partition (`a=1/b=x`, or `` for an unpartitioned table): small files, their bytes.
    pub small_by_partition: BTreeMap<String, (u64, u64)>,
}

impl TableStats {
    /// The partition with the most small files, when it has at least [`SMALL_FILES_WARNING`].
    pub fn small_files_warning(&self) -> Option<String> {
        let (part, (n, _)) = self
            .small_by_partition
            .iter()
            .max_by_key(|(_, (n, _))| *n)?;
        (*n >= SMALL_FILES_WARNING).then(|| {
            format!(
                "{n} small files (< {}){}: compact them with `weir table optimize`",
                bytesize::ByteSize(self.target_file_size),
                if part.is_empty() {
                    String::new()
                } else {
                    format!(" in partition {part}")
                }
            )
        })
    }
}

/// The current version's files, by deltalake's snapshot.
pub async fn stats(path: &Path) -> Result<TableStats> {
    let table = open(path).await?;
    stats_of(&table, path)
}

fn stats_of(table: &DeltaTable, path: &Path) -> Result<TableStats> {
    let snapshot = table.snapshot().map_err(|e| delta_error(path, e))?;
    let target = snapshot.table_config().target_file_size().get();
    let mut stats = TableStats {
        path: path.to_path_buf(),
        version: version_of(table),
        target_file_size: target,
        ..TableStats::default()
    };
    for file in snapshot.log_data().iter() {
        let size = file.size().max(0) as u64;
        stats.files += 1;
        stats.bytes += size;
        if size < target {
            stats.small_files += 1;
            stats.small_bytes += size;
            let mut values: Vec<(String, Option<String>)> =
                file.partition_values_map().into_iter().collect();
            values.sort();
            let part = values
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("null")))
                .collect::<Vec<_>>()
                .join("/");
            let e = stats.small_by_partition.entry(part).or_default();
            e.0 += 1;
            e.1 += size;
        }
    }
    Ok(stats)
}

/// What OPTIMIZE would do: the partitions with two or more small files (deltalake bins
/// files below the target size per partition and skips a bin of one file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OptimizePlan {
    pub target: TableTarget,
    pub stats: TableStats,
    /// The flows that read the table as a stream (they skip the OPTIMIZE commit).
    pub readers: Vec<String>,
}

impl OptimizePlan {
    /// Partitions OPTIMIZE compacts: (partition, small files, bytes).
    pub fn candidates(&self) -> Vec<(&str, u64, u64)> {
        self.stats
            .small_by_partition
            .iter()
            .filter(|(_, (n, _))| *n >= 2)
            .map(|(p, (n, b))| (p.as_str(), *n, *b))
            .collect()
    }

    pub fn is_noop(&self) -> bool {
        self.candidates().is_empty()
    }

    pub fn render(&self) -> String {
        let s = &self.stats;
        let mut out = format!(
            "optimize {} ({}), version {}: {} file(s), {}; {} smaller than the target file size {}\n",
            self.target.path.display(),
            self.target.role,
            s.version,
            s.files,
            bytesize::ByteSize(s.bytes),
            s.small_files,
            bytesize::ByteSize(s.target_file_size)
        );
        let candidates = self.candidates();
        if candidates.is_empty() {
            out.push_str("  nothing to compact (no partition has two or more small files)\n");
        }
        for (part, n, bytes) in candidates {
            out.push_str(&format!(
                "  compact {n} file(s), {} in {}\n",
                bytesize::ByteSize(bytes),
                if part.is_empty() {
                    "the table".to_string()
                } else {
                    format!("partition {part}")
                }
            ));
        }
        if !self.is_noop() {
            out.push_str(
                "  one OPTIMIZE commit: its adds and removes have dataChange = false, the rows stay the same; \
                 the old files stay until a VACUUM (time travel still reads them)\n",
            );
            for r in &self.readers {
                out.push_str(&format!(
                    "  flow {r} reads this table as a stream: it skips the OPTIMIZE commit (no row twice)\n"
                ));
            }
        }
        out
    }
}

/// Flows that read `table` as a stream (any of their sources).
fn stream_readers<'a>(flows: &'a [FlowSpec], table: &Path) -> Vec<(&'a FlowSpec, usize)> {
    let mut out = Vec::new();
    for f in flows {
        for (i, s) in f.sources().into_iter().enumerate() {
            if let SourceSpec::Delta(d) = s
                && same_path(&d.path, table)
            {
                out.push((f, i));
            }
        }
    }
    out
}

pub async fn plan_optimize(flows: &[FlowSpec], target: &TableTarget) -> Result<OptimizePlan> {
    let stats = stats(&target.path).await?;
    Ok(OptimizePlan {
        target: target.clone(),
        stats,
        readers: stream_readers(flows, &target.path)
            .into_iter()
            .map(|(f, _)| f.name.clone())
            .collect(),
    })
}

/// What an OPTIMIZE did (deltalake's metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Optimized {
    pub version_before: u64,
    pub version_after: u64,
    pub files_removed: u64,
    pub files_added: u64,
    pub bytes_removed: u64,
    pub bytes_added: u64,
    pub partitions_optimized: u64,
}

/// Runs deltalake's OPTIMIZE (compaction) on the table, through weir's durable store.
pub async fn optimize(path: &Path, target_size: Option<u64>) -> Result<Optimized> {
    // Refuse a path without a table before `open_table` would make a table-to-be of it.
    let version_before = version_of(&open(path).await?);
    let table = crate::delta::open_table(path).await?;
    let mut builder = table.optimize();
    if let Some(size) = target_size.and_then(NonZeroU64::new) {
        builder = builder.with_target_size(size);
    }
    let (table, metrics) = builder.await.map_err(|e| delta_error(path, e))?;
    Ok(Optimized {
        version_before,
        version_after: version_of(&table),
        files_removed: metrics.num_files_removed,
        files_added: metrics.num_files_added,
        bytes_removed: metrics.files_removed.total_size.max(0) as u64,
        bytes_added: metrics.files_added.total_size.max(0) as u64,
        partitions_optimized: metrics.partitions_optimized,
    })
}

/// `_weir/maintenance.json` in a flow's checkpoint: when the engine last compacted the
/// flow's sink table (`optimize_every`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
struct MaintenanceRecord {
    last_optimize_ms: i64,
}

fn maintenance_path(checkpoint: &Path) -> PathBuf {
    checkpoint.join("_weir").join("maintenance.json")
}

/// The sink's `optimize_every` (docs/maintenance.md): called by the engine between
/// batches, never during one. When `every` has passed since the last OPTIMIZE of this
/// flow (or since the flow first ran with the setting), compacts the table if it has a
/// partition with two or more small files. The time is recorded in the checkpoint
/// (`_weir/maintenance.json`), also when the OPTIMIZE fails, so a failing one is not
/// retried after every batch.
pub async fn optimize_if_due(
    checkpoint: &Path,
    table: &Path,
    every: Duration,
    now_ms: i64,
) -> Result<Option<Optimized>> {
    let record_path = maintenance_path(checkpoint);
    let record: Option<MaintenanceRecord> = std::fs::read_to_string(&record_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let write = |ms: i64| {
        let text = serde_json::to_string(&MaintenanceRecord {
            last_optimize_ms: ms,
        })
        .unwrap_or_default();
        crate::durable::write_atomic(&record_path, text.as_bytes())
            .map_err(|e| Error::unwritable(&record_path, e))
    };
    let Some(record) = record else {
        write(now_ms)?;
        return Ok(None);
    };
    let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
    if now_ms.saturating_sub(record.last_optimize_ms) < every_ms {
        return Ok(None);
    }
    write(now_ms)?;
    if !table.join("_delta_log").is_dir() {
        return Ok(None);
    }
    let stats = stats(table).await?;
    if !stats.small_by_partition.values().any(|(n, _)| *n >= 2) {
        return Ok(None);
    }
    optimize(table, None).await.map(Some)
}

/// A flow reading the table as a stream, and the oldest version it still has to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reader {
    pub flow: String,
    /// Source index of the flow (0: its `source`).
    pub source: usize,
    /// The oldest version whose files the flow still reads (`None`: caught up, or it
    /// starts at the table's latest snapshot).
    pub needs_version: Option<u64>,
    /// When that version was committed (ms since the epoch).
    pub committed_at_ms: Option<i64>,
    /// How it was found.
    pub why: String,
}

impl Reader {
    /// The shortest retention that keeps every file this reader still needs.
    pub fn min_retention(&self, now_ms: i64) -> Option<Duration> {
        let at = self.committed_at_ms?;
        Some(Duration::from_millis(
            now_ms.saturating_sub(at).max(0) as u64
        ))
    }
}

/// Where each stream reader of `table` stands: from its checkpoint's last committed
/// offset, the files it still has to read (planned as its Delta source plans, without
/// limits); the oldest version among them.
pub async fn readers(flows: &[FlowSpec], table: &Path) -> Result<Vec<Reader>> {
    let mut out = Vec::new();
    let handle = open(table).await?;
    for (flow, i) in stream_readers(flows, table) {
        let Some(SourceSpec::Delta(options)) = flow.sources().get(i).copied() else {
            continue;
        };
        let cp = Checkpoint::at(&flow.checkpoint);
        let committed = cp.latest_commit().ok().flatten().map(|(id, _)| id);
        let offset_of = |seq: crate::checkpoint::OffsetSeq| {
            seq.offsets
                .get(i)
                .cloned()
                .flatten()
                .and_then(|j| DeltaOffset::from_json(&j).ok())
        };
        let committed_offset = committed
            .and_then(|id| cp.read_offsets(id).ok())
            .and_then(offset_of);
        let (needs_version, why) = match (committed, committed_offset) {
            (Some(batch), Some(offset)) => {
                let mut source = DeltaSource::new(options.clone());
                let bounds = PlanBounds {
                    unbounded: true,
                    until_version: None,
                };
                match source.plan_with(Some(&offset), bounds).await {
                    Ok(Some(rest)) => {
                        let v = rest.files.iter().map(|f| f.version).min();
                        (
                            v,
                            format!(
                                "after batch {batch} it has {} file(s) of versions {}..={} to read",
                                rest.files.len(),
                                v.unwrap_or(offset.reservoir_version),
                                rest.latest_version
                            ),
                        )
                    }
                    Ok(None) => (None, format!("caught up after batch {batch}")),
                    Err(e) => (
                        Some(offset.reservoir_version),
                        format!(
                            "batch {batch} ended at version {} (cannot plan further: {e})",
                            offset.reservoir_version
                        ),
                    ),
                }
            }
            (Some(batch), None) => (
                Some(0),
                format!("no Delta offset in offsets/{batch}: assumed to need every version"),
            ),
            (None, _) => match cp.latest_offsets().ok().flatten() {
                Some((batch, seq)) => match offset_of(seq) {
                    Some(o) => (
                        Some(o.reservoir_version),
                        format!(
                            "its first batch {batch} is planned up to version {}",
                            o.reservoir_version
                        ),
                    ),
                    None => (Some(0), format!("offsets/{batch} is unreadable")),
                },
                None => match options.starting_version {
                    Some(StartingVersion::Version(v)) => {
                        (Some(v), format!("not started yet; starting_version = {v}"))
                    }
                    _ => (
                        None,
                        "not started yet; it starts at the table's latest version".to_string(),
                    ),
                },
            },
        };
        let committed_at_ms = match needs_version {
            Some(v) => commit_timestamp(&handle, table, v).await,
            None => None,
        };
        out.push(Reader {
            flow: flow.name.clone(),
            source: i,
            needs_version,
            committed_at_ms,
            why,
        });
    }
    Ok(out)
}

/// When version `v` was committed: its `commitInfo.timestamp`, else the log file's time.
/// `None` when the commit is gone (log cleanup).
async fn commit_timestamp(table: &DeltaTable, path: &Path, v: u64) -> Option<i64> {
    let bytes = table
        .log_store()
        .read_commit_entry(v as _)
        .await
        .ok()
        .flatten()?;
    let from_info = deltalake::logstore::get_actions(v as _, &bytes)
        .ok()?
        .into_iter()
        .find_map(|a| match a {
            Action::CommitInfo(ci) => ci.in_commit_timestamp.or(ci.timestamp),
            _ => None,
        });
    from_info.or_else(|| {
        let file = path.join("_delta_log").join(format!("{v:020}.json"));
        let modified = std::fs::metadata(file).ok()?.modified().ok()?;
        Some(chrono::DateTime::<chrono::Utc>::from(modified).timestamp_millis())
    })
}

/// A VACUUM decided: refused (with the reasons), or the files deltalake's dry run lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VacuumPlan {
    pub target: TableTarget,
    pub version: u64,
    pub retain: Duration,
    /// The table's `delta.deletedFileRetentionDuration` (Delta's default: 7 days).
    pub table_minimum: Duration,
    pub allow_short_retention: bool,
    pub readers: Vec<Reader>,
    /// Why VACUUM is refused; empty when it may run.
    pub refused: Vec<String>,
    /// The files VACUUM deletes (relative to the table), with their sizes.
    pub files: Vec<(String, u64)>,
}

/// Whole hours at least `d`, and at least one.
fn hours_up(d: Duration) -> u128 {
    d.as_millis().div_ceil(3_600_000).max(1)
}

fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

fn iso(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

impl VacuumPlan {
    pub fn render(&self) -> String {
        let mut out = format!(
            "vacuum {} ({}), version {}, --retain {} (the table's minimum: {}):\n",
            self.target.path.display(),
            self.target.role,
            self.version,
            fmt_duration(self.retain),
            fmt_duration(self.table_minimum)
        );
        for r in &self.readers {
            out.push_str(&format!(
                "  reader: flow {}{}: {}{}\n",
                r.flow,
                if r.source > 0 {
                    format!(" (source {})", r.source + 1)
                } else {
                    String::new()
                },
                r.why,
                match (r.needs_version, r.committed_at_ms) {
                    (Some(v), Some(at)) => format!("; version {v} was committed {}", iso(at)),
                    _ => String::new(),
                }
            ));
        }
        for reason in &self.refused {
            out.push_str(&format!("  refused: {reason}\n"));
        }
        if self.refused.is_empty() {
            if self.files.is_empty() {
                out.push_str("  no file to delete: none was removed from the table longer ago than the retention\n");
            } else {
                let total: u64 = self.files.iter().map(|(_, b)| b).sum();
                out.push_str(&format!(
                    "  delete {} file(s), {} (removed from the table by a commit more than {} ago):\n",
                    self.files.len(),
                    bytesize::ByteSize(total),
                    fmt_duration(self.retain)
                ));
                for (f, b) in &self.files {
                    out.push_str(&format!("    {f} ({})\n", bytesize::ByteSize(*b)));
                }
                out.push_str(&format!(
                    "  after it, time travel to versions whose files are deleted fails (versions older than about {})\n",
                    fmt_duration(self.retain)
                ));
            }
        }
        out
    }
}

/// Decides a VACUUM with retention `retain`: Delta's retention check, then the stream
/// readers' needs, then deltalake's dry run (nothing is deleted here).
pub async fn plan_vacuum(
    flows: &[FlowSpec],
    target: &TableTarget,
    retain: Duration,
    allow_short_retention: bool,
) -> Result<VacuumPlan> {
    let path = &target.path;
    let table = open(path).await?;
    let version = version_of(&table);
    let table_minimum = table
        .snapshot()
        .map_err(|e| delta_error(path, e))?
        .table_config()
        .deleted_file_retention_duration();
    let mut refused = Vec::new();
    if retain < table_minimum && !allow_short_retention {
        refused.push(format!(
            "--retain {} is shorter than the table's delta.deletedFileRetentionDuration ({}; Delta's default is 7 days). \
             A reader of an older version (time travel, a stream behind, a long-running write) may still need those files; \
             Delta refuses this too unless spark.databricks.delta.retentionDurationCheck.enabled = false. \
             Pass --allow-short-retention if no such reader exists",
            fmt_duration(retain),
            fmt_duration(table_minimum)
        ));
    }
    let readers = readers(flows, path).await?;
    let now = crate::clock::now_ms();
    for r in &readers {
        let Some(v) = r.needs_version else { continue };
        match r.min_retention(now) {
            Some(need) if need > retain => refused.push(format!(
                "flow {} still has to read version {v} of this table, committed {} ago: --retain {} could delete files it reads. \
                 Use --retain {}h or more, or let {} catch up first (weir run ... until its backlog is 0)",
                r.flow,
                fmt_duration(need),
                fmt_duration(retain),
                hours_up(need),
                r.flow
            )),
            Some(_) => {}
            None => refused.push(format!(
                "flow {} still has to read version {v} of this table, whose commit time is unknown (the log no longer has it): \
                 no retention is known to be safe; let {} catch up first",
                r.flow, r.flow
            )),
        }
    }
    let mut files = Vec::new();
    if refused.is_empty() {
        let (_, metrics) = table
            .vacuum()
            .with_retention_period(chrono::Duration::milliseconds(
                i64::try_from(retain.as_millis()).unwrap_or(i64::MAX),
            ))
            .with_enforce_retention_duration(!allow_short_retention)
            .with_dry_run(true)
            .await
            .map_err(|e| delta_error(path, e))?;
        for f in metrics.files_deleted {
            let size = std::fs::metadata(path.join(&f))
                .map(|m| m.len())
                .unwrap_or(0);
            files.push((f, size));
        }
        files.sort();
    }
    Ok(VacuumPlan {
        target: target.clone(),
        version,
        retain,
        table_minimum,
        allow_short_retention,
        readers,
        refused,
        files,
    })
}

/// Runs deltalake's VACUUM as planned (refused plans are refused again). Returns the
/// files deleted.
pub async fn vacuum(plan: &VacuumPlan) -> Result<Vec<String>> {
    let path = &plan.target.path;
    if !plan.refused.is_empty() {
        return Err(Error::Delta {
            path: path.display().to_string(),
            source: deltalake::DeltaTableError::Generic(plan.refused.join("; ")),
        });
    }
    open(path).await?;
    let table = crate::delta::open_table(path).await?;
    let (_, metrics) = table
        .vacuum()
        .with_retention_period(chrono::Duration::milliseconds(
            i64::try_from(plan.retain.as_millis()).unwrap_or(i64::MAX),
        ))
        .with_enforce_retention_duration(!plan.allow_short_retention)
        .await
        .map_err(|e| delta_error(path, e))?;
    Ok(metrics.files_deleted)
}

/// One commit of a table's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryEntry {
    pub version: u64,
    /// ISO-8601 UTC.
    pub timestamp: Option<String>,
    pub operation: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub operation_parameters: BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub operation_metrics: BTreeMap<String, serde_json::Value>,
    pub files_added: u64,
    pub files_removed: u64,
    /// Whether an add or remove changes the data (false for OPTIMIZE, metadata-only).
    pub data_change: bool,
    /// Application transactions (a streaming query's id and batch).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub txn: Vec<(String, i64)>,
}

/// The newest `limit` commits, newest first (deltalake's log reader; commits removed by
/// log cleanup are not listed).
pub async fn history(path: &Path, limit: usize) -> Result<Vec<HistoryEntry>> {
    let table = open(path).await?;
    let latest = version_of(&table);
    let log_store = table.log_store();
    let mut out = Vec::new();
    let mut v = latest;
    while out.len() < limit {
        let Some(bytes) = log_store
            .read_commit_entry(v as _)
            .await
            .map_err(|e| delta_error(path, e))?
        else {
            break;
        };
        let actions =
            deltalake::logstore::get_actions(v as _, &bytes).map_err(|e| delta_error(path, e))?;
        let mut entry = HistoryEntry {
            version: v,
            timestamp: None,
            operation: None,
            operation_parameters: BTreeMap::new(),
            operation_metrics: BTreeMap::new(),
            files_added: 0,
            files_removed: 0,
            data_change: false,
            txn: Vec::new(),
        };
        for action in actions {
            match action {
                Action::CommitInfo(ci) => {
                    entry.timestamp = ci.in_commit_timestamp.or(ci.timestamp).map(iso);
                    entry.operation = ci.operation;
                    entry.operation_parameters = ci
                        .operation_parameters
                        .unwrap_or_default()
                        .into_iter()
                        .collect();
                    if let Some(serde_json::Value::Object(m)) = ci.info.get("operationMetrics") {
                        entry.operation_metrics =
                            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    }
                }
                Action::Add(a) => {
                    entry.files_added += 1;
                    entry.data_change |= a.data_change;
                }
                Action::Remove(r) => {
                    entry.files_removed += 1;
                    entry.data_change |= r.data_change;
                }
                Action::Txn(t) => entry.txn.push((t.app_id, t.version)),
                _ => {}
            }
        }
        out.push(entry);
        if v == 0 {
            break;
        }
        v -= 1;
    }
    Ok(out)
}

/// The history as a table, one commit a line.
pub fn render_history(path: &Path, entries: &[HistoryEntry]) -> String {
    let mut out = format!("history of {}:\n", path.display());
    out.push_str(&format!(
        "{:>7}  {:<24}  {:<18}  {:>5}  {:>7}  {:<11}  metrics\n",
        "version", "timestamp", "operation", "adds", "removes", "dataChange"
    ));
    for e in entries {
        let metrics = e
            .operation_metrics
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" ");
        let txn = e
            .txn
            .iter()
            .map(|(id, v)| format!(" txn={id}:{v}"))
            .collect::<String>();
        out.push_str(&format!(
            "{:>7}  {:<24}  {:<18}  {:>5}  {:>7}  {:<11}  {metrics}{txn}\n",
            e.version,
            e.timestamp.as_deref().unwrap_or("-"),
            e.operation.as_deref().unwrap_or("-"),
            e.files_added,
            e.files_removed,
            if e.files_added + e.files_removed == 0 {
                "-"
            } else if e.data_change {
                "true"
            } else {
                "false"
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_small_files_in_one_partition_warn() {
        let mut stats = TableStats {
            target_file_size: 100 << 20,
            ..TableStats::default()
        };
        stats
            .small_by_partition
            .insert("day=1".into(), (SMALL_FILES_WARNING - 1, 1000));
        assert_eq!(stats.small_files_warning(), None);
        stats
            .small_by_partition
            .insert("day=2".into(), (SMALL_FILES_WARNING, 1000));
        let w = stats.small_files_warning().unwrap();
        assert!(
            w.contains("50 small files") && w.contains("partition day=2"),
            "{w}"
        );
    }

    #[test]
    fn a_table_is_named_by_path_directory_name_or_flow() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "[[flow]]\nname = \"b\"\n[flow.source]\ntype = \"files\"\npath = \"in\"\nformat = \"json\"\n\
             [flow.sink]\ntype = \"delta\"\npath = \"tables/bronze\"\n\
             [[flow]]\nname = \"s\"\n[flow.source]\ntype = \"delta\"\npath = \"tables/bronze\"\n\
             [flow.sink]\ntype = \"memory\"\n",
        )
        .unwrap();
        let pipeline = crate::pipeline::load(&p).unwrap();
        let by_name = resolve(&pipeline.flows, Some("bronze"), None).unwrap();
        assert_eq!(by_name.role, "sink of flow b");
        let by_flow = resolve(&pipeline.flows, None, Some("b")).unwrap();
        assert_eq!(by_flow, by_name);
        let by_path = resolve(
            &pipeline.flows,
            Some(&dir.path().join("tables/./bronze").display().to_string()),
            None,
        )
        .unwrap();
        assert_eq!(by_path.path, by_name.path);
        assert!(
            resolve(&pipeline.flows, None, Some("s"))
                .unwrap_err()
                .contains("writes no Delta table")
        );
        assert!(
            resolve(&pipeline.flows, Some("x"), None)
                .unwrap_err()
                .contains("sink of flow b")
        );
        assert_eq!(stream_readers(&pipeline.flows, &by_name.path).len(), 1);
    }
}
