//! The console, three ways (STYLE.md practice 5):
//!
//! 1. screen snapshots of every view and pane at 80x24 and 120x40 from the
//!    recorded progress fixtures (`tests/fixtures/progress/`), clock values
//!    filtered out;
//! 2. the app driven headless by injected keys against a fake engine's
//!    channels: pause/resume/trigger/stop reach the engine, freeze holds the
//!    picture while records keep arriving;
//! 3. the real binary in tmux: `weir run` and `weir attach`, keys, quit, and
//!    the terminal restored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tokio::sync::{mpsc, watch};
use weir::console::action::Action;
use weir::console::app::{App, Mode, Pane, Report};
use weir::console::launch::EngineLink;
use weir::console::model::{FlowModel, parse_progress_line};
use weir::console::session::Session;
use weir::console::theme::Theme;
use weir::engine::control::{ControlCommand, FlowEvent, FlowStatus};

use crate::support::*;

/// The fixtures' "now": 2026-11-30T10:06:40Z.
const NOW_MS: i64 = 1_796_033_200_000;
const FLOWS: [&str; 3] = ["bronze_events", "windowed_agg", "silver_orders"];

fn progress_fixture(name: &str) -> Vec<weir::records::StreamingQueryProgress> {
    let text = std::fs::read_to_string(fixture(&format!("progress/{name}.jsonl"))).unwrap();
    text.lines()
        .map(|l| parse_progress_line(l).expect("fixture record"))
        .collect()
}

fn fixture_app(mode: Mode, theme: Theme) -> App {
    let flows = FLOWS.iter().map(|n| FlowModel::new(*n)).collect();
    let mut app = App::new(mode, "pipeline.toml", flows, theme, 3_600_000, NOW_MS);
    let events = std::fs::read_to_string(fixture("progress/events.jsonl")).unwrap();
    for line in events.lines() {
        let e: FlowEvent = serde_json::from_str(line).unwrap();
        app.ingest(Report::Engine(e));
    }
    for name in FLOWS {
        for p in progress_fixture(name) {
            app.ingest(Report::Progress {
                flow: name.into(),
                progress: Box::new(p),
            });
        }
    }
    app
}

/// The screen as text, with clock values (`10:06:40Z`) replaced.
pub(crate) fn screen(session: &Session, w: u16, h: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    session.render(&mut terminal).unwrap();
    let buf = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    filter_clock(&out)
}

fn filter_clock(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let digit = |c: Option<&char>| c.is_some_and(char::is_ascii_digit);
    while i < chars.len() {
        let is_clock = i + 9 <= chars.len()
            && digit(chars.get(i))
            && digit(chars.get(i + 1))
            && chars[i + 2] == ':'
            && digit(chars.get(i + 3))
            && digit(chars.get(i + 4))
            && chars[i + 5] == ':'
            && digit(chars.get(i + 6))
            && digit(chars.get(i + 7))
            && chars[i + 8] == 'Z';
        if is_clock {
            out.push_str("[clock]  ");
            i += 9;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

fn code(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

pub(crate) fn unicode() -> Theme {
    Theme {
        color: true,
        ascii: false,
    }
}

#[test]
fn console_overview_snapshots() {
    for (w, h) in [(80, 24), (120, 40)] {
        let s = Session::new(fixture_app(Mode::Run, unicode()), None);
        insta::assert_snapshot!(format!("overview_{w}x{h}"), screen(&s, w, h));
    }
    let s = Session::new(
        fixture_app(
            Mode::Attach,
            Theme {
                color: false,
                ascii: true,
            },
        ),
        None,
    );
    insta::assert_snapshot!("overview_attach_ascii_80x24", screen(&s, 80, 24));
}

#[test]
fn console_detail_snapshots_every_pane() {
    for flow in ["bronze_events", "windowed_agg"] {
        let mut s = Session::new(fixture_app(Mode::Run, unicode()), None);
        s.act(Action::SelectFlow(flow.into()));
        insta::assert_snapshot!(format!("detail_{flow}_120x40"), screen(&s, 120, 40));
        for (i, pane) in Pane::ALL.iter().enumerate() {
            s.act(Action::GoPane(i as u8));
            insta::assert_snapshot!(
                format!("detail_{flow}_{}_80x24", pane.short()),
                screen(&s, 80, 24)
            );
            s.act(Action::Enter);
            insta::assert_snapshot!(
                format!("detail_{flow}_{}_zoom_120x40", pane.short()),
                screen(&s, 120, 40)
            );
            s.act(Action::Enter);
        }
    }
}

#[test]
fn console_ascii_help_and_prompt_snapshots() {
    let mut s = Session::new(
        fixture_app(
            Mode::Run,
            Theme {
                color: false,
                ascii: true,
            },
        ),
        None,
    );
    s.act(Action::SelectFlow("windowed_agg".into()));
    let text = screen(&s, 120, 40);
    assert!(text.is_ascii(), "--ascii draws only ASCII:\n{text}");
    insta::assert_snapshot!("detail_windowed_agg_ascii_120x40", text);
    s.key(key('?'));
    insta::assert_snapshot!("help_detail_80x24", screen(&s, 80, 24));
    s.key(code(KeyCode::Esc));
    s.key(key(':'));
    for c in "flow bron".chars() {
        s.key(key(c));
    }
    insta::assert_snapshot!("command_line_80x24", screen(&s, 80, 24));
    s.key(code(KeyCode::Enter));
    assert!(
        screen(&s, 80, 24).contains("› bronze_events")
            || screen(&s, 80, 24).contains("> bronze_events")
    );
}

#[test]
fn console_survives_any_size() {
    let mut s = Session::new(fixture_app(Mode::Run, unicode()), None);
    for view in 0..2 {
        for w in [1u16, 10, 39, 40, 41, 57, 80, 99, 100, 133, 250] {
            for h in [1u16, 5, 9, 10, 11, 17, 24, 29, 30, 61] {
                let _ = screen(&s, w, h);
            }
        }
        if view == 0 {
            s.act(Action::SelectFlow("windowed_agg".into()));
        }
    }
    assert!(screen(&s, 30, 8).contains("terminal too small"));
}

/// A fake engine: the other ends of the console's channels.
struct FakeEngine {
    commands: BTreeMap<String, mpsc::Receiver<ControlCommand>>,
    stop: watch::Receiver<bool>,
}

fn session_with_fake_engine() -> (Session, FakeEngine) {
    let mut senders = BTreeMap::new();
    let mut receivers = BTreeMap::new();
    for name in FLOWS {
        let (tx, rx) = mpsc::channel(16);
        senders.insert(name.to_string(), tx);
        receivers.insert(name.to_string(), rx);
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut app = fixture_app(Mode::Run, unicode());
    // The engine's bronze flow is idle between batches.
    app.ingest(Report::Engine(FlowEvent::Status {
        flow: "bronze_events".into(),
        status: FlowStatus::Idle,
        at_ms: NOW_MS - 2_000,
    }));
    let session = Session::new(app, Some(EngineLink::new(senders, stop_tx)));
    (
        session,
        FakeEngine {
            commands: receivers,
            stop: stop_rx,
        },
    )
}

fn overview_row<'a>(text: &'a str, flow: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(flow))
        .unwrap_or_else(|| panic!("no row for {flow} in\n{text}"))
}

#[test]
fn console_controls_reach_the_engine_and_change_the_screen() {
    let (mut s, mut engine) = session_with_fake_engine();
    let status = |s: &Session| FlowEvent::Status {
        flow: "bronze_events".into(),
        status: FlowStatus::Paused,
        at_ms: s.app.now_ms,
    };
    // Overview, bronze_events selected: the hints offer pause, not resume.
    let text = screen(&s, 120, 40);
    let hints = text.lines().last().unwrap().to_string();
    assert!(
        hints.contains("p pause") && !hints.contains("r resume"),
        "{hints}"
    );

    s.key(key('p'));
    let bronze = engine.commands.get_mut("bronze_events").unwrap();
    assert_eq!(bronze.try_recv().ok(), Some(ControlCommand::Pause));
    assert!(screen(&s, 120, 40).contains("bronze_events: pause requested"));
    // The engine applies it and says so.
    let paused = status(&s);
    s.ingest(Report::Engine(paused));
    s.ingest(Report::Engine(FlowEvent::Command {
        flow: "bronze_events".into(),
        command: ControlCommand::Pause,
        at_ms: NOW_MS,
    }));
    let text = screen(&s, 120, 40);
    assert!(
        overview_row(&text, "bronze_events").contains("paused"),
        "{text}"
    );
    assert!(text.contains("pause applied by the engine"), "{text}");
    let hints = text.lines().last().unwrap().to_string();
    assert!(
        hints.contains("r resume") && !hints.contains("p pause"),
        "{hints}"
    );

    s.key(key('t'));
    assert_eq!(bronze.try_recv().ok(), Some(ControlCommand::TriggerNow));
    s.key(key('r'));
    assert_eq!(bronze.try_recv().ok(), Some(ControlCommand::Resume));

    // Stop asks first; `n` sends nothing, `y` sends Stop.
    s.key(key('S'));
    assert!(screen(&s, 120, 40).contains("stop flow bronze_events"));
    s.key(key('n'));
    assert!(bronze.try_recv().is_err());
    s.key(key('S'));
    s.key(key('y'));
    assert_eq!(bronze.try_recv().ok(), Some(ControlCommand::Stop));

    // :pause NAME reaches another flow.
    s.key(key(':'));
    for c in "pause windowed".chars() {
        s.key(key(c));
    }
    s.key(code(KeyCode::Enter));
    assert_eq!(
        engine
            .commands
            .get_mut("windowed_agg")
            .unwrap()
            .try_recv()
            .ok(),
        Some(ControlCommand::Pause)
    );

    // q: stop all (the engine sees the stop), then exit once the flows have returned.
    s.key(key('q'));
    assert!(*engine.stop.borrow_and_update());
    assert!(screen(&s, 120, 40).contains("STOPPING"));
    assert!(!s.app.should_exit());
    s.ingest(Report::EngineDone);
    assert!(s.app.should_exit() && !s.app.abort);
}

#[test]
fn console_freeze_holds_the_picture_while_flows_keep_running() {
    let (mut s, _engine) = session_with_fake_engine();
    let before = overview_row(&screen(&s, 120, 40), "bronze_events").to_string();
    assert!(before.contains(" 39 "), "{before}");
    s.key(key('f'));
    assert!(screen(&s, 120, 40).contains("FROZEN"));
    // A new batch arrives while frozen: the model has it, the screen does not.
    let mut next = progress_fixture("bronze_events").pop().unwrap();
    next.batch_id = 40;
    next.timestamp = "2026-11-30T10:06:38.000Z".into();
    next.num_input_rows = 77_777;
    next.input_rows_per_second = 7777.0;
    s.tick(NOW_MS + 2_000);
    s.ingest(Report::Progress {
        flow: "bronze_events".into(),
        progress: Box::new(next),
    });
    assert_eq!(s.app.flows[0].samples.back().unwrap().batch_id, 40);
    assert_eq!(overview_row(&screen(&s, 120, 40), "bronze_events"), before);
    // Scroll back: older batches show.
    s.key(key('h'));
    s.key(key('h'));
    let back = overview_row(&screen(&s, 120, 40), "bronze_events").to_string();
    assert!(!back.contains(" 39 "), "{back}");
    // Live again: the new batch shows.
    s.key(key('f'));
    let live = screen(&s, 120, 40);
    assert!(live.contains("LIVE"));
    assert!(
        overview_row(&live, "bronze_events").contains(" 40 "),
        "{live}"
    );
    assert!(
        overview_row(&live, "bronze_events").contains("7.8k/s"),
        "{live}"
    );
}

#[test]
fn console_attach_is_read_only() {
    let mut s = Session::new(fixture_app(Mode::Attach, unicode()), None);
    s.app.flows[0].set_status(FlowStatus::Idle, NOW_MS);
    let hints = screen(&s, 120, 40).lines().last().unwrap().to_string();
    for control in ["pause", "resume", "trigger", "stop"] {
        assert!(!hints.contains(control), "{hints}");
    }
    assert_eq!(s.key(key('p')), None, "p means nothing in attach");
    s.key(key(':'));
    for c in "pause".chars() {
        s.key(key(c));
    }
    s.key(code(KeyCode::Enter));
    assert!(screen(&s, 120, 40).contains("read-only"));
    s.key(key('q'));
    assert!(s.app.should_exit());
}

// --- The real binary in tmux -------------------------------------------------

pub(crate) struct Tmux {
    socket: String,
    session: String,
}

impl Tmux {
    pub(crate) fn available() -> bool {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    pub(crate) fn start(name: &str, w: u16, h: u16, dir: &Path, command: &str) -> Tmux {
        let t = Tmux {
            socket: format!("weir-test-{}-{name}", std::process::id()),
            session: name.to_string(),
        };
        let shell = format!(
            "{command}; echo WEIR-EXITED-$?; echo TTY: $(stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' '); sleep 600"
        );
        let ok = Command::new("tmux")
            .args([
                "-L",
                &t.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                name,
            ])
            .args(["-x", &w.to_string(), "-y", &h.to_string(), "-c"])
            .arg(dir)
            .args([
                "-e",
                "LANG=C.UTF-8",
                "-e",
                "WEIR_LOG=info",
                "-e",
                "NO_COLOR=",
            ])
            .args(["sh", "-c", &shell])
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session");
        t
    }

    pub(crate) fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "capture-pane",
                "-p",
                "-t",
                &self.session,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn alternate_on(&self) -> bool {
        let out = Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "display-message",
                "-p",
                "-t",
                &self.session,
                "#{alternate_on}",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        for k in keys {
            let ok = Command::new("tmux")
                .args(["-L", &self.socket, "send-keys", "-t", &self.session, k])
                .status()
                .unwrap();
            assert!(ok.success());
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    pub(crate) fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            let screen = self.capture();
            if pred(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

pub(crate) fn json_pipeline(dir: &Path, trigger: &str) -> PathBuf {
    let landing = dir.join("landing/events");
    std::fs::create_dir_all(&landing).unwrap();
    for f in 0..3 {
        let lines: String = (0..20)
            .map(|i| format!("{{\"id\":{},\"kind\":\"click\",\"n\":{i}}}\n", f * 100 + i))
            .collect();
        std::fs::write(landing.join(format!("part-{f}.json")), lines).unwrap();
    }
    let pipeline = dir.join("pipeline.toml");
    std::fs::write(
        &pipeline,
        format!(
            r#"[[flow]]
name = "bronze_events"
trigger = "{trigger}"
checkpoint = "checkpoints/bronze_events"

[flow.source]
type = "files"
path = "landing/events"
format = "json"
max_files_per_trigger = 1

[flow.sink]
type = "delta"
path = "lake/bronze/events"
"#
        ),
    )
    .unwrap();
    pipeline
}

pub(crate) fn weir_bin() -> &'static str {
    env!("CARGO_BIN_EXE_weir")
}

/// Issue #46: a terminal that cannot address the screen (`TERM=dumb`) gets plain lines,
/// not the full-screen console: a warning naming why, progress records as JSON lines,
/// the summary, and the terminal never switched to the alternate screen.
#[test]
fn a_dumb_terminal_runs_headless_in_tmux() {
    if !Tmux::available() {
        println!("skipping a_dumb_terminal_runs_headless_in_tmux: tmux is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    json_pipeline(tmp.path(), "1 second");
    let t = Tmux::start(
        "dumb",
        200,
        60,
        tmp.path(),
        &format!(
            "env TERM=dumb WEIR_LOG=warn {} run pipeline.toml --trigger available-now",
            weir_bin()
        ),
    );
    let end = t.wait_for("weir to exit", Duration::from_secs(90), |s| {
        s.contains("WEIR-EXITED-")
    });
    assert!(end.contains("WEIR-EXITED-0"), "{end}");
    assert!(!t.alternate_on(), "never on the alternate screen:\n{end}");
    assert!(
        end.contains("TERM=dumb cannot draw a full-screen console"),
        "{end}"
    );
    assert!(
        end.contains("\"batchId\""),
        "progress records as lines:\n{end}"
    );
}

#[test]
fn console_run_in_tmux() {
    if !Tmux::available() {
        println!("skipping console_run_in_tmux: tmux is not installed (the CI script installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    json_pipeline(tmp.path(), "1 second");
    let t = Tmux::start(
        "run",
        120,
        40,
        tmp.path(),
        &format!("{} run pipeline.toml", weir_bin()),
    );
    let commits = tmp.path().join("checkpoints/bronze_events/commits");
    let screen = t.wait_for(
        "a committed batch on screen",
        Duration::from_secs(90),
        |s| commits.join("0").exists() && s.contains("bronze_events") && s.contains("LIVE"),
    );
    assert!(
        t.alternate_on(),
        "the console runs on the alternate screen:\n{screen}"
    );
    assert!(screen.contains("weir run"), "{screen}");
    // The flow detail, then the checkpoint history pane zoomed.
    t.keys(&["Enter"]);
    t.wait_for("the detail panes", Duration::from_secs(10), |s| {
        s.contains("Checkpoint history") && s.contains("Rates")
    });
    t.keys(&["6", "Enter"]);
    t.wait_for(
        "a committed batch in the history",
        Duration::from_secs(20),
        |s| s.contains("committed"),
    );
    t.keys(&["Enter", "Escape"]);
    // The pipeline graph: the landing directory, the flow under it, its table under that;
    // Enter on the flow opens its detail.
    t.keys(&["Escape", "x"]);
    let graph = t.wait_for("the pipeline graph", Duration::from_secs(10), |s| {
        s.contains("Pipeline graph")
    });
    for node in [
        "landing/events  files:json",
        "└─ bronze_events",
        "└─ lake/bronze/events  delta",
    ] {
        assert!(graph.contains(node), "{node} in the graph:\n{graph}");
    }
    t.keys(&["g", "Down", "Enter"]);
    t.wait_for(
        "the flow's detail from the graph",
        Duration::from_secs(10),
        |s| !s.contains("Pipeline graph") && s.contains("› bronze_events") && s.contains("Rates"),
    );
    t.keys(&["Escape"]);
    // Help is generated from the live bindings: pause is there in run.
    t.keys(&["?"]);
    t.wait_for("the help", Duration::from_secs(10), |s| {
        s.contains("pause the flow")
    });
    t.keys(&["Escape"]);
    // Pause: the engine applies it and the overview shows it.
    t.keys(&["p"]);
    t.wait_for("the paused flow", Duration::from_secs(20), |s| {
        s.contains("paused") && s.contains("pause applied")
    });
    t.keys(&["r"]);
    t.wait_for("the resumed flow", Duration::from_secs(20), |s| {
        s.contains("resume applied")
    });
    // Quit: flows stop after their batch, the terminal comes back, the summary is printed.
    t.keys(&["q"]);
    let end = t.wait_for("weir to exit", Duration::from_secs(60), |s| {
        s.contains("WEIR-EXITED-")
    });
    assert!(end.contains("WEIR-EXITED-0"), "{end}");
    assert!(!t.alternate_on(), "left the alternate screen:\n{end}");
    assert!(
        end.contains("flow bronze_events:") && end.contains("batch(es)"),
        "summary after the console:\n{end}"
    );
    assert!(
        end.contains("TTY: icanon echo"),
        "raw mode was turned off:\n{end}"
    );
}

#[test]
fn console_attach_in_tmux() {
    if !Tmux::available() {
        println!(
            "skipping console_attach_in_tmux: tmux is not installed (the CI script installs it)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    ingested_json_pipeline(tmp.path());
    let checkpoint = tmp.path().join("checkpoints/bronze_events");
    let before = listing(&checkpoint);
    let t = Tmux::start(
        "attach",
        80,
        24,
        tmp.path(),
        &format!("{} attach checkpoints/bronze_events", weir_bin()),
    );
    let screen = t.wait_for("the attached flow", Duration::from_secs(30), |s| {
        s.contains("bronze_events") && s.contains("stopped") && s.contains("read-only")
    });
    assert!(!screen.contains("pause"), "no control in attach:\n{screen}");
    t.keys(&["Enter", "6"]);
    t.wait_for(
        "the history of three batches",
        Duration::from_secs(20),
        |s| s.contains("Checkpoint history") || s.contains("6 history"),
    );
    let history = t.wait_for("three committed batches", Duration::from_secs(20), |s| {
        s.matches("committed").count() >= 3
    });
    assert!(history.contains("committed"), "{history}");
    t.keys(&["p", "q"]);
    let end = t.wait_for("weir to exit", Duration::from_secs(30), |s| {
        s.contains("WEIR-EXITED-")
    });
    assert!(end.contains("WEIR-EXITED-0"), "{end}");
    assert!(!t.alternate_on(), "left the alternate screen:\n{end}");
    assert!(
        end.contains("TTY: icanon echo"),
        "raw mode was turned off:\n{end}"
    );
    assert_eq!(
        listing(&checkpoint),
        before,
        "attach wrote nothing in the checkpoint"
    );
}

/// Every file of a directory tree with its size and modification time.
fn listing(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path(), m.len(), m.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

// --- A Kafka flow: per-partition lag -------------------------------------------

fn kafka_lag_app(lag: Result<Vec<weir::source::kafka::lag::PartitionLag>, String>) -> Session {
    let mut app = App::new(
        Mode::Run,
        "pipeline.toml",
        vec![FlowModel::new("kafka_events")],
        unicode(),
        3_600_000,
        NOW_MS,
    );
    // Two batches a minute apart, then the lag measured against the cluster.
    for (i, (t, rows)) in [(NOW_MS - 60_000, 5_000u64), (NOW_MS - 2_000, 4_000)]
        .iter()
        .enumerate()
    {
        let mut p = progress_fixture("bronze_events").remove(0);
        p.batch_id = i as u64;
        p.name = "kafka_events".into();
        p.num_input_rows = *rows;
        p.processed_rows_per_second = 2_000.0;
        p.timestamp = chrono::DateTime::from_timestamp_millis(*t)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        app.ingest(Report::Progress {
            flow: "kafka_events".into(),
            progress: Box::new(p),
        });
    }
    for (at, scale) in [(NOW_MS - 30_000, 2), (NOW_MS - 500, 1)] {
        app.ingest(Report::KafkaLag {
            flow: "kafka_events".into(),
            at_ms: at,
            lag: lag.clone().map(|l| {
                l.into_iter()
                    .map(|mut p| {
                        p.messages *= scale;
                        p
                    })
                    .collect()
            }),
        });
    }
    let mut s = Session::new(app, None);
    s.act(Action::SelectFlow("kafka_events".into()));
    s
}

#[test]
fn console_kafka_lag_snapshots() {
    use weir::source::kafka::TopicPartition;
    use weir::source::kafka::lag::PartitionLag;
    let lag: Vec<PartitionLag> = [
        (0, 1_200, 1_150, 4_200),
        (1, 980, 980, 0),
        (2, 1_400, 1_100, 61_000),
        (3, 700, 690, 900),
    ]
    .into_iter()
    .map(|(p, latest, committed, ms)| PartitionLag {
        tp: TopicPartition::new("events", p),
        latest,
        committed: Some(committed),
        messages: (latest - committed) as u64,
        lag_ms: Some(ms),
    })
    .collect();
    let mut s = kafka_lag_app(Ok(lag));
    insta::assert_snapshot!("kafka_lag_detail_120x40", screen(&s, 120, 40));
    s.act(Action::GoPane(1));
    insta::assert_snapshot!("kafka_lag_backlog_80x24", screen(&s, 80, 24));
    let text = screen(&s, 80, 24);
    assert!(text.contains("furthest: events-2 300 msgs"), "{text}");
    assert!(text.contains("drains in"), "{text}");
    let s = kafka_lag_app(Err("kafka 127.0.0.1:1: connect: connection refused".into()));
    let mut s = s;
    s.act(Action::GoPane(1));
    let text = screen(&s, 80, 24);
    insta::assert_snapshot!("kafka_lag_unavailable_80x24", text.clone());
    assert!(text.contains("source_unavailable"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_kafka_lag_in_tmux() {
    use rskafka::client::partition::Compression;
    use weir::source::kafka::broker::LocalBroker;
    use weir::source::kafka::{KafkaClient, KafkaConnection, TopicPartition};
    if !Tmux::available() {
        println!(
            "skipping console_kafka_lag_in_tmux: tmux is not installed (the CI script installs it)"
        );
        return;
    }
    let broker = LocalBroker::shared();
    let client = KafkaClient::connect(&KafkaConnection::plaintext(&broker.bootstrap))
        .await
        .unwrap();
    let topic = format!("lag-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    client.create_topic(&topic, 2, 1).await.unwrap();
    let produce = |n: usize| {
        let records: Vec<rskafka::record::Record> = (0..n)
            .map(|i| rskafka::record::Record {
                key: None,
                value: Some(format!("{{\"i\":{i}}}").into_bytes()),
                headers: Default::default(),
                timestamp: chrono::Utc::now(),
            })
            .collect();
        let client = &client;
        let tp = TopicPartition::new(topic.clone(), 1);
        async move {
            client
                .produce(&tp, records, Compression::NoCompression)
                .await
                .unwrap();
        }
    };
    produce(10).await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("pipeline.toml"),
        format!(
            r#"[[flow]]
name = "kafka_events"
trigger = "1 second"
[flow.source]
type = "kafka"
bootstrap_servers = "{}"
subscribe = ["{topic}"]
starting_offsets = "earliest"
[flow.sink]
type = "delta"
path = "lake/events"
"#,
            broker.bootstrap
        ),
    )
    .unwrap();
    let t = Tmux::start(
        "kafka",
        80,
        24,
        tmp.path(),
        &format!("{} run pipeline.toml", weir_bin()),
    );
    let commits = tmp.path().join("_checkpoints/kafka_events/commits");
    t.wait_for("a committed batch", Duration::from_secs(90), |s| {
        commits.join("0").exists() && s.contains("kafka_events")
    });
    t.keys(&["Enter", "2"]);
    t.wait_for("the caught-up lag pane", Duration::from_secs(20), |s| {
        s.contains("PARTITION") && s.contains("caught up")
    });
    // Paused, the flow reads nothing; the lag still follows the broker's latest offset.
    t.keys(&["p"]);
    t.wait_for("the paused flow", Duration::from_secs(20), |s| {
        s.contains("1 paused")
    });
    produce(25).await;
    let screen = t.wait_for("the lag of 25 messages", Duration::from_secs(20), |s| {
        s.contains("furthest:") && s.contains("25 msgs") && s.contains("flow is paused")
    });
    assert!(screen.contains(&format!("{topic}-1")), "{screen}");
    t.keys(&["r"]);
    t.wait_for("caught up again", Duration::from_secs(30), |s| {
        s.contains("caught up")
    });
    t.keys(&["q"]);
    let end = t.wait_for("weir to exit", Duration::from_secs(60), |s| {
        s.contains("WEIR-EXITED-")
    });
    assert!(end.contains("WEIR-EXITED-0"), "{end}");
}

// --- The pipeline graph, inputs' watermarks, a replay's clock ---------------

/// The fixture flows wired into a pipeline: bronze_events lands JSON files into a
/// table windowed_agg reads; silver_orders reads a Kafka topic and joins bronze's table
/// as the right side of a stream-stream join. Health verdicts colour the nodes.
fn graph_app(theme: Theme) -> App {
    use weir::console::graph::{GraphInput, InputRole};
    use weir::records::{Health, HealthState};
    let mut app = fixture_app(Mode::Run, theme);
    let input = |role, kind: &str, path: &str| GraphInput {
        role,
        kind: kind.into(),
        path: path.into(),
    };
    let wire = [
        (
            vec![input(
                InputRole::Source,
                "files:json",
                "/srv/pipe/landing/events",
            )],
            Some("/srv/pipe/lake/bronze/events"),
        ),
        (
            vec![input(
                InputRole::Source,
                "delta",
                "/srv/pipe/lake/bronze/events",
            )],
            Some("/srv/pipe/lake/silver/clicks_5m"),
        ),
        (
            vec![
                input(InputRole::Source, "kafka:json", "kafka:Subscribe[orders]"),
                input(
                    InputRole::JoinRight,
                    "delta",
                    "/srv/pipe/lake/bronze/events",
                ),
            ],
            Some("/srv/pipe/lake/silver/orders"),
        ),
    ];
    for (f, (inputs, sink)) in app.flows.iter_mut().zip(wire) {
        f.inputs = inputs;
        f.sink_path = sink.map(PathBuf::from);
    }
    for (flow, state, why) in [
        ("bronze_events", HealthState::Healthy, ""),
        (
            "windowed_agg",
            HealthState::Lagging,
            "backlog grew for 6 batches",
        ),
        (
            "silver_orders",
            HealthState::SinkUnavailable,
            "delta table /srv/pipe/lake/silver/orders cannot be written",
        ),
    ] {
        let mut health = Health {
            state,
            ..Default::default()
        };
        if !why.is_empty() {
            health.evidence.reasons.push(why.into());
        }
        app.ingest(Report::Engine(FlowEvent::Health {
            flow: flow.into(),
            health: Box::new(health),
            at_ms: NOW_MS - 1_000,
        }));
    }
    app
}

#[test]
fn console_graph_snapshots() {
    let mut s = Session::new(graph_app(unicode()), None);
    s.key(key('x'));
    let text = screen(&s, 80, 24);
    insta::assert_snapshot!("graph_80x24", text.clone());
    // Sources at the roots, each flow under what it reads, its table under it.
    for node in [
        "landing/events",
        "└─ bronze_events",
        "lake/bronze/events",
        "windowed_agg",
        "kafka:Subscribe[orders]",
        "silver_orders",
        "silver_orders  see above",
    ] {
        assert!(text.contains(node), "{node} in\n{text}");
    }
    insta::assert_snapshot!("graph_120x40", screen(&s, 120, 40));
    // Arrows move the cursor (it starts on the selected flow); Enter on a table opens
    // the flow writing it.
    s.key(key('g'));
    for _ in 0..4 {
        s.key(code(KeyCode::Down));
    }
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("table /srv/pipe/lake/silver/clicks_5m written by windowed_agg"),
        "{text}"
    );
    s.key(code(KeyCode::Enter));
    let text = screen(&s, 80, 24);
    assert!(text.contains("› windowed_agg"), "{text}");
    // :graph opens it too; Esc closes it.
    s.key(key(':'));
    for c in "graph".chars() {
        s.key(key(c));
    }
    s.key(code(KeyCode::Enter));
    assert!(screen(&s, 80, 24).contains("Pipeline graph"));
    s.key(code(KeyCode::Esc));
    assert!(!screen(&s, 80, 24).contains("Pipeline graph"));
    // ASCII terminals get ASCII tree glyphs.
    let mut s = Session::new(
        graph_app(Theme {
            color: false,
            ascii: true,
        }),
        None,
    );
    s.act(Action::Graph);
    let text = screen(&s, 80, 24);
    assert!(text.is_ascii(), "{text}");
    insta::assert_snapshot!("graph_ascii_80x24", text);
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A stream-stream join whose right side went idle: its watermark holds the flow's.
fn join_app() -> App {
    let mut app = App::new(
        Mode::Run,
        "pipeline.toml",
        vec![FlowModel::new("orders_x_payments")],
        unicode(),
        3_600_000,
        NOW_MS,
    );
    app.flows[0].inputs = vec![
        weir::console::graph::GraphInput {
            role: weir::console::graph::InputRole::Source,
            kind: "files:json".into(),
            path: "/srv/pipe/landing/orders".into(),
        },
        weir::console::graph::GraphInput {
            role: weir::console::graph::InputRole::JoinRight,
            kind: "files:json".into(),
            path: "/srv/pipe/landing/payments".into(),
        },
    ];
    let template = progress_fixture("windowed_agg").pop().unwrap();
    for i in 0..6u64 {
        let mut p = template.clone();
        p.name = "orders_x_payments".into();
        p.batch_id = 40 + i;
        p.timestamp = iso(NOW_MS - 60_000 + i as i64 * 10_000);
        let left_wm = NOW_MS - 600_000 + i as i64 * 10_000;
        let right_wm = NOW_MS - 900_000;
        p.event_time.insert("max".into(), iso(left_wm + 300_000));
        p.event_time.insert("watermark".into(), iso(right_wm));
        let mut right = p.sources[0].clone();
        right.description = "FileStreamSource[/srv/pipe/landing/payments]".into();
        right.num_input_rows = if i < 2 { 120 } else { 0 };
        p.sources[0].description = "FileStreamSource[/srv/pipe/landing/orders]".into();
        p.sources.push(right);
        p.weir.source_watermarks = vec![
            weir::records::SourceWatermark {
                source: p.sources[0].description.clone(),
                watermark: Some(iso(left_wm)),
                holds_watermark: false,
            },
            weir::records::SourceWatermark {
                source: p.sources[1].description.clone(),
                watermark: Some(iso(right_wm)),
                holds_watermark: true,
            },
        ];
        p.weir.watermark_held_by = Some(p.sources[1].description.clone());
        app.ingest(Report::Progress {
            flow: "orders_x_payments".into(),
            progress: Box::new(p),
        });
    }
    app
}

#[test]
fn console_input_watermark_snapshots() {
    let mut s = Session::new(join_app(), None);
    s.act(Action::SelectFlow("orders_x_payments".into()));
    s.act(Action::GoPane(2));
    let text = screen(&s, 80, 24);
    insta::assert_snapshot!("join_watermark_80x24", text.clone());
    assert!(text.contains("holds watermark, idle 4 batches"), "{text}");
    assert!(text.contains("left") && text.contains("right"), "{text}");
    s.act(Action::Enter);
    insta::assert_snapshot!("join_watermark_zoom_120x40", screen(&s, 120, 40));
}

#[test]
fn console_replay_clock_snapshots() {
    // The replay's simulated clock reads 2026-11-30 09:56:40Z now: delays count from it.
    let mut app = fixture_app(Mode::Run, unicode());
    app.replay_clock = Some(weir::console::app::ReplayClock {
        clock: Some(weir::demo::replay::SimulatedClock {
            wall_start_ms: NOW_MS - 3_600_000,
            sim_start_ms: NOW_MS - 10 * 60_000 - 3_600_000,
            speed: 1.0,
        }),
        last_landed_ms: NOW_MS - 10 * 60_000,
        done: false,
    });
    let mut s = Session::new(app, None);
    let text = screen(&s, 80, 24);
    insta::assert_snapshot!("replay_overview_80x24", text.clone());
    assert!(text.contains("SIM DELAY"), "{text}");
    assert!(text.contains("replay clock 2026-11-30"), "{text}");
    let text = screen(&s, 120, 40);
    insta::assert_snapshot!("replay_overview_120x40", text.clone());
    assert!(text.contains("EV LAG"), "{text}");
    s.act(Action::SelectFlow("windowed_agg".into()));
    s.act(Action::GoPane(2));
    let text = screen(&s, 80, 24);
    insta::assert_snapshot!("replay_watermark_80x24", text.clone());
    assert!(text.contains("replay - watermark"), "{text}");
    assert!(text.contains("event-time lag"), "{text}");
    // The graph measures against the same clock.
    s.act(Action::Graph);
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("SIM DELAY") && text.contains("3m 27s"),
        "{text}"
    );
}

// --- Table maintenance from a flow's detail ----------------------------------

/// The dry runs as the console shows them (fixed paths, so the snapshots do not depend
/// on the temporary directory).
#[test]
fn console_maintenance_dialog_snapshots() {
    use weir::console::app::{MaintenanceDialog, MaintenancePlan, Overlay};
    use weir::maintenance::{OptimizePlan, TableStats, TableTarget, VacuumPlan};
    let target = TableTarget {
        path: "/srv/pipe/lake/bronze/events".into(),
        role: "sink of flow bronze_events".into(),
    };
    let mut small = std::collections::BTreeMap::new();
    small.insert(String::new(), (38u64, 1_900_000u64));
    let optimize = OptimizePlan {
        target: target.clone(),
        stats: TableStats {
            path: target.path.clone(),
            version: 40,
            files: 40,
            bytes: 66_000_000,
            target_file_size: 104_857_600,
            small_files: 38,
            small_bytes: 1_900_000,
            small_by_partition: small,
        },
        readers: vec!["windowed_agg".into()],
    };
    let mut app = fixture_app(Mode::Run, unicode());
    app.flows[0].sink_path = Some(target.path.clone());
    let mut s = Session::new(app, None);
    s.act(Action::SelectFlow("bronze_events".into()));
    s.app.overlay = Overlay::Maintenance(MaintenanceDialog {
        flow: "bronze_events".into(),
        plan: MaintenancePlan::Optimize(Box::new(optimize)),
    });
    let text = screen(&s, 80, 24);
    insta::assert_snapshot!("maintenance_optimize_80x24", text.clone());
    assert!(text.contains("y runs it, n cancels"), "{text}");
    insta::assert_snapshot!("maintenance_optimize_120x40", screen(&s, 120, 40));
    let vacuum = VacuumPlan {
        target,
        version: 41,
        retain: Duration::from_secs(168 * 3600),
        table_minimum: Duration::from_secs(168 * 3600),
        allow_short_retention: false,
        readers: Vec::new(),
        refused: Vec::new(),
        files: Vec::new(),
    };
    s.app.overlay = Overlay::Maintenance(MaintenanceDialog {
        flow: "bronze_events".into(),
        plan: MaintenancePlan::Vacuum(Box::new(vacuum)),
    });
    let text = screen(&s, 80, 24);
    insta::assert_snapshot!("maintenance_vacuum_nothing_80x24", text.clone());
    assert!(
        text.contains("Nothing to run (no file to delete)"),
        "{text}"
    );
    s.key(key('y'));
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("vacuum: no file to delete; nothing changed"),
        "{text}"
    );
}

/// `O` in a flow's detail: the dry run of OPTIMIZE over the flow's real table; `n`
/// changes nothing; `y` compacts it (a new table version) and says so on the timeline.
#[test]
fn console_optimize_from_the_detail_asks_then_compacts() {
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = ingested_json_pipeline(tmp.path());
    let table = std::fs::canonicalize(tmp.path())
        .unwrap()
        .join("lake/bronze/events");
    let log = table.join("_delta_log");
    let versions = || {
        std::fs::read_dir(&log)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".json"))
            })
            .count()
    };
    let before = versions();
    let mut model = FlowModel::new("bronze_events");
    model.sink_path = Some(table.clone());
    let mut app = App::new(
        Mode::Run,
        "pipeline.toml",
        vec![model],
        unicode(),
        3_600_000,
        NOW_MS,
    );
    app.pipeline_path = Some(pipeline.clone());
    let mut s = Session::new(app, None);
    s.act(Action::SelectFlow("bronze_events".into()));
    s.key(key('O'));
    let text = screen(&s, 120, 40);
    assert!(
        text.contains("Dry run: optimize (flow bronze_events)"),
        "{text}"
    );
    assert!(text.contains("3 file(s)"), "{text}");
    s.key(key('n'));
    assert!(screen(&s, 80, 24).contains("cancelled: nothing changed"));
    assert_eq!(versions(), before, "n changed nothing");
    s.key(key('O'));
    s.key(key('y'));
    assert_eq!(versions(), before + 1, "OPTIMIZE committed a version");
    s.act(Action::GoPane(6));
    let text = screen(&s, 120, 40);
    assert!(
        text.contains("optimize of the table requested by the operator"),
        "{text}"
    );
    assert!(text.contains("OPTIMIZE committed version"), "{text}");
}

/// `weir demo` in tmux at 80x24: its 2013 replay's watermark delays count from the
/// replay's simulated clock (`SIM DELAY`, `replay clock 2013-...`), not from today; the
/// graph draws its flows from the landing directories.
#[test]
fn console_demo_replay_clock_in_tmux() {
    if !Tmux::available() {
        println!(
            "skipping console_demo_replay_clock_in_tmux: tmux is not installed (the CI script installs it)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = Tmux::start(
        "demo",
        80,
        24,
        tmp.path(),
        &format!("{} demo --dir d --days 2", weir_bin()),
    );
    // silver_flights' SIM DELAY cell, once it has a watermark.
    let sim_delay = |s: &str| -> Option<String> {
        let header = s.lines().find(|l| l.contains("SIM DELAY"))?;
        let col = header
            .char_indices()
            .position(|(i, _)| header[i..].starts_with("SIM DELAY"))?;
        let row = s.lines().find(|l| l.contains("silver_flights"))?;
        let cell: String = row.chars().skip(col).take(9).collect();
        let cell = cell.trim().to_string();
        (!cell.is_empty() && cell != "-").then_some(cell)
    };
    let screen = t.wait_for(
        "the replay clock and a watermark delay against it",
        Duration::from_secs(120),
        |s| s.contains("replay clock 2013-") && sim_delay(s).is_some(),
    );
    assert!(!screen.contains("WM DELAY"), "{screen}");
    // No delay of years (wall clock - a 2013 watermark reads thousands of days).
    let days: Vec<u64> = screen
        .split_whitespace()
        .filter_map(|w| w.strip_suffix('d')?.parse().ok())
        .collect();
    assert!(days.iter().all(|d| *d < 100), "{days:?}:\n{screen}");
    t.keys(&["x"]);
    let graph = t.wait_for("the demo's graph", Duration::from_secs(10), |s| {
        s.contains("Pipeline graph")
    });
    for node in [
        "landing/flights  files:csv",
        "└─ bronze_flights",
        "silver_flights",
    ] {
        assert!(graph.contains(node), "{node} in the graph:\n{graph}");
    }
    t.keys(&["Escape"]);
    t.keys(&["q"]);
    let end = t.wait_for("weir to exit", Duration::from_secs(60), |s| {
        s.contains("WEIR-EXITED-")
    });
    assert!(end.contains("WEIR-EXITED-0"), "{end}");
}

/// The JSON pipeline of `json_pipeline`, run once to the end (`available_now`), so its
/// checkpoint and table exist.
fn ingested_json_pipeline(dir: &std::path::Path) -> std::path::PathBuf {
    let pipeline = json_pipeline(dir, "available_now");
    let out = weir()
        .args(["run", "--headless"])
        .arg(&pipeline)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pipeline
}
