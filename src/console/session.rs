//! One console session without a terminal: the [`App`], the link to the
//! engine (none in `attach`), and the three ways in: keys, inputs, ticks.
//! The event loop drives it with a real terminal; tests drive it with
//! injected keys and a `TestBackend`.

use crossterm::event::KeyEvent;
use ratatui::Terminal;
use ratatui::backend::Backend;

use super::action::Action;
use super::app::{App, Effect, Input, update};
use super::draw;
use super::keys;
use super::launch::EngineLink;
use super::snapshot::Snapshot;

pub struct Session {
    pub app: App,
    link: Option<EngineLink>,
}

impl Session {
    pub fn new(app: App, link: Option<EngineLink>) -> Self {
        Session { app, link }
    }

    /// A key press; returns the action it meant, if any.
    pub fn key(&mut self, key: KeyEvent) -> Option<Action> {
        let action = keys::action_for(&self.app, &key)?;
        self.act(action.clone());
        Some(action)
    }

    /// Applies an action and carries out its effects.
    pub fn act(&mut self, action: Action) {
        for effect in update(&mut self.app, action) {
            let result = match (&self.link, &effect) {
                (None, _) => Err("no engine to send to".to_string()),
                (Some(link), Effect::Command { flow, command }) => link.command(flow, *command),
                (Some(link), Effect::StopAll) => {
                    link.stop_all();
                    Ok(())
                }
            };
            if let Err(m) = result {
                self.app.complain(m);
            }
        }
    }

    pub fn ingest(&mut self, input: Input) {
        self.app.ingest(input);
    }

    pub fn tick(&mut self, now_ms: i64) {
        self.app.tick(now_ms);
        if let Some(link) = &self.link {
            self.app.events_dropped = link.dropped();
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot::of(&self.app)
    }

    /// Draws one frame (no synchronized-output markers: see the event loop).
    pub fn render<B: Backend>(&self, terminal: &mut Terminal<B>) -> Result<(), B::Error> {
        let snap = self.snapshot();
        terminal.draw(|f| draw::draw(f, &snap))?;
        Ok(())
    }
}
