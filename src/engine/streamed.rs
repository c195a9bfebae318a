//! A streamed batch: steps 4 and 5 of the batch protocol (DESIGN.md §5: read, transform,
//! write) in one pass, file by file, for the flows that only move rows from files to a
//! Delta table (bronze ingest).
//!
//! ```text
//!  PlannedBatch ─► writer 0: decode file ─► where/select ─► Parquet ─┐  (files of the
//!                  writer 1: decode file ─► where/select ─► Parquet ─┤   batch, split in
//!                                                                    │   contiguous runs)
//!          ledger outcomes (after_read) ◄─ every file read ◄─────────┘
//!          ─► one Delta commit, txn(query id, N) (after_sink_commit) ─► Written
//! ```
//!
//! Each writer (one per core, a blocking thread of its own) decodes its files in order,
//! runs the flow's row-wise query over a few files' rows at a time and writes the result
//! to Parquet files of its own, so a batch holds a few files' rows per writer at once,
//! not the whole batch (and the next one read ahead): decode and encode overlap on every
//! core, with the memory of an Arrow reader and a Parquet writer per core. A writer done
//! with its run takes the back half of the files left in the run with the most left
//! ([`Claims`]: the cores of a shared machine do not run at one speed, and equal bytes
//! took one writer up to 45% longer than the other) and writes them, first to last, to a
//! Parquet file of its own; the commit lists the Parquet files in the order of the input
//! files they hold. The protocol is the batch's as [`super::batch`] runs it: the files' outcomes
//! are in the ledger before the commit, the Parquet files are in no commit (invisible)
//! until the one Delta commit that carries the batch's txn, and a batch re-run after a
//! crash takes the ordinary path (the sink's txn skips a batch it holds).
//!
//! Which flows stream is decided once, when the flow is planned
//! ([`super::plan::BatchPath::of`]). A batch is streamed only when nothing in it needs
//! the whole batch before a row is written; otherwise it is declined before its commit,
//! its Parquet files removed, and the batch runs the ordinary way: a file that is not
//! read cleanly (unreadable, failed, a malformed record with `mode = "failfast"`),
//! columns the schema lacks (schema evolution decides before anything is written), rows
//! whose columns do not fit the table, an error of the query or the writer. A failed commit fails the batch (the
//! next start re-runs it the ordinary way, the table's txn deciding).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::record_batch::RecordBatch;

use super::batch::{Output, PlannedBatch, ReadBatch, Written};
use super::control::FlowEvents;
use super::failpoint;
use super::input::files::{HeadDecodes, StreamedHead};
use super::input::{BatchFiles, Input};
use super::plan::FlowPlan;
use super::sinks::Sinks;
use crate::error::Result;
use crate::schema::events::SchemaEvent;
use crate::source::files::ledger::ListedFile;
use crate::source::files::{BatchReader, FileDecode};

/// A streamed batch's end.
pub enum Streamed {
    /// Written and committed to the sink (the batch's step 5 is done).
    Written(Box<Written>),
    /// Not streamed (see the module doc); nothing of it is committed, and it runs the
    /// ordinary way.
    Declined(PlannedBatch),
}

/// Input bytes per Parquet writer below which a batch takes fewer writers (one for a
/// small batch: one file in the table, not one per core).
const PART_MIN_BYTES: u64 = 4 << 20;

/// Rows a writer gathers (from whole files) before it runs the flow's query over them
/// and encodes them: about one decoded batch, so a writer done with its files waits
/// little for the other's last encode (the query is planned once per writer, not per
/// run, [`crate::ops::RowWiseRunner::run`]).
const GROUP_ROWS: usize = 8192;

/// The Parquet files a writer wrote, a range of the batch's files each, with the index
/// (in the batch) of the range's first file.
type WrittenFiles = Vec<(usize, Vec<deltalake::kernel::Add>)>;

/// What one writer did: its files' decodes (rows moved out), and its Parquet files and
/// rows written, or why it stopped.
type WriterEnd = (Vec<(usize, FileDecode)>, Result<(WrittenFiles, usize)>);

/// Steps 4 and 5 of `planned` streamed (the flow's path is
/// [`Execution::Streamed`](super::plan::Execution::Streamed)): the batch
/// written to the sink in one commit, or declined.
pub async fn read_transform_write(
    flow: &mut FlowPlan,
    planned: PlannedBatch,
    events: &FlowEvents,
    sinks: &mut Sinks,
) -> Result<Streamed> {
    let started = Instant::now();
    let batch_id = planned.batch_id;
    let files = match planned.parts.as_slice() {
        [part] if !planned.replayed => match &part.files {
            BatchFiles::Files(files) if !files.is_empty() => files.clone(),
            _ => return Ok(Streamed::Declined(planned)),
        },
        _ => return Ok(Streamed::Declined(planned)),
    };
    // The flow's expectations run on each writer's rows before its query; their counts
    // are summed over the writers (a declined batch's are dropped: the staged run counts).
    let expectations = flow.expectations.clone();
    let expected = Arc::new(std::sync::Mutex::new(expectations.zero()));
    let source = if expectations.is_empty() {
        String::new()
    } else {
        flow.inputs
            .first()
            .map(Input::description)
            .unwrap_or_default()
    };
    let Some(Input::Files(input)) = flow.inputs.first_mut() else {
        return Ok(Streamed::Declined(planned));
    };
    let schema = input.source.batch_schema().clone();
    let Some(query) = flow.projection.row_wise_query(&schema).await? else {
        return Ok(Streamed::Declined(planned));
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let parts = cores
        .min(files.len())
        .min((bytes / PART_MIN_BYTES).max(1) as usize);
    // A batch for parallel writers creates a missing table at its commit (as an
    // ordinary large first append does); a smaller one is written the ordinary way.
    let append = match sinks
        .begin_streamed_append(batch_id, &flow.output_schema, parts >= 2)
        .await
    {
        Ok(Some(append)) => append,
        Ok(None) => return Ok(Streamed::Declined(planned)),
        // The ordinary write meets the same error, with its retries.
        Err(e) => {
            tracing::debug!(batch_id, error = %e, "streamed append not begun");
            return Ok(Streamed::Declined(planned));
        }
    };
    let (reader, head) = input.stream_reader(&files);
    if let Some(head) = &head {
        tracing::debug!(
            batch_id,
            files = head.files().len(),
            "streamed batch begins with a head start"
        );
    }
    let prefetched = head;
    // The next batch's head start, a thread begun on it by each writer with no file left.
    let next_head = Arc::new(NextHead::new(&reader, input.next_streamed_head_files()));
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Handle::current();
    let runs = split_by_bytes(&files, parts);
    let writers = runs.len();
    let claims = Arc::new(Claims::new(runs));
    let files = Arc::new(files);
    let mut handles = Vec::with_capacity(writers);
    for run in 0..writers {
        let (expectations, expected, source) =
            (expectations.clone(), expected.clone(), source.clone());
        // Expectations over a writer's rows (a `fail` ends the writer: the batch is
        // declined and its staged run stops with the error, before anything is written).
        let checked = move |rows: Vec<RecordBatch>| -> Result<Vec<RecordBatch>> {
            if expectations.is_empty() {
                return Ok(rows);
            }
            let mut counts = expectations.zero();
            let rows = expectations.apply(rows, &mut counts, batch_id, &source, None)?;
            if let Ok(mut total) = expected.lock() {
                total.add(&counts);
            }
            Ok(rows)
        };
        let (reader, query, append, stop, runtime, claims, files, prefetched, next_head) = (
            reader.clone(),
            query.clone(),
            append.clone(),
            stop.clone(),
            runtime.clone(),
            claims.clone(),
            files.clone(),
            prefetched.clone(),
            next_head.clone(),
        );
        // A blocking thread per writer, as the ordinary append's Parquet writers: the
        // runtime's workers stay free.
        handles.push(tokio::task::spawn_blocking(move || -> WriterEnd {
            runtime.block_on(async move {
                let runner = query.runner();
                let mut decodes = Vec::new();
                let mut written = WrittenFiles::new();
                let mut rows = 0;
                let mut failure = None;
                // The first file of a range taken from another writer (claimed with it).
                let mut head = None;
                // This writer began a thread on the next batch's head start.
                let mut began = false;
                // The files of the ranges this writer is done with, closing.
                let mut closing = Vec::new();
                // The files this writer holds (its run, then each half it takes from
                // another's), first to last, into a Parquet writer per range.
                loop {
                    let mut writer = append.writer();
                    let mut first = None;
                    let range: Result<bool> = async {
                        let mut pending: Vec<RecordBatch> = Vec::new();
                        let mut pending_rows = 0;
                        while let Some(i) = head.take().or_else(|| claims.next(run)) {
                            let early = prefetched.as_ref().and_then(|p| p.take(i));
                            let Some(batches) =
                                decode_plain(&reader, &files[i], i, early, &stop, &mut decodes)
                            else {
                                return Ok(true);
                            };
                            first.get_or_insert(i);
                            pending_rows +=
                                batches.iter().map(RecordBatch::num_rows).sum::<usize>();
                            pending.extend(batches);
                            if pending_rows >= GROUP_ROWS {
                                pending_rows = 0;
                                for out in
                                    runner.run(checked(std::mem::take(&mut pending))?).await?
                                {
                                    writer.write(&out).await?;
                                }
                            }
                        }
                        for out in runner.run(checked(pending)?).await? {
                            writer.write(&out).await?;
                        }
                        // No file left to read or take: while this writer's file is
                        // written out and the batch finishes, its core decodes the
                        // next batch's first files.
                        if claims.exhausted() && !began {
                            began = true;
                            next_head.begin();
                        }
                        Ok(false)
                    }
                    .await;
                    // Another range to take: this range's file is closed on a task
                    // of its own while this writer reads that range.
                    if let Ok(false) = range
                        && let Some(next) = claims.take_half(run)
                    {
                        closing.push((first, writer.close_later()));
                        head = Some(next);
                        continue;
                    }
                    let closed = writer.close().await;
                    match (range, closed) {
                        (Ok(stopped), Ok((adds, n))) => {
                            rows += n;
                            if let Some(first) = first {
                                written.push((first, adds));
                            }
                            if !stopped && !began {
                                next_head.begin();
                            }
                        }
                        (Err(e), closed) => {
                            if let Ok((adds, _)) = closed {
                                append.discard(&adds).await;
                            }
                            failure = Some(e);
                        }
                        (Ok(_), Err(e)) => failure = Some(e),
                    }
                    break;
                }
                for (first, closed) in closing {
                    match closed.await {
                        Ok((adds, n)) => {
                            rows += n;
                            if let Some(first) = first {
                                written.push((first, adds));
                            }
                        }
                        Err(e) => failure = failure.or(Some(e)),
                    }
                }
                if let Some(e) = failure {
                    stop.store(true, Ordering::Relaxed);
                    // The files this writer finished are removed too.
                    for (_, adds) in &written {
                        append.discard(adds).await;
                    }
                    return (decodes, Err(e));
                }
                tracing::debug!(
                    batch_id,
                    files = decodes.len(),
                    parquet_files = written.len(),
                    ms = started.elapsed().as_millis() as u64,
                    "streamed writer done"
                );
                (decodes, Ok((written, rows)))
            })
        }));
    }
    let mut decodes: Vec<(usize, FileDecode)> = Vec::with_capacity(files.len());
    let mut written = Vec::new();
    let mut num_rows = 0usize;
    let mut failure = None;
    for handle in handles {
        match handle.await {
            Ok((d, Ok((w, rows)))) => {
                decodes.extend(d);
                written.extend(w);
                num_rows += rows;
            }
            Ok((d, Err(e))) => {
                decodes.extend(d);
                failure = failure.or(Some(e.to_string()));
            }
            Err(e) => failure = failure.or(Some(format!("a writer task failed: {e}"))),
        }
    }
    if let Some(head) = next_head.take() {
        input.set_streamed_head(head);
    }
    // In the order of the input files they hold: the files' order in the commit is the
    // rows'.
    written.sort_by_key(|(first, _)| *first);
    let adds: Vec<deltalake::kernel::Add> = written.into_iter().flat_map(|(_, a)| a).collect();
    // A table this batch would create and no row to create it with: the ordinary
    // write creates it, with the batch's txn, as for any empty first batch.
    if num_rows == 0 && append.creates_table() {
        failure = failure.or(Some("no rows for the table the batch creates".into()));
    }
    if failure.is_some() || stop.load(Ordering::Relaxed) {
        tracing::debug!(
            batch_id,
            reason = failure
                .as_deref()
                .unwrap_or("a file not read cleanly or with new columns"),
            "streamed batch declined; it runs the ordinary way"
        );
        append.discard(&adds).await;
        return Ok(Streamed::Declined(planned));
    }
    decodes.sort_unstable_by_key(|(i, _)| *i);
    let read = match reader.assemble(decodes.into_iter().map(|(_, d)| d).collect()) {
        Ok(read) => read,
        Err(e) => {
            append.discard(&adds).await;
            return Err(e);
        }
    };
    for event in SchemaEvent::type_mismatches(&read.type_mismatches) {
        events.schema(event);
    }
    // Each file's outcome is durable before the commit (as in `batch::read`).
    if let Err(e) = input.record_outcomes(batch_id, &read) {
        append.discard(&adds).await;
        return Err(e);
    }
    failpoint::hit("after_read", &flow.name, batch_id);
    // A failed commit fails the batch: whether it is in the log is not known, and the
    // files' outcomes are recorded; the next start re-runs the batch with exactly its
    // files, and the table's txn decides whether it is written (the files stay, orphans
    // if not committed). One exception: the commit looks for its files first
    // (`DeltaSink::commit_adds`), and files another tool deleted since they were written
    // (a VACUUM with a short retention) are never committed; then the batch runs the
    // ordinary way, which reads its files again and writes them anew (issue #46). Only
    // a failed commit looks for them a second time.
    let written = adds.clone();
    let sink = match sinks
        .commit_streamed_append(&append, batch_id, adds, num_rows)
        .await
    {
        Ok(sink) => sink,
        Err(e) => {
            let missing = sinks.missing_files(&written).await.unwrap_or_default();
            let Some(first) = missing.first() else {
                return Err(e);
            };
            tracing::warn!(batch_id, missing = missing.len(), first = %first,
                "files of the streamed batch were deleted before its commit (a VACUUM?); it runs again the ordinary way");
            append.discard(&written).await;
            return Ok(Streamed::Declined(planned));
        }
    };
    super::batch::sink_committed(flow, batch_id, &sink);
    let mut planned = planned;
    planned.timings.get_batch = 0;
    let read = ReadBatch {
        planned,
        reads: vec![read],
        new_columns_ignored: Vec::new(),
    };
    let mut output = Output::streamed(read, flow.projection.dimensions(), started);
    if let Ok(counts) = expected.lock() {
        output.expectations = flow.expectations.progress(&counts);
        output.num_dropped_by_expectations = counts.dropped;
    }
    Ok(Streamed::Written(Box::new(Written { output, sink })))
}

/// Decodes file `i` for a writer (or takes `early`, its decode begun before the batch)
/// and records its decode in `decodes`: its batches when it was read cleanly, `None`
/// (and `stop` set) when not, or when another writer stopped.
fn decode_plain(
    reader: &BatchReader,
    file: &ListedFile,
    i: usize,
    early: Option<FileDecode>,
    stop: &AtomicBool,
    decodes: &mut Vec<(usize, FileDecode)>,
) -> Option<Vec<RecordBatch>> {
    if stop.load(Ordering::Relaxed) {
        return None;
    }
    let mut decode = early.unwrap_or_else(|| reader.decode_blocking(file.clone()));
    if !decode.is_plain() {
        stop.store(true, Ordering::Relaxed);
        decodes.push((i, decode));
        return None;
    }
    let batches = decode.take_batches();
    decodes.push((i, decode));
    Some(batches)
}

/// The head start on the next batch ([`StreamedHead`]): its files' decodes, a thread
/// begun on them by each writer left without a file (one core's worth each: the other
/// writers still encode).
struct NextHead {
    decodes: Option<StreamedHead>,
    /// A thread was begun on it (at most one per writer is).
    begun: AtomicBool,
}

impl NextHead {
    fn new(reader: &BatchReader, files: Vec<ListedFile>) -> Self {
        NextHead {
            decodes: (!files.is_empty()).then(|| Arc::new(HeadDecodes::new(reader.clone(), files))),
            begun: AtomicBool::new(false),
        }
    }

    /// Begins a thread decoding the head's files (for a writer that has none left).
    fn begin(&self) {
        let Some(decodes) = &self.decodes else {
            return;
        };
        self.begun.store(true, Ordering::Relaxed);
        let decodes = Arc::clone(decodes);
        tokio::task::spawn_blocking(move || decodes.work());
    }

    /// The head start for the next batch, when a thread was begun on it.
    fn take(&self) -> Option<StreamedHead> {
        let decodes = self.decodes.as_ref()?;
        self.begun
            .load(Ordering::Relaxed)
            .then(|| Arc::clone(decodes))
    }
}

/// Which file each writer of a streamed batch reads next: its run from the front; its
/// run done, it takes the back half of the files left in the run with the most left
/// (work stealing, as Rayon's and Cilk's schedulers split a range), which becomes its
/// own range, read from the front into a Parquet file of its own, and which a writer
/// done first can take half of in turn. Every range is contiguous, so every Parquet
/// file holds consecutive files, and sorting them by their first file gives the files'
/// order.
struct Claims {
    /// The files of each writer's range not yet read (indexes into the batch's files).
    left: Mutex<Vec<Range<usize>>>,
}

impl Claims {
    fn new(runs: Vec<Range<usize>>) -> Self {
        Claims {
            left: Mutex::new(runs),
        }
    }

    /// The next file of writer `writer`'s range.
    fn next(&self, writer: usize) -> Option<usize> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        left.get_mut(writer)?.next()
    }

    /// Whether every file has been claimed.
    fn exhausted(&self) -> bool {
        let left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        left.iter().all(|r| r.is_empty())
    }

    /// Gives writer `writer` the back half (rounded up) of the range with the most files
    /// left and claims its first file for it (so every range taken is read from, and
    /// writers cannot take one file back and forth); `None` when no file is left.
    fn take_half(&self, writer: usize) -> Option<usize> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        let (from, len) = (left.iter().enumerate())
            .map(|(i, r)| (i, r.len()))
            .max_by_key(|(_, len)| *len)?;
        if len == 0 || writer >= left.len() {
            return None;
        }
        let split = left[from].end - len.div_ceil(2);
        let taken = split..left[from].end;
        left[from].end = split;
        left[writer] = taken;
        left[writer].next()
    }
}

/// `files` in `parts` contiguous runs of about equal bytes, none empty (fewer runs when
/// there are fewer files).
fn split_by_bytes(files: &[ListedFile], parts: usize) -> Vec<Range<usize>> {
    let parts = parts.clamp(1, files.len().max(1));
    let total: u64 = files.iter().map(|f| f.size.max(1)).sum();
    let mut ranges = Vec::with_capacity(parts);
    let mut start = 0;
    let mut bytes = 0u64;
    for (i, file) in files.iter().enumerate() {
        bytes += file.size.max(1);
        let k = ranges.len() as u64 + 1;
        // Run k ends once it holds its share; the runs after it keep a file each.
        let left = files.len() - (i + 1);
        let runs_after = parts - ranges.len() - 1;
        if ranges.len() + 1 < parts && (bytes * parts as u64 >= total * k || left == runs_after) {
            ranges.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < files.len() {
        ranges.push(start..files.len());
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sizes: &[u64]) -> Vec<ListedFile> {
        ListedFile::of_sizes(sizes)
    }

    #[test]
    fn a_writer_done_takes_the_back_half_of_the_longest_range_left() {
        let claims = Claims::new(vec![0..3, 3..8]);
        assert_eq!(claims.next(0), Some(0));
        assert_eq!(claims.next(1), Some(3));
        // Writer 0 is fast: its run, then the back half of what writer 1 has left
        // (4..8: 6, 7), first to last, its first file claimed with it.
        assert_eq!(claims.next(0), Some(1));
        assert_eq!(claims.next(0), Some(2));
        assert_eq!(claims.next(0), None);
        assert_eq!(claims.take_half(0), Some(6));
        // Writer 1 finishes its 4, 5, and takes the half left of writer 0's range: 7.
        assert_eq!(claims.next(1), Some(4));
        assert_eq!(claims.next(1), Some(5));
        assert_eq!(claims.next(1), None);
        assert_eq!(claims.take_half(1), Some(7));
        assert_eq!(claims.next(0), None);
        assert_eq!(claims.next(1), None);
        // Nothing is left anywhere: nothing to take, nothing read twice.
        assert_eq!(claims.take_half(0), None);
        assert_eq!(claims.take_half(1), None);
        // Three writers: the longest range left is split, half rounded up to the taker.
        let claims = Claims::new(vec![0..2, 2..3, 3..8]);
        assert_eq!(claims.next(1), Some(2));
        assert_eq!(claims.take_half(1), Some(5));
        let taken: Vec<usize> = std::iter::from_fn(|| claims.next(1)).collect();
        assert_eq!(taken, [6, 7]);
        let rest: Vec<usize> = std::iter::from_fn(|| claims.next(2)).collect();
        assert_eq!(rest, [3, 4]);
        let rest: Vec<usize> = std::iter::from_fn(|| claims.next(0)).collect();
        assert_eq!(rest, [0, 1]);
        assert_eq!(claims.take_half(2), None);
    }

    #[test]
    fn files_split_in_contiguous_runs_of_about_equal_bytes() {
        assert_eq!(split_by_bytes(&files(&[10; 8]), 2), [0..4, 4..8]);
        assert_eq!(split_by_bytes(&files(&[10; 7]), 2), [0..4, 4..7]);
        // A big first file is a run of its own.
        assert_eq!(split_by_bytes(&files(&[100, 10, 10, 10]), 2), [0..1, 1..4]);
        // A big last file still leaves the first run its files.
        assert_eq!(split_by_bytes(&files(&[10, 10, 10, 100]), 2), [0..3, 3..4]);
        assert_eq!(split_by_bytes(&files(&[10, 10]), 4), [0..1, 1..2]);
        assert_eq!(split_by_bytes(&files(&[10; 6]), 3), [0..2, 2..4, 4..6]);
        assert_eq!(
            split_by_bytes(&files(&[10]), 2),
            vec![Range { start: 0, end: 1 }]
        );
        assert_eq!(
            split_by_bytes(&files(&[0, 0, 0]), 1),
            vec![Range { start: 0, end: 3 }]
        );
        assert!(split_by_bytes(&[], 2).is_empty());
        // Every file is in exactly one run, in order.
        for parts in 1..5 {
            let sizes = [5, 900, 3, 3, 3, 70, 1, 1];
            let runs = split_by_bytes(&files(&sizes), parts);
            let flat: Vec<usize> = runs.iter().flat_map(|r| r.clone()).collect();
            assert_eq!(flat, (0..sizes.len()).collect::<Vec<_>>());
            assert!(runs.iter().all(|r| !r.is_empty()));
            assert_eq!(runs.len(), parts.min(sizes.len()));
        }
    }
}
