//! One console session without a terminal: the [`App`], the link to the
//! engine (none in `attach`), and the three ways in: keys, inputs, ticks.
//! The event loop drives it with a real terminal; tests drive it with
//! injected keys and a `TestBackend`.

use crossterm::event::KeyEvent;
use ratatui::Terminal;
use ratatui::backend::Backend;

use super::action::Action;
use super::app::{ActionDialog, App, Effect, Overlay, PlaybookView, Report};
use super::draw;
use super::keys;
use super::launch::EngineLink;
use super::model::EventKind;
use super::snapshot::Snapshot;
use super::update::update;
use crate::checkpoint_tools::actions::ActionPlan;
use crate::playbook::StepAction;

pub struct Session {
    pub app: App,
    link: Option<EngineLink>,
    /// Where background work (the drill) reports back, as inputs.
    inputs: Option<tokio::sync::mpsc::Sender<Report>>,
}

/// Runs a future to completion from the (synchronous) console loop.
fn blocking<T>(fut: impl std::future::Future<Output = crate::Result<T>>) -> crate::Result<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| h.block_on(fut))
        }
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| crate::Error::io("tokio runtime", e))?
            .block_on(fut),
    }
}

impl Session {
    pub fn new(app: App, link: Option<EngineLink>) -> Self {
        Session {
            app,
            link,
            inputs: None,
        }
    }

    /// Lets background work started by the console report into its inputs.
    pub fn with_inputs(mut self, tx: tokio::sync::mpsc::Sender<Report>) -> Self {
        self.inputs = Some(tx);
        self
    }

    /// Runs a drill on a copy of the pipeline's input in the background; its verdict
    /// goes on every flow's timeline.
    fn start_drill(&mut self, pipeline: &std::path::Path) -> Result<(), String> {
        let tx = self
            .inputs
            .clone()
            .ok_or("this console cannot run background work")?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let work_dir = tempfile::Builder::new()
            .prefix("weir-drill-")
            .tempdir()
            .map_err(|e| e.to_string())?
            .keep();
        let options = crate::drill::DrillOptions {
            pipeline: pipeline.to_path_buf(),
            flows: None,
            kills: 2,
            seed: u64::try_from(self.app.now_ms).unwrap_or(0),
            key: Vec::new(),
            work_dir: work_dir.clone(),
            exe,
            max_files_per_trigger: Some(1),
        };
        let now = self.app.now_ms;
        self.app.ingest(Report::Notice {
            text: format!("drill started in {}", work_dir.display()),
            at_ms: now,
        });
        tokio::spawn(async move {
            let text = match crate::drill::run(&options).await {
                Ok(report) => {
                    let dupes: u64 = report.flows.iter().map(|f| f.duplicates).sum();
                    let lost: u64 = report.flows.iter().map(|f| f.lost).sum();
                    let path = work_dir.join("report.txt");
                    let _ = std::fs::write(&path, crate::drill::render(&report));
                    format!(
                        "drill {}: {} table(s), {} duplicate(s), {} lost, {} process start(s); report {}",
                        if report.pass { "PASS" } else { "FAIL" },
                        report.flows.len(),
                        dupes,
                        lost,
                        report.process_starts,
                        path.display()
                    )
                }
                Err(e) => format!("drill could not run: {e}"),
            };
            let _ = tx
                .send(Report::Notice {
                    text,
                    at_ms: crate::clock::now_ms(),
                })
                .await;
        });
        Ok(())
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
                (Some(link), Effect::Command { flow, command }) => link.command(flow, *command),
                (
                    _,
                    Effect::PlanAction {
                        view,
                        checkpoint,
                        action,
                    },
                ) => {
                    self.plan_action(view.clone(), checkpoint, *action);
                    Ok(())
                }
                (_, Effect::RunAction { flow, plan }) => {
                    self.run_action(flow, plan);
                    Ok(())
                }
                (_, Effect::Drill { pipeline }) => self.start_drill(pipeline),
                (None, _) => Err("no engine to send to".to_string()),
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

    /// Computes the dry-run of a checkpoint action and shows it for confirmation.
    fn plan_action(
        &mut self,
        back: PlaybookView,
        checkpoint: &std::path::Path,
        action: StepAction,
    ) {
        use crate::checkpoint_tools::actions::{plan_backup, plan_reset, plan_rollback};
        let plan = match action {
            StepAction::Backup => plan_backup(checkpoint),
            StepAction::Rollback => {
                let cp = crate::checkpoint::Checkpoint::at(checkpoint);
                match crate::checkpoint::Checkpoint::batch_ids(&cp.commits_dir()) {
                    Ok(ids) => match ids.last() {
                        Some(&to) => blocking(plan_rollback(checkpoint, to)),
                        None => {
                            self.app.complain("no committed batch to roll back to");
                            return;
                        }
                    },
                    Err(e) => Err(e),
                }
            }
            StepAction::Reset { truncate_target } => {
                let target = crate::checkpoint::Checkpoint::at(checkpoint)
                    .read_plan()
                    .ok()
                    .flatten()
                    .and_then(|p| p.sink_path);
                blocking(plan_reset(checkpoint, target.as_deref(), truncate_target))
            }
        };
        match plan {
            Ok(plan) => {
                let word = checkpoint
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default();
                self.app.overlay = Overlay::Action(ActionDialog {
                    flow: back.flow.clone(),
                    plan,
                    typed: String::new(),
                    word,
                    back,
                });
            }
            Err(e) => self.app.complain(format!("refused: {e}")),
        }
    }

    /// Runs a confirmed plan; its outcome goes on the flow's timeline.
    fn run_action(&mut self, flow: &str, plan: &ActionPlan) {
        let now = self.app.now_ms;
        match blocking(crate::checkpoint_tools::actions::execute(plan)) {
            Ok(done) => {
                if let Some(f) = self.app.flows.iter_mut().find(|f| f.name == flow) {
                    for line in &done {
                        f.push_event(now, EventKind::Operator, format!("{}: {line}", plan.action));
                    }
                }
                self.app
                    .say(format!("{}: done ({} step(s))", plan.action, done.len()));
            }
            Err(e) => self.app.complain(format!("{} failed: {e}", plan.action)),
        }
    }

    pub fn ingest(&mut self, input: Report) {
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
