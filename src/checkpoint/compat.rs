//! Restart compatibility of a flow with its checkpoint (`weir check`, and the
//! engine's fail-fast at start).
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

use std::path::Path;

use serde::Serialize;

use super::Checkpoint;
use crate::error::{Error, Result};
use crate::spec::{FlowSpec, SinkSpec, SourceSpec};

/// `weir check`'s answer for one flow.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Verdict {
    pub flow: String,
    pub checkpoint: std::path::PathBuf,
    pub compatible: bool,
    /// Why not (empty when compatible).
    pub reasons: Vec<String>,
    /// Worth knowing, not blocking.
    pub notes: Vec<String>,
    /// The playbook to follow when incompatible.
    pub playbook: Option<String>,
}

/// The checks that need no source schema (also run by the engine at start).
pub fn check_static(spec: &FlowSpec, cp: &Checkpoint) -> Result<(Vec<String>, Vec<String>)> {
    let mut reasons = Vec::new();
    let mut notes = Vec::new();
    if !cp.exists() {
        if cp.root().join("offsets").is_dir() || cp.root().join("commits").is_dir() {
            reasons.push(format!(
                "{}: missing; the checkpoint has logs but no query id",
                cp.metadata_path().display()
            ));
        }
        return Ok((reasons, notes));
    }
    if let Err(e) = cp.read_metadata() {
        reasons.push(e.to_string());
    }
    let offsets = Checkpoint::batch_ids(&cp.offsets_dir())?;
    let commits = Checkpoint::batch_ids(&cp.commits_dir())?;
    for &id in &offsets {
        if let Err(e) = cp.read_offsets(id) {
            reasons.push(e.to_string());
        }
    }
    for &id in &commits {
        if let Err(e) = cp.read_commit(id) {
            reasons.push(e.to_string());
        }
        if !offsets.contains(&id) {
            reasons.push(format!(
                "{}: commits/{id} has no offsets/{id}",
                cp.commit_path(id).display()
            ));
        }
    }
    let last_commit = commits.last().copied();
    let uncommitted: Vec<u64> = offsets
        .iter()
        .copied()
        .filter(|id| last_commit.is_none_or(|c| *id > c))
        .collect();
    if uncommitted.len() > 1 {
        reasons.push(format!(
            "{}: offsets {:?} are planned beyond the last commit ({}); only one batch can be uncommitted",
            cp.offsets_dir().display(),
            uncommitted,
            last_commit.map_or("none".to_string(), |c| c.to_string())
        ));
    }
    match cp.read_plan() {
        Err(e) => reasons.push(e.to_string()),
        Ok(None) => {}
        Ok(Some(plan)) => {
            if plan.flow != spec.name {
                reasons.push(format!(
                    "the checkpoint belongs to flow {:?}, not {:?} (different query)",
                    plan.flow, spec.name
                ));
            }
            let source = spec.source.kind();
            if plan.source != source {
                reasons.push(format!("source changed from {} to {source}", plan.source));
            }
            if !same_path(&plan.source_path, spec.source.path()) {
                reasons.push(format!(
                    "source path changed from {} to {}",
                    plan.source_path.display(),
                    spec.source.path().display()
                ));
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
    let state_dir = cp.root().join("state").join("0");
    if !spec.stateful.is_stateful()
        && last_commit.is_some()
        && crate::state::read_metadata(&state_dir)
            .ok()
            .flatten()
            .is_some()
    {
        reasons.push(format!(
            "{}: the checkpoint has state of a stateful operator the flow no longer has (removing a stateful operator is not allowed, as in Spark)",
            state_dir.display()
        ));
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

/// The stateful check: plans the flow as the engine does at start
/// (`engine::plan::plan_operator`), over the schemas its sources have without running
/// them (a files source's given or recorded schema, a Delta table's current one), with
/// the operator built against its saved state, read-only.
async fn check_state(spec: &FlowSpec, cp: &Checkpoint) -> Option<String> {
    if !spec.stateful.is_stateful() && spec.stream_join.is_none() {
        return None;
    }
    let last_commit = cp.latest_commit().ok().flatten().map(|(id, _)| id)?;
    let mut schemas = Vec::new();
    for (index, source) in spec.sources().into_iter().enumerate() {
        let location = match source {
            SourceSpec::Files(options) => Some(crate::engine::input::files::schema_location(
                options, index, cp,
            )),
            SourceSpec::Delta(_) => None,
        };
        match crate::engine::plan::known_batch_schema(source, location.as_deref()).await {
            Ok(Some(schema)) => schemas.push(schema),
            Ok(None) => return None,
            Err(e) => return Some(e.to_string()),
        }
    }
    let state = crate::engine::plan::StateAt::of(cp, Some(last_commit));
    match crate::engine::plan::plan_operator(spec, &schemas, &state).await {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// The target table against what this query committed into it (progress records):
/// a table that is gone, recreated, restored to an older version, or that has no
/// commit of this query id cannot continue from this checkpoint without losing rows.
async fn check_sink(spec: &FlowSpec, cp: &Checkpoint) -> Vec<String> {
    let Some(path) = sink_table(spec) else {
        return Vec::new();
    };
    let Ok(metadata) = cp.read_metadata() else {
        return Vec::new();
    };
    let query_id = metadata.id.to_string();
    let records = crate::engine::progress::read_progress(&cp.progress_path()).unwrap_or_default();
    let committed: Vec<_> = records
        .iter()
        .filter(|r| r.id == query_id && r.sink.num_output_rows > 0 && !r.weir.sink_write_skipped)
        .collect();
    let Some(max_version) = committed.iter().filter_map(|r| r.weir.delta_version).max() else {
        return Vec::new();
    };
    let mut reasons = Vec::new();
    match crate::sink::delta::open_existing(path).await {
        Ok(None) => reasons.push(format!(
            "the target table {} is gone, but query {query_id} committed batches into it (up to Delta version {max_version}); \
             restore the table, or reset the flow to re-read the source",
            path.display()
        )),
        Ok(Some(table)) => {
            let version = table.version().map_or(-1, |v| v as i64);
            if version < max_version {
                reasons.push(format!(
                    "the target table {} is at Delta version {version}, older than version {max_version} this query committed: \
                     it was restored or recreated, and the rows of later batches are not in it",
                    path.display()
                ));
            } else if let Ok(None) = super::actions::txn_version(path, &query_id).await {
                reasons.push(format!(
                    "the target table {} has no commit of query {query_id} (different query id): it was recreated, \
                     or this checkpoint belongs to another table",
                    path.display()
                ));
            }
        }
        Err(e) => reasons.push(e.to_string()),
    }
    reasons
}

/// Everything `weir check` looks at, for one flow.
pub async fn check(spec: &FlowSpec) -> Result<Verdict> {
    let cp = Checkpoint::at(&spec.checkpoint);
    let (mut reasons, mut notes) = check_static(spec, &cp)?;
    if reasons.is_empty()
        && let Some(r) = check_state(spec, &cp).await
    {
        reasons.push(r);
    }
    if reasons.is_empty() && cp.exists() {
        reasons.extend(check_sink(spec, &cp).await);
    }
    if !cp.exists() {
        notes.push("no checkpoint yet: the flow starts from the beginning of its source".into());
    }
    let compatible = reasons.is_empty();
    Ok(Verdict {
        flow: spec.name.clone(),
        checkpoint: spec.checkpoint.clone(),
        compatible,
        reasons,
        notes,
        playbook: (!compatible).then(|| "checkpoint_incompatible".to_string()),
    })
}

/// The engine's fail-fast: the static and sink checks as one error (the stateful
/// check runs when the operator is built, with the same message).
pub async fn refuse_incompatible(spec: &FlowSpec, cp: &Checkpoint) -> Result<()> {
    // A corrupt file is reported as itself (kind `checkpoint_corrupt`, naming the file).
    if cp.exists() {
        cp.read_metadata()?;
        for id in Checkpoint::batch_ids(&cp.offsets_dir())? {
            cp.read_offsets(id)?;
        }
        for id in Checkpoint::batch_ids(&cp.commits_dir())? {
            cp.read_commit(id)?;
        }
    }
    let (mut reasons, _) = check_static(spec, cp)?;
    if reasons.is_empty() && cp.exists() {
        reasons = check_sink(spec, cp).await;
        // The whole table directory is missing (unmounted storage, a restore in
        // progress, or a deletion): the sink is unavailable. Refuse to start (a new
        // table there would silently lack the committed batches), as a retryable
        // `sink_unavailable`, not as an incompatible checkpoint: most often it comes back.
        if let Some(path) = sink_table(spec).filter(|p| !p.exists())
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
                        reasons.join("; ")
                    ),
                ),
            });
        }
    }
    if reasons.is_empty() {
        return Ok(());
    }
    Err(Error::StateIncompatible {
        path: cp.root().to_path_buf(),
        message: format!(
            "incompatible with flow {:?}: {}. Run `weir check` for the verdict and `weir playbook checkpoint_incompatible` for the options",
            spec.name,
            reasons.join("; ")
        ),
    })
}
