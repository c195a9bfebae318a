//! `_weir/lock`: one process per checkpoint.
//!
//! The lock is an exclusive `flock` on `_weir/lock`, held for the life of the
//! process (the kernel releases it when the process dies, also on `kill -9`).
//! The file's content names the holder (pid, host, start time) so a refused
//! process can say who holds it. A clean stop empties the file; content left
//! behind by a process that died is reported as a warning when the next
//! process takes the lock over.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::Checkpoint;
use crate::durable::create_dir_private;
use crate::error::{Error, Result};

/// Who holds a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    pub host: String,
    pub started_at: String,
}

/// The held lock; released on drop.
#[derive(Debug)]
pub struct CheckpointLock {
    file: Option<Flock<File>>,
    /// Set when the lock was taken over from a process that died without releasing it.
    pub taken_over_from: Option<LockHolder>,
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_string())
}

impl CheckpointLock {
    /// Takes the lock or fails with [`Error::CheckpointLocked`] naming the holder.
    pub fn acquire(checkpoint: &Checkpoint) -> Result<Self> {
        let dir = checkpoint.weir_dir();
        create_dir_private(&dir).map_err(|e| Error::io(&dir, e))?;
        let path = dir.join("lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::checkpoint(&path, format!("cannot open the lock file: {e}")))?;
        let mut locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut file, errno)) => {
                if errno == nix::errno::Errno::EWOULDBLOCK {
                    let holder = read_holder(&mut file).unwrap_or(LockHolder {
                        pid: 0,
                        host: "unknown".into(),
                        started_at: "unknown".into(),
                    });
                    return Err(Error::CheckpointLocked {
                        checkpoint: checkpoint.root().to_path_buf(),
                        pid: holder.pid,
                        host: holder.host,
                        started_at: holder.started_at,
                    });
                }
                return Err(Error::checkpoint(&path, format!("cannot lock: {errno}")));
            }
        };
        let previous = read_holder(&mut locked);
        let me = LockHolder {
            pid: std::process::id(),
            host: hostname(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        write_holder(&mut locked, Some(&me), &path)?;
        Ok(CheckpointLock {
            file: Some(locked),
            taken_over_from: previous,
        })
    }

    /// Who holds the lock of a checkpoint right now, without taking it.
    pub fn holder(checkpoint: &Checkpoint) -> Option<LockHolder> {
        let path = checkpoint.weir_dir().join("lock");
        let file = File::open(&path).ok()?;
        match Flock::lock(file, FlockArg::LockSharedNonblock) {
            Ok(_free) => None,
            Err((mut file, _)) => read_holder(&mut file),
        }
    }
}

impl Drop for CheckpointLock {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            let _ = file.set_len(0);
            let _ = file.sync_all();
        }
    }
}

fn read_holder(file: &mut File) -> Option<LockHolder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.trim()).ok()
}

fn write_holder(file: &mut File, holder: Option<&LockHolder>, path: &Path) -> Result<()> {
    let text = holder
        .and_then(|h| serde_json::to_string(h).ok())
        .unwrap_or_default();
    (|| -> std::io::Result<()> {
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(text.as_bytes())?;
        file.sync_all()
    })()
    .map_err(|e| Error::checkpoint(path, format!("cannot write the lock file: {e}")))
}
