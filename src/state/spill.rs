//! [`SpillStore`]: the part of an operator's state moved out of memory once the
//! in-memory [`StateTable`](super::StateTable) outgrew the flow's `state_memory_limit`
//! (docs/state.md).
//!
//! The spilled rows are in one SQLite table (rusqlite, already a dependency for the file
//! source's ledger): the key's [row format](arrow::row) bytes as the primary key and the
//! time the key expires (µs), indexed, so that a lookup and the watermark's expiry each
//! read only what they need. The file is a cache, not recovery truth: it is made anew
//! when the operator opens its state (the checkpoint's snapshots and deltas hold every
//! key, spilled or not), written without a journal or fsync, and deleted when the
//! operator closes.
//!
//! Keys in the store are never in the in-memory table at the same time (a key found
//! here is present; new keys go to the table), so the state is their union.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};

/// Prefix of the spill directory in an operator's state directory (`spill-XXXXXX/`,
/// one per open operator, deleted when it closes; one left by a crash is deleted by the
/// next open).
pub const SPILL_DIR_PREFIX: &str = "spill-";

/// Spilled keys of one operator (see the module docs).
pub struct SpillStore {
    path: PathBuf,
    conn: Connection,
    rows: u64,
    /// Dropped after `conn` (fields drop in order): deletes the file.
    _dir: tempfile::TempDir,
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| Error::Checkpoint {
        path: path.to_path_buf(),
        message: format!("state spill file: {e}"),
    }
}

impl SpillStore {
    /// Creates an empty store in a new directory under `dir` (spill directories left
    /// there by an earlier run are deleted).
    pub fn create(dir: &Path) -> Result<Self> {
        crate::durable::create_dir_private(dir).map_err(|e| Error::io(dir, e))?;
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let stale = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(SPILL_DIR_PREFIX));
                if stale && entry.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let tmp = tempfile::Builder::new()
            .prefix(SPILL_DIR_PREFIX)
            .tempdir_in(dir)
            .map_err(|e| Error::io(dir, e))?;
        let path = tmp.path().join("state.sqlite");
        let conn = Connection::open(&path).map_err(sql_err(&path))?;
        // A cache rebuilt from the checkpoint on every open: no journal, no fsync, a
        // small page cache (the point is to bound memory).
        conn.execute_batch(
            "PRAGMA journal_mode = OFF;
             PRAGMA synchronous = OFF;
             PRAGMA cache_size = -8192;
             PRAGMA temp_store = FILE;
             CREATE TABLE spilled (key BLOB PRIMARY KEY, expires INTEGER NOT NULL) WITHOUT ROWID;
             CREATE INDEX spilled_expires ON spilled (expires);",
        )
        .map_err(sql_err(&path))?;
        Ok(SpillStore {
            path,
            conn,
            rows: 0,
            _dir: tmp,
        })
    }

    /// Number of keys held.
    pub fn len(&self) -> u64 {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Removes every key.
    pub fn clear(&mut self) -> Result<()> {
        self.conn
            .execute_batch("DELETE FROM spilled")
            .map_err(sql_err(&self.path))?;
        self.rows = 0;
        Ok(())
    }

    /// Whether `key` is held.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        if self.rows == 0 {
            return Ok(false);
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM spilled WHERE key = ?1")
            .map_err(sql_err(&self.path))?;
        let found: Option<i64> = stmt
            .query_row([key], |r| r.get(0))
            .optional()
            .map_err(sql_err(&self.path))?;
        Ok(found.is_some())
    }

    /// Adds keys with their expiry, in one transaction; a key already held is an error
    /// (callers move a key here only from the in-memory table, which never shares one).
    pub fn insert<'a>(&mut self, rows: impl IntoIterator<Item = (&'a [u8], i64)>) -> Result<()> {
        let tx = self.conn.transaction().map_err(sql_err(&self.path))?;
        let mut n = 0;
        {
            let mut stmt = tx
                .prepare_cached("INSERT INTO spilled (key, expires) VALUES (?1, ?2)")
                .map_err(sql_err(&self.path))?;
            for (key, expires) in rows {
                stmt.execute(params![key, expires])
                    .map_err(sql_err(&self.path))?;
                n += 1;
            }
        }
        tx.commit().map_err(sql_err(&self.path))?;
        self.rows += n;
        Ok(())
    }

    /// Removes keys (absent keys are ignored), in one transaction.
    pub fn remove<'a>(&mut self, keys: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let tx = self.conn.transaction().map_err(sql_err(&self.path))?;
        let mut removed = 0u64;
        {
            let mut stmt = tx
                .prepare_cached("DELETE FROM spilled WHERE key = ?1")
                .map_err(sql_err(&self.path))?;
            for key in keys {
                removed += stmt.execute([key]).map_err(sql_err(&self.path))? as u64;
            }
        }
        tx.commit().map_err(sql_err(&self.path))?;
        self.rows = self.rows.saturating_sub(removed);
        Ok(())
    }

    /// Keys expiring before `before_us` (`expires < before_us`), in key order.
    pub fn expired(&self, before_us: i64) -> Result<Vec<Vec<u8>>> {
        if self.rows == 0 {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key FROM spilled WHERE expires < ?1 ORDER BY key")
            .map_err(sql_err(&self.path))?;
        let keys = stmt
            .query_map([before_us], |r| r.get::<_, Vec<u8>>(0))
            .map_err(sql_err(&self.path))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql_err(&self.path))?;
        Ok(keys)
    }

    /// The earliest expiry held.
    pub fn min_expires(&self) -> Result<Option<i64>> {
        if self.rows == 0 {
            return Ok(None);
        }
        self.conn
            .query_row("SELECT MIN(expires) FROM spilled", [], |r| r.get(0))
            .map_err(sql_err(&self.path))
    }

    /// Calls `f` with chunks of at most `chunk` (key, expiry) rows, in key order.
    pub fn for_each_chunk(
        &self,
        chunk: usize,
        mut f: impl FnMut(&[(Vec<u8>, i64)]) -> Result<()>,
    ) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, expires FROM spilled ORDER BY key")
            .map_err(sql_err(&self.path))?;
        let mut rows = stmt.query([]).map_err(sql_err(&self.path))?;
        let mut buf = Vec::with_capacity(chunk.max(1));
        while let Some(row) = rows.next().map_err(sql_err(&self.path))? {
            let key: Vec<u8> = row.get(0).map_err(sql_err(&self.path))?;
            let expires: i64 = row.get(1).map_err(sql_err(&self.path))?;
            buf.push((key, expires));
            if buf.len() >= chunk.max(1) {
                f(&buf)?;
                buf.clear();
            }
        }
        if !buf.is_empty() {
            f(&buf)?;
        }
        Ok(())
    }

    /// Bytes of the spill file on disk.
    pub fn disk_bytes(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }

    /// Bytes of memory the store may hold (its page cache bound).
    pub fn memory_bound(&self) -> u64 {
        if self.rows == 0 { 0 } else { 8192 * 1024 }
    }
}
