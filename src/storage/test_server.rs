//! Real object-store servers on loopback ports, for tests and benchmarks (not mocks of a
//! client; docs/object-storage.md#test-servers):
//!
//! - [`S3Server`]: SeaweedFS (`weed server -s3`: master, volume server, filer and its S3
//!   gateway in one process), built by `scripts/object-store-servers.sh` into
//!   `/var/tmp/weir-tools/bin/weed` (`WEIR_WEED` overrides). An Apache-2.0 object store
//!   run in production, whose S3 gateway implements the requests object_store sends
//!   (multipart uploads, ListObjectsV2 with `start-after`, conditional `PUT` with
//!   `If-None-Match`) and checks request signatures once it has identities.
//! - [`AzuriteServer`]: Azurite's Blob service (Microsoft's Azure Storage server, from the
//!   npm registry: `azurite-blob` on `PATH`, `WEIR_AZURITE` overrides), with its well-known
//!   development account.
//!
//! Each runs under a shell watchdog that kills it when the process that started it exits;
//! dropping the handle stops it. `stop` / `restart` keep the ports and the data.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The S3 test server's access key id (a loopback test server's, not a secret).
pub const ACCESS_KEY: &str = "weirtest";
/// The S3 test server's secret access key.
pub const SECRET_KEY: &str = "weirtestsecret";
/// Azurite's development account and its published key (Azure's documented emulator key).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Where the SeaweedFS binary is: `WEIR_WEED`, else `/var/tmp/weir-tools/bin/weed`.
pub fn weed_binary() -> PathBuf {
    std::env::var_os("WEIR_WEED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/weir-tools/bin/weed"))
}

/// Where Azurite's Blob service is: `WEIR_AZURITE`, else `azurite-blob` on `PATH`.
pub fn azurite_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEIR_AZURITE") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("azurite-blob"))
            .find(|p| p.is_file())
    })
}

use crate::server_process::{self, free_port};

/// A server process in its own directory (`server.log`, `server.pid`) under a watchdog.
#[derive(Debug)]
struct Watched {
    name: &'static str,
    dir: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    port: u16,
    watchdog: Option<Child>,
}

impl Watched {
    fn new(name: &'static str, program: PathBuf, port: u16) -> Result<Watched, String> {
        let dir = server_process::fresh_dir(name);
        std::fs::create_dir_all(dir.join("data")).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Watched {
            name,
            dir,
            program,
            args: Vec::new(),
            port,
            watchdog: None,
        })
    }

    /// Starts the process; returns once `port` accepts connections.
    fn launch(&mut self) -> Result<(), String> {
        let command = std::iter::once(self.program.clone().into_os_string())
            .chain(self.args.iter().map(Into::into))
            .collect();
        let launch = server_process::Launch {
            dir: &self.dir,
            log: "server.log",
            pid: "server.pid",
            orphan_signal: "KILL",
            command,
            env: Vec::new(),
            cwd: None,
        };
        self.watchdog = Some(launch.spawn()?);
        server_process::wait_ready(
            self.name,
            self.port,
            Duration::from_secs(60),
            &mut self.watchdog,
            &self.dir.join("server.log"),
            || true,
        )
    }

    fn log_tail(&self) -> String {
        server_process::log_tail(&self.dir.join("server.log"))
    }

    /// Kills the server (SIGKILL, as a crash would); its data stays.
    fn stop(&mut self) {
        server_process::signal_and_reap(
            &self.dir.join("server.pid"),
            nix::sys::signal::Signal::SIGKILL,
            &mut self.watchdog,
        );
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An S3 server (SeaweedFS) this process started.
#[derive(Debug)]
pub struct S3Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    process: Watched,
    /// master, volume, filer, s3, then the gRPC ports of master, volume and filer
    /// (SeaweedFS's default is port + 10000, which may be taken: all given explicitly).
    ports: [u16; 7],
}

impl S3Server {
    /// Starts a server with one identity ([`ACCESS_KEY`], [`SECRET_KEY`]).
    pub fn start() -> Result<S3Server, String> {
        let weed = weed_binary();
        if !weed.is_file() {
            return Err(format!(
                "{} not found: run scripts/object-store-servers.sh (or set WEIR_WEED)",
                weed.display()
            ));
        }
        let mut ports = [0u16; 7];
        for p in &mut ports {
            *p = free_port()?;
        }
        let [master, volume, filer, s3, mg, vg, fg] = ports;
        let mut process = Watched::new("s3", weed, s3)?;
        let config = format!(
            r#"{{"identities":[{{"name":"weir","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","List","Tagging","Write"]}}]}}"#
        );
        let config_path = process.dir.join("s3.json");
        std::fs::write(&config_path, config)
            .map_err(|e| format!("{}: {e}", config_path.display()))?;
        let data = process.dir.join("data");
        process.args = vec![
            "server".into(),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-dir={}", data.display()),
            format!("-master.port={master}"),
            format!("-master.port.grpc={mg}"),
            format!("-volume.port={volume}"),
            format!("-volume.port.grpc={vg}"),
            "-filer".into(),
            format!("-filer.port={filer}"),
            format!("-filer.port.grpc={fg}"),
            "-s3".into(),
            format!("-s3.port={s3}"),
            format!("-s3.config={}", config_path.display()),
            "-volume.max=0".into(),
            "-master.volumeSizeLimitMB=64".into(),
        ];
        process.launch()?;
        Ok(S3Server {
            endpoint: format!("http://127.0.0.1:{s3}"),
            process,
            ports,
        })
    }

    /// One server for the whole test binary, started on first use (tests running at once
    /// would otherwise start one each); tests keep to buckets or prefixes of their own.
    pub fn shared() -> Result<&'static S3Server, String> {
        static SHARED: std::sync::OnceLock<Result<S3Server, String>> = std::sync::OnceLock::new();
        SHARED
            .get_or_init(S3Server::start)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The server's directory (data, `server.log`).
    pub fn dir(&self) -> &Path {
        &self.process.dir
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// Stops the server (SIGKILL); its data stays for [`S3Server::restart`].
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Starts the stopped server again on the same ports, with its data.
    pub fn restart(&mut self) -> Result<(), String> {
        self.process.stop();
        self.process.launch()
    }

    /// Creates a bucket unless it exists (SeaweedFS's `weed shell`: `s3.bucket.create`).
    pub fn create_bucket(&self, name: &str) -> Result<(), String> {
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
        let lower = said.to_ascii_lowercase();
        if lower.contains("already exist") {
            return Ok(());
        }
        if !out.status.success() || lower.contains("error") {
            return Err(format!("s3.bucket.create -name {name}: {said}"));
        }
        Ok(())
    }

    /// The environment that reaches this server (object_store's `AWS_*` variables).
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

/// Azurite's Blob service, started by this process.
#[derive(Debug)]
pub struct AzuriteServer {
    /// `http://127.0.0.1:PORT` (path-style: `/devstoreaccount1/<container>/...`).
    pub endpoint: String,
    process: Watched,
}

impl AzuriteServer {
    pub fn start() -> Result<AzuriteServer, String> {
        let program = azurite_binary()
            .ok_or("azurite-blob not found: npm install -g azurite (or set WEIR_AZURITE)")?;
        let port = free_port()?;
        let mut process = Watched::new("azurite", program, port)?;
        process.args = vec![
            "--blobHost".into(),
            "127.0.0.1".into(),
            "--blobPort".into(),
            port.to_string(),
            "--location".into(),
            process.dir.join("data").display().to_string(),
            "--skipApiVersionCheck".into(),
        ];
        process.launch()?;
        Ok(AzuriteServer {
            endpoint: format!("http://127.0.0.1:{port}"),
            process,
        })
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// Creates a container: Blob's `Create Container`, signed with the development
    /// account's Shared Key (object_store has no call for it).
    pub fn create_container(&self, name: &str) -> Result<(), String> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = b64
            .decode(AZURITE_KEY)
            .map_err(|e| format!("the development key: {e}"))?;
        let date = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let version = "2021-08-06";
        let string_to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
        );
        let hmac_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
        let signature = b64.encode(ring::hmac::sign(&hmac_key, string_to_sign.as_bytes()));
        let request = format!(
            "PUT /{AZURITE_ACCOUNT}/{name}?restype=container HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             x-ms-date: {date}\r\nx-ms-version: {version}\r\n\
             Authorization: SharedKey {AZURITE_ACCOUNT}:{signature}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            port = self.process.port
        );
        let mut stream = TcpStream::connect(("127.0.0.1", self.process.port))
            .map_err(|e| format!("Azurite: {e}"))?;
        stream
            .write_all(request.as_bytes())
            .map_err(|e| format!("Azurite: {e}"))?;
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .map_err(|e| format!("Azurite: {e}"))?;
        let status = answer.split_whitespace().nth(1).unwrap_or_default();
        if status == "201" {
            Ok(())
        } else {
            Err(format!("create container {name}: {answer}"))
        }
    }

    /// The environment that reaches this server (object_store's emulator settings).
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AZURE_STORAGE_USE_EMULATOR", "true".to_string()),
            ("AZURITE_BLOB_STORAGE_URL", self.endpoint.clone()),
        ]
    }
}
