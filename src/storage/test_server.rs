//! A real S3-compatible server on a loopback port, for tests and benchmarks: SeaweedFS
//! (`weed server -s3`: master, volume server, filer and its S3 gateway in one process),
//! built by `scripts/object-store-servers.sh` into `/var/tmp/weir-tools/bin/weed`
//! (`WEIR_WEED` overrides the binary).
//!
//! Why SeaweedFS: an Apache-2.0 object store run in production (not a mock of a client),
//! whose S3 gateway implements the requests object_store sends (multipart uploads,
//! ListObjectsV2 with `start-after`, conditional `PUT` with `If-None-Match`), with
//! signature-checked credentials when given identities, and buildable from the Go module
//! proxy. docs/object-storage.md#test-servers says what each server is used for.
//!
//! [`S3Server::start`] starts one with an identity (`ACCESS_KEY`/`SECRET_KEY`) under a
//! shell watchdog that kills it when the process that started it exits; dropping the
//! handle stops it. [`S3Server::stop`] / [`S3Server::restart`] keep the ports and data.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test server's access key id (not a secret: a loopback test server's).
pub const ACCESS_KEY: &str = "weirtest";
/// The test server's secret access key.
pub const SECRET_KEY: &str = "weirtestsecret";

/// Where the SeaweedFS binary is: `WEIR_WEED`, else `/var/tmp/weir-tools/bin/weed`.
pub fn weed_binary() -> PathBuf {
    std::env::var_os("WEIR_WEED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/weir-tools/bin/weed"))
}

/// An S3 server this process started.
#[derive(Debug)]
pub struct S3Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    dir: PathBuf,
    ports: [u16; 7],
    watchdog: Option<Child>,
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

impl S3Server {
    /// Starts a server in a new directory; returns once its S3 port answers.
    pub fn start() -> Result<S3Server, String> {
        let weed = weed_binary();
        if !weed.is_file() {
            return Err(format!(
                "{} not found: run scripts/object-store-servers.sh (or set WEIR_WEED)",
                weed.display()
            ));
        }
        let dir = std::env::temp_dir().join(format!(
            "weir-s3-{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(dir.join("data")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = format!(
            r#"{{"identities":[{{"name":"weir","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","List","Tagging","Write"]}}]}}"#
        );
        std::fs::write(dir.join("s3.json"), config)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        // master, volume, filer, s3, then the gRPC ports of master, volume and filer
        // (port + 10000 by default, which may be taken), all given explicitly.
        let mut ports = [0u16; 7];
        for p in &mut ports {
            *p = free_port()?;
        }
        let mut server = S3Server {
            endpoint: format!("http://127.0.0.1:{}", ports[3]),
            dir,
            ports,
            watchdog: None,
        };
        server.launch(&weed)?;
        Ok(server)
    }

    /// The server's directory (data, `weed.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn launch(&mut self, weed: &Path) -> Result<(), String> {
        let [master, volume, filer, s3, mg, vg, fg] = self.ports;
        let args = format!(
            "server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir={data} -master.port={master} \
             -master.port.grpc={mg} -volume.port={volume} -volume.port.grpc={vg} \
             -filer -filer.port={filer} -filer.port.grpc={fg} -s3 -s3.port={s3} \
             -s3.config={dir}/s3.json -volume.max=0 -master.volumeSizeLimitMB=64",
            data = self.dir.join("data").display(),
            dir = self.dir.display(),
        );
        let script = r#"
"$WEED" $ARGS >>"$DIR/weed.log" 2>&1 &
wp=$!
echo $wp > "$DIR/weed.pid"
while kill -0 "$wp" 2>/dev/null && kill -0 "$PARENT" 2>/dev/null; do sleep 0.5; done
if ! kill -0 "$PARENT" 2>/dev/null; then
  kill -9 "$wp" 2>/dev/null; wait "$wp" 2>/dev/null; rm -rf "$DIR"
fi
"#;
        let child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("WEED", weed)
            .env("ARGS", args)
            .env("DIR", &self.dir)
            .env("PARENT", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("bash: {e}"))?;
        self.watchdog = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect(("127.0.0.1", s3)).is_ok() {
                return Ok(());
            }
            if let Some(w) = self.watchdog.as_mut()
                && let Ok(Some(_)) = w.try_wait()
            {
                return Err(format!("SeaweedFS exited: {}", self.log_tail()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "SeaweedFS did not open port {s3} within 60 s: {}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The end of `weed.log`.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        log.get(start..).unwrap_or("").to_string()
    }

    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("weed.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Stops the server (SIGKILL, as a crash would); its data stays for [`S3Server::restart`].
    pub fn stop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.wait();
        }
    }

    /// Starts the stopped server again on the same ports, with its data.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.launch(&weed_binary())
    }

    /// Creates a bucket (SeaweedFS's `weed shell`: `s3.bucket.create`).
    pub fn create_bucket(&self, name: &str) -> Result<(), String> {
        use std::io::Write;
        let [master, _, filer, _, mg, _, fg] = self.ports;
        let mut child = Command::new(weed_binary())
            .arg("shell")
            .arg(format!("-master=127.0.0.1:{master}.{mg}"))
            .arg(format!("-filer=127.0.0.1:{filer}.{fg}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("weed shell: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            writeln!(stdin, "s3.bucket.create -name {name}")
                .map_err(|e| format!("weed shell: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("weed shell: {e}"))?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() || said.to_ascii_lowercase().contains("error") {
            return Err(format!("s3.bucket.create -name {name}: {said}"));
        }
        Ok(())
    }

    /// The `storage_options`/environment pairs that reach this server.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
