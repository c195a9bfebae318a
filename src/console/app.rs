//! The console's state; `update` (in `update.rs`) is the one function that changes it
//! for an action.
//!
//! Inputs come from two places and take one path: keys become
//! [`Action`]s (see `keys`), and engine events or file-follower reports
//! become [`Report`]s. `update` returns [`Effect`]s (commands for the
//! engine) instead of performing them, so it can be driven headless.

use crate::engine::control::{ControlCommand, FlowEvent, FlowStatus};
use crate::records::StreamingQueryProgress;

use super::model::{CheckpointBatches, EventKind, FlowModel, command_word};
use super::theme::Theme;

/// `run` controls its flows; `attach` only watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Run,
    Attach,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Overview,
    Detail,
}

/// The panes of the flow detail, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Rates,
    Backlog,
    Watermark,
    State,
    Durations,
    History,
    Timeline,
}

impl Pane {
    pub const ALL: [Pane; 7] = [
        Pane::Rates,
        Pane::Backlog,
        Pane::Watermark,
        Pane::State,
        Pane::Durations,
        Pane::History,
        Pane::Timeline,
    ];

    pub fn index(self) -> usize {
        Pane::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }

    pub fn title(self) -> &'static str {
        match self {
            Pane::Rates => "Rates (rows/s)",
            Pane::Backlog => "Backlog",
            Pane::Watermark => "Watermark",
            Pane::State => "State",
            Pane::Durations => "Batch durations",
            Pane::History => "Checkpoint history",
            Pane::Timeline => "Timeline",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Pane::Rates => "rates",
            Pane::Backlog => "backlog",
            Pane::Watermark => "watermark",
            Pane::State => "state",
            Pane::Durations => "durations",
            Pane::History => "history",
            Pane::Timeline => "timeline",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    Command,
    Filter,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    None,
    Help {
        scroll: usize,
    },
    Prompt {
        kind: PromptKind,
        text: String,
    },
    Confirm(Confirm),
    Playbook(PlaybookView),
    /// A checkpoint action's dry-run, waiting for its (typed) confirmation.
    Action(ActionDialog),
    /// The SQL pane (`:sql`) or a peek at a flow's rows (`o`, `i`).
    Sql(SqlView),
    /// The pipeline graph (`x`, `:graph`): the row under the cursor.
    Graph {
        cursor: usize,
    },
    /// A table maintenance's dry run (`O`, `V`), waiting for y/n.
    Maintenance(MaintenanceDialog),
}

/// Delta table maintenance from a flow's detail (`weir table optimize|vacuum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaintenanceKind {
    Optimize,
    Vacuum,
}

impl MaintenanceKind {
    pub fn word(self) -> &'static str {
        match self {
            MaintenanceKind::Optimize => "optimize",
            MaintenanceKind::Vacuum => "vacuum",
        }
    }
}

/// What a maintenance would do: the dry run shown before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaintenancePlan {
    Optimize(Box<crate::maintenance::OptimizePlan>),
    Vacuum(Box<crate::maintenance::VacuumPlan>),
}

impl MaintenancePlan {
    pub fn kind(&self) -> MaintenanceKind {
        match self {
            MaintenancePlan::Optimize(_) => MaintenanceKind::Optimize,
            MaintenancePlan::Vacuum(_) => MaintenanceKind::Vacuum,
        }
    }

    /// The dry run, as `weir table optimize|vacuum` prints it.
    pub fn render(&self) -> String {
        match self {
            MaintenancePlan::Optimize(p) => p.render(),
            MaintenancePlan::Vacuum(p) => p.render(),
        }
    }

    /// `None`: it may run; else why there is nothing to run.
    pub fn blocked(&self) -> Option<&'static str> {
        match self {
            MaintenancePlan::Optimize(p) if p.is_noop() => Some("no partition has two small files"),
            MaintenancePlan::Vacuum(p) if !p.refused.is_empty() => Some("refused"),
            MaintenancePlan::Vacuum(p) if p.files.is_empty() => Some("no file to delete"),
            _ => None,
        }
    }
}

/// A table maintenance's dry run, shown until y (run it) or n (nothing changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceDialog {
    pub flow: String,
    pub plan: MaintenancePlan,
}

/// What a peek shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeekKind {
    /// The rows the sink table's last commit added.
    Output,
    /// The rows of the flow's last input files.
    Input,
}

/// The SQL pane: the query being typed, the last result, where the view is scrolled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlView {
    /// `Some`: a peek at a flow's rows (no query line).
    pub peek: Option<(String, PeekKind)>,
    pub input: String,
    /// While browsing the history with Up/Down: the index shown.
    pub history_pos: Option<usize>,
    pub run: SqlRun,
    /// First row and first column shown.
    pub row: usize,
    pub col: usize,
}

impl SqlView {
    pub fn new() -> Self {
        SqlView {
            peek: None,
            input: String::new(),
            history_pos: None,
            run: SqlRun::Idle,
            row: 0,
            col: 0,
        }
    }
}

impl Default for SqlView {
    fn default() -> Self {
        SqlView::new()
    }
}

/// Where the pane's query is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlRun {
    Idle,
    Running { id: u64, started_ms: i64 },
    Done(SqlResult),
    Failed(String),
}

/// A query's rows as text, ready to draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlResult {
    /// What the rows are (a peek's title), if more than the query says.
    pub title: Option<String>,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Widest value per column (characters, cut values included).
    pub widths: Vec<usize>,
    /// `12 rows in 35 ms` / `1,000 rows shown (truncated: ...) in 2.1 s`.
    pub summary: String,
    pub truncated: bool,
    /// How long it took, ms.
    pub elapsed_ms: u64,
}

/// The console's SQL: the tables it can query, the history, the limits.
#[derive(Debug, Clone, Default)]
pub struct SqlState {
    pub flows: Vec<crate::sql::FlowTables>,
    /// The names a query can use, as written.
    pub table_names: Vec<String>,
    /// Queries run, oldest first (Up/Down).
    pub history: Vec<String>,
    pub limits: crate::sql::Limits,
    /// The id of the next query or peek (a late answer to an older one is ignored).
    pub next_id: u64,
}

impl SqlState {
    /// The console's SQL over these flows' tables, with the history so far.
    pub fn new(flows: Vec<crate::sql::FlowTables>, history: Vec<String>) -> Self {
        let table_names = crate::sql::name_tables(&flows)
            .entries
            .iter()
            .map(|e| e.name.sql())
            .collect();
        SqlState {
            flows,
            table_names,
            history,
            limits: crate::sql::Limits {
                // The console shares the machine with the flows.
                partitions: 2,
                ..Default::default()
            },
            next_id: 1,
        }
    }
}

/// The dry-run of a checkpoint action shown before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDialog {
    pub flow: String,
    pub plan: crate::checkpoint_tools::actions::ActionPlan,
    /// What the operator typed so far.
    pub typed: String,
    /// What must be typed (the checkpoint directory's name) when the plan needs it.
    pub word: String,
    /// The playbook to return to.
    pub back: PlaybookView,
}

/// The playbook overlay of one flow: which step is selected, which are checked off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaybookView {
    pub flow: String,
    pub state: crate::records::HealthState,
    pub cursor: usize,
    pub checked: std::collections::BTreeSet<usize>,
}

impl PlaybookView {
    /// The playbook text with the flow's evidence filled in, and its steps.
    pub fn rendered(&self, app: &App) -> (String, crate::records::Health) {
        let flow = app.flows.iter().find(|f| f.name == self.flow);
        let health = flow.and_then(|f| f.health.clone()).unwrap_or_default();
        let cx = crate::playbook::Context {
            flow: Some(self.flow.clone()),
            pipeline: (app.mode == Mode::Run).then(|| app.title.clone()),
            checkpoint: flow
                .and_then(|f| f.checkpoint.as_ref())
                .map(|p| p.display().to_string()),
            source_path: flow
                .and_then(|f| f.source_path.as_ref())
                .map(|p| p.display().to_string()),
            sink_path: flow
                .and_then(|f| f.sink_path.as_ref())
                .map(|p| p.display().to_string()),
            spark: flow.is_some_and(|f| f.spark),
        };
        (crate::playbook::render(self.state, &health, &cx), health)
    }
}

/// A question asked before an action that cannot be undone from the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    StopFlow(String),
    RestartFlow(String),
    Drill(std::path::PathBuf),
}

impl Confirm {
    pub fn question(&self) -> String {
        match self {
            Confirm::StopFlow(f) => format!(
                "stop flow {f} after its running batch? It cannot be restarted from this console. (y/n)"
            ),
            Confirm::Drill(p) => format!(
                "run a restart drill on a copy of {}'s input? Copies of the flows are crashed at every failpoint and at random, in a new temporary directory; these checkpoints and tables are not touched. (y/n)",
                p.display()
            ),
            Confirm::RestartFlow(f) => format!(
                "restart flow {f}? Its source gained new columns; the wider schema is recorded and the restart re-reads the stopped batch with it, nothing lost. (y/n)"
            ),
        }
    }
}

/// A frozen view: taken at `at_ms`, showing `back_ms` before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freeze {
    pub at_ms: i64,
    pub back_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub text: String,
    pub bad: bool,
    pub at_ms: i64,
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

/// What `update` asks the outside world to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Command {
        flow: String,
        command: ControlCommand,
    },
    StopAll,
    /// Plan a checkpoint action (its dry-run) for a flow's checkpoint.
    PlanAction {
        view: PlaybookView,
        checkpoint: std::path::PathBuf,
        action: crate::playbook::StepAction,
    },
    /// Run a confirmed plan.
    RunAction {
        flow: String,
        plan: crate::checkpoint_tools::actions::ActionPlan,
    },
    /// Run a restart drill on a copy of the pipeline's input, in the background.
    Drill {
        pipeline: std::path::PathBuf,
    },
    /// Run a read-only query off the UI thread (its answer comes back as `Report::Sql`).
    RunSql {
        id: u64,
        sql: String,
    },
    /// Peek at a flow's latest output or input rows, off the UI thread.
    Peek {
        id: u64,
        flow: String,
        kind: PeekKind,
    },
    /// Cancel the running query or peek (the pane was closed).
    CancelSql,
    /// Compute the dry run of a maintenance of the flow's sink table.
    PlanMaintenance {
        flow: String,
        kind: MaintenanceKind,
    },
    /// Run a confirmed maintenance, in the background (its outcome goes on the timeline).
    RunMaintenance {
        flow: String,
        plan: MaintenancePlan,
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
    /// Overview: whether the events list (not the flows table) has the focus.
    pub overview_events: bool,
    pub focus: Pane,
    pub zoom: bool,
    /// Scroll offset per detail pane, and of the overview's events list.
    pub scroll: [usize; 7],
    pub events_scroll: usize,
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
            overview_events: false,
            focus: Pane::Rates,
            zoom: false,
            scroll: [0; 7],
            events_scroll: 0,
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
        let f = self.filter.to_lowercase();
        (0..self.flows.len())
            .filter(|i| {
                self.view != View::Overview
                    || f.is_empty()
                    || self.flows[*i].name.to_lowercase().contains(&f)
            })
            .collect()
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
            Report::SparkRow { index, info } => super::spark::apply_row(self, index, &info),
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

    pub(super) fn scroll_by(&mut self, delta: isize) {
        let slot = match (self.view, self.overview_events) {
            (View::Overview, true) => &mut self.events_scroll,
            (View::Overview, false) => {
                self.move_selection(delta);
                return;
            }
            (View::Detail, _) => &mut self.scroll[self.focus.index()],
        };
        *slot = slot.saturating_add_signed(delta);
    }

    pub(super) fn move_selection(&mut self, delta: isize) {
        let visible = self.visible_flows();
        if visible.is_empty() {
            return;
        }
        let pos = visible
            .iter()
            .position(|i| *i == self.selected)
            .unwrap_or(0) as isize;
        let next = (pos + delta).clamp(0, visible.len() as isize - 1) as usize;
        self.selected = visible[next];
    }

    pub(super) fn control(
        &mut self,
        flow: String,
        command: ControlCommand,
        effects: &mut Vec<Effect>,
    ) {
        if self.mode == Mode::Attach {
            self.complain("weir attach is read-only: flows are controlled where they run");
            return;
        }
        let Some(i) = self.flow_index(&flow) else {
            self.complain(format!("no flow named {flow}"));
            return;
        };
        let now = self.now_ms;
        self.flows[i].push_event(
            now,
            EventKind::Operator,
            format!("{} requested by the operator", command_word(command)),
        );
        self.say(format!("{flow}: {} requested", command_word(command)));
        effects.push(Effect::Command { flow, command });
    }
}

/// How many events are kept in the overview list (all flows merged).
pub const OVERVIEW_EVENTS: usize = 500;

/// Merges the flows' timelines (newest first), up to `limit`.
pub fn merged_events(app: &App, until_ms: i64, limit: usize) -> Vec<&super::model::TimelineEvent> {
    let mut all: Vec<&super::model::TimelineEvent> = app
        .flows
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
    all.retain(|e| {
        e.flow != super::model::PIPELINE_EVENT || seen.insert((e.t_ms, e.text.as_str()))
    });
    all.truncate(limit);
    all
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
