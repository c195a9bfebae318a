//! One micro-batch, as types (DESIGN.md §5 steps 3-6). Each stage is produced by one
//! function from the one before; what a stage writes is in its signature.
//!
//! ```text
//!  plan ──────► PlannedBatch ─ read ─► ReadBatch ─ transform ─► Output ─ write ─► Written ─ commit ─► Committed
//!  inputs' ledgers,            schema history     operator state        sink, side     operator state N,
//!  offsets/N (the WAL)         (a widened          in memory             tables (Delta  commits/N, ledgers
//!  │ after_offsets             schema stops)                             txn = batch)   │ after_state
//!                                                                        │ after_sink_commit  │ before_commit
//! ```
//!
//! A crash anywhere between `offsets/N` and `commits/N` re-runs batch N with exactly
//! its recorded offsets ([`plan`] takes the batch [`Next::replay`] names), and the
//! sink's application transaction makes the re-run write at most once.

use std::time::Instant;

use arrow::record_batch::RecordBatch;

use super::control::FlowEvents;
use super::failpoint;
use super::input::{Backlog, BatchFiles, Input, Planned};
use super::plan::{CommitPath, FlowPlan};
use super::recover::Recovered;
use super::retry::Retry;
use super::sinks::Sinks;
use crate::checkpoint::{Checkpoint, CommitMetadata, OffsetSeq, OffsetSeqMetadata};
use crate::clock::ms_since;
use crate::error::{Error, Result};
use crate::ops::watermark::{EventTimeStats, Split, split_late_at};
use crate::records::StateOperatorMetrics;
use crate::records::{DimensionProgress, ExpectationProgress};
use crate::schema::events::SchemaEvent;
use crate::schema::evolve::Decision;
use crate::sink::SinkCommit;
use crate::sink::quarantine::{QuarantineWriter, QuarantinedRecord, split_batches};
use crate::source::files::BatchRead;
use crate::source::files::ledger::FileOutcome;
use crate::spec::Trigger;

/// Where the next batch starts.
#[derive(Debug, Clone)]
pub struct Next {
    pub batch_id: u64,
    /// The watermark it runs with.
    pub watermark_ms: i64,
    /// A batch planned before a restart and not committed: it runs first, as recorded.
    pub replay: Option<(u64, OffsetSeq)>,
    /// Each source's own watermark (a union of sources; empty otherwise).
    pub source_watermarks_ms: Vec<Option<i64>>,
}

impl From<&Recovered> for Next {
    fn from(r: &Recovered) -> Self {
        Next {
            batch_id: r.next_batch_id,
            watermark_ms: r.watermark_ms,
            replay: r.replay.clone(),
            source_watermarks_ms: r.source_watermarks_ms.clone(),
        }
    }
}

impl Next {
    /// Moves on to the batch after `c`, with the watermarks `c` left.
    pub fn follow(&mut self, c: &Committed) {
        self.batch_id = c.batch_id() + 1;
        self.watermark_ms = c.next_watermark_ms;
        self.source_watermarks_ms = c.source_watermarks_ms.clone();
    }
}

/// Durations of a batch's steps (ms), named as Spark's `durationMs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub latest_offset: u64,
    pub wal_commit: u64,
    pub get_batch: u64,
    pub add_batch: u64,
    pub commit_offsets: u64,
}

/// One source's part of a batch.
#[derive(Debug)]
pub struct Part {
    /// Where the source stood before the batch: its end offset in `offsets/<N-1>`.
    pub start_offset: Option<serde_json::Value>,
    pub files: BatchFiles,
    /// What the source left behind after planning (zero for a re-run batch).
    pub backlog: Backlog,
    /// The source's latest offset when planning (Kafka), for progress `latestOffset`.
    pub latest_offset: Option<serde_json::Value>,
}

/// Stage 1: the batch is in the write-ahead log (`offsets/N`), its files in the ledgers.
#[derive(Debug)]
pub struct PlannedBatch {
    pub batch_id: u64,
    /// A batch planned before a restart, run again with exactly its recorded offsets.
    pub replayed: bool,
    /// What `offsets/N` holds: the batch's watermark and timestamp, one end offset per source.
    pub offsets: OffsetSeq,
    /// Per source, in source order.
    pub parts: Vec<Part>,
    /// Files found rewritten after ingestion while planning.
    pub num_modified: u64,
    pub timings: Timings,
    /// Each source's own watermark before the batch (a union of sources).
    pub source_watermarks_ms: Vec<Option<i64>>,
}

impl PlannedBatch {
    /// The watermark this batch runs with.
    pub fn watermark_ms(&self) -> i64 {
        self.offsets.metadata.batch_watermark_ms
    }
}

/// Stage 2: the batch's data, read and checked against the sources' schemas.
#[derive(Debug)]
pub struct ReadBatch {
    pub planned: PlannedBatch,
    /// Per source. `batches` are moved on by [`transform`]; the counters and file
    /// outcomes stay for the commit and the progress record.
    pub reads: Vec<BatchRead>,
    /// `schema_evolution = "none"`: new columns ignored.
    pub new_columns_ignored: Vec<String>,
}

/// Records that cannot be parsed at all, for one quarantine destination.
#[derive(Debug)]
pub struct Quarantine {
    /// `bad_records_path`: JSON lines per batch.
    pub dir: Option<std::path::PathBuf>,
    /// `bad_records_table`: a Delta table.
    pub table: Option<std::path::PathBuf>,
    pub records: Vec<QuarantinedRecord>,
}

/// Stage 3: what the batch produces, in memory (the operator's new state is not saved yet).
#[derive(Debug)]
pub struct Output {
    pub read: ReadBatch,
    /// The rows for the sink.
    pub rows: Vec<RecordBatch>,
    /// Rows behind the watermark and rows without a valid event time (the `late_rows` table).
    pub late: Vec<RecordBatch>,
    pub quarantine: Vec<Quarantine>,
    /// Event-time statistics of the stream's on-time rows (every source's, for a union).
    pub event_time: Option<EventTimeStats>,
    /// Per source of a union, its rows' statistics (its own watermark moves by them).
    pub source_event_time: Vec<Option<EventTimeStats>>,
    /// Input 0's rows behind the watermark, set apart before a stateful operator.
    pub num_late: u64,
    pub num_invalid_event_time: u64,
    /// Rows beyond the future-skew guard (`watermark.max_future`).
    pub num_future_event_time: u64,
    pub num_quarantined: u64,
    /// Each expectation's passed and failed rows (`weir.expectations`).
    pub expectations: Vec<ExpectationProgress>,
    /// Rows the `drop` expectations removed.
    pub num_dropped_by_expectations: u64,
    /// Those rows for the `quarantine_path` table (with the expectations each failed).
    pub expectation_quarantine: Vec<RecordBatch>,
    pub dimensions: Vec<DimensionProgress>,
    /// Read, transformed and written file by file ([`super::streamed`]).
    pub streamed: bool,
    /// When `addBatch` started.
    started: Instant,
}

impl Output {
    /// The output of a streamed batch ([`super::streamed`]): its rows are in the sink
    /// already; nothing late, quarantined or watermarked (such flows are not streamed).
    pub(super) fn streamed(
        read: ReadBatch,
        dimensions: Vec<DimensionProgress>,
        started: Instant,
    ) -> Output {
        let sources = read.reads.len();
        Output {
            read,
            rows: Vec::new(),
            late: Vec::new(),
            quarantine: Vec::new(),
            event_time: None,
            source_event_time: vec![None; sources],
            num_late: 0,
            num_invalid_event_time: 0,
            num_future_event_time: 0,
            num_quarantined: 0,
            expectations: Vec::new(),
            num_dropped_by_expectations: 0,
            expectation_quarantine: Vec::new(),
            dimensions,
            streamed: true,
            started,
        }
    }
}

/// Stage 4: the batch is in the sink (one Delta commit carrying txn(query id, N)).
#[derive(Debug)]
pub struct Written {
    /// The output, its rows moved to the sink.
    pub output: Output,
    pub sink: SinkCommit,
}

/// Stage 5: state version N, `commits/N` and the ledgers are written: the batch is done.
#[derive(Debug)]
pub struct Committed {
    pub written: Written,
    /// The watermark of the next batch (`commits/N`'s `nextBatchWatermarkMs`).
    pub next_watermark_ms: i64,
    /// A union's sources' own watermarks after the batch (`commits/N`'s `sourceWatermarksMs`).
    pub source_watermarks_ms: Vec<Option<i64>>,
    /// Each input's own watermark as reported in the progress record: a union's
    /// sources, or a stream-stream join's left and right sides (the join's are in its
    /// state, not in `commits/N`).
    pub input_watermarks_ms: Vec<Option<i64>>,
    /// The input whose watermark is the flow's (a union, a stream-stream join).
    pub watermark_held_by: Option<usize>,
    /// `stateOperators` after the commit.
    pub state_operators: Vec<StateOperatorMetrics>,
    /// Rows the batch dropped behind the watermark (both sides of a join).
    pub num_rows_dropped_by_watermark: u64,
    /// Spark's description of each source.
    pub sources: Vec<String>,
}

impl Committed {
    pub fn planned(&self) -> &PlannedBatch {
        &self.written.output.read.planned
    }
    pub fn reads(&self) -> &[BatchRead] {
        &self.written.output.read.reads
    }
    pub fn output(&self) -> &Output {
        &self.written.output
    }
    pub fn batch_id(&self) -> u64 {
        self.planned().batch_id
    }
    pub fn timings(&self) -> &Timings {
        &self.planned().timings
    }
    /// Rows read from every source.
    pub fn num_input_rows(&self) -> u64 {
        self.reads().iter().map(|r| r.num_rows).sum()
    }
    /// Rows the sink wrote (0 when the write was skipped on replay).
    pub fn num_output_rows(&self) -> u64 {
        if self.written.sink.skipped {
            0
        } else {
            self.written.sink.num_output_rows
        }
    }
    /// Files of the batch, over every source.
    pub fn num_files(&self) -> u64 {
        self.planned()
            .parts
            .iter()
            .map(|p| p.files.len() as u64)
            .sum()
    }
    /// Files (of any source) by outcome.
    pub fn count_outcomes(&self, pred: impl Fn(&FileOutcome) -> bool) -> u64 {
        self.reads()
            .iter()
            .flat_map(|r| r.outcomes.iter())
            .filter(|(_, o)| pred(o))
            .count() as u64
    }
}

/// Step 3 (`latestOffset`, `walCommit`): the batch to re-run after a restart, or the next
/// batch planned from the sources and recorded (ledger rows, then `offsets/N`).
/// `Ok(None)`: no source has new data and the operator needs no no-data batch.
pub async fn plan(
    flow: &mut FlowPlan,
    next: &mut Next,
    trigger: Trigger,
    started: Instant,
    wal: &Checkpoint,
) -> Result<Option<PlannedBatch>> {
    if let Some((id, seq)) = next.replay.take() {
        let mut planned = replay(flow, id, seq, started, wal).await?;
        planned.source_watermarks_ms = next.source_watermarks_ms.clone();
        return Ok(Some(planned));
    }
    let batch_id = next.batch_id;
    let now = crate::clock::now_ms();
    let prev = previous_offsets(wal, batch_id);
    let mut planned: Vec<Option<Planned>> = Vec::with_capacity(flow.inputs.len());
    for (i, input) in flow.inputs.iter_mut().enumerate() {
        let start = prev.get(i).cloned().flatten();
        let mut retry = Retry::new(&flow.retry, "plan the batch from the source");
        planned.push(loop {
            match input.plan(trigger, start.as_ref(), batch_id, now).await {
                Ok(p) => break p,
                Err(e) if retry.again(&e).await => continue,
                Err(e) => return Err(e),
            }
        });
    }
    // A batch runs when any source has data; the others' parts are empty and their
    // offsets do not move. Without data anywhere, Spark's no-data batch runs when the
    // watermark has moved past state that can now be emitted or evicted.
    let any_data = planned.iter().any(Option::is_some);
    let latest_offset = ms_since(started);
    if !any_data && !flow.operator.needs_no_data_batch(next.watermark_ms) {
        return Ok(None);
    }
    let planned: Vec<Planned> = planned
        .into_iter()
        .zip(&flow.inputs)
        .map(|(p, input)| p.unwrap_or_else(|| input.no_data()))
        .collect();

    let t_wal = Instant::now();
    let mut offsets = Vec::with_capacity(planned.len());
    let mut parts = Vec::with_capacity(planned.len());
    let mut num_modified = 0;
    for (i, (p, input)) in planned.into_iter().zip(flow.inputs.iter_mut()).enumerate() {
        let start = prev.get(i).cloned().flatten();
        // A part without data keeps the source's offset; a source that never had one
        // writes `-` (Spark's `OffsetSeq` for a source without an offset).
        let end = p
            .end_offset
            .or_else(|| start.clone())
            .filter(|v| !v.is_null());
        input.record_plan(batch_id, &p.files, now)?;
        num_modified += p.num_modified;
        offsets.push(end);
        parts.push(Part {
            start_offset: start,
            files: p.files,
            backlog: p.backlog,
            latest_offset: p.latest_offset,
        });
    }
    let format = flow.inputs.first().map_or("", Input::format);
    let mut conf: std::collections::BTreeMap<String, String> = [
        ("weir.source.format".to_string(), format.to_string()),
        (
            "weir.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
    ]
    .into_iter()
    .collect();
    // Spark records the policy in the offsets' conf: changing it between restarts would
    // move the watermark unpredictably (SPARK-24730).
    if flow.is_union() {
        conf.insert(
            crate::checkpoint::MULTIPLE_WATERMARK_POLICY.to_string(),
            flow.watermark_policy.as_str().to_string(),
        );
    }
    let seq = OffsetSeq {
        metadata: OffsetSeqMetadata {
            batch_watermark_ms: next.watermark_ms,
            batch_timestamp_ms: now,
            conf: conf.into_iter().collect(),
        },
        offsets,
    };
    wal.write_offsets(batch_id, &seq)?;
    failpoint::hit("after_offsets", &flow.name, batch_id);
    Ok(Some(PlannedBatch {
        batch_id,
        replayed: false,
        offsets: seq,
        parts,
        num_modified,
        timings: Timings {
            latest_offset,
            wal_commit: ms_since(t_wal),
            ..Timings::default()
        },
        source_watermarks_ms: next.source_watermarks_ms.clone(),
    }))
}

/// The end offsets of the batch before `batch_id` (where each source starts).
fn previous_offsets(wal: &Checkpoint, batch_id: u64) -> Vec<Option<serde_json::Value>> {
    batch_id
        .checked_sub(1)
        .and_then(|prev| wal.read_offsets(prev).ok())
        .map(|seq| seq.offsets)
        .unwrap_or_default()
}

/// A batch planned before a restart: each source re-derives its part from the recorded
/// offsets (the ledger's files of the batch, or the Delta commits between two offsets).
async fn replay(
    flow: &mut FlowPlan,
    batch_id: u64,
    offsets: OffsetSeq,
    started: Instant,
    wal: &Checkpoint,
) -> Result<PlannedBatch> {
    let prev = previous_offsets(wal, batch_id);
    let mut parts = Vec::with_capacity(flow.inputs.len());
    for (i, input) in flow.inputs.iter_mut().enumerate() {
        let start = prev.get(i).cloned().flatten();
        let end = offsets.offsets.get(i).cloned().flatten();
        let files = input.replay(batch_id, start.as_ref(), end.as_ref()).await?;
        parts.push(Part {
            start_offset: start,
            files,
            backlog: Backlog::default(),
            latest_offset: None,
        });
    }
    tracing::info!(
        batch_id,
        files = parts.iter().map(|p| p.files.len()).sum::<usize>(),
        "re-running batch planned before a restart"
    );
    Ok(PlannedBatch {
        batch_id,
        replayed: true,
        offsets,
        parts,
        num_modified: 0,
        timings: Timings {
            latest_offset: ms_since(started),
            ..Timings::default()
        },
        source_watermarks_ms: Vec::new(),
    })
}

/// Step 4 (`getBatch`): reads each source's part and checks it against the source's
/// schema. New columns that widen the schema are recorded in the source's schema
/// history, then stop the flow before anything is written (Auto Loader): the next
/// start re-runs this batch with the wider schema.
///
/// `written`: the batch is a re-run the sink already holds, of a flow whose path skips
/// such a read ([`Replay::SkipsReadWhenHeld`](super::plan::Replay::SkipsReadWhenHeld)):
/// nothing is read; each file ends as its first attempt recorded
/// ([`Input::recorded_read`]).
pub async fn read(
    flow: &mut FlowPlan,
    mut batch: PlannedBatch,
    events: &FlowEvents,
    written: bool,
) -> Result<ReadBatch> {
    let started = Instant::now();
    if written {
        tracing::info!(
            batch_id = batch.batch_id,
            "re-run batch already in the sink table; its files are not read again (recorded outcomes kept)"
        );
        let reads = flow
            .inputs
            .iter()
            .map(|input| input.recorded_read(batch.batch_id))
            .collect::<Result<Vec<_>>>()?;
        batch.timings.get_batch = ms_since(started);
        return Ok(ReadBatch {
            planned: batch,
            reads,
            new_columns_ignored: Vec::new(),
        });
    }
    let mut reads = Vec::with_capacity(batch.parts.len());
    for (part, input) in batch.parts.iter().zip(flow.inputs.iter_mut()) {
        let read = input.read(&part.files).await?;
        // A re-run batch must read exactly the files it planned: its first attempt may
        // have committed them to the sink already (the write is then skipped by the Delta
        // transaction), so a file left for "later" would come back in another batch and
        // be written twice. Fail instead; the next start re-runs the batch again.
        if batch.replayed
            && let Some((path, FileOutcome::Retry { error })) = read
                .outcomes
                .iter()
                .find(|(_, o)| matches!(o, FileOutcome::Retry { .. }))
        {
            return Err(Error::Source {
                path: std::path::PathBuf::from(path),
                message: format!(
                    "batch {} is re-run after a restart and must read exactly the files it planned, \
                     but this one cannot be read now ({error}); nothing was written, the next start re-runs the batch",
                    batch.batch_id
                ),
            });
        }
        reads.push(read);
    }
    batch.timings.get_batch = ms_since(started);

    let mut new_columns_ignored: Vec<String> = Vec::new();
    for (read, input) in reads.iter().zip(flow.inputs.iter()) {
        for event in SchemaEvent::type_mismatches(&read.type_mismatches) {
            events.schema(event);
        }
        let evolution = input.evolve(read);
        for name in evolution.ignored {
            if !new_columns_ignored.contains(&name) {
                new_columns_ignored.push(name);
            }
        }
        match &evolution.decision {
            Decision::Unchanged => {}
            Decision::Widen { added, files, .. } => {
                let version = input.record_schema(&evolution.decision)?.unwrap_or(0);
                if let Some(event) = SchemaEvent::schema_changed(&evolution.decision, version) {
                    events.schema(event);
                }
                return Err(Error::SchemaChanged {
                    flow: flow.name.clone(),
                    batch_id: batch.batch_id,
                    added: added.clone(),
                    file: files.first().cloned().unwrap_or_default(),
                    version,
                });
            }
            Decision::Fail { message } => {
                return Err(Error::SchemaMismatch {
                    flow: flow.name.clone(),
                    message: message.clone(),
                });
            }
        }
    }
    // Each file's outcome is durable before anything is written, so a re-run of this
    // batch after a crash ends each file the same way (issue #18).
    for (read, input) in reads.iter().zip(flow.inputs.iter_mut()) {
        input.record_outcomes(batch.batch_id, read)?;
    }
    failpoint::hit("after_read", &flow.name, batch.batch_id);
    Ok(ReadBatch {
        planned: batch,
        reads,
        new_columns_ignored,
    })
}

/// Step 5a (`addBatch`, in memory): records that cannot be parsed at all set apart for
/// the quarantine, `where`/`select` (DataFusion), the watermark split, and the operator
/// against state version N-1.
pub async fn transform(flow: &mut FlowPlan, mut read: ReadBatch) -> Result<Output> {
    let started = Instant::now();
    let batch_id = read.planned.batch_id;
    let watermark_ms = read.planned.watermark_ms();

    // Each source's rows, corrupt records set apart when it has a quarantine.
    let mut quarantine: Vec<Quarantine> = Vec::new();
    let mut num_quarantined = 0u64;
    let mut rows: Vec<Vec<RecordBatch>> = Vec::with_capacity(read.reads.len());
    for (r, input) in read.reads.iter_mut().zip(flow.inputs.iter()) {
        let batches = std::mem::take(&mut r.batches);
        let (dir, table) = input.quarantine();
        if dir.is_none() && table.is_none() {
            rows.push(batches);
            continue;
        }
        let (good, records) = split_batches(batches, batch_id)?;
        num_quarantined += records.len() as u64;
        match quarantine
            .iter_mut()
            .find(|q| q.dir.as_deref() == dir && q.table.as_deref() == table)
        {
            Some(q) => q.records.extend(records),
            None => quarantine.push(Quarantine {
                dir: dir.map(std::path::Path::to_path_buf),
                table: table.map(std::path::Path::to_path_buf),
                records,
            }),
        }
        rows.push(good);
    }
    // The stream the projection reads: input 0's rows, or with a union every input's
    // rows (given the union's columns), each going through its own watermark split.
    let (streams, others): (Vec<Vec<RecordBatch>>, Vec<Vec<RecordBatch>>) = match &flow.union_schema
    {
        Some(schema) => {
            let streams = rows
                .into_iter()
                .map(|batches| {
                    batches
                        .iter()
                        .map(|b| crate::ops::union::conform(b, schema))
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?;
            (streams, Vec::new())
        }
        None => {
            let mut rows = rows.into_iter();
            (rows.next().into_iter().collect(), rows.collect())
        }
    };
    let mut on_time = Vec::new();
    let mut corrupt = Vec::new();
    let mut source_event_time = Vec::with_capacity(streams.len());
    let mut num_late = 0u64;
    let mut num_invalid_event_time = 0u64;
    let mut num_future_event_time = 0u64;
    let mut late = Vec::new();
    let mut expected = flow.expectations.zero();
    let mut expectation_quarantine = Vec::new();
    for (i, left) in streams.into_iter().enumerate() {
        // Expectations see every input row, before `where`/`select`; a `fail` stops the
        // batch here, before anything is written.
        let left = if flow.expectations.is_empty() {
            left
        } else {
            let source = flow
                .inputs
                .get(i)
                .map(Input::description)
                .unwrap_or_default();
            flow.expectations.apply(
                left,
                &mut expected,
                batch_id,
                &source,
                flow.quarantine_path
                    .is_some()
                    .then_some(&mut expectation_quarantine),
            )?
        };
        // Corrupt records are not data: a deduplication passes them to the sink as they
        // are (no key, no event time: they would be routed away from the operator and
        // lost, or deduplicated against a real row whose key is null).
        let (left, bad) = if flow.operator.passes_corrupt_records() {
            crate::sink::quarantine::split_corrupt_rows(left)?
        } else {
            (left, Vec::new())
        };
        if !bad.is_empty() {
            corrupt.extend(flow.projection.apply(bad).await?);
        }
        let projected = flow.projection.apply(left).await?;
        match flow.watermark(i) {
            None => {
                source_event_time.push(None);
                on_time.extend(projected);
            }
            Some(wm) => {
                let drops = flow.operator.drops_late_rows();
                let split = split_late_at(
                    &projected,
                    wm,
                    if drops { watermark_ms } else { i64::MIN / 1000 },
                    Some(super::now_ms()),
                )?;
                source_event_time.push(split.event_time);
                num_invalid_event_time += split.num_invalid;
                num_future_event_time += split.num_future;
                if split.num_future > 0 {
                    tracing::warn!(batch_id, rows = split.num_future, column = %wm.column,
                        "rows with an event time beyond max_future ahead of the wall clock: set apart, the watermark does not move for them{}",
                        if flow.late_rows.is_some() { "; written to the late-rows table" } else if flow.operator.is_stateful() { "; counted (numRowsFutureEventTime) and not aggregated; set late_rows to keep them" } else { "" });
                }
                if !flow.operator.is_stateful() {
                    let mut split = split;
                    // A stateless flow keeps them (nothing drops rows there), but they
                    // never move the watermark; with late_rows they go there instead.
                    if flow.late_rows.is_some() {
                        late.append(&mut split.future);
                    }
                    on_time.extend(passthrough(split));
                } else {
                    late.extend(split.future);
                    if drops {
                        num_late += split.num_late;
                        late.extend(split.late);
                    }
                    if split.num_invalid > 0 {
                        tracing::warn!(batch_id, rows = split.num_invalid, column = %wm.column,
                            "rows with a null or unparseable event time{}",
                            if flow.late_rows.is_some() { "; written to the late-rows table" } else { "; counted (numRowsInvalidEventTime) and not aggregated; set late_rows to keep them" });
                        late.extend(split.invalid);
                    }
                    on_time.extend(split.on_time);
                }
            }
        }
    }
    let event_time = crate::ops::watermark::merge_stats(&source_event_time);
    let mut out = flow
        .operator
        .process(batch_id, on_time, others, watermark_ms, num_late)
        .await?;
    out.extend(corrupt);
    Ok(Output {
        dimensions: flow.projection.dimensions(),
        expectations: flow.expectations.progress(&expected),
        num_dropped_by_expectations: expected.dropped,
        expectation_quarantine,
        streamed: false,
        read,
        rows: out,
        late,
        quarantine,
        event_time,
        source_event_time,
        num_late,
        num_invalid_event_time,
        num_future_event_time,
        num_quarantined,
        started,
    })
}

/// Without a stateful operator a watermark drops nothing: on-time, late and invalid
/// rows all go on (Spark applies the watermark only to stateful operators).
fn passthrough(split: Split) -> Vec<RecordBatch> {
    let mut all = split.on_time;
    all.extend(split.late);
    all.extend(split.invalid);
    all.extend(split.future);
    all
}

/// Step 5b (`addBatch`, the write): quarantined records, then the sink's one commit for
/// the batch, then late rows, each carrying txn(app id, N) so a re-run writes at most
/// once (the sink's app id is the query id, each side table's its own). Flows of this process streaming from the sink's table are told at once.
pub async fn write(flow: &mut FlowPlan, mut output: Output, sinks: &mut Sinks) -> Result<Written> {
    let batch_id = output.read.planned.batch_id;
    for q in std::mem::take(&mut output.quarantine) {
        if let Some(dir) = &q.dir {
            QuarantineWriter::new(dir.clone()).write(batch_id, &q.records)?;
        }
        if let Some(table) = &q.table {
            let schema = crate::sink::quarantine::records_schema();
            let records = crate::sink::quarantine::records_batch(&q.records)?;
            sinks
                .write_side(
                    table,
                    "bad_records_table",
                    batch_id,
                    vec![records],
                    Some(&schema),
                )
                .await?;
        }
    }
    // Before the sink: a re-run whose sink holds the batch may skip its read.
    let dropped = std::mem::take(&mut output.expectation_quarantine);
    if let Some(path) = &flow.quarantine_path
        && !dropped.is_empty()
    {
        sinks
            .write_side(path, "quarantine_path", batch_id, dropped, None)
            .await?;
    }
    let overwrite = flow.path.commit == CommitPath::Overwrite;
    let rows = std::mem::take(&mut output.rows);
    let sink = sinks
        .write(batch_id, rows, overwrite, &flow.output_schema)
        .await?;
    let late = std::mem::take(&mut output.late);
    if let Some(path) = &flow.late_rows
        && !late.is_empty()
    {
        sinks
            .write_side(path, "late_rows", batch_id, late, None)
            .await?;
    }
    sink_committed(flow, batch_id, &sink);
    Ok(Written { output, sink })
}

/// The sink committed batch `batch_id` (staged or [streamed](super::streamed)): the flows
/// of this process streaming from its table are told at once, then the
/// `after_sink_commit` failpoint.
pub(super) fn sink_committed(flow: &FlowPlan, batch_id: u64, sink: &SinkCommit) {
    if !sink.skipped
        && sink.delta_version.is_some()
        && let Some(table) = &flow.sink_table
    {
        super::notify::published(table);
    }
    failpoint::hit("after_sink_commit", &flow.name, batch_id);
}

/// Step 6 (`commitOffsets`): state version N, then `commits/N` with the next batch's
/// watermark, then each source settles its part (the ledger's rows become committed;
/// files that could not be read for a retryable reason are forgotten, so a later batch
/// retries them), then the checkpoint's retention (`min_batches_to_retain`) purges the
/// log entries and state versions of older batches.
pub fn commit(flow: &mut FlowPlan, mut written: Written, wal: &Checkpoint) -> Result<Committed> {
    let batch_id = written.output.read.planned.batch_id;
    flow.operator.commit(batch_id)?;
    failpoint::hit("after_state", &flow.name, batch_id);
    failpoint::hit("before_commit", &flow.name, batch_id);
    let output = &mut written.output;
    output.read.planned.timings.add_batch = ms_since(output.started);
    // A union: each source's own watermark, combined by the flow's policy (Spark's
    // multipleWatermarkPolicy); else the operator's rule.
    let (next_watermark_ms, source_watermarks_ms, watermark_held_by) = if flow.is_union() {
        let delays: Vec<Option<i64>> = (0..flow.inputs.len())
            .map(|i| flow.watermark(i).map(|w| w.delay_ms))
            .collect();
        let w = crate::ops::watermark::combine_watermarks(
            flow.watermark_policy,
            output.read.planned.watermark_ms(),
            &output.read.planned.source_watermarks_ms,
            &output.source_event_time,
            &delays,
        );
        if delays.iter().all(Option::is_none) {
            (0, Vec::new(), None)
        } else {
            (w.next_ms, w.per_source, w.held_by)
        }
    } else {
        let next = flow.operator.next_watermark(
            flow.watermark(0),
            output.read.planned.watermark_ms(),
            output.event_time.as_ref(),
        );
        (next, Vec::new(), None)
    };
    // A stream-stream join: each side's own watermark, the lower one holding the flow's.
    let (input_watermarks_ms, watermark_held_by) = match flow.operator.side_watermarks() {
        Some(sides) if !flow.is_union() => {
            let at = |i: usize| sides.get(i).copied().flatten().unwrap_or(0);
            let held = if at(0) <= at(1) { 0 } else { 1 };
            (sides, Some(held))
        }
        _ => (source_watermarks_ms.clone(), watermark_held_by),
    };

    let started = Instant::now();
    wal.write_commit(
        batch_id,
        &CommitMetadata {
            next_batch_watermark_ms: next_watermark_ms,
            source_watermarks_ms: source_watermarks_ms.clone(),
        },
    )?;
    for (read, input) in output.read.reads.iter().zip(flow.inputs.iter_mut()) {
        input.settle(batch_id, &read.outcomes, crate::clock::now_ms())?;
    }
    // Retention (Spark's minBatchesToRetain): only now that commits/N is durable and the
    // sources settled. A failed removal leaves old entries behind, never the batch undone.
    match crate::checkpoint::retention::purge(wal, batch_id, flow.min_batches_to_retain) {
        Ok(purged) if !purged.is_empty() => tracing::debug!(
            flow = %flow.name, batch_id, offsets = purged.offsets, commits = purged.commits,
            state_files = purged.state_files, "checkpoint retention"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(flow = %flow.name, batch_id, error = %e,
            "checkpoint retention: old entries are left in place"),
    }
    output.read.planned.timings.commit_offsets = ms_since(started);
    Ok(Committed {
        state_operators: flow.operator.metrics(output.num_late),
        num_rows_dropped_by_watermark: flow.operator.num_rows_dropped(output.num_late),
        sources: flow.inputs.iter().map(Input::description).collect(),
        next_watermark_ms,
        source_watermarks_ms,
        input_watermarks_ms,
        watermark_held_by,
        written,
    })
}
