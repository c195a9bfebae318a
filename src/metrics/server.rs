//! The HTTP side of the endpoint: `GET /metrics` on a thread of its own (`tiny_http`, a
//! small synchronous server), away from the engine's runtime. Each scrape clones the
//! board's snapshots, encodes them, then answers: nothing is locked while the answer is
//! written, so a slow or stuck scraper delays only other scrapes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::engine::board::Board;

/// A running endpoint; stops when dropped.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (`127.0.0.1:9464`; port 0 picks a free port) and serves the board.
    pub fn start(addr: &str, board: Arc<Board>) -> Result<Self, String> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| format!("--metrics {addr}: cannot listen there: {e}"))?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| format!("--metrics {addr}: not an IP address"))?;
        let server = Arc::new(server);
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("weir-metrics".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    answer(request, &board);
                }
            })
            .map_err(|e| format!("--metrics {addr}: no thread for the server: {e}"))?;
        Ok(MetricsServer {
            server,
            addr: bound,
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn header(name: &str, value: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn answer(request: tiny_http::Request, board: &Board) {
    let path = request
        .url()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();
    let get = matches!(
        request.method(),
        tiny_http::Method::Get | tiny_http::Method::Head
    );
    let response = match (get, path.as_str()) {
        (true, "/metrics") => {
            match super::encode(
                board.snapshot(),
                board.alert_stats(),
                crate::clock::now_ms(),
            ) {
                Ok(text) => {
                    let mut r = tiny_http::Response::from_string(text);
                    if let Some(h) = header("Content-Type", super::CONTENT_TYPE) {
                        r.add_header(h);
                    }
                    r
                }
                Err(_) => tiny_http::Response::from_string("cannot encode the metrics\n")
                    .with_status_code(500),
            }
        }
        (true, "/") => tiny_http::Response::from_string(
            "weir: the metrics are at /metrics (OpenMetrics text; docs/operate.md)\n",
        ),
        (true, _) => tiny_http::Response::from_string("not found; the metrics are at /metrics\n")
            .with_status_code(404),
        (false, _) => tiny_http::Response::from_string("only GET /metrics\n").with_status_code(405),
    };
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "a metrics scrape went away before its answer");
    }
}
