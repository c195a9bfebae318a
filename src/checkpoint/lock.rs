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

/// How often and how far apart a start tries again when the lock is held (1 s in all):
/// longer than any probe by [`CheckpointLock::holder`], shorter than a person notices.
const LOCK_TRIES: u32 = 50;
const LOCK_TRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

/// Set (to anything) to allow a checkpoint on a network file system.
pub const ALLOW_NETWORK_FS_ENV: &str = "WEIR_ALLOW_NETWORK_CHECKPOINT";

/// The kind of network or user-space file system `dir` is on (`statfs`'s `f_type`), if
/// it is one: NFS, SMB/CIFS or FUSE, where `flock` and rename are not what a local
/// file system promises.
fn network_file_system(dir: &Path) -> Option<&'static str> {
    let st = nix::sys::statfs::statfs(dir).ok()?;
    network_magic(st.filesystem_type().0 as u64 & 0xFFFF_FFFF)
}

/// Linux's `f_type` magic numbers of the file systems [`network_file_system`] refuses
/// (`linux/magic.h`, `fs/smb/client/cifsglob.h`).
fn network_magic(magic: u64) -> Option<&'static str> {
    match magic {
        0x6969 => Some("NFS"),
        0x517B => Some("SMB"),
        0xFF53_4D42 => Some("CIFS"),
        0xFE53_4D42 => Some("SMB2"),
        0x6573_5546 => Some("FUSE"),
        _ => None,
    }
}

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
        if std::env::var_os(ALLOW_NETWORK_FS_ENV).is_none()
            && let Some(kind) = network_file_system(&dir)
        {
            return Err(Error::checkpoint(
                checkpoint.root(),
                format!(
                    "the checkpoint is on a network file system ({kind}): its file locks may not keep a \
                     process on another host away, and its renames and fsyncs may not be atomic and \
                     durable, which exactly-once relies on. weir refuses it by default. Put the \
                     checkpoint on a local disk, or set {ALLOW_NETWORK_FS_ENV}=1 to accept the risk"
                ),
            ));
        }
        let path = dir.join("lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::checkpoint(&path, format!("cannot open the lock file: {e}")))?;
        // `holder()` (weir inspect, the console) probes with a shared lock held for a
        // moment; a start that meets such a probe tries again for a while instead of
        // failing with "in use" (issue #18). A process that holds the lock holds it
        // for its life, so it is still held when the tries run out.
        let mut file = file;
        let mut tries = 0;
        let locked = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Err((f, nix::errno::Errno::EWOULDBLOCK)) if tries < LOCK_TRIES => {
                    tries += 1;
                    file = f;
                    std::thread::sleep(LOCK_TRY_INTERVAL);
                }
                other => break other,
            }
        };
        let mut locked = match locked {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe by `holder()` (a shared lock held for a moment, as `weir inspect` does
    /// while a run starts) does not make the start fail with "in use by pid 0".
    #[test]
    fn a_start_waits_out_a_probe() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::at(dir.path());
        drop(CheckpointLock::acquire(&cp).unwrap());
        let probe = Flock::lock(
            File::open(cp.weir_dir().join("lock")).unwrap(),
            FlockArg::LockSharedNonblock,
        )
        .unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            drop(probe);
        });
        let lock = CheckpointLock::acquire(&cp).expect("the start waits for the probe");
        release.join().unwrap();
        assert_eq!(
            CheckpointLock::holder(&cp).map(|h| h.pid),
            Some(std::process::id())
        );
        drop(lock);
        assert_eq!(CheckpointLock::holder(&cp), None);
    }

    /// NFS, SMB/CIFS and FUSE are told apart from local file systems (ext4, xfs,
    /// tmpfs, overlayfs, btrfs); the test machine's own is local.
    #[test]
    fn network_file_systems_are_recognised() {
        for (magic, kind) in [
            (0x6969, "NFS"),
            (0x517B, "SMB"),
            (0xFF53_4D42, "CIFS"),
            (0xFE53_4D42, "SMB2"),
            (0x6573_5546, "FUSE"),
        ] {
            assert_eq!(network_magic(magic), Some(kind));
        }
        for local in [0xEF53, 0x5846_5342, 0x0102_1994, 0x794C_7630, 0x9123_683E] {
            assert_eq!(network_magic(local), None);
        }
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(network_file_system(dir.path()), None);
    }

    /// A process that holds the lock is still reported, by name.
    #[test]
    fn a_held_lock_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::at(dir.path());
        let _held = CheckpointLock::acquire(&cp).unwrap();
        match CheckpointLock::acquire(&cp) {
            Err(Error::CheckpointLocked { pid, .. }) => assert_eq!(pid, std::process::id()),
            other => panic!("expected CheckpointLocked, got {other:?}"),
        }
    }
}
