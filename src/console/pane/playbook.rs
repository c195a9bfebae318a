//! A flow's playbook (`p`): the steps for its health state with the flow's evidence
//! filled in (`crate::playbook`), beside the live evidence; steps are checked off
//! with Space, and `a` shows the dry run of the checkpoint action a step names.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::{Console, Cx, Effect, Mode, Next, block, health_role};
use crate::console::action::Action;
use crate::console::format;
use crate::console::theme::{Role, Theme};
use crate::records::Health;

/// The playbook overlay of one flow: which step is selected, which are checked off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaybookView {
    pub flow: String,
    pub state: crate::records::HealthState,
    pub cursor: usize,
    pub checked: std::collections::BTreeSet<usize>,
}

impl PlaybookView {
    /// The playbook of a flow's current health state, no step checked.
    pub fn open(flow: &crate::console::model::FlowModel) -> Self {
        PlaybookView {
            flow: flow.name.clone(),
            state: flow.health.as_ref().map(|h| h.state).unwrap_or_default(),
            cursor: 0,
            checked: Default::default(),
        }
    }

    /// The playbook text with the flow's evidence filled in, and its steps.
    pub fn rendered(&self, console: &impl Console) -> (String, Health) {
        let flow = console.flows().iter().find(|f| f.name == self.flow);
        let health = flow.and_then(|f| f.health.clone()).unwrap_or_default();
        let cx = crate::playbook::Context {
            flow: Some(self.flow.clone()),
            pipeline: (console.mode() == Mode::Run).then(|| console.title().to_string()),
            checkpoint: flow
                .and_then(|f| f.checkpoint.as_ref())
                .map(|p| p.display().to_string()),
            source_path: flow
                .and_then(|f| f.source_path.as_ref())
                .map(|p| p.display().to_string()),
            sink_path: flow
                .and_then(|f| f.sink_path.as_ref())
                .map(|p| p.display().to_string()),
            spark: flow.is_some_and(|f| f.spark),
        };
        (crate::playbook::render(self.state, &health, &cx), health)
    }

    /// Whether the selected step names a checkpoint action that `run` can dry-run.
    pub fn step_has_action(&self, console: &impl Console) -> bool {
        console.mode() == Mode::Run
            && crate::playbook::step_actions(&self.rendered(console).0)
                .get(self.cursor)
                .is_some_and(Option::is_some)
    }
}

pub fn update(v: &mut PlaybookView, cx: &mut Cx, action: &Action) -> Next {
    match action {
        Action::Up => v.cursor = v.cursor.saturating_sub(1),
        Action::Down => {
            let steps = crate::playbook::steps(&v.rendered(cx).0).len();
            v.cursor = (v.cursor + 1).min(steps.saturating_sub(1));
        }
        Action::ToggleStep => {
            if !v.checked.remove(&v.cursor) {
                v.checked.insert(v.cursor);
            }
        }
        Action::DryRunStep => {
            let step = crate::playbook::step_actions(&v.rendered(cx).0)
                .get(v.cursor)
                .copied()
                .flatten();
            let checkpoint = cx
                .flows
                .iter()
                .find(|f| f.name == v.flow)
                .and_then(|f| f.checkpoint.clone());
            match (cx.mode, step, checkpoint) {
                (Mode::Attach, _, _) => {
                    cx.complain("weir attach is read-only: run checkpoint actions in a shell")
                }
                (_, None, _) => cx.complain("this step names no checkpoint action"),
                (_, _, None) => cx.complain("the flow's checkpoint is not known"),
                (Mode::Run, Some(action), Some(checkpoint)) => {
                    cx.effects.push(Effect::PlanAction {
                        view: v.clone(),
                        checkpoint,
                        action,
                    })
                }
            }
        }
        _ => return Next::Pass,
    }
    Next::Stay
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

pub fn snap(v: &PlaybookView, console: &impl Console) -> PlaybookSnap {
    let (text, health) = v.rendered(console);
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

/// The playbook beside its live evidence (side by side when wide, evidence on top when narrow).
pub fn draw(frame: &mut Frame, body: Rect, p: &PlaybookSnap, theme: Theme) {
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
