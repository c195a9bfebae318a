//! A throwaway PostgreSQL cluster on a loopback port, for tests and benchmarks (a real
//! server, never a mock of the client): `initdb` in a temporary directory, `postgres` on
//! a free port under a shell watchdog that stops it when the process that started it
//! exits; dropping the handle stops it and removes the directory.
//!
//! The binaries are Debian's (`/usr/lib/postgresql/<version>/bin`, the newest; the
//! `WEIR_POSTGRES_BIN` directory overrides). `initdb` and `postgres` refuse to run as
//! root: as root they run as the `postgres` user (`setpriv`, which execs in place, so
//! the recorded pid is the server's), in a directory chowned to it.
//!
//! The cluster's superuser is [`USER`] with the password [`PASSWORD`] over TCP
//! (`scram-sha-256`), a database `lake`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test cluster's superuser.
pub const USER: &str = "weir";
/// Its password (a loopback test server's, not a secret; the tests check it is never
/// printed or written all the same).
pub const PASSWORD: &str = "weir-pg-test-password-7f3a";

/// The directory of PostgreSQL's server binaries, when installed.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WEIR_POSTGRES_BIN") {
        return Some(PathBuf::from(d));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `id -u postgres`, `id -g postgres`.
fn postgres_ids() -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .map_err(|e| format!("id: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| {
                "no `postgres` user to run the server as (install Debian's postgresql package)"
                    .to_string()
            })
    };
    Ok((id("-u")?, id("-g")?))
}

/// A command running `program` as the `postgres` user when this process is root.
fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A PostgreSQL cluster this process started.
#[derive(Debug)]
pub struct PgServer {
    pub port: u16,
    bin: PathBuf,
    dir: PathBuf,
    watchdog: Option<Child>,
}

impl PgServer {
    /// `initdb` in a new directory, then the server on a free port, with database `lake`.
    pub fn start() -> Result<PgServer, String> {
        let bin = bin_dir().ok_or(
            "PostgreSQL's binaries are not installed (apt-get install postgresql; or set WEIR_POSTGRES_BIN)",
        )?;
        let dir = std::env::temp_dir().join(format!(
            "weir-pg-{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, PASSWORD).map_err(|e| format!("{}: {e}", pwfile.display()))?;
        if is_root() {
            let (uid, gid) = postgres_ids()?;
            for p in [&dir, &pwfile] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", p.display()))?;
            }
        }
        let out = as_server_user(&bin.join("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            .args([
                "-U",
                USER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut server = PgServer {
            port: free_port()?,
            bin,
            dir,
            watchdog: None,
        };
        server.launch()?;
        server.psql("postgres", "CREATE DATABASE lake")?;
        Ok(server)
    }

    /// `postgresql://weir@127.0.0.1:PORT/lake` (the password goes in `PGPASSWORD`).
    pub fn url(&self) -> String {
        format!("postgresql://{USER}@127.0.0.1:{}/lake", self.port)
    }

    /// The cluster's directory (`data/`, `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts `postgres` under the watchdog; returns once it accepts connections.
    fn launch(&mut self) -> Result<(), String> {
        let script = r#"
"$@" >>"$DIR/server.log" 2>&1 &
sp=$!
echo $sp > "$DIR/server.pid"
while kill -0 "$sp" 2>/dev/null && kill -0 "$PARENT" 2>/dev/null; do sleep 0.5; done
if ! kill -0 "$PARENT" 2>/dev/null; then
  kill -QUIT "$sp" 2>/dev/null; wait "$sp" 2>/dev/null; rm -rf "$DIR"
fi
"#;
        let server = as_server_user(&self.bin.join("postgres"));
        let mut args: Vec<String> = std::iter::once(server.get_program())
            .chain(server.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        args.extend([
            "-D".into(),
            self.dir.join("data").display().to_string(),
            "-p".into(),
            self.port.to_string(),
            "-h".into(),
            "127.0.0.1".into(),
            "-k".into(),
            self.dir.display().to_string(),
            "-F".into(),
            "-c".into(),
            "max_connections=50".into(),
        ]);
        let child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("watchdog")
            .args(&args)
            .env("DIR", &self.dir)
            .env("PARENT", std::process::id().to_string())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("bash: {e}"))?;
        self.watchdog = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                let ready = Command::new(self.bin.join("pg_isready"))
                    .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                    .status()
                    .is_ok_and(|s| s.success());
                if ready {
                    return Ok(());
                }
            }
            if let Some(w) = self.watchdog.as_mut()
                && let Ok(Some(_)) = w.try_wait()
            {
                return Err(format!("postgres exited: {}", self.log_tail()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "postgres did not accept connections on port {} within 60 s: {}",
                    self.port,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        log.get(start..).unwrap_or("").to_string()
    }

    /// Stops the server at once (SIGQUIT: PostgreSQL's immediate shutdown, as a crash;
    /// clients see their connections drop); its data stays for [`PgServer::restart`].
    pub fn stop(&mut self) {
        let pid = std::fs::read_to_string(self.dir.join("server.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGQUIT,
            );
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.wait();
        }
    }

    /// Starts the stopped server again on the same port, with its data.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.launch()
    }

    /// Runs `sql` in `db` with `psql` over TCP (`-At`: unaligned rows, `|` between
    /// columns; time zone UTC); its output, or its error.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .env("PGPASSWORD", PASSWORD)
            .env("PGTZ", "UTC")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
        } else {
            Err(format!(
                "psql {sql:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim_end()
            ))
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
