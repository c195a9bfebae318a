//! Spark event logs: where an application's files are, tailing them with
//! bounded memory, and the events a streaming console needs.
//!
//! Layouts (`spark.eventLog.dir`):
//!
//! ```text
//! eventlog_v2_<appId>/                  rolling (default since Spark 3.0; rolling.enabled)
//!   events_<seq>_<appId>[.<codec>]      seq from 1, read in order; only events_1 has SparkListenerLogStart
//!   appstatus_<appId>[.inprogress]     empty marker; .inprogress while the application runs
//! <appId>[.<codec>][.inprogress]        legacy single file; renamed without .inprogress at the end
//! ```
//!
//! A path given by the user may be one application (a rolling directory, one
//! of its `events_*` files, a legacy file) or a directory of many
//! applications. Each file is read from the offset reached last time, through
//! an incremental decoder ([`super::codec`]); a line is parsed only once its
//! newline arrived (a torn last line waits, and is reported only when the
//! file can no longer grow). Lines of events a console does not need (tasks,
//! stages, SQL plans: most of a log's bytes) are recognised by their
//! `"Event"` name at the start of the line and skipped without parsing, and
//! without buffering them when they are long. Memory is bounded by one block
//! of the codec plus the longest streaming event line.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::codec::{Codec, Decoder};

/// The streaming events' `Event` names.
pub const QUERY_STARTED: &str =
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent";
pub const QUERY_PROGRESS: &str =
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent";
pub const QUERY_IDLE: &str = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent";
pub const QUERY_TERMINATED: &str =
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent";
const STREAMING_PREFIX: &str = "org.apache.spark.sql.streaming.StreamingQueryListener$";

/// Bytes read from a file per step (compressed). Small: Spark's zstd logs compress ~100x,
/// and one step's decoded text (and its events) is held at once.
const READ_CHUNK: usize = 16 << 10;
/// Streaming event lines longer than this are skipped (with a note): no progress record is this big.
const MAX_LINE: usize = 16 << 20;

/// How an application's events are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `eventlog_v2_<appId>/` with `events_<seq>_<appId>` files.
    Rolling { dir: PathBuf },
    /// One file; its name may lose `.inprogress` when the application ends.
    Single { path: PathBuf },
    /// JSON lines of `progress.json()` records (a listener's log), not an event log.
    ProgressLines { path: PathBuf },
}

/// One application's event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppLog {
    /// From the file or directory name (`local-1796033209024`).
    pub app_id: String,
    pub layout: Layout,
}

impl AppLog {
    pub fn path(&self) -> &Path {
        match &self.layout {
            Layout::Rolling { dir } => dir,
            Layout::Single { path } | Layout::ProgressLines { path } => path,
        }
    }
}

fn is_hidden(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".crc")
}

/// `events_3_local-17.zstd` -> (3, `local-17`).
fn parse_events_name(name: &str) -> Option<(u64, String)> {
    let rest = name.strip_prefix("events_")?;
    let (seq, app) = rest.split_once('_')?;
    let seq = seq.parse().ok()?;
    let app = app.strip_suffix(".inprogress").unwrap_or(app);
    let app = match app.rsplit_once('.') {
        Some((a, "zstd" | "zst" | "lz4" | "snappy" | "lzf")) => a,
        _ => app,
    };
    Some((seq, app.to_string()))
}

/// `local-17.zstd.inprogress` -> `local-17`.
fn app_of_single(name: &str) -> String {
    let n = name.strip_suffix(".inprogress").unwrap_or(name);
    match n.rsplit_once('.') {
        Some((a, "zstd" | "zst" | "lz4" | "snappy" | "lzf")) => a.to_string(),
        _ => n.to_string(),
    }
}

/// Whether a file holds `progress.json()` lines rather than listener events.
fn looks_like_progress_lines(path: &Path) -> bool {
    let mut buf = [0u8; 4096];
    let Ok(mut f) = File::open(path) else {
        return false;
    };
    let n = f.read(&mut buf).unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]);
    let first = head.lines().next().unwrap_or("").trim_start();
    first.starts_with('{') && !first.contains("\"Event\"") && first.contains("\"batchId\"")
}

/// The applications at `path` (see the module docs for the layouts).
pub fn discover(path: &Path) -> Result<Vec<AppLog>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if meta.is_file() {
        if let Some((_, app)) = parse_events_name(&name) {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            return Ok(vec![AppLog {
                app_id: app,
                layout: Layout::Rolling { dir },
            }]);
        }
        if looks_like_progress_lines(path) {
            return Ok(vec![AppLog {
                app_id: name,
                layout: Layout::ProgressLines {
                    path: path.to_path_buf(),
                },
            }]);
        }
        Codec::from_file_name(&name).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(vec![AppLog {
            app_id: app_of_single(&name),
            layout: Layout::Single {
                path: path.to_path_buf(),
            },
        }]);
    }
    let entries: Vec<(String, PathBuf, bool)> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path(),
                e.path().is_dir(),
            )
        })
        .filter(|(n, _, _)| !is_hidden(n))
        .collect();
    // A rolling application directory itself.
    if let Some(app) = name.strip_prefix("eventlog_v2_") {
        return Ok(vec![AppLog {
            app_id: app.to_string(),
            layout: Layout::Rolling {
                dir: path.to_path_buf(),
            },
        }]);
    }
    if let Some(app) = entries
        .iter()
        .find_map(|(n, _, dir)| (!dir).then(|| parse_events_name(n)).flatten())
    {
        return Ok(vec![AppLog {
            app_id: app.1,
            layout: Layout::Rolling {
                dir: path.to_path_buf(),
            },
        }]);
    }
    // A directory of applications.
    let mut apps = Vec::new();
    for (n, p, dir) in entries {
        if dir {
            if let Some(app) = n.strip_prefix("eventlog_v2_") {
                apps.push(AppLog {
                    app_id: app.to_string(),
                    layout: Layout::Rolling { dir: p },
                });
            }
        } else if Codec::from_file_name(&n).is_ok() {
            if looks_like_progress_lines(&p) {
                apps.push(AppLog {
                    app_id: n.clone(),
                    layout: Layout::ProgressLines { path: p },
                });
            } else {
                apps.push(AppLog {
                    app_id: app_of_single(&n),
                    layout: Layout::Single { path: p },
                });
            }
        }
    }
    apps.sort_by(|a, b| a.app_id.cmp(&b.app_id));
    Ok(apps)
}

/// An event a console needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    LogStart {
        spark_version: String,
    },
    AppStart {
        app_id: Option<String>,
        app_name: Option<String>,
        timestamp_ms: Option<i64>,
    },
    AppEnd {
        timestamp_ms: Option<i64>,
    },
    QueryStarted {
        id: String,
        run_id: String,
        name: Option<String>,
        timestamp: Option<String>,
    },
    QueryProgress(Box<super::progress::RawProgress>),
    QueryIdle {
        id: String,
        run_id: String,
        timestamp: Option<String>,
    },
    QueryTerminated {
        id: String,
        run_id: String,
        exception: Option<String>,
        error_class: Option<String>,
    },
}

/// Something wrong with a log, for the timeline (once per occurrence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogNote {
    pub path: PathBuf,
    pub text: String,
}

/// An event with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub event: Event,
    pub path: PathBuf,
    pub line: u64,
}

/// The `"Event"` name at the start of a line, without parsing the line.
pub fn event_name(line: &[u8]) -> Option<&str> {
    let head = &line[..line.len().min(256)];
    let key = b"\"Event\":\"";
    let at = head.windows(key.len()).position(|w| w == key)? + key.len();
    let end = head[at..].iter().position(|b| *b == b'"')? + at;
    std::str::from_utf8(&head[at..end]).ok()
}

/// Whether events of this name are parsed (the rest are skipped unread).
fn wanted(name: &str) -> bool {
    name.starts_with(STREAMING_PREFIX)
        || matches!(
            name,
            "SparkListenerLogStart"
                | "SparkListenerApplicationStart"
                | "SparkListenerApplicationEnd"
        )
}

fn iso_ms(t: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// Parses one complete line. `Ok(None)`: an event not needed here.
pub fn parse_line(line: &[u8]) -> Result<Option<Event>, String> {
    let Some(name) = event_name(line) else {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        return Err("not a Spark listener event (no \"Event\" field)".into());
    };
    if !wanted(name) {
        return Ok(None);
    }
    #[derive(serde::Deserialize)]
    struct LogStart {
        #[serde(rename = "Spark Version", default)]
        version: String,
    }
    #[derive(serde::Deserialize)]
    struct AppStart {
        #[serde(rename = "App ID", default)]
        app_id: Option<String>,
        #[serde(rename = "App Name", default)]
        app_name: Option<String>,
        #[serde(rename = "Timestamp", default)]
        timestamp: Option<i64>,
    }
    #[derive(serde::Deserialize)]
    struct AppEnd {
        #[serde(rename = "Timestamp", default)]
        timestamp: Option<i64>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Query {
        id: String,
        #[serde(default)]
        run_id: String,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        timestamp: Option<String>,
        #[serde(default)]
        exception: Option<String>,
        #[serde(default)]
        error_class_on_exception: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Progress {
        progress: super::progress::RawProgress,
    }
    let bad = |e: serde_json::Error| format!("{name}: {e}");
    Ok(Some(match name {
        "SparkListenerLogStart" => {
            let e: LogStart = serde_json::from_slice(line).map_err(bad)?;
            Event::LogStart {
                spark_version: e.version,
            }
        }
        "SparkListenerApplicationStart" => {
            let e: AppStart = serde_json::from_slice(line).map_err(bad)?;
            Event::AppStart {
                app_id: e.app_id,
                app_name: e.app_name,
                timestamp_ms: e.timestamp,
            }
        }
        "SparkListenerApplicationEnd" => {
            let e: AppEnd = serde_json::from_slice(line).map_err(bad)?;
            Event::AppEnd {
                timestamp_ms: e.timestamp,
            }
        }
        QUERY_PROGRESS => {
            let e: Progress = serde_json::from_slice(line).map_err(bad)?;
            Event::QueryProgress(Box::new(e.progress))
        }
        QUERY_STARTED | QUERY_IDLE | QUERY_TERMINATED => {
            let e: Query = serde_json::from_slice(line).map_err(bad)?;
            match name {
                QUERY_STARTED => Event::QueryStarted {
                    id: e.id,
                    run_id: e.run_id,
                    name: e.name,
                    timestamp: e.timestamp,
                },
                QUERY_IDLE => Event::QueryIdle {
                    id: e.id,
                    run_id: e.run_id,
                    timestamp: e.timestamp,
                },
                _ => Event::QueryTerminated {
                    id: e.id,
                    run_id: e.run_id,
                    exception: e.exception,
                    error_class: e.error_class_on_exception,
                },
            }
        }
        other => {
            return Err(format!(
                "unknown streaming event type {:?} (written by a newer Spark?), skipped",
                other.trim_start_matches(STREAMING_PREFIX)
            ));
        }
    }))
}

/// Parses a `progress.json()` line (a listener's log).
pub fn parse_progress_line(line: &[u8]) -> Result<Option<Event>, String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice::<super::progress::RawProgress>(line)
        .map(|p| Some(Event::QueryProgress(Box::new(p))))
        .map_err(|e| format!("not a progress record: {e}"))
}

/// One file, followed from where it was last read.
#[derive(Debug)]
pub struct FileTail {
    pub path: PathBuf,
    codec: Codec,
    decoder: Decoder,
    /// Compressed bytes consumed.
    offset: u64,
    inode: u64,
    /// The start of a line whose newline has not arrived.
    partial: Vec<u8>,
    /// Inside a long line of an event that is not needed: drop bytes until the newline.
    skipping: bool,
    line_no: u64,
    progress_lines: bool,
    /// The decoder failed: nothing more is read from this file.
    broken: bool,
    /// Bytes of the file when it was last read.
    pub size: u64,
}

impl FileTail {
    pub fn new(path: PathBuf, progress_lines: bool) -> Result<FileTail, String> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let codec = if progress_lines {
            Codec::None
        } else {
            Codec::from_file_name(&name).map_err(|e| format!("{}: {e}", path.display()))?
        };
        let decoder = Decoder::new(codec).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(FileTail {
            path,
            codec,
            decoder,
            offset: 0,
            inode: 0,
            partial: Vec::new(),
            skipping: false,
            line_no: 0,
            progress_lines,
            broken: false,
            size: 0,
        })
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Whether bytes appended before the last poll are still unread (a poll stopped by its
    /// event budget).
    pub fn unread(&self) -> bool {
        !self.broken && self.offset < self.size
    }

    /// Reads what was appended; calls `on_event` per event, `on_note` per problem. Stops
    /// reading new chunks once `budget` events were handed out (decrementing it).
    pub fn poll(
        &mut self,
        budget: &mut usize,
        on_event: &mut dyn FnMut(Located),
        on_note: &mut dyn FnMut(LogNote),
    ) -> std::io::Result<()> {
        if self.broken {
            return Ok(());
        }
        let mut file = File::open(&self.path)?;
        let meta = file.metadata()?;
        self.size = meta.len();
        if self.inode != 0 && (meta.ino() != self.inode || meta.len() < self.offset) {
            // Replaced or truncated: a log never shrinks, so start over on the new file.
            on_note(LogNote {
                path: self.path.clone(),
                text: "the file was replaced or truncated; reading it again from the start".into(),
            });
            *self = FileTail::new(self.path.clone(), self.progress_lines)
                .map_err(std::io::Error::other)?;
            self.size = meta.len();
        }
        self.inode = meta.ino();
        if meta.len() == self.offset {
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut chunk = vec![0u8; READ_CHUNK];
        let mut text = Vec::new();
        let mut remaining = meta.len() - self.offset;
        let emitted = std::cell::Cell::new(0usize);
        let mut counted = |e: Located| {
            emitted.set(emitted.get() + 1);
            on_event(e);
        };
        let on_event: &mut dyn FnMut(Located) = &mut counted;
        while remaining > 0 && emitted.get() < *budget {
            let want = (remaining as usize).min(READ_CHUNK);
            let n = file.read(&mut chunk[..want])?;
            if n == 0 {
                break;
            }
            remaining -= n as u64;
            self.offset += n as u64;
            text.clear();
            if let Err(e) = self.decoder.feed(&chunk[..n], &mut text) {
                on_note(LogNote {
                    path: self.path.clone(),
                    text: format!(
                        "corrupt {} data {e}; the rest of this file is not read",
                        self.codec
                    ),
                });
                self.broken = true;
                self.lines(&text, on_event, on_note);
                return Ok(());
            }
            self.lines(&text, on_event, on_note);
        }
        *budget = budget.saturating_sub(emitted.get());
        Ok(())
    }

    fn lines(
        &mut self,
        text: &[u8],
        on_event: &mut dyn FnMut(Located),
        on_note: &mut dyn FnMut(LogNote),
    ) {
        let mut start = 0;
        while start < text.len() {
            let nl = text[start..].iter().position(|b| *b == b'\n');
            let end = nl.map_or(text.len(), |n| start + n);
            if self.skipping {
                if nl.is_some() {
                    self.skipping = false;
                    self.line_no += 1;
                }
            } else {
                self.partial.extend_from_slice(&text[start..end]);
                if nl.is_some() {
                    self.line_no += 1;
                    let line = std::mem::take(&mut self.partial);
                    self.handle(&line, on_event, on_note);
                } else if self.partial.len() >= 256 {
                    // Unfinished: keep it only if it is an event we parse.
                    let keep = self.progress_lines || event_name(&self.partial).is_none_or(wanted);
                    if !keep {
                        self.partial.clear();
                        self.skipping = true;
                    } else if self.partial.len() > MAX_LINE {
                        on_note(LogNote {
                            path: self.path.clone(),
                            text: format!(
                                "line {} is longer than {} MB; skipped",
                                self.line_no + 1,
                                MAX_LINE >> 20
                            ),
                        });
                        self.partial.clear();
                        self.skipping = true;
                    }
                }
            }
            start = end + usize::from(nl.is_some());
        }
    }

    fn handle(
        &mut self,
        line: &[u8],
        on_event: &mut dyn FnMut(Located),
        on_note: &mut dyn FnMut(LogNote),
    ) {
        let parsed = if self.progress_lines {
            parse_progress_line(line)
        } else {
            parse_line(line)
        };
        match parsed {
            Ok(Some(event)) => on_event(Located {
                event,
                path: self.path.clone(),
                line: self.line_no,
            }),
            Ok(None) => {}
            Err(e) => on_note(LogNote {
                path: self.path.clone(),
                text: format!("line {}: {e}", self.line_no),
            }),
        }
    }

    /// Called when the file can no longer grow: reports a torn last line or an
    /// unfinished compressed frame (the file was cut short).
    pub fn finish(&mut self, on_note: &mut dyn FnMut(LogNote)) {
        if self.broken {
            return;
        }
        if self.decoder.incomplete() {
            on_note(LogNote {
                path: self.path.clone(),
                text: format!(
                    "ends inside a {} {} ({} byte(s) undecodable): the file was cut short; events after line {} are lost",
                    self.codec,
                    if self.codec == Codec::Zstd {
                        "frame"
                    } else {
                        "block"
                    },
                    self.decoder.held(),
                    self.line_no
                ),
            });
            self.broken = true;
        } else if !self.partial.is_empty() {
            on_note(LogNote {
                path: self.path.clone(),
                text: format!(
                    "ends with a half-written line {} ({} bytes), ignored",
                    self.line_no + 1,
                    self.partial.len()
                ),
            });
            self.partial.clear();
            self.broken = true;
        }
    }
}

/// An application's log, followed file by file.
#[derive(Debug)]
pub struct AppTail {
    pub app: AppLog,
    files: Vec<(u64, FileTail)>,
    /// The application has ended (rolling: `appstatus` without `.inprogress`; legacy: no
    /// `.inprogress`); its files no longer grow.
    pub complete: bool,
    /// Newest modification time among its files (ms).
    pub modified_ms: i64,
    finished: bool,
}

impl AppTail {
    pub fn new(app: AppLog) -> AppTail {
        AppTail {
            app,
            files: Vec::new(),
            complete: false,
            modified_ms: 0,
            finished: false,
        }
    }

    /// The files of a rolling directory in order, and whether the application completed.
    fn rolling_files(dir: &Path) -> std::io::Result<(Vec<(u64, PathBuf)>, bool)> {
        let mut files = Vec::new();
        let mut complete = false;
        for e in std::fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_hidden(&name) {
                continue;
            }
            if let Some((seq, _)) = parse_events_name(&name) {
                files.push((seq, e.path()));
            } else if name.starts_with("appstatus_") && !name.ends_with(".inprogress") {
                complete = true;
            }
        }
        files.sort();
        Ok((files, complete))
    }

    /// Reads everything new in every file of the application.
    pub fn poll(&mut self, on_event: &mut dyn FnMut(Located), on_note: &mut dyn FnMut(LogNote)) {
        while self.poll_some(usize::MAX, on_event, on_note) {}
    }

    /// Reads what is new, in file order, until about `max_events` events were handed out
    /// (the current read step ends first); `true` when more is left to read. A caller that
    /// applies each step's events before the next keeps memory bounded on a long log.
    pub fn poll_some(
        &mut self,
        max_events: usize,
        on_event: &mut dyn FnMut(Located),
        on_note: &mut dyn FnMut(LogNote),
    ) -> bool {
        // An ended application's files were read to their end: nothing can change.
        if self.finished {
            return false;
        }
        let (paths, complete) = match &self.app.layout {
            Layout::Rolling { dir } => match Self::rolling_files(dir) {
                Ok(x) => x,
                Err(e) => {
                    on_note(LogNote {
                        path: dir.clone(),
                        text: format!("cannot list: {e}"),
                    });
                    return false;
                }
            },
            Layout::Single { path } | Layout::ProgressLines { path } => {
                let current = if path.exists() {
                    Some(path.clone())
                } else {
                    // Renamed at the end (`.inprogress` dropped): find it again by its app id.
                    path.parent().and_then(|d| {
                        std::fs::read_dir(d).ok()?.flatten().find_map(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            (!is_hidden(&n) && app_of_single(&n) == self.app.app_id)
                                .then(|| e.path())
                        })
                    })
                };
                match current {
                    Some(p) => {
                        let done = !p.to_string_lossy().ends_with(".inprogress");
                        if let Layout::Single { path } = &mut self.app.layout {
                            path.clone_from(&p);
                        }
                        (vec![(1, p)], done)
                    }
                    None => {
                        on_note(LogNote {
                            path: path.clone(),
                            text: "the event log file is gone".into(),
                        });
                        return false;
                    }
                }
            }
        };
        let progress_lines = matches!(self.app.layout, Layout::ProgressLines { .. });
        for (seq, path) in &paths {
            match self.files.iter_mut().find(|(s, _)| s == seq) {
                Some((_, t)) => t.path.clone_from(path),
                None => match FileTail::new(path.clone(), progress_lines) {
                    Ok(t) => self.files.push((*seq, t)),
                    Err(e) => on_note(LogNote {
                        path: path.clone(),
                        text: e,
                    }),
                },
            }
        }
        self.files.sort_by_key(|(s, _)| *s);
        // Known from the listing, before any event is handed out.
        self.complete = complete || progress_lines;
        let n = self.files.len();
        let mut budget = max_events;
        let mut more = false;
        for (i, (_, tail)) in self.files.iter_mut().enumerate() {
            if budget == 0 {
                more = true;
                break;
            }
            if let Err(e) = tail.poll(&mut budget, on_event, on_note) {
                on_note(LogNote {
                    path: tail.path.clone(),
                    text: format!("cannot read: {e}"),
                });
            }
            if let Ok(m) = std::fs::metadata(&tail.path)
                && let Ok(t) = m.modified()
            {
                let ms = chrono::DateTime::<chrono::Utc>::from(t).timestamp_millis();
                self.modified_ms = self.modified_ms.max(ms);
            }
            if tail.unread() {
                more = true;
                break;
            }
            // A file followed by another (rolled) cannot grow any more.
            if i + 1 < n {
                tail.finish(on_note);
            }
        }
        if more {
            return true;
        }
        if complete && !self.finished {
            self.finished = true;
            if let Some((_, last)) = self.files.last_mut() {
                last.finish(on_note);
            }
        }
        false
    }

    /// Bytes (compressed) of its files read so far, and the files' sizes now.
    pub fn bytes(&self) -> (u64, u64) {
        self.files.iter().fold((0, 0), |(read, total), (_, t)| {
            let size = std::fs::metadata(&t.path).map_or(t.size, |m| m.len());
            (read + t.offset, total + size.max(t.offset))
        })
    }

    /// The codecs of its files (for the header line).
    pub fn codec(&self) -> Option<Codec> {
        self.files.first().map(|(_, t)| t.codec())
    }

    /// Finish every file as if the application ended (a log that stopped growing long ago).
    pub fn finish_all(&mut self, on_note: &mut dyn FnMut(LogNote)) {
        if self.finished {
            return;
        }
        self.finished = true;
        for (_, t) in &mut self.files {
            t.finish(on_note);
        }
    }

    /// Millisecond time from an ISO string (helper for callers).
    pub fn iso_ms(t: &str) -> Option<i64> {
        iso_ms(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            parse_events_name("events_12_local-17.zstd"),
            Some((12, "local-17".to_string()))
        );
        assert_eq!(
            parse_events_name("events_1_app-2026_0001"),
            Some((1, "app-2026_0001".to_string()))
        );
        assert_eq!(app_of_single("local-17.lz4.inprogress"), "local-17");
        assert_eq!(app_of_single("local-17"), "local-17");
        assert_eq!(
            event_name(br#"{"Event":"SparkListenerTaskEnd","x":1}"#),
            Some("SparkListenerTaskEnd")
        );
    }

    #[test]
    fn lines_of_unneeded_events_are_skipped_unread_and_bad_lines_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("local-1");
        let big = format!(
            "{{\"Event\":\"org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart\",\"plan\":\"{}\"}}\n",
            "x".repeat(100_000)
        );
        let text = format!(
            "{{\"Event\":\"SparkListenerLogStart\",\"Spark Version\":\"4.3.0\"}}\n{big}not json\n{{\"Event\":\"org.apache.spark.sql.streaming.StreamingQueryListener$QueryFutureEvent\",\"id\":\"q\"}}\n{{\"Event\":\"org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent\",\"id\":\"q\",\"runId\":\"r\",\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}\n{{\"Event\":\"org.apache"
        );
        std::fs::write(&path, text).unwrap();
        let mut tail = FileTail::new(path.clone(), false).unwrap();
        let mut events = Vec::new();
        let mut notes = Vec::new();
        let mut budget = usize::MAX;
        tail.poll(&mut budget, &mut |e| events.push(e), &mut |n| notes.push(n))
            .unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[1].line, 5);
        assert!(matches!(events[1].event, Event::QueryIdle { .. }));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0]
                .text
                .starts_with("line 3: not a Spark listener event")
        );
        assert!(
            notes[1]
                .text
                .contains("unknown streaming event type \"QueryFutureEvent\"")
        );
        assert!(
            tail.partial.len() < 300,
            "the long SQL line was not buffered"
        );
        tail.finish(&mut |n| notes.push(n));
        assert!(
            notes[2].text.contains("half-written line 6"),
            "{:?}",
            notes[2]
        );
    }

    #[test]
    fn poll_some_reads_a_long_log_in_steps_without_losing_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("local-1");
        let mut text =
            String::from("{\"Event\":\"SparkListenerLogStart\",\"Spark Version\":\"4.3.0\"}\n");
        for i in 0..3000 {
            text.push_str(&format!(
                "{{\"Event\":\"org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent\",\"id\":\"q\",\"runId\":\"r{i}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}\n"
            ));
        }
        std::fs::write(&path, &text).unwrap();
        let app = discover(&path).unwrap().remove(0);
        let mut tail = AppTail::new(app);
        let mut steps = 0;
        let mut seen = 0;
        loop {
            let mut step = 0;
            let more = tail.poll_some(100, &mut |_| step += 1, &mut |n| panic!("{n:?}"));
            seen += step;
            steps += 1;
            if !more {
                break;
            }
        }
        // 3001 events in ~300 KB: several 64 KiB steps, every event once.
        assert_eq!(seen, 3001);
        assert!(steps > 2, "{steps} step(s)");
        assert!(!tail.poll_some(100, &mut |_| panic!("read twice"), &mut |_| {}));
    }
}
