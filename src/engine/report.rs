//! What a committed batch reports (step 7 of the batch protocol): its progress record
//! (Spark's `StreamingQueryProgress`, DESIGN.md §7), built from [`Committed`] and the
//! trigger's timings only. The record is where a batch's counts are worked out: the
//! run's summary ([`FlowSummary::add`]) and the board's totals sum records.

use std::collections::BTreeMap;
use std::time::Instant;

use super::batch::Committed;
use super::control::FlowEvents;
use super::{FlowSummary, ProgressCallback, ms_since};
use crate::checkpoint::Checkpoint;
use crate::checkpoint::progress::ProgressLog;
use crate::clock::now_ms;
use crate::error::Result;
use crate::health::tracker::HealthTracker;
use crate::ops::watermark::EventTimeStats;
use crate::records::{
    FileError, SinkProgress, SourceProgress, SourceWatermark, StreamingQueryProgress, WeirProgress,
    iso_millis,
};
use crate::source::files::ledger::FileOutcome;
use crate::spec::StatefulSpec;
use crate::spec::{FlowSpec, Trigger};

/// Who ran the batch.
pub struct RunIds<'a> {
    /// The query id (checkpoint `metadata`), stable across restarts.
    pub query_id: &'a str,
    /// This process's run.
    pub run_id: &'a str,
    pub trigger: Trigger,
}

/// Step 7 for each committed batch of a run: its record, with the flow's health,
/// appended to `_weir/progress.jsonl`, given to the run's callback and published.
pub struct Reporter<'a> {
    ids: RunIds<'a>,
    log: ProgressLog,
    on_progress: Option<ProgressCallback>,
    last_trigger_start: Option<Instant>,
}

impl<'a> Reporter<'a> {
    pub fn new(
        ids: RunIds<'a>,
        checkpoint: &Checkpoint,
        on_progress: Option<ProgressCallback>,
    ) -> Self {
        Reporter {
            ids,
            log: ProgressLog::open(&checkpoint.progress_path()),
            on_progress,
            last_trigger_start: None,
        }
    }

    /// Reports batch `c`, whose trigger started at `trigger_start`; returns its record.
    pub fn committed(
        &mut self,
        spec: &FlowSpec,
        c: &Committed,
        sink_description: String,
        trigger_start: Instant,
        tracker: &mut HealthTracker,
        events: &FlowEvents,
    ) -> Result<StreamingQueryProgress> {
        let trigger_ms = ms_since(trigger_start);
        let since_last_ms = self.last_trigger_start.map_or(trigger_ms, ms_since);
        self.last_trigger_start = Some(trigger_start);
        let times = TriggerTimes {
            trigger_ms,
            since_last_ms,
            now_ms: now_ms(),
        };
        let mut record = progress(spec, &self.ids, sink_description, c, times);
        let health_change = tracker.observe(&mut record, now_ms());
        self.log.append(&record)?;
        if let Some(cb) = self.on_progress.as_mut() {
            cb(&record);
        }
        events.progress(&record);
        if let Some(health) = health_change {
            events.health(health);
        }
        tracing::info!(batch_id = c.batch_id(), rows = c.num_input_rows(), files = c.num_files(), ms = trigger_ms, delta_version = ?c.written.sink.delta_version, "batch committed");
        Ok(record)
    }
}

/// The trigger's clock around the batch.
#[derive(Debug, Clone, Copy)]
pub struct TriggerTimes {
    /// `triggerExecution`: from the trigger's start to the end of the commit.
    pub trigger_ms: u64,
    /// Since the previous trigger started (the input rate's denominator).
    pub since_last_ms: u64,
    /// When the record is made (ms since the epoch).
    pub now_ms: i64,
}

fn rate(rows: u64, ms: u64) -> f64 {
    if ms == 0 {
        0.0
    } else {
        rows as f64 * 1000.0 / ms as f64
    }
}

/// The batch's progress record (without its health, which the tracker adds).
pub fn progress(
    spec: &FlowSpec,
    run: &RunIds<'_>,
    sink_description: String,
    c: &Committed,
    t: TriggerTimes,
) -> StreamingQueryProgress {
    let planned = c.planned();
    let output = c.output();
    let timings = c.timings();
    let total_rows = c.num_input_rows();
    let mut duration_ms = BTreeMap::new();
    duration_ms.insert("latestOffset".into(), timings.latest_offset);
    duration_ms.insert("walCommit".into(), timings.wal_commit);
    duration_ms.insert("getBatch".into(), timings.get_batch);
    duration_ms.insert("queryPlanning".into(), 0);
    duration_ms.insert("addBatch".into(), timings.add_batch);
    duration_ms.insert("commitOffsets".into(), timings.commit_offsets);
    duration_ms.insert("triggerExecution".into(), t.trigger_ms);
    let sources = planned
        .parts
        .iter()
        .zip(c.reads())
        .enumerate()
        .map(|(i, (part, read))| {
            let mut metrics = BTreeMap::new();
            metrics.insert("numFilesOutstanding".into(), part.backlog.files.to_string());
            metrics.insert("numBytesOutstanding".into(), part.backlog.bytes.to_string());
            if let Some(versions) = part.backlog.versions {
                metrics.insert("numVersionsBehind".into(), versions.to_string());
            }
            if let Some(b) = part.backlog.offsets_behind {
                // Spark's Kafka source metrics.
                metrics.insert("minOffsetsBehindLatest".into(), b.min.to_string());
                metrics.insert("maxOffsetsBehindLatest".into(), b.max.to_string());
                metrics.insert(
                    "avgOffsetsBehindLatest".into(),
                    (b.sum as f64 / b.partitions.max(1) as f64).to_string(),
                );
            }
            if read.num_offsets_lost > 0 {
                metrics.insert("numOffsetsLost".into(), read.num_offsets_lost.to_string());
            }
            SourceProgress {
                description: c.sources.get(i).cloned().unwrap_or_default(),
                start_offset: part.start_offset.clone().unwrap_or(serde_json::Value::Null),
                end_offset: planned
                    .offsets
                    .offsets
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or_default(),
                latest_offset: part
                    .latest_offset
                    .clone()
                    .unwrap_or(serde_json::Value::Null),
                num_input_rows: read.num_rows,
                input_rows_per_second: rate(read.num_rows, t.since_last_ms),
                processed_rows_per_second: rate(read.num_rows, t.trigger_ms),
                metrics,
            }
        })
        .collect();
    let sum = |f: fn(&crate::source::files::BatchRead) -> u64| c.reads().iter().map(f).sum();
    StreamingQueryProgress {
        id: run.query_id.to_string(),
        run_id: run.run_id.to_string(),
        name: spec.name.clone(),
        timestamp: iso_millis(t.now_ms - t.trigger_ms as i64),
        batch_id: planned.batch_id,
        batch_duration: t.trigger_ms,
        num_input_rows: total_rows,
        input_rows_per_second: rate(total_rows, t.since_last_ms),
        processed_rows_per_second: rate(total_rows, t.trigger_ms),
        duration_ms,
        event_time: event_time(
            &spec.stateful,
            output.event_time.as_ref(),
            planned.watermark_ms(),
        ),
        state_operators: c.state_operators.clone(),
        sources,
        sink: SinkProgress {
            description: sink_description,
            num_output_rows: c.num_output_rows() as i64,
        },
        weir: WeirProgress {
            trigger: run.trigger.to_string(),
            delta_version: c.written.sink.delta_version,
            sink_write_skipped: c.written.sink.skipped,
            replayed: planned.replayed,
            streamed: output.streamed,
            num_files: c.num_files(),
            num_bytes: sum(|r| r.num_bytes),
            num_rows_rescued: sum(|r| r.num_rows_rescued),
            num_records_corrupt: sum(|r| r.num_records_corrupt),
            num_files_failed: c.count_outcomes(|o| matches!(o, FileOutcome::Failed { .. })),
            num_files_retried: c.count_outcomes(|o| matches!(o, FileOutcome::Retry { .. })),
            num_files_modified_after_ingestion: planned.num_modified,
            num_rows_invalid_event_time: output.num_invalid_event_time,
            num_rows_future_event_time: output.num_future_event_time,
            num_records_quarantined: output.num_quarantined,
            dimensions: output.dimensions.clone(),
            num_new_columns_ignored: output.read.new_columns_ignored.len() as u64,
            new_columns_ignored: output.read.new_columns_ignored.clone(),
            num_late_rows_written: if spec.late_rows.is_some() {
                output.num_late + output.num_invalid_event_time + output.num_future_event_time
            } else {
                0
            },
            errors: c
                .reads()
                .iter()
                .flat_map(|r| r.errors.iter())
                .map(|(path, error)| FileError {
                    path: path.clone(),
                    error: error.clone(),
                })
                .collect(),
            health: None,
            source_watermarks: c
                .input_watermarks_ms
                .iter()
                .enumerate()
                .map(|(i, w)| SourceWatermark {
                    source: c.sources.get(i).cloned().unwrap_or_default(),
                    watermark: w.map(iso_millis),
                    holds_watermark: c.watermark_held_by == Some(i),
                })
                .collect(),
            watermark_held_by: c.watermark_held_by.and_then(|i| c.sources.get(i).cloned()),
            expectations: output.expectations.clone(),
            num_rows_dropped_by_expectations: output.num_dropped_by_expectations,
        },
    }
}

/// Progress `eventTime`: min/max/avg of the batch's on-time event times and the batch's watermark.
fn event_time(
    spec: &StatefulSpec,
    stats: Option<&EventTimeStats>,
    watermark_ms: i64,
) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if spec.watermark.is_some() {
        m.insert("watermark".into(), iso_millis(watermark_ms));
    }
    if let Some(s) = stats {
        m.insert("min".into(), iso_millis(s.min_ms));
        m.insert("max".into(), iso_millis(s.max_ms));
        m.insert("avg".into(), iso_millis(s.avg_ms));
    }
    m
}

impl FlowSummary {
    /// Adds a committed batch to the run's totals: its progress record's counts (summed
    /// as the board's totals sum them) and the watermark it leaves for the next batch.
    pub fn add(&mut self, r: &StreamingQueryProgress, next_watermark_ms: i64) {
        self.batches += 1;
        self.replayed_batches += u64::from(r.weir.replayed);
        self.num_input_rows += r.num_input_rows;
        self.num_output_rows += u64::try_from(r.sink.num_output_rows).unwrap_or(0);
        self.num_files += r.weir.num_files;
        self.num_bytes += r.weir.num_bytes;
        self.num_files_failed += r.weir.num_files_failed;
        self.num_rows_rescued += r.weir.num_rows_rescued;
        self.last_batch_id = Some(r.batch_id);
        self.delta_version = r.weir.delta_version.or(self.delta_version);
        self.watermark_ms = next_watermark_ms;
        self.num_rows_dropped_by_watermark += r
            .state_operators
            .iter()
            .map(|o| o.num_rows_dropped_by_watermark)
            .sum::<u64>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::board::FlowSnapshot;
    use crate::records::StateOperatorMetrics;

    #[test]
    fn a_runs_summary_counts_its_batches_as_the_boards_totals_do() {
        let mut r = StreamingQueryProgress {
            batch_id: 7,
            num_input_rows: 10,
            state_operators: vec![StateOperatorMetrics {
                num_rows_dropped_by_watermark: 5,
                ..Default::default()
            }],
            ..Default::default()
        };
        r.sink.num_output_rows = 8;
        r.weir.num_files = 3;
        r.weir.num_bytes = 300;
        r.weir.num_files_failed = 1;
        r.weir.num_rows_rescued = 2;
        r.weir.replayed = true;
        r.weir.delta_version = Some(4);
        let mut summary = FlowSummary::default();
        let mut board = FlowSnapshot::new("f");
        for _ in 0..2 {
            summary.add(&r, 1_000);
            board.observe_record(&r, 0);
        }
        let t = &board.totals;
        assert_eq!(
            [
                summary.batches,
                summary.num_input_rows,
                summary.num_output_rows,
                summary.num_files,
                summary.num_bytes,
                summary.num_files_failed,
                summary.num_rows_rescued,
                summary.num_rows_dropped_by_watermark,
            ],
            [
                t.batches,
                t.input_rows,
                t.output_rows,
                t.files,
                t.bytes,
                t.files_failed,
                t.rows_rescued,
                t.rows_dropped_by_watermark,
            ]
        );
        assert_eq!(t.input_rows, 20);
        assert_eq!(summary.replayed_batches, 2);
        assert_eq!(
            (
                summary.last_batch_id,
                summary.delta_version,
                summary.watermark_ms
            ),
            (Some(7), Some(4), 1_000)
        );
    }
}
