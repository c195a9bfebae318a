//! The file source: Auto Loader's directory-listing mode.
//!
//! Each trigger lists the source directory recursively and plans the files the
//! ledger has not seen, oldest modification time first, bounded by
//! `max_files_per_trigger` and `max_bytes_per_trigger` (a soft bound: a batch
//! always takes at least one file). Skipped while listing:
//!
//! - names Spark's file index skips ([`hidden_name`]): starting with `.`, starting
//!   with `_` unless they hold a `=` (`_SUCCESS`, `_temporary`, but not a partition
//!   directory `_c=1`), and ending in `._COPYING_` (Hadoop's in-flight copies), at every depth;
//! - names not matching `path_glob_filter` (matched against the path relative to the source);
//! - files modified within `min_file_age` (they may still be being written);
//! - symbolic links, unless `follow_symlinks = "inside_root"` (then links whose real
//!   target is inside the root are followed, each real directory and file once);
//! - with `modified_after` (Auto Loader's `modifiedAfter`), files modified at or before it;
//! - 0-byte files, which are not recorded either, so a placeholder created
//!   before its content is picked up once it has content;
//! - files the ledger knows with the same size and modification time;
//! - files the ledger recorded as failed (unusable content, e.g. a truncated gzip)
//!   with the same size and modification time; a changed version is taken again;
//! - files that could not be read (permissions, vanished, an I/O error) until their
//!   backoff has passed ([`ledger::retry_backoff_ms`]: 1 s, doubling per failed
//!   attempt, at most 5 minutes), so an unreadable file does not make every trigger a
//!   new batch; a changed version is taken at once;
//! - files the ledger knows with another size or modification time (rewritten in
//!   place): logged and counted once as `numFilesModifiedAfterIngestion`, and
//!   ingested again only with `allow_overwrites = true` (key = path + size + mtime).
//!
//! A `path` on object storage (`s3://`, `gs://`, `az://`, `abfss://`) is listed and read
//! through the storage seam by the same rules ([`remote`]): the key is the object's URL,
//! ETag and size, and an object overwritten with new content is a modified file.

pub mod infer;
pub mod ledger;
pub mod partition;
pub mod read;
pub mod remote;
pub mod schema_store;
pub mod watch;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, StringArray, StructArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use futures::StreamExt;

use crate::error::{Error, Result};
use crate::schema::METADATA_COLUMN;
use crate::spec::{FilesSource, FollowSymlinks};
use ledger::{FileOutcome, Ledger, ListedFile};

use read::{FileMeta, ReadSpec};

/// The fields of the hidden `_metadata` column (Spark's file-source metadata column).
pub fn metadata_fields() -> Fields {
    Fields::from(vec![
        Field::new("file_path", DataType::Utf8, false),
        Field::new("file_name", DataType::Utf8, false),
        Field::new("file_size", DataType::Int64, false),
        Field::new(
            "file_modification_time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ])
}

/// The schema of the batches a file source emits: data columns, `_rescued_data`, `_metadata`.
pub fn batch_schema(read_schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = read_schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(
        METADATA_COLUMN,
        DataType::Struct(metadata_fields()),
        false,
    )));
    Arc::new(Schema::new(fields))
}

/// The outcome of one listing.
#[derive(Debug, Default)]
pub struct Listing {
    /// Files to ingest, oldest first.
    pub candidates: Vec<ListedFile>,
    /// Known files found rewritten in place during this listing (first sighting only).
    pub newly_modified: Vec<ListedFile>,
}

/// Files chosen for one batch and what stays behind.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    pub files: Vec<ListedFile>,
    pub backlog_files: u64,
    pub backlog_bytes: u64,
}

/// What reading a batch's files produced.
#[derive(Debug, Default)]
pub struct BatchRead {
    pub batches: Vec<RecordBatch>,
    pub num_rows: u64,
    pub num_bytes: u64,
    pub num_rows_rescued: u64,
    pub num_records_corrupt: u64,
    /// Kafka: offsets skipped because Kafka no longer has them (`fail_on_data_loss = false`).
    pub num_offsets_lost: u64,
    pub outcomes: Vec<(String, FileOutcome)>,
    /// Per failed file: path and error (also in `outcomes`).
    pub errors: Vec<(String, String)>,
    /// Fields the files have and the schema lacks (for schema evolution).
    pub new_fields: Vec<crate::schema::evolve::NewField>,
    /// Values whose type disagrees with their column (rescued), per field and file.
    pub type_mismatches: Vec<crate::schema::evolve::FieldMismatch>,
}

pub struct FileSource {
    pub options: FilesSource,
    pub ledger: Ledger,
    read_spec: Arc<ReadSpec>,
    batch_schema: SchemaRef,
    /// The `_metadata` strings the flow reads ([`FileSource::read_metadata_fields`]).
    metadata_strings: MetadataStrings,
    /// `available_now`: the files present at start, not yet planned.
    snapshot: Option<VecDeque<ListedFile>>,
    /// `use_notifications = true`: the watcher and what it left to examine.
    notifications: Option<Notifications>,
    /// A landing zone on object storage: its store and the incremental listing's state.
    remote: Option<RemoteSource>,
}

/// A files source whose `path` is on object storage ([`remote`]).
struct RemoteSource {
    landing: remote::Landing,
    incremental: remote::Incremental,
}

/// The state of a source with `use_notifications = true` (see [`watch`]).
struct Notifications {
    /// `None` until it starts (or after it failed): the source lists the directory.
    watcher: Option<watch::Watcher>,
    /// Bumped by each notice; the engine wakes the flow on it.
    wake: tokio::sync::watch::Sender<u64>,
    /// When the last full listing ran (ms since the epoch).
    last_listing_ms: Option<i64>,
    /// A file that could not be read is due again then (its backoff): a full listing
    /// finds it, as no notice will come for it.
    retry_due_ms: Option<i64>,
    /// Files notified (or listed) while younger than `min_file_age`: examined again.
    young: Vec<PathBuf>,
    /// The last reason the watcher could not be used, logged once per reason.
    warned: Option<String>,
    /// When the watcher was last started (or tried): retried every
    /// [`WATCHER_RESTART_MS`] while it cannot run.
    last_start_ms: Option<i64>,
}

/// How often a source with `use_notifications` tries again to start a watcher that could
/// not start or failed (it lists the directory meanwhile).
const WATCHER_RESTART_MS: i64 = 5_000;

impl FileSource {
    pub fn new(options: FilesSource, ledger: Ledger, data_schema: SchemaRef) -> Self {
        let partitions = partition::Partitioning::from_schema(&options.path, &data_schema);
        let read_spec = ReadSpec {
            format: options.format,
            csv: options.csv.clone(),
            schema: data_schema,
            rescued_data: true,
            text: options.text.clone(),
            partitions,
            follow_links: options.follow_symlinks != FollowSymlinks::Never,
            remote: None,
        };
        let batch_schema = batch_schema(&read::output_schema(&read_spec));
        FileSource {
            ledger,
            read_spec: Arc::new(read_spec),
            batch_schema,
            metadata_strings: MetadataStrings::ALL,
            snapshot: None,
            notifications: options.use_notifications.then(|| Notifications {
                watcher: None,
                wake: tokio::sync::watch::channel(0).0,
                last_listing_ms: None,
                retry_due_ms: None,
                young: Vec::new(),
                warned: None,
                last_start_ms: None,
            }),
            remote: None,
            options,
        }
    }

    /// The source reads `landing` on object storage: listed and read through its store.
    pub fn on_object_store(&mut self, landing: remote::Landing) {
        let mut spec = (*self.read_spec).clone();
        spec.remote = Some(landing.clone());
        self.read_spec = Arc::new(spec);
        self.remote = Some(RemoteSource {
            landing,
            incremental: remote::Incremental::new(self.options.use_incremental_listing),
        });
    }

    /// Whether the source's `path` is on object storage.
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    pub fn description(&self) -> String {
        match &self.remote {
            Some(r) => format!(
                "FileStreamSource[{}]",
                r.landing.url().trim_end_matches('/')
            ),
            None => format!("FileStreamSource[{}]", file_url(&self.options.path)),
        }
    }

    /// Lists a source on object storage (a local one: [`FileSource::list`]) and returns
    /// the objects to ingest: from the last key seen when incremental listing applies,
    /// the whole prefix otherwise and when `full` (an `available_now` snapshot).
    pub async fn list_remote(&mut self, now_ms: i64, full: bool) -> Result<Listing> {
        let backfill_ms =
            i64::try_from(self.options.backfill_interval.as_millis()).unwrap_or(i64::MAX);
        let Some(remote) = self.remote.as_mut() else {
            return self.list(now_ms);
        };
        let after = if full {
            None
        } else {
            remote.incremental.start_after(now_ms, backfill_ms)
        };
        let listed = remote
            .landing
            .list(&self.options, now_ms, after.as_deref())
            .await?;
        tracing::debug!(
            url = remote.landing.url(),
            start_after = after.as_deref().unwrap_or(""),
            objects = listed.files.len(),
            requests = listed.requests,
            "listed the landing zone"
        );
        remote.incremental.listed(now_ms, after.as_deref(), &listed);
        self.classify(listed.files, now_ms)
    }

    /// The data columns (the schema files are decoded to, without `_rescued_data`).
    pub fn data_schema(&self) -> &SchemaRef {
        &self.read_spec.schema
    }

    /// Data columns + `_rescued_data` + `_metadata`.
    pub fn batch_schema(&self) -> &SchemaRef {
        &self.batch_schema
    }

    /// Lists the directory and returns the files to ingest (see the module doc for the rules).
    pub fn list(&mut self, now_ms: i64) -> Result<Listing> {
        let root = self.options.path.clone();
        let mut found = Vec::new();
        // A landing directory that does not exist yet holds no file: the flow waits
        // for it (reported as source_unavailable by the engine), as a Delta source
        // waits for its table.
        if !landing_missing(&root) {
            let young = list_tree(&self.options, now_ms, &mut found)?;
            if let Some(n) = self.notifications.as_mut() {
                n.young = young;
            }
        }
        self.classify(found, now_ms)
    }

    /// A receiver bumped by each file notice (`use_notifications = true`): the engine
    /// wakes the flow on it.
    pub fn notices(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.notifications.as_ref().map(|n| n.wake.subscribe())
    }

    /// Whether a notification watcher runs now (`use_notifications = true` and it started).
    pub fn watching(&self) -> bool {
        self.notifications
            .as_ref()
            .is_some_and(|n| n.watcher.is_some())
    }

    /// A file of the last batch could not be read: with notifications, a full listing
    /// after its backoff takes it again (no notice will come for it).
    pub fn retry_later(&mut self, now_ms: i64) {
        if let Some(n) = self.notifications.as_mut() {
            let due = now_ms + ledger::retry_backoff_ms(1);
            n.retry_due_ms = Some(n.retry_due_ms.map_or(due, |d| d.min(due)));
        }
    }

    /// The files to ingest for a processing-time trigger: with `use_notifications`, the
    /// files notified since the last trigger, or a full listing when one is due (the
    /// first trigger, every `backfill_interval`, after an overflow, and whenever the
    /// watcher cannot run); otherwise a listing.
    pub fn poll(&mut self, now_ms: i64) -> Result<Listing> {
        let root = self.options.path.clone();
        let backfill_ms =
            i64::try_from(self.options.backfill_interval.as_millis()).unwrap_or(i64::MAX);
        let Some(n) = self.notifications.as_mut() else {
            return self.list(now_ms);
        };
        // The watcher starts before the listing that follows, so a file landing in
        // between is notified, listed, or both (the ledger keeps it once).
        let mut fallback: Option<String> = None;
        // A watcher that starts now knows nothing of the files landed before: list.
        let mut started = false;
        if n.watcher.is_none() {
            let retry = n
                .last_start_ms
                .is_none_or(|at| now_ms.saturating_sub(at) >= WATCHER_RESTART_MS);
            if !retry {
                fallback = Some(
                    n.warned
                        .clone()
                        .unwrap_or_else(|| "the file watcher is not running".into()),
                );
            } else if landing_missing(&root) {
                fallback = Some("the landing directory does not exist yet".into());
            } else {
                n.last_start_ms = Some(now_ms);
                match watch::Watcher::start(&root, n.wake.clone()) {
                    Ok(w) => {
                        tracing::info!(path = %root.display(), "file notifications started (use_notifications = true)");
                        n.watcher = Some(w);
                        n.warned = None;
                        started = true;
                    }
                    Err(e) => fallback = Some(format!("the file watcher cannot start ({e})")),
                }
            }
        }
        let notices = n
            .watcher
            .as_ref()
            .map(watch::Watcher::drain)
            .unwrap_or_default();
        if let Some(error) = notices.failed {
            n.watcher = None;
            fallback = Some(format!("the file watcher failed ({error})"));
        }
        let rescan = fallback.clone().or(notices.rescan);
        if let Some(why) = &rescan
            && n.warned.as_ref() != Some(why)
        {
            tracing::warn!(path = %root.display(), reason = %why, "file notifications: listing the directory instead (fallback)");
            n.warned = Some(why.clone());
        }
        let backfill_due = n
            .last_listing_ms
            .is_none_or(|last| now_ms.saturating_sub(last) >= backfill_ms);
        let retry_due = n.retry_due_ms.is_some_and(|due| now_ms >= due);
        if started || rescan.is_some() || backfill_due || retry_due {
            n.last_listing_ms = Some(now_ms);
            n.retry_due_ms = None;
            return self.list(now_ms);
        }
        // The notified files, and those still too young last time, examined as the listing would.
        let mut paths = notices.paths;
        paths.append(&mut n.young);
        paths.sort();
        paths.dedup();
        let mut found = Vec::new();
        let (young, relist) = examine(&self.options, now_ms, &paths, &mut found)?;
        // A file notified itself and within a new directory is examined once.
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found.dedup_by(|a, b| a.path == b.path);
        if let Some(n) = self.notifications.as_mut() {
            n.young = young;
            if relist {
                // A link or a directory to follow inside the root: the listing's rules.
                n.last_listing_ms = Some(now_ms);
                return self.list(now_ms);
            }
        }
        self.classify(found, now_ms)
    }

    /// Sorts files found (listed or notified) against the ledger: new ones are
    /// candidates, oldest first (see the module doc for the rules).
    fn classify(&mut self, found: Vec<ListedFile>, now_ms: i64) -> Result<Listing> {
        let mut listing = Listing::default();
        let known = self
            .ledger
            .lookup_many(found.iter().map(|f| f.path.as_str()))?;
        for (file, known) in found.into_iter().zip(known) {
            let unchanged = |k: &ledger::LedgerEntry| k.same_version(&file);
            match known {
                None => listing.candidates.push(file),
                // A file that could not be read is taken again once its backoff has passed.
                Some(known) if known.state == ledger::FileState::Retry && unchanged(&known) => {
                    if known.retry_due(now_ms) {
                        listing.candidates.push(file);
                    } else if let Some(n) = self.notifications.as_mut() {
                        let due = known.decided_at_ms.unwrap_or(0)
                            + ledger::retry_backoff_ms(known.attempts);
                        n.retry_due_ms = Some(n.retry_due_ms.map_or(due, |d| d.min(due)));
                    }
                }
                Some(known) if unchanged(&known) => {}
                // A file that failed (e.g. a truncated upload) or could not be read is
                // taken again once it changes.
                Some(known)
                    if matches!(
                        known.state,
                        ledger::FileState::Failed | ledger::FileState::Retry
                    ) =>
                {
                    listing.candidates.push(file)
                }
                Some(_) if self.options.allow_overwrites => {
                    tracing::warn!(path = %file.path, "file modified after ingestion; ingesting it again (allow_overwrites = true)");
                    listing.candidates.push(file);
                }
                Some(_) => {
                    tracing::warn!(path = %file.path, "file modified after ingestion; not ingested again (set allow_overwrites = true to re-ingest rewritten files)");
                    self.ledger.record_modified(&file, now_ms)?;
                    listing.newly_modified.push(file);
                }
            }
        }
        listing.candidates.sort_by(|a, b| {
            a.modification_time_ms
                .cmp(&b.modification_time_ms)
                .then_with(|| a.path.cmp(&b.path))
        });
        Ok(listing)
    }

    /// Takes a snapshot of the files present now; later [`FileSource::next_from_snapshot`]
    /// calls plan only from it (`available_now`).
    pub fn take_snapshot(&mut self, listing: Listing) {
        self.snapshot = Some(listing.candidates.into());
    }

    pub fn has_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Next bounded selection from the `available_now` snapshot.
    pub fn next_from_snapshot(&mut self, bounded: bool) -> Selection {
        let Some(queue) = self.snapshot.as_mut() else {
            return Selection::default();
        };
        let selection = select(queue.make_contiguous(), &self.options, bounded);
        for _ in 0..selection.files.len() {
            queue.pop_front();
        }
        selection
    }

    /// The files the next [`FileSource::next_from_snapshot`] call would select, without
    /// taking them (the read-ahead of `available_now`).
    pub fn peek_snapshot(&mut self) -> Vec<ListedFile> {
        match self.snapshot.as_mut() {
            Some(queue) => select(queue.make_contiguous(), &self.options, true).files,
            None => Vec::new(),
        }
    }

    /// The files the selection after the next `skip` files of the `available_now`
    /// snapshot would take (the batch after the read-ahead one), without taking them.
    pub fn peek_snapshot_after(&mut self, skip: usize) -> Vec<ListedFile> {
        match self.snapshot.as_mut() {
            Some(queue) => {
                let rest = queue.make_contiguous();
                select(rest.get(skip..).unwrap_or_default(), &self.options, true).files
            }
            None => Vec::new(),
        }
    }

    /// A reader for this source's files that owns what it needs (sendable across tasks).
    pub fn reader(&self) -> BatchReader {
        BatchReader {
            spec: self.read_spec.clone(),
            batch_schema: self.batch_schema.clone(),
            metadata_strings: self.metadata_strings,
            root: self.options.path.clone(),
        }
    }

    /// Fills only these `_metadata` fields from now on (`None`: all), the others left
    /// empty: the flow's query reads no other (`crate::ops::Projection::metadata_fields`).
    pub fn read_metadata_fields(&mut self, fields: Option<&std::collections::BTreeSet<String>>) {
        self.metadata_strings = MetadataStrings::of(fields);
    }
}

/// One file's decode ([`FileDecoded`]), or why its blocking task failed.
pub struct FileDecode(std::result::Result<FileDecoded, tokio::task::JoinError>);

impl FileDecode {
    /// Whether the file decoded with its `_metadata`, and its rows need nothing of the
    /// batch but to be written: no field the schema lacks (schema evolution decides on
    /// those before anything is written).
    pub fn is_plain(&self) -> bool {
        matches!(&self.0, Ok((_, Ok(decoded), Ok(()))) if decoded.new_fields.is_empty())
    }

    /// The file's rows, moved out (its counts and outcome stay for
    /// [`BatchReader::assemble`]); none when it could not be read.
    pub fn take_batches(&mut self) -> Vec<RecordBatch> {
        match &mut self.0 {
            Ok((_, Ok(decoded), _)) => std::mem::take(&mut decoded.batches),
            _ => Vec::new(),
        }
    }
}

/// A decode task's output: the file, its rows or why it could not be read, and whether
/// its `_metadata` column was attached.
type FileDecoded = (
    ListedFile,
    std::result::Result<read::DecodedFile, read::FileReadError>,
    Result<()>,
);

/// Decodes the files of a batch; see [`FileSource::reader`].
#[derive(Clone)]
pub struct BatchReader {
    spec: Arc<ReadSpec>,
    batch_schema: SchemaRef,
    metadata_strings: MetadataStrings,
    root: PathBuf,
}

impl BatchReader {
    /// Whether this reader decodes as `other` does (same spec and batch schema).
    pub fn same_spec(&self, other: &BatchReader) -> bool {
        Arc::ptr_eq(&self.spec, &other.spec)
            && self.batch_schema == other.batch_schema
            && self.metadata_strings == other.metadata_strings
    }

    /// Reads the files of a batch in parallel: [`BatchReader::decode`], then
    /// [`BatchReader::assemble`].
    pub async fn read(self, files: &[ListedFile]) -> Result<BatchRead> {
        let decoded = self.decode(files).await;
        self.assemble(decoded)
    }

    /// Decodes files in parallel, two in flight per core, each in a blocking task of its
    /// own; the results come back in the files' order. A task starts as soon as any
    /// other ends, not only the earliest (a slow file at the head of the order would
    /// otherwise hold its finished successors' slots and leave a core idle; BENCHMARKS.md,
    /// "Bronze ingest: a head start on the batch after next").
    pub async fn decode(&self, files: &[ListedFile]) -> Vec<FileDecode> {
        let parallelism = 2 * std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        let began = std::time::Instant::now();
        let tasks = futures::stream::iter(files.iter().cloned().enumerate().map(|(i, file)| {
            let reader = self.clone();
            let task = tokio::task::spawn_blocking(move || reader.decode_file(file));
            async move { (i, FileDecode(task.await)) }
        }))
        .buffer_unordered(parallelism);
        let mut results: Vec<(usize, FileDecode)> = tasks.collect().await;
        results.sort_unstable_by_key(|(i, _)| *i);
        tracing::debug!(
            files = files.len(),
            ms = began.elapsed().as_millis() as u64,
            "files decoded"
        );
        results.into_iter().map(|(_, r)| r).collect()
    }

    /// Decodes one file on the calling thread (it blocks: call it from a blocking task),
    /// its `_metadata` column attached there too (in the file's own task, in parallel
    /// with the others, not after the batch's files are joined).
    fn decode_file(&self, file: ListedFile) -> FileDecoded {
        let meta = FileMeta {
            path: PathBuf::from(&file.path),
            size: file.size,
            modification_time_ms: file.modification_time_ms,
        };
        let mut decoded = read::decode_file(&meta, &self.spec);
        let attached = match decoded.as_mut() {
            Ok(decoded) => decoded
                .batches
                .iter()
                .map(|batch| {
                    with_metadata(batch, &file, &self.batch_schema, &self.metadata_strings)
                })
                .collect::<Result<Vec<_>>>()
                .map(|batches| decoded.batches = batches),
            Err(_) => Ok(()),
        };
        (file, decoded, attached)
    }

    /// [`BatchReader::decode`] of one file on the calling thread (it blocks), for a
    /// streamed batch ([`crate::engine`]'s streamed append).
    pub fn decode_blocking(&self, file: ListedFile) -> FileDecode {
        FileDecode(Ok(self.decode_file(file)))
    }

    /// Folds decoded files, in their planning order, into the batch's read: rows,
    /// counts and each file's outcome. `mode = "failfast"` stops at a malformed record.
    pub fn assemble(&self, results: Vec<FileDecode>) -> Result<BatchRead> {
        let mut out = BatchRead::default();
        for FileDecode(joined) in results {
            let (file, decoded, attached) = joined.map_err(|e| Error::Source {
                path: self.root.clone(),
                message: format!("a reader task failed: {e}"),
            })?;
            attached?;
            match decoded {
                Ok(decoded) => {
                    out.num_bytes += file.size;
                    out.num_rows += decoded.num_rows as u64;
                    out.num_rows_rescued += decoded.num_rows_rescued as u64;
                    out.num_records_corrupt += decoded.num_records_corrupt as u64;
                    out.new_fields.extend(decoded.new_fields);
                    out.type_mismatches.extend(decoded.type_mismatches);
                    out.batches.extend(decoded.batches);
                    out.outcomes.push((
                        file.path.clone(),
                        FileOutcome::Ingested {
                            num_rows: decoded.num_rows as u64,
                        },
                    ));
                }
                // The object store failed (not the object): the batch stops before any
                // outcome is recorded, and is read again when the store answers.
                Err(read::FileReadError::Store { source, .. }) => {
                    return Err(Error::Storage {
                        role: crate::error::StorageRole::Source,
                        source: *source,
                    });
                }
                // `mode = "failfast"`: the whole batch stops, nothing is written.
                Err(read::FileReadError::Malformed {
                    path,
                    line,
                    message,
                    record,
                }) => {
                    return Err(Error::MalformedRecord {
                        path,
                        location: format!("line {line}"),
                        message,
                        record,
                        hint: "Fix the record in place (the batch is re-run with exactly the files it planned, so the file must stay under its name), or set mode = \"permissive\" to keep malformed records in _rescued_data (or quarantine them with bad_records_path)".into(),
                    });
                }
                Err(e) if e.retryable() => {
                    let error = e.to_string();
                    tracing::warn!(path = %file.path, %error, "cannot read file; it will be retried by a later batch");
                    out.errors.push((file.path.clone(), error.clone()));
                    out.outcomes
                        .push((file.path.clone(), FileOutcome::Retry { error }));
                }
                Err(e) => {
                    let message = e.to_string();
                    tracing::error!(path = %file.path, error = %message, "file is unusable; none of its rows are ingested");
                    out.errors.push((file.path.clone(), message.clone()));
                    out.outcomes
                        .push((file.path.clone(), FileOutcome::Failed { error: message }));
                }
            }
        }
        Ok(out)
    }
}

/// Records the files present now as `existing` in the ledger, once, at the first start
/// of a stream with `include_existing_files = false` (Auto Loader's
/// `includeExistingFiles`): they are never ingested; files landing later are. The first
/// start is marked by `<source dir>/initial_listing` (JSON: when, how many files), so a
/// restart never takes a second snapshot. Returns the number of files recorded (0 when
/// the marker exists already).
///
/// Auto Loader reads the option only at a stream's first start, so when it is added to a
/// stream that has already planned batches (`already_started`) it is ignored with a
/// warning: a snapshot now would record as existing the files that landed since the first
/// start, and they would never be ingested. The marker then records that it was ignored,
/// so later restarts stay quiet and never take the snapshot either.
pub fn skip_existing_files(
    options: &FilesSource,
    ledger: &mut Ledger,
    source_dir: &Path,
    already_started: bool,
    now_ms: i64,
) -> Result<u64> {
    let marker = source_dir.join("initial_listing");
    if options.include_existing_files || marker.exists() {
        return Ok(0);
    }
    if already_started {
        tracing::warn!(path = %options.path.display(),
            "include_existing_files = false is ignored: it applies only at a stream's first start and this checkpoint already has batches (Auto Loader's includeExistingFiles); files not yet ingested are ingested as usual");
        let text = serde_json::json!({
            "atMs": now_ms,
            "existingFiles": 0,
            "ignored": "include_existing_files = false added after the first start",
        })
        .to_string();
        crate::durable::create_dir_private(source_dir)
            .and_then(|()| crate::durable::write_atomic(&marker, text.as_bytes()))
            .map_err(|e| Error::checkpoint(&marker, e.to_string()))?;
        return Ok(0);
    }
    let mut files = Vec::new();
    if let Some(landing) = remote::Landing::of(&options.path)? {
        files = landing.list_blocking(options, now_ms)?.files;
    } else if !landing_missing(&options.path) {
        list_tree(options, now_ms, &mut files)?;
    }
    // Files the ledger knows already (a crash between the two writes) are not recorded twice.
    let known = ledger.lookup_many(files.iter().map(|f| f.path.as_str()))?;
    let fresh: Vec<ListedFile> = files
        .into_iter()
        .zip(known)
        .filter(|(_, k)| k.is_none())
        .map(|(f, _)| f)
        .collect();
    ledger.record_existing(&fresh, now_ms)?;
    let text = serde_json::json!({"atMs": now_ms, "existingFiles": fresh.len()}).to_string();
    crate::durable::create_dir_private(source_dir)
        .and_then(|()| crate::durable::write_atomic(&marker, text.as_bytes()))
        .map_err(|e| Error::checkpoint(&marker, e.to_string()))?;
    tracing::info!(files = fresh.len(), path = %options.path.display(), "include_existing_files = false: the files present at the first start are skipped");
    Ok(fresh.len() as u64)
}

/// Lists the source without consulting the ledger (schema inference before the first batch).
pub fn list_for_inference(options: &FilesSource, out: &mut Vec<ListedFile>) -> Result<()> {
    let now = crate::clock::now_ms();
    if let Some(landing) = remote::Landing::of(&options.path)? {
        out.extend(landing.list_blocking(options, now)?.files);
        return Ok(());
    }
    if landing_missing(&options.path) {
        return Ok(());
    }
    list_tree(options, now, out).map(|_| ())
}

/// Whether a source's landing directory does not exist (yet): nothing to list, the
/// flow waits for it. Other listing errors (permissions, a file in its place) stay errors.
/// A prefix on object storage is never missing (an empty prefix lists nothing; a missing
/// bucket is the listing's error).
pub fn landing_missing(path: &Path) -> bool {
    if crate::storage::location::is_remote_text(&path.to_string_lossy()) {
        return false;
    }
    matches!(std::fs::metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// Chooses the files for one batch: oldest first, bounded by count and (softly) bytes.
pub fn select(candidates: &[ListedFile], options: &FilesSource, bounded: bool) -> Selection {
    let mut selection = Selection::default();
    let mut bytes = 0u64;
    for (i, file) in candidates.iter().enumerate() {
        if bounded {
            let over_files = selection.files.len() as u64 >= options.max_files_per_trigger;
            let over_bytes = options
                .max_bytes_per_trigger
                .is_some_and(|max| !selection.files.is_empty() && bytes + file.size > max);
            if over_files || over_bytes {
                let rest = &candidates[i..];
                selection.backlog_files = rest.len() as u64;
                selection.backlog_bytes = rest.iter().map(|f| f.size).sum();
                return selection;
            }
        }
        bytes += file.size;
        selection.files.push(file.clone());
    }
    selection
}

/// One listing of a source's tree.
struct Walk<'a> {
    root: &'a Path,
    options: &'a FilesSource,
    now_ms: i64,
    min_age_ms: i64,
    /// `Some` when links inside the root are followed (`follow_symlinks = "inside_root"`).
    follow: Option<Follow>,
    /// Files skipped as younger than `min_file_age`.
    young: Vec<PathBuf>,
}

/// What a listing that follows links has seen, by real (canonical) path: a directory or
/// file reached twice (a loop, an alias) is listed once.
struct Follow {
    root: PathBuf,
    dirs: std::collections::HashSet<PathBuf>,
    files: std::collections::HashSet<PathBuf>,
    /// Links found, followed after the tree without links was listed, so that a file is
    /// listed under its own path rather than under a link's.
    pending: VecDeque<PathBuf>,
}

/// Lists the source's `path` recursively. Symbolic links below it are skipped unless
/// `follow_symlinks = "inside_root"`, which follows those whose target is inside the
/// root (each real directory and file once). The root itself may be a link. Returns the
/// files skipped as younger than `min_file_age`.
fn list_tree(
    options: &FilesSource,
    now_ms: i64,
    out: &mut Vec<ListedFile>,
) -> Result<Vec<PathBuf>> {
    let root = options.path.as_path();
    let follow = match options.follow_symlinks {
        FollowSymlinks::Never => None,
        FollowSymlinks::InsideRoot => {
            let real = canonical(root)?;
            Some(Follow {
                dirs: std::collections::HashSet::from([real.clone()]),
                root: real,
                files: std::collections::HashSet::new(),
                pending: VecDeque::new(),
            })
        }
    };
    let mut walk = Walk {
        root,
        options,
        now_ms,
        min_age_ms: i64::try_from(options.min_file_age.as_millis()).unwrap_or(i64::MAX),
        follow,
        young: Vec::new(),
    };
    walk.list_dir(root, out)?;
    while let Some(link) = walk.follow.as_mut().and_then(|f| f.pending.pop_front()) {
        walk.follow_link(&link, out)?;
    }
    Ok(walk.young)
}

/// Examines notified paths as a listing would (hidden names at every depth,
/// `path_glob_filter`, links, 0-byte files, `min_file_age`, `modified_after`; a
/// directory is listed): the files to classify go to `out`. Returns the files still
/// younger than `min_file_age` (examined again at the next trigger), and whether a full
/// listing is needed instead (a link, or a directory with `follow_symlinks =
/// "inside_root"`: what a link reaches is decided over the whole tree).
fn examine(
    options: &FilesSource,
    now_ms: i64,
    paths: &[PathBuf],
    out: &mut Vec<ListedFile>,
) -> Result<(Vec<PathBuf>, bool)> {
    let root = options.path.as_path();
    let absolute_root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let follow_links = options.follow_symlinks == FollowSymlinks::InsideRoot;
    let mut walk = Walk {
        root,
        options,
        now_ms,
        min_age_ms: i64::try_from(options.min_file_age.as_millis()).unwrap_or(i64::MAX),
        follow: None,
        young: Vec::new(),
    };
    for notified in paths {
        // The path as a listing names it (the ledger's key): the source's path joined
        // with the part below it.
        let Ok(relative) = notified
            .strip_prefix(root)
            .or_else(|_| notified.strip_prefix(&absolute_root))
        else {
            continue;
        };
        if relative.as_os_str().is_empty()
            || relative
                .components()
                .any(|c| hidden_name(&c.as_os_str().to_string_lossy()))
        {
            continue;
        }
        let path = root.join(relative);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            // Gone again (deleted, renamed away): nothing to take.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::SourceIo { path, source }),
        };
        if meta.file_type().is_symlink() || (meta.is_dir() && follow_links) {
            if follow_links {
                return Ok((Vec::new(), true));
            }
            warn_link_skipped(
                &path,
                "links are not followed (follow_symlinks = \"never\", the default)",
            );
            continue;
        }
        walk.entry(path, meta, out)?;
    }
    Ok((walk.young, false))
}

fn canonical(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path).map_err(|source| Error::SourceIo {
        path: path.to_path_buf(),
        source,
    })
}

/// Logs a skipped symbolic link once per process (a listing runs every trigger).
fn warn_link_skipped(path: &Path, why: &str) {
    static SEEN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> =
        std::sync::OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    let first = seen
        .lock()
        .map(|mut s| s.insert(path.to_path_buf()))
        .unwrap_or(false);
    if first {
        tracing::warn!(path = %path.display(), "symbolic link in a files source skipped: {why} (docs/sources.md#symbolic-links)");
    }
}

impl Walk<'_> {
    fn list_dir(&mut self, dir: &Path, out: &mut Vec<ListedFile>) -> Result<()> {
        let entries = std::fs::read_dir(dir).map_err(|source| Error::SourceIo {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| Error::SourceIo {
                path: dir.to_path_buf(),
                source,
            })?;
            paths.push(entry.path());
        }
        // Sorted: which name of an aliased file is listed never depends on the directory's order.
        paths.sort();
        for path in paths {
            let hidden = path
                .file_name()
                .is_none_or(|n| hidden_name(&n.to_string_lossy()));
            if hidden {
                continue;
            }
            // The entry itself, not what a link points to.
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                // Vanished between listing and stat: it will be seen (or not) next time.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(Error::SourceIo { path, source }),
            };
            if meta.file_type().is_symlink() {
                match &mut self.follow {
                    Some(follow) => follow.pending.push_back(path),
                    None => warn_link_skipped(
                        &path,
                        "links are not followed (follow_symlinks = \"never\", the default)",
                    ),
                }
                continue;
            }
            self.entry(path, meta, out)?;
        }
        Ok(())
    }

    /// A link found by [`Self::list_dir`], with `follow_symlinks = "inside_root"`.
    fn follow_link(&mut self, link: &Path, out: &mut Vec<ListedFile>) -> Result<()> {
        let Some(follow) = &self.follow else {
            return Ok(());
        };
        let real = match std::fs::canonicalize(link) {
            Ok(r) => r,
            // Dangling, a loop the kernel refuses (ELOOP), or no permission.
            Err(e) => {
                warn_link_skipped(link, &format!("its target cannot be resolved ({e})"));
                return Ok(());
            }
        };
        if !real.starts_with(&follow.root) {
            warn_link_skipped(link, "it points outside the source's path");
            return Ok(());
        }
        match std::fs::metadata(&real) {
            Ok(meta) => self.entry(link.to_path_buf(), meta, out),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::SourceIo {
                path: link.to_path_buf(),
                source,
            }),
        }
    }

    /// A directory (listed) or file (kept if the filters let it through) at `path`,
    /// where `meta` describes what it is (a link's target when followed).
    fn entry(
        &mut self,
        path: PathBuf,
        meta: std::fs::Metadata,
        out: &mut Vec<ListedFile>,
    ) -> Result<()> {
        let options = self.options;
        if meta.is_dir() {
            if let Some(follow) = &mut self.follow {
                // A loop (a link to an ancestor) or an alias of a listed directory.
                if !follow.dirs.insert(canonical(&path)?) {
                    return Ok(());
                }
            }
            return self.list_dir(&path, out);
        }
        if !meta.is_file() || meta.len() == 0 {
            return Ok(());
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(glob) = &options.path_glob_filter {
            let relative = path.strip_prefix(self.root).unwrap_or(&path);
            if !glob.matches_path(relative) && !glob.matches(&name) {
                return Ok(());
            }
        }
        let mtime_ms = crate::clock::modified_ms(&meta);
        if self.min_age_ms > 0 && self.now_ms.saturating_sub(mtime_ms) < self.min_age_ms {
            self.young.push(path);
            return Ok(());
        }
        if options
            .modified_after_ms
            .is_some_and(|after| mtime_ms <= after)
        {
            return Ok(());
        }
        if let Some(follow) = &mut self.follow {
            // The same file under a second name (a link to a listed file).
            if !follow.files.insert(canonical(&path)?) {
                return Ok(());
            }
        }
        out.push(ListedFile {
            path: path.to_string_lossy().into_owned(),
            size: meta.len(),
            modification_time_ms: mtime_ms,
            etag: None,
        });
        Ok(())
    }
}

/// Whether a listing skips a file or directory name, as Spark's file index does
/// (`InMemoryFileIndex.shouldFilterOut`): names starting with `.`; names starting
/// with `_` unless they contain `=` (a partition directory such as `_c=1` is data);
/// names ending in `._COPYING_` (a copy still in flight: `hadoop fs -put` writes
/// `f.json._COPYING_` and renames it to `f.json` when done, so reading both would
/// ingest the file twice). Unlike Spark, `_metadata` and `_common_metadata` (Parquet
/// summary files, not data) are skipped too.
pub fn hidden_name(name: &str) -> bool {
    name.starts_with('.')
        || (name.starts_with('_') && !name.contains('='))
        || name.ends_with("._COPYING_")
}

/// A local path as Spark writes it in `_metadata.file_path` and in source descriptions:
/// Hadoop's `Path.toUri().toString()`, `file:` + the absolute path, percent-encoded as
/// `java.net.URI` quotes a path ([`uri_path`]): `/d/a b.csv` -> `file:/d/a%20b.csv`.
/// Spark returns the encoded form since 3.4.1 (SPARK-43284, apache/spark#40947).
/// An object on object storage is named by its URL as listed (`s3://bucket/landing/a.json`),
/// as Spark names it.
pub fn file_url(path: &Path) -> String {
    let text = path.to_string_lossy();
    if crate::storage::location::is_remote_text(&text) {
        return text.into_owned();
    }
    format!("file:{}", uri_path(path))
}

/// The last segment of [`file_url`]: Spark's `_metadata.file_name` (`a%20b.csv`).
pub fn file_url_name(path: &Path) -> String {
    let encoded = file_url(path);
    match encoded.rsplit_once('/') {
        Some((_, name)) => name.to_string(),
        None => encoded,
    }
}

/// The absolute path, percent-encoded as `java.net.URI`'s multi-argument constructors
/// quote a path component (what Hadoop's `Path` uses): ASCII letters, digits,
/// `-_.!~*'()`, `;:@&=+$,` and `/` are kept, and so are non-ASCII characters that are
/// neither controls nor spaces (Java's "other" characters); every other character is
/// written as the `%XX` escapes of its UTF-8 bytes (space, `%`, `#`, `?`, `[`, `]`, `{`,
/// `}`, `^`, `|`, `<`, `>`, `` ` ``, `"`, controls). Checked against Spark 4.2's file
/// source (docs/spark.md).
pub fn uri_path(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let text = abs.to_string_lossy();
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        let keep = if c.is_ascii() {
            c.is_ascii_alphanumeric() || "-_.!~*'();:@&=+$,/".contains(c)
        } else {
            !c.is_control() && !c.is_whitespace()
        };
        if keep {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// Appends the `_metadata` struct column (constant per file) to a decoded batch.
fn with_metadata(
    batch: &RecordBatch,
    file: &ListedFile,
    schema: &SchemaRef,
    fields: &MetadataStrings,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let path = Path::new(&file.path);
    // A string field the flow does not read is left empty (`""`; the fields are NOT
    // NULL): the path and name repeated on every row take about as many bytes as the
    // data. The size and time cost the same either way and are always filled.
    let string = |wanted: bool, value: &dyn Fn() -> String| -> Result<ArrayRef> {
        Ok(Arc::new(if wanted {
            repeated_string(&value(), n, &file.path)?
        } else {
            StringArray::new(
                arrow::buffer::OffsetBuffer::new_zeroed(n),
                Default::default(),
                None,
            )
        }))
    };
    let columns: Vec<ArrayRef> = vec![
        string(fields.file_path, &|| file_url(path))?,
        string(fields.file_name, &|| file_url_name(path))?,
        Arc::new(Int64Array::from_value(file.size as i64, n)),
        Arc::new(
            TimestampMicrosecondArray::from_value(file.modification_time_ms * 1000, n)
                .with_timezone("UTC"),
        ),
    ];
    let metadata =
        StructArray::try_new(metadata_fields(), columns, None).map_err(|source| Error::Arrow {
            context: format!("building _metadata for {}", file.path),
            source,
        })?;
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(metadata));
    RecordBatch::try_new(schema.clone(), columns).map_err(|source| Error::Arrow {
        context: format!("batch from {}", file.path),
        source,
    })
}

/// Which of `_metadata`'s string fields a source fills ([`FileSource::read_metadata_fields`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataStrings {
    pub file_path: bool,
    pub file_name: bool,
}

impl MetadataStrings {
    /// Both (a flow whose query reads the whole struct, or before it is planned).
    pub const ALL: MetadataStrings = MetadataStrings {
        file_path: true,
        file_name: true,
    };

    /// The fields a query reads (`None`: all; see `crate::ops::MetadataFields`).
    pub fn of(names: Option<&std::collections::BTreeSet<String>>) -> MetadataStrings {
        names.map_or(MetadataStrings::ALL, |names| MetadataStrings {
            file_path: names.contains("file_path"),
            file_name: names.contains("file_name"),
        })
    }
}

/// `n` copies of `value` (a file's path on each of its rows): one bulk copy of the
/// bytes, not a push per row. Refuses (instead of panicking) when the copies would
/// pass a `Utf8` array's 2 GiB offset limit. Public for the ingest bench's limit, which
/// builds `source_file` as weir does.
pub fn repeated_string(value: &str, n: usize, file: &str) -> Result<StringArray> {
    let total = value
        .len()
        .checked_mul(n)
        .filter(|t| *t <= i32::MAX as usize);
    if total.is_none() {
        return Err(Error::Arrow {
            context: format!("building _metadata for {file}"),
            source: arrow::error::ArrowError::ComputeError(format!(
                "{n} copies of a {}-byte path pass the 2 GiB string column limit",
                value.len()
            )),
        });
    }
    let offsets = arrow::buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(value.len(), n));
    Ok(StringArray::new(
        offsets,
        arrow::buffer::Buffer::from_vec(value.as_bytes().repeat(n)),
        None,
    ))
}

/// How long to wait between listings when a processing-time trigger is idle.
pub const IDLE_POLL_INTERVAL: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    //! `use_notifications = true`: notices, the fallback listing, the backfill listing,
    //! and the ledger keeping each file once whichever way it was found.
    use super::*;

    /// A JSON source over `<dir>/landing` with notifications and a one-hour backfill:
    /// within the test, a listing happens only at the first trigger or when the test's
    /// clock says the backfill is due.
    fn source(dir: &Path, extra: &str) -> FileSource {
        let text = format!(
            "[[flow]]\nname = \"f\"\n[flow.source]\ntype = \"files\"\npath = \"landing\"\nformat = \"json\"\n\
             schema = \"id BIGINT\"\nuse_notifications = true\nbackfill_interval = \"1 hour\"\n{extra}\n\
             [flow.sink]\ntype = \"delta\"\npath = \"out\"\n"
        );
        let pipeline = crate::pipeline::parse(&dir.join("pipeline.toml"), &text).expect("pipeline");
        let crate::spec::SourceSpec::Files(options) = pipeline.flows[0].source.clone() else {
            panic!("a files source");
        };
        let ledger = Ledger::open(&dir.join("ledger.sqlite")).expect("ledger");
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        FileSource::new(options, ledger, schema)
    }

    /// Lands `name` as a writer should: written beside the landing directory, renamed
    /// in (one notice: the rename).
    fn land(dir: &Path, name: &str) {
        let staging = dir.join("staging");
        std::fs::create_dir_all(&staging).expect("staging");
        std::fs::write(staging.join(name), "{\"id\":1}\n").expect("write");
        std::fs::rename(staging.join(name), dir.join("landing").join(name)).expect("rename");
    }

    fn names(listing: &Listing) -> Vec<String> {
        listing
            .candidates
            .iter()
            .map(|f| {
                Path::new(&f.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Waits (bounded) until the watcher has reported something.
    async fn notified(rx: &mut tokio::sync::watch::Receiver<u64>) {
        tokio::time::timeout(Duration::from_secs(20), rx.changed())
            .await
            .expect("a notice within 20 s")
            .expect("watcher alive");
    }

    const T0: i64 = 1_000_000;
    const HOUR: i64 = 3_600_000;

    #[tokio::test]
    async fn a_landed_file_is_taken_from_its_notice_without_a_listing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("landing")).expect("landing");
        let mut src = source(dir, "");
        let mut rx = src.notices().expect("notifications on");
        // The first trigger starts the watcher and lists (nothing yet).
        assert!(src.poll(T0).expect("poll").candidates.is_empty());
        assert!(src.watching());
        rx.borrow_and_update();
        land(dir, "a.json");
        notified(&mut rx).await;
        // Within the backfill interval: no listing, the notice alone names the file.
        let listing = src.poll(T0 + 1).expect("poll");
        assert_eq!(names(&listing), vec!["a.json"]);
        src.ledger
            .plan_batch(0, &listing.candidates, T0 + 1)
            .expect("plan");
        // A file written in place is taken once its writer closes it (its creation
        // and writes are no notice).
        let path = dir.join("landing").join("b.json");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&path).expect("create");
            f.write_all(b"{\"id\":2}\n").expect("write");
            f.sync_all().expect("sync");
        }
        notified(&mut rx).await;
        let listing = src.poll(T0 + 2).expect("poll");
        assert_eq!(names(&listing), vec!["b.json"]);
        src.ledger
            .plan_batch(1, &listing.candidates, T0 + 2)
            .expect("plan");
        // Written under a hidden name in the directory, then renamed: the hidden name's
        // notice (its close) takes nothing, the rename's takes the file.
        let tmp = dir.join("landing").join(".c.json.tmp");
        std::fs::write(&tmp, "{\"id\":3}\n").expect("write");
        std::fs::rename(&tmp, dir.join("landing").join("c.json")).expect("rename");
        let mut taken = Vec::new();
        for i in 0..10 {
            notified(&mut rx).await;
            taken.extend(names(&src.poll(T0 + 3 + i).expect("poll")));
            if !taken.is_empty() {
                break;
            }
        }
        assert_eq!(taken, vec!["c.json"]);
    }

    #[tokio::test]
    async fn the_backfill_listing_finds_a_file_the_notices_missed_and_nothing_is_taken_twice() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("landing")).expect("landing");
        std::fs::write(dir.join("seed.json"), "{\"id\":1}\n").expect("seed");
        let mut src = source(dir, "");
        let mut rx = src.notices().expect("notifications on");
        assert!(src.poll(T0).expect("poll").candidates.is_empty());
        // A hard link makes a complete file appear without a close or a rename: no
        // notice names it (inotify reports only its creation).
        std::fs::hard_link(
            dir.join("seed.json"),
            dir.join("landing").join("linked.json"),
        )
        .expect("link");
        land(dir, "a.json");
        notified(&mut rx).await;
        let first = src.poll(T0 + 1).expect("poll");
        assert_eq!(names(&first), vec!["a.json"], "only the notified file");
        src.ledger
            .plan_batch(0, &first.candidates, T0 + 1)
            .expect("plan");
        // The backfill listing, an hour on: the missed file, and not a.json again.
        let backfill = src.poll(T0 + HOUR + 1).expect("poll");
        assert_eq!(names(&backfill), vec!["linked.json"]);
        src.ledger
            .plan_batch(1, &backfill.candidates, T0 + HOUR + 1)
            .expect("plan");
        // A second notice of a file already planned (opened for writing and closed
        // unchanged) takes nothing: the ledger knows it with this size and time.
        drop(
            std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("landing").join("a.json"))
                .expect("open"),
        );
        notified(&mut rx).await;
        let again = src.poll(T0 + HOUR + 2).expect("poll");
        assert!(again.candidates.is_empty(), "{again:?}");
        // A file both notified and listed is planned once: the notice of c.json is
        // pending when the next backfill lists it; the trigger after has nothing.
        land(dir, "c.json");
        notified(&mut rx).await;
        let listed = src.poll(T0 + 2 * HOUR + 2).expect("poll");
        assert_eq!(names(&listed), vec!["c.json"]);
        src.ledger
            .plan_batch(2, &listed.candidates, T0 + 2 * HOUR + 2)
            .expect("plan");
        let after = src.poll(T0 + 2 * HOUR + 3).expect("poll");
        assert!(after.candidates.is_empty(), "{after:?}");
    }

    #[tokio::test]
    async fn without_a_watcher_or_after_an_overflow_the_source_lists() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let landing = dir.join("landing");
        let mut src = source(dir, "");
        // No landing directory: no watcher; the source lists (nothing).
        assert!(src.poll(T0).expect("poll").candidates.is_empty());
        assert!(!src.watching());
        // The directory appears with a file already in it: the watcher starts, and that
        // trigger lists, so the file landed before the watch is found.
        std::fs::create_dir_all(&landing).expect("landing");
        std::fs::write(landing.join("a.json"), "{\"id\":1}\n").expect("write");
        let listing = src.poll(T0 + 1).expect("poll");
        assert_eq!(names(&listing), vec!["a.json"]);
        assert!(src.watching());
        src.ledger
            .plan_batch(0, &listing.candidates, T0 + 1)
            .expect("plan");
        // The watcher fails: it is dropped and every trigger lists (files no notice
        // names, hard links here, are found), until a new watcher starts 5 s later.
        if let Some(n) = src.notifications.as_ref()
            && let Some(w) = n.watcher.as_ref()
        {
            w.fail("inotify read error");
        }
        std::fs::hard_link(landing.join("a.json"), landing.join("lost1.json")).expect("link");
        let listing = src.poll(T0 + 2).expect("poll");
        assert_eq!(names(&listing), vec!["lost1.json"]);
        assert!(!src.watching());
        src.ledger
            .plan_batch(1, &listing.candidates, T0 + 2)
            .expect("plan");
        std::fs::hard_link(landing.join("a.json"), landing.join("lost2.json")).expect("link");
        let listing = src.poll(T0 + 3).expect("poll");
        assert_eq!(names(&listing), vec!["lost2.json"]);
        assert!(!src.watching());
        src.ledger
            .plan_batch(2, &listing.candidates, T0 + 3)
            .expect("plan");
        let listing = src.poll(T0 + 1 + WATCHER_RESTART_MS).expect("poll");
        assert!(listing.candidates.is_empty(), "{listing:?}");
        assert!(src.watching());
        // An overflow (the kernel dropped events): the next trigger lists, so a file
        // whose notice was lost is found.
        std::fs::hard_link(landing.join("a.json"), landing.join("lost3.json")).expect("link");
        if let Some(n) = src.notifications.as_ref()
            && let Some(w) = n.watcher.as_ref()
        {
            w.overflowed();
        }
        let listing = src.poll(T0 + 2 + WATCHER_RESTART_MS).expect("poll");
        assert_eq!(names(&listing), vec!["lost3.json"]);
        assert!(src.watching(), "an overflow keeps the watcher");
    }

    #[tokio::test]
    async fn a_young_notified_file_waits_for_min_file_age() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("landing")).expect("landing");
        let mut src = source(dir, "min_file_age = \"10 minutes\"");
        let mut rx = src.notices().expect("notifications on");
        let now = crate::clock::now_ms();
        assert!(src.poll(now).expect("poll").candidates.is_empty());
        land(dir, "a.json");
        notified(&mut rx).await;
        // Notified but younger than min_file_age: kept aside, not lost.
        assert!(src.poll(now + 1).expect("poll").candidates.is_empty());
        let listing = src.poll(now + 11 * 60_000).expect("poll");
        assert_eq!(names(&listing), vec!["a.json"]);
    }
}

#[cfg(test)]
mod metadata_tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::{Int64Type, TimestampMicrosecondType};

    /// A string field the flow does not read is left empty (no bytes per row); the others
    /// hold the file's values.
    #[test]
    fn only_the_fields_a_flow_reads_are_filled() {
        let data = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let schema = batch_schema(&data);
        let batch = RecordBatch::try_new(
            data,
            vec![Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef],
        )
        .unwrap();
        let file = ListedFile {
            path: "/landing/a b.csv".into(),
            size: 42,
            modification_time_ms: 1_700_000_000_000,
            etag: None,
        };
        let path_only = std::collections::BTreeSet::from(["file_path".to_string()]);
        for (names, filled) in [(None, true), (Some(&path_only), false)] {
            let fields = MetadataStrings::of(names);
            let out = with_metadata(&batch, &file, &schema, &fields).unwrap();
            let meta = out.column(1).as_struct();
            let path = meta.column(0).as_string::<i32>();
            assert_eq!(path.value(2), "file:/landing/a%20b.csv");
            let name = meta.column(1).as_string::<i32>();
            let size = meta.column(2).as_primitive::<Int64Type>();
            let time = meta.column(3).as_primitive::<TimestampMicrosecondType>();
            if filled {
                assert_eq!(name.value(2), "a%20b.csv");
            } else {
                assert_eq!((name.value(2), name.value_data().len()), ("", 0));
            }
            assert_eq!(size.value(2), 42);
            assert_eq!(time.value(2), 1_700_000_000_000_000);
        }
    }
}
