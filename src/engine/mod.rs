//! Micro-batch execution of one flow: the batch protocol (DESIGN.md §5), triggers,
//! stop, and progress records. `run` reads as the protocol, top to bottom:
//!
//! ```text
//!  steps 1-2  start: lock ─► refuse an incompatible checkpoint or sink table ─► recover   recover.rs
//!  trigger loop, one turn per trigger:
//!    FlowPlan::build     once every source's schema is known; BatchPath::of decides   plan.rs, input/
//!                        every batch's path: streamed or staged, replay, commit path
//!    3    batch::plan      ─► PlannedBatch   writes the ledgers, offsets/N              batch.rs
//!    4-5  execute, on the plan's path:
//!           streamed::read_transform_write ─► Written (or declined: staged)           streamed.rs
//!           staged: batch::read ─► ReadBatch ─ transform ─► Output ─ write ─► Written  sinks.rs
//!    6    batch::commit    ─► Committed      writes state N, commits/N, the ledgers
//!    7    report::Reporter ─► _weir/progress.jsonl, health, events; the run's summary    report.rs
//!    nothing to run (no schema yet, no new data): the one idle wait
//! ```
//!
//! A crash between `offsets/N` and `commits/N` is repaired on the next start: recovery
//! finds batch N planned and uncommitted, and the first turn re-runs it with exactly its
//! recorded offsets; the sink's idempotence (Delta application transactions) makes the
//! re-run write at most once.
//!
//! A flow's life ([`control`]): `starting → running ⇄ idle → stopped | failed`, with
//! `paused` on an operator's command. Status, progress, health and errors go out as
//! events ([`control::FlowEvents`]) and, when enabled, as the flow's snapshot on the
//! process's [`board`] (the Prometheus endpoint and alert rules read it).

pub mod batch;
pub mod board;
pub mod control;
pub use crate::failpoint;
pub mod input;
pub mod notify;
pub mod plan;
pub mod recover;
pub mod report;
pub mod retry;
pub mod sinks;
pub mod streamed;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::checkpoint::{Checkpoint, CheckpointLock, PlanRecord};
use crate::clock::{ms_since, now_ms};
use crate::error::{Error, Result};
use crate::health::tracker::HealthTracker;
use crate::records::StreamingQueryProgress;
use crate::schema::events::SchemaEvent;
use crate::source::files::IDLE_POLL_INTERVAL;
use crate::spec::{FlowSpec, SinkSpec, SourceSpec, Trigger};
use batch::{Next, PlannedBatch, Written};
use control::{Control, FlowEvents, Wake};
pub use control::{ControlCommand, EventSink, FlowEvent, FlowStatus};
use input::Input;
use plan::{Execution, FlowPlan, Replay, StateAt};
use recover::Recovered;
use sinks::Sinks;

/// Called with each progress record of a flow.
pub type ProgressCallback = Box<dyn FnMut(&StreamingQueryProgress) + Send>;

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

/// Runs a flow until its trigger says it is done or a stop is requested.
pub async fn run_flow(spec: &FlowSpec, mut options: RunOptions) -> Result<FlowSummary> {
    let events = FlowEvents::new(&spec.name, options.events.take());
    events.seed(&Checkpoint::at(&spec.checkpoint));
    events.status(FlowStatus::Starting);
    let mut tracker = HealthTracker::new(
        &spec.name,
        spec.health.clone(),
        &Checkpoint::at(&spec.checkpoint),
    );
    let result = run(spec, options, &events, &mut tracker).await;
    match &result {
        Ok(_) => events.status(FlowStatus::Stopped),
        Err(e) => {
            if let Error::SinkSchemaMismatch { path, message } = e {
                events.schema(SchemaEvent::SinkSchemaMismatch {
                    table: path.clone(),
                    message: message.clone(),
                });
            }
            events.error(e);
            // Another process runs the flow: its health is not ours to record.
            if !matches!(e, Error::CheckpointLocked { .. }) {
                events.health(tracker.fail(e, now_ms()));
            }
            events.status(FlowStatus::Failed);
        }
    }
    result
}

/// The batch protocol of one flow (docs/architecture.md, "The batch protocol"): steps 1-2
/// once, then one batch per trigger through steps 3-7 on the path its plan decided
/// ([`plan::BatchPath`]), or a wait when there is nothing to run.
async fn run(
    spec: &FlowSpec,
    mut options: RunOptions,
    events: &FlowEvents,
    tracker: &mut HealthTracker,
) -> Result<FlowSummary> {
    let run_start = Instant::now();
    let trigger = options.trigger.unwrap_or(spec.trigger);
    let mut control = Control::new(options.stop.take(), options.commands.take());
    if let SourceSpec::Delta(d) = &spec.source {
        control.upstream = Some(notify::subscribe(&d.path));
    }
    // Steps 1-2: the lock, a checkpoint and sink table the flow can use, recovery.
    let checkpoint = Checkpoint::at(&spec.checkpoint);
    let Started {
        lock,
        query_id,
        recovered,
    } = start(spec, &checkpoint).await?;
    let mut next = Next::from(&recovered);
    let run_id = uuid::Uuid::new_v4().to_string();
    let ids = report::RunIds {
        query_id: &query_id,
        run_id: &run_id,
        trigger,
    };
    let mut progress = report::Reporter::new(ids, &checkpoint, options.on_progress.take());
    let mut summary = FlowSummary {
        flow: spec.name.clone(),
        query_id: query_id.clone(),
        checkpoint: spec.checkpoint.clone(),
        sink: spec.sink.describe(),
        ..Default::default()
    };
    let mut opened: Vec<Option<Input>> = spec.sources().iter().map(|_| None).collect();
    let mut flow: Option<FlowPlan> = None;
    let mut sinks = Sinks::new(&spec.sink, &query_id, &spec.health);
    let mut waits = Waits::default();
    loop {
        if stop_before_trigger(&mut control, &mut waits.idle, events).await {
            summary.stopped_by_request = true;
            break;
        }
        let trigger_start = Instant::now();
        control.upstream_seen();
        // The plan, once every source's schema is known; it decides every batch's path.
        if flow.is_none() {
            flow = open_plan(spec, &checkpoint, &recovered, &mut opened).await?;
            waits.planned(spec, flow.as_ref(), &mut control);
        }
        // Step 3: the batch to re-run, or the next one, in the ledgers and `offsets/N`.
        let planned = match flow.as_mut() {
            Some(f) => batch::plan(f, &mut next, trigger, trigger_start, &checkpoint).await?,
            None => None,
        };
        let (Some(f), Some(planned)) = (flow.as_mut(), planned) else {
            waits.nothing_to_run(spec, events, tracker);
            let Trigger::ProcessingTime(interval) = trigger else {
                break;
            };
            if idle_wait(&mut control, &mut waits.idle, interval, events).await {
                summary.stopped_by_request = true;
                break;
            }
            continue;
        };
        if waits.idle || summary.batches == 0 {
            events.status(FlowStatus::Running);
            waits.idle = false;
        }
        // Steps 4-5: read, transform, the sink's commit.
        let written = execute(f, planned, events, &mut sinks).await?;
        // Step 6: state version N, `commits/N`, the ledgers.
        let committed = batch::commit(f, written, &checkpoint)?;
        // Step 7: the progress record.
        let record = progress.committed(
            spec,
            &committed,
            sinks.description(),
            trigger_start,
            tracker,
            events,
        )?;
        summary.add(&record, committed.next_watermark_ms);
        next.follow(&committed);
        optimize_if_due(spec).await;
        match trigger {
            Trigger::Once => break,
            Trigger::AvailableNow => {}
            Trigger::ProcessingTime(interval) => {
                if wait_for_trigger(
                    &mut control,
                    &mut waits.idle,
                    interval,
                    trigger_start,
                    events,
                )
                .await
                {
                    summary.stopped_by_request = true;
                    break;
                }
            }
        }
    }
    sinks.settle().await;
    if summary.delta_version.is_none() {
        summary.delta_version = table_version(spec, &sinks).await;
    }
    summary.elapsed_ms = ms_since(run_start);
    drop(lock);
    Ok(summary)
}

/// What steps 1 and 2 leave the run: the checkpoint's lock (held to the run's end), the
/// query id and where the flow stopped.
struct Started {
    lock: CheckpointLock,
    query_id: String,
    recovered: Recovered,
}

/// Steps 1 and 2: takes the checkpoint's lock, refuses a checkpoint the flow cannot use
/// and a sink table that does not fit it, records the flow's plan and recovers.
async fn start(spec: &FlowSpec, checkpoint: &Checkpoint) -> Result<Started> {
    let lock = CheckpointLock::acquire(checkpoint)?;
    if let Some(prev) = &lock.taken_over_from {
        tracing::warn!(pid = prev.pid, host = %prev.host, started_at = %prev.started_at,
            "took over the checkpoint lock left by a process that is no longer running");
    }
    crate::checkpoint::compat::refuse_incompatible(spec, checkpoint).await?;
    let metadata = checkpoint.open_or_create()?;
    let query_id = metadata.id.to_string();
    checkpoint.write_plan(&plan_record(spec))?;
    // Before recovery touches any source record (the ledger).
    let last_planned = checkpoint.latest_offsets()?.map(|(id, _)| id);
    refuse_table_ahead(spec, checkpoint, &query_id, last_planned).await?;
    let recovered = recover::recover(checkpoint, &spec.sources(), now_ms())?;
    if recovered.last_planned.is_none() {
        refuse_existing_table(spec, checkpoint, &query_id).await?;
    }
    Ok(Started {
        lock,
        query_id,
        recovered,
    })
}

/// `_weir/plan.json`: the flow's sources, sink and side tables, for restart checks and
/// attach's graph.
fn plan_record(spec: &FlowSpec) -> PlanRecord {
    PlanRecord {
        flow: spec.name.clone(),
        source: spec.source.kind(),
        source_path: spec.source.path().to_path_buf(),
        sink: spec.sink.describe(),
        sink_path: spec.writes(),
        other_sources: spec
            .sources()
            .into_iter()
            .enumerate()
            .skip(1)
            .map(|(i, s)| crate::checkpoint::PlanSource {
                source: s.kind(),
                source_path: s.path().to_path_buf(),
                role: Some(
                    if spec.stream_join.is_some() && i == spec.union.len() + 1 {
                        "stream_join"
                    } else {
                        "union"
                    }
                    .to_string(),
                ),
            })
            .collect(),
        dimensions: spec
            .joins
            .iter()
            .map(|j| crate::checkpoint::PlanSource {
                source: j.format.name().to_string(),
                source_path: j.table.clone(),
                role: None,
            })
            .collect(),
        side_tables: spec
            .tables_written()
            .into_iter()
            .filter(|(key, _)| *key != "sink.path")
            .map(|(key, path)| crate::checkpoint::PlanTable {
                key: key.to_string(),
                path,
            })
            .collect(),
    }
}

/// Steps 4 and 5 of a planned batch on the flow's path ([`plan::BatchPath`]): a re-run
/// batch the sink already holds is settled from its recorded outcomes without a read
/// ([`Replay::SkipsReadWhenHeld`]); a streamed flow's batch runs in one pass
/// ([`streamed`]); any other, and a streamed batch declined, stage by stage.
async fn execute(
    f: &mut FlowPlan,
    planned: PlannedBatch,
    events: &FlowEvents,
    sinks: &mut Sinks,
) -> Result<Written> {
    let held = planned.replayed
        && f.path.replay == Replay::SkipsReadWhenHeld
        && sinks.holds_batch(planned.batch_id).await;
    let planned = match f.path.execution {
        Execution::Streamed if !held => {
            match streamed::read_transform_write(f, planned, events, sinks).await? {
                streamed::Streamed::Written(written) => return Ok(*written),
                streamed::Streamed::Declined(planned) => planned,
            }
        }
        _ => planned,
    };
    let read = batch::read(f, planned, events, held).await?;
    let output = batch::transform(f, read).await?;
    batch::write(f, output, sinks).await
}

/// What a flow with nothing to run has said, so that each is said once.
#[derive(Default)]
struct Waits {
    /// The status `idle` is published.
    idle: bool,
    /// A files source's landing directory does not exist.
    landing: bool,
    /// A source's schema is not known yet.
    schema: bool,
}

impl Waits {
    /// After an attempt to plan the flow (`flow`: the plan, when every schema is known).
    fn planned(&mut self, spec: &FlowSpec, flow: Option<&FlowPlan>, control: &mut Control) {
        // An inferred schema with no file to infer it from, a Delta table not created
        // yet. File notifications start with the source, so until then the flow looks
        // again each trigger.
        if flow.is_none() && !self.schema && missing_landing(spec).is_none() {
            self.schema = true;
            tracing::info!(flow = %spec.name, "a source's schema is not known yet (no file to infer it from, or no Delta table yet); the flow looks again each trigger");
        }
        // A files source with notifications wakes the idle flow on each notice.
        if control.upstream.is_none()
            && let Some(rx) = flow.and_then(|f| f.inputs.iter().find_map(Input::notices))
        {
            control.upstream = Some(rx);
        }
    }

    /// No batch to run. A files source whose landing directory does not exist yet has
    /// nothing to read: the flow waits for it (processing time) or has nothing to do
    /// (available_now), and its health says source_unavailable with the path.
    fn nothing_to_run(
        &mut self,
        spec: &FlowSpec,
        events: &FlowEvents,
        tracker: &mut HealthTracker,
    ) {
        let missing = missing_landing(spec);
        if missing.is_some() == self.landing {
            return;
        }
        self.landing = missing.is_some();
        if let Some(path) = missing {
            tracing::warn!(path = %path.display(), "the source's landing directory does not exist yet; waiting for it");
            let e = Error::SourceIo {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the landing directory does not exist yet; the flow waits for it (nothing is lost: files are read once it appears)",
                ),
            };
            events.health(tracker.wait(&e, now_ms()));
        }
    }
}

/// Operator commands before a trigger; `true` when the flow is to stop. A paused flow
/// waits here: resumed, or told to trigger now (one batch runs, then it pauses again).
async fn stop_before_trigger(control: &mut Control, idle: &mut bool, events: &FlowEvents) -> bool {
    for c in control.drain() {
        events.command(c);
    }
    if control.stop_requested() {
        return true;
    }
    if control.paused {
        events.status(FlowStatus::Paused);
        if control.wait(Duration::MAX, |c| events.command(c)).await == Wake::Stop {
            return true;
        }
        *idle = false;
    }
    false
}

/// The sink's `optimize_every`: between batches, never during a commit. A failure is
/// logged and the flow goes on.
async fn optimize_if_due(spec: &FlowSpec) {
    let (Some(every), Some(table)) = (spec.optimize_every, spec.writes()) else {
        return;
    };
    match crate::maintenance::optimize_if_due(&spec.checkpoint, &table, every, now_ms()).await {
        Ok(Some(done)) => {
            tracing::info!(table = %table.display(), version = done.version_after,
                files_removed = done.files_removed, files_added = done.files_added,
                "OPTIMIZE (optimize_every) committed")
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(table = %table.display(), error = %e,
            "OPTIMIZE (optimize_every) failed; the flow goes on, next try after optimize_every"),
    }
}

/// Waits for a processing-time trigger's next start after a batch that began at
/// `trigger_start`; `true` when a stop was requested.
async fn wait_for_trigger(
    control: &mut Control,
    idle: &mut bool,
    interval: Duration,
    trigger_start: Instant,
    events: &FlowEvents,
) -> bool {
    let elapsed = trigger_start.elapsed();
    if interval <= elapsed {
        return false;
    }
    events.status(FlowStatus::Idle);
    *idle = true;
    control
        .wait(interval - elapsed, |c| events.command(c))
        .await
        == Wake::Stop
}

/// The sink table's version at the end of a run: the sink's own once it is open, else
/// (no batch ran) the table's current one.
async fn table_version(spec: &FlowSpec, sinks: &Sinks) -> Option<i64> {
    match &spec.sink {
        _ if sinks.is_open() => sinks.delta_version(),
        SinkSpec::Delta { path, .. } | SinkSpec::DeltaMerge { path, .. } => {
            crate::delta::open_existing(path)
                .await
                .ok()
                .flatten()
                .and_then(|t| t.version())
                .map(|v| v as i64)
        }
        _ => None,
    }
}

/// Refuses to start when the sink table records a batch of this query past the
/// checkpoint's last planned batch ([`crate::delta::table_ahead_error`]). A table that
/// cannot be read now is left to the sink's own open and retries (health
/// `sink_unavailable`); the sink's write checks the same again before each batch.
async fn refuse_table_ahead(
    spec: &FlowSpec,
    checkpoint: &Checkpoint,
    query_id: &str,
    last_planned: Option<u64>,
) -> Result<()> {
    let Some(table) = spec.writes() else {
        return Ok(());
    };
    let txn = match crate::delta::txn_version(&table, query_id).await {
        Ok(Some(v)) => v,
        Ok(None) => return Ok(()),
        Err(e) => {
            tracing::warn!(table = %table.display(), error = %e, "cannot read the sink table's transactions at start; the sink's open retries");
            return Ok(());
        }
    };
    if last_planned.is_some_and(|b| txn <= b as i64) {
        return Ok(());
    }
    Err(crate::delta::table_ahead_error(
        &table,
        checkpoint.root(),
        query_id,
        txn,
        last_planned,
    ))
}

/// A new checkpoint (no batch planned yet) over a sink table that already has rows: the
/// classic "deleted the checkpoint to fix it", after which every file would be read and
/// written again. Refused with the table's facts and the ways on, unless the flow says
/// where it starts: `allow_existing_table = true` on the sink, `include_existing_files =
/// false` or `modified_after` on a files source, `starting_version` on a Delta source.
/// Spark does not check this; weir can, as the table's `txn` actions name the queries that
/// wrote it.
async fn refuse_existing_table(
    spec: &FlowSpec,
    checkpoint: &Checkpoint,
    query_id: &str,
) -> Result<()> {
    let (SinkSpec::Delta { path, .. } | SinkSpec::DeltaMerge { path, .. }) = &spec.sink else {
        return Ok(());
    };
    if spec.sink.allows_existing_table() {
        return Ok(());
    }
    let told_where_to_start = spec.sources().iter().any(|s| match s {
        SourceSpec::Files(f) => !f.include_existing_files || f.modified_after_ms.is_some(),
        SourceSpec::Delta(d) => d.starting_version.is_some() || d.starting_timestamp_ms.is_some(),
        // A new Kafka query starts at starting_offsets; "earliest" re-reads the topics.
        SourceSpec::Kafka(k) => k.starting_offsets.trim() != "earliest",
    });
    if told_where_to_start {
        return Ok(());
    }
    let Some(facts) = crate::delta::table_facts(path).await? else {
        return Ok(());
    };
    if facts.rows == Some(0) || facts.files == 0 {
        return Ok(());
    }
    let others: Vec<&(String, i64)> = facts
        .transactions
        .iter()
        .filter(|(id, _)| id != query_id)
        .collect();
    let rows = facts.rows.map_or_else(
        || format!("{} data file(s)", facts.files),
        |r| format!("{r} row(s) in {} file(s)", facts.files),
    );
    let writers = if others.is_empty() {
        "no streaming query id in its log (written by something else)".to_string()
    } else {
        others
            .iter()
            .map(|(id, v)| format!("query {id} up to batch {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(Error::StateIncompatible {
        path: checkpoint.root().to_path_buf(),
        message: format!(
            "flow {flow}: this checkpoint is new (query {query_id}), but its sink table {table} already has data: \
             version {version}, {rows}, written by {writers}. Starting would read every source file again and \
             write it again (duplicates), the usual outcome of deleting a checkpoint to fix a flow. Nothing was written. \
             Choose: restore the old checkpoint (its query id is in the table's log), or \
             `weir checkpoint reset {pipeline} --flow {flow} --truncate-target` to rebuild the table from all files, \
             or say where the new checkpoint starts: include_existing_files = false (only files landing from now on), \
             modified_after = \"<timestamp>\" (files modified after it), starting_version (a Delta source), \
             or allow_existing_table = true on the sink (append to the table anyway, e.g. two flows writing one table)",
            flow = spec.name,
            table = path.display(),
            version = facts.version,
            pipeline = "<pipeline.toml>",
        ),
    })
}

/// The landing directory of a files source of the flow that does not exist (yet).
fn missing_landing(spec: &FlowSpec) -> Option<PathBuf> {
    spec.sources().into_iter().find_map(|s| match s {
        SourceSpec::Files(f) if crate::source::files::landing_missing(&f.path) => {
            Some(f.path.clone())
        }
        _ => None,
    })
}

/// Opens the flow's sources not open yet, in source order, and plans the flow once all
/// are: `None` while a source's schema is unknown (no files to infer it from yet, no
/// Delta table yet), so there is nothing to plan.
async fn open_plan(
    spec: &FlowSpec,
    checkpoint: &Checkpoint,
    recovered: &Recovered,
    opened: &mut [Option<Input>],
) -> Result<Option<FlowPlan>> {
    for (i, source) in spec.sources().into_iter().enumerate() {
        if opened[i].is_none() {
            match Input::open(source, i, checkpoint).await? {
                Some(input) => opened[i] = Some(input),
                None => return Ok(None),
            }
        }
    }
    let inputs = opened.iter_mut().filter_map(Option::take).collect();
    let state = StateAt::of(checkpoint, recovered.last_commit);
    FlowPlan::build(spec, inputs, &state).await.map(Some)
}

/// Waits for the next poll of a flow with nothing to run; `true` when a stop was requested.
async fn idle_wait(
    control: &mut Control,
    idle: &mut bool,
    interval: Duration,
    events: &FlowEvents,
) -> bool {
    if !*idle {
        events.status(FlowStatus::Idle);
        *idle = true;
    }
    control
        .wait_idle(interval.max(IDLE_POLL_INTERVAL), |c| events.command(c))
        .await
        == Wake::Stop
}
