//! The console's state; `update` (in `update.rs`) is the one function that changes it
//! for an action.
//!
//! Inputs come from two places and take one path: keys become
//! [`Action`]s (see `keys`), and engine events or file-follower reports
//! become [`Report`]s. `update` returns [`Effect`]s (commands for the
//! engine) instead of performing them, so it can be driven headless.

use crate::engine::control::{FlowEvent, FlowStatus};
use crate::records::StreamingQueryProgress;

use super::model::{CheckpointBatches, EventKind, FlowModel};
use super::pane::Console;
use super::theme::Theme;

// The panes' states and the vocabulary `update` shares with them, where callers of
// the console have always found them.
pub use super::action::{MaintenanceKind, PeekKind};
pub use super::model::ReplayClock;
pub use super::pane::confirm::Confirm;
pub use super::pane::detail::{DetailView, Pane};
pub use super::pane::dry_run::ActionDialog;
pub use super::pane::maintenance::{MaintenanceDialog, MaintenancePlan};
pub use super::pane::overview::OverviewView;
pub use super::pane::playbook::PlaybookView;
pub use super::pane::prompt::PromptKind;
pub use super::pane::sql::{SqlResult, SqlRun, SqlState, SqlView};
pub use super::pane::{Effect, Message, Mode, Overlay};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Overview,
    Detail,
}

/// A frozen view: taken at `at_ms`, showing `back_ms` before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freeze {
    pub at_ms: i64,
    pub back_ms: i64,
}

/// How long a message stays in the status line.
pub const MESSAGE_MS: i64 = 8_000;
/// The time windows `+`/`-` step through.
pub const WINDOWS_MS: [i64; 6] = [
    60_000,
    300_000,
    900_000,
    1_800_000,
    3_600_000,
    6 * 3_600_000,
];
pub const DEFAULT_WINDOW_MS: i64 = 300_000;

/// Something an engine or a file follower reports.
#[derive(Debug, Clone)]
pub enum Report {
    Engine(FlowEvent),
    /// A pipeline-wide notice (e.g. a demo fault injected): on every flow's timeline.
    Notice {
        text: String,
        at_ms: i64,
    },
    /// A progress record read from `_weir/progress.jsonl`.
    Progress {
        flow: String,
        progress: Box<StreamingQueryProgress>,
    },
    Batches {
        flow: String,
        batches: CheckpointBatches,
    },
    Schema {
        flow: String,
        version: u64,
        at_ms: i64,
        text: String,
    },
    /// Attach: who holds the checkpoint lock (`None`: no process runs the flow).
    Holder {
        flow: String,
        holder: Option<String>,
        at_ms: i64,
    },
    /// A Kafka flow's per-partition lag, measured against the cluster (or why not).
    KafkaLag {
        flow: String,
        at_ms: i64,
        lag: Result<Vec<crate::source::kafka::lag::PartitionLag>, String>,
    },
    /// A timeline entry from a follower (`attach --spark`: a query started, stopped, went idle).
    Event {
        flow: String,
        at_ms: i64,
        kind: EventKind,
        text: String,
    },
    /// A checkpoint file could not be read.
    Problem {
        flow: String,
        at_ms: i64,
        text: String,
    },
    /// Every flow task of `run` has returned.
    EngineDone,
    /// The replay's progress (`weir demo`): its simulated clock.
    Replay(crate::demo::replay::ReplayStatus),
    /// `attach --spark`: a query's row, new (appended at `index`) or renamed / given paths.
    SparkRow {
        index: usize,
        info: Box<crate::spark::feed::QueryInfo>,
    },
    /// `attach --spark`: how much of the event logs' history is read (percent of their
    /// bytes); `None` once it is all read.
    Loading {
        percent: Option<u8>,
    },
    /// A query or peek of the SQL pane finished (`Err`: why it gave no rows).
    Sql {
        id: u64,
        result: Result<SqlResult, String>,
    },
}

#[derive(Debug, Clone)]
pub struct App {
    pub mode: Mode,
    /// `pipeline.toml`, or the checkpoints attached to.
    pub title: String,
    /// The pipeline file the flows come from (`run`; for the drill action).
    pub pipeline_path: Option<std::path::PathBuf>,
    pub theme: Theme,
    pub flows: Vec<FlowModel>,
    pub view: View,
    /// Index in `flows` of the selected (overview) or shown (detail) flow.
    pub selected: usize,
    /// The overview pane's state: the events list's focus and scroll.
    pub overview: OverviewView,
    /// The detail pane's state: its focused pane, zoom, scroll offsets.
    pub detail: DetailView,
    pub overlay: Overlay,
    pub filter: String,
    pub freeze: Option<Freeze>,
    pub window_ms: i64,
    pub retention_ms: i64,
    /// The clock, as of the last tick (injected: tests set it).
    pub now_ms: i64,
    pub message: Option<Message>,
    pub quitting: bool,
    pub engine_done: bool,
    pub exit: bool,
    pub abort: bool,
    /// Engine events dropped because the console lagged.
    pub events_dropped: u64,
    /// The SQL pane's tables, history and limits.
    pub sql: SqlState,
    /// A replay's simulated clock (`weir demo`): delays are measured against it.
    pub replay_clock: Option<ReplayClock>,
    /// `attach --spark`: the event logs' history is still being read (percent of their
    /// bytes); health verdicts wait for the whole history.
    pub loading: Option<u8>,
}

impl App {
    pub fn new(
        mode: Mode,
        title: impl Into<String>,
        flows: Vec<FlowModel>,
        theme: Theme,
        retention_ms: i64,
        now_ms: i64,
    ) -> Self {
        App {
            mode,
            title: title.into(),
            pipeline_path: None,
            theme,
            flows,
            view: View::Overview,
            selected: 0,
            overview: OverviewView::default(),
            detail: DetailView::default(),
            overlay: Overlay::None,
            filter: String::new(),
            freeze: None,
            window_ms: DEFAULT_WINDOW_MS.min(retention_ms.max(WINDOWS_MS[0])),
            retention_ms,
            now_ms,
            message: None,
            quitting: false,
            engine_done: false,
            exit: false,
            abort: false,
            events_dropped: 0,
            sql: SqlState::default(),
            replay_clock: None,
            loading: None,
        }
    }

    #[cfg(test)]
    pub fn for_tests(mode: Mode, names: &[&str]) -> Self {
        let flows = names.iter().map(|n| FlowModel::new(*n)).collect();
        App::new(mode, "test", flows, Theme::default(), 1_800_000, 0)
    }

    /// The instant the view shows: now, or the frozen instant.
    pub fn as_of(&self) -> i64 {
        match self.freeze {
            Some(f) => f.at_ms - f.back_ms,
            None => self.now_ms,
        }
    }

    pub fn current_flow(&self) -> Option<&FlowModel> {
        self.flows.get(self.selected)
    }

    /// The flows the overview lists (the filter applies), as indices.
    pub fn visible_flows(&self) -> Vec<usize> {
        match self.view {
            View::Overview => super::pane::overview::visible(&self.flows, &self.filter),
            View::Detail => (0..self.flows.len()).collect(),
        }
    }

    /// A flow by exact name or unique prefix.
    pub fn resolve_flow(&self, name: &str) -> Result<String, String> {
        if let Some(f) = self.flows.iter().find(|f| f.name == name) {
            return Ok(f.name.clone());
        }
        let hits: Vec<&str> = self
            .flows
            .iter()
            .filter(|f| f.name.starts_with(name))
            .map(|f| f.name.as_str())
            .collect();
        match hits.as_slice() {
            [one] => Ok((*one).to_string()),
            [] => Err(format!(
                "no flow named {name}; flows: {}",
                self.flows
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            many => Err(format!("{name} matches {}", many.join(", "))),
        }
    }

    pub(super) fn flow_index(&self, name: &str) -> Option<usize> {
        self.flows.iter().position(|f| f.name == name)
    }

    pub fn say(&mut self, text: impl Into<String>) {
        self.message = Some(Message {
            text: text.into(),
            bad: false,
            at_ms: self.now_ms,
        });
    }

    pub fn complain(&mut self, text: impl Into<String>) {
        self.message = Some(Message {
            text: text.into(),
            bad: true,
            at_ms: self.now_ms,
        });
    }

    /// The clock moved.
    pub fn tick(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
        if self
            .message
            .as_ref()
            .is_some_and(|m| now_ms - m.at_ms > MESSAGE_MS)
        {
            self.message = None;
        }
    }

    /// Whether the event loop should end.
    pub fn should_exit(&self) -> bool {
        self.exit
    }

    /// Applies an engine event or a follower's report.
    pub fn ingest(&mut self, input: Report) {
        let retention = self.retention_ms;
        match input {
            Report::Notice { text, at_ms } => {
                for f in &mut self.flows {
                    f.push_notice(at_ms, text.clone());
                }
            }
            Report::Engine(event) => {
                let name = match &event {
                    FlowEvent::Status { flow, .. }
                    | FlowEvent::Progress { flow, .. }
                    | FlowEvent::Error { flow, .. }
                    | FlowEvent::Schema { flow, .. }
                    | FlowEvent::Health { flow, .. }
                    | FlowEvent::Command { flow, .. } => flow.clone(),
                };
                if let Some(i) = self.flow_index(&name) {
                    self.flows[i].ingest_event(&event, retention);
                }
            }
            Report::Progress { flow, progress } => {
                if let Some(i) = self.flow_index(&flow) {
                    self.flows[i].ingest_progress(&progress, retention);
                }
            }
            Report::KafkaLag { flow, at_ms, lag } => {
                if let Some(i) = self.flow_index(&flow) {
                    self.flows[i].set_kafka_lag(super::model::KafkaLagView { at_ms, lag });
                }
            }
            Report::Batches { flow, batches } => {
                if let Some(i) = self.flow_index(&flow) {
                    self.flows[i].batches = batches;
                    self.derive_attach_status(i);
                }
            }
            Report::Schema {
                flow,
                version,
                at_ms,
                text,
            } => {
                if let Some(i) = self.flow_index(&flow) {
                    self.flows[i].push_event(
                        at_ms,
                        EventKind::Schema,
                        format!("schema version {version}: {text}"),
                    );
                }
            }
            Report::Holder {
                flow,
                holder,
                at_ms,
            } => {
                if let Some(i) = self.flow_index(&flow) {
                    let f = &mut self.flows[i];
                    let was_alive = f.alive();
                    match (&holder, was_alive) {
                        (Some(h), false) => {
                            f.push_event(at_ms, EventKind::Start, format!("run by {h}"))
                        }
                        (None, true) => f.push_event(
                            at_ms,
                            EventKind::Stop,
                            "the process released the checkpoint".into(),
                        ),
                        _ => {}
                    }
                    let status = if holder.is_some() {
                        FlowStatus::Idle
                    } else {
                        FlowStatus::Stopped
                    };
                    if !f.status_known || f.alive() != holder.is_some() {
                        f.statuses.push_back((at_ms, status));
                        f.status = status;
                        f.status_known = true;
                    }
                    self.derive_attach_status(i);
                }
            }
            Report::Event {
                flow,
                at_ms,
                kind,
                text,
            } => {
                if let Some(i) = self.flow_index(&flow) {
                    self.flows[i].push_event(at_ms, kind, text);
                }
            }
            Report::Problem { flow, at_ms, text } => {
                if let Some(i) = self.flow_index(&flow) {
                    self.flows[i].push_event(at_ms, EventKind::Error, text);
                }
            }
            Report::Sql { id, result } => {
                if let Overlay::Sql(v) = &mut self.overlay
                    && matches!(v.run, SqlRun::Running { id: running, .. } if running == id)
                {
                    v.run = match result {
                        Ok(r) => SqlRun::Done(r),
                        Err(e) => SqlRun::Failed(e),
                    };
                    v.row = 0;
                    v.col = 0;
                }
            }
            Report::Replay(status) => self.replay_clock = Some(ReplayClock::of(&status)),
            Report::SparkRow { index, info } => self.apply_spark_row(index, &info),
            Report::Loading { percent } => self.loading = percent,
            Report::EngineDone => {
                self.engine_done = true;
                if self.quitting {
                    self.exit = true;
                } else {
                    self.say("all flows have returned; q quits");
                }
            }
        }
    }

    /// `attach --spark`: a query's row, new (appended) or changed (renamed, its paths learned).
    fn apply_spark_row(&mut self, index: usize, info: &crate::spark::feed::QueryInfo) {
        if index == self.flows.len() {
            let mut m = FlowModel::new(&info.name);
            m.checkpoint.clone_from(&info.checkpoint);
            m.spark = true;
            self.flows.push(m);
        }
        let Some(old) = self.flows.get(index).map(|f| f.name.clone()) else {
            return;
        };
        if old != info.name {
            self.rename_flow(&old, &info.name);
        }
        if let Some(f) = self.flows.get_mut(index) {
            f.source_path.clone_from(&info.source_path);
            f.sink_path.clone_from(&info.sink_path);
        }
    }

    /// Renames a row (its timeline entries too).
    fn rename_flow(&mut self, from: &str, to: &str) {
        for f in &mut self.flows {
            if f.name == from {
                f.name = to.to_string();
                for e in &mut f.timeline {
                    if e.flow == from {
                        e.flow = to.to_string();
                    }
                }
            }
        }
    }

    /// Attach: a held checkpoint with a planned, uncommitted batch is running, else idle.
    fn derive_attach_status(&mut self, i: usize) {
        if self.mode != Mode::Attach {
            return;
        }
        let now = self.now_ms;
        let f = &mut self.flows[i];
        if !f.alive() {
            return;
        }
        let status = if f.batches.pending().is_some() {
            FlowStatus::Running
        } else {
            FlowStatus::Idle
        };
        if f.status != status {
            f.status = status;
            f.statuses.push_back((now, status));
        }
    }
}

pub use super::pane::overview::OVERVIEW_EVENTS;

/// Merges the flows' timelines (newest first), up to `limit`.
pub fn merged_events(app: &App, until_ms: i64, limit: usize) -> Vec<&super::model::TimelineEvent> {
    super::model::merged_events(&app.flows, until_ms, limit)
}

impl Console for App {
    fn mode(&self) -> Mode {
        self.mode
    }
    fn title(&self) -> &str {
        &self.title
    }
    fn flows(&self) -> &[FlowModel] {
        &self.flows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_goes_on_every_flow_timeline() {
        let mut app = App::for_tests(Mode::Run, &["a", "b"]);
        app.ingest(Report::Notice {
            text: "fault injected: small-files: 2000 files".into(),
            at_ms: 5,
        });
        for f in &app.flows {
            assert!(
                f.timeline
                    .iter()
                    .any(|e| e.text.contains("fault injected: small-files")),
                "{}",
                f.name
            );
        }
        let listed: Vec<_> = merged_events(&app, 10, 50)
            .into_iter()
            .filter(|e| e.text.contains("small-files"))
            .collect();
        assert_eq!(listed.len(), 1, "the all-flows list shows a notice once");
        assert_eq!(listed[0].flow, super::super::model::PIPELINE_EVENT);
    }

    #[test]
    fn the_playbook_view_fills_the_flow_table_path() {
        let mut app = App::for_tests(Mode::Run, &["a"]);
        app.flows[0].sink_path = Some(std::path::PathBuf::from("/srv/lake/silver"));
        let view = PlaybookView {
            flow: "a".into(),
            state: crate::records::HealthState::SinkUnavailable,
            cursor: 0,
            checked: Default::default(),
        };
        let (text, _) = view.rendered(&app);
        assert!(text.contains("Table path: /srv/lake/silver"), "{text}");
        assert!(text.contains("ls -ld /srv/lake/silver"), "{text}");
    }
}
