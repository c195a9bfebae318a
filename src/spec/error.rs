//! The error of an invalid pipeline file.

use std::fmt;
use std::path::PathBuf;

/// An invalid pipeline file: where, which key, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PipelineError {
    pub file: PathBuf,
    /// 1-based; 0 when the error is not tied to a position (e.g. the file cannot be read).
    pub line: usize,
    pub column: usize,
    /// Dotted key path, e.g. `flow[0].source.max_bytes_per_trigger`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        } else {
            write!(f, "{}: ", self.file.display())?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}
