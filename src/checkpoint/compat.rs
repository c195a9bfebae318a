//! Restart compatibility of a flow with its checkpoint, the checks that need no
//! engine: the engine's fail-fast at start ([`refuse_incompatible`]) and the first part
//! of `weir check` (`checkpoint_tools::check`, which adds the stateful check by planning
//! the flow as the engine does).
//!
//! Incompatible, with the exact reason:
//! - a checkpoint file is corrupt or truncated (`metadata`, any `offsets/N` or
//!   `commits/N`), or written in a log version this weir does not read;
//! - the offsets and commits do not form a recoverable history (a commit without
//!   offsets, more than one uncommitted batch);
//! - the checkpoint belongs to another flow (`_weir/plan.json` names it);
//! - the source changed: another format or path (Spark: changing the number, type
//!   or path of sources is not allowed between restarts);
//! - a stateful operator changed, was added after the query started, or was removed
//!   (the state's fingerprint, `state/0/schema`, as the engine checks it).
//!
//! - the target Delta table is gone, at a version older than one this query
//!   committed, or has no commit of this query id (recreated, or another table).
//!
//! A changed sink path is reported as a note: allowed, but the new table misses
//! the rows committed before.

use std::path::{Path, PathBuf};

use super::Checkpoint;
use crate::error::{Error, Result};
use crate::spec::{FlowSpec, SinkSpec};

/// Why a checkpoint cannot be used by a flow: one line per reason, and the first file a
/// reason is about (the health evidence's `file`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Problems {
    pub reasons: Vec<String>,
    pub file: Option<PathBuf>,
}

impl Problems {
    pub fn is_empty(&self) -> bool {
        self.reasons.is_empty()
    }

    /// Adds a reason about `file`, if it is about one.
    pub fn push(&mut self, reason: String, file: Option<&Path>) {
        if self.file.is_none() {
            self.file = file.map(Path::to_path_buf);
        }
        self.reasons.push(reason);
    }

    /// Adds an error as a reason (about the file it names).
    pub fn error(&mut self, e: &Error) {
        self.push(e.to_string(), e.path());
    }

    pub fn extend(&mut self, other: Problems) {
        if self.file.is_none() {
            self.file = other.file;
        }
        self.reasons.extend(other.reasons);
    }
}

/// The checks that need no source schema (also run by the engine at start).
pub fn check_static(spec: &FlowSpec, cp: &Checkpoint) -> Result<(Problems, Vec<String>)> {
    let mut reasons = Problems::default();
    let mut notes = Vec::new();
    if !cp.exists() {
        // Empty `offsets/` and `commits/` are a checkpoint whose creation was cut short
        // (a crash or power cut before `metadata` was durable): it starts afresh.
        if !Checkpoint::batch_ids(&cp.offsets_dir())?.is_empty()
            || !Checkpoint::batch_ids(&cp.commits_dir())?.is_empty()
        {
            reasons.push(
                format!(
                    "{}: missing; the checkpoint has logs but no query id",
                    cp.metadata_path().display()
                ),
                Some(&cp.metadata_path()),
            );
        }
        return Ok((reasons, notes));
    }
    if let Err(e) = cp.read_metadata() {
        reasons.error(&e);
    }
    let offsets = Checkpoint::batch_ids(&cp.offsets_dir())?;
    let commits = Checkpoint::batch_ids(&cp.commits_dir())?;
    // The last file of each log is read as recovery reads it: its error says how to
    // repair a file torn by a power cut.
    for &id in offsets.iter().rev().skip(1) {
        if let Err(e) = cp.read_offsets(id) {
            reasons.error(&e);
        }
    }
    if let Err(e) = cp.latest_offsets() {
        reasons.error(&e);
    }
    if let Err(e) = cp.latest_commit() {
        reasons.error(&e);
    }
    for &id in &commits {
        if commits.last() != Some(&id)
            && let Err(e) = cp.read_commit(id)
        {
            reasons.error(&e);
        }
        if !offsets.contains(&id) {
            reasons.push(
                format!(
                    "{}: commits/{id} has no offsets/{id}",
                    cp.commit_path(id).display()
                ),
                Some(&cp.commit_path(id)),
            );
        }
    }
    let last_commit = commits.last().copied();
    let uncommitted: Vec<u64> = offsets
        .iter()
        .copied()
        .filter(|id| last_commit.is_none_or(|c| *id > c))
        .collect();
    if uncommitted.len() > 1 {
        reasons.push(
            format!(
                "{}: offsets {:?} are planned beyond the last commit ({}); only one batch can be uncommitted",
                cp.offsets_dir().display(),
                uncommitted,
                last_commit.map_or("none".to_string(), |c| c.to_string())
            ),
            Some(&cp.offsets_dir()),
        );
    }
    match cp.read_plan() {
        Err(e) => reasons.error(&e),
        Ok(None) => {}
        Ok(Some(plan)) => {
            if plan.flow != spec.name {
                reasons.push(
                    format!(
                        "the checkpoint belongs to flow {:?}, not {:?} (different query)",
                        plan.flow, spec.name
                    ),
                    None,
                );
            }
            let source = spec.source.kind();
            if plan.source != source {
                reasons.push(
                    format!("source changed from {} to {source}", plan.source),
                    None,
                );
            }
            if !same_path(&plan.source_path, spec.source.path()) {
                reasons.push(
                    format!(
                        "source path changed from {} to {}",
                        plan.source_path.display(),
                        spec.source.path().display()
                    ),
                    Some(&plan.source_path),
                );
            }
            // Sources 1.. (a union's, a stream join's right side), when recorded.
            let others = spec.sources().into_iter().skip(1).collect::<Vec<_>>();
            if !plan.other_sources.is_empty() {
                for (i, (old, new)) in plan.other_sources.iter().zip(&others).enumerate() {
                    if old.source != new.kind() || !same_path(&old.source_path, new.path()) {
                        reasons.push(
                            format!(
                                "source {} changed from {} {} to {} {} (each source owns its offsets in the checkpoint; Spark does not allow changing a query's sources either)",
                                i + 2,
                                old.source,
                                old.source_path.display(),
                                new.kind(),
                                new.path().display()
                            ),
                            Some(&old.source_path),
                        );
                    }
                }
            }
            let sink_path = sink_table(spec).map(Path::to_path_buf);
            if let (Some(old), Some(new)) = (&plan.sink_path, &sink_path)
                && !same_path(old, new)
            {
                notes.push(format!(
                    "sink path changed from {} to {}: the new table will not have the rows committed before",
                    old.display(),
                    new.display()
                ));
            }
        }
    }
    // Spark: "There are [N] sources in the checkpoint offsets and now there are [M]
    // sources requested by the query. Cannot continue." A source added to or removed
    // from a flow would read another source's offsets.
    if let Ok(Some((id, seq))) = cp.latest_offsets() {
        let now = spec.sources().len();
        if let Some(recorded) = seq.metadata.conf.get(super::MULTIPLE_WATERMARK_POLICY)
            && spec.is_union()
            && recorded != spec.multiple_watermark_policy.as_str()
        {
            reasons.push(
                format!(
                    "{}: multiple_watermark_policy changed from \"{recorded}\" to \"{}\"; the policy is fixed \
                     when the checkpoint starts (Spark records it in the offsets log, SPARK-24730): set it back, \
                     or give the flow a new checkpoint",
                    cp.offsets_path(id).display(),
                    spec.multiple_watermark_policy.as_str()
                ),
                Some(&cp.offsets_path(id)),
            );
        }
        if seq.offsets.len() != now {
            reasons.push(
                format!(
                    "{}: there are {} source(s) in the checkpoint's offsets and the flow now has {now}; \
                     adding or removing a source (a [[flow.union]] entry, a stream_join) is an incompatible restart, as in Spark: \
                     give the changed flow a new checkpoint (and say where it starts), or put the new source in a flow of its own",
                    cp.offsets_path(id).display(),
                    seq.offsets.len()
                ),
                Some(&cp.offsets_path(id)),
            );
        }
    }
    let state_dir = cp.root().join("state").join("0");
    if !spec.stateful.is_stateful()
        && last_commit.is_some()
        && crate::state::read_metadata(&state_dir)
            .ok()
            .flatten()
            .is_some()
    {
        reasons.push(
            format!(
                "{}: the checkpoint has state of a stateful operator the flow no longer has (removing a stateful operator is not allowed, as in Spark)",
                state_dir.display()
            ),
            Some(&state_dir),
        );
    }
    Ok((reasons, notes))
}

/// The flow's target Delta table (append or merge sink).
pub fn sink_table(spec: &FlowSpec) -> Option<&Path> {
    match &spec.sink {
        SinkSpec::Delta { path, .. } | SinkSpec::DeltaMerge { path, .. } => Some(path),
        _ => None,
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| {
        crate::spec::normalize(&std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
    };
    norm(a) == norm(b)
}

/// The target table against what this query committed into it (progress records):
/// a table that is gone, recreated, restored to an older version, or that has no
/// commit of this query id cannot continue from this checkpoint without losing rows.
pub async fn check_sink(spec: &FlowSpec, cp: &Checkpoint) -> Problems {
    let mut reasons = Problems::default();
    let Some(path) = sink_table(spec) else {
        return reasons;
    };
    let Ok(metadata) = cp.read_metadata() else {
        return reasons;
    };
    let query_id = metadata.id.to_string();
    let records =
        crate::checkpoint::progress::read_progress(&cp.progress_path()).unwrap_or_default();
    let committed: Vec<_> = records
        .iter()
        .filter(|r| r.id == query_id && r.sink.num_output_rows > 0 && !r.weir.sink_write_skipped)
        .collect();
    let Some(max_version) = committed.iter().filter_map(|r| r.weir.delta_version).max() else {
        return reasons;
    };
    match crate::delta::open_existing(path).await {
        Ok(None) => reasons.push(
            format!(
                "the target table {} is gone, but query {query_id} committed batches into it (up to Delta version {max_version}); \
                 restore the table, or reset the flow to re-read the source",
                path.display()
            ),
            Some(path),
        ),
        Ok(Some(table)) => {
            let version = table.version().map_or(-1, |v| v as i64);
            if version < max_version {
                reasons.push(
                    format!(
                        "the target table {} is at Delta version {version}, older than version {max_version} this query committed: \
                         it was restored or recreated, and the rows of later batches are not in it",
                        path.display()
                    ),
                    Some(path),
                );
            } else if let Ok(None) = crate::delta::txn_version(path, &query_id).await {
                let reason = match txn_retention(&table) {
                    Some(retention) => format!(
                        "the target table {} has no transaction id of query {query_id}, which committed batches into it \
                         (up to Delta version {max_version}): the table sets {TXN_RETENTION} = {retention}, so Delta may have \
                         expired the query's transaction while the flow was stopped for longer than that, and a restart can \
                         no longer tell which batches the table holds. Check that the table holds the checkpoint's last \
                         batch (`weir inspect`), raise {TXN_RETENTION} above the longest pause or unset it \
                         (ALTER TABLE ... UNSET TBLPROPERTIES) so that it does not happen again, then rebuild as \
                         `weir playbook checkpoint_incompatible` describes. Otherwise the table was recreated, or this \
                         checkpoint belongs to another table",
                        path.display()
                    ),
                    None => format!(
                        "the target table {} has no commit of query {query_id} (different query id): it was recreated, \
                         or this checkpoint belongs to another table",
                        path.display()
                    ),
                };
                reasons.push(reason, Some(path));
            }
        }
        Err(e) => reasons.error(&e),
    }
    reasons
}

/// Delta's table property past which an application's `txn` is expired: ignored by
/// readers, dropped from checkpoints (Delta protocol, "Transaction Identifiers");
/// unset, they are kept forever.
const TXN_RETENTION: &str = "delta.setTransactionRetentionDuration";

/// The table's [`TXN_RETENTION`], when set: a query's txn missing from such a table may
/// have expired rather than never been written.
fn txn_retention(table: &deltalake::DeltaTable) -> Option<String> {
    let snapshot = table.snapshot().ok()?;
    snapshot
        .metadata()
        .configuration()
        .get(TXN_RETENTION)
        .cloned()
}

/// At start: a sink table that expires application transaction ids
/// ([`TXN_RETENTION`]) can lose the marker weir's exactly-once restart relies on while
/// the flow is stopped longer than that; said before it happens (issue #46, item 3).
async fn warn_txn_retention(spec: &FlowSpec) {
    let Some(path) = sink_table(spec) else { return };
    if !crate::storage::location::is_remote_text(&path.to_string_lossy()) && !path.exists() {
        return;
    }
    if let Ok(Some(table)) = crate::delta::open_existing(path).await
        && let Some(retention) = txn_retention(&table)
    {
        tracing::warn!(
            flow = %spec.name,
            table = %path.display(),
            "the table sets {TXN_RETENTION} = {retention}: if this flow is stopped for longer than that, \
             Delta may expire its transaction id and the restart is refused (it can no longer tell which \
             batches the table holds); raise it above the longest pause you expect, or unset it"
        );
    }
}

/// The engine's fail-fast: the static and sink checks as one error (the stateful
/// check runs when the operator is built, with the same message).
pub async fn refuse_incompatible(spec: &FlowSpec, cp: &Checkpoint) -> Result<()> {
    // A corrupt file is reported as itself (kind `checkpoint_corrupt`, naming the file).
    if cp.exists() {
        cp.read_metadata()?;
        for id in Checkpoint::batch_ids(&cp.offsets_dir())?
            .iter()
            .rev()
            .skip(1)
        {
            cp.read_offsets(*id)?;
        }
        for id in Checkpoint::batch_ids(&cp.commits_dir())?
            .iter()
            .rev()
            .skip(1)
        {
            cp.read_commit(*id)?;
        }
        cp.latest_offsets()?;
        cp.latest_commit()?;
    }
    let (mut reasons, _) = check_static(spec, cp)?;
    let remote_sink =
        sink_table(spec).filter(|p| crate::storage::location::is_remote_text(&p.to_string_lossy()));
    if let Some(path) = remote_sink
        && cp.exists()
    {
        // An object store that cannot be reached or refuses the credentials is the error
        // itself, not a table gone.
        crate::delta::open_existing(path).await?;
    }
    if reasons.is_empty() && cp.exists() {
        reasons = check_sink(spec, cp).await;
        // The whole table directory is missing (unmounted storage, a restore in
        // progress, or a deletion): the sink is unavailable. Refuse to start (a new
        // table there would silently lack the committed batches), as a retryable
        // `sink_unavailable`, not as an incompatible checkpoint: most often it comes back.
        if let Some(path) = sink_table(spec).filter(|p| remote_sink.is_none() && !p.exists())
            && !reasons.is_empty()
        {
            return Err(Error::SinkIo {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "the target table's directory is missing, but this query committed batches into it; \
                         nothing is written until it is back (if its storage is being restored or remounted, \
                         the flow resumes then). If it was deleted on purpose: weir checkpoint reset ({})",
                        reasons.reasons.join("; ")
                    ),
                ),
            });
        }
    }
    if reasons.is_empty() {
        warn_txn_retention(spec).await;
        return Ok(());
    }
    Err(Error::StateIncompatible {
        path: cp.root().to_path_buf(),
        message: format!(
            "incompatible with flow {:?}: {}. Run `weir check` for the verdict and `weir playbook checkpoint_incompatible` for the options",
            spec.name,
            reasons.reasons.join("; ")
        ),
    })
}
