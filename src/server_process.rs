//! A real server started for the tests (the S3 server and Azurite, the Kafka broker,
//! PostgreSQL): one way to start it under a watchdog, wait until it answers, read its
//! log and stop it, shared by their harnesses (`storage::test_server`,
//! `source::kafka::broker`, `sink::postgres::test_server`).
//!
//! The watchdog is a `bash` loop that runs the server in the background with its output
//! appended to a log file and its pid in a pid file, and, when the test process that
//! started it is gone (a test killed, a panic that skipped `Drop`), stops the server and
//! removes its directory: no server outlives the tests.

use std::ffi::OsString;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on loopback (bound, then released for the server to take).
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// The last 2,000 bytes of a log file (empty when there is none).
pub fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let mut start = log.len().saturating_sub(2000);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    log[start..].to_string()
}

/// How to start one server under the watchdog.
pub struct Launch<'a> {
    /// The server's directory: the log and pid files go there; removed if the test
    /// process dies first.
    pub dir: &'a Path,
    /// File names in `dir`.
    pub log: &'a str,
    pub pid: &'a str,
    /// The signal the watchdog stops an orphaned server with (`KILL`, `QUIT`, ...).
    pub orphan_signal: &'a str,
    /// The command line: program, then its arguments.
    pub command: Vec<OsString>,
    pub env: Vec<(&'a str, OsString)>,
    pub cwd: Option<&'a Path>,
}

impl Launch<'_> {
    /// Starts the watchdog (and the server under it); the child is the watchdog.
    pub fn spawn(&self) -> Result<Child, String> {
        let script = r#"
"$@" >>"$DIR/$LOG" 2>&1 &
sp=$!
echo $sp > "$DIR/$PIDFILE"
while kill -0 "$sp" 2>/dev/null && kill -0 "$PARENT" 2>/dev/null; do sleep 0.5; done
if ! kill -0 "$PARENT" 2>/dev/null; then
  kill -"$ORPHAN_SIGNAL" "$sp" 2>/dev/null; wait "$sp" 2>/dev/null; rm -rf "$DIR"
fi
"#;
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(script)
            .arg("watchdog")
            .args(&self.command)
            .env("DIR", self.dir)
            .env("LOG", self.log)
            .env("PIDFILE", self.pid)
            .env("ORPHAN_SIGNAL", self.orphan_signal)
            .env("PARENT", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some(cwd) = self.cwd {
            c.current_dir(cwd);
        }
        c.spawn().map_err(|e| format!("bash: {e}"))
    }
}

/// Waits until `port` accepts connections and `ready` says so, failing when the server
/// (its watchdog) exits first or `within` passes, with the log's tail in the error.
pub fn wait_ready(
    name: &str,
    port: u16,
    within: Duration,
    watchdog: &mut Option<Child>,
    log: &Path,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() && ready() {
            return Ok(());
        }
        if let Some(w) = watchdog.as_mut()
            && let Ok(Some(_)) = w.try_wait()
        {
            return Err(format!("{name} exited: {}", log_tail(log)));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name} did not accept connections on port {port} within {} s: {}",
                within.as_secs(),
                log_tail(log)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The pid in a pid file.
pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Sends `signal` to the process of the pid file `path`, then waits for the watchdog.
pub fn signal_and_reap(
    path: &Path,
    signal: nix::sys::signal::Signal,
    watchdog: &mut Option<Child>,
) {
    if let Some(pid) = read_pid(path) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
    if let Some(mut w) = watchdog.take() {
        let _ = w.wait();
    }
}

/// A directory of its own under the temp dir for server `name` of this test process.
pub fn fresh_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "weir-{name}-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_tail_is_the_end_and_cut_on_a_character() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        assert_eq!(log_tail(&log), "");
        std::fs::write(&log, "é".repeat(1500)).unwrap();
        let tail = log_tail(&log);
        assert!(tail.len() <= 2000 && tail.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_server_that_exits_is_reported_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let launch = Launch {
            dir: dir.path(),
            log: "server.log",
            pid: "server.pid",
            orphan_signal: "KILL",
            command: vec!["sh".into(), "-c".into(), "echo no config; exit 3".into()],
            env: Vec::new(),
            cwd: None,
        };
        let mut watchdog = Some(launch.spawn().unwrap());
        let port = free_port().unwrap();
        let err = wait_ready(
            "the server",
            port,
            Duration::from_secs(30),
            &mut watchdog,
            &dir.path().join("server.log"),
            || true,
        )
        .unwrap_err();
        assert!(err.contains("the server exited: no config"), "{err}");
    }
}
