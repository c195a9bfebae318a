//! The console's vocabulary: every key, `:` command and engine-independent
//! change of the app state is one [`Action`]; [`super::update::update`] is the
//! only place that interprets them.

use crate::engine::control::ControlCommand;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    /// Next pane (detail) or between flows and events (overview).
    NextPane,
    PrevPane,
    /// Focus pane n (0-based) of the flow detail.
    GoPane(u8),
    Enter,
    Back,
    NextFlow,
    PrevFlow,
    /// Open the detail of a flow by name (`:flow NAME`).
    SelectFlow(String),
    ToggleFreeze,
    /// Freeze (if live) and move the view back in time.
    ScrollBack,
    ScrollForward,
    /// Narrower time window.
    ZoomIn,
    ZoomOut,
    Help,
    OpenCommand,
    OpenFilter,
    InputChar(char),
    InputBackspace,
    InputSubmit,
    InputCancel,
    ConfirmYes,
    ConfirmNo,
    /// A command to the current flow (overview: selected; detail: shown).
    Control(ControlCommand),
    /// A command to a named flow (`:pause NAME`).
    ControlNamed(String, ControlCommand),
    /// Ask to stop the current flow (confirmation first).
    StopFlow,
    /// Ask to restart the current flow after a schema-change stop (confirmation first).
    RestartFlow,
    /// Ask to run a restart drill on a copy of the pipeline's input (confirmation first).
    Drill,
    /// Run: stop all flows gracefully, then quit (again: abort). Attach: quit.
    Quit,
    /// Repaint the whole screen.
    Redraw,
    /// Open the current flow's playbook (for its health state) beside its live evidence.
    OpenPlaybook,
    ClosePlaybook,
    /// Check off (or un-check) the selected playbook step.
    ToggleStep,
    /// Show the dry-run of the checkpoint action the selected step names.
    DryRunStep,
    /// Open the SQL pane (`:sql`), running the query when one is given.
    OpenSql(Option<String>),
    /// Peek at the current flow's latest output (`o`) or input (`i`) rows.
    Peek(PeekKind),
    /// SQL pane: show the columns further left / right.
    ColumnLeft,
    ColumnRight,
    /// SQL pane: clear the query line.
    ClearInput,
    /// Open the pipeline graph (`x`, `:graph`); in the graph: close it.
    Graph,
    /// The dry run of a maintenance of the current flow's table (`O` optimize, `V` vacuum).
    Maintain(MaintenanceKind),
}

/// What a peek shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeekKind {
    /// The rows the sink table's last commit added.
    Output,
    /// The rows of the flow's last input files.
    Input,
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
