//! A table maintenance's dry run (`O` optimize, `V` vacuum on a flow's detail), as
//! `weir table optimize|vacuum` prints it: y runs it in the background (its outcome
//! goes on the flow's timeline), n leaves the table as it is.

use ratatui::Frame;
use ratatui::layout::Rect;

use super::dry_run::DialogSnap;
use super::{Cx, Effect, Next};
use crate::console::action::{Action, MaintenanceKind};
use crate::console::theme::Theme;

/// What a maintenance would do: the dry run shown before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaintenancePlan {
    Optimize(Box<crate::maintenance::OptimizePlan>),
    Vacuum(Box<crate::maintenance::VacuumPlan>),
}

impl MaintenancePlan {
    pub fn kind(&self) -> MaintenanceKind {
        match self {
            MaintenancePlan::Optimize(_) => MaintenanceKind::Optimize,
            MaintenancePlan::Vacuum(_) => MaintenanceKind::Vacuum,
        }
    }

    /// The dry run, as `weir table optimize|vacuum` prints it.
    pub fn render(&self) -> String {
        match self {
            MaintenancePlan::Optimize(p) => p.render(),
            MaintenancePlan::Vacuum(p) => p.render(),
        }
    }

    /// `None`: it may run; else why there is nothing to run.
    pub fn blocked(&self) -> Option<&'static str> {
        match self {
            MaintenancePlan::Optimize(p) if p.is_noop() => Some("no partition has two small files"),
            MaintenancePlan::Vacuum(p) if !p.refused.is_empty() => Some("refused"),
            MaintenancePlan::Vacuum(p) if p.files.is_empty() => Some("no file to delete"),
            _ => None,
        }
    }
}

/// A table maintenance's dry run, shown until y (run it) or n (nothing changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceDialog {
    pub flow: String,
    pub plan: MaintenancePlan,
}

/// y runs the maintenance (unless there is nothing to run), n cancels; the dialog
/// keeps the keyboard until then.
pub fn update(d: &MaintenanceDialog, cx: &mut Cx, action: &Action) -> Next {
    let word = d.plan.kind().word();
    match action {
        Action::ConfirmYes => {
            match d.plan.blocked() {
                Some(why) => cx.say(format!("{word}: {why}; nothing changed")),
                None => {
                    cx.operator_event(
                        &d.flow,
                        format!("{word} of the table requested by the operator"),
                    );
                    cx.say(format!(
                        "{word}: running in the background; the outcome goes on the timeline"
                    ));
                    cx.effects.push(Effect::RunMaintenance {
                        flow: d.flow.clone(),
                        plan: d.plan.clone(),
                    });
                }
            }
            Next::Close
        }
        Action::ConfirmNo => {
            cx.say("cancelled: nothing changed");
            Next::Close
        }
        _ => Next::Stay,
    }
}

pub fn snap(d: &MaintenanceDialog) -> DialogSnap {
    DialogSnap {
        title: format!("Dry run: {} (flow {})", d.plan.kind().word(), d.flow),
        lines: d.plan.render().lines().map(str::to_string).collect(),
        prompt: match d.plan.blocked() {
            Some(why) => format!("Nothing to run ({why}). n or Esc closes."),
            None => format!(
                "Changes the table (weir table {} --yes): y runs it, n cancels.",
                d.plan.kind().word()
            ),
        },
        typed: None,
    }
}

/// The dry run, drawn as the checkpoint actions' dialog.
pub fn draw(frame: &mut Frame, body: Rect, d: &DialogSnap, theme: Theme) {
    super::dry_run::draw(frame, body, d, theme);
}
