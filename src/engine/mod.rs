//! Micro-batch execution of one flow: the batch protocol (DESIGN.md §5),
//! triggers, stop, and progress records.
//!
//! ```text
//!  start ─► lock ─► recover ──► plan N ──► read ──► transform ──► sink N ──► commit N ──► progress
//!                     │          (offsets/N)  (getBatch) (addBatch)   (Delta txn)  (commits/N,
//!                     │                                                             ledger)
//!                     └─ offsets/N without commits/N: re-run N with exactly its recorded files
//! ```
//!
//! A flow's life: `starting → running ⇄ idle → stopped | failed`. A batch's
//! stages: `planned → executed → committed`; a crash between `planned` and
//! `committed` is repaired on the next start by re-running the batch; the sink's
//! idempotence (Delta application transactions) makes the re-run write at most once.

pub mod commits;
pub mod control;
pub mod failpoint;
pub mod input;
pub mod progress;
pub mod retry;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::checkpoint::{
    Checkpoint, CheckpointLock, CommitMetadata, OffsetSeq, OffsetSeqMetadata, PlanRecord,
};
use crate::error::{Error, Result};
use crate::ops::Projection;
use crate::ops::stateful::{OutputMode, StatefulOperator, StatefulSpec};
use crate::ops::stream_join::{JoinPlan, StreamJoinOperator};
use crate::ops::watermark::{EventTimeStats, Split, next_watermark, split_late};
use crate::pipeline::{FlowSpec, SourceSpec, Trigger};
use crate::schema::events::SchemaEvent;
use crate::schema::evolve::{Decision, evolve, strings_only};
use crate::sink::Sink;
use crate::sink::quarantine::{QuarantineWriter, split_batches};
use crate::source::files::ledger::{FileOutcome, Ledger};
use crate::source::files::{FileSource, IDLE_POLL_INTERVAL};
use control::{Control, Wake};
pub use control::{ControlCommand, EventSink, FlowEvent, FlowStatus};
use input::{BatchFiles, DeltaInput, Input};
use progress::{
    FileError, ProgressLog, SinkProgress, SourceProgress, StreamingQueryProgress, WeirProgress,
    iso_millis,
};

/// Called with each progress record of a flow.
pub type ProgressCallback = Box<dyn FnMut(&StreamingQueryProgress) + Send>;

/// A flow's source with its stateless projection and its stateful operator, if any.
type Operators = (Input, Projection, Option<Box<dyn StatefulOperator>>);

/// Options of one run of a flow, beyond its spec.
#[derive(Default)]
pub struct RunOptions {
    /// Overrides the flow's trigger (CLI `--trigger`).
    pub trigger: Option<Trigger>,
    /// Becomes `true` to ask for a graceful stop: the running batch finishes, no new one starts.
    pub stop: Option<watch::Receiver<bool>>,
    /// Called with each progress record, after it is appended to `_weir/progress.jsonl`.
    pub on_progress: Option<ProgressCallback>,
    /// Operator commands for this flow (pause, resume, trigger now, stop).
    pub commands: Option<mpsc::Receiver<ControlCommand>>,
    /// Where status changes, progress and errors are published (bounded, never blocks).
    pub events: Option<EventSink>,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FlowSummary {
    pub flow: String,
    pub query_id: String,
    pub checkpoint: PathBuf,
    pub sink: String,
    pub batches: u64,
    pub replayed_batches: u64,
    pub num_input_rows: u64,
    pub num_output_rows: u64,
    pub num_files: u64,
    pub num_bytes: u64,
    pub num_files_failed: u64,
    pub num_rows_rescued: u64,
    pub last_batch_id: Option<u64>,
    pub delta_version: Option<i64>,
    pub elapsed_ms: u64,
    pub stopped_by_request: bool,
    /// The watermark after the last batch (ms since the epoch; 0 without event time).
    pub watermark_ms: i64,
    pub num_rows_dropped_by_watermark: u64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn ms_since(t: Instant) -> u64 {
    t.elapsed().as_millis() as u64
}

/// Runs a flow until its trigger says it is done or a stop is requested.
pub async fn run_flow(spec: &FlowSpec, mut options: RunOptions) -> Result<FlowSummary> {
    let events = options.events.take();
    let emit_status = |status: FlowStatus| {
        if let Some(e) = &events {
            e.send(FlowEvent::Status {
                flow: spec.name.clone(),
                status,
                at_ms: now_ms(),
            });
        }
    };
    emit_status(FlowStatus::Starting);
    let mut tracker = crate::health::tracker::HealthTracker::new(
        &spec.name,
        spec.health.clone(),
        &Checkpoint::at(&spec.checkpoint),
    );
    let result = run_flow_inner(spec, options, events.as_ref(), &mut tracker).await;
    match &result {
        Ok(_) => emit_status(FlowStatus::Stopped),
        Err(e) => {
            if let (Some(ev), Error::SinkSchemaMismatch { path, message }) = (&events, e) {
                ev.send(FlowEvent::Schema {
                    flow: spec.name.clone(),
                    detail: SchemaEvent::SinkSchemaMismatch {
                        table: path.clone(),
                        message: message.clone(),
                    },
                    at_ms: now_ms(),
                });
            }
            if let Some(ev) = &events {
                ev.send(FlowEvent::Error {
                    flow: spec.name.clone(),
                    kind: e.kind().to_string(),
                    domain: e.domain(),
                    retryable: e.retryable(),
                    message: e.to_string(),
                    at_ms: now_ms(),
                });
            }
            // Another process runs the flow: its health is not ours to record.
            if !matches!(e, Error::CheckpointLocked { .. }) {
                let health = tracker.fail(e, now_ms());
                if let Some(ev) = &events {
                    ev.send(FlowEvent::Health {
                        flow: spec.name.clone(),
                        health: Box::new(health),
                        at_ms: now_ms(),
                    });
                }
            }
            emit_status(FlowStatus::Failed);
        }
    }
    result
}

async fn run_flow_inner(
    spec: &FlowSpec,
    mut options: RunOptions,
    events: Option<&EventSink>,
    tracker: &mut crate::health::tracker::HealthTracker,
) -> Result<FlowSummary> {
    let status = |status: FlowStatus| {
        if let Some(e) = events {
            e.send(FlowEvent::Status {
                flow: spec.name.clone(),
                status,
                at_ms: now_ms(),
            });
        }
    };
    let command_event = |command: ControlCommand| {
        if let Some(e) = events {
            e.send(FlowEvent::Command {
                flow: spec.name.clone(),
                command,
                at_ms: now_ms(),
            });
        }
    };
    let mut control = Control::new(options.stop.take(), options.commands.take());
    if let SourceSpec::Delta(d) = &spec.source {
        control.upstream = Some(commits::subscribe(&d.path));
    }
    let run_start = Instant::now();
    let trigger = options.trigger.unwrap_or(spec.trigger);
    let files_spec = match &spec.source {
        SourceSpec::Files(f) => Some(f),
        SourceSpec::Delta(_) => None,
    };

    let checkpoint = Checkpoint::at(&spec.checkpoint);
    let lock = CheckpointLock::acquire(&checkpoint)?;
    if let Some(prev) = &lock.taken_over_from {
        tracing::warn!(pid = prev.pid, host = %prev.host, started_at = %prev.started_at,
            "took over the checkpoint lock left by a process that is no longer running");
    }
    crate::checkpoint::compat::refuse_incompatible(spec, &checkpoint).await?;
    let metadata = checkpoint.open_or_create()?;
    let query_id = metadata.id.to_string();
    let run_id = uuid::Uuid::new_v4().to_string();
    checkpoint.write_plan(&PlanRecord {
        flow: spec.name.clone(),
        source: spec.source.kind(),
        source_path: spec.source.path().to_path_buf(),
        sink: spec.sink.describe(),
        sink_path: spec.writes(),
    })?;

    // Recover (DESIGN.md §5 step 2).
    let last_offsets = checkpoint.latest_offsets()?;
    let last_commit_meta = checkpoint.latest_commit()?;
    let last_commit = last_commit_meta.as_ref().map(|(id, _)| *id);
    // The watermark the next batch runs with (Spark: commits/N's nextBatchWatermarkMs).
    let mut watermark_ms = last_commit_meta
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
    let ledger = match files_spec {
        Some(_) => {
            let mut ledger = Ledger::open(&checkpoint.ledger_path())?;
            ledger.discard_unplanned_after(last_planned)?;
            ledger.settle_committed_through(last_commit, now_ms())?;
            Some(ledger)
        }
        None => None,
    };
    let mut pending_replay: Option<(u64, OffsetSeq)> =
        last_offsets.filter(|(id, _)| Some(*id) != last_commit);
    let mut next_batch_id = last_commit.map_or(0, |c| c + 1);

    let mut sink: Option<Sink> = None;
    let mut summary = FlowSummary {
        flow: spec.name.clone(),
        query_id: query_id.clone(),
        checkpoint: spec.checkpoint.clone(),
        sink: spec.sink.describe(),
        ..Default::default()
    };
    let mut progress_log = ProgressLog::open(&checkpoint.progress_path());
    let mut last_trigger_start: Option<Instant> = None;
    let mut source: Option<Operators> = None;
    let mut output_schema: Option<arrow::datatypes::SchemaRef> = None;
    let mut late_sink: Option<Sink> = None;
    let mut quarantine_sink: Option<Sink> = None;
    let mut ledger_slot = ledger;
    let mut modified_total = 0u64;
    // A stream-stream join: the right side's input and the join operator (docs/stream-joins.md).
    let mut right: Option<Input> = None;
    let mut join_op: Option<StreamJoinOperator> = None;

    let mut idle = false;
    loop {
        for c in control.drain() {
            command_event(c);
        }
        if control.stop_requested() {
            summary.stopped_by_request = true;
            break;
        }
        if control.paused {
            status(FlowStatus::Paused);
            if control.wait(Duration::MAX, command_event).await == Wake::Stop {
                summary.stopped_by_request = true;
                break;
            }
            // Resumed, or trigger-now while paused: one batch runs, then the flow pauses again.
            idle = false;
        }
        let trigger_start = Instant::now();
        let t_latest = Instant::now();
        control.upstream_seen();

        // The schema is known once files exist (or given), or once the Delta table exists;
        // until then there is nothing to plan.
        if source.is_none()
            && let Some(sj) = &spec.stream_join
            && right.is_none()
        {
            right = open_right_input(&sj.source, &checkpoint, last_planned, last_commit).await?;
            if right.is_none() {
                match trigger {
                    Trigger::AvailableNow | Trigger::Once => break,
                    Trigger::ProcessingTime(interval) => {
                        if idle_wait(&mut control, &mut idle, interval, &status, command_event)
                            .await
                        {
                            summary.stopped_by_request = true;
                            break;
                        }
                        continue;
                    }
                }
            }
        }
        if source.is_none() {
            let input = match (&spec.source, files_spec) {
                (_, Some(files_spec)) => {
                    let ledger = ledger_slot
                        .take()
                        .ok_or_else(|| Error::checkpoint(checkpoint.root(), "ledger lost"))?;
                    let schema_location = crate::source::files::schema_store::location(
                        &checkpoint,
                        files_spec.schema_location.as_deref(),
                    );
                    match crate::source::files::schema_store::resolve_at(
                        files_spec,
                        schema_location,
                        files_spec.schema_hints.as_deref(),
                    )? {
                        Some(schema) => Some(Input::Files(Box::new(FileSource::new(
                            files_spec.clone(),
                            ledger,
                            schema,
                        )))),
                        None => {
                            ledger_slot = Some(ledger);
                            None
                        }
                    }
                }
                (SourceSpec::Delta(options), None) => {
                    let mut delta = crate::source::delta::DeltaSource::new(options.clone());
                    delta.refresh().await?.map(|_| {
                        Input::Delta(Box::new(DeltaInput {
                            source: delta,
                            until_version: None,
                        }))
                    })
                }
                (SourceSpec::Files(_), None) => None,
            };
            match input {
                Some(input) => {
                    let batch_schema = input.batch_schema()?;
                    // A stream-stream join applies `where`/`select` to the joined rows.
                    let joined = spec.stream_join.is_some();
                    let mut projection = Projection::with_joins(
                        &spec.name,
                        &batch_schema,
                        spec.where_.as_deref().filter(|_| !joined),
                        spec.select.as_deref().filter(|_| !joined),
                        &spec.joins,
                    );
                    let projected = projection.check(&batch_schema).await?;
                    if let (Some(sj), Some(r)) = (&spec.stream_join, &right) {
                        let op = StreamJoinOperator::new(
                            &JoinPlan {
                                flow: &spec.name,
                                left_watermark: spec.stateful.watermark.as_ref(),
                                join: sj,
                                where_: spec.where_.as_deref(),
                                select: spec.select.as_deref(),
                            },
                            &projected,
                            &r.batch_schema()?,
                            &checkpoint.root().join("state").join("0"),
                            last_commit,
                        )?;
                        output_schema = Some(op.output_schema());
                        join_op = Some(op);
                    }
                    let operator = if spec.stateful.is_stateful() {
                        Some(crate::ops::stateful::build(
                            &spec.stateful,
                            &projected,
                            &checkpoint.root().join("state").join("0"),
                            last_commit,
                        )?)
                    } else {
                        if let Some(wm) = &spec.stateful.watermark {
                            crate::ops::stateful::validate(&spec.stateful, &projected).map_err(
                                |message| Error::Plan {
                                    flow: spec.name.clone(),
                                    message,
                                },
                            )?;
                            if join_op.is_none() {
                                tracing::info!(column = %wm.column, "watermark without a stateful operator: it is tracked and reported, no row is dropped (as in Spark)");
                            }
                        }
                        None
                    };
                    if join_op.is_none() {
                        output_schema = Some(match &operator {
                            Some(op) => op.output_schema(),
                            None => projected.clone(),
                        });
                    }
                    source = Some((input, projection, operator));
                }
                None => match trigger {
                    Trigger::AvailableNow | Trigger::Once => break,
                    Trigger::ProcessingTime(interval) => {
                        if idle_wait(&mut control, &mut idle, interval, &status, command_event)
                            .await
                        {
                            summary.stopped_by_request = true;
                            break;
                        }
                        continue;
                    }
                },
            }
        }
        let Some((src, projection, operator)) = source.as_mut() else {
            continue;
        };

        // latestOffset + walCommit: plan the batch, or take the one to replay.
        // The previous batch's end offset: where this batch starts.
        let prev_end_of = |id: u64, source: usize| -> Option<serde_json::Value> {
            id.checked_sub(1)
                .and_then(|prev| checkpoint.read_offsets(prev).ok())
                .and_then(|seq| seq.offsets.get(source).cloned().flatten())
        };
        let prev_end = |id: u64| prev_end_of(id, 0);
        let mut right_files: Option<BatchFiles> = None;
        let mut right_backlog = Backlog::default();
        let (batch_id, files, replayed, backlog, offsets_seq, latest_offset_ms, wal_ms) =
            if let Some((id, seq)) = pending_replay.take() {
                let end = seq.offsets.first().cloned().flatten();
                let files = src.replay(id, prev_end(id).as_ref(), end.as_ref()).await?;
                if let Some(r) = right.as_mut() {
                    let end = seq.offsets.get(1).cloned().flatten();
                    right_files = Some(
                        r.replay(id, prev_end_of(id, 1).as_ref(), end.as_ref())
                            .await?,
                    );
                }
                tracing::info!(
                    batch_id = id,
                    files = files.len(),
                    "re-running batch planned before a restart"
                );
                (
                    id,
                    files,
                    true,
                    Backlog::default(),
                    seq,
                    ms_since(t_latest),
                    0,
                )
            } else {
                let now = now_ms();
                let start_offset = prev_end(next_batch_id);
                let mut retry = retry::Retry::new(&spec.health, "plan the batch from the source");
                let planned = loop {
                    match src
                        .plan(trigger, start_offset.as_ref(), next_batch_id, now)
                        .await
                    {
                        Ok(p) => break p,
                        Err(e) if retry.again(&e).await => continue,
                        Err(e) => return Err(e),
                    }
                };
                let right_start = prev_end_of(next_batch_id, 1);
                let right_planned = match right.as_mut() {
                    Some(r) => {
                        r.plan(trigger, right_start.as_ref(), next_batch_id, now)
                            .await?
                    }
                    None => None,
                };
                // A stream-stream join runs a batch when either side has data; the other
                // side's part of it is empty and its offset does not move.
                let planned = match (planned, &right_planned) {
                    (None, Some(_)) => Some(empty_planned(src)),
                    (p, _) => p,
                };
                let latest_offset_ms = ms_since(t_latest);
                // Spark's no-data batch: the watermark moved past state that can now be
                // emitted or evicted, but no new data arrived.
                let planned = match planned {
                    Some(p) => p,
                    None if operator
                        .as_ref()
                        .is_some_and(|op| op.needs_no_data_batch(watermark_ms))
                        || join_op
                            .as_ref()
                            .is_some_and(|j| j.needs_no_data_batch(watermark_ms)) =>
                    {
                        empty_planned(src)
                    }
                    None => match trigger {
                        Trigger::AvailableNow | Trigger::Once => break,
                        Trigger::ProcessingTime(interval) => {
                            if idle_wait(&mut control, &mut idle, interval, &status, command_event)
                                .await
                            {
                                summary.stopped_by_request = true;
                                break;
                            }
                            continue;
                        }
                    },
                };
                modified_total += planned.num_modified;
                let t_wal = Instant::now();
                // A no-data batch: the source offset does not move.
                let end_offset = planned
                    .end_offset
                    .clone()
                    .or(start_offset)
                    .unwrap_or_else(|| match src {
                        Input::Files(_) => serde_json::json!({ "logOffset": next_batch_id }),
                        Input::Delta(_) => serde_json::Value::Null,
                    });
                let seq = OffsetSeq {
                    metadata: OffsetSeqMetadata {
                        batch_watermark_ms: watermark_ms,
                        batch_timestamp_ms: now,
                        conf: [
                            ("weir.source.format".to_string(), src.format().to_string()),
                            (
                                "weir.version".to_string(),
                                env!("CARGO_PKG_VERSION").to_string(),
                            ),
                        ]
                        .into_iter()
                        .collect(),
                    },
                    offsets: vec![if end_offset.is_null() {
                        None
                    } else {
                        Some(end_offset)
                    }],
                };
                let mut seq = seq;
                if let Some(r) = right.as_mut() {
                    let (files, end) = match right_planned {
                        Some(p) => {
                            modified_total += p.num_modified;
                            right_backlog = Backlog {
                                files: p.backlog_files,
                                bytes: p.backlog_bytes,
                                versions: p.backlog_versions,
                            };
                            (p.files, p.end_offset.or(right_start))
                        }
                        None => (empty_planned(r).files, right_start),
                    };
                    r.record_plan(next_batch_id, &files, now)?;
                    seq.offsets.push(end.filter(|v| !v.is_null()));
                    right_files = Some(files);
                }
                src.record_plan(next_batch_id, &planned.files, now)?;
                checkpoint.write_offsets(next_batch_id, &seq)?;
                failpoint::hit("after_offsets", &spec.name, next_batch_id);
                (
                    next_batch_id,
                    planned.files,
                    false,
                    Backlog {
                        files: planned.backlog_files,
                        bytes: planned.backlog_bytes,
                        versions: planned.backlog_versions,
                    },
                    seq,
                    latest_offset_ms,
                    ms_since(t_wal),
                )
            };

        if idle || summary.batches == 0 {
            status(FlowStatus::Running);
            idle = false;
        }
        // getBatch: read the files.
        let t_get = Instant::now();
        let read = src.reader()?.read(&files).await?;
        // A re-run batch must read exactly the files it planned: its first attempt may
        // have committed them to the sink already (the write is then skipped by the Delta
        // transaction), so a file left for "later" would come back in another batch and
        // be written twice. Fail instead; the next start re-runs the batch again.
        if replayed
            && let Some((path, FileOutcome::Retry { error })) = read
                .outcomes
                .iter()
                .find(|(_, o)| matches!(o, FileOutcome::Retry { .. }))
        {
            return Err(Error::Source {
                path: std::path::PathBuf::from(path),
                message: format!(
                    "batch {batch_id} is re-run after a restart and must read exactly the files it planned, \
                     but this one cannot be read now ({error}); nothing was written, the next start re-runs the batch"
                ),
            });
        }
        let right_read = match (right.as_ref(), right_files.as_ref()) {
            (Some(r), Some(f)) => Some(r.reader()?.read(f).await?),
            _ => None,
        };
        // The right side's files with new columns: only `fail_on_new_columns` stops (the
        // pipeline refuses `add_new_columns` for a join flow; `rescue` keeps them in
        // `_rescued_data`).
        if let (Some(SourceSpec::Files(rspec)), Some(Input::Files(rsrc)), Some(rr)) = (
            spec.stream_join.as_ref().map(|j| &j.source),
            right.as_ref(),
            right_read.as_ref(),
        ) && let Decision::Fail { message } =
            evolve(rsrc.data_schema(), &rr.new_fields, rspec.schema_evolution)
        {
            return Err(Error::SchemaMismatch {
                flow: spec.name.clone(),
                message,
            });
        }
        let get_batch_ms = ms_since(t_get);
        let schema_event = |event: SchemaEvent| {
            if let Some(e) = events {
                e.send(FlowEvent::Schema {
                    flow: spec.name.clone(),
                    detail: event,
                    at_ms: now_ms(),
                });
            }
        };
        for event in SchemaEvent::type_mismatches(&read.type_mismatches) {
            schema_event(event);
        }
        // Schema evolution (Auto Loader): new columns widen the schema and stop the flow
        // before anything is written; the next start re-runs this batch with the new schema.
        // `schema_evolution = "none"`: new columns are ignored, but named and counted.
        let mut new_columns_ignored: Vec<String> = Vec::new();
        let decision = match (files_spec, src.files_source()) {
            (Some(files_spec), Some(file_source)) => {
                let new_fields = if files_spec.infer_column_types {
                    read.new_fields.clone()
                } else {
                    strings_only(&read.new_fields)
                };
                if files_spec.schema_evolution == crate::schema::evolve::EvolutionMode::None {
                    for f in &new_fields {
                        let name = f.path.join(".");
                        if !new_columns_ignored.contains(&name) {
                            new_columns_ignored.push(name);
                        }
                    }
                }
                evolve(
                    file_source.data_schema(),
                    &new_fields,
                    files_spec.schema_evolution,
                )
            }
            _ => Decision::Unchanged,
        };
        match &decision {
            Decision::Unchanged => {}
            Decision::Widen {
                schema,
                added,
                files,
                reason,
            } => {
                let location = crate::source::files::schema_store::location(
                    &checkpoint,
                    files_spec.and_then(|f| f.schema_location.as_deref()),
                );
                let version = crate::source::files::schema_store::record_version(
                    location, schema, reason, files, added,
                )?;
                if let Some(event) = SchemaEvent::schema_changed(&decision, version) {
                    schema_event(event);
                }
                return Err(Error::SchemaChanged {
                    flow: spec.name.clone(),
                    batch_id,
                    added: added.clone(),
                    file: files.first().cloned().unwrap_or_default(),
                    version,
                });
            }
            Decision::Fail { message } => {
                return Err(Error::SchemaMismatch {
                    flow: spec.name.clone(),
                    message: message.clone(),
                });
            }
        }
        // Records that cannot be parsed at all go to the quarantine instead of the table.
        let mut num_quarantined = 0u64;
        let quarantine_dir = files_spec.and_then(|f| f.bad_records_path.as_ref());
        let quarantine_table = files_spec.and_then(|f| f.bad_records_table.as_ref());
        let read_batches = if quarantine_dir.is_none() && quarantine_table.is_none() {
            read.batches
        } else {
            let (good, quarantined) = split_batches(read.batches, batch_id)?;
            num_quarantined = quarantined.len() as u64;
            if let Some(dir) = quarantine_dir {
                QuarantineWriter::new(dir.clone()).write(batch_id, &quarantined)?;
            }
            if let Some(table) = quarantine_table {
                let schema = crate::sink::quarantine::records_schema();
                let records = crate::sink::quarantine::records_batch(&quarantined)?;
                side_table(&mut quarantine_sink, table, &query_id)
                    .await?
                    .add_batch_mode(batch_id, vec![records], false, Some(&schema))
                    .await?;
            }
            good
        };

        // addBatch: transform and write.
        let t_add = Instant::now();
        let batch_watermark_ms = offsets_seq.metadata.batch_watermark_ms;
        let projected = projection.apply(read_batches).await?;
        let mut event_stats = None;
        let mut num_late = 0u64;
        let mut num_invalid_event_time = 0u64;
        let mut late_out = Vec::new();
        let out = match &spec.stateful.watermark {
            None => projected,
            Some(wm) => {
                let drops =
                    operator.as_ref().is_some_and(|op| op.drops_late_rows()) || join_op.is_some();
                let split = split_late(
                    &projected,
                    wm,
                    if drops {
                        batch_watermark_ms
                    } else {
                        i64::MIN / 1000
                    },
                )?;
                event_stats = split.event_time;
                num_invalid_event_time = split.num_invalid;
                if operator.is_none() && join_op.is_none() {
                    projected_passthrough(split)
                } else {
                    if drops {
                        num_late = split.num_late;
                        late_out.extend(split.late);
                    }
                    if split.num_invalid > 0 {
                        tracing::warn!(batch_id, rows = split.num_invalid, column = %wm.column,
                            "rows with a null or unparseable event time{}",
                            if spec.late_rows.is_some() { "; written to the late-rows table" } else { "; counted (numRowsInvalidEventTime) and not aggregated; set late_rows to keep them" });
                        late_out.extend(split.invalid);
                    }
                    split.on_time
                }
            }
        };
        let out = match (operator.as_mut(), join_op.as_mut()) {
            (Some(op), _) => op.process(batch_id, out, batch_watermark_ms)?,
            (None, Some(j)) => {
                let right_rows = right_read
                    .as_ref()
                    .map(|r| r.batches.clone())
                    .unwrap_or_default();
                j.process(batch_id, out, right_rows, batch_watermark_ms, num_late)
                    .await?
            }
            (None, None) => out,
        };
        if sink.is_none() {
            let mut retry = retry::Retry::new(&spec.health, "open the sink");
            sink = Some(loop {
                match Sink::open(&spec.sink, &query_id).await {
                    Ok(s) => break s,
                    Err(e) if retry.again(&e).await => continue,
                    Err(e) => return Err(e),
                }
            });
        }
        let sink_ref = sink
            .as_mut()
            .ok_or_else(|| Error::checkpoint(checkpoint.root(), "sink lost"))?;
        let overwrite = spec.stateful.output_mode == OutputMode::Complete;
        let mut retry = retry::Retry::new(&spec.health, "write the batch to the sink");
        let commit = loop {
            match sink_ref
                .add_batch_mode(batch_id, out.clone(), overwrite, output_schema.as_ref())
                .await
            {
                Ok(c) => break c,
                Err(e) if retry.again(&e).await => continue,
                Err(e) => return Err(e),
            }
        };
        if let Some(path) = &spec.late_rows
            && !late_out.is_empty()
        {
            side_table(&mut late_sink, path, &query_id)
                .await?
                .add_batch(batch_id, late_out)
                .await?;
        }
        if !commit.skipped
            && commit.delta_version.is_some()
            && let Some(table) = spec.writes()
        {
            commits::published(&table);
        }
        failpoint::hit("after_sink_commit", &spec.name, batch_id);
        if let Some(op) = operator.as_mut() {
            op.commit(batch_id)?;
        }
        if let Some(j) = join_op.as_mut() {
            j.commit(batch_id)?;
        }
        failpoint::hit("after_state", &spec.name, batch_id);
        failpoint::hit("before_commit", &spec.name, batch_id);
        let add_batch_ms = ms_since(t_add);
        let next_watermark_ms = match (&spec.stateful.watermark, &join_op) {
            (_, Some(j)) => j.next_watermark(batch_watermark_ms),
            (Some(wm), None) => next_watermark(
                batch_watermark_ms,
                event_stats.as_ref().map(|e| e.max_ms),
                wm.delay_ms,
            ),
            (None, None) => 0,
        };

        // commitOffsets.
        let t_commit = Instant::now();
        checkpoint.write_commit(
            batch_id,
            &CommitMetadata {
                next_batch_watermark_ms: next_watermark_ms,
            },
        )?;
        src.settle(batch_id, &read.outcomes, now_ms())?;
        if let (Some(r), Some(rr)) = (right.as_mut(), right_read.as_ref()) {
            r.settle(batch_id, &rr.outcomes, now_ms())?;
        }
        let commit_ms = ms_since(t_commit);
        let trigger_ms = ms_since(trigger_start);

        // Progress.
        let num_failed = read
            .outcomes
            .iter()
            .filter(|(_, o)| matches!(o, FileOutcome::Failed { .. }))
            .count() as u64;
        let num_retried = read
            .outcomes
            .iter()
            .filter(|(_, o)| matches!(o, FileOutcome::Retry { .. }))
            .count() as u64;
        let since_last = last_trigger_start.map_or(trigger_ms, ms_since);
        last_trigger_start = Some(trigger_start);
        let rate = |rows: u64, ms: u64| {
            if ms == 0 {
                0.0
            } else {
                rows as f64 * 1000.0 / ms as f64
            }
        };
        let right_rows = right_read.as_ref().map_or(0, |rr| rr.num_rows);
        let total_rows = read.num_rows + right_rows;
        let input_rate = rate(read.num_rows, since_last);
        let processed_rate = rate(read.num_rows, trigger_ms);
        let mut duration_ms = std::collections::BTreeMap::new();
        duration_ms.insert("latestOffset".into(), latest_offset_ms);
        duration_ms.insert("walCommit".into(), wal_ms);
        duration_ms.insert("getBatch".into(), get_batch_ms);
        duration_ms.insert("queryPlanning".into(), 0);
        duration_ms.insert("addBatch".into(), add_batch_ms);
        duration_ms.insert("commitOffsets".into(), commit_ms);
        duration_ms.insert("triggerExecution".into(), trigger_ms);
        let mut metrics = std::collections::BTreeMap::new();
        metrics.insert("numFilesOutstanding".into(), backlog.files.to_string());
        metrics.insert("numBytesOutstanding".into(), backlog.bytes.to_string());
        if let Some(versions) = backlog.versions {
            metrics.insert("numVersionsBehind".into(), versions.to_string());
        }
        let mut record = StreamingQueryProgress {
            id: query_id.clone(),
            run_id: run_id.clone(),
            name: spec.name.clone(),
            timestamp: iso_millis(now_ms() - trigger_ms as i64),
            batch_id,
            batch_duration: trigger_ms,
            num_input_rows: total_rows,
            input_rows_per_second: rate(total_rows, since_last),
            processed_rows_per_second: rate(total_rows, trigger_ms),
            duration_ms,
            event_time: event_time_progress(
                &spec.stateful,
                event_stats.as_ref(),
                batch_watermark_ms,
            ),
            state_operators: match (&operator, &join_op) {
                (Some(op), _) => {
                    let mut m = op.metrics();
                    m.num_rows_dropped_by_watermark = num_late;
                    vec![m]
                }
                (None, Some(j)) => vec![j.metrics()],
                (None, None) => Vec::new(),
            },
            sources: std::iter::once(SourceProgress {
                description: src.description(),
                start_offset: prev_end(batch_id).unwrap_or(serde_json::Value::Null),
                end_offset: offsets_seq
                    .offsets
                    .first()
                    .cloned()
                    .flatten()
                    .unwrap_or_default(),
                latest_offset: serde_json::Value::Null,
                num_input_rows: read.num_rows,
                input_rows_per_second: input_rate,
                processed_rows_per_second: processed_rate,
                metrics,
            })
            .chain(right.as_ref().map(|r| {
                let rows = right_read.as_ref().map_or(0, |rr| rr.num_rows);
                let mut metrics = std::collections::BTreeMap::new();
                metrics.insert(
                    "numFilesOutstanding".into(),
                    right_backlog.files.to_string(),
                );
                metrics.insert(
                    "numBytesOutstanding".into(),
                    right_backlog.bytes.to_string(),
                );
                if let Some(versions) = right_backlog.versions {
                    metrics.insert("numVersionsOutstanding".into(), versions.to_string());
                }
                SourceProgress {
                    description: r.description(),
                    start_offset: prev_end_of(batch_id, 1).unwrap_or(serde_json::Value::Null),
                    end_offset: offsets_seq
                        .offsets
                        .get(1)
                        .cloned()
                        .flatten()
                        .unwrap_or_default(),
                    latest_offset: serde_json::Value::Null,
                    num_input_rows: rows,
                    input_rows_per_second: rate(rows, since_last),
                    processed_rows_per_second: rate(rows, trigger_ms),
                    metrics,
                }
            }))
            .collect(),
            sink: SinkProgress {
                description: sink_ref.description(),
                num_output_rows: if commit.skipped {
                    0
                } else {
                    commit.num_output_rows as i64
                },
            },
            weir: WeirProgress {
                trigger: trigger.to_string(),
                delta_version: commit.delta_version,
                sink_write_skipped: commit.skipped,
                replayed,
                num_files: files.len() as u64,
                num_bytes: read.num_bytes,
                num_rows_rescued: read.num_rows_rescued,
                num_records_corrupt: read.num_records_corrupt,
                num_files_failed: num_failed,
                num_files_retried: num_retried,
                num_files_modified_after_ingestion: std::mem::take(&mut modified_total),
                num_rows_invalid_event_time: num_invalid_event_time,
                num_records_quarantined: num_quarantined,
                dimensions: projection.dimensions(),
                num_new_columns_ignored: new_columns_ignored.len() as u64,
                new_columns_ignored,
                num_late_rows_written: if spec.late_rows.is_some() {
                    num_late + num_invalid_event_time
                } else {
                    0
                },
                errors: read
                    .errors
                    .iter()
                    .map(|(path, error)| FileError {
                        path: path.clone(),
                        error: error.clone(),
                    })
                    .collect(),
                health: None,
            },
        };
        let health_change = tracker.observe(&mut record, now_ms());
        progress_log.append(&record)?;
        if let Some(cb) = options.on_progress.as_mut() {
            cb(&record);
        }
        if let Some(e) = events {
            e.send(FlowEvent::Progress {
                flow: spec.name.clone(),
                progress: Box::new(record.clone()),
            });
            if let Some(health) = health_change {
                e.send(FlowEvent::Health {
                    flow: spec.name.clone(),
                    health: Box::new(health),
                    at_ms: now_ms(),
                });
            }
        }
        tracing::info!(batch_id, rows = read.num_rows, files = files.len(), ms = trigger_ms, delta_version = ?commit.delta_version, "batch committed");

        summary.batches += 1;
        summary.replayed_batches += u64::from(replayed);
        summary.num_input_rows += total_rows;
        summary.num_output_rows += if commit.skipped {
            0
        } else {
            commit.num_output_rows
        };
        summary.num_files += files.len() as u64;
        summary.num_bytes += read.num_bytes;
        summary.num_files_failed += num_failed;
        summary.num_rows_rescued += read.num_rows_rescued;
        summary.last_batch_id = Some(batch_id);
        summary.delta_version = commit.delta_version.or(summary.delta_version);
        next_batch_id = batch_id + 1;
        watermark_ms = next_watermark_ms;
        summary.watermark_ms = watermark_ms;
        summary.num_rows_dropped_by_watermark += match &join_op {
            Some(j) => j.metrics().num_rows_dropped_by_watermark,
            None => num_late,
        };

        match trigger {
            Trigger::Once => break,
            Trigger::AvailableNow => {}
            Trigger::ProcessingTime(interval) => {
                let elapsed = trigger_start.elapsed();
                if interval > elapsed {
                    status(FlowStatus::Idle);
                    idle = true;
                    if control.wait(interval - elapsed, command_event).await == Wake::Stop {
                        summary.stopped_by_request = true;
                        break;
                    }
                }
            }
        }
    }
    if summary.delta_version.is_none() {
        summary.delta_version = match (&sink, &spec.sink) {
            (Some(s), _) => s.delta_version(),
            // No batch ran: report the table's current version.
            (
                None,
                crate::pipeline::SinkSpec::Delta { path, .. }
                | crate::pipeline::SinkSpec::DeltaMerge { path, .. },
            ) => crate::sink::delta::open_existing(path)
                .await
                .ok()
                .flatten()
                .and_then(|t| t.version())
                .map(|v| v as i64),
            (None, _) => None,
        };
    }
    summary.elapsed_ms = ms_since(run_start);
    drop(lock);
    Ok(summary)
}

/// A Delta table beside the flow's sink (late rows, quarantine), opened on first use;
/// its commits carry the flow's application transaction like the sink's.
async fn side_table<'a>(
    slot: &'a mut Option<Sink>,
    path: &std::path::Path,
    app_id: &str,
) -> Result<&'a mut Sink> {
    if slot.is_none() {
        let spec = crate::pipeline::SinkSpec::Delta {
            path: path.to_path_buf(),
            partition_by: Vec::new(),
            merge_schema: false,
            idempotent: true,
        };
        *slot = Some(Sink::open(&spec, app_id).await?);
    }
    slot.as_mut()
        .ok_or_else(|| Error::checkpoint(path, "the side table could not be opened"))
}

/// What a batch left behind in its source.
#[derive(Debug, Default, Clone, Copy)]
struct Backlog {
    files: u64,
    bytes: u64,
    /// Delta: versions not fully read.
    versions: Option<u64>,
}

/// Waits for the next poll of an idle processing-time flow; `true` when a stop was requested.
async fn idle_wait(
    control: &mut Control,
    idle: &mut bool,
    interval: Duration,
    status: &impl Fn(FlowStatus),
    on_command: impl FnMut(ControlCommand),
) -> bool {
    if !*idle {
        status(FlowStatus::Idle);
        *idle = true;
    }
    control
        .wait_idle(interval.max(IDLE_POLL_INTERVAL), on_command)
        .await
        == Wake::Stop
}

/// Without a stateful operator a watermark drops nothing: on-time, late and
/// invalid rows all go on (Spark applies the watermark only to stateful operators).
fn projected_passthrough(split: Split) -> Vec<arrow::record_batch::RecordBatch> {
    let mut all = split.on_time;
    all.extend(split.late);
    all.extend(split.invalid);
    all
}

/// Progress `eventTime`: min/max/avg of the batch's on-time event times and the batch's watermark.
fn event_time_progress(
    spec: &StatefulSpec,
    stats: Option<&EventTimeStats>,
    watermark_ms: i64,
) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    if spec.watermark.is_some() {
        m.insert("watermark".into(), iso_millis(watermark_ms));
    }
    if let Some(s) = stats {
        m.insert("min".into(), iso_millis(s.min_ms));
        m.insert("max".into(), iso_millis(s.max_ms));
        m.insert("avg".into(), iso_millis(s.avg_ms));
    }
    m
}

/// The schema of a source's batches, for checks before a run.
pub fn batch_schema_of(read_schema: &SchemaRef) -> SchemaRef {
    crate::source::files::batch_schema(read_schema)
}

/// A batch with no data from `src` (its offset does not move).
fn empty_planned(src: &Input) -> input::Planned {
    input::Planned {
        files: match src {
            Input::Files(_) => BatchFiles::Files(Vec::new()),
            Input::Delta(_) => BatchFiles::Delta(Vec::new()),
        },
        end_offset: None,
        backlog_files: 0,
        backlog_bytes: 0,
        backlog_versions: None,
        num_modified: 0,
    }
}

/// The right side of a stream-stream join: its input with its own ledger and schema
/// location under `sources/1/` (Spark numbers a query's sources the same way). `None`
/// until its schema is known (no files to infer from yet, or no Delta table yet).
async fn open_right_input(
    source: &SourceSpec,
    checkpoint: &Checkpoint,
    last_planned: Option<u64>,
    last_commit: Option<u64>,
) -> Result<Option<Input>> {
    match source {
        SourceSpec::Files(files_spec) => {
            let dir = checkpoint.root().join("sources").join("1");
            crate::checkpoint::create_dir_private(&dir)?;
            let mut ledger = Ledger::open(&dir.join("ledger.sqlite"))?;
            ledger.discard_unplanned_after(last_planned)?;
            ledger.settle_committed_through(last_commit, now_ms())?;
            let location = files_spec.schema_location.as_deref().unwrap_or(&dir);
            Ok(crate::source::files::schema_store::resolve_at(
                files_spec,
                location,
                files_spec.schema_hints.as_deref(),
            )?
            .map(|schema| {
                Input::Files(Box::new(FileSource::new(
                    files_spec.clone(),
                    ledger,
                    schema,
                )))
            }))
        }
        SourceSpec::Delta(options) => {
            let mut delta = crate::source::delta::DeltaSource::new(options.clone());
            Ok(delta.refresh().await?.map(|_| {
                Input::Delta(Box::new(DeltaInput {
                    source: delta,
                    until_version: None,
                }))
            }))
        }
    }
}
