//! The plan of a flow: its inputs, the stateless projection, one operator and the
//! output schema, built once from the spec, the inputs' schemas and the checkpoint's
//! state.
//!
//! ```text
//!  inputs[0] ── projection (where/select, stream-static joins) ──┐
//!                                                                ├─ operator ─► output schema
//!  inputs[1] (stream-stream join's right side) ──────────────────┘
//! ```
//!
//! A union (`[[flow.union]]`): every input's rows take the union's columns (by name,
//! [`crate::ops::union`]), then each input's rows go through the projection and their
//! own watermark split, and the operator sees them as one stream.
//!
//! The plan also decides, once, the path every batch of the flow takes ([`BatchPath`]):
//! streamed file by file or staged, whether a batch re-run after a restart may skip its
//! read, and which commit path of the sink (`src/sink/delta.rs`) it ends in. The trigger
//! loop and the stages read the plan, never the spec (docs/architecture.md, "The batch
//! protocol").
//!
//! The same functions plan a flow for a run ([`FlowPlan::build`]), for `weir check`
//! ([`plan_operator`] against the saved state, read-only) and for `weir validate`
//! ([`plan_projection`] and [`check_operator`], without state), so the three cannot
//! disagree about what a flow is.

use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::input::Input;
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::ops::Projection;
use crate::ops::expect::Expectations;
use crate::ops::stateful::StatefulOperator;
use crate::ops::stream_join::{JoinPlan, StreamJoinOperator};
use crate::ops::watermark::{EventTimeStats, next_watermark};
use crate::records::StateOperatorMetrics;
use crate::spec::{
    FlowSpec, HealthConfig, OutputMode, SinkSpec, SourceSpec, WatermarkPolicy, WatermarkSpec,
};

/// A flow, planned: what each batch runs through, the path it takes, and what of the
/// flow's spec the stages need.
pub struct FlowPlan {
    /// The flow's name (errors, failpoints, logs).
    pub name: String,
    /// Source `i` of the flow (offset `i` of `offsets/N`): 0 is the flow's source, 1 a
    /// stream-stream join's right side.
    pub inputs: Vec<Input>,
    /// `where`/`select` and stream-static joins over input 0's rows (with a stream-stream
    /// join, `where`/`select` apply to the joined rows instead).
    pub projection: Projection,
    /// `[[flow.expect]]` over the stream's rows before the projection (input 0's, or
    /// every union source's).
    pub expectations: std::sync::Arc<Expectations>,
    pub operator: Operator,
    /// The schema of the rows the sink receives (creates a Delta table on an empty first batch).
    pub output_schema: SchemaRef,
    /// A union of sources: the columns every input's rows are given before the projection.
    pub union_schema: Option<SchemaRef>,
    /// The path every batch takes, decided with the plan.
    pub path: BatchPath,
    /// Input `i`'s watermark: input 0's is the flow's, a union source's its own (or the
    /// flow's); `None` without event time.
    pub watermarks: Vec<Option<WatermarkSpec>>,
    /// How a union's sources' watermarks make the flow's (Spark's
    /// `multipleWatermarkPolicy`); unused without a union.
    pub watermark_policy: WatermarkPolicy,
    /// The Delta table rows behind the watermark go to (`late_rows`).
    pub late_rows: Option<PathBuf>,
    /// The Delta table the rows `drop` expectations remove go to (`quarantine_path`).
    pub quarantine_path: Option<PathBuf>,
    /// The sink's Delta table, whose commits this process's downstream flows are told of.
    pub sink_table: Option<PathBuf>,
    /// Spark's `minBatchesToRetain`: the checkpoint's retention after each commit.
    pub min_batches_to_retain: u64,
    /// The flow's retry budget for transient errors.
    pub retry: HealthConfig,
}

/// The path every batch of a flow takes, decided once when the flow is planned
/// ([`BatchPath::of`]): `run` and the stages follow it instead of asking the spec again
/// at each trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPath {
    pub execution: Execution,
    pub replay: Replay,
    /// How a staged batch's rows reach the sink.
    pub commit: CommitPath,
}

/// How steps 4 and 5 of the batch protocol (read, transform and write) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// In one pass, file by file ([`super::streamed`]), committed as a streamed append
    /// (`DeltaSink::begin_streamed_append`, `commit_streamed_append`): a flow that only
    /// moves rows from files to an unpartitioned Delta table. A batch the streamed path
    /// declines, and a batch re-run after a restart, run staged.
    Streamed,
    /// Stage by stage ([`super::batch`]): read, transform, write.
    Staged,
}

/// What a batch re-run after a restart (planned, not committed) does when the sink
/// already holds it (its Delta `txn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Its files are not read again: each ends as its first attempt recorded. The next
    /// batch does not depend on this one's rows (no state, no watermark, files sources
    /// only), and the files may be gone (retention, VACUUM) while their rows are in the
    /// table.
    SkipsReadWhenHeld,
    /// Read and transformed again (its rows feed state or a watermark, or its sources
    /// re-derive it from their own offsets); the sink's txn skips the write.
    Reads,
}

/// The sink's commit path for a staged batch (`src/sink/delta.rs`; the memory and
/// console sinks take every batch as an append).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPath {
    /// `DeltaSink::add_batch`: one commit with txn(query id, N); the sink chooses per
    /// batch between its direct append and delta-rs's write operation, by the table.
    Append,
    /// Output mode complete: `DeltaSink::add_batch` replacing the table's content.
    Overwrite,
    /// A `delta_merge` sink: `DeltaSink::merge_batch` (Delta MERGE on its keys); a
    /// `postgres` sink with `keys`: `INSERT ... ON CONFLICT (keys) DO UPDATE`.
    Merge,
}

impl BatchPath {
    /// The path of the flow `spec`'s batches.
    pub fn of(spec: &FlowSpec) -> BatchPath {
        // The operator `plan_operator` builds is stateless exactly when the flow has
        // neither a stream-stream join nor a stateful query.
        let only_moves_rows = !spec.stateful.is_stateful()
            && !spec.is_union()
            && spec.joins.is_empty()
            && spec.stream_join.is_none()
            && spec.source_watermark(0).is_none()
            && spec.late_rows.is_none()
            && spec.quarantine_path.is_none()
            && spec.stateful.output_mode == OutputMode::Append;
        let streams = only_moves_rows
            && matches!(spec.sources().as_slice(), [source @ SourceSpec::Files(_)] if source.quarantine() == (None, None))
            && matches!(&spec.sink, SinkSpec::Delta { partition_by, idempotent: true, .. } if partition_by.is_empty());
        let sink_records_batches = matches!(
            &spec.sink,
            SinkSpec::Delta {
                idempotent: true,
                ..
            } | SinkSpec::DeltaMerge { .. }
        );
        let rows_feed_next_batch = spec.stateful.is_stateful()
            || spec.stateful.watermark.is_some()
            || spec.stream_join.is_some()
            || spec.union.iter().any(|u| u.watermark.is_some());
        let files_only = spec
            .sources()
            .iter()
            .all(|s| matches!(s, SourceSpec::Files(_)));
        BatchPath {
            execution: if streams {
                Execution::Streamed
            } else {
                Execution::Staged
            },
            replay: if sink_records_batches && !rows_feed_next_batch && files_only {
                Replay::SkipsReadWhenHeld
            } else {
                Replay::Reads
            },
            commit: match (&spec.sink, spec.stateful.output_mode) {
                (SinkSpec::DeltaMerge { .. }, _) => CommitPath::Merge,
                (SinkSpec::Postgres { keys, .. }, OutputMode::Append | OutputMode::Update)
                    if !keys.is_empty() =>
                {
                    CommitPath::Merge
                }
                (_, OutputMode::Complete) => CommitPath::Overwrite,
                _ => CommitPath::Append,
            },
        }
    }
}

/// The one operator a flow runs after its projection.
pub enum Operator {
    /// No state. A declared watermark is tracked and reported; no row is dropped (as in Spark).
    Stateless,
    /// Aggregation or deduplication (docs/event-time.md).
    Stateful(Box<dyn StatefulOperator>),
    /// A stream-stream join of input 0 with input 1 (docs/stream-joins.md).
    StreamJoin(Box<StreamJoinOperator>),
}

/// Where an operator's state is: `state/0/` of the checkpoint, at the last committed batch.
#[derive(Debug, Clone)]
pub struct StateAt {
    pub dir: PathBuf,
    /// The version to load (the last committed batch id); `None` on a fresh checkpoint.
    pub version: Option<u64>,
}

impl StateAt {
    /// The state of the flow's operator (operator id 0) after batch `last_commit`.
    pub fn of(checkpoint: &Checkpoint, last_commit: Option<u64>) -> Self {
        StateAt {
            dir: checkpoint.root().join("state").join("0"),
            version: last_commit,
        }
    }
}

impl FlowPlan {
    /// Plans the flow over its open inputs and loads the operator's state.
    pub async fn build(spec: &FlowSpec, inputs: Vec<Input>, state: &StateAt) -> Result<FlowPlan> {
        let schemas = inputs
            .iter()
            .map(Input::batch_schema)
            .collect::<Result<Vec<_>>>()?;
        let (projection, operator, output_schema) = plan_operator(spec, &schemas, state).await?;
        let expectations = std::sync::Arc::new(plan_expectations(spec, &schemas)?);
        let mut inputs = inputs;
        for (input, columns) in inputs.iter_mut().zip(read_columns(spec, &operator)) {
            input.read_only(columns);
        }
        // The `_metadata` fields the query reads: a file source fills only those. Only
        // for a flow whose projection alone reads input 0's rows (no union, no
        // stream-stream join) and has no dimension join: a dimension's columns can change
        // while the flow runs and with them what a name like `_metadata.file_name`
        // resolves to (an alias `_metadata`), which the source would not follow.
        if !spec.is_union()
            && spec.joins.is_empty()
            && !matches!(operator, Operator::StreamJoin(_))
            && let Some(input) = inputs.first_mut()
        {
            // A `fail` expectation names a failing row's file and the quarantine keeps
            // it (`_metadata.file_path`); a constraint may read any field.
            let fields = match projection.metadata_fields() {
                Some(_) if expectations.reads_metadata() => None,
                Some(mut fields)
                    if expectations.names_files() || spec.quarantine_path.is_some() =>
                {
                    fields.insert("file_path".to_string());
                    Some(fields)
                }
                fields => fields,
            };
            input.read_metadata_fields(fields.as_ref());
        }
        let union_schema = if spec.is_union() {
            Some(stream_schema(spec, &schemas)?)
        } else {
            None
        };
        let path = BatchPath::of(spec);
        if path.execution == Execution::Streamed
            && let Some(Input::Files(input)) = inputs.first_mut()
        {
            // A streamed batch holds a few files' rows at a time; the read-ahead would
            // hold the next batch's (a batch the streamed path declines reads none ahead:
            // the next one streams again).
            input.set_reads_ahead(false);
        }
        Ok(FlowPlan {
            name: spec.name.clone(),
            watermarks: (0..inputs.len())
                .map(|i| spec.source_watermark(i).cloned())
                .collect(),
            inputs,
            projection,
            expectations,
            operator,
            output_schema,
            union_schema,
            path,
            watermark_policy: spec.multiple_watermark_policy,
            late_rows: spec.late_rows.clone(),
            quarantine_path: spec.quarantine_path.clone(),
            sink_table: spec.writes(),
            min_batches_to_retain: spec.min_batches_to_retain,
            retry: spec.health.clone(),
        })
    }

    /// Whether the flow reads several sources as one stream (`[[flow.union]]`).
    pub fn is_union(&self) -> bool {
        self.union_schema.is_some()
    }

    /// Input `i`'s watermark, if it has one.
    pub fn watermark(&self, i: usize) -> Option<&WatermarkSpec> {
        self.watermarks.get(i).and_then(Option::as_ref)
    }
}

/// Projection pushdown: per input, the only columns the flow reads from it (`None`:
/// all). A stream-stream join without stream-static joins, union or `late_rows` reads
/// from each side only the columns its state keeps (what its `on`, time range, `where`
/// and `select` use, and the side's event time), so the sources need not decode the
/// others (Spark's optimizer prunes the columns below the join the same way).
fn read_columns(spec: &FlowSpec, operator: &Operator) -> Vec<Option<Vec<String>>> {
    match operator {
        // Expectations read the left side's rows as the source has them: every column.
        Operator::StreamJoin(join)
            if spec.joins.is_empty()
                && !spec.is_union()
                && spec.late_rows.is_none()
                && spec.expectations.is_empty() =>
        {
            let (left, right) = join.input_columns();
            vec![Some(left), Some(right)]
        }
        _ => Vec::new(),
    }
}

/// The schema of the stream the projection reads: input 0's, or with `[[flow.union]]`
/// the union of every input's by column name.
pub fn stream_schema(spec: &FlowSpec, schemas: &[SchemaRef]) -> Result<SchemaRef> {
    if spec.is_union() {
        return crate::ops::union::union_schema(schemas).map_err(|m| Error::Plan {
            flow: spec.name.clone(),
            message: format!("the [[flow.union]] sources disagree: {m}"),
        });
    }
    schemas.first().cloned().ok_or_else(|| Error::Plan {
        flow: spec.name.clone(),
        message: "the flow has no source".into(),
    })
}

/// Each union source's own watermark column exists in the projected rows with a type
/// that carries event time (the flow's own is checked with its stateful query).
fn check_union_watermarks(spec: &FlowSpec, projected: &SchemaRef) -> Result<()> {
    for i in 1..=spec.union.len() {
        let Some(wm) = spec.source_watermark(i) else {
            continue;
        };
        let problem = match projected.field_with_name(&wm.column) {
            Err(_) => Some(format!(
                "the watermark column `{}` of [[flow.union]] source {} ({}) is not in the rows after `where`/`select` (columns: {})",
                wm.column,
                i + 1,
                spec.sources()[i].path().display(),
                projected
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Ok(f) => crate::ops::watermark::check_event_time_type(&wm.column, f.data_type()).err(),
        };
        if let Some(message) = problem {
            return Err(Error::Plan {
                flow: spec.name.clone(),
                message,
            });
        }
    }
    Ok(())
}

/// Whether the flow's `where`/`select` apply to the joined rows of a stream-stream join
/// (instead of to input 0's rows).
fn applies_after_join(spec: &FlowSpec) -> bool {
    spec.stream_join.is_some()
}

/// Compiles the flow's expectations against the stream's rows (input 0's, or a union's
/// columns), as they are before `where`/`select`.
pub fn plan_expectations(spec: &FlowSpec, schemas: &[SchemaRef]) -> Result<Expectations> {
    if spec.expectations.is_empty() {
        return Ok(Expectations::none(&spec.name));
    }
    let left = stream_schema(spec, schemas)?;
    Expectations::plan_flow(&spec.name, &spec.expectations, &left)
}

/// Plans `where`/`select` and the stream-static joins against input 0's batch schema:
/// the projection and the schema it produces.
pub async fn plan_projection(
    spec: &FlowSpec,
    input: &SchemaRef,
) -> Result<(Projection, SchemaRef)> {
    let joined = applies_after_join(spec);
    let mut projection = Projection::with_joins(
        &spec.name,
        input,
        spec.where_.as_deref().filter(|_| !joined),
        spec.select.as_deref().filter(|_| !joined),
        &spec.joins,
    );
    let projected = projection.check(input).await?;
    Ok((projection, projected))
}

fn join_plan(spec: &FlowSpec) -> Option<JoinPlan<'_>> {
    spec.stream_join.as_ref().map(|join| JoinPlan {
        flow: &spec.name,
        left_watermark: spec.stateful.watermark.as_ref(),
        join,
        where_: spec.where_.as_deref(),
        select: spec.select.as_deref(),
    })
}

/// Checks the flow's operator against the schemas without state (`weir validate`): the
/// stream-stream join's bounds and SQL over both sides, or the stateful query (watermark,
/// aggregation, deduplication) over the projected rows. Returns the message of the first
/// problem, as the engine would report it.
pub fn check_operator(
    spec: &FlowSpec,
    projected: &SchemaRef,
    right: Option<&SchemaRef>,
) -> Result<()> {
    if let (Some(plan), Some(right)) = (join_plan(spec), right) {
        crate::ops::stream_join::check_plan(&plan, projected, right)?;
    }
    check_union_watermarks(spec, projected)?;
    if spec.stateful.is_stateful() || spec.stateful.watermark.is_some() {
        crate::ops::stateful::validate(&spec.stateful, projected).map_err(|message| {
            Error::Plan {
                flow: spec.name.clone(),
                message,
            }
        })?;
    }
    Ok(())
}

/// Plans the flow over its inputs' batch schemas (`schemas[i]` for source `i`) and builds
/// its operator against the state at `state` (read-only when `state.version` is set).
pub async fn plan_operator(
    spec: &FlowSpec,
    schemas: &[SchemaRef],
    state: &StateAt,
) -> Result<(Projection, Operator, SchemaRef)> {
    let left = &stream_schema(spec, schemas)?;
    let (projection, projected) = plan_projection(spec, left).await?;
    check_union_watermarks(spec, &projected)?;
    if let Some(plan) = join_plan(spec) {
        let right = schemas.get(1).ok_or_else(|| Error::Plan {
            flow: spec.name.clone(),
            message: "the stream-stream join's right side has no schema".into(),
        })?;
        let op = StreamJoinOperator::new(&plan, &projected, right, &state.dir, state.version)?;
        if spec.stateful.watermark.is_some() {
            crate::ops::stateful::validate(&spec.stateful, &projected).map_err(|message| {
                Error::Plan {
                    flow: spec.name.clone(),
                    message,
                }
            })?;
        }
        let output = op.output_schema();
        return Ok((projection, Operator::StreamJoin(Box::new(op)), output));
    }
    if spec.stateful.is_stateful() {
        let op =
            crate::ops::stateful::build(&spec.stateful, &projected, &state.dir, state.version)?;
        let output = op.output_schema();
        return Ok((projection, Operator::Stateful(op), output));
    }
    if let Some(wm) = &spec.stateful.watermark {
        crate::ops::stateful::validate(&spec.stateful, &projected).map_err(|message| {
            Error::Plan {
                flow: spec.name.clone(),
                message,
            }
        })?;
        tracing::info!(column = %wm.column, "watermark without a stateful operator: it is tracked and reported, no row is dropped (as in Spark)");
    }
    Ok((projection, Operator::Stateless, projected))
}

/// A source's batch schema when it is known without running it: a files source's given
/// schema, or (with `recorded`, a schema location) the latest recorded one; a Delta
/// table's current schema. `Ok(None)` when unknown (inferred and not recorded yet, no
/// table yet).
pub async fn known_batch_schema(
    source: &SourceSpec,
    recorded: Option<&Path>,
) -> Result<Option<SchemaRef>> {
    match source {
        SourceSpec::Files(src) => {
            let data_schema = match (crate::source::files::schema_store::given(src), recorded) {
                (Some(s), _) => s,
                (None, Some(location)) => {
                    match crate::source::files::schema_store::latest(location)? {
                        Some((_, s)) => std::sync::Arc::new(s),
                        None => return Ok(None),
                    }
                }
                (None, None) => return Ok(None),
            };
            let read_schema = crate::source::files::read::output_schema(
                &crate::source::files::read::ReadSpec::new(src.format, data_schema),
            );
            Ok(Some(crate::source::files::batch_schema(&read_schema)))
        }
        SourceSpec::Delta(options) if options.read_change_feed => {
            let mut source = crate::source::delta_cdf::CdfSource::new(options.clone());
            source.refresh().await?;
            Ok(source.schema())
        }
        SourceSpec::Delta(options) => {
            let mut source = crate::source::delta::DeltaSource::new(options.clone());
            source.refresh().await?;
            Ok(source.schema())
        }
        SourceSpec::Kafka(k) => Ok(Some(super::input::kafka::batch_schema(k))),
    }
}

impl Operator {
    /// Whether rows behind the batch's watermark are split off before the operator
    /// (every stateful operator but complete mode; a stream-stream join).
    pub fn drops_late_rows(&self) -> bool {
        match self {
            Operator::Stateless => false,
            Operator::Stateful(op) => op.drops_late_rows(),
            Operator::StreamJoin(_) => true,
        }
    }

    /// Whether corrupt records go around the operator to the sink (deduplication: they
    /// are not data, have no key or event time, and must not be lost or deduplicated).
    pub fn passes_corrupt_records(&self) -> bool {
        matches!(self, Operator::Stateful(op) if op.emits_input_rows())
    }

    /// Whether the operator keeps state, so late and invalid rows are set apart from
    /// its input.
    pub fn is_stateful(&self) -> bool {
        !matches!(self, Operator::Stateless)
    }

    /// Whether a batch without data, with watermark `watermark_ms`, would emit or evict
    /// anything (Spark's no-data micro-batch).
    pub fn needs_no_data_batch(&self, watermark_ms: i64) -> bool {
        match self {
            Operator::Stateless => false,
            Operator::Stateful(op) => op.needs_no_data_batch(watermark_ms),
            Operator::StreamJoin(j) => j.needs_no_data_batch(watermark_ms),
        }
    }

    /// Runs batch `batch_id` against state version `batch_id - 1`: `left` are input 0's
    /// on-time rows (`num_late` were behind the watermark), `others` the rows read from
    /// the other inputs.
    pub async fn process(
        &mut self,
        batch_id: u64,
        left: Vec<RecordBatch>,
        others: Vec<Vec<RecordBatch>>,
        watermark_ms: i64,
        num_late: u64,
    ) -> Result<Vec<RecordBatch>> {
        match self {
            Operator::Stateless => Ok(left),
            Operator::Stateful(op) => op.process(batch_id, left, watermark_ms),
            Operator::StreamJoin(j) => {
                let right = others.into_iter().next().unwrap_or_default();
                j.process(batch_id, left, right, watermark_ms, num_late)
                    .await
            }
        }
    }

    /// Persists state version `batch_id` (after the sink commit, before `commits/N`).
    pub fn commit(&mut self, batch_id: u64) -> Result<()> {
        match self {
            Operator::Stateless => Ok(()),
            Operator::Stateful(op) => op.commit(batch_id),
            Operator::StreamJoin(j) => j.commit(batch_id),
        }
    }

    /// The watermark of the next batch: a stream-stream join's (the minimum of both
    /// sides'), else the flow's watermark moved by the batch's maximum event time.
    pub fn next_watermark(
        &self,
        watermark: Option<&WatermarkSpec>,
        watermark_ms: i64,
        event_time: Option<&EventTimeStats>,
    ) -> i64 {
        match (self, watermark) {
            (Operator::StreamJoin(j), _) => j.next_watermark(watermark_ms),
            (_, Some(wm)) => {
                next_watermark(watermark_ms, event_time.map(|e| e.max_ms), wm.delay_ms)
            }
            (_, None) => 0,
        }
    }

    /// A stream-stream join: the left and right sides' own watermarks (`None` for a side
    /// without data yet, counting as 0); `None` for other operators.
    pub fn side_watermarks(&self) -> Option<Vec<Option<i64>>> {
        match self {
            Operator::StreamJoin(j) => Some(j.side_watermarks().to_vec()),
            _ => None,
        }
    }

    /// `stateOperators` of the progress record; `num_late` is the input rows the engine
    /// dropped behind the watermark before a stateful operator.
    pub fn metrics(&self, num_late: u64) -> Vec<StateOperatorMetrics> {
        match self {
            Operator::Stateless => Vec::new(),
            Operator::Stateful(op) => {
                let mut m = op.metrics();
                m.num_rows_dropped_by_watermark = num_late;
                vec![m]
            }
            Operator::StreamJoin(j) => vec![j.metrics()],
        }
    }

    /// Rows dropped behind the watermark by the batch (both sides for a join).
    pub fn num_rows_dropped(&self, num_late: u64) -> u64 {
        match self {
            Operator::StreamJoin(j) => j.metrics().num_rows_dropped_by_watermark,
            _ => num_late,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path of the one flow of a pipeline: `source` and `sink` are the bodies of
    /// its `[flow.source]` and `[flow.sink]`, `flow` its other keys.
    fn path_of(flow: &str, source: &str, sink: &str) -> BatchPath {
        let text = format!(
            "[[flow]]\nname = \"f\"\n{flow}\n[flow.source]\n{source}\n[flow.sink]\n{sink}\n"
        );
        let pipeline = crate::pipeline::parse(Path::new("/p/pipeline.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        BatchPath::of(&pipeline.flows[0])
    }

    const FILES: &str = "type = \"files\"\npath = \"landing\"\nformat = \"json\"\nschema = \"id BIGINT, ts TIMESTAMP\"";
    const DELTA_SINK: &str = "type = \"delta\"\npath = \"out\"";

    #[test]
    fn files_to_an_unpartitioned_delta_table_stream_and_skip_a_held_replay() {
        assert_eq!(
            path_of("", FILES, DELTA_SINK),
            BatchPath {
                execution: Execution::Streamed,
                replay: Replay::SkipsReadWhenHeld,
                commit: CommitPath::Append,
            }
        );
        // A row-wise query still streams.
        let path = path_of("where = \"id > 0\"\nselect = [\"id\"]", FILES, DELTA_SINK);
        assert_eq!(path.execution, Execution::Streamed);
    }

    #[test]
    fn what_needs_the_whole_batch_or_a_partition_runs_staged() {
        let partitioned = "type = \"delta\"\npath = \"out\"\npartition_by = [\"id\"]";
        let quarantined = format!("{FILES}\nbad_records_path = \"bad\"");
        let watermark = "watermark = { column = \"ts\", delay = \"1 minute\" }";
        let dedup = "watermark = { column = \"ts\", delay = \"1 minute\" }\ndrop_duplicates = [\"id\", \"ts\"]";
        for (flow, source, sink) in [
            ("", FILES, partitioned),
            ("", quarantined.as_str(), DELTA_SINK),
            (watermark, FILES, DELTA_SINK),
            (dedup, FILES, DELTA_SINK),
            (
                "",
                FILES,
                "type = \"delta\"\npath = \"out\"\nidempotent = false",
            ),
            ("", FILES, "type = \"memory\"\nname = \"m\""),
        ] {
            assert_eq!(
                path_of(flow, source, sink).execution,
                Execution::Staged,
                "{flow} / {source} / {sink}"
            );
        }
    }

    #[test]
    fn a_replay_whose_rows_feed_the_next_batch_is_read_again() {
        let watermark = "watermark = { column = \"ts\", delay = \"1 minute\" }";
        assert_eq!(path_of(watermark, FILES, DELTA_SINK).replay, Replay::Reads);
        let dedup = "watermark = { column = \"ts\", delay = \"1 minute\" }\ndrop_duplicates = [\"id\", \"ts\"]";
        assert_eq!(path_of(dedup, FILES, DELTA_SINK).replay, Replay::Reads);
        // A sink without a transaction log cannot say it holds the batch.
        let memory = "type = \"memory\"\nname = \"m\"";
        assert_eq!(path_of("", FILES, memory).replay, Replay::Reads);
        let not_idempotent = "type = \"delta\"\npath = \"out\"\nidempotent = false";
        assert_eq!(path_of("", FILES, not_idempotent).replay, Replay::Reads);
        // A Delta source re-derives the batch from its offsets.
        let delta_source = "type = \"delta\"\npath = \"upstream\"";
        assert_eq!(path_of("", delta_source, DELTA_SINK).replay, Replay::Reads);
        let merge = "type = \"delta_merge\"\npath = \"out\"\nkeys = [\"id\"]";
        assert_eq!(path_of("", FILES, merge).replay, Replay::SkipsReadWhenHeld);
    }

    #[test]
    fn the_commit_path_follows_the_sink_and_the_output_mode() {
        let merge = "type = \"delta_merge\"\npath = \"out\"\nkeys = [\"id\"]";
        let path = path_of("", FILES, merge);
        assert_eq!(
            (path.execution, path.commit),
            (Execution::Staged, CommitPath::Merge)
        );
        let complete =
            "group_by = [\"id\"]\naggregates = [\"count(*) AS n\"]\noutput_mode = \"complete\"";
        let path = path_of(complete, FILES, DELTA_SINK);
        assert_eq!(
            (path.execution, path.commit),
            (Execution::Staged, CommitPath::Overwrite)
        );
        let update =
            "group_by = [\"id\"]\naggregates = [\"count(*) AS n\"]\noutput_mode = \"update\"";
        assert_eq!(
            path_of(update, FILES, DELTA_SINK).commit,
            CommitPath::Append
        );
    }
}
