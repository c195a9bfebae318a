//! The operations console: live panes over running flows, usable over SSH.
//!
//! `weir run` (without `--headless`) runs its flows inside the console and
//! can pause, resume, trigger and stop them; `weir attach CHECKPOINT...`
//! shows the same panes, read-only, from the checkpoint files of flows run
//! by another process. One code path draws both:
//!
//! ```text
//!  keys ──► keys::action_for ──► Action ──► update::update ──► Effect ──► launch::EngineLink ──► engine
//!                                              ▲                        (bounded command channels)
//!  engine events (bounded, try_send) ──► Report┤
//!  follow:: progress.jsonl, offsets/, commits/,┘
//!           _schemas/, _weir/lock (read-only)
//!
//!  App ──► Snapshot::of (immutable, windowed, formatted) ──► draw::draw (pure) ──► frame
//! ```
//!
//! | module | does |
//! |---|---|
//! | `action`, `keys` | the vocabulary and the one binding table (keys, hint bar, help, `:` commands) |
//! | `app` | the state (the open pane is its `Overlay`), and engine/follower reports (`Report`, `App::ingest`) |
//! | `pane/` | one file per pane (overview, detail, help, prompt, confirm, playbook, dry run, maintenance, SQL, graph): its state, its `update`, its snapshot type and `snap`, its `draw` |
//! | `update` | `update`: the one function that changes the state for an action (the open pane first, then the view, then the console's own) |
//! | `model` | per-flow bounded time series, status history, timeline |
//! | `forecast` | the backlog's catch-up forecast |
//! | `graph` | the pipeline graph: flows as a DAG from sources to tables |
//! | `snapshot`, `draw`, `theme`, `format` | what a frame shows and how, assembled from the panes' (`format`: numbers, sizes, durations, times) |
//! | `launch`, `follow`, `spark` | where inputs come from (`run`, `attach`, `attach --spark`) |
//! | `session`, `event_loop`, `terminal` | driving it: headless or on a terminal |
//!
//! Inside the console the imports run one way too (`tests/it/layers.rs`): the panes
//! sit below `app`, and reach the rest through what `update` hands them.
//!
//! Keys, panes and units are documented in `docs/console.md`.

pub mod action;
pub mod app;
pub mod draw;
pub mod event_loop;
pub mod follow;
pub mod forecast;
pub mod format;
pub mod graph;
pub mod keys;
pub mod launch;
pub mod model;
pub mod pane;
pub mod session;
pub mod snapshot;
pub mod spark;
pub mod terminal;
pub mod theme;
pub mod update;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::checkpoint::progress::read_progress;
use crate::clock::now_ms;
use crate::spec::{FlowSpec, HumanDuration, Trigger};
use app::{App, Mode};
use event_loop::{Feeds, FlowResults};
use follow::FollowOptions;
use model::FlowModel;
use session::Session;
use terminal::TerminalSession;
use theme::Theme;

/// Console options shared by `run`, `demo` and `attach`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConsoleArgs {
    /// Console: draw borders and charts with ASCII only (automatic when the locale is not UTF-8).
    #[arg(long)]
    pub ascii: bool,
    /// Console: metric history kept per flow, e.g. `30m`, `2h`.
    #[arg(long, default_value = "30m", value_parser = parse_retention)]
    pub retention: Duration,
}

impl Default for ConsoleArgs {
    fn default() -> Self {
        ConsoleArgs {
            ascii: false,
            retention: DEFAULT_RETENTION,
        }
    }
}

pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 60);

fn parse_retention(s: &str) -> Result<Duration, String> {
    let d = HumanDuration::parse(s)?.0;
    if d < Duration::from_secs(60) {
        return Err(format!("retention {s:?} is too short; at least 1 minute"));
    }
    Ok(d)
}

/// How a console run ended.
pub struct RunOutcome {
    /// Each flow's result, as `weir::cli::run::run_flows` returns them.
    pub results: FlowResults,
    /// Quit twice (or a second signal): the flows were not waited for.
    pub aborted: bool,
}

/// Whether the console can run here (stdin and stdout are terminals).
pub fn terminal_available() -> bool {
    terminal::available()
}

/// Why the console cannot start here (see [`terminal::unavailable_reason`]).
pub fn terminal_unavailable_reason() -> Option<String> {
    terminal::unavailable_reason()
}

fn retention_ms(args: &ConsoleArgs) -> i64 {
    i64::try_from(args.retention.as_millis()).unwrap_or(i64::MAX)
}

/// Loads what a checkpoint already holds (earlier runs) into a flow's model.
fn seed_history(model: &mut FlowModel, checkpoint: &Path, retention_ms: i64) {
    let path = crate::checkpoint::Checkpoint::at(checkpoint).progress_path();
    if let Ok(records) = read_progress(&path) {
        for p in &records {
            model.ingest_progress(p, retention_ms);
        }
    }
}

/// Runs flows inside the console until they are done and the operator quits.
pub async fn run_flows(
    title: &str,
    flows: &[FlowSpec],
    trigger: Option<Trigger>,
    args: &ConsoleArgs,
) -> io::Result<RunOutcome> {
    // `weir run` titles the console with the pipeline file's path.
    let pipeline = Some(Path::new(title)).filter(|p| p.is_file());
    run_flows_with_notices(title, pipeline, flows, trigger, args, None, None).await
}

/// [`run_flows`] with pipeline-wide notices `(at_ms, text)` put on every flow's
/// timeline as they arrive (the live demo's injected faults), and a replay's status
/// whose simulated clock the watermark delays are measured against.
pub async fn run_flows_with_notices(
    title: &str,
    pipeline: Option<&Path>,
    flows: &[FlowSpec],
    trigger: Option<Trigger>,
    args: &ConsoleArgs,
    notices: Option<mpsc::Receiver<(i64, String)>>,
    replay: Option<tokio::sync::watch::Receiver<crate::demo::replay::ReplayStatus>>,
) -> io::Result<RunOutcome> {
    let retention = retention_ms(args);
    let models = flows
        .iter()
        .map(|f| {
            let mut m = FlowModel::new(&f.name);
            seed_history(&mut m, &f.checkpoint, retention);
            m.checkpoint = Some(f.checkpoint.clone());
            m.source_path = Some(f.source.path().to_path_buf());
            m.sink_path = f.writes();
            m.inputs = graph::inputs_of_spec(f);
            m.sink_label = Some(f.sink.describe());
            m.trigger = Some(trigger.unwrap_or(f.trigger).to_string());
            m
        })
        .collect();
    let app = App::new(
        Mode::Run,
        title,
        models,
        Theme::detect(args.ascii),
        retention,
        now_ms(),
    );
    let mut screen = TerminalSession::enter()?;
    let launched = launch::launch(flows.to_vec(), trigger);
    let (tx, inputs) = mpsc::channel(256);
    let followers: Vec<_> = flows
        .iter()
        .map(|f| {
            let options = FollowOptions {
                progress: false,
                lock: false,
                interval: Duration::from_millis(500),
            };
            tokio::spawn(follow::follow(
                f.name.clone(),
                f.checkpoint.clone(),
                options,
                tx.clone(),
            ))
        })
        .collect();
    // Kafka flows: per-partition lag measured against the cluster twice a second, each
    // on a thread of its own (independent of the engine's runtime).
    let lag_followers: Vec<_> = flows
        .iter()
        .filter_map(|f| match &f.source {
            crate::spec::SourceSpec::Kafka(k) => Some(follow::spawn_kafka_lag(
                f.name.clone(),
                k.clone(),
                f.checkpoint.clone(),
                follow::KAFKA_LAG_INTERVAL,
                tx.clone(),
            )),
            _ => None,
        })
        .collect();
    let notice_task = notices.map(|mut rx| {
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some((at_ms, text)) = rx.recv().await {
                if tx.send(app::Report::Notice { text, at_ms }).await.is_err() {
                    break;
                }
            }
        })
    });
    let replay_task = replay.map(|mut rx| {
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                let status = rx.borrow_and_update().clone();
                if tx.send(app::Report::Replay(status)).await.is_err() {
                    break;
                }
                if rx.changed().await.is_err() {
                    break;
                }
            }
        })
    });
    let mut app = app;
    app.pipeline_path = pipeline.map(Path::to_path_buf);
    app.sql = app::SqlState::new(
        flows.iter().map(crate::sql::FlowTables::of).collect(),
        Vec::new(),
    );
    let history = match pipeline {
        Some(p) => crate::sql::History::load(&crate::sql::history_path(p)),
        None => crate::sql::History::in_memory(),
    };
    let mut session = Session::new(app, Some(launched.link))
        .with_inputs(tx.clone())
        .with_sql_history(history);
    drop(tx);
    let feeds = Feeds {
        engine: Some(launched.events),
        inputs,
        done: Some(launched.done),
    };
    let end = event_loop::run(&mut session, &mut screen.terminal, feeds).await;
    for f in followers {
        f.abort();
    }
    // Stops the Kafka lag threads.
    drop(lag_followers);
    if let Some(t) = notice_task {
        t.abort();
    }
    if let Some(t) = replay_task {
        t.abort();
    }
    let log = screen.log_path.take();
    drop(screen);
    report_log(log.as_deref());
    let end = end?;
    Ok(RunOutcome {
        results: end.results,
        aborted: end.aborted,
    })
}

/// Shows flows run by other processes, from their checkpoints, until the operator quits.
pub async fn attach(checkpoints: &[PathBuf], args: &ConsoleArgs) -> io::Result<()> {
    let retention = retention_ms(args);
    let mut names: Vec<String> = Vec::new();
    let mut models = Vec::new();
    for cp in checkpoints {
        let mut name = follow::flow_name(cp);
        if names.contains(&name) {
            name = format!("{name}#{}", names.len() + 1);
        }
        names.push(name.clone());
        let mut m = FlowModel::new(&name);
        m.checkpoint = Some(cp.clone());
        if let Ok(Some(plan)) = crate::checkpoint::Checkpoint::at(cp).read_plan() {
            m.inputs = graph::inputs_of_plan(&plan);
            m.sink_label = Some(plan.sink.clone());
            m.source_path = Some(plan.source_path);
            m.sink_path = plan.sink_path.map(|p| crate::spec::normalize(&p));
        }
        models.push(m);
    }
    let title = checkpoints
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let app = App::new(
        Mode::Attach,
        title,
        models,
        Theme::detect(args.ascii),
        retention,
        now_ms(),
    );
    let mut screen = TerminalSession::enter()?;
    let (tx, inputs) = mpsc::channel(1024);
    let followers: Vec<_> = checkpoints
        .iter()
        .zip(&names)
        .map(|(cp, name)| {
            let options = FollowOptions {
                progress: true,
                lock: true,
                interval: Duration::from_millis(500),
            };
            tokio::spawn(follow::follow(
                name.clone(),
                cp.clone(),
                options,
                tx.clone(),
            ))
        })
        .collect();
    let mut app = app;
    app.sql = app::SqlState::new(
        checkpoints
            .iter()
            .zip(&names)
            .map(|(cp, name)| crate::sql::FlowTables::from_checkpoint(name, cp))
            .collect(),
        Vec::new(),
    );
    // Attach writes nothing: its query history lives in memory.
    let mut session = Session::new(app, None).with_inputs(tx.clone());
    drop(tx);
    let feeds = Feeds {
        engine: None,
        inputs,
        done: None,
    };
    let end = event_loop::run(&mut session, &mut screen.terminal, feeds).await;
    for f in followers {
        f.abort();
    }
    let log = screen.log_path.take();
    drop(screen);
    report_log(log.as_deref());
    end.map(|_| ())
}

/// How long `attach --spark` reads event logs before its first frame, and then per step
/// while the history loads (the console redraws between steps).
pub const SPARK_READ_BUDGET: Duration = Duration::from_millis(200);

/// `weir attach --spark`: Spark queries from their checkpoints and event logs, until the
/// operator quits. `Err` (before the terminal is taken) when a path cannot be read.
pub async fn attach_spark(
    checkpoints: &[PathBuf],
    opts: crate::spark::feed::Options,
    args: &ConsoleArgs,
) -> io::Result<()> {
    let retention = retention_ms(args);
    // The first frame shows the checkpoints and what of the event logs was read in this
    // budget; the follower loads the rest of the history progressively.
    let opts = crate::spark::feed::Options {
        read_budget: Some(SPARK_READ_BUDGET),
        ..opts
    };
    let (app, feed, names) = spark::open(
        checkpoints,
        opts,
        Theme::detect(args.ascii),
        retention,
        now_ms(),
    )
    .map_err(io::Error::other)?;
    let mut screen = TerminalSession::enter()?;
    let (tx, inputs) = mpsc::channel(256);
    spark::follow(feed, names, tx, Duration::from_millis(500));
    let mut session = Session::new(app, None);
    let feeds = Feeds {
        engine: None,
        inputs,
        done: None,
    };
    let end = event_loop::run(&mut session, &mut screen.terminal, feeds).await;
    let log = screen.log_path.take();
    drop(screen);
    report_log(log.as_deref());
    end.map(|_| ())
}

/// Says where stderr went while the console was up, or removes the empty log.
fn report_log(path: Option<&Path>) {
    let Some(path) = path else {
        return;
    };
    match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => eprintln!(
            "weir: logs written while the console was open: {}",
            path.display()
        ),
        _ => {
            let _ = std::fs::remove_file(path);
        }
    }
}
