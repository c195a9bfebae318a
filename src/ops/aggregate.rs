//! Streaming grouped aggregation (Spark's `StateStoreSave`): `group_by` keys
//! (optionally one event-time window) and SQL aggregates, with state held as
//! DataFusion **partial aggregate states**, one row per open group, not raw rows.
//!
//! Planning (once, at build): DataFusion plans
//! `SELECT <group items>, <aggregates> FROM batch GROUP BY <group exprs>` over the
//! input (plus `window_start`/`window_end` when a window is declared) and runs its
//! analyzer (type coercion); weir takes the physical group expressions, the
//! [`AggregateFunctionExpr`]s and the final projection from that plan. So any
//! aggregate DataFusion provides works (count, sum, avg, min, max, approx_distinct,
//! count(DISTINCT ..), aggregates with FILTER, expressions over aggregates, ...).
//!
//! Per batch:
//!
//! 1. windows are assigned ([`WindowSpec::assign`]), group keys evaluated and encoded
//!    with Arrow's row format, and each row gets a batch-local group index;
//! 2. fresh groups accumulators first `merge_batch` the stored state of the groups the
//!    batch touches, then `update_batch` the batch's rows; `state(EmitTo::All)` gives the
//!    new partial states, which replace the stored ones ([`StateTable::upsert`]);
//! 3. output: a fresh accumulator merges the partial states of the groups to emit and
//!    `evaluate`s them; the final projection (aliases, expressions over aggregates) runs
//!    on that.
//!
//! Groups whose event-time key is closed by the watermark (window end ≤ watermark, or
//! event time < watermark when the key is the event-time column itself) are emitted and
//! dropped in append mode, dropped without output in update mode, and kept in complete
//! mode.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions, Scalar,
    UInt32Array,
};
use arrow::compute::kernels::cmp::{lt, lt_eq};
use arrow::compute::{cast, interleave, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::HashMap;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionState;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{EmitTo, Expr, GroupsAccumulator, LogicalPlan};
use datafusion::physical_expr::aggregate::{AggregateFunctionExpr, LoweredAggregateBuilder};
use datafusion::physical_expr::{GroupsAccumulatorAdapter, PhysicalExpr};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::stateful::{StatefulOperator, elapsed_ms};
use super::watermark::event_time_micros;
use super::window::{WindowSpec, split_alias};
use crate::error::{Error, Result};
use crate::records::StateOperatorMetrics;
use crate::spec::{OutputMode, StatefulSpec};
use crate::state::{Fingerprint, Slot, StateStore, StateTable, StoreOptions};

/// Spark's operator name for a streaming aggregation.
pub const OPERATOR_NAME: &str = "stateStoreSave";

/// One aggregate of the plan.
struct PlannedAggregate {
    expr: Arc<AggregateFunctionExpr>,
    args: Vec<Arc<dyn PhysicalExpr>>,
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// Its partial-state columns in the state schema.
    state_columns: Range<usize>,
}

impl PlannedAggregate {
    fn accumulator(&self) -> std::result::Result<Box<dyn GroupsAccumulator>, DataFusionError> {
        if self.expr.groups_accumulator_supported() {
            self.expr.create_groups_accumulator()
        } else {
            let expr = Arc::clone(&self.expr);
            Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                expr.create_accumulator()
            })))
        }
    }
}

/// Which group key carries event time, for closing groups by the watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventKey {
    /// Index of the window-end key: closed when `end <= watermark`.
    WindowEnd(usize),
    /// Index of the event-time key: closed when `event_time < watermark`.
    EventTime(usize),
}

/// A planned aggregation: the physical pieces and the schemas of state and output.
pub struct AggregatePlan {
    window: Option<WindowSpec>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    aggregates: Vec<PlannedAggregate>,
    /// Group keys then final aggregate values (input of `projection`).
    agg_output_schema: SchemaRef,
    projection: Vec<Arc<dyn PhysicalExpr>>,
    output_schema: SchemaRef,
    /// Group keys then the partial states of every aggregate.
    state_schema: SchemaRef,
    event_key: Option<EventKey>,
    fingerprint: Fingerprint,
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn normalize(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl AggregatePlan {
    /// Plans the aggregation of `spec` over `input_schema`; the error is a user-facing message.
    pub fn new(spec: &StatefulSpec, input_schema: &SchemaRef) -> std::result::Result<Self, String> {
        let mut window: Option<WindowSpec> = None;
        let (mut select, mut group, mut canonical) = (Vec::new(), Vec::new(), Vec::new());
        for item in &spec.group_by {
            if let Some(w) = WindowSpec::parse_item(item)? {
                for column in [w.start_column(), w.end_column()] {
                    if input_schema.field_with_name(&column).is_ok() {
                        return Err(format!(
                            "{} adds the column `{column}`, but the input already has one: name the window \
                             with `AS`, e.g. `{} AS w` (columns w_start, w_end)",
                            w.describe(),
                            w.describe()
                        ));
                    }
                    select.push(quote_ident(&column));
                    group.push(quote_ident(&column));
                }
                canonical.push(match &w.alias {
                    Some(a) => format!("{} AS {a}", w.describe()),
                    None => w.describe(),
                });
                window = Some(w);
            } else {
                // Each fragment parsed on its own; the query holds only their renderings.
                let (expr, _) = split_alias(item);
                let bad = |m: String| format!("group_by `{item}`: {m}");
                select.push(super::sql_fragment(item, true).map_err(bad)?);
                group.push(super::sql_fragment(&expr, false).map_err(bad)?);
                canonical.push(normalize(item));
            }
        }
        for a in &spec.aggregates {
            select
                .push(super::sql_fragment(a, true).map_err(|m| format!("aggregates `{a}`: {m}"))?);
        }
        let preagg_schema = match &window {
            Some(w) => w.output_schema(input_schema),
            None => input_schema.clone(),
        };
        let mut sql = format!("SELECT {} FROM batch", select.join(", "));
        if !group.is_empty() {
            sql.push_str(&format!(" GROUP BY {}", group.join(", ")));
        }
        let (state, plan) = plan_sql(&preagg_schema, &sql)?;
        let unsupported = |what: &str| {
            format!(
                "the aggregation `{sql}` plans to {what}; a streaming aggregation supports aggregate functions \
                 over grouping keys only (no HAVING, ORDER BY, LIMIT, window functions or subqueries)"
            )
        };
        let LogicalPlan::Projection(projection) = &plan else {
            return Err(unsupported(plan.display().to_string().as_str()));
        };
        let LogicalPlan::Aggregate(aggregate) = projection.input.as_ref() else {
            return Err(unsupported(projection.input.display().to_string().as_str()));
        };
        if aggregate
            .group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
        {
            return Err(unsupported("use grouping sets"));
        }
        let df_err = |e: DataFusionError| format!("planning `{sql}`: {e}");
        let input_df = aggregate.input.schema();
        let group_exprs = aggregate
            .group_expr
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), input_df))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(df_err)?;
        let num_keys = group_exprs.len();
        let agg_fields = aggregate.schema.fields();
        let mut state_fields: Vec<Field> = agg_fields[..num_keys]
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let mut agg_output_fields = state_fields.clone();
        let mut aggregates = Vec::new();
        let planning = PhysicalPlanningContext::default();
        for (i, e) in aggregate.aggr_expr.iter().enumerate() {
            let lowered = LoweredAggregateBuilder::new(
                e,
                input_df,
                input_df.as_arrow(),
                state.execution_props(),
                &planning,
            )
            .build()
            .map_err(df_err)?;
            let expr = lowered.aggregate;
            let start = state_fields.len();
            for f in expr.state_fields().map_err(df_err)? {
                let mut name = f.name().clone();
                while state_fields.iter().any(|s| s.name() == &name) {
                    name.push('#');
                }
                state_fields.push(f.as_ref().clone().with_name(name).with_nullable(true));
            }
            agg_output_fields.push(Field::new(
                agg_fields[num_keys + i].name(),
                expr.field().data_type().clone(),
                true,
            ));
            aggregates.push(PlannedAggregate {
                args: expr.expressions(),
                filter: lowered.filter,
                state_columns: start..state_fields.len(),
                expr,
            });
        }
        let projection_exprs = projection
            .expr
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), &aggregate.schema))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(df_err)?;
        let key_column = |e: &Expr, name: &str| matches!(e, Expr::Column(c) if c.name == name);
        let event_key = spec.watermark.as_ref().and_then(|wm| {
            let window_end = window
                .as_ref()
                .filter(|w| w.column == wm.column)
                .and_then(|w| {
                    aggregate
                        .group_expr
                        .iter()
                        .position(|e| key_column(e, &w.end_column()))
                })
                .map(EventKey::WindowEnd);
            window_end.or_else(|| {
                aggregate
                    .group_expr
                    .iter()
                    .position(|e| key_column(e, &wm.column))
                    .map(EventKey::EventTime)
            })
        });
        let fingerprint = Fingerprint::default()
            .with("operator", OPERATOR_NAME)
            .with("group_by", canonical.join(", "))
            .with(
                "aggregates",
                spec.aggregates
                    .iter()
                    .map(|a| normalize(a))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .with("output_mode", spec.output_mode.as_str());
        Ok(AggregatePlan {
            window,
            group_exprs,
            aggregates,
            agg_output_schema: Arc::new(Schema::new(agg_output_fields)),
            projection: projection_exprs,
            output_schema: Arc::new(projection.schema.as_arrow().clone()),
            state_schema: Arc::new(Schema::new(state_fields)),
            event_key,
            fingerprint,
        })
    }

    /// Schema of the rows the aggregation emits.
    pub fn output_schema(&self) -> &SchemaRef {
        &self.output_schema
    }

    /// Schema of the stored state: group keys, then partial aggregate states.
    pub fn state_schema(&self) -> &SchemaRef {
        &self.state_schema
    }

    pub fn num_keys(&self) -> usize {
        self.group_exprs.len()
    }
}

/// Plans `sql` over a table `batch` with `schema` and runs the analyzer (type coercion).
fn plan_sql(
    schema: &SchemaRef,
    sql: &str,
) -> std::result::Result<(SessionState, LogicalPlan), String> {
    let mut config = SessionConfig::new().with_target_partitions(1);
    config.options_mut().sql_parser.enable_ident_normalization = false;
    let ctx = SessionContext::new_with_config(config);
    let err = |e: DataFusionError| format!("planning `{sql}`: {e}");
    let table =
        datafusion::datasource::MemTable::try_new(schema.clone(), vec![vec![]]).map_err(err)?;
    ctx.register_table("batch", Arc::new(table)).map_err(err)?;
    let state = ctx.state();
    // Planning a query over an in-memory table does no I/O: the future completes
    // without a runtime.
    let plan = futures::executor::block_on(state.create_logical_plan(sql)).map_err(err)?;
    let plan = state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})
        .map_err(err)?;
    Ok((state, plan))
}

/// The streaming aggregation operator (see the module docs).
pub struct AggregateOperator {
    flow: String,
    mode: OutputMode,
    input_schema: SchemaRef,
    plan: AggregatePlan,
    store: StateStore,
    table: StateTable,
    /// The table holds changes of a batch not committed yet.
    dirty: bool,
    /// Input rows of the current batch left out for a null window time.
    rows_without_event_time: u64,
    metrics: StateOperatorMetrics,
}

impl AggregateOperator {
    /// Plans the aggregation and loads state version `load_version` from `state_dir`.
    pub fn new(
        spec: &StatefulSpec,
        input_schema: &SchemaRef,
        state_dir: &Path,
        load_version: Option<u64>,
    ) -> Result<Self> {
        let plan = AggregatePlan::new(spec, input_schema).map_err(|message| Error::Plan {
            flow: spec.flow.clone(),
            message,
        })?;
        let (store, table) = StateStore::open(
            state_dir,
            OPERATOR_NAME,
            &plan.fingerprint,
            plan.state_schema.clone(),
            plan.num_keys(),
            load_version,
            StoreOptions::default(),
        )?;
        let mut op = AggregateOperator {
            flow: spec.flow.clone(),
            mode: spec.output_mode,
            input_schema: input_schema.clone(),
            plan,
            store,
            table,
            dirty: false,
            rows_without_event_time: 0,
            metrics: StateOperatorMetrics {
                operator_name: OPERATOR_NAME.to_string(),
                num_shuffle_partitions: 1,
                num_state_store_instances: 1,
                ..Default::default()
            },
        };
        op.refresh_metrics();
        Ok(op)
    }

    fn sql_error(&self, context: &str, source: DataFusionError) -> Error {
        Error::Sql {
            flow: self.flow.clone(),
            context: context.to_string(),
            source: Box::new(source),
        }
    }

    fn arrow_error(&self, context: &str, source: arrow::error::ArrowError) -> Error {
        Error::Arrow {
            context: format!("flow {}: {context}", self.flow),
            source,
        }
    }

    fn eval(&self, expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
        expr.evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(|e| self.sql_error("evaluating the aggregation", e))
    }

    /// Takes the input schema's columns from `batch` by name (extra columns are ignored,
    /// missing nullable ones are null).
    fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        if batch.schema_ref() == &self.input_schema {
            return Ok(batch.clone());
        }
        let mut columns = Vec::with_capacity(self.input_schema.fields().len());
        for field in self.input_schema.fields() {
            let column = match batch.column_by_name(field.name()) {
                Some(c) if c.data_type() == field.data_type() => c.clone(),
                Some(c) => cast(c, field.data_type())
                    .map_err(|e| self.arrow_error(&format!("column `{}`", field.name()), e))?,
                None if field.is_nullable() => {
                    arrow::array::new_null_array(field.data_type(), batch.num_rows())
                }
                None => {
                    return Err(Error::Plan {
                        flow: self.flow.clone(),
                        message: format!(
                            "the column `{}` the aggregation reads is missing from a batch",
                            field.name()
                        ),
                    });
                }
            };
            columns.push(column);
        }
        RecordBatch::try_new_with_options(
            self.input_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )
        .map_err(|e| self.arrow_error("conforming a batch to the input schema", e))
    }

    /// Folds the input into the state; returns the new state rows of the touched groups.
    fn update(&mut self, input: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
        // Batch-local group ids 0..n: a group in state is found by one hash lookup and
        // mapped through `local_of_row`; a new group gets its key bytes allocated once.
        let mut local_of_row: Vec<u32> = Vec::new();
        let mut stored_rows: Vec<(usize, usize)> = Vec::new(); // (local id, state row)
        let mut new_keys: HashMap<Box<[u8]>, usize> = HashMap::default();
        let mut first_seen: Vec<(usize, usize)> = Vec::new(); // (batch, row) per local id
        let mut prepared: Vec<(RecordBatch, Vec<ArrayRef>, Vec<usize>)> = Vec::new();
        for batch in input {
            if batch.num_rows() == 0 {
                continue;
            }
            let batch = self.conform(&batch)?;
            let batch = match &self.plan.window {
                Some(w) => {
                    let (assigned, nulls) = w.assign(&batch)?;
                    self.rows_without_event_time += nulls as u64;
                    assigned
                }
                None => batch,
            };
            if batch.num_rows() == 0 {
                continue;
            }
            let keys = self
                .plan
                .group_exprs
                .iter()
                .map(|e| self.eval(e, &batch))
                .map(|k| k.map(|k| crate::state::table::normalize_float_key(&k)))
                .collect::<Result<Vec<_>>>()?;
            let encoded = self.table.key_rows(&keys)?;
            let b = prepared.len();
            let mut indices = Vec::with_capacity(batch.num_rows());
            for i in 0..batch.num_rows() {
                let key = encoded.get(i);
                let next = first_seen.len();
                let id = match self.table.lookup(key) {
                    Some(p) => {
                        if local_of_row.is_empty() {
                            local_of_row = vec![u32::MAX; self.table.len()];
                        }
                        if local_of_row[p] == u32::MAX {
                            local_of_row[p] = u32::try_from(next).unwrap_or(u32::MAX);
                            stored_rows.push((next, p));
                            first_seen.push((b, i));
                        }
                        local_of_row[p] as usize
                    }
                    None => match new_keys.get(key) {
                        Some(&id) => id,
                        None => {
                            new_keys.insert(Box::from(key), next);
                            first_seen.push((b, i));
                            next
                        }
                    },
                };
                indices.push(id);
            }
            prepared.push((batch, keys, indices));
        }
        let n = first_seen.len();
        if n == 0 {
            return Ok(None);
        }
        let mut accumulators = self
            .plan
            .aggregates
            .iter()
            .map(|a| a.accumulator())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.sql_error("creating accumulators", e))?;
        // Stored partial states first, then the new rows (order-sensitive aggregates see
        // the earlier rows first).
        if !stored_rows.is_empty() {
            let ids: Vec<usize> = stored_rows.iter().map(|(id, _)| *id).collect();
            let positions: UInt32Array = stored_rows
                .iter()
                .map(|(_, p)| u32::try_from(*p).unwrap_or(u32::MAX))
                .collect();
            for (agg, acc) in self.plan.aggregates.iter().zip(accumulators.iter_mut()) {
                let stored = self.table.data().columns()[agg.state_columns.clone()]
                    .iter()
                    .map(|c| take(c.as_ref(), &positions, None))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| self.arrow_error("reading stored aggregate states", e))?;
                acc.merge_batch(&stored, &ids, n)
                    .map_err(|e| self.sql_error("merging stored aggregate states", e))?;
            }
        }
        for (batch, _, indices) in &prepared {
            for (agg, acc) in self.plan.aggregates.iter().zip(accumulators.iter_mut()) {
                let values = agg
                    .args
                    .iter()
                    .map(|e| self.eval(e, batch))
                    .collect::<Result<Vec<_>>>()?;
                let filter = match &agg.filter {
                    Some(f) => {
                        let mask = self.eval(f, batch)?;
                        let mask = mask.as_boolean_opt().cloned().ok_or_else(|| Error::Plan {
                            flow: self.flow.clone(),
                            message: "an aggregate FILTER is not a boolean expression".into(),
                        })?;
                        Some(if mask.null_count() > 0 {
                            arrow::compute::prep_null_mask_filter(&mask)
                        } else {
                            mask
                        })
                    }
                    None => None,
                };
                acc.update_batch(&values, indices, filter.as_ref(), n)
                    .map_err(|e| self.sql_error("updating aggregates", e))?;
            }
        }
        // Group keys: the evaluated key values of each group's first row.
        let mut columns = Vec::with_capacity(self.plan.state_schema.fields().len());
        for k in 0..self.plan.num_keys() {
            let sources: Vec<&dyn Array> = prepared
                .iter()
                .map(|(_, keys, _)| keys[k].as_ref())
                .collect();
            columns.push(
                interleave(&sources, &first_seen)
                    .map_err(|e| self.arrow_error("collecting group keys", e))?,
            );
        }
        for acc in accumulators.iter_mut() {
            columns.extend(
                acc.state(EmitTo::All)
                    .map_err(|e| self.sql_error("reading aggregate states", e))?,
            );
        }
        let updates = RecordBatch::try_new_with_options(
            self.plan.state_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )
        .map_err(|e| self.arrow_error("building aggregate state rows", e))?;
        let mut slots: Vec<Option<Slot>> = vec![None; n];
        for (id, p) in stored_rows {
            slots[id] = Some(Slot::At(p));
        }
        for id in new_keys.into_values() {
            slots[id] = Some(Slot::New);
        }
        let slots = slots
            .into_iter()
            .map(|s| s.unwrap_or(Slot::At(usize::MAX)))
            .collect();
        self.table.upsert_slots(&updates, slots)?;
        Ok(Some(updates))
    }

    /// Final values of the groups in `rows` (state rows), after the flow's projection.
    fn finalize(&self, rows: &RecordBatch) -> Result<Vec<RecordBatch>> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(Vec::new());
        }
        let ids: Vec<usize> = (0..n).collect();
        let mut columns: Vec<ArrayRef> = rows.columns()[..self.plan.num_keys()].to_vec();
        for agg in &self.plan.aggregates {
            let mut acc = agg
                .accumulator()
                .map_err(|e| self.sql_error("creating accumulators", e))?;
            acc.merge_batch(&rows.columns()[agg.state_columns.clone()], &ids, n)
                .map_err(|e| self.sql_error("merging aggregate states", e))?;
            columns.push(
                acc.evaluate(EmitTo::All)
                    .map_err(|e| self.sql_error("evaluating aggregates", e))?,
            );
        }
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        let aggregated = RecordBatch::try_new_with_options(
            self.plan.agg_output_schema.clone(),
            columns,
            &options,
        )
        .map_err(|e| self.arrow_error("building aggregate results", e))?;
        let out = self
            .plan
            .projection
            .iter()
            .map(|e| self.eval(e, &aggregated))
            .collect::<Result<Vec<_>>>()?;
        let batch =
            RecordBatch::try_new_with_options(self.plan.output_schema.clone(), out, &options)
                .map_err(|e| self.arrow_error("building aggregation output", e))?;
        Ok(vec![batch])
    }

    /// Which state rows the watermark closes (`None` when nothing can close).
    fn closed(&self, watermark_ms: i64) -> Result<Option<BooleanArray>> {
        if self.mode == OutputMode::Complete {
            return Ok(None);
        }
        let Some(key) = self.plan.event_key else {
            return Ok(None);
        };
        let watermark_us = Scalar::new(Int64Array::from(vec![watermark_ms.saturating_mul(1000)]));
        let data = self.table.data();
        let mask = match key {
            EventKey::WindowEnd(i) => {
                let end = cast(data.column(i), &DataType::Int64)
                    .map_err(|e| self.arrow_error("reading window ends", e))?;
                lt_eq(&end, &watermark_us)
            }
            EventKey::EventTime(i) => lt(&event_time_micros(data.column(i))?, &watermark_us),
        }
        .map_err(|e| self.arrow_error("comparing with the watermark", e))?;
        Ok(Some(mask))
    }

    fn refresh_metrics(&mut self) {
        self.metrics.num_rows_total = self.table.len() as u64;
        self.metrics.memory_used_bytes = self.table.memory_size() as u64;
        self.metrics.custom_metrics.insert(
            "stateOnCurrentVersionSizeBytes".into(),
            i64::try_from(self.store.current_version_size_bytes()).unwrap_or(i64::MAX),
        );
    }

    fn reload(&mut self) -> Result<()> {
        self.table = match self.store.version() {
            Some(v) => self.store.load(v)?,
            None => StateTable::new(self.plan.state_schema.clone(), self.plan.num_keys())?,
        };
        Ok(())
    }
}

impl StatefulOperator for AggregateOperator {
    fn name(&self) -> &str {
        OPERATOR_NAME
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
            self.reload()?;
        }
        self.dirty = true;
        self.rows_without_event_time = 0;
        let t_update = Instant::now();
        let updated = self.update(input)?;
        let mut output = Vec::new();
        if self.mode == OutputMode::Update
            && let Some(rows) = &updated
        {
            output.extend(self.finalize(rows)?);
        }
        let updates_ms = elapsed_ms(t_update);
        let t_remove = Instant::now();
        let removed = match self.closed(watermark_ms)? {
            Some(mask) => self.table.remove_where(&mask)?,
            None => RecordBatch::new_empty(self.plan.state_schema.clone()),
        };
        match self.mode {
            OutputMode::Append => output.extend(self.finalize(&removed)?),
            OutputMode::Complete => output.extend(self.finalize(self.table.data())?),
            OutputMode::Update => {}
        }
        self.metrics.num_rows_updated = updated.as_ref().map_or(0, |u| u.num_rows() as u64);
        self.metrics.custom_metrics.insert(
            "numRowsWithoutEventTime".into(),
            i64::try_from(self.rows_without_event_time).unwrap_or(i64::MAX),
        );
        self.metrics.num_rows_removed = removed.num_rows() as u64;
        self.metrics.all_updates_time_ms = updates_ms;
        self.metrics.all_removals_time_ms = elapsed_ms(t_remove);
        self.metrics.num_rows_total = self.table.len() as u64;
        self.metrics.memory_used_bytes = self.table.memory_size() as u64;
        Ok(output)
    }

    fn commit(&mut self, batch_id: u64) -> Result<()> {
        let t = Instant::now();
        let info = self.store.commit(batch_id, &mut self.table)?;
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

    fn needs_no_data_batch(&self, next_watermark_ms: i64) -> bool {
        match self.closed(next_watermark_ms) {
            Ok(Some(mask)) => mask.true_count() > 0,
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot decide whether a no-data batch is needed");
                false
            }
        }
    }

    fn drops_late_rows(&self) -> bool {
        self.mode != OutputMode::Complete
    }

    fn output_schema(&self) -> SchemaRef {
        self.plan.output_schema.clone()
    }
}

/// Batch `batch_id` must follow the loaded/committed state version.
pub(crate) fn check_batch_id(dir: &Path, version: Option<u64>, batch_id: u64) -> Result<()> {
    match version {
        Some(v) if batch_id != v + 1 => Err(Error::Checkpoint {
            path: dir.to_path_buf(),
            message: format!(
                "batch {batch_id} cannot run against state version {v}: the state must be at version {}",
                batch_id.saturating_sub(1)
            ),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ops::stateful::build;
    use crate::ops::stateful::sim::{self, Sim, datafusion, events, fixture, ms, rows, synthetic};
    use crate::spec::WatermarkSpec;

    const AGGS: [&str; 7] = [
        "count(*) AS n",
        "sum(v) AS total",
        "avg(v) AS mean",
        "min(v) AS lo",
        "max(v) AS hi",
        "approx_distinct(v) AS distinct_v",
        "count(DISTINCT v) AS exact_distinct",
    ];
    const DF_AGGS: &str = "count(*) AS n, sum(v) AS total, avg(v) AS mean, min(v) AS lo, max(v) AS hi, \
                           approx_distinct(v) AS distinct_v, count(DISTINCT v) AS exact_distinct";

    fn spec(window: &str, mode: OutputMode, delay: &str) -> StatefulSpec {
        StatefulSpec {
            flow: "test".into(),
            watermark: Some(WatermarkSpec::new("ts", delay).unwrap()),
            group_by: vec!["k".into(), window.into()],
            aggregates: AGGS.iter().map(|s| s.to_string()).collect(),
            output_mode: mode,
            ..Default::default()
        }
    }

    /// The batch query over all on-time rows: tumbling or sliding windows in µs.
    fn expected(sim: &Sim, size_s: i64, slide_s: i64) -> Vec<RecordBatch> {
        let (size, slide) = (size_s * 1_000_000, slide_s * 1_000_000);
        let copies = (size + slide - 1) / slide;
        let offsets: Vec<String> = (0..copies).map(|i| format!("({i})")).collect();
        let sql = format!(
            "SELECT k, s AS window_start, s + {size} AS window_end, {DF_AGGS} FROM ( \
               SELECT k, v, t, (t - ((t % {slide}) + {slide}) % {slide}) - o.i * {slide} AS s \
               FROM (SELECT k, v, CAST(ts AS BIGINT) AS t FROM t) CROSS JOIN (VALUES {}) AS o(i)) \
             WHERE t < s + {size} GROUP BY k, s",
            offsets.join(", ")
        );
        datafusion(&sim::schema(), &sim.on_time, &sql)
    }

    /// The last emitted value per group (update mode: groups are re-emitted when they change).
    fn latest_per_group(batches: &[RecordBatch]) -> Vec<String> {
        let mut latest: BTreeMap<String, String> = BTreeMap::new();
        for b in batches {
            for row in rows(std::slice::from_ref(b)) {
                let key: Vec<&str> = row.split('|').take(3).collect();
                latest.insert(key.join("|"), row.clone());
            }
        }
        latest.into_values().collect()
    }

    fn window_end_column(batch: &RecordBatch) -> Vec<i64> {
        let end = cast(
            batch.column_by_name("window_end").unwrap(),
            &DataType::Int64,
        )
        .unwrap();
        end.as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .to_vec()
    }

    fn run_synthetic(
        window: &str,
        mode: OutputMode,
        restart_every: usize,
    ) -> (Sim, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::new(spec(window, mode, "10 seconds"), sim::schema(), dir.path());
        for (i, batch) in synthetic(12, 40, 7).into_iter().enumerate() {
            if restart_every > 0 && i % restart_every == 0 {
                sim.restart();
            }
            sim.trigger(vec![batch]);
            // The source goes idle for a while: no new rows, the watermark stays.
            if i == 5 {
                sim.trigger(Vec::new());
            }
        }
        (sim, dir)
    }

    fn check_append(size_s: i64, slide_s: i64, window: &str) {
        let (sim, _dir) = run_synthetic(window, OutputMode::Append, 4);
        assert!(
            sim.dropped > 0,
            "the synthetic input has rows behind the watermark"
        );
        let emitted = rows(&sim.all_output());
        let mut unique = emitted.clone();
        unique.dedup();
        assert_eq!(unique.len(), emitted.len(), "a window was emitted twice");
        // Every window the final watermark closed, exactly as the batch query computes it.
        let final_wm_us = sim.watermark_ms * 1000;
        let all = expected(&sim, size_s, slide_s);
        let closed: Vec<String> = rows(&all)
            .into_iter()
            .filter(|r| r.split('|').nth(2).unwrap().parse::<i64>().unwrap() <= final_wm_us)
            .collect();
        assert!(closed.len() > 20, "{} closed windows", closed.len());
        assert_eq!(emitted, closed);
        // Each window was emitted in the first batch whose watermark reached its end.
        for run in &sim.runs {
            for b in &run.output {
                for end in window_end_column(b) {
                    assert!(end <= run.watermark_ms * 1000);
                }
            }
        }
        // State holds only open windows.
        let open = rows(&all).len() - closed.len();
        assert_eq!(
            sim.runs.last().unwrap().metrics.num_rows_total as usize,
            open
        );
    }

    #[test]
    fn tumbling_append_matches_batch_query() {
        check_append(10, 10, "window(ts, '10 seconds')");
    }

    #[test]
    fn sliding_append_matches_batch_query() {
        check_append(10, 5, "window(ts, '10 seconds', '5 seconds')");
    }

    fn check_update(size_s: i64, slide_s: i64, window: &str) {
        let (sim, _dir) = run_synthetic(window, OutputMode::Update, 5);
        let emitted = latest_per_group(&sim.all_output());
        assert!(emitted.len() > 20, "{} groups", emitted.len());
        assert_eq!(emitted, rows(&expected(&sim, size_s, slide_s)));
        // A group is emitted only in batches that changed it: no-data batches emit nothing.
        assert!(
            sim.runs
                .iter()
                .filter(|r| r.no_data)
                .all(|r| r.output.iter().all(|b| b.num_rows() == 0))
        );
        assert!(
            sim.runs.iter().any(|r| r.metrics.num_rows_removed > 0),
            "closed windows are evicted"
        );
    }

    #[test]
    fn tumbling_update_matches_batch_query() {
        check_update(10, 10, "window(ts, '10 seconds')");
    }

    #[test]
    fn sliding_update_matches_batch_query() {
        check_update(10, 5, "window(ts, '10 seconds', '5 seconds')");
    }

    fn check_complete(size_s: i64, slide_s: i64, window: &str) {
        let (sim, _dir) = run_synthetic(window, OutputMode::Complete, 3);
        let last = sim.runs.last().unwrap();
        let expected = rows(&expected(&sim, size_s, slide_s));
        assert!(expected.len() > 20, "{} groups", expected.len());
        assert_eq!(rows(&last.output), expected);
        assert_eq!(sim.dropped, 0, "complete mode keeps late rows (as Spark)");
        assert!(sim.runs.iter().all(|r| r.metrics.num_rows_removed == 0));
    }

    #[test]
    fn tumbling_complete_matches_batch_query() {
        check_complete(10, 10, "window(ts, '10 seconds')");
    }

    #[test]
    fn sliding_complete_matches_batch_query() {
        check_complete(10, 5, "window(ts, '10 seconds', '5 seconds')");
    }

    #[test]
    fn update_without_window_and_expressions_over_aggregates() {
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            flow: "test".into(),
            group_by: vec!["upper(k) AS key".into()],
            aggregates: vec![
                "sum(v) * 2 AS double_total".into(),
                "count(*) FILTER (WHERE v > 50) AS big".into(),
            ],
            output_mode: OutputMode::Update,
            ..Default::default()
        };
        let mut sim = Sim::new(spec, sim::schema(), dir.path());
        let input = synthetic(4, 30, 3);
        for (i, b) in input.iter().enumerate() {
            if i == 2 {
                sim.restart();
            }
            sim.trigger(vec![b.clone()]);
        }
        let expected = datafusion(
            &sim::schema(),
            &input,
            "SELECT upper(k) AS key, sum(v) * 2 AS double_total, count(*) FILTER (WHERE v > 50) AS big \
             FROM t GROUP BY upper(k)",
        );
        let mut latest: BTreeMap<String, String> = BTreeMap::new();
        for row in sim.runs.iter().flat_map(|r| rows(&r.output)) {
            latest.insert(row.split('|').next().unwrap().to_string(), row);
        }
        assert_eq!(latest.into_values().collect::<Vec<_>>(), rows(&expected));
        assert_eq!(sim.op.output_schema().field(0).name(), "key");
    }

    #[test]
    fn b19_event_at_watermark_and_at_window_end() {
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            flow: "b19".into(),
            watermark: Some(WatermarkSpec::new("ts", "0 s").unwrap()),
            group_by: vec!["window(ts, '10 seconds')".into()],
            aggregates: vec!["count(*) AS count".into()],
            output_mode: OutputMode::Append,
            ..Default::default()
        };
        let mut sim = Sim::new(spec, sim::schema(), dir.path());
        // The rows of tests/fixtures/cases/B19, landed step by step.
        sim.trigger(fixture("B19", "step1", &sim::schema()));
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:00:05Z"));
        assert!(sim.all_output().iter().all(|b| b.num_rows() == 0));

        sim.trigger(fixture("B19", "step2", &sim::schema()));
        assert_eq!(
            sim.dropped, 0,
            "an event equal to the watermark is not late"
        );
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:00:10Z"));
        let w = |t: &str| ms(t) * 1000;
        assert_eq!(
            rows(&sim.all_output()),
            vec![format!(
                "{}|{}|2",
                w("2024-05-01T10:00:00Z"),
                w("2024-05-01T10:00:10Z")
            )]
        );
        let emitted_by = sim
            .runs
            .iter()
            .rev()
            .find(|r| r.output.iter().any(|b| b.num_rows() > 0))
            .unwrap();
        assert!(
            emitted_by.no_data,
            "emitted by the no-data batch after step 2"
        );

        let before = sim.runs.len();
        sim.trigger(fixture("B19", "step3", &sim::schema()));
        assert_eq!(sim.dropped, 1, "10:00:09.999 < watermark 10:00:10 is late");
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:00:25Z"));
        assert_eq!(
            rows(
                &sim.runs[before..]
                    .iter()
                    .flat_map(|r| r.output.clone())
                    .collect::<Vec<_>>()
            ),
            vec![format!(
                "{}|{}|1",
                w("2024-05-01T10:00:10Z"),
                w("2024-05-01T10:00:20Z")
            )]
        );
        let last = &sim.runs.last().unwrap().metrics;
        assert_eq!(last.num_rows_total, 1, "[10:00:20, 10:00:30) stays open");
    }

    #[test]
    fn b20_idle_source_and_run_once_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            flow: "b20".into(),
            watermark: Some(WatermarkSpec::new("ts", "5 seconds").unwrap()),
            group_by: vec!["window(ts, '10 seconds')".into()],
            aggregates: vec!["sum(v) AS sum".into()],
            output_mode: OutputMode::Append,
            ..Default::default()
        };
        let w = |t: &str| ms(t) * 1000;
        let mut sim = Sim::new(spec, sim::schema(), dir.path());
        // Run 1: the data batch, then a no-data batch emits [10:00:00, 10:00:10).
        sim.trigger(fixture("B20", "step1", &sim::schema()));
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:00:15Z"));
        assert_eq!(sim.runs.len(), 2);
        assert!(sim.runs[1].no_data);
        assert_eq!(
            rows(&sim.runs[1].output),
            vec![format!(
                "{}|{}|1",
                w("2024-05-01T10:00:00Z"),
                w("2024-05-01T10:00:10Z")
            )]
        );
        // Run 2: a new process, nothing new: the restored watermark (commits/N) closes nothing.
        sim.restart();
        sim.drain();
        assert_eq!(sim.runs.len(), 2, "no batch runs");
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:00:15Z"));
        // Run 3.
        sim.restart();
        sim.trigger(fixture("B20", "step3", &sim::schema()));
        assert_eq!(sim.watermark_ms, ms("2024-05-01T10:00:36Z"));
        assert_eq!(
            rows(&sim.all_output()),
            vec![
                format!(
                    "{}|{}|1",
                    w("2024-05-01T10:00:00Z"),
                    w("2024-05-01T10:00:10Z")
                ),
                format!(
                    "{}|{}|2",
                    w("2024-05-01T10:00:20Z"),
                    w("2024-05-01T10:00:30Z")
                ),
            ]
        );
        assert_eq!(
            sim.runs.last().unwrap().metrics.num_rows_total,
            1,
            "[10:00:40, 10:00:50) open"
        );
        let batches: Vec<(u64, bool)> = sim.runs.iter().map(|r| (r.batch_id, r.no_data)).collect();
        assert_eq!(batches, vec![(0, false), (1, true), (2, false), (3, true)]);
    }

    #[test]
    fn append_on_the_event_time_column_and_global_update() {
        // The event-time column itself as the key: a group is final once ts < watermark.
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            flow: "ts-key".into(),
            watermark: Some(WatermarkSpec::new("ts", "0 s").unwrap()),
            group_by: vec!["ts".into()],
            aggregates: vec!["sum(v) AS total".into()],
            output_mode: OutputMode::Append,
            ..Default::default()
        };
        let mut sim = Sim::new(spec, sim::schema(), dir.path());
        sim.trigger(vec![events(&[
            ("a", Some("2024-05-01T10:00:00Z"), 1),
            ("b", Some("2024-05-01T10:00:00Z"), 2),
            ("a", Some("2024-05-01T10:00:01Z"), 4),
        ])]);
        assert_eq!(
            rows(&sim.all_output()),
            vec![format!("{}|3", ms("2024-05-01T10:00:00Z") * 1000)],
            "10:00:00 < watermark 10:00:01 is final; 10:00:01 is not"
        );

        // No group_by: one global group, no key columns.
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            flow: "global".into(),
            aggregates: vec!["count(*) AS n".into(), "sum(v) AS total".into()],
            output_mode: OutputMode::Update,
            ..Default::default()
        };
        let mut sim = Sim::new(spec, sim::schema(), dir.path());
        sim.trigger(vec![events(&[("a", None, 1), ("b", None, 2)])]);
        sim.restart();
        sim.trigger(vec![events(&[("c", None, 3)])]);
        assert_eq!(
            rows(&sim.runs.last().unwrap().output),
            vec!["3|6".to_string()]
        );
        assert_eq!(sim.op.metrics().num_rows_total, 1);
    }

    #[test]
    fn rows_without_a_window_time_are_counted() {
        // Update mode without a watermark: nothing splits the input by event time, so the
        // window assignment leaves out null times and reports them.
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            flow: "nulls".into(),
            group_by: vec!["window(ts, '10 seconds')".into()],
            aggregates: vec!["count(*) AS n".into()],
            output_mode: OutputMode::Update,
            ..Default::default()
        };
        let mut op = build(&spec, &sim::schema(), dir.path(), None).unwrap();
        let out = op
            .process(
                0,
                vec![events(&[
                    ("a", Some("2024-05-01T10:00:00Z"), 1),
                    ("b", None, 2),
                ])],
                0,
            )
            .unwrap();
        assert_eq!(rows(&out).len(), 1);
        assert_eq!(op.metrics().custom_metrics["numRowsWithoutEventTime"], 1);
    }

    #[test]
    fn replaying_an_uncommitted_batch_gives_the_same_output_and_state() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec("window(ts, '10 seconds')", OutputMode::Append, "10 seconds");
        let input = synthetic(6, 30, 11);
        let mut op = build(&spec, &sim::schema(), dir.path(), None).unwrap();
        let mut wm = 0;
        for (n, b) in input[..5].iter().enumerate() {
            op.process(n as u64, vec![b.clone()], wm).unwrap();
            op.commit(n as u64).unwrap();
            wm += 20_000;
        }
        // Batch 5 runs and writes state version 5, but the process dies before commits/5.
        let first = op.process(5, vec![input[5].clone()], wm).unwrap();
        op.commit(5).unwrap();
        let first_state = op.metrics().num_rows_total;
        // Restart from version 4: replay batch 5.
        let mut op = build(&spec, &sim::schema(), dir.path(), Some(4)).unwrap();
        let second = op.process(5, vec![input[5].clone()], wm).unwrap();
        op.commit(5).unwrap();
        assert_eq!(first, second, "identical output, in the same order");
        assert_eq!(op.metrics().num_rows_total, first_state);
        let a = build(&spec, &sim::schema(), dir.path(), Some(5)).unwrap();
        assert_eq!(a.metrics().num_rows_total, first_state);
        // A retry of a batch in the same process (no commit in between) does not count twice.
        let mut op = build(&spec, &sim::schema(), dir.path(), Some(4)).unwrap();
        op.process(5, vec![input[5].clone()], wm).unwrap();
        let again = op.process(5, vec![input[5].clone()], wm).unwrap();
        assert_eq!(again, first);
        // Batch ids must follow the state version.
        assert!(op.process(7, Vec::new(), wm).is_err());
    }

    #[test]
    fn restart_with_a_changed_spec_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let original = spec("window(ts, '10 seconds')", OutputMode::Append, "10 seconds");
        let mut op = build(&original, &sim::schema(), dir.path(), None).unwrap();
        op.process(0, synthetic(1, 10, 1), 0).unwrap();
        op.commit(0).unwrap();
        let mut changed = original.clone();
        changed.group_by = vec!["k".into(), "window(ts, '1 minute')".into()];
        let err = build(&changed, &sim::schema(), dir.path(), Some(0))
            .err()
            .unwrap();
        let text = err.to_string();
        assert_eq!(err.kind(), crate::error::ErrorKind::CheckpointIncompatible);
        assert!(
            text.contains(
                "group_by changed from `k, window(ts, '10 seconds')` to `k, window(ts, '1 minute')`"
            ),
            "{text}"
        );
        assert!(
            text.contains("revert the change") && text.contains("new checkpoint"),
            "{text}"
        );
        let mut changed = original.clone();
        changed.aggregates.pop();
        let text = build(&changed, &sim::schema(), dir.path(), Some(0))
            .err()
            .unwrap()
            .to_string();
        assert!(text.contains("aggregates changed"), "{text}");
        // The watermark delay may change (as in Spark).
        let mut delay = original.clone();
        delay.watermark = Some(WatermarkSpec::new("ts", "1 minute").unwrap());
        assert!(build(&delay, &sim::schema(), dir.path(), Some(0)).is_ok());
    }

    #[test]
    fn memory_follows_open_windows_not_rows_seen() {
        let dir = tempfile::tempdir().unwrap();
        let spec = StatefulSpec {
            flow: "mem".into(),
            watermark: Some(WatermarkSpec::new("ts", "10 seconds").unwrap()),
            group_by: vec!["k".into(), "window(ts, '10 seconds')".into()],
            aggregates: vec!["count(*) AS n".into()],
            output_mode: OutputMode::Append,
            ..Default::default()
        };
        let mut sim = Sim::new(spec, sim::schema(), dir.path());
        let mut totals = Vec::new();
        for b in synthetic(30, 200, 5) {
            sim.trigger(vec![b]);
            totals.push(sim.runs.last().unwrap().metrics.num_rows_total);
        }
        // 5 keys x at most 4 open 10 s windows, whatever the rows seen (6,000+).
        assert!(totals.iter().all(|&t| t <= 20), "{totals:?}");
        let memory: Vec<u64> = sim
            .runs
            .iter()
            .map(|r| r.metrics.memory_used_bytes)
            .collect();
        assert!(memory[memory.len() - 1] < 64 * 1024, "{memory:?}");
    }

    #[test]
    fn validation_messages() {
        let schema = sim::schema();
        let mut s = spec("window(ts, '10 seconds')", OutputMode::Append, "10 seconds");
        assert_eq!(validate(&s, &schema), Ok(()));
        // Function names in any case, SQL keywords, `INTERVAL` durations.
        let mut upper = spec(
            "WINDOW(ts, INTERVAL '10 seconds')",
            OutputMode::Append,
            "10 seconds",
        );
        upper.aggregates = vec!["COUNT(*) AS n".into(), "Sum(v) as total".into()];
        assert_eq!(validate(&upper, &schema), Ok(()));
        s.watermark = None;
        let e = validate(&s, &schema).unwrap_err();
        assert!(
            e.contains("needs a watermark") && e.contains("\"update\""),
            "{e}"
        );
        s.group_by = vec!["k".into()];
        s.watermark = Some(WatermarkSpec::new("ts", "1 s").unwrap());
        let e = validate(&s, &schema).unwrap_err();
        assert!(e.contains("no group_by key is `window(ts, ...)`"), "{e}");
        s.output_mode = OutputMode::Update;
        assert_eq!(validate(&s, &schema), Ok(()));
        s.aggregates = vec!["nonsense(v) AS x".into()];
        assert!(validate(&s, &schema).unwrap_err().contains("nonsense"));
        s.aggregates = vec![];
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("at least one aggregate")
        );
        let complete = StatefulSpec {
            output_mode: OutputMode::Complete,
            ..Default::default()
        };
        let e = validate(&complete, &schema).unwrap_err();
        assert!(e.contains("needs an aggregation"), "{e}");
        let s = spec("window(nope, '10 seconds')", OutputMode::Update, "1 s");
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("`nope` is not a column")
        );
        let mut s = spec("window(ts, '10 seconds')", OutputMode::Update, "1 s");
        s.group_by.push("window(ts, '1 minute')".into());
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("more than one window")
        );
        let mut s = spec("window(ts, '10 seconds')", OutputMode::Update, "1 s");
        s.watermark = Some(WatermarkSpec::new("k2", "1 s").unwrap());
        assert!(
            validate(&s, &schema)
                .unwrap_err()
                .contains("`k2` is not a column")
        );
    }

    use crate::ops::stateful::validate;
}
