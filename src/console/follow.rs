//! File followers: what the console learns from a flow's checkpoint,
//! read-only. `weir attach` follows everything here; `weir run` follows only
//! the planned/committed batches and schema versions (its progress and
//! status come from the engine).
//!
//! - `_weir/progress.jsonl` is tailed from the last offset read; a line is
//!   parsed only once its newline is there (a torn last line waits), and a
//!   file that shrank or was replaced (the engine compacts it) is re-read from
//!   the start (the model drops records it already has).
//! - `offsets/` and `commits/` give the last planned and committed batch.
//! - `_schemas/` gives schema versions.
//! - `_weir/alerts.jsonl` gives alert notifications for the timeline (`weir run` and
//!   `weir attach` alike; docs/operate.md).
//! - A Kafka flow's lag ([`kafka_lag`]) is measured against the cluster every
//!   interval: the latest offsets against the last committed `offsets/N`.
//! - `_weir/lock` names the process running the flow. It is read as a plain
//!   file, never locked: a lock holder on this host whose pid is gone counts
//!   as no holder.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::checkpoint::Checkpoint;
use crate::checkpoint::lock::LockHolder;
use crate::clock::now_ms;
use crate::records::StreamingQueryProgress;
use crate::source::files::schema_store;

use super::app::Report;
use super::model::{CheckpointBatches, parse_progress_line};

/// What to follow.
#[derive(Debug, Clone, Copy)]
pub struct FollowOptions {
    pub progress: bool,
    pub lock: bool,
    pub interval: Duration,
}

/// Follows a JSON-lines file from where it was last read: a line is returned once its
/// newline is there (a torn last line waits); a file that shrank or was replaced is
/// re-read from the start.
#[derive(Debug)]
pub struct LineTail {
    path: PathBuf,
    offset: u64,
    inode: u64,
    partial: Vec<u8>,
}

impl LineTail {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        LineTail {
            path: path.into(),
            offset: 0,
            inode: 0,
            partial: Vec::new(),
        }
    }

    /// The complete, non-blank lines appended since the last call (all of them after a rewrite).
    pub fn poll(&mut self) -> std::io::Result<Vec<String>> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if meta.ino() != self.inode || meta.len() < self.offset {
            self.inode = meta.ino();
            self.offset = 0;
            self.partial.clear();
        }
        if meta.len() == self.offset {
            return Ok(Vec::new());
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        file.take(meta.len() - self.offset).read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(n) = self.partial[start..].iter().position(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(&self.partial[start..start + n]);
            if !line.trim().is_empty() {
                out.push(line.into_owned());
            }
            start += n + 1;
        }
        self.partial.drain(..start);
        Ok(out)
    }
}

/// Follows `_weir/progress.jsonl` from where it was last read.
#[derive(Debug)]
pub struct ProgressTail {
    lines: LineTail,
    /// Complete lines that were not a progress record.
    pub skipped: u64,
}

impl ProgressTail {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ProgressTail {
            lines: LineTail::new(path),
            skipped: 0,
        }
    }

    /// The records appended since the last call (all of them after a rewrite).
    pub fn poll(&mut self) -> std::io::Result<Vec<StreamingQueryProgress>> {
        let mut out = Vec::new();
        for line in self.lines.poll()? {
            match parse_progress_line(&line) {
                Some(p) => out.push(p),
                None => self.skipped += 1,
            }
        }
        Ok(out)
    }
}

/// Reads the last planned and committed batch (and when the pending one was planned).
pub fn read_batches(cp: &Checkpoint) -> crate::Result<CheckpointBatches> {
    let last_planned = Checkpoint::batch_ids(&cp.offsets_dir())?.last().copied();
    let last_committed = Checkpoint::batch_ids(&cp.commits_dir())?.last().copied();
    let mut b = CheckpointBatches {
        last_planned,
        last_committed,
        pending_since_ms: None,
    };
    if let Some(p) = b.pending() {
        b.pending_since_ms = cp
            .read_offsets(p)
            .ok()
            .map(|o| o.metadata.batch_timestamp_ms);
    }
    Ok(b)
}

/// Who holds the checkpoint, without taking its lock.
pub fn read_holder(cp: &Checkpoint) -> Option<LockHolder> {
    let text = std::fs::read_to_string(cp.weir_dir().join("lock")).ok()?;
    let holder: LockHolder = serde_json::from_str(text.trim()).ok()?;
    let here = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok());
    if here.as_deref() == Some(holder.host.as_str()) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(holder.pid).ok()?);
        // Signal 0 only checks that the process exists. EPERM: it exists, owned by someone else.
        match nix::sys::signal::kill(pid, None) {
            Ok(()) | Err(nix::errno::Errno::EPERM) => {}
            Err(_) => return None,
        }
    }
    Some(holder)
}

/// The flow name recorded in a checkpoint (`_weir/plan.json`), else the directory's name.
pub fn flow_name(checkpoint: &Path) -> String {
    Checkpoint::at(checkpoint)
        .read_plan()
        .ok()
        .flatten()
        .map(|p| p.flow)
        .unwrap_or_else(|| {
            checkpoint
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| checkpoint.display().to_string())
        })
}

/// Follows one checkpoint until the console stops listening.
pub async fn follow(
    flow: String,
    checkpoint: PathBuf,
    options: FollowOptions,
    tx: mpsc::Sender<Report>,
) {
    let cp = Checkpoint::at(&checkpoint);
    let mut tail = ProgressTail::new(cp.progress_path());
    let mut alerts = LineTail::new(cp.alerts_path());
    let mut batches: Option<CheckpointBatches> = None;
    let mut schemas_seen: Option<u64> = None;
    let mut holder: Option<Option<String>> = None;
    let mut reported_problem = false;
    let mut health_seen: Option<crate::records::HealthRecord> = None;
    let mut interval = tokio::time::interval(options.interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let mut inputs = Vec::new();
        if options.lock {
            let h = read_holder(&cp)
                .map(|h| format!("pid {} on {} (since {})", h.pid, h.host, h.started_at));
            if holder.as_ref() != Some(&h) {
                holder = Some(h.clone());
                inputs.push(Report::Holder {
                    flow: flow.clone(),
                    holder: h,
                    at_ms: now_ms(),
                });
            }
        }
        if options.progress {
            match tail.poll() {
                Ok(records) => inputs.extend(records.into_iter().map(|p| Report::Progress {
                    flow: flow.clone(),
                    progress: Box::new(p),
                })),
                Err(e) if !reported_problem => {
                    reported_problem = true;
                    inputs.push(Report::Problem {
                        flow: flow.clone(),
                        at_ms: now_ms(),
                        text: format!("cannot read {}: {e}", cp.progress_path().display()),
                    });
                }
                Err(_) => {}
            }
        }
        // Alert notifications (fired, resolved) go on the timeline, whoever evaluated them.
        if let Ok(lines) = alerts.poll() {
            for line in lines {
                if let Ok(p) = serde_json::from_str::<crate::alerts::AlertPayload>(&line) {
                    inputs.push(Report::Event {
                        flow: flow.clone(),
                        at_ms: p.at_ms().unwrap_or_else(now_ms),
                        kind: super::model::EventKind::Alert,
                        text: p.timeline_text(),
                    });
                }
            }
        }
        match read_batches(&cp) {
            Ok(b) if batches.as_ref() != Some(&b) => {
                batches = Some(b.clone());
                inputs.push(Report::Batches {
                    flow: flow.clone(),
                    batches: b,
                });
            }
            Ok(_) => {}
            Err(e) if !reported_problem => {
                reported_problem = true;
                inputs.push(Report::Problem {
                    flow: flow.clone(),
                    at_ms: now_ms(),
                    text: e.to_string(),
                });
            }
            Err(_) => {}
        }
        // The engine's latest verdict, also after the flow failed (no progress record then).
        if options.progress
            && let Some(record) = cp.read_health()
            && health_seen.as_ref() != Some(&record)
        {
            let at_ms = chrono::DateTime::parse_from_rfc3339(&record.at)
                .map_or_else(|_| now_ms(), |t| t.timestamp_millis());
            inputs.push(Report::Engine(crate::engine::control::FlowEvent::Health {
                flow: flow.clone(),
                health: Box::new(record.health.clone()),
                at_ms,
            }));
            health_seen = Some(record);
        }
        let newest_schema = Checkpoint::batch_ids(&cp.schemas_dir())
            .ok()
            .and_then(|ids| ids.last().copied());
        if newest_schema.is_some()
            && newest_schema != schemas_seen
            && let Ok(history) = schema_store::history(&cp)
        {
            for (version, entry) in history {
                if schemas_seen.is_none_or(|seen| version > seen) {
                    inputs.push(Report::Schema {
                        flow: flow.clone(),
                        version,
                        at_ms: entry.created_at_ms,
                        text: entry.reason.clone(),
                    });
                }
            }
            schemas_seen = newest_schema;
        }
        for input in inputs {
            if tx.send(input).await.is_err() {
                return;
            }
        }
    }
}

/// The committed offsets of a Kafka flow (source 0): the end offsets of the last
/// committed batch, or the initial offsets before the first commit.
pub fn kafka_committed(checkpoint: &Path) -> Option<crate::source::kafka::PartitionOffsets> {
    let cp = Checkpoint::at(checkpoint);
    match cp.latest_commit().ok().flatten() {
        Some((id, _)) => {
            let seq = cp.read_offsets(id).ok()?;
            let v = seq.offsets.first().cloned().flatten()?;
            crate::source::kafka::KafkaSourceOffset::from_json(&v)
                .ok()
                .map(|o| o.partitions)
        }
        None => crate::source::kafka::read_initial_offsets(&checkpoint.join("sources/0/0"))
            .ok()
            .flatten()
            .map(|o| o.partitions),
    }
}

/// How often the console measures a Kafka flow's lag: a moved latest offset shows
/// within this, one measurement and a data frame (`event_loop::DATA_FRAME`), under
/// the one second of issue 19 (`cargo bench --bench kafka`, `kafka-lag-visible`).
pub const KAFKA_LAG_INTERVAL: Duration = Duration::from_millis(500);

/// [`kafka_lag`] on a thread of its own with a current-thread runtime, so a batch that
/// keeps the engine's runtime busy (decoding, the Delta write) does not delay the lag
/// pane. Stops when the returned sender is dropped (or the console's receiver is).
pub fn spawn_kafka_lag(
    flow: String,
    spec: crate::spec::KafkaSourceSpec,
    checkpoint: PathBuf,
    interval: Duration,
    tx: mpsc::Sender<Report>,
) -> tokio::sync::oneshot::Sender<()> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let failed = format!("the Kafka lag of flow {flow} is not measured");
    let spawned = crate::background::spawn(
        "weir-kafka-lag",
        crate::background::Workers::Caller,
        move || async move {
            tokio::select! {
                _ = kafka_lag(flow, spec, checkpoint, interval, tx) => {}
                _ = stopped => {}
            }
        },
        move |e| tracing::warn!("{failed}: {e}"),
    );
    if let Err(e) = spawned {
        tracing::warn!("the Kafka lag is not measured: no thread: {e}");
    }
    stop
}

/// Measures a Kafka flow's per-partition lag every `interval` and reports it (or why
/// the cluster could not be asked: `source_unavailable`).
pub async fn kafka_lag(
    flow: String,
    spec: crate::spec::KafkaSourceSpec,
    checkpoint: PathBuf,
    interval: Duration,
    tx: mpsc::Sender<Report>,
) {
    let options = match crate::source::kafka::KafkaSourceOptions::from_spec(&spec) {
        Ok(mut o) => {
            // A short timeout: an unreachable cluster shows within seconds.
            o.connection.request_timeout = o.connection.request_timeout.min(interval * 4);
            o
        }
        Err(_) => return,
    };
    let Ok(mut source) = crate::source::kafka::KafkaSource::new(options) else {
        return;
    };
    // Every `interval` from the start of the last measurement (not from its end), so a
    // moved latest offset is seen within `interval` plus one measurement.
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probe = crate::source::kafka::lag::LagProbe::new();
    loop {
        ticks.tick().await;
        let committed = kafka_committed(&checkpoint);
        let lag = probe
            .measure(&mut source, committed.as_ref())
            .await
            .map_err(|e| e.to_string());
        let report = Report::KafkaLag {
            flow: flow.clone(),
            at_ms: now_ms(),
            lag,
        };
        if tx.send(report).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn line(batch: u64) -> String {
        let p = StreamingQueryProgress {
            batch_id: batch,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            ..Default::default()
        };
        serde_json::to_string(&p).unwrap()
    }

    #[test]
    fn tail_waits_for_torn_lines_and_rereads_rewrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress.jsonl");
        let mut tail = ProgressTail::new(&path);
        assert!(tail.poll().unwrap().is_empty(), "a missing file is empty");
        let mut f = std::fs::File::create(&path).unwrap();
        let (l0, l1) = (line(0), line(1));
        write!(f, "{l0}\n{}", &l1[..10]).unwrap();
        assert_eq!(
            tail.poll()
                .unwrap()
                .iter()
                .map(|p| p.batch_id)
                .collect::<Vec<_>>(),
            [0]
        );
        write!(f, "{}\nnot json\n", &l1[10..]).unwrap();
        assert_eq!(
            tail.poll()
                .unwrap()
                .iter()
                .map(|p| p.batch_id)
                .collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(tail.skipped, 1);
        // Compaction: a new file replaces the old one.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, format!("{}\n", line(1))).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(
            tail.poll()
                .unwrap()
                .iter()
                .map(|p| p.batch_id)
                .collect::<Vec<_>>(),
            [1]
        );
    }

    #[test]
    fn holder_of_a_dead_process_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::at(dir.path());
        std::fs::create_dir_all(cp.weir_dir()).unwrap();
        assert!(read_holder(&cp).is_none());
        let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
        let me = format!(
            "{{\"pid\":{},\"host\":\"{host}\",\"started_at\":\"x\"}}",
            std::process::id()
        );
        std::fs::write(cp.weir_dir().join("lock"), me).unwrap();
        assert_eq!(read_holder(&cp).unwrap().pid, std::process::id());
        let dead = format!(
            "{{\"pid\":{},\"host\":\"{host}\",\"started_at\":\"x\"}}",
            i32::MAX - 7
        );
        std::fs::write(cp.weir_dir().join("lock"), dead).unwrap();
        assert!(read_holder(&cp).is_none());
    }
}
