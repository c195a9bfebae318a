//! A read-only report of a checkpoint (`weir inspect`). Never writes: the
//! ledger is opened read-only and the Delta table is only loaded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::checkpoint::lock::{CheckpointLock, LockHolder};
use crate::checkpoint::progress::read_progress;
use crate::error::Result;
use crate::source::files::ledger::{Ledger, LedgerStats};

#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub checkpoint: PathBuf,
    pub flow: Option<String>,
    pub query_id: Option<String>,
    /// Last planned batch (`offsets/N`).
    pub last_batch_id: Option<u64>,
    pub last_committed_batch_id: Option<u64>,
    /// Planned but not committed: re-run by the next start.
    pub pending_batch_id: Option<u64>,
    pub watermark_ms: i64,
    pub sources: Vec<SourceReport>,
    pub ledger: Option<LedgerStats>,
    pub sink: Option<SinkReport>,
    pub lock: Option<LockHolder>,
    pub batches: Vec<BatchReport>,
    /// Stateful operators (`state/<id>/`): name, keys, bytes per version.
    pub state_operators: Vec<StateOperatorReport>,
    /// The file source's schema versions (`_schemas/`), oldest first.
    pub schema_history: Vec<SchemaHistoryEntry>,
    /// The latest health verdict (`_weir/health.json`).
    pub health: Option<crate::records::HealthRecord>,
    /// Corrupt, truncated or missing files, each with what is wrong.
    pub problems: Vec<String>,
    /// Bytes and entries on disk (docs/maintenance.md).
    pub disk: DiskReport,
    /// Not a problem of the checkpoint, but worth acting on (many small files in the sink table).
    pub warnings: Vec<String>,
}

/// What the checkpoint keeps on disk: its size and the parts that grow.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DiskReport {
    /// Every file under the checkpoint directory.
    pub checkpoint_bytes: u64,
    /// Entries in `offsets/` and `commits/` (bounded by `min_batches_to_retain`).
    pub offsets_files: u64,
    pub commits_files: u64,
    /// `state/` (bounded by `min_batches_to_retain` versions).
    pub state_bytes: u64,
    /// The file ledgers (`sources/*/ledger.sqlite`): one row per file ingested.
    pub ledger_bytes: u64,
}

fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() => total += tree_bytes(&entry.path()),
            Ok(t) if t.is_file() => total += entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => {}
        }
    }
    total
}

fn disk_report(cp: &Checkpoint, offsets: usize, commits: usize) -> DiskReport {
    let sources = cp.root().join("sources");
    let ledger_bytes = std::fs::read_dir(&sources)
        .map(|d| d.flatten().map(|e| tree_bytes(&e.path())).sum::<u64>())
        .unwrap_or(0);
    DiskReport {
        checkpoint_bytes: tree_bytes(cp.root()),
        offsets_files: offsets as u64,
        commits_files: commits as u64,
        state_bytes: tree_bytes(&cp.root().join("state")),
        ledger_bytes,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StateOperatorReport {
    pub operator_id: u64,
    /// A stream-stream join keeps one store per side (`left`, `right`) and one for the
    /// sides' event times (`watermarks`); `None` for a single-store operator.
    pub side: Option<String>,
    pub operator_name: Option<String>,
    pub key_columns: Vec<String>,
    pub versions: Vec<StateVersionReport>,
    /// Bytes of every version file on disk.
    pub total_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StateVersionReport {
    pub version: u64,
    pub delta_bytes: Option<u64>,
    pub snapshot_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SchemaHistoryEntry {
    pub version: u64,
    pub created_at_ms: i64,
    pub reason: String,
    pub added: Vec<String>,
    pub ddl: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceReport {
    pub description: String,
    pub path: Option<PathBuf>,
    pub latest_offset: Option<serde_json::Value>,
    /// A files source's ledger (`sources/<i>/ledger.sqlite`), when it has one.
    pub ledger: Option<LedgerStats>,
    /// A flow of several sources: this source's own watermark after the last commit
    /// (`None` before its first data).
    pub watermark_ms: Option<i64>,
    /// This source's watermark is the flow's (the last batch's progress record says).
    pub holds_watermark: bool,
    /// A Kafka source: its offsets per partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaReport>,
}

/// A Kafka source's position, per partition (offsets are the next record to read).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KafkaReport {
    pub partitions: Vec<KafkaPartitionReport>,
    /// Offsets skipped as lost (`fail_on_data_loss = false`) over the progress records
    /// kept (`numOffsetsLost`).
    pub offsets_lost: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KafkaPartitionReport {
    pub topic: String,
    pub partition: i32,
    /// Where the first batch started (`sources/<i>/0`).
    pub initial: Option<i64>,
    /// The end of the last committed batch: where a restart reads from.
    pub committed: Option<i64>,
    /// The end of a planned, uncommitted batch (re-run by the next start).
    pub pending: Option<i64>,
    /// The partition's latest offset when the last batch was planned (its progress).
    pub latest: Option<i64>,
}

/// The Kafka view of source `index`, when its offsets are Kafka's.
fn kafka_report(
    cp: &Checkpoint,
    index: usize,
    committed: Option<&serde_json::Value>,
    planned: Option<&serde_json::Value>,
    progress: &BTreeMap<u64, crate::records::StreamingQueryProgress>,
) -> Option<KafkaReport> {
    use crate::source::kafka::{KafkaSourceOffset, PartitionOffsets};
    let parse = |v: Option<&serde_json::Value>| -> Option<PartitionOffsets> {
        v.and_then(|v| KafkaSourceOffset::from_json(v).ok())
            .map(|o| o.partitions)
    };
    let initial = crate::source::kafka::read_initial_offsets(
        &crate::engine::input::source_dir(cp, index).join("0"),
    )
    .ok()
    .flatten()
    .map(|o| o.partitions);
    let committed = parse(committed);
    let planned = parse(planned);
    if initial.is_none() && committed.is_none() && planned.is_none() {
        return None;
    }
    let last = progress.values().next_back();
    let latest = parse(
        last.and_then(|p| p.sources.get(index))
            .map(|s| &s.latest_offset),
    );
    let offsets_lost = progress
        .values()
        .filter_map(|p| p.sources.get(index))
        .filter_map(|s| s.metrics.get("numOffsetsLost"))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    let mut tps: std::collections::BTreeSet<crate::source::kafka::TopicPartition> =
        std::collections::BTreeSet::new();
    for m in [&initial, &committed, &planned].into_iter().flatten() {
        tps.extend(m.keys().cloned());
    }
    let at = |m: &Option<PartitionOffsets>, tp| m.as_ref().and_then(|m| m.get(tp).copied());
    let pending = planned.filter(|p| Some(p) != committed.as_ref());
    Some(KafkaReport {
        partitions: tps
            .iter()
            .map(|tp| KafkaPartitionReport {
                topic: tp.topic.clone(),
                partition: tp.partition,
                initial: at(&initial, tp),
                committed: at(&committed, tp),
                pending: at(&pending, tp),
                latest: at(&latest, tp),
            })
            .collect(),
        offsets_lost,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct SinkReport {
    pub description: String,
    pub path: Option<PathBuf>,
    pub delta_version: Option<i64>,
    /// The last batch the table records for this query id (Delta `txn` version).
    pub txn_version: Option<i64>,
    /// The table's files, bytes and small files (`maintenance::TableStats`).
    pub table: Option<crate::maintenance::TableStats>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BatchReport {
    pub batch_id: u64,
    pub committed: bool,
    pub batch_timestamp_ms: Option<i64>,
    pub watermark_ms: Option<i64>,
    pub end_offset: Option<serde_json::Value>,
    pub num_input_rows: Option<u64>,
    pub num_output_rows: Option<i64>,
    pub num_files: Option<u64>,
    pub duration_ms: Option<u64>,
    pub delta_version: Option<i64>,
    /// Each expectation's passed and failed rows in the batch (its progress record's
    /// `weir.expectations`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<crate::records::ExpectationProgress>,
}

/// Reads everything there is to know about a checkpoint without changing it.
pub async fn inspect(root: &Path) -> Result<Inspection> {
    let cp = Checkpoint::at(root);
    let mut problems = Vec::new();
    if !root.is_dir() {
        return Err(crate::Error::checkpoint(
            root,
            "no such checkpoint directory",
        ));
    }
    let query_id = match cp.read_metadata() {
        Ok(m) => Some(m.id.to_string()),
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let plan = cp.read_plan().unwrap_or_else(|e| {
        problems.push(e.to_string());
        None
    });
    let offsets_ids = Checkpoint::batch_ids(&cp.offsets_dir())?;
    let commit_ids = Checkpoint::batch_ids(&cp.commits_dir())?;
    let progress: BTreeMap<u64, _> = read_progress(&cp.progress_path())?
        .into_iter()
        .map(|p| (p.batch_id, p))
        .collect();
    // A union's per-source watermarks (the last commit) and who held the flow's.
    let source_watermarks = cp
        .latest_commit()
        .ok()
        .flatten()
        .map(|(_, c)| c.source_watermarks_ms)
        .unwrap_or_default();
    let holders: Vec<bool> = progress
        .values()
        .next_back()
        .map(|p| {
            p.weir
                .source_watermarks
                .iter()
                .map(|w| w.holds_watermark)
                .collect()
        })
        .unwrap_or_default();
    let mut batches = Vec::new();
    let mut latest_offset = None;
    let mut latest_offsets: Vec<Option<serde_json::Value>> = Vec::new();
    let mut watermark_ms = 0;
    for &id in &offsets_ids {
        let seq = match cp.read_offsets(id) {
            Ok(s) => Some(s),
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        };
        let committed = commit_ids.contains(&id);
        if committed && let Err(e) = cp.read_commit(id) {
            problems.push(e.to_string());
        }
        let p = progress.get(&id);
        if let Some(s) = &seq {
            latest_offset = s.offsets.first().cloned().flatten();
            latest_offsets = s.offsets.clone();
            watermark_ms = s.metadata.batch_watermark_ms;
        }
        batches.push(BatchReport {
            batch_id: id,
            committed,
            batch_timestamp_ms: seq.as_ref().map(|s| s.metadata.batch_timestamp_ms),
            watermark_ms: seq.as_ref().map(|s| s.metadata.batch_watermark_ms),
            end_offset: seq
                .as_ref()
                .and_then(|s| s.offsets.first().cloned().flatten()),
            num_input_rows: p.map(|p| p.num_input_rows),
            num_output_rows: p.map(|p| p.sink.num_output_rows),
            num_files: p.map(|p| p.weir.num_files),
            duration_ms: p.map(|p| p.batch_duration),
            delta_version: p.and_then(|p| p.weir.delta_version),
            expectations: p.map(|p| p.weir.expectations.clone()).unwrap_or_default(),
        });
    }
    for &id in &commit_ids {
        if !offsets_ids.contains(&id) {
            problems.push(format!("commits/{id} has no offsets/{id}"));
        }
    }
    let last_batch_id = offsets_ids.last().copied();
    let last_committed_batch_id = commit_ids.last().copied();
    let committed_offsets: Vec<Option<serde_json::Value>> = last_committed_batch_id
        .and_then(|id| cp.read_offsets(id).ok())
        .map(|s| s.offsets)
        .unwrap_or_default();
    let pending_batch_id = last_batch_id.filter(|id| Some(*id) != last_committed_batch_id);
    let ledger = match Ledger::open_read_only(&cp.ledger_path()) {
        Ok(Some(l)) => match l.stats() {
            Ok(s) => Some(s),
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let sink = match &plan {
        None => None,
        Some(plan) => {
            let delta_version = match &plan.sink_path {
                Some(path) => match crate::delta::open_existing(path).await {
                    Ok(t) => t.and_then(|t| t.version()).map(|v| v as i64),
                    Err(e) => {
                        problems.push(e.to_string());
                        None
                    }
                },
                None => None,
            };
            let txn_version = match (&plan.sink_path, &query_id, delta_version) {
                (Some(path), Some(q), Some(_)) => {
                    crate::delta::txn_version(path, q).await.ok().flatten()
                }
                _ => None,
            };
            let table = match (&plan.sink_path, delta_version) {
                (Some(path), Some(_)) => crate::maintenance::stats(path).await.ok(),
                _ => None,
            };
            Some(SinkReport {
                description: plan.sink.clone(),
                path: plan.sink_path.clone(),
                delta_version,
                txn_version,
                table,
            })
        }
    };
    let disk = disk_report(&cp, offsets_ids.len(), commit_ids.len());
    let warnings: Vec<String> = sink
        .as_ref()
        .and_then(|s| s.table.as_ref())
        .and_then(|t| {
            t.small_files_warning()
                .map(|w| format!("sink table {}: {w}", t.path.display()))
        })
        .into_iter()
        .collect();
    Ok(Inspection {
        disk,
        warnings,
        checkpoint: root.to_path_buf(),
        flow: plan.as_ref().map(|p| p.flow.clone()),
        query_id,
        last_batch_id,
        last_committed_batch_id,
        pending_batch_id,
        watermark_ms,
        sources: {
            let mut sources = vec![SourceReport {
                description: plan
                    .as_ref()
                    .map_or("source 0".into(), |p| p.source.clone()),
                path: plan.as_ref().map(|p| p.source_path.clone()),
                latest_offset,
                ledger: ledger.clone(),
                watermark_ms: source_watermarks.first().copied().flatten(),
                holds_watermark: holders.first().copied().unwrap_or(false),
                kafka: kafka_report(
                    &cp,
                    0,
                    committed_offsets.first().and_then(Option::as_ref),
                    latest_offsets.first().and_then(Option::as_ref),
                    &progress,
                ),
            }];
            // A union's other sources, or a stream-stream join's right side (`sources/1/`).
            for (i, offset) in latest_offsets.iter().enumerate().skip(1) {
                let ledger_path = cp
                    .root()
                    .join("sources")
                    .join(i.to_string())
                    .join("ledger.sqlite");
                let ledger = match Ledger::open_read_only(&ledger_path) {
                    Ok(l) => l.and_then(|l| l.stats().ok()),
                    Err(e) => {
                        problems.push(e.to_string());
                        None
                    }
                };
                let recorded = plan.as_ref().and_then(|p| p.other_sources.get(i - 1));
                let union = !source_watermarks.is_empty() || latest_offsets.len() > 2;
                sources.push(SourceReport {
                    description: match (recorded, union) {
                        (Some(r), true) => {
                            format!("source {i} (a [[flow.union]] source) {}", r.source)
                        }
                        (Some(r), false) => {
                            format!("source {i} (the stream_join's right side) {}", r.source)
                        }
                        (None, _) => format!("source {i} (the stream_join's right side)"),
                    },
                    path: recorded.map(|r| r.source_path.clone()),
                    latest_offset: offset.clone(),
                    ledger,
                    watermark_ms: source_watermarks.get(i).copied().flatten(),
                    holds_watermark: holders.get(i).copied().unwrap_or(false),
                    kafka: kafka_report(
                        &cp,
                        i,
                        committed_offsets.get(i).and_then(Option::as_ref),
                        offset.as_ref(),
                        &progress,
                    ),
                });
            }
            sources
        },
        ledger,
        sink,
        lock: CheckpointLock::holder(&cp),
        batches,
        state_operators: state_operators(&cp, &mut problems),
        schema_history: match crate::source::files::schema_store::history(&cp) {
            Ok(h) => h
                .into_iter()
                .map(|(version, v)| SchemaHistoryEntry {
                    version,
                    created_at_ms: v.created_at_ms,
                    reason: v.reason,
                    added: v.added,
                    ddl: v.ddl,
                })
                .collect(),
            Err(e) => {
                problems.push(e.to_string());
                Vec::new()
            }
        },
        health: cp.read_health(),
        problems,
    })
}

/// Every `state/<id>/` with its metadata and version files; a stream-stream join's
/// operator (`state/<id>/left`, `right`, `watermarks`) gives one report per store.
fn state_operators(cp: &Checkpoint, problems: &mut Vec<String>) -> Vec<StateOperatorReport> {
    let state_dir = cp.root().join("state");
    let mut out = Vec::new();
    for id in Checkpoint::batch_ids(&state_dir).unwrap_or_default() {
        let dir = state_dir.join(id.to_string());
        let sides: Vec<&str> = ["left", "right", "watermarks"]
            .into_iter()
            .filter(|s| dir.join(s).is_dir())
            .collect();
        if sides.is_empty() {
            out.push(state_store_report(id, None, &dir, problems));
        } else {
            for side in sides {
                out.push(state_store_report(
                    id,
                    Some(side),
                    &dir.join(side),
                    problems,
                ));
            }
        }
    }
    out
}

fn state_store_report(
    id: u64,
    side: Option<&str>,
    dir: &std::path::Path,
    problems: &mut Vec<String>,
) -> StateOperatorReport {
    let meta = match crate::state::read_metadata(dir) {
        Ok(m) => m,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let versions = match crate::state::StateStore::list_versions(dir) {
        Ok(v) => v,
        Err(e) => {
            problems.push(e.to_string());
            Default::default()
        }
    };
    let versions: Vec<StateVersionReport> = versions
        .into_iter()
        .map(|(version, f)| StateVersionReport {
            version,
            delta_bytes: f.delta_bytes,
            snapshot_bytes: f.snapshot_bytes,
        })
        .collect();
    StateOperatorReport {
        operator_id: id,
        side: side.map(str::to_string),
        operator_name: meta.as_ref().map(|m| m.operator_name.clone()),
        key_columns: meta.map(|m| m.key_columns).unwrap_or_default(),
        total_bytes: versions
            .iter()
            .map(|v| v.delta_bytes.unwrap_or(0) + v.snapshot_bytes.unwrap_or(0))
            .sum(),
        versions,
    }
}
