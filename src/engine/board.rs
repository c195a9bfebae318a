//! The board: what the engine publishes about each flow after every batch, status change
//! and failure, for readers outside the batch path (the Prometheus endpoint, the alert
//! rules; docs/operate.md).
//!
//! A flow's entry is an immutable [`FlowSnapshot`] behind an `Arc`: publishing swaps the
//! `Arc` under a short write lock (no I/O, no waiting on readers); a reader clones the
//! `Arc`s under a short read lock and then works on its own copies, so a slow scrape or a
//! stuck alert target never holds anything the engine needs. Nothing is published until
//! [`Board::enable`] (`weir run --metrics`, or a pipeline with `[alerts]`).
//!
//! `weir watch` fills a board of its own from the checkpoints' files
//! ([`FlowSnapshot::from_checkpoint`]), so the rules read the same snapshot either way.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use tokio::sync::watch;

use super::control::FlowStatus;
use crate::checkpoint::Checkpoint;
use crate::records::{BacklogUnit, Health, HealthState, StreamingQueryProgress};

/// Upper bounds (seconds) of the batch-duration histogram's buckets (`+Inf` is implied).
pub const DURATION_BUCKETS: [f64; 12] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Sums over the batches this process saw (Prometheus counters start at 0 with the process).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub batches: u64,
    pub input_rows: u64,
    pub output_rows: u64,
    pub files: u64,
    pub bytes: u64,
    pub rows_rescued: u64,
    pub records_corrupt: u64,
    pub records_quarantined: u64,
    pub files_failed: u64,
    pub rows_dropped_by_watermark: u64,
    /// Per expectation (`[[flow.expect]]`) by name: rows that passed, rows that failed.
    pub expectations: std::collections::BTreeMap<String, (u64, u64)>,
    /// Rows the `drop` expectations removed.
    pub rows_dropped_by_expectations: u64,
    /// Runs of the flow that ended with an error (after the engine's retries).
    pub failures: u64,
}

/// Batch durations (`durationMs.triggerExecution`) in [`DURATION_BUCKETS`].
#[derive(Debug, Clone, PartialEq)]
pub struct DurationHistogram {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    pub counts: Vec<u64>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl Default for DurationHistogram {
    fn default() -> Self {
        DurationHistogram {
            counts: vec![0; DURATION_BUCKETS.len() + 1],
            sum_seconds: 0.0,
            count: 0,
        }
    }
}

impl DurationHistogram {
    pub fn observe(&mut self, seconds: f64) {
        let i = DURATION_BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(DURATION_BUCKETS.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum_seconds += seconds;
        self.count += 1;
    }
}

/// One flow as last published.
#[derive(Debug, Clone, Default)]
pub struct FlowSnapshot {
    pub flow: String,
    /// `None`: not known (`weir watch` reads no status).
    pub status: Option<FlowStatus>,
    /// The newest progress record (with its health verdict).
    pub last: Option<Arc<StreamingQueryProgress>>,
    /// The latest health verdict (also after a failure, which has no progress record).
    pub health: Option<Health>,
    pub totals: Totals,
    pub durations: DurationHistogram,
    /// Failed batch attempts since the last committed batch; `None` until this process saw
    /// either (a failure, or a commit).
    pub failed_since_commit: Option<u64>,
    pub last_error: Option<String>,
    /// When the newest row became visible in the flow's table (ms since the epoch): the
    /// end of the last batch that wrote rows.
    pub rows_visible_ms: Option<i64>,
    /// When this snapshot was published.
    pub at_ms: i64,
}

fn parse_iso_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// When a record's batch ended (its start plus its duration).
fn end_ms(r: &StreamingQueryProgress) -> Option<i64> {
    parse_iso_ms(&r.timestamp).map(|t| t + r.batch_duration as i64)
}

impl FlowSnapshot {
    pub fn new(flow: &str) -> Self {
        FlowSnapshot {
            flow: flow.to_string(),
            ..Default::default()
        }
    }

    /// A committed batch's record: counters, histogram, health, freshness.
    pub fn observe_record(&mut self, r: &StreamingQueryProgress, at_ms: i64) {
        let t = &mut self.totals;
        t.batches += 1;
        t.input_rows += r.num_input_rows;
        t.output_rows += u64::try_from(r.sink.num_output_rows).unwrap_or(0);
        t.files += r.weir.num_files;
        t.bytes += r.weir.num_bytes;
        t.rows_rescued += r.weir.num_rows_rescued;
        t.records_corrupt += r.weir.num_records_corrupt;
        t.records_quarantined += r.weir.num_records_quarantined;
        t.files_failed += r.weir.num_files_failed;
        for e in &r.weir.expectations {
            let (passed, failed) = t.expectations.entry(e.name.clone()).or_default();
            *passed += e.passed_records;
            *failed += e.failed_records;
        }
        t.rows_dropped_by_expectations += r.weir.num_rows_dropped_by_expectations;
        t.rows_dropped_by_watermark += r
            .state_operators
            .iter()
            .map(|o| o.num_rows_dropped_by_watermark)
            .sum::<u64>();
        let ms = r
            .duration_ms
            .get("triggerExecution")
            .copied()
            .unwrap_or(r.batch_duration);
        self.durations.observe(ms as f64 / 1000.0);
        if r.sink.num_output_rows > 0 && !r.weir.sink_write_skipped {
            self.rows_visible_ms = Some(at_ms);
        }
        if let Some(h) = &r.weir.health {
            self.health = Some(h.clone());
        }
        self.failed_since_commit = Some(0);
        self.last = Some(Arc::new(r.clone()));
        self.at_ms = at_ms;
    }

    /// A run of the flow ended with this error.
    pub fn observe_error(&mut self, message: String, at_ms: i64) {
        self.totals.failures += 1;
        self.failed_since_commit = Some(self.failed_since_commit.unwrap_or(0) + 1);
        self.last_error = Some(message);
        self.at_ms = at_ms;
    }

    /// What the checkpoint's files say (`_weir/progress.jsonl`, `_weir/health.json`): the
    /// newest record, the latest verdict, when rows last became visible, and whether the
    /// flow stopped on a failure after its last commit. Counters stay at 0.
    pub fn from_checkpoint(flow: &str, checkpoint: &Checkpoint) -> Self {
        let records = crate::checkpoint::progress::read_progress(&checkpoint.progress_path())
            .unwrap_or_default();
        let mut s = FlowSnapshot::new(flow);
        s.rows_visible_ms = records
            .iter()
            .rev()
            .find(|r| r.sink.num_output_rows > 0 && !r.weir.sink_write_skipped)
            .and_then(end_ms);
        let last_end = records.last().and_then(end_ms);
        s.last = records.last().cloned().map(Arc::new);
        s.health = s.last.as_ref().and_then(|r| r.weir.health.clone());
        if let Some(record) = checkpoint.read_health() {
            let at = parse_iso_ms(&record.at);
            let failed_after_commit = record.health.evidence.error.is_some()
                && match (at, last_end) {
                    (Some(at), Some(end)) => at > end,
                    (Some(_), None) => true,
                    _ => false,
                };
            if failed_after_commit {
                s.failed_since_commit = Some(1);
                s.status = Some(FlowStatus::Failed);
                s.last_error = record
                    .health
                    .evidence
                    .error
                    .as_ref()
                    .map(|e| e.message.clone());
            } else if last_end.is_some() {
                s.failed_since_commit = Some(0);
            }
            s.health = Some(record.health);
        }
        s.at_ms = crate::clock::now_ms();
        s
    }

    pub fn health_state(&self) -> Option<HealthState> {
        self.health.as_ref().map(|h| h.state)
    }

    /// Milliseconds since the newest row became visible in the flow's table.
    pub fn freshness_ms(&self, now_ms: i64) -> Option<i64> {
        self.rows_visible_ms.map(|t| (now_ms - t).max(0))
    }

    /// The flow's watermark after the last batch (ms since the epoch), when it has one.
    pub fn watermark_ms(&self) -> Option<i64> {
        self.last
            .as_ref()
            .and_then(|r| r.event_time.get("watermark"))
            .and_then(|t| parse_iso_ms(t))
            .filter(|w| *w > 0)
    }

    /// The backlog after the last batch, summed over the sources, per unit (in
    /// [`BacklogUnit::ALL`] order, only the units a source reports).
    pub fn backlog(&self) -> Vec<(BacklogUnit, u64)> {
        let Some(r) = &self.last else {
            return Vec::new();
        };
        BacklogUnit::ALL
            .iter()
            .filter_map(|unit| {
                let values: Vec<u64> = r
                    .sources
                    .iter()
                    .filter_map(|s| s.metrics.get(unit.metric()))
                    .filter_map(|v| v.trim().parse().ok())
                    .collect();
                (!values.is_empty()).then(|| (*unit, values.iter().sum()))
            })
            .collect()
    }

    /// Bytes outstanding in file sources after the last batch.
    pub fn backlog_bytes(&self) -> Option<u64> {
        let r = self.last.as_ref()?;
        let values: Vec<u64> = r
            .sources
            .iter()
            .filter_map(|s| s.metrics.get("numBytesOutstanding"))
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// Seconds the backlog would take at the last batch's pace: files outstanding at its
    /// files per second, Kafka offsets or rate-source rows at its processed rows per
    /// second. 0 without a backlog; infinite when there is one and the batch made no
    /// progress on it; `None` when unknown (no record yet, or a Delta versions backlog).
    pub fn backlog_seconds(&self) -> Option<f64> {
        let r = self.last.as_ref()?;
        // The unit of the first source that reports one, summed over the sources in it.
        let unit = r.sources.iter().find_map(|s| s.backlog())?.1;
        let n: u64 = r
            .sources
            .iter()
            .filter_map(|s| s.backlog())
            .filter(|b| b.1 == unit)
            .map(|b| b.0)
            .sum();
        if n == 0 {
            return Some(0.0);
        }
        let secs = r.batch_duration as f64 / 1000.0;
        let pace = match unit {
            BacklogUnit::Files if secs > 0.0 => r.weir.num_files as f64 / secs,
            BacklogUnit::Files => 0.0,
            BacklogUnit::Offsets | BacklogUnit::Rows => r.processed_rows_per_second,
            BacklogUnit::Versions => return None,
        };
        Some(if pace > 0.0 {
            n as f64 / pace
        } else {
            f64::INFINITY
        })
    }
}

/// What an alert evaluator reports for the Prometheus endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertStats {
    /// `(rule, flow)` pairs currently firing.
    pub firing: Vec<(String, String)>,
    /// Notifications per `(rule, outcome)`: `delivered`, `failed`, `dropped`.
    pub notifications: BTreeMap<(String, &'static str), u64>,
}

/// Every flow's latest snapshot.
#[derive(Debug)]
pub struct Board {
    enabled: AtomicBool,
    flows: RwLock<BTreeMap<String, Arc<FlowSnapshot>>>,
    alerts: RwLock<Arc<AlertStats>>,
    changed: watch::Sender<u64>,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            enabled: AtomicBool::new(false),
            flows: RwLock::new(BTreeMap::new()),
            alerts: RwLock::new(Arc::new(AlertStats::default())),
            changed: watch::channel(0).0,
        }
    }
}

/// The process's board, which the engine publishes to.
pub fn global() -> Arc<Board> {
    static BOARD: OnceLock<Arc<Board>> = OnceLock::new();
    BOARD.get_or_init(|| Arc::new(Board::default())).clone()
}

impl Board {
    /// Starts publishing (the engine skips the board until then).
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Changes whenever a snapshot is published.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Every flow's snapshot, in flow-name order.
    pub fn snapshot(&self) -> Vec<Arc<FlowSnapshot>> {
        let flows = match self.flows.read() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        flows.values().cloned().collect()
    }

    pub fn get(&self, flow: &str) -> Option<Arc<FlowSnapshot>> {
        let flows = match self.flows.read() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        flows.get(flow).cloned()
    }

    /// Publishes a flow's next snapshot: `change` applied to a copy of the current one.
    pub fn update(&self, flow: &str, change: impl FnOnce(&mut FlowSnapshot)) {
        let current = self.get(flow);
        let mut next = match current {
            Some(s) => (*s).clone(),
            None => FlowSnapshot::new(flow),
        };
        change(&mut next);
        self.put(next);
    }

    /// Replaces a flow's snapshot.
    pub fn put(&self, snapshot: FlowSnapshot) {
        {
            let mut flows = match self.flows.write() {
                Ok(f) => f,
                Err(poisoned) => poisoned.into_inner(),
            };
            flows.insert(snapshot.flow.clone(), Arc::new(snapshot));
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn alert_stats(&self) -> Arc<AlertStats> {
        match self.alerts.read() {
            Ok(a) => a.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set_alert_stats(&self, stats: AlertStats) {
        let mut a = match self.alerts.write() {
            Ok(a) => a,
            Err(poisoned) => poisoned.into_inner(),
        };
        *a = Arc::new(stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::SourceProgress;

    fn record(
        batch_id: u64,
        rows: u64,
        files: u64,
        outstanding: u64,
        ms: u64,
    ) -> StreamingQueryProgress {
        let mut r = StreamingQueryProgress {
            batch_id,
            num_input_rows: rows,
            batch_duration: ms,
            timestamp: crate::records::iso_millis(1_700_000_000_000),
            ..Default::default()
        };
        r.duration_ms.insert("triggerExecution".into(), ms);
        r.sink.num_output_rows = rows as i64;
        r.weir.num_files = files;
        let mut s = SourceProgress::default();
        s.metrics
            .insert("numFilesOutstanding".into(), outstanding.to_string());
        r.sources.push(s);
        r
    }

    #[test]
    fn records_add_up_and_the_backlog_has_a_pace() {
        let mut s = FlowSnapshot::new("f");
        s.observe_record(&record(0, 10, 2, 8, 500), 1_000);
        s.observe_record(&record(1, 20, 2, 6, 2_000), 2_000);
        assert_eq!(s.totals.batches, 2);
        assert_eq!(s.totals.input_rows, 30);
        assert_eq!(s.totals.output_rows, 30);
        assert_eq!(s.durations.count, 2);
        // 0.5 s -> bucket 0.5; 2 s -> bucket 2.5.
        assert_eq!(s.durations.counts[3], 1);
        assert_eq!(s.durations.counts[5], 1);
        assert_eq!(s.rows_visible_ms, Some(2_000));
        assert_eq!(s.freshness_ms(5_000), Some(3_000));
        // 6 files left at 2 files per 2 s.
        assert_eq!(s.backlog_seconds(), Some(6.0));
        assert_eq!(s.failed_since_commit, Some(0));
        s.observe_error("boom".into(), 3_000);
        s.observe_error("boom".into(), 4_000);
        assert_eq!(s.failed_since_commit, Some(2));
        assert_eq!(s.totals.failures, 2);
        // Nothing read and files outstanding: it never drains.
        s.observe_record(&record(2, 0, 0, 6, 100), 5_000);
        assert_eq!(s.backlog_seconds(), Some(f64::INFINITY));
        assert_eq!(
            s.rows_visible_ms,
            Some(2_000),
            "a batch without rows is not fresh"
        );
    }

    #[test]
    fn readers_keep_their_copy_while_the_engine_publishes() {
        let board = Board::default();
        let rx = board.subscribe();
        board.update("f", |s| s.observe_record(&record(0, 10, 1, 0, 10), 1));
        assert!(rx.has_changed().unwrap_or(false));
        let before = board.snapshot();
        board.update("f", |s| s.observe_record(&record(1, 10, 1, 0, 10), 2));
        assert_eq!(before[0].totals.batches, 1);
        assert_eq!(board.get("f").map(|s| s.totals.batches), Some(2));
    }
}
