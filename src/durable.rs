//! Durable file writes, in one place. Everything weir records (checkpoint logs and
//! metadata, operator state, schema history, progress and health, quarantined
//! records) is written atomically — a temp file in the same directory, fsync, rename,
//! fsync of the directory — and owner-only (0700 directories, 0600 files), so a crash
//! leaves the old file or the new one, never a torn one (DESIGN.md §4).
//!
//! Imports nothing else of weir: each caller says what a failure means (a checkpoint
//! file, a data file) when it maps the I/O error.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates a directory (and parents) owner-only.
pub fn create_dir_private(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes a file atomically: temp file in the same directory, fsync, rename, fsync the
/// directory. The temp file is removed when a step fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = fs::File::open(dir) {
            d.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
