//! What a committed batch reports: its progress record (Spark's
//! `StreamingQueryProgress`, DESIGN.md §7) and its part of the run's summary, both
//! built from [`Committed`] and the trigger's timings only.

use std::collections::BTreeMap;

use super::FlowSummary;
use super::batch::Committed;
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
    /// Adds a committed batch to the run's totals.
    pub fn add(&mut self, c: &Committed) {
        let planned = c.planned();
        self.batches += 1;
        self.replayed_batches += u64::from(planned.replayed);
        self.num_input_rows += c.num_input_rows();
        self.num_output_rows += c.num_output_rows();
        self.num_files += c.num_files();
        self.num_bytes += c.reads().iter().map(|r| r.num_bytes).sum::<u64>();
        self.num_files_failed += c.count_outcomes(|o| matches!(o, FileOutcome::Failed { .. }));
        self.num_rows_rescued += c.reads().iter().map(|r| r.num_rows_rescued).sum::<u64>();
        self.last_batch_id = Some(planned.batch_id);
        self.delta_version = c.written.sink.delta_version.or(self.delta_version);
        self.watermark_ms = c.next_watermark_ms;
        self.num_rows_dropped_by_watermark += c.num_rows_dropped_by_watermark;
    }
}
