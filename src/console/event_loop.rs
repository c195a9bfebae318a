//! The one loop that owns the terminal: a `select!` over key presses,
//! engine events, follower reports, the flows' completion, signals, a
//! one-second tick (the clock) and a frame interval. A frame is drawn only
//! when something changed: at most [`FRAME`] apart after a key (the
//! console answers at once), at most [`DATA_FRAME`] apart when only data
//! changed (a busy engine does not make the console busy), and wrapped in
//! synchronized output so a slow SSH link shows whole frames.

use std::io;
use std::time::{Duration, Instant};

use crossterm::event::{Event, EventStream, KeyEventKind};
use crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
use crossterm::{execute, queue};
use futures::StreamExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::action::Action;
use super::app::Report;
use super::draw;
use super::session::Session;
use super::terminal::ConsoleTerminal;
use crate::clock::now_ms;
use crate::engine::FlowSummary;
use crate::engine::control::FlowEvent;

/// The shortest time between two frames after a key (10 frames/s at most).
pub const FRAME: Duration = Duration::from_millis(100);
/// The shortest time between two frames when only data changed (4 frames/s at most).
pub const DATA_FRAME: Duration = Duration::from_millis(250);
/// The clock's tick.
pub const TICK: Duration = Duration::from_secs(1);

pub type FlowResults = Vec<(String, crate::Result<FlowSummary>)>;

/// What feeds the console.
pub struct Feeds {
    pub engine: Option<mpsc::Receiver<FlowEvent>>,
    pub inputs: mpsc::Receiver<Report>,
    pub done: Option<JoinHandle<FlowResults>>,
}

/// How the loop ended.
pub struct LoopEnd {
    pub results: FlowResults,
    pub aborted: bool,
}

fn paint(session: &Session, terminal: &mut ConsoleTerminal, clear: bool) -> io::Result<()> {
    let snap = session.snapshot();
    queue!(terminal.backend_mut(), BeginSynchronizedUpdate)?;
    if clear {
        terminal.clear()?;
    }
    terminal.draw(|f| draw::draw(f, &snap))?;
    execute!(terminal.backend_mut(), EndSynchronizedUpdate)?;
    Ok(())
}

pub async fn run(
    session: &mut Session,
    terminal: &mut ConsoleTerminal,
    mut feeds: Feeds,
) -> io::Result<LoopEnd> {
    let mut keys = EventStream::new();
    let mut keys_open = true;
    let mut inputs_open = true;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut frame = tokio::time::interval(FRAME);
    frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut signals = 0u32;
    let mut engine_buf = Vec::with_capacity(256);
    let mut input_buf = Vec::with_capacity(256);
    let mut results = Vec::new();
    let mut dirty = true;
    let mut urgent = true;
    let mut last_paint = Instant::now();
    let mut clear = false;
    let mut broken = false;
    session.tick(now_ms());
    loop {
        if session.app.should_exit() {
            break;
        }
        let mut engine_closed = false;
        let mut finished = None;
        tokio::select! {
            ev = keys.next(), if keys_open => match ev {
                Some(Ok(Event::Key(k))) if k.kind != KeyEventKind::Release => {
                    if session.key(k) == Some(Action::Redraw) {
                        clear = true;
                    }
                    dirty = true;
                    urgent = true;
                }
                Some(Ok(Event::Resize(_, _))) => {
                    dirty = true;
                    urgent = true;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    // The terminal is gone (e.g. the SSH link dropped): stop like SIGHUP.
                    keys_open = false;
                    broken = true;
                    if !session.app.quitting {
                        session.act(Action::Quit);
                    }
                }
            },
            n = async {
                match feeds.engine.as_mut() {
                    Some(rx) => rx.recv_many(&mut engine_buf, 256).await,
                    None => std::future::pending().await,
                }
            } => {
                if n == 0 {
                    engine_closed = true;
                }
                for e in engine_buf.drain(..) {
                    session.ingest(Report::Engine(e));
                }
                dirty = true;
            },
            n = feeds.inputs.recv_many(&mut input_buf, 256), if inputs_open => {
                if n == 0 {
                    inputs_open = false;
                }
                for i in input_buf.drain(..) {
                    session.ingest(i);
                }
                dirty = true;
            },
            r = async {
                match feeds.done.as_mut() {
                    Some(h) => h.await,
                    None => std::future::pending().await,
                }
            } => {
                finished = Some(r.unwrap_or_default());
            },
            _ = tick.tick() => {
                session.tick(now_ms());
                dirty = true;
            },
            _ = frame.tick(), if dirty && !broken => {
                if urgent || last_paint.elapsed() >= DATA_FRAME {
                    if paint(session, terminal, clear).is_err() {
                        broken = true;
                    }
                    last_paint = Instant::now();
                    dirty = false;
                    urgent = false;
                    clear = false;
                }
            },
            _ = async {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                    _ = hup.recv() => {}
                }
            } => {
                signals += 1;
                if signals == 1 && !session.app.quitting {
                    session.act(Action::Quit);
                } else {
                    session.app.abort = true;
                    session.app.exit = true;
                }
                dirty = true;
            },
        }
        if engine_closed {
            feeds.engine = None;
        }
        if let Some(r) = finished {
            results = r;
            feeds.done = None;
            session.ingest(Report::EngineDone);
            dirty = true;
        }
    }
    if !broken {
        let _ = paint(session, terminal, false);
    }
    Ok(LoopEnd {
        results,
        aborted: session.app.abort,
    })
}
