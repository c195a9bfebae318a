//! The immutable picture [`super::draw::draw`] paints: built from the
//! [`App`] once per frame, windowed to the time the view shows, with every
//! number already formatted. Drawing never looks at the app.

use crate::engine::control::FlowStatus;

use super::app::{
    App, Mode, OVERVIEW_EVENTS, Overlay, Pane, PlaybookView, PromptKind, View, merged_events,
};
use super::forecast::forecast;
use super::format;
use super::keys;
use super::model::{EventKind, FlowModel, Sample, TimelineEvent};
use super::theme::{Role, Theme};
use crate::records::{Health, HealthState};

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub theme: Theme,
    pub header_left: String,
    pub header_right: String,
    pub header_role: Role,
    pub status_line: String,
    pub status_role: Role,
    pub hints: Vec<keys::Hint>,
    pub overlay: OverlaySnap,
    pub body: Body,
}

#[derive(Debug, Clone)]
pub enum OverlaySnap {
    None,
    Help {
        keys: Vec<(String, String)>,
        commands: Vec<(String, String)>,
        scroll: usize,
    },
    Prompt {
        prefix: char,
        text: String,
    },
    Confirm {
        question: String,
    },
    Playbook(Box<PlaybookSnap>),
    /// A checkpoint action's dry-run with its confirmation prompt.
    Action {
        title: String,
        lines: Vec<String>,
        prompt: String,
        /// What was typed so far (`None`: a y/n question, no input line).
        typed: Option<String>,
    },
    /// The SQL pane or a peek.
    Sql(Box<SqlSnap>),
    /// The pipeline graph.
    Graph(Box<GraphSnap>),
}

/// The pipeline graph: one row per node, the tree's glyphs in `prefix`.
#[derive(Debug, Clone)]
pub struct GraphSnap {
    pub title: String,
    /// `WM DELAY`, or `SIM DELAY` over a replay (as the overview's column).
    pub delay_header: &'static str,
    pub rows: Vec<GraphRow>,
    pub cursor: usize,
    /// Below the tree: what the selected node is.
    pub footer: String,
}

#[derive(Debug, Clone)]
pub struct GraphRow {
    pub prefix: String,
    /// The node's name (flow name, path, sink).
    pub label: String,
    pub label_role: Role,
    /// What it is: `files:csv`, `delta v12`, `(stream join)`, `see above`.
    pub kind: String,
    /// A flow's figures, empty for other nodes.
    pub health: String,
    pub health_role: Role,
    pub status: String,
    pub status_role: Role,
    pub input_rate: String,
    pub processed_rate: String,
    pub backlog: String,
    pub watermark_delay: String,
    pub last_duration: String,
}

fn graph_snap(app: &App, cursor: usize, as_of: i64) -> GraphSnap {
    use super::graph::{NodeRef, common_dir, prefix, short_path, tree, via_word};
    let rows = tree(app);
    let common = common_dir(&rows);
    let blank = |prefix: String, label: String, role: Role, kind: String| GraphRow {
        prefix,
        label,
        label_role: role,
        kind,
        health: String::new(),
        health_role: Role::Dim,
        status: String::new(),
        status_role: Role::Dim,
        input_rate: String::new(),
        processed_rate: String::new(),
        backlog: String::new(),
        watermark_delay: String::new(),
        last_duration: String::new(),
    };
    let flow_health_role = |i: usize| {
        app.flows[i]
            .health
            .as_ref()
            .map_or(Role::Plain, |h| health_role(h.state))
    };
    let out: Vec<GraphRow> = rows
        .iter()
        .map(|r| {
            let pre = prefix(r);
            let via = r
                .via
                .map(|v| format!("({})", via_word(v)))
                .unwrap_or_default();
            match &r.node {
                NodeRef::Source { kind, path } => {
                    // A source is red when a flow reading it finds it unavailable.
                    let unavailable = app.flows.iter().any(|f| {
                        f.inputs.iter().any(|i| &i.path == path)
                            && f.health
                                .as_ref()
                                .is_some_and(|h| h.state == HealthState::SourceUnavailable)
                    });
                    let label = if kind.starts_with("kafka") {
                        path.display().to_string()
                    } else {
                        short_path(path, common.as_deref())
                    };
                    blank(
                        pre,
                        label,
                        if unavailable { Role::Bad } else { Role::Plain },
                        kind.clone(),
                    )
                }
                NodeRef::Flow(i) => {
                    let row = flow_row(
                        &app.flows[*i],
                        as_of,
                        app.replay_clock.as_ref(),
                        app.loading.is_some(),
                    );
                    GraphRow {
                        prefix: pre,
                        label: row.name,
                        label_role: if row.health == "-" {
                            Role::Title
                        } else {
                            row.health_role
                        },
                        kind: via.trim().to_string(),
                        health: row.health,
                        health_role: row.health_role,
                        status: row.status,
                        status_role: row.status_role,
                        input_rate: row.input_rate,
                        processed_rate: row.processed_rate,
                        backlog: row.backlog,
                        watermark_delay: row.watermark_delay,
                        last_duration: row.last_duration,
                    }
                }
                NodeRef::SeenFlow(i) => blank(
                    pre,
                    app.flows[*i].name.clone(),
                    flow_health_role(*i),
                    format!("{via} see above").trim().to_string(),
                ),
                NodeRef::Table { writer, path } => {
                    let version = last_sample(&app.flows[*writer], as_of)
                        .and_then(|s| s.delta_version)
                        .map(|v| format!(" v{v}"))
                        .unwrap_or_default();
                    blank(
                        pre,
                        short_path(path, common.as_deref()),
                        flow_health_role(*writer),
                        format!("delta{version}"),
                    )
                }
                NodeRef::OtherSink { writer } => blank(
                    pre,
                    app.flows[*writer]
                        .sink_label
                        .clone()
                        .unwrap_or_else(|| "sink unknown".into()),
                    Role::Dim,
                    "sink".into(),
                ),
            }
        })
        .collect();
    let cursor = cursor.min(out.len().saturating_sub(1));
    let footer = match rows.get(cursor).map(|r| &r.node) {
        Some(NodeRef::Source { path, .. }) => {
            format!("source {} (read by the flows below it)", path.display())
        }
        Some(NodeRef::Table { writer, path }) => format!(
            "table {} written by {} (Enter opens it)",
            path.display(),
            app.flows[*writer].name
        ),
        Some(NodeRef::Flow(i) | NodeRef::SeenFlow(i)) => {
            let f = &app.flows[*i];
            match f.health.as_ref().and_then(|h| h.evidence.reasons.first()) {
                Some(why) => format!("{}: {} (Enter opens its detail)", f.name, why),
                None => format!("{} (Enter opens its detail)", f.name),
            }
        }
        Some(NodeRef::OtherSink { writer }) => {
            format!("the sink of {}", app.flows[*writer].name)
        }
        None => "no flows".into(),
    };
    GraphSnap {
        delay_header: if app.replay_clock.and_then(|c| c.at(as_of)).is_some() {
            "SIM DELAY"
        } else {
            "WM DELAY"
        },
        title: format!(
            "Pipeline graph: {} flow{}, sources to tables",
            app.flows.len(),
            if app.flows.len() == 1 { "" } else { "s" }
        ),
        rows: out,
        cursor,
        footer,
    }
}

/// The SQL pane: the query line, a status line, the rows from the scroll position.
#[derive(Debug, Clone)]
pub struct SqlSnap {
    pub title: String,
    /// The query being typed; `None` for a peek.
    pub input: Option<String>,
    pub status: String,
    pub status_role: Role,
    pub columns: Vec<String>,
    pub widths: Vec<usize>,
    /// Rows from `first_row`, at most [`SQL_ROWS_SHOWN`].
    pub rows: Vec<Vec<String>>,
    pub first_row: usize,
    pub total_rows: usize,
    pub first_col: usize,
}

/// Rows a frame of the SQL pane carries (more than any terminal shows).
pub const SQL_ROWS_SHOWN: usize = 200;

fn sql_snap(app: &App, v: &super::app::SqlView) -> SqlSnap {
    use super::app::{PeekKind, SqlRun};
    let limits = &app.sql.limits;
    let title = match &v.peek {
        Some((flow, PeekKind::Output)) => {
            format!("Peek: latest output rows of {flow} (o: refresh, i: input)")
        }
        Some((flow, PeekKind::Input)) => {
            format!("Peek: last input rows of {flow} (i: refresh, o: output)")
        }
        None => format!(
            "SQL, read-only: at most {} rows, {}",
            crate::sql::grouped(limits.max_rows),
            humantime::format_duration(limits.timeout)
        ),
    };
    let mut snap = SqlSnap {
        title,
        input: v.peek.is_none().then(|| v.input.clone()),
        status: String::new(),
        status_role: Role::Dim,
        columns: Vec::new(),
        widths: Vec::new(),
        rows: Vec::new(),
        first_row: v.row,
        total_rows: 0,
        first_col: v.col,
    };
    match &v.run {
        SqlRun::Idle => {
            snap.status = format!(
                "Enter runs the query; tables: {}",
                if app.sql.table_names.is_empty() {
                    "none known".to_string()
                } else {
                    app.sql.table_names.join(", ")
                }
            );
        }
        SqlRun::Running { started_ms, .. } => {
            snap.status = format!(
                "running for {} (Esc cancels; the limit is {})",
                format::span_ms((app.now_ms - started_ms).max(0)),
                humantime::format_duration(limits.timeout)
            );
            snap.status_role = Role::Warn;
        }
        SqlRun::Failed(e) => {
            snap.status = format!("error: {e}");
            snap.status_role = Role::Bad;
        }
        SqlRun::Done(r) => {
            snap.status = match &r.title {
                Some(t) => format!("{t}: {}", r.summary),
                None => r.summary.clone(),
            };
            snap.status_role = if r.truncated { Role::Warn } else { Role::Good };
            snap.columns = r.columns.clone();
            snap.widths = r.widths.clone();
            snap.total_rows = r.rows.len();
            snap.rows = r
                .rows
                .iter()
                .skip(v.row)
                .take(SQL_ROWS_SHOWN)
                .cloned()
                .collect();
        }
    }
    snap
}

/// The playbook overlay: live evidence beside the playbook's lines.
#[derive(Debug, Clone)]
pub struct PlaybookSnap {
    pub title: String,
    pub evidence: Vec<(String, String)>,
    pub evidence_role: Role,
    pub lines: Vec<PlaybookLine>,
    /// Index in `lines` of the selected step.
    pub selected_line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    Heading,
    Subheading,
    Step { checked: bool, selected: bool },
    Text,
}

#[derive(Debug, Clone)]
pub struct PlaybookLine {
    pub kind: LineKind,
    pub text: String,
}

#[derive(Debug, Clone)]
pub enum Body {
    Overview(OverviewSnap),
    Detail(Box<DetailSnap>),
}

#[derive(Debug, Clone)]
pub struct OverviewSnap {
    /// `WM DELAY` (wall clock − watermark) or `SIM DELAY` (a replay's simulated clock − watermark).
    pub delay_header: &'static str,
    pub rows: Vec<FlowRow>,
    pub selected: Option<usize>,
    pub events_focused: bool,
    pub events: Vec<EventRow>,
    pub events_scroll: usize,
}

#[derive(Debug, Clone)]
pub struct FlowRow {
    pub name: String,
    pub status: String,
    pub status_role: Role,
    pub batch: String,
    pub input_rate: String,
    pub processed_rate: String,
    pub backlog: String,
    pub watermark_delay: String,
    /// Event-time lag: the max event time seen minus the watermark.
    pub event_lag: String,
    pub state_rows: String,
    pub last_duration: String,
    pub last_error: String,
    pub health: String,
    pub health_role: Role,
}

#[derive(Debug, Clone)]
pub struct EventRow {
    pub time: String,
    pub flow: String,
    pub kind: &'static str,
    pub role: Role,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct DetailSnap {
    pub flow: String,
    pub focus: Pane,
    pub zoom: bool,
    pub rates: ChartSnap,
    pub backlog: BacklogSnap,
    pub watermark: WatermarkSnap,
    pub state: StateSnap,
    pub durations: Vec<DurationRow>,
    pub history: Vec<HistoryRow>,
    pub timeline: Vec<EventRow>,
    pub scroll: [usize; 7],
}

#[derive(Debug, Clone)]
pub struct ChartSnap {
    pub x_bounds: [f64; 2],
    pub x_labels: Vec<String>,
    pub y_bounds: [f64; 2],
    pub y_labels: Vec<String>,
    pub series: Vec<SeriesSnap>,
    /// Why there is nothing to plot.
    pub empty: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SeriesSnap {
    pub name: String,
    /// Runs of points without a gap; x in seconds relative to the window's end.
    pub segments: Vec<Vec<(f64, f64)>>,
    pub index: usize,
}

/// One Kafka partition's lag (the backlog pane of a Kafka flow).
#[derive(Debug, Clone)]
pub struct LagRow {
    pub partition: String,
    pub latest: String,
    pub committed: String,
    pub messages: String,
    pub time: String,
    pub role: Role,
}

#[derive(Debug, Clone)]
pub struct BacklogSnap {
    /// A Kafka flow: per-partition lag, furthest behind first (drawn instead of the charts).
    pub partitions: Option<Vec<LagRow>>,
    pub forecast: String,
    pub forecast_role: Role,
    pub now: String,
    pub files: ChartSnap,
    pub bytes: ChartSnap,
}

#[derive(Debug, Clone)]
pub struct WatermarkSnap {
    /// `(label, value)` lines; empty when the flow has no event time.
    pub lines: Vec<(String, String)>,
    /// A flow of several inputs (a union, a stream-stream join): each input's own
    /// watermark, the one holding the flow's marked, idle ones flagged.
    pub inputs: Vec<InputWatermarkRow>,
    pub chart: ChartSnap,
    pub empty: Option<String>,
}

/// One input of a multi-input flow in the watermark pane.
#[derive(Debug, Clone)]
pub struct InputWatermarkRow {
    /// `left`, `right`, `source 2`...
    pub input: String,
    /// The source's description (`FileStreamSource[...]`).
    pub source: String,
    pub watermark: String,
    /// How far the input's watermark is ahead of the holder's (`+4m 00s`); `0` for the holder.
    pub ahead: String,
    /// Rows it read in the last batch.
    pub rows: String,
    /// `holds watermark`, `idle 3 batches`, `no data yet`.
    pub note: String,
    pub role: Role,
}

#[derive(Debug, Clone)]
pub struct StateSnap {
    pub operators: Vec<OperatorRow>,
    pub note: Option<String>,
    pub empty: Option<String>,
}

#[derive(Debug, Clone)]
pub struct OperatorRow {
    pub name: String,
    pub rows: String,
    pub updated: String,
    pub removed: String,
    pub dropped: String,
    pub memory: String,
    pub disk: String,
}

#[derive(Debug, Clone)]
pub struct DurationRow {
    pub batch_id: u64,
    pub phases: [u64; 5],
    pub total: u64,
}

#[derive(Debug, Clone)]
pub struct HistoryRow {
    pub batch: String,
    pub offsets: String,
    pub files: String,
    pub input_rows: String,
    pub output_rows: String,
    pub duration: String,
    pub delta_version: String,
    pub state: String,
    pub role: Role,
}

/// A chart's series: name and how to read the value from a sample.
type SeriesSpec<'a> = Vec<(&'a str, Box<dyn Fn(&Sample) -> Option<f64>>)>;

/// How many recent batches the durations and history panes keep.
const TABLE_ROWS: usize = 500;

impl Snapshot {
    pub fn of(app: &App) -> Snapshot {
        let as_of = app.as_of();
        let (header_right, header_role) = if app.quitting && !app.engine_done {
            ("STOPPING (q again: abort)".to_string(), Role::Warn)
        } else if app.freeze.is_some() {
            (
                format!(
                    "FROZEN {} ({}){}window {}",
                    format::clock(as_of),
                    format::offset_label(-(app.now_ms - as_of) as f64 / 1000.0),
                    app.theme.sep(),
                    format::span_ms(app.window_ms)
                ),
                Role::Warn,
            )
        } else {
            (
                format!(
                    "LIVE {}{}window {}",
                    format::clock(as_of),
                    app.theme.sep(),
                    format::span_ms(app.window_ms)
                ),
                Role::Good,
            )
        };
        let command = match app.mode {
            Mode::Run => "weir run",
            Mode::Attach => "weir attach (read-only)",
        };
        let mut header_left = format!("{command}{}{}", app.theme.sep(), app.title);
        let body = match app.view {
            View::Overview => Body::Overview(overview(app, as_of)),
            View::Detail => match app.current_flow() {
                Some(f) => {
                    header_left.push_str(&format!(
                        " {} {}",
                        if app.theme.ascii { ">" } else { "›" },
                        f.name
                    ));
                    if let Some(h) = &f.health {
                        header_left.push_str(&format!("{}health {}", app.theme.sep(), h.state));
                    }
                    Body::Detail(Box::new(detail(app, f, as_of)))
                }
                None => Body::Overview(overview(app, as_of)),
            },
        };
        let (status_line, status_role) = status_line(app);
        let overlay = match &app.overlay {
            Overlay::None => OverlaySnap::None,
            Overlay::Help { scroll } => {
                let (keys, commands) = keys::help(app);
                OverlaySnap::Help {
                    keys,
                    commands,
                    scroll: *scroll,
                }
            }
            Overlay::Prompt { kind, text } => OverlaySnap::Prompt {
                prefix: if *kind == PromptKind::Command {
                    ':'
                } else {
                    '/'
                },
                text: text.clone(),
            },
            Overlay::Confirm(c) => OverlaySnap::Confirm {
                question: c.question(),
            },
            Overlay::Playbook(v) => OverlaySnap::Playbook(Box::new(playbook_snap(app, v))),
            Overlay::Action(d) => OverlaySnap::Action {
                title: format!("Dry run: {} (flow {})", d.plan.action, d.flow),
                lines: d.plan.render().lines().map(str::to_string).collect(),
                prompt: if d.plan.needs_confirmation {
                    format!(
                        "This moves a checkpoint or changes a table. Type {} and Enter to run it; Esc cancels.",
                        d.word
                    )
                } else {
                    "Nothing is moved or changed. Enter runs it; Esc cancels.".to_string()
                },
                typed: Some(d.typed.clone()),
            },
            Overlay::Maintenance(d) => OverlaySnap::Action {
                title: format!("Dry run: {} (flow {})", d.plan.kind().word(), d.flow),
                lines: d.plan.render().lines().map(str::to_string).collect(),
                prompt: match d.plan.blocked() {
                    Some(why) => format!("Nothing to run ({why}). n or Esc closes."),
                    None => format!(
                        "Changes the table (weir table {} --yes): y runs it, n cancels.",
                        d.plan.kind().word()
                    ),
                },
                typed: None,
            },
            Overlay::Sql(v) => OverlaySnap::Sql(Box::new(sql_snap(app, v))),
            Overlay::Graph { cursor } => {
                OverlaySnap::Graph(Box::new(graph_snap(app, *cursor, as_of)))
            }
        };
        Snapshot {
            theme: app.theme,
            header_left,
            header_right,
            header_role,
            status_line,
            status_role,
            hints: keys::hints(app),
            overlay,
            body,
        }
    }
}

fn status_line(app: &App) -> (String, Role) {
    if let Some(m) = &app.message {
        return (m.text.clone(), if m.bad { Role::Bad } else { Role::Plain });
    }
    if !app.filter.is_empty() {
        return (format!("filter: {}   (Esc clears)", app.filter), Role::Warn);
    }
    if app.events_dropped > 0 {
        return (
            format!(
                "{} engine event(s) dropped while the console lagged (the progress files have them)",
                app.events_dropped
            ),
            Role::Warn,
        );
    }
    let as_of = app.as_of();
    let mut counts: Vec<(FlowStatus, usize)> = Vec::new();
    for f in &app.flows {
        if let Some(s) = f.status_at(as_of) {
            match counts.iter_mut().find(|(k, _)| *k == s) {
                Some((_, n)) => *n += 1,
                None => counts.push((s, 1)),
            }
        }
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|(s, n)| format!("{n} {}", s.label()))
        .collect();
    let n = app.flows.len();
    let mut text = format!("{n} flow{}", if n == 1 { "" } else { "s" });
    if !parts.is_empty() {
        text.push_str(": ");
        text.push_str(&parts.join(", "));
    }
    if let Some(pct) = app.loading {
        text.push_str(&format!(
            "{}loading event log {pct}% (health once the history is read)",
            app.theme.sep()
        ));
        return (text, Role::Warn);
    }
    if app.mode == Mode::Attach {
        text.push_str(&format!(
            "{}following the checkpoint files",
            app.theme.sep()
        ));
    }
    if let Some(sim) = app.replay_clock.and_then(|c| c.at(as_of)) {
        text.push_str(&format!(
            "{}replay clock {}",
            app.theme.sep(),
            format::datetime(sim)
        ));
    }
    (text, Role::Dim)
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

fn event_role(kind: EventKind) -> Role {
    match kind {
        EventKind::Error => Role::Bad,
        EventKind::Operator | EventKind::Health | EventKind::Alert => Role::Warn,
        EventKind::Start | EventKind::Schema => Role::Good,
        _ => Role::Plain,
    }
}

fn event_row(e: &TimelineEvent) -> EventRow {
    EventRow {
        time: format::clock(e.t_ms),
        flow: e.flow.clone(),
        kind: e.kind.label(),
        role: event_role(e.kind),
        text: e.text.clone(),
    }
}

fn matches_filter(filter: &str, texts: &[&str]) -> bool {
    filter.is_empty() || {
        let f = filter.to_lowercase();
        texts.iter().any(|t| t.to_lowercase().contains(&f))
    }
}

fn last_sample(f: &FlowModel, as_of: i64) -> Option<&Sample> {
    let n = f.samples_until(as_of);
    n.checked_sub(1).and_then(|i| f.samples.get(i))
}

fn overview(app: &App, as_of: i64) -> OverviewSnap {
    let visible = app.visible_flows();
    let rows: Vec<FlowRow> = visible
        .iter()
        .map(|i| {
            flow_row(
                &app.flows[*i],
                as_of,
                app.replay_clock.as_ref(),
                app.loading.is_some(),
            )
        })
        .collect();
    let selected = visible.iter().position(|i| *i == app.selected);
    let events = merged_events(app, as_of, OVERVIEW_EVENTS)
        .into_iter()
        .filter(|e| matches_filter(&app.filter, &[&e.flow, &e.text, e.kind.label()]))
        .map(event_row)
        .collect();
    OverviewSnap {
        delay_header: if app.replay_clock.and_then(|c| c.at(as_of)).is_some() {
            "SIM DELAY"
        } else {
            "WM DELAY"
        },
        rows,
        selected,
        events_focused: app.overview_events,
        events,
        events_scroll: app.events_scroll,
    }
}

/// A Kafka flow's backlog pane: the lag of every partition (messages, and the newest
/// message's time minus the oldest unread one's), the furthest behind, and the
/// catch-up forecast over all partitions from the lag's trend (or the processing rate).
fn kafka_backlog(
    backlog: &mut BacklogSnap,
    view: &super::model::KafkaLagView,
    f: &FlowModel,
    last: Option<&Sample>,
    status: Option<FlowStatus>,
    as_of: i64,
) {
    let age = format::duration_ms((as_of - view.at_ms).max(0));
    let lag = match &view.lag {
        Err(e) => {
            backlog.forecast = "source_unavailable: the Kafka cluster cannot be reached".into();
            backlog.forecast_role = Role::Bad;
            backlog.now = format!("lag unknown ({age} ago): {e}");
            backlog.partitions = Some(Vec::new());
            return;
        }
        Ok(l) => l,
    };
    let total: u64 = lag.iter().map(|p| p.messages).sum();
    let mut sorted: Vec<&crate::source::kafka::lag::PartitionLag> = lag.iter().collect();
    sorted.sort_by(|a, b| b.messages.cmp(&a.messages).then(a.tp.cmp(&b.tp)));
    let time = |p: &crate::source::kafka::lag::PartitionLag| {
        p.lag_ms
            .map_or_else(|| "?".to_string(), format::duration_ms)
    };
    backlog.now = match sorted.first() {
        Some(p) if p.messages > 0 => format!(
            "lag {} msgs, {} partitions · furthest: {} {} msgs, {}",
            format::count(total),
            lag.len(),
            p.tp,
            format::count(p.messages),
            time(p)
        ),
        _ => format!("lag 0, {} partitions (measured {age} ago)", lag.len()),
    };
    let (text, role) = if total == 0 {
        ("caught up: no lag".to_string(), Role::Good)
    } else if let Some(
        s @ (FlowStatus::Paused | FlowStatus::Stopped | FlowStatus::Failed | FlowStatus::Stopping),
    ) = status
    {
        (
            format!(
                "not draining: flow is {} with {} msgs waiting",
                s.label(),
                format::count(total)
            ),
            Role::Bad,
        )
    } else {
        // The lag's trend over the last minute, else the processing rate alone.
        let trend = f
            .kafka_lag_trend
            .front()
            .zip(f.kafka_lag_trend.back())
            .and_then(|((t0, l0), (t1, l1))| {
                let dt = (t1 - t0) as f64 / 1000.0;
                (dt >= 5.0).then(|| (*l1 as f64 - *l0 as f64) / dt)
            });
        match (trend, last.map(|s| s.processed_rps)) {
            (Some(slope), _) if slope < 0.0 => (
                format!(
                    "drains in {} at current rates",
                    format::eta(total as f64 / -slope)
                ),
                Role::Warn,
            ),
            (Some(slope), _) => (
                format!("not draining: lag {slope:+.1} msg/s at current rates"),
                Role::Bad,
            ),
            (None, Some(rps)) if rps > 0.0 => (
                format!(
                    "drains in {} at {} (no trend yet)",
                    format::eta(total as f64 / rps),
                    format::rate(rps)
                ),
                Role::Warn,
            ),
            _ => (
                "lag: no estimate until the next batch".to_string(),
                Role::Dim,
            ),
        }
    };
    backlog.forecast = text;
    backlog.forecast_role = role;
    backlog.partitions = Some(
        sorted
            .iter()
            .map(|p| LagRow {
                partition: p.tp.to_string(),
                latest: p.latest.to_string(),
                committed: p.committed.map_or("-".into(), |c| c.to_string()),
                messages: format::count(p.messages),
                time: time(p),
                role: if p.messages == 0 {
                    Role::Good
                } else {
                    Role::Warn
                },
            })
            .collect(),
    );
}

/// The latest event time the flow has seen up to `as_of` (a batch's `eventTime.max` is
/// that batch's; a batch of late rows has an older one).
fn max_event_seen(f: &FlowModel, as_of: i64) -> Option<i64> {
    f.samples
        .range(..f.samples_until(as_of))
        .filter_map(|s| s.max_event_ms)
        .max()
}

/// The clock watermark delays are measured against: a replay's simulated clock, else the wall clock.
fn delay_clock(clock: Option<&super::app::ReplayClock>, wall_ms: i64) -> i64 {
    clock.and_then(|c| c.at(wall_ms)).unwrap_or(wall_ms)
}

/// A row of the overview; `loading`: the event log's history is still being read, so the
/// batch is the checkpoint's latest when the records read so far are behind it.
fn flow_row(
    f: &FlowModel,
    as_of: i64,
    clock: Option<&super::app::ReplayClock>,
    loading: bool,
) -> FlowRow {
    let status = f.status_at(as_of);
    let s = last_sample(f, as_of);
    let dash = || "-".to_string();
    let backlog = match (&f.kafka_lag, s.and_then(|s| s.backlog_files)) {
        (Some(view), _) => match &view.lag {
            Ok(l) => format!("{} msgs", format::count(l.iter().map(|p| p.messages).sum())),
            Err(_) => "unavailable".to_string(),
        },
        (None, Some(files)) => match s.and_then(|s| s.backlog_bytes) {
            Some(b) => format!("{} / {}", format::count(files), format::bytes(b)),
            None => format::count(files),
        },
        // Kafka offsets, Delta versions, rate rows behind the latest offset.
        (None, None) => match s.and_then(|s| s.backlog.zip(s.backlog_unit)) {
            Some((n, unit)) => format!("{} {}", format::count(n), unit.noun()),
            None => dash(),
        },
    };
    let checkpoint_batch = if loading {
        f.batches.last_planned.max(f.batches.last_committed)
    } else {
        None
    };
    FlowRow {
        name: f.name.clone(),
        status: status.map_or("unknown", FlowStatus::label).to_string(),
        status_role: status_role(status),
        batch: match (s.map(|s| s.batch_id), checkpoint_batch) {
            (Some(b), Some(c)) if c > b => c.to_string(),
            (None, Some(c)) => c.to_string(),
            (Some(b), _) => b.to_string(),
            (None, None) => dash(),
        },
        input_rate: s.map_or_else(dash, |s| format::rate(s.input_rps)),
        processed_rate: s.map_or_else(dash, |s| format::rate(s.processed_rps)),
        backlog,
        watermark_delay: s
            .and_then(|s| s.watermark_ms)
            .map_or_else(dash, |w| format::duration_ms(delay_clock(clock, as_of) - w)),
        event_lag: max_event_seen(f, as_of)
            .zip(s.and_then(|s| s.watermark_ms))
            .map_or_else(dash, |(m, w)| format::duration_ms(m - w)),
        state_rows: s
            .and_then(|s| s.state_rows)
            .map_or_else(dash, format::count),
        last_duration: s.map_or_else(dash, |s| format::duration_ms(s.duration_ms as i64)),
        last_error: f
            .last_error
            .as_ref()
            .filter(|e| e.t_ms <= as_of)
            .map_or_else(String::new, |e| e.text.clone()),
        health: f
            .health
            .as_ref()
            .map_or_else(dash, |h| health_label(h.state).to_string()),
        health_role: f
            .health
            .as_ref()
            .map_or(Role::Dim, |h| health_role(h.state)),
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

/// Evidence as label/value lines, only the facts that are known.
pub fn evidence_lines(h: &Health) -> Vec<(String, String)> {
    let e = &h.evidence;
    let mut out = vec![("state".to_string(), h.state.to_string())];
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            out.push((k.to_string(), v));
        }
    };
    for r in &e.reasons {
        put("why", Some(r.clone()));
    }
    put(
        "window",
        e.window_batches.map(|w| match e.batches {
            Some((a, b)) => format!("{w} batches ({a}..={b})"),
            None => format!("{w} batches"),
        }),
    );
    put(
        "backlog",
        e.backlog_files
            .map(|f| match e.backlog_bytes {
                Some(b) => format!("{} files / {}", format::count(f), format::bytes(b)),
                None => format!("{} files", format::count(f)),
            })
            .or_else(|| {
                e.backlog
                    .zip(e.backlog_unit)
                    .map(|(n, u)| format!("{} {} behind", format::count(n), u.noun()))
            }),
    );
    put("input", e.input_rows_per_second.map(format::rate));
    put("processing", e.processed_rows_per_second.map(format::rate));
    put(
        "files/batch",
        e.files_per_batch.map(|f| match e.max_files_per_trigger {
            Some(cap) => format!("{f:.1} (cap {cap})"),
            None => format!("{f:.1}"),
        }),
    );
    put(
        "catch-up",
        e.catch_up_secs
            .map(|s| format!("drains in {}", format::eta(s))),
    );
    put(
        "event delay",
        e.event_time_delay_ms.map(|d| match e.freshness_ms {
            Some(f) => format!(
                "{} (target {})",
                format::duration_ms(d),
                format::duration_ms(f)
            ),
            None => format::duration_ms(d),
        }),
    );
    put(
        "rescued",
        e.rescued_rows
            .map(|r| format!("{r} of {} rows", e.input_rows.unwrap_or(0))),
    );
    if let Some(err) = &e.error {
        put(
            "error",
            Some(format!(
                "{} [{}, {}]",
                err.kind,
                crate::health::domain_str(err.domain),
                if err.retryable {
                    "retryable"
                } else {
                    "not retryable"
                }
            )),
        );
        put("message", Some(err.message.clone()));
    }
    put("batch", e.batch_id.map(|b| b.to_string()));
    put("file", e.file.clone());
    out
}

fn playbook_snap(app: &App, v: &PlaybookView) -> PlaybookSnap {
    let (text, health) = v.rendered(app);
    let mut lines = Vec::new();
    let mut step = 0usize;
    let mut selected_line = 0;
    for raw in text.lines() {
        let (kind, text) = if let Some(t) = raw.strip_prefix("### ") {
            (LineKind::Subheading, t.to_string())
        } else if let Some(t) = raw.strip_prefix("## ").or_else(|| raw.strip_prefix("# ")) {
            (LineKind::Heading, t.to_string())
        } else if let Some(t) = raw.trim_start().strip_prefix("- [ ] ") {
            let selected = step == v.cursor;
            if selected {
                selected_line = lines.len();
            }
            let kind = LineKind::Step {
                checked: v.checked.contains(&step),
                selected,
            };
            step += 1;
            (kind, t.to_string())
        } else {
            (LineKind::Text, raw.to_string())
        };
        lines.push(PlaybookLine { kind, text });
    }
    PlaybookSnap {
        title: format!(
            "Playbook: {} · flow {} ({} of {} steps checked)",
            v.state,
            v.flow,
            v.checked.len(),
            step
        ),
        evidence_role: health_role(health.state),
        evidence: evidence_lines(&health),
        lines,
        selected_line,
    }
}

/// The end of a flow's chart window: the view's instant, or the last batch of a flow that no longer runs.
fn window_end(f: &FlowModel, as_of: i64) -> i64 {
    let alive = f.status_at(as_of).is_some_and(super::model::status_alive);
    match last_sample(f, as_of) {
        Some(s) if !alive => s.t_ms.min(as_of),
        _ => as_of,
    }
}

fn detail(app: &App, f: &FlowModel, as_of: i64) -> DetailSnap {
    let end = window_end(f, as_of);
    let start = end - app.window_ms;
    let upto = f.samples_until(as_of);
    let first = f.samples.partition_point(|s| s.t_ms < start);
    // One point before the window so lines enter it from the left edge.
    let from = first.saturating_sub(1);
    let window: Vec<&Sample> = f.samples.range(from..upto.max(from)).collect();
    let all_until: Vec<&Sample> = f.samples.range(..upto).collect();
    let x_labels = vec![
        format::offset_label(-app.window_ms as f64 / 1000.0),
        format::offset_label(-app.window_ms as f64 / 2000.0),
        if end == app.now_ms {
            "now".to_string()
        } else {
            format::clock(end)
        },
    ];
    let chart = |series: SeriesSpec, empty: &str, label: fn(f64) -> String| -> ChartSnap {
        build_chart(&window, start, end, &x_labels, series, empty, label)
    };
    let rates = chart(
        vec![
            ("input", Box::new(|s: &Sample| Some(s.input_rps))),
            ("processing", Box::new(|s: &Sample| Some(s.processed_rps))),
        ],
        "no batches in this window",
        format::compact,
    );
    let status = f.status_at(as_of);
    let recent: Vec<&Sample> = all_until.iter().rev().take(64).rev().copied().collect();
    let fc = forecast(&recent, status);
    let forecast_role = match fc {
        super::forecast::Forecast::CaughtUp => Role::Good,
        super::forecast::Forecast::Drains { .. } => Role::Warn,
        super::forecast::Forecast::Unknown => Role::Dim,
        _ => Role::Bad,
    };
    let last = all_until.last().copied();
    // A source without a file count (Kafka, Delta, rate): its backlog from Spark's latest
    // offset, in its own unit, takes the files chart.
    let other_unit = last
        .filter(|s| s.backlog_files.is_none())
        .and_then(|s| s.backlog_unit)
        .filter(|u| *u != crate::records::BacklogUnit::Files);
    let now_text = match (last, other_unit) {
        (Some(s), Some(u)) => format!(
            "behind the latest offset after batch {}: {}",
            s.batch_id,
            s.backlog.map_or("?".into(), |v| u.count(v))
        ),
        (Some(s), None) if s.backlog_files.is_none() => {
            format!("after batch {}: backlog unknown", s.batch_id)
        }
        (Some(s), None) => format!(
            "outstanding after batch {}: {} file(s), {}",
            s.batch_id,
            s.backlog_files.map_or("?".into(), |v| v.to_string()),
            s.backlog_bytes.map_or("? bytes".into(), format::bytes)
        ),
        (None, _) => "no batch yet".into(),
    };
    let files_chart = match other_unit {
        Some(u) => chart(
            vec![(
                u.noun(),
                Box::new(move |s: &Sample| {
                    s.backlog
                        .filter(|_| s.backlog_unit == Some(u))
                        .map(|v| v as f64)
                }),
            )],
            "no backlog metric in this window",
            format::compact,
        ),
        None => chart(
            vec![(
                "files",
                Box::new(|s: &Sample| s.backlog_files.map(|v| v as f64)),
            )],
            "no backlog metric in this window",
            format::compact,
        ),
    };
    let mut backlog = BacklogSnap {
        partitions: None,
        forecast: fc.text(),
        forecast_role,
        now: now_text,
        files: files_chart,
        bytes: chart(
            vec![(
                "bytes",
                Box::new(|s: &Sample| s.backlog_bytes.map(|v| v as f64)),
            )],
            "no backlog metric in this window",
            |v| format::bytes(v as u64),
        ),
    };
    if let Some(view) = &f.kafka_lag {
        kafka_backlog(&mut backlog, view, f, last, status, as_of);
    }
    // A replay's event times are its own: delays against its simulated clock.
    let clock = app.replay_clock;
    let (wm_series, max_series) = if clock.is_some() {
        ("replay - watermark", "replay - max event")
    } else {
        ("wall - watermark", "wall - max event")
    };
    // Before the replay's clock started there is no simulated time: no point.
    let at = move |t: i64| match &clock {
        Some(c) => c.at(t),
        None => Some(t),
    };
    let mut watermark = watermark_snap(
        last,
        max_event_seen(f, as_of),
        end,
        clock.as_ref(),
        chart(
            vec![
                (
                    wm_series,
                    Box::new(move |s: &Sample| {
                        // Before its first data a watermark is the epoch: no point.
                        s.watermark_ms
                            .filter(|w| *w > 0)
                            .zip(at(s.t_ms))
                            .map(|(w, now)| (now - w) as f64 / 1000.0)
                    }),
                ),
                (
                    max_series,
                    Box::new(move |s: &Sample| {
                        s.max_event_ms
                            .zip(at(s.t_ms))
                            .map(|(m, now)| (now - m) as f64 / 1000.0)
                    }),
                ),
            ],
            "no event time in this window",
            |v| format::duration_ms((v * 1000.0) as i64),
        ),
    );
    watermark.inputs = input_watermarks(&all_until, f);
    let state = state_snap(f, last, app.freeze.is_some());
    let durations = all_until
        .iter()
        .rev()
        .take(TABLE_ROWS)
        .map(|s| DurationRow {
            batch_id: s.batch_id,
            phases: s.phases,
            total: s.duration_ms,
        })
        .collect();
    let mut history: Vec<HistoryRow> = Vec::new();
    let live = app.freeze.is_none();
    if let Some(pending) = f.batches.pending().filter(|_| live)
        && last.is_none_or(|s| s.batch_id < pending)
    {
        history.push(HistoryRow {
            batch: pending.to_string(),
            offsets: f
                .batches
                .last_committed
                .map_or("-".into(), |c| c.to_string())
                + app.theme.arrow()
                + &pending.to_string(),
            files: "-".into(),
            input_rows: "-".into(),
            output_rows: "-".into(),
            duration: f.batches.pending_since_ms.map_or("-".into(), |t| {
                format!("{} so far", format::duration_ms(app.now_ms - t))
            }),
            delta_version: "-".into(),
            state: "pending".into(),
            role: Role::Warn,
        });
    }
    history.extend(all_until.iter().rev().take(TABLE_ROWS).map(|s| HistoryRow {
        batch: s.batch_id.to_string(),
        offsets: format!(
            "{}{}{}",
            s.start_offset.as_deref().unwrap_or("-"),
            app.theme.arrow(),
            s.end_offset.as_deref().unwrap_or("-")
        ),
        files: s.files.to_string(),
        input_rows: format::count(s.input_rows),
        output_rows: if s.output_rows < 0 {
            "?".into()
        } else {
            format::count(s.output_rows as u64)
        },
        duration: format::duration_ms(s.duration_ms as i64),
        delta_version: s.delta_version.map_or("-".into(), |v| v.to_string()),
        state: if s.replayed {
            "committed (re-run)".into()
        } else {
            "committed".into()
        },
        role: if s.files_failed > 0 {
            Role::Bad
        } else {
            Role::Plain
        },
    }));
    history.retain(|h| matches_filter(&app.filter, &[&h.batch, &h.state, &h.delta_version]));
    let timeline = f
        .timeline
        .iter()
        .rev()
        .filter(|e| e.t_ms <= as_of)
        .filter(|e| matches_filter(&app.filter, &[&e.text, e.kind.label()]))
        .map(event_row)
        .collect();
    DetailSnap {
        flow: f.name.clone(),
        focus: app.focus,
        zoom: app.zoom,
        rates,
        backlog,
        watermark,
        state,
        durations,
        history,
        timeline,
        scroll: app.scroll,
    }
}

fn watermark_snap(
    last: Option<&Sample>,
    max_seen: Option<i64>,
    end: i64,
    clock: Option<&super::app::ReplayClock>,
    chart: ChartSnap,
) -> WatermarkSnap {
    let Some(s) = last.filter(|s| s.watermark_ms.is_some() || s.max_event_ms.is_some()) else {
        return WatermarkSnap {
            lines: Vec::new(),
            inputs: Vec::new(),
            chart,
            empty: Some("no event time: this flow has no watermark".into()),
        };
    };
    let opt_dt = |v: Option<i64>| v.map_or("-".to_string(), format::datetime);
    let gap = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => format::duration_ms(a - b),
        _ => "-".into(),
    };
    let mut lines = vec![
        ("max event time".into(), opt_dt(s.max_event_ms)),
        ("watermark".into(), opt_dt(s.watermark_ms)),
    ];
    match clock.and_then(|c| c.at(end)) {
        // A replay: its simulated clock is the one event times are compared with.
        Some(sim) => lines.extend([
            ("replay clock".into(), format::datetime(sim)),
            ("replay - watermark".into(), gap(Some(sim), s.watermark_ms)),
            ("wall clock".into(), format::datetime(end)),
        ]),
        None => lines.extend([
            ("wall clock".into(), format::datetime(end)),
            ("wall - watermark".into(), gap(Some(end), s.watermark_ms)),
        ]),
    }
    lines.extend([
        (
            "event-time lag".into(),
            match (max_seen, s.watermark_ms) {
                (Some(m), Some(w)) => format!("{} (max - wm)", format::duration_ms(m - w)),
                _ => "-".into(),
            },
        ),
        (
            "dropped (late)".into(),
            s.dropped_by_watermark.map_or("-".into(), |d| {
                format!("{} row(s) in batch {}", d, s.batch_id)
            }),
        ),
        (
            "late rows written".into(),
            format!("{} in batch {}", s.late_rows_written, s.batch_id),
        ),
    ]);
    WatermarkSnap {
        lines,
        inputs: Vec::new(),
        chart,
        empty: None,
    }
}

/// A source's short name: the last part of the path in its description
/// (`FileStreamSource[/srv/landing/eu]` → `eu`, `files:json landing/us` → `us`).
fn short_source(description: &str) -> String {
    let inner = match (description.find('['), description.rfind(']')) {
        (Some(a), Some(b)) if a < b => &description[a + 1..b],
        _ => description,
    };
    inner
        .rsplit(['/', ' ', ','])
        .find(|p| !p.is_empty())
        .unwrap_or(inner)
        .to_string()
}

/// A flow of several inputs: each input's own watermark after the last batch, how far
/// it is ahead of the flow's, its rows, and whether it is idle (no rows for the last
/// batches) or holds the flow's watermark (the minimum, under the default policy).
fn input_watermarks(samples: &[&Sample], f: &FlowModel) -> Vec<InputWatermarkRow> {
    let Some(s) = samples.last() else {
        return Vec::new();
    };
    if s.source_watermarks.len() < 2 {
        return Vec::new();
    }
    let join = f
        .inputs
        .iter()
        .any(|i| i.role == super::graph::InputRole::JoinRight);
    // The flow's next watermark is the holder's (the others are ahead of it).
    let flow_wm = s
        .source_watermarks
        .iter()
        .find(|(source, _)| s.watermark_held_by.as_deref() == Some(source.as_str()))
        .and_then(|(_, w)| *w);
    s.source_watermarks
        .iter()
        .enumerate()
        .map(|(i, (source, wm))| {
            let holds = s.watermark_held_by.as_deref() == Some(source.as_str());
            // Batches in a row, newest first, in which this input read nothing.
            let idle = samples
                .iter()
                .rev()
                .take_while(|b| b.source_rows.get(i).is_some_and(|r| *r == 0))
                .count();
            let mut notes = Vec::new();
            if holds {
                notes.push("holds watermark".to_string());
            }
            if wm.is_none() {
                notes.push("no data yet".to_string());
            } else if idle > 0 {
                notes.push(format!(
                    "idle {idle} batch{}",
                    if idle == 1 { "" } else { "es" }
                ));
            }
            InputWatermarkRow {
                input: match (join, i) {
                    (true, 0) => format!("left {}", short_source(source)),
                    (true, _) => format!("right {}", short_source(source)),
                    (false, i) => format!("{} {}", i + 1, short_source(source)),
                },
                source: source.clone(),
                watermark: wm.map_or("-".into(), format::month_day_time),
                ahead: match (wm, flow_wm) {
                    (Some(w), Some(f)) if *w > f => format!("+{}", format::duration_ms(w - f)),
                    (Some(_), Some(_)) => "0".into(),
                    _ => "-".into(),
                },
                rows: s
                    .source_rows
                    .get(i)
                    .map_or("-".into(), |r| format::count(*r)),
                note: notes.join(", "),
                role: if holds && (idle > 0 || wm.is_none()) {
                    Role::Bad
                } else if holds {
                    Role::Warn
                } else if idle > 0 || wm.is_none() {
                    Role::Dim
                } else {
                    Role::Plain
                },
            }
        })
        .collect()
}

fn state_snap(f: &FlowModel, last: Option<&Sample>, frozen: bool) -> StateSnap {
    let live_record = f
        .last_progress
        .as_ref()
        .filter(|p| last.is_some_and(|s| s.batch_id == p.batch_id));
    match (live_record, last) {
        (Some(p), _) if !p.state_operators.is_empty() => StateSnap {
            operators: p
                .state_operators
                .iter()
                .map(|o| OperatorRow {
                    name: o.operator_name.clone(),
                    rows: format::count(o.num_rows_total),
                    updated: format::count(o.num_rows_updated),
                    removed: format::count(o.num_rows_removed),
                    dropped: format::count(o.num_rows_dropped_by_watermark),
                    memory: format::bytes(o.memory_used_bytes),
                    disk: o
                        .custom_metrics
                        .get("rocksdbSstFileSize")
                        .or_else(|| o.custom_metrics.get("stateOnCurrentVersionSizeBytes"))
                        .map_or("-".into(), |v| format::bytes((*v).max(0) as u64)),
                })
                .collect(),
            note: Some(format!("as of batch {}", p.batch_id)),
            empty: None,
        },
        (_, Some(s)) if s.state_rows.is_some() => StateSnap {
            operators: vec![OperatorRow {
                name: "all operators".into(),
                rows: s.state_rows.map_or("-".into(), format::count),
                updated: "-".into(),
                removed: "-".into(),
                dropped: s.dropped_by_watermark.map_or("-".into(), format::count),
                memory: s.state_memory.map_or("-".into(), format::bytes),
                disk: "-".into(),
            }],
            note: Some(if frozen {
                format!("batch {} (per operator only in the live view)", s.batch_id)
            } else {
                format!("as of batch {}", s.batch_id)
            }),
            empty: None,
        },
        _ => StateSnap {
            operators: Vec::new(),
            note: None,
            empty: Some("stateless flow: no state operators".into()),
        },
    }
}

/// A chart: the series over `[start, end]`, broken where batches are far apart.
fn build_chart(
    window: &[&Sample],
    start: i64,
    end: i64,
    x_labels: &[String],
    series: SeriesSpec,
    empty: &str,
    label: fn(f64) -> String,
) -> ChartSnap {
    let span = ((end - start) as f64 / 1000.0).max(1.0);
    let gap_ms = gap_threshold(window);
    let mut out = Vec::new();
    let mut y_max: f64 = 0.0;
    let mut any = false;
    for (index, (name, value)) in series.into_iter().enumerate() {
        let mut segments: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut prev_t: Option<i64> = None;
        for s in window {
            let Some(v) = value(s).filter(|v| v.is_finite()) else {
                prev_t = None;
                continue;
            };
            if s.t_ms >= start {
                any = true;
                y_max = y_max.max(v);
            }
            let x = ((s.t_ms - end) as f64 / 1000.0).max(-span);
            match (prev_t, segments.last_mut()) {
                (Some(p), Some(seg)) if s.t_ms - p <= gap_ms => seg.push((x, v)),
                _ => segments.push(vec![(x, v)]),
            }
            prev_t = Some(s.t_ms);
        }
        out.push(SeriesSnap {
            name: name.to_string(),
            segments,
            index,
        });
    }
    let top = nice_ceiling(y_max * 1.1);
    ChartSnap {
        x_bounds: [-span, 0.0],
        x_labels: x_labels.to_vec(),
        y_bounds: [0.0, top],
        y_labels: vec!["0".into(), label(top / 2.0), label(top)],
        series: out,
        empty: (!any).then(|| empty.to_string()),
    }
}

/// Batches further apart than this leave a gap: 3× the median interval, at least 10 s.
fn gap_threshold(window: &[&Sample]) -> i64 {
    let mut d: Vec<i64> = window.windows(2).map(|w| w[1].t_ms - w[0].t_ms).collect();
    if d.is_empty() {
        return i64::MAX;
    }
    d.sort_unstable();
    (d[d.len() / 2] * 3).max(10_000)
}

/// A round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at least `v`, at least 1.
fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_pane_names_the_source_holding_a_unions_watermark() {
        let record = |ts: &str, eu_rows: u64, us_wm: Option<&str>| {
            let mut p = crate::records::StreamingQueryProgress {
                timestamp: ts.into(),
                ..Default::default()
            };
            p.event_time
                .insert("watermark".into(), "2024-05-01T10:00:25.000Z".into());
            p.event_time
                .insert("max".into(), "2024-05-01T10:01:25.000Z".into());
            for (name, rows) in [
                ("files:json landing/eu", eu_rows),
                ("files:json landing/us", 7),
            ] {
                p.sources.push(crate::records::SourceProgress {
                    description: name.into(),
                    num_input_rows: rows,
                    ..Default::default()
                });
            }
            p.weir.watermark_held_by = Some("files:json landing/eu".into());
            p.weir.source_watermarks = vec![
                crate::records::SourceWatermark {
                    source: "files:json landing/eu".into(),
                    watermark: Some("2024-05-01T10:00:25.000Z".into()),
                    holds_watermark: true,
                },
                crate::records::SourceWatermark {
                    source: "files:json landing/us".into(),
                    watermark: us_wm.map(str::to_string),
                    holds_watermark: false,
                },
            ];
            Sample::from_progress(&p).unwrap()
        };
        let older = record("2024-05-01T10:00:20.000Z", 0, None);
        let sample = record(
            "2024-05-01T10:00:30.000Z",
            0,
            Some("2024-05-01T10:04:25.000Z"),
        );
        let chart = ChartSnap {
            x_bounds: [0.0, 1.0],
            x_labels: Vec::new(),
            y_bounds: [0.0, 1.0],
            y_labels: Vec::new(),
            series: Vec::new(),
            empty: None,
        };
        let snap = watermark_snap(Some(&sample), sample.max_event_ms, sample.t_ms, None, chart);
        let lines: Vec<String> = snap
            .lines
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        assert!(
            lines.contains(&"event-time lag: 1m 00s (max - wm)".to_string()),
            "{lines:?}"
        );
        let inputs = input_watermarks(&[&older, &sample], &FlowModel::new("u"));
        assert_eq!(inputs.len(), 2);
        assert_eq!(inputs[0].input, "1 eu");
        assert_eq!(inputs[0].note, "holds watermark, idle 2 batches");
        assert_eq!(
            inputs[0].role,
            Role::Bad,
            "an idle input holding the watermark"
        );
        assert_eq!(inputs[0].ahead, "0");
        assert_eq!(inputs[1].ahead, "+4m 00s");
        assert_eq!(inputs[1].rows, "7");
        assert_eq!(inputs[1].note, "");
    }

    #[test]
    fn a_replay_measures_delays_against_its_simulated_clock() {
        let clock = crate::console::app::ReplayClock {
            clock: Some(crate::demo::replay::SimulatedClock {
                wall_start_ms: 1_000_000,
                sim_start_ms: 50_000,
                speed: 3600.0,
            }),
            last_landed_ms: 3_600_000,
            done: false,
        };
        // One wall second later the simulated clock has moved an hour.
        assert_eq!(clock.at(1_001_000), Some(50_000 + 3_600_000));
        let done = crate::console::app::ReplayClock {
            done: true,
            ..clock
        };
        assert_eq!(
            done.at(9_000_000),
            Some(3_600_000),
            "a finished replay's clock stops"
        );
        assert_eq!(delay_clock(None, 42), 42);
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.3), 4.0);
        assert_eq!(nice_ceiling(1100.0), 1500.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
    }
}
