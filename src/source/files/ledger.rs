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
//!                                  \--commit N, read error--> retry(N)   taken again by a later batch once
//!                                                                   its backoff has passed (1 s, doubling
//!                                                                   per attempt, at most 5 min), or at once
//!                                                                   when the file changes
//!   (listed, path known with another size/mtime) --> modified   logged and counted once, not ingested
//!                                                               unless allow_overwrites
//! ```
//!
//! Each planned file's outcome in batch N (`outcome`: ingested, failed, retry) is
//! recorded after the batch's read and before its sink write
//! ([`Ledger::record_outcomes`]), so a re-run of batch N after a crash reproduces that
//! outcome exactly: a file that could not be read in the first attempt is not read in
//! the re-run either (its rows would go into a skipped write), and a recovery that
//! settles a committed batch keeps failed files failed and forgets retried ones
//! instead of marking them committed.
//!
//! Lookups are by indexed path; nothing scans the table per trigger.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::error::{Error, Result};

/// A file as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Absolute path; on object storage, the object's URL.
    pub path: String,
    pub size: u64,
    pub modification_time_ms: i64,
    /// On object storage, the object's ETag: a rewritten object has a new one (`None`
    /// for a local file, told by its size and modification time).
    pub etag: Option<String>,
}

impl ListedFile {
    /// Files `/landing/f<i>.csv` of these sizes, listed in order (tests).
    #[cfg(test)]
    pub(crate) fn of_sizes(sizes: &[u64]) -> Vec<ListedFile> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| ListedFile {
                path: format!("/landing/f{i}.csv"),
                size,
                modification_time_ms: i as i64,
                etag: None,
            })
            .collect()
    }
}

/// What the ledger knows of a path (its latest row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub size: u64,
    pub modification_time_ms: i64,
    pub batch_id: Option<u64>,
    pub state: FileState,
    /// When the state was decided (`committed_at_ms`): for `retry`, the failed attempt.
    pub decided_at_ms: Option<i64>,
    /// Failed read attempts in a row (`retry` rows).
    pub attempts: u32,
    /// The object's ETag when it was listed (object storage).
    pub etag: Option<String>,
}

impl LedgerEntry {
    /// Whether `file` is the version of the file this row is about: the same ETag and
    /// size on object storage (Auto Loader's key for a rewritten object), the same size
    /// and modification time on local disk.
    pub fn same_version(&self, file: &ListedFile) -> bool {
        match (&file.etag, &self.etag) {
            (Some(listed), Some(known)) => self.size == file.size && listed == known,
            _ => self.size == file.size && self.modification_time_ms == file.modification_time_ms,
        }
    }
}

/// The wait before a file that could not be read (`retry`) is planned again: 1 s after
/// the first failed attempt, doubling with each further one, at most 5 minutes. A file
/// that stays unreadable is then tried every 5 minutes instead of in every trigger.
pub fn retry_backoff_ms(attempts: u32) -> i64 {
    (1000i64 << attempts.saturating_sub(1).min(9)).min(300_000)
}

impl LedgerEntry {
    /// Whether a `retry` file's backoff has passed at `now_ms`.
    pub fn retry_due(&self, now_ms: i64) -> bool {
        now_ms >= self.decided_at_ms.unwrap_or(0) + retry_backoff_ms(self.attempts)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    Pending,
    Committed,
    Failed,
    Modified,
    /// Could not be read (permissions, vanished, an I/O error); planned again after a
    /// backoff ([`retry_backoff_ms`]).
    Retry,
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
            FileState::Retry => "retry",
            FileState::Existing => "existing",
        }
    }
    fn parse(s: &str) -> FileState {
        match s {
            "pending" => FileState::Pending,
            "committed" => FileState::Committed,
            "failed" => FileState::Failed,
            "existing" => FileState::Existing,
            "retry" => FileState::Retry,
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
    /// Files that could not be read, waiting for their next attempt.
    pub files_retrying: u64,
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
    error                TEXT,
    outcome              TEXT,
    attempts             INTEGER,
    etag                 TEXT
);
CREATE INDEX IF NOT EXISTS files_by_path ON files(path, id);
CREATE INDEX IF NOT EXISTS files_by_batch ON files(batch_id);
";

impl Ledger {
    /// Opens (creating if needed) the ledger for writing.
    pub fn open(path: &Path) -> Result<Self> {
        let created = !path.exists();
        let conn = Connection::open(path).map_err(|e| ledger_error(path, e))?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;",
        )
        .map_err(|e| ledger_error(path, e))?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| ledger_error(path, e))?;
        // Ledgers written before outcomes, retries and ETags were recorded gain the
        // columns (NULL: no outcome recorded, as for a batch whose first attempt stopped
        // before its write; no failed attempt; a local file).
        for (column, kind) in [
            ("outcome", "TEXT"),
            ("attempts", "INTEGER"),
            ("etag", "TEXT"),
        ] {
            let present = conn
                .prepare("SELECT 1 FROM pragma_table_info('files') WHERE name = ?1")
                .and_then(|mut stmt| stmt.exists([column]))
                .map_err(|e| ledger_error(path, e))?;
            if !present {
                conn.execute_batch(&format!("ALTER TABLE files ADD COLUMN {column} {kind}"))
                    .map_err(|e| ledger_error(path, e))?;
            }
        }
        if created {
            // SQLite fsyncs the directory when it creates a WAL or a rollback journal,
            // never when it creates the database file: without this a power cut could
            // lose the ledger's name while offsets/ names batches it holds.
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            crate::durable::sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        }
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
                "SELECT size, modification_time_ms, batch_id, state, committed_at_ms, attempts, etag FROM files
                 WHERE path = ?1 ORDER BY id DESC LIMIT 1",
            )
            .map_err(|e| self.err(e))?;
        stmt.query_row(params![path], |row| {
            Ok(LedgerEntry {
                size: row.get::<_, i64>(0)? as u64,
                modification_time_ms: row.get(1)?,
                batch_id: row.get::<_, Option<i64>>(2)?.map(|b| b as u64),
                state: FileState::parse(&row.get::<_, String>(3)?),
                decided_at_ms: row.get(4)?,
                attempts: row.get::<_, Option<i64>>(5)?.unwrap_or(0).max(0) as u32,
                etag: row.get(6)?,
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
                "INSERT INTO files (path, size, modification_time_ms, batch_id, state, discovered_at_ms, etag)
                 VALUES (?1, ?2, ?3, NULL, 'modified', ?4, ?5)",
                params![file.path, file.size as i64, file.modification_time_ms, now_ms, file.etag],
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
                    "INSERT INTO files (path, size, modification_time_ms, batch_id, state, discovered_at_ms, etag)
                     VALUES (?1, ?2, ?3, NULL, 'existing', ?4, ?5)",
                )
                .map_err(|e| ledger_error(&path, e))?;
            for f in files {
                stmt.execute(params![
                    f.path,
                    f.size as i64,
                    f.modification_time_ms,
                    now_ms,
                    f.etag
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
                    "INSERT INTO files (path, size, modification_time_ms, batch_id, state, discovered_at_ms, etag)
                     VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6)",
                )
                .map_err(|e| ledger_error(&path, e))?;
            for f in files {
                stmt.execute(params![
                    f.path,
                    f.size as i64,
                    f.modification_time_ms,
                    batch_id as i64,
                    now_ms,
                    f.etag
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
                "SELECT path, size, modification_time_ms, etag FROM files
                 WHERE batch_id = ?1 AND state NOT IN ('modified', 'retry') ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![batch_id as i64], |row| {
                Ok(ListedFile {
                    path: row.get(0)?,
                    size: row.get::<_, i64>(1)? as u64,
                    modification_time_ms: row.get(2)?,
                    etag: row.get(3)?,
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
                "SELECT batch_id, path, size, modification_time_ms, etag FROM files
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
                        etag: row.get(4)?,
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
                FileOutcome::Retry { error } => tx
                    .execute(
                        RETRY_UPDATE_ONE,
                        params![batch_id as i64, file, now_ms, error],
                    )
                    .and_then(|n| {
                        // One retry row per path: the attempts so far are in the new one.
                        tx.execute(
                            "DELETE FROM files INDEXED BY files_by_path
                             WHERE path=?2 AND state='retry' AND batch_id != ?1",
                            params![batch_id as i64, file],
                        )?;
                        Ok(n)
                    }),
            };
            r.map_err(|e| ledger_error(&path, e))?;
        }
        // Anything of this batch still pending ends as its first attempt recorded (a
        // replay does not read failed or retried files), else committed by the sink.
        settle_pending(&tx, "batch_id = ?1", batch_id as i64, now_ms)
            .map_err(|e| ledger_error(&path, e))?;
        tx.commit().map_err(|e| ledger_error(&path, e))
    }

    /// Records each planned file's outcome in batch N, after the batch's read and before
    /// its sink write, in one transaction (durable: `synchronous=FULL`). A re-run of the
    /// batch reproduces these outcomes ([`Ledger::recorded_outcomes`]).
    pub fn record_outcomes(
        &mut self,
        batch_id: u64,
        outcomes: &[(String, FileOutcome)],
    ) -> Result<()> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| ledger_error(&path, e))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "UPDATE files INDEXED BY files_by_path SET outcome=?3, error=?4, num_rows=?5
                     WHERE path=?2 AND batch_id=?1 AND state='pending'",
                )
                .map_err(|e| ledger_error(&path, e))?;
            for (file, outcome) in outcomes {
                let (label, error, rows) = match outcome {
                    FileOutcome::Ingested { num_rows } => {
                        ("ingested", None, Some(*num_rows as i64))
                    }
                    FileOutcome::Failed { error } => ("failed", Some(error.as_str()), None),
                    FileOutcome::Retry { error } => ("retry", Some(error.as_str()), None),
                };
                stmt.execute(params![batch_id as i64, file, label, error, rows])
                    .map_err(|e| ledger_error(&path, e))?;
            }
        }
        tx.commit().map_err(|e| ledger_error(&path, e))
    }

    /// The outcomes recorded for batch N's files by its first attempt (files without
    /// one are absent: that attempt stopped before its write).
    pub fn recorded_outcomes(&self, batch_id: u64) -> Result<Vec<(String, FileOutcome)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT path, outcome, error, num_rows FROM files
                 WHERE batch_id = ?1 AND outcome IS NOT NULL ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![batch_id as i64], |row| {
                let path: String = row.get(0)?;
                let outcome: String = row.get(1)?;
                let error: Option<String> = row.get(2)?;
                let num_rows: Option<i64> = row.get(3)?;
                Ok((path, outcome, error.unwrap_or_default(), num_rows))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (path, outcome, error, num_rows) = row.map_err(|e| self.err(e))?;
            let outcome = match outcome.as_str() {
                "failed" => FileOutcome::Failed { error },
                "retry" => FileOutcome::Retry { error },
                _ => FileOutcome::Ingested {
                    num_rows: num_rows.unwrap_or(0).max(0) as u64,
                },
            };
            out.push((path, outcome));
        }
        Ok(out)
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
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| ledger_error(&path, e))?;
        let n = settle_pending(&tx, "batch_id <= ?1", last as i64, now_ms)
            .map_err(|e| ledger_error(&path, e))?;
        tx.commit().map_err(|e| ledger_error(&path, e))?;
        Ok(n)
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
                FileState::Retry => stats.files_retrying = count,
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

/// A planned file of batch ?1 that could not be read becomes `retry`, counting its
/// failed attempts in a row (`?2` path, `?3` now, `?4` error).
const RETRY_UPDATE_ONE: &str = "UPDATE files INDEXED BY files_by_path
     SET state='retry', committed_at_ms=?3, error=?4,
         attempts = 1 + COALESCE((SELECT MAX(r.attempts) FROM files r
                                  WHERE r.path = ?2 AND r.state = 'retry'), 0)
     WHERE path=?2 AND batch_id=?1 AND state='pending'";

/// Pending rows of committed batches (`batches`: an SQL condition on `batch_id` with
/// `?1`) end as their recorded outcome: failed stays failed, retry waits for its
/// backoff (a later batch plans the file again), anything else (ingested, or no
/// record) is committed.
/// Returns the rows settled.
fn settle_pending(
    tx: &rusqlite::Transaction<'_>,
    batches: &str,
    bound: i64,
    now_ms: i64,
) -> rusqlite::Result<usize> {
    let failed = tx.execute(
        &format!(
            "UPDATE files SET state='failed', committed_at_ms=?2
             WHERE state='pending' AND outcome='failed' AND {batches}"
        ),
        params![bound, now_ms],
    )?;
    let retried = tx.execute(
        &format!(
            "UPDATE files SET state='retry', committed_at_ms=?2,
                 attempts = 1 + COALESCE((SELECT MAX(r.attempts) FROM files r
                                          WHERE r.path = files.path AND r.state = 'retry'), 0)
             WHERE state='pending' AND outcome='retry' AND {batches}"
        ),
        params![bound, now_ms],
    )?;
    let committed = tx.execute(
        &format!(
            "UPDATE files SET state='committed', committed_at_ms=?2
             WHERE state='pending' AND {batches}"
        ),
        params![bound, now_ms],
    )?;
    Ok(failed + retried + committed)
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
            etag: None,
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
        let b = l.lookup("/b").unwrap().unwrap();
        assert_eq!(
            (b.state, b.attempts),
            (FileState::Retry, 1),
            "retried later"
        );
        assert!(l.files_for_batch(0).unwrap().iter().all(|f| f.path != "/b"));
        // Batch 1 planned in the ledger but its offsets never written: discarded on recovery.
        l.plan_batch(1, &[file("/c", 5, 3)], 300).unwrap();
        assert_eq!(l.discard_unplanned_after(Some(0)).unwrap(), 1);
        assert!(l.lookup("/c").unwrap().is_none());
        // Batch 1 planned and durable, commit written but ledger update lost: settled.
        l.plan_batch(1, &[file("/c", 5, 3)], 300).unwrap();
        assert_eq!(l.settle_committed_through(Some(1), 400).unwrap(), 1);
        let s = l.stats().unwrap();
        assert_eq!(
            (
                s.files_committed,
                s.files_pending,
                s.bytes_committed,
                s.files_retrying
            ),
            (2, 0, 15, 1)
        );
    }

    /// Issue #18: a file that cannot be read waits 1 s, 2 s, 4 s... (at most 5 min)
    /// before it is planned again, instead of being planned by every trigger; one
    /// retry row per path carries the count.
    #[test]
    fn an_unreadable_file_backs_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(&dir.path().join("l.sqlite")).unwrap();
        let retry = || {
            vec![(
                "/b".to_string(),
                FileOutcome::Retry {
                    error: "EACCES".into(),
                },
            )]
        };
        l.plan_batch(0, &[file("/b", 20, 2)], 0).unwrap();
        l.commit_batch(0, &retry(), 10_000).unwrap();
        let b = l.lookup("/b").unwrap().unwrap();
        assert_eq!(b.attempts, 1);
        assert!(!b.retry_due(10_999));
        assert!(b.retry_due(11_000));
        l.plan_batch(1, &[file("/b", 20, 2)], 11_000).unwrap();
        l.commit_batch(1, &retry(), 11_000).unwrap();
        let b = l.lookup("/b").unwrap().unwrap();
        assert_eq!(b.attempts, 2);
        assert!(!b.retry_due(12_999));
        assert!(b.retry_due(13_000));
        assert_eq!(l.stats().unwrap().files_retrying, 1, "one row per path");
        assert_eq!(retry_backoff_ms(1), 1_000);
        assert_eq!(retry_backoff_ms(9), 256_000);
        assert_eq!(retry_backoff_ms(10), 300_000);
        assert_eq!(retry_backoff_ms(u32::MAX), 300_000);
        // Read at last: committed, and the retry row is history.
        l.plan_batch(2, &[file("/b", 20, 2)], 13_000).unwrap();
        l.commit_batch(
            2,
            &[("/b".into(), FileOutcome::Ingested { num_rows: 1 })],
            13_000,
        )
        .unwrap();
        assert_eq!(l.lookup("/b").unwrap().unwrap().state, FileState::Committed);
    }

    /// Outcomes recorded before the sink write survive a crash: recovery settles a
    /// committed batch by them (a failed file stays failed, a retried one is planned
    /// again) instead of marking every pending file committed.
    #[test]
    fn recorded_outcomes_settle_a_committed_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(&dir.path().join("l.sqlite")).unwrap();
        l.plan_batch(
            0,
            &[file("/a", 10, 1), file("/b", 20, 2), file("/c", 30, 3)],
            100,
        )
        .unwrap();
        let outcomes = vec![
            ("/a".to_string(), FileOutcome::Ingested { num_rows: 4 }),
            (
                "/b".to_string(),
                FileOutcome::Retry {
                    error: "EACCES".into(),
                },
            ),
            (
                "/c".to_string(),
                FileOutcome::Failed {
                    error: "truncated gzip".into(),
                },
            ),
        ];
        l.record_outcomes(0, &outcomes).unwrap();
        assert_eq!(l.recorded_outcomes(0).unwrap(), outcomes);
        // Reopened (the crash), commits/0 durable: settled by the record.
        drop(l);
        let mut l = Ledger::open(&dir.path().join("l.sqlite")).unwrap();
        assert_eq!(l.settle_committed_through(Some(0), 200).unwrap(), 3);
        assert_eq!(l.lookup("/a").unwrap().unwrap().state, FileState::Committed);
        assert_eq!(
            l.lookup("/b").unwrap().unwrap().state,
            FileState::Retry,
            "retried later"
        );
        assert_eq!(l.lookup("/c").unwrap().unwrap().state, FileState::Failed);
    }

    /// An object is known by its ETag and size (a new last-modified time alone, a copy of
    /// the same bytes, is no change); a local file by its size and modification time.
    #[test]
    fn an_object_is_the_same_version_while_its_etag_and_size_are() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(&dir.path().join("l.sqlite")).unwrap();
        let object = ListedFile {
            etag: Some("\"e1\"".into()),
            ..file("s3://b/landing/a.json", 10, 1_000)
        };
        l.plan_batch(0, std::slice::from_ref(&object), 1).unwrap();
        let known = l.lookup("s3://b/landing/a.json").unwrap().unwrap();
        assert_eq!(known.etag.as_deref(), Some("\"e1\""));
        assert_eq!(
            l.files_for_batch(0).unwrap(),
            vec![object.clone()],
            "replayed with its ETag"
        );
        let touched = ListedFile {
            modification_time_ms: 2_000,
            ..object.clone()
        };
        assert!(known.same_version(&touched));
        let rewritten = ListedFile {
            etag: Some("\"e2\"".into()),
            ..object.clone()
        };
        assert!(!known.same_version(&rewritten));
        let local = file("/landing/a.json", 10, 1_000);
        l.plan_batch(1, std::slice::from_ref(&local), 1).unwrap();
        let known = l.lookup("/landing/a.json").unwrap().unwrap();
        assert!(known.same_version(&local));
        assert!(!known.same_version(&file("/landing/a.json", 10, 2_000)));
    }

    /// A ledger written before outcomes were recorded opens and gains the column.
    #[test]
    fn an_older_ledger_gains_the_outcome_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.sqlite");
        let conn = Connection::open(&path).unwrap();
        let older = SCHEMA.replace(",\n    outcome              TEXT", "");
        assert!(!older.contains("outcome"));
        conn.execute_batch(&older).unwrap();
        conn.execute_batch(
            "INSERT INTO files (path, size, modification_time_ms, batch_id, state, discovered_at_ms)
             VALUES ('/a', 1, 1, 0, 'pending', 1)",
        )
        .unwrap();
        drop(conn);
        let mut l = Ledger::open(&path).unwrap();
        assert!(l.recorded_outcomes(0).unwrap().is_empty());
        assert_eq!(l.settle_committed_through(Some(0), 2).unwrap(), 1);
        assert_eq!(l.lookup("/a").unwrap().unwrap().state, FileState::Committed);
    }
}
