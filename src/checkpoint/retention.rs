//! Checkpoint retention: Spark's `spark.sql.streaming.minBatchesToRetain` (default 100),
//! a flow's `min_batches_to_retain`.
//!
//! After batch N is committed (`commits/N` durable, the sources settled), the engine calls
//! [`purge`]: the entries of batches older than the last `min_batches_to_retain` ones are
//! removed from `commits/` and `offsets/`, and the state versions older than them from
//! `state/` (the state store keeps the same number of versions loadable; a version is
//! removed only when a later snapshot covers the versions kept).
//!
//! What is never removed, whatever the setting:
//!
//! - `offsets/N` and `commits/N` of the last committed batch: a restart reads the last
//!   commit (the watermark, the next batch id) and plans batch N + 1 from the end offsets
//!   of `offsets/N`; a batch re-run after a crash starts from the offsets of the batch
//!   before it, which is the last committed one;
//! - anything of a batch newer than N (a planned, uncommitted batch);
//! - the state files needed to load the last `min_batches_to_retain` versions.
//!
//! `weir checkpoint rollback --to B` needs `commits/B` of the last committed batch only;
//! `weir diff`/`weir inspect` show the batches still kept (`weir diff --batch B` of a
//! purged batch says so). Spark purges its logs the same way (`purge(batchId -
//! minBatchesToRetain)` after a commit), so a weir checkpoint handed to Spark looks like
//! Spark's own.
//!
//! Order of removal, for a crash at any point: all old `commits/` entries first, then
//! the `offsets/` entries, ascending. A crash in between leaves old offsets without
//! commits, which nothing reads (only the offsets after the last commit are a pending
//! batch) and the next purge removes; never a commit without its offsets, which the
//! restart checks refuse.

use std::path::Path;

use super::Checkpoint;
use crate::error::{Error, Result};

/// What one purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub offsets: usize,
    pub commits: usize,
    pub state_files: usize,
}

impl Purged {
    pub fn is_empty(&self) -> bool {
        self.offsets == 0 && self.commits == 0 && self.state_files == 0
    }
}

/// The oldest batch id kept after batch `committed` with `min_batches_to_retain`.
pub fn oldest_kept(committed: u64, min_batches_to_retain: u64) -> u64 {
    committed.saturating_sub(min_batches_to_retain.max(1) - 1)
}

/// Removes the log entries and state versions of batches before
/// [`oldest_kept`]`(committed, min_batches_to_retain)`. Call only after `commits/<committed>`
/// is durable.
pub fn purge(cp: &Checkpoint, committed: u64, min_batches_to_retain: u64) -> Result<Purged> {
    let keep_from = oldest_kept(committed, min_batches_to_retain);
    let mut purged = Purged::default();
    if keep_from == 0 {
        return Ok(purged);
    }
    purged.commits = remove_before(&cp.commits_dir(), keep_from)?;
    purged.offsets = remove_before(&cp.offsets_dir(), keep_from)?;
    purged.state_files = crate::state::purge_tree(
        &cp.root().join("state"),
        committed,
        min_batches_to_retain.max(1),
    );
    Ok(purged)
}

/// Removes the numbered entries below `keep_from` of a log directory, ascending.
fn remove_before(dir: &Path, keep_from: u64) -> Result<usize> {
    let mut removed = 0;
    for id in Checkpoint::batch_ids(dir)? {
        if id >= keep_from {
            break;
        }
        let path = dir.join(id.to_string());
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::checkpoint(
                    &path,
                    format!("cannot remove an entry beyond min_batches_to_retain: {e}"),
                ));
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{CommitMetadata, OffsetSeq, OffsetSeqMetadata};

    fn batch(cp: &Checkpoint, id: u64, committed: bool) {
        let seq = OffsetSeq {
            metadata: OffsetSeqMetadata::default(),
            offsets: vec![Some(serde_json::json!({ "logOffset": id }))],
        };
        cp.write_offsets(id, &seq).unwrap();
        if committed {
            cp.write_commit(id, &CommitMetadata::default()).unwrap();
        }
    }

    #[test]
    fn keeps_the_last_batches_and_the_pending_one() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::at(dir.path().join("cp"));
        cp.open_or_create().unwrap();
        for id in 0..10 {
            batch(&cp, id, true);
        }
        batch(&cp, 10, false);
        let purged = purge(&cp, 9, 3).unwrap();
        assert_eq!((purged.offsets, purged.commits), (7, 7));
        assert_eq!(
            Checkpoint::batch_ids(&cp.offsets_dir()).unwrap(),
            vec![7, 8, 9, 10]
        );
        assert_eq!(
            Checkpoint::batch_ids(&cp.commits_dir()).unwrap(),
            vec![7, 8, 9]
        );
        // The restart checks still accept it: the pending batch 10 re-runs from offsets/9.
        assert_eq!(cp.latest_commit().unwrap().unwrap().0, 9);
        assert_eq!(cp.latest_offsets().unwrap().unwrap().0, 10);
        // Idempotent; one batch retained keeps the last commit.
        assert!(purge(&cp, 9, 3).unwrap().is_empty());
        purge(&cp, 9, 1).unwrap();
        assert_eq!(Checkpoint::batch_ids(&cp.commits_dir()).unwrap(), vec![9]);
        assert_eq!(
            Checkpoint::batch_ids(&cp.offsets_dir()).unwrap(),
            vec![9, 10]
        );
    }

    #[test]
    fn nothing_is_removed_before_the_retention_is_reached() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::at(dir.path().join("cp"));
        cp.open_or_create().unwrap();
        for id in 0..5 {
            batch(&cp, id, true);
        }
        assert!(purge(&cp, 4, 100).unwrap().is_empty());
        assert!(purge(&cp, 4, 5).unwrap().is_empty());
        assert_eq!(oldest_kept(4, 5), 0);
        assert_eq!(oldest_kept(5, 5), 1);
        assert_eq!(oldest_kept(5, 0), 5);
    }
}
