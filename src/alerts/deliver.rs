//! Delivering a rule's notifications, one at a time from its bounded queue: a command
//! (no shell; the notification as JSON on stdin, `WEIR_ALERT_STATUS`, `WEIR_ALERT_RULE`
//! and `WEIR_ALERT_FLOW` in its environment; success is exit status 0) or an HTTP POST
//! of the JSON (success is a 2xx answer; a redirect is not followed, so a notification
//! never reaches a host the rule does not name). Each delivery gets the rule's
//! `timeout`; a command still running then is killed with its whole process group (a
//! `sh -c` wrapper's children too), and what it prints is kept only up to
//! [`OUTPUT_KEPT`] bytes per stream. A failed delivery is logged and counted, not
//! retried: the next change of the condition is notified again.

use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{AlertPayload, Stats};
use crate::spec::{AlertRule, AlertTarget};

/// The last bytes of a command's stdout and of its stderr that are kept (the rest is
/// read and dropped, so a chatty command neither blocks on a full pipe nor grows memory).
pub(crate) const OUTPUT_KEPT: usize = 64 * 1024;

/// How long a command's output is still read after it exited: a child it left in the
/// background may hold the pipes open, and its output is not waited for.
const OUTPUT_GRACE: Duration = Duration::from_millis(200);

/// Delivers the rule's notifications until its queue closes.
pub(crate) async fn worker(
    rule: AlertRule,
    mut queue: mpsc::Receiver<AlertPayload>,
    stats: Arc<Stats>,
) {
    let client = match &rule.target {
        AlertTarget::Url(_) => match webhook_client(rule.timeout) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(rule = %rule.name, "no HTTP client for the rule's url: {e}");
                None
            }
        },
        AlertTarget::Command(_) => None,
    };
    while let Some(p) = queue.recv().await {
        let outcome = match &rule.target {
            AlertTarget::Command(argv) => run_command(argv, &p, rule.timeout).await,
            AlertTarget::Url(url) => match &client {
                Some(c) => post(c, url, &p, rule.timeout).await,
                None => Err("no HTTP client".to_string()),
            },
        };
        stats.pending.fetch_sub(1, Ordering::Relaxed);
        match outcome {
            Ok(()) => stats.count(&rule.name, "delivered"),
            Err(e) => {
                tracing::warn!(rule = %rule.name, flow = %p.flow, status = p.status.as_str(), "alert notification not delivered: {e}");
                stats.count(&rule.name, "failed");
            }
        }
    }
}

/// Redirects are not followed (Alertmanager's webhook receivers do not follow them
/// either): a 3xx answer is a failed delivery that names where it pointed.
fn webhook_client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    p: &AlertPayload,
    timeout: Duration,
) -> Result<(), String> {
    let body = serde_json::to_string(p).map_err(|e| e.to_string())?;
    let send = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send();
    match tokio::time::timeout(timeout, send).await {
        Err(_) => Err(format!("POST {url}: no answer within {timeout:?}")),
        Ok(Err(e)) => Err(format!("POST {url}: {e}")),
        Ok(Ok(r)) if r.status().is_success() => Ok(()),
        Ok(Ok(r)) if r.status().is_redirection() => Err(format!(
            "POST {url}: answered {} to {}; redirects are not followed (give the final URL)",
            r.status(),
            r.headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .unwrap_or("no location")
        )),
        Ok(Ok(r)) => Err(format!("POST {url}: answered {}", r.status())),
    }
}

/// The last [`OUTPUT_KEPT`] bytes read from a stream so far, shared with its reader.
#[derive(Clone, Default)]
struct Tail(Arc<Mutex<Vec<u8>>>);

impl Tail {
    fn push(&self, bytes: &[u8]) {
        let Ok(mut kept) = self.0.lock() else {
            return;
        };
        kept.extend_from_slice(bytes);
        // Trimmed in steps of OUTPUT_KEPT, so the copy is amortised over as many bytes.
        if kept.len() > 2 * OUTPUT_KEPT {
            let cut = kept.len() - OUTPUT_KEPT;
            kept.drain(..cut);
        }
    }

    fn text(&self) -> String {
        let kept = self.0.lock().map(|k| k.clone()).unwrap_or_default();
        let from = kept.len().saturating_sub(OUTPUT_KEPT);
        String::from_utf8_lossy(&kept[from..]).into_owned()
    }
}

/// Reads `stream` to its end into `tail`.
async fn read_into(mut stream: impl AsyncRead + Unpin, tail: Tail) {
    let mut buf = vec![0u8; 8192];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.push(&buf[..n]);
    }
}

async fn run_command(argv: &[String], p: &AlertPayload, timeout: Duration) -> Result<(), String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("empty command".into());
    };
    let body = serde_json::to_vec(p).map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("WEIR_ALERT_STATUS", p.status.as_str())
        .env("WEIR_ALERT_RULE", &p.rule)
        .env("WEIR_ALERT_FLOW", &p.flow)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, led by the command: on timeout the group is killed, so
        // what the command started does not outlive the delivery.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let group = child.id();
    let (stdout, stderr) = (Tail::default(), Tail::default());
    let mut readers = tokio::task::JoinSet::new();
    if let Some(s) = child.stdout.take() {
        readers.spawn(read_into(s, stdout.clone()));
    }
    if let Some(s) = child.stderr.take() {
        readers.spawn(read_into(s, stderr.clone()));
    }
    let stdin = child.stdin.take();
    let run = async {
        if let Some(mut stdin) = stdin {
            // A command that does not read its stdin is fine.
            match stdin.write_all(&body).await {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e),
                _ => {}
            }
            drop(stdin);
        }
        child.wait().await
    };
    let outcome = tokio::time::timeout(timeout, run).await;
    if outcome.is_err()
        && let Some(pid) = group.and_then(|g| i32::try_from(g).ok())
    {
        // The group may already be gone (ESRCH); nothing else can fail here.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = tokio::time::timeout(OUTPUT_GRACE, async {
        while readers.join_next().await.is_some() {}
    })
    .await;
    readers.abort_all();
    match outcome {
        Err(_) => Err(format!(
            "{program} did not finish within {timeout:?}; killed with its process group"
        )),
        Ok(Err(e)) => Err(format!("{program}: {e}")),
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => {
            let mut said = stderr.text();
            if said.trim().is_empty() {
                said = stdout.text();
            }
            let reversed: String = said.trim().chars().rev().take(300).collect();
            let tail: String = reversed.chars().rev().collect();
            Err(format!("{program} exited with {status}: {tail}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::AlertStatus;

    fn payload() -> AlertPayload {
        AlertPayload {
            status: AlertStatus::Firing,
            rule: "r".into(),
            flow: "f".into(),
            condition: "health".into(),
            summary: "s".into(),
            value: serde_json::Value::Null,
            threshold: serde_json::Value::Null,
            health: None,
            batch_id: None,
            at: "2026-12-07T00:00:00.000Z".into(),
            fired_at: "2026-12-07T00:00:00.000Z".into(),
            pipeline: "p.toml".into(),
            host: "h".into(),
            by: "run".into(),
        }
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    /// Whether `pid` still runs (a zombie waiting for a reaper does not).
    fn running(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                !state.starts_with('Z') && !state.starts_with('X')
            }
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn a_timed_out_command_is_killed_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let script = format!(
            "sleep 60 & echo $! > {p}; sleep 60 & echo $! >> {p}; wait",
            p = pids.display()
        );
        let started = std::time::Instant::now();
        let err = run_command(&sh(&script), &payload(), Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(err.contains("killed with its process group"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let children: Vec<i32> = std::fs::read_to_string(&pids)
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert_eq!(children.len(), 2);
        // SIGKILL is delivered at once, but the kernel may take a moment to tear down.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while children.iter().any(|&c| running(c)) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for c in children {
            assert!(!running(c), "the command's child {c} outlived the timeout");
        }
    }

    #[tokio::test]
    async fn output_is_read_to_a_bound_and_the_tail_reported() {
        // 40 MiB on stderr then the last words: the command is not blocked by a full pipe,
        // and the error names the end of what it said.
        let script = "head -c 41943040 /dev/zero >&2; echo; echo 'the last words' >&2; exit 3";
        let err = run_command(&sh(script), &payload(), Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(err.contains("exited with exit status: 3"), "{err}");
        assert!(err.ends_with("the last words"), "{err}");

        let tail = Tail::default();
        let big = vec![b'x'; 10 * OUTPUT_KEPT];
        read_into(&big[..], tail.clone()).await;
        assert!(tail.0.lock().unwrap().len() <= 2 * OUTPUT_KEPT);
        assert_eq!(tail.text().len(), OUTPUT_KEPT);
    }

    #[tokio::test]
    async fn a_command_exiting_with_a_child_in_the_background_is_delivered() {
        let started = std::time::Instant::now();
        run_command(&sh("sleep 30 &"), &payload(), Duration::from_secs(10))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn the_webhook_does_not_follow_a_redirect() {
        use std::io::{Read, Write};
        // The target the redirect points at: any connection to it is a failure.
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        elsewhere.set_nonblocking(true).unwrap();
        let there = format!("http://{}/stolen", elsewhere.local_addr().unwrap());
        let hook = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", hook.local_addr().unwrap());
        let answer = std::thread::spawn(move || {
            let (mut s, _) = hook.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf).unwrap();
            write!(
                s,
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {there}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
        });
        let client = webhook_client(Duration::from_secs(5)).unwrap();
        let err = post(&client, &url, &payload(), Duration::from_secs(5))
            .await
            .unwrap_err();
        answer.join().unwrap();
        assert!(err.contains("307"), "{err}");
        assert!(err.contains("redirects are not followed"), "{err}");
        assert!(
            elsewhere.accept().is_err(),
            "the redirect was followed to the other host"
        );
    }
}
