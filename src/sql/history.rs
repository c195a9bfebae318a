//! The history of queries, per pipeline: `<pipeline dir>/.weir/<pipeline file
//! name>.sql_history.jsonl`, one JSON object per query (`at`, `sql`, `rows`,
//! `truncated`, `ms`, `error`), the newest last; [`HISTORY_KEPT`] are kept. `weir sql`
//! and the console's SQL pane (`weir run`) share it; `weir attach` keeps its history
//! in memory only (it writes nothing).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Queries kept; the file is cut back to this many when it holds twice as many.
pub const HISTORY_KEPT: usize = 1000;

/// One query run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When it ran (ISO-8601 UTC).
    pub at: String,
    pub sql: String,
    /// Rows shown (at most the row limit).
    #[serde(default)]
    pub rows: Option<u64>,
    #[serde(default)]
    pub truncated: bool,
    /// How long it took, ms.
    #[serde(default)]
    pub ms: u64,
    #[serde(default)]
    pub error: Option<String>,
}

/// Where the history of the pipeline file `pipeline` is kept.
pub fn history_path(pipeline: &Path) -> PathBuf {
    let dir = pipeline.parent().unwrap_or(Path::new("."));
    let name = pipeline
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "pipeline".into());
    dir.join(".weir").join(format!("{name}.sql_history.jsonl"))
}

/// The queries run so far, oldest first, and where new ones are appended (`None`: in
/// memory only).
#[derive(Debug, Clone, Default)]
pub struct History {
    path: Option<PathBuf>,
    entries: Vec<HistoryEntry>,
}

impl History {
    /// A history kept in memory only.
    pub fn in_memory() -> Self {
        History::default()
    }

    /// Reads the history file (a missing file is an empty history; unreadable lines
    /// are skipped).
    pub fn load(path: &Path) -> Self {
        let entries = std::fs::File::open(path)
            .map(|f| {
                BufReader::new(f)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|l| serde_json::from_str::<HistoryEntry>(&l).ok())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let skip = entries.len().saturating_sub(HISTORY_KEPT);
        History {
            path: Some(path.to_path_buf()),
            entries: entries.into_iter().skip(skip).collect(),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn entries(&self) -> &[HistoryEntry] {
        &self.entries
    }

    /// The queries, oldest first, a query repeated in a row listed once.
    pub fn queries(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.entries {
            if out.last() != Some(&e.sql) {
                out.push(e.sql.clone());
            }
        }
        out
    }

    /// Adds a query; appends it to the file (owner-only, created with its directory).
    pub fn append(&mut self, entry: HistoryEntry) -> std::io::Result<()> {
        self.entries.push(entry.clone());
        let Some(path) = self.path.clone() else {
            if self.entries.len() > HISTORY_KEPT {
                self.entries.remove(0);
            }
            return Ok(());
        };
        if let Some(dir) = path.parent() {
            crate::durable::create_dir_private(dir)?;
        }
        let line = serde_json::to_string(&entry).map_err(std::io::Error::other)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        writeln!(file, "{line}")?;
        if self.entries.len() >= 2 * HISTORY_KEPT {
            let keep = self.entries.split_off(self.entries.len() - HISTORY_KEPT);
            self.entries = keep;
            let mut text = String::new();
            for e in &self.entries {
                text.push_str(&serde_json::to_string(e).map_err(std::io::Error::other)?);
                text.push('\n');
            }
            crate::durable::write_atomic(&path, text.as_bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sql: &str) -> HistoryEntry {
        HistoryEntry {
            at: "2026-01-01T00:00:00.000Z".into(),
            sql: sql.into(),
            rows: Some(1),
            truncated: false,
            ms: 3,
            error: None,
        }
    }

    #[test]
    fn the_history_is_kept_next_to_the_pipeline_and_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let pipeline = tmp.path().join("flights.toml");
        let path = history_path(&pipeline);
        assert_eq!(
            path,
            tmp.path().join(".weir/flights.toml.sql_history.jsonl")
        );
        let mut h = History::load(&path);
        assert!(h.entries().is_empty());
        h.append(entry("SELECT 1")).unwrap();
        h.append(entry("SELECT 1")).unwrap();
        h.append(entry("SELECT 2")).unwrap();
        let again = History::load(&path);
        assert_eq!(again.entries().len(), 3);
        assert_eq!(again.queries(), ["SELECT 1", "SELECT 2"]);
        let mut h = again;
        for i in 0..(2 * HISTORY_KEPT) {
            h.append(entry(&format!("SELECT {i}"))).unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines().count() < 2 * HISTORY_KEPT,
            "the file is cut back"
        );
        let last = History::load(&path);
        assert_eq!(
            last.entries().last().map(|e| e.sql.as_str()),
            Some(format!("SELECT {}", 2 * HISTORY_KEPT - 1).as_str())
        );
    }
}
