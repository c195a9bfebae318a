//! `_weir/progress.jsonl`: the flow's recent progress records (`crate::records`), one
//! JSON line each, for `weir attach`, the health classifier and post-mortems.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::records::StreamingQueryProgress;

/// `_weir/progress.jsonl`, bounded to the last [`ProgressLog::RETAIN`] records.
pub struct ProgressLog {
    path: PathBuf,
    lines: usize,
}

impl ProgressLog {
    /// Records kept in the file; older ones are dropped when it grows to twice this.
    pub const RETAIN: usize = 1000;

    pub fn open(path: &Path) -> Self {
        let lines = std::fs::File::open(path)
            .map(|f| BufReader::new(f).lines().count())
            .unwrap_or(0);
        ProgressLog {
            path: path.to_path_buf(),
            lines,
        }
    }

    pub fn append(&mut self, record: &StreamingQueryProgress) -> Result<()> {
        let line = serde_json::to_string(record)
            .map_err(|e| Error::checkpoint(&self.path, e.to_string()))?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(|e| Error::checkpoint(&self.path, e.to_string()))?;
        writeln!(file, "{line}").map_err(|e| Error::checkpoint(&self.path, e.to_string()))?;
        self.lines += 1;
        if self.lines >= 2 * Self::RETAIN {
            self.compact()?;
        }
        Ok(())
    }

    fn compact(&mut self) -> Result<()> {
        let records = read_progress(&self.path)?;
        let keep = &records[records.len().saturating_sub(Self::RETAIN)..];
        let mut text = String::new();
        for r in keep {
            if let Ok(line) = serde_json::to_string(r) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        crate::durable::write_atomic(&self.path, text.as_bytes())
            .map_err(|e| Error::unwritable(&self.path, e))?;
        self.lines = keep.len();
        Ok(())
    }
}

/// Reads every well-formed record of a progress file (a torn last line is skipped).
pub fn read_progress(path: &Path) -> Result<Vec<StreamingQueryProgress>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::checkpoint(path, e.to_string())),
    };
    Ok(BufReader::new(file)
        .lines()
        .map_while(std::result::Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect())
}
