//! File notifications for the file source (`use_notifications = true`): Auto Loader's
//! file-notification mode (`cloudFiles.useNotifications`) on a local directory, through
//! the `notify` crate (inotify on Linux).
//!
//! The watcher covers the source's directory recursively and keeps, between two
//! triggers, the paths of the files that became complete: a file closed after being
//! written (`IN_CLOSE_WRITE`) or renamed into the tree (`IN_MOVED_TO`). A file still
//! being written produces neither, so it is not taken before its writer closes it (the
//! listing's own rules, `min_file_age` and hidden names such as `._COPYING_`, apply
//! on top). Every notice also wakes the flow, which plans at once instead of at its
//! next idle poll.
//!
//! What the watcher cannot say is left to a full listing of the directory (the
//! fallback): a queue overflow (`IN_Q_OVERFLOW`, the kernel dropped events), a watcher
//! error, a watcher that cannot start (no landing directory yet, inotify limits), and
//! the periodic backfill listing (`backfill_interval`, Auto Loader's
//! `cloudFiles.backfillInterval`) that finds files the notifications missed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecursiveMode, Watcher as _};
use tokio::sync::watch;

/// What the watcher saw since the last [`Watcher::drain`].
#[derive(Debug, Default)]
pub struct Notices {
    /// Files that became complete (closed after a write, or renamed in), sorted.
    pub paths: Vec<PathBuf>,
    /// Why the next trigger must list the whole directory (a queue overflow, a new
    /// directory), if it must.
    pub rescan: Option<String>,
    /// The watcher failed: its notices can no longer be trusted (it is dropped and the
    /// source lists the directory until a new watcher starts).
    pub failed: Option<String>,
}

#[derive(Default)]
struct Pending {
    paths: BTreeSet<PathBuf>,
    rescan: Option<String>,
    failed: Option<String>,
}

/// A running watcher on a source's directory.
pub struct Watcher {
    // Dropped with the source: stops the watch.
    _watcher: notify::RecommendedWatcher,
    pending: Arc<Mutex<Pending>>,
}

fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    match pending.lock() {
        Ok(p) => p,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Watcher {
    /// Watches `root` recursively; each notice bumps `wake`.
    pub fn start(root: &Path, wake: watch::Sender<u64>) -> notify::Result<Watcher> {
        let pending: Arc<Mutex<Pending>> = Arc::default();
        let shared = pending.clone();
        let watched = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        let handler = move |event: notify::Result<Event>| {
            if record(&mut lock(&shared), &watched, event) {
                wake.send_modify(|n| *n = n.wrapping_add(1));
            }
        };
        // Links are not followed by the watch: with `follow_symlinks = "inside_root"`,
        // what lies behind a link is found by the listing.
        let mut watcher = notify::RecommendedWatcher::new(
            handler,
            notify::Config::default().with_follow_symlinks(false),
        )?;
        watcher.watch(root, RecursiveMode::Recursive)?;
        Ok(Watcher {
            _watcher: watcher,
            pending,
        })
    }

    /// As the kernel's queue overflow (`IN_Q_OVERFLOW`) is reported (tests).
    #[cfg(test)]
    pub fn overflowed(&self) {
        record(
            &mut lock(&self.pending),
            Path::new("/"),
            Ok(Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan)),
        );
    }

    /// As a watcher error is reported (tests).
    #[cfg(test)]
    pub fn fail(&self, error: &str) {
        record(
            &mut lock(&self.pending),
            Path::new("/"),
            Err(notify::Error::generic(error)),
        );
    }

    /// Takes what the watcher saw since the last call.
    pub fn drain(&self) -> Notices {
        let mut p = lock(&self.pending);
        Notices {
            paths: std::mem::take(&mut p.paths).into_iter().collect(),
            rescan: p.rescan.take(),
            failed: p.failed.take(),
        }
    }
}

/// Records one event on the tree watched at `root`; `true` when the flow should plan now.
fn record(pending: &mut Pending, root: &Path, event: notify::Result<Event>) -> bool {
    let event = match event {
        Ok(e) => e,
        Err(e) => {
            pending.failed.get_or_insert_with(|| e.to_string());
            return true;
        }
    };
    if event.need_rescan() {
        pending.rescan.get_or_insert_with(|| {
            "the file notification queue overflowed (events were dropped)".to_string()
        });
        return true;
    }
    match event.kind {
        // Complete: the writer closed it, or it was renamed into the tree (a directory
        // renamed in is listed when its path is examined).
        EventKind::Access(AccessKind::Close(AccessMode::Write))
        | EventKind::Modify(ModifyKind::Name(RenameMode::To)) => {
            pending.paths.extend(event.paths);
            true
        }
        // A new directory: files may land in it before its own watch is in place.
        EventKind::Create(CreateKind::Folder) => {
            pending.paths.extend(event.paths);
            true
        }
        // The watched directory itself removed or moved away: its watch is gone, and a
        // directory made again at the path would not be watched.
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(RenameMode::From))
            if event.paths.iter().any(|p| p == root) =>
        {
            pending.failed.get_or_insert_with(|| {
                "the watched directory was removed or moved away".to_string()
            });
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::Flag;

    fn event(kind: EventKind, path: &str) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(PathBuf::from(path)))
    }

    #[test]
    fn only_complete_files_are_recorded() {
        let mut p = Pending::default();
        // Created, written: still in progress.
        assert!(!record(
            &mut p,
            Path::new("/l"),
            event(EventKind::Create(CreateKind::File), "/l/a.json")
        ));
        assert!(!record(
            &mut p,
            Path::new("/l"),
            event(
                EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any)),
                "/l/a.json"
            )
        ));
        assert!(p.paths.is_empty());
        // Closed after the write, or renamed in: complete.
        assert!(record(
            &mut p,
            Path::new("/l"),
            event(
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                "/l/a.json"
            )
        ));
        assert!(record(
            &mut p,
            Path::new("/l"),
            event(
                EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                "/l/b.json"
            )
        ));
        assert_eq!(
            p.paths.iter().cloned().collect::<Vec<_>>(),
            vec![PathBuf::from("/l/a.json"), PathBuf::from("/l/b.json")]
        );
        // An overflow asks for a listing; an error marks the watcher failed.
        assert!(record(
            &mut p,
            Path::new("/l"),
            Ok(Event::new(EventKind::Other).set_flag(Flag::Rescan))
        ));
        assert!(
            p.rescan
                .as_deref()
                .is_some_and(|r| r.contains("overflowed"))
        );
        assert!(record(
            &mut p,
            Path::new("/l"),
            Err(notify::Error::generic("boom"))
        ));
        assert_eq!(p.failed.as_deref(), Some("boom"));
        // The watched directory removed: the watcher is failed (a new one is started).
        let mut p = Pending::default();
        assert!(!record(
            &mut p,
            Path::new("/l"),
            event(
                EventKind::Remove(notify::event::RemoveKind::File),
                "/l/a.json"
            )
        ));
        assert!(record(
            &mut p,
            Path::new("/l"),
            event(EventKind::Remove(notify::event::RemoveKind::Folder), "/l")
        ));
        assert!(p.failed.as_deref().is_some_and(|f| f.contains("removed")));
    }
}
