//! A question asked in the status line before an action that cannot be undone from
//! the console (stop a flow, restart it after a schema change, run a drill): y does it,
//! n (or any other closing key) leaves everything as it was.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Span;
use ratatui::widgets::Paragraph;

use super::{Cx, Effect, Next};
use crate::console::action::Action;
use crate::console::theme::{Role, Theme};
use crate::engine::control::ControlCommand;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    StopFlow(String),
    RestartFlow(String),
    Drill(std::path::PathBuf),
}

impl Confirm {
    pub fn question(&self) -> String {
        match self {
            Confirm::StopFlow(f) => format!(
                "stop flow {f} after its running batch? It cannot be restarted from this console. (y/n)"
            ),
            Confirm::Drill(p) => format!(
                "run a restart drill on a copy of {}'s input? Copies of the flows are crashed at every failpoint and at random, in a new temporary directory; these checkpoints and tables are not touched. (y/n)",
                p.display()
            ),
            Confirm::RestartFlow(f) => format!(
                "restart flow {f}? Its source gained new columns; the wider schema is recorded and the restart re-reads the stopped batch with it, nothing lost. (y/n)"
            ),
        }
    }
}

/// y runs what was asked; every other action is the view's (n closes the question there).
pub fn update(c: &Confirm, cx: &mut Cx, action: &Action) -> Next {
    if *action != Action::ConfirmYes {
        return Next::Pass;
    }
    match c.clone() {
        Confirm::StopFlow(flow) => cx.control(flow, ControlCommand::Stop),
        Confirm::RestartFlow(flow) => cx.control(flow, ControlCommand::Restart),
        Confirm::Drill(pipeline) => {
            cx.say("drill started; its verdict will appear on the timeline");
            cx.effects.push(Effect::Drill { pipeline });
        }
    }
    Next::Close
}

#[derive(Debug, Clone)]
pub struct ConfirmSnap {
    pub question: String,
}

pub fn snap(c: &Confirm) -> ConfirmSnap {
    ConfirmSnap {
        question: c.question(),
    }
}

/// The question, in the status line.
pub fn draw(frame: &mut Frame, area: Rect, c: &ConfirmSnap, theme: Theme) {
    frame.render_widget(
        Paragraph::new(Span::styled(
            format!(" {}", c.question),
            theme.style(Role::Warn),
        )),
        area,
    );
}
