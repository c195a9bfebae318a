//! Power loss, not only process death (docs/reliability.md).
//!
//! - The order of a batch's durability syscalls, read from `strace -f -y`: every file the
//!   protocol relies on (ledger rows, `offsets/N`, the Delta data files and
//!   `_delta_log/<v>.json`, their directories) is fsynced before the next step that relies
//!   on it, `commits/N` last.
//! - A power-cut model: `tests/powercut/powercut.c`, preloaded into the real binary,
//!   records what each fsync makes durable (a file's bytes, a directory's names). For every
//!   point of the run, the tree a power cut there would leave is rebuilt (only what was
//!   fsynced by then), weir is restarted on it, and the table must hold every input row
//!   exactly once (or weir must refuse with a clear message).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

const PIPELINE: &str = r#"
[[flow]]
name = "bronze"
trigger = "available_now"
[flow.source]
type = "files"
path = "landing"
format = "csv"
schema = "id BIGINT, name STRING"
max_files_per_trigger = 1
[flow.sink]
type = "delta"
path = "lake/bronze"
"#;

/// `files` CSV files of `rows` rows each, ids 0.., and the pipeline; returns the row count.
fn input(dir: &Path, files: usize, rows: usize) -> usize {
    let mut id = 0;
    for f in 0..files {
        let mut body = String::from("id,name\n");
        for _ in 0..rows {
            body.push_str(&format!("{id},row{id}\n"));
            id += 1;
        }
        land(
            &dir.join("landing"),
            &format!("part{f}.csv"),
            body.as_bytes(),
        );
    }
    std::fs::remove_dir_all(dir.join("_staging_test")).unwrap();
    write_pipeline(dir, PIPELINE);
    id
}

/// Every id of the table, sorted.
async fn table_ids(table: &Path) -> Vec<i64> {
    let rows = delta_rows(table).await;
    let mut ids: Vec<i64> = column_strings(&rows, "id")
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

// ---------------------------------------------------------------------------------------
// The syscall order, from strace.

/// One completed durability syscall of the trace.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Fsync(String),
    /// rename, renameat2, link, linkat: (syscall, from, to, last argument).
    Move(String, String, String, String),
    /// A name made: `open`/`openat`/`creat` with `O_CREAT` (the path the returned
    /// descriptor names), `mkdir`/`mkdirat` (the path, made absolute).
    Create(String),
}

/// Parses `strace -f -y -e trace=fsync,fdatasync,rename,renameat2,link,linkat` output into
/// the completed calls, in completion order (a call split by another thread's into
/// `<unfinished ...>` and `<... resumed>` completes at its resumed line).
fn parse_trace(text: &str) -> Vec<Call> {
    let fd_path = regex::Regex::new(r"^\d+<(.*)>$").unwrap();
    let quoted = regex::Regex::new(r#""((?:[^"\\]|\\.)*)""#).unwrap();
    let call = regex::Regex::new(r"^(\w+)\((.*)\)\s+=\s+(-?\d+)").unwrap();
    let opened = regex::Regex::new(r"\)\s+=\s+\d+<(.*)>$").unwrap();
    let cwd = regex::Regex::new(r"^AT_FDCWD<([^>]*)>").unwrap();
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut calls = Vec::new();
    for line in text.lines() {
        let (pid, rest) = line.split_once(' ').unwrap_or(("", line));
        let rest = rest.trim_start();
        let full = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_string(), head.to_string());
            continue;
        } else if rest.starts_with("<... ") {
            let Some(head) = pending.remove(pid) else {
                continue;
            };
            let tail = rest.split_once("resumed>").map_or("", |(_, t)| t);
            format!("{head}{tail}")
        } else {
            rest.to_string()
        };
        let Some(c) = call.captures(&full) else {
            continue;
        };
        let (name, args) = (&c[1], &c[2]);
        if matches!(name, "open" | "openat" | "creat") {
            if (name == "creat" || args.contains("O_CREAT"))
                && let Some(o) = opened.captures(&full)
            {
                calls.push(Call::Create(o[1].to_string()));
            }
            continue;
        }
        if &c[3] != "0" {
            continue;
        }
        if matches!(name, "mkdir" | "mkdirat") {
            if let Some(q) = quoted.captures(args) {
                let made = Path::new(&q[1]);
                let made = match cwd.captures(args.trim_start()) {
                    Some(d) if made.is_relative() => Path::new(&d[1]).join(made),
                    _ => made.to_path_buf(),
                };
                calls.push(Call::Create(made.display().to_string()));
            }
            continue;
        }
        match name {
            "fsync" | "fdatasync" => {
                if let Some(c) = fd_path.captures(args.trim()) {
                    calls.push(Call::Fsync(c[1].to_string()));
                }
            }
            "rename" | "renameat2" | "link" | "linkat" => {
                let names: Vec<String> = quoted
                    .captures_iter(args)
                    .map(|c| c[1].to_string())
                    .collect();
                if names.len() == 2 {
                    let flags = args.rsplit(", ").next().unwrap_or("").to_string();
                    calls.push(Call::Move(
                        name.to_string(),
                        names[0].clone(),
                        names[1].clone(),
                        flags,
                    ));
                }
            }
            _ => {}
        }
    }
    calls
}

fn position(calls: &[Call], after: usize, what: &str, pred: impl Fn(&Call) -> bool) -> usize {
    calls
        .iter()
        .enumerate()
        .skip(after)
        .find(|(_, c)| pred(c))
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no {what} after call {after} in the trace:\n{calls:#?}"))
}

fn fsync_of(path: &Path) -> impl Fn(&Call) -> bool + '_ {
    move |c| matches!(c, Call::Fsync(p) if Path::new(p) == path)
}

fn moved_to(pred: impl Fn(&str) -> bool) -> impl Fn(&Call) -> bool {
    move |c| matches!(c, Call::Move(_, _, to, _) if pred(to))
}

#[test]
fn a_batch_makes_each_step_durable_before_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    input(&dir, 2, 3);
    let trace = dir.join("trace.txt");
    let strace = Command::new("strace")
        .args([
            "-f",
            "-y",
            "-qq",
            "-e",
            "trace=fsync,fdatasync,rename,renameat2,link,linkat",
            "-o",
        ])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--headless", "pipeline.toml"])
        .current_dir(&dir)
        .env("WEIR_LOG", "warn")
        .output()
        .expect(
            "strace is needed for this test (Debian: apt-get install strace; .ci/run installs it)",
        );
    assert!(
        strace.status.success(),
        "{}",
        String::from_utf8_lossy(&strace.stderr)
    );
    let calls = parse_trace(&std::fs::read_to_string(&trace).unwrap());
    let ckpt = dir.join("_checkpoints/bronze");
    let table = dir.join("lake/bronze");
    let ledger_wal = ckpt.join("sources/0/ledger.sqlite-wal");

    // The checkpoint's and the table's new directories are durable in their parents.
    let first_offsets = position(
        &calls,
        0,
        "offsets/0",
        moved_to(|to| to.ends_with("/offsets/0")),
    );
    for (parent, what) in [
        (&dir, "the directory holding _checkpoints/"),
        (&dir.join("_checkpoints"), "_checkpoints/"),
        (&ckpt, "the checkpoint"),
    ] {
        let at = position(&calls, 0, what, fsync_of(parent));
        assert!(at < first_offsets, "{what} is not synced before offsets/0");
    }

    let mut at = 0;
    for batch in 0..2u64 {
        // Plan: the ledger's rows, then offsets/N moved in without replacing, then its directory.
        let offsets = position(
            &calls,
            at,
            &format!("offsets/{batch}"),
            moved_to(|to| to.ends_with(&format!("/offsets/{batch}"))),
        );
        let Call::Move(call, _, _, flags) = &calls[offsets] else {
            unreachable!()
        };
        assert!(
            (call == "renameat2" && flags.contains("RENAME_NOREPLACE")) || call.starts_with("link"),
            "offsets/{batch} must be moved in with RENAME_NOREPLACE or link (never replacing), found {call}(.., {flags})"
        );
        assert!(
            calls[at..offsets].iter().any(fsync_of(&ledger_wal)),
            "the ledger rows of batch {batch} are not synced before offsets/{batch}"
        );
        let offsets_dir = position(
            &calls,
            offsets,
            "fsync of offsets/",
            fsync_of(&ckpt.join("offsets")),
        );

        // The Delta commit: data files (synced, with their directory), then the log entry.
        let log = table.join(format!("_delta_log/{batch:020}.json"));
        let data = position(
            &calls,
            offsets_dir,
            "a data file",
            moved_to(|to| to.contains("/lake/bronze/part-") && to.ends_with(".parquet")),
        );
        let Call::Move(_, _, data_file, _) = calls[data].clone() else {
            unreachable!()
        };
        let data_sync = position(
            &calls,
            data,
            "fsync of the data file",
            fsync_of(Path::new(&data_file)),
        );
        let log_link = position(
            &calls,
            data_sync,
            "the log entry",
            moved_to(|to| Path::new(to) == log),
        );
        let table_dir_sync = calls[data_sync..log_link]
            .iter()
            .position(fsync_of(&table))
            .map(|i| i + data_sync);
        assert!(
            table_dir_sync.is_some(),
            "batch {batch}: the table directory is not synced between the data file and the log entry"
        );
        let log_sync = position(&calls, log_link, "fsync of the log entry", fsync_of(&log));
        let log_dir_sync = position(
            &calls,
            log_link,
            "fsync of _delta_log/",
            fsync_of(&table.join("_delta_log")),
        );

        // Then commits/N, then its directory; the ledger settles after.
        let commit = position(
            &calls,
            offsets_dir,
            &format!("commits/{batch}"),
            moved_to(|to| to.ends_with(&format!("/commits/{batch}"))),
        );
        assert!(
            log_sync < commit && log_dir_sync < commit,
            "batch {batch}: commits/{batch} is written before the Delta commit is durable"
        );
        let commit_dir = position(
            &calls,
            commit,
            "fsync of commits/",
            fsync_of(&ckpt.join("commits")),
        );
        at = commit_dir + 1;
    }
}

// ---------------------------------------------------------------------------------------
// The power-cut model.

/// `tests/powercut/powercut.c`, built once per test run.
fn powercut_lib() -> PathBuf {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libpowercut.so");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/powercut/powercut.c");
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&out)
            .arg(&src)
            .args(["-ldl", "-lpthread"])
            .status()
            .expect("a C compiler (cc) builds the power-cut shim");
        assert!(status.success(), "building {}", src.display());
        out
    })
    .clone()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
}

/// An inode at a generation: the model gives a new generation to an inode number that a
/// freed inode had, so a new file never shows the content of the one it replaced.
type Inode = (u64, u32);

/// The durable state: each directory's names, each file's bytes.
#[derive(Debug, Clone, Default)]
struct Durable {
    dirs: BTreeMap<PathBuf, Vec<(String, Kind, Inode)>>,
    files: HashMap<Inode, Vec<u8>>,
    /// Modification times of the files present at the start (the ledger compares them).
    mtimes: HashMap<Inode, std::time::SystemTime>,
    generation: HashMap<u64, u32>,
}

impl Durable {
    /// Everything under `root` now: a run starts from a durable tree.
    fn scan(root: &Path) -> Durable {
        use std::os::unix::fs::MetadataExt;
        let mut d = Durable::default();
        fn walk(d: &mut Durable, dir: &Path) {
            let mut entries = Vec::new();
            for e in std::fs::read_dir(dir).unwrap() {
                let e = e.unwrap();
                let meta = std::fs::symlink_metadata(e.path()).unwrap();
                let name = e.file_name().to_string_lossy().to_string();
                if meta.is_dir() {
                    entries.push((name, Kind::Dir, (meta.ino(), 0)));
                    walk(d, &e.path());
                } else if meta.is_file() {
                    entries.push((name, Kind::File, (meta.ino(), 0)));
                    d.files
                        .insert((meta.ino(), 0), std::fs::read(e.path()).unwrap());
                    d.mtimes.insert((meta.ino(), 0), meta.modified().unwrap());
                }
            }
            d.dirs.insert(dir.to_path_buf(), entries);
        }
        walk(&mut d, root);
        d
    }

    fn inode(&self, ino: u64) -> Inode {
        (ino, self.generation.get(&ino).copied().unwrap_or(0))
    }

    fn apply(&mut self, event: &Event, store: &Path) {
        match event.kind {
            'F' => {
                let bytes = std::fs::read(store.join(event.seq.to_string())).unwrap_or_default();
                self.files.insert(self.inode(event.ino), bytes);
            }
            'D' => {
                let text =
                    std::fs::read_to_string(store.join(event.seq.to_string())).unwrap_or_default();
                let mut entries = Vec::new();
                for line in text.lines() {
                    let mut parts = line.splitn(3, '\t');
                    let (Some(t), Some(ino), Some(name)) =
                        (parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    let kind = match t {
                        "d" => Kind::Dir,
                        "f" => Kind::File,
                        _ => continue,
                    };
                    entries.push((name.to_string(), kind, self.inode(ino.parse().unwrap())));
                }
                self.dirs.insert(event.path.clone(), entries);
            }
            'U' => *self.generation.entry(event.ino).or_default() += 1,
            _ => {}
        }
    }

    /// Writes the tree a power cut would leave at `root` (which must not exist).
    fn materialize(&self, root: &Path) {
        std::fs::create_dir_all(root).unwrap();
        for (name, kind, inode) in self.dirs.get(root).cloned().unwrap_or_default() {
            let path = root.join(&name);
            match kind {
                Kind::Dir => self.materialize(&path),
                Kind::File => {
                    std::fs::write(&path, self.files.get(&inode).map_or(&[][..], |b| b)).unwrap();
                    if let Some(t) = self.mtimes.get(&inode) {
                        std::fs::File::options()
                            .write(true)
                            .open(&path)
                            .unwrap()
                            .set_modified(*t)
                            .unwrap();
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Event {
    seq: u64,
    kind: char,
    ino: u64,
    path: PathBuf,
}

fn read_events(dir: &Path) -> Vec<Event> {
    std::fs::read_to_string(dir.join("events"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p = l.splitn(4, ' ');
            Some(Event {
                seq: p.next()?.parse().ok()?,
                kind: p.next()?.chars().next()?,
                ino: p.next()?.parse().ok()?,
                path: PathBuf::from(p.next()?),
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_at_any_point_loses_nothing_and_duplicates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let dir = base.join("pipe");
    std::fs::create_dir_all(&dir).unwrap();
    let rows = input(&dir, 3, 3) as i64;
    // A first run, not recorded, commits batch 0 (part0.csv): the checkpoint and the
    // table exist before the recorded run, as they do for a pipeline in production.
    let held = base.join("held");
    std::fs::create_dir_all(&held).unwrap();
    for f in ["part1.csv", "part2.csv"] {
        std::fs::rename(dir.join("landing").join(f), held.join(f)).unwrap();
    }
    let first = weir()
        .args(["run", "--headless", "pipeline.toml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for f in ["part1.csv", "part2.csv"] {
        std::fs::rename(held.join(f), dir.join("landing").join(f)).unwrap();
    }
    let before = Durable::scan(&dir);

    let record = base.join("powercut");
    std::fs::create_dir_all(record.join("store")).unwrap();
    let run = weir()
        .args(["run", "--headless", "pipeline.toml"])
        .current_dir(&dir)
        .env("LD_PRELOAD", powercut_lib())
        .env("WEIR_POWERCUT_DIR", &record)
        .env("WEIR_POWERCUT_ROOT", &dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let expected: Vec<i64> = (0..rows).collect();
    assert_eq!(table_ids(&dir.join("lake/bronze")).await, expected);
    let events = read_events(&record);
    assert!(
        events.len() > 10,
        "the shim recorded {} events",
        events.len()
    );

    // Cut after each event that changes the durable state (and before the first): the
    // recorded run plans and commits batches 1 and 2.
    std::fs::rename(&dir, base.join("original")).unwrap();
    let mut state = before.clone();
    let mut outcomes = Vec::new();
    let cuts = std::iter::once(None).chain(events.iter().map(Some));
    for event in cuts {
        if let Some(e) = event {
            state.apply(e, &record.join("store"));
            if e.kind == 'U' {
                continue;
            }
        }
        let at = event.map_or("before the run".to_string(), |e| {
            format!("#{} {} {}", e.seq, e.kind, e.path.display())
        });
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        state.materialize(&dir);
        let restart = weir()
            .args(["run", "--headless", "pipeline.toml"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&restart.stderr).to_string();
        if restart.status.success() {
            let ids = table_ids(&dir.join("lake/bronze")).await;
            assert_eq!(
                ids, expected,
                "power cut after {at}: the table does not hold every input row exactly once\n{stderr}"
            );
            outcomes.push((at, "exactly once".to_string()));
        } else {
            let first = stderr
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or("")
                .to_string();
            outcomes.push((at, format!("refused: {first}")));
        }
    }
    let refused: Vec<_> = outcomes
        .iter()
        .filter(|(_, o)| o.starts_with("refused"))
        .collect();
    eprintln!(
        "{} power-cut points, {} refused",
        outcomes.len(),
        refused.len()
    );
    assert!(
        refused.is_empty(),
        "weir refused to restart after a power cut at these points:\n{refused:#?}"
    );
}

/// Runs `args` under strace (durability syscalls only) in `dir`; returns the calls.
fn traced(dir: &Path, args: &[&str]) -> Vec<Call> {
    traced_calls(
        dir,
        "trace=fsync,fdatasync,rename,renameat2,link,linkat",
        args,
    )
}

/// [`traced`] with the syscalls of `trace` (an `strace -e` expression).
fn traced_calls(dir: &Path, trace_expr: &str, args: &[&str]) -> Vec<Call> {
    let trace = dir.join("trace.txt");
    let out = Command::new("strace")
        .args(["-f", "-y", "-qq", "-e", trace_expr, "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(dir)
        .env("WEIR_LOG", "warn")
        .output()
        .expect(
            "strace is needed for this test (Debian: apt-get install strace; .ci/run installs it)",
        );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_trace(&std::fs::read_to_string(&trace).unwrap())
}

/// Index of the first call at or after `from` matching `pred`, if any.
fn next_at(calls: &[Call], from: usize, pred: impl Fn(&Call) -> bool) -> Option<usize> {
    calls
        .iter()
        .enumerate()
        .skip(from)
        .find(|(_, c)| pred(c))
        .map(|(i, _)| i)
}

#[test]
fn new_ledger_and_state_files_are_named_durably_before_a_batch_counts_on_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    input(&dir, 2, 3);
    // A stateful flow: each batch commits a state version beside its ledger rows.
    write_pipeline(
        &dir,
        &PIPELINE.replace(
            "trigger = \"available_now\"\n",
            "trigger = \"available_now\"\ngroup_by = [\"name\"]\naggregates = [\"count(*) AS n\"]\noutput_mode = \"complete\"\n",
        ),
    );
    let calls = traced_calls(
        &dir,
        "trace=fsync,fdatasync,rename,renameat2,link,linkat,open,openat,creat,mkdir,mkdirat",
        &["run", "--headless", "pipeline.toml"],
    );
    let ckpt = dir.join("_checkpoints/bronze");
    let sources = ckpt.join("sources/0");
    let made = |c: &Call, path: &Path| matches!(c, Call::Create(p) if Path::new(p) == path);
    let moved_in = |c: &Call, log: &str| matches!(c, Call::Move(_, _, to, _) if Path::new(to).parent() == Some(&ckpt.join(log)));

    // The ledger and its WAL: the directory entry of each is synced after it is made
    // and before the next offsets/N (a batch planned on the ledger's rows).
    for name in ["ledger.sqlite", "ledger.sqlite-wal"] {
        let path = sources.join(name);
        let at = position(&calls, 0, &format!("the creation of {name}"), |c| {
            made(c, &path)
        });
        let planned = position(&calls, at, "an offsets/N after it", |c| {
            moved_in(c, "offsets")
        });
        assert!(
            calls[at..planned].iter().any(fsync_of(&sources)),
            "{name} is made at call {at} but sources/0 is not synced before offsets/ at call {planned}:\n{:#?}",
            &calls[at..=planned]
        );
    }

    // Every name made under state/ (directories, version files, the schema) is synced in
    // its directory before the next commits/N.
    let state = ckpt.join("state");
    let mut checked = 0;
    for (at, c) in calls.iter().enumerate() {
        let name = match c {
            Call::Create(p) => p,
            Call::Move(_, _, to, _) => to,
            Call::Fsync(_) => continue,
        };
        let name = Path::new(name);
        if !name.starts_with(&state) || name == state {
            continue;
        }
        let parent = name.parent().unwrap();
        let committed = next_at(&calls, at, |c| moved_in(c, "commits"))
            .unwrap_or_else(|| panic!("{} is made after the last commits/N", name.display()));
        assert!(
            calls[at..committed].iter().any(fsync_of(parent)),
            "{} is made at call {at} but its directory is not synced before commits/ at call {committed}",
            name.display()
        );
        checked += 1;
    }
    // state/, state/0/, schema and two versions, each through a temp file and a rename.
    assert!(
        checked >= 6,
        "only {checked} names made under state/:\n{calls:#?}"
    );
}

#[test]
fn reset_makes_the_move_aside_durable_before_it_empties_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    input(&dir, 2, 3);
    let run = weir()
        .args(["run", "--headless", "pipeline.toml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let calls = traced(
        &dir,
        &[
            "checkpoint",
            "reset",
            "pipeline.toml",
            "--flow",
            "bronze",
            "--truncate-target",
            "--yes",
        ],
    );
    let moved = position(
        &calls,
        0,
        "the checkpoint moved aside",
        |c| matches!(c, Call::Move(_, from, _, _) if from.ends_with("/_checkpoints/bronze")),
    );
    let synced = position(
        &calls,
        moved,
        "fsync of _checkpoints/",
        fsync_of(&dir.join("_checkpoints")),
    );
    let delete = position(
        &calls,
        moved,
        "the DELETE commit",
        moved_to(|to| to.ends_with("/lake/bronze/_delta_log/00000000000000000002.json")),
    );
    assert!(
        synced < delete,
        "the table is emptied before the checkpoint's move is durable: after a power cut the old checkpoint would say every file is in an empty table"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_commit_is_repaired_by_a_documented_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let rows = input(&dir, 2, 3) as i64;
    let pipeline = dir.join("pipeline.toml");
    let ckpt = dir.join("_checkpoints/bronze");
    let first = weir()
        .args(["run", "--headless"])
        .arg(&pipeline)
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );

    // A power cut on a file system without atomic rename: commits/1 cut short.
    std::fs::write(ckpt.join("commits/1"), "v1\n{\"nextBatch").unwrap();
    let refused = weir()
        .args(["run", "--headless"])
        .arg(&pipeline)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("commits/1") && stderr.contains("weir checkpoint repair"),
        "{stderr}"
    );

    let dry = weir()
        .args(["checkpoint", "repair", "--dry-run"])
        .arg(&ckpt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(text.contains("holds batch 1"), "{text}");
    assert!(text.contains("skips the write"), "{text}");
    assert!(ckpt.join("commits/1").exists(), "a dry run changes nothing");

    let repair = weir()
        .args(["checkpoint", "repair", "--yes"])
        .arg(&ckpt)
        .output()
        .unwrap();
    assert!(
        repair.status.success(),
        "{}",
        String::from_utf8_lossy(&repair.stderr)
    );
    assert!(!ckpt.join("commits/1").exists());

    let rerun = weir()
        .args(["run", "--headless"])
        .arg(&pipeline)
        .output()
        .unwrap();
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    let expected: Vec<i64> = (0..rows).collect();
    assert_eq!(table_ids(&dir.join("lake/bronze")).await, expected);
    let progress =
        weir::checkpoint::progress::read_progress(&ckpt.join("_weir/progress.jsonl")).unwrap();
    let replay = progress
        .iter()
        .find(|p| p.weir.replayed)
        .expect("batch 1 re-run");
    assert_eq!(replay.batch_id, 1);
    assert!(
        replay.weir.sink_write_skipped,
        "the table held batch 1 already"
    );
    assert!(ckpt.join("commits/1").exists());
}
