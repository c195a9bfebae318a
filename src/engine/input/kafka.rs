//! Kafka topics in the batch protocol (Spark's `KafkaMicroBatchStream`; the source
//! itself is `source::kafka`). The offsets are the whole record: batch N reads
//! `[offsets/N-1, offsets/N)` of every partition, so a re-run batch reads exactly the
//! recorded ranges. The first batch starts at `sources/<i>/0`, resolved from
//! `starting_offsets` once and written before `offsets/0` (Spark's initial offset file).

use std::path::PathBuf;

use arrow::datatypes::SchemaRef;

use super::{Backlog, BatchFiles, OffsetsBehind, Planned, source_dir};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::source::files::BatchRead;
use crate::source::kafka::value::ValueDecoder;
use crate::source::kafka::{KafkaSource, KafkaSourceOffset, KafkaSourceOptions};
use crate::spec::{KafkaSourceSpec, Trigger};

/// A batch's part from a Kafka source: its start and end offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaBatch {
    pub start: KafkaSourceOffset,
    pub end: KafkaSourceOffset,
}

impl KafkaBatch {
    /// Partitions with records in the batch.
    pub fn partitions(&self) -> usize {
        self.end
            .partitions
            .iter()
            .filter(|(tp, end)| self.start.partitions.get(*tp) != Some(*end))
            .count()
    }
}

/// The schema of a Kafka source's batches: Spark's Kafka columns, or with `format` the
/// value's columns, `_rescued_data` and `_metadata` (the Kafka columns).
pub fn batch_schema(spec: &KafkaSourceSpec) -> SchemaRef {
    match &spec.value_format {
        None => crate::source::kafka::rows::kafka_schema(spec.include_headers),
        Some(f) => ValueDecoder::new(f).schema().clone(),
    }
}

/// A Kafka source with its checkpoint files and value decoder.
pub struct KafkaInput {
    pub source: KafkaSource,
    pub spec: KafkaSourceSpec,
    decoder: Option<ValueDecoder>,
    /// `sources/<i>/0`: where the first batch starts.
    initial_path: PathBuf,
}

impl KafkaInput {
    /// Opens the source; nothing is asked of the cluster yet (the schema is Spark's).
    pub fn open(spec: &KafkaSourceSpec, index: usize, checkpoint: &Checkpoint) -> Result<Self> {
        let options = KafkaSourceOptions::from_spec(spec).map_err(|message| Error::Source {
            path: spec.locator.clone(),
            message,
        })?;
        Ok(KafkaInput {
            source: KafkaSource::new(options)?,
            decoder: spec.value_format.as_ref().map(ValueDecoder::new),
            spec: spec.clone(),
            initial_path: source_dir(checkpoint, index).join("0"),
        })
    }

    pub fn batch_schema(&self) -> SchemaRef {
        match &self.decoder {
            Some(d) => d.schema().clone(),
            None => self.source.schema(),
        }
    }

    fn parse(&self, value: &serde_json::Value, what: &str) -> Result<KafkaSourceOffset> {
        KafkaSourceOffset::from_json(value).map_err(|e| Error::Source {
            path: self.spec.locator.clone(),
            message: format!(
                "{what} is not a Kafka source offset ({e}); was this checkpoint written by another source? \
                 Start the flow with a new checkpoint"
            ),
        })
    }

    /// Where a batch after `prev_end` starts: `prev_end`, or the initial offsets.
    async fn start(&mut self, prev_end: Option<&serde_json::Value>) -> Result<KafkaSourceOffset> {
        match prev_end {
            Some(v) => self.parse(v, "the checkpoint's last offset"),
            None => self.source.initial_offsets(&self.initial_path).await,
        }
    }

    pub async fn plan(
        &mut self,
        trigger: Trigger,
        prev_end: Option<&serde_json::Value>,
        now_ms: i64,
    ) -> Result<Option<Planned>> {
        let start = self.start(prev_end).await?;
        let Some(end) = self.source.plan(&start, trigger, now_ms).await? else {
            return Ok(None);
        };
        let latest = self.source.latest_seen().cloned().unwrap_or_default();
        let behind: Vec<u64> = latest
            .iter()
            .map(|(tp, l)| (l - end.partitions.get(tp).copied().unwrap_or(0)).max(0) as u64)
            .collect();
        let offsets_behind = (!behind.is_empty()).then(|| OffsetsBehind {
            min: behind.iter().copied().min().unwrap_or(0),
            max: behind.iter().copied().max().unwrap_or(0),
            sum: behind.iter().sum(),
            partitions: behind.len() as u64,
        });
        Ok(Some(Planned {
            end_offset: Some(end.to_json()),
            latest_offset: Some(KafkaSourceOffset::new(latest).to_json()),
            backlog: Backlog {
                offsets_behind,
                ..Backlog::default()
            },
            num_modified: 0,
            files: BatchFiles::Kafka(Some(KafkaBatch { start, end })),
        }))
    }

    pub async fn replay(
        &mut self,
        batch_id: u64,
        prev_end: Option<&serde_json::Value>,
        end: Option<&serde_json::Value>,
    ) -> Result<BatchFiles> {
        let Some(end) = end else {
            return Ok(BatchFiles::Kafka(None));
        };
        let end = self.parse(end, &format!("batch {batch_id}'s offset"))?;
        let start = match prev_end {
            Some(v) => self.parse(v, &format!("batch {}'s offset", batch_id.saturating_sub(1)))?,
            None => crate::source::kafka::read_initial_offsets(&self.initial_path)?.ok_or_else(
                || {
                    Error::checkpoint(
                        &self.initial_path,
                        format!(
                            "batch {batch_id} is re-run but the Kafka source's initial offsets are missing; \
                             the batch's ranges cannot be known"
                        ),
                    )
                },
            )?,
        };
        Ok(BatchFiles::Kafka(Some(KafkaBatch { start, end })))
    }

    /// Reads `[start, end)` of every partition (data-loss rules apply), then parses the
    /// values with `format`.
    pub async fn read(&mut self, batch: Option<&KafkaBatch>) -> Result<BatchRead> {
        let Some(batch) = batch else {
            return Ok(BatchRead::default());
        };
        if batch.start == batch.end {
            return Ok(BatchRead::default());
        }
        let ranges = self.source.ranges(&batch.start, &batch.end).await?;
        // With `format`, values are decoded chunk by chunk as they are fetched.
        let read = self
            .source
            .read_decoded(&ranges, self.decoder.as_ref())
            .await?;
        let num_offsets_lost = read.offsets_lost();
        let mut out = BatchRead {
            num_rows: read.num_rows,
            num_bytes: read.num_bytes,
            num_offsets_lost,
            num_rows_rescued: read.num_rows_rescued,
            num_records_corrupt: read.num_records_corrupt,
            type_mismatches: read.type_mismatches,
            batches: read.batches,
            ..Default::default()
        };
        if self.decoder.is_some() {
            out.num_rows = out.batches.iter().map(|b| b.num_rows() as u64).sum();
        }
        Ok(out)
    }
}
