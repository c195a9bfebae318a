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
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

use super::keys::Hint;
use super::pane;
use super::snapshot::{Body, Snapshot};
use super::theme::{Role, fold_ascii};

/// Below this the console only says the terminal is too small.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 10;

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
        Body::Overview(o) => pane::overview::draw(frame, body, o, theme),
        Body::Detail(d) => pane::detail::draw(frame, body, d, theme),
    }
    if !snap.overlay.draw(frame, body, status, theme) {
        draw_status(frame, status, snap);
    }
    draw_hints(frame, hints, snap);
    if theme.ascii {
        fold_ascii(frame.buffer_mut(), area);
    }
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
    frame.render_widget(
        Paragraph::new(Span::styled(
            format!(" {}", snap.status_line),
            snap.theme.style(snap.status_role),
        )),
        area,
    );
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
