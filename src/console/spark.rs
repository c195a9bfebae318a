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
use super::model::{CheckpointBatches, EventKind, FlowModel};
use super::theme::Theme;

/// The console input of a feed update; `names` are the rows' flow names by query index.
pub fn input_of(names: &[String], update: Update) -> Option<Report> {
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

/// Renames a row (its timeline entries too).
fn rename(app: &mut App, from: &str, to: &str) {
    for f in &mut app.flows {
        if f.name == from {
            f.name = to.to_string();
            for e in &mut f.timeline {
                if e.flow == from {
                    e.flow = to.to_string();
                }
            }
        }
    }
}

/// Opens the feed and builds the console's state from everything the files hold so far.
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
        if let Update::Row { info, .. } = &u {
            let mut m = FlowModel::new(&info.name);
            m.checkpoint.clone_from(&info.checkpoint);
            m.spark = true;
            names.push(info.name.clone());
            app.flows.push(m);
        } else if let Some(input) = input_of(&names, u) {
            app.ingest(input);
        }
    })?;
    for (i, q) in feed.queries.iter().enumerate() {
        if let Some(old) = names.get(i).cloned()
            && old != q.name
        {
            rename(&mut app, &old, &q.name);
            names[i].clone_from(&q.name);
        }
        if let Some(f) = app.flows.get_mut(i) {
            f.source_path.clone_from(&q.source_path);
            f.sink_path.clone_from(&q.sink_path);
        }
    }
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

/// Keeps following in a thread until the console stops listening.
pub fn follow(mut feed: Feed, names: Vec<String>, tx: mpsc::Sender<Report>, interval: Duration) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(interval);
            if tx.is_closed() {
                return;
            }
            let mut closed = false;
            feed.poll(chrono::Utc::now().timestamp_millis(), &mut |u| {
                if closed {
                    return;
                }
                if let Some(input) = input_of(&names, u)
                    && tx.blocking_send(input).is_err()
                {
                    closed = true;
                }
            });
            if closed {
                return;
            }
        }
    });
}
