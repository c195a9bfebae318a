//! Restart drills (`weir drill`): prove a pipeline's exactly-once on its own input.
//!
//! ```text
//!  pipeline.toml ──► work dir copy ──┬─► reference/  one crash-free run (available_now)
//!  (never touched)   input/ (copied) └─► drill/      crash at each failpoint, SIGKILL at
//!                                                    N random moments, restart until drained
//!                                     compare drill/ with reference/ per table: rows,
//!                                     duplicates and losses by key, versions, txn ids
//! ```
//!
//! The drill never touches the pipeline's own checkpoints or tables: the flows'
//! inputs are copied once into `WORK/input/` (modification times kept, so files
//! are planned in the same order; at most `max_input_bytes`, a file source's oldest
//! files first; removed when the drill ends), and both runs get their own checkpoints and
//! Delta tables under `WORK/drill/` and `WORK/reference/`, through a rewritten copy
//! of the pipeline file whose every output path is checked to lie in the work dir.
//! Both runs read the same input copy, so columns such as the source file path
//! are equal; columns computed from the wall clock (`current_timestamp()`) are
//! left out of the default key.
//!
//! The processes are the real binary (`std::env::current_exe`), `weir run
//! --headless --trigger available-now`, each killed the way production dies:
//! `WEIR_FAILPOINT` aborts at a step of the batch protocol, SIGKILL anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::checkpoint::progress::read_progress;
use crate::engine::failpoint::FAILPOINTS;
use crate::pipeline;
use crate::spec::{FlowSpec, SinkSpec};

/// A drill that could not be run (as opposed to one that ran and failed).
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    /// The pipeline or the flags are not drillable; the message says why.
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A run without any crash failed: the pipeline itself does not work on this input.
    #[error("the crash-free {run} run failed (exit {code:?}); its log: {log}")]
    RunFailed {
        run: String,
        code: Option<i32>,
        log: PathBuf,
    },
    #[error("reading table {table}: {message}")]
    Table { table: PathBuf, message: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DrillError + '_ {
    move |source| DrillError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a drill is asked to do.
#[derive(Debug, Clone)]
pub struct DrillOptions {
    pub pipeline: PathBuf,
    /// Only these flows (default: all). Inputs produced by flows left out are copied.
    pub flows: Option<Vec<String>>,
    /// Random SIGKILLs on top of one crash at each failpoint per flow.
    pub kills: u32,
    pub seed: u64,
    /// Key columns for duplicates and losses (default: see [`default_key`]).
    pub key: Vec<String>,
    pub work_dir: PathBuf,
    /// The weir binary to run (default: this executable).
    pub exe: PathBuf,
    /// Overrides every file source's `max_files_per_trigger` in both copies (more,
    /// smaller batches give every failpoint a batch to crash in).
    pub max_files_per_trigger: Option<u64>,
    /// Bound on the bytes of input copied into `WORK/input/` (default
    /// [`DEFAULT_MAX_INPUT_BYTES`]): a file source's oldest files up to it (the drill then
    /// proves exactly-once on that prefix, said in the notes); a Delta table or a single
    /// file over it is refused.
    pub max_input_bytes: u64,
}

/// The default bound on a drill's input copy: 1 GiB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 1 << 30;

/// One process start of the drill.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// `failpoint`, `sigkill` or `drain`.
    pub kind: String,
    pub flow: Option<String>,
    pub failpoint: Option<String>,
    /// For a SIGKILL: when, after the start (ms).
    pub kill_after_ms: Option<u64>,
    /// The process died as planned (failpoint hit or SIGKILL landed before it ended).
    pub crashed: bool,
    pub exit_code: Option<i32>,
    pub log: PathBuf,
}

/// The result for one flow's table.
#[derive(Debug, Clone, Serialize)]
pub struct FlowReport {
    pub flow: String,
    pub table: PathBuf,
    pub key: Vec<String>,
    /// Input rows: read by the crash-free run from the same input copy (its progress
    /// log is complete; a crashed process may die between a commit and its record).
    pub rows_in: u64,
    /// Committed batches of the drill without a progress record (killed in between).
    pub batches_without_progress: u64,
    pub rows_out: u64,
    pub reference_rows_out: u64,
    /// Rows beyond the reference's count, per key.
    pub duplicates: u64,
    /// Rows missing against the reference's count, per key.
    pub lost: u64,
    pub batches: u64,
    pub batches_replayed: u64,
    pub delta_version: Option<i64>,
    pub reference_delta_version: Option<i64>,
    /// Application transaction id of the flow (its query id) and the batch it records.
    pub txn_app_id: String,
    pub txn_version: Option<i64>,
    pub last_committed_batch: Option<u64>,
    pub pass: bool,
}

/// The drill's report (`--json` prints it as is).
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    pub pipeline: PathBuf,
    pub work_dir: PathBuf,
    pub seed: u64,
    pub kills_requested: u32,
    pub failpoints_hit: u64,
    pub sigkills_landed: u64,
    pub process_starts: u64,
    pub attempts: Vec<Attempt>,
    pub flows: Vec<FlowReport>,
    /// Files and bytes copied into `WORK/input/` (removed when the drill ends).
    pub input_files: u64,
    pub input_bytes: u64,
    /// What limits the drill's evidence (e.g. failpoints never reached).
    pub notes: Vec<String>,
    pub pass: bool,
}

/// How many times a run is restarted after exit code 3 (schema widened) before giving up.
const SCHEMA_RESTARTS: usize = 20;

struct Prepared {
    /// The rewritten pipeline for `drill/` and for `reference/`.
    drill: PathBuf,
    reference: PathBuf,
    flows: Vec<FlowSpec>,
    input: InputCopy,
}

/// What `WORK/input/` holds.
#[derive(Debug, Default)]
struct InputCopy {
    files: u64,
    bytes: u64,
    /// Inputs copied only in part (the bound), one note each.
    notes: Vec<String>,
}

/// Removes the drill's input copy when the drill ends, however it ends: it is weir's own
/// copy, never the user's data.
struct RemoveInputCopy(PathBuf);

impl Drop for RemoveInputCopy {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), error = %e, "could not remove the drill's input copy");
        }
    }
}

/// Resolves a path as the pipeline loader does (relative to the file's directory).
fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    };
    std::path::absolute(&joined).unwrap_or(joined)
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "input".into())
}

/// Copies one file, keeping its modification time (file sources order by it).
fn copy_file(
    src: &Path,
    dst: &Path,
    modified: Option<std::time::SystemTime>,
) -> Result<(), DrillError> {
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    std::fs::copy(src, dst).map_err(io(src))?;
    if let Some(modified) = modified {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dst)
            .map_err(io(dst))?;
        f.set_modified(modified).map_err(io(dst))?;
    }
    Ok(())
}

/// A regular file below an input directory (links are not followed, as the files source).
struct InputFile {
    path: PathBuf,
    size: u64,
    modified: Option<std::time::SystemTime>,
}

fn list_files(dir: &Path, out: &mut Vec<InputFile>) -> Result<(), DrillError> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let meta = entry.metadata().map_err(io(&path))?;
        if meta.is_dir() {
            list_files(&path, out)?;
        } else if meta.is_file() {
            out.push(InputFile {
                path,
                size: meta.len(),
                modified: meta.modified().ok(),
            });
        }
    }
    Ok(())
}

/// Copies input `from` to `to` within what is left of the bound (`left`, in bytes).
/// A file source's directory is copied oldest file first (the order it is read in) up to
/// the bound; a Delta table or a single file is copied whole or refused.
fn copy_input(
    from: &Path,
    to: &Path,
    bound: u64,
    left: &mut u64,
    copied: &mut InputCopy,
) -> Result<(), DrillError> {
    let over = |what: &str, bytes: u64| {
        DrillError::Usage(format!(
            "input {} is {what} of {}, over what is left of the drill's input bound ({} of --max-input-bytes {}); raise the bound or drill fewer flows (--flow)",
            from.display(),
            crate::spec::ByteSize(bytes),
            crate::spec::ByteSize(*left),
            crate::spec::ByteSize(bound)
        ))
    };
    if from.is_file() {
        let meta = std::fs::metadata(from).map_err(io(from))?;
        if meta.len() > *left {
            return Err(over("a file", meta.len()));
        }
        copy_file(from, to, meta.modified().ok())?;
        *left -= meta.len();
        copied.files += 1;
        copied.bytes += meta.len();
        return Ok(());
    }
    if !from.is_dir() {
        std::fs::create_dir_all(to).map_err(io(to))?;
        return Ok(());
    }
    let mut files = Vec::new();
    list_files(from, &mut files)?;
    let total: u64 = files.iter().map(|f| f.size).sum();
    if from.join("_delta_log").is_dir() {
        // A Delta table is only readable whole.
        if total > *left {
            return Err(over("a Delta table", total));
        }
    } else {
        files.sort_by(|a, b| (a.modified, &a.path).cmp(&(b.modified, &b.path)));
    }
    std::fs::create_dir_all(to).map_err(io(to))?;
    let (mut n, mut bytes) = (0u64, 0u64);
    for f in &files {
        if bytes + f.size > *left {
            break;
        }
        let rel = f.path.strip_prefix(from).unwrap_or(&f.path);
        copy_file(&f.path, &to.join(rel), f.modified)?;
        n += 1;
        bytes += f.size;
    }
    if n < files.len() as u64 {
        if n == 0 {
            return Err(over("a directory whose oldest file is", files[0].size));
        }
        copied.notes.push(format!(
            "input {} was copied in part: its {n} oldest of {} files ({} of {}), within --max-input-bytes {}; the drill proves exactly-once on them",
            from.display(),
            files.len(),
            crate::spec::ByteSize(bytes),
            crate::spec::ByteSize(total),
            crate::spec::ByteSize(bound)
        ));
    }
    *left -= bytes;
    copied.files += n;
    copied.bytes += bytes;
    Ok(())
}

/// Writes the work dir: `input/` (copied once), `drill/pipeline.toml`, `reference/pipeline.toml`.
fn prepare(options: &DrillOptions) -> Result<Prepared, DrillError> {
    let loaded = pipeline::load(&options.pipeline).map_err(|e| DrillError::Usage(e.to_string()))?;
    let flows: Vec<FlowSpec> = match &options.flows {
        None => loaded.flows.clone(),
        Some(names) => names
            .iter()
            .map(|n| {
                loaded.flow(n).cloned().ok_or_else(|| {
                    DrillError::Usage(format!(
                        "{}: no flow named {n:?}; flows: {}",
                        options.pipeline.display(),
                        loaded
                            .flows
                            .iter()
                            .map(|f| f.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    for f in &flows {
        if !matches!(f.sink, SinkSpec::Delta { .. } | SinkSpec::DeltaMerge { .. }) {
            return Err(DrillError::Usage(format!(
                "flow {}: the drill compares Delta tables; its sink is {}",
                f.name,
                f.sink.describe()
            )));
        }
    }
    let text = std::fs::read_to_string(&options.pipeline).map_err(io(&options.pipeline))?;
    let raw: toml::Table = toml::from_str(&text)
        .map_err(|e| DrillError::Usage(format!("{}: {e}", options.pipeline.display())))?;
    let base = options
        .pipeline
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = std::path::absolute(base).map_err(io(base))?;
    let raw_flows: Vec<toml::Table> = raw
        .get("flow")
        .and_then(|f| f.as_array())
        .map(|a| a.iter().filter_map(|t| t.as_table().cloned()).collect())
        .unwrap_or_default();
    let selected = |t: &toml::Table| {
        t.get("name")
            .and_then(|n| n.as_str())
            .is_some_and(|n| flows.iter().any(|f| f.name == n))
    };
    let str_at = |t: &toml::Table, a: &str, b: &str| -> Option<String> {
        t.get(a)
            .and_then(|x| x.as_table())
            .and_then(|x| x.get(b))
            .and_then(|x| x.as_str())
            .map(str::to_string)
    };
    // Outputs of the selected flows, by resolved path -> flow name.
    let mut outputs: BTreeMap<PathBuf, String> = BTreeMap::new();
    for t in raw_flows.iter().filter(|t| selected(t)) {
        if let (Some(name), Some(p)) = (
            t.get("name").and_then(|n| n.as_str()),
            str_at(t, "sink", "path"),
        ) {
            outputs.insert(resolve(&base, &p), name.to_string());
        }
    }
    // Inputs: source paths and join tables not produced by a selected flow, copied once.
    let input_root = options.work_dir.join("input");
    let mut inputs: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
    let mut left = options.max_input_bytes;
    let mut copied = InputCopy::default();
    let join_tables = |t: &toml::Table| -> Vec<String> {
        t.get("join")
            .and_then(|j| j.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|j| j.get("table").and_then(|x| x.as_str()).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    // `[flow.stream_join] source = { path = ... }`: the right stream of a stream-stream join.
    let right_source = |t: &toml::Table| -> Option<String> {
        t.get("stream_join")
            .and_then(|j| j.get("source"))
            .and_then(|s| s.get("path"))
            .and_then(|p| p.as_str())
            .map(str::to_string)
    };
    // `[[flow.union]] source = { path = ... }`: a union's other sources.
    let union_sources = |t: &toml::Table| -> Vec<String> {
        t.get("union")
            .and_then(|u| u.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.get("source").and_then(|s| s.get("path")))
                    .filter_map(|p| p.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for t in raw_flows.iter().filter(|t| selected(t)) {
        let paths = str_at(t, "source", "path")
            .into_iter()
            .chain(join_tables(t))
            .chain(right_source(t))
            .chain(union_sources(t));
        for p in paths {
            let abs = resolve(&base, &p);
            if outputs.contains_key(&abs) || inputs.contains_key(&abs) {
                continue;
            }
            if abs.starts_with(&options.work_dir) || options.work_dir.starts_with(&abs) {
                return Err(DrillError::Usage(format!(
                    "the work dir {} and the input {} overlap; choose another --work-dir",
                    options.work_dir.display(),
                    abs.display()
                )));
            }
            let slot = input_root.join(format!("{}", inputs.len()));
            let dst = slot.join(name_of(&abs));
            copy_input(&abs, &dst, options.max_input_bytes, &mut left, &mut copied)?;
            inputs.insert(abs, dst);
        }
    }
    let write_copy = |run: &str| -> Result<PathBuf, DrillError> {
        let root = options.work_dir.join(run);
        let mut out_flows = Vec::new();
        for t in raw_flows.iter().filter(|t| selected(t)) {
            let mut t = t.clone();
            let name = t
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("flow")
                .to_string();
            let path_str = |p: PathBuf| toml::Value::String(p.display().to_string());
            t.insert(
                "checkpoint".into(),
                path_str(root.join("checkpoints").join(&name)),
            );
            t.insert(
                "trigger".into(),
                toml::Value::String("available_now".into()),
            );
            let out_of = |flow: &str| root.join("tables").join(flow);
            // A path the flow reads: the copy of the upstream flow's table, or of the input.
            let mapped = |p: &str| {
                let abs = resolve(&base, p);
                match outputs.get(&abs) {
                    Some(upstream) => out_of(upstream),
                    None => inputs
                        .get(&abs)
                        .cloned()
                        .unwrap_or_else(|| root.join("missing-input")),
                }
            };
            let limit_files = |source: &mut toml::Table| {
                if let Some(n) = options.max_files_per_trigger {
                    source.insert(
                        "max_files_per_trigger".into(),
                        toml::Value::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
                    );
                }
            };
            if let Some(sink) = t.get_mut("sink").and_then(|s| s.as_table_mut()) {
                sink.insert("path".into(), path_str(out_of(&name)));
            }
            if let Some(late) = t.get_mut("late_rows").and_then(|s| s.as_table_mut()) {
                late.insert("path".into(), path_str(root.join("late_rows").join(&name)));
            }
            // What a source writes besides the sink goes under the run's root too:
            // quarantine files and tables, and its schema history.
            let side_outputs = |source: &mut toml::Table, tag: &str| {
                for (key, dir) in [
                    ("bad_records_path", "bad_records"),
                    ("bad_records_table", "bad_records_tables"),
                    ("schema_location", "schemas"),
                ] {
                    if source.contains_key(key) {
                        source.insert(key.into(), path_str(root.join(dir).join(tag)));
                    }
                }
            };
            if let Some(source) = t.get_mut("source").and_then(|s| s.as_table_mut()) {
                if let Some(p) = source.get("path").and_then(|p| p.as_str()) {
                    source.insert("path".into(), path_str(mapped(p)));
                }
                limit_files(source);
                side_outputs(source, &name);
            }
            if let Some(source) = t
                .get_mut("stream_join")
                .and_then(|j| j.as_table_mut())
                .and_then(|j| j.get_mut("source"))
                .and_then(|s| s.as_table_mut())
            {
                if let Some(p) = source.get("path").and_then(|p| p.as_str()) {
                    source.insert("path".into(), path_str(mapped(p)));
                    limit_files(source);
                }
                side_outputs(source, &format!("{name}-right"));
            }
            if let Some(union) = t.get_mut("union").and_then(|u| u.as_array_mut()) {
                for (i, source) in union
                    .iter_mut()
                    .filter_map(|u| u.as_table_mut())
                    .filter_map(|u| u.get_mut("source"))
                    .filter_map(|s| s.as_table_mut())
                    .enumerate()
                {
                    if let Some(p) = source.get("path").and_then(|p| p.as_str()) {
                        source.insert("path".into(), path_str(mapped(p)));
                    }
                    limit_files(source);
                    side_outputs(source, &format!("{name}-union-{i}"));
                }
            }
            if let Some(joins) = t.get_mut("join").and_then(|j| j.as_array_mut()) {
                for join in joins.iter_mut().filter_map(|j| j.as_table_mut()) {
                    if let Some(p) = join.get("table").and_then(|x| x.as_str()) {
                        join.insert("table".into(), path_str(mapped(p)));
                    }
                }
            }
            out_flows.push(toml::Value::Table(t));
        }
        let mut doc = toml::Table::new();
        doc.insert("flow".into(), toml::Value::Array(out_flows));
        std::fs::create_dir_all(&root).map_err(io(&root))?;
        let path = root.join("pipeline.toml");
        let body = format!(
            "# weir drill: a copy of {} with every output under {}\n{}",
            options.pipeline.display(),
            root.display(),
            toml::to_string(&doc).map_err(|e| DrillError::Usage(e.to_string()))?
        );
        std::fs::write(&path, body).map_err(io(&path))?;
        // Safety net: every output of the copy lies inside the work dir.
        let copy = pipeline::load(&path).map_err(|e| DrillError::Usage(e.to_string()))?;
        let work_dir = crate::spec::normalize(&options.work_dir);
        for f in &copy.flows {
            let mut outs = vec![f.checkpoint.clone()];
            outs.extend(f.tables_written().into_iter().map(|(_, p)| p));
            for source in f.sources() {
                outs.extend(source.quarantine().0.map(Path::to_path_buf));
                if let crate::spec::SourceSpec::Files(files) = source {
                    outs.extend(files.schema_location.clone());
                }
            }
            for o in outs {
                if !crate::spec::normalize(&o).starts_with(&work_dir) {
                    return Err(DrillError::Usage(format!(
                        "flow {}: output {} would lie outside the work dir; refusing to run",
                        f.name,
                        o.display()
                    )));
                }
            }
        }
        Ok(path)
    };
    let drill = write_copy("drill")?;
    let reference = write_copy("reference")?;
    Ok(Prepared {
        drill,
        reference,
        flows,
        input: copied,
    })
}

/// The default key of a flow: its `delta_merge` keys (an upsert keeps one row per key),
/// else its `drop_duplicates` columns when it has some, else
/// every output column except those computed from the wall clock (a `select` item
/// calling `current_timestamp()` or `now()`), which differ between two runs: the flow's
/// own, and those of the pipeline's flows upstream of it (`flows`: a flow whose sink is a
/// table this one reads), which a `select "*"` carries through under the same name.
pub fn default_key(flow: &FlowSpec, flows: &[FlowSpec], columns: &[String]) -> Vec<String> {
    if let SinkSpec::DeltaMerge { keys, .. } = &flow.sink {
        return keys.clone();
    }
    if let Some(keys) = &flow.stateful.drop_duplicates
        && !keys.is_empty()
    {
        return keys.clone();
    }
    let clock = clock_columns(flow, flows, 0);
    columns
        .iter()
        .filter(|c| !clock.iter().any(|k| k.eq_ignore_ascii_case(c)))
        .cloned()
        .collect()
}

/// The columns `flow` and the flows upstream of it compute from the wall clock.
fn clock_columns(flow: &FlowSpec, flows: &[FlowSpec], depth: usize) -> Vec<String> {
    let mut clock = own_clock_columns(flow);
    // A pipeline's flows form a DAG (validated); the depth bound is only a guard.
    if depth < flows.len() {
        let reads = flow.reads();
        for upstream in flows
            .iter()
            .filter(|u| u.writes().is_some_and(|t| reads.contains(&t)))
        {
            clock.extend(clock_columns(upstream, flows, depth + 1));
        }
    }
    clock
}

/// The names of `flow`'s `select` items calling `current_timestamp()` or `now()`.
fn own_clock_columns(flow: &FlowSpec) -> Vec<String> {
    flow.select
        .iter()
        .flatten()
        .filter(|item| {
            let l = item.to_ascii_lowercase();
            l.contains("current_timestamp") || l.contains("now()")
        })
        .filter_map(|item| {
            let lower = item.to_ascii_lowercase();
            lower.rfind(" as ").map(|i| {
                item[i + 4..]
                    .trim()
                    .trim_matches('"')
                    .trim_matches('`')
                    .to_string()
            })
        })
        .collect()
}

fn weir_run(
    exe: &Path,
    pipeline: &Path,
    flow: Option<&str>,
    log: &Path,
) -> Result<Command, DrillError> {
    let file = std::fs::File::create(log).map_err(io(log))?;
    let mut c = Command::new(exe);
    c.args(["run", "--headless", "--trigger", "available-now"]);
    if let Some(f) = flow {
        c.args(["--flow", f]);
    }
    c.arg(pipeline)
        .env_remove("WEIR_FAILPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(file));
    Ok(c)
}

fn code(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt as _;
    status.code().or_else(|| status.signal().map(|s| 128 + s))
}

struct Runner<'a> {
    options: &'a DrillOptions,
    logs: PathBuf,
    starts: u64,
}

impl Runner<'_> {
    fn log(&mut self, label: &str) -> PathBuf {
        self.starts += 1;
        self.logs.join(format!("{:03}-{label}.log", self.starts))
    }

    /// Runs to completion, restarting after exit 3 (schema widened, as Auto Loader asks).
    fn drain(
        &mut self,
        run: &str,
        pipeline: &Path,
        attempts: &mut Vec<Attempt>,
    ) -> Result<(), DrillError> {
        for _ in 0..SCHEMA_RESTARTS {
            let log = self.log(&format!("{run}-drain"));
            let status = weir_run(&self.options.exe, pipeline, None, &log)?
                .status()
                .map_err(io(&self.options.exe))?;
            attempts.push(Attempt {
                kind: "drain".into(),
                flow: None,
                failpoint: None,
                kill_after_ms: None,
                crashed: false,
                exit_code: code(&status),
                log: log.clone(),
            });
            match status.code() {
                Some(0) => return Ok(()),
                Some(3) => continue,
                other => {
                    return Err(DrillError::RunFailed {
                        run: run.into(),
                        code: other,
                        log,
                    });
                }
            }
        }
        Err(DrillError::RunFailed {
            run: run.into(),
            code: Some(3),
            log: self.logs.clone(),
        })
    }
}

/// Runs the drill: reference, crashes, restarts, comparison.
pub async fn run(options: &DrillOptions) -> Result<DrillReport, DrillError> {
    // `input/` is removed when the drill ends: it must be the drill's own copy.
    if ["drill", "reference", "input"]
        .iter()
        .any(|d| options.work_dir.join(d).exists())
    {
        return Err(DrillError::Usage(format!(
            "{} already holds a drill (drill/, reference/ or input/); give an empty or new --work-dir",
            options.work_dir.display()
        )));
    }
    std::fs::create_dir_all(&options.work_dir).map_err(io(&options.work_dir))?;
    let _remove_input = RemoveInputCopy(options.work_dir.join("input"));
    let prepared = prepare(options)?;
    let logs = options.work_dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(io(&logs))?;
    let mut runner = Runner {
        options,
        logs,
        starts: 0,
    };
    let mut attempts = Vec::new();

    // The crash-free reference, timed to place the random kills.
    let t0 = Instant::now();
    runner.drain("reference", &prepared.reference, &mut attempts)?;
    let reference_ms = (t0.elapsed().as_millis() as u64).max(200);

    // One crash at each failpoint, per flow, in file order.
    for flow in &prepared.flows {
        for fp in FAILPOINTS {
            for _ in 0..SCHEMA_RESTARTS {
                let log = runner.log(&format!("failpoint-{}-{fp}", flow.name));
                // Arm the batch after the last planned one: the process first finishes the
                // batch the previous crash left (a replay), then dies in a new one.
                let checkpoint = options.work_dir.join("drill/checkpoints").join(&flow.name);
                let target = Checkpoint::at(&checkpoint)
                    .latest_offsets()
                    .ok()
                    .flatten()
                    .map_or(0, |(id, _)| id + 1);
                let status = weir_run(&options.exe, &prepared.drill, Some(&flow.name), &log)?
                    .env("WEIR_FAILPOINT", format!("{fp}:{target}"))
                    .status()
                    .map_err(io(&options.exe))?;
                let hit = std::fs::read_to_string(&log)
                    .map(|t| t.contains(&format!("failpoint {fp} hit")))
                    .unwrap_or(false);
                attempts.push(Attempt {
                    kind: "failpoint".into(),
                    flow: Some(flow.name.clone()),
                    failpoint: Some(fp.to_string()),
                    kill_after_ms: None,
                    crashed: hit,
                    exit_code: code(&status),
                    log,
                });
                if status.code() != Some(3) {
                    break;
                }
            }
        }
    }
    // N SIGKILLs at seeded random moments in the first half of a run as long as the
    // reference's (a kill that comes after the process ended is reported as such).
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    for _ in 0..options.kills {
        let after = rng
            .random_range(reference_ms / 20..=reference_ms / 2)
            .max(20);
        let log = runner.log("sigkill");
        let mut child = weir_run(&options.exe, &prepared.drill, None, &log)?
            .spawn()
            .map_err(io(&options.exe))?;
        let deadline = Instant::now() + Duration::from_millis(after);
        let mut exited = None;
        while Instant::now() < deadline {
            if let Some(s) = child.try_wait().map_err(io(&options.exe))? {
                exited = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (crashed, status) = match exited {
            Some(s) => (false, s),
            None => {
                let _ = child.kill();
                (true, child.wait().map_err(io(&options.exe))?)
            }
        };
        attempts.push(Attempt {
            kind: "sigkill".into(),
            flow: None,
            failpoint: None,
            kill_after_ms: Some(after),
            crashed,
            exit_code: code(&status),
            log,
        });
    }
    runner.drain("drill", &prepared.drill, &mut attempts)?;

    let mut flows = Vec::new();
    for flow in &prepared.flows {
        flows.push(compare(options, flow, &prepared.flows).await?);
    }
    let pass = flows.iter().all(|f| f.pass);
    let mut notes = prepared.input.notes.clone();
    let missed: Vec<String> = attempts
        .iter()
        .filter(|a| a.kind == "failpoint" && !a.crashed)
        .map(|a| {
            format!(
                "{}@{}",
                a.failpoint.as_deref().unwrap_or("?"),
                a.flow.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if !missed.is_empty() {
        notes.push(format!(
            "{} failpoint(s) not reached because the input drained first ({}); {}",
            missed.len(),
            missed.join(", "),
            if options.max_files_per_trigger == Some(1) {
                "more input gives them batches to crash in"
            } else {
                "rerun with --max-files-per-trigger 1 or more input"
            }
        ));
    }
    let missed_kills = attempts
        .iter()
        .filter(|a| a.kind == "sigkill" && !a.crashed)
        .count();
    if missed_kills > 0 {
        notes.push(format!(
            "{missed_kills} SIGKILL(s) came after the process had already finished"
        ));
    }
    Ok(DrillReport {
        notes,
        pipeline: options.pipeline.clone(),
        work_dir: options.work_dir.clone(),
        seed: options.seed,
        kills_requested: options.kills,
        failpoints_hit: attempts
            .iter()
            .filter(|a| a.kind == "failpoint" && a.crashed)
            .count() as u64,
        sigkills_landed: attempts
            .iter()
            .filter(|a| a.kind == "sigkill" && a.crashed)
            .count() as u64,
        process_starts: runner.starts,
        attempts,
        flows,
        input_files: prepared.input.files,
        input_bytes: prepared.input.bytes,
        pass,
    })
}

struct RunSide {
    /// Input rows of distinct batches in the progress log (a replay counted once).
    rows_in: u64,
    batches: u64,
    replayed: u64,
    query_id: String,
    last_committed: Option<u64>,
}

fn read_side(checkpoint: &Path) -> RunSide {
    let cp = Checkpoint::at(checkpoint);
    let progress = read_progress(&cp.progress_path()).unwrap_or_default();
    let mut per_batch: BTreeMap<u64, u64> = BTreeMap::new();
    let mut replayed = 0;
    for p in &progress {
        per_batch.insert(p.batch_id, p.num_input_rows);
        replayed += u64::from(p.weir.replayed);
    }
    RunSide {
        rows_in: per_batch.values().sum(),
        batches: per_batch.len() as u64,
        replayed,
        query_id: cp
            .read_metadata()
            .map(|m| m.id.to_string())
            .unwrap_or_default(),
        last_committed: cp.latest_commit().ok().flatten().map(|(id, _)| id),
    }
}

async fn compare(
    options: &DrillOptions,
    flow: &FlowSpec,
    flows: &[FlowSpec],
) -> Result<FlowReport, DrillError> {
    let drill_root = options.work_dir.join("drill");
    let ref_root = options.work_dir.join("reference");
    let drill_table = drill_root.join("tables").join(&flow.name);
    let ref_table = ref_root.join("tables").join(&flow.name);
    let drill = read_side(&drill_root.join("checkpoints").join(&flow.name));
    let reference = read_side(&ref_root.join("checkpoints").join(&flow.name));
    let table_err = |table: &Path| {
        let table = table.to_path_buf();
        move |e: String| DrillError::Table {
            table: table.clone(),
            message: e,
        }
    };
    let ctx = datafusion::prelude::SessionContext::new();
    let d = register(&ctx, "d", &drill_table)
        .await
        .map_err(table_err(&drill_table))?;
    let r = register(&ctx, "r", &ref_table)
        .await
        .map_err(table_err(&ref_table))?;
    let columns: Vec<String> = match &r {
        Some(t) => t.schema.fields().iter().map(|f| f.name().clone()).collect(),
        None => Vec::new(),
    };
    let key = if options.key.is_empty() {
        default_key(flow, flows, &columns)
    } else {
        options.key.clone()
    };
    let (rows_out, reference_rows_out, duplicates, lost) = match (&d, &r) {
        (Some(_), Some(_)) => {
            let key_expr = if key.is_empty() {
                "1".to_string()
            } else {
                key.iter()
                    .map(|k| {
                        format!(
                            "coalesce(CAST(\"{}\" AS VARCHAR), '\u{2400}')",
                            k.replace('"', "\"\"")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" || '\u{1F}' || ")
            };
            let sql = format!(
                "WITH dk AS (SELECT {key_expr} AS k, count(*) AS n FROM d GROUP BY 1), \
                 rk AS (SELECT {key_expr} AS k, count(*) AS n FROM r GROUP BY 1) \
                 SELECT CAST(coalesce(sum(CASE WHEN coalesce(dk.n, 0) > coalesce(rk.n, 0) THEN coalesce(dk.n, 0) - coalesce(rk.n, 0) ELSE 0 END), 0) AS BIGINT) AS duplicates, \
                        CAST(coalesce(sum(CASE WHEN coalesce(rk.n, 0) > coalesce(dk.n, 0) THEN coalesce(rk.n, 0) - coalesce(dk.n, 0) ELSE 0 END), 0) AS BIGINT) AS lost, \
                        CAST((SELECT count(*) FROM d) AS BIGINT) AS rows_out, CAST((SELECT count(*) FROM r) AS BIGINT) AS reference_rows_out \
                 FROM dk FULL OUTER JOIN rk ON dk.k = rk.k"
            );
            let v = query_i64s(&ctx, &sql)
                .await
                .map_err(table_err(&drill_table))?;
            (v[2] as u64, v[3] as u64, v[0] as u64, v[1] as u64)
        }
        (None, Some(_)) => {
            let n = query_i64s(&ctx, "SELECT CAST(count(*) AS BIGINT) FROM r")
                .await
                .map_err(table_err(&ref_table))?[0] as u64;
            (0, n, 0, n)
        }
        (Some(_), None) => {
            let n = query_i64s(&ctx, "SELECT CAST(count(*) AS BIGINT) FROM d")
                .await
                .map_err(table_err(&drill_table))?[0] as u64;
            (n, 0, n, 0)
        }
        (None, None) => (0, 0, 0, 0),
    };
    let txn_version = match &d {
        Some(t) if !drill.query_id.is_empty() => {
            crate::delta::table_txn_version(&t.table, &drill.query_id)
                .await
                .map_err(|e| DrillError::Table {
                    table: drill_table.clone(),
                    message: e.to_string(),
                })?
        }
        _ => None,
    };
    let pass = duplicates == 0 && lost == 0 && rows_out == reference_rows_out;
    Ok(FlowReport {
        flow: flow.name.clone(),
        table: drill_table,
        key,
        rows_in: reference.rows_in,
        batches_without_progress: drill
            .last_committed
            .map_or(0, |c| c + 1)
            .saturating_sub(drill.batches),
        rows_out,
        reference_rows_out,
        duplicates,
        lost,
        batches: drill.batches,
        batches_replayed: drill.replayed,
        delta_version: d.as_ref().and_then(|t| t.table.version()).map(|v| v as i64),
        reference_delta_version: r.as_ref().and_then(|t| t.table.version()).map(|v| v as i64),
        txn_app_id: drill.query_id,
        txn_version,
        last_committed_batch: drill.last_committed,
        pass,
    })
}

struct Registered {
    table: deltalake::DeltaTable,
    schema: arrow::datatypes::SchemaRef,
}

async fn register(
    ctx: &datafusion::prelude::SessionContext,
    name: &str,
    path: &Path,
) -> Result<Option<Registered>, String> {
    let table = match crate::delta::open_existing(path).await {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    // The active data files the Delta log lists, read with DataFusion's Parquet reader
    // (weir's sinks only append or overwrite whole files: no deletion vectors).
    let files: Vec<String> = table
        .get_file_uris()
        .map_err(|e| e.to_string())?
        .map(|uri| match url::Url::parse(&uri) {
            Ok(u) => u
                .to_file_path()
                .map(|p| p.display().to_string())
                .unwrap_or(uri),
            Err(_) => path.join(&uri).display().to_string(),
        })
        .collect();
    let schema: arrow::datatypes::SchemaRef = if files.is_empty() {
        let empty = arrow::datatypes::SchemaRef::new(arrow::datatypes::Schema::empty());
        ctx.register_batch(
            name,
            arrow::record_batch::RecordBatch::new_empty(empty.clone()),
        )
        .map_err(|e| e.to_string())?;
        empty
    } else {
        let options = datafusion::prelude::ParquetReadOptions::default();
        let df = ctx
            .read_parquet(files, options)
            .await
            .map_err(|e| e.to_string())?;
        let schema = arrow::datatypes::SchemaRef::new(df.schema().as_arrow().clone());
        ctx.register_table(name, df.into_view())
            .map_err(|e| e.to_string())?;
        schema
    };
    Ok(Some(Registered { table, schema }))
}

async fn query_i64s(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
) -> Result<Vec<i64>, String> {
    use arrow::array::AsArray as _;
    let batches = ctx
        .sql(sql)
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let b = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .ok_or_else(|| "empty result".to_string())?;
    b.columns()
        .iter()
        .map(|c| {
            c.as_primitive_opt::<arrow::datatypes::Int64Type>()
                .map(|a| a.value(0))
                .ok_or_else(|| format!("unexpected type {}", c.data_type()))
        })
        .collect()
}

/// The report as an operator reads it (the CLI prints it on stdout).
pub fn render(report: &DrillReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "weir drill: {}", report.pipeline.display());
    let _ = writeln!(
        s,
        "  work dir  {} (copies of the input; the pipeline's own checkpoints and tables were not touched)",
        report.work_dir.display()
    );
    let _ = writeln!(
        s,
        "  input     {} file(s), {} copied into the work dir's input/, removed when the drill ended",
        report.input_files,
        crate::spec::ByteSize(report.input_bytes)
    );
    let failpoint_runs = report
        .attempts
        .iter()
        .filter(|a| a.kind == "failpoint")
        .count();
    let _ = writeln!(
        s,
        "  crashes   {} of {} failpoint run(s) hit their failpoint; {} of {} SIGKILL(s) landed (seed {}); {} process start(s)",
        report.failpoints_hit,
        failpoint_runs,
        report.sigkills_landed,
        report.kills_requested,
        report.seed,
        report.process_starts
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<20} {:>10} {:>10} {:>10} {:>6} {:>6} {:>8} {:>8} {:>11}  {:<44} result",
        "flow",
        "rows in",
        "rows out",
        "expected",
        "dupes",
        "lost",
        "batches",
        "replayed",
        "delta v/ref",
        "txn app id = batch"
    );
    for f in &report.flows {
        let v = |x: Option<i64>| x.map_or("-".to_string(), |v| v.to_string());
        let _ = writeln!(
            s,
            "{:<20} {:>10} {:>10} {:>10} {:>6} {:>6} {:>8} {:>8} {:>11}  {:<44} {}",
            f.flow,
            f.rows_in,
            f.rows_out,
            f.reference_rows_out,
            f.duplicates,
            f.lost,
            f.batches,
            f.batches_replayed,
            format!("{}/{}", v(f.delta_version), v(f.reference_delta_version)),
            format!(
                "{} = {}",
                if f.txn_app_id.is_empty() {
                    "-"
                } else {
                    &f.txn_app_id
                },
                v(f.txn_version)
            ),
            if f.pass { "PASS" } else { "FAIL" }
        );
    }
    let _ = writeln!(s);
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(
        s,
        "RESULT: {}{}",
        if report.pass { "PASS" } else { "FAIL" },
        if report.pass {
            " (every table equals the crash-free run: no duplicate, no loss)"
        } else {
            " (see the rows marked FAIL; logs of every process under the work dir's logs/)"
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn land(dir: &Path, files: &[(&str, usize, u64)]) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, len, age_s) in files {
            let path = dir.join(name);
            std::fs::write(&path, vec![b'x'; *len]).unwrap();
            let at = std::time::SystemTime::now() - Duration::from_secs(*age_s);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
    }

    /// A column a flow upstream computes from the wall clock, carried through by `select
    /// "*"`, is left out of the default key too (it differs between the two runs).
    #[test]
    fn default_key_leaves_out_wall_clock_columns_from_upstream_flows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        let text = r#"
[[flow]]
name = "bronze"
select = ["*", "current_timestamp() AS ingested_at"]
[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id INT, v STRING"
[flow.sink]
type = "delta"
path = "lake/bronze"

[[flow]]
name = "silver"
select = ["*", "now() AS refined_at"]
[flow.source]
type = "delta"
path = "lake/bronze"
[flow.sink]
type = "delta"
path = "lake/silver"

[[flow]]
name = "other"
[flow.source]
type = "delta"
path = "lake/silver"
[flow.sink]
type = "delta"
path = "lake/other"
"#;
        let loaded = pipeline::parse(&path, text).unwrap();
        let flows = loaded.flows.clone();
        let columns: Vec<String> = ["id", "v", "ingested_at", "refined_at"]
            .iter()
            .map(|c| c.to_string())
            .collect();
        let key = |name: &str| {
            let flow = flows.iter().find(|f| f.name == name).unwrap();
            default_key(flow, &flows, &columns)
        };
        assert_eq!(key("bronze"), ["id", "v", "refined_at"]);
        assert_eq!(key("silver"), ["id", "v"]);
        assert_eq!(key("other"), ["id", "v"]);
    }

    /// Issue #18: the drill's input copy is bounded: a file source's oldest files up to
    /// the bound (its read order, modification times kept), said in a note; a Delta
    /// table over the bound, or a directory whose oldest file alone is over it, refused.
    #[test]
    fn the_input_copy_takes_the_oldest_files_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let landing = dir.path().join("landing");
        // Names sort against their age: the copy must follow modification times.
        land(
            &landing,
            &[
                ("a", 100, 10),
                ("b", 100, 20),
                ("c", 100, 30),
                ("d", 100, 40),
            ],
        );
        let mut copied = InputCopy::default();
        let mut left = 250;
        let to = dir.path().join("work/input/0/landing");
        copy_input(&landing, &to, 250, &mut left, &mut copied).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&to)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["c", "d"]);
        assert_eq!((copied.files, copied.bytes, left), (2, 200, 50));
        assert_eq!(
            std::fs::metadata(to.join("d")).unwrap().modified().unwrap(),
            std::fs::metadata(landing.join("d"))
                .unwrap()
                .modified()
                .unwrap()
        );
        assert_eq!(copied.notes.len(), 1);
        assert!(
            copied.notes[0].contains("2 oldest of 4 files"),
            "{:?}",
            copied.notes
        );

        // Within the bound: everything, no note.
        let mut all = InputCopy::default();
        copy_input(&landing, &dir.path().join("all"), 400, &mut 400, &mut all).unwrap();
        assert_eq!((all.files, all.bytes, all.notes.len()), (4, 400, 0));

        // The oldest file alone is over what is left.
        let err = copy_input(&landing, &dir.path().join("x"), 250, &mut 50, &mut copied)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--max-input-bytes"), "{err}");

        // A Delta table is copied whole or not at all.
        let table = dir.path().join("table");
        land(
            &table.join("_delta_log"),
            &[("00000000000000000000.json", 100, 5)],
        );
        land(&table, &[("part-0.parquet", 300, 5)]);
        let err = copy_input(&table, &dir.path().join("t"), 250, &mut 250, &mut copied)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a Delta table of 400 B"), "{err}");
        let mut whole = InputCopy::default();
        copy_input(&table, &dir.path().join("t2"), 400, &mut 400, &mut whole).unwrap();
        assert_eq!((whole.files, whole.bytes), (2, 400));
        assert!(
            dir.path()
                .join("t2/_delta_log/00000000000000000000.json")
                .is_file()
        );
    }

    /// Issue #18: the drill's copies write nothing outside the work dir: the sink,
    /// `late_rows`, and every source's `bad_records_path`, `bad_records_table` and
    /// `schema_location`, the stream join's right side included.
    #[test]
    fn the_copies_redirect_every_output_into_the_work_dir() {
        let dir = tempfile::tempdir().unwrap();
        let pipeline = dir.path().join("pipeline.toml");
        std::fs::write(
            &pipeline,
            r#"
[[flow]]
name = "joined"
watermark = { column = "ts", delay = "1 minute" }

[flow.source]
type = "files"
path = "landing/left"
format = "json"
schema = "id BIGINT, ts TIMESTAMP"
bad_records_path = "prod/quarantine"
bad_records_table = "prod/quarantine_table"
schema_location = "prod/schemas/left"

[flow.stream_join]
alias = "r"
source = { type = "files", path = "landing/right", format = "json", schema = "id BIGINT, ts TIMESTAMP", schema_location = "prod/schemas/right", bad_records_table = "prod/right_quarantine" }
watermark = { column = "ts", delay = "1 minute" }
on = ["id"]
time_range = { left = "ts", right = "ts", lower = "0 seconds", upper = "1 minute" }

[flow.sink]
type = "delta"
path = "prod/joined"
"#,
        )
        .unwrap();
        let work_dir = dir.path().join("work");
        let options = DrillOptions {
            pipeline: pipeline.clone(),
            flows: None,
            kills: 0,
            seed: 1,
            key: Vec::new(),
            work_dir: work_dir.clone(),
            exe: PathBuf::from("weir"),
            max_files_per_trigger: None,
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
        };
        let prepared = prepare(&options).expect("prepared");
        for copy in [&prepared.drill, &prepared.reference] {
            let text = std::fs::read_to_string(copy).unwrap();
            let body: String = text.lines().skip(1).collect::<Vec<_>>().join("\n");
            assert!(!body.contains("prod/"), "{body}");
            let loaded = pipeline::load(copy).unwrap();
            let flow = &loaded.flows[0];
            for source in flow.sources() {
                let crate::spec::SourceSpec::Files(files) = source else {
                    panic!("files sources");
                };
                assert!(
                    files
                        .schema_location
                        .as_ref()
                        .unwrap()
                        .starts_with(&work_dir)
                );
            }
        }
    }
}
