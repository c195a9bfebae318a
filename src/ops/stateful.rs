//! Stateful operators: what a flow declares ([`StatefulSpec`]), how it is checked
//! ([`validate`], after Spark's `UnsupportedOperationChecker`), and the interface the
//! engine drives per batch ([`StatefulOperator`], made by [`build`]).
//!
//! Per batch N the engine: splits the input by the watermark of batch N
//! ([`super::watermark::split_late`], unless [`StatefulOperator::drops_late_rows`] is
//! false), calls [`StatefulOperator::process`] with the on-time rows, writes the output
//! to the sink, calls [`StatefulOperator::commit`] (state version N), then writes
//! `commits/N`. When [`StatefulOperator::needs_no_data_batch`] says the next watermark
//! closes something, it runs a batch with no input (Spark's no-data micro-batch).
//!
//! Output modes (Spark's):
//!
//! | mode | aggregation | deduplication |
//! |---|---|---|
//! | `append` | a group is emitted once, when final (watermark ≥ window end), then its state is dropped; needs a watermark on an event-time key | each first row per key, once |
//! | `update` | every group changed by the batch, with its current value; closed groups are dropped without output | as append |
//! | `complete` | the whole result table, every batch; state is never dropped and late rows are not dropped | refused |

use std::path::Path;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::aggregate::{AggregateOperator, AggregatePlan};
use super::dedup::DedupOperator;
use super::watermark::check_event_time_type;
use super::window::WindowSpec;
use crate::error::{Error, Result};
use crate::records::StateOperatorMetrics;
use crate::spec::{OutputMode, StatefulSpec};

/// One stateful operator of a flow, driven by the engine once per batch.
pub trait StatefulOperator: Send {
    /// Spark's `operatorName`: `stateStoreSave` (aggregation), `dedupe`, `dedupeWithinWatermark`.
    fn name(&self) -> &str;

    /// Processes batch `batch_id`'s on-time rows against state version `batch_id - 1` and
    /// returns the rows to write, per the output mode. `watermark_ms` is this batch's
    /// watermark. Calling it again for the same uncommitted batch starts over from version
    /// `batch_id - 1` (a retried batch does not count its rows twice).
    fn process(
        &mut self,
        batch_id: u64,
        input: Vec<RecordBatch>,
        watermark_ms: i64,
    ) -> Result<Vec<RecordBatch>>;

    /// Persists state version `batch_id` (after the sink commit, before `commits/N`).
    fn commit(&mut self, batch_id: u64) -> Result<()>;

    /// Metrics of the last processed/committed batch.
    fn metrics(&self) -> StateOperatorMetrics;

    /// Whether a batch without data but with watermark `next_watermark_ms` would emit or
    /// drop anything (Spark runs a no-data batch then).
    fn needs_no_data_batch(&self, next_watermark_ms: i64) -> bool;

    /// Whether the engine should drop late rows before [`Self::process`] (false in complete mode).
    fn drops_late_rows(&self) -> bool;

    /// Schema of the rows [`Self::process`] returns.
    fn output_schema(&self) -> SchemaRef;

    /// Whether the operator emits input rows as they are (deduplication), so rows that
    /// are not data (corrupt records) can go around it to the sink.
    fn emits_input_rows(&self) -> bool {
        false
    }
}

/// Checks a stateful query against the input schema, the way Spark's
/// `UnsupportedOperationChecker` does; the message says what would work and why.
pub fn validate(spec: &StatefulSpec, input_schema: &SchemaRef) -> std::result::Result<(), String> {
    if let Some(wm) = &spec.watermark {
        let field = input_schema.field_with_name(&wm.column).map_err(|_| {
            format!(
                "the watermark column `{}` is not a column of the input (columns: {})",
                wm.column,
                column_list(input_schema)
            )
        })?;
        check_event_time_type(&wm.column, field.data_type())?;
        if wm.delay_ms < 0 {
            return Err("the watermark delay must not be negative".into());
        }
    }
    if spec.drop_duplicates_within_watermark {
        if spec.drop_duplicates.is_none() {
            return Err(
                "drop_duplicates_within_watermark needs drop_duplicates = [<key columns>]".into(),
            );
        }
        if spec.watermark.is_none() {
            return Err("drop_duplicates_within_watermark keeps a key for the watermark delay, so it needs a \
                 watermark = { column = ..., delay = ... }"
                .into());
        }
    }
    if spec.has_aggregation() && spec.has_deduplication() {
        return Err("drop_duplicates and an aggregation in the same flow are not supported yet: deduplicate \
             in one flow and aggregate its output table in the next"
            .into());
    }
    if spec.output_mode == OutputMode::Complete && !spec.has_aggregation() {
        return Err(format!(
            "output_mode = \"complete\" rewrites the whole result table every batch, which needs an \
             aggregation (group_by + aggregates); {} use output_mode = \"append\"",
            if spec.has_deduplication() {
                "a deduplication emits each first row once:"
            } else {
                "without one,"
            }
        ));
    }
    if spec.has_aggregation() {
        return validate_aggregation(spec, input_schema);
    }
    if let Some(keys) = &spec.drop_duplicates {
        return validate_dedup(spec, keys, input_schema);
    }
    Ok(())
}

fn validate_aggregation(
    spec: &StatefulSpec,
    input_schema: &SchemaRef,
) -> std::result::Result<(), String> {
    if spec.aggregates.is_empty() {
        return Err(
            "group_by needs at least one aggregate, e.g. aggregates = [\"count(*) AS n\"]; to keep one row \
             per key, use drop_duplicates = [...] instead"
                .into(),
        );
    }
    let mut windows = Vec::new();
    for item in &spec.group_by {
        if let Some(w) = WindowSpec::parse_item(item)? {
            windows.push(w);
        }
    }
    if windows.len() > 1 {
        return Err(
            "group_by has more than one window(...); use one window per aggregation".into(),
        );
    }
    if let Some(w) = windows.first() {
        let field = input_schema.field_with_name(&w.column).map_err(|_| {
            format!(
                "{}: `{}` is not a column of the input (columns: {})",
                w.describe(),
                w.column,
                column_list(input_schema)
            )
        })?;
        check_event_time_type(&w.column, field.data_type())?;
    }
    AggregatePlan::new(spec, input_schema)?;
    if spec.output_mode == OutputMode::Append {
        let event_key = spec.watermark.as_ref().is_some_and(|wm| {
            windows.iter().any(|w| w.column == wm.column)
                || spec
                    .group_by
                    .iter()
                    .any(|g| super::window::split_alias(g).0.trim().trim_matches('"') == wm.column)
        });
        if !event_key {
            let why = match &spec.watermark {
                None => "there is no watermark".to_string(),
                Some(wm) => format!(
                    "no group_by key is `window({}, ...)` or `{}`",
                    wm.column, wm.column
                ),
            };
            let column = spec
                .watermark
                .as_ref()
                .map_or("<event time>", |w| w.column.as_str());
            return Err(format!(
                "output_mode = \"append\" emits a group once, when the watermark says it is final, which needs \
                 a watermark and an event-time group key, but {why}. Either group by window({column}, '5 minutes') \
                 with watermark = {{ column = \"{column}\", delay = ... }}, or use output_mode = \"update\" (emits \
                 the groups changed by each batch) or \"complete\" (emits the whole result every batch)"
            ));
        }
    }
    Ok(())
}

fn validate_dedup(
    spec: &StatefulSpec,
    keys: &[String],
    input_schema: &SchemaRef,
) -> std::result::Result<(), String> {
    for k in keys {
        if input_schema.field_with_name(k).is_err() {
            return Err(format!(
                "drop_duplicates: `{k}` is not a column of the input (columns: {})",
                column_list(input_schema)
            ));
        }
    }
    check_dedup_bounds(spec, keys)
}

/// The checks of a deduplication that need no schema (its state must be bounded by the
/// watermark); `weir validate` runs them whatever the schema, so a pipeline with an
/// inferred schema is refused before it runs, with the file and line.
pub fn check_dedup_bounds(spec: &StatefulSpec, keys: &[String]) -> std::result::Result<(), String> {
    if spec.drop_duplicates_within_watermark {
        return Ok(());
    }
    let Some(wm) = &spec.watermark else {
        return Err(
            "drop_duplicates without a watermark keeps every key forever (its state grows without bound): \
             declare watermark = { column = ..., delay = ... } and add that column to the keys, or set \
             drop_duplicates_within_watermark = true"
                .into(),
        );
    };
    let all_columns = keys.is_empty();
    if !all_columns && !keys.iter().any(|k| k == &wm.column) {
        return Err(format!(
            "drop_duplicates = [{}] does not include the watermark column `{}`, so no key ever expires and the \
             state grows without bound (SPARK-38212). Add `{}` to the keys (duplicates then share their event \
             time), or set drop_duplicates_within_watermark = true (keeps the first row per key for the \
             watermark delay, Spark 3.5)",
            keys.join(", "),
            wm.column,
            wm.column
        ));
    }
    Ok(())
}

fn column_list(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .filter(|f| f.name() != crate::schema::METADATA_COLUMN)
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Builds the flow's stateful operator over `input_schema` (the batches it will get),
/// with its state in `state_dir` (`<checkpoint>/state/<operator_id>`), loading
/// `load_version` (the last committed batch id; `None` on a fresh checkpoint).
pub fn build(
    spec: &StatefulSpec,
    input_schema: &SchemaRef,
    state_dir: &Path,
    load_version: Option<u64>,
) -> Result<Box<dyn StatefulOperator>> {
    validate(spec, input_schema).map_err(|message| Error::Plan {
        flow: spec.flow.clone(),
        message,
    })?;
    if spec.has_aggregation() {
        Ok(Box::new(AggregateOperator::new(
            spec,
            input_schema,
            state_dir,
            load_version,
        )?))
    } else if spec.has_deduplication() {
        Ok(Box::new(DedupOperator::new(
            spec,
            input_schema,
            state_dir,
            load_version,
        )?))
    } else {
        Err(Error::Plan {
            flow: spec.flow.clone(),
            message:
                "the flow has no stateful operator (no group_by/aggregates or drop_duplicates)"
                    .into(),
        })
    }
}

pub(crate) fn elapsed_ms(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Test support: an engine loop in miniature (watermark, late split, no-data batches,
/// commit, restart) and helpers to compare results with DataFusion.
#[cfg(test)]
pub(crate) mod sim {
    use std::path::PathBuf;
    use std::sync::Arc;

    use arrow::array::{
        Array, ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    };
    use arrow::compute::cast;
    use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;
    use crate::ops::watermark::{next_watermark, split_late};
    use crate::spec::StatefulSpec;

    /// Parses an RFC 3339 time to epoch milliseconds.
    pub fn ms(text: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|t| t.timestamp_millis())
            .unwrap_or_else(|e| panic!("bad time {text}: {e}"))
    }

    /// Schema of test events: `k STRING, ts TIMESTAMP, v BIGINT`.
    pub fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
                true,
            ),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    /// Events `(k, ts as RFC 3339 or None, v)`.
    pub fn events(rows: &[(&str, Option<&str>, i64)]) -> RecordBatch {
        let k = StringArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
        let ts = TimestampMicrosecondArray::from(
            rows.iter()
                .map(|r| r.1.map(|t| ms(t) * 1000))
                .collect::<Vec<_>>(),
        )
        .with_timezone("UTC");
        let v = Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>());
        RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(ts), Arc::new(v)]).unwrap()
    }

    /// The rows of `tests/fixtures/cases/<case>/<step>/*.json`, decoded with `schema`
    /// (JSON lines; missing fields are null).
    pub fn fixture(case: &str, step: &str, schema: &SchemaRef) -> Vec<RecordBatch> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/cases")
            .join(case)
            .join(step);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let mut out = Vec::new();
        for path in files {
            let file = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
            let reader = arrow::json::ReaderBuilder::new(schema.clone())
                .build(file)
                .unwrap();
            out.extend(reader.map(|b| b.unwrap()));
        }
        out
    }

    /// One batch the simulated engine ran.
    #[derive(Debug, Clone)]
    pub struct BatchRun {
        pub batch_id: u64,
        pub watermark_ms: i64,
        pub no_data: bool,
        pub output: Vec<RecordBatch>,
        pub metrics: StateOperatorMetrics,
    }

    /// The engine's batch loop for one stateful operator, in memory.
    pub struct Sim {
        pub spec: StatefulSpec,
        pub schema: SchemaRef,
        pub dir: PathBuf,
        pub op: Box<dyn StatefulOperator>,
        pub watermark_ms: i64,
        pub next_batch: u64,
        pub runs: Vec<BatchRun>,
        /// All rows the operator was given (on time), for the batch comparison.
        pub on_time: Vec<RecordBatch>,
        pub dropped: u64,
    }

    impl Sim {
        pub fn new(spec: StatefulSpec, schema: SchemaRef, dir: &std::path::Path) -> Sim {
            let op = build(&spec, &schema, dir, None).unwrap_or_else(|e| panic!("{e}"));
            Sim {
                spec,
                schema,
                dir: dir.to_path_buf(),
                op,
                watermark_ms: 0,
                next_batch: 0,
                runs: Vec::new(),
                on_time: Vec::new(),
                dropped: 0,
            }
        }

        fn last_committed(&self) -> Option<u64> {
            self.next_batch.checked_sub(1)
        }

        /// A new process: rebuild the operator from the last committed version; the
        /// watermark is the one kept in the checkpoint (commits/N).
        pub fn restart(&mut self) {
            self.op = build(&self.spec, &self.schema, &self.dir, self.last_committed())
                .unwrap_or_else(|e| panic!("{e}"));
        }

        fn run_batch(&mut self, input: Vec<RecordBatch>, no_data: bool) -> Option<i64> {
            let batch_id = self.next_batch;
            let (rows, max) = match (&self.spec.watermark, self.op.drops_late_rows()) {
                (Some(wm), true) => {
                    let split = split_late(&input, wm, self.watermark_ms).unwrap();
                    self.dropped += split.num_late;
                    let max = split.event_time.map(|s| s.max_ms);
                    (split.on_time, max)
                }
                (Some(wm), false) => {
                    let split = split_late(&input, wm, i64::MIN / 1000).unwrap();
                    let max = split.event_time.map(|s| s.max_ms);
                    (split.on_time, max)
                }
                (None, _) => (input, None),
            };
            self.on_time.extend(rows.iter().cloned());
            let output = self
                .op
                .process(batch_id, rows, self.watermark_ms)
                .unwrap_or_else(|e| panic!("{e}"));
            self.op.commit(batch_id).unwrap_or_else(|e| panic!("{e}"));
            self.runs.push(BatchRun {
                batch_id,
                watermark_ms: self.watermark_ms,
                no_data,
                output,
                metrics: self.op.metrics(),
            });
            self.next_batch += 1;
            max
        }

        /// Lands `input` and triggers: one data batch, then no-data batches while the
        /// watermark closes something (an `available_now` run).
        pub fn trigger(&mut self, input: Vec<RecordBatch>) {
            let max = self.run_batch(input, false);
            if let Some(wm) = &self.spec.watermark {
                self.watermark_ms = next_watermark(self.watermark_ms, max, wm.delay_ms);
            }
            self.drain();
        }

        /// Runs the no-data batches the current watermark calls for.
        pub fn drain(&mut self) {
            while self.op.needs_no_data_batch(self.watermark_ms) {
                self.run_batch(Vec::new(), true);
            }
        }

        /// Every output row so far, in order.
        pub fn all_output(&self) -> Vec<RecordBatch> {
            self.runs
                .iter()
                .flat_map(|r| r.output.iter().cloned())
                .collect()
        }
    }

    fn canonical_array(array: &ArrayRef) -> ArrayRef {
        match array.data_type() {
            DataType::Timestamp(_, _) => {
                let us = cast(array, &DataType::Timestamp(TimeUnit::Microsecond, None)).unwrap();
                cast(&us, &DataType::Int64).unwrap()
            }
            DataType::Float32 | DataType::Float64 => {
                let f = cast(array, &DataType::Float64).unwrap();
                let f = f
                    .as_any()
                    .downcast_ref::<arrow::array::Float64Array>()
                    .unwrap();
                Arc::new(StringArray::from(
                    f.iter()
                        .map(|v| v.map(|v| format!("{v:.6}")))
                        .collect::<Vec<_>>(),
                ))
            }
            DataType::UInt64 | DataType::Int32 | DataType::UInt32 => {
                cast(array, &DataType::Int64).unwrap()
            }
            _ => array.clone(),
        }
    }

    /// Rows as sorted `a|b|c` strings (timestamps as epoch µs, floats to 6 places).
    pub fn rows(batches: &[RecordBatch]) -> Vec<String> {
        let mut out = Vec::new();
        let options = FormatOptions::default().with_null("null");
        for b in batches {
            let arrays: Vec<ArrayRef> = b.columns().iter().map(canonical_array).collect();
            let formatters: Vec<_> = arrays
                .iter()
                .map(|a| ArrayFormatter::try_new(a.as_ref(), &options).unwrap())
                .collect();
            for i in 0..b.num_rows() {
                out.push(
                    formatters
                        .iter()
                        .map(|f| f.value(i).to_string())
                        .collect::<Vec<_>>()
                        .join("|"),
                );
            }
        }
        out.sort();
        out
    }

    /// Runs `sql` over `batches` registered as table `t`, with DataFusion in batch mode.
    pub fn datafusion(schema: &SchemaRef, batches: &[RecordBatch], sql: &str) -> Vec<RecordBatch> {
        let mut config = SessionConfig::new().with_target_partitions(1);
        config.options_mut().sql_parser.enable_ident_normalization = false;
        let ctx = SessionContext::new_with_config(config);
        let table =
            datafusion::datasource::MemTable::try_new(schema.clone(), vec![batches.to_vec()])
                .unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        futures::executor::block_on(async { ctx.sql(sql).await?.collect().await })
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// A deterministic pseudo-random source.
    pub struct Lcg(pub u64);

    impl Lcg {
        pub fn next(&mut self, bound: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % bound.max(1)
        }
    }

    /// `batches` batches of synthetic events: keys `a`..`e`, event times moving forward about
    /// 20 s per batch with jitter, 1 row in 20 late by 1-60 s (some behind the watermark),
    /// one event exactly at a 10 s boundary per batch, and repeated `(k, ts, v)` rows across batches.
    pub fn synthetic(batches: usize, rows_per_batch: usize, seed: u64) -> Vec<RecordBatch> {
        let mut rng = Lcg(seed);
        let base = ms("2024-05-01T10:00:00Z");
        let mut out = Vec::new();
        let mut previous: Vec<(String, i64, i64)> = Vec::new();
        for b in 0..batches {
            let start = base + b as i64 * 20_000;
            let mut rows: Vec<(String, i64, i64)> = Vec::new();
            for _ in 0..rows_per_batch {
                let key = ["a", "b", "c", "d", "e"][rng.next(5) as usize].to_string();
                let mut t = start + rng.next(25_000) as i64;
                if rng.next(20) == 0 {
                    t -= 1_000 + rng.next(59_000) as i64;
                }
                rows.push((key, t, rng.next(100) as i64));
            }
            rows.push(("a".into(), start + 10_000, 7));
            if let Some(dup) = previous.first() {
                rows.push(dup.clone());
            }
            previous = rows.clone();
            let k = StringArray::from(rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>());
            let ts = TimestampMicrosecondArray::from(
                rows.iter().map(|r| r.1 * 1000).collect::<Vec<_>>(),
            )
            .with_timezone("UTC");
            let v = Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>());
            out.push(
                RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(ts), Arc::new(v)])
                    .unwrap(),
            );
        }
        out
    }
}
