//! What the console remembers about each flow: a bounded time series of
//! per-batch samples, the status history, the checkpoint's planned/committed
//! batches and a timeline of events.
//!
//! Everything is bounded: samples by a retention period counted back from the
//! flow's newest sample (so history of a stopped flow stays visible) and by a
//! hard count; the timeline and status history by count.

use std::collections::VecDeque;
use std::path::PathBuf;

use crate::engine::control::{ControlCommand, FlowEvent, FlowStatus};
use crate::error::Domain;
use crate::records::StreamingQueryProgress;

use super::format;

/// Hard cap on samples kept per flow, whatever the retention.
pub const MAX_SAMPLES: usize = 20_000;
/// Timeline events kept per flow.
pub const MAX_EVENTS: usize = 2_000;
const MAX_STATUSES: usize = 2_000;

/// Durations of a batch's phases (ms), in the order the batch runs them.
pub const PHASES: [&str; 5] = [
    "latestOffset",
    "getBatch",
    "addBatch",
    "walCommit",
    "commitOffsets",
];

/// One batch, as the charts and tables need it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When the batch ended (trigger start + batch duration), epoch ms.
    pub t_ms: i64,
    pub batch_id: u64,
    pub input_rps: f64,
    pub processed_rps: f64,
    pub input_rows: u64,
    /// -1 when unknown (Spark's convention).
    pub output_rows: i64,
    pub files: u64,
    pub bytes: u64,
    pub backlog_files: Option<u64>,
    pub backlog_bytes: Option<u64>,
    /// The backlog in its unit (files; Kafka offsets, Delta versions or rate rows behind
    /// the latest), summed over the sources that report the first source's unit.
    pub backlog: Option<u64>,
    pub backlog_unit: Option<crate::records::BacklogUnit>,
    pub max_event_ms: Option<i64>,
    pub watermark_ms: Option<i64>,
    pub state_rows: Option<u64>,
    pub state_memory: Option<u64>,
    pub dropped_by_watermark: Option<u64>,
    pub duration_ms: u64,
    pub phases: [u64; 5],
    pub delta_version: Option<i64>,
    pub start_offset: Option<String>,
    pub end_offset: Option<String>,
    pub replayed: bool,
    pub files_failed: u64,
    /// Late and invalid-event-time rows written to the flow's late-rows table.
    pub late_rows_written: u64,
    /// A flow of several sources: the source whose watermark is the flow's, and each
    /// source's own (`-` before its first data).
    pub watermark_held_by: Option<String>,
    pub source_watermarks: Vec<(String, Option<i64>)>,
    /// Rows each source (`sources[i]`) read in the batch (idle inputs read none).
    pub source_rows: Vec<u64>,
}

impl Sample {
    /// Reads a progress record; `None` when its timestamp is not ISO-8601.
    pub fn from_progress(p: &StreamingQueryProgress) -> Option<Sample> {
        let start = format::parse_iso_ms(&p.timestamp)?;
        let metric = |name: &str| -> Option<u64> {
            let vals: Vec<u64> = p
                .sources
                .iter()
                .filter_map(|s| {
                    s.metrics
                        .get(name)
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .collect();
            (!vals.is_empty()).then(|| vals.iter().sum())
        };
        let ops = &p.state_operators;
        let state = |f: fn(&crate::records::StateOperatorProgress) -> u64| {
            (!ops.is_empty()).then(|| ops.iter().map(f).sum())
        };
        let mut phases = [0u64; 5];
        for (i, name) in PHASES.iter().enumerate() {
            phases[i] = p.duration_ms.get(*name).copied().unwrap_or(0);
        }
        let source = p.sources.first();
        let backlogs: Vec<(u64, crate::records::BacklogUnit)> =
            p.sources.iter().filter_map(|s| s.backlog()).collect();
        let backlog_unit = backlogs.first().map(|b| b.1);
        let backlog = backlog_unit.map(|u| {
            backlogs
                .iter()
                .filter(|b| b.1 == u)
                .map(|b| b.0)
                .sum::<u64>()
        });
        Some(Sample {
            t_ms: start + p.batch_duration as i64,
            batch_id: p.batch_id,
            input_rps: p.input_rows_per_second,
            processed_rps: p.processed_rows_per_second,
            input_rows: p.num_input_rows,
            output_rows: p.sink.num_output_rows,
            files: p.weir.num_files,
            bytes: p.weir.num_bytes,
            backlog_files: metric("numFilesOutstanding"),
            backlog_bytes: metric("numBytesOutstanding"),
            backlog,
            backlog_unit,
            max_event_ms: p
                .event_time
                .get("max")
                .and_then(|v| format::parse_iso_ms(v)),
            // Spark (and weir) report 1970-01-01T00:00:00Z until a watermark is set: that
            // is no watermark, not a delay of 56 years.
            watermark_ms: p
                .event_time
                .get("watermark")
                .and_then(|v| format::parse_iso_ms(v))
                .filter(|w| *w > 0),
            state_rows: state(|o| o.num_rows_total),
            state_memory: state(|o| o.memory_used_bytes),
            dropped_by_watermark: state(|o| o.num_rows_dropped_by_watermark),
            duration_ms: p.batch_duration,
            phases,
            delta_version: p.weir.delta_version,
            start_offset: source.and_then(|s| offset_text(&s.start_offset)),
            end_offset: source.and_then(|s| offset_text(&s.end_offset)),
            replayed: p.weir.replayed,
            files_failed: p.weir.num_files_failed,
            late_rows_written: p.weir.num_late_rows_written,
            watermark_held_by: p.weir.watermark_held_by.clone(),
            source_watermarks: p
                .weir
                .source_watermarks
                .iter()
                .map(|w| {
                    (
                        w.source.clone(),
                        w.watermark.as_deref().and_then(format::parse_iso_ms),
                    )
                })
                .collect(),
            source_rows: p.sources.iter().map(|s| s.num_input_rows).collect(),
        })
    }
}

/// `{"logOffset": 4}` -> `4`; other offsets as compact JSON.
fn offset_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::Object(m) if m.len() == 1 => m.values().next().map(|x| x.to_string()),
        other => Some(other.to_string()),
    }
}

/// What kind of thing happened, for colour and filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Start,
    Stop,
    Status,
    Error,
    Schema,
    Operator,
    Batch,
    Health,
    /// An alert rule fired or resolved (docs/operate.md).
    Alert,
}

impl EventKind {
    pub fn label(self) -> &'static str {
        match self {
            EventKind::Start => "start",
            EventKind::Stop => "stop",
            EventKind::Status => "status",
            EventKind::Error => "error",
            EventKind::Schema => "schema",
            EventKind::Operator => "operator",
            EventKind::Batch => "batch",
            EventKind::Health => "health",
            EventKind::Alert => "alert",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TimelineEvent {
    pub t_ms: i64,
    pub flow: String,
    pub kind: EventKind,
    pub text: String,
}

/// The checkpoint's view of the batches: from `offsets/` and `commits/`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointBatches {
    pub last_planned: Option<u64>,
    pub last_committed: Option<u64>,
    /// `batchTimestampMs` of the planned, uncommitted batch.
    pub pending_since_ms: Option<i64>,
}

impl CheckpointBatches {
    pub fn pending(&self) -> Option<u64> {
        self.last_planned
            .filter(|p| Some(*p) != self.last_committed)
    }
}

/// The last error a flow reported.
#[derive(Debug, Clone, PartialEq)]
pub struct LastError {
    pub t_ms: i64,
    pub text: String,
}

/// How a flow reads an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRole {
    /// The flow's `[flow.source]`.
    Source,
    /// A `[[flow.union]]` source.
    Union,
    /// A stream-stream join's right side (`[flow.stream_join]`).
    JoinRight,
    /// A stream-static join's dimension table (`[[flow.join]]`).
    Dimension,
}

impl InputRole {
    pub fn word(self) -> &'static str {
        match self {
            InputRole::Source => "",
            InputRole::Union => "union",
            InputRole::JoinRight => "stream join",
            InputRole::Dimension => "dimension",
        }
    }
}

/// One input of a flow, as the graph draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphInput {
    pub role: InputRole,
    /// `files:json`, `kafka`, `delta`, `delta dim`, `csv dim`...
    pub kind: String,
    /// A directory or table path (normalized), or a Kafka locator (`kafka:Subscribe[t]`).
    pub path: PathBuf,
}

/// The simulated clock of a replay (`weir demo` replays 2013's flights): its event
/// times are 2013's, so a watermark delay against the wall clock says nothing; the
/// console measures it against this clock instead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayClock {
    pub clock: Option<crate::demo::replay::SimulatedClock>,
    /// Simulated time of the last file landed (0: none yet).
    pub last_landed_ms: i64,
    /// Every file landed: the clock stopped at the last one.
    pub done: bool,
}

impl ReplayClock {
    pub fn of(status: &crate::demo::replay::ReplayStatus) -> Self {
        ReplayClock {
            clock: status.clock,
            last_landed_ms: status.simulated_ms,
            done: status.done,
        }
    }

    /// The simulated time at wall time `wall_ms` (`None` before the replay started).
    pub fn at(&self, wall_ms: i64) -> Option<i64> {
        let last = (self.last_landed_ms > 0).then_some(self.last_landed_ms);
        match self.clock {
            Some(c) if wall_ms < c.wall_start_ms => None,
            Some(c) if c.speed.is_finite() && c.speed > 0.0 => {
                let sim = c.sim_start_ms + ((wall_ms - c.wall_start_ms) as f64 * c.speed) as i64;
                Some(match last {
                    Some(l) if self.done => sim.min(l),
                    _ => sim,
                })
            }
            // As fast as possible: the clock is the last landing.
            _ => last,
        }
    }
}

/// The flow label of pipeline-wide notices (e.g. a demo fault injected).
pub const PIPELINE_EVENT: &str = "pipeline";

/// One flow's state in the console.
#[derive(Debug, Clone)]
pub struct FlowModel {
    pub name: String,
    pub checkpoint: Option<PathBuf>,
    /// What the flow reads and writes (for the playbook's evidence).
    pub source_path: Option<PathBuf>,
    pub sink_path: Option<PathBuf>,
    /// What the flow reads, for the pipeline graph (`x`).
    pub inputs: Vec<GraphInput>,
    /// The sink as Spark describes it (`DeltaSink[...]`, `MemorySink[...]`).
    pub sink_label: Option<String>,
    pub trigger: Option<String>,
    pub status: FlowStatus,
    /// Whether any status is known (attach: before the lock was read, it is not).
    pub status_known: bool,
    pub statuses: VecDeque<(i64, FlowStatus)>,
    pub samples: VecDeque<Sample>,
    pub timeline: VecDeque<TimelineEvent>,
    pub batches: CheckpointBatches,
    pub last_progress: Option<Box<StreamingQueryProgress>>,
    pub last_error: Option<LastError>,
    /// The flow stopped with `schema_changed`: a restart continues it (console `R`).
    pub restartable: bool,
    /// The latest health verdict (from the engine's events or the progress records).
    pub health: Option<crate::records::Health>,
    /// A Kafka flow: the last lag measured against the cluster.
    pub kafka_lag: Option<KafkaLagView>,
    /// `(at_ms, messages behind)` over the last minute, for the catch-up forecast.
    pub kafka_lag_trend: VecDeque<(i64, u64)>,
    /// An Apache Spark query (`attach --spark`): its playbooks name Spark's options.
    pub spark: bool,
    last_run_id: Option<String>,
}

/// A Kafka flow's per-partition lag as last measured (`Err`: the cluster could not be
/// asked, shown as `source_unavailable`).
#[derive(Debug, Clone)]
pub struct KafkaLagView {
    pub at_ms: i64,
    pub lag: Result<Vec<crate::source::kafka::lag::PartitionLag>, String>,
}

impl FlowModel {
    pub fn new(name: impl Into<String>) -> Self {
        FlowModel {
            name: name.into(),
            checkpoint: None,
            source_path: None,
            sink_path: None,
            inputs: Vec::new(),
            sink_label: None,
            trigger: None,
            status: FlowStatus::Starting,
            status_known: false,
            statuses: VecDeque::new(),
            samples: VecDeque::new(),
            timeline: VecDeque::new(),
            batches: CheckpointBatches::default(),
            last_progress: None,
            last_error: None,
            restartable: false,
            health: None,
            kafka_lag: None,
            kafka_lag_trend: VecDeque::new(),
            spark: false,
            last_run_id: None,
        }
    }

    /// A new lag measurement of a Kafka flow.
    pub fn set_kafka_lag(&mut self, view: KafkaLagView) {
        if let Ok(l) = &view.lag {
            self.kafka_lag_trend
                .push_back((view.at_ms, l.iter().map(|p| p.messages).sum()));
            while self
                .kafka_lag_trend
                .front()
                .is_some_and(|(t, _)| *t < view.at_ms - 60_000)
            {
                self.kafka_lag_trend.pop_front();
            }
        }
        self.kafka_lag = Some(view);
    }

    /// Whether the flow may still run batches.
    pub fn alive(&self) -> bool {
        self.status_known && status_alive(self.status)
    }

    /// The status at `t_ms` (the current one when `t_ms` is after the last change).
    pub fn status_at(&self, t_ms: i64) -> Option<FlowStatus> {
        if !self.status_known {
            return None;
        }
        match self.statuses.iter().rposition(|(t, _)| *t <= t_ms) {
            Some(i) => Some(self.statuses[i].1),
            None => self.statuses.front().map(|(_, s)| *s).or(Some(self.status)),
        }
    }

    /// Index just past the last sample at or before `t_ms`.
    pub fn samples_until(&self, t_ms: i64) -> usize {
        self.samples.partition_point(|s| s.t_ms <= t_ms)
    }

    pub fn set_status(&mut self, status: FlowStatus, at_ms: i64) {
        if self.status_known && self.status == status {
            return;
        }
        let previous = self.status_known.then_some(self.status);
        self.status = status;
        self.status_known = true;
        self.statuses.push_back((at_ms, status));
        while self.statuses.len() > MAX_STATUSES {
            self.statuses.pop_front();
        }
        let (kind, text) = match (previous, status) {
            (_, FlowStatus::Starting) => (EventKind::Start, "starting".to_string()),
            (Some(FlowStatus::Starting) | None, FlowStatus::Running | FlowStatus::Idle) => {
                (EventKind::Start, format!("started ({})", status.label()))
            }
            (_, FlowStatus::Stopped) => (EventKind::Stop, "stopped".to_string()),
            (_, FlowStatus::Failed) => (EventKind::Error, "failed".to_string()),
            (_, FlowStatus::Stopping) => (EventKind::Stop, "stopping".to_string()),
            (_, FlowStatus::Paused) => (EventKind::Status, "paused".to_string()),
            (Some(FlowStatus::Paused), s) => {
                (EventKind::Status, format!("resumed ({})", s.label()))
            }
            // running <-> idle every batch: too frequent for the timeline.
            _ => return,
        };
        self.push_event(at_ms, kind, text);
    }

    pub fn push_event(&mut self, t_ms: i64, kind: EventKind, text: String) {
        let flow = self.name.clone();
        self.insert_event(TimelineEvent {
            t_ms,
            flow,
            kind,
            text,
        });
    }

    /// A pipeline-wide notice on this flow's timeline, labelled [`PIPELINE_EVENT`]
    /// (the all-flows list shows it once).
    pub fn push_notice(&mut self, t_ms: i64, text: String) {
        self.insert_event(TimelineEvent {
            t_ms,
            flow: PIPELINE_EVENT.to_string(),
            kind: EventKind::Operator,
            text,
        });
    }

    fn insert_event(&mut self, event: TimelineEvent) {
        let t_ms = event.t_ms;
        // Keep the timeline in time order (follower re-reads can arrive late).
        let at = self.timeline.partition_point(|e| e.t_ms <= t_ms);
        if at > 0 && self.timeline[at - 1] == event {
            return;
        }
        self.timeline.insert(at, event);
        while self.timeline.len() > MAX_EVENTS {
            self.timeline.pop_front();
        }
    }

    /// Records a health verdict; a change of state goes on the timeline.
    pub fn set_health(&mut self, health: &crate::records::Health, at_ms: i64) {
        let changed = self.health.as_ref().map(|h| h.state) != Some(health.state);
        self.health = Some(health.clone());
        if changed {
            let why = health.evidence.reasons.first().cloned().unwrap_or_default();
            let text = if why.is_empty() {
                format!("health: {}", health.state)
            } else {
                format!("health: {}: {why}", health.state)
            };
            self.push_event(at_ms, EventKind::Health, text);
        }
    }

    /// Adds a progress record; returns false when it was already known.
    pub fn ingest_progress(&mut self, p: &StreamingQueryProgress, retention_ms: i64) -> bool {
        let Some(sample) = Sample::from_progress(p) else {
            return false;
        };
        let at = self.samples.partition_point(|s| s.t_ms < sample.t_ms);
        if self
            .samples
            .iter()
            .skip(at)
            .take_while(|s| s.t_ms == sample.t_ms)
            .any(|s| s.batch_id == sample.batch_id)
        {
            return false;
        }
        let t = sample.t_ms;
        if self.last_run_id.as_deref() != Some(p.run_id.as_str()) && !p.run_id.is_empty() {
            if self.last_run_id.is_some() || self.samples.is_empty() {
                let short: String = p.run_id.chars().take(8).collect();
                let trigger = if p.weir.trigger.is_empty() {
                    String::new()
                } else {
                    format!(" (trigger {})", p.weir.trigger)
                };
                self.push_event(
                    t - p.batch_duration as i64,
                    EventKind::Start,
                    format!("run {short}{trigger}"),
                );
            }
            self.last_run_id = Some(p.run_id.clone());
        }
        if sample.replayed {
            self.push_event(
                t,
                EventKind::Batch,
                format!(
                    "batch {} re-run after a restart{}",
                    sample.batch_id,
                    if p.weir.sink_write_skipped {
                        " (already in the sink: write skipped)"
                    } else {
                        ""
                    }
                ),
            );
        }
        if sample.files_failed > 0 || !p.weir.errors.is_empty() {
            let first = p
                .weir
                .errors
                .first()
                .map(|e| format!(": {}: {}", e.path, e.error))
                .unwrap_or_default();
            let text = format!(
                "batch {}: {} file(s) failed{first}",
                sample.batch_id,
                sample.files_failed.max(p.weir.errors.len() as u64)
            );
            self.push_event(t, EventKind::Error, text.clone());
            self.last_error = Some(LastError { t_ms: t, text });
        }
        if !p.weir.trigger.is_empty() {
            self.trigger = Some(p.weir.trigger.clone());
        }
        let newest = at == self.samples.len();
        if newest && let Some(h) = &p.weir.health {
            self.set_health(h, t);
        }
        self.samples.insert(at, sample);
        if newest {
            self.last_progress = Some(Box::new(p.clone()));
        }
        self.trim(retention_ms);
        true
    }

    /// Drops samples older than `retention_ms` before the newest one, and beyond [`MAX_SAMPLES`].
    pub fn trim(&mut self, retention_ms: i64) {
        if let Some(newest) = self.samples.back().map(|s| s.t_ms) {
            while self
                .samples
                .front()
                .is_some_and(|s| s.t_ms < newest - retention_ms)
            {
                self.samples.pop_front();
            }
        }
        while self.samples.len() > MAX_SAMPLES {
            self.samples.pop_front();
        }
    }

    /// Applies an engine event (progress, status, error, command).
    pub fn ingest_event(&mut self, event: &FlowEvent, retention_ms: i64) {
        match event {
            FlowEvent::Status { status, at_ms, .. } => {
                if matches!(status, FlowStatus::Starting | FlowStatus::Running) {
                    self.restartable = false;
                }
                // A new run (a restart) clears the overview's LAST ERROR; the error stays
                // on the timeline.
                if *status == FlowStatus::Starting && !status_alive(self.status) {
                    self.last_error = None;
                }
                self.set_status(*status, *at_ms)
            }
            FlowEvent::Progress { progress, .. } => {
                self.ingest_progress(progress, retention_ms);
            }
            FlowEvent::Error {
                kind,
                domain,
                retryable,
                message,
                at_ms,
                ..
            } => {
                self.restartable = *kind == crate::error::ErrorKind::SchemaChanged;
                let domain = match domain {
                    Domain::User => "user",
                    Domain::External => "external",
                    Domain::Internal => "internal",
                };
                let retry = if *retryable {
                    "retryable"
                } else {
                    "not retryable"
                };
                let text = format!("{kind} [{domain}, {retry}]: {message}");
                self.push_event(*at_ms, EventKind::Error, text.clone());
                self.last_error = Some(LastError { t_ms: *at_ms, text });
            }
            FlowEvent::Schema { detail, at_ms, .. } => {
                let text = match detail {
                    crate::schema::events::SchemaEvent::SchemaChanged {
                        added,
                        file,
                        version,
                    } => {
                        format!(
                            "schema changed (version {version}): new {} in {file}",
                            added.join(", ")
                        )
                    }
                    crate::schema::events::SchemaEvent::TypeMismatch { field, file, count } => {
                        format!("type mismatch: {count} value(s) of {field} rescued in {file}")
                    }
                    crate::schema::events::SchemaEvent::SinkSchemaMismatch { table, message } => {
                        format!("sink schema mismatch on {table}: {message}")
                    }
                };
                self.push_event(*at_ms, EventKind::Schema, text);
            }
            FlowEvent::Health { health, at_ms, .. } => self.set_health(health, *at_ms),
            FlowEvent::Command { command, at_ms, .. } => {
                self.push_event(
                    *at_ms,
                    EventKind::Operator,
                    format!("{} applied by the engine", command_word(*command)),
                );
                // The engine applies a command while it waits, before it reports the new status
                // (a pause that arrives during a wait is reported only by this event).
                match command {
                    ControlCommand::Pause if self.alive() => {
                        self.set_status(FlowStatus::Paused, *at_ms)
                    }
                    ControlCommand::Resume if self.status == FlowStatus::Paused => {
                        self.set_status(FlowStatus::Idle, *at_ms)
                    }
                    ControlCommand::Stop if self.alive() => {
                        self.set_status(FlowStatus::Stopping, *at_ms)
                    }
                    _ => {}
                }
            }
        }
    }
}

pub fn status_alive(s: FlowStatus) -> bool {
    !matches!(s, FlowStatus::Stopped | FlowStatus::Failed)
}

/// The operator's word for a command (`:pause`, the timeline).
pub fn command_word(c: ControlCommand) -> &'static str {
    match c {
        ControlCommand::Pause => "pause",
        ControlCommand::Resume => "resume",
        ControlCommand::TriggerNow => "trigger now",
        ControlCommand::Stop => "stop",
        ControlCommand::Restart => "restart",
    }
}

/// Parses one line of `progress.jsonl`: a weir record, or a record in Spark's
/// shape whose weir-only or optional fields are missing (defaults fill them).
pub fn parse_progress_line(line: &str) -> Option<StreamingQueryProgress> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    if let Ok(p) = serde_json::from_str::<StreamingQueryProgress>(line) {
        return Some(p);
    }
    let mut value: serde_json::Value = serde_json::from_str(line).ok()?;
    let template = serde_json::to_value(StreamingQueryProgress::default()).ok()?;
    let op_template =
        serde_json::to_value(crate::records::StateOperatorProgress::default()).ok()?;
    let source_template = serde_json::to_value(crate::records::SourceProgress::default()).ok()?;
    fill_defaults(&mut value, &template);
    for (key, t) in [
        ("stateOperators", &op_template),
        ("sources", &source_template),
    ] {
        if let Some(items) = value.get_mut(key).and_then(|v| v.as_array_mut()) {
            for item in items {
                fill_defaults(item, t);
            }
        }
    }
    serde_json::from_value(value).ok()
}

fn fill_defaults(value: &mut serde_json::Value, template: &serde_json::Value) {
    if let (Some(obj), Some(t)) = (value.as_object_mut(), template.as_object()) {
        for (k, tv) in t {
            match obj.get_mut(k) {
                None => {
                    obj.insert(k.clone(), tv.clone());
                }
                Some(v) if v.is_null() && !tv.is_null() && tv.is_object() => {
                    *v = tv.clone();
                }
                Some(v) => fill_defaults(v, tv),
            }
        }
    }
}

/// Merges the flows' timelines (newest first), up to `limit`.
pub fn merged_events(flows: &[FlowModel], until_ms: i64, limit: usize) -> Vec<&TimelineEvent> {
    let mut all: Vec<&TimelineEvent> = flows
        .iter()
        .flat_map(|f| {
            f.timeline
                .iter()
                .rev()
                .filter(move |e| e.t_ms <= until_ms)
                .take(limit)
        })
        .collect();
    all.sort_by_key(|e| std::cmp::Reverse(e.t_ms));
    // A pipeline-wide notice sits on every flow's timeline: list it once.
    let mut seen = std::collections::HashSet::new();
    all.retain(|e| e.flow != PIPELINE_EVENT || seen.insert((e.t_ms, e.text.as_str())));
    all.truncate(limit);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn record(batch: u64, ts: &str, rows: u64, backlog: u64) -> StreamingQueryProgress {
        let mut p = StreamingQueryProgress {
            id: "q".into(),
            run_id: "r1".into(),
            name: "f".into(),
            timestamp: ts.into(),
            batch_id: batch,
            batch_duration: 1000,
            num_input_rows: rows,
            input_rows_per_second: rows as f64,
            processed_rows_per_second: rows as f64,
            ..Default::default()
        };
        let mut source = crate::records::SourceProgress::default();
        source
            .metrics
            .insert("numFilesOutstanding".into(), backlog.to_string());
        source
            .metrics
            .insert("numBytesOutstanding".into(), (backlog * 1000).to_string());
        p.sources.push(source);
        p.weir.num_files = 2;
        p
    }

    #[test]
    fn samples_are_deduplicated_ordered_and_bounded() {
        let mut f = FlowModel::new("f");
        assert!(f.ingest_progress(&record(1, "2026-01-01T00:00:10.000Z", 5, 3), 60_000));
        assert!(f.ingest_progress(&record(0, "2026-01-01T00:00:00.000Z", 5, 4), 60_000));
        assert!(!f.ingest_progress(&record(1, "2026-01-01T00:00:10.000Z", 5, 3), 60_000));
        assert_eq!(
            f.samples.iter().map(|s| s.batch_id).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(f.samples[1].backlog_files, Some(3));
        assert_eq!(f.samples[1].backlog_bytes, Some(3000));
        assert_eq!(f.last_progress.as_ref().unwrap().batch_id, 1);
        assert!(f.ingest_progress(&record(2, "2026-01-01T00:05:00.000Z", 5, 0), 60_000));
        assert_eq!(
            f.samples.len(),
            1,
            "retention counts back from the newest sample"
        );
    }

    #[test]
    fn reads_a_real_spark_record() {
        let text = include_str!("../../tests/fixtures/spark/progress-example.json");
        let one_line: String =
            serde_json::to_string(&serde_json::from_str::<serde_json::Value>(text).unwrap())
                .unwrap();
        let p = parse_progress_line(&one_line).expect("spark record");
        let s = Sample::from_progress(&p).unwrap();
        assert_eq!(s.batch_id, 5);
        assert_eq!(s.state_rows, Some(9));
        assert_eq!(s.dropped_by_watermark, Some(5));
        assert_eq!(s.phases, [178, 41, 1743, 128, 137]);
        assert!(s.watermark_ms.is_some() && s.max_event_ms.is_some());
        assert_eq!(s.end_offset.as_deref(), Some("5"));
        assert_eq!(parse_progress_line("{\"batchId\": 1, \"timest"), None);
    }

    #[test]
    fn the_epoch_watermark_of_a_first_batch_is_no_watermark() {
        let mut p = record(0, "2026-01-01T00:00:00.000Z", 5, 0);
        p.event_time
            .insert("watermark".into(), "1970-01-01T00:00:00.000Z".into());
        assert_eq!(Sample::from_progress(&p).unwrap().watermark_ms, None);
        p.event_time
            .insert("watermark".into(), "2013-01-01T10:00:00.000Z".into());
        assert_eq!(
            Sample::from_progress(&p).unwrap().watermark_ms,
            Some(1_357_034_400_000)
        );
    }

    #[test]
    fn status_history_and_timeline() {
        let mut f = FlowModel::new("f");
        assert_eq!(f.status_at(0), None);
        f.set_status(FlowStatus::Starting, 10);
        f.set_status(FlowStatus::Running, 20);
        f.set_status(FlowStatus::Idle, 30);
        f.set_status(FlowStatus::Paused, 40);
        f.set_status(FlowStatus::Idle, 50);
        assert_eq!(f.status_at(35), Some(FlowStatus::Idle));
        assert_eq!(f.status_at(45), Some(FlowStatus::Paused));
        let texts: Vec<_> = f.timeline.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(
            texts,
            ["starting", "started (running)", "paused", "resumed (idle)"]
        );
    }
}
