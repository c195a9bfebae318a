//! Delivering a rule's notifications, one at a time from its bounded queue: a command
//! (no shell; the notification as JSON on stdin, `WEIR_ALERT_STATUS`, `WEIR_ALERT_RULE`
//! and `WEIR_ALERT_FLOW` in its environment; success is exit status 0) or an HTTP POST
//! of the JSON (success is a 2xx answer). Each delivery gets the rule's `timeout`; a
//! command still running then is killed. A failed delivery is logged and counted, not
//! retried: the next change of the condition is notified again.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::{AlertPayload, Stats};
use crate::spec::{AlertRule, AlertTarget};

/// Delivers the rule's notifications until its queue closes.
pub(crate) async fn worker(
    rule: AlertRule,
    mut queue: mpsc::Receiver<AlertPayload>,
    stats: Arc<Stats>,
) {
    let client = match &rule.target {
        AlertTarget::Url(_) => match reqwest::Client::builder().timeout(rule.timeout).build() {
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
        Ok(Ok(r)) => Err(format!("POST {url}: answered {}", r.status())),
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
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let run = async move {
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its stdin is fine.
            match stdin.write_all(&body).await {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e),
                _ => {}
            }
            drop(stdin);
        }
        child.wait_with_output().await
    };
    match tokio::time::timeout(timeout, run).await {
        Err(_) => Err(format!(
            "{program} did not finish within {timeout:?}; killed"
        )),
        Ok(Err(e)) => Err(format!("{program}: {e}")),
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let reversed: String = stderr.trim().chars().rev().take(300).collect();
            let tail: String = reversed.chars().rev().collect();
            Err(format!("{program} exited with {}: {tail}", out.status))
        }
    }
}
