//! Recovery (DESIGN.md §5 step 2): where the flow stopped, read from the checkpoint
//! before any batch runs.
//!
//! The last `offsets/N` and the last `commits/M`: if N = M + 1, batch N is re-run with
//! exactly its recorded offsets; otherwise the next batch is M + 1. Any other shape (a
//! commit without offsets, more than one uncommitted batch) stops the flow with an error
//! naming the file. Each source then repairs its own records ([`Input::recover`]: the
//! file ledger's rows planned without offsets are forgotten, those of committed batches
//! settled).

use crate::checkpoint::{Checkpoint, OffsetSeq};
use crate::error::{Error, Result};
use crate::spec::SourceSpec;

use super::input::Input;

/// What recovery found in the checkpoint.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// The last batch planned (`offsets/N`).
    pub last_planned: Option<u64>,
    /// The last batch committed (`commits/M`).
    pub last_commit: Option<u64>,
    /// The watermark the next batch runs with (Spark: `commits/M`'s `nextBatchWatermarkMs`).
    pub watermark_ms: i64,
    /// Each source's own watermark after the last commit (a union of sources).
    pub source_watermarks_ms: Vec<Option<i64>>,
    /// A batch planned but not committed: it is re-run with exactly these offsets.
    pub replay: Option<(u64, OffsetSeq)>,
    /// The batch after the last commit.
    pub next_batch_id: u64,
}

/// Reads the checkpoint's logs and repairs the sources' records (`sources[i]` is source
/// `i` of the flow).
pub fn recover(checkpoint: &Checkpoint, sources: &[&SourceSpec], now_ms: i64) -> Result<Recovered> {
    let last_offsets = checkpoint.latest_offsets()?;
    let last_commit_meta = checkpoint.latest_commit()?;
    let last_commit = last_commit_meta.as_ref().map(|(id, _)| *id);
    let watermark_ms = last_commit_meta
        .as_ref()
        .map_or(0, |(_, c)| c.next_batch_watermark_ms);
    let last_planned = last_offsets.as_ref().map(|(id, _)| *id);
    match (last_planned, last_commit) {
        (Some(p), Some(c)) if c > p => {
            return Err(Error::checkpoint(
                checkpoint.commit_path(c),
                format!(
                    "commits/{c} exists but offsets stop at {p}; the checkpoint is inconsistent"
                ),
            ));
        }
        (Some(p), c) if p > c.map_or(0, |c| c + 1) && !(c.is_none() && p == 0) => {
            return Err(Error::checkpoint(
                checkpoint.offsets_path(p),
                format!(
                    "offsets/{p} is planned but the last commit is {}; more than one batch is uncommitted",
                    c.map_or("none".to_string(), |c| c.to_string())
                ),
            ));
        }
        (None, Some(c)) => {
            return Err(Error::checkpoint(
                checkpoint.commit_path(c),
                "commits exist but no offsets; the checkpoint is inconsistent",
            ));
        }
        _ => {}
    }
    for (index, source) in sources.iter().enumerate() {
        Input::recover(source, index, checkpoint, last_planned, last_commit, now_ms)?;
    }
    Ok(Recovered {
        last_planned,
        last_commit,
        watermark_ms,
        source_watermarks_ms: last_commit_meta
            .as_ref()
            .map(|(_, c)| c.source_watermarks_ms.clone())
            .unwrap_or_default(),
        replay: last_offsets.filter(|(id, _)| Some(*id) != last_commit),
        next_batch_id: last_commit.map_or(0, |c| c + 1),
    })
}
