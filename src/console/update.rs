//! [`update`]: the one function that changes the console's state for an action.
//!
//! Keys become [`Action`]s (`keys`); `update` applies one and returns the
//! [`Effect`]s the outside world must perform (commands for the engine, checkpoint
//! actions, a drill) instead of performing them, so the app can be driven headless.
//! The open pane (`pane::*::update`) takes the action first; what it passes on, the
//! view under it (overview or detail) takes here. Engine events and file-follower
//! reports take the other path, [`App::ingest`].

use crate::engine::control::ControlCommand;

use super::action::Action;
use super::app::*;
use super::keys;
use super::model::EventKind;
use super::pane::graph::GraphView;
use super::pane::help::HelpView;
use super::pane::prompt::Prompt;
use super::pane::sql::SqlView;
use super::pane::{self, Cx, Next};

/// Changes the app for an action; returns what the engine must be told.
pub fn update(app: &mut App, action: Action) -> Vec<Effect> {
    let mut effects = Vec::new();
    let next = {
        let mut cx = Cx {
            mode: app.mode,
            title: &app.title,
            now_ms: app.now_ms,
            flows: &mut app.flows,
            message: &mut app.message,
            effects: &mut effects,
            sql: &mut app.sql,
            filter: &mut app.filter,
        };
        app.overlay.update(&mut cx, &action)
    };
    match next {
        Next::Stay => {}
        Next::Close => app.overlay = Overlay::None,
        Next::Open(overlay) => app.overlay = *overlay,
        Next::Detail(i) => {
            app.overlay = Overlay::None;
            open_detail(app, i);
            app.detail.zoom = false;
        }
        Next::Command(text) => {
            app.overlay = Overlay::None;
            match keys::parse_command(app, &text) {
                Ok(action) => effects.extend(update(app, action)),
                Err(e) => app.complain(e),
            }
        }
        Next::Rescroll => {
            app.detail.scroll = [0; 7];
            app.overview.events_scroll = 0;
        }
        Next::Pass => view_update(app, action, &mut effects),
    }
    effects
}

/// Flow `i`'s detail, scrolled to the top, the filter cleared.
fn open_detail(app: &mut App, i: usize) {
    app.selected = i;
    app.view = View::Detail;
    app.filter.clear();
    app.detail.scroll = [0; 7];
}

/// The borrowed context the panes' `update`s take, for an action of the view.
fn cx<'a>(app: &'a mut App, effects: &'a mut Vec<Effect>) -> Cx<'a> {
    Cx {
        mode: app.mode,
        title: &app.title,
        now_ms: app.now_ms,
        flows: &mut app.flows,
        message: &mut app.message,
        effects,
        sql: &mut app.sql,
        filter: &mut app.filter,
    }
}

/// The view (overview or detail) takes an action no open pane took; what it passes
/// on is the console's (the clock, the flows' controls, opening panes).
fn view_update(app: &mut App, action: Action, effects: &mut Vec<Effect>) {
    let next = match app.view {
        View::Overview => pane::overview::update(
            &mut app.overview,
            &app.flows,
            &app.filter,
            &mut app.selected,
            &action,
        ),
        View::Detail => pane::detail::update(&mut app.detail, &action),
    };
    match next {
        Next::Detail(i) => {
            open_detail(app, i);
            app.detail.zoom = false;
        }
        Next::Pass => console_update(app, action, effects),
        _ => {}
    }
}

fn console_update(app: &mut App, action: Action, effects: &mut Vec<Effect>) {
    match action {
        // Only a view scrolls and moves between its panes.
        Action::Up
        | Action::Down
        | Action::PageUp
        | Action::PageDown
        | Action::Top
        | Action::Bottom
        | Action::NextPane
        | Action::PrevPane
        | Action::Enter => {}
        Action::GoPane(i) => {
            if let Some(p) = Pane::ALL.get(usize::from(i)) {
                app.detail.focus = *p;
            }
        }
        Action::Back => {
            if !app.filter.is_empty() {
                app.filter.clear();
            } else if app.view == View::Detail && app.detail.zoom {
                app.detail.zoom = false;
            } else if app.view == View::Detail {
                app.view = View::Overview;
            } else if app.freeze.is_some() {
                app.freeze = None;
            }
        }
        Action::NextFlow | Action::PrevFlow => {
            let n = app.flows.len();
            if n > 0 {
                let step = if action == Action::NextFlow { 1 } else { n - 1 };
                app.selected = (app.selected + step) % n;
                app.detail.scroll = [0; 7];
            }
        }
        Action::SelectFlow(name) => {
            if let Some(i) = app.flow_index(&name) {
                open_detail(app, i);
            }
        }
        Action::ToggleFreeze => {
            app.freeze = match app.freeze {
                Some(_) => None,
                None => Some(Freeze {
                    at_ms: app.now_ms,
                    back_ms: 0,
                }),
            };
        }
        Action::ScrollBack | Action::ScrollForward => {
            let step = (app.window_ms / 5).max(1_000);
            let now = app.now_ms;
            let f = app.freeze.get_or_insert(Freeze {
                at_ms: now,
                back_ms: 0,
            });
            f.back_ms = if action == Action::ScrollBack {
                (f.back_ms + step).min(app.retention_ms)
            } else {
                (f.back_ms - step).max(0)
            };
        }
        Action::ZoomIn | Action::ZoomOut => {
            let i = WINDOWS_MS
                .iter()
                .position(|w| *w >= app.window_ms)
                .unwrap_or(WINDOWS_MS.len() - 1);
            let j = if action == Action::ZoomIn {
                i.saturating_sub(1)
            } else {
                (i + 1).min(WINDOWS_MS.len() - 1)
            };
            app.window_ms = WINDOWS_MS[j];
        }
        Action::Help => app.overlay = Overlay::Help(HelpView::default()),
        Action::OpenCommand => {
            app.overlay = Overlay::Prompt(Prompt {
                kind: PromptKind::Command,
                text: String::new(),
            });
        }
        Action::OpenFilter => {
            app.overlay = Overlay::Prompt(Prompt {
                kind: PromptKind::Filter,
                text: app.filter.clone(),
            });
        }
        // Only a pane takes input; closing keys close whatever pane passed them on.
        Action::InputChar(_) | Action::InputBackspace => {}
        Action::InputCancel | Action::InputSubmit | Action::ConfirmYes | Action::ConfirmNo => {
            app.overlay = Overlay::None
        }
        Action::OpenPlaybook => match app.current_flow() {
            Some(f) => app.overlay = Overlay::Playbook(PlaybookView::open(f)),
            None => app.complain("no flow selected"),
        },
        Action::ClosePlaybook => app.overlay = Overlay::None,
        // The playbook's own: nothing without it.
        Action::DryRunStep | Action::ToggleStep => {}
        Action::Control(command) => match app.current_flow().map(|f| f.name.clone()) {
            Some(flow) => cx(app, effects).control(flow, command),
            None => app.complain("no flow selected"),
        },
        Action::ControlNamed(flow, ControlCommand::Stop) => {
            if app.mode == Mode::Attach {
                app.complain("weir attach is read-only: flows are controlled where they run");
            } else {
                app.overlay = Overlay::Confirm(Confirm::StopFlow(flow));
            }
        }
        Action::ControlNamed(flow, command) => cx(app, effects).control(flow, command),
        Action::Drill => match (&app.mode, &app.pipeline_path) {
            (Mode::Attach, _) => app.complain("weir attach is read-only: run `weir drill PIPELINE` in a shell"),
            (_, None) => app.complain("the pipeline file is not known to this console"),
            (_, Some(p)) => app.overlay = Overlay::Confirm(Confirm::Drill(p.clone())),
        },
        Action::RestartFlow => match app.current_flow() {
            _ if app.mode == Mode::Attach => {
                app.complain("weir attach is read-only: restart the flow where it runs")
            }
            Some(f) if f.restartable => {
                app.overlay = Overlay::Confirm(Confirm::RestartFlow(f.name.clone()));
            }
            Some(f) => app.complain(format!(
                "{} did not stop for a schema change; only such a stop is restarted from the console",
                f.name
            )),
            None => app.complain("no flow selected"),
        },
        Action::StopFlow => match app.current_flow().map(|f| f.name.clone()) {
            Some(flow) => {
                view_update(app, Action::ControlNamed(flow, ControlCommand::Stop), effects)
            }
            None => app.complain("no flow selected"),
        },
        Action::Quit => match app.mode {
            Mode::Attach => app.exit = true,
            Mode::Run if app.engine_done => app.exit = true,
            Mode::Run if app.quitting => {
                app.abort = true;
                app.exit = true;
            }
            Mode::Run => {
                app.quitting = true;
                let now = app.now_ms;
                for f in app.flows.iter_mut().filter(|f| f.alive()) {
                    f.push_event(
                        now,
                        EventKind::Operator,
                        "stop all and quit requested by the operator".into(),
                    );
                }
                app.say("stopping every flow after its running batch; q again aborts now");
                effects.push(Effect::StopAll);
            }
        },
        Action::Redraw => {}
        Action::OpenSql(query) => {
            if app.sql.flows.is_empty() {
                app.complain("no tables are known to this console: SQL needs weir run or weir attach of weir flows");
                return;
            }
            let run = query.is_some();
            app.overlay = Overlay::Sql(SqlView {
                input: query.unwrap_or_default(),
                ..SqlView::new()
            });
            if run {
                effects.extend(update(app, Action::InputSubmit));
            }
        }
        Action::Peek(kind) => {
            let Some(flow) = app.current_flow().map(|f| f.name.clone()) else {
                app.complain("no flow selected");
                return;
            };
            app.overlay = Overlay::Sql(SqlView::peek(flow, kind));
            effects.extend(update(app, Action::Peek(kind)));
        }
        Action::Maintain(kind) => match app.current_flow() {
            _ if app.mode == Mode::Attach => app.complain(format!(
                "weir attach is read-only: run `weir table {}` in a shell",
                kind.word()
            )),
            Some(f) if f.sink_path.is_none() => {
                app.complain(format!("{} writes no Delta table", f.name))
            }
            Some(f) => effects.push(Effect::PlanMaintenance {
                flow: f.name.clone(),
                kind,
            }),
            None => app.complain("no flow selected"),
        },
        Action::Graph => app.overlay = Overlay::Graph(GraphView::open(&app.flows, app.selected)),
        Action::ColumnLeft | Action::ColumnRight | Action::ClearInput => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::control::{FlowEvent, FlowStatus};

    #[test]
    fn the_open_pane_takes_an_action_first_and_the_view_what_it_passes() {
        let mut app = App::for_tests(Mode::Run, &["a", "b"]);
        update(&mut app, Action::Help);
        update(&mut app, Action::Down);
        assert_eq!(app.overlay, Overlay::Help(HelpView { scroll: 1 }));
        assert_eq!(app.selected, 0, "the help scrolled, not the flows table");
        // The help does not take Tab: the overview under it does.
        update(&mut app, Action::NextPane);
        assert!(app.overview.events_focused);
        update(&mut app, Action::Help);
        assert_eq!(app.overlay, Overlay::None);
        update(&mut app, Action::NextPane);
        update(&mut app, Action::Down);
        assert_eq!(app.selected, 1);
        // The graph opens on the selected flow's row; Enter there opens its detail.
        update(&mut app, Action::Graph);
        assert_eq!(app.overlay, Overlay::Graph(GraphView { cursor: 2 }));
        update(&mut app, Action::Enter);
        assert_eq!(
            (app.view, app.selected, &app.overlay),
            (View::Detail, 1, &Overlay::None)
        );
        // The filter line filters as it is typed; Esc clears it.
        update(&mut app, Action::Back);
        update(&mut app, Action::OpenFilter);
        update(&mut app, Action::InputChar('b'));
        assert_eq!((app.filter.as_str(), app.visible_flows()), ("b", vec![1]));
        update(&mut app, Action::InputCancel);
        assert_eq!((app.filter.as_str(), &app.overlay), ("", &Overlay::None));
    }

    #[test]
    fn quit_in_run_stops_then_aborts() {
        let mut app = App::for_tests(Mode::Run, &["a"]);
        app.flows[0].set_status(FlowStatus::Running, 0);
        assert_eq!(update(&mut app, Action::Quit), vec![Effect::StopAll]);
        assert!(!app.exit);
        app.ingest(Report::EngineDone);
        assert!(app.exit && !app.abort);

        let mut app = App::for_tests(Mode::Run, &["a"]);
        update(&mut app, Action::Quit);
        update(&mut app, Action::Quit);
        assert!(app.exit && app.abort);
    }

    #[test]
    fn attach_refuses_control() {
        let mut app = App::for_tests(Mode::Attach, &["a"]);
        app.flows[0].set_status(FlowStatus::Running, 0);
        assert!(update(&mut app, Action::Control(ControlCommand::Pause)).is_empty());
        assert!(app.message.as_ref().unwrap().bad);
        update(&mut app, Action::Quit);
        assert!(app.exit);
    }

    #[test]
    fn a_schema_change_stop_is_restarted_after_confirmation() {
        let mut app = App::for_tests(Mode::Run, &["a"]);
        // Not restartable: refused with a reason.
        assert!(update(&mut app, Action::RestartFlow).is_empty());
        assert!(app.message.as_ref().is_some_and(|m| m.bad));
        app.flows[0].ingest_event(
            &FlowEvent::Error {
                flow: "a".into(),
                kind: "schema_changed".into(),
                domain: crate::error::Domain::User,
                retryable: false,
                message: "schema changed: new column(s) tier".into(),
                at_ms: 0,
            },
            60_000,
        );
        assert!(app.flows[0].restartable);
        assert!(
            update(&mut app, Action::RestartFlow).is_empty(),
            "asks first"
        );
        assert_eq!(
            app.overlay,
            Overlay::Confirm(Confirm::RestartFlow("a".into()))
        );
        assert_eq!(
            update(&mut app, Action::ConfirmYes),
            vec![Effect::Command {
                flow: "a".into(),
                command: ControlCommand::Restart
            }]
        );
        // The restarted run clears LAST ERROR (the error stays on the timeline).
        app.flows[0].ingest_event(
            &FlowEvent::Status {
                flow: "a".into(),
                status: FlowStatus::Failed,
                at_ms: 1,
            },
            60_000,
        );
        assert!(app.flows[0].last_error.is_some());
        app.flows[0].ingest_event(
            &FlowEvent::Status {
                flow: "a".into(),
                status: FlowStatus::Starting,
                at_ms: 2,
            },
            60_000,
        );
        assert!(app.flows[0].last_error.is_none() && !app.flows[0].restartable);
        // Attach is read-only.
        let mut attach = App::for_tests(Mode::Attach, &["a"]);
        attach.flows[0].restartable = true;
        assert!(update(&mut attach, Action::RestartFlow).is_empty());
        assert_eq!(attach.overlay, Overlay::None);
    }

    #[test]
    fn the_drill_runs_on_a_copy_after_confirmation() {
        let mut app = App::for_tests(Mode::Run, &["a"]);
        assert!(update(&mut app, Action::Drill).is_empty());
        assert!(
            app.message.as_ref().is_some_and(|m| m.bad),
            "no pipeline known"
        );
        app.pipeline_path = Some(std::path::PathBuf::from("/srv/p/pipeline.toml"));
        assert!(update(&mut app, Action::Drill).is_empty(), "asks first");
        assert_eq!(
            app.overlay,
            Overlay::Confirm(Confirm::Drill("/srv/p/pipeline.toml".into()))
        );
        assert_eq!(
            update(&mut app, Action::ConfirmYes),
            vec![Effect::Drill {
                pipeline: "/srv/p/pipeline.toml".into()
            }]
        );
    }

    #[test]
    fn stop_asks_first() {
        let mut app = App::for_tests(Mode::Run, &["a", "b"]);
        app.flows[1].set_status(FlowStatus::Idle, 0);
        update(&mut app, Action::OpenCommand);
        for c in "stop b".chars() {
            update(&mut app, Action::InputChar(c));
        }
        assert!(update(&mut app, Action::InputSubmit).is_empty());
        assert_eq!(app.overlay, Overlay::Confirm(Confirm::StopFlow("b".into())));
        assert_eq!(
            update(&mut app, Action::ConfirmYes),
            vec![Effect::Command {
                flow: "b".into(),
                command: ControlCommand::Stop
            }]
        );
    }

    #[test]
    fn freeze_and_scroll_back() {
        let mut app = App::for_tests(Mode::Run, &["a"]);
        app.now_ms = 1_000_000;
        update(&mut app, Action::ScrollBack);
        assert_eq!(app.as_of(), 1_000_000 - DEFAULT_WINDOW_MS / 5);
        app.tick(2_000_000);
        assert_eq!(
            app.as_of(),
            1_000_000 - DEFAULT_WINDOW_MS / 5,
            "frozen views do not move"
        );
        update(&mut app, Action::ScrollForward);
        update(&mut app, Action::ScrollForward);
        assert_eq!(app.as_of(), 1_000_000);
        update(&mut app, Action::ToggleFreeze);
        assert_eq!(app.as_of(), 2_000_000);
    }
}
