//! The HTTP side of the endpoint: `GET /metrics` served by one thread of its own
//! (`weir-metrics`, a single-threaded tokio runtime), away from the engine's runtime.
//! Each scrape clones the board's snapshots, encodes them, then answers: nothing is
//! locked while the answer is written, so a slow or stuck scraper delays only itself.
//!
//! The endpoint is reachable by anything that can open a socket to it, so every
//! resource a client can make it hold is bounded ([`Limits`]):
//!
//! ```text
//!  accept ──► at max_connections? ──no──► connection task (on the one thread)
//!                 │ yes                     │ TLS handshake + request head: head_timeout,
//!                 ▼                         │   at most max_head_bytes, MAX_HEADERS headers
//!   close the connection that has waited    │   (431 beyond, 408 when too slow, 400 malformed)
//!   longest for a request head (a slow or   │ answer: write_timeout
//!   idle client); none waiting: refuse      │ keep-alive: next head within idle_timeout,
//!                                           └   at most max_requests_per_connection
//! ```
//!
//! The server is this module and not a library's because the libraries at hand fall
//! short: `tiny_http` (used before) starts a thread per connection with no cap and has
//! no read timeout or head limit, and hyper's server feature (with its limits) would
//! rebuild hyper, reqwest, object_store, deltalake and DataFusion, which are built
//! without it. Parsing is `httparse` (hyper's parser), TLS is rustls through
//! `tokio-rustls`, both already built for reqwest; docs/operate.md says which
//! Prometheus `scrape_config` options match the access options ([`Access`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::engine::board::Board;

/// Headers a request head may have (Prometheus sends about six).
const MAX_HEADERS: usize = 64;

/// What one client may make the endpoint hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more closes the one that has waited longest for a
    /// request head, or is refused when every one is being answered.
    pub max_connections: usize,
    /// From accept to a complete request head (TLS handshake included), and from the
    /// first byte of a later request on the connection to its complete head.
    pub head_timeout: Duration,
    /// A kept-alive connection's wait for its next request.
    pub idle_timeout: Duration,
    /// Writing one answer.
    pub write_timeout: Duration,
    /// The request line and headers together.
    pub max_head_bytes: usize,
    /// Requests answered on one connection before it is closed.
    pub max_requests_per_connection: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            head_timeout: Duration::from_secs(5),
            // Prometheus keeps its connection between scrapes (default interval 1 min);
            // its client drops idle connections after 90 s.
            idle_timeout: Duration::from_secs(90),
            write_timeout: Duration::from_secs(10),
            max_head_bytes: 8 * 1024,
            max_requests_per_connection: 1000,
        }
    }
}

/// A token or password: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// The content of a credentials file or variable, whitespace trimmed as Prometheus
    /// trims `credentials_file` and `password_file`; empty is refused by the caller.
    pub fn new(text: &str) -> Self {
        Secret(text.trim().as_bytes().to_vec())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Who may scrape: anyone, or a client that sends the `Authorization` header
/// Prometheus sends for `authorization` (Bearer) or `basic_auth`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Access {
    #[default]
    Open,
    Bearer(Secret),
    Basic {
        user: String,
        password: Secret,
    },
}

impl Access {
    fn allows(&self, authorization: Option<&[u8]>) -> bool {
        match self {
            Access::Open => true,
            Access::Bearer(token) => {
                credentials(authorization, "bearer").is_some_and(|c| same(c, &token.0))
            }
            Access::Basic { user, password } => credentials(authorization, "basic")
                .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
                .is_some_and(|pair| match pair.iter().position(|b| *b == b':') {
                    // Both compared, so a wrong user is not told from a wrong password.
                    Some(i) => {
                        same(&pair[..i], user.as_bytes()) & same(&pair[i + 1..], &password.0)
                    }
                    None => false,
                }),
        }
    }

    fn challenge(&self) -> Option<&'static str> {
        match self {
            Access::Open => None,
            Access::Bearer(_) => Some("Bearer realm=\"weir\""),
            Access::Basic { .. } => Some("Basic realm=\"weir\", charset=\"UTF-8\""),
        }
    }
}

/// Compares in time independent of where the bytes differ (not of their lengths).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// The credentials of an `Authorization: <scheme> <credentials>` header of `scheme`.
fn credentials<'a>(header: Option<&'a [u8]>, scheme: &str) -> Option<&'a [u8]> {
    let h = trim(header?);
    let space = h.iter().position(|b| *b == b' ')?;
    h[..space]
        .eq_ignore_ascii_case(scheme.as_bytes())
        .then(|| trim(&h[space + 1..]))
}

/// How the endpoint is served.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    pub access: Access,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub limits: Limits,
}

/// Where the access options come from (the `weir run`/`weir watch` flags).
#[derive(Debug, Clone, Copy, Default)]
pub struct AccessFiles<'a> {
    pub bearer_token_file: Option<&'a Path>,
    pub basic_auth_user: Option<&'a str>,
    pub basic_auth_password_file: Option<&'a Path>,
    pub tls_cert: Option<&'a Path>,
    pub tls_key: Option<&'a Path>,
    pub tls_client_ca: Option<&'a Path>,
}

/// The variable holding the bearer token when no file is given.
pub const BEARER_TOKEN_ENV: &str = "WEIR_METRICS_BEARER_TOKEN";
/// The variable holding the basic-auth password when no file is given.
pub const BASIC_AUTH_PASSWORD_ENV: &str = "WEIR_METRICS_BASIC_AUTH_PASSWORD";

fn read_secret(path: &Path, what: &str) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{what} {}: cannot read: {e}", path.display()))?;
    let secret = Secret::new(&text);
    if secret.is_empty() {
        return Err(format!("{what} {}: the file is empty", path.display()));
    }
    Ok(secret)
}

impl ServerOptions {
    /// Reads the token or password (a file, else the variable `env` names) and the TLS
    /// files. Errors name the flag and file, never a secret.
    pub fn load(
        files: &AccessFiles<'_>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let from_env = |name: &str| env(name).map(|v| Secret::new(&v)).filter(|s| !s.is_empty());
        let bearer = match files.bearer_token_file {
            Some(p) => Some(read_secret(p, "--metrics-bearer-token-file")?),
            None => from_env(BEARER_TOKEN_ENV),
        };
        let password = match files.basic_auth_password_file {
            Some(p) => Some(read_secret(p, "--metrics-basic-auth-password-file")?),
            None => from_env(BASIC_AUTH_PASSWORD_ENV),
        };
        let access = match (bearer, files.basic_auth_user, password) {
            (Some(_), Some(_), _) => {
                return Err(
                    "--metrics: give a bearer token or basic auth, not both (Prometheus sends one Authorization header)"
                        .into(),
                );
            }
            (Some(token), None, _) => Access::Bearer(token),
            (None, Some(user), Some(password)) => Access::Basic {
                user: user.to_string(),
                password,
            },
            (None, Some(_), None) => {
                return Err(format!(
                    "--metrics-basic-auth-user needs a password: --metrics-basic-auth-password-file or ${BASIC_AUTH_PASSWORD_ENV}"
                ));
            }
            (None, None, Some(_)) => {
                return Err("a basic-auth password is set but no --metrics-basic-auth-user".into());
            }
            (None, None, None) => Access::Open,
        };
        let tls = match (files.tls_cert, files.tls_key) {
            (Some(cert), Some(key)) => Some(tls_config(cert, key, files.tls_client_ca)?),
            (None, None) if files.tls_client_ca.is_none() => None,
            _ => {
                return Err(
                    "--metrics-tls-cert and --metrics-tls-key go together (and --metrics-tls-client-ca needs both)"
                        .into(),
                );
            }
        };
        Ok(ServerOptions {
            access,
            tls,
            limits: Limits::default(),
        })
    }
}

/// A rustls server configuration from PEM files: the certificate chain, its key, and
/// optionally the CA that client certificates must chain to (Prometheus' `tls_config`
/// `cert_file`/`key_file`).
fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read_certs = |path: &Path, flag: &str| -> Result<Vec<CertificateDer<'static>>, String> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "{flag} {}: no PEM certificate in it",
                path.display()
            ));
        }
        Ok(certs)
    };
    let chain = read_certs(cert, "--metrics-tls-cert")?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--metrics-tls-key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("--metrics TLS: {e}"))?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in read_certs(ca, "--metrics-tls-client-ca")? {
                roots
                    .add(c)
                    .map_err(|e| format!("--metrics-tls-client-ca {}: {e}", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| format!("--metrics-tls-client-ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("--metrics-tls-cert/--metrics-tls-key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A running endpoint; stops when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    access: Access,
    tls: bool,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (`127.0.0.1:9464`; port 0 picks a free port) and serves the
    /// board to anyone, over plain HTTP, within the default [`Limits`].
    pub fn start(addr: &str, board: Arc<Board>) -> Result<Self, String> {
        Self::start_with(addr, board, ServerOptions::default())
    }

    /// [`MetricsServer::start`] with access control, TLS and limits.
    pub fn start_with(
        addr: &str,
        board: Arc<Board>,
        options: ServerOptions,
    ) -> Result<Self, String> {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| format!("--metrics {addr}: cannot listen there: {e}"))?;
        let bound = listener
            .local_addr()
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        // Not `crate::background::spawn`: the runtime is built here, before the thread,
        // so that `--metrics` fails at start with its cause rather than in the thread.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("--metrics {addr}: no runtime for the server: {e}"))?;
        let shared = Arc::new(Shared {
            board,
            access: options.access.clone(),
            tls: options.tls.clone().map(tokio_rustls::TlsAcceptor::from),
            limits: options.limits,
            slots: Mutex::new(Slots::default()),
        });
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("weir-metrics".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(l) => serve(l, shared, stopped).await,
                        Err(e) => tracing::error!("the metrics endpoint cannot serve: {e}"),
                    }
                });
            })
            .map_err(|e| format!("--metrics {addr}: no thread for the server: {e}"))?;
        Ok(MetricsServer {
            addr: bound,
            access: options.access,
            tls: options.tls.is_some(),
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// What an operator should hear about the endpoint's exposure: off loopback without
    /// authentication anyone who can reach the host reads every flow's figures;
    /// with authentication but no TLS the credentials cross the network in clear text.
    pub fn exposure_warning(&self) -> Option<String> {
        if self.addr.ip().is_loopback() {
            return None;
        }
        match (&self.access, self.tls) {
            (Access::Open, _) => Some(format!(
                "the metrics endpoint listens on {} (not loopback) without authentication: anyone who can reach it reads every flow's figures; add --metrics-bearer-token-file or --metrics-basic-auth-user (docs/operate.md)",
                self.addr
            )),
            (_, false) => Some(format!(
                "the metrics endpoint listens on {} (not loopback) without TLS: its credentials cross the network in clear text; add --metrics-tls-cert and --metrics-tls-key (docs/operate.md)",
                self.addr
            )),
            (_, true) => None,
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What every connection task reads.
struct Shared {
    board: Arc<Board>,
    access: Access,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    slots: Mutex<Slots>,
}

/// The open connections, by id (ids grow: the smallest is the oldest).
#[derive(Default)]
struct Slots {
    next: u64,
    open: BTreeMap<u64, Slot>,
}

struct Slot {
    /// Since when it waits for a request head; `None` while a request is answered.
    waiting_since: Option<Instant>,
    /// Dropped to close the connection: its task ends at its next poll.
    _evict: oneshot::Sender<()>,
}

impl Shared {
    /// A slot for a new connection, making room by closing the connection that has
    /// waited longest for a request head; `None` when all are being answered.
    fn admit(&self) -> Option<(u64, oneshot::Receiver<()>)> {
        let mut slots = self.slots.lock().ok()?;
        if slots.open.len() >= self.limits.max_connections {
            let longest = slots
                .open
                .iter()
                .filter_map(|(id, s)| s.waiting_since.map(|t| (t, *id)))
                .min()?;
            slots.open.remove(&longest.1);
        }
        let id = slots.next;
        slots.next += 1;
        let (evict, evicted) = oneshot::channel();
        slots.open.insert(
            id,
            Slot {
                waiting_since: Some(Instant::now()),
                _evict: evict,
            },
        );
        Some((id, evicted))
    }

    fn waiting(&self, id: u64, waiting: bool) {
        if let Ok(mut slots) = self.slots.lock()
            && let Some(s) = slots.open.get_mut(&id)
        {
            s.waiting_since = waiting.then(Instant::now);
        }
    }

    fn close(&self, id: u64) {
        if let Ok(mut slots) = self.slots.lock() {
            slots.open.remove(&id);
        }
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stopped: oneshot::Receiver<()>) {
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin; the connections in
                // progress end within their timeouts.
                tracing::warn!("the metrics endpoint cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some((id, evicted)) = shared.admit() else {
            tracing::debug!("metrics endpoint: every connection is being answered; one refused");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let s = shared.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = evicted => {}
                _ = connection(stream, id, &s) => {}
            }
            s.close(id);
        });
        // The connection evicted for this one (if any) closes its socket before the
        // next accept, so descriptors stay within max_connections.
        tokio::task::yield_now().await;
    }
}

async fn connection(stream: TcpStream, id: u64, s: &Shared) {
    let Some(acceptor) = &s.tls else {
        return converse(stream, id, s).await;
    };
    match tokio::time::timeout(s.limits.head_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => converse(tls, id, s).await,
        Ok(Err(e)) => tracing::debug!("metrics endpoint: TLS handshake failed: {e}"),
        Err(_) => tracing::debug!("metrics endpoint: TLS handshake too slow"),
    }
}

/// A request head, as much of it as the answer needs.
#[derive(Debug)]
struct Head {
    method: String,
    path: String,
    keep_alive: bool,
    has_body: bool,
    authorization: Option<Vec<u8>>,
}

/// Why a head is answered with an error and the connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Malformed,
    TooLarge,
    TooSlow,
}

async fn converse<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, id: u64, s: &Shared) {
    let l = s.limits;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    for served in 0..l.max_requests_per_connection {
        s.waiting(id, true);
        let head = match read_head(&mut io, &mut buf, served == 0, &l).await {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(refusal) => {
                let (status, text) = match refusal {
                    Refusal::Malformed => ("400 Bad Request", "malformed request\n"),
                    Refusal::TooLarge => (
                        "431 Request Header Fields Too Large",
                        "request head too large\n",
                    ),
                    Refusal::TooSlow => ("408 Request Timeout", "request head too slow\n"),
                };
                let bytes = response(
                    status,
                    "text/plain; charset=utf-8",
                    text.as_bytes(),
                    false,
                    false,
                    None,
                );
                write(&mut io, &bytes, l.write_timeout).await;
                break;
            }
        };
        s.waiting(id, false);
        let keep = head.keep_alive && !head.has_body && served + 1 < l.max_requests_per_connection;
        let bytes = answer(&head, s, keep);
        if !write(&mut io, &bytes, l.write_timeout).await || !keep {
            break;
        }
    }
    let _ = tokio::time::timeout(l.write_timeout, io.shutdown()).await;
}

async fn write<S: AsyncWrite + Unpin>(io: &mut S, bytes: &[u8], limit: Duration) -> bool {
    let written = tokio::time::timeout(limit, async {
        io.write_all(bytes).await?;
        io.flush().await
    })
    .await;
    matches!(written, Ok(Ok(())))
}

/// Reads until `buf` holds a complete request head, which it returns (and removes from
/// `buf`; pipelined bytes stay). `None`: the client closed, or sent nothing in time.
async fn read_head<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
    first: bool,
    l: &Limits,
) -> Result<Option<Head>, Refusal> {
    let start = Instant::now();
    // The first head counts from accept; a later one from its first byte.
    let mut complete_by = first.then(|| start + l.head_timeout);
    let idle_until = start + l.idle_timeout;
    let mut chunk = [0u8; 4096];
    loop {
        if !buf.is_empty() {
            complete_by.get_or_insert_with(|| Instant::now() + l.head_timeout);
            if let Some((head, len)) = parse(buf)? {
                buf.drain(..len);
                return Ok(Some(head));
            }
            if buf.len() >= l.max_head_bytes {
                return Err(Refusal::TooLarge);
            }
        }
        let room = (l.max_head_bytes - buf.len()).min(chunk.len());
        let deadline = complete_by.unwrap_or(idle_until);
        match tokio::time::timeout_at(deadline, io.read(&mut chunk[..room])).await {
            Err(_) if buf.is_empty() => return Ok(None),
            Err(_) => return Err(Refusal::TooSlow),
            Ok(Err(_) | Ok(0)) => return Ok(None),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A complete head and its length, `None` while incomplete.
fn parse(buf: &[u8]) -> Result<Option<(Head, usize)>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(len)) => len,
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooLarge),
        Err(_) => return Err(Refusal::Malformed),
    };
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let connection = header("connection").map(|v| String::from_utf8_lossy(v).to_ascii_lowercase());
    let keep_alive = match req.version {
        Some(1) => !connection.as_deref().is_some_and(|c| c.contains("close")),
        _ => connection
            .as_deref()
            .is_some_and(|c| c.contains("keep-alive")),
    };
    let has_body = header("transfer-encoding").is_some()
        || header("content-length").is_some_and(|v| trim(v) != b"0");
    let head = Head {
        method: req.method.unwrap_or_default().to_string(),
        path: req.path.unwrap_or_default().to_string(),
        keep_alive,
        has_body,
        authorization: header("authorization").map(<[u8]>::to_vec),
    };
    Ok(Some((head, len)))
}

fn response(
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
    keep: bool,
    challenge: Option<&str>,
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {}\r\n",
        body.len(),
        if keep { "keep-alive" } else { "close" }
    );
    if let Some(c) = challenge {
        out.push_str(&format!("WWW-Authenticate: {c}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

fn answer(head: &Head, s: &Shared, keep: bool) -> Vec<u8> {
    let text = "text/plain; charset=utf-8";
    let head_only = head.method == "HEAD";
    if !s.access.allows(head.authorization.as_deref()) {
        return response(
            "401 Unauthorized",
            text,
            b"authorization required (docs/operate.md)\n",
            head_only,
            keep,
            s.access.challenge(),
        );
    }
    let get = matches!(head.method.as_str(), "GET" | "HEAD");
    let path = head.path.split('?').next().unwrap_or_default();
    match (get, path) {
        (true, "/metrics") => match super::encode(
            s.board.snapshot(),
            s.board.alert_stats(),
            crate::clock::now_ms(),
        ) {
            Ok(body) => response(
                "200 OK",
                super::CONTENT_TYPE,
                body.as_bytes(),
                head_only,
                keep,
                None,
            ),
            Err(_) => response(
                "500 Internal Server Error",
                text,
                b"cannot encode the metrics\n",
                head_only,
                keep,
                None,
            ),
        },
        (true, "/") => response(
            "200 OK",
            text,
            b"weir: the metrics are at /metrics (OpenMetrics text; docs/operate.md)\n",
            head_only,
            keep,
            None,
        ),
        (true, _) => response(
            "404 Not Found",
            text,
            b"not found; the metrics are at /metrics\n",
            head_only,
            keep,
            None,
        ),
        (false, _) => response(
            "405 Method Not Allowed",
            text,
            b"only GET /metrics\n",
            false,
            keep,
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream as StdStream;

    fn server(options: ServerOptions) -> MetricsServer {
        MetricsServer::start_with("127.0.0.1:0", Arc::new(Board::default()), options).unwrap()
    }

    /// Sends `request` on a new connection and reads the answer to its end.
    fn exchange(addr: SocketAddr, request: &str) -> String {
        let mut s = StdStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn get(addr: SocketAddr, auth: Option<&str>) -> String {
        let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        exchange(
            addr,
            &format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"),
        )
    }

    #[test]
    fn bearer_and_basic_auth_answer_401_without_the_right_credentials() {
        let bearer = server(ServerOptions {
            access: Access::Bearer(Secret::new("s3cret\n")),
            ..Default::default()
        });
        let a = bearer.addr();
        let denied = get(a, None);
        assert!(denied.starts_with("HTTP/1.1 401"), "{denied}");
        assert!(
            denied.contains("WWW-Authenticate: Bearer realm=\"weir\""),
            "{denied}"
        );
        assert!(get(a, Some("Bearer wrong")).starts_with("HTTP/1.1 401"));
        assert!(get(a, Some("Basic s3cret")).starts_with("HTTP/1.1 401"));
        let ok = get(a, Some("bearer s3cret"));
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("# EOF"), "{ok}");

        let basic = server(ServerOptions {
            access: Access::Basic {
                user: "prom".into(),
                password: Secret::new("pw"),
            },
            ..Default::default()
        });
        let b = basic.addr();
        let good = base64::engine::general_purpose::STANDARD.encode("prom:pw");
        let bad = base64::engine::general_purpose::STANDARD.encode("prom:px");
        assert!(get(b, Some(&format!("Basic {good}"))).starts_with("HTTP/1.1 200"));
        assert!(get(b, Some(&format!("Basic {bad}"))).starts_with("HTTP/1.1 401"));
        assert!(get(b, Some("Basic !!!")).starts_with("HTTP/1.1 401"));
        assert!(get(b, Some(&format!("Bearer {good}"))).starts_with("HTTP/1.1 401"));
    }

    #[test]
    fn secrets_are_read_from_files_or_the_environment_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "tok-123\n").unwrap();
        let files = AccessFiles {
            bearer_token_file: Some(&token),
            ..Default::default()
        };
        let o = ServerOptions::load(&files, |_| None).unwrap();
        assert_eq!(o.access, Access::Bearer(Secret::new("tok-123")));
        assert!(!format!("{o:?}").contains("tok-123"));

        let o = ServerOptions::load(&AccessFiles::default(), |k| {
            (k == BEARER_TOKEN_ENV).then(|| "from-env".to_string())
        })
        .unwrap();
        assert_eq!(o.access, Access::Bearer(Secret::new("from-env")));

        let user_only = AccessFiles {
            basic_auth_user: Some("prom"),
            ..Default::default()
        };
        let e = ServerOptions::load(&user_only, |_| None).unwrap_err();
        assert!(e.contains("needs a password"), "{e}");
        let o = ServerOptions::load(&user_only, |k| {
            (k == BASIC_AUTH_PASSWORD_ENV).then(|| "pw-456".to_string())
        })
        .unwrap();
        assert!(matches!(o.access, Access::Basic { ref user, .. } if user == "prom"));
        assert!(!format!("{o:?}").contains("pw-456"));

        std::fs::write(&token, " \n").unwrap();
        let e = ServerOptions::load(&files, |_| None).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let half_tls = AccessFiles {
            tls_cert: Some(&token),
            ..Default::default()
        };
        assert!(ServerOptions::load(&half_tls, |_| None).is_err());
    }

    #[test]
    fn oversized_malformed_and_bodied_requests_are_answered_and_closed() {
        let s = server(ServerOptions::default());
        let a = s.addr();
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        let mut c = StdStream::connect(a).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // The server stops reading at its limit; the rest of the write may fail.
        let _ = c.write_all(big.as_bytes());
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 431"), "{out}");

        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        let out = exchange(a, &format!("GET /metrics HTTP/1.1\r\n{many}\r\n"));
        assert!(out.starts_with("HTTP/1.1 431"), "{out}");
        let out = exchange(a, "NOT HTTP AT ALL\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        let out = exchange(
            a,
            "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert!(out.starts_with("HTTP/1.1 405"), "{out}");
        assert!(out.contains("Connection: close"), "{out}");
    }

    #[test]
    fn a_slow_head_times_out_and_keep_alive_is_bounded() {
        let s = server(ServerOptions {
            limits: Limits {
                head_timeout: Duration::from_millis(300),
                max_requests_per_connection: 3,
                ..Limits::default()
            },
            ..Default::default()
        });
        let a = s.addr();
        let mut slow = StdStream::connect(a).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost").unwrap();
        let started = std::time::Instant::now();
        let mut out = String::new();
        let _ = slow.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        assert!(started.elapsed() < Duration::from_secs(5));

        // Pipelined on one connection: three answers, the third closes it.
        let one = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        let out = exchange(a, &one.repeat(5));
        assert_eq!(out.matches("HTTP/1.1 200").count(), 3, "{out}");
        assert_eq!(out.matches("Connection: close").count(), 1, "{out}");
    }

    #[test]
    fn at_the_connection_cap_the_longest_waiting_connection_makes_room() {
        let s = server(ServerOptions {
            limits: Limits {
                max_connections: 4,
                ..Limits::default()
            },
            ..Default::default()
        });
        let a = s.addr();
        let mut idle: Vec<StdStream> = (0..4).map(|_| StdStream::connect(a).unwrap()).collect();
        // Each is accepted before the next test step.
        std::thread::sleep(Duration::from_millis(200));
        let out = get(a, None);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        // The first idle connection was closed for it: it reads end of file.
        idle[0]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(idle[0].read(&mut byte).unwrap(), 0);
        idle[3]
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert!(
            idle[3].read(&mut byte).is_err(),
            "a newer connection stays open"
        );
    }

    #[test]
    fn tls_with_a_client_that_trusts_the_certificate() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/metrics_tls");
        let files = AccessFiles {
            tls_cert: Some(&fixtures.join("cert.pem")),
            tls_key: Some(&fixtures.join("key.pem")),
            ..Default::default()
        };
        let mut options =
            ServerOptions::load(&files, |k| (k == BEARER_TOKEN_ENV).then(|| "t".to_string()))
                .unwrap();
        options.limits.head_timeout = Duration::from_secs(5);
        let s = server(options);
        assert_eq!(s.scheme(), "https");
        let url = format!("https://localhost:{}/metrics", s.addr().port());
        let pem = std::fs::read(fixtures.join("ca.pem")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (status, body) = rt.block_on(async {
            let client = reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
                .resolve("localhost", s.addr())
                .build()
                .unwrap();
            let r = client.get(&url).bearer_auth("t").send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        });
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("# EOF"));
        // Plain HTTP on the TLS port is not answered with the metrics.
        let out = get(s.addr(), Some("Bearer t"));
        assert!(!out.contains("# EOF"), "{out}");

        // Mutual TLS: a client without a certificate from the client CA is turned away.
        let mtls = server(
            ServerOptions::load(
                &AccessFiles {
                    tls_client_ca: Some(&fixtures.join("ca.pem")),
                    ..files
                },
                |_| None,
            )
            .unwrap(),
        );
        let url = format!("https://localhost:{}/metrics", mtls.addr().port());
        let refused = rt.block_on(async {
            let client = reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
                .resolve("localhost", mtls.addr())
                .build()
                .unwrap();
            client.get(&url).send().await
        });
        assert!(refused.is_err(), "{refused:?}");
    }
}
