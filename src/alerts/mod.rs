//! Alert rules (`[alerts]` in the pipeline, docs/operate.md): each rule's condition is
//! checked against every watched flow's snapshot on the board
//! ([`crate::engine::board`]), after every publish and every `evaluate_every`. A rule
//! fires once when its condition starts to hold and resolves once when it stops
//! (hysteresis per rule and flow; a condition that cannot be told yet changes nothing).
//! Each notification is appended to the flow's `_weir/alerts.jsonl` (the console's
//! timeline shows it) and queued for the rule's target ([`deliver`]): a bounded queue
//! and a timeout per delivery, on a thread of its own, so a stuck target never slows a
//! batch. A restarted process reads `_weir/alerts.jsonl` back and goes on where the last
//! one stopped (an alert firing then is resolved once, not fired again).
//!
//! `weir run` evaluates the rules over its own flows; `weir watch` over the checkpoints
//! of flows run elsewhere (a board it fills from their files).

pub mod deliver;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::checkpoint::Checkpoint;
use crate::engine::board::{AlertStats, Board, FlowSnapshot};
use crate::health::human_ms;
use crate::records::iso_millis;
use crate::spec::{AlertCondition, AlertRule, AlertsSpec};

/// Whether a notification starts or ends an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// One notification: the JSON a command reads on stdin, a URL receives as the POST body,
/// and `_weir/alerts.jsonl` keeps (one per line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertPayload {
    pub status: AlertStatus,
    pub rule: String,
    pub flow: String,
    /// `health`, `freshness`, `backlog_seconds` or `failed_batches`.
    pub condition: String,
    /// One line for a human.
    pub summary: String,
    /// The measured value: a health state, seconds, or a count (`null`: never drains).
    pub value: serde_json::Value,
    /// The rule's threshold: health states, seconds, or a count.
    pub threshold: serde_json::Value,
    /// The flow's health state when the notification was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// The flow's last committed batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<u64>,
    /// When this notification was made (ISO-8601 UTC).
    pub at: String,
    /// When the alert fired (the same as `at` when firing).
    pub fired_at: String,
    /// The pipeline file.
    pub pipeline: String,
    pub host: String,
    /// `run` or `watch`: the command that evaluated the rule.
    pub by: String,
}

impl AlertPayload {
    /// The timeline's line: `alert firing: rule stale (freshness): ...`.
    pub fn timeline_text(&self) -> String {
        format!(
            "alert {}: rule {} ({}): {}",
            self.status.as_str(),
            self.rule,
            self.condition,
            self.summary
        )
    }

    pub fn at_ms(&self) -> Option<i64> {
        chrono::DateTime::parse_from_rfc3339(&self.at)
            .ok()
            .map(|t| t.timestamp_millis())
    }
}

/// A rule's condition measured on a flow's snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub holds: bool,
    pub value: serde_json::Value,
    pub threshold: serde_json::Value,
    pub summary: String,
}

fn secs_json(secs: f64) -> serde_json::Value {
    serde_json::Number::from_f64((secs * 1000.0).round() / 1000.0)
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// Measures a rule's condition on a flow; `None` while it cannot be told (no record,
/// no verdict, no failure or commit seen yet).
pub fn check(condition: &AlertCondition, s: &FlowSnapshot, now_ms: i64) -> Option<Check> {
    let flow = &s.flow;
    match condition {
        AlertCondition::Health(states) => {
            let health = s.health.as_ref()?;
            let state = health.state.as_str();
            let holds = states.iter().any(|x| x == state);
            let why = health.evidence.reasons.first().cloned().unwrap_or_default();
            let summary = match (holds, why.is_empty()) {
                (true, false) => format!("flow {flow} is {state}: {why}"),
                _ => format!("flow {flow} is {state}"),
            };
            Some(Check {
                holds,
                value: state.into(),
                threshold: states.clone().into(),
                summary,
            })
        }
        AlertCondition::Freshness(target) => {
            let age = s.freshness_ms(now_ms)?;
            let target_ms = i64::try_from(target.as_millis()).unwrap_or(i64::MAX);
            Some(Check {
                holds: age > target_ms,
                value: secs_json(age as f64 / 1000.0),
                threshold: secs_json(target.as_secs_f64()),
                summary: format!(
                    "the newest row of flow {flow} became visible in its table {} ago (target {})",
                    human_ms(age),
                    human_ms(target_ms)
                ),
            })
        }
        AlertCondition::BacklogSeconds(limit) => {
            let secs = s.backlog_seconds()?;
            let text = if secs.is_finite() {
                format!("{:.1} s", secs)
            } else {
                "never (the last batch made no progress on it)".to_string()
            };
            Some(Check {
                holds: secs > *limit,
                value: secs_json(secs),
                threshold: secs_json(*limit),
                summary: format!(
                    "the backlog of flow {flow} takes {text} at its recent pace (limit {limit} s)"
                ),
            })
        }
        AlertCondition::FailedBatches(n) => {
            let failed = s.failed_since_commit?;
            let summary = match (&s.last_error, failed) {
                (_, 0) => format!("flow {flow} committed a batch"),
                (Some(e), _) => {
                    format!(
                        "flow {flow}: {failed} failed batch attempt(s) since the last commit: {e}"
                    )
                }
                (None, _) => {
                    format!("flow {flow}: {failed} failed batch attempt(s) since the last commit")
                }
            };
            Some(Check {
                holds: failed >= *n,
                value: failed.into(),
                threshold: (*n).into(),
                summary,
            })
        }
    }
}

/// Who evaluates the rules (the `by` of a notification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evaluator {
    Run,
    Watch,
}

/// Options of the alert thread.
pub struct AlertOptions {
    pub spec: AlertsSpec,
    pub pipeline: PathBuf,
    /// The flows evaluated, with their checkpoints.
    pub flows: Vec<(String, PathBuf)>,
    pub by: Evaluator,
    /// Print each notification on stdout as a JSON line (`weir watch`).
    pub print: bool,
    /// Called before each evaluation (`weir watch` reads the checkpoints into the board).
    pub refresh: Option<Refresh>,
}

/// What `weir watch` runs before each evaluation: reads the checkpoints into the board.
pub type Refresh = Box<dyn FnMut(&Board) + Send>;

/// The rules' state: which (rule, flow) pairs fire, since when.
struct Rules {
    spec: AlertsSpec,
    pipeline: String,
    host: String,
    by: Evaluator,
    flows: BTreeMap<String, PathBuf>,
    firing: BTreeMap<(String, String), String>,
}

impl Rules {
    fn new(options: &AlertOptions) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        let mut rules = Rules {
            spec: options.spec.clone(),
            pipeline: options.pipeline.display().to_string(),
            host,
            by: options.by,
            flows: options.flows.iter().cloned().collect(),
            firing: BTreeMap::new(),
        };
        rules.recover();
        rules
    }

    /// Alerts still firing when the last process stopped (`_weir/alerts.jsonl`).
    fn recover(&mut self) {
        for (flow, cp) in &self.flows {
            for p in read_alerts(&Checkpoint::at(cp).alerts_path()) {
                if p.flow != *flow || !self.spec.rules.iter().any(|r| r.name == p.rule) {
                    continue;
                }
                let key = (p.rule.clone(), p.flow.clone());
                match p.status {
                    AlertStatus::Firing => {
                        self.firing.insert(key, p.fired_at.clone());
                    }
                    AlertStatus::Resolved => {
                        self.firing.remove(&key);
                    }
                }
            }
        }
    }

    /// The notifications due now: `(rule index, payload)`.
    fn evaluate(&mut self, board: &Board, now_ms: i64) -> Vec<(usize, AlertPayload)> {
        let mut out = Vec::new();
        let snapshots = board.snapshot();
        for (i, rule) in self.spec.rules.iter().enumerate() {
            for s in &snapshots {
                if !self.flows.contains_key(&s.flow) || !rule.watches(&s.flow) {
                    continue;
                }
                let Some(c) = check(&rule.condition, s, now_ms) else {
                    continue;
                };
                let key = (rule.name.clone(), s.flow.clone());
                let status = match (c.holds, self.firing.get(&key)) {
                    (true, None) => AlertStatus::Firing,
                    (false, Some(_)) => AlertStatus::Resolved,
                    _ => continue,
                };
                let at = iso_millis(now_ms);
                let fired_at = match status {
                    AlertStatus::Firing => {
                        self.firing.insert(key, at.clone());
                        at.clone()
                    }
                    AlertStatus::Resolved => self.firing.remove(&key).unwrap_or_else(|| at.clone()),
                };
                out.push((i, self.payload(rule, s, c, status, at, fired_at)));
            }
        }
        out
    }

    fn payload(
        &self,
        rule: &AlertRule,
        s: &FlowSnapshot,
        c: Check,
        status: AlertStatus,
        at: String,
        fired_at: String,
    ) -> AlertPayload {
        AlertPayload {
            status,
            rule: rule.name.clone(),
            flow: s.flow.clone(),
            condition: rule.condition.key().to_string(),
            summary: c.summary,
            value: c.value,
            threshold: c.threshold,
            health: s.health_state().map(|h| h.as_str().to_string()),
            batch_id: s.last.as_ref().map(|r| r.batch_id),
            at,
            fired_at,
            pipeline: self.pipeline.clone(),
            host: self.host.clone(),
            by: match self.by {
                Evaluator::Run => "run",
                Evaluator::Watch => "watch",
            }
            .to_string(),
        }
    }

    /// Appends the notification to the flow's `_weir/alerts.jsonl`.
    fn record(&self, p: &AlertPayload) {
        let Some(cp) = self.flows.get(&p.flow) else {
            return;
        };
        let cp = Checkpoint::at(cp);
        if !cp.weir_dir().is_dir() {
            return;
        }
        let path = cp.alerts_path();
        let written = serde_json::to_string(p)
            .map_err(std::io::Error::other)
            .and_then(|line| {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(&path)?;
                writeln!(f, "{line}")?;
                f.metadata().map(|m| m.len())
            });
        match written {
            Ok(len) if len > ALERTS_MAX_BYTES => {
                if let Err(e) = compact_alerts(&path, ALERTS_KEEP) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot compact the alert notifications");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot record the alert notification")
            }
        }
    }
}

/// `_weir/alerts.jsonl` is compacted when an append takes it past this size (bytes)...
pub const ALERTS_MAX_BYTES: u64 = 1024 * 1024;
/// ...down to this many latest notifications, plus every firing not resolved yet.
pub const ALERTS_KEEP: usize = 1000;

/// Rewrites `path` (atomically) with its last `keep` notifications plus the firings
/// before them that no later notification resolves, so a restart still knows every
/// alert that is firing. Lines that do not parse are dropped with the old notifications.
pub fn compact_alerts(path: &Path, keep: usize) -> std::io::Result<()> {
    let all = read_alerts(path);
    let cut = all.len().saturating_sub(keep);
    // The status of each (rule, flow) after all notifications.
    let mut last: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, p) in all.iter().enumerate() {
        last.insert((p.rule.as_str(), p.flow.as_str()), i);
    }
    let mut text = String::new();
    for (i, p) in all.iter().enumerate() {
        let still_firing = p.status == AlertStatus::Firing
            && last.get(&(p.rule.as_str(), p.flow.as_str())) == Some(&i);
        if i >= cut || still_firing {
            text.push_str(&serde_json::to_string(p).map_err(std::io::Error::other)?);
            text.push('\n');
        }
    }
    crate::durable::write_atomic(path, text.as_bytes())
}

/// Every notification recorded in an `_weir/alerts.jsonl` (unreadable lines skipped).
pub fn read_alerts(path: &Path) -> Vec<AlertPayload> {
    let Ok(file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// The alert counters the Prometheus endpoint shows, kept in step on the board.
pub(crate) struct Stats {
    inner: Mutex<AlertStats>,
    board: Arc<Board>,
    /// Notifications queued and not yet delivered or given up.
    pub(crate) pending: AtomicU64,
}

impl Stats {
    fn with(&self, change: impl FnOnce(&mut AlertStats)) {
        let mut inner = match self.inner.lock() {
            Ok(i) => i,
            Err(poisoned) => poisoned.into_inner(),
        };
        change(&mut inner);
        self.board.set_alert_stats(inner.clone());
    }

    pub(crate) fn count(&self, rule: &str, outcome: &'static str) {
        self.with(|s| {
            *s.notifications
                .entry((rule.to_string(), outcome))
                .or_insert(0) += 1
        });
    }
}

/// The running alert thread.
pub struct AlertsHandle {
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AlertsHandle {
    /// Evaluates the rules a last time, waits for the queued notifications (at most the
    /// longest rule timeout, and at most 5 s), and stops.
    pub fn finish(mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AlertsHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// At most this long at exit for notifications still queued.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// Starts evaluating the rules on a thread of its own.
pub fn start(options: AlertOptions, board: Arc<Board>) -> std::io::Result<AlertsHandle> {
    let (stop, stopped) = watch::channel(false);
    let thread = crate::background::spawn(
        "weir-alerts",
        crate::background::Workers::Caller,
        move || evaluate_until_stopped(options, board, stopped),
        |e| tracing::error!("alert rules are not evaluated: {e}"),
    )?;
    Ok(AlertsHandle {
        stop,
        thread: Some(thread),
    })
}

async fn evaluate_until_stopped(
    mut options: AlertOptions,
    board: Arc<Board>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut rules = Rules::new(&options);
    let stats = Arc::new(Stats {
        inner: Mutex::new(AlertStats::default()),
        board: board.clone(),
        pending: AtomicU64::new(0),
    });
    let mut queues = Vec::new();
    let mut workers = Vec::new();
    for rule in &rules.spec.rules {
        let (tx, rx) = mpsc::channel(rules.spec.queue.max(1));
        queues.push(tx);
        workers.push(tokio::spawn(deliver::worker(
            rule.clone(),
            rx,
            stats.clone(),
        )));
    }
    let grace = rules
        .spec
        .rules
        .iter()
        .map(|r| r.timeout)
        .max()
        .unwrap_or_default()
        .min(EXIT_GRACE);
    let mut changed = board.subscribe();
    let mut board_open = true;
    let mut ticks = tokio::time::interval(rules.spec.evaluate_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_round = false;
    loop {
        if let Some(refresh) = options.refresh.as_mut() {
            refresh(&board);
        }
        for (i, p) in rules.evaluate(&board, crate::clock::now_ms()) {
            rules.record(&p);
            if options.print
                && let Ok(line) = serde_json::to_string(&p)
            {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}").and_then(|()| out.flush());
            }
            tracing::info!(rule = %p.rule, flow = %p.flow, status = p.status.as_str(), "{}", p.summary);
            let Some(queue) = queues.get(i) else { continue };
            stats.pending.fetch_add(1, Ordering::Relaxed);
            if queue.try_send(p).is_err() {
                stats.pending.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(rule = %rules.spec.rules[i].name, "alert queue full; a notification was dropped");
                stats.count(&rules.spec.rules[i].name, "dropped");
            }
        }
        let firing: Vec<(String, String)> = rules.firing.keys().cloned().collect();
        stats.with(|s| s.firing = firing);
        if last_round {
            break;
        }
        tokio::select! {
            _ = ticks.tick() => {}
            r = changed.changed(), if board_open => {
                // The board's sender is gone: only ticks from now on.
                board_open = r.is_ok();
            }
            _ = stopped.changed() => last_round = true,
        }
        if *stopped.borrow() {
            last_round = true;
        }
    }
    drop(queues);
    let all = futures::future::join_all(workers);
    if tokio::time::timeout(grace, all).await.is_err() {
        let left = stats.pending.load(Ordering::Relaxed);
        tracing::warn!(
            "{left} alert notification(s) not delivered before exit (each target gets at most {} at exit); they are in _weir/alerts.jsonl",
            human_ms(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Health, HealthState, StreamingQueryProgress};
    use crate::spec::AlertTarget;

    fn spec(condition: AlertCondition) -> AlertsSpec {
        AlertsSpec {
            rules: vec![AlertRule {
                name: "r".into(),
                flows: Vec::new(),
                condition,
                target: AlertTarget::Url("http://127.0.0.1:9/".into()),
                timeout: Duration::from_secs(1),
            }],
            ..Default::default()
        }
    }

    fn rules(condition: AlertCondition, dir: &Path) -> Rules {
        Rules::new(&AlertOptions {
            spec: spec(condition),
            pipeline: "p.toml".into(),
            flows: vec![("f".into(), dir.to_path_buf())],
            by: Evaluator::Run,
            print: false,
            refresh: None,
        })
    }

    fn health(board: &Board, state: HealthState) {
        board.update("f", |s| {
            s.health = Some(Health {
                state,
                ..Default::default()
            })
        });
    }

    #[test]
    fn fires_once_and_resolves_once_and_a_restart_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("_weir")).unwrap();
        let board = Board::default();
        let cond = AlertCondition::Health(vec!["lagging".into()]);
        let mut r = rules(cond.clone(), dir.path());
        assert!(
            r.evaluate(&board, 0).is_empty(),
            "no verdict yet: nothing to tell"
        );
        health(&board, HealthState::Healthy);
        assert!(r.evaluate(&board, 1).is_empty());
        health(&board, HealthState::Lagging);
        let fired = r.evaluate(&board, 2);
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].1.status, AlertStatus::Firing);
        r.record(&fired[0].1);
        assert!(r.evaluate(&board, 3).is_empty(), "fires once");
        // A new process: firing is read back, not fired again; then resolved once.
        let mut r = rules(cond, dir.path());
        assert!(r.evaluate(&board, 4).is_empty());
        health(&board, HealthState::Healthy);
        let resolved = r.evaluate(&board, 5);
        assert_eq!(resolved.len(), 1);
        assert_eq!(resolved[0].1.status, AlertStatus::Resolved);
        assert_eq!(resolved[0].1.fired_at, fired[0].1.fired_at);
        assert!(r.evaluate(&board, 6).is_empty(), "resolves once");
    }

    #[test]
    fn alerts_file_is_bounded_and_keeps_what_is_still_firing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("_weir")).unwrap();
        let board = Board::default();
        let mut r = rules(AlertCondition::Health(vec!["lagging".into()]), dir.path());
        let path = Checkpoint::at(dir.path()).alerts_path();
        // A second rule's firing, early, never resolved: it must survive every compaction.
        let mut stuck = None;
        health(&board, HealthState::Healthy);
        r.evaluate(&board, 0);
        let mut t = 1;
        // Flap until the file has been compacted a few times.
        while t < 2 * (ALERTS_MAX_BYTES as i64 / 300) {
            let state = if t % 2 == 1 {
                HealthState::Lagging
            } else {
                HealthState::Healthy
            };
            health(&board, state);
            for (_, mut p) in r.evaluate(&board, t) {
                r.record(&p);
                if stuck.is_none() {
                    p.rule = "other".into();
                    r.record(&p);
                    stuck = Some(p);
                }
            }
            t += 1;
        }
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len <= ALERTS_MAX_BYTES + 2048, "{len} bytes");
        let kept = read_alerts(&path);
        assert!(kept.len() <= ALERTS_KEEP + 1 + 2 * 1024 * 1024 / 300);
        assert!(kept.len() >= ALERTS_KEEP, "{}", kept.len());
        assert_eq!(
            kept.first(),
            stuck.as_ref(),
            "the unresolved firing is kept"
        );
        // The latest notification is the last line, and a restart reads the state back.
        let last = kept.last().unwrap().clone();
        assert_eq!(last.at_ms(), Some(t - 1));
        let r2 = rules(AlertCondition::Health(vec!["lagging".into()]), dir.path());
        assert_eq!(
            r2.firing.contains_key(&("r".to_string(), "f".to_string())),
            last.status == AlertStatus::Firing
        );
    }

    #[test]
    fn freshness_backlog_and_failures_measure_the_snapshot() {
        let mut s = FlowSnapshot::new("f");
        let fresh = AlertCondition::Freshness(Duration::from_secs(60));
        assert_eq!(check(&fresh, &s, 0), None);
        let mut r = StreamingQueryProgress::default();
        r.sink.num_output_rows = 5;
        s.observe_record(&r, 1_000);
        assert!(!check(&fresh, &s, 61_000).unwrap().holds);
        assert!(check(&fresh, &s, 61_001).unwrap().holds);
        let failed = AlertCondition::FailedBatches(1);
        assert!(!check(&failed, &s, 0).unwrap().holds);
        s.observe_error("sink unavailable".into(), 2_000);
        let c = check(&failed, &s, 0).unwrap();
        assert!(c.holds);
        assert!(c.summary.contains("sink unavailable"), "{}", c.summary);
    }
}
