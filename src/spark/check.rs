//! `weir check CHECKPOINT` on a Spark checkpoint: the verdict Spark itself
//! reaches when the query restarts from it, for what can be decided from the
//! files alone, each with the error class Spark raises.
//!
//! What Spark 4.3 reads at restart (`MicroBatchExecution.populateStartOffsets`
//! and the sources' and state stores' recovery), and what fails it:
//!
//! | Spark reads | fails when | Spark's error |
//! |---|---|---|
//! | `metadata` | missing while `offsets/` or `commits/` hold files | `STREAMING_CHECKPOINT_MISSING_METADATA_FILE` |
//! | the last `offsets/N` (and N-1) | a version above v2 | `INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION` |
//! | | torn or empty (a write cut short) | a JSON parse error (no error class) |
//! | the last `commits/M` | a version above v2, torn or empty | same as offsets |
//! | `sources/<i>/` after the last `.compact` (file source) | torn, too new | same as offsets |
//! | `sources/<i>/N` of a batch to re-run | missing | the batch's files cannot be listed |
//! | state version V = next batch id, every partition and store | no snapshot at or below V with every delta/changelog up to V | `CANNOT_LOAD_STATE_STORE.*` |
//! | format v2: the file with the unique id `commits/(V-1)` names | missing | `CANNOT_LOAD_STATE_STORE.*` |
//!
//! Damage Spark never reads at restart (an older torn offsets file, a missing
//! delta below the newest snapshot) is reported as a note, not a verdict. A
//! pending batch is not a problem: Spark re-runs it with the same offsets.
//! What the files cannot tell (a changed query: other aggregation keys,
//! another source) Spark checks against the plan at restart; the event log's
//! `QueryTerminatedEvent` carries that verdict and `weir attach --spark` shows it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::checkpoint::{
    Problem, SourceKind, SparkCheckpoint, StateOperator, StoreFormat, batch_ids, list_batches,
};

/// One thing found.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Finding {
    pub path: PathBuf,
    pub message: String,
    /// The error class Spark raises for it at restart (`None`: an error without a class,
    /// or a note).
    pub spark_error_class: Option<String>,
}

impl From<Problem> for Finding {
    fn from(p: Problem) -> Self {
        Finding {
            path: p.path,
            message: p.message,
            spark_error_class: p.spark_error_class,
        }
    }
}

/// `weir check`'s answer for a Spark checkpoint.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SparkVerdict {
    pub engine: &'static str,
    pub checkpoint: PathBuf,
    pub query_id: Option<String>,
    /// Whether Spark can restart from these files.
    pub compatible: bool,
    /// What restarting does (the batch it runs next).
    pub restart: String,
    /// Why Spark fails at restart (empty when compatible).
    pub reasons: Vec<Finding>,
    /// Worth knowing, not blocking.
    pub notes: Vec<Finding>,
    /// The playbook to follow when incompatible.
    pub playbook: Option<String>,
}

/// The error class Spark raises when state version `v` of an HDFS or RocksDB store cannot be built.
fn state_error_class(format: StoreFormat) -> &'static str {
    match format {
        StoreFormat::Hdfs => "CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS",
        _ => "CANNOT_LOAD_STATE_STORE.CANNOT_READ_STREAMING_STATE_FILE",
    }
}

/// Checks a Spark checkpoint; `Err` only when `root` is not a directory. Every offsets and
/// commits file is read (older torn files become notes).
pub fn check(root: &Path) -> crate::Result<SparkVerdict> {
    check_scoped(root, true)
}

/// [`check`] reading only the log files Spark reads at restart (the last two offsets, the
/// last commit): the same reasons, without notes on older files. What the console runs on
/// a stopped query, whose checkpoint may hold 100,000 batches.
pub fn restart_check(root: &Path) -> crate::Result<SparkVerdict> {
    check_scoped(root, false)
}

fn check_scoped(root: &Path, every_file: bool) -> crate::Result<SparkVerdict> {
    if !root.is_dir() {
        return Err(crate::Error::checkpoint(
            root,
            "no such checkpoint directory",
        ));
    }
    let cp = SparkCheckpoint::at(root);
    let mut reasons: Vec<Finding> = Vec::new();
    let mut notes: Vec<Finding> = Vec::new();
    let query_id = match cp.query_id() {
        Ok(id) => Some(id),
        Err(p) => {
            if p.message == "missing" {
                notes.push(p.into());
            } else {
                reasons.push(p.into());
            }
            None
        }
    };
    let io = |dir: &Path, e: std::io::Error| Finding {
        path: dir.to_path_buf(),
        message: format!("cannot list: {e}"),
        spark_error_class: None,
    };
    let offsets = batch_ids(&cp.offsets_dir()).unwrap_or_else(|e| {
        reasons.push(io(&cp.offsets_dir(), e));
        Vec::new()
    });
    let commits = batch_ids(&cp.commits_dir()).unwrap_or_else(|e| {
        reasons.push(io(&cp.commits_dir(), e));
        Vec::new()
    });
    // Offsets: Spark reads the last one and the one before it.
    let last_n = offsets.last().copied();
    let mut last_offsets = None;
    for (k, &id) in offsets.iter().enumerate().rev() {
        let needed = k + 2 >= offsets.len();
        if !needed && !every_file {
            break;
        }
        let read = cp.read_offsets(id);
        match read {
            Ok(o) => {
                if last_offsets.is_none() && Some(id) == last_n {
                    last_offsets = Some(o);
                }
            }
            Err(p) if needed => reasons.push(p.into()),
            Err(p) => notes.push(Finding {
                message: format!("{} (Spark does not read it at restart)", p.message),
                ..p.into()
            }),
        }
    }
    let last_m = commits.last().copied();
    for &id in commits.iter().rev() {
        if !every_file && Some(id) != last_m {
            break;
        }
        match cp.read_commit(id) {
            Ok(_) => {}
            Err(p) if Some(id) == last_m => reasons.push(p.into()),
            Err(p) => notes.push(Finding {
                message: format!("{} (Spark does not read it at restart)", p.message),
                ..p.into()
            }),
        }
        if offsets.binary_search(&id).is_err() {
            notes.push(Finding {
                path: cp.commit_path(id),
                message: format!("commits/{id} has no offsets/{id}"),
                spark_error_class: None,
            });
        }
    }
    // The batch Spark runs next: the pending one, or the one after the last commit.
    let pending = last_n.filter(|n| last_m.is_none_or(|m| *n > m));
    let next = pending.or(last_m.map(|m| m + 1)).unwrap_or(0);
    let restart = match (pending, last_m) {
        (Some(n), _) => format!(
            "offsets/{n} without commits/{n}: Spark re-runs batch {n} on restart, with the same offsets"
        ),
        (None, Some(m)) => format!(
            "batch {m} is committed: Spark plans batch {} on restart",
            m + 1
        ),
        (None, None) => "no batch planned yet: Spark starts at batch 0".into(),
    };
    let uncommitted = offsets
        .iter()
        .filter(|n| last_m.is_none_or(|m| **n > m))
        .count();
    if uncommitted > 1 {
        notes.push(Finding {
            path: cp.offsets_dir(),
            message: format!(
                "{uncommitted} batches planned beyond the last commit; Spark re-runs only the last (batch {next})"
            ),
            spark_error_class: None,
        });
    }
    // Source logs: Spark reads every file after the last compact; a pending batch needs its own.
    if let Some(seq) = &last_offsets {
        for (i, so) in seq.sources.iter().enumerate() {
            let kind = so
                .offset
                .as_ref()
                .map_or(SourceKind::Unknown, SourceKind::of);
            if kind != SourceKind::File {
                continue;
            }
            let Some(log) = cp.source_log(i, so.name.as_deref()) else {
                reasons.push(Finding {
                    path: cp
                        .sources_dir()
                        .join(so.name.clone().unwrap_or_else(|| i.to_string())),
                    message:
                        "missing: the file source's log (Spark cannot tell which files were read)"
                            .into(),
                    spark_error_class: None,
                });
                continue;
            };
            let listing = list_batches(&log.dir).unwrap_or_default();
            let last_compact = listing.iter().filter(|(_, c)| *c).map(|(id, _)| *id).max();
            for (id, compact) in &listing {
                let read = *compact && Some(*id) == last_compact
                    || !*compact && last_compact.is_none_or(|k| *id > k);
                if read && let Err(p) = log.read_entries(*id, *compact) {
                    reasons.push(p.into());
                }
            }
            if let Some(n) = pending
                && let Some(end) = so
                    .offset
                    .as_ref()
                    .and_then(|o| o.get("logOffset"))
                    .and_then(serde_json::Value::as_u64)
                && matches!(log.files_of_batch(end), Ok(None))
            {
                reasons.push(Finding {
                    path: log.dir.join(end.to_string()),
                    message: format!(
                        "missing: batch {n} is re-run on restart but the source log has no entry for logOffset {end}"
                    ),
                    spark_error_class: None,
                });
            }
        }
    }
    // State: version `next` of every partition and store must be loadable.
    let mut problems = Vec::new();
    let ops = super::checkpoint::state_operators(&cp, &mut problems);
    for p in problems {
        reasons.push(p.into());
    }
    let unique_ids = next
        .checked_sub(1)
        .and_then(|prev| cp.read_commit(prev).ok())
        .and_then(|c| c.state_unique_ids);
    for op in &ops {
        check_state(op, next, unique_ids.as_ref(), &mut reasons, &mut notes);
    }
    let compatible = reasons.is_empty();
    Ok(SparkVerdict {
        engine: "spark",
        checkpoint: root.to_path_buf(),
        query_id,
        compatible,
        restart,
        reasons,
        notes,
        playbook: (!compatible).then(|| "checkpoint_incompatible".to_string()),
    })
}

fn check_state(
    op: &StateOperator,
    version: u64,
    unique_ids: Option<&std::collections::BTreeMap<String, Vec<Vec<String>>>>,
    reasons: &mut Vec<Finding>,
    notes: &mut Vec<Finding>,
) {
    if version == 0 {
        return;
    }
    let name = op.operator_name.as_deref().unwrap_or("stateful operator");
    let format = op.format();
    if op.stores.is_empty() {
        reasons.push(Finding {
            path: PathBuf::from(format!("state/{}", op.operator_id)),
            message: format!(
                "operator {} ({name}) has no partition directories: Spark cannot load state version {version}",
                op.operator_id
            ),
            spark_error_class: Some("STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY".into()),
        });
        return;
    }
    if let Some(n) = op.num_partitions {
        let have: std::collections::BTreeSet<u64> = op.stores.iter().map(|s| s.partition).collect();
        for p in 0..n {
            if !have.contains(&p) {
                reasons.push(Finding {
                    path: op
                        .stores
                        .first()
                        .and_then(|s| s.dir.parent())
                        .map_or_else(PathBuf::new, |d| d.join(p.to_string())),
                    message: format!(
                        "partition {p} of operator {} ({name}) is missing: state version {version} cannot be loaded",
                        op.operator_id
                    ),
                    spark_error_class: Some(state_error_class(format).into()),
                });
            }
        }
    }
    let ids_for_op = unique_ids.and_then(|u| u.get(&op.operator_id.to_string()));
    for store in &op.stores {
        // Format v2: the commit names the unique id of each partition's store files.
        if let Some(ids) = ids_for_op
            && let Some(part) = ids.get(store.partition as usize)
        {
            let index = op
                .store_names
                .iter()
                .position(|n| *n == store.store)
                .unwrap_or(0);
            if let Some(id) = part.get(index) {
                let found = store
                    .versions
                    .get(&version)
                    .is_some_and(|f| f.unique_ids.iter().any(|x| x == id));
                if !found {
                    reasons.push(Finding {
                        path: store.dir.join(format!("{version}_{id}.changelog")),
                        message: format!(
                            "missing: the commit names state version {version} with unique id {id} (partition {}, store {}), no file carries it",
                            store.partition, store.store
                        ),
                        spark_error_class: Some(state_error_class(format).into()),
                    });
                }
                continue;
            }
        }
        if let Err(missing) = store.loadable(version) {
            let what = match store.format() {
                StoreFormat::Hdfs => format!("{missing}.delta"),
                _ => format!("{missing}.changelog"),
            };
            reasons.push(Finding {
                path: store.dir.join(&what),
                message: format!(
                    "missing: state version {version} of operator {} ({name}), partition {}, store {} needs {what} (no snapshot at or below {version} covers it)",
                    op.operator_id, store.partition, store.store
                ),
                spark_error_class: Some(state_error_class(store.format()).into()),
            });
        }
        if let Some((&newest, _)) = store.versions.iter().next_back()
            && newest > version
        {
            notes.push(Finding {
                path: store.dir.clone(),
                message: format!(
                    "state versions up to {newest} on disk beyond the {version} Spark loads (written by a batch that did not commit; Spark overwrites them)"
                ),
                spark_error_class: None,
            });
        }
    }
}

/// What the query's last progress record says about its stateful operators
/// (`stateOperators[].operatorName`, in operator id order), from its event log:
/// with it, a checkpoint whose `state/` lost an operator's directory is refused as
/// Spark refuses it (`STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY`); the files
/// alone cannot tell a stateless query from one whose state was deleted.
pub fn check_operators(verdict: &mut SparkVerdict, operators: &[String]) {
    let root = verdict.checkpoint.clone();
    let cp = SparkCheckpoint::at(&root);
    let next_is_first = verdict.restart.contains("starts at batch 0");
    if operators.is_empty() || next_is_first {
        return;
    }
    let state = cp.state_dir();
    let present: Vec<u64> = crate::numbered::ids(&state)
        .unwrap_or_default()
        .into_iter()
        .filter(|id| {
            std::fs::read_dir(state.join(id.to_string())).is_ok_and(|mut d| d.next().is_some())
        })
        .collect();
    let missing: Vec<String> = operators
        .iter()
        .enumerate()
        .filter(|(i, _)| !present.contains(&(*i as u64)))
        .map(|(i, name)| format!("(OperatorId: {i} -> OperatorName: {name})"))
        .collect();
    if !missing.is_empty() {
        verdict.reasons.push(Finding {
            path: cp.state_dir(),
            message: format!(
                "the query's last progress lists stateful operators [{}] whose state directory is missing or empty",
                missing.join(", ")
            ),
            spark_error_class: Some("STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY".into()),
        });
        verdict.compatible = false;
        verdict.playbook = Some("checkpoint_incompatible".into());
    }
}

/// The human form.
pub fn render(v: &SparkVerdict) -> String {
    let mut out = format!(
        "spark query {}: {} (checkpoint {})\n  restart: {}\n",
        v.query_id.as_deref().unwrap_or("?"),
        if v.compatible {
            "Spark can restart from it"
        } else {
            "Spark fails at restart"
        },
        v.checkpoint.display(),
        v.restart
    );
    for r in &v.reasons {
        out.push_str(&format!("  reason: {}: {}", r.path.display(), r.message));
        if let Some(c) = &r.spark_error_class {
            out.push_str(&format!(" [Spark: {c}]"));
        }
        out.push('\n');
    }
    for n in &v.notes {
        out.push_str(&format!("  note: {}: {}\n", n.path.display(), n.message));
    }
    if let Some(p) = &v.playbook {
        out.push_str(&format!(
            "  playbook: weir playbook {p} --checkpoint {}\n",
            v.checkpoint.display()
        ));
    }
    out
}
