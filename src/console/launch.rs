//! Runs a pipeline's flows for the console (`weir run` without `--headless`):
//! each flow gets a bounded command channel and an [`EventSink`] on one
//! bounded event channel, so a slow console only drops events (counted)
//! and never slows a batch. Flows are sequenced like `weir::cli::run::run_flows`:
//! one after another with `available_now`/`once`, concurrently otherwise.

use std::collections::BTreeMap;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::engine::control::{ControlCommand, EVENT_CAPACITY, EventSink, FlowEvent, FlowStatus};
use crate::engine::{FlowSummary, RunOptions, run_flow};
use crate::error::Domain;
use crate::pipeline::{FlowSpec, Trigger};

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

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Starts the flows (call inside a tokio runtime).
pub fn launch(flows: Vec<FlowSpec>, trigger: Option<Trigger>) -> Launched {
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
                        rx: mpsc::Receiver<ControlCommand>,
                        sink: EventSink,
                        stop: watch::Receiver<bool>| {
        let options = RunOptions {
            trigger,
            stop: Some(stop),
            on_progress: None,
            commands: Some(rx),
            events: Some(sink.clone()),
        };
        let name = flow.name.clone();
        async move {
            let joined = tokio::spawn(async move { run_flow(&flow, options).await }).await;
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
            (name, result)
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
