//! The status line's input: the command line (`:`, parsed by `keys::parse_command`)
//! and the overview's filter (`/`, applied as it is typed).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::widgets::Paragraph;

use super::Next;
use crate::console::action::Action;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    Command,
    Filter,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub kind: PromptKind,
    pub text: String,
}

/// Typing into the line; `filter` is the overview's filter, which follows the filter line.
pub fn update(p: &mut Prompt, filter: &mut String, action: &Action) -> Next {
    let filtering = p.kind == PromptKind::Filter;
    match action {
        Action::InputChar(c) => {
            p.text.push(*c);
            if filtering {
                filter.clone_from(&p.text);
                return Next::Rescroll;
            }
        }
        Action::InputBackspace => {
            p.text.pop();
            if filtering {
                filter.clone_from(&p.text);
            }
        }
        Action::InputCancel => {
            if filtering {
                filter.clear();
            }
            return Next::Close;
        }
        Action::InputSubmit if filtering => {
            *filter = std::mem::take(&mut p.text);
            return Next::Close;
        }
        Action::InputSubmit => return Next::Command(std::mem::take(&mut p.text)),
        _ => return Next::Pass,
    }
    Next::Stay
}

#[derive(Debug, Clone)]
pub struct PromptSnap {
    /// `:` or `/`.
    pub prefix: char,
    pub text: String,
}

pub fn snap(p: &Prompt) -> PromptSnap {
    PromptSnap {
        prefix: match p.kind {
            PromptKind::Command => ':',
            PromptKind::Filter => '/',
        },
        text: p.text.clone(),
    }
}

/// The line, in the status line, with the terminal's cursor at its end.
pub fn draw(frame: &mut Frame, area: Rect, p: &PromptSnap) {
    frame.render_widget(Paragraph::new(format!("{}{}", p.prefix, p.text)), area);
    let x = area.x + 1 + p.text.chars().count() as u16;
    frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
}
