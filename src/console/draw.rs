//! Painting: a pure function of a [`Snapshot`] and the frame's size.
//!
//! ```text
//! header      weir run · pipeline.toml › flow             LIVE 10:07:56Z · window 5m
//! body        overview (flows table + events) or flow detail (panes)
//! status      message, filter, prompt (: or /) or confirmation
//! hints       the live key bindings
//! ```
//!
//! The flow detail shows all seven panes from 100x30 up (two columns) and one
//! pane at a time with a pane bar below that; Enter zooms a pane.

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Table,
    TableState, Wrap,
};

use super::app::Pane;
use super::format;
use super::keys::Hint;
use super::model::PHASES;
use super::snapshot::{
    Body, ChartSnap, DetailSnap, EventRow, GraphSnap, InputWatermarkRow, LagRow, LineKind,
    OverlaySnap, OverviewSnap, PlaybookSnap, Snapshot, SqlSnap,
};
use super::theme::{Role, Theme, fold_ascii};

/// Below this the console only says the terminal is too small.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 10;

/// Whether the flow detail shows all panes at once at this size.
pub fn wide(area: Rect) -> bool {
    area.width >= 100 && area.height >= 30
}

pub fn draw(frame: &mut Frame, snap: &Snapshot) {
    let area = frame.area();
    let theme = snap.theme;
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        frame.render_widget(
            Paragraph::new(format!(
                "terminal too small: {}x{} (need {MIN_WIDTH}x{MIN_HEIGHT})",
                area.width, area.height
            ))
            .wrap(Wrap { trim: true }),
            area,
        );
        return;
    }
    let [header, body, status, hints] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(frame, header, snap);
    match &snap.body {
        Body::Overview(o) => draw_overview(frame, body, o, theme),
        Body::Detail(d) => draw_detail(frame, body, d, theme),
    }
    draw_status(frame, status, snap);
    draw_hints(frame, hints, snap);
    if let OverlaySnap::Help {
        keys,
        commands,
        scroll,
    } = &snap.overlay
    {
        draw_help(frame, body, keys, commands, *scroll, theme);
    }
    if let OverlaySnap::Playbook(p) = &snap.overlay {
        draw_playbook(frame, body, p, theme);
    }
    if let OverlaySnap::Action {
        title,
        lines,
        prompt,
        typed,
    } = &snap.overlay
    {
        draw_action(frame, body, title, lines, prompt, typed.as_deref(), theme);
    }
    if let OverlaySnap::Sql(q) = &snap.overlay {
        draw_sql(frame, body, q, theme);
    }
    if let OverlaySnap::Graph(g) = &snap.overlay {
        draw_graph(frame, body, g, theme);
    }
    if theme.ascii {
        fold_ascii(frame.buffer_mut(), area);
    }
}

/// The SQL pane (or a peek) over the body: the query line, a status line, then the
/// rows from the scroll position, the columns from the first one shown.
fn draw_sql(frame: &mut Frame, body: Rect, q: &SqlSnap, theme: Theme) {
    frame.render_widget(Clear, body);
    let b = block(&q.title, true, theme);
    let inner = b.inner(body);
    frame.render_widget(b, body);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    let width = usize::from(inner.width);
    let mut y = inner.y;
    if let Some(input) = &q.input {
        let prompt = "SQL> ";
        let room = width.saturating_sub(prompt.len() + 1);
        let n = input.chars().count();
        let shown: String = input.chars().skip(n.saturating_sub(room)).collect();
        let x = inner.x + (prompt.len() + shown.chars().count()) as u16;
        frame.render_widget(
            Paragraph::new(Line::from(vec![
                Span::styled(prompt, theme.style(Role::Focus)),
                Span::raw(shown),
            ])),
            Rect::new(inner.x, y, inner.width, 1),
        );
        frame.set_cursor_position((x.min(inner.right().saturating_sub(1)), y));
        y += 1;
    }
    // Which columns fit, from the first shown.
    let mut cols: Vec<(usize, usize)> = Vec::new();
    let mut used = 0usize;
    for (i, w) in q.widths.iter().enumerate().skip(q.first_col) {
        let w = (*w).max(1);
        let need = if cols.is_empty() { w } else { w + 2 };
        if used + need > width {
            if cols.is_empty() {
                cols.push((i, width));
            }
            break;
        }
        used += need;
        cols.push((i, w));
    }
    // The status line with which rows and columns are shown; its height decides the
    // rows' room, which the line names (settles in two passes at most).
    let mut status_h: u16 = 1;
    let mut status = String::new();
    for _ in 0..3 {
        let rows_room = usize::from(inner.bottom().saturating_sub(y + status_h)).saturating_sub(1);
        let shown_rows = q.rows.len().min(rows_room);
        status = q.status.clone();
        if q.total_rows > 0 {
            status.push_str(&format!(
                " · rows {}-{} of {}",
                q.first_row + 1,
                q.first_row + shown_rows,
                q.total_rows
            ));
        }
        if let (Some(first), Some(last)) = (cols.first(), cols.last())
            && (first.0 > 0 || last.0 + 1 < q.columns.len())
        {
            status.push_str(&format!(
                " · columns {}-{} of {}",
                first.0 + 1,
                last.0 + 1,
                q.columns.len()
            ));
        }
        let h = (status.chars().count().div_ceil(width.max(1)) as u16)
            .clamp(1, 4)
            .min(inner.bottom().saturating_sub(y).max(1));
        if h == status_h {
            break;
        }
        status_h = h;
    }
    let status_h = status_h.min(inner.bottom().saturating_sub(y));
    frame.render_widget(
        Paragraph::new(Span::styled(status, theme.style(q.status_role))).wrap(Wrap { trim: false }),
        Rect::new(inner.x, y, inner.width, status_h),
    );
    y += status_h;
    if q.columns.is_empty() || y >= inner.bottom() {
        return;
    }
    let cell = |text: &str, w: usize| -> String {
        let n = text.chars().count();
        if n > w {
            let mut t: String = text.chars().take(w.saturating_sub(1)).collect();
            t.push('…');
            t
        } else {
            format!("{text}{}", " ".repeat(w - n))
        }
    };
    let line_of = |values: &[String]| -> String {
        cols.iter()
            .map(|(i, w)| cell(values.get(*i).map(String::as_str).unwrap_or(""), *w))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut lines = vec![Line::from(Span::styled(
        line_of(&q.columns),
        theme.style(Role::Title),
    ))];
    let room = usize::from(inner.bottom() - y).saturating_sub(1);
    lines.extend(q.rows.iter().take(room).map(|r| Line::from(line_of(r))));
    frame.render_widget(
        Paragraph::new(lines),
        Rect::new(inner.x, y, inner.width, inner.bottom() - y),
    );
}

fn draw_header(frame: &mut Frame, area: Rect, snap: &Snapshot) {
    let right_w = (snap.header_right.chars().count() as u16 + 1).min(area.width / 2);
    let [left, right] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(right_w)]).areas(area);
    let t = snap.theme;
    frame.render_widget(
        Paragraph::new(Line::from(Span::styled(
            format!(" {}", snap.header_left),
            t.style(Role::Title),
        ))),
        left,
    );
    frame.render_widget(
        Paragraph::new(Line::from(Span::styled(
            snap.header_right.clone(),
            t.style(snap.header_role),
        )))
        .alignment(Alignment::Right),
        right,
    );
}

fn draw_status(frame: &mut Frame, area: Rect, snap: &Snapshot) {
    let t = snap.theme;
    match &snap.overlay {
        OverlaySnap::Prompt { prefix, text } => {
            frame.render_widget(Paragraph::new(format!("{prefix}{text}")), area);
            let x = area.x + 1 + text.chars().count() as u16;
            frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
        }
        OverlaySnap::Confirm { question } => {
            frame.render_widget(
                Paragraph::new(Span::styled(format!(" {question}"), t.style(Role::Warn))),
                area,
            );
        }
        _ => {
            frame.render_widget(
                Paragraph::new(Span::styled(
                    format!(" {}", snap.status_line),
                    t.style(snap.status_role),
                )),
                area,
            );
        }
    }
}

/// The hint bar: as many hints as fit, in table order, always ending with the last two (help, quit).
fn draw_hints(frame: &mut Frame, area: Rect, snap: &Snapshot) {
    let t = snap.theme;
    let width = |h: &Hint| h.keys.chars().count() + h.label.chars().count() + 3;
    let mut room = usize::from(area.width).saturating_sub(1);
    room = room.saturating_sub(snap.hints.iter().filter(|h| h.pinned).map(width).sum());
    let mut shown: Vec<&Hint> = Vec::new();
    for h in &snap.hints {
        if h.pinned {
            shown.push(h);
        } else if width(h) <= room {
            room -= width(h);
            shown.push(h);
        }
    }
    let mut spans = vec![Span::raw(" ")];
    for (i, h) in shown.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw("  "));
        }
        spans.push(Span::styled(h.keys.clone(), t.style(Role::Focus)));
        spans.push(Span::raw(" "));
        spans.push(Span::styled(h.label.clone(), t.style(Role::Dim)));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn block<'a>(title: &'a str, focused: bool, theme: Theme) -> Block<'a> {
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
fn clamp_scroll(scroll: usize, rows: usize, visible: usize) -> usize {
    scroll.min(rows.saturating_sub(visible))
}

fn draw_overview(frame: &mut Frame, area: Rect, o: &OverviewSnap, theme: Theme) {
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

fn draw_detail(frame: &mut Frame, area: Rect, d: &DetailSnap, theme: Theme) {
    if d.zoom {
        draw_pane(frame, area, d, d.focus, true, theme);
        return;
    }
    if !wide(Rect::new(0, 0, area.width, area.height + 3)) {
        let [bar, rest] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
        let mut spans = vec![Span::raw(" ")];
        for (i, p) in Pane::ALL.iter().enumerate() {
            let style = if *p == d.focus {
                theme.style(Role::Selected)
            } else {
                theme.style(Role::Dim)
            };
            spans.push(Span::styled(format!("{} {}", i + 1, p.short()), style));
            spans.push(Span::raw(" "));
        }
        frame.render_widget(Paragraph::new(Line::from(spans)), bar);
        draw_pane(frame, rest, d, d.focus, true, theme);
        return;
    }
    let [r1, r2, r3, r4] = Layout::vertical([
        Constraint::Percentage(32),
        Constraint::Percentage(24),
        Constraint::Percentage(24),
        Constraint::Fill(1),
    ])
    .areas(area);
    let halves = |r: Rect| -> [Rect; 2] {
        Layout::horizontal([Constraint::Percentage(50), Constraint::Fill(1)]).areas(r)
    };
    let [a, b] = halves(r1);
    let [c, e] = halves(r2);
    let [f, g] = halves(r3);
    for (pane, rect) in [
        (Pane::Rates, a),
        (Pane::Backlog, b),
        (Pane::Watermark, c),
        (Pane::State, e),
        (Pane::Durations, f),
        (Pane::History, g),
        (Pane::Timeline, r4),
    ] {
        draw_pane(frame, rect, d, pane, pane == d.focus, theme);
    }
}

fn draw_pane(
    frame: &mut Frame,
    area: Rect,
    d: &DetailSnap,
    pane: Pane,
    focused: bool,
    theme: Theme,
) {
    let b = block(pane.title(), focused, theme);
    let inner = b.inner(area);
    frame.render_widget(b, area);
    if inner.width < 4 || inner.height < 1 {
        return;
    }
    let scroll = d.scroll[pane.index()];
    match pane {
        Pane::Rates => draw_chart(frame, inner, &d.rates, theme),
        Pane::Backlog => {
            let [l1, l2, rest] = Layout::vertical([
                Constraint::Length(1),
                Constraint::Length(1),
                Constraint::Fill(1),
            ])
            .areas(inner);
            frame.render_widget(
                Paragraph::new(Span::styled(
                    d.backlog.forecast.clone(),
                    theme.style(d.backlog.forecast_role),
                )),
                l1,
            );
            frame.render_widget(
                Paragraph::new(Span::styled(d.backlog.now.clone(), theme.style(Role::Dim))),
                l2,
            );
            if let Some(rows) = &d.backlog.partitions {
                draw_lag(frame, rest, rows, scroll, theme);
            } else if rest.height >= 12 {
                let [top, bottom] =
                    Layout::vertical([Constraint::Percentage(50), Constraint::Fill(1)]).areas(rest);
                draw_chart(frame, top, &d.backlog.files, theme);
                draw_chart(frame, bottom, &d.backlog.bytes, theme);
            } else {
                draw_chart(frame, rest, &d.backlog.files, theme);
            }
        }
        Pane::Watermark => {
            if let Some(msg) = &d.watermark.empty {
                frame.render_widget(
                    Paragraph::new(msg.as_str()).style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let text: Vec<Line> = d
                .watermark
                .lines
                .iter()
                .map(|(k, v)| {
                    Line::from(vec![
                        Span::styled(format!("{k:<22}"), theme.style(Role::Dim)),
                        Span::raw(v.clone()),
                    ])
                })
                .collect();
            // A flow of several inputs: their watermarks below, the chart above.
            let inner = if d.watermark.inputs.is_empty() {
                inner
            } else {
                let n = (d.watermark.inputs.len() as u16 + 1).min(inner.height / 2);
                let [top, bottom] =
                    Layout::vertical([Constraint::Fill(1), Constraint::Length(n)]).areas(inner);
                draw_input_watermarks(frame, bottom, &d.watermark.inputs, theme);
                top
            };
            if inner.width >= 76 {
                let [left, right] =
                    Layout::horizontal([Constraint::Length(45), Constraint::Fill(1)]).areas(inner);
                frame.render_widget(Paragraph::new(text), left);
                draw_chart(frame, right, &d.watermark.chart, theme);
            } else {
                let n = text.len() as u16;
                let [top, rest] =
                    Layout::vertical([Constraint::Length(n), Constraint::Fill(1)]).areas(inner);
                frame.render_widget(Paragraph::new(text), top);
                if rest.height >= 5 {
                    draw_chart(frame, rest, &d.watermark.chart, theme);
                }
            }
        }
        Pane::State => {
            if let Some(msg) = &d.state.empty {
                frame.render_widget(
                    Paragraph::new(msg.as_str()).style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let [note, rest] =
                Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(inner);
            frame.render_widget(
                Paragraph::new(Span::styled(
                    d.state.note.clone().unwrap_or_default(),
                    theme.style(Role::Dim),
                )),
                note,
            );
            let header = Row::new(["OPERATOR", "ROWS", "UPD", "REM", "LATE", "MEMORY", "DISK"])
                .style(theme.style(Role::Title));
            let visible = rest.height.saturating_sub(1) as usize;
            let skip = clamp_scroll(scroll, d.state.operators.len(), visible);
            let rows = d.state.operators.iter().skip(skip).map(|o| {
                Row::new([
                    o.name.clone(),
                    o.rows.clone(),
                    o.updated.clone(),
                    o.removed.clone(),
                    o.dropped.clone(),
                    o.memory.clone(),
                    o.disk.clone(),
                ])
            });
            let widths = [
                Constraint::Fill(1),
                Constraint::Length(6),
                Constraint::Length(5),
                Constraint::Length(5),
                Constraint::Length(5),
                Constraint::Length(8),
                Constraint::Length(8),
            ];
            frame.render_widget(Table::new(rows, widths).header(header), rest);
        }
        Pane::Durations => draw_durations(frame, inner, d, scroll, theme),
        Pane::History => {
            if d.history.is_empty() {
                frame.render_widget(
                    Paragraph::new("no batch yet").style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let full = inner.width >= 70;
            let mut head = vec!["BATCH"];
            if full {
                head.push("OFFSETS");
            }
            head.extend(["FILES", "IN", "OUT", "TIME", "DELTA", "STATE"]);
            let visible = inner.height.saturating_sub(1) as usize;
            let skip = clamp_scroll(scroll, d.history.len(), visible);
            let rows = d.history.iter().skip(skip).take(visible).map(|h| {
                let mut cells = vec![Cell::from(h.batch.clone())];
                if full {
                    cells.push(Cell::from(h.offsets.clone()));
                }
                cells.extend([
                    Cell::from(h.files.clone()),
                    Cell::from(h.input_rows.clone()),
                    Cell::from(h.output_rows.clone()),
                    Cell::from(h.duration.clone()),
                    Cell::from(h.delta_version.clone()),
                    Cell::from(Span::styled(h.state.clone(), theme.style(h.role))),
                ]);
                Row::new(cells)
            });
            let mut widths = vec![Constraint::Length(6)];
            if full {
                widths.push(Constraint::Length(11));
            }
            widths.extend([
                Constraint::Length(5),
                Constraint::Length(6),
                Constraint::Length(6),
                Constraint::Length(10),
                Constraint::Length(5),
                Constraint::Fill(1),
            ]);
            frame.render_widget(
                Table::new(rows, widths).header(Row::new(head).style(theme.style(Role::Title))),
                inner,
            );
        }
        Pane::Timeline => {
            // The pane's block is already drawn: list rows without another border.
            if d.timeline.is_empty() {
                frame.render_widget(
                    Paragraph::new("nothing yet").style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let visible = inner.height as usize;
            let skip = clamp_scroll(scroll, d.timeline.len(), visible);
            let rows = d.timeline.iter().skip(skip).take(visible).map(|e| {
                Row::new([
                    Cell::from(e.time.clone()),
                    Cell::from(Span::styled(e.kind, theme.style(e.role))),
                    Cell::from(e.text.clone()),
                ])
            });
            frame.render_widget(
                Table::new(
                    rows,
                    [
                        Constraint::Length(9),
                        Constraint::Length(8),
                        Constraint::Fill(1),
                    ],
                ),
                inner,
            );
        }
    }
}

/// Each input's own watermark (a union, a stream-stream join), the holder marked.
fn draw_input_watermarks(frame: &mut Frame, area: Rect, rows: &[InputWatermarkRow], theme: Theme) {
    let wide = area.width >= 100;
    let mut head = vec!["INPUT", "WATERMARK", "AHEAD", "ROWS", "NOTE"];
    let mut widths = vec![
        Constraint::Length(15),
        Constraint::Length(15),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Fill(1),
    ];
    if wide {
        head.push("SOURCE");
        widths[4] = Constraint::Length(32);
        widths.push(Constraint::Fill(1));
    }
    let table_rows = rows.iter().map(|r| {
        let style = theme.style(r.role);
        let mut cells = vec![
            Cell::from(Span::styled(r.input.clone(), style)),
            Cell::from(r.watermark.clone()),
            Cell::from(r.ahead.clone()),
            Cell::from(r.rows.clone()),
            Cell::from(Span::styled(r.note.clone(), style)),
        ];
        if wide {
            cells.push(Cell::from(r.source.clone()));
        }
        Row::new(cells)
    });
    frame.render_widget(
        Table::new(table_rows, widths).header(Row::new(head).style(theme.style(Role::Title))),
        area,
    );
}

/// The pipeline graph over the body: the tree of sources, flows and tables, each
/// flow with its health, rates, backlog and watermark delay; the cursor's row selected.
fn draw_graph(frame: &mut Frame, body: Rect, g: &GraphSnap, theme: Theme) {
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

/// A Kafka flow's partitions, furthest behind first.
fn draw_lag(frame: &mut Frame, area: Rect, rows: &[LagRow], scroll: usize, theme: Theme) {
    let header = Row::new(["PARTITION", "LATEST", "COMMITTED", "LAG", "LAG TIME"])
        .style(theme.style(Role::Title));
    let visible = area.height.saturating_sub(1) as usize;
    let skip = clamp_scroll(scroll, rows.len(), visible);
    let body = rows.iter().skip(skip).take(visible).map(|r| {
        Row::new([
            Cell::from(r.partition.clone()),
            Cell::from(r.latest.clone()),
            Cell::from(r.committed.clone()),
            Cell::from(Span::styled(r.messages.clone(), theme.style(r.role))),
            Cell::from(r.time.clone()),
        ])
    });
    let widths = [
        Constraint::Fill(1),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(8),
        Constraint::Length(9),
    ];
    frame.render_widget(Table::new(body, widths).header(header), area);
}

fn draw_durations(frame: &mut Frame, area: Rect, d: &DetailSnap, scroll: usize, theme: Theme) {
    if d.durations.is_empty() {
        frame.render_widget(
            Paragraph::new("no batch yet").style(theme.style(Role::Dim)),
            area,
        );
        return;
    }
    let [legend, rest] = Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    let short = ["latest", "get", "add", "wal", "commit"];
    let mut spans = Vec::new();
    for (i, name) in PHASES.iter().enumerate() {
        spans.push(Span::styled(
            theme.phase_glyph(i).to_string(),
            theme.style(Role::Phase(i)),
        ));
        spans.push(Span::raw(format!(
            " {} ",
            if area.width >= 80 { name } else { short[i] }
        )));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), legend);
    let numbers = rest.width >= 50;
    let fixed: u16 = if numbers { 6 + 7 * 6 + 7 } else { 6 + 8 };
    let bar_w = rest.width.saturating_sub(fixed + 1);
    let max_total = d
        .durations
        .iter()
        .map(|r| r.total.max(r.phases.iter().sum()))
        .max()
        .unwrap_or(1)
        .max(1);
    let visible = rest.height.saturating_sub(1) as usize;
    let skip = clamp_scroll(scroll, d.durations.len(), visible);
    let rows = d.durations.iter().skip(skip).take(visible).map(|r| {
        let mut cells = vec![Cell::from(r.batch_id.to_string())];
        if numbers {
            cells.extend(
                r.phases
                    .iter()
                    .map(|v| Cell::from(format::duration_ms(*v as i64))),
            );
        }
        cells.push(Cell::from(format::duration_ms(r.total as i64)));
        if bar_w >= 4 {
            let mut bar = Vec::new();
            let mut used = 0u16;
            for (i, v) in r.phases.iter().enumerate() {
                let n = ((*v as f64 / max_total as f64) * f64::from(bar_w)).round() as u16;
                let n = n.min(bar_w - used);
                used += n;
                if n > 0 {
                    bar.push(Span::styled(
                        theme.phase_glyph(i).repeat(usize::from(n)),
                        theme.style(Role::Phase(i)),
                    ));
                }
            }
            cells.push(Cell::from(Line::from(bar)));
        }
        Row::new(cells)
    });
    let mut head = vec!["BATCH"];
    let mut widths = vec![Constraint::Length(6)];
    if numbers {
        head.extend(short);
        widths.extend([Constraint::Length(7); 5]);
    }
    head.push("TOTAL");
    widths.push(Constraint::Length(7));
    if bar_w >= 4 {
        head.push("");
        widths.push(Constraint::Length(bar_w));
    }
    frame.render_widget(
        Table::new(rows, widths).header(Row::new(head).style(theme.style(Role::Title))),
        rest,
    );
}

fn draw_chart(frame: &mut Frame, area: Rect, c: &ChartSnap, theme: Theme) {
    if area.height < 4 || area.width < 12 {
        return;
    }
    if let Some(msg) = &c.empty {
        frame.render_widget(
            Paragraph::new(msg.as_str()).style(theme.style(Role::Dim)),
            area,
        );
        return;
    }
    // A key line instead of a legend box: small charts keep all their rows for data.
    let [key, area] = Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    let mut spans = Vec::new();
    let mut datasets = Vec::new();
    for s in &c.series {
        let role = if s.index == 0 {
            Role::Series1
        } else {
            Role::Series2
        };
        spans.push(Span::styled(
            format!("{} ", theme.series_key(s.index)),
            theme.style(role),
        ));
        spans.push(Span::raw(format!("{}  ", s.name)));
        for seg in &s.segments {
            datasets.push(
                Dataset::default()
                    .data(seg)
                    .marker(theme.marker(s.index))
                    .graph_type(if seg.len() == 1 {
                        GraphType::Scatter
                    } else {
                        GraphType::Line
                    })
                    .style(theme.style(role)),
            );
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), key);
    let axis_style = theme.style(Role::Dim);
    let chart = Chart::new(datasets)
        .x_axis(
            Axis::default()
                .bounds(c.x_bounds)
                .labels(c.x_labels.clone())
                .style(axis_style),
        )
        .y_axis(
            Axis::default()
                .bounds(c.y_bounds)
                .labels(c.y_labels.clone())
                .style(axis_style),
        )
        .legend_position(None);
    frame.render_widget(chart, area);
}

/// A checkpoint action's dry-run and its confirmation prompt, centred over the body.
fn draw_action(
    frame: &mut Frame,
    body: Rect,
    title: &str,
    lines: &[String],
    prompt: &str,
    typed: Option<&str>,
    theme: Theme,
) {
    let w = body.width.saturating_sub(4).clamp(20, 110).min(body.width);
    let inner_w = usize::from(w.saturating_sub(2)).max(1);
    // Rows a text takes once wrapped to the dialog's width.
    let rows = |t: &str| t.chars().count().div_ceil(inner_w).max(1) as u16;
    let plan_rows: u16 = lines.iter().map(|l| rows(l)).sum();
    // The question stays on screen whatever the plan's length: the plan is cut first.
    // (a wrapped prompt may take a row more than its characters need: words move down)
    let prompt_rows = rows(prompt) + u16::from(rows(prompt) > 1);
    let ask_rows = 1 + prompt_rows + u16::from(typed.is_some());
    let h = (plan_rows + ask_rows + 2).min(body.height);
    let area = Rect::new(
        body.x + (body.width - w) / 2,
        body.y + (body.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, area);
    let b = block(title, true, theme);
    let inner = b.inner(area);
    frame.render_widget(b, area);
    let [plan_area, ask_area] =
        Layout::vertical([Constraint::Fill(1), Constraint::Length(ask_rows)]).areas(inner);
    let text: Vec<Line> = lines.iter().map(|l| Line::from(l.clone())).collect();
    frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: false }), plan_area);
    let mut ask = vec![
        Line::from(""),
        Line::from(Span::styled(prompt.to_string(), theme.style(Role::Warn))),
    ];
    if let Some(typed) = typed {
        ask.push(Line::from(vec![
            Span::styled("> ", theme.style(Role::Focus)),
            Span::raw(typed.to_string()),
        ]));
    }
    frame.render_widget(Paragraph::new(ask).wrap(Wrap { trim: false }), ask_area);
}

/// The playbook beside its live evidence (side by side when wide, evidence on top when narrow).
fn draw_playbook(frame: &mut Frame, body: Rect, p: &PlaybookSnap, theme: Theme) {
    frame.render_widget(Clear, body);
    let (ev_area, pb_area) = if body.width >= 100 {
        let [a, b] =
            Layout::horizontal([Constraint::Percentage(38), Constraint::Fill(1)]).areas(body);
        (a, b)
    } else {
        let h = (p.evidence.len() as u16 + 2).clamp(3, body.height / 3);
        let [a, b] = Layout::vertical([Constraint::Length(h), Constraint::Fill(1)]).areas(body);
        (a, b)
    };
    let label_w = p
        .evidence
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(5)
        + 1;
    let ev_lines: Vec<Line> = p
        .evidence
        .iter()
        .map(|(k, v)| {
            let role = if k == "state" {
                p.evidence_role
            } else {
                Role::Plain
            };
            Line::from(vec![
                Span::styled(format!("{k:<label_w$}"), theme.style(Role::Dim)),
                Span::styled(v.clone(), theme.style(role)),
            ])
        })
        .collect();
    frame.render_widget(
        Paragraph::new(ev_lines)
            .wrap(Wrap { trim: false })
            .block(block("Live evidence", false, theme)),
        ev_area,
    );
    let b = block(&p.title, true, theme);
    let inner = b.inner(pb_area);
    frame.render_widget(b, pb_area);
    let (open, done) = if theme.ascii {
        ("[ ] ", "[x] ")
    } else {
        ("☐ ", "☑ ")
    };
    let lines: Vec<Line> = p
        .lines
        .iter()
        .map(|l| match l.kind {
            LineKind::Heading => Line::from(Span::styled(l.text.clone(), theme.style(Role::Title))),
            LineKind::Subheading => {
                Line::from(Span::styled(l.text.clone(), theme.style(Role::Focus)))
            }
            LineKind::Step { checked, selected } => {
                let mark = if checked { done } else { open };
                let role = if selected {
                    Role::Selected
                } else if checked {
                    Role::Dim
                } else {
                    Role::Plain
                };
                Line::from(Span::styled(format!("{mark}{}", l.text), theme.style(role)))
            }
            LineKind::Text => Line::from(l.text.clone()),
        })
        .collect();
    // Keep the selected step in the upper third of the pane.
    let skip = p.selected_line.saturating_sub(inner.height as usize / 3);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((skip as u16, 0)),
        inner,
    );
}

fn draw_help(
    frame: &mut Frame,
    body: Rect,
    keys: &[(String, String)],
    commands: &[(String, String)],
    scroll: usize,
    theme: Theme,
) {
    let w = if body.width < 100 {
        body.width
    } else {
        body.width.saturating_sub(4).min(96)
    };
    let h = if body.height < 30 {
        body.height
    } else {
        body.height.saturating_sub(2)
    };
    let area = Rect::new(
        body.x + (body.width - w) / 2,
        body.y + (body.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, area);
    let b = block(
        "Help: the keys that work here (j/k scroll, Esc close)",
        true,
        theme,
    );
    let inner = b.inner(area);
    frame.render_widget(b, area);
    let key_w = keys
        .iter()
        .chain(commands)
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(8)
        + 2;
    let mut lines: Vec<Line> = keys
        .iter()
        .map(|(k, v)| {
            Line::from(vec![
                Span::styled(format!("{k:<key_w$}"), theme.style(Role::Focus)),
                Span::raw(v.clone()),
            ])
        })
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        "Commands (after :)",
        theme.style(Role::Title),
    )));
    lines.extend(commands.iter().map(|(k, v)| {
        Line::from(vec![
            Span::styled(format!("{k:<key_w$}"), theme.style(Role::Focus)),
            Span::raw(v.clone()),
        ])
    }));
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        "Units: rates rows/s; sizes decimal bytes (kB = 1000 B); times UTC; durations ms/s/m/h.",
        theme.style(Role::Dim),
    )));
    let skip = clamp_scroll(scroll, lines.len(), inner.height as usize);
    frame.render_widget(Paragraph::new(lines).scroll((skip as u16, 0)), inner);
}
