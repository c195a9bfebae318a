//! A real Kafka broker on a loopback port, for tests and benchmarks: Apache
//! Kafka's own server (`kafka.Kafka`, KRaft mode, one node acting as broker and
//! controller) from the jars `jars/kafka/pom.xml` lists, fetched once by
//! `scripts/kafka-jars.sh` into `~/.cache/weir-jars/kafka` (`WEIR_KAFKA_JARS`
//! overrides the directory).
//!
//! [`LocalBroker::start`] formats a fresh storage directory (`kafka.tools.StorageTool
//! format --standalone`), writes `server.properties` and starts the broker under a
//! small shell watchdog that kills it when the process that started it exits (so a
//! broker shared by a whole test binary through [`LocalBroker::shared`], which is
//! never dropped, does not outlive it) and removes its directory. Dropping a
//! [`LocalBroker`] stops it. [`LocalBroker::stop`] / [`LocalBroker::restart`] keep
//! the ports and the data, for tests of a broker that goes away mid-stream.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// JVM flags for a quick start and a small footprint (tests).
pub const TEST_JVM_OPTS: &str = "-Xms64m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -Djava.awt.headless=true";
/// JVM flags for throughput (benchmarks).
pub const BENCH_JVM_OPTS: &str = "-Xms512m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true";

/// A Kafka broker this process started.
pub struct LocalBroker {
    /// `127.0.0.1:PORT`.
    pub bootstrap: String,
    dir: PathBuf,
    port: u16,
    controller_port: u16,
    jvm_opts: String,
    watchdog: Option<Child>,
}

impl std::fmt::Debug for LocalBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBroker")
            .field("bootstrap", &self.bootstrap)
            .field("dir", &self.dir)
            .finish()
    }
}

/// Where the broker's jars are (`WEIR_KAFKA_JARS`, else `~/.cache/weir-jars/kafka`).
pub fn jars_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WEIR_KAFKA_JARS") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".cache").join("weir-jars").join("kafka")
}

/// Makes sure the jars are there, running `scripts/kafka-jars.sh` (Maven) if not.
pub fn ensure_jars() -> Result<PathBuf, String> {
    let dir = jars_dir();
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka-jars.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("WEIR_KAFKA_JARS", &dir)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() || !dir.join(".complete").exists() {
        return Err(format!(
            "{} failed: {}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(dir)
}

use crate::server_process::{self, free_port};

fn classpath(jars: &Path) -> String {
    format!("{}/*", jars.display())
}

/// Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding.
fn cluster_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    let mut out = String::new();
    let mut bits = 0u32;
    let mut n = 0;
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        n += 8;
        while n >= 6 {
            n -= 6;
            out.push(ALPHABET[((bits >> n) & 63) as usize] as char);
        }
    }
    if n > 0 {
        out.push(ALPHABET[((bits << (6 - n)) & 63) as usize] as char);
    }
    out
}

impl LocalBroker {
    /// A broker for tests (quick start, small heap).
    pub fn start() -> Result<LocalBroker, String> {
        Self::start_with(TEST_JVM_OPTS)
    }

    /// Formats a new storage directory and starts a broker; returns once its port accepts.
    pub fn start_with(jvm_opts: &str) -> Result<LocalBroker, String> {
        let jars = ensure_jars()?;
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "weir-kafka-{}-{seq}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(dir.join("data")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = free_port()?;
        let mut controller_port = free_port()?;
        while controller_port == port {
            controller_port = free_port()?;
        }
        let props = format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
             inter.broker.listener.name=PLAINTEXT\n\
             log.dirs={data}\n\
             num.partitions=1\n\
             auto.create.topics.enable=false\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=1\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             share.coordinator.state.topic.replication.factor=1\n\
             share.coordinator.state.topic.min.isr=1\n\
             group.initial.rebalance.delay.ms=0\n\
             num.network.threads=2\n\
             num.io.threads=2\n\
             log.cleaner.enable=false\n",
            data = dir.join("data").display()
        );
        let props_path = dir.join("server.properties");
        std::fs::write(&props_path, props).map_err(|e| format!("{}: {e}", props_path.display()))?;
        // Formatting is retried (up to 3 attempts, on an emptied data directory): on a
        // loaded machine the JVM tool has been seen to fail once and pass the next time.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let format = Command::new("java")
                .args(jvm_opts.split_whitespace())
                .arg("-cp")
                .arg(classpath(&jars))
                .arg("kafka.tools.StorageTool")
                .args(["format", "--standalone", "-t", &cluster_id(), "-c"])
                .arg(&props_path)
                .output()
                .map_err(|e| format!("java (Kafka's StorageTool): {e}"))?;
            if format.status.success() {
                break;
            }
            if attempt >= 3 {
                return Err(format!(
                    "formatting Kafka storage failed ({attempt} attempts): {}{}",
                    String::from_utf8_lossy(&format.stdout),
                    String::from_utf8_lossy(&format.stderr)
                ));
            }
            let data = dir.join("data");
            if data.exists() {
                std::fs::remove_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
            }
            std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let mut broker = LocalBroker {
            bootstrap: format!("127.0.0.1:{port}"),
            dir,
            port,
            controller_port,
            jvm_opts: jvm_opts.to_string(),
            watchdog: None,
        };
        broker.launch(&jars)?;
        Ok(broker)
    }

    /// One broker for the whole test binary, started on first use.
    pub fn shared() -> &'static LocalBroker {
        static SHARED: OnceLock<LocalBroker> = OnceLock::new();
        SHARED.get_or_init(|| match LocalBroker::start() {
            Ok(b) => b,
            Err(e) => panic!("cannot start the test Kafka broker: {e}"),
        })
    }

    /// The broker's directory (storage, `server.properties`, `broker.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn pid_path(&self) -> PathBuf {
        self.dir.join("broker.pid")
    }

    fn launch(&mut self, jars: &Path) -> Result<(), String> {
        let _ = std::fs::remove_file(self.pid_path());
        let mut command: Vec<std::ffi::OsString> = vec!["java".into()];
        command.extend(self.jvm_opts.split_whitespace().map(Into::into));
        command.extend([
            "-cp".into(),
            classpath(jars).into(),
            "kafka.Kafka".into(),
            self.dir.join("server.properties").into_os_string(),
        ]);
        let launch = server_process::Launch {
            dir: &self.dir,
            log: "broker.log",
            pid: "broker.pid",
            orphan_signal: "KILL",
            command,
            env: Vec::new(),
            cwd: None,
        };
        self.watchdog = Some(launch.spawn()?);
        server_process::wait_ready(
            "the Kafka broker",
            self.port,
            Duration::from_secs(90),
            &mut self.watchdog,
            &self.dir.join("broker.log"),
            || true,
        )
    }

    /// The end of `broker.log`.
    pub fn log_tail(&self) -> String {
        server_process::log_tail(&self.dir.join("broker.log"))
    }

    fn broker_pid(&self) -> Option<i32> {
        server_process::read_pid(&self.pid_path())
    }

    /// Stops the broker (SIGTERM, then SIGKILL after 20 s); its data stays for [`LocalBroker::restart`].
    pub fn stop(&mut self) {
        self.kill(nix::sys::signal::Signal::SIGTERM);
    }

    /// Kills the broker at once (SIGKILL), as a crash would.
    pub fn crash(&mut self) {
        self.kill(nix::sys::signal::Signal::SIGKILL);
    }

    fn kill(&mut self, signal: nix::sys::signal::Signal) {
        use nix::sys::signal::kill;
        use nix::unistd::Pid;
        if let Some(pid) = self.broker_pid() {
            let pid = Pid::from_raw(pid);
            let _ = kill(pid, signal);
            let deadline = Instant::now() + Duration::from_secs(20);
            while kill(pid, None).is_ok() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.wait();
        }
        let _ = std::fs::remove_file(self.pid_path());
    }

    /// Starts the stopped broker again on the same ports with the same data.
    pub fn restart(&mut self) -> Result<(), String> {
        if self.watchdog.is_some() {
            return Ok(());
        }
        let jars = ensure_jars()?;
        self.launch(&jars)
    }

    /// Grows a topic to `total` partitions with Kafka's own `TopicCommand` (the client
    /// weir uses cannot add partitions).
    pub fn add_partitions(&self, topic: &str, total: u32) -> Result<(), String> {
        let jars = ensure_jars()?;
        let out = Command::new("java")
            .args(self.jvm_opts.split_whitespace())
            .arg("-cp")
            .arg(classpath(&jars))
            .arg("org.apache.kafka.tools.TopicCommand")
            .args([
                "--bootstrap-server",
                &self.bootstrap,
                "--alter",
                "--topic",
                topic,
            ])
            .args(["--partitions", &total.to_string()])
            .output()
            .map_err(|e| format!("java (Kafka's TopicCommand): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "adding partitions to {topic} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// The KRaft controller's port.
    pub fn controller_port(&self) -> u16 {
        self.controller_port
    }
}

impl Drop for LocalBroker {
    fn drop(&mut self) {
        self.crash();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cluster_ids_are_22_url_safe_characters() {
        let id = super::cluster_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{id}"
        );
    }
}
