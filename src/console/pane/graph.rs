//! The pipeline graph (`x`, `:graph`): the flows as a tree from their sources to the
//! tables they write (`console::graph`), each flow with its health, rates, backlog and
//! watermark delay; Enter on a flow or a table opens that flow's detail.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Clear, Paragraph, Row, Table, TableState};

use super::help::HelpView;
use super::overview::{flow_row, last_sample};
use super::{Cx, Next, Overlay, block, health_role};
use crate::console::action::Action;
use crate::console::graph::{NodeRef, TreeRow, common_dir, prefix, short_path, tree, via_word};
use crate::console::model::{FlowModel, ReplayClock};
use crate::console::theme::{Role, Theme};
use crate::records::HealthState;

/// The row under the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphView {
    pub cursor: usize,
}

impl GraphView {
    /// The graph with the cursor on flow `selected`'s row.
    pub fn open(flows: &[FlowModel], selected: usize) -> Self {
        let cursor = tree(flows)
            .iter()
            .position(|r| r.node == NodeRef::Flow(selected))
            .unwrap_or(0);
        GraphView { cursor }
    }
}

/// The pipeline graph has the keyboard: move the cursor, open a flow, close.
pub fn update(v: &mut GraphView, cx: &mut Cx, action: &Action) -> Next {
    let rows = tree(cx.flows);
    let cursor = &mut v.cursor;
    let last = rows.len().saturating_sub(1);
    let step = |c: &mut usize, d: isize| *c = c.saturating_add_signed(d).min(last);
    match action {
        Action::Up => step(cursor, -1),
        Action::Down => step(cursor, 1),
        Action::PageUp => step(cursor, -10),
        Action::PageDown => step(cursor, 10),
        Action::Top => *cursor = 0,
        Action::Bottom => *cursor = last,
        Action::Enter => match rows.get(*cursor).and_then(TreeRow::flow) {
            Some(i) => return Next::Detail(i),
            None => cx.say("a source: Enter on a flow or a table opens its flow"),
        },
        Action::Graph | Action::InputCancel | Action::Back => return Next::Close,
        Action::Help => return Next::Open(Box::new(Overlay::Help(HelpView::default()))),
        _ => {}
    }
    Next::Stay
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

/// The graph of `flows` as of `as_of`; `clock`: a replay's (the delays are measured
/// against it); `loading`: the event logs' history is still being read.
pub fn snap(
    v: &GraphView,
    flows: &[FlowModel],
    as_of: i64,
    clock: Option<&ReplayClock>,
    loading: bool,
) -> GraphSnap {
    let cursor = v.cursor;
    let rows = tree(flows);
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
        flows[i]
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
                    let unavailable = flows.iter().any(|f| {
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
                    let row = flow_row(&flows[*i], as_of, clock, loading);
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
                    flows[*i].name.clone(),
                    flow_health_role(*i),
                    format!("{via} see above").trim().to_string(),
                ),
                NodeRef::Table { writer, path } => {
                    let version = last_sample(&flows[*writer], as_of)
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
                    flows[*writer]
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
            flows[*writer].name
        ),
        Some(NodeRef::Flow(i) | NodeRef::SeenFlow(i)) => {
            let f = &flows[*i];
            match f.health.as_ref().and_then(|h| h.evidence.reasons.first()) {
                Some(why) => format!("{}: {} (Enter opens its detail)", f.name, why),
                None => format!("{} (Enter opens its detail)", f.name),
            }
        }
        Some(NodeRef::OtherSink { writer }) => {
            format!("the sink of {}", flows[*writer].name)
        }
        None => "no flows".into(),
    };
    GraphSnap {
        delay_header: if clock.and_then(|c| c.at(as_of)).is_some() {
            "SIM DELAY"
        } else {
            "WM DELAY"
        },
        title: format!(
            "Pipeline graph: {} flow{}, sources to tables",
            flows.len(),
            if flows.len() == 1 { "" } else { "s" }
        ),
        rows: out,
        cursor,
        footer,
    }
}

/// The pipeline graph over the body: the tree of sources, flows and tables, each
/// flow with its health, rates, backlog and watermark delay; the cursor's row selected.
pub fn draw(frame: &mut Frame, body: Rect, g: &GraphSnap, theme: Theme) {
    frame.render_widget(Clear, body);
    let b = block(&g.title, true, theme);
    let inner = b.inner(body);
    frame.render_widget(b, body);
    if inner.height < 3 || inner.width < 20 {
        return;
    }
    let [table_area, footer] =
        Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(inner);
    // The node column (tree, name, what it is) takes what the figures leave.
    let wide = inner.width >= 108; // a terminal of 110 columns
    let mut head = vec!["NODE", "HEALTH"];
    let mut widths = vec![Constraint::Fill(1), Constraint::Length(7)];
    if wide {
        head.extend(["STATUS", "IN", "PROC"]);
        widths.extend([
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(7),
        ]);
    }
    head.extend(["BACKLOG", g.delay_header]);
    widths.extend([
        Constraint::Length(if wide { 15 } else { 13 }),
        Constraint::Length(9),
    ]);
    if wide {
        head.push("LAST");
        widths.push(Constraint::Length(7));
    }
    let rows = g.rows.iter().map(|r| {
        let mut node = vec![
            Span::styled(r.prefix.clone(), theme.style(Role::Dim)),
            Span::styled(r.label.clone(), theme.style(r.label_role)),
        ];
        if !r.kind.is_empty() {
            node.push(Span::styled(
                format!("  {}", r.kind),
                theme.style(Role::Dim),
            ));
        }
        let mut cells = vec![
            Cell::from(Line::from(node)),
            Cell::from(Span::styled(r.health.clone(), theme.style(r.health_role))),
        ];
        if wide {
            cells.extend([
                Cell::from(Span::styled(r.status.clone(), theme.style(r.status_role))),
                Cell::from(r.input_rate.clone()),
                Cell::from(r.processed_rate.clone()),
            ]);
        }
        cells.extend([
            Cell::from(r.backlog.clone()),
            Cell::from(r.watermark_delay.clone()),
        ]);
        if wide {
            cells.push(Cell::from(r.last_duration.clone()));
        }
        Row::new(cells)
    });
    let table = Table::new(rows, widths)
        .header(Row::new(head).style(theme.style(Role::Title)))
        .row_highlight_style(theme.style(Role::Selected));
    let mut state = TableState::default().with_selected(Some(g.cursor));
    frame.render_stateful_widget(table, table_area, &mut state);
    frame.render_widget(
        Paragraph::new(Span::styled(g.footer.clone(), theme.style(Role::Dim))),
        footer,
    );
}
