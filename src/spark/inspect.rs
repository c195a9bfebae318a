//! `weir inspect` and `weir diff` over a Spark checkpoint: what Spark will do
//! at restart (the last planned, committed and pending batch), each source's
//! offsets and log, each stateful operator's versions on disk and store
//! format, and every file that is missing, torn or too new. Reads only.
//!
//! The JSON keeps the field names of weir's own `inspect --json` where they
//! mean the same (`query_id`, `last_batch_id`, `last_committed_batch_id`,
//! `pending_batch_id`, `watermark_ms`, `sources[]`, `batches[]`,
//! `state_operators[]`, `problems[]`) and adds `"engine": "spark"`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::checkpoint::{
    Problem, SourceKind, SourceLogSummary, SparkCheckpoint, StateOperator, StoreFormat, batch_ids,
};

#[derive(Debug, Clone, Serialize)]
pub struct SparkInspection {
    /// Always `"spark"`.
    pub engine: &'static str,
    pub checkpoint: PathBuf,
    pub query_id: Option<String>,
    /// Last planned batch (`offsets/N`).
    pub last_batch_id: Option<u64>,
    pub last_committed_batch_id: Option<u64>,
    /// Planned, not committed: Spark re-runs it (same id, same offsets) on restart.
    pub pending_batch_id: Option<u64>,
    /// What restarting will do, in words.
    pub restart: String,
    /// `batchWatermarkMs` of the last planned batch.
    pub watermark_ms: Option<i64>,
    /// `nextBatchWatermarkMs` of the last commit.
    pub next_watermark_ms: Option<i64>,
    pub offset_log_version: Option<u32>,
    pub commit_log_version: Option<u32>,
    /// `spark.sql.streaming.stateStore.providerClass` pinned in the offset log.
    pub state_store_provider: Option<String>,
    /// `spark.sql.shuffle.partitions` pinned in the offset log (changing it later has no effect).
    pub shuffle_partitions: Option<u64>,
    /// The confs pinned in the last offsets file.
    pub conf: BTreeMap<String, String>,
    pub sources: Vec<SourceReport>,
    pub batches: Vec<BatchReport>,
    pub state_operators: Vec<StateOperatorReport>,
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceReport {
    pub index: usize,
    /// Named sources (offset log v2).
    pub name: Option<String>,
    pub kind: SourceKind,
    /// End offset of the last planned batch.
    pub latest_offset: Option<serde_json::Value>,
    /// End offset of the last committed batch.
    pub committed_offset: Option<serde_json::Value>,
    /// `sources/<index|name>/`.
    pub log: Option<SourceLogSummary>,
    /// Set when the source is no longer in the last planned batch (a named source
    /// dropped at a restart, Spark's `queryEvolution.enableSourceEvolution`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<RemovedSource>,
}

/// Where a source removed by source evolution left the query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemovedSource {
    /// The first planned batch without it (`None`: the offsets that name it are purged).
    pub at_batch: Option<u64>,
    /// The last planned batch with it.
    pub last_batch: Option<u64>,
    /// Its end offset in that batch: where it stopped.
    pub last_offset: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BatchReport {
    pub batch_id: u64,
    pub committed: bool,
    pub batch_timestamp_ms: Option<i64>,
    pub watermark_ms: Option<i64>,
    pub next_watermark_ms: Option<i64>,
    pub end_offsets: Vec<Option<serde_json::Value>>,
    /// The source of each end offset: its name (named sources), else its index.
    pub end_offset_sources: Vec<String>,
    /// File source: files of this batch in the source log.
    pub num_files: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StateOperatorReport {
    pub operator_id: u64,
    pub operator_name: Option<String>,
    /// `hdfs` (`.delta`/`.snapshot`), `rocksdb` (`.changelog`/`.zip`), `empty`.
    pub store_format: StoreFormat,
    /// 2 when file names carry unique ids (`stateStore.checkpointFormatVersion=2`).
    pub checkpoint_format_version: u32,
    pub metadata_version: Option<u32>,
    pub stores: Vec<String>,
    pub num_partitions: Option<u64>,
    /// Lowest and highest version on disk, over every partition and store.
    pub min_version: Option<u64>,
    pub max_version: Option<u64>,
    /// Bytes of every version file on disk.
    pub total_bytes: u64,
    pub schema_files: Vec<PathBuf>,
    pub partitions: Vec<PartitionReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PartitionReport {
    pub partition: u64,
    pub store: String,
    /// Versions with a delta or changelog file.
    pub delta_versions: Vec<u64>,
    /// Versions with a snapshot or zip file.
    pub snapshot_versions: Vec<u64>,
    pub latest_version: Option<u64>,
    pub bytes: u64,
}

impl StateOperatorReport {
    fn of(op: &StateOperator) -> Self {
        let range = op.version_range();
        StateOperatorReport {
            operator_id: op.operator_id,
            operator_name: op.operator_name.clone(),
            store_format: op.format(),
            checkpoint_format_version: op.checkpoint_format_version(),
            metadata_version: op.metadata_version,
            stores: op.store_names.clone(),
            num_partitions: op.num_partitions,
            min_version: range.map(|r| r.0),
            max_version: range.map(|r| r.1),
            total_bytes: op.total_bytes(),
            schema_files: op.schema_files.clone(),
            partitions: op
                .stores
                .iter()
                .map(|s| PartitionReport {
                    partition: s.partition,
                    store: s.store.clone(),
                    delta_versions: s
                        .versions
                        .iter()
                        .filter(|(_, f)| f.is_delta())
                        .map(|(v, _)| *v)
                        .collect(),
                    snapshot_versions: s
                        .versions
                        .iter()
                        .filter(|(_, f)| f.is_snapshot())
                        .map(|(v, _)| *v)
                        .collect(),
                    latest_version: s.versions.keys().next_back().copied(),
                    bytes: s
                        .versions
                        .values()
                        .map(|f| {
                            f.delta_bytes.unwrap_or(0)
                                + f.snapshot_bytes.unwrap_or(0)
                                + f.changelog_bytes.unwrap_or(0)
                                + f.zip_bytes.unwrap_or(0)
                        })
                        .sum(),
                })
                .collect(),
        }
    }
}

fn list_ids(dir: &Path, problems: &mut Vec<Problem>) -> Vec<u64> {
    batch_ids(dir).unwrap_or_else(|e| {
        problems.push(Problem::new(dir, format!("cannot list: {e}")));
        Vec::new()
    })
}

/// Reads a Spark checkpoint. `Err` only when `root` is not a directory.
pub fn inspect(root: &Path) -> crate::Result<SparkInspection> {
    if !root.is_dir() {
        return Err(crate::Error::checkpoint(
            root,
            "no such checkpoint directory",
        ));
    }
    let cp = SparkCheckpoint::at(root);
    let mut problems = Vec::new();
    let query_id = cp.query_id().map_err(|p| problems.push(p)).ok();
    let offsets = list_ids(&cp.offsets_dir(), &mut problems);
    let commits = list_ids(&cp.commits_dir(), &mut problems);
    let mut batches = Vec::new();
    let mut last_offsets = None;
    let mut last_commit = None;
    let mut committed_offsets: Option<Vec<Option<serde_json::Value>>> = None;
    // (batch, source name, end offset) of every named source, batch by batch.
    let mut named_history: Vec<(u64, String, Option<serde_json::Value>)> = Vec::new();
    for &id in &offsets {
        let seq = cp.read_offsets(id).map_err(|p| problems.push(p)).ok();
        let committed = commits.binary_search(&id).is_ok();
        let commit = if committed {
            cp.read_commit(id).map_err(|p| problems.push(p)).ok()
        } else {
            None
        };
        let end_offsets: Vec<Option<serde_json::Value>> = seq
            .as_ref()
            .map(|s| s.sources.iter().map(|o| o.offset.clone()).collect())
            .unwrap_or_default();
        let end_offset_sources: Vec<String> = seq
            .as_ref()
            .map(|s| {
                s.sources
                    .iter()
                    .enumerate()
                    .map(|(i, o)| source_label(i, o.name.as_deref()))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(seq) = &seq {
            named_history.extend(
                seq.sources
                    .iter()
                    .filter_map(|o| o.name.as_ref().map(|n| (id, n.clone(), o.offset.clone()))),
            );
        }
        if committed && seq.is_some() {
            committed_offsets = Some(end_offsets.clone());
        }
        batches.push(BatchReport {
            batch_id: id,
            committed,
            batch_timestamp_ms: seq.as_ref().map(|s| s.batch_timestamp_ms),
            watermark_ms: seq.as_ref().map(|s| s.batch_watermark_ms),
            next_watermark_ms: commit.as_ref().map(|c| c.next_batch_watermark_ms),
            end_offsets,
            end_offset_sources,
            num_files: None,
        });
        if seq.is_some() {
            last_offsets = seq;
        }
        if commit.is_some() {
            last_commit = commit;
        }
    }
    for &id in &commits {
        if offsets.binary_search(&id).is_err() {
            problems.push(Problem::new(
                &cp.commit_path(id),
                format!("commits/{id} has no offsets/{id}"),
            ));
        }
    }
    let last_batch_id = offsets.last().copied();
    let last_committed_batch_id = commits.last().copied();
    let pending_batch_id = last_batch_id.filter(|n| last_committed_batch_id.is_none_or(|m| n > &m));
    let uncommitted: Vec<u64> = offsets
        .iter()
        .copied()
        .filter(|n| last_committed_batch_id.is_none_or(|m| *n > m))
        .collect();
    let restart = match (pending_batch_id, last_committed_batch_id) {
        (Some(n), _) if uncommitted.len() > 1 => format!(
            "offsets/{} without commits: Spark re-runs batch {n} on restart (the earlier uncommitted batches {:?} are not re-run)",
            uncommitted
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", offsets/"),
            &uncommitted[..uncommitted.len() - 1]
        ),
        (Some(n), _) => format!(
            "offsets/{n} without commits/{n}: Spark re-runs batch {n} on restart, with the same offsets"
        ),
        (None, Some(m)) => format!(
            "batch {m} is committed: Spark plans batch {} on restart",
            m + 1
        ),
        (None, None) => "no batch planned yet: Spark starts at batch 0".to_string(),
    };
    // Sources: from the last planned offsets, with their logs.
    let source_logs = cp.source_logs();
    let mut sources = Vec::new();
    let mut files_per_batch: BTreeMap<u64, u64> = BTreeMap::new();
    if let Some(seq) = &last_offsets {
        for (i, so) in seq.sources.iter().enumerate() {
            let kind = so
                .offset
                .as_ref()
                .map_or(SourceKind::Unknown, SourceKind::of);
            let log = cp.source_log(i, so.name.as_deref());
            let summary = log.as_ref().map(|l| l.summary(kind, &mut problems));
            if kind == SourceKind::File
                && let Some(l) = &log
                && let Ok(entries) = l.all_entries()
            {
                for e in entries {
                    *files_per_batch.entry(e.batch_id).or_default() += 1;
                }
            }
            // The log of the batch the offset names must be there (Spark reads it to re-run the batch).
            if kind == SourceKind::File
                && let Some(l) = &log
                && let Some(n) = so
                    .offset
                    .as_ref()
                    .and_then(|o| o.get("logOffset"))
                    .and_then(serde_json::Value::as_u64)
            {
                match l.files_of_batch(n) {
                    Ok(Some(_)) => {}
                    Ok(None) => problems.push(Problem::new(
                        &l.dir.join(n.to_string()),
                        format!(
                            "missing: offsets name logOffset {n} but the source log has no batch {n} (neither {n} nor a later .compact)"
                        ),
                    )),
                    Err(p) => problems.push(p),
                }
            }
            sources.push(SourceReport {
                index: i,
                name: so.name.clone(),
                kind,
                latest_offset: so.offset.clone(),
                committed_offset: committed_offsets
                    .as_ref()
                    .and_then(|c| c.get(i).cloned().flatten()),
                log: summary,
                removed: None,
            });
        }
    }
    // Named sources of earlier batches that the last planned one no longer has.
    for (batch, name, offset) in &named_history {
        let (batch, label) = (*batch, name.as_str());
        let listed = sources.iter().any(|s| s.name.as_deref() == Some(label));
        if let Some(gone) = sources
            .iter_mut()
            .find(|s| s.removed.is_some() && s.name.as_deref() == Some(label))
        {
            gone.removed = Some(RemovedSource {
                at_batch: None,
                last_batch: Some(batch),
                last_offset: offset.clone(),
            });
            gone.kind = offset.as_ref().map_or(gone.kind, SourceKind::of);
        } else if !listed {
            sources.push(SourceReport {
                index: sources.len(),
                name: Some(label.to_string()),
                kind: offset.as_ref().map_or(SourceKind::Unknown, SourceKind::of),
                latest_offset: None,
                committed_offset: None,
                log: None,
                removed: Some(RemovedSource {
                    at_batch: None,
                    last_batch: Some(batch),
                    last_offset: offset.clone(),
                }),
            });
        }
    }
    for s in sources.iter_mut() {
        if let Some(r) = &mut s.removed {
            r.at_batch = r
                .last_batch
                .and_then(|last| batches.iter().map(|b| b.batch_id).find(|id| *id > last));
            if s.log.is_none()
                && let Some(l) = cp.source_log(s.index, s.name.as_deref())
            {
                s.log = Some(l.summary(s.kind, &mut Vec::new()));
            }
        }
    }
    // Logs of sources no longer in the plan (named sources dropped at a restart).
    for l in &source_logs {
        let listed = sources.iter().any(|s| {
            s.name.as_deref() == Some(l.name.as_str())
                || (s.name.is_none() && s.index.to_string() == l.name)
        });
        if !listed {
            let kind = if l.all_entries().is_ok_and(|e| !e.is_empty()) {
                SourceKind::File
            } else {
                SourceKind::Unknown
            };
            sources.push(SourceReport {
                index: sources.len(),
                name: Some(l.name.clone()),
                kind,
                latest_offset: None,
                committed_offset: None,
                log: Some(l.summary(kind, &mut Vec::new())),
                removed: Some(RemovedSource {
                    at_batch: None,
                    last_batch: None,
                    last_offset: None,
                }),
            });
        }
    }
    if !files_per_batch.is_empty() {
        for b in &mut batches {
            b.num_files = Some(files_per_batch.get(&b.batch_id).copied().unwrap_or(0));
        }
    }
    let ops = super::checkpoint::state_operators(&cp, &mut problems);
    let conf = last_offsets
        .as_ref()
        .map(|o| o.conf.clone())
        .unwrap_or_default();
    Ok(SparkInspection {
        engine: "spark",
        checkpoint: root.to_path_buf(),
        query_id,
        last_batch_id,
        last_committed_batch_id,
        pending_batch_id,
        restart,
        watermark_ms: last_offsets.as_ref().map(|o| o.batch_watermark_ms),
        next_watermark_ms: last_commit.as_ref().map(|c| c.next_batch_watermark_ms),
        offset_log_version: last_offsets.as_ref().map(|o| o.version),
        commit_log_version: last_commit.as_ref().map(|c| c.version),
        state_store_provider: conf
            .get("spark.sql.streaming.stateStore.providerClass")
            .cloned(),
        shuffle_partitions: conf
            .get("spark.sql.shuffle.partitions")
            .and_then(|v| v.parse().ok()),
        conf,
        sources,
        batches,
        state_operators: ops.iter().map(StateOperatorReport::of).collect(),
        problems,
    })
}

/// A source as the batch table and `end_offset_sources` name it: its name, else its index.
fn source_label(index: usize, name: Option<&str>) -> String {
    name.map_or_else(|| index.to_string(), str::to_string)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

fn opt_json(v: Option<&serde_json::Value>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

fn ms(v: Option<i64>) -> String {
    match v {
        Some(0) => "0 (none yet)".to_string(),
        Some(m) => format!("{m} ({})", super::iso(m)),
        None => "-".to_string(),
    }
}

/// Ranges of consecutive numbers: `1-9, 12`.
fn ranges(v: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if out.is_empty() {
        "-".to_string()
    } else {
        out.join(", ")
    }
}

/// Batches shown in the text form (the JSON has all).
const TEXT_BATCHES: usize = 20;

/// The batch table of the text form: one named column per source's end offset (`src_a
/// end offset`, or `0 end offset` for an unnamed source), `n/a` where a batch's plan does
/// not have that source (added later, or removed by source evolution), `-` where it has
/// no offset yet (Spark writes `-`).
fn batch_table(i: &SparkInspection) -> String {
    let skip = i.batches.len().saturating_sub(TEXT_BATCHES);
    let shown = &i.batches[skip..];
    let mut columns: Vec<String> = Vec::new();
    for s in &i.sources {
        let label = source_label(s.index, s.name.as_deref());
        if shown.iter().any(|b| b.end_offset_sources.contains(&label)) && !columns.contains(&label)
        {
            columns.push(label);
        }
    }
    for b in shown {
        for label in &b.end_offset_sources {
            if !columns.contains(label) {
                columns.push(label.clone());
            }
        }
    }
    let headers: Vec<String> = columns.iter().map(|c| format!("{c} end offset")).collect();
    let cells: Vec<Vec<String>> = shown
        .iter()
        .map(|b| {
            columns
                .iter()
                .map(|c| {
                    b.end_offset_sources
                        .iter()
                        .position(|l| l == c)
                        .map_or("n/a".to_string(), |k| {
                            opt_json(b.end_offsets.get(k).and_then(Option::as_ref))
                        })
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(k, h)| {
            cells
                .iter()
                .map(|row| row[k].chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let row = |fixed: String, offsets: &[String]| {
        let mut line = fixed;
        for (k, o) in offsets.iter().enumerate() {
            line.push_str(&format!("  {o:<w$}", w = widths[k]));
        }
        format!("{}\n", line.trim_end())
    };
    let mut out = String::from("\n");
    out.push_str(&row(
        format!(
            " {:<6} {:<10} {:<26} {:<15} {:<5}",
            "batch", "state", "planned (UTC)", "watermark ms", "files"
        ),
        &headers,
    ));
    if skip > 0 {
        out.push_str(&format!(
            " ... {skip} earlier batch(es) (--json lists all)\n"
        ));
    }
    for (b, offsets) in shown.iter().zip(&cells) {
        out.push_str(&row(
            format!(
                " {:<6} {:<10} {:<26} {:<15} {:<5}",
                b.batch_id,
                if b.committed { "committed" } else { "pending" },
                b.batch_timestamp_ms.map_or("-".into(), super::iso),
                opt(b.watermark_ms),
                opt(b.num_files),
            ),
            offsets,
        ));
    }
    out
}

/// The human form.
pub fn render_text(i: &SparkInspection) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "checkpoint  {} (Apache Spark)\n",
        i.checkpoint.display()
    ));
    out.push_str(&format!("query id    {}\n", opt(i.query_id.as_deref())));
    out.push_str(&format!(
        "batches     last planned {}, last committed {}, pending {}\n",
        opt(i.last_batch_id),
        opt(i.last_committed_batch_id),
        opt(i.pending_batch_id)
    ));
    out.push_str(&format!("restart     {}\n", i.restart));
    out.push_str(&format!(
        "watermark   {} ms; next batch {} ms\n",
        ms(i.watermark_ms),
        ms(i.next_watermark_ms)
    ));
    out.push_str(&format!(
        "logs        offsets v{}, commits v{}; state store {}; shuffle partitions {}\n",
        opt(i.offset_log_version),
        opt(i.commit_log_version),
        i.state_store_provider
            .as_deref()
            .map_or("-", |p| p.rsplit('.').next().unwrap_or(p)),
        opt(i.shuffle_partitions)
    ));
    for s in &i.sources {
        let name = s.name.clone().unwrap_or_else(|| s.index.to_string());
        match &s.removed {
            None => out.push_str(&format!(
                "source {name:<4} {:?}: latest offset {}, committed {}\n",
                s.kind,
                opt_json(s.latest_offset.as_ref()),
                opt_json(s.committed_offset.as_ref())
            )),
            Some(RemovedSource {
                at_batch,
                last_batch: Some(last),
                last_offset,
            }) => out.push_str(&format!(
                "source {name:<4} {:?}: removed (source evolution){}; last offset {} in batch {last}\n",
                s.kind,
                at_batch.map_or(String::new(), |b| format!(" at batch {b}")),
                opt_json(last_offset.as_ref()),
            )),
            Some(_) => out.push_str(&format!(
                "source {name:<4} {:?}: removed (source evolution) before batch {}: no offsets file left names it\n",
                s.kind,
                opt(i.batches.first().map(|b| b.batch_id)),
            )),
        }
        if let Some(l) = &s.log {
            let mut parts = vec![format!("batch files {}", ranges(&l.batch_files))];
            if !l.compact_files.is_empty() {
                parts.push(format!("compact {}", ranges(&l.compact_files)));
            }
            if let Some(f) = l.files {
                parts.push(format!("{f} input file(s)"));
            }
            if let Some(t) = l.start_ms {
                parts.push(format!("started {}", super::iso(t)));
            }
            out.push_str(&format!(
                "            log {}: {}\n",
                l.dir.display(),
                parts.join(", ")
            ));
        }
    }
    out.push_str(&batch_table(i));
    for op in &i.state_operators {
        out.push_str(&format!(
            "\nstate {}: {} ({:?} store, checkpoint format v{}), stores [{}], {} partition(s), versions {}..{}, {} bytes\n",
            op.operator_id,
            op.operator_name.as_deref().unwrap_or("?"),
            op.store_format,
            op.checkpoint_format_version,
            op.stores.join(", "),
            opt(op.num_partitions),
            opt(op.min_version),
            opt(op.max_version),
            op.total_bytes
        ));
        out.push_str(
            " partition  store                      deltas/changelogs  snapshots  latest\n",
        );
        for p in &op.partitions {
            out.push_str(&format!(
                " {:<10} {:<26} {:<18} {:<10} {}\n",
                p.partition,
                p.store,
                ranges(&p.delta_versions),
                ranges(&p.snapshot_versions),
                opt(p.latest_version)
            ));
        }
    }
    for p in &i.problems {
        out.push_str(&format!("problem: {p}\n"));
    }
    out
}

/// One side of a diff: a checkpoint at a batch.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Side {
    pub label: String,
    pub query_id: Option<String>,
    pub batch_id: Option<u64>,
    pub committed: bool,
    pub end_offsets: Vec<Option<serde_json::Value>>,
    pub watermark_ms: Option<i64>,
    pub next_watermark_ms: Option<i64>,
    pub batch_timestamp_ms: Option<i64>,
    pub num_files: Option<u64>,
    /// Per operator: bytes of state version N + 1 (written by batch N) over all partitions.
    pub state_bytes: BTreeMap<u64, u64>,
    pub conf: BTreeMap<String, String>,
}

/// A Spark checkpoint at `batch` (default: the last committed batch).
pub fn side(root: &Path, batch: Option<u64>) -> crate::Result<Side> {
    if !root.is_dir() {
        return Err(crate::Error::checkpoint(
            root,
            "no such checkpoint directory",
        ));
    }
    let cp = SparkCheckpoint::at(root);
    let commits = batch_ids(&cp.commits_dir())
        .map_err(|e| crate::Error::checkpoint(cp.commits_dir(), e.to_string()))?;
    let batch_id = batch.or_else(|| commits.last().copied());
    let label = match batch {
        Some(b) => format!("{} @ batch {b}", root.display()),
        None => root.display().to_string(),
    };
    let seq = match batch_id {
        Some(id) => Some(
            cp.read_offsets(id)
                .map_err(|p| crate::Error::checkpoint(&p.path, p.message))?,
        ),
        None => None,
    };
    let commit = match batch_id {
        Some(id) if commits.binary_search(&id).is_ok() => Some(
            cp.read_commit(id)
                .map_err(|p| crate::Error::checkpoint(&p.path, p.message))?,
        ),
        _ => None,
    };
    let mut num_files = None;
    if let (Some(id), Some(s)) = (batch_id, &seq)
        && let Some(first) = s.sources.first()
        && first.offset.as_ref().map(SourceKind::of) == Some(SourceKind::File)
        && let Some(log) = cp.source_log(0, first.name.as_deref())
        && let Ok(Some(files)) = log.files_of_batch(id)
    {
        num_files = Some(files.len() as u64);
    }
    let mut state_bytes = BTreeMap::new();
    if let Some(id) = batch_id {
        for op in super::checkpoint::state_operators(&cp, &mut Vec::new()) {
            let bytes: u64 = op
                .stores
                .iter()
                .filter_map(|s| s.versions.get(&(id + 1)))
                .map(|f| {
                    f.delta_bytes.unwrap_or(0)
                        + f.snapshot_bytes.unwrap_or(0)
                        + f.changelog_bytes.unwrap_or(0)
                        + f.zip_bytes.unwrap_or(0)
                })
                .sum();
            state_bytes.insert(op.operator_id, bytes);
        }
    }
    Ok(Side {
        label,
        query_id: cp.query_id().ok(),
        batch_id,
        committed: commit.is_some(),
        end_offsets: seq
            .as_ref()
            .map(|s| s.sources.iter().map(|o| o.offset.clone()).collect())
            .unwrap_or_default(),
        watermark_ms: seq.as_ref().map(|s| s.batch_watermark_ms),
        next_watermark_ms: commit.as_ref().map(|c| c.next_batch_watermark_ms),
        batch_timestamp_ms: seq.as_ref().map(|s| s.batch_timestamp_ms),
        num_files,
        state_bytes,
        conf: seq.map(|s| s.conf).unwrap_or_default(),
    })
}

/// A field that differs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Change {
    pub field: String,
    pub a: String,
    pub b: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diff {
    pub engine: &'static str,
    pub a: Side,
    pub b: Side,
    pub changes: Vec<Change>,
}

/// Compares two sides field by field (offsets per source, confs per key).
pub fn diff(a: Side, b: Side) -> Diff {
    fn show<T: std::fmt::Display>(v: &Option<T>) -> String {
        v.as_ref().map_or("-".to_string(), |v| v.to_string())
    }
    let mut changes = Vec::new();
    let mut push = |field: String, x: String, y: String| {
        if x != y {
            changes.push(Change { field, a: x, b: y });
        }
    };
    push("query id".into(), show(&a.query_id), show(&b.query_id));
    push("batch".into(), show(&a.batch_id), show(&b.batch_id));
    push(
        "committed".into(),
        a.committed.to_string(),
        b.committed.to_string(),
    );
    for i in 0..a.end_offsets.len().max(b.end_offsets.len()) {
        let get = |s: &Side| {
            s.end_offsets
                .get(i)
                .cloned()
                .flatten()
                .map_or("-".to_string(), |v| v.to_string())
        };
        push(format!("source {i} end offset"), get(&a), get(&b));
    }
    push(
        "watermark ms".into(),
        show(&a.watermark_ms),
        show(&b.watermark_ms),
    );
    push(
        "next watermark ms".into(),
        show(&a.next_watermark_ms),
        show(&b.next_watermark_ms),
    );
    push(
        "files in batch".into(),
        show(&a.num_files),
        show(&b.num_files),
    );
    let ops: std::collections::BTreeSet<u64> = a
        .state_bytes
        .keys()
        .chain(b.state_bytes.keys())
        .copied()
        .collect();
    for op in ops {
        push(
            format!("state {op} bytes"),
            show(&a.state_bytes.get(&op)),
            show(&b.state_bytes.get(&op)),
        );
    }
    let keys: std::collections::BTreeSet<&String> = a.conf.keys().chain(b.conf.keys()).collect();
    for k in keys {
        push(
            format!("conf {k}"),
            show(&a.conf.get(k)),
            show(&b.conf.get(k)),
        );
    }
    Diff {
        engine: "spark",
        a,
        b,
        changes,
    }
}

pub fn render_diff(d: &Diff) -> String {
    let mut out = format!("A  {}\nB  {}\n", d.a.label, d.b.label);
    if d.changes.is_empty() {
        out.push_str("no differences\n");
        return out;
    }
    let w = d
        .changes
        .iter()
        .map(|c| c.field.len())
        .max()
        .unwrap_or(5)
        .max(5);
    out.push_str(&format!("\n{:<w$}  A -> B\n", "field"));
    for c in &d.changes {
        out.push_str(&format!("{:<w$}  {} -> {}\n", c.field, c.a, c.b));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_compress_runs() {
        assert_eq!(ranges(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
        assert_eq!(ranges(&[]), "-");
    }
}
