//! The file source in the batch protocol (Auto Loader's directory listing, or its file
//! notifications with `use_notifications`; the source itself is `source::files`).

use std::path::PathBuf;

use super::{Backlog, BatchFiles, Evolution, Planned, source_dir};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::schema::evolve::{evolve, strings_only};
use crate::source::files::ledger::{FileOutcome, Ledger, ListedFile};
use crate::source::files::{BatchRead, BatchReader, FileDecode, FileSource, schema_store, select};
use crate::spec::EvolutionMode;
use crate::spec::{FilesSource, Trigger};

/// A file source with its ledger and schema location.
pub struct FilesInput {
    pub source: FileSource,
    /// Where the source's schema history lives (inferred schemas, widenings).
    pub schema_location: PathBuf,
    /// `available_now`: the next batch's files, being decoded while this batch is
    /// transformed and written ([`FilesInput::read`]).
    read_ahead: Option<ReadAhead>,
    /// `available_now`: the first files of the batch after the read-ahead one, decoded
    /// as soon as the read-ahead finished ([`read_ahead`]).
    head_start: Option<HeadStart>,
    /// Whether [`FilesInput::read`] reads the next batch ahead (not when the flow's
    /// batches are streamed: a streamed batch would drop it).
    reads_ahead: bool,
    /// `available_now`, streamed batches: the first files of the next batch, decoding
    /// since a writer of the previous batch had no file left ([`StreamedHead`]).
    streamed_head: Option<StreamedHead>,
}

/// The first files of the next streamed batch (a quarter of its bytes at most,
/// [`streamed_head_files`]), decoded from the moment a writer of the batch before has
/// no file left to read, by one thread per writer done ([`HeadDecodes`]): the cores
/// the writers leave decode them while the other writers finish, their files are made
/// durable, the batch commits and the next one is planned (without it, a core idles
/// 40-60 ms at each batch boundary; BENCHMARKS.md, "Bronze ingest: a head start for
/// streamed batches" and "the batch boundaries"). Like the read-ahead, it has no side
/// effect: the next batch uses the decodes only when it begins with exactly these
/// files and has the same read spec.
pub type StreamedHead = std::sync::Arc<HeadDecodes>;

/// A head start's decodes ([`StreamedHead`]), shared by the threads decoding them and
/// the next batch's writers: each file is decoded once, by whoever reaches it first
/// (a head thread takes the first file no one took; a writer reading a file no one
/// took decodes it itself), and a writer reading a file being decoded waits for it.
pub struct HeadDecodes {
    reader: BatchReader,
    files: Vec<ListedFile>,
    slots: std::sync::Mutex<Vec<HeadSlot>>,
    done: std::sync::Condvar,
    /// The head start is dropped: its threads take no further file.
    cancelled: std::sync::atomic::AtomicBool,
}

enum HeadSlot {
    /// No one took the file yet.
    Open,
    /// A head thread is decoding it.
    Decoding,
    Decoded(Box<FileDecode>),
    /// Taken by a writer (decoded or to decode itself).
    Taken,
}

impl HeadDecodes {
    pub fn new(reader: BatchReader, files: Vec<ListedFile>) -> Self {
        let slots = files.iter().map(|_| HeadSlot::Open).collect();
        HeadDecodes {
            reader,
            files,
            slots: std::sync::Mutex::new(slots),
            done: std::sync::Condvar::new(),
            cancelled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<HeadSlot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A head thread's work (it blocks): decodes the first file no one took, until none
    /// is left or the head start is dropped.
    pub fn work(&self) {
        use std::sync::atomic::Ordering;
        while !self.cancelled.load(Ordering::Relaxed) {
            let i = {
                let mut slots = self.lock();
                let Some(i) = slots.iter().position(|s| matches!(s, HeadSlot::Open)) else {
                    return;
                };
                slots[i] = HeadSlot::Decoding;
                i
            };
            let decode = self.reader.decode_blocking(self.files[i].clone());
            self.lock()[i] = HeadSlot::Decoded(Box::new(decode));
            self.done.notify_all();
        }
    }

    /// File `i`'s decode for a writer of the batch (it blocks while a head thread
    /// decodes the file); `None` when the writer decodes it itself: no one took it, or
    /// it is not one of the head's files.
    pub fn take(&self, i: usize) -> Option<FileDecode> {
        let mut slots = self.lock();
        loop {
            match slots.get_mut(i)? {
                HeadSlot::Decoding => {
                    slots = self.done.wait(slots).unwrap_or_else(|p| p.into_inner());
                }
                slot => {
                    return match std::mem::replace(slot, HeadSlot::Taken) {
                        HeadSlot::Decoded(decode) => Some(*decode),
                        _ => None,
                    };
                }
            }
        }
    }

    /// The files, first to last.
    pub fn files(&self) -> &[ListedFile] {
        &self.files
    }

    /// The reader decoding them (its read spec decides whether a batch can use them).
    pub fn reader(&self) -> &BatchReader {
        &self.reader
    }

    /// The head start is dropped: its threads finish the file they decode and stop.
    pub fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A decode started before its batch was planned, and the head start it gave the batch
/// after it.
struct ReadAhead {
    files: Vec<ListedFile>,
    reader: BatchReader,
    task: tokio::task::JoinHandle<(Result<BatchRead>, Option<HeadStart>)>,
}

/// The first files of a batch two ahead, decoding.
struct HeadStart {
    files: Vec<ListedFile>,
    task: tokio::task::JoinHandle<Vec<FileDecode>>,
}

/// The files of a head start: the first of `files` up to an eighth of their bytes, so
/// the rows held at once grow by an eighth of a batch at most.
fn head_start_files(files: &[ListedFile]) -> Vec<ListedFile> {
    first_files(files, 8)
}

/// The files of a streamed batch's head start ([`StreamedHead`]): the first of `files`
/// up to a quarter of their bytes (decoded by up to one thread per writer, and a
/// streamed batch holds a few files' rows per writer, not the batch's).
fn streamed_head_files(files: &[ListedFile]) -> Vec<ListedFile> {
    first_files(files, 4)
}

/// The first of `files` up to a `part`th of their bytes.
fn first_files(files: &[ListedFile], part: u64) -> Vec<ListedFile> {
    let budget = files.iter().map(|f| f.size).sum::<u64>() / part;
    let mut bytes = 0u64;
    files
        .iter()
        .take_while(|f| {
            bytes += f.size;
            bytes <= budget
        })
        .cloned()
        .collect()
}

/// The read-ahead of `files` (using `head`, the decode of their first files when one
/// started earlier). Once decoded, it starts decoding `after`'s first files: the batch
/// after this one cannot be read ahead yet (that would hold a third batch), but cores
/// left idle while this batch waits for the previous one's last Parquet writer take
/// those files (BENCHMARKS.md, "Bronze ingest: a head start on the batch after next").
async fn read_ahead(
    reader: BatchReader,
    files: Vec<ListedFile>,
    head: Option<HeadStart>,
    after: Vec<ListedFile>,
) -> (Result<BatchRead>, Option<HeadStart>) {
    let decoded = match head {
        Some(head) => {
            let split = head.files.len().min(files.len());
            let (first, rest) = files.split_at(split);
            let (head, mut rest) = tokio::join!(head.task, reader.decode(rest));
            let mut decoded = match head {
                Ok(decoded) => decoded,
                // The head start's task failed: its files are decoded again.
                Err(_) => reader.decode(first).await,
            };
            decoded.append(&mut rest);
            decoded
        }
        None => reader.decode(&files).await,
    };
    let next = head_start_files(&after);
    let head_start = (!next.is_empty()).then(|| {
        let (reader, files) = (reader.clone(), next.clone());
        HeadStart {
            files: next,
            task: tokio::spawn(async move { reader.decode(&files).await }),
        }
    });
    (reader.assemble(decoded), head_start)
}

/// The file source's offset for batch N (Spark's `FileStreamSource`: the batch's
/// entry in its file log; weir's is the ledger).
fn log_offset(batch_id: u64) -> serde_json::Value {
    serde_json::json!({ "logOffset": batch_id })
}

/// Source `index`'s ledger: `sources/<index>/ledger.sqlite`.
fn ledger_path(checkpoint: &Checkpoint, index: usize) -> PathBuf {
    source_dir(checkpoint, index).join("ledger.sqlite")
}

/// Source `index`'s schema location: `schema_location` when given; else the checkpoint
/// itself for the flow's source (`_schemas/`) and `sources/<index>/` for the others.
pub fn schema_location(options: &FilesSource, index: usize, checkpoint: &Checkpoint) -> PathBuf {
    match (&options.schema_location, index) {
        (Some(location), _) => location.clone(),
        (None, 0) => checkpoint.root().to_path_buf(),
        (None, _) => source_dir(checkpoint, index),
    }
}

fn open_ledger(checkpoint: &Checkpoint, index: usize) -> Result<Ledger> {
    if index > 0 {
        let dir = source_dir(checkpoint, index);
        crate::durable::create_dir_private(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    Ledger::open(&ledger_path(checkpoint, index))
}

impl FilesInput {
    /// Decodes a batch's files. With `available_now` it then starts decoding the files
    /// the next batch will take from the trigger's snapshot (a read-ahead: the snapshot
    /// fixes them, as Spark's `AvailableNow` fixes its end offset at the start), so that
    /// decode overlaps this batch's transform and Delta write. The read-ahead has no side
    /// effect: the next batch is planned (`offsets/N+1`, the ledger) as always, and uses
    /// the decoded files only when it planned exactly those files with the same read
    /// spec; otherwise they are decoded again. At most one batch is read ahead, so a
    /// flow holds at most two batches' rows (each bounded by `max_files_per_trigger` and
    /// `max_bytes_per_trigger`), plus a head start on the batch after: its first files, an
    /// eighth of its bytes at most ([`head_start_files`]).
    pub async fn read(&mut self, files: &[ListedFile]) -> Result<BatchRead> {
        let reader = self.source.reader();
        let read = match self.read_ahead.take() {
            Some(ahead) if ahead.files == files && ahead.reader.same_spec(&reader) => {
                let (read, head_start) = ahead.task.await.map_err(|e| Error::Source {
                    path: self.source.options.path.clone(),
                    message: format!("a reader task failed: {e}"),
                })?;
                self.head_start = head_start;
                read?
            }
            other => {
                if let Some(ahead) = other {
                    ahead.task.abort();
                }
                self.drop_head_start();
                self.drop_streamed_head();
                reader.clone().read(files).await?
            }
        };
        if self.reads_ahead && self.source.has_snapshot() {
            let next = self.source.peek_snapshot();
            if !next.is_empty() {
                let after = self.source.peek_snapshot_after(next.len());
                // The head start was decoded by this same reader (the read-ahead's spec
                // matched); it is used when the next batch begins with its files.
                if !(self.head_start.as_ref()).is_some_and(|h| next.starts_with(&h.files)) {
                    self.drop_head_start();
                }
                let head = self.head_start.take();
                let task = tokio::spawn(read_ahead(reader.clone(), next.clone(), head, after));
                self.read_ahead = Some(ReadAhead {
                    files: next,
                    reader,
                    task,
                });
            }
        }
        Ok(read)
    }

    /// Whether batches after this one are read ahead (see [`FilesInput::read`]).
    pub fn set_reads_ahead(&mut self, on: bool) {
        self.reads_ahead = on;
    }

    /// A reader for a batch of `files` streamed file by file (`crate::engine::streamed`),
    /// and the head start the batch before it began on its first files, when it
    /// decoded exactly those with this reader's spec. A read-ahead or head start of the
    /// ordinary path is dropped (a streamed batch holds a few files' rows at a time,
    /// not a batch's), and so is a head start that does not fit.
    pub fn stream_reader(&mut self, files: &[ListedFile]) -> (BatchReader, Option<StreamedHead>) {
        if let Some(ahead) = self.read_ahead.take() {
            ahead.task.abort();
        }
        self.drop_head_start();
        let reader = self.source.reader();
        let head = match self.streamed_head.take() {
            Some(head) if files.starts_with(head.files()) && head.reader().same_spec(&reader) => {
                Some(head)
            }
            Some(head) => {
                head.cancel();
                None
            }
            None => None,
        };
        (reader, head)
    }

    /// `available_now`: the files a head start on the next streamed batch decodes (the
    /// first of what the next batch takes from the trigger's snapshot, a quarter of its
    /// bytes at most); none without a snapshot or when this batch is the last.
    pub fn next_streamed_head_files(&mut self) -> Vec<ListedFile> {
        if !self.source.has_snapshot() {
            return Vec::new();
        }
        streamed_head_files(&self.source.peek_snapshot())
    }

    /// Keeps the head start a streamed batch began on the next one.
    pub fn set_streamed_head(&mut self, head: StreamedHead) {
        if let Some(old) = self.streamed_head.replace(head) {
            old.cancel();
        }
    }

    fn drop_streamed_head(&mut self) {
        if let Some(head) = self.streamed_head.take() {
            head.cancel();
        }
    }

    fn drop_head_start(&mut self) {
        if let Some(head) = self.head_start.take() {
            head.task.abort();
        }
    }

    /// `None` until the schema is known: given, recorded, or inferred from the files
    /// present (an inferred schema is recorded as version 0 of the history). A source on
    /// object storage is opened on a blocking thread (inference and the first start's
    /// snapshot fetch objects from synchronous code).
    pub async fn open(
        options: &FilesSource,
        index: usize,
        checkpoint: &Checkpoint,
    ) -> Result<Option<FilesInput>> {
        let Some(landing) = crate::source::files::remote::Landing::of(&options.path)? else {
            return Self::open_local(options, index, checkpoint);
        };
        let (options, checkpoint) = (options.clone(), checkpoint.clone());
        let path = options.path.clone();
        let opened =
            tokio::task::spawn_blocking(move || Self::open_local(&options, index, &checkpoint))
                .await
                .map_err(|e| Error::Source {
                    path,
                    message: format!("opening the source failed: {e}"),
                })??;
        Ok(opened.map(|mut input| {
            input.source.on_object_store(landing);
            input
        }))
    }

    fn open_local(
        options: &FilesSource,
        index: usize,
        checkpoint: &Checkpoint,
    ) -> Result<Option<FilesInput>> {
        let location = schema_location(options, index, checkpoint);
        let mut ledger = open_ledger(checkpoint, index)?;
        // `include_existing_files = false`: the files present at the very first start are
        // recorded as skipped before anything else (also before the schema is known).
        // Planned batches, not the ledger file, mark a started stream: the ledger is
        // created just above, also by a first start that crashed before its snapshot.
        let started = !Checkpoint::batch_ids(&checkpoint.offsets_dir())?.is_empty();
        crate::source::files::skip_existing_files(
            options,
            &mut ledger,
            &source_dir(checkpoint, index),
            started,
            super::super::now_ms(),
        )?;
        let Some(schema) =
            schema_store::resolve_at(options, &location, options.schema_hints.as_deref())?
        else {
            return Ok(None);
        };
        Ok(Some(FilesInput {
            source: FileSource::new(options.clone(), ledger, schema),
            schema_location: location,
            read_ahead: None,
            head_start: None,
            reads_ahead: true,
            streamed_head: None,
        }))
    }

    /// Recovery: ledger rows planned for a batch whose `offsets/` file was never written
    /// are forgotten; rows of committed batches still pending are settled.
    pub fn recover(
        index: usize,
        checkpoint: &Checkpoint,
        last_planned: Option<u64>,
        last_commit: Option<u64>,
        now_ms: i64,
    ) -> Result<()> {
        let path = ledger_path(checkpoint, index);
        if let Some(batch) = last_planned
            && !path.exists()
        {
            // Never recreated silently: an empty ledger lists every file as new.
            return Err(Error::checkpoint(
                &path,
                format!(
                    "the file ledger is missing, but the checkpoint has batches up to {batch}: a new ledger \
                     would take every file in the landing directory as new and ingest it again (duplicates). \
                     Nothing was written. Restore the ledger from a copy of the checkpoint \
                     (`weir checkpoint backup` makes one), or start over as \
                     `weir playbook checkpoint_incompatible` describes"
                ),
            ));
        }
        let mut ledger = open_ledger(checkpoint, index)?;
        ledger.discard_unplanned_after(last_planned)?;
        ledger.settle_committed_through(last_commit, now_ms)?;
        Ok(())
    }

    pub async fn plan(
        &mut self,
        trigger: Trigger,
        batch_id: u64,
        now_ms: i64,
    ) -> Result<Option<Planned>> {
        let src = &mut self.source;
        let mut num_modified = 0u64;
        let selection = match trigger {
            Trigger::AvailableNow => {
                if !src.has_snapshot() {
                    let listing = if src.is_remote() {
                        src.list_remote(now_ms, true).await?
                    } else {
                        src.list(now_ms)?
                    };
                    num_modified += listing.newly_modified.len() as u64;
                    src.take_snapshot(listing);
                }
                src.next_from_snapshot(true)
            }
            Trigger::Once | Trigger::ProcessingTime(_) => {
                // Notifications serve a stream that keeps running; `once` lists.
                let listing = if src.is_remote() {
                    src.list_remote(now_ms, matches!(trigger, Trigger::Once))
                        .await?
                } else if matches!(trigger, Trigger::Once) {
                    src.list(now_ms)?
                } else {
                    src.poll(now_ms)?
                };
                num_modified += listing.newly_modified.len() as u64;
                select(
                    &listing.candidates,
                    &src.options,
                    !matches!(trigger, Trigger::Once),
                )
            }
        };
        if selection.files.is_empty() {
            return Ok(None);
        }
        Ok(Some(Planned {
            end_offset: Some(log_offset(batch_id)),
            backlog: Backlog {
                files: selection.backlog_files,
                bytes: selection.backlog_bytes,
                versions: None,
                offsets_behind: None,
            },
            latest_offset: None,
            num_modified,
            files: BatchFiles::Files(selection.files),
        }))
    }

    /// The files batch N planned, to read again; files whose first attempt recorded
    /// them as failed or to retry are not read again: they end as recorded
    /// ([`crate::source::files::ledger::Ledger::record_outcomes`]).
    pub fn replay(&mut self, batch_id: u64) -> Result<BatchFiles> {
        let ledger = &self.source.ledger;
        let not_read: std::collections::HashSet<String> = ledger
            .recorded_outcomes(batch_id)?
            .into_iter()
            .filter(|(_, o)| !matches!(o, FileOutcome::Ingested { .. }))
            .map(|(path, _)| path)
            .collect();
        let files = ledger
            .files_for_batch(batch_id)?
            .into_iter()
            .filter(|f| !not_read.contains(&f.path))
            .collect();
        Ok(BatchFiles::Files(files))
    }

    /// Records the outcomes of batch N's read before its sink write.
    pub fn record_outcomes(&mut self, batch_id: u64, read: &BatchRead) -> Result<()> {
        if read
            .outcomes
            .iter()
            .any(|(_, o)| matches!(o, FileOutcome::Retry { .. }))
        {
            self.source.retry_later(super::super::now_ms());
        }
        self.source.ledger.record_outcomes(batch_id, &read.outcomes)
    }

    /// New columns in the batch's files against the schema, per `schema_evolution`:
    /// widen (and stop), fail, or ignore (named and counted); `rescue` keeps them in
    /// `_rescued_data`.
    pub fn evolve(&self, read: &BatchRead) -> Evolution {
        let options = &self.source.options;
        let new_fields = if options.infer_column_types {
            read.new_fields.clone()
        } else {
            strings_only(&read.new_fields)
        };
        let mut ignored: Vec<String> = Vec::new();
        if options.schema_evolution == EvolutionMode::None {
            for f in &new_fields {
                let name = f.path.join(".");
                if !ignored.contains(&name) {
                    ignored.push(name);
                }
            }
        }
        Evolution {
            decision: evolve(
                self.source.data_schema(),
                &new_fields,
                options.schema_evolution,
            ),
            ignored,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sizes: &[u64]) -> Vec<ListedFile> {
        ListedFile::of_sizes(sizes)
    }

    #[test]
    fn a_head_start_takes_the_first_files_up_to_an_eighth_of_the_bytes() {
        // 16 files of 100 bytes: an eighth is 200 bytes, the first two files.
        let head = head_start_files(&files(&[100; 16]));
        let paths: Vec<&str> = head.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["/landing/f0.csv", "/landing/f1.csv"]);
        // A first file bigger than the budget: no head start (never a whole big file).
        assert!(head_start_files(&files(&[900, 100])).is_empty());
        // It stops at the first file over the budget, even if a later one would fit.
        let head = head_start_files(&files(&[50, 60, 600, 10, 80, 800]));
        assert_eq!(head.len(), 2);
        assert!(head_start_files(&[]).is_empty());
    }

    #[test]
    fn a_streamed_head_start_takes_the_first_files_up_to_a_quarter_of_the_bytes() {
        assert_eq!(streamed_head_files(&files(&[100; 16])).len(), 4);
        assert!(streamed_head_files(&files(&[900, 100])).is_empty());
    }

    /// JSON files `<dir>/landing/f<i>.json` of one row each (`id` = i), listed, and a
    /// reader of them.
    fn json_files(dir: &std::path::Path, n: usize) -> (BatchReader, Vec<ListedFile>) {
        let landing = dir.join("landing");
        std::fs::create_dir_all(&landing).unwrap();
        let text = "[[flow]]\nname = \"f\"\n[flow.source]\ntype = \"files\"\npath = \"landing\"\n\
                    format = \"json\"\nschema = \"id BIGINT\"\n[flow.sink]\ntype = \"delta\"\npath = \"out\"\n";
        let pipeline = crate::pipeline::parse(&dir.join("pipeline.toml"), text).unwrap();
        let crate::spec::SourceSpec::Files(options) = pipeline.flows[0].source.clone() else {
            panic!("a files source");
        };
        let ledger = Ledger::open(&dir.join("ledger.sqlite")).unwrap();
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, true),
        ]));
        let source = FileSource::new(options, ledger, schema);
        let files = (0..n)
            .map(|i| {
                let path = landing.join(format!("f{i}.json"));
                std::fs::write(&path, format!("{{\"id\": {i}}}\n")).unwrap();
                ListedFile {
                    path: path.display().to_string(),
                    size: 12,
                    modification_time_ms: i as i64,
                    etag: None,
                }
            })
            .collect();
        (source.reader(), files)
    }

    fn ids(mut decode: FileDecode) -> Vec<i64> {
        assert!(decode.is_plain());
        decode
            .take_batches()
            .iter()
            .flat_map(|b| {
                let ids = b
                    .column_by_name("id")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .unwrap();
                ids.values().to_vec()
            })
            .collect()
    }

    /// Each head file is decoded once: by a head thread (the writer takes its decode,
    /// once), or by the writer when no thread took it; a cancelled head start decodes
    /// nothing more.
    #[test]
    fn head_decodes_give_each_file_once_to_whoever_reaches_it_first() {
        let tmp = tempfile::tempdir().unwrap();
        let (reader, files) = json_files(tmp.path(), 8);
        // No thread begun: the writer decodes every file itself.
        let head = HeadDecodes::new(reader.clone(), files[..4].to_vec());
        assert!(head.take(0).is_none());
        // A file the writer took is not decoded by a thread begun after.
        head.work();
        assert!(head.take(0).is_none());
        assert_eq!(ids(head.take(1).unwrap()), [1]);
        assert!(head.take(1).is_none(), "a decode is given once");
        assert!(head.take(4).is_none(), "not a head file");
        // Cancelled before its thread begins: nothing decoded.
        let head = HeadDecodes::new(reader.clone(), files[..4].to_vec());
        head.cancel();
        head.work();
        assert!((0..4).all(|i| head.take(i).is_none()));
        // Two threads and a writer at once: every file's rows once, in order.
        for _ in 0..20 {
            let head = std::sync::Arc::new(HeadDecodes::new(reader.clone(), files.clone()));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let head = head.clone();
                    std::thread::spawn(move || head.work())
                })
                .collect();
            let got: Vec<i64> = (0..files.len())
                .flat_map(|i| {
                    ids(head
                        .take(i)
                        .unwrap_or_else(|| reader.decode_blocking(files[i].clone())))
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(got, (0..8).collect::<Vec<i64>>());
        }
    }
}
