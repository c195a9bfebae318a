//! [`update`]: the one function that changes the console's state for an action.
//!
//! Keys become [`Action`]s (`keys`); `update` applies one and returns the
//! [`Effect`]s the outside world must perform (commands for the engine, checkpoint
//! actions, a drill) instead of performing them, so the app can be driven headless.
//! Engine events and file-follower reports take the other path, [`App::ingest`].

use crate::engine::control::ControlCommand;

use super::action::Action;
use super::app::*;
use super::keys;
use super::model::EventKind;

/// Checkable steps of the open playbook.
fn playbook_steps(app: &App) -> usize {
    match &app.overlay {
        Overlay::Playbook(v) => crate::playbook::steps(&v.rendered(app).0).len(),
        _ => 0,
    }
}

/// Changes the app for an action; returns what the engine must be told.
pub fn update(app: &mut App, action: Action) -> Vec<Effect> {
    let mut effects = Vec::new();
    if matches!(app.overlay, Overlay::Sql(_)) {
        return sql_update(app, action);
    }
    if matches!(app.overlay, Overlay::Graph { .. }) {
        graph_update(app, action);
        return effects;
    }
    if let Overlay::Maintenance(d) = &app.overlay {
        match action {
            Action::ConfirmYes => {
                let d = d.clone();
                app.overlay = Overlay::None;
                match d.plan.blocked() {
                    Some(why) => {
                        app.say(format!("{}: {why}; nothing changed", d.plan.kind().word()))
                    }
                    None => {
                        let now = app.now_ms;
                        if let Some(i) = app.flow_index(&d.flow) {
                            app.flows[i].push_event(
                                now,
                                EventKind::Operator,
                                format!(
                                    "{} of the table requested by the operator",
                                    d.plan.kind().word()
                                ),
                            );
                        }
                        app.say(format!(
                            "{}: running in the background; the outcome goes on the timeline",
                            d.plan.kind().word()
                        ));
                        effects.push(Effect::RunMaintenance {
                            flow: d.flow,
                            plan: d.plan,
                        });
                    }
                }
            }
            Action::ConfirmNo => {
                app.overlay = Overlay::None;
                app.say("cancelled: nothing changed");
            }
            _ => {}
        }
        return effects;
    }
    match action {
        Action::Up => match &mut app.overlay {
            Overlay::Help { scroll } => *scroll = scroll.saturating_sub(1),
            Overlay::Playbook(v) => v.cursor = v.cursor.saturating_sub(1),
            _ => app.scroll_by(-1),
        },
        Action::Down => match &mut app.overlay {
            Overlay::Help { scroll } => *scroll += 1,
            Overlay::Playbook(_) => {
                let steps = playbook_steps(app);
                if let Overlay::Playbook(v) = &mut app.overlay {
                    v.cursor = (v.cursor + 1).min(steps.saturating_sub(1));
                }
            }
            _ => app.scroll_by(1),
        },
        Action::PageUp => app.scroll_by(-10),
        Action::PageDown => app.scroll_by(10),
        Action::Top => app.scroll_by(-(isize::MAX / 2)),
        Action::Bottom => app.scroll_by(isize::MAX / 2),
        Action::NextPane | Action::PrevPane => match app.view {
            View::Overview => app.overview_events = !app.overview_events,
            View::Detail => {
                let n = Pane::ALL.len();
                let step = if action == Action::NextPane { 1 } else { n - 1 };
                app.focus = Pane::ALL[(app.focus.index() + step) % n];
            }
        },
        Action::GoPane(i) => {
            if let Some(p) = Pane::ALL.get(usize::from(i)) {
                app.focus = *p;
            }
        }
        Action::Enter => match app.view {
            View::Overview => {
                if app.overview_events || app.flows.is_empty() {
                    return effects;
                }
                app.view = View::Detail;
                app.filter.clear();
                app.zoom = false;
                app.scroll = [0; 7];
            }
            View::Detail => app.zoom = !app.zoom,
        },
        Action::Back => {
            if !app.filter.is_empty() {
                app.filter.clear();
            } else if app.view == View::Detail && app.zoom {
                app.zoom = false;
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
                app.scroll = [0; 7];
            }
        }
        Action::SelectFlow(name) => {
            if let Some(i) = app.flow_index(&name) {
                app.selected = i;
                app.view = View::Detail;
                app.filter.clear();
                app.scroll = [0; 7];
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
        Action::Help => {
            app.overlay = match app.overlay {
                Overlay::Help { .. } => Overlay::None,
                _ => Overlay::Help { scroll: 0 },
            };
        }
        Action::OpenCommand => {
            app.overlay = Overlay::Prompt {
                kind: PromptKind::Command,
                text: String::new(),
            };
        }
        Action::OpenFilter => {
            app.overlay = Overlay::Prompt {
                kind: PromptKind::Filter,
                text: app.filter.clone(),
            };
        }
        Action::InputChar(c) if matches!(app.overlay, Overlay::Action(_)) => {
            if let Overlay::Action(d) = &mut app.overlay {
                d.typed.push(c);
            }
        }
        Action::InputBackspace if matches!(app.overlay, Overlay::Action(_)) => {
            if let Overlay::Action(d) = &mut app.overlay {
                d.typed.pop();
            }
        }
        Action::InputCancel if matches!(app.overlay, Overlay::Action(_)) => {
            if let Overlay::Action(d) = std::mem::replace(&mut app.overlay, Overlay::None) {
                app.overlay = Overlay::Playbook(d.back);
                app.say("cancelled: nothing changed");
            }
        }
        Action::InputSubmit if matches!(app.overlay, Overlay::Action(_)) => {
            if let Overlay::Action(d) = std::mem::replace(&mut app.overlay, Overlay::None) {
                if d.plan.needs_confirmation && d.typed.trim() != d.word {
                    app.complain(format!("type {} to confirm (Esc cancels)", d.word));
                    app.overlay = Overlay::Action(d);
                } else {
                    app.overlay = Overlay::Playbook(d.back);
                    effects.push(Effect::RunAction {
                        flow: d.flow,
                        plan: d.plan,
                    });
                }
            }
        }
        Action::InputChar(c) => {
            if let Overlay::Prompt { kind, text } = &mut app.overlay {
                text.push(c);
                if *kind == PromptKind::Filter {
                    app.filter = text.clone();
                    app.scroll = [0; 7];
                    app.events_scroll = 0;
                }
            }
        }
        Action::InputBackspace => {
            if let Overlay::Prompt { kind, text } = &mut app.overlay {
                text.pop();
                if *kind == PromptKind::Filter {
                    app.filter = text.clone();
                }
            }
        }
        Action::InputCancel => {
            if let Overlay::Prompt {
                kind: PromptKind::Filter,
                ..
            } = &app.overlay
            {
                app.filter.clear();
            }
            app.overlay = Overlay::None;
        }
        Action::InputSubmit => {
            let overlay = std::mem::replace(&mut app.overlay, Overlay::None);
            if let Overlay::Prompt { kind, text } = overlay {
                match kind {
                    PromptKind::Filter => app.filter = text,
                    PromptKind::Command => match keys::parse_command(app, &text) {
                        Ok(action) => return update(app, action),
                        Err(e) => app.complain(e),
                    },
                }
            }
        }
        Action::ConfirmYes => {
            let overlay = std::mem::replace(&mut app.overlay, Overlay::None);
            match overlay {
                Overlay::Confirm(Confirm::StopFlow(flow)) => {
                    app.control(flow, ControlCommand::Stop, &mut effects)
                }
                Overlay::Confirm(Confirm::RestartFlow(flow)) => {
                    app.control(flow, ControlCommand::Restart, &mut effects)
                }
                Overlay::Confirm(Confirm::Drill(pipeline)) => {
                    app.say("drill started; its verdict will appear on the timeline");
                    effects.push(Effect::Drill { pipeline });
                }
                _ => {}
            }
        }
        Action::ConfirmNo => app.overlay = Overlay::None,
        Action::OpenPlaybook => match app.current_flow() {
            Some(f) => {
                app.overlay = Overlay::Playbook(PlaybookView {
                    flow: f.name.clone(),
                    state: f.health.as_ref().map(|h| h.state).unwrap_or_default(),
                    cursor: 0,
                    checked: Default::default(),
                });
            }
            None => app.complain("no flow selected"),
        },
        Action::ClosePlaybook => app.overlay = Overlay::None,
        Action::DryRunStep => {
            let Overlay::Playbook(v) = &app.overlay else {
                return effects;
            };
            let v = v.clone();
            let action = crate::playbook::step_actions(&v.rendered(app).0)
                .get(v.cursor)
                .copied()
                .flatten();
            let checkpoint = app
                .flows
                .iter()
                .find(|f| f.name == v.flow)
                .and_then(|f| f.checkpoint.clone());
            match (app.mode, action, checkpoint) {
                (Mode::Attach, _, _) => {
                    app.complain("weir attach is read-only: run checkpoint actions in a shell")
                }
                (_, None, _) => app.complain("this step names no checkpoint action"),
                (_, _, None) => app.complain("the flow's checkpoint is not known"),
                (Mode::Run, Some(action), Some(checkpoint)) => effects.push(Effect::PlanAction {
                    view: v,
                    checkpoint,
                    action,
                }),
            }
        }
        Action::ToggleStep => {
            if let Overlay::Playbook(v) = &mut app.overlay
                && !v.checked.remove(&v.cursor)
            {
                v.checked.insert(v.cursor);
            }
        }
        Action::Control(command) => match app.current_flow().map(|f| f.name.clone()) {
            Some(flow) => app.control(flow, command, &mut effects),
            None => app.complain("no flow selected"),
        },
        Action::ControlNamed(flow, ControlCommand::Stop) => {
            if app.mode == Mode::Attach {
                app.complain("weir attach is read-only: flows are controlled where they run");
            } else {
                app.overlay = Overlay::Confirm(Confirm::StopFlow(flow));
            }
        }
        Action::ControlNamed(flow, command) => app.control(flow, command, &mut effects),
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
            Some(flow) => return update(app, Action::ControlNamed(flow, ControlCommand::Stop)),
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
                return effects;
            }
            app.overlay = Overlay::Sql(SqlView::new());
            if let Some(q) = query {
                if let Overlay::Sql(v) = &mut app.overlay {
                    v.input = q;
                }
                return sql_update(app, Action::InputSubmit);
            }
        }
        Action::Peek(kind) => {
            let Some(flow) = app.current_flow().map(|f| f.name.clone()) else {
                app.complain("no flow selected");
                return effects;
            };
            app.overlay = Overlay::Sql(SqlView {
                peek: Some((flow, kind)),
                ..SqlView::new()
            });
            return sql_update(app, Action::Peek(kind));
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
        Action::Graph => {
            // Open on the current flow's row.
            let rows = super::graph::tree(app);
            let cursor = rows
                .iter()
                .position(|r| r.node == super::graph::NodeRef::Flow(app.selected))
                .unwrap_or(0);
            app.overlay = Overlay::Graph { cursor };
        }
        Action::ColumnLeft | Action::ColumnRight | Action::ClearInput => {}
    }
    effects
}

/// The pipeline graph has the keyboard: move the cursor, open a flow, close.
fn graph_update(app: &mut App, action: Action) {
    let rows = super::graph::tree(app);
    let Overlay::Graph { cursor } = &mut app.overlay else {
        return;
    };
    let last = rows.len().saturating_sub(1);
    let step = |c: &mut usize, d: isize| *c = c.saturating_add_signed(d).min(last);
    match action {
        Action::Up => step(cursor, -1),
        Action::Down => step(cursor, 1),
        Action::PageUp => step(cursor, -10),
        Action::PageDown => step(cursor, 10),
        Action::Top => *cursor = 0,
        Action::Bottom => *cursor = last,
        Action::Enter => match rows.get(*cursor).and_then(super::graph::TreeRow::flow) {
            Some(i) => {
                app.overlay = Overlay::None;
                app.selected = i;
                app.view = View::Detail;
                app.filter.clear();
                app.zoom = false;
                app.scroll = [0; 7];
            }
            None => app.say("a source: Enter on a flow or a table opens its flow"),
        },
        Action::Graph | Action::InputCancel | Action::Back => app.overlay = Overlay::None,
        Action::Help => app.overlay = Overlay::Help { scroll: 0 },
        _ => {}
    }
}

/// Rows a page of the SQL pane scrolls.
const SQL_PAGE: usize = 10;

/// The SQL pane or a peek has the keyboard.
fn sql_update(app: &mut App, action: Action) -> Vec<Effect> {
    let mut effects = Vec::new();
    let history_len = app.sql.history.len();
    let now = app.now_ms;
    let Overlay::Sql(v) = &mut app.overlay else {
        return effects;
    };
    let rows = match &v.run {
        SqlRun::Done(r) => r.rows.len(),
        _ => 0,
    };
    let columns = match &v.run {
        SqlRun::Done(r) => r.columns.len(),
        _ => 0,
    };
    let peeking = v.peek.is_some();
    let scroll = |row: &mut usize, delta: isize| {
        *row = row.saturating_add_signed(delta).min(rows.saturating_sub(1));
    };
    match action {
        Action::InputChar(c) if !peeking => {
            v.input.push(c);
            v.history_pos = None;
        }
        Action::InputBackspace if !peeking => {
            v.input.pop();
            v.history_pos = None;
        }
        Action::ClearInput if !peeking => {
            v.input.clear();
            v.history_pos = None;
        }
        Action::Up if !peeking && history_len > 0 => {
            let pos = match v.history_pos {
                Some(p) => p.saturating_sub(1),
                None => history_len - 1,
            };
            v.history_pos = Some(pos);
            v.input = app.sql.history[pos].clone();
        }
        Action::Up if !peeking => {}
        Action::Down if !peeking => match v.history_pos {
            Some(p) if p + 1 < history_len => {
                v.history_pos = Some(p + 1);
                v.input = app.sql.history[p + 1].clone();
            }
            Some(_) => {
                v.history_pos = None;
                v.input.clear();
            }
            None => {}
        },
        Action::Up => scroll(&mut v.row, -1),
        Action::Down => scroll(&mut v.row, 1),
        Action::PageUp => scroll(&mut v.row, -(SQL_PAGE as isize)),
        Action::PageDown => scroll(&mut v.row, SQL_PAGE as isize),
        Action::Top => v.row = 0,
        Action::Bottom => v.row = rows.saturating_sub(1),
        Action::ColumnLeft => v.col = v.col.saturating_sub(1),
        Action::ColumnRight => v.col = (v.col + 1).min(columns.saturating_sub(1)),
        Action::InputSubmit if !peeking => {
            let sql = v.input.trim().to_string();
            if sql.is_empty() {
                app.complain("type a query first, e.g. SELECT count(*) FROM progress");
                return effects;
            }
            if matches!(v.run, SqlRun::Running { .. }) {
                effects.push(Effect::CancelSql);
            }
            let id = app.sql.next_id;
            app.sql.next_id += 1;
            v.run = SqlRun::Running {
                id,
                started_ms: now,
            };
            v.history_pos = None;
            if app.sql.history.last() != Some(&sql) {
                app.sql.history.push(sql.clone());
                let excess = app
                    .sql
                    .history
                    .len()
                    .saturating_sub(crate::sql::HISTORY_KEPT);
                app.sql.history = app.sql.history.split_off(excess);
            }
            effects.push(Effect::RunSql { id, sql });
        }
        Action::Peek(kind) if peeking => {
            let Some((flow, _)) = v.peek.clone() else {
                return effects;
            };
            if matches!(v.run, SqlRun::Running { .. }) {
                effects.push(Effect::CancelSql);
            }
            let id = app.sql.next_id;
            app.sql.next_id += 1;
            v.peek = Some((flow.clone(), kind));
            v.run = SqlRun::Running {
                id,
                started_ms: now,
            };
            effects.push(Effect::Peek { id, flow, kind });
        }
        Action::InputCancel => {
            if matches!(v.run, SqlRun::Running { .. }) {
                effects.push(Effect::CancelSql);
            }
            app.overlay = Overlay::None;
        }
        Action::Redraw => {}
        _ => {}
    }
    effects
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::control::{FlowEvent, FlowStatus};

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
