//! Control of a running flow and the events it publishes.
//!
//! Commands go in on a bounded channel ([`ControlCommand`]); events come out
//! on a bounded channel with `try_send`, so a slow consumer (the console)
//! never makes the engine wait or its memory grow: when the channel is full an
//! event is dropped and counted (progress records are also in
//! `_weir/progress.jsonl`, so nothing is lost for good).
//!
//! A flow's life:
//!
//! ```text
//! starting ─► running ⇄ idle
//!    │          │  ▲
//!    │        pause resume
//!    │          ▼  │
//!    │        paused
//!    └──────────┴──────► stopping ─► stopped
//!               any error ─► failed
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::records::StreamingQueryProgress;

/// What an operator (or the console) can ask of a running flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlCommand {
    /// Start no new batch until resumed (the running batch finishes).
    Pause,
    Resume,
    /// Start the next batch now instead of waiting for the trigger interval.
    TriggerNow,
    /// Finish the running batch and stop this flow.
    Stop,
    /// Start a flow again that stopped because its source gained new columns (the
    /// widened schema is recorded; the restart re-reads the stopped batch with it).
    /// Handled by the console's launcher, not by a running flow.
    Restart,
}

/// Where a flow is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowStatus {
    Starting,
    /// A batch is running.
    Running,
    /// Waiting for new input or for the next trigger.
    Idle,
    Paused,
    Stopping,
    Stopped,
    Failed,
}

impl FlowStatus {
    pub fn label(self) -> &'static str {
        match self {
            FlowStatus::Starting => "starting",
            FlowStatus::Running => "running",
            FlowStatus::Idle => "idle",
            FlowStatus::Paused => "paused",
            FlowStatus::Stopping => "stopping",
            FlowStatus::Stopped => "stopped",
            FlowStatus::Failed => "failed",
        }
    }
}

/// Something that happened to a flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum FlowEvent {
    Status {
        flow: String,
        status: FlowStatus,
        at_ms: i64,
    },
    Progress {
        flow: String,
        progress: Box<StreamingQueryProgress>,
    },
    Error {
        flow: String,
        kind: crate::records::ErrorKind,
        domain: crate::records::Domain,
        retryable: bool,
        message: String,
        at_ms: i64,
    },
    /// A schema event (schema changed, type mismatch, sink schema mismatch) with its evidence.
    Schema {
        flow: String,
        detail: crate::schema::events::SchemaEvent,
        at_ms: i64,
    },
    /// The flow's health state changed (with the evidence of the new state).
    Health {
        flow: String,
        health: Box<crate::records::Health>,
        at_ms: i64,
    },
    /// An operator's command was applied.
    Command {
        flow: String,
        command: ControlCommand,
        at_ms: i64,
    },
}

/// Capacity of the event channel from a flow to its consumer.
pub const EVENT_CAPACITY: usize = 1024;

/// The sending side of a flow's events; drops (and counts) when the consumer lags.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::Sender<FlowEvent>,
    dropped: Arc<AtomicU64>,
}

impl EventSink {
    pub fn new(tx: mpsc::Sender<FlowEvent>) -> Self {
        EventSink {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn send(&self, event: FlowEvent) {
        if self.tx.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events dropped because the consumer was too slow (or gone).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// What the engine holds to obey commands and stops while it waits.
pub struct Control {
    pub(crate) stop: Option<watch::Receiver<bool>>,
    pub(crate) commands: Option<mpsc::Receiver<ControlCommand>>,
    pub(crate) paused: bool,
    pub(crate) stop_flow: bool,
    /// Commits to the table the flow streams from, by flows of this process
    /// ([`super::notify`]): they end an idle wait early.
    pub(crate) upstream: Option<watch::Receiver<u64>>,
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The time passed (or a batch was asked for).
    Go,
    Stop,
}

impl Control {
    pub fn new(
        stop: Option<watch::Receiver<bool>>,
        commands: Option<mpsc::Receiver<ControlCommand>>,
    ) -> Self {
        Control {
            stop,
            commands,
            paused: false,
            stop_flow: false,
            upstream: None,
        }
    }

    /// Marks the upstream table's commits so far as seen (call before planning).
    pub fn upstream_seen(&mut self) {
        if let Some(rx) = self.upstream.as_mut() {
            rx.borrow_and_update();
        }
    }

    /// [`Control::wait`] for an idle flow: an upstream commit also ends it.
    pub async fn wait_idle(&mut self, d: Duration, on_command: impl FnMut(ControlCommand)) -> Wake {
        self.wait_for(d, on_command, true).await
    }

    pub fn stop_requested(&self) -> bool {
        self.stop_flow || self.stop.as_ref().is_some_and(|s| *s.borrow())
    }

    /// Applies commands that arrived without waiting; returns them for the timeline.
    pub fn drain(&mut self) -> Vec<ControlCommand> {
        let mut applied = Vec::new();
        if let Some(rx) = self.commands.as_mut() {
            while let Ok(c) = rx.try_recv() {
                applied.push(c);
            }
        }
        for c in &applied {
            self.apply(*c);
        }
        applied
    }

    fn apply(&mut self, c: ControlCommand) {
        match c {
            ControlCommand::Pause => self.paused = true,
            ControlCommand::Resume => self.paused = false,
            ControlCommand::TriggerNow => {}
            ControlCommand::Stop => self.stop_flow = true,
            ControlCommand::Restart => {}
        }
    }

    /// Waits up to `d` (forever while paused); a command or a stop ends the wait early.
    /// `on_command` sees every command applied.
    pub async fn wait(&mut self, d: Duration, on_command: impl FnMut(ControlCommand)) -> Wake {
        self.wait_for(d, on_command, false).await
    }

    async fn wait_for(
        &mut self,
        d: Duration,
        mut on_command: impl FnMut(ControlCommand),
        upstream_wakes: bool,
    ) -> Wake {
        enum Woke {
            Time,
            Upstream,
            StopChanged,
            Command(Option<ControlCommand>),
        }
        let deadline = tokio::time::Instant::now() + d;
        loop {
            if self.stop_requested() {
                return Wake::Stop;
            }
            let paused = self.paused;
            let stop = &mut self.stop;
            let commands = &mut self.commands;
            let upstream = &mut self.upstream;
            let woke = tokio::select! {
                _ = async {
                    match upstream.as_mut().filter(|_| upstream_wakes && !paused) {
                        Some(rx) => {
                            if rx.changed().await.is_err() {
                                std::future::pending::<()>().await
                            }
                        }
                        None => std::future::pending::<()>().await,
                    }
                } => Woke::Upstream,
                _ = async {
                    if paused {
                        std::future::pending::<()>().await
                    } else {
                        tokio::time::sleep_until(deadline).await
                    }
                } => Woke::Time,
                _ = async {
                    match stop.as_mut() {
                        Some(rx) => {
                            if rx.changed().await.is_err() {
                                std::future::pending::<()>().await
                            }
                        }
                        None => std::future::pending::<()>().await,
                    }
                } => Woke::StopChanged,
                c = async {
                    match commands.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending::<Option<ControlCommand>>().await,
                    }
                } => Woke::Command(c),
            };
            match woke {
                Woke::Time | Woke::Upstream => return Wake::Go,
                Woke::StopChanged => {}
                Woke::Command(None) => self.commands = None,
                Woke::Command(Some(c)) => {
                    self.apply(c);
                    on_command(c);
                    if c == ControlCommand::TriggerNow {
                        return Wake::Go;
                    }
                }
            }
        }
    }
}

/// A flow's events, stamped with its name and the time; nothing is sent without a
/// consumer. When the process's board is enabled ([`super::board`]), each event also
/// publishes the flow's next snapshot there.
pub struct FlowEvents {
    flow: String,
    sink: Option<EventSink>,
    board: Option<Arc<super::board::Board>>,
}

impl FlowEvents {
    pub fn new(flow: &str, sink: Option<EventSink>) -> Self {
        let board = super::board::global();
        FlowEvents {
            flow: flow.to_string(),
            sink,
            board: board.enabled().then_some(board),
        }
    }

    fn send(&self, event: impl FnOnce(String) -> FlowEvent) {
        if let Some(sink) = &self.sink {
            sink.send(event(self.flow.clone()));
        }
    }

    fn publish(&self, change: impl FnOnce(&mut super::board::FlowSnapshot)) {
        if let Some(board) = &self.board {
            board.update(&self.flow, change);
        }
    }

    /// Puts what the checkpoint says on the board, unless this process already published
    /// the flow (a restarted run keeps its counters).
    pub fn seed(&self, checkpoint: &crate::checkpoint::Checkpoint) {
        if let Some(board) = &self.board
            && board.get(&self.flow).is_none()
        {
            board.put(super::board::FlowSnapshot::from_checkpoint(
                &self.flow, checkpoint,
            ));
        }
    }

    pub fn status(&self, status: FlowStatus) {
        let at_ms = crate::clock::now_ms();
        self.publish(|s| {
            s.status = Some(status);
            s.at_ms = at_ms;
        });
        self.send(|flow| FlowEvent::Status {
            flow,
            status,
            at_ms,
        });
    }

    pub fn command(&self, command: ControlCommand) {
        self.send(|flow| FlowEvent::Command {
            flow,
            command,
            at_ms: crate::clock::now_ms(),
        });
    }

    pub fn schema(&self, detail: crate::schema::events::SchemaEvent) {
        self.send(|flow| FlowEvent::Schema {
            flow,
            detail,
            at_ms: crate::clock::now_ms(),
        });
    }

    pub fn progress(&self, progress: &StreamingQueryProgress) {
        self.publish(|s| s.observe_record(progress, crate::clock::now_ms()));
        self.send(|flow| FlowEvent::Progress {
            flow,
            progress: Box::new(progress.clone()),
        });
    }

    pub fn health(&self, health: crate::records::Health) {
        let at_ms = crate::clock::now_ms();
        self.publish(|s| {
            s.health = Some(health.clone());
            s.at_ms = at_ms;
        });
        self.send(|flow| FlowEvent::Health {
            flow,
            health: Box::new(health),
            at_ms,
        });
    }

    pub fn error(&self, e: &crate::error::Error) {
        let at_ms = crate::clock::now_ms();
        self.publish(|s| s.observe_error(e.to_string(), at_ms));
        self.send(|flow| FlowEvent::Error {
            flow,
            kind: e.kind(),
            domain: e.domain(),
            retryable: e.retryable(),
            message: e.to_string(),
            at_ms,
        });
    }
}
