//! Durable file writes, in one place: what a file or directory needs so that it
//! survives a power cut, not only the death of the process. Everything weir records
//! (checkpoint logs and metadata, operator state, schema history, progress and health,
//! quarantined records) goes through here, owner-only (0700 directories, 0600 files).
//!
//! A write is durable once its bytes are fsynced *and* the directory entry naming it is
//! fsynced (POSIX does not promise the name with the data, and ext4/xfs can lose a new
//! name or a rename after a power cut until the directory is synced). Every step of the
//! batch protocol that a later step relies on goes through here:
//!
//! | helper | does | used for |
//! |---|---|---|
//! | [`write_atomic`], [`write_atomic_with`] | temp file, fsync, `rename`, fsync of the directory | files that may be replaced; a crash leaves the old or the new one, never a torn one |
//! | [`write_new`] | temp file, fsync, `renameat2(RENAME_NOREPLACE)` (or `link`), fsync of the directory | `offsets/N`: never overwritten, refused atomically |
//! | [`rename_new`] | `renameat2(RENAME_NOREPLACE)`, fsync of both directories | moving a checkpoint or a torn file aside |
//! | [`create_dir_private`] | `mkdir` of each missing component (0700), fsync of each parent | checkpoint, table and side-table directories |
//! | [`sync_file`], [`sync_dir`] | fsync of what another library wrote | Delta data files and `_delta_log/<v>.json` ([`crate::delta_store`]) |
//!
//! Imports nothing else of weir: each caller says what a failure means (a checkpoint
//! file, a data file) when it maps the I/O error. `docs/reliability.md` lists the
//! guarantees and how each is tested (a syscall trace under `strace`, and a power-cut
//! model that keeps only what was fsynced).

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The temp file beside `path` that a write goes through (hidden: listings skip it).
fn temp_path(path: &Path) -> PathBuf {
    let dir = parent(path);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes `bytes` to a new temp file beside `path` (owner-only) and fsyncs it.
fn write_temp(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    write_temp_with(path, |file| file.write_all(bytes))
}

/// Creates a new temp file beside `path` (owner-only), lets `write` fill it, fsyncs it.
fn write_temp_with<E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut fs::File) -> Result<(), E>,
) -> Result<PathBuf, E> {
    let tmp = temp_path(path);
    let result = (|| -> Result<(), E> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        write(&mut file)?;
        file.sync_all()?;
        Ok(())
    })();
    match result {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Replaces `path` with `bytes` atomically and durably: temp file, fsync, rename, fsync
/// of the directory. A reader sees the old content or the new, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// [`write_atomic`] for content written as it is produced (a large file is not held in
/// memory first): `write` fills the temp file, then fsync, rename, fsync of the directory.
pub fn write_atomic_with<E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut fs::File) -> Result<(), E>,
) -> Result<(), E> {
    let tmp = write_temp_with(path, write)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(sync_dir(parent(path))?)
}

/// Creates `path` with `bytes` atomically and durably, refusing (`AlreadyExists`) when
/// the name exists: the temp file is moved in with `renameat2(RENAME_NOREPLACE)`, or with
/// `link` where the file system does not support that flag. Unlike a check followed by
/// a rename, two writers cannot both succeed.
pub fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if path.exists() {
        return Err(std::io::Error::new(
            ErrorKind::AlreadyExists,
            "the file exists",
        ));
    }
    let tmp = write_temp(path, bytes)?;
    let moved = nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &tmp,
        nix::fcntl::AT_FDCWD,
        path,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    );
    let result = match moved {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS) => {
            // No RENAME_NOREPLACE here: a hard link fails on an existing name just as well.
            let linked = fs::hard_link(&tmp, path);
            let _ = fs::remove_file(&tmp);
            linked
        }
        Err(errno) => Err(std::io::Error::from(errno)),
    };
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    sync_dir(parent(path))
}

/// Moves a file or directory to a name that must not exist yet (`AlreadyExists`
/// otherwise), then fsyncs both directories, so the move is durable before the next
/// step relies on it (e.g. `weir checkpoint reset` moves the checkpoint aside before it
/// empties the table: after a power cut the table must not be empty while the old
/// checkpoint is still in place).
pub fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
    let moved = nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        from,
        nix::fcntl::AT_FDCWD,
        to,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    );
    match moved {
        Ok(()) => {}
        Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS) => {
            if to.exists() {
                return Err(std::io::Error::new(
                    ErrorKind::AlreadyExists,
                    "the destination exists",
                ));
            }
            fs::rename(from, to)?;
        }
        Err(errno) => return Err(std::io::Error::from(errno)),
    }
    sync_dir(parent(to))?;
    if parent(from) != parent(to) {
        sync_dir(parent(from))?;
    }
    Ok(())
}

/// Creates a directory and its missing parents, owner-only (0700), and makes each new
/// name durable by fsyncing the directory that holds it. Existing directories are left
/// as they are.
pub fn create_dir_private(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    // The missing components, outermost first.
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.as_os_str().is_empty() && !at.is_dir() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    for d in missing.iter().rev() {
        match fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => {}
            // Another thread or process created it meanwhile: its name may not be durable
            // yet, so the parent is synced all the same.
            Err(e) if e.kind() == ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
        sync_dir(parent(d))?;
    }
    Ok(())
}

/// fsyncs a file someone else wrote (its data and metadata).
pub fn sync_file(path: &Path) -> std::io::Result<()> {
    fs::File::open(path)?.sync_all()
}

/// fsyncs a directory, so the names created, renamed or linked in it are durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_new_refuses_an_existing_name_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0");
        write_new(&path, b"first").unwrap();
        let err = write_new(&path, b"second").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"first");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("0")]);
    }

    #[test]
    fn concurrent_writers_of_one_name_cannot_both_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("7");
        let wins: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let path = path.clone();
                    s.spawn(move || {
                        usize::from(write_new(&path, format!("{i}").as_bytes()).is_ok())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, 1);
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp file left"
        );
    }

    #[test]
    fn create_dir_private_creates_owner_only_parents() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dir_private(&deep).unwrap();
        for d in ["a", "a/b", "a/b/c"] {
            let mode = fs::metadata(dir.path().join(d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{d}");
        }
        create_dir_private(&deep).unwrap();
    }
}
