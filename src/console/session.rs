//! One console session without a terminal: the [`App`], the link to the
//! engine (none in `attach`), and the three ways in: keys, inputs, ticks.
//! The event loop drives it with a real terminal; tests drive it with
//! injected keys and a `TestBackend`.

use crossterm::event::KeyEvent;
use ratatui::Terminal;
use ratatui::backend::Backend;

use super::action::Action;
use super::app::{
    ActionDialog, App, Effect, MaintenanceDialog, MaintenanceKind, MaintenancePlan, Overlay,
    PeekKind, PlaybookView, Report, SqlResult,
};
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
    /// Where background work (the drill, queries) reports back, as inputs.
    inputs: Option<tokio::sync::mpsc::Sender<Report>>,
    /// Dropping it cancels the running query or peek.
    sql_cancel: Option<tokio::sync::oneshot::Sender<()>>,
    /// The running query (id, text), recorded in the history when it ends.
    sql_pending: Option<(u64, String)>,
    /// The query history's file (`weir run`) or memory (`weir attach`).
    sql_history: crate::sql::History,
}

/// Runs a query or a peek on a thread of its own (its own runtime: a slow query
/// never holds the console's or the engine's threads), answering as `Report::Sql`.
fn spawn_sql(
    id: u64,
    job: SqlJob,
    flows: Vec<crate::sql::FlowTables>,
    limits: crate::sql::Limits,
    tx: tokio::sync::mpsc::Sender<Report>,
    cancel: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), String> {
    // One worker runs the query; this thread waits for it or its time limit
    // (crate::sql::run), so a query that does not yield still answers on time. An
    // aborted query stops at its next yield; nobody waits for it.
    let failed = tx.clone();
    crate::background::spawn(
        "weir-sql",
        crate::background::Workers::One,
        move || async move {
            let result = tokio::select! {
                r = job.run(&flows, &limits) => r,
                _ = cancel => return,
            };
            // Sent from the runtime's thread, which a blocking send would stall.
            let _ = tx.send(Report::Sql { id, result }).await;
        },
        move |e| {
            let result = Err(format!("no runtime for the query: {e}"));
            let _ = failed.blocking_send(Report::Sql { id, result });
        },
    )
    .map(|_| ())
    .map_err(|e| format!("cannot start the query: {e}"))
}

/// What the SQL thread runs.
enum SqlJob {
    Query(String),
    Peek(String, PeekKind),
}

/// Widest cell shown in the SQL pane (characters; longer values are cut with `…`).
pub const SQL_CELL_CHARS: usize = 40;

impl SqlJob {
    async fn run(
        self,
        flows: &[crate::sql::FlowTables],
        limits: &crate::sql::Limits,
    ) -> Result<SqlResult, String> {
        let (title, out) = match self {
            SqlJob::Query(sql) => (
                None,
                crate::sql::run(flows, &sql, limits)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            SqlJob::Peek(flow, kind) => {
                let Some(f) = flows.iter().find(|f| f.flow == flow) else {
                    return Err(format!("no tables known for flow {flow}"));
                };
                let peek = match kind {
                    PeekKind::Output => crate::sql::peek::latest_output(f, limits).await,
                    PeekKind::Input => crate::sql::peek::latest_input(f, limits).await,
                }
                .map_err(|e| e.to_string())?;
                (Some(peek.title), peek.output)
            }
        };
        Ok(sql_result(title, &out, limits.max_rows))
    }
}

/// A query's rows as the pane draws them.
pub fn sql_result(
    title: Option<String>,
    out: &crate::sql::QueryOutput,
    max_rows: usize,
) -> SqlResult {
    let (columns, rows) = crate::sql::cells(out, SQL_CELL_CHARS);
    let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    SqlResult {
        title,
        columns,
        rows,
        widths,
        summary: crate::sql::summary(out, max_rows),
        truncated: out.truncated,
        elapsed_ms: u64::try_from(out.elapsed.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The console's VACUUM retention (`weir table vacuum`'s default `--retain 168h`).
const VACUUM_RETAIN: std::time::Duration = std::time::Duration::from_secs(168 * 3600);

/// Runs a future to completion from the (synchronous) console loop.
fn blocking<T>(fut: impl std::future::Future<Output = crate::Result<T>>) -> crate::Result<T> {
    crate::background::block_on(fut).map_err(|e| crate::Error::io("tokio runtime", e))?
}

impl Session {
    pub fn new(app: App, link: Option<EngineLink>) -> Self {
        Session {
            app,
            link,
            inputs: None,
            sql_cancel: None,
            sql_pending: None,
            sql_history: crate::sql::History::in_memory(),
        }
    }

    /// Where queries run from the SQL pane are recorded (`weir run`: the pipeline's
    /// history file, whose queries Up/Down recall).
    pub fn with_sql_history(mut self, history: crate::sql::History) -> Self {
        self.app.sql.history = history.queries();
        self.sql_history = history;
        self
    }

    fn start_sql(&mut self, id: u64, job: SqlJob) -> Result<(), String> {
        let tx = self
            .inputs
            .clone()
            .ok_or("this console cannot run queries (no input channel)")?;
        let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel();
        // Replacing the sender cancels the query before.
        self.sql_cancel = Some(cancel_tx);
        if let SqlJob::Query(sql) = &job {
            self.sql_pending = Some((id, sql.clone()));
        }
        spawn_sql(
            id,
            job,
            self.app.sql.flows.clone(),
            self.app.sql.limits,
            tx,
            cancel_rx,
        )
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
            max_input_bytes: crate::drill::DEFAULT_MAX_INPUT_BYTES,
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
                (_, Effect::PlanMaintenance { flow, kind }) => self.plan_maintenance(flow, *kind),
                (_, Effect::RunMaintenance { flow, plan }) => self.run_maintenance(flow, plan),
                (_, Effect::RunSql { id, sql }) => self.start_sql(*id, SqlJob::Query(sql.clone())),
                (_, Effect::Peek { id, flow, kind }) => {
                    self.start_sql(*id, SqlJob::Peek(flow.clone(), *kind))
                }
                (_, Effect::CancelSql) => {
                    self.sql_cancel = None;
                    self.sql_pending = None;
                    Ok(())
                }
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
                self.app.overlay = Overlay::Action(ActionDialog::new(plan, checkpoint, back));
            }
            Err(e) => self.app.complain(format!("refused: {e}")),
        }
    }

    /// The dry run of a maintenance of a flow's table (as `weir table optimize|vacuum`
    /// prints it), shown for y/n. Reads the pipeline file for the flows reading the table.
    fn plan_maintenance(&mut self, flow: &str, kind: MaintenanceKind) -> Result<(), String> {
        let path = self.app.pipeline_path.clone().ok_or_else(|| {
            format!(
                "the pipeline file is not known to this console: run `weir table {}` in a shell",
                kind.word()
            )
        })?;
        let pipeline = crate::pipeline::load(&path).map_err(|e| e.to_string())?;
        let target = crate::maintenance::resolve(&pipeline.flows, None, Some(flow))?;
        let plan = match kind {
            MaintenanceKind::Optimize => {
                blocking(crate::maintenance::plan_optimize(&pipeline.flows, &target))
                    .map(|p| MaintenancePlan::Optimize(Box::new(p)))
            }
            MaintenanceKind::Vacuum => blocking(crate::maintenance::plan_vacuum(
                &pipeline.flows,
                &target,
                VACUUM_RETAIN,
                false,
            ))
            .map(|p| MaintenancePlan::Vacuum(Box::new(p))),
        }
        .map_err(|e| format!("{}: {e}", kind.word()))?;
        self.app.overlay = Overlay::Maintenance(MaintenanceDialog {
            flow: flow.to_string(),
            plan,
        });
        Ok(())
    }

    /// Runs a confirmed maintenance in the background (inline without a runtime); its
    /// outcome goes on the flow's timeline.
    fn run_maintenance(&mut self, flow: &str, plan: &MaintenancePlan) -> Result<(), String> {
        let plan = plan.clone();
        let job = async move {
            match &plan {
                MaintenancePlan::Optimize(p) => {
                    match crate::maintenance::optimize(&p.target.path, None).await {
                        Ok(d) => (
                            EventKind::Operator,
                            format!(
                                "optimize: OPTIMIZE committed version {} (was {}): {} file(s) compacted into {}",
                                d.version_after, d.version_before, d.files_removed, d.files_added
                            ),
                        ),
                        Err(e) => (EventKind::Error, format!("optimize failed: {e}")),
                    }
                }
                MaintenancePlan::Vacuum(p) => match crate::maintenance::vacuum(p).await {
                    Ok(deleted) => (
                        EventKind::Operator,
                        format!("vacuum: VACUUM deleted {} file(s)", deleted.len()),
                    ),
                    Err(e) => (EventKind::Error, format!("vacuum failed: {e}")),
                },
            }
        };
        let flow = flow.to_string();
        match (self.inputs.clone(), tokio::runtime::Handle::try_current()) {
            (Some(tx), Ok(handle)) => {
                handle.spawn(async move {
                    let (kind, text) = job.await;
                    let at_ms = crate::clock::now_ms();
                    let _ = tx
                        .send(Report::Event {
                            flow,
                            at_ms,
                            kind,
                            text,
                        })
                        .await;
                });
            }
            _ => {
                let (kind, text) = blocking(async { Ok(job.await) }).map_err(|e| e.to_string())?;
                let at_ms = self.app.now_ms;
                if kind == EventKind::Error {
                    self.app.complain(text.clone());
                } else {
                    self.app.say(text.clone());
                }
                self.app.ingest(Report::Event {
                    flow,
                    at_ms,
                    kind,
                    text,
                });
            }
        }
        Ok(())
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
        if let Report::Sql { id, result } = &input
            && let Some((_, sql)) = self.sql_pending.take_if(|(p, _)| p == id)
        {
            let entry = crate::sql::HistoryEntry {
                at: crate::records::iso_millis(self.app.now_ms),
                sql,
                rows: result.as_ref().ok().map(|r| r.rows.len() as u64),
                truncated: result.as_ref().is_ok_and(|r| r.truncated),
                ms: result.as_ref().map(|r| r.elapsed_ms).unwrap_or(0),
                error: result.as_ref().err().cloned(),
            };
            if let Err(e) = self.sql_history.append(entry) {
                tracing::warn!(error = %e, "could not record the query in the history");
            }
        }
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
