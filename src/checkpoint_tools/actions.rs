//! Checkpoint actions the playbooks use: backup, reset, rollback, repair.
//!
//! Each action is two steps: `plan_*` reads and decides, returning an
//! [`ActionPlan`] whose lines are the dry-run; [`execute`] performs exactly
//! the plan's operations, in order, and nothing else. None deletes data:
//! checkpoints and offsets are moved aside (renamed), a target table is
//! emptied only through a Delta commit that time travel can undo. Every action
//! takes the checkpoint lock first, so it refuses while a process runs the flow.
//!
//! ```text
//! backup   CopyTree(checkpoint -> checkpoint.backup-<time>), then verify every file
//! reset    Rename(checkpoint -> checkpoint.bak-<time>) [+ TruncateTable(target) with --truncate-target]
//! rollback Rename(offsets/N -> _weir/rollback-<time>/offsets/N) for each uncommitted N > BATCH,
//!          refused if the Delta table's txn for the query id already covers any N
//! repair   Rename(the torn last commits/N or offsets/N -> _weir/repair-<time>/...), so the next
//!          run re-runs batch N (the table's txn decides whether the re-run writes it)
//! ```
//!
//! Every rename is durable (both directories fsynced) before the next operation runs.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checkpoint::{Checkpoint, CheckpointLock};
use crate::durable::create_dir_private;
use crate::error::{Error, Result};

/// One operation of an action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Copy a directory tree (files 0600, dirs 0700), then compare every file's bytes.
    CopyTree { from: PathBuf, to: PathBuf },
    /// Rename (move aside) a file or directory.
    Rename { from: PathBuf, to: PathBuf },
    /// Remove every row of a Delta table in one Delta commit (`DELETE` without predicate).
    TruncateTable {
        path: PathBuf,
        version_before: i64,
        rows: u64,
    },
}

impl Op {
    /// The dry-run line of this operation.
    pub fn describe(&self) -> String {
        match self {
            Op::CopyTree { from, to } => format!(
                "copy {} to {} and verify every file",
                from.display(),
                to.display()
            ),
            Op::Rename { from, to } => {
                format!("move {} to {}", from.display(), to.display())
            }
            Op::TruncateTable {
                path,
                version_before,
                rows,
            } => format!(
                "empty Delta table {} ({rows} row(s)) with one DELETE commit (version {}); undo by restoring version {version_before}",
                path.display(),
                version_before + 1
            ),
        }
    }
}

/// What an action will do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionPlan {
    pub action: String,
    pub checkpoint: PathBuf,
    pub ops: Vec<Op>,
    /// What the engineer should know (e.g. what the next run will do).
    pub notes: Vec<String>,
    /// Typed confirmation required (moves a checkpoint or changes a table).
    pub needs_confirmation: bool,
}

impl ActionPlan {
    /// The dry-run text: exactly the operations [`execute`] performs, in order.
    pub fn render(&self) -> String {
        let mut out = format!("{} {}:\n", self.action, self.checkpoint.display());
        if self.ops.is_empty() {
            out.push_str("  nothing to do\n");
        }
        for (i, op) in self.ops.iter().enumerate() {
            out.push_str(&format!("  {}. {}\n", i + 1, op.describe()));
        }
        for n in &self.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
        out
    }
}

fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string()
}

/// `<dir>.<tag>-<time>`, beside `dir`, not yet existing.
fn sibling(dir: &Path, tag: &str) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "checkpoint".into());
    let base = dir.with_file_name(format!("{name}.{tag}-{}", stamp()));
    let mut candidate = base.clone();
    let mut n = 1;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    candidate
}

fn require_checkpoint(cp: &Checkpoint) -> Result<()> {
    if !cp.exists() {
        return Err(Error::checkpoint(
            cp.root(),
            "not a checkpoint (no `metadata` file)",
        ));
    }
    if let Some(h) = CheckpointLock::holder(cp) {
        return Err(Error::CheckpointLocked {
            checkpoint: cp.root().to_path_buf(),
            pid: h.pid,
            host: h.host,
            started_at: h.started_at,
        });
    }
    Ok(())
}

/// `weir checkpoint backup CHECKPOINT`.
pub fn plan_backup(checkpoint: &Path) -> Result<ActionPlan> {
    let cp = Checkpoint::at(checkpoint);
    require_checkpoint(&cp)?;
    Ok(ActionPlan {
        action: "backup".into(),
        checkpoint: checkpoint.to_path_buf(),
        ops: vec![Op::CopyTree {
            from: checkpoint.to_path_buf(),
            to: sibling(checkpoint, "backup"),
        }],
        notes: vec!["the checkpoint itself is not changed".into()],
        needs_confirmation: false,
    })
}

/// `weir checkpoint reset PIPELINE --flow NAME [--truncate-target]`.
pub async fn plan_reset(
    checkpoint: &Path,
    target: Option<&Path>,
    truncate_target: bool,
) -> Result<ActionPlan> {
    let cp = Checkpoint::at(checkpoint);
    require_checkpoint(&cp)?;
    let mut ops = vec![Op::Rename {
        from: checkpoint.to_path_buf(),
        to: sibling(checkpoint, "bak"),
    }];
    let mut notes = vec![
        "the next run starts with a new query id and re-reads every file of the source".to_string(),
    ];
    match (truncate_target, target) {
        (true, Some(path)) => match crate::delta::open_existing(path).await? {
            Some(table) => {
                let version_before = table.version().map_or(-1, |v| v as i64);
                let rows = table_rows(&table).await?;
                ops.push(Op::TruncateTable {
                    path: path.to_path_buf(),
                    version_before,
                    rows,
                });
            }
            None => notes.push(format!(
                "{} is not a Delta table yet: nothing to empty",
                path.display()
            )),
        },
        (true, None) => {
            return Err(Error::checkpoint(
                checkpoint,
                "--truncate-target needs a Delta sink; this flow has none",
            ));
        }
        (false, Some(path)) => notes.push(format!(
            "the target {} keeps its rows: re-reading the source appends them again (duplicates) unless you add --truncate-target",
            path.display()
        )),
        (false, None) => {}
    }
    Ok(ActionPlan {
        action: "reset".into(),
        checkpoint: checkpoint.to_path_buf(),
        ops,
        notes,
        needs_confirmation: true,
    })
}

async fn table_rows(table: &deltalake::DeltaTable) -> Result<u64> {
    let path = table.table_url().to_string();
    let snapshot = table.snapshot().map_err(|source| Error::Delta {
        path: path.clone(),
        source,
    })?;
    let mut rows = 0u64;
    for add in snapshot.log_data().iter() {
        if let Some(n) = add.num_records() {
            rows += n as u64;
        }
    }
    Ok(rows)
}

/// `weir checkpoint rollback CHECKPOINT --to BATCH`.
pub async fn plan_rollback(checkpoint: &Path, to: u64) -> Result<ActionPlan> {
    let cp = Checkpoint::at(checkpoint);
    require_checkpoint(&cp)?;
    let commits = Checkpoint::batch_ids(&cp.commits_dir())?;
    if !commits.contains(&to) {
        return Err(Error::checkpoint(
            cp.commit_path(to),
            format!(
                "batch {to} is not committed; roll back to a committed batch (committed: {})",
                match (commits.first(), commits.last()) {
                    (Some(a), Some(b)) => format!("{a}..={b}"),
                    _ => "none".into(),
                }
            ),
        ));
    }
    if let Some(&later) = commits.iter().find(|&&c| c > to) {
        return Err(Error::checkpoint(
            cp.commit_path(later),
            format!(
                "batch {later} after {to} is committed; rollback only removes uncommitted batches"
            ),
        ));
    }
    let beyond: Vec<u64> = Checkpoint::batch_ids(&cp.offsets_dir())?
        .into_iter()
        .filter(|id| *id > to)
        .collect();
    if let Some(first) = beyond.first() {
        for (table, app_id) in flow_tables(&cp)? {
            if let Some(v) = crate::delta::txn_version(&table, &app_id).await?
                && v >= *first as i64
            {
                return Err(Error::checkpoint(
                    cp.offsets_path(*first),
                    format!(
                        "the Delta table {} already committed batch {v} of this query (txn {app_id}); \
                         rolling its offsets back would write it twice. Run the flow instead: it finishes the batch \
                         without writing it again",
                        table.display()
                    ),
                ));
            }
        }
    }
    let aside = cp.weir_dir().join(format!("rollback-{}", stamp()));
    let ops = beyond
        .iter()
        .map(|id| Op::Rename {
            from: cp.offsets_path(*id),
            to: aside.join("offsets").join(id.to_string()),
        })
        .collect();
    let notes = if beyond.is_empty() {
        vec![format!("no offsets beyond batch {to}")]
    } else {
        vec![format!(
            "the next run plans batch {} again from the files not yet committed",
            to + 1
        )]
    };
    Ok(ActionPlan {
        action: format!("rollback to batch {to}"),
        checkpoint: checkpoint.to_path_buf(),
        ops,
        notes,
        needs_confirmation: true,
    })
}

/// `weir checkpoint repair CHECKPOINT`: a power cut on a file system without atomic
/// rename can leave the last `commits/N` (or, before it, the last `offsets/N`) empty or
/// cut short. The batch protocol says what that means:
///
/// - a torn `commits/N`: batch N ran; whether its Delta commit is in the table is told by
///   the table's txn for the query id. Either way, moving the torn file aside makes the
///   next run re-run batch N with exactly its recorded files: the sink skips the write
///   when the txn already covers N, and writes it otherwise. State version N is recomputed.
/// - a torn `offsets/N` (no `commits/N`): the sink never saw batch N (it writes only after
///   `offsets/N` is durable); moving it aside makes the next run plan batch N again.
///
/// Only the last file of a log can be torn by a power cut; any other unreadable file is
/// refused here (restore the checkpoint from a backup).
pub async fn plan_repair(checkpoint: &Path) -> Result<ActionPlan> {
    let cp = Checkpoint::at(checkpoint);
    require_checkpoint(&cp)?;
    let offsets = Checkpoint::batch_ids(&cp.offsets_dir())?;
    let commits = Checkpoint::batch_ids(&cp.commits_dir())?;
    let earlier_offsets = offsets
        .iter()
        .rev()
        .skip(1)
        .map(|&id| (id, cp.read_offsets(id).err(), "offsets"));
    let earlier_commits = commits
        .iter()
        .rev()
        .skip(1)
        .map(|&id| (id, cp.read_commit(id).err(), "commits"));
    for (id, err, what) in earlier_offsets.chain(earlier_commits) {
        if let Some(e) = err {
            return Err(Error::checkpoint(
                cp.root().join(what).join(id.to_string()),
                format!(
                    "{what}/{id} is unreadable ({e}) but is not the last {what} file: a power cut tears only the last one. \
                         Restore the checkpoint from a backup (`weir checkpoint backup` makes them)"
                ),
            ));
        }
    }
    let aside = cp.weir_dir().join(format!("repair-{}", stamp()));
    let tables = flow_tables(&cp)?;
    let mut ops = Vec::new();
    let mut notes = Vec::new();
    if let Some(&n) = commits.last()
        && let Err(e) = cp.read_commit(n)
    {
        ops.push(Op::Rename {
            from: cp.commit_path(n),
            to: aside.join("commits").join(n.to_string()),
        });
        notes.push(format!("torn: {e}"));
        for (table, app_id) in &tables {
            let v = crate::delta::txn_version(table, app_id).await?;
            notes.push(match v {
                Some(v) if v >= n as i64 => format!(
                    "{} holds batch {n} (txn {app_id} version {v}): the re-run of batch {n} skips the write",
                    table.display()
                ),
                _ => format!(
                    "{} does not hold batch {n} (txn {app_id} version {}): the re-run of batch {n} writes it",
                    table.display(),
                    v.map_or("none".to_string(), |v| v.to_string())
                ),
            });
        }
        notes.push(format!(
            "the next run re-runs batch {n} with exactly its recorded files, then goes on"
        ));
    } else if let Some(&n) = offsets.last()
        && commits.last().is_none_or(|&c| c < n)
        && let Err(e) = cp.read_offsets(n)
    {
        for (table, app_id) in &tables {
            if let Some(v) = crate::delta::txn_version(table, app_id).await?
                && v >= n as i64
            {
                return Err(Error::checkpoint(
                    cp.offsets_path(n),
                    format!(
                        "offsets/{n} is torn ({e}) but {} already holds batch {n} (txn {app_id} version {v}): \
                         its files cannot be known again. Restore the checkpoint from a backup",
                        table.display()
                    ),
                ));
            }
        }
        ops.push(Op::Rename {
            from: cp.offsets_path(n),
            to: aside.join("offsets").join(n.to_string()),
        });
        notes.push(format!("torn: {e}"));
        notes.push(format!(
            "no table holds batch {n}: the next run plans batch {n} again from the files not yet committed"
        ));
    } else {
        notes.push("no torn offsets or commits file: nothing to repair".to_string());
    }
    let needs_confirmation = !ops.is_empty();
    Ok(ActionPlan {
        action: "repair".into(),
        checkpoint: checkpoint.to_path_buf(),
        ops,
        notes,
        needs_confirmation,
    })
}

/// Every Delta table the flow writes, with the app id its batches carry: the sink
/// (the query id) and the side tables (their own, [`crate::checkpoint::side_table_app_id`]),
/// from `_weir/plan.json`.
fn flow_tables(cp: &Checkpoint) -> Result<Vec<(PathBuf, String)>> {
    let query_id = cp.read_metadata()?.id.to_string();
    let Some(plan) = cp.read_plan()? else {
        return Ok(Vec::new());
    };
    let side = plan.side_tables.into_iter().map(|t| {
        let app_id = crate::checkpoint::side_table_app_id(&query_id, &t.key);
        (t.path, app_id)
    });
    Ok(plan
        .sink_path
        .map(|t| (t, query_id.clone()))
        .into_iter()
        .chain(side)
        .collect())
}

/// Performs the plan's operations in order, holding the checkpoint lock.
/// Returns one line per operation done.
pub async fn execute(plan: &ActionPlan) -> Result<Vec<String>> {
    let cp = Checkpoint::at(&plan.checkpoint);
    let lock = CheckpointLock::acquire(&cp)?;
    let mut done = Vec::new();
    let mut lock = Some(lock);
    for op in &plan.ops {
        match op {
            Op::CopyTree { from, to } => {
                let n = copy_tree(from, to)?;
                verify_tree(from, to)?;
                done.push(format!(
                    "copied and verified {n} file(s) to {}",
                    to.display()
                ));
            }
            Op::Rename { from, to } => {
                if from == cp.root() {
                    // The lock file moves with the directory: release it first.
                    drop(lock.take());
                }
                if let Some(parent) = to.parent() {
                    create_dir_private(parent).map_err(|e| Error::io(parent, e))?;
                }
                // Durable before the next operation (reset empties the table next).
                crate::durable::rename_new(from, to).map_err(|e| Error::io(from, e))?;
                done.push(format!("moved {} to {}", from.display(), to.display()));
            }
            Op::TruncateTable {
                path,
                version_before,
                ..
            } => {
                let table = crate::delta::open_table(path).await?;
                let (table, metrics) = table.delete().await.map_err(|source| Error::Delta {
                    path: path.display().to_string(),
                    source,
                })?;
                done.push(format!(
                    "emptied {} ({} row(s) removed) in Delta version {}; rows remain readable at version {version_before}",
                    path.display(),
                    metrics.num_deleted_rows.unwrap_or_default(),
                    table.version().unwrap_or_default()
                ));
            }
        }
    }
    drop(lock);
    Ok(done)
}

const SKIP: &[&str] = &["_weir/lock"];

fn rel_files(root: &Path) -> Result<Vec<PathBuf>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let path = entry.path();
            let ft = entry.file_type().map_err(|e| Error::io(&path, e))?;
            if ft.is_dir() {
                // A running deduplication's spill file is a cache, not checkpoint content.
                let spill = path
                    .strip_prefix(root)
                    .is_ok_and(|rel| rel.starts_with("state"))
                    && entry
                        .file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with(crate::state::spill::SPILL_DIR_PREFIX));
                if !spill {
                    walk(root, &path, out)?;
                }
            } else if ft.is_file() {
                let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
                if !SKIP.iter().any(|s| rel == Path::new(s)) {
                    out.push(rel);
                }
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    out.sort();
    Ok(out)
}

fn copy_tree(from: &Path, to: &Path) -> Result<usize> {
    let files = rel_files(from)?;
    create_dir_private(to).map_err(|e| Error::io(to, e))?;
    for rel in &files {
        let dst = to.join(rel);
        if let Some(parent) = dst.parent() {
            create_dir_private(parent).map_err(|e| Error::io(parent, e))?;
        }
        fs::copy(from.join(rel), &dst).map_err(|e| Error::io(&dst, e))?;
        crate::durable::sync_file(&dst).map_err(|e| Error::io(&dst, e))?;
    }
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .filter_map(|rel| to.join(rel).parent().map(Path::to_path_buf))
        .collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs.iter().rev() {
        crate::durable::sync_dir(d).map_err(|e| Error::io(d, e))?;
    }
    Ok(files.len())
}

fn verify_tree(from: &Path, to: &Path) -> Result<()> {
    let a = rel_files(from)?;
    let b = rel_files(to)?;
    if a != b {
        return Err(Error::checkpoint(
            to,
            "backup verification failed: the copy does not have the same files",
        ));
    }
    for rel in &a {
        let x = fs::read(from.join(rel)).map_err(|e| Error::io(from.join(rel), e))?;
        let y = fs::read(to.join(rel)).map_err(|e| Error::io(to.join(rel), e))?;
        if x != y {
            return Err(Error::checkpoint(
                to.join(rel),
                "backup verification failed: content differs",
            ));
        }
    }
    Ok(())
}
