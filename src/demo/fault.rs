//! Faults to inject into a live demo, one per playbook, to rehearse it on a
//! running stream: `weir demo --live --inject NAME[@SECONDS]`, or [`inject`]
//! from the console.
//!
//! | name | what happens | the flow should become |
//! |---|---|---|
//! | `small-files` | a burst of 2,000 one-row files | `lagging` |
//! | `source-unavailable` | the landing directory is renamed away for 20 s (works for root, unlike permissions) | `source_unavailable` |
//! | `sink-unavailable` | each flow's table directory is renamed away and a plain file put in its place for 20 s | `sink_unavailable` |
//! | `schema-drift` | a file with a new column `gate` and `dep_delay` as text (`"12 min"`) | `schema_mismatch` / schema changed |
//! | `malformed` | a file with broken lines, and a truncated gzip file | rows quarantined or rescued, a failed file |
//! | `late-and-future` | rows scheduled a week ago and a year ahead | late rows counted; the watermark jumps |
//! | `duplicates` | a copy of an already landed file under a new name | duplicates (dropped by a dedup flow) |
//! | `crash` | headless: the demo runs as a child process, killed with SIGKILL and restarted; in the console: the process aborts (run the same command to restart) | recovers exactly once |
//!
//! Each injection returns an [`Injected`] record (name, detail, time) and is
//! announced on stderr as `weir: fault injected: NAME: DETAIL`, so a console
//! timeline or a log shows it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};

/// How long the `*-unavailable` faults last.
pub const UNAVAILABLE_FOR: Duration = Duration::from_secs(20);
/// Files in a `small-files` burst.
pub const SMALL_FILES: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    SmallFiles,
    SourceUnavailable,
    SinkUnavailable,
    SchemaDrift,
    Malformed,
    LateAndFuture,
    Duplicates,
    Crash,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::SmallFiles,
        Fault::SourceUnavailable,
        Fault::SinkUnavailable,
        Fault::SchemaDrift,
        Fault::Malformed,
        Fault::LateAndFuture,
        Fault::Duplicates,
        Fault::Crash,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::SmallFiles => "small-files",
            Fault::SourceUnavailable => "source-unavailable",
            Fault::SinkUnavailable => "sink-unavailable",
            Fault::SchemaDrift => "schema-drift",
            Fault::Malformed => "malformed",
            Fault::LateAndFuture => "late-and-future",
            Fault::Duplicates => "duplicates",
            Fault::Crash => "crash",
        }
    }

    pub fn parse(name: &str) -> std::result::Result<Fault, String> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                format!(
                    "unknown fault {name:?}; faults: {}",
                    Fault::ALL.map(Fault::name).join(", ")
                )
            })
    }
}

/// `NAME[@SECONDS]`: a fault and when to inject it (seconds after the start).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduledFault {
    pub fault: Fault,
    pub after: Duration,
}

impl std::str::FromStr for ScheduledFault {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (name, after) = match s.split_once('@') {
            Some((n, secs)) => (
                n,
                secs.trim_end_matches('s')
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| format!("invalid time {secs:?} in {s:?}; write NAME@SECONDS, e.g. small-files@10"))?,
            ),
            None => (s, Duration::ZERO),
        };
        Ok(ScheduledFault {
            fault: Fault::parse(name)?,
            after,
        })
    }
}

/// Where a fault acts.
#[derive(Debug, Clone)]
pub struct Target {
    /// The landing directory of the flights (`DIR/landing/flights`).
    pub landing: PathBuf,
    /// Staging directory (same file system) for atomic arrivals.
    pub staging: PathBuf,
    /// The flows' Delta tables.
    pub tables: Vec<PathBuf>,
    /// The CSV header of the landed files.
    pub header: String,
    /// A well-formed data line to build rows from.
    pub sample_line: String,
}

/// A fault that was injected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Injected {
    pub fault: Fault,
    pub detail: String,
    pub at_ms: i64,
}

fn land(target: &Target, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    let dir = target.landing.join("faults");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    std::fs::create_dir_all(&target.staging).map_err(|e| Error::io(&target.staging, e))?;
    let tmp = target.staging.join(name);
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    let to = dir.join(name);
    std::fs::rename(&tmp, &to).map_err(|e| Error::io(&to, e))?;
    Ok(to)
}

/// Replaces field `column` of a CSV line (no quoted commas in the flights data).
fn with_field(header: &str, line: &str, column: &str, value: &str) -> String {
    let i = header.split(',').position(|c| c == column);
    line.split(',')
        .enumerate()
        .map(|(j, f)| if Some(j) == i { value } else { f })
        .collect::<Vec<_>>()
        .join(",")
}

fn file_name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dir".into())
}

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%3f"))
}

/// Injects `fault`. The `*-unavailable` faults restore what they moved after
/// [`UNAVAILABLE_FOR`] (so await this in a task); `crash` aborts the process.
pub async fn inject(fault: Fault, target: &Target) -> Result<Injected> {
    inject_notify(fault, target, None).await
}

/// [`inject`], also sending the [`Injected`] record on `notify` the moment the fault
/// starts (a console timeline), before an `*-unavailable` fault is over.
pub async fn inject_notify(
    fault: Fault,
    target: &Target,
    notify: Option<&tokio::sync::mpsc::Sender<Injected>>,
) -> Result<Injected> {
    let at_ms = crate::clock::now_ms();
    let announce = |detail: String| {
        eprintln!("weir: fault injected: {}: {detail}", fault.name());
        let injected = Injected {
            fault,
            detail,
            at_ms,
        };
        if let Some(tx) = notify {
            let _ = tx.try_send(injected.clone());
        }
        injected
    };
    match fault {
        Fault::SmallFiles => {
            let base = unique("small");
            for i in 0..SMALL_FILES {
                let body = format!("{}\n{}\n", target.header, target.sample_line);
                land(target, &format!("{base}_{i:05}.csv"), body.as_bytes())?;
            }
            Ok(announce(format!(
                "{SMALL_FILES} one-row files landed in {}",
                target.landing.join("faults").display()
            )))
        }
        Fault::SourceUnavailable => {
            let away = target
                .landing
                .with_file_name(format!(".{}-unavailable", file_name_of(&target.landing)));
            std::fs::rename(&target.landing, &away).map_err(|e| Error::io(&target.landing, e))?;
            let injected = announce(format!(
                "{} moved away for {} s",
                target.landing.display(),
                UNAVAILABLE_FOR.as_secs()
            ));
            tokio::time::sleep(UNAVAILABLE_FOR).await;
            // Files the producer landed meanwhile (it recreates the directory) join the rest.
            if target.landing.exists() {
                move_into(&target.landing, &away)?;
                std::fs::remove_dir_all(&target.landing)
                    .map_err(|e| Error::io(&target.landing, e))?;
            }
            std::fs::rename(&away, &target.landing).map_err(|e| Error::io(&away, e))?;
            eprintln!(
                "weir: fault over: source-unavailable: {} is back",
                target.landing.display()
            );
            Ok(injected)
        }
        Fault::SinkUnavailable => {
            let mut moved = Vec::new();
            for table in &target.tables {
                let away = table.with_file_name(format!(".{}-unavailable", file_name_of(table)));
                if std::fs::rename(table, &away).is_ok() {
                    // A plain file where the directory was: creating or writing the table fails.
                    let mut f = std::fs::File::create(table).map_err(|e| Error::io(table, e))?;
                    let _ = f.write_all(b"weir demo fault: sink-unavailable\n");
                    moved.push((table.clone(), away));
                }
            }
            let injected = announce(format!(
                "{} table(s) made unwritable for {} s",
                moved.len(),
                UNAVAILABLE_FOR.as_secs()
            ));
            tokio::time::sleep(UNAVAILABLE_FOR).await;
            for (table, away) in moved {
                std::fs::remove_file(&table).map_err(|e| Error::io(&table, e))?;
                std::fs::rename(&away, &table).map_err(|e| Error::io(&away, e))?;
            }
            eprintln!("weir: fault over: sink-unavailable: tables are back");
            Ok(injected)
        }
        Fault::SchemaDrift => {
            let header = format!("{},gate", target.header);
            let line = with_field(&target.header, &target.sample_line, "dep_delay", "12 min");
            let body = format!("{header}\n{line},B12\n");
            let p = land(target, &format!("{}.csv", unique("drift")), body.as_bytes())?;
            Ok(announce(format!(
                "{} adds column gate and writes dep_delay as text",
                p.display()
            )))
        }
        Fault::Malformed => {
            let body = format!(
                "{}\n{}\nthis line is not a flight\n\u{FFFD}\u{FFFD},,broken\n",
                target.header, target.sample_line
            );
            let mut bytes = body.into_bytes();
            bytes.extend_from_slice(&[0xFF, 0xFE, b',', b'\n']);
            let bad = land(target, &format!("{}.csv", unique("malformed")), &bytes)?;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            for _ in 0..200 {
                let _ = writeln!(gz, "{}", target.sample_line);
            }
            let full = gz.finish().map_err(|e| Error::io("gzip", e))?;
            let truncated = &full[..full.len() / 2];
            // Named .csv like the other landed files: readers sniff gzip by its magic bytes.
            let gz_path = land(target, &format!("{}.csv", unique("truncated")), truncated)?;
            Ok(announce(format!(
                "{} has broken lines; {} is a truncated gzip",
                bad.display(),
                gz_path.display()
            )))
        }
        Fault::LateAndFuture => {
            let now = chrono::Utc::now();
            let past = (now - chrono::Duration::days(3650))
                .format("%Y-%m-%dT%H:00:00Z")
                .to_string();
            let future = (now + chrono::Duration::days(365))
                .format("%Y-%m-%dT%H:00:00Z")
                .to_string();
            let late = with_field(
                &target.header,
                &target.sample_line,
                "time_hour",
                "2012-12-24T10:00:00Z",
            );
            let older = with_field(&target.header, &target.sample_line, "time_hour", &past);
            let ahead = with_field(&target.header, &target.sample_line, "time_hour", &future);
            let body = format!("{}\n{late}\n{older}\n{ahead}\n", target.header);
            let p = land(target, &format!("{}.csv", unique("late")), body.as_bytes())?;
            Ok(announce(format!(
                "{} holds rows at 2012-12-24, {past} and {future}",
                p.display()
            )))
        }
        Fault::Duplicates => {
            let newest = newest_file(&target.landing)?;
            let Some(src) = newest else {
                return Ok(announce("nothing landed yet to duplicate".into()));
            };
            let bytes = std::fs::read(&src).map_err(|e| Error::io(&src, e))?;
            let p = land(target, &format!("{}.csv", unique("duplicate")), &bytes)?;
            Ok(announce(format!(
                "{} is a copy of {}",
                p.display(),
                src.display()
            )))
        }
        Fault::Crash => {
            announce(
                "the process aborts now, like kill -9; run the same command again to restart"
                    .into(),
            );
            let _ = std::io::stderr().flush();
            std::process::abort()
        }
    }
}

/// Moves every file below `from` to the same relative place below `to`.
fn move_into(from: &Path, to: &Path) -> Result<()> {
    for e in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let e = e.map_err(|e| Error::io(from, e))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            std::fs::create_dir_all(&dst).map_err(|e| Error::io(&dst, e))?;
            move_into(&src, &dst)?;
        } else {
            std::fs::rename(&src, &dst).map_err(|e| Error::io(&dst, e))?;
        }
    }
    Ok(())
}

fn newest_file(dir: &Path) -> Result<Option<PathBuf>> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            if name.to_string_lossy().starts_with(['.', '_']) {
                continue;
            }
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "csv")
                && let Ok(m) = meta.modified()
                && best.as_ref().is_none_or(|(t, _)| m > *t)
            {
                best = Some((m, p));
            }
        }
    }
    Ok(best.map(|(_, p)| p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(dir: &Path) -> Target {
        Target {
            landing: dir.join("landing/flights"),
            staging: dir.join("_staging"),
            tables: vec![dir.join("lake/t")],
            header: "year,dep_delay,time_hour".into(),
            sample_line: "2013,5,2013-01-01T10:00:00Z".into(),
        }
    }

    #[test]
    fn files_landed_while_away_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let (away, back) = (tmp.path().join("away"), tmp.path().join("landing"));
        std::fs::create_dir_all(away.join("2013-01")).unwrap();
        std::fs::write(away.join("2013-01/a.csv"), "a").unwrap();
        std::fs::create_dir_all(back.join("2013-01")).unwrap();
        std::fs::write(back.join("2013-01/b.csv"), "b").unwrap();
        move_into(&back, &away).unwrap();
        assert_eq!(
            std::fs::read_to_string(away.join("2013-01/b.csv")).unwrap(),
            "b"
        );
        assert_eq!(
            std::fs::read_to_string(away.join("2013-01/a.csv")).unwrap(),
            "a"
        );
    }

    #[test]
    fn names_parse_with_an_optional_time() {
        let s: ScheduledFault = "small-files@2.5".parse().unwrap();
        assert_eq!(s.fault, Fault::SmallFiles);
        assert_eq!(s.after, Duration::from_millis(2500));
        assert_eq!(
            "crash".parse::<ScheduledFault>().unwrap().after,
            Duration::ZERO
        );
        assert!(
            "nope"
                .parse::<ScheduledFault>()
                .unwrap_err()
                .contains("small-files")
        );
        for f in Fault::ALL {
            assert_eq!(Fault::parse(f.name()), Ok(f));
        }
    }

    #[tokio::test]
    async fn file_faults_land_what_they_say() {
        let tmp = tempfile::tempdir().unwrap();
        let t = target(tmp.path());
        std::fs::create_dir_all(&t.landing).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let drift = inject_notify(Fault::SchemaDrift, &t, Some(&tx))
            .await
            .unwrap();
        assert_eq!(drift.fault, Fault::SchemaDrift);
        assert_eq!(rx.try_recv().unwrap(), drift, "the console hears of it");
        let late = inject(Fault::LateAndFuture, &t).await.unwrap();
        assert!(late.detail.contains("2012-12-24"));
        let dup = inject(Fault::Duplicates, &t).await.unwrap();
        assert!(dup.detail.contains("copy of"), "{}", dup.detail);
        inject(Fault::Malformed, &t).await.unwrap();
        let files: Vec<String> = std::fs::read_dir(t.landing.join("faults"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files.len(), 5, "{files:?}");
        let drift_file = files.iter().find(|f| f.starts_with("drift")).unwrap();
        let text = std::fs::read_to_string(t.landing.join("faults").join(drift_file)).unwrap();
        assert!(
            text.starts_with("year,dep_delay,time_hour,gate\n2013,12 min,"),
            "{text}"
        );
        let gz = files.iter().find(|f| f.starts_with("truncated")).unwrap();
        let bytes = std::fs::read(t.landing.join("faults").join(gz)).unwrap();
        let mut out = String::new();
        use std::io::Read as _;
        assert!(
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_string(&mut out)
                .is_err(),
            "the gzip is truncated"
        );
    }
}
