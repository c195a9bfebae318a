//! The immutable picture [`super::draw::draw`] paints: built from the
//! [`App`] once per frame, windowed to the time the view shows, with every
//! number already formatted. Drawing never looks at the app.

use crate::engine::control::FlowStatus;

use super::app::{App, Mode, View};
use super::format;
use super::keys;
use super::pane::{self, SnapCx};
use super::theme::{Role, Theme};

// The frames `Snapshot` carries; each pane's own types are in its file.
pub use super::pane::OverlaySnap;
pub use super::pane::detail::DetailSnap;
pub use super::pane::overview::OverviewSnap;

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
pub enum Body {
    Overview(OverviewSnap),
    Detail(Box<DetailSnap>),
}

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
        let cx = SnapCx {
            mode: app.mode,
            title: &app.title,
            flows: &app.flows,
            theme: app.theme,
            now_ms: app.now_ms,
            as_of,
            frozen: app.freeze.is_some(),
            window_ms: app.window_ms,
            replay_clock: app.replay_clock,
            loading: app.loading.is_some(),
            filter: &app.filter,
            sql: &app.sql,
        };
        let body = match app.view {
            View::Overview => {
                Body::Overview(pane::overview::snap(&app.overview, &cx, app.selected))
            }
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
                    Body::Detail(Box::new(pane::detail::snap(&app.detail, &cx, f)))
                }
                // The filter is the overview's only while it shows.
                None => Body::Overview(pane::overview::snap(
                    &app.overview,
                    &SnapCx { filter: "", ..cx },
                    app.selected,
                )),
            },
        };
        let (status_line, status_role) = status_line(app);
        let overlay = app.overlay.snap(&cx, || keys::help(app));
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
