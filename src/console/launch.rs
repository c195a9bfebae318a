//! Runs a pipeline's flows for the console (`weir run` without `--headless`):
//! each flow gets a bounded command channel and an [`EventSink`] on one
//! bounded event channel, so a slow console only drops events (counted)
//! and never slows a batch. Flows are sequenced like `weir::cli::run::run_flows`:
//! one after another in dependency order with `available_now`/`once`,
//! concurrently otherwise. A flow stopped by a schema change (`schema_changed`)
//! waits for the console's confirmed restart (`ControlCommand::Restart`) and
//! runs again with the widened schema.

use std::collections::BTreeMap;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::clock::now_ms;
use crate::engine::control::{ControlCommand, EVENT_CAPACITY, EventSink, FlowEvent, FlowStatus};
use crate::engine::{FlowSummary, RunOptions, run_flow};
use crate::error::Domain;
use crate::spec::{FlowSpec, Trigger};

/// Commands a flow's channel holds before the console is told it is busy.
pub const COMMAND_CAPACITY: usize = 16;

/// The console's handle on running flows: where commands go.
pub struct EngineLink {
    commands: BTreeMap<String, mpsc::Sender<ControlCommand>>,
    stop: watch::Sender<bool>,
    sinks: Vec<EventSink>,
}

impl EngineLink {
    /// A link over given channels (a fake engine in tests holds the other ends).
    pub fn new(
        commands: BTreeMap<String, mpsc::Sender<ControlCommand>>,
        stop: watch::Sender<bool>,
    ) -> Self {
        EngineLink {
            commands,
            stop,
            sinks: Vec::new(),
        }
    }

    /// Sends a command without waiting; says why when it cannot.
    pub fn command(&self, flow: &str, command: ControlCommand) -> Result<(), String> {
        let tx = self
            .commands
            .get(flow)
            .ok_or_else(|| format!("no flow named {flow}"))?;
        tx.try_send(command).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                format!("{flow} has {COMMAND_CAPACITY} commands waiting; try again")
            }
            mpsc::error::TrySendError::Closed(_) => format!("{flow} is no longer running"),
        })
    }

    /// Asks every flow to stop after its running batch.
    pub fn stop_all(&self) {
        self.stop.send_replace(true);
    }

    /// Events dropped because the console did not keep up.
    pub fn dropped(&self) -> u64 {
        self.sinks.iter().map(EventSink::dropped).sum()
    }
}

/// Running flows: the link, their events, and their results once all returned.
pub struct Launched {
    pub link: EngineLink,
    pub events: mpsc::Receiver<FlowEvent>,
    pub done: JoinHandle<Vec<(String, crate::Result<FlowSummary>)>>,
}

/// Starts the flows (call inside a tokio runtime).
pub fn launch(flows: Vec<FlowSpec>, trigger: Option<Trigger>) -> Launched {
    // Upstream flows first (they drain first with `available_now`).
    let flows = crate::spec::dependency_order(&flows).unwrap_or(flows);
    let (events_tx, events) = mpsc::channel(EVENT_CAPACITY);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut commands = BTreeMap::new();
    let mut prepared = Vec::new();
    let mut sinks = Vec::new();
    for flow in flows {
        let (tx, rx) = mpsc::channel(COMMAND_CAPACITY);
        commands.insert(flow.name.clone(), tx);
        let sink = EventSink::new(events_tx.clone());
        sinks.push(sink.clone());
        prepared.push((flow, rx, sink));
    }
    let draining = prepared.iter().all(|(f, _, _)| {
        matches!(
            trigger.unwrap_or(f.trigger),
            Trigger::AvailableNow | Trigger::Once
        )
    });
    let run_one = move |flow: FlowSpec,
                        mut console_rx: mpsc::Receiver<ControlCommand>,
                        sink: EventSink,
                        mut stop: watch::Receiver<bool>| {
        let name = flow.name.clone();
        let processing_time = matches!(trigger.unwrap_or(flow.trigger), Trigger::ProcessingTime(_));
        async move {
            let mut console_open = true;
            let mut transient_failures = 0u32;
            loop {
                // Each run gets its own command channel; the console's commands are
                // forwarded to it, so the console keeps one sender per flow across restarts.
                let (run_tx, run_rx) = mpsc::channel(COMMAND_CAPACITY);
                let options = RunOptions {
                    trigger,
                    stop: Some(stop.clone()),
                    on_progress: None,
                    commands: Some(run_rx),
                    events: Some(sink.clone()),
                };
                let run_flow_spec = flow.clone();
                let mut handle =
                    tokio::spawn(async move { run_flow(&run_flow_spec, options).await });
                // A restart asked for while the run is still ending (the console saw the
                // error event first) is kept for when it has ended.
                let mut restart_asked = false;
                let joined = loop {
                    tokio::select! {
                        r = &mut handle => break r,
                        c = console_rx.recv(), if console_open => match c {
                            Some(ControlCommand::Restart) => restart_asked = true,
                            None => console_open = false,
                            Some(c) => {
                                let _ = run_tx.try_send(c);
                            }
                        },
                    }
                };
                let result = match joined {
                    Ok(r) => r,
                    Err(e) => {
                        let message = format!("flow task panicked: {e}");
                        sink.send(FlowEvent::Error {
                            flow: name.clone(),
                            kind: "internal".into(),
                            domain: Domain::Internal,
                            retryable: false,
                            message: message.clone(),
                            at_ms: now_ms(),
                        });
                        sink.send(FlowEvent::Status {
                            flow: name.clone(),
                            status: FlowStatus::Failed,
                            at_ms: now_ms(),
                        });
                        Err(crate::Error::Source {
                            path: std::path::PathBuf::new(),
                            message,
                        })
                    }
                };
                // A transient failure (source or sink unavailable after the engine's own
                // retries) of a continuous flow: restart it with backoff (2 s, doubling up
                // to 60 s), as a supervisor would; its health state shows meanwhile.
                let transient = matches!(&result, Err(e) if e.retryable() && e.kind() != crate::error::ErrorKind::SchemaChanged);
                if transient && processing_time && !*stop.borrow() {
                    transient_failures = transient_failures.saturating_add(1);
                    let delay = std::time::Duration::from_secs(
                        2u64.saturating_pow(transient_failures.min(6)).min(60),
                    );
                    let stopped = tokio::select! {
                        _ = tokio::time::sleep(delay) => false,
                        changed = stop.changed() => changed.is_err() || *stop.borrow(),
                    };
                    if !stopped {
                        sink.send(FlowEvent::Command {
                            flow: name.clone(),
                            command: ControlCommand::Restart,
                            at_ms: now_ms(),
                        });
                        continue;
                    }
                } else if result.is_ok() {
                    transient_failures = 0;
                }
                // A schema-change stop is offered as one confirmed restart (console `R`):
                // wait for it, or for a stop of everything.
                let schema_changed =
                    matches!(&result, Err(e) if e.kind() == crate::error::ErrorKind::SchemaChanged);
                if schema_changed && (console_open || restart_asked) && !*stop.borrow() {
                    let restart = restart_asked
                        || loop {
                            tokio::select! {
                                c = console_rx.recv() => match c {
                                    Some(ControlCommand::Restart) => break true,
                                    Some(_) => {}
                                    None => break false,
                                },
                                changed = stop.changed() => {
                                    if changed.is_err() || *stop.borrow() {
                                        break false;
                                    }
                                }
                            }
                        };
                    if restart {
                        continue;
                    }
                }
                return (name, result);
            }
        }
    };
    let done = tokio::spawn(async move {
        let mut results = Vec::new();
        if draining {
            for (flow, rx, sink) in prepared {
                if *stop_rx.borrow() {
                    sink.send(FlowEvent::Status {
                        flow: flow.name.clone(),
                        status: FlowStatus::Stopped,
                        at_ms: now_ms(),
                    });
                    continue;
                }
                results.push(run_one(flow, rx, sink, stop_rx.clone()).await);
            }
        } else {
            let tasks: Vec<_> = prepared
                .into_iter()
                .map(|(flow, rx, sink)| tokio::spawn(run_one(flow, rx, sink, stop_rx.clone())))
                .collect();
            for t in tasks {
                if let Ok(r) = t.await {
                    results.push(r);
                }
            }
        }
        results
    });
    Launched {
        link: EngineLink {
            commands,
            stop: stop_tx,
            sinks,
        },
        events,
        done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_schema_change_stop_waits_for_a_confirmed_restart_then_continues() {
        let dir = tempfile::tempdir().expect("tempdir");
        let landing = dir.path().join("landing");
        std::fs::create_dir_all(&landing).expect("landing");
        std::fs::write(landing.join("a.json"), "{\"id\":1}\n").expect("a");
        let toml = r#"
[[flow]]
name = "t"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "json"
[flow.sink]
type = "memory"
"#;
        let pipeline = crate::pipeline::parse(&dir.path().join("p.toml"), toml).expect("pipeline");
        // First run: infers {id}; then a file with a new column lands.
        let first = launch(pipeline.flows.clone(), None);
        let results = first.done.await.expect("joined");
        assert!(results[0].1.is_ok());
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(landing.join("b.json"), "{\"id\":2,\"tier\":\"gold\"}\n").expect("b");
        let mut second = launch(pipeline.flows.clone(), None);
        // The flow stops with schema_changed and waits.
        loop {
            match second.events.recv().await {
                Some(FlowEvent::Error {
                    kind: crate::error::ErrorKind::SchemaChanged,
                    ..
                }) => break,
                Some(_) => {}
                None => panic!("events ended before the schema change"),
            }
        }
        assert!(
            !second.done.is_finished(),
            "the launcher waits for a restart"
        );
        second
            .link
            .command("t", ControlCommand::Restart)
            .expect("restart sent");
        let results = second.done.await.expect("joined");
        let summary = results[0].1.as_ref().expect("the restarted run succeeds");
        assert_eq!(
            summary.num_input_rows, 1,
            "the re-read batch holds b.json's row"
        );
        let schema = crate::source::files::schema_store::latest(&dir.path().join("_checkpoints/t"))
            .expect("history")
            .expect("a schema");
        assert!(
            schema.1.field_with_name("tier").is_ok(),
            "widened schema recorded"
        );
    }
}
