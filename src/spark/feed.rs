//! What `weir attach --spark` follows: per query, the progress records,
//! the checkpoint's planned and committed batches, the query's life (started,
//! idle, terminated with its exception and error class, lost with its
//! driver), and its health verdict, as [`Update`]s the console turns into
//! the same inputs a weir flow produces.
//!
//! ```text
//!  Feed::open(checkpoints, event logs)       rows: one per checkpoint (or per query in the logs)
//!    └─ poll(now, out)                       every 500 ms; reads the logs to their end, or for
//!         │                                  `read_budget` (then the next poll reads on at once)
//!         ├─ AppTail::poll_some ─► QueryStarted / Progress / Idle / Terminated, ApplicationEnd
//!         ├─ offsets/, commits/ (re-listed when the directory changes)
//!         ├─ file source: directory listing vs source log (backlog), every 5 s
//!         ├─ a stale log without QueryTerminatedEvent: the driver was killed or lost
//!         └─ health::classify(recent records, error, checkpoint findings)
//! ```
//!
//! A query is matched to its checkpoint by query id (`metadata` = the events'
//! `id`). Applications in the given logs that run none of the attached queries
//! are named once and ignored. Nothing is written anywhere.
//!
//! With a read budget (`attach --spark`), a long log's history is loaded
//! progressively: the first poll lists the checkpoints and applies what it read
//! of the logs in the budget, each later poll applies the next part
//! ([`Feed::loading`] says how much is read). Until the history is read, rows
//! can still be found and renamed, and the verdicts that need all of it wait:
//! liveness (a lost driver), the restart check and health.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::engine::control::FlowStatus;
use crate::records::StreamingQueryProgress;
use crate::records::{ErrorFacts, Health};
use crate::spec::HealthConfig;

use super::backlog::{FileBacklog, OffsetBacklog, PathMap, described_path};
use super::checkpoint::{SourceKind, SparkCheckpoint, batch_ids};
use super::eventlog::{AppLog, AppTail, Event, Located, LogNote, discover};

/// Events read from a log before they are applied (memory: about 4 KB each; the step is
/// small so the reader thread's working set stays small while `attach --spark` loads
/// a long history).
const EVENTS_PER_STEP: usize = 500;

/// How the feed reads.
#[derive(Debug, Clone)]
pub struct Options {
    pub event_logs: Vec<PathBuf>,
    pub path_map: PathMap,
    /// A running query whose application's log has not grown for this long is lost (killed).
    pub stale_after_ms: i64,
    /// How often a file source's directory is listed.
    pub list_every_ms: i64,
    pub health: HealthConfig,
    /// Whether the log files' modification times count as signs of life (tests with a fixed
    /// clock turn it off and go by the events' own times).
    pub file_clock: bool,
    /// How long one poll (and `open`) reads the event logs before it hands back; the rest is
    /// read by the next polls (the console draws its first frame from the checkpoints and the
    /// start of the logs, then loads the history progressively). `None`: every poll reads
    /// the logs to their end (`check`, `playbook`, tests).
    pub read_budget: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            event_logs: Vec::new(),
            path_map: PathMap::default(),
            stale_after_ms: 120_000,
            list_every_ms: 5_000,
            health: HealthConfig::default(),
            file_clock: true,
            read_budget: None,
        }
    }
}

/// A row of the console: one query.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryInfo {
    pub name: String,
    pub query_id: Option<String>,
    pub checkpoint: Option<PathBuf>,
    /// Local paths of what the query reads and writes (from its progress descriptions).
    pub source_path: Option<PathBuf>,
    pub sink_path: Option<PathBuf>,
}

/// What kind of timeline entry a note is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    Start,
    Stop,
    Status,
    Problem,
    Batch,
}

/// One thing the console learns.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A row: new (every checkpoint at open; a query found in the logs when none was given),
    /// or one whose name or paths changed (an index already handed out: the name of its
    /// `QueryStartedEvent`, the source and sink paths of its first progress record).
    Row { query: usize, info: QueryInfo },
    Progress {
        query: usize,
        progress: Box<StreamingQueryProgress>,
    },
    Batches {
        query: usize,
        last_planned: Option<u64>,
        last_committed: Option<u64>,
        pending_since_ms: Option<i64>,
    },
    Status {
        query: usize,
        status: FlowStatus,
        at_ms: i64,
    },
    /// The query stopped on an error (terminated with an exception, or lost).
    Error {
        query: usize,
        facts: ErrorFacts,
        at_ms: i64,
    },
    Health {
        query: usize,
        health: Box<Health>,
        at_ms: i64,
    },
    /// A timeline entry; `query: None` is for every row.
    Note {
        query: Option<usize>,
        kind: NoteKind,
        at_ms: i64,
        text: String,
    },
}

#[derive(Debug, Default)]
struct QueryState {
    cp: Option<SparkCheckpoint>,
    dirs_seen: Option<(Option<SystemTime>, Option<SystemTime>)>,
    batches: Option<(Option<u64>, Option<u64>)>,
    run_id: Option<String>,
    /// Index of the application running it (its latest run).
    app: Option<usize>,
    alive: bool,
    status: Option<FlowStatus>,
    error: Option<ErrorFacts>,
    lost: bool,
    idle_noted: bool,
    records: VecDeque<StreamingQueryProgress>,
    last_health: Option<Health>,
    health_dirty: bool,
    paths: super::errors::Paths,
    /// File sources' backlogs, by the source's description in the progress records (a
    /// source's index moves when source evolution adds or removes one).
    backlogs: BTreeMap<String, FileBacklog>,
    /// The newest batch whose record set which backlogs are followed.
    backlogs_batch: Option<u64>,
    unreachable_noted: bool,
    checkpoint_findings: Vec<String>,
    checked_at_commit: Option<Option<u64>>,
    noted: std::collections::HashSet<String>,
    last_event_ms: i64,
    /// When the current run started (its QueryStartedEvent), until its first record.
    run_started_ms: Option<i64>,
}

/// Per application: what is known beyond its files.
#[derive(Debug, Default)]
struct AppState {
    spark_version: Option<String>,
    ended_ms: Option<i64>,
    clock_ms: i64,
    matched: bool,
    foreign_noted: bool,
    queries_seen: BTreeMap<String, Option<String>>,
}

/// The follower of a set of Spark queries.
pub struct Feed {
    pub queries: Vec<QueryInfo>,
    states: Vec<QueryState>,
    apps: Vec<(AppTail, AppState)>,
    by_id: HashMap<String, usize>,
    /// Rows come from the logs (no checkpoint given).
    discover_rows: bool,
    opts: Options,
    polled: bool,
    /// The logs were read to their end once: rows and their names are fixed.
    history_read: bool,
    /// The last poll stopped at its read budget with more of the logs unread: history is
    /// still loading (liveness, restart checks and health wait until it is read).
    behind: bool,
    /// Of the logs' bytes (compressed): how many were read, of how many, when the last
    /// poll stopped behind.
    loaded_bytes: (u64, u64),
    /// The rows as last handed out (a changed row is handed out again).
    reported: Vec<QueryInfo>,
    /// When the event-log paths were last searched for new applications (a restarted
    /// query is a new application in the same `spark.eventLog.dir`).
    discovered_at_ms: i64,
}

fn dir_name(p: &Path) -> String {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string());
    // `.../windowed_agg/checkpoint` reads better as `windowed_agg`.
    if matches!(
        name.as_str(),
        "checkpoint" | "checkpoints" | "_checkpoint" | "chk" | "cp"
    ) && let Some(parent) = p.parent().and_then(|x| x.file_name())
    {
        return parent.to_string_lossy().into_owned();
    }
    name
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The last batch id of a log directory, probing forward from `last`.
fn probe(dir: &Path, last: Option<u64>) -> Option<u64> {
    let mut at = last;
    loop {
        let next = at.map_or(0, |n| n + 1);
        if dir.join(next.to_string()).exists() {
            at = Some(next);
        } else {
            return at;
        }
    }
}

fn iso_ms(t: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// `spark.eventLog.dir` from `spark-defaults.conf`, else `/tmp/spark-events` when it exists.
pub fn default_event_log_dir() -> Option<PathBuf> {
    let conf_dirs = [
        std::env::var_os("SPARK_CONF_DIR").map(PathBuf::from),
        std::env::var_os("SPARK_HOME").map(|h| PathBuf::from(h).join("conf")),
    ];
    for d in conf_dirs.into_iter().flatten() {
        if let Ok(text) = std::fs::read_to_string(d.join("spark-defaults.conf")) {
            for line in text.lines() {
                let mut parts = line.split_whitespace();
                if parts.next() == Some("spark.eventLog.dir")
                    && let Some(v) = parts.next()
                {
                    let local = PathMap::default().local(v)?;
                    if local.is_dir() {
                        return Some(local);
                    }
                }
            }
        }
    }
    let tmp = PathBuf::from("/tmp/spark-events");
    tmp.is_dir().then_some(tmp)
}

impl Feed {
    /// Opens the checkpoints and logs and reads what they hold, handing every update to `out`.
    /// `Err`: a checkpoint is not a directory, or a log path does not exist.
    pub fn open(
        checkpoints: &[PathBuf],
        opts: Options,
        now_ms: i64,
        out: &mut dyn FnMut(Update),
    ) -> Result<Feed, String> {
        let mut queries = Vec::new();
        let mut states = Vec::new();
        let mut by_id = HashMap::new();
        let mut early_notes = Vec::new();
        for cp_path in checkpoints {
            if !cp_path.is_dir() {
                return Err(format!(
                    "{}: no such checkpoint directory",
                    cp_path.display()
                ));
            }
            let cp = SparkCheckpoint::at(cp_path);
            let query_id = match cp.query_id() {
                Ok(id) => Some(id),
                Err(p) => {
                    early_notes.push((queries.len(), p.to_string()));
                    None
                }
            };
            if let Some(id) = &query_id {
                by_id.insert(id.clone(), queries.len());
            }
            queries.push(QueryInfo {
                name: dir_name(cp_path),
                query_id,
                checkpoint: Some(cp_path.clone()),
                source_path: None,
                sink_path: None,
            });
            states.push(QueryState {
                cp: Some(cp),
                ..Default::default()
            });
        }
        let mut apps = Vec::new();
        for p in &opts.event_logs {
            for app in discover(p)? {
                apps.push((AppTail::new(app), AppState::default()));
            }
        }
        let mut feed = Feed {
            queries,
            states,
            apps,
            by_id,
            discover_rows: checkpoints.is_empty(),
            opts,
            polled: false,
            history_read: false,
            behind: false,
            loaded_bytes: (0, 0),
            reported: Vec::new(),
            discovered_at_ms: now_ms,
        };
        for (q, info) in feed.queries.iter().enumerate() {
            out(Update::Row {
                query: q,
                info: info.clone(),
            });
        }
        feed.reported.clone_from(&feed.queries);
        for (q, text) in early_notes {
            out(Update::Note {
                query: Some(q),
                kind: NoteKind::Problem,
                at_ms: now_ms,
                text,
            });
        }
        feed.poll(now_ms, out);
        Ok(feed)
    }

    /// The newest progress record of a row.
    pub fn last_progress(&self, query: usize) -> Option<&StreamingQueryProgress> {
        self.states.get(query)?.records.back()
    }

    /// The latest health verdict of a row.
    pub fn health(&self, query: usize) -> Option<&Health> {
        self.states.get(query)?.last_health.as_ref()
    }

    /// While the logs' history is still being read (a poll stopped at its read budget): how
    /// much of it was read, in percent of the logs' bytes. `None` once read to the end.
    pub fn loading(&self) -> Option<u8> {
        if !self.behind {
            return None;
        }
        let (read, total) = self.loaded_bytes;
        let pct = read
            .saturating_mul(100)
            .checked_div(total)
            .unwrap_or(0)
            .min(99);
        Some(u8::try_from(pct).unwrap_or(99))
    }

    /// Whether any application log is followed.
    pub fn has_logs(&self) -> bool {
        !self.apps.is_empty()
    }

    /// A one-line description of the logs followed (for the console's title).
    pub fn describe_logs(&self) -> String {
        self.apps
            .iter()
            .map(|(t, s)| {
                format!(
                    "{}{}{}",
                    t.app.app_id,
                    t.codec().map_or(String::new(), |c| format!(" ({c})")),
                    s.spark_version
                        .as_ref()
                        .map_or(String::new(), |v| format!(", Spark {v}"))
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The row of a query id; without checkpoints, a new row for a new query (while opening:
    /// the console's rows are fixed once it shows).
    fn row_for(
        &mut self,
        id: &str,
        name: Option<&str>,
        out: &mut dyn FnMut(Update),
    ) -> Option<usize> {
        if let Some(i) = self.by_id.get(id) {
            return Some(*i);
        }
        if !self.discover_rows || self.history_read {
            return None;
        }
        let i = self.queries.len();
        let short: String = id.chars().take(8).collect();
        let mut name = name.map_or_else(|| format!("query-{short}"), str::to_string);
        if self.queries.iter().any(|q| q.name == name) {
            name = format!("{name}#{}", i + 1);
        }
        let info = QueryInfo {
            name,
            query_id: Some(id.to_string()),
            checkpoint: None,
            source_path: None,
            sink_path: None,
        };
        self.queries.push(info.clone());
        self.reported.push(info.clone());
        self.states.push(QueryState::default());
        self.by_id.insert(id.to_string(), i);
        out(Update::Row { query: i, info });
        Some(i)
    }

    /// Reads what is new; hands every update to `out`.
    pub fn poll(&mut self, now_ms: i64, out: &mut dyn FnMut(Update)) {
        let first = !self.polled;
        self.polled = true;
        let started = Instant::now();
        let budget = self.opts.read_budget;
        let mut behind = false;
        if now_ms - self.discovered_at_ms >= self.opts.list_every_ms {
            self.discovered_at_ms = now_ms;
            for p in self.opts.event_logs.clone() {
                for app in discover(&p).unwrap_or_default() {
                    if !self.apps.iter().any(|(t, _)| t.app.app_id == app.app_id) {
                        self.apps.push((AppTail::new(app), AppState::default()));
                    }
                }
            }
        }
        // 1. Event logs.
        for a in 0..self.apps.len() {
            if behind {
                break;
            }
            let mut events: Vec<Located> = Vec::new();
            let mut notes: Vec<LogNote> = Vec::new();
            // In steps of a few thousand events, each applied before the next is read: a
            // log of 100,000 progress records is never held whole. With a read budget, the
            // rest waits for the next poll (the console draws in between).
            loop {
                let more =
                    self.apps[a]
                        .0
                        .poll_some(EVENTS_PER_STEP, &mut |e| events.push(e), &mut |n| {
                            notes.push(n)
                        });
                for e in events.drain(..) {
                    self.apply(a, e, now_ms, out);
                }
                if !more {
                    break;
                }
                if budget.is_some_and(|b| started.elapsed() >= b) {
                    behind = true;
                    break;
                }
            }
            for n in notes {
                let text = format!("{}: {}", n.path.display(), n.text);
                let targets: Vec<usize> = (0..self.states.len())
                    .filter(|q| self.states[*q].app == Some(a) || self.states[*q].app.is_none())
                    .collect();
                if targets.is_empty() {
                    out(Update::Note {
                        query: None,
                        kind: NoteKind::Problem,
                        at_ms: now_ms,
                        text,
                    });
                } else {
                    for q in targets {
                        out(Update::Note {
                            query: Some(q),
                            kind: NoteKind::Problem,
                            at_ms: now_ms,
                            text: text.clone(),
                        });
                    }
                }
            }
            let (tail, st) = &mut self.apps[a];
            if tail.complete && !behind && !st.matched && !st.foreign_noted && !self.discover_rows {
                st.foreign_noted = true;
                let seen: Vec<String> = st
                    .queries_seen
                    .iter()
                    .map(|(id, n)| {
                        format!(
                            "{}{id}",
                            n.as_ref().map_or(String::new(), |n| format!("{n} "))
                        )
                    })
                    .collect();
                let text = format!(
                    "{}: application {} runs none of the attached queries ({}); ignored",
                    tail.app.path().display(),
                    tail.app.app_id,
                    if seen.is_empty() {
                        "it has no streaming query".to_string()
                    } else {
                        format!("its queries: {}", seen.join(", "))
                    }
                );
                out(Update::Note {
                    query: None,
                    kind: NoteKind::Problem,
                    at_ms: now_ms,
                    text,
                });
            }
        }
        self.behind = behind;
        if behind {
            self.loaded_bytes = self.apps.iter().fold((0, 0), |(r, t), (tail, _)| {
                let (r2, t2) = tail.bytes();
                (r + r2, t + t2)
            });
        } else {
            self.history_read = true;
        }
        // Rows renamed or given paths by what was read.
        for q in 0..self.queries.len() {
            if self.reported.get(q) != Some(&self.queries[q]) {
                let info = self.queries[q].clone();
                if let Some(r) = self.reported.get_mut(q) {
                    r.clone_from(&info);
                }
                out(Update::Row { query: q, info });
            }
        }
        // 2. Liveness: a running query whose log stopped growing (not while the history
        // loads: its last signs of life are not read yet).
        for q in 0..self.states.len() {
            if behind {
                break;
            }
            let Some(a) = self.states[q].app else {
                continue;
            };
            let (tail, st) = &self.apps[a];
            let last_sign = if self.opts.file_clock {
                tail.modified_ms.max(st.clock_ms)
            } else {
                st.clock_ms
            };
            let silent = now_ms - last_sign;
            let s = &mut self.states[q];
            if s.alive
                && !tail.complete
                && st.ended_ms.is_none()
                && silent > self.opts.stale_after_ms
            {
                s.alive = false;
                s.lost = true;
                let at = last_sign;
                let facts = ErrorFacts {
                    kind: crate::records::ErrorKind::DriverLost,
                    domain: crate::records::Domain::External,
                    retryable: true,
                    message: format!(
                        "the event log of application {} stopped at {} without a QueryTerminatedEvent: the driver was killed or lost (restarting the query re-runs its pending batch)",
                        tail.app.app_id,
                        super::iso(at)
                    ),
                    path: None,
                    waiting: false,
                };
                out(Update::Error {
                    query: q,
                    facts: facts.clone(),
                    at_ms: at,
                });
                out(Update::Status {
                    query: q,
                    status: FlowStatus::Failed,
                    at_ms: at,
                });
                s.status = Some(FlowStatus::Failed);
                s.error = Some(facts);
                s.health_dirty = true;
            } else if s.lost && silent <= self.opts.stale_after_ms {
                s.lost = false;
                s.alive = true;
                s.error = None;
                out(Update::Status {
                    query: q,
                    status: FlowStatus::Idle,
                    at_ms: now_ms,
                });
                out(Update::Note {
                    query: Some(q),
                    kind: NoteKind::Start,
                    at_ms: now_ms,
                    text: "the event log grows again: the query is alive".into(),
                });
                s.status = Some(FlowStatus::Idle);
                s.health_dirty = true;
            }
        }
        // 3. Checkpoints, backlogs, health (health once the history is read: a verdict on
        // the first records of a long log would be about the past).
        for q in 0..self.states.len() {
            self.follow_checkpoint(q, now_ms, first, out);
            self.follow_backlog(q, now_ms, out);
            if !behind {
                self.classify(q, now_ms, out);
            }
        }
    }

    fn note(
        &mut self,
        q: usize,
        kind: NoteKind,
        at_ms: i64,
        text: String,
        out: &mut dyn FnMut(Update),
    ) {
        out(Update::Note {
            query: Some(q),
            kind,
            at_ms,
            text,
        });
    }

    fn set_status(
        &mut self,
        q: usize,
        status: FlowStatus,
        at_ms: i64,
        out: &mut dyn FnMut(Update),
    ) {
        if self.states[q].status != Some(status) {
            self.states[q].status = Some(status);
            out(Update::Status {
                query: q,
                status,
                at_ms,
            });
        }
    }

    /// Query `q` of application `a` reported an idle trigger at `at`.
    fn idle(&mut self, a: usize, q: usize, at: i64, why: &str, out: &mut dyn FnMut(Update)) {
        self.apps[a].1.clock_ms = self.apps[a].1.clock_ms.max(at);
        self.states[q].last_event_ms = at;
        if !self.states[q].idle_noted {
            self.states[q].idle_noted = true;
            self.note(q, NoteKind::Status, at, why.into(), out);
        }
        if self.states[q].alive {
            self.set_status(q, FlowStatus::Idle, at, out);
        }
    }

    fn apply(&mut self, a: usize, e: Located, now_ms: i64, out: &mut dyn FnMut(Update)) {
        let app_id = self.apps[a].0.app.app_id.clone();
        match e.event {
            Event::LogStart { spark_version } => self.apps[a].1.spark_version = Some(spark_version),
            Event::AppStart { timestamp_ms, .. } => {
                if let Some(t) = timestamp_ms {
                    self.apps[a].1.clock_ms = self.apps[a].1.clock_ms.max(t);
                }
            }
            Event::AppEnd { timestamp_ms } => {
                let at = timestamp_ms.unwrap_or(now_ms);
                self.apps[a].1.ended_ms = Some(at);
                self.apps[a].1.clock_ms = self.apps[a].1.clock_ms.max(at);
                for q in 0..self.states.len() {
                    if self.states[q].app == Some(a) && self.states[q].alive {
                        self.states[q].alive = false;
                        self.note(
                            q,
                            NoteKind::Stop,
                            at,
                            format!("application {app_id} ended"),
                            out,
                        );
                        self.set_status(q, FlowStatus::Stopped, at, out);
                    }
                }
            }
            Event::QueryStarted {
                id,
                run_id,
                name,
                timestamp,
            } => {
                self.apps[a].1.queries_seen.insert(id.clone(), name.clone());
                let at = timestamp.as_deref().and_then(iso_ms).unwrap_or(now_ms);
                self.apps[a].1.clock_ms = self.apps[a].1.clock_ms.max(at);
                let Some(q) = self.row_for(&id, name.as_deref(), out) else {
                    return;
                };
                self.apps[a].1.matched = true;
                // While the history loads, a checkpoint's row takes the query's name (the
                // console renames it).
                if !self.history_read
                    && let Some(n) = &name
                    && self.queries[q].name != *n
                    && !self.queries.iter().any(|x| x.name == *n)
                {
                    self.queries[q].name.clone_from(n);
                }
                let s = &mut self.states[q];
                s.app = Some(a);
                s.run_id = Some(run_id);
                s.alive = true;
                s.lost = false;
                s.error = None;
                s.idle_noted = false;
                s.health_dirty = true;
                s.last_event_ms = at;
                s.run_started_ms = Some(at);
                // `starting` on the timeline; the run's id follows with its first record.
                self.states[q].status = None;
                self.set_status(q, FlowStatus::Starting, at, out);
            }
            Event::QueryProgress(raw) if super::progress::is_idle_progress(&raw) => {
                // Spark before 3.5 reports an idle trigger as a progress event that
                // repeats a batch id with no rows (3.5+ sends QueryIdleEvent instead): the
                // same as an idle event, not a batch.
                let Some(q) = self.by_id.get(&raw.id).copied() else {
                    return;
                };
                let at = iso_ms(&raw.timestamp).unwrap_or(now_ms);
                self.idle(
                    a,
                    q,
                    at,
                    "idle: no new data (a progress event without a batch, Spark < 3.5)",
                    out,
                );
            }
            Event::QueryProgress(raw) => {
                let id = raw.id.clone();
                let name = raw.name.clone();
                self.apps[a]
                    .1
                    .queries_seen
                    .entry(id.clone())
                    .or_insert(name.clone());
                let Some(q) = self.row_for(&id, name.as_deref(), out) else {
                    return;
                };
                self.apps[a].1.matched = true;
                let mut p = super::progress::normalise(*raw);
                let start = iso_ms(&p.timestamp).unwrap_or(now_ms);
                let end = start + p.batch_duration as i64;
                self.apps[a].1.clock_ms = self.apps[a].1.clock_ms.max(end);
                self.learn_paths(q, &p);
                self.enrich(q, &mut p, start);
                // The first batch of a run planned before the run started: Spark re-runs it
                // (offsets/N written by the previous run, same id, same offsets).
                if let Some(started) = self.states[q].run_started_ms.take()
                    && let Some(cp) = &self.states[q].cp
                    && cp
                        .read_offsets(p.batch_id)
                        .is_ok_and(|o| o.batch_timestamp_ms < started)
                {
                    p.weir.replayed = true;
                }
                let s = &mut self.states[q];
                if s.app.is_none() || s.run_id.as_deref() != Some(p.run_id.as_str()) {
                    // A run whose start is not in the logs read (rolled away, or a listener file).
                    s.app = Some(a);
                    s.run_id = Some(p.run_id.clone());
                    s.alive = !self.apps[a].0.complete;
                    s.error = None;
                }
                s.idle_noted = false;
                s.last_event_ms = end;
                s.records.push_back(p.clone());
                while s.records.len() > self.opts.health.window_batches.max(1) + 1 {
                    s.records.pop_front();
                }
                s.health_dirty = true;
                let alive = s.alive;
                out(Update::Progress {
                    query: q,
                    progress: Box::new(p),
                });
                if alive {
                    self.set_status(q, FlowStatus::Idle, end, out);
                }
            }
            Event::QueryIdle { id, timestamp, .. } => {
                let Some(q) = self.by_id.get(&id).copied() else {
                    return;
                };
                let at = timestamp.as_deref().and_then(iso_ms).unwrap_or(now_ms);
                self.idle(a, q, at, "idle: no new data (QueryIdleEvent)", out);
            }
            Event::QueryTerminated {
                id,
                exception,
                error_class,
                ..
            } => {
                let Some(q) = self.by_id.get(&id).copied() else {
                    return;
                };
                let at = self.apps[a].1.clock_ms.max(self.states[q].last_event_ms);
                self.states[q].alive = false;
                self.states[q].health_dirty = true;
                match exception.filter(|x| !x.trim().is_empty()) {
                    Some(text) => {
                        let routed = super::errors::route(
                            &text,
                            error_class.as_deref(),
                            &self.states[q].paths,
                        );
                        let line = format!(
                            "query terminated with {}",
                            routed.error_class.as_deref().map_or_else(
                                || "an exception".to_string(),
                                |c| format!("error class {c}")
                            )
                        );
                        self.note(q, NoteKind::Stop, at, line, out);
                        out(Update::Error {
                            query: q,
                            facts: routed.facts.clone(),
                            at_ms: at,
                        });
                        self.states[q].error = Some(routed.facts);
                        self.set_status(q, FlowStatus::Failed, at, out);
                    }
                    None => {
                        self.states[q].error = None;
                        self.note(
                            q,
                            NoteKind::Stop,
                            at,
                            "query stopped (QueryTerminatedEvent, no exception)".into(),
                            out,
                        );
                        self.set_status(q, FlowStatus::Stopped, at, out);
                    }
                }
            }
        }
    }

    /// Source and sink paths from a record's descriptions.
    fn learn_paths(&mut self, q: usize, p: &StreamingQueryProgress) {
        let s = &mut self.states[q];
        if s.paths.sources.is_empty() {
            s.paths.sources = p
                .sources
                .iter()
                .filter_map(|x| described_path(&x.description).map(str::to_string))
                .collect();
            if let Some(first) = s.paths.sources.first() {
                self.queries[q].source_path = self.opts.path_map.local(first);
            }
        }
        if s.paths.sink.is_none() {
            s.paths.sink = described_path(&p.sink.description).map(str::to_string);
            if let Some(sink) = &s.paths.sink {
                self.queries[q].sink_path = self.opts.path_map.local(sink);
            }
        }
        // File sources: follow their directory against their source log; a source the
        // newest record no longer has (removed by source evolution) is no longer followed.
        if s.backlogs_batch.is_some_and(|b| b > p.batch_id) {
            return;
        }
        s.backlogs_batch = Some(p.batch_id);
        s.backlogs
            .retain(|d, _| p.sources.iter().any(|x| x.description == *d));
        let mut names: Option<Vec<Option<String>>> = None;
        for (i, src) in p.sources.iter().enumerate() {
            if s.backlogs.contains_key(&src.description)
                || SourceKind::of_description(&src.description) != SourceKind::File
            {
                continue;
            }
            let Some(dir) =
                described_path(&src.description).and_then(|d| self.opts.path_map.local(d))
            else {
                continue;
            };
            let log = s.cp.as_ref().and_then(|cp| {
                // The record's sources are in the order of its batch's offsets file.
                let names = names.get_or_insert_with(|| {
                    cp.read_offsets(p.batch_id)
                        .map(|o| o.sources.into_iter().map(|s| s.name).collect())
                        .ok()
                        .or_else(|| cp.read_offsets_last_names())
                        .unwrap_or_default()
                });
                let name = names.get(i).cloned().flatten();
                cp.source_log(i, name.as_deref())
            });
            let mut b = FileBacklog::new(dir, log, self.opts.path_map.clone());
            b.refresh_log();
            s.backlogs.insert(src.description.clone(), b);
        }
    }

    /// Fills what Spark's record lacks and weir's classifier reads: a file source's backlog
    /// (`numFilesOutstanding`, `numBytesOutstanding`), the batch's files (`weir.numFiles`),
    /// and the backlog of Kafka (`numOffsetsBehindLatest`), Delta (`numVersionsBehind`) and
    /// rate (`numRowsBehindLatest`) sources from their latest and end offsets.
    fn enrich(&mut self, q: usize, p: &mut StreamingQueryProgress, start_ms: i64) {
        let s = &mut self.states[q];
        let mut files = 0;
        let mut bytes = 0;
        let mut any = false;
        for src in p.sources.iter_mut() {
            // Kafka, Delta, rate: Spark's latest offset against the batch's end offset.
            if let Some(b) =
                OffsetBacklog::of(&src.description, &src.end_offset, &src.latest_offset)
            {
                for (k, v) in b.metrics() {
                    src.metrics.entry(k.into()).or_insert(v);
                }
            }
            let Some(b) = s.backlogs.get_mut(&src.description) else {
                continue;
            };
            if b.listed_at_ms.is_none() {
                b.relist(start_ms);
            }
            if let Some((f, by)) = b.batch_files(p.batch_id) {
                files += f;
                bytes += by;
                any = true;
            }
            if let Some((f, by)) = b.outstanding(p.batch_id, start_ms) {
                src.metrics
                    .entry("numFilesOutstanding".into())
                    .or_insert(f.to_string());
                src.metrics
                    .entry("numBytesOutstanding".into())
                    .or_insert(by.to_string());
            }
        }
        if any {
            p.weir.num_files = files;
            p.weir.num_bytes = bytes;
        }
    }

    fn follow_backlog(&mut self, q: usize, now_ms: i64, out: &mut dyn FnMut(Update)) {
        let every = self.opts.list_every_ms;
        let mut notes = Vec::new();
        let mut missing = None;
        let unreachable_noted = self.states[q].unreachable_noted;
        for b in self.states[q].backlogs.values_mut() {
            if b.listed_at_ms.is_some_and(|t| now_ms - t < every) {
                continue;
            }
            let was_missing = b.missing;
            notes.extend(b.refresh_log());
            b.relist(now_ms);
            if b.missing && !was_missing {
                missing = Some(b.dir.clone());
            }
            if !b.seen && !unreachable_noted {
                notes.push(format!(
                    "source directory {} is not reachable from here: the backlog is unknown (a copy elsewhere? see --path-map)",
                    b.dir.display()
                ));
            }
        }
        if notes.iter().any(|n| n.contains("not reachable")) {
            self.states[q].unreachable_noted = true;
        }
        for n in notes {
            if self.states[q].noted.insert(n.clone()) {
                let kind = if n.contains("not reachable") {
                    NoteKind::Status
                } else {
                    NoteKind::Problem
                };
                self.note(q, kind, now_ms, n, out);
            }
        }
        if let Some(dir) = missing {
            let facts = ErrorFacts {
                kind: crate::records::ErrorKind::SourceUnavailable,
                domain: crate::records::Domain::External,
                retryable: true,
                message: format!(
                    "source directory {} no longer exists: Spark's file source keeps running and reads nothing; a restart fails with PATH_NOT_FOUND",
                    dir.display()
                ),
                path: Some(dir.display().to_string()),
                waiting: false,
            };
            out(Update::Error {
                query: q,
                facts: facts.clone(),
                at_ms: now_ms,
            });
            self.states[q].error = Some(facts);
            self.states[q].health_dirty = true;
        }
    }

    fn follow_checkpoint(
        &mut self,
        q: usize,
        now_ms: i64,
        first: bool,
        out: &mut dyn FnMut(Update),
    ) {
        let Some(cp) = self.states[q].cp.clone() else {
            return;
        };
        let stamps = (mtime(&cp.offsets_dir()), mtime(&cp.commits_dir()));
        if self.states[q].dirs_seen == Some(stamps) && !first {
            return;
        }
        self.states[q].dirs_seen = Some(stamps);
        // After the first listing, new batches are found by probing the next ids (a
        // checkpoint of 100,000 batches is not re-listed every second); a checkpoint whose
        // last file went away (rolled back, replaced) is listed again.
        let (planned, committed) = match self.states[q].batches {
            Some((p, c))
                if p.is_none_or(|p| cp.offsets_path(p).exists())
                    && c.is_none_or(|c| cp.commit_path(c).exists()) =>
            {
                (probe(&cp.offsets_dir(), p), probe(&cp.commits_dir(), c))
            }
            _ => (
                batch_ids(&cp.offsets_dir())
                    .ok()
                    .and_then(|v| v.last().copied()),
                batch_ids(&cp.commits_dir())
                    .ok()
                    .and_then(|v| v.last().copied()),
            ),
        };
        if self.states[q].batches != Some((planned, committed)) {
            if self.states[q].batches.map(|b| b.0) != Some(planned) {
                for r in cp.removed_sources() {
                    let text = format!(
                        "source {} removed (source evolution) at batch {}; last offset {} in batch {}",
                        r.name,
                        r.at_batch,
                        r.last_offset.map_or("-".to_string(), |o| o.to_string()),
                        r.last_batch
                    );
                    if self.states[q].noted.insert(text.clone()) {
                        self.note(q, NoteKind::Status, now_ms, text, out);
                    }
                }
            }
            self.states[q].batches = Some((planned, committed));
            let pending = planned.filter(|p| committed.is_none_or(|c| p > &c));
            let pending_since_ms =
                pending.and_then(|p| cp.read_offsets(p).ok().map(|o| o.batch_timestamp_ms));
            out(Update::Batches {
                query: q,
                last_planned: planned,
                last_committed: committed,
                pending_since_ms,
            });
        }
        // Restart findings, only for a query that is not running (Spark has what it needs while
        // it runs), known once the history is read (whether it runs is not known before).
        if !self.behind
            && !self.states[q].alive
            && self.states[q].checked_at_commit != Some(committed)
        {
            self.states[q].checked_at_commit = Some(committed);
            if let Ok(v) = super::check::restart_check(cp.root()) {
                let findings: Vec<String> = v
                    .reasons
                    .iter()
                    .map(|r| {
                        format!(
                            "{}: {}{}",
                            r.path.display(),
                            r.message,
                            r.spark_error_class
                                .as_deref()
                                .map_or(String::new(), |c| format!(" (Spark: {c})"))
                        )
                    })
                    .collect();
                for f in &findings {
                    if self.states[q].noted.insert(f.clone()) {
                        self.note(
                            q,
                            NoteKind::Problem,
                            now_ms,
                            format!("restart check: {f}"),
                            out,
                        );
                    }
                }
                if findings != self.states[q].checkpoint_findings {
                    self.states[q].checkpoint_findings = findings;
                    self.states[q].health_dirty = true;
                }
            }
        }
    }

    fn classify(&mut self, q: usize, now_ms: i64, out: &mut dyn FnMut(Update)) {
        let s = &mut self.states[q];
        if !s.health_dirty {
            return;
        }
        s.health_dirty = false;
        let records: Vec<StreamingQueryProgress> = s.records.iter().cloned().collect();
        let error = s.error.clone();
        let health = crate::health::classify(crate::health::Inputs {
            records: &records,
            error: error.as_ref(),
            checkpoint_problems: &s.checkpoint_findings,
            checkpoint_file: None,
            now_ms,
            config: &self.opts.health,
        });
        if s.last_health.as_ref() != Some(&health) {
            s.last_health = Some(health.clone());
            let at = s.last_event_ms.max(
                records
                    .last()
                    .and_then(|r| iso_ms(&r.timestamp))
                    .unwrap_or(0),
            );
            out(Update::Health {
                query: q,
                health: Box::new(health),
                at_ms: if at > 0 { at } else { now_ms },
            });
        }
    }
}

impl SparkCheckpoint {
    /// The source names of the last offsets file (named sources), by source index.
    pub fn read_offsets_last_names(&self) -> Option<Vec<Option<String>>> {
        let last = batch_ids(&self.offsets_dir()).ok()?.last().copied()?;
        let o = self.read_offsets(last).ok()?;
        Some(o.sources.into_iter().map(|s| s.name).collect())
    }
}

/// The applications an event-log path holds (for `--json` and messages).
pub fn applications(path: &Path) -> Result<Vec<AppLog>, String> {
    discover(path)
}
