//! Streaming deduplication: Spark's `dropDuplicates(cols)` with a watermark
//! (operator `dedupe`) and Spark 3.5's `dropDuplicatesWithinWatermark(cols)`
//! (operator `dedupeWithinWatermark`).
//!
//! Both emit the first row of each key (in batch order) and drop every later row with
//! that key while the key is in state. The state holds one row per key: the key columns
//! and the time the key expires, in microseconds:
//!
//! - `dedupe`: the key includes the watermark column; a key expires when the watermark
//!   passes its event time (`event_time < watermark`). From then on any row with that
//!   key is late, so it can never be emitted twice (case B22).
//! - `dedupeWithinWatermark`: the key need not include event time; a key expires at
//!   `first event time + delay < watermark`. A duplicate whose event time is within the
//!   delay of the first row is always dropped; a later one is dropped only while the key
//!   is still in state.
//!
//! Expired keys are removed after the batch's rows are processed, with the batch's
//! watermark; a no-data batch runs when the next watermark would expire a key.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, Scalar};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::cmp::lt;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::aggregate::check_batch_id;
use super::stateful::{StatefulOperator, elapsed_ms};
use super::watermark::event_time_column;
use crate::error::{Error, Result};
use crate::records::StateOperatorMetrics;
use crate::spec::StatefulSpec;
use crate::spec::WatermarkSpec;
use crate::state::{Fingerprint, SpillStore, StateStore, StateTable, StoreOptions, spill_table};

/// Spark's operator name for `dropDuplicates`.
pub const DEDUPE: &str = "dedupe";
/// Spark's operator name for `dropDuplicatesWithinWatermark`.
pub const DEDUPE_WITHIN_WATERMARK: &str = "dedupeWithinWatermark";
/// The state column holding when a key expires (µs since the epoch).
pub const EXPIRES_COLUMN: &str = "__weir_expires_at_us";

/// State beyond the flow's `state_memory_limit` (docs/state.md).
struct Spill {
    limit: usize,
    store: SpillStore,
}

/// The deduplication operator (see the module docs).
pub struct DedupOperator {
    flow: String,
    name: &'static str,
    keys: Vec<String>,
    watermark: WatermarkSpec,
    within_watermark: bool,
    output_schema: SchemaRef,
    state_schema: SchemaRef,
    store: StateStore,
    /// The keys in memory (all of them without a `state_memory_limit`).
    table: StateTable,
    /// With a `state_memory_limit`: the bound and the keys spilled to disk.
    spill: Option<Spill>,
    /// The table holds changes of a batch not committed yet.
    dirty: bool,
    metrics: StateOperatorMetrics,
}

impl DedupOperator {
    /// Builds the operator for `spec` (validated) and loads state version `load_version`.
    pub fn new(
        spec: &StatefulSpec,
        input_schema: &SchemaRef,
        state_dir: &Path,
        load_version: Option<u64>,
    ) -> Result<Self> {
        let plan_error = |message: String| Error::Plan {
            flow: spec.flow.clone(),
            message,
        };
        let requested = spec
            .drop_duplicates
            .clone()
            .ok_or_else(|| plan_error("no drop_duplicates keys".into()))?;
        let watermark = spec
            .watermark
            .clone()
            .ok_or_else(|| plan_error("drop_duplicates needs a watermark".into()))?;
        let keys: Vec<String> = if requested.is_empty() {
            input_schema
                .fields()
                .iter()
                .filter(|f| f.name() != crate::schema::METADATA_COLUMN)
                .map(|f| f.name().clone())
                .collect()
        } else {
            requested
        };
        let mut fields = Vec::with_capacity(keys.len() + 1);
        for k in &keys {
            let field = input_schema.field_with_name(k).map_err(|_| {
                plan_error(format!(
                    "drop_duplicates: `{k}` is not a column of the input"
                ))
            })?;
            fields.push(field.clone().with_nullable(true));
        }
        fields.push(Field::new(EXPIRES_COLUMN, DataType::Int64, true));
        let state_schema = Arc::new(Schema::new(fields));
        let within_watermark = spec.drop_duplicates_within_watermark;
        let name = if within_watermark {
            DEDUPE_WITHIN_WATERMARK
        } else {
            DEDUPE
        };
        let fingerprint = Fingerprint::default()
            .with("operator", name)
            .with("keys", keys.join(", "))
            .with("event_time_column", watermark.column.clone());
        let store = StateStore::open_unloaded(
            state_dir,
            name,
            &fingerprint,
            state_schema.clone(),
            keys.len(),
            load_version,
            StoreOptions::default(),
        )?;
        let mut spill = match spec.state_memory_limit {
            Some(limit) => Some(Spill {
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
                store: SpillStore::create(state_dir)?,
            }),
            None => None,
        };
        let table = load(&store, &state_schema, keys.len(), spill.as_mut())?;
        let mut op = DedupOperator {
            flow: spec.flow.clone(),
            name,
            keys,
            watermark,
            within_watermark,
            output_schema: input_schema.clone(),
            state_schema,
            store,
            table,
            spill,
            dirty: false,
            metrics: StateOperatorMetrics {
                operator_name: name.to_string(),
                num_shuffle_partitions: 1,
                num_state_store_instances: 1,
                ..Default::default()
            },
        };
        op.refresh_metrics();
        Ok(op)
    }

    fn arrow_error(&self, context: &str, source: arrow::error::ArrowError) -> Error {
        Error::Arrow {
            context: format!("flow {}: {context}", self.flow),
            source,
        }
    }

    /// The key columns of a batch, float keys normalised as Spark does (-0.0 is 0.0,
    /// every NaN is one NaN).
    fn key_columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.keys
            .iter()
            .map(|k| {
                batch
                    .column_by_name(k)
                    .map(crate::state::table::normalize_float_key)
                    .ok_or_else(|| Error::Plan {
                        flow: self.flow.clone(),
                        message: format!("the drop_duplicates key `{k}` is missing from a batch"),
                    })
            })
            .collect()
    }

    /// Emits the first row of each key not in state, batch by batch (the input is not
    /// copied: a batch without duplicates goes out as it is); records the new keys with
    /// one append to the state table.
    fn dedup(&mut self, input: Vec<RecordBatch>) -> Result<(Vec<RecordBatch>, usize)> {
        let delay_us = if self.within_watermark {
            self.watermark.delay_ms.saturating_mul(1000)
        } else {
            0
        };
        // Per input batch, the state row of each input row: its key columns (not
        // copied) and when it expires. A null event time (the engine routes those rows
        // elsewhere) expires at once.
        let mut candidates = Vec::with_capacity(input.len());
        for batch in &input {
            let mut columns = self.key_columns(batch)?;
            let ts = event_time_column(batch, &self.watermark.column)?;
            let expires: Int64Array = ts
                .iter()
                .map(|t| Some(t.map_or(i64::MIN, |t| t.saturating_add(delay_us))))
                .collect();
            columns.push(Arc::new(expires));
            candidates.push(
                RecordBatch::try_new(self.state_schema.clone(), columns)
                    .map_err(|e| self.arrow_error("deduplicating", e))?,
            );
        }
        let inserted = match &self.spill {
            Some(spill) if !spill.store.is_empty() => self
                .table
                .insert_absent_except(&candidates, |key| spill.store.contains(key))?,
            _ => self.table.insert_absent(&candidates)?,
        };
        drop(candidates);
        // Each input batch is freed once its rows are out (the filtered copies and the
        // input are never all in memory together).
        let mut n_new = 0;
        let mut out = Vec::with_capacity(input.len());
        for (batch, mask) in input.into_iter().zip(inserted) {
            let n = mask.iter().filter(|k| **k).count();
            n_new += n;
            if n == batch.num_rows() {
                out.push(batch);
            } else if n > 0 {
                out.push(
                    filter_record_batch(&batch, &BooleanArray::from(mask))
                        .map_err(|e| self.arrow_error("deduplicating", e))?,
                );
            }
        }
        Ok((out, n_new))
    }

    fn expired(&self, watermark_ms: i64) -> Result<BooleanArray> {
        let data = self.table.data();
        let expires = data.column(data.num_columns() - 1);
        let watermark_us = Scalar::new(Int64Array::from(vec![watermark_ms.saturating_mul(1000)]));
        lt(expires, &watermark_us).map_err(|e| self.arrow_error("expiring keys", e))
    }

    /// Removes the spilled keys expired by `watermark_ms` (recorded as removals of the
    /// batch); returns how many.
    fn expire_spilled(&mut self, watermark_ms: i64) -> Result<usize> {
        let Some(spill) = &mut self.spill else {
            return Ok(0);
        };
        let expired = spill.store.expired(watermark_ms.saturating_mul(1000))?;
        for key in &expired {
            self.table.record_removed(key);
        }
        spill.store.remove(expired.iter().map(Vec::as_slice))?;
        Ok(expired.len())
    }

    /// Keys held, in memory and spilled.
    fn total_rows(&self) -> u64 {
        self.table.len() as u64 + self.spill.as_ref().map_or(0, |s| s.store.len())
    }

    /// Bytes of memory held: the table's and the spill store's page cache.
    fn memory_used(&self) -> u64 {
        self.table.memory_size() as u64 + self.spill.as_ref().map_or(0, |s| s.store.memory_bound())
    }

    fn refresh_metrics(&mut self) {
        self.metrics.num_rows_total = self.total_rows();
        self.metrics.memory_used_bytes = self.memory_used();
        if let Some(spill) = &self.spill {
            self.metrics.custom_metrics.insert(
                "numSpilledRows".into(),
                i64::try_from(spill.store.len()).unwrap_or(i64::MAX),
            );
            self.metrics.custom_metrics.insert(
                "spillBytesOnDisk".into(),
                i64::try_from(spill.store.disk_bytes()).unwrap_or(i64::MAX),
            );
        }
        self.metrics.custom_metrics.insert(
            "stateOnCurrentVersionSizeBytes".into(),
            i64::try_from(self.store.current_version_size_bytes()).unwrap_or(i64::MAX),
        );
    }
}

/// Loads the store's committed version: into the table alone, or with a spill store into
/// the table up to the bound and the spill store for the rest.
fn load(
    store: &StateStore,
    schema: &SchemaRef,
    num_keys: usize,
    spill: Option<&mut Spill>,
) -> Result<StateTable> {
    match (store.version(), spill) {
        (None, Some(spill)) => {
            spill.store.clear()?;
            StateTable::new(schema.clone(), num_keys)
        }
        (None, None) => StateTable::new(schema.clone(), num_keys),
        (Some(v), Some(spill)) => store.load_spilling(v, spill.limit, &mut spill.store),
        (Some(v), None) => store.load(v),
    }
}

impl StatefulOperator for DedupOperator {
    fn name(&self) -> &str {
        self.name
    }

    fn process(
        &mut self,
        batch_id: u64,
        input: Vec<RecordBatch>,
        watermark_ms: i64,
    ) -> Result<Vec<RecordBatch>> {
        check_batch_id(self.store.dir(), self.store.version(), batch_id)?;
        if self.dirty {
            // A retried batch (or one after a failed commit): start again from the
            // committed version.
            self.table = load(
                &self.store,
                &self.state_schema,
                self.keys.len(),
                self.spill.as_mut(),
            )?;
        }
        self.dirty = true;
        let t_update = Instant::now();
        let mut output = Vec::new();
        let mut updated = 0usize;
        // One append to the state table for the whole micro-batch (the table's rows are
        // one Arrow batch, so appending per input batch would copy it once per batch).
        let input: Vec<RecordBatch> = input.into_iter().filter(|b| b.num_rows() > 0).collect();
        if !input.is_empty() {
            let (out, n) = self.dedup(input)?;
            updated += n;
            output = out;
        }
        self.metrics.all_updates_time_ms = elapsed_ms(t_update);
        let t_remove = Instant::now();
        let mask = self.expired(watermark_ms)?;
        let removed =
            self.table.remove_where(&mask)?.num_rows() + self.expire_spilled(watermark_ms)?;
        self.metrics.all_removals_time_ms = elapsed_ms(t_remove);
        self.metrics.num_rows_updated = updated as u64;
        self.metrics.num_rows_removed = removed as u64;
        self.metrics.num_rows_total = self.total_rows();
        self.metrics.memory_used_bytes = self.memory_used();
        Ok(output)
    }

    fn commit(&mut self, batch_id: u64) -> Result<()> {
        let t = Instant::now();
        let info = self.store.commit_spilled(
            batch_id,
            &mut self.table,
            self.spill.as_ref().map(|s| &s.store),
        )?;
        if let Some(spill) = &mut self.spill
            && self.table.memory_size() > spill.limit
        {
            // Over the bound: the table's keys go to disk (the version is committed;
            // a failure here reloads it before the next batch, dirty stays set).
            let table = std::mem::replace(
                &mut self.table,
                StateTable::new(self.state_schema.clone(), self.keys.len())?,
            );
            self.table = spill_table(table, &mut spill.store)?;
        }
        self.dirty = false;
        self.metrics.commit_time_ms = elapsed_ms(t);
        self.metrics.custom_metrics.insert(
            "snapshotWrittenLastCommit".into(),
            i64::from(info.snapshot_written),
        );
        self.refresh_metrics();
        Ok(())
    }

    fn metrics(&self) -> StateOperatorMetrics {
        self.metrics.clone()
    }

    fn emits_input_rows(&self) -> bool {
        true
    }

    fn needs_no_data_batch(&self, next_watermark_ms: i64) -> bool {
        let spilled = match &self.spill {
            Some(spill) => spill.store.min_expires(),
            None => Ok(None),
        };
        match (self.expired(next_watermark_ms), spilled) {
            (Ok(mask), Ok(min)) => {
                mask.true_count() > 0
                    || min.is_some_and(|m| m < next_watermark_ms.saturating_mul(1000))
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot decide whether a no-data batch is needed");
                false
            }
        }
    }

    fn drops_late_rows(&self) -> bool {
        true
    }

    fn output_schema(&self) -> SchemaRef {
        self.output_schema.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::stateful::sim::{self, Sim, datafusion, events, fixture, ms, rows, synthetic};
    use crate::ops::stateful::{build, validate};
    use crate::spec::OutputMode;

    fn spec(keys: &[&str], within: bool, delay: &str) -> StatefulSpec {
        StatefulSpec {
            flow: "dedup".into(),
            watermark: Some(WatermarkSpec::new("ts", delay).unwrap()),
            drop_duplicates: Some(keys.iter().map(|k| k.to_string()).collect()),
            drop_duplicates_within_watermark: within,
            output_mode: OutputMode::Append,
            ..Default::default()
        }
    }

    /// `(k, ts µs)` of output rows, sorted.
    fn keys_of(batches: &[RecordBatch]) -> Vec<String> {
        rows(batches)
            .into_iter()
            .map(|r| r.split('|').take(2).collect::<Vec<_>>().join("|"))
            .collect()
    }

    #[test]
    fn b22_dedup_across_a_restart_and_state_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        // The rows of tests/fixtures/cases/B22, landed step by step.
        let schema = Arc::new(Schema::new(vec![
            Field::new("eid", DataType::Utf8, true),
            sim::schema().field(1).clone(),
        ]));
        let mut sim = Sim::new(
            spec(&["eid", "ts"], false, "1 minute"),
            schema.clone(),
            dir.path(),
        );
        sim.trigger(fixture("B22", "step1", &schema));
        assert_eq!(sim.watermark_ms, ms("2024-05-01T09:59:01Z"));
        sim.restart(); // kill -9: state comes back from the checkpoint
        sim.trigger(fixture("B22", "step2", &schema));
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:04:00Z"));
        let last = &sim.runs.last().unwrap().metrics;
        assert!(sim.runs.last().unwrap().no_data);
        assert_eq!(
            (last.num_rows_removed, last.num_rows_total),
            (2, 1),
            "e1 and e2 evicted"
        );
        sim.trigger(fixture("B22", "step3", &schema));
        assert_eq!(sim.dropped, 1, "e1 is late, not re-emitted");
        let t = |s: &str| ms(s) * 1000;
        assert_eq!(
            keys_of(&sim.all_output()),
            vec![
                format!("e1|{}", t("2024-05-01T10:00:00Z")),
                format!("e2|{}", t("2024-05-01T10:00:01Z")),
                format!("e3|{}", t("2024-05-01T10:05:00Z")),
                format!("e4|{}", t("2024-05-01T10:05:30Z")),
            ]
        );
        let m = sim.op.metrics();
        assert_eq!(m.num_rows_total, 2, "state holds e3 and e4");
        assert_eq!(m.operator_name, "dedupe");
        assert!(m.custom_metrics["stateOnCurrentVersionSizeBytes"] > 0);
    }

    #[test]
    fn dedup_matches_batch_distinct_over_on_time_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::new(
            spec(&["k", "ts"], false, "10 seconds"),
            sim::schema(),
            dir.path(),
        );
        let input = synthetic(10, 30, 21);
        for (i, b) in input.iter().enumerate() {
            // Duplicates across batches: each batch also carries the previous batch's first rows.
            let mut batch = vec![b.clone()];
            if i > 0 {
                batch.push(input[i - 1].slice(0, 8));
            }
            if i % 3 == 0 {
                sim.restart();
            }
            sim.trigger(batch);
        }
        let expected = datafusion(&sim::schema(), &sim.on_time, "SELECT DISTINCT k, ts FROM t");
        let emitted = keys_of(&sim.all_output());
        assert_eq!(emitted, rows(&expected));
        assert!(sim.dropped > 0);
        // State holds only keys at or after the watermark.
        let wm_us = sim.watermark_ms * 1000;
        let open = rows(&expected)
            .iter()
            .filter(|r| r.split('|').nth(1).unwrap().parse::<i64>().unwrap() >= wm_us)
            .count();
        assert_eq!(sim.op.metrics().num_rows_total as usize, open);
    }

    #[test]
    fn dedup_within_watermark_keeps_the_first_row_for_the_delay() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::new(spec(&["k"], true, "10 seconds"), sim::schema(), dir.path());
        assert_eq!(sim.op.name(), "dedupeWithinWatermark");
        sim.trigger(vec![events(&[
            ("a", Some("2024-05-01T10:00:00Z"), 1),
            ("a", Some("2024-05-01T10:00:05Z"), 2),
            ("b", Some("2024-05-01T10:00:03Z"), 3),
        ])]);
        sim.trigger(vec![events(&[
            ("a", Some("2024-05-01T10:00:12Z"), 4),
            ("c", Some("2024-05-01T10:00:30Z"), 5),
        ])]);
        // Watermark 10:00:20 expires a (10:00:00 + 10 s) and b (10:00:13): a no-data batch ran.
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:00:20Z"));
        assert!(sim.runs.last().unwrap().no_data);
        sim.restart();
        sim.trigger(vec![events(&[
            ("a", Some("2024-05-01T10:00:25Z"), 6),
            ("b", Some("2024-05-01T10:00:19Z"), 7),
        ])]);
        let values: Vec<String> = rows(&sim.all_output())
            .into_iter()
            .map(|r| {
                let parts: Vec<&str> = r.split('|').collect();
                format!("{}={}", parts[0], parts[2])
            })
            .collect();
        assert_eq!(values, vec!["a=1", "a=6", "b=3", "c=5"]);
        assert_eq!(sim.dropped, 1, "b at 10:00:19 is late");
        assert_eq!(sim.op.metrics().num_rows_total, 2);
    }

    #[test]
    fn replay_and_changed_keys() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(&["k", "ts"], false, "10 seconds");
        let input = synthetic(3, 20, 4);
        let mut op = build(&s, &sim::schema(), dir.path(), None).unwrap();
        op.process(0, vec![input[0].clone()], 0).unwrap();
        op.commit(0).unwrap();
        let first = op
            .process(1, vec![input[1].clone(), input[0].clone()], 0)
            .unwrap();
        op.commit(1).unwrap();
        let mut op = build(&s, &sim::schema(), dir.path(), Some(0)).unwrap();
        let second = op
            .process(1, vec![input[1].clone(), input[0].clone()], 0)
            .unwrap();
        assert_eq!(first, second);
        let again = op
            .process(1, vec![input[1].clone(), input[0].clone()], 0)
            .unwrap();
        assert_eq!(
            first, again,
            "a retried batch starts from the committed version"
        );
        op.commit(1).unwrap();

        let changed = spec(&["k", "v", "ts"], false, "10 seconds");
        let err = build(&changed, &sim::schema(), dir.path(), Some(1))
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("keys changed from `k, ts` to `k, v, ts`"),
            "{err}"
        );
        let within = spec(&["k", "ts"], true, "10 seconds");
        let err = build(&within, &sim::schema(), dir.path(), Some(1))
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("operator changed from `dedupe` to `dedupeWithinWatermark`"),
            "{err}"
        );
    }

    /// Runs `input` (one trigger per batch) with `limit` as `state_memory_limit`,
    /// restarting before every batch in `restarts`; returns each batch run.
    fn run_with_limit(
        s: &StatefulSpec,
        input: &[RecordBatch],
        limit: Option<u64>,
        restarts: &[usize],
    ) -> Vec<sim::BatchRun> {
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            state_memory_limit: limit,
            ..s.clone()
        };
        let mut sim = Sim::new(spec, sim::schema(), dir.path());
        for (i, b) in input.iter().enumerate() {
            if restarts.contains(&i) {
                sim.restart();
            }
            let mut batch = vec![b.clone()];
            if i > 0 {
                // Duplicates of the previous batch's keys, found in spilled state.
                batch.push(input[i - 1].slice(0, 10));
            }
            sim.trigger(batch);
        }
        sim.runs
    }

    fn spilled(run: &sim::BatchRun) -> i64 {
        run.metrics
            .custom_metrics
            .get("numSpilledRows")
            .copied()
            .unwrap_or(0)
    }

    /// The same batches, outputs (rows and their order), removals and state sizes with
    /// every key spilled at each commit (a 0-byte bound), with a bound that spills now
    /// and then, and across restarts that load spilled snapshots, as all in memory.
    #[test]
    fn spilled_state_gives_the_in_memory_results() {
        for (within, keys) in [(false, vec!["k", "ts"]), (true, vec!["k", "v"])] {
            let s = spec(&keys, within, "30 seconds");
            let input = synthetic(36, 40, if within { 5 } else { 9 });
            let memory = run_with_limit(&s, &input, None, &[]);
            for (limit, restarts) in [(0, vec![]), (0, vec![4, 11, 23, 30]), (3_000, vec![15])] {
                let spilling = run_with_limit(&s, &input, Some(limit), &restarts);
                assert_eq!(spilling.len(), memory.len(), "limit {limit}");
                for (a, b) in memory.iter().zip(&spilling) {
                    let at = format!("within {within}, limit {limit}, batch {}", a.batch_id);
                    assert_eq!((a.batch_id, a.no_data), (b.batch_id, b.no_data), "{at}");
                    assert_eq!(a.output, b.output, "{at}");
                    assert_eq!(a.metrics.num_rows_total, b.metrics.num_rows_total, "{at}");
                    assert_eq!(
                        a.metrics.num_rows_removed, b.metrics.num_rows_removed,
                        "{at}"
                    );
                    assert_eq!(
                        a.metrics.num_rows_updated, b.metrics.num_rows_updated,
                        "{at}"
                    );
                }
                assert!(
                    spilling.iter().any(|r| spilled(r) > 0),
                    "limit {limit}: nothing was spilled"
                );
                assert!(memory.iter().all(|r| spilled(r) == 0));
                assert!(
                    spilling
                        .iter()
                        .map(|r| r.metrics.num_rows_removed)
                        .sum::<u64>()
                        > 0,
                    "keys expired"
                );
            }
        }
    }

    /// A batch replayed after a restart, and retried in the same process, against spilled
    /// state emits the same rows; the version it commits loads to the same state.
    #[test]
    fn replay_against_spilled_state_is_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let s = StatefulSpec {
            state_memory_limit: Some(0),
            ..spec(&["k", "ts"], false, "10 seconds")
        };
        let input = synthetic(4, 30, 11);
        let mut op = build(&s, &sim::schema(), dir.path(), None).unwrap();
        op.process(0, vec![input[0].clone(), input[1].clone()], 0)
            .unwrap();
        op.commit(0).unwrap();
        assert!(op.metrics().custom_metrics["numSpilledRows"] > 0);
        let wm = ms("2024-05-01T10:00:20Z");
        let batch = || vec![input[2].clone(), input[1].clone(), input[0].slice(0, 12)];
        let first = op.process(1, batch(), wm).unwrap();
        let removed = op.metrics().num_rows_removed;
        assert!(removed > 0, "the watermark expires spilled keys");
        op.commit(1).unwrap();
        let total = op.metrics().num_rows_total;
        drop(op);

        let mut op = build(&s, &sim::schema(), dir.path(), Some(0)).unwrap();
        assert!(op.metrics().custom_metrics["numSpilledRows"] > 0);
        let second = op.process(1, batch(), wm).unwrap();
        assert_eq!(first, second);
        let again = op.process(1, batch(), wm).unwrap();
        assert_eq!(
            first, again,
            "a retried batch starts from the committed version"
        );
        assert_eq!(op.metrics().num_rows_removed, removed);
        op.commit(1).unwrap();
        assert_eq!(op.metrics().num_rows_total, total);
        let op = build(&s, &sim::schema(), dir.path(), Some(1)).unwrap();
        assert_eq!(op.metrics().num_rows_total, total);
        // The same version, loaded all in memory.
        let memory = build(
            &spec(&["k", "ts"], false, "10 seconds"),
            &sim::schema(),
            dir.path(),
            Some(1),
        )
        .unwrap();
        assert_eq!(memory.metrics().num_rows_total, total);
    }

    #[test]
    fn dedup_validation() {
        let schema = sim::schema();
        let e = validate(&spec(&["k"], false, "1 s"), &schema).unwrap_err();
        assert!(
            e.contains("does not include the watermark column `ts`")
                && e.contains("within_watermark"),
            "{e}"
        );
        let mut s = spec(&["k", "ts"], false, "1 s");
        s.watermark = None;
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("without a watermark")
        );
        assert!(
            validate(&spec(&["nope", "ts"], false, "1 s"), &schema)
                .unwrap_err()
                .contains("`nope`")
        );
        let mut s = spec(&["k", "ts"], false, "1 s");
        s.output_mode = OutputMode::Complete;
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("needs an aggregation")
        );
        assert_eq!(validate(&spec(&[], false, "1 s"), &schema), Ok(()));
        let mut s = spec(&["k"], true, "1 s");
        s.watermark = None;
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("needs a watermark")
        );
        let mut s = spec(&["k", "ts"], false, "1 s");
        s.group_by = vec!["k".into()];
        s.aggregates = vec!["count(*) AS n".into()];
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("not supported yet")
        );
    }
}
