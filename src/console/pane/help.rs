//! The help (`?`, `:help`): the keys that work in the view under it and the `:`
//! commands, both from the one binding table (`keys::help`), so it cannot drift.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};

use super::{Next, block, clamp_scroll};
use crate::console::action::Action;
use crate::console::theme::{Role, Theme};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HelpView {
    pub scroll: usize,
}

pub fn update(v: &mut HelpView, action: &Action) -> Next {
    match action {
        Action::Up => v.scroll = v.scroll.saturating_sub(1),
        Action::Down => v.scroll += 1,
        Action::Help => return Next::Close,
        _ => return Next::Pass,
    }
    Next::Stay
}

#[derive(Debug, Clone)]
pub struct HelpSnap {
    /// `(keys, what they do)` of the live bindings.
    pub keys: Vec<(String, String)>,
    /// `(:command ARGS, what it does)`.
    pub commands: Vec<(String, String)>,
    pub scroll: usize,
}

/// `(keys, what they do)` of the live bindings, then `(:command ARGS, what it does)`.
pub type HelpText = (Vec<(String, String)>, Vec<(String, String)>);

/// `lines`: the bindings and commands as `keys::help` lists them.
pub fn snap(v: &HelpView, lines: HelpText) -> HelpSnap {
    let (keys, commands) = lines;
    HelpSnap {
        keys,
        commands,
        scroll: v.scroll,
    }
}

pub fn draw(frame: &mut Frame, body: Rect, h: &HelpSnap, theme: Theme) {
    let (keys, commands, scroll) = (&h.keys, &h.commands, h.scroll);
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
