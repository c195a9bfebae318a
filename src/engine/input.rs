//! A flow's input, whatever its source: what the batch protocol needs from a
//! source (DESIGN.md §5) — plan the next batch and record it, re-derive a
//! recorded batch after a restart, read it, and settle it after the commit.
//!
//! | step | files (Auto Loader) | Delta table (Spark `DeltaSource`) |
//! |---|---|---|
//! | plan | list the directory, drop files the ledger knows | walk the table's commits from the last offset |
//! | end offset | `{"logOffset": N}` (Spark's `FileStreamSource`) | `DeltaSourceOffset` JSON |
//! | record | ledger rows `planned` by batch N | nothing: the offsets are the record |
//! | replay N | the ledger's files of batch N | `files_between(offsets[N-1], offsets[N])` |
//! | settle | ledger rows `committed` | nothing |

use arrow::datatypes::SchemaRef;

use crate::error::Result;
use crate::pipeline::Trigger;
use crate::source::delta::{DeltaFile, DeltaOffset, DeltaSource, PlanBounds};
use crate::source::files::ledger::ListedFile;
use crate::source::files::{BatchRead, FileSource, select};

/// A flow's source, ready to plan batches.
pub enum Input {
    Files(Box<FileSource>),
    Delta(Box<DeltaInput>),
}

/// A Delta source with the bound an `available_now` run pinned at its start.
pub struct DeltaInput {
    pub source: DeltaSource,
    /// `available_now`: the table's latest version when the run started.
    pub until_version: Option<u64>,
}

/// The data of one batch, as its source identifies it.
#[derive(Debug, Clone)]
pub enum BatchFiles {
    Files(Vec<ListedFile>),
    Delta(Vec<DeltaFile>),
}

impl BatchFiles {
    pub fn len(&self) -> usize {
        match self {
            BatchFiles::Files(f) => f.len(),
            BatchFiles::Delta(f) => f.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A planned batch before it is recorded.
#[derive(Debug)]
pub struct Planned {
    pub files: BatchFiles,
    /// The source's end offset for `offsets/N`; `None` for a no-data batch (the offset stays).
    pub end_offset: Option<serde_json::Value>,
    /// Files and bytes left behind (`numFilesOutstanding`, `numBytesOutstanding`).
    pub backlog_files: u64,
    pub backlog_bytes: u64,
    /// Delta only: table versions not fully read after this batch.
    pub backlog_versions: Option<u64>,
    /// Files source only: files found rewritten after ingestion by this listing.
    pub num_modified: u64,
}

impl Input {
    /// Spark's source description, e.g. `FileStreamSource[file:/...]`, `DeltaSource[file:/...]`.
    pub fn description(&self) -> String {
        match self {
            Input::Files(f) => f.description(),
            Input::Delta(d) => d.source.description(),
        }
    }

    /// The `weir.source.format` recorded in each batch's offsets metadata.
    pub fn format(&self) -> &'static str {
        match self {
            Input::Files(f) => f.options.format.as_str(),
            Input::Delta(_) => "delta",
        }
    }

    pub fn files_source(&mut self) -> Option<&mut FileSource> {
        match self {
            Input::Files(f) => Some(f),
            Input::Delta(_) => None,
        }
    }

    /// Plans the next batch after `prev_end` (the previous batch's end offset).
    /// `Ok(None)`: nothing new.
    pub async fn plan(
        &mut self,
        trigger: Trigger,
        prev_end: Option<&serde_json::Value>,
        batch_id: u64,
        now_ms: i64,
    ) -> Result<Option<Planned>> {
        match self {
            Input::Files(src) => {
                let mut num_modified = 0u64;
                let selection = match trigger {
                    Trigger::AvailableNow => {
                        if !src.has_snapshot() {
                            let listing = src.list(now_ms)?;
                            num_modified += listing.newly_modified.len() as u64;
                            src.take_snapshot(listing);
                        }
                        src.next_from_snapshot(true)
                    }
                    Trigger::Once | Trigger::ProcessingTime(_) => {
                        let listing = src.list(now_ms)?;
                        num_modified += listing.newly_modified.len() as u64;
                        select(
                            &listing.candidates,
                            &src.options,
                            !matches!(trigger, Trigger::Once),
                        )
                    }
                };
                if selection.files.is_empty() {
                    return Ok(None);
                }
                Ok(Some(Planned {
                    end_offset: Some(serde_json::json!({ "logOffset": batch_id })),
                    backlog_files: selection.backlog_files,
                    backlog_bytes: selection.backlog_bytes,
                    backlog_versions: None,
                    num_modified,
                    files: BatchFiles::Files(selection.files),
                }))
            }
            Input::Delta(d) => {
                let from = prev_end.map(DeltaOffset::from_json).transpose().map_err(|e| {
                    crate::Error::Source {
                        path: d.source.options().path.clone(),
                        message: format!(
                            "the checkpoint's last offset is not a Delta source offset ({e}); \
                             was this checkpoint written by another source? Start the flow with a new checkpoint"
                        ),
                    }
                })?;
                let bounds = match trigger {
                    Trigger::Once => PlanBounds {
                        unbounded: true,
                        until_version: None,
                    },
                    Trigger::AvailableNow => {
                        if d.until_version.is_none() {
                            d.until_version = d.source.refresh().await?;
                        }
                        PlanBounds {
                            unbounded: false,
                            until_version: d.until_version,
                        }
                    }
                    Trigger::ProcessingTime(_) => PlanBounds::default(),
                };
                let Some(planned) = d.source.plan_with(from.as_ref(), bounds).await? else {
                    return Ok(None);
                };
                Ok(Some(Planned {
                    end_offset: Some(planned.end.to_json()),
                    backlog_files: planned.backlog.files,
                    backlog_bytes: planned.backlog.bytes,
                    backlog_versions: Some(planned.backlog.versions_behind),
                    num_modified: 0,
                    files: BatchFiles::Delta(planned.files),
                }))
            }
        }
    }

    /// Records a planned batch before its offsets are written (the files ledger).
    pub fn record_plan(&mut self, batch_id: u64, files: &BatchFiles, now_ms: i64) -> Result<()> {
        match (self, files) {
            (Input::Files(src), BatchFiles::Files(f)) => src.ledger.plan_batch(batch_id, f, now_ms),
            _ => Ok(()),
        }
    }

    /// The files of batch `batch_id`, recorded before a restart.
    pub async fn replay(
        &mut self,
        batch_id: u64,
        prev_end: Option<&serde_json::Value>,
        end: Option<&serde_json::Value>,
    ) -> Result<BatchFiles> {
        match self {
            Input::Files(src) => Ok(BatchFiles::Files(src.ledger.files_for_batch(batch_id)?)),
            Input::Delta(d) => {
                let parse = |v: &serde_json::Value| {
                    DeltaOffset::from_json(v).map_err(|e| crate::Error::Source {
                        path: d.source.options().path.clone(),
                        message: format!("batch {batch_id}: not a Delta source offset: {e}"),
                    })
                };
                let start = prev_end.map(parse).transpose()?;
                let Some(end) = end.map(parse).transpose()? else {
                    return Ok(BatchFiles::Delta(Vec::new()));
                };
                if start.as_ref() == Some(&end) {
                    // A no-data batch: the offset did not move.
                    return Ok(BatchFiles::Delta(Vec::new()));
                }
                Ok(BatchFiles::Delta(
                    d.source.files_between(start.as_ref(), &end).await?,
                ))
            }
        }
    }

    /// A reader for a batch's files that owns what it needs (no borrow of the source is
    /// held while the read runs).
    pub fn reader(&self) -> Result<Reader> {
        Ok(match self {
            Input::Files(src) => Reader::Files(src.reader()),
            Input::Delta(d) => Reader::Delta(d.source.reader()?),
        })
    }

    /// After `commits/N`: the ledger's rows of batch N become committed.
    pub fn settle(
        &mut self,
        batch_id: u64,
        outcomes: &[(String, crate::source::files::ledger::FileOutcome)],
        now_ms: i64,
    ) -> Result<()> {
        match self {
            Input::Files(src) => src.ledger.commit_batch(batch_id, outcomes, now_ms),
            Input::Delta(_) => Ok(()),
        }
    }

    /// The schema batches have before the flow's projection.
    pub fn batch_schema(&self) -> Result<SchemaRef> {
        match self {
            Input::Files(f) => Ok(f.batch_schema().clone()),
            Input::Delta(d) => d.source.schema().ok_or_else(|| crate::Error::Source {
                path: d.source.options().path.clone(),
                message: "the Delta table has not been loaded yet".into(),
            }),
        }
    }
}

/// Reads the files of a batch; see [`Input::reader`].
pub enum Reader {
    Files(crate::source::files::BatchReader),
    Delta(crate::source::delta::DeltaBatchReader),
}

impl Reader {
    pub async fn read(self, files: &BatchFiles) -> Result<BatchRead> {
        match (self, files) {
            (Reader::Files(r), BatchFiles::Files(f)) => r.read(f).await,
            (Reader::Delta(r), BatchFiles::Delta(f)) => {
                let batches = if f.is_empty() {
                    Vec::new()
                } else {
                    r.read(f).await?
                };
                Ok(BatchRead {
                    num_rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
                    num_bytes: f.iter().map(|f| f.size).sum(),
                    batches,
                    ..Default::default()
                })
            }
            _ => Ok(BatchRead::default()),
        }
    }
}
