//! A local, read-only copy of a checkpoint (or an event-log directory) that lives on an
//! object store, refreshed incrementally, so that the tools that read checkpoints from a
//! directory (`weir inspect`, `weir attach`, `--spark` with its event logs) read a remote
//! one as they read a local one.
//!
//! A refresh is one listing of the prefix (one request per 1,000 keys) and a `GET` of
//! each object that is new or whose ETag or size changed: `offsets/N` and `commits/N` are
//! written once, so each is fetched once; `_weir/progress.jsonl` and an event log in
//! progress are fetched again when they change. Operator state (`state/`) is not copied:
//! no tool that reads a checkpoint needs its versions. Nothing is written to the store.
//!
//! The copy lives under the user's cache directory (`$XDG_CACHE_HOME/weir/mirror`, else
//! `~/.cache/weir/mirror`), one directory per URL, and is reused by the next command.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{Location, StorageError, StorageOptions, Store};

/// What a refresh did: requests made and bytes fetched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refreshed {
    pub lists: u64,
    pub gets: u64,
    pub bytes: u64,
}

/// A remote prefix copied to a local directory.
#[derive(Debug)]
pub struct Mirror {
    store: Store,
    local: PathBuf,
    /// Key (relative) -> (ETag or size and last-modified) of the copy taken.
    seen: HashMap<String, String>,
}

impl Mirror {
    /// A mirror of `location` in the cache directory (created); nothing is fetched yet.
    pub fn new(location: &Location, options: &StorageOptions) -> Result<Mirror, StorageError> {
        let store = Store::for_location(location, options)?;
        let local = cache_dir().join(dir_name(&location.to_string()));
        std::fs::create_dir_all(&local).map_err(|e| StorageError::Options {
            url: location.to_string(),
            message: format!("cannot create the local copy {}: {e}", local.display()),
        })?;
        Ok(Mirror {
            store,
            local,
            seen: HashMap::new(),
        })
    }

    /// The local directory holding the copy.
    pub fn local(&self) -> &Path {
        &self.local
    }

    pub fn location(&self) -> &Location {
        self.store.location()
    }

    /// Brings the copy up to date: one listing, then the objects that changed.
    pub async fn refresh(&mut self) -> Result<Refreshed, StorageError> {
        let mut done = Refreshed {
            lists: 1,
            ..Refreshed::default()
        };
        let listed = self.store.list("", None).await?;
        for meta in listed {
            let Some(rel) = self.store.relative(&meta.location) else {
                continue;
            };
            if rel.is_empty() || rel.starts_with("state/") || rel.split('/').any(|p| p == "..") {
                continue;
            }
            let version = meta.e_tag.clone().unwrap_or_else(|| {
                format!("{}@{}", meta.size, meta.last_modified.timestamp_millis())
            });
            if self.seen.get(&rel) == Some(&version) {
                continue;
            }
            let Some(bytes) = self.store.get(&rel).await? else {
                // Gone between the listing and the read (a retention clean-up): skip it.
                continue;
            };
            done.gets += 1;
            done.bytes += bytes.len() as u64;
            let path = self.local.join(&rel);
            let written = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&path, &bytes));
            written.map_err(|e| StorageError::Options {
                url: self.store.location().join(&rel).to_string(),
                message: format!("cannot write the local copy {}: {e}", path.display()),
            })?;
            self.seen.insert(rel, version);
        }
        Ok(done)
    }
}

/// `$XDG_CACHE_HOME/weir/mirror`, else `~/.cache/weir/mirror`, else the temp directory's.
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("weir").join("mirror")
}

/// A directory name for a URL: readable, and unique by a hash of the whole URL.
fn dir_name(url: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    url.hash(&mut hasher);
    let readable: String = url
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let tail = &readable[readable.len().saturating_sub(60)..];
    format!("{tail}-{:016x}", hasher.finish())
}

/// How often a followed copy is refreshed (`weir attach`): 30 listings a minute per
/// remote location, plus a `GET` per object that changed.
pub const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The local paths to read for `paths` (command-line arguments): a local path as it is,
/// an object-store URL as a mirror's local copy, refreshed once. Returns the mirrors to
/// refresh while following.
pub async fn local_copies(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<Mirror>), StorageError> {
    let mut locals = Vec::with_capacity(paths.len());
    let mut mirrors = Vec::new();
    for p in paths {
        let text = p.to_string_lossy();
        if !super::location::is_remote_text(&text) {
            locals.push(p.clone());
            continue;
        }
        let location = Location::parse(&text, Path::new(""))?;
        let mut mirror = Mirror::new(&location, &StorageOptions::new())?;
        mirror.refresh().await?;
        locals.push(mirror.local().to_path_buf());
        mirrors.push(mirror);
    }
    Ok((locals, mirrors))
}

/// Refreshes the mirrors every [`FOLLOW_EVERY`] until the runtime stops; a failed refresh
/// is logged and tried again at the next one (the console shows the copy as it was).
pub async fn follow(mut mirrors: Vec<Mirror>) {
    if mirrors.is_empty() {
        return;
    }
    loop {
        tokio::time::sleep(FOLLOW_EVERY).await;
        for m in &mut mirrors {
            if let Err(e) = m.refresh().await {
                tracing::warn!("refreshing the local copy of {}: {e}", m.location());
            }
        }
    }
}
