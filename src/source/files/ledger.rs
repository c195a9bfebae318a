//! The file ledger (`sources/0/ledger.sqlite`): which file was ingested in
//! which batch, Auto Loader's "ingested-file ledger".
//!
//! One row per (path, size, modification time) that weir has decided about.
//! States and their transitions:
//!
//! ```text
//!   (listed) --plan batch N--> pending(N) --commit N--> committed(N)
//!                                  |                 \-> failed(N)   content unusable (e.g. truncated gzip);
//!                                  |                                 not retried until the file changes
//!                                  \--commit N, read error--> (row removed: retried by a later batch)
//!   (listed, path known with another size/mtime) --> modified   logged and counted once, not ingested
//!                                                               unless allow_overwrites
//! ```
//!
//! Lookups are by indexed path; nothing scans the table per trigger.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::error::{Error, Result};

/// A file as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Absolute path.
    pub path: String,
    pub size: u64,
    pub modification_time_ms: i64,
}

/// What the ledger knows of a path (its latest row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub size: u64,
    pub modification_time_ms: i64,
    pub batch_id: Option<u64>,
    pub state: FileState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    Pending,
    Committed,
    Failed,
    Modified,
    /// Present when the stream first started with `include_existing_files = false`:
    /// never ingested (Auto Loader's `includeExistingFiles`).
    Existing,
}

impl FileState {
    fn as_str(self) -> &'static str {
        match self {
            FileState::Pending => "pending",
            FileState::Committed => "committed",
            FileState::Failed => "failed",
            FileState::Modified => "modified",
            FileState::Existing => "existing",
        }
    }
    fn parse(s: &str) -> FileState {
        match s {
            "pending" => FileState::Pending,
            "committed" => FileState::Committed,
            "failed" => FileState::Failed,
            "existing" => FileState::Existing,
            _ => FileState::Modified,
        }
    }
}

/// How a planned file ended in its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOutcome {
    Ingested {
        num_rows: u64,
    },
    /// The content cannot be used; recorded as failed with the error.
    Failed {
        error: String,
    },
    /// Could not be read now (permissions, vanished); forgotten so a later batch retries it.
    Retry {
        error: String,
    },
}

/// Counts for `inspect` and progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LedgerStats {
    pub files_committed: u64,
    pub files_pending: u64,
    pub files_failed: u64,
    pub files_modified_after_ingestion: u64,
    pub bytes_committed: u64,
    /// Files skipped because they were present at the first start (`include_existing_files = false`).
    pub files_existing_skipped: u64,
}

pub struct Ledger {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS files (
    id                   INTEGER PRIMARY KEY,
    path                 TEXT    NOT NULL,
    size                 INTEGER NOT NULL,
    modification_time_ms INTEGER NOT NULL,
    batch_id             INTEGER,
    state                TEXT    NOT NULL,
    discovered_at_ms     INTEGER NOT NULL,
    committed_at_ms      INTEGER,
    num_rows             INTEGER,
    error                TEXT
);
CREATE INDEX IF NOT EXISTS files_by_path ON files(path, id);
CREATE INDEX IF NOT EXISTS files_by_batch ON files(batch_id);
";

impl Ledger {
    /// Opens (creating if needed) the ledger for writing.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path).map_err(|e| ledger_error(path, e))?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;",
        )
        .map_err(|e| ledger_error(path, e))?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| ledger_error(path, e))?;
        Ok(Ledger {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Opens an existing ledger read-only (inspect); `None` when there is none.
    pub fn open_read_only(path: &Path) -> Result<Option<Self>> {
        if !path.exists() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| ledger_error(path, e))?;
        Ok(Some(Ledger {
            conn,
            path: path.to_path_buf(),
        }))
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        ledger_error(&self.path, e)
    }

    /// The latest row for a path.
    pub fn lookup(&self, path: &str) -> Result<Option<LedgerEntry>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT size, modification_time_ms, batch_id, state FROM files
                 WHERE path = ?1 ORDER BY id DESC LIMIT 1",
            )
            .map_err(|e| self.err(e))?;
        stmt.query_row(params![path], |row| {
            Ok(LedgerEntry {
                size: row.get::<_, i64>(0)? as u64,
                modification_time_ms: row.get(1)?,
                batch_id: row.get::<_, Option<i64>>(2)?.map(|b| b as u64),
                state: FileState::parse(&row.get::<_, String>(3)?),
            })
        })
        .optional()
        .map_err(|e| self.err(e))
    }

    /// The latest rows of many paths, in one read transaction (a listing checks every
    /// listed file; one transaction instead of one per lookup keeps that cheap).
    pub fn lookup_many<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<Option<LedgerEntry>>> {
        self.conn
            .execute_batch("BEGIN DEFERRED")
            .map_err(|e| self.err(e))?;
        let result: Result<Vec<_>> = paths.into_iter().map(|p| self.lookup(p)).collect();
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        self.conn.execute_batch(end).map_err(|e| self.err(e))?;
        result
    }

    /// Records that a known file changed after it was ingested (counted once per version).
    pub fn record_modified(&mut self, file: &ListedFile, now_ms: i64) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO files (path, size, modification_time_ms, batch_id, state, discovered_at_ms)
                 VALUES (?1, ?2, ?3, NULL, 'modified', ?4)",
                params![file.path, file.size as i64, file.modification_time_ms, now_ms],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Records the files present at the first start of a stream with
    /// `include_existing_files = false`: never ingested (in one transaction).
    pub fn record_existing(&mut self, files: &[ListedFile], now_ms: i64) -> Result<()> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| ledger_error(&path, e))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO files (path, size, modification_time_ms, batch_id, state, discovered_at_ms)
                     VALUES (?1, ?2, ?3, NULL, 'existing', ?4)",
                )
                .map_err(|e| ledger_error(&path, e))?;
            for f in files {
                stmt.execute(params![
                    f.path,
                    f.size as i64,
                    f.modification_time_ms,
                    now_ms
                ])
                .map_err(|e| ledger_error(&path, e))?;
            }
        }
        tx.commit().map_err(|e| ledger_error(&path, e))
    }

    /// Records the files of batch N as pending, in one transaction (before `offsets/N` is written).
    pub fn plan_batch(&mut self, batch_id: u64, files: &[ListedFile], now_ms: i64) -> Result<()> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| ledger_error(&path, e))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO files (path, size, modification_time_ms, batch_id, state, discovered_at_ms)
                     VALUES (?1, ?2, ?3, ?4, 'pending', ?5)",
                )
                .map_err(|e| ledger_error(&path, e))?;
            for f in files {
                stmt.execute(params![
                    f.path,
                    f.size as i64,
                    f.modification_time_ms,
                    batch_id as i64,
                    now_ms
                ])
                .map_err(|e| ledger_error(&path, e))?;
            }
        }
        tx.commit().map_err(|e| ledger_error(&path, e))
    }

    /// The files planned for a batch, in planning order.
    pub fn files_for_batch(&self, batch_id: u64) -> Result<Vec<ListedFile>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT path, size, modification_time_ms FROM files
                 WHERE batch_id = ?1 AND state != 'modified' ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![batch_id as i64], |row| {
                Ok(ListedFile {
                    path: row.get(0)?,
                    size: row.get::<_, i64>(1)? as u64,
                    modification_time_ms: row.get(2)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The files of every batch before `batch_id` (with their batch), in batch and planning
    /// order: the batches whose `offsets/` entries retention removed.
    pub fn files_before_batch(&self, batch_id: u64) -> Result<Vec<(u64, ListedFile)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT batch_id, path, size, modification_time_ms FROM files
                 WHERE batch_id < ?1 AND state != 'modified' ORDER BY batch_id, id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![batch_id as i64], |row| {
                Ok((
                    row.get::<_, i64>(0)? as u64,
                    ListedFile {
                        path: row.get(1)?,
                        size: row.get::<_, i64>(2)? as u64,
                        modification_time_ms: row.get(3)?,
                    },
                ))
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Marks the files of a committed batch with their outcomes.
    pub fn commit_batch(
        &mut self,
        batch_id: u64,
        outcomes: &[(String, FileOutcome)],
        now_ms: i64,
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| ledger_error(&path, e))?;
        for (file, outcome) in outcomes {
            let r = match outcome {
                FileOutcome::Ingested { num_rows } => tx.execute(
                    "UPDATE files INDEXED BY files_by_path SET state='committed', committed_at_ms=?3, num_rows=?4
                     WHERE path=?2 AND batch_id=?1 AND state='pending'",
                    params![batch_id as i64, file, now_ms, *num_rows as i64],
                ),
                FileOutcome::Failed { error } => tx.execute(
                    "UPDATE files INDEXED BY files_by_path SET state='failed', committed_at_ms=?3, error=?4
                     WHERE path=?2 AND batch_id=?1 AND state='pending'",
                    params![batch_id as i64, file, now_ms, error],
                ),
                FileOutcome::Retry { .. } => tx.execute(
                    "DELETE FROM files INDEXED BY files_by_path WHERE path=?2 AND batch_id=?1 AND state='pending'",
                    params![batch_id as i64, file],
                ),
            };
            r.map_err(|e| ledger_error(&path, e))?;
        }
        // Anything of this batch still pending was committed by the sink (e.g. replay).
        tx.execute(
            "UPDATE files SET state='committed', committed_at_ms=?2
             WHERE batch_id=?1 AND state='pending'",
            params![batch_id as i64, now_ms],
        )
        .map_err(|e| ledger_error(&path, e))?;
        tx.commit().map_err(|e| ledger_error(&path, e))
    }

    /// Recovery: rows planned for batches after the last durable `offsets/N` were never
    /// part of a batch; forget them so the files are planned again.
    pub fn discard_unplanned_after(&mut self, last_planned: Option<u64>) -> Result<usize> {
        let bound = last_planned.map_or(-1, |b| b as i64);
        self.conn
            .execute(
                "DELETE FROM files WHERE state='pending' AND batch_id > ?1",
                params![bound],
            )
            .map_err(|e| self.err(e))
    }

    /// Recovery: batches up to `last_committed` are committed (the ledger update may have
    /// been lost in a crash right after `commits/N` was written).
    pub fn settle_committed_through(
        &mut self,
        last_committed: Option<u64>,
        now_ms: i64,
    ) -> Result<usize> {
        let Some(last) = last_committed else {
            return Ok(0);
        };
        self.conn
            .execute(
                "UPDATE files SET state='committed', committed_at_ms=?2
                 WHERE state='pending' AND batch_id <= ?1",
                params![last as i64, now_ms],
            )
            .map_err(|e| self.err(e))
    }

    pub fn stats(&self) -> Result<LedgerStats> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT state, COUNT(*), COALESCE(SUM(size),0) FROM files GROUP BY state",
            )
            .map_err(|e| self.err(e))?;
        let mut stats = LedgerStats::default();
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)? as u64,
                    row.get::<_, i64>(2)? as u64,
                ))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (state, count, bytes) = row.map_err(|e| self.err(e))?;
            match FileState::parse(&state) {
                FileState::Committed => {
                    stats.files_committed = count;
                    stats.bytes_committed = bytes;
                }
                FileState::Pending => stats.files_pending = count,
                FileState::Failed => stats.files_failed = count,
                FileState::Modified => stats.files_modified_after_ingestion = count,
                FileState::Existing => stats.files_existing_skipped = count,
            }
        }
        Ok(stats)
    }
}

fn ledger_error(path: &Path, source: rusqlite::Error) -> Error {
    Error::Ledger {
        path: path.to_path_buf(),
        source,
    }
}

impl FileState {
    pub fn label(self) -> &'static str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64, mtime: i64) -> ListedFile {
        ListedFile {
            path: path.into(),
            size,
            modification_time_ms: mtime,
        }
    }

    #[test]
    fn plan_commit_and_recover() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(&dir.path().join("l.sqlite")).unwrap();
        l.plan_batch(0, &[file("/a", 10, 1), file("/b", 20, 2)], 100)
            .unwrap();
        assert_eq!(l.files_for_batch(0).unwrap().len(), 2);
        assert_eq!(l.lookup("/a").unwrap().unwrap().state, FileState::Pending);
        l.commit_batch(
            0,
            &[
                ("/a".into(), FileOutcome::Ingested { num_rows: 3 }),
                (
                    "/b".into(),
                    FileOutcome::Retry {
                        error: "EACCES".into(),
                    },
                ),
            ],
            200,
        )
        .unwrap();
        assert_eq!(l.lookup("/a").unwrap().unwrap().state, FileState::Committed);
        assert!(
            l.lookup("/b").unwrap().is_none(),
            "retryable failure is forgotten"
        );
        // Batch 1 planned in the ledger but its offsets never written: discarded on recovery.
        l.plan_batch(1, &[file("/c", 5, 3)], 300).unwrap();
        assert_eq!(l.discard_unplanned_after(Some(0)).unwrap(), 1);
        assert!(l.lookup("/c").unwrap().is_none());
        // Batch 1 planned and durable, commit written but ledger update lost: settled.
        l.plan_batch(1, &[file("/c", 5, 3)], 300).unwrap();
        assert_eq!(l.settle_committed_through(Some(1), 400).unwrap(), 1);
        let s = l.stats().unwrap();
        assert_eq!(
            (s.files_committed, s.files_pending, s.bytes_committed),
            (2, 0, 15)
        );
    }
}
