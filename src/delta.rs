//! Delta tables, for every module that touches one (sinks, the Delta source,
//! stream-static joins, the checkpoint tools, drills): open an existing table, open or
//! create a table-to-be, the version of an application transaction (Delta `txn`), and
//! the error naming the table. Every read and write of a Delta table goes through
//! `deltalake`; weir never writes the Delta log itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltalake::DeltaTable;

use crate::delta_store::DurableLocalStore;
use crate::error::{Error, Result, StorageRole};
use crate::storage::{Location, StorageOptions, Store};

/// Opens a Delta table for writing; a missing or empty location is a table-to-be.
///
/// `path` is a local path or an object-store URL written as a path (`s3://bucket/t`,
/// [`Location::from_path`]). On local disk the directory is created owner-only, durably,
/// and every object the table writes goes through [`DurableLocalStore`]: fsynced, with
/// its directories, before the write returns (docs/reliability.md). On an object store
/// the table is written through `crate::storage` (a `PUT` is durable when it returns),
/// after checking once that the store refuses a second create of a key, which Delta's
/// commits rely on (docs/object-storage.md#consistency).
pub async fn open_table(path: &Path) -> Result<DeltaTable> {
    let location = table_location(path)?;
    let Location::Local(local) = &location else {
        return open_remote(path, &location, true).await;
    };
    crate::durable::create_dir_private(local).map_err(|source| Error::SinkIo {
        path: path.to_path_buf(),
        source,
    })?;
    let url = table_url(path)?;
    let root = url.to_file_path().unwrap_or_else(|()| path.to_path_buf());
    let builder = deltalake::DeltaTableBuilder::from_url(url.clone())
        .map_err(|e| delta_error(path, e))?
        .with_storage_backend(Arc::new(DurableLocalStore::new(&root)), url);
    let log = local.join("_delta_log");
    let has_log = std::fs::read_dir(&log).is_ok_and(|mut d| d.next().is_some());
    if !has_log {
        // A table-to-be: not loaded (loading logs an error for a missing log).
        return builder.build().map_err(|e| delta_error(path, e));
    }
    builder.load().await.map_err(|e| delta_error(path, e))
}

/// Where the table at `path` lives (a local path, or a URL written as a path).
pub fn table_location(path: &Path) -> Result<Location> {
    Location::from_path(path).map_err(|e| Error::Storage {
        role: StorageRole::Sink,
        source: e.into(),
    })
}

/// A table on an object store, through `crate::storage`; `None`-like tables-to-be are
/// built, not loaded. `writing`: check put-if-absent first.
async fn open_remote(path: &Path, location: &Location, writing: bool) -> Result<DeltaTable> {
    let storage = |source| Error::Storage {
        role: StorageRole::Sink,
        source,
    };
    crate::storage::register_delta_stores();
    let store = Store::for_location(location, &StorageOptions::new()).map_err(storage)?;
    if writing {
        store.check_put_if_absent().await.map_err(storage)?;
    }
    let url = location.to_url().map_err(|e| Error::io(path, e))?;
    let builder = deltalake::DeltaTableBuilder::from_url(url.clone())
        .map_err(|e| delta_error(path, e))?
        .with_storage_backend(store.root_store(), url);
    let has_log = store.any_below("_delta_log").await.map_err(storage)?;
    if !has_log {
        return builder.build().map_err(|e| delta_error(path, e));
    }
    builder.load().await.map_err(|e| delta_error(path, e))
}

/// Makes the commits of the table from its latest version back to the one whose `txn`
/// records batch `batch_id` of `app_id` durable, with their data files: a re-run batch
/// found in the table may have been committed by a process that died before its fsyncs,
/// and `commits/N` is about to rely on it.
pub async fn sync_txn_commit(
    table: &DeltaTable,
    path: &Path,
    app_id: &str,
    batch_id: u64,
) -> Result<()> {
    let Some(latest) = table.version() else {
        return Ok(());
    };
    if table_location(path)?.is_remote() {
        // An object store's PUT is durable when it returns: nothing to sync.
        return Ok(());
    }
    let log_store = table.log_store();
    let url = table_url(path)?;
    let root = url.to_file_path().unwrap_or_else(|()| path.to_path_buf());
    let mut version = latest;
    loop {
        let Some(bytes) = log_store
            .read_commit_entry(version as _)
            .await
            .map_err(|e| delta_error(path, e))?
        else {
            // Older than the oldest log entry kept (a checkpoint covers it).
            return Ok(());
        };
        let actions = deltalake::logstore::get_actions(version as _, &bytes)
            .map_err(|e| delta_error(path, e))?;
        let mut files = vec![root.join("_delta_log").join(format!("{version:020}.json"))];
        let mut holds_batch = false;
        for action in &actions {
            match action {
                deltalake::kernel::Action::Add(add) => {
                    if let Some(p) = url.join(&add.path).ok().and_then(|u| u.to_file_path().ok()) {
                        files.push(p);
                    }
                }
                deltalake::kernel::Action::Txn(t) => {
                    holds_batch |= t.app_id == app_id && t.version >= batch_id as i64;
                }
                _ => {}
            }
        }
        let table_dir = root.clone();
        tokio::task::spawn_blocking(move || sync_files(&table_dir, &files))
            .await
            .map_err(|e| Error::SinkIo {
                path: path.to_path_buf(),
                source: std::io::Error::other(e),
            })?
            .map_err(|source| Error::SinkIo {
                path: path.to_path_buf(),
                source,
            })?;
        if holds_batch || version == 0 {
            return Ok(());
        }
        version -= 1;
    }
}

/// fsyncs files of a table and the directories from each up to the table's root.
fn sync_files(table: &Path, files: &[PathBuf]) -> std::io::Result<()> {
    let mut dirs = std::collections::BTreeSet::new();
    for f in files {
        match crate::durable::sync_file(f) {
            Ok(()) => {}
            // Removed since (VACUUM of an older version): nothing to make durable.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
        let mut dir = f.parent();
        while let Some(d) = dir {
            dirs.insert(d.to_path_buf());
            if d == table || !d.starts_with(table) {
                break;
            }
            dir = d.parent();
        }
    }
    for d in dirs.iter().rev() {
        crate::durable::sync_dir(d)?;
    }
    Ok(())
}

/// Opens an existing Delta table, or `None` when the path holds none.
pub async fn open_existing(path: &Path) -> Result<Option<DeltaTable>> {
    let location = table_location(path)?;
    if location.is_remote() {
        let table = open_remote(path, &location, false).await?;
        return Ok(table.version().is_some().then_some(table));
    }
    if !path.join("_delta_log").is_dir() {
        return Ok(None);
    }
    let url = table_url(path)?;
    match deltalake::open_table(url).await {
        Ok(t) => Ok(Some(t)),
        Err(deltalake::DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(delta_error(path, e)),
    }
}

/// What a Delta table holds, for the refusal of a new checkpoint over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFacts {
    pub version: u64,
    /// Rows by the data files' statistics (`numRecords`); `None` when a file has none.
    pub rows: Option<u64>,
    pub files: u64,
    /// Application transactions (`txn`: a streaming query's id and its last batch),
    /// newest first, from the last [`TXN_SCAN_VERSIONS`] commits.
    pub transactions: Vec<(String, i64)>,
}

/// How many of the newest commits [`table_facts`] reads for `txn` actions.
pub const TXN_SCAN_VERSIONS: u64 = 1000;

/// The version, rows, files and application transactions of the table at `path`;
/// `None` when there is no table there.
pub async fn table_facts(path: &Path) -> Result<Option<TableFacts>> {
    let Some(table) = open_existing(path).await? else {
        return Ok(None);
    };
    let Some(version) = table.version() else {
        return Ok(None);
    };
    let snapshot = table.snapshot().map_err(|e| delta_error(path, e))?;
    let mut rows = Some(0u64);
    let mut files = 0u64;
    for file in snapshot.log_data().iter() {
        files += 1;
        rows = rows.zip(file.num_records()).map(|(a, b)| a + b as u64);
    }
    let log_store = table.log_store();
    let mut transactions: Vec<(String, i64)> = Vec::new();
    let oldest = (version + 1).saturating_sub(TXN_SCAN_VERSIONS);
    for v in (oldest..=version).rev() {
        let Some(bytes) = log_store
            .read_commit_entry(v as _)
            .await
            .map_err(|e| delta_error(path, e))?
        else {
            break;
        };
        let actions =
            deltalake::logstore::get_actions(v as _, &bytes).map_err(|e| delta_error(path, e))?;
        for action in actions {
            if let deltalake::kernel::Action::Txn(t) = action
                && !transactions.iter().any(|(id, _)| *id == t.app_id)
            {
                transactions.push((t.app_id, t.version));
            }
        }
    }
    Ok(Some(TableFacts {
        version,
        rows,
        files,
        transactions,
    }))
}

pub fn table_url(path: &Path) -> Result<url::Url> {
    let location = table_location(path)?;
    if location.is_remote() {
        return location.to_url().map_err(|e| Error::io(path, e));
    }
    let abs = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
    url::Url::from_directory_path(&abs).map_err(|_| Error::Io {
        path: abs.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an absolute path"),
    })
}

/// A `deltalake` error on the table at `path`.
/// A table's column mapping mode (`delta.columnMapping.mode`) from its configuration,
/// when it is not `none` (Delta protocol, "Column Mapping").
pub fn column_mapping_mode(
    configuration: &std::collections::HashMap<String, String>,
) -> Option<&str> {
    configuration
        .get("delta.columnMapping.mode")
        .map(String::as_str)
        .filter(|m| *m != "none")
}

pub(crate) fn delta_error(path: &Path, source: deltalake::DeltaTableError) -> Error {
    Error::Delta {
        path: path.display().to_string(),
        source,
    }
}

/// The version of application transaction `app_id` (Delta `txn`: `txnAppId`,
/// `txnVersion`) in the table's loaded snapshot; weir's app id is the query id and its
/// version the last batch committed.
pub async fn table_txn_version(
    table: &DeltaTable,
    app_id: &str,
) -> std::result::Result<Option<i64>, deltalake::DeltaTableError> {
    let snapshot = table.snapshot()?;
    snapshot
        .transaction_version(table.log_store().as_ref(), app_id)
        .await
}

/// The refusal when a table's application transaction for `app_id` is past the batch a
/// flow is at (issue #18): the table is ahead of the checkpoint, as after restoring an
/// older checkpoint backup or deleting `offsets/`/`commits/`. Going on would skip batch
/// ids up to `txn_version` as "already written" while marking their input ingested, so
/// those rows would never reach the table. `last_batch` is the checkpoint's last planned
/// batch (`None`: no batch yet).
pub fn table_ahead_error(
    table: &Path,
    checkpoint: &Path,
    app_id: &str,
    txn_version: i64,
    last_batch: Option<u64>,
) -> Error {
    let last = last_batch.map_or_else(|| "none".to_string(), |b| b.to_string());
    Error::StateIncompatible {
        path: checkpoint.to_path_buf(),
        message: format!(
            "the sink table {table} is ahead of this checkpoint: its Delta log records batch {txn_version} \
             of query {app_id} (txn), but the checkpoint's last batch is {last}. Batches up to {txn_version} \
             would be skipped as already written while their input is marked ingested, so their rows would \
             never reach the table. This is what restoring an older checkpoint backup, or deleting offsets/ \
             and commits/, looks like. Nothing was written. Restore the checkpoint that wrote batch \
             {txn_version} (its newest backup), or start over as `weir playbook checkpoint_incompatible` \
             describes",
            table = table.display(),
        ),
    }
}

/// [`table_txn_version`] of the table at `path`; `None` when there is no table.
pub async fn txn_version(path: &Path, app_id: &str) -> Result<Option<i64>> {
    let Some(table) = open_existing(path).await? else {
        return Ok(None);
    };
    table_txn_version(&table, app_id)
        .await
        .map_err(|e| delta_error(path, e))
}
