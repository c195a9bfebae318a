//! The overview: every flow's row (status, health, rates, backlog, watermark delay,
//! last error) over the events of all flows, newest first.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Span;
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};

use super::{
    Next, SnapCx, block, clamp_scroll, health_label, health_role, scroll_step, status_role,
};
use crate::console::action::Action;
use crate::console::format;
use crate::console::model::{
    EventKind, FlowModel, ReplayClock, Sample, TimelineEvent, merged_events,
};
use crate::console::theme::{Role, Theme};
use crate::engine::control::FlowStatus;

/// How many events are kept in the overview list (all flows merged).
pub const OVERVIEW_EVENTS: usize = 500;

/// Whether the events list (not the flows table) has the focus, and its scroll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverviewView {
    pub events_focused: bool,
    pub events_scroll: usize,
}

/// The flows whose name contains `filter` (any case), as indices.
pub fn visible(flows: &[FlowModel], filter: &str) -> Vec<usize> {
    let f = filter.to_lowercase();
    (0..flows.len())
        .filter(|i| f.is_empty() || flows[*i].name.to_lowercase().contains(&f))
        .collect()
}

/// Moving through the flows (or the events), Tab between the two, Enter opens the
/// selected flow's detail. `selected`: the index in `flows` of the selected flow.
pub fn update(
    v: &mut OverviewView,
    flows: &[FlowModel],
    filter: &str,
    selected: &mut usize,
    action: &Action,
) -> Next {
    if let Some(delta) = scroll_step(action) {
        if v.events_focused {
            v.events_scroll = v.events_scroll.saturating_add_signed(delta);
        } else {
            let visible = visible(flows, filter);
            if !visible.is_empty() {
                let pos = visible.iter().position(|i| *i == *selected).unwrap_or(0) as isize;
                let next = (pos + delta).clamp(0, visible.len() as isize - 1) as usize;
                *selected = visible[next];
            }
        }
        return Next::Stay;
    }
    match action {
        Action::NextPane | Action::PrevPane => v.events_focused = !v.events_focused,
        Action::Enter if v.events_focused || flows.is_empty() => {}
        Action::Enter => return Next::Detail(*selected),
        _ => return Next::Pass,
    }
    Next::Stay
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

fn event_role(kind: EventKind) -> Role {
    match kind {
        EventKind::Error => Role::Bad,
        EventKind::Operator | EventKind::Health | EventKind::Alert => Role::Warn,
        EventKind::Start | EventKind::Schema => Role::Good,
        _ => Role::Plain,
    }
}

pub fn event_row(e: &TimelineEvent) -> EventRow {
    EventRow {
        time: format::clock(e.t_ms),
        flow: e.flow.clone(),
        kind: e.kind.label(),
        role: event_role(e.kind),
        text: e.text.clone(),
    }
}

pub fn matches_filter(filter: &str, texts: &[&str]) -> bool {
    filter.is_empty() || {
        let f = filter.to_lowercase();
        texts.iter().any(|t| t.to_lowercase().contains(&f))
    }
}

pub fn last_sample(f: &FlowModel, as_of: i64) -> Option<&Sample> {
    let n = f.samples_until(as_of);
    n.checked_sub(1).and_then(|i| f.samples.get(i))
}

/// The latest event time the flow has seen up to `as_of` (a batch's `eventTime.max` is
/// that batch's; a batch of late rows has an older one).
pub fn max_event_seen(f: &FlowModel, as_of: i64) -> Option<i64> {
    f.samples
        .range(..f.samples_until(as_of))
        .filter_map(|s| s.max_event_ms)
        .max()
}

/// The clock watermark delays are measured against: a replay's simulated clock, else the wall clock.
pub fn delay_clock(clock: Option<&ReplayClock>, wall_ms: i64) -> i64 {
    clock.and_then(|c| c.at(wall_ms)).unwrap_or(wall_ms)
}

/// A row of the overview; `loading`: the event log's history is still being read, so the
/// batch is the checkpoint's latest when the records read so far are behind it.
pub fn flow_row(f: &FlowModel, as_of: i64, clock: Option<&ReplayClock>, loading: bool) -> FlowRow {
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

/// The overview as of `cx.as_of`; `selected`: the index in the flows of the selected one.
pub fn snap(v: &OverviewView, cx: &SnapCx, selected: usize) -> OverviewSnap {
    let as_of = cx.as_of;
    let visible = visible(cx.flows, cx.filter);
    let rows: Vec<FlowRow> = visible
        .iter()
        .map(|i| flow_row(&cx.flows[*i], as_of, cx.replay_clock.as_ref(), cx.loading))
        .collect();
    let selected = visible.iter().position(|i| *i == selected);
    let events = merged_events(cx.flows, as_of, OVERVIEW_EVENTS)
        .into_iter()
        .filter(|e| matches_filter(cx.filter, &[&e.flow, &e.text, e.kind.label()]))
        .map(event_row)
        .collect();
    OverviewSnap {
        delay_header: if cx.replay_clock.and_then(|c| c.at(as_of)).is_some() {
            "SIM DELAY"
        } else {
            "WM DELAY"
        },
        rows,
        selected,
        events_focused: v.events_focused,
        events,
        events_scroll: v.events_scroll,
    }
}

pub fn draw(frame: &mut Frame, area: Rect, o: &OverviewSnap, theme: Theme) {
    let table_h = ((o.rows.len() as u16) + 3).clamp(4, (area.height * 3 / 5).max(4));
    let [top, bottom] =
        Layout::vertical([Constraint::Length(table_h), Constraint::Fill(1)]).areas(area);
    let w = area.width;
    // Columns by priority: the widest layouts show everything.
    // Narrow terminals (80 columns over SSH): long flow names are cut (the detail
    // header shows the whole name) and the batch id gives way to the watermark delay,
    // so every flow's rates, backlog, lag and last error stay on one screen.
    let narrow = w < 100;
    let name_w = o
        .rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, if narrow { 14 } else { 24 }) as u16;
    let mut cols: Vec<(&str, Constraint)> = vec![
        ("FLOW", Constraint::Length(name_w)),
        ("STATUS", Constraint::Length(8)),
        ("HEALTH", Constraint::Length(7)),
    ];
    if !narrow {
        cols.push(("BATCH", Constraint::Length(6)));
    }
    cols.extend([
        ("IN", Constraint::Length(7)),
        ("PROC", Constraint::Length(7)),
        ("BACKLOG", Constraint::Length(if narrow { 13 } else { 15 })),
    ]);
    if narrow {
        cols.push((o.delay_header, Constraint::Length(9)));
    }
    let show_wm = w >= 100;
    let show_state = w >= 110;
    // Event-time lag (max event − watermark) beside the delay, where it fits.
    let show_lag = w >= 120;
    if show_wm {
        cols.push((o.delay_header, Constraint::Length(9)));
    }
    if show_lag {
        cols.push(("EV LAG", Constraint::Length(8)));
    }
    if show_state {
        cols.push(("STATE", Constraint::Length(6)));
    }
    // Below 100 columns the last batch's duration gives way to HEALTH and the last error.
    let show_last = w >= 100;
    if show_last {
        cols.push(("LAST", Constraint::Length(7)));
    }
    cols.push(("LAST ERROR", Constraint::Fill(1)));
    let header = Row::new(cols.iter().map(|(h, _)| Cell::from(*h))).style(theme.style(Role::Title));
    let rows = o.rows.iter().map(|r| {
        let mut cells = vec![
            Cell::from(r.name.clone()),
            Cell::from(Span::styled(r.status.clone(), theme.style(r.status_role))),
            Cell::from(Span::styled(r.health.clone(), theme.style(r.health_role))),
        ];
        if !narrow {
            cells.push(Cell::from(r.batch.clone()));
        }
        cells.extend([
            Cell::from(r.input_rate.clone()),
            Cell::from(r.processed_rate.clone()),
            Cell::from(r.backlog.clone()),
        ]);
        if narrow {
            cells.push(Cell::from(r.watermark_delay.clone()));
        }
        if show_wm {
            cells.push(Cell::from(r.watermark_delay.clone()));
        }
        if show_lag {
            cells.push(Cell::from(r.event_lag.clone()));
        }
        if show_state {
            cells.push(Cell::from(r.state_rows.clone()));
        }
        if show_last {
            cells.push(Cell::from(r.last_duration.clone()));
        }
        cells.push(Cell::from(Span::styled(
            r.last_error.clone(),
            theme.style(Role::Bad),
        )));
        Row::new(cells)
    });
    let table = Table::new(rows, cols.iter().map(|(_, c)| *c))
        .header(header)
        .block(block("Flows", !o.events_focused, theme))
        .row_highlight_style(theme.style(Role::Selected));
    let mut state =
        TableState::default().with_selected(if o.events_focused { None } else { o.selected });
    if o.rows.is_empty() {
        frame.render_widget(
            Paragraph::new(" no flow matches the filter").block(block(
                "Flows",
                !o.events_focused,
                theme,
            )),
            top,
        );
    } else {
        frame.render_stateful_widget(table, top, &mut state);
    }
    draw_events(
        frame,
        bottom,
        "Events (all flows, newest first)",
        &o.events,
        o.events_scroll,
        true,
        o.events_focused,
        theme,
    );
}

#[allow(clippy::too_many_arguments)]
fn draw_events(
    frame: &mut Frame,
    area: Rect,
    title: &str,
    events: &[EventRow],
    scroll: usize,
    with_flow: bool,
    focused: bool,
    theme: Theme,
) {
    let b = block(title, focused, theme);
    if events.is_empty() {
        frame.render_widget(
            Paragraph::new(" nothing yet")
                .style(theme.style(Role::Dim))
                .block(b),
            area,
        );
        return;
    }
    let visible = area.height.saturating_sub(2) as usize;
    let skip = clamp_scroll(scroll, events.len(), visible);
    let rows = events.iter().skip(skip).take(visible).map(|e| {
        let mut cells = vec![Cell::from(e.time.clone())];
        if with_flow {
            cells.push(Cell::from(e.flow.clone()));
        }
        cells.push(Cell::from(Span::styled(e.kind, theme.style(e.role))));
        cells.push(Cell::from(e.text.clone()));
        Row::new(cells)
    });
    let mut widths = vec![Constraint::Length(9)];
    if with_flow {
        widths.push(Constraint::Length(14));
    }
    widths.push(Constraint::Length(8));
    widths.push(Constraint::Fill(1));
    frame.render_widget(Table::new(rows, widths).block(b), area);
}
