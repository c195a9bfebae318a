//! `weir attach --spark`: the console over Apache Spark queries. The
//! [`crate::spark::feed::Feed`] reads their checkpoints and event logs; this
//! module only turns its updates into the inputs every flow's panes already
//! take (progress records, checkpoint batches, status, errors, health,
//! timeline entries), so nothing else in the console knows where they came from.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::engine::control::FlowEvent;
use crate::spark::feed::{Feed, NoteKind, Options, Update};

use super::app::{App, Mode, Report};
use super::model::{CheckpointBatches, EventKind};
use super::theme::Theme;

/// The console input of a feed update; `names` are the rows' flow names by query index
/// (a row's update keeps them in step: a new row is added, a renamed one renamed).
pub fn input_of(names: &mut Vec<String>, update: Update) -> Option<Report> {
    if let Update::Row { query, info } = update {
        if query < names.len() {
            names[query].clone_from(&info.name);
        } else if query == names.len() {
            names.push(info.name.clone());
        } else {
            return None;
        }
        return Some(Report::SparkRow {
            index: query,
            info: Box::new(info),
        });
    }
    let name = |q: usize| names.get(q).cloned();
    Some(match update {
        Update::Row { .. } => return None,
        Update::Progress { query, progress } => Report::Progress {
            flow: name(query)?,
            progress,
        },
        Update::Batches {
            query,
            last_planned,
            last_committed,
            pending_since_ms,
        } => Report::Batches {
            flow: name(query)?,
            batches: CheckpointBatches {
                last_planned,
                last_committed,
                pending_since_ms,
            },
        },
        Update::Status {
            query,
            status,
            at_ms,
        } => Report::Engine(FlowEvent::Status {
            flow: name(query)?,
            status,
            at_ms,
        }),
        Update::Error {
            query,
            facts,
            at_ms,
        } => Report::Engine(FlowEvent::Error {
            flow: name(query)?,
            kind: facts.kind,
            domain: facts.domain,
            retryable: facts.retryable,
            message: facts.message,
            at_ms,
        }),
        Update::Health {
            query,
            health,
            at_ms,
        } => Report::Engine(FlowEvent::Health {
            flow: name(query)?,
            health,
            at_ms,
        }),
        Update::Note {
            query: None,
            at_ms,
            text,
            ..
        } => Report::Notice { text, at_ms },
        Update::Note {
            query: Some(q),
            kind,
            at_ms,
            text,
        } => Report::Event {
            flow: name(q)?,
            at_ms,
            kind: match kind {
                NoteKind::Start => EventKind::Start,
                NoteKind::Stop => EventKind::Stop,
                NoteKind::Status => EventKind::Status,
                NoteKind::Problem => EventKind::Error,
                NoteKind::Batch => EventKind::Batch,
            },
            text,
        },
    })
}

/// Opens the feed and builds the console's state from what the files hold so far: all of it,
/// or, with a read budget (`opts.read_budget`), the checkpoints and as much of the event
/// logs as was read within it (the follower reads the rest; [`App::loading`] says how far).
/// Returns the app, the feed (to keep following) and the rows' names.
pub fn open(
    checkpoints: &[PathBuf],
    opts: Options,
    theme: Theme,
    retention_ms: i64,
    now_ms: i64,
) -> Result<(App, Feed, Vec<String>), String> {
    let title = if checkpoints.is_empty() {
        opts.event_logs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        checkpoints
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut app = App::new(
        Mode::Attach,
        format!("spark: {title}"),
        Vec::new(),
        theme,
        retention_ms,
        now_ms,
    );
    let mut names: Vec<String> = Vec::new();
    let feed = Feed::open(checkpoints, opts, now_ms, &mut |u| {
        if let Some(input) = input_of(&mut names, u) {
            app.ingest(input);
        }
    })?;
    app.loading = feed.loading();
    if !feed.has_logs() {
        for (i, f) in app.flows.iter_mut().enumerate() {
            let _ = i;
            f.push_event(
                now_ms,
                EventKind::Error,
                "no event log: rates, rows and errors are unknown; pass --event-log (spark.eventLog.dir)".into(),
            );
        }
    }
    Ok((app, feed, names))
}

/// One poll of the feed: its updates go to `send` as console inputs, then the history's
/// loading progress when it changed from `loading` (as last sent). `false`: `send` refused
/// (the console stopped listening).
pub fn step(
    feed: &mut Feed,
    names: &mut Vec<String>,
    loading: &mut Option<u8>,
    now_ms: i64,
    send: &mut dyn FnMut(Report) -> bool,
) -> bool {
    let mut open = true;
    feed.poll(now_ms, &mut |u| {
        if open && let Some(input) = input_of(names, u) {
            open = send(input);
        }
    });
    if open && feed.loading() != *loading {
        *loading = feed.loading();
        open = send(Report::Loading { percent: *loading });
    }
    open
}

/// Keeps following in a thread until the console stops listening: every `interval`, or at
/// once while the history still loads (each step's progress is reported).
pub fn follow(
    mut feed: Feed,
    mut names: Vec<String>,
    tx: mpsc::Sender<Report>,
    interval: Duration,
) {
    std::thread::spawn(move || {
        let mut loading = feed.loading();
        loop {
            if loading.is_none() {
                std::thread::sleep(interval);
            }
            if tx.is_closed() {
                return;
            }
            let now = chrono::Utc::now().timestamp_millis();
            if !step(&mut feed, &mut names, &mut loading, now, &mut |r| {
                tx.blocking_send(r).is_ok()
            }) {
                return;
            }
        }
    });
}
