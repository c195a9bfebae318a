//! The key bindings: one table maps keys to [`Action`]s per context, and the
//! same table generates the key-hint bar and the `?` help, so what is shown
//! is what works. A binding is live when its context matches and its `when`
//! predicate holds (e.g. pause only in `run`, only for a running flow).
//!
//! The `:` commands have their own table ([`COMMANDS`]) used by the parser
//! and the help.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::action::Action;
use super::app::{App, MaintenanceKind, Mode, Overlay, PeekKind, View};
use crate::engine::control::{ControlCommand, FlowStatus};

/// Where the keyboard is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctx {
    Overview,
    Detail,
    Help,
    Prompt,
    Confirm,
    Playbook,
    /// A checkpoint action's dry-run and confirmation.
    Action,
    /// The SQL pane: typing a query, its rows.
    Sql,
    /// A peek at a flow's rows (`o`, `i`).
    Peek,
    /// The pipeline graph (`x`).
    Graph,
    /// A table maintenance's dry run (`O`, `V`), waiting for y/n.
    Maintenance,
}

impl Ctx {
    /// Every context (tests that must cover each pane, including a new one).
    pub const ALL: [Ctx; 11] = [
        Ctx::Overview,
        Ctx::Detail,
        Ctx::Help,
        Ctx::Prompt,
        Ctx::Confirm,
        Ctx::Playbook,
        Ctx::Action,
        Ctx::Sql,
        Ctx::Peek,
        Ctx::Graph,
        Ctx::Maintenance,
    ];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub code: KeyCode,
    pub mods: KeyModifiers,
}

const fn k(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        mods: KeyModifiers::NONE,
    }
}
const fn code(code: KeyCode) -> Key {
    Key {
        code,
        mods: KeyModifiers::NONE,
    }
}
const fn ctrl(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        mods: KeyModifiers::CONTROL,
    }
}

pub struct Binding {
    pub keys: &'static [Key],
    pub action: Action,
    pub ctx: &'static [Ctx],
    /// Label in the hint bar (`None`: help only).
    pub hint: Option<&'static str>,
    /// Keys shown in the hint bar when one hint stands for a pair of bindings.
    pub hint_keys: Option<&'static str>,
    pub help: &'static str,
    pub when: fn(&App) -> bool,
}

const BROWSE: &[Ctx] = &[Ctx::Overview, Ctx::Detail];
const PLAYBOOK: &[Ctx] = &[Ctx::Playbook];
const OVERVIEW: &[Ctx] = &[Ctx::Overview];
const DETAIL: &[Ctx] = &[Ctx::Detail];
const SQL: &[Ctx] = &[Ctx::Sql];
const PEEK: &[Ctx] = &[Ctx::Peek];
const GRAPH: &[Ctx] = &[Ctx::Graph];

fn always(_: &App) -> bool {
    true
}
fn run_mode(app: &App) -> bool {
    app.mode == Mode::Run
}
fn current_status(app: &App) -> Option<FlowStatus> {
    app.current_flow()
        .filter(|f| f.status_known)
        .map(|f| f.status)
}
fn can_pause(app: &App) -> bool {
    run_mode(app)
        && matches!(
            current_status(app),
            Some(FlowStatus::Starting | FlowStatus::Running | FlowStatus::Idle)
        )
}
fn can_resume(app: &App) -> bool {
    run_mode(app) && current_status(app) == Some(FlowStatus::Paused)
}
fn can_trigger(app: &App) -> bool {
    run_mode(app)
        && matches!(
            current_status(app),
            Some(FlowStatus::Idle | FlowStatus::Paused | FlowStatus::Running)
        )
}
fn can_restart(app: &App) -> bool {
    run_mode(app) && app.current_flow().is_some_and(|f| f.restartable)
}

fn can_stop(app: &App) -> bool {
    run_mode(app)
        && current_status(app).is_some_and(|s| {
            !matches!(
                s,
                FlowStatus::Stopping | FlowStatus::Stopped | FlowStatus::Failed
            )
        })
}
/// The current flow is in a state other than healthy: its playbook is hinted.
fn unhealthy(app: &App) -> bool {
    app.current_flow()
        .and_then(|f| f.health.as_ref())
        .is_some_and(|h| h.state != crate::records::HealthState::Healthy)
}
fn step_has_action(app: &App) -> bool {
    match &app.overlay {
        Overlay::Playbook(v) => v.step_has_action(app),
        _ => false,
    }
}
fn healthy_or_unknown(app: &App) -> bool {
    app.current_flow().is_some() && !unhealthy(app)
}
/// `run`, and the current flow writes a Delta table: its maintenance is offered.
fn has_table(app: &App) -> bool {
    run_mode(app) && app.current_flow().is_some_and(|f| f.sink_path.is_some())
}
fn frozen(app: &App) -> bool {
    app.freeze.is_some()
}
fn several_flows(app: &App) -> bool {
    app.flows.len() > 1
}
fn filtering(app: &App) -> bool {
    !app.filter.is_empty()
}
fn can_go_back(app: &App) -> bool {
    app.view == View::Detail || filtering(app) || frozen(app)
}

/// Every binding, in the order help lists them.
pub static BINDINGS: &[Binding] = &[
    // Overlays first: they take the keyboard.
    Binding {
        keys: &[code(KeyCode::Enter)],
        action: Action::InputSubmit,
        ctx: &[Ctx::Prompt],
        hint: Some("apply"),
        hint_keys: None,
        help: "run the command / apply the filter",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Esc)],
        action: Action::InputCancel,
        ctx: &[Ctx::Prompt],
        hint: Some("cancel"),
        hint_keys: None,
        help: "close the prompt",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Backspace)],
        action: Action::InputBackspace,
        ctx: &[Ctx::Prompt],
        hint: None,
        hint_keys: None,
        help: "delete a character",
        when: always,
    },
    Binding {
        keys: &[k('y'), code(KeyCode::Enter)],
        action: Action::ConfirmYes,
        ctx: &[Ctx::Maintenance],
        hint: Some("run it"),
        hint_keys: None,
        help: "run the maintenance shown (in the background)",
        when: always,
    },
    Binding {
        keys: &[k('n'), code(KeyCode::Esc)],
        action: Action::ConfirmNo,
        ctx: &[Ctx::Maintenance],
        hint: Some("cancel"),
        hint_keys: None,
        help: "cancel: nothing changes",
        when: always,
    },
    Binding {
        keys: &[k('y'), code(KeyCode::Enter)],
        action: Action::ConfirmYes,
        ctx: &[Ctx::Confirm],
        hint: Some("yes"),
        hint_keys: None,
        help: "confirm",
        when: always,
    },
    Binding {
        keys: &[k('n'), code(KeyCode::Esc)],
        action: Action::ConfirmNo,
        ctx: &[Ctx::Confirm],
        hint: Some("no"),
        hint_keys: None,
        help: "cancel",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Esc), k('?'), k('q')],
        action: Action::Help,
        ctx: &[Ctx::Help],
        hint: Some("close"),
        hint_keys: None,
        help: "close the help",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        action: Action::Down,
        ctx: &[Ctx::Help],
        hint: Some("scroll"),
        hint_keys: Some("j/k"),
        help: "scroll down",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Up), k('k')],
        action: Action::Up,
        ctx: &[Ctx::Help],
        hint: None,
        hint_keys: None,
        help: "scroll up",
        when: always,
    },
    // Moving around.
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        action: Action::Down,
        ctx: OVERVIEW,
        hint: Some("select"),
        hint_keys: Some("j/k"),
        help: "next flow (or event, when the events list has the focus)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Up), k('k')],
        action: Action::Up,
        ctx: OVERVIEW,
        hint: None,
        hint_keys: None,
        help: "previous flow (or event)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        action: Action::Down,
        ctx: DETAIL,
        hint: Some("scroll"),
        hint_keys: Some("j/k"),
        help: "scroll the focused pane down (older rows)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Up), k('k')],
        action: Action::Up,
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "scroll the focused pane up (newer rows)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::PageDown), ctrl('d')],
        action: Action::PageDown,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "scroll down a page",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::PageUp), ctrl('u')],
        action: Action::PageUp,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "scroll up a page",
        when: always,
    },
    Binding {
        keys: &[k('g'), code(KeyCode::Home)],
        action: Action::Top,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "go to the top (newest)",
        when: always,
    },
    Binding {
        keys: &[k('G'), code(KeyCode::End)],
        action: Action::Bottom,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "go to the bottom (oldest)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        action: Action::Enter,
        ctx: OVERVIEW,
        hint: Some("open"),
        hint_keys: None,
        help: "open the selected flow's detail",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Tab)],
        action: Action::NextPane,
        ctx: OVERVIEW,
        hint: None,
        hint_keys: None,
        help: "move the focus between flows and events",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Tab)],
        action: Action::NextPane,
        ctx: DETAIL,
        hint: Some("pane"),
        hint_keys: None,
        help: "next pane",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::BackTab)],
        action: Action::PrevPane,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "previous pane",
        when: always,
    },
    Binding {
        keys: &[k('1')],
        action: Action::GoPane(0),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "pane: input vs processing rate",
        when: always,
    },
    Binding {
        keys: &[k('2')],
        action: Action::GoPane(1),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "pane: backlog and forecast",
        when: always,
    },
    Binding {
        keys: &[k('3')],
        action: Action::GoPane(2),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "pane: watermark",
        when: always,
    },
    Binding {
        keys: &[k('4')],
        action: Action::GoPane(3),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "pane: state",
        when: always,
    },
    Binding {
        keys: &[k('5')],
        action: Action::GoPane(4),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "pane: batch durations",
        when: always,
    },
    Binding {
        keys: &[k('6')],
        action: Action::GoPane(5),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "pane: checkpoint history",
        when: always,
    },
    Binding {
        keys: &[k('7')],
        action: Action::GoPane(6),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "pane: timeline",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        action: Action::Enter,
        ctx: DETAIL,
        hint: Some("zoom"),
        hint_keys: None,
        help: "zoom the focused pane (again: all panes)",
        when: always,
    },
    Binding {
        keys: &[k(']')],
        action: Action::NextFlow,
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "next flow",
        when: several_flows,
    },
    Binding {
        keys: &[k('[')],
        action: Action::PrevFlow,
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "previous flow",
        when: several_flows,
    },
    Binding {
        keys: &[code(KeyCode::Esc)],
        action: Action::Back,
        ctx: BROWSE,
        hint: Some("back"),
        hint_keys: None,
        help: "clear the filter, unzoom, back to the overview, or back to live",
        when: can_go_back,
    },
    // Time.
    Binding {
        keys: &[k('f')],
        action: Action::ToggleFreeze,
        ctx: BROWSE,
        hint: Some("freeze"),
        hint_keys: None,
        help: "freeze the view (flows keep running); again: live",
        when: |a| !frozen(a),
    },
    Binding {
        keys: &[k('f')],
        action: Action::ToggleFreeze,
        ctx: BROWSE,
        hint: Some("live"),
        hint_keys: None,
        help: "back to the live view",
        when: frozen,
    },
    Binding {
        keys: &[code(KeyCode::Left), k('h')],
        action: Action::ScrollBack,
        ctx: BROWSE,
        hint: Some("time"),
        hint_keys: Some("h/l"),
        help: "scroll back in time (freezes the view)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Right), k('l')],
        action: Action::ScrollForward,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "scroll forward in time",
        when: frozen,
    },
    Binding {
        keys: &[k('+'), k('=')],
        action: Action::ZoomIn,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "narrower time window",
        when: always,
    },
    Binding {
        keys: &[k('-')],
        action: Action::ZoomOut,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "wider time window",
        when: always,
    },
    // Control (run only).
    Binding {
        keys: &[k('p')],
        action: Action::Control(ControlCommand::Pause),
        ctx: BROWSE,
        hint: Some("pause"),
        hint_keys: None,
        help: "pause the flow (the running batch finishes)",
        when: can_pause,
    },
    Binding {
        keys: &[k('r')],
        action: Action::Control(ControlCommand::Resume),
        ctx: BROWSE,
        hint: Some("resume"),
        hint_keys: None,
        help: "resume the flow",
        when: can_resume,
    },
    Binding {
        keys: &[k('t')],
        action: Action::Control(ControlCommand::TriggerNow),
        ctx: BROWSE,
        hint: Some("trigger"),
        hint_keys: None,
        help: "start a batch now instead of waiting for the trigger",
        when: can_trigger,
    },
    Binding {
        keys: &[k('D')],
        action: Action::Drill,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "run a restart drill on a copy of the pipeline's input (asks first; the verdict goes on the timeline)",
        when: run_mode,
    },
    Binding {
        keys: &[k('R')],
        action: Action::RestartFlow,
        ctx: BROWSE,
        hint: Some("restart"),
        hint_keys: None,
        help: "restart a flow that stopped because its source gained new columns (asks first)",
        when: can_restart,
    },
    Binding {
        keys: &[k('S')],
        action: Action::StopFlow,
        ctx: BROWSE,
        hint: Some("stop"),
        hint_keys: None,
        help: "stop the flow after its running batch (asks first)",
        when: can_stop,
    },
    // Prompts and help.
    Binding {
        keys: &[k('/')],
        action: Action::OpenFilter,
        ctx: BROWSE,
        hint: Some("filter"),
        hint_keys: None,
        help: "filter flows, history and timeline rows",
        when: always,
    },
    Binding {
        keys: &[k(':')],
        action: Action::OpenCommand,
        ctx: BROWSE,
        hint: Some("cmd"),
        hint_keys: None,
        help: "command line (:help lists the commands)",
        when: always,
    },
    Binding {
        keys: &[k('?')],
        action: Action::Help,
        ctx: BROWSE,
        hint: Some("help"),
        hint_keys: None,
        help: "this help",
        when: always,
    },
    Binding {
        keys: &[ctrl('l')],
        action: Action::Redraw,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "redraw the screen",
        when: always,
    },
    Binding {
        keys: &[k('b')],
        action: Action::OpenPlaybook,
        ctx: BROWSE,
        hint: Some("playbook"),
        hint_keys: None,
        help: "the playbook of the flow's health state, beside its live evidence",
        when: unhealthy,
    },
    Binding {
        keys: &[k('b')],
        action: Action::OpenPlaybook,
        ctx: BROWSE,
        hint: None,
        hint_keys: None,
        help: "the playbook (hinted when the flow is not healthy)",
        when: healthy_or_unknown,
    },
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        action: Action::Down,
        ctx: PLAYBOOK,
        hint: Some("step"),
        hint_keys: Some("j/k"),
        help: "next step",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Up), k('k')],
        action: Action::Up,
        ctx: PLAYBOOK,
        hint: None,
        hint_keys: None,
        help: "previous step",
        when: always,
    },
    Binding {
        keys: &[k(' ')],
        action: Action::ToggleStep,
        ctx: PLAYBOOK,
        hint: Some("check off"),
        hint_keys: None,
        help: "check off (or un-check) the selected step",
        when: always,
    },
    Binding {
        keys: &[k('x')],
        action: Action::DryRunStep,
        ctx: PLAYBOOK,
        hint: Some("dry-run"),
        hint_keys: None,
        help: "show the dry-run of the checkpoint action the step names; it runs only after confirmation",
        when: step_has_action,
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        action: Action::InputSubmit,
        ctx: &[Ctx::Action],
        hint: Some("run"),
        hint_keys: None,
        help: "run the action (after typing the confirmation it asks for)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Esc)],
        action: Action::InputCancel,
        ctx: &[Ctx::Action],
        hint: Some("cancel"),
        hint_keys: None,
        help: "cancel: nothing changes",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Backspace)],
        action: Action::InputBackspace,
        ctx: &[Ctx::Action],
        hint: None,
        hint_keys: None,
        help: "delete the last character",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Esc), k('b'), k('q')],
        action: Action::ClosePlaybook,
        ctx: PLAYBOOK,
        hint: Some("close"),
        hint_keys: None,
        help: "close the playbook",
        when: always,
    },
    // Table maintenance.
    Binding {
        keys: &[k('O')],
        action: Action::Maintain(MaintenanceKind::Optimize),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "optimize the flow's table (Delta OPTIMIZE, compacts small files): shows the dry run, asks y/n",
        when: has_table,
    },
    Binding {
        keys: &[k('V')],
        action: Action::Maintain(MaintenanceKind::Vacuum),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "vacuum the flow's table (Delta VACUUM, retain 168h): shows the dry run, asks y/n",
        when: has_table,
    },
    // The pipeline graph.
    Binding {
        keys: &[k('x')],
        action: Action::Graph,
        ctx: BROWSE,
        hint: Some("graph"),
        hint_keys: None,
        help: "the pipeline graph: flows from sources to tables, each in its health colour",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        action: Action::Down,
        ctx: GRAPH,
        hint: Some("select"),
        hint_keys: Some("j/k"),
        help: "the next node",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Up), k('k')],
        action: Action::Up,
        ctx: GRAPH,
        hint: None,
        hint_keys: None,
        help: "the previous node",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::PageDown), ctrl('d')],
        action: Action::PageDown,
        ctx: GRAPH,
        hint: None,
        hint_keys: None,
        help: "down a page",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::PageUp), ctrl('u')],
        action: Action::PageUp,
        ctx: GRAPH,
        hint: None,
        hint_keys: None,
        help: "up a page",
        when: always,
    },
    Binding {
        keys: &[k('g'), code(KeyCode::Home)],
        action: Action::Top,
        ctx: GRAPH,
        hint: None,
        hint_keys: None,
        help: "the first node",
        when: always,
    },
    Binding {
        keys: &[k('G'), code(KeyCode::End)],
        action: Action::Bottom,
        ctx: GRAPH,
        hint: None,
        hint_keys: None,
        help: "the last node",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        action: Action::Enter,
        ctx: GRAPH,
        hint: Some("open flow"),
        hint_keys: None,
        help: "open the detail of the flow (a table: the flow writing it)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Esc), k('x'), k('q')],
        action: Action::Graph,
        ctx: GRAPH,
        hint: Some("close"),
        hint_keys: None,
        help: "close the graph",
        when: always,
    },
    // The SQL pane and peeks.
    Binding {
        keys: &[k('o')],
        action: Action::Peek(PeekKind::Output),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "peek: the rows the flow's last Delta commit added to its table",
        when: always,
    },
    Binding {
        keys: &[k('i')],
        action: Action::Peek(PeekKind::Input),
        ctx: DETAIL,
        hint: None,
        hint_keys: None,
        help: "peek: the rows of the flow's last input files, with _rescued_data, file and line",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        action: Action::InputSubmit,
        ctx: SQL,
        hint: Some("run"),
        hint_keys: None,
        help: "run the query (read-only; the row and time limits apply)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Esc)],
        action: Action::InputCancel,
        ctx: SQL,
        hint: Some("close"),
        hint_keys: None,
        help: "close the SQL pane (a running query is cancelled)",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Backspace)],
        action: Action::InputBackspace,
        ctx: SQL,
        hint: None,
        hint_keys: None,
        help: "delete a character",
        when: always,
    },
    Binding {
        keys: &[ctrl('u')],
        action: Action::ClearInput,
        ctx: SQL,
        hint: None,
        hint_keys: None,
        help: "clear the query line",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Up)],
        action: Action::Up,
        ctx: SQL,
        hint: Some("history"),
        hint_keys: Some("↑/↓"),
        help: "the previous query of the history",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Down)],
        action: Action::Down,
        ctx: SQL,
        hint: None,
        hint_keys: None,
        help: "the next query of the history",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::PageDown)],
        action: Action::PageDown,
        ctx: &[Ctx::Sql, Ctx::Peek],
        hint: Some("rows"),
        hint_keys: Some("PgUp/PgDn"),
        help: "scroll the rows down a page",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::PageUp)],
        action: Action::PageUp,
        ctx: &[Ctx::Sql, Ctx::Peek],
        hint: None,
        hint_keys: None,
        help: "scroll the rows up a page",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Home)],
        action: Action::Top,
        ctx: &[Ctx::Sql, Ctx::Peek],
        hint: None,
        hint_keys: None,
        help: "the first row",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::End)],
        action: Action::Bottom,
        ctx: &[Ctx::Sql, Ctx::Peek],
        hint: None,
        hint_keys: None,
        help: "the last row",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Left)],
        action: Action::ColumnLeft,
        ctx: SQL,
        hint: Some("columns"),
        hint_keys: Some("←/→"),
        help: "the columns further left",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Right)],
        action: Action::ColumnRight,
        ctx: SQL,
        hint: None,
        hint_keys: None,
        help: "the columns further right",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Esc), k('q')],
        action: Action::InputCancel,
        ctx: PEEK,
        hint: Some("close"),
        hint_keys: None,
        help: "close the peek",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Down), k('j')],
        action: Action::Down,
        ctx: PEEK,
        hint: Some("rows"),
        hint_keys: Some("j/k"),
        help: "scroll the rows down",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Up), k('k')],
        action: Action::Up,
        ctx: PEEK,
        hint: None,
        hint_keys: None,
        help: "scroll the rows up",
        when: always,
    },
    Binding {
        keys: &[k('g')],
        action: Action::Top,
        ctx: PEEK,
        hint: None,
        hint_keys: None,
        help: "the first row",
        when: always,
    },
    Binding {
        keys: &[k('G')],
        action: Action::Bottom,
        ctx: PEEK,
        hint: None,
        hint_keys: None,
        help: "the last row",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Left), k('h')],
        action: Action::ColumnLeft,
        ctx: PEEK,
        hint: Some("columns"),
        hint_keys: Some("h/l"),
        help: "the columns further left",
        when: always,
    },
    Binding {
        keys: &[code(KeyCode::Right), k('l')],
        action: Action::ColumnRight,
        ctx: PEEK,
        hint: None,
        hint_keys: None,
        help: "the columns further right",
        when: always,
    },
    Binding {
        keys: &[k('o')],
        action: Action::Peek(PeekKind::Output),
        ctx: PEEK,
        hint: Some("output"),
        hint_keys: None,
        help: "peek at the latest output rows (again: refresh)",
        when: always,
    },
    Binding {
        keys: &[k('i')],
        action: Action::Peek(PeekKind::Input),
        ctx: PEEK,
        hint: Some("input"),
        hint_keys: None,
        help: "peek at the last input files' rows (again: refresh)",
        when: always,
    },
    Binding {
        keys: &[k('q'), ctrl('c')],
        action: Action::Quit,
        ctx: BROWSE,
        hint: Some("quit"),
        hint_keys: None,
        help: "quit (run: stop all flows after their batch; again: abort)",
        when: always,
    },
];

/// A `:` command.
pub struct CommandSpec {
    pub name: &'static str,
    pub args: &'static str,
    pub help: &'static str,
    pub run_only: bool,
}

pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "flow",
        args: "NAME",
        help: "open a flow's detail (a unique prefix is enough)",
        run_only: false,
    },
    CommandSpec {
        name: "pause",
        args: "[NAME]",
        help: "pause the current or named flow",
        run_only: true,
    },
    CommandSpec {
        name: "resume",
        args: "[NAME]",
        help: "resume the current or named flow",
        run_only: true,
    },
    CommandSpec {
        name: "trigger",
        args: "[NAME]",
        help: "start a batch now",
        run_only: true,
    },
    CommandSpec {
        name: "stop",
        args: "[NAME]",
        help: "stop a flow after its running batch (asks first)",
        run_only: true,
    },
    CommandSpec {
        name: "sql",
        args: "[QUERY]",
        help: "the SQL pane: read-only queries over the pipeline's tables and progress (Esc closes)",
        run_only: false,
    },
    CommandSpec {
        name: "graph",
        args: "",
        help: "the pipeline graph (also x)",
        run_only: false,
    },
    CommandSpec {
        name: "freeze",
        args: "",
        help: "freeze the view",
        run_only: false,
    },
    CommandSpec {
        name: "live",
        args: "",
        help: "back to the live view",
        run_only: false,
    },
    CommandSpec {
        name: "help",
        args: "",
        help: "the key and command help",
        run_only: false,
    },
    CommandSpec {
        name: "quit",
        args: "",
        help: "quit (run: stop all flows first)",
        run_only: false,
    },
];

/// Parses a `:` command line into an action.
pub fn parse_command(app: &App, line: &str) -> Result<Action, String> {
    // `:sql QUERY`: the query as typed (spaces inside literals kept).
    if let Some(rest) = line.trim_start().strip_prefix("sql")
        && (rest.is_empty() || rest.starts_with(char::is_whitespace))
    {
        let query = rest.trim();
        return Ok(Action::OpenSql(
            (!query.is_empty()).then(|| query.to_string()),
        ));
    }
    let mut words = line.split_whitespace();
    let Some(name) = words.next() else {
        return Err("empty command (try :help)".into());
    };
    let arg = words.collect::<Vec<_>>().join(" ");
    let arg = (!arg.is_empty()).then_some(arg);
    let spec = COMMANDS
        .iter()
        .find(|c| c.name == name)
        .or_else(|| match name {
            "q" | "q!" | "exit" => COMMANDS.iter().find(|c| c.name == "quit"),
            _ => None,
        })
        .ok_or_else(|| format!("unknown command :{name} (try :help)"))?;
    if spec.run_only && app.mode == Mode::Attach {
        return Err(format!(
            ":{} changes a running flow; weir attach is read-only",
            spec.name
        ));
    }
    let control = |c: ControlCommand| match &arg {
        Some(n) => Ok(Action::ControlNamed(app.resolve_flow(n)?, c)),
        None => Ok(Action::Control(c)),
    };
    match spec.name {
        "flow" => match &arg {
            Some(n) => Ok(Action::SelectFlow(app.resolve_flow(n)?)),
            None => Err("usage: :flow NAME".into()),
        },
        "pause" => control(ControlCommand::Pause),
        "resume" => control(ControlCommand::Resume),
        "trigger" => control(ControlCommand::TriggerNow),
        "stop" => match &arg {
            Some(n) => Ok(Action::ControlNamed(
                app.resolve_flow(n)?,
                ControlCommand::Stop,
            )),
            None => Ok(Action::StopFlow),
        },
        "freeze" => Ok(if app.freeze.is_some() {
            Action::Redraw
        } else {
            Action::ToggleFreeze
        }),
        "live" => Ok(if app.freeze.is_some() {
            Action::ToggleFreeze
        } else {
            Action::Redraw
        }),
        "help" => Ok(Action::Help),
        "graph" => Ok(Action::Graph),
        _ => Ok(Action::Quit),
    }
}

/// The keyboard's context.
pub fn context(app: &App) -> Ctx {
    match &app.overlay {
        Overlay::Help(_) => Ctx::Help,
        Overlay::Prompt(_) => Ctx::Prompt,
        Overlay::Confirm(_) => Ctx::Confirm,
        Overlay::Playbook(_) => Ctx::Playbook,
        Overlay::Action(_) => Ctx::Action,
        Overlay::Sql(v) if v.peek.is_some() => Ctx::Peek,
        Overlay::Sql(_) => Ctx::Sql,
        Overlay::Graph(_) => Ctx::Graph,
        Overlay::Maintenance(_) => Ctx::Maintenance,
        Overlay::None => match app.view {
            View::Overview => Ctx::Overview,
            View::Detail => Ctx::Detail,
        },
    }
}

fn matches(key: &Key, event: &KeyEvent) -> bool {
    let relevant = KeyModifiers::CONTROL | KeyModifiers::ALT;
    key.code == event.code && (key.mods & relevant) == (event.modifiers & relevant)
}

/// The live bindings of the current context.
pub fn live_bindings(app: &App) -> impl Iterator<Item = &'static Binding> + '_ {
    let ctx = context(app);
    BINDINGS
        .iter()
        .filter(move |b| b.ctx.contains(&ctx) && (b.when)(app))
}

/// The action a key means now, if any.
pub fn action_for(app: &App, event: &KeyEvent) -> Option<Action> {
    if let Some(b) = live_bindings(app).find(|b| b.keys.iter().any(|k| matches(k, event))) {
        return Some(b.action.clone());
    }
    if matches!(context(app), Ctx::Prompt | Ctx::Action | Ctx::Sql)
        && let KeyCode::Char(c) = event.code
        && !event
            .modifiers
            .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT)
    {
        return Some(Action::InputChar(c));
    }
    None
}

pub fn key_label(key: &Key) -> String {
    let base = match key.code {
        KeyCode::Char(' ') => "Space".to_string(),
        KeyCode::Char(c) => c.to_string(),
        KeyCode::Up => "↑".into(),
        KeyCode::Down => "↓".into(),
        KeyCode::Left => "←".into(),
        KeyCode::Right => "→".into(),
        KeyCode::Enter => "Enter".into(),
        KeyCode::Esc => "Esc".into(),
        KeyCode::Tab => "Tab".into(),
        KeyCode::BackTab => "S-Tab".into(),
        KeyCode::Backspace => "Bksp".into(),
        KeyCode::PageUp => "PgUp".into(),
        KeyCode::PageDown => "PgDn".into(),
        KeyCode::Home => "Home".into(),
        KeyCode::End => "End".into(),
        other => format!("{other:?}"),
    };
    if key.mods.contains(KeyModifiers::CONTROL) {
        format!("Ctrl-{base}")
    } else {
        base
    }
}

/// One entry of the hint bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    pub keys: String,
    pub label: String,
    /// Shown however narrow the terminal (help, quit, the prompt's keys).
    pub pinned: bool,
}

/// The hint bar: the live bindings that have a hint; actions first, then movement
/// (arrows are guessable), with help and quit pinned at the end.
pub fn hints(app: &App) -> Vec<Hint> {
    let movement = |a: &Action| {
        matches!(
            a,
            Action::Up
                | Action::Down
                | Action::ScrollBack
                | Action::ScrollForward
                | Action::NextPane
                | Action::PrevPane
        )
    };
    let pinned = |a: &Action| matches!(a, Action::Help | Action::Quit);
    let hint = |b: &Binding| {
        let label = b.hint?;
        let keys = match b.hint_keys {
            Some(k) => k.to_string(),
            None => b.keys.first().map(key_label).unwrap_or_default(),
        };
        Some(Hint {
            keys,
            label: label.to_string(),
            pinned: pinned(&b.action)
                || matches!(
                    context(app),
                    Ctx::Prompt | Ctx::Confirm | Ctx::Help | Ctx::Sql | Ctx::Peek | Ctx::Graph
                ),
        })
    };
    let mut out: Vec<Hint> = live_bindings(app)
        .filter(|b| !movement(&b.action) && !pinned(&b.action))
        .filter_map(hint)
        .collect();
    out.extend(
        live_bindings(app)
            .filter(|b| movement(&b.action) && !pinned(&b.action))
            .filter_map(hint),
    );
    out.extend(
        live_bindings(app)
            .filter(|b| pinned(&b.action))
            .filter_map(hint),
    );
    out
}

/// Help lines: `(keys or command, what it does)`.
pub type HelpLines = Vec<(String, String)>;

/// The help: `(keys, what)` of every live binding, then the `:` commands.
pub fn help(app: &App) -> (HelpLines, HelpLines) {
    let ctx = context(app);
    // Help is about the view under the overlay.
    let view_ctx = match app.view {
        View::Overview => Ctx::Overview,
        View::Detail => Ctx::Detail,
    };
    let target = if ctx == Ctx::Help { view_ctx } else { ctx };
    let keys = BINDINGS
        .iter()
        .filter(|b| b.ctx.contains(&target) && (b.when)(app))
        .map(|b| {
            (
                b.keys.iter().map(key_label).collect::<Vec<_>>().join(" "),
                b.help.to_string(),
            )
        })
        .collect();
    let commands = COMMANDS
        .iter()
        .filter(|c| !(c.run_only && app.mode == Mode::Attach))
        .map(|c| {
            (
                if c.args.is_empty() {
                    format!(":{}", c.name)
                } else {
                    format!(":{} {}", c.name, c.args)
                },
                c.help.to_string(),
            )
        })
        .collect();
    (keys, commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_means_two_things_in_one_context() {
        for ctx in Ctx::ALL {
            let bound: Vec<(&Binding, &Key)> = BINDINGS
                .iter()
                .filter(|b| b.ctx.contains(&ctx))
                .flat_map(|b| b.keys.iter().map(move |k| (b, k)))
                .collect();
            for (i, (a, ka)) in bound.iter().enumerate() {
                for (b, kb) in &bound[i + 1..] {
                    if ka == kb {
                        // Allowed only for mutually exclusive predicates (freeze/live).
                        assert_eq!(a.action, b.action, "{ctx:?}: {} bound twice", key_label(ka));
                    }
                }
            }
        }
    }

    #[test]
    fn every_command_parses_in_run_mode() {
        let app = App::for_tests(Mode::Run, &["bronze", "silver"]);
        for c in COMMANDS {
            let line = if c.args == "NAME" {
                format!("{} sil", c.name)
            } else if c.name == "sql" {
                "sql SELECT  'a  b' AS x".to_string()
            } else {
                c.name.to_string()
            };
            assert!(parse_command(&app, &line).is_ok(), ":{line}");
        }
        assert_eq!(
            parse_command(&app, "sql SELECT  'a  b' AS x"),
            Ok(Action::OpenSql(Some("SELECT  'a  b' AS x".into())))
        );
        assert_eq!(parse_command(&app, "sql"), Ok(Action::OpenSql(None)));
        assert!(parse_command(&app, "sqlx").is_err());
        assert_eq!(
            parse_command(&app, "pause silver"),
            Ok(Action::ControlNamed("silver".into(), ControlCommand::Pause))
        );
        assert!(parse_command(&app, "flow nope").is_err());
        assert!(
            parse_command(&app, "bogus")
                .unwrap_err()
                .contains("unknown command")
        );
        let attach = App::for_tests(Mode::Attach, &["bronze"]);
        assert!(
            parse_command(&attach, "pause")
                .unwrap_err()
                .contains("read-only")
        );
    }
}
