//! A checkpoint action's dry run (`a` on a playbook step: backup, rollback, reset),
//! shown before anything moves: Enter runs it once the checkpoint directory's name is
//! typed (when the plan changes a checkpoint or table), Esc returns to the playbook.
//! The dialog ([`DialogSnap`], [`draw`]) is also the maintenance pane's.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::playbook::PlaybookView;
use super::{Cx, Effect, Next, Overlay, block};
use crate::console::action::Action;
use crate::console::theme::{Role, Theme};

/// The dry-run of a checkpoint action shown before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDialog {
    pub flow: String,
    pub plan: crate::checkpoint_tools::actions::ActionPlan,
    /// What the operator typed so far.
    pub typed: String,
    /// What must be typed (the checkpoint directory's name) when the plan needs it.
    pub word: String,
    /// The playbook to return to.
    pub back: PlaybookView,
}

impl ActionDialog {
    /// The dry run of an action on `checkpoint` asked from the playbook `back`; the
    /// word to type is the checkpoint directory's name.
    pub fn new(
        plan: crate::checkpoint_tools::actions::ActionPlan,
        checkpoint: &std::path::Path,
        back: PlaybookView,
    ) -> Self {
        ActionDialog {
            flow: back.flow.clone(),
            plan,
            typed: String::new(),
            word: checkpoint
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            back,
        }
    }
}

pub fn update(d: &mut ActionDialog, cx: &mut Cx, action: &Action) -> Next {
    match action {
        Action::InputChar(c) => d.typed.push(*c),
        Action::InputBackspace => {
            d.typed.pop();
        }
        Action::InputCancel => {
            cx.say("cancelled: nothing changed");
            return Next::Open(Box::new(Overlay::Playbook(d.back.clone())));
        }
        Action::InputSubmit if d.plan.needs_confirmation && d.typed.trim() != d.word => {
            cx.complain(format!("type {} to confirm (Esc cancels)", d.word));
        }
        Action::InputSubmit => {
            cx.effects.push(Effect::RunAction {
                flow: d.flow.clone(),
                plan: d.plan.clone(),
            });
            return Next::Open(Box::new(Overlay::Playbook(d.back.clone())));
        }
        _ => return Next::Pass,
    }
    Next::Stay
}

/// A dry run with its confirmation prompt.
#[derive(Debug, Clone)]
pub struct DialogSnap {
    pub title: String,
    pub lines: Vec<String>,
    pub prompt: String,
    /// What was typed so far (`None`: a y/n question, no input line).
    pub typed: Option<String>,
}

pub fn snap(d: &ActionDialog) -> DialogSnap {
    DialogSnap {
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
    }
}

/// The dry run and its confirmation prompt, centred over the body.
pub fn draw(frame: &mut Frame, body: Rect, d: &DialogSnap, theme: Theme) {
    let (title, lines, prompt, typed) = (&d.title, &d.lines, &d.prompt, d.typed.as_deref());
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
