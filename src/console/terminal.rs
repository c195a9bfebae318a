//! The terminal: entering and leaving the console's screen, in one place.
//!
//! [`TerminalSession::enter`] switches to raw mode and the alternate screen,
//! and moves stderr (logs, panics of flow tasks) into a log file so nothing
//! scribbles over the console. [`restore`] undoes all of it and is safe to
//! call any number of times: on a normal exit (drop), from the panic hook
//! (a panic on the console's thread) and after SIGTERM. The terminal's
//! output goes through one shared buffer that the panic hook can flush
//! before leaving the alternate screen.

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Stdout, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

use crossterm::cursor::Show;
use crossterm::terminal::{
    EndSynchronizedUpdate, EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode,
    enable_raw_mode,
};
use crossterm::{execute, tty::IsTty};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

/// The console's output: stdout behind a buffer the panic hook can flush.
#[derive(Clone)]
pub struct SharedOut(Arc<Mutex<BufWriter<Stdout>>>);

impl SharedOut {
    fn lock(&self) -> MutexGuard<'_, BufWriter<Stdout>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Write for SharedOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.lock().flush()
    }
}

pub type ConsoleTerminal = Terminal<CrosstermBackend<SharedOut>>;

/// What [`restore`] has to undo.
struct Active {
    out: SharedOut,
    saved_stderr: Option<OwnedFd>,
}

static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);
static UI_THREAD: OnceLock<Mutex<Option<ThreadId>>> = OnceLock::new();
static HOOK: OnceLock<()> = OnceLock::new();

/// Whether stdin and stdout are terminals that can draw the console.
pub fn available() -> bool {
    unavailable_reason().is_none()
}

/// Why the full-screen console cannot start here, in words for a warning: stdin or stdout
/// is not a terminal, or the terminal says it cannot address the screen (`TERM=dumb`:
/// Emacs' shell, some CI consoles; issue #46). `None`: it can.
pub fn unavailable_reason() -> Option<String> {
    if !(io::stdin().is_tty() && io::stdout().is_tty()) {
        return Some("the console needs a terminal on stdin and stdout".into());
    }
    let term = std::env::var("TERM").ok();
    if !full_screen_term(term.as_deref()) {
        return Some(format!(
            "TERM={} cannot draw a full-screen console",
            term.as_deref().unwrap_or("")
        ));
    }
    None
}

/// Whether a terminal of type `term` can address the screen: not `dumb`, not empty.
pub fn full_screen_term(term: Option<&str>) -> bool {
    !matches!(term.map(str::trim), Some("dumb") | Some(""))
}

/// The console's hold on the terminal; dropping it restores the terminal.
pub struct TerminalSession {
    pub terminal: ConsoleTerminal,
    /// Where stderr went while the console was up.
    pub log_path: Option<PathBuf>,
}

impl TerminalSession {
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        if let Some(cell) = UI_THREAD.get() {
            *cell
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(std::thread::current().id());
        }
        let out = SharedOut(Arc::new(Mutex::new(BufWriter::with_capacity(
            64 * 1024,
            io::stdout(),
        ))));
        let (saved_stderr, log_path) = match redirect_stderr() {
            Ok((fd, path)) => (Some(fd), Some(path)),
            Err(_) => (None, None),
        };
        *ACTIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Active {
            out: out.clone(),
            saved_stderr,
        });
        let setup = (|| -> io::Result<ConsoleTerminal> {
            enable_raw_mode()?;
            let mut w = out.clone();
            execute!(w, EnterAlternateScreen)?;
            let mut terminal = Terminal::new(CrosstermBackend::new(out.clone()))?;
            terminal.hide_cursor()?;
            terminal.clear()?;
            Ok(terminal)
        })();
        match setup {
            Ok(terminal) => Ok(TerminalSession { terminal, log_path }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }
}

impl Drop for TerminalSession {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves the console's screen and gives stderr back. Idempotent.
pub fn restore() {
    let active = ACTIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let Some(active) = active else {
        return;
    };
    // A frame cut short by a panic ends on the alternate screen, not on the user's.
    if let Ok(mut w) = active.out.0.try_lock() {
        let _ = w.flush();
    }
    let mut out = io::stdout();
    let _ = execute!(out, EndSynchronizedUpdate, LeaveAlternateScreen, Show);
    let _ = disable_raw_mode();
    if let Some(fd) = active.saved_stderr {
        let _ = nix::unistd::dup2_stderr(&fd);
    }
}

/// A panic on the console's thread restores the terminal before the message is printed;
/// a panic elsewhere (a flow task) is only logged (stderr is the log file then).
fn install_panic_hook() {
    UI_THREAD.get_or_init(|| Mutex::new(None));
    HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ui = UI_THREAD
                .get()
                .and_then(|c| *c.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
            if ui == Some(std::thread::current().id()) {
                restore();
            }
            previous(info);
        }));
    });
}

/// Points stderr at `$TMPDIR/weir-<uid>/weir-console-<pid>.log`; returns the old
/// stderr. The directory is private (0700, this user's, not a link) and the file is
/// new (`O_EXCL | O_NOFOLLOW`, 0600): a link or file planted under that name by
/// another user is never written through.
fn redirect_stderr() -> io::Result<(OwnedFd, PathBuf)> {
    let dir = private_log_dir()?;
    let pid = std::process::id();
    let mut path = dir.join(format!("weir-console-{pid}.log"));
    let file = match open_new(&path) {
        Ok(f) => f,
        // A log of an earlier process with the same pid: keep it, take another name.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            path = dir.join(format!(
                "weir-console-{pid}-{}.log",
                uuid::Uuid::new_v4().simple()
            ));
            open_new(&path)?
        }
        Err(e) => return Err(e),
    };
    let saved = nix::unistd::dup(io::stderr()).map_err(io::Error::from)?;
    nix::unistd::dup2_stderr(&file).map_err(io::Error::from)?;
    Ok((saved, path))
}

fn open_new(path: &std::path::Path) -> io::Result<std::fs::File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// `$TMPDIR/weir-<uid>`, created 0700; an existing one must be a real directory owned
/// by this user and closed to others.
fn private_log_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // This process's user: the owner of `/proc/self` (nix's `getuid` needs a feature
    // the crate does not otherwise use).
    let uid = std::fs::metadata("/proc/self")?.uid();
    let dir = std::env::temp_dir().join(format!("weir-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of this user (a link, another owner, or open to others); \
                 remove it or point TMPDIR elsewhere",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}

#[cfg(test)]
mod term_tests {
    use super::full_screen_term;

    #[test]
    fn a_dumb_terminal_gets_plain_lines() {
        assert!(!full_screen_term(Some("dumb")));
        assert!(!full_screen_term(Some("")));
        for term in [
            "xterm",
            "xterm-256color",
            "linux",
            "screen",
            "tmux-256color",
        ] {
            assert!(full_screen_term(Some(term)), "{term}");
        }
        // No TERM at all (a service manager): crossterm draws with its defaults.
        assert!(full_screen_term(None));
    }
}
