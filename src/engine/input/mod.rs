//! A flow's inputs: what the batch protocol (DESIGN.md §5) needs from a source,
//! whatever its kind — open it once its schema is known, repair its own records on
//! recovery, plan the next batch and record it, re-derive a recorded batch after a
//! restart, read it, check what the read found against the schema, and settle it
//! after the commit.
//!
//! | step | files (Auto Loader), [`files`] | Delta table (Spark `DeltaSource`), [`delta`] | Kafka (Spark `KafkaMicroBatchStream`), [`kafka`] |
//! |---|---|---|---|
//! | open | the given, recorded or inferred schema | the table's schema, once the table exists | Spark's Kafka columns, or `format`'s |
//! | recover | ledger: forget unplanned rows, settle committed ones | nothing | nothing |
//! | plan | list the directory, drop files the ledger knows | walk the table's commits from the last offset | latest offsets, max/min offsets per trigger |
//! | end offset | `{"logOffset": N}` (Spark's `FileStreamSource`) | `DeltaSourceOffset` JSON | `KafkaSourceOffset` JSON |
//! | record | ledger rows `planned` by batch N | nothing: the offsets are the record | `sources/<i>/0` before the first batch; then the offsets |
//! | replay N | the ledger's files of batch N | `files_between(offsets[N-1], offsets[N])` | `[offsets[N-1], offsets[N])` per partition |
//! | read | decode in parallel, `_rescued_data`, `_metadata` | the data files of the commits (with `read_change_feed`: their change rows, deltalake's CDF reader) | fetch per partition; `format` parses `value` |
//! | evolve | new columns: widen / fail / ignore (`schema_evolution`) | nothing | nothing (new fields stay rescued) |
//! | settle | ledger rows `committed` | nothing | nothing |
//!
//! A new kind of source is a new variant here with its own module; the batch stages
//! (`engine::batch`) only call [`Input`]'s methods. Source `i` of a flow owns offset
//! `i` of `offsets/N` and `sources/<i>/` in the checkpoint (Spark numbers a query's
//! sources the same way): 0 is the flow's source, 1 a stream-stream join's right side.

pub mod delta;
pub mod files;
pub mod kafka;

use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::schema::evolve::Decision;
use crate::source::delta::DeltaFile;
use crate::source::files::BatchRead;
use crate::source::files::ledger::{FileOutcome, ListedFile};
use crate::spec::{SourceSpec, Trigger};
pub use delta::DeltaInput;
pub use files::FilesInput;
pub use kafka::KafkaInput;

/// One source of a flow, open: its schema is known and it can plan batches.
pub enum Input {
    Files(Box<FilesInput>),
    Delta(Box<DeltaInput>),
    Kafka(Box<KafkaInput>),
}

/// The data of one batch, as its source identifies it.
#[derive(Debug, Clone)]
pub enum BatchFiles {
    Files(Vec<ListedFile>),
    Delta(Vec<DeltaFile>),
    /// A Delta table's change data feed (`read_change_feed`): the versions read (`None`:
    /// no data from this source).
    DeltaChanges(Option<crate::source::delta_cdf::CdfRange>),
    /// Kafka: the batch's start and end offsets (`None`: no data from this source).
    Kafka(Option<kafka::KafkaBatch>),
}

impl BatchFiles {
    /// Files of the batch; for Kafka, partitions with records.
    pub fn len(&self) -> usize {
        match self {
            BatchFiles::Files(f) => f.len(),
            BatchFiles::Delta(f) => f.len(),
            BatchFiles::DeltaChanges(r) => r.map_or(0, |r| r.versions() as usize),
            BatchFiles::Kafka(b) => b.as_ref().map_or(0, kafka::KafkaBatch::partitions),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a source leaves behind after a batch (`numFilesOutstanding`, `numBytesOutstanding`,
/// `numVersionsBehind`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    pub files: u64,
    pub bytes: u64,
    /// Delta only: table versions not fully read.
    pub versions: Option<u64>,
    /// Kafka only: offsets between the batch's end and the latest, over partitions.
    pub offsets_behind: Option<OffsetsBehind>,
}

/// Offsets behind the latest per partition after a batch (Spark's
/// `minOffsetsBehindLatest`, `maxOffsetsBehindLatest`, `avgOffsetsBehindLatest`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OffsetsBehind {
    pub min: u64,
    pub max: u64,
    pub sum: u64,
    pub partitions: u64,
}

/// A source's part of a planned batch, before it is recorded.
#[derive(Debug)]
pub struct Planned {
    pub files: BatchFiles,
    /// The source's end offset for `offsets/N`; `None` for a no-data part (the offset stays).
    pub end_offset: Option<serde_json::Value>,
    /// The source's latest offset when planning (progress `latestOffset`; Kafka).
    pub latest_offset: Option<serde_json::Value>,
    pub backlog: Backlog,
    /// Files source only: files found rewritten after ingestion by this listing.
    pub num_modified: u64,
}

/// What a source's schema check made of a read (see [`Input::evolve`]).
#[derive(Debug)]
pub struct Evolution {
    pub decision: Decision,
    /// `schema_evolution = "none"`: the new columns, ignored (named and counted).
    pub ignored: Vec<String>,
}

/// Source `index`'s directory in the checkpoint: `sources/<index>/`.
pub fn source_dir(checkpoint: &Checkpoint, index: usize) -> PathBuf {
    checkpoint.root().join("sources").join(index.to_string())
}

impl Input {
    /// Opens source `index` of a flow. `Ok(None)` while its schema is unknown (no file to
    /// infer it from yet, no Delta table yet): the flow has nothing to plan until then.
    pub async fn open(
        spec: &SourceSpec,
        index: usize,
        checkpoint: &Checkpoint,
    ) -> Result<Option<Input>> {
        Ok(match spec {
            SourceSpec::Files(f) => FilesInput::open(f, index, checkpoint)
                .await?
                .map(|i| Input::Files(Box::new(i))),
            SourceSpec::Delta(d) => DeltaInput::open(d)
                .await?
                .map(|i| Input::Delta(Box::new(i))),
            SourceSpec::Kafka(k) => Some(Input::Kafka(Box::new(KafkaInput::open(
                k, index, checkpoint,
            )?))),
        })
    }

    /// Recovery (DESIGN.md §5 step 2) of source `index`'s own records: ledger rows of
    /// batches after `last_planned` are forgotten, those up to `last_commit` settled.
    pub fn recover(
        spec: &SourceSpec,
        index: usize,
        checkpoint: &Checkpoint,
        last_planned: Option<u64>,
        last_commit: Option<u64>,
        now_ms: i64,
    ) -> Result<()> {
        match spec {
            SourceSpec::Files(_) => {
                FilesInput::recover(index, checkpoint, last_planned, last_commit, now_ms)
            }
            SourceSpec::Delta(_) | SourceSpec::Kafka(_) => Ok(()),
        }
    }

    /// A receiver bumped when the source learns of new data by itself (a files source
    /// with `use_notifications = true`): the idle flow plans at once.
    pub fn notices(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Input::Files(f) => f.source.notices(),
            Input::Delta(_) | Input::Kafka(_) => None,
        }
    }

    /// Spark's source description, e.g. `FileStreamSource[file:/...]`, `DeltaSource[file:/...]`.
    pub fn description(&self) -> String {
        match self {
            Input::Files(f) => f.source.description(),
            Input::Delta(d) => d.source.description(),
            Input::Kafka(k) => k.source.description(),
        }
    }

    /// The `weir.source.format` recorded in each batch's offsets metadata.
    pub fn format(&self) -> &'static str {
        match self {
            Input::Files(f) => f.source.options.format.as_str(),
            Input::Delta(_) => "delta",
            Input::Kafka(_) => "kafka",
        }
    }

    /// The path the source reads (for messages); for Kafka, `kafka:Subscribe[...]`.
    pub fn path(&self) -> &Path {
        match self {
            Input::Files(f) => &f.source.options.path,
            Input::Delta(d) => &d.source.options().path,
            Input::Kafka(k) => &k.spec.locator,
        }
    }

    /// The schema of the batches this source reads, before the flow's projection.
    pub fn batch_schema(&self) -> Result<SchemaRef> {
        match self {
            Input::Files(f) => Ok(f.source.batch_schema().clone()),
            Input::Delta(d) => d.batch_schema(),
            Input::Kafka(k) => Ok(k.batch_schema()),
        }
    }

    /// Reads only `columns` from now on (projection pushdown; Delta tables only, other
    /// sources read every column).
    pub fn read_only(&mut self, columns: Option<Vec<String>>) {
        if let Input::Delta(d) = self {
            match d.cdf.as_mut() {
                Some(cdf) => cdf.read_only(columns),
                None => d.source.read_only(columns),
            }
        }
    }

    /// Fills only these fields of a file source's `_metadata` (`None`: all); other
    /// sources have no `_metadata`.
    pub fn read_metadata_fields(&mut self, fields: Option<&std::collections::BTreeSet<String>>) {
        if let Input::Files(f) = self {
            f.source.read_metadata_fields(fields);
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
            Input::Files(f) => f.plan(trigger, batch_id, now_ms).await,
            Input::Delta(d) => d.plan(trigger, prev_end).await,
            Input::Kafka(k) => k.plan(trigger, prev_end, now_ms).await,
        }
    }

    /// A part with no data from this source: its offset does not move.
    pub fn no_data(&self) -> Planned {
        Planned {
            files: match self {
                Input::Files(_) => BatchFiles::Files(Vec::new()),
                Input::Delta(d) if d.cdf.is_some() => BatchFiles::DeltaChanges(None),
                Input::Delta(_) => BatchFiles::Delta(Vec::new()),
                Input::Kafka(_) => BatchFiles::Kafka(None),
            },
            end_offset: None,
            latest_offset: None,
            backlog: Backlog::default(),
            num_modified: 0,
        }
    }

    /// Records a planned batch before its offsets are written (the files ledger).
    pub fn record_plan(&mut self, batch_id: u64, files: &BatchFiles, now_ms: i64) -> Result<()> {
        match (self, files) {
            (Input::Files(src), BatchFiles::Files(f)) => {
                src.source.ledger.plan_batch(batch_id, f, now_ms)
            }
            _ => Ok(()),
        }
    }

    /// The files of batch `batch_id`, recorded before a restart; `prev_end` and `end` are
    /// the source's offsets in `offsets/<batch_id - 1>` and `offsets/<batch_id>`.
    pub async fn replay(
        &mut self,
        batch_id: u64,
        prev_end: Option<&serde_json::Value>,
        end: Option<&serde_json::Value>,
    ) -> Result<BatchFiles> {
        match self {
            Input::Files(f) => f.replay(batch_id),
            Input::Delta(d) => d.replay(batch_id, prev_end, end).await,
            Input::Kafka(k) => k.replay(batch_id, prev_end, end).await,
        }
    }

    /// Reads a batch's files.
    pub async fn read(&mut self, files: &BatchFiles) -> Result<BatchRead> {
        match (self, files) {
            (Input::Files(src), BatchFiles::Files(f)) => src.read(f).await,
            (Input::Delta(d), BatchFiles::Delta(f)) => d.read(f).await,
            (Input::Delta(d), BatchFiles::DeltaChanges(r)) => d.read_changes(r.as_ref()).await,
            (Input::Kafka(k), BatchFiles::Kafka(b)) => k.read(b.as_ref()).await,
            _ => Ok(BatchRead::default()),
        }
    }

    /// A read of re-run batch N that reads nothing: the files' outcomes as its first
    /// attempt recorded them (files), no rows.
    pub fn recorded_read(&self, batch_id: u64) -> Result<BatchRead> {
        match self {
            Input::Files(f) => {
                let outcomes = f.source.ledger.recorded_outcomes(batch_id)?;
                // The progress record counts the rows the first attempt read.
                let num_rows = outcomes
                    .iter()
                    .map(|(_, o)| match o {
                        FileOutcome::Ingested { num_rows } => *num_rows,
                        _ => 0,
                    })
                    .sum();
                Ok(BatchRead {
                    outcomes,
                    num_rows,
                    ..BatchRead::default()
                })
            }
            Input::Delta(_) | Input::Kafka(_) => Ok(BatchRead::default()),
        }
    }

    /// Records the outcome of each file the read met (files only: ingested, failed,
    /// retry), before the batch's sink write, so a re-run reproduces them.
    pub fn record_outcomes(&mut self, batch_id: u64, read: &BatchRead) -> Result<()> {
        match self {
            Input::Files(f) => f.record_outcomes(batch_id, read),
            Input::Delta(_) | Input::Kafka(_) => Ok(()),
        }
    }

    /// What the read's new columns mean for the schema (Auto Loader's schema evolution).
    pub fn evolve(&self, read: &BatchRead) -> Evolution {
        match self {
            Input::Files(f) => f.evolve(read),
            Input::Delta(_) | Input::Kafka(_) => Evolution {
                decision: Decision::Unchanged,
                ignored: Vec::new(),
            },
        }
    }

    /// Records a widened schema as the next version of the source's schema history and
    /// returns its number (files only; see [`Input::evolve`]).
    pub fn record_schema(&self, decision: &Decision) -> Result<Option<u64>> {
        match (self, decision) {
            (
                Input::Files(f),
                Decision::Widen {
                    schema,
                    added,
                    files,
                    reason,
                },
            ) => crate::source::files::schema_store::record_version(
                &f.schema_location,
                schema,
                reason,
                files,
                added,
            )
            .map(Some),
            _ => Ok(None),
        }
    }

    /// Where records that cannot be parsed at all go instead of the table: a directory of
    /// JSON files and/or a Delta table (files only).
    pub fn quarantine(&self) -> (Option<&Path>, Option<&Path>) {
        match self {
            Input::Files(f) => (
                f.source.options.bad_records_path.as_deref(),
                f.source.options.bad_records_table.as_deref(),
            ),
            Input::Kafka(k) => (
                k.spec.bad_records_path.as_deref(),
                k.spec.bad_records_table.as_deref(),
            ),
            Input::Delta(_) => (None, None),
        }
    }

    /// After `commits/N`: the ledger's rows of batch N become committed.
    pub fn settle(
        &mut self,
        batch_id: u64,
        outcomes: &[(String, FileOutcome)],
        now_ms: i64,
    ) -> Result<()> {
        match self {
            Input::Files(src) => src.source.ledger.commit_batch(batch_id, outcomes, now_ms),
            Input::Delta(_) | Input::Kafka(_) => Ok(()),
        }
    }
}
