//! The console's panes, one file each: its state, its `update` (what an action does
//! while it has the keyboard), its snapshot type (what a frame shows of it, built by
//! its `snap`) and its `draw`.
//!
//! | pane | file | shown by |
//! |---|---|---|
//! | overview: flows and events | `overview.rs` | the start, Esc from a detail |
//! | a flow's detail: seven panes | `detail.rs` | Enter on a flow, `:flow NAME` |
//! | help | `help.rs` | `?`, `:help` |
//! | command line and filter | `prompt.rs` | `:`, `/` |
//! | a question before an action | `confirm.rs` | `S`, `R`, `D`, `:stop NAME` |
//! | playbook | `playbook.rs` | `b` |
//! | a checkpoint action's dry run | `dry_run.rs` | `x` on a playbook step |
//! | table maintenance's dry run | `maintenance.rs` | `O`, `V` |
//! | SQL and peeks | `sql.rs` | `:sql`, `o`, `i` |
//! | pipeline graph | `graph.rs` | `x`, `:graph` |
//!
//! [`Overlay`] is the list of the panes over the view (all but overview and detail);
//! `App` holds the open one. The panes sit below `app` (as gitui's components sit below
//! its `App`): a pane's `update` reaches the rest of the console only through the
//! [`Cx`] it is handed and says what comes next with a [`Next`]; its `snap` reads a
//! [`SnapCx`] or takes what it shows as arguments.
//!
//! Adding a pane: a new file here with the four parts, its variant in [`Overlay`] and
//! [`OverlaySnap`] with their arms beside them below, its context and binding rows in
//! `keys.rs`, the action that opens it in `update.rs` (`docs/architecture.md`, "Adding
//! a pane").

pub mod confirm;
pub mod detail;
pub mod dry_run;
pub mod graph;
pub mod help;
pub mod maintenance;
pub mod overview;
pub mod playbook;
pub mod prompt;
pub mod sql;

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::Span;
use ratatui::widgets::{Block, Borders};

use super::action::Action;

use super::model::{EventKind, FlowModel, ReplayClock, command_word};
use super::theme::{Role, Theme};
use crate::engine::control::{ControlCommand, FlowStatus};
use crate::records::HealthState;

/// `run` controls its flows; `attach` only watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Run,
    Attach,
}

/// The pane over the body, if any; each variant holds its pane's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    None,
    Help(help::HelpView),
    /// The command line (`:`) or the filter (`/`), in the status line.
    Prompt(prompt::Prompt),
    Confirm(confirm::Confirm),
    Playbook(playbook::PlaybookView),
    /// A checkpoint action's dry-run, waiting for its (typed) confirmation.
    Action(dry_run::ActionDialog),
    /// The SQL pane (`:sql`) or a peek at a flow's rows (`o`, `i`).
    Sql(sql::SqlView),
    /// The pipeline graph (`x`, `:graph`).
    Graph(graph::GraphView),
    /// A table maintenance's dry run (`O`, `V`), waiting for y/n.
    Maintenance(maintenance::MaintenanceDialog),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub text: String,
    pub bad: bool,
    pub at_ms: i64,
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
        view: playbook::PlaybookView,
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
        kind: super::action::PeekKind,
    },
    /// Cancel the running query or peek (the pane was closed).
    CancelSql,
    /// Compute the dry run of a maintenance of the flow's sink table.
    PlanMaintenance {
        flow: String,
        kind: super::action::MaintenanceKind,
    },
    /// Run a confirmed maintenance, in the background (its outcome goes on the timeline).
    RunMaintenance {
        flow: String,
        plan: maintenance::MaintenancePlan,
    },
}

impl Overlay {
    /// The open pane takes an action first; [`Next::Pass`]: the view under it takes it.
    pub fn update(&mut self, cx: &mut Cx, action: &Action) -> Next {
        match self {
            Overlay::None => Next::Pass,
            Overlay::Help(v) => help::update(v, action),
            Overlay::Prompt(p) => prompt::update(p, cx.filter, action),
            Overlay::Confirm(c) => confirm::update(c, cx, action),
            Overlay::Playbook(v) => playbook::update(v, cx, action),
            Overlay::Action(d) => dry_run::update(d, cx, action),
            Overlay::Sql(v) => sql::update(v, cx, action),
            Overlay::Graph(v) => graph::update(v, cx, action),
            Overlay::Maintenance(d) => maintenance::update(d, cx, action),
        }
    }

    /// The open pane's frame; `help`: the live bindings and commands (`keys::help`).
    pub fn snap(&self, cx: &SnapCx, help: impl FnOnce() -> help::HelpText) -> OverlaySnap {
        match self {
            Overlay::None => OverlaySnap::None,
            Overlay::Help(v) => OverlaySnap::Help(help::snap(v, help())),
            Overlay::Prompt(p) => OverlaySnap::Prompt(prompt::snap(p)),
            Overlay::Confirm(c) => OverlaySnap::Confirm(confirm::snap(c)),
            Overlay::Playbook(v) => OverlaySnap::Playbook(Box::new(playbook::snap(v, cx))),
            Overlay::Action(d) => OverlaySnap::Action(dry_run::snap(d)),
            Overlay::Maintenance(d) => OverlaySnap::Action(maintenance::snap(d)),
            Overlay::Sql(v) => OverlaySnap::Sql(Box::new(sql::snap(v, cx.sql, cx.now_ms))),
            Overlay::Graph(v) => OverlaySnap::Graph(Box::new(graph::snap(
                v,
                cx.flows,
                cx.as_of,
                cx.replay_clock.as_ref(),
                cx.loading,
            ))),
        }
    }
}

/// The open pane's frame, from its `snap`.
#[derive(Debug, Clone)]
pub enum OverlaySnap {
    None,
    Help(help::HelpSnap),
    Prompt(prompt::PromptSnap),
    Confirm(confirm::ConfirmSnap),
    Playbook(Box<playbook::PlaybookSnap>),
    /// A dry run with its confirmation prompt (a checkpoint action, a table maintenance).
    Action(dry_run::DialogSnap),
    /// The SQL pane or a peek.
    Sql(Box<sql::SqlSnap>),
    /// The pipeline graph.
    Graph(Box<graph::GraphSnap>),
}

impl OverlaySnap {
    /// Paints the pane: over the body, or in the status line (the prompt, a question).
    /// `false`: the status line is free for the console's own.
    pub fn draw(&self, frame: &mut Frame, body: Rect, status: Rect, theme: Theme) -> bool {
        match self {
            OverlaySnap::None => return false,
            OverlaySnap::Help(h) => help::draw(frame, body, h, theme),
            OverlaySnap::Prompt(p) => prompt::draw(frame, status, p),
            OverlaySnap::Confirm(c) => confirm::draw(frame, status, c, theme),
            OverlaySnap::Playbook(p) => playbook::draw(frame, body, p, theme),
            OverlaySnap::Action(a) => dry_run::draw(frame, body, a, theme),
            OverlaySnap::Sql(q) => sql::draw(frame, body, q, theme),
            OverlaySnap::Graph(g) => graph::draw(frame, body, g, theme),
        }
        matches!(self, OverlaySnap::Prompt(_) | OverlaySnap::Confirm(_))
    }
}

/// What a pane's `update` may touch besides its own state: the flows, the status
/// line's message, the effects for the outside world.
pub struct Cx<'a> {
    pub mode: Mode,
    /// `pipeline.toml`, or the checkpoints attached to.
    pub title: &'a str,
    pub now_ms: i64,
    pub flows: &'a mut Vec<FlowModel>,
    pub message: &'a mut Option<Message>,
    pub effects: &'a mut Vec<Effect>,
    /// The SQL pane's tables, history and limits (kept while it is closed).
    pub sql: &'a mut sql::SqlState,
    /// The overview's filter (`/`).
    pub filter: &'a mut String,
}

impl Cx<'_> {
    pub fn say(&mut self, text: impl Into<String>) {
        *self.message = Some(Message {
            text: text.into(),
            bad: false,
            at_ms: self.now_ms,
        });
    }

    pub fn complain(&mut self, text: impl Into<String>) {
        *self.message = Some(Message {
            text: text.into(),
            bad: true,
            at_ms: self.now_ms,
        });
    }

    pub fn flow_index(&self, name: &str) -> Option<usize> {
        self.flows.iter().position(|f| f.name == name)
    }

    /// Puts what the operator asked for on the flow's timeline.
    pub fn operator_event(&mut self, flow: &str, text: String) {
        let now = self.now_ms;
        if let Some(i) = self.flow_index(flow) {
            self.flows[i].push_event(now, EventKind::Operator, text);
        }
    }

    /// A command to a flow of `run` (attach refuses it).
    pub fn control(&mut self, flow: String, command: ControlCommand) {
        if self.mode == Mode::Attach {
            self.complain("weir attach is read-only: flows are controlled where they run");
            return;
        }
        if self.flow_index(&flow).is_none() {
            self.complain(format!("no flow named {flow}"));
            return;
        }
        self.operator_event(
            &flow,
            format!("{} requested by the operator", command_word(command)),
        );
        self.say(format!("{flow}: {} requested", command_word(command)));
        self.effects.push(Effect::Command { flow, command });
    }
}

impl Console for Cx<'_> {
    fn mode(&self) -> Mode {
        self.mode
    }
    fn title(&self) -> &str {
        self.title
    }
    fn flows(&self) -> &[FlowModel] {
        self.flows.as_slice()
    }
}

/// What a pane reads of the console it sits in (the `App` and a [`Cx`] are both one).
pub trait Console {
    fn mode(&self) -> Mode;
    fn title(&self) -> &str;
    fn flows(&self) -> &[FlowModel];
}

/// What the panes' `snap`s read of the console besides their own state.
#[derive(Debug, Clone, Copy)]
pub struct SnapCx<'a> {
    pub mode: Mode,
    pub title: &'a str,
    pub flows: &'a [FlowModel],
    pub theme: Theme,
    pub now_ms: i64,
    /// The instant the view shows: now, or the frozen instant.
    pub as_of: i64,
    pub frozen: bool,
    /// The charts' time window.
    pub window_ms: i64,
    /// A replay's simulated clock (`weir demo`): delays are measured against it.
    pub replay_clock: Option<ReplayClock>,
    /// `attach --spark`: the event logs' history is still being read.
    pub loading: bool,
    /// The operator's filter (`/`).
    pub filter: &'a str,
    pub sql: &'a sql::SqlState,
}

impl Console for SnapCx<'_> {
    fn mode(&self) -> Mode {
        self.mode
    }
    fn title(&self) -> &str {
        self.title
    }
    fn flows(&self) -> &[FlowModel] {
        self.flows
    }
}

/// What comes after a pane's `update`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The pane keeps the keyboard.
    Stay,
    /// Not the pane's action: the view under it takes it.
    Pass,
    /// The pane closes.
    Close,
    /// Another pane replaces it.
    Open(Box<Overlay>),
    /// The pane closes and flow `i`'s detail opens.
    Detail(usize),
    /// The command line was submitted: run `:` and this text.
    Command(String),
    /// The filter gained a character: the views scroll back to their tops.
    Rescroll,
}

/// How far a movement key scrolls (`None`: the action does not scroll).
pub fn scroll_step(action: &Action) -> Option<isize> {
    match action {
        Action::Up => Some(-1),
        Action::Down => Some(1),
        Action::PageUp => Some(-10),
        Action::PageDown => Some(10),
        Action::Top => Some(-(isize::MAX / 2)),
        Action::Bottom => Some(isize::MAX / 2),
        _ => None,
    }
}

/// A bordered pane: its title in brackets and the border highlighted when it has the focus.
pub fn block<'a>(title: &'a str, focused: bool, theme: Theme) -> Block<'a> {
    let style = if focused {
        theme.style(Role::Focus)
    } else {
        theme.style(Role::Title)
    };
    let title = if focused {
        format!("[{title}]")
    } else {
        format!(" {title} ")
    };
    Block::default()
        .borders(Borders::ALL)
        .border_set(theme.border_set())
        .border_style(if focused {
            theme.style(Role::Focus)
        } else {
            Style::default()
        })
        .title(Span::styled(title, style))
}

/// `rows` skipped by a scroll offset clamped so the last page stays full.
pub fn clamp_scroll(scroll: usize, rows: usize, visible: usize) -> usize {
    scroll.min(rows.saturating_sub(visible))
}

pub fn status_role(s: Option<FlowStatus>) -> Role {
    match s {
        Some(FlowStatus::Running) => Role::Good,
        Some(FlowStatus::Idle) => Role::Plain,
        Some(FlowStatus::Paused | FlowStatus::Starting | FlowStatus::Stopping) => Role::Warn,
        Some(FlowStatus::Failed) => Role::Bad,
        Some(FlowStatus::Stopped) | None => Role::Dim,
    }
}

/// The short label of a health state (the overview's HEALTH column).
pub fn health_label(s: HealthState) -> &'static str {
    match s {
        HealthState::Healthy => "ok",
        HealthState::Lagging => "lagging",
        HealthState::SourceUnavailable => "source",
        HealthState::SinkUnavailable => "sink",
        HealthState::CheckpointIncompatible => "ckpt",
        HealthState::SchemaMismatch => "schema",
    }
}

pub fn health_role(s: HealthState) -> Role {
    match s {
        HealthState::Healthy => Role::Good,
        HealthState::Lagging => Role::Warn,
        _ => Role::Bad,
    }
}
