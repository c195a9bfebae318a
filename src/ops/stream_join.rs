//! Stream-stream joins (Spark's symmetric hash join, `StreamingSymmetricHashJoinExec`):
//! the flow's source (the left side, `batch` in SQL) joined with a second stream (the
//! right side, named by its `alias`), inner or left outer, with watermark-bounded state.
//!
//! Per batch N, with the batch's watermark `wm` (the minimum of both sides' watermarks):
//!
//! 1. Each side's rows behind `wm` are dropped and counted (the left by the engine, the
//!    right here), as for any stateful operator.
//! 2. Output = `newLeft ⋈ (bufferedRight ∪ newRight)` ∪ `bufferedLeft ⋈ newRight`,
//!    computed by DataFusion in two queries (the two sides registered as tables under
//!    `batch` and the alias), so no pair is emitted twice. The flow's `select` and `where`
//!    apply to the joined rows.
//! 3. The new rows are buffered. A left row with event time `t` can match right rows with
//!    `s` in `[t + lower, t + upper]`; it is evicted once `t + upper < wm` (every such
//!    right row would now be late). A right row `s` is evicted once `s - lower < wm`.
//! 4. Left outer join: a left row evicted without ever having matched is emitted once,
//!    with nulls for the right side (Spark emits outer rows on eviction too).
//!
//! State (three versioned stores under `state/0/`, committed with the batch like any
//! operator's): `left/` and `right/` hold the buffered rows keyed by
//! `(__weir_batch, __weir_row)` (the batch that brought the row and its position in it)
//! plus the event time in µs (`__weir_t`) and, on the left, whether the row has matched
//! (`__weir_matched`); `watermarks/` holds each side's maximum event time, so a restart
//! recomputes the same watermark (Spark's `multipleWatermarkPolicy = min`; a side that has
//! not seen data yet counts as 0, as in Spark's `WatermarkTracker`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, Scalar, StringArray,
};
use arrow::compute::concat_batches;
use arrow::compute::kernels::cmp::lt;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::stateful::elapsed_ms;
use super::watermark::{check_event_time_type, event_time_micros, split_late};
use crate::error::{Error, Result};
use crate::records::StateOperatorMetrics;
use crate::spec::WatermarkSpec;
use crate::spec::{DimensionFormat, JoinOn, JoinSpec, JoinType};
use crate::spec::{StreamJoinSpec, TimeRange};
use crate::state::{Fingerprint, StateStore, StateTable, StoreOptions};

/// Spark's operator name.
pub const OPERATOR_NAME: &str = "symmetricHashJoin";
/// State column: the batch that brought a buffered row.
pub const BATCH_COLUMN: &str = "__weir_batch";
/// State column: the row's position among its batch's on-time rows.
pub const ROW_COLUMN: &str = "__weir_row";
/// State column: the row's event time (µs since the epoch).
pub const TIME_COLUMN: &str = "__weir_t";
/// Left state column: whether the row has matched a right row.
pub const MATCHED_COLUMN: &str = "__weir_matched";
const HIDDEN_PREFIX: &str = "__weir_";

/// Checks that the join's state is bounded, as Spark's `UnsupportedOperationChecker` does
/// for outer joins (and weir for inner joins too); the message says why and what to add.
pub fn check_bounds(
    left_watermark: Option<&WatermarkSpec>,
    join: &StreamJoinSpec,
) -> std::result::Result<(), String> {
    let why = match join.how {
        JoinType::Inner => {
            "a stream-stream join buffers every row of both sides until the watermarks prove that no \
             future row of the other side can match it; without that bound its state grows without \
             limit (Spark accepts such an inner join and keeps its state forever; weir refuses it)"
        }
        JoinType::Left => {
            "a stream-stream left outer join buffers every row of both sides until the watermarks prove \
             that no future row of the other side can match it, and only then emits a left row that \
             never matched (with nulls); without that bound its state grows without limit and those \
             rows are never emitted (Spark refuses it too)"
        }
    };
    let Some(left) = left_watermark else {
        return Err(format!(
            "{why}. The left side (the flow's source) has no watermark: declare \
             watermark = {{ column = \"<event time>\", delay = \"...\" }} on the flow"
        ));
    };
    let Some(right) = &join.watermark else {
        return Err(format!(
            "{why}. The right side `{}` has no watermark: declare \
             watermark = {{ column = \"<event time>\", delay = \"...\" }} in [flow.stream_join]",
            join.alias
        ));
    };
    let Some(range) = &join.time_range else {
        return Err(format!(
            "{why}. There is no time_range relating the two sides' event times: add \
             time_range = {{ left = \"{}\", right = \"{}\", lower = \"-1 hour\", upper = \"0 seconds\" }} \
             (the right row's time must lie within [left time + lower, left time + upper])",
            left.column, right.column
        ));
    };
    if range.left != left.column || range.right != right.column {
        return Err(format!(
            "time_range relates `{}` and `{}`, but the watermarks are on `{}` (left) and `{}` (right); \
             state is evicted by the watermarks, so the range must be on the watermark columns",
            range.left, range.right, left.column, right.column
        ));
    }
    if range.lower_ms > range.upper_ms {
        return Err(format!(
            "time_range lower ({} ms) is after upper ({} ms); no row could ever match",
            range.lower_ms, range.upper_ms
        ));
    }
    Ok(())
}

/// The per-batch numbers of one side.
#[derive(Debug, Clone, Copy, Default)]
struct SideStats {
    added: u64,
    removed: u64,
    late: u64,
    invalid: u64,
}

/// The stream-stream join operator (see the module docs).
pub struct StreamJoinOperator {
    flow: String,
    alias: String,
    how: JoinType,
    left_wm: WatermarkSpec,
    right_wm: WatermarkSpec,
    range: TimeRange,
    left_schema: SchemaRef,
    right_schema: SchemaRef,
    left_state_schema: SchemaRef,
    right_state_schema: SchemaRef,
    meta_schema: SchemaRef,
    output_schema: SchemaRef,
    sql_items: String,
    sql_from_inner: String,
    sql_from_outer: String,
    where_: Option<String>,
    ctx: SessionContext,
    left_store: StateStore,
    right_store: StateStore,
    meta_store: StateStore,
    left: StateTable,
    right: StateTable,
    meta: StateTable,
    dirty: bool,
    metrics: StateOperatorMetrics,
    /// Float columns of a `USING`-style `on` (normalised before joining).
    float_keys: Vec<String>,
}

/// What the operator needs from the flow.
pub struct JoinPlan<'a> {
    pub flow: &'a str,
    pub left_watermark: Option<&'a WatermarkSpec>,
    pub join: &'a StreamJoinSpec,
    pub where_: Option<&'a str>,
    pub select: Option<&'a [String]>,
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn data_fields(schema: &SchemaRef) -> Vec<Arc<Field>> {
    schema
        .fields()
        .iter()
        .filter(|f| {
            f.name() != crate::schema::METADATA_COLUMN && !f.name().starts_with(HIDDEN_PREFIX)
        })
        .cloned()
        .collect()
}

/// The stream's schema without `_metadata` (not available in a stream-stream join flow).
pub fn data_schema(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new(data_fields(schema)))
}

fn state_schema(data: &SchemaRef, matched: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new(BATCH_COLUMN, DataType::Int64, true),
        Field::new(ROW_COLUMN, DataType::Int64, true),
    ];
    fields.extend(
        data.fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true)),
    );
    fields.push(Field::new(TIME_COLUMN, DataType::Int64, true));
    if matched {
        fields.push(Field::new(MATCHED_COLUMN, DataType::Boolean, true));
    }
    Arc::new(Schema::new(fields))
}

fn sql_error(flow: &str, context: &str, e: datafusion::error::DataFusionError) -> Error {
    Error::Sql {
        flow: flow.to_string(),
        context: context.to_string(),
        source: Box::new(e),
    }
}

fn session() -> SessionContext {
    let mut config = SessionConfig::new().with_target_partitions(1);
    config.options_mut().sql_parser.enable_ident_normalization = false;
    config.options_mut().execution.time_zone = Some("UTC".to_string());
    SessionContext::new_with_config(config)
}

/// The SQL pieces of a join flow: select items, `FROM` for the inner pairs and for the
/// null-extended rows.
fn sql_parts(
    plan: &JoinPlan<'_>,
    left: &SchemaRef,
    right: &SchemaRef,
) -> std::result::Result<(String, String, String), String> {
    let join = plan.join;
    let left_columns: Vec<String> = left.fields().iter().map(|f| f.name().clone()).collect();
    let as_dim = JoinSpec {
        table: PathBuf::new(),
        format: DimensionFormat::Delta,
        alias: join.alias.clone(),
        on: join.on.clone(),
        how: join.how,
        null_value: None,
    };
    let stream_items = || {
        left_columns
            .iter()
            .map(|c| format!("batch.{}", quote(c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let items = match plan.select {
        None => super::join::default_items(&left_columns, &[(&as_dim, right)]).join(", "),
        Some(items) => items
            .iter()
            .map(|i| {
                if i.trim() == "*" {
                    Ok(stream_items())
                } else {
                    super::sql_fragment(i, true).map_err(|m| format!("select `{i}`: {m}"))
                }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?
            .join(", "),
    };
    let inner = super::join::from_clause(&[JoinSpec {
        how: JoinType::Inner,
        ..as_dim.clone()
    }])?;
    let outer = super::join::from_clause(&[JoinSpec {
        how: JoinType::Left,
        ..as_dim
    }])?;
    Ok((items, inner, outer))
}

/// The flow's `where`, parsed on its own and rendered from its syntax tree.
fn where_sql(plan: &JoinPlan<'_>) -> std::result::Result<Option<String>, String> {
    plan.where_
        .map(|w| super::sql_fragment(w, false).map_err(|m| format!("where `{w}`: {m}")))
        .transpose()
}

/// The planned SQL of a join flow.
struct SqlPlan {
    left_schema: SchemaRef,
    right_schema: SchemaRef,
    left_state_schema: SchemaRef,
    right_state_schema: SchemaRef,
    output_schema: SchemaRef,
    items: String,
    from_inner: String,
    from_outer: String,
    ctx: SessionContext,
}

fn plan_sql(
    plan: &JoinPlan<'_>,
    left_input: &SchemaRef,
    right_input: &SchemaRef,
) -> Result<SqlPlan> {
    let plan_error = |message: String| Error::Plan {
        flow: plan.flow.to_string(),
        message,
    };
    check_bounds(plan.left_watermark, plan.join).map_err(plan_error)?;
    let join = plan.join;
    let (Some(left_wm), Some(right_wm)) = (plan.left_watermark, &join.watermark) else {
        return Err(plan_error("unbounded stream-stream join".into()));
    };
    let left_schema = data_schema(left_input);
    let right_schema = data_schema(right_input);
    for (side, schema, wm) in [
        ("left", &left_schema, left_wm),
        (join.alias.as_str(), &right_schema, right_wm),
    ] {
        let field = schema.field_with_name(&wm.column).map_err(|_| {
            plan_error(format!(
                "the watermark column `{}` is not a column of the {side} stream (columns: {})",
                wm.column,
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        check_event_time_type(&wm.column, field.data_type()).map_err(plan_error)?;
    }
    let left_state_schema = state_schema(&left_schema, true);
    let right_state_schema = state_schema(&right_schema, false);
    let (items, from_inner, from_outer) =
        sql_parts(plan, &left_schema, &right_schema).map_err(plan_error)?;
    let where_ = where_sql(plan).map_err(plan_error)?;
    let ctx = session();
    let mut op_schema = None;
    // Plan the output against empty tables: unknown columns fail here, before a batch.
    for (from, how) in [
        (&from_inner, JoinType::Inner),
        (&from_outer, JoinType::Left),
    ] {
        register(&ctx, plan.flow, "batch", &left_state_schema, Vec::new())?;
        register(
            &ctx,
            plan.flow,
            &join.alias,
            &right_state_schema,
            Vec::new(),
        )?;
        let sql = query_text(&items, from, None, where_.as_deref());
        let schema = futures::executor::block_on(ctx.sql(&sql))
            .map(|df| Arc::new(df.schema().as_arrow().clone()))
            .map_err(|e| sql_error(plan.flow, &format!("planning `{sql}`"), e))?;
        if how == join.how || op_schema.is_none() {
            op_schema = Some(schema);
        }
    }
    let output_schema =
        visible(&op_schema.ok_or_else(|| plan_error("the join has no output schema".into()))?);
    // The state keeps only the columns the join's queries read (as Spark's optimizer
    // prunes the columns below its join), plus each side's event time.
    let range = range_sql(&join.alias, range_of(plan)?);
    let matched = format!(
        "SELECT DISTINCT batch.{b}, batch.{r} FROM {from_inner} WHERE {range}",
        b = quote(BATCH_COLUMN),
        r = quote(ROW_COLUMN)
    );
    let queries = [
        query_text(&items, &from_inner, Some(&range), where_.as_deref()),
        query_text(&items, &from_outer, None, where_.as_deref()),
        matched,
    ];
    let (mut used_left, mut used_right) = (Vec::new(), Vec::new());
    for sql in &queries {
        register(&ctx, plan.flow, "batch", &left_state_schema, Vec::new())?;
        register(
            &ctx,
            plan.flow,
            &join.alias,
            &right_state_schema,
            Vec::new(),
        )?;
        let optimized =
            futures::executor::block_on(async { ctx.sql(sql).await?.into_optimized_plan() })
                .map_err(|e| sql_error(plan.flow, &format!("planning `{sql}`"), e))?;
        columns_read(&optimized, &mut used_left, &mut used_right)
            .map_err(|e| sql_error(plan.flow, &format!("planning `{sql}`"), e))?;
    }
    let _ = ctx.deregister_table("batch");
    let _ = ctx.deregister_table(join.alias.as_str());
    let left_schema = keep_columns(&left_schema, &used_left, &left_wm.column);
    let right_schema = keep_columns(&right_schema, &used_right, &right_wm.column);
    let left_state_schema = state_schema(&left_schema, true);
    let right_state_schema = state_schema(&right_schema, false);
    Ok(SqlPlan {
        left_schema,
        right_schema,
        left_state_schema,
        right_state_schema,
        output_schema,
        items,
        from_inner,
        from_outer,
        ctx,
    })
}

/// The join's time range (checked by [`check_bounds`]).
fn range_of<'a>(plan: &'a JoinPlan<'_>) -> Result<&'a TimeRange> {
    plan.join.time_range.as_ref().ok_or_else(|| Error::Plan {
        flow: plan.flow.to_string(),
        message: "unbounded stream-stream join".into(),
    })
}

/// `right.t BETWEEN left.t + lower AND left.t + upper`, on the hidden µs columns.
fn range_sql(alias: &str, range: &TimeRange) -> String {
    let l = format!("batch.{}", quote(TIME_COLUMN));
    let r = format!("{}.{}", quote(alias), quote(TIME_COLUMN));
    format!(
        "{r} >= {l} + ({lo}) AND {r} <= {l} + ({up})",
        lo = range.lower_ms.saturating_mul(1000),
        up = range.upper_ms.saturating_mul(1000),
    )
}

/// Adds the columns an optimized plan reads from `batch` (the left side) and from the
/// other table (the right side) to `left` and `right`; a scan without a projection
/// reads every column.
fn columns_read(
    plan: &datafusion::logical_expr::LogicalPlan,
    left: &mut Vec<String>,
    right: &mut Vec<String>,
) -> datafusion::error::Result<()> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::LogicalPlan;
    plan.apply(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let out = if scan.table_name.table() == "batch" {
                &mut *left
            } else {
                &mut *right
            };
            let schema = scan.source.schema();
            let indices: Vec<usize> = match &scan.projection {
                Some(p) => p.clone(),
                None => (0..schema.fields().len()).collect(),
            };
            for i in indices {
                if let Some(f) = schema.fields().get(i)
                    && !out.contains(f.name())
                {
                    out.push(f.name().clone());
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(())
}

/// The columns of `data` named in `used`, and `event_time` (in `data`'s order).
fn keep_columns(data: &SchemaRef, used: &[String], event_time: &str) -> SchemaRef {
    Arc::new(Schema::new(
        data.fields()
            .iter()
            .filter(|f| f.name() == event_time || used.contains(f.name()))
            .map(|f| f.as_ref().clone())
            .collect::<Vec<_>>(),
    ))
}

/// The data columns a side's state holds when resuming from a checkpoint: `needed`
/// (what the join reads), or the checkpoint's columns when it holds more of `full`
/// (state written before weir kept only the columns read). A column needed but not in
/// the checkpoint's state is refused, naming it.
fn resumed_columns(
    dir: &Path,
    full: &SchemaRef,
    needed: &SchemaRef,
    side: &str,
) -> Result<SchemaRef> {
    let Some(saved) = crate::state::read_metadata(dir)? else {
        return Ok(needed.clone());
    };
    let saved: Vec<&str> = saved
        .fields
        .iter()
        .map(|f| f.name.as_str())
        .filter(|n| !n.starts_with(HIDDEN_PREFIX))
        .collect();
    let missing: Vec<String> = needed
        .fields()
        .iter()
        .filter(|f| !saved.contains(&f.name().as_str()))
        .map(|f| format!("`{}`", f.name()))
        .collect();
    if !missing.is_empty() {
        return Err(Error::StateIncompatible {
            path: dir.to_path_buf(),
            message: format!(
                "the join now reads {} of the {side} stream, which its saved state does not hold (a \
                 stream-stream join's state keeps only the columns its select, where and on read, as \
                 Spark's does). Options: revert the change to resume from this checkpoint, or start the \
                 flow with a new checkpoint (a new `checkpoint` path; the query then re-reads its \
                 sources from the beginning)",
                missing.join(", ")
            ),
        });
    }
    let fields: Vec<Field> = saved
        .iter()
        .filter_map(|n| full.field_with_name(n).ok().cloned())
        .collect();
    if fields.len() != saved.len() {
        // A saved column is gone from the input: opening the state refuses it, naming it.
        return Ok(needed.clone());
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Checks a join flow against both sides' schemas without touching any state (for
/// `weir validate`): bounds, watermark columns, and the SQL. Returns the output schema.
pub fn check_plan(
    plan: &JoinPlan<'_>,
    left_input: &SchemaRef,
    right_input: &SchemaRef,
) -> Result<SchemaRef> {
    Ok(plan_sql(plan, left_input, right_input)?.output_schema)
}

impl StreamJoinOperator {
    /// Builds the operator over the two sides' schemas (`_metadata` is dropped), plans its
    /// SQL, and loads state version `load_version` from `state_dir` (`state/0`).
    pub fn new(
        plan: &JoinPlan<'_>,
        left_input: &SchemaRef,
        right_input: &SchemaRef,
        state_dir: &Path,
        load_version: Option<u64>,
    ) -> Result<Self> {
        let plan_error = |message: String| Error::Plan {
            flow: plan.flow.to_string(),
            message,
        };
        let sql = plan_sql(plan, left_input, right_input)?;
        let join = plan.join;
        let (Some(left_wm), Some(right_wm), Some(range)) =
            (plan.left_watermark, &join.watermark, &join.time_range)
        else {
            return Err(plan_error("unbounded stream-stream join".into()));
        };
        let SqlPlan {
            left_schema,
            right_schema,
            left_state_schema,
            right_state_schema,
            output_schema,
            items: sql_items,
            from_inner: sql_from_inner,
            from_outer: sql_from_outer,
            ctx,
        } = sql;
        // Resuming: keep the columns the checkpoint's state holds when it holds more.
        let (left_schema, right_schema, left_state_schema, right_state_schema) =
            if load_version.is_some() {
                let left = resumed_columns(
                    &state_dir.join("left"),
                    &data_schema(left_input),
                    &left_schema,
                    "left",
                )?;
                let right = resumed_columns(
                    &state_dir.join("right"),
                    &data_schema(right_input),
                    &right_schema,
                    &format!("`{}`", join.alias),
                )?;
                let (l, r) = (state_schema(&left, true), state_schema(&right, false));
                (left, right, l, r)
            } else {
                (
                    left_schema,
                    right_schema,
                    left_state_schema,
                    right_state_schema,
                )
            };
        let fingerprint = Fingerprint::default()
            .with("operator", OPERATOR_NAME)
            .with(
                "how",
                match join.how {
                    JoinType::Inner => "inner",
                    JoinType::Left => "left",
                },
            )
            .with("alias", join.alias.clone())
            .with(
                "on",
                match &join.on {
                    JoinOn::Columns(c) => c.join(", "),
                    JoinOn::Condition(c) => c.clone(),
                },
            )
            .with(
                "time_range",
                format!(
                    "{} BETWEEN {} + {} ms AND {} + {} ms",
                    range.right, range.left, range.lower_ms, range.left, range.upper_ms
                ),
            );
        let (left_store, left) = StateStore::open(
            &state_dir.join("left"),
            OPERATOR_NAME,
            &fingerprint.clone().with("side", "left"),
            left_state_schema.clone(),
            2,
            load_version,
            StoreOptions::default(),
        )?;
        let (right_store, right) = StateStore::open(
            &state_dir.join("right"),
            OPERATOR_NAME,
            &fingerprint.clone().with("side", "right"),
            right_state_schema.clone(),
            2,
            load_version,
            StoreOptions::default(),
        )?;
        let meta_schema = Arc::new(Schema::new(vec![
            Field::new("side", DataType::Utf8, true),
            Field::new("max_event_time_us", DataType::Int64, true),
        ]));
        let (meta_store, meta) = StateStore::open(
            &state_dir.join("watermarks"),
            OPERATOR_NAME,
            &fingerprint.with("side", "watermarks"),
            meta_schema.clone(),
            1,
            load_version,
            StoreOptions::default(),
        )?;
        let float_keys: Vec<String> = match &join.on {
            JoinOn::Columns(columns) => columns
                .iter()
                .filter(|c| {
                    [&left_schema, &right_schema].iter().any(|s| {
                        s.field_with_name(c).is_ok_and(|f| {
                            matches!(f.data_type(), DataType::Float32 | DataType::Float64)
                        })
                    })
                })
                .cloned()
                .collect(),
            JoinOn::Condition(_) => Vec::new(),
        };
        let mut op = StreamJoinOperator {
            float_keys,
            flow: plan.flow.to_string(),
            alias: join.alias.clone(),
            how: join.how,
            left_wm: left_wm.clone(),
            right_wm: right_wm.clone(),
            range: range.clone(),
            left_schema,
            right_schema,
            left_state_schema,
            right_state_schema,
            meta_schema,
            output_schema,
            sql_items,
            sql_from_inner,
            sql_from_outer,
            where_: where_sql(plan).map_err(plan_error)?,
            ctx,
            left_store,
            right_store,
            meta_store,
            left,
            right,
            meta,
            dirty: false,
            metrics: StateOperatorMetrics {
                operator_name: OPERATOR_NAME.to_string(),
                num_shuffle_partitions: 1,
                num_state_store_instances: 3,
                ..Default::default()
            },
        };
        op.refresh_metrics(SideStats::default(), SideStats::default());
        Ok(op)
    }

    /// Schema of the rows [`Self::process`] returns.
    pub fn output_schema(&self) -> SchemaRef {
        self.output_schema.clone()
    }

    /// The right side's watermark spec.
    pub fn right_watermark(&self) -> &WatermarkSpec {
        &self.right_wm
    }

    fn arrow_error(&self, context: &str, source: arrow::error::ArrowError) -> Error {
        Error::Arrow {
            context: format!("flow {}: {context}", self.flow),
            source,
        }
    }

    /// Each side's maximum event time seen (µs), from the state.
    fn side_max_us(&self, side: &str) -> Option<i64> {
        let data = self.meta.data();
        let sides = data.column(0).as_string::<i32>();
        let values = data.column(1).as_primitive::<Int64Type>();
        (0..data.num_rows())
            .find(|&i| sides.is_valid(i) && sides.value(i) == side)
            .and_then(|i| values.is_valid(i).then(|| values.value(i)))
    }

    /// Each side's own watermark (left, right): its maximum event time minus its delay;
    /// `None` for a side that has had no data.
    pub fn side_watermarks(&self) -> [Option<i64>; 2] {
        let side = |name: &str, wm: &WatermarkSpec| {
            self.side_max_us(name)
                .map(|us| us.div_euclid(1000).saturating_sub(wm.delay_ms))
        };
        [side("left", &self.left_wm), side("right", &self.right_wm)]
    }

    /// The watermark for the batch after the last processed one: `max(current,
    /// min(left max - left delay, right max - right delay))`, a side without data counting as 0.
    pub fn next_watermark(&self, current_ms: i64) -> i64 {
        let side = |name: &str, wm: &WatermarkSpec| {
            self.side_max_us(name)
                .map_or(0, |us| us.div_euclid(1000).saturating_sub(wm.delay_ms))
        };
        current_ms.max(side("left", &self.left_wm).min(side("right", &self.right_wm)))
    }

    /// State rows for the new on-time rows of one side.
    fn new_rows(
        &self,
        batch_id: u64,
        input: &[RecordBatch],
        data: &SchemaRef,
        state: &SchemaRef,
        wm: &WatermarkSpec,
        matched: bool,
    ) -> Result<RecordBatch> {
        let rows: Vec<RecordBatch> = input.iter().filter(|b| b.num_rows() > 0).cloned().collect();
        let n: usize = rows.iter().map(RecordBatch::num_rows).sum();
        if n == 0 {
            return Ok(RecordBatch::new_empty(state.clone()));
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(state.fields().len());
        let batch = i64::try_from(batch_id).unwrap_or(i64::MAX);
        columns.push(Arc::new(Int64Array::from(vec![batch; n])));
        columns.push(Arc::new(Int64Array::from_iter_values(0..n as i64)));
        for field in data.fields() {
            let parts: Vec<ArrayRef> = rows
                .iter()
                .map(|b| {
                    b.column_by_name(field.name())
                        .cloned()
                        .ok_or_else(|| Error::Plan {
                            flow: self.flow.clone(),
                            message: format!(
                                "column `{}` is missing from a batch of the joined stream",
                                field.name()
                            ),
                        })
                })
                .collect::<Result<_>>()?;
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            let column = arrow::compute::concat(&refs)
                .map_err(|e| self.arrow_error("buffering join rows", e))?;
            let column = if column.data_type() == field.data_type() {
                column
            } else {
                arrow::compute::cast(&column, field.data_type())
                    .map_err(|e| self.arrow_error("buffering join rows", e))?
            };
            columns.push(column);
        }
        let times = data
            .index_of(&wm.column)
            .map_err(|e| self.arrow_error("reading event time", e))?;
        columns.push(Arc::new(event_time_micros(&columns[2 + times])?));
        if matched {
            columns.push(Arc::new(BooleanArray::from(vec![false; n])));
        }
        RecordBatch::try_new(state.clone(), columns)
            .map_err(|e| self.arrow_error("buffering join rows", e))
    }

    async fn run(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let result = async { self.ctx.sql(sql).await?.collect().await }.await;
        result.map_err(|e| sql_error(&self.flow, &format!("evaluating `{sql}`"), e))
    }

    /// Processes batch `batch_id`: `left` are the left side's on-time rows (the engine split
    /// them), `right` the right side's rows as read (split here by `watermark_ms`). Returns
    /// the joined rows to write. A retried batch starts over from the committed state.
    pub async fn process(
        &mut self,
        batch_id: u64,
        left: Vec<RecordBatch>,
        right: Vec<RecordBatch>,
        watermark_ms: i64,
        left_late: u64,
    ) -> Result<Vec<RecordBatch>> {
        super::aggregate::check_batch_id(
            self.left_store.dir(),
            self.left_store.version(),
            batch_id,
        )?;
        if self.dirty {
            let load = |store: &StateStore, schema: &SchemaRef, keys: usize| match store.version() {
                Some(v) => store.load(v),
                None => StateTable::new(schema.clone(), keys),
            };
            self.left = load(&self.left_store, &self.left_state_schema, 2)?;
            self.right = load(&self.right_store, &self.right_state_schema, 2)?;
            self.meta = load(&self.meta_store, &self.meta_schema, 1)?;
        }
        self.dirty = true;
        let t_update = Instant::now();
        let split = split_late(&right, &self.right_wm, watermark_ms)?;
        let mut left_stats = SideStats {
            late: left_late,
            ..Default::default()
        };
        let mut right_stats = SideStats {
            late: split.num_late,
            invalid: split.num_invalid,
            ..Default::default()
        };
        if split.num_invalid > 0 {
            tracing::warn!(flow = %self.flow, batch_id, rows = split.num_invalid, column = %self.right_wm.column,
                "right-side rows with a null or unparseable event time: counted (customMetrics.rightNumRowsInvalidEventTime) and not joined");
        }
        let new_left = self.new_rows(
            batch_id,
            &left,
            &self.left_schema.clone(),
            &self.left_state_schema.clone(),
            &self.left_wm.clone(),
            true,
        )?;
        let new_right = self.new_rows(
            batch_id,
            &split.on_time,
            &self.right_schema.clone(),
            &self.right_state_schema.clone(),
            &self.right_wm.clone(),
            false,
        )?;
        // The input batches are copied into the state rows: free them now.
        drop(left);
        drop(split);
        drop(right);
        left_stats.added = new_left.num_rows() as u64;
        right_stats.added = new_right.num_rows() as u64;
        self.update_max("left", &new_left)?;
        self.update_max("right", &new_right)?;

        // newLeft ⋈ (bufferedRight ∪ newRight), then bufferedLeft ⋈ newRight: each pair once.
        let mut output = Vec::new();
        let mut matched = Vec::new();
        if new_left.num_rows() > 0 {
            let all_right =
                concat_batches(&self.right_state_schema, [self.right.data(), &new_right])
                    .map_err(|e| self.arrow_error("joining", e))?;
            self.join_part(new_left.clone(), all_right, &mut output, &mut matched)
                .await?;
        }
        if new_right.num_rows() > 0 && !self.left.is_empty() {
            self.join_part(
                self.left.data().clone(),
                new_right.clone(),
                &mut output,
                &mut matched,
            )
            .await?;
        }
        self.left.upsert(&new_left)?;
        self.right.upsert(&new_right)?;
        self.mark_matched(&matched)?;
        self.metrics.all_updates_time_ms = elapsed_ms(t_update);

        // Evict what the watermark has closed; a left outer join emits its unmatched left rows.
        let t_remove = Instant::now();
        let wm_us = watermark_ms.saturating_mul(1000);
        let left_mask = self.closed(&self.left, self.range.upper_ms, wm_us)?;
        let right_mask = self.closed(&self.right, -self.range.lower_ms, wm_us)?;
        let evicted = self.left.remove_where(&left_mask)?;
        let evicted_right = self.right.remove_where(&right_mask)?;
        left_stats.removed = evicted.num_rows() as u64;
        right_stats.removed = evicted_right.num_rows() as u64;
        if self.how == JoinType::Left && evicted.num_rows() > 0 {
            let flags = evicted
                .column(evicted.num_columns() - 1)
                .as_boolean()
                .clone();
            let unmatched = arrow::compute::not(&no_nulls(flags))
                .map_err(|e| self.arrow_error("emitting outer rows", e))?;
            let unmatched = arrow::compute::filter_record_batch(&evicted, &unmatched)
                .map_err(|e| self.arrow_error("emitting outer rows", e))?;
            if unmatched.num_rows() > 0 {
                register_keyed(
                    &self.ctx,
                    &self.flow,
                    "batch",
                    &self.left_state_schema,
                    vec![unmatched],
                    &self.float_keys,
                )?;
                register_keyed(
                    &self.ctx,
                    &self.flow,
                    &self.alias,
                    &self.right_state_schema,
                    Vec::new(),
                    &self.float_keys,
                )?;
                let sql = query_text(
                    &self.sql_items,
                    &self.sql_from_outer,
                    None,
                    self.where_.as_deref(),
                );
                output.extend(self.run(&sql).await?);
            }
        }
        self.metrics.all_removals_time_ms = elapsed_ms(t_remove);
        let _ = self.ctx.deregister_table("batch");
        let _ = self.ctx.deregister_table(self.alias.as_str());
        let output = output
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| self.conform(b))
            .collect::<Result<Vec<_>>>()?;
        self.refresh_metrics(left_stats, right_stats);
        Ok(output)
    }

    /// The columns the join reads from its left and right inputs (what its state keeps,
    /// the event time included): nothing else of either input is ever used.
    pub fn input_columns(&self) -> (Vec<String>, Vec<String>) {
        let names = |s: &SchemaRef| s.fields().iter().map(|f| f.name().clone()).collect();
        (names(&self.left_schema), names(&self.right_schema))
    }

    /// Joins `left` with `right` (state rows) within the time range: the output rows (after
    /// `where`/`select`) go to `output`, the `(batch, row)` keys of the left rows that matched
    /// (left outer joins only) to `matched`.
    async fn join_part(
        &self,
        left: RecordBatch,
        right: RecordBatch,
        output: &mut Vec<RecordBatch>,
        matched: &mut Vec<RecordBatch>,
    ) -> Result<()> {
        if left.num_rows() == 0 || right.num_rows() == 0 {
            return Ok(());
        }
        register_keyed(
            &self.ctx,
            &self.flow,
            "batch",
            &self.left_state_schema,
            vec![left],
            &self.float_keys,
        )?;
        register_keyed(
            &self.ctx,
            &self.flow,
            &self.alias,
            &self.right_state_schema,
            vec![right],
            &self.float_keys,
        )?;
        let range = self.range_condition();
        let sql = query_text(
            &self.sql_items,
            &self.sql_from_inner,
            Some(&range),
            self.where_.as_deref(),
        );
        output.extend(self.run(&sql).await?);
        if self.how == JoinType::Left {
            let sql = format!(
                "SELECT DISTINCT batch.{b}, batch.{r} FROM {} WHERE {range}",
                self.sql_from_inner,
                b = quote(BATCH_COLUMN),
                r = quote(ROW_COLUMN)
            );
            matched.extend(self.run(&sql).await?);
        }
        Ok(())
    }

    /// `right.t BETWEEN left.t + lower AND left.t + upper`, on the hidden µs columns.
    fn range_condition(&self) -> String {
        range_sql(&self.alias, &self.range)
    }

    /// Rows whose `__weir_t + offset_ms < watermark`.
    fn closed(&self, table: &StateTable, offset_ms: i64, wm_us: i64) -> Result<BooleanArray> {
        let data = table.data();
        let t = data
            .column_by_name(TIME_COLUMN)
            .map(|c| c.as_primitive::<Int64Type>().clone())
            .unwrap_or_else(|| Int64Array::from(Vec::<i64>::new()));
        let offset = offset_ms.saturating_mul(1000);
        let shifted: Int64Array = t
            .iter()
            .map(|v| v.map(|v| v.saturating_add(offset)))
            .collect();
        let mask = lt(&shifted, &Scalar::new(Int64Array::from(vec![wm_us])))
            .map_err(|e| self.arrow_error("evicting join state", e))?;
        Ok(no_nulls(mask))
    }

    /// Sets `__weir_matched` on the left rows named by `(batch, row)` pairs.
    fn mark_matched(&mut self, pairs: &[RecordBatch]) -> Result<()> {
        let mut positions: Vec<usize> = Vec::new();
        for p in pairs {
            if p.num_rows() == 0 {
                continue;
            }
            let keys = self
                .left
                .key_rows(&[p.column(0).clone(), p.column(1).clone()])?;
            for i in 0..p.num_rows() {
                if let Some(pos) = self.left.lookup(keys.get(i)) {
                    positions.push(pos);
                }
            }
        }
        let data = self.left.data();
        let flag = data.num_columns() - 1;
        let flags = data.column(flag).as_boolean();
        positions.retain(|&p| !(flags.is_valid(p) && flags.value(p)));
        positions.sort_unstable();
        positions.dedup();
        if positions.is_empty() {
            return Ok(());
        }
        let flags: ArrayRef = Arc::new(BooleanArray::from(vec![true; positions.len()]));
        self.left.update_column(flag, &positions, &flags)
    }

    fn update_max(&mut self, side: &str, rows: &RecordBatch) -> Result<()> {
        let Some(t) = rows.column_by_name(TIME_COLUMN) else {
            return Ok(());
        };
        let Some(max) = arrow::compute::max(t.as_primitive::<Int64Type>()) else {
            return Ok(());
        };
        if self.side_max_us(side).is_some_and(|m| m >= max) {
            return Ok(());
        }
        let row = RecordBatch::try_new(
            self.meta_schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![side])),
                Arc::new(Int64Array::from(vec![max])),
            ],
        )
        .map_err(|e| self.arrow_error("recording event time", e))?;
        self.meta.upsert(&row)
    }

    /// Output rows with the operator's output schema (hidden columns dropped, nullability
    /// of the outer join).
    fn conform(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let columns = self
            .output_schema
            .fields()
            .iter()
            .map(|f| {
                batch
                    .schema()
                    .index_of(f.name())
                    .map(|i| batch.column(i).clone())
                    .map_err(|e| self.arrow_error("shaping join output", e))
            })
            .collect::<Result<Vec<_>>>()?;
        RecordBatch::try_new(self.output_schema.clone(), columns)
            .map_err(|e| self.arrow_error("shaping join output", e))
    }

    fn refresh_metrics(&mut self, left: SideStats, right: SideStats) {
        let m = &mut self.metrics;
        m.num_rows_total = (self.left.len() + self.right.len()) as u64;
        m.num_rows_updated = left.added + right.added;
        m.num_rows_removed = left.removed + right.removed;
        m.num_rows_dropped_by_watermark = left.late + right.late;
        m.memory_used_bytes =
            (self.left.memory_size() + self.right.memory_size() + self.meta.memory_size()) as u64;
        let c = &mut m.custom_metrics;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        c.insert("leftNumRowsTotal".into(), n(self.left.len() as u64));
        c.insert("rightNumRowsTotal".into(), n(self.right.len() as u64));
        c.insert("leftNumRowsUpdated".into(), n(left.added));
        c.insert("rightNumRowsUpdated".into(), n(right.added));
        c.insert("leftNumRowsRemoved".into(), n(left.removed));
        c.insert("rightNumRowsRemoved".into(), n(right.removed));
        c.insert("leftNumRowsDroppedByWatermark".into(), n(left.late));
        c.insert("rightNumRowsDroppedByWatermark".into(), n(right.late));
        c.insert("rightNumRowsInvalidEventTime".into(), n(right.invalid));
        c.insert(
            "leftMemoryUsedBytes".into(),
            n(self.left.memory_size() as u64),
        );
        c.insert(
            "rightMemoryUsedBytes".into(),
            n(self.right.memory_size() as u64),
        );
        c.insert(
            "stateOnCurrentVersionSizeBytes".into(),
            n(self.left_store.current_version_size_bytes()
                + self.right_store.current_version_size_bytes()
                + self.meta_store.current_version_size_bytes()),
        );
    }

    /// Persists state version `batch_id` of both sides and the event-time maxima.
    pub fn commit(&mut self, batch_id: u64) -> Result<()> {
        let t = Instant::now();
        let a = self.left_store.commit(batch_id, &mut self.left)?;
        self.right_store.commit(batch_id, &mut self.right)?;
        self.meta_store.commit(batch_id, &mut self.meta)?;
        self.dirty = false;
        self.metrics.commit_time_ms = elapsed_ms(t);
        self.metrics.custom_metrics.insert(
            "snapshotWrittenLastCommit".into(),
            i64::from(a.snapshot_written),
        );
        self.metrics.custom_metrics.insert(
            "stateOnCurrentVersionSizeBytes".into(),
            i64::try_from(
                self.left_store.current_version_size_bytes()
                    + self.right_store.current_version_size_bytes()
                    + self.meta_store.current_version_size_bytes(),
            )
            .unwrap_or(i64::MAX),
        );
        Ok(())
    }

    pub fn metrics(&self) -> StateOperatorMetrics {
        self.metrics.clone()
    }

    /// Whether a batch without data and with watermark `next_watermark_ms` would evict
    /// (and, for a left outer join, emit) anything.
    pub fn needs_no_data_batch(&self, next_watermark_ms: i64) -> bool {
        let wm_us = next_watermark_ms.saturating_mul(1000);
        let any = |table: &StateTable, offset: i64| {
            self.closed(table, offset, wm_us)
                .map(|m| m.true_count() > 0)
                .unwrap_or(false)
        };
        any(&self.left, self.range.upper_ms) || any(&self.right, -self.range.lower_ms)
    }

    /// Number of rows held per side (left, right).
    pub fn state_rows(&self) -> (usize, usize) {
        (self.left.len(), self.right.len())
    }
}

/// A mask with nulls as false.
fn no_nulls(mask: BooleanArray) -> BooleanArray {
    if mask.null_count() > 0 {
        arrow::compute::prep_null_mask_filter(&mask)
    } else {
        mask
    }
}

/// Drops hidden (`__weir_*`) columns from a schema.
fn visible(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| !f.name().starts_with(HIDDEN_PREFIX))
            .cloned()
            .collect::<Vec<_>>(),
    ))
}

fn query_text(items: &str, from: &str, pairs: Option<&str>, where_: Option<&str>) -> String {
    let mut sql = format!("SELECT {items} FROM {from}");
    match (pairs, where_) {
        (Some(p), Some(w)) => sql.push_str(&format!(" WHERE ({p}) AND ({w})")),
        (Some(p), None) => sql.push_str(&format!(" WHERE {p}")),
        (None, Some(w)) => sql.push_str(&format!(" WHERE {w}")),
        (None, None) => {}
    }
    sql
}

fn register(
    ctx: &SessionContext,
    flow: &str,
    name: &str,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<()> {
    register_keyed(ctx, flow, name, schema, batches, &[])
}

/// [`register`], with the float columns named in `float_keys` normalised as Spark's
/// `NormalizeFloatingNumbers` does for join keys (`-0.0` = `0.0`, `NaN` = `NaN`).
fn register_keyed(
    ctx: &SessionContext,
    flow: &str,
    name: &str,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    float_keys: &[String],
) -> Result<()> {
    let batches = if float_keys.is_empty() {
        batches
    } else {
        batches
            .into_iter()
            .map(|b| {
                let columns = b
                    .schema()
                    .fields()
                    .iter()
                    .zip(b.columns())
                    .map(|(f, c)| {
                        if float_keys.contains(f.name()) {
                            crate::state::table::normalize_float_key(c)
                        } else {
                            c.clone()
                        }
                    })
                    .collect();
                RecordBatch::try_new(b.schema(), columns)
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Arrow {
                context: format!("flow {flow}: normalising float join keys"),
                source: e,
            })?
    };
    let table = datafusion::datasource::MemTable::try_new(schema.clone(), vec![batches])
        .map_err(|e| sql_error(flow, "registering a join side", e))?;
    let _ = ctx.deregister_table(name);
    ctx.register_table(name, Arc::new(table))
        .map_err(|e| sql_error(flow, "registering a join side", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::stateful::sim::{self, Lcg, ms, rows, synthetic};
    use crate::spec::{StreamJoinSpec, TimeRange};
    use arrow::array::TimestampMicrosecondArray;

    fn right_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            sim::schema().field(1).clone(),
            Field::new("w", DataType::Int64, true),
        ]))
    }

    /// Right-side events `k, ts, w`, like [`synthetic`] with another seed.
    fn right_events(batches: usize, rows_per_batch: usize, seed: u64) -> Vec<RecordBatch> {
        synthetic(batches, rows_per_batch, seed)
            .into_iter()
            .map(|b| RecordBatch::try_new(right_schema(), b.columns().to_vec()).unwrap())
            .collect()
    }

    fn right_rows(rows: &[(&str, &str, i64)]) -> RecordBatch {
        let k = StringArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
        let ts = TimestampMicrosecondArray::from(
            rows.iter().map(|r| ms(r.1) * 1000).collect::<Vec<_>>(),
        )
        .with_timezone("UTC");
        let w = Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>());
        RecordBatch::try_new(right_schema(), vec![Arc::new(k), Arc::new(ts), Arc::new(w)]).unwrap()
    }

    fn left_rows(rows: &[(&str, &str, i64)]) -> RecordBatch {
        let r: Vec<(&str, Option<&str>, i64)> =
            rows.iter().map(|r| (r.0, Some(r.1), r.2)).collect();
        sim::events(&r)
    }

    fn join_spec(how: JoinType, lower: &str, upper: &str, delay: &str) -> StreamJoinSpec {
        let parse = |t: &str| {
            let (neg, rest) = match t.strip_prefix('-') {
                Some(r) => (true, r),
                None => (false, t),
            };
            let d = crate::spec::units::HumanDuration::parse(rest)
                .unwrap()
                .as_millis();
            if neg { -d } else { d }
        };
        StreamJoinSpec {
            alias: "weather".into(),
            source: crate::spec::SourceSpec::Delta(crate::spec::DeltaSourceOptions::new(
                PathBuf::from("/unused"),
            )),
            watermark: Some(WatermarkSpec::new("ts", delay).unwrap()),
            on: JoinOn::Columns(vec!["k".into()]),
            time_range: Some(TimeRange {
                left: "ts".into(),
                right: "ts".into(),
                lower_ms: parse(lower),
                upper_ms: parse(upper),
            }),
            how,
        }
    }

    /// The engine's loop for a join flow, in memory: left split by the engine, right split by
    /// the operator, commit per batch, watermark = min of both sides, no-data batches.
    struct JoinSim {
        join: StreamJoinSpec,
        left_wm: WatermarkSpec,
        dir: PathBuf,
        op: StreamJoinOperator,
        wm: i64,
        next_batch: u64,
        output: Vec<RecordBatch>,
        left_on: Vec<RecordBatch>,
        right_on: Vec<RecordBatch>,
        late: u64,
        no_data_batches: u64,
    }

    impl JoinSim {
        fn build(
            join: &StreamJoinSpec,
            left_wm: &WatermarkSpec,
            dir: &Path,
            v: Option<u64>,
        ) -> StreamJoinOperator {
            StreamJoinOperator::new(
                &JoinPlan {
                    flow: "fw",
                    left_watermark: Some(left_wm),
                    join,
                    where_: None,
                    select: None,
                },
                &sim::schema(),
                &right_schema(),
                dir,
                v,
            )
            .unwrap_or_else(|e| panic!("{e}"))
        }

        fn new(join: StreamJoinSpec, left_delay: &str, dir: &Path) -> JoinSim {
            let left_wm = WatermarkSpec::new("ts", left_delay).unwrap();
            let op = Self::build(&join, &left_wm, dir, None);
            JoinSim {
                join,
                left_wm,
                dir: dir.to_path_buf(),
                op,
                wm: 0,
                next_batch: 0,
                output: Vec::new(),
                left_on: Vec::new(),
                right_on: Vec::new(),
                late: 0,
                no_data_batches: 0,
            }
        }

        fn restart(&mut self) {
            self.op = Self::build(
                &self.join,
                &self.left_wm,
                &self.dir,
                self.next_batch.checked_sub(1),
            );
        }

        async fn batch(&mut self, left: Vec<RecordBatch>, right: Vec<RecordBatch>) {
            let split = split_late(&left, &self.left_wm, self.wm).unwrap();
            let rsplit =
                split_late(&right, self.join.watermark.as_ref().unwrap(), self.wm).unwrap();
            self.left_on.extend(split.on_time.iter().cloned());
            self.right_on.extend(rsplit.on_time.iter().cloned());
            let out = self
                .op
                .process(
                    self.next_batch,
                    split.on_time,
                    right,
                    self.wm,
                    split.num_late,
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            self.late += self.op.metrics().num_rows_dropped_by_watermark;
            self.op.commit(self.next_batch).unwrap();
            self.output.extend(out);
            self.next_batch += 1;
            self.wm = self.op.next_watermark(self.wm);
        }

        async fn trigger(&mut self, left: Vec<RecordBatch>, right: Vec<RecordBatch>) {
            self.batch(left, right).await;
            while self.op.needs_no_data_batch(self.wm) {
                self.no_data_batches += 1;
                self.batch(Vec::new(), Vec::new()).await;
            }
        }

        /// DataFusion over all on-time rows of both sides.
        async fn oracle(&self, how: &str) -> Vec<String> {
            let lo = self.join.time_range.as_ref().unwrap().lower_ms;
            let up = self.join.time_range.as_ref().unwrap().upper_ms;
            let mut config = SessionConfig::new().with_target_partitions(1);
            config.options_mut().sql_parser.enable_ident_normalization = false;
            let ctx = SessionContext::new_with_config(config);
            let l = datafusion::datasource::MemTable::try_new(
                sim::schema(),
                vec![self.left_on.clone()],
            )
            .unwrap();
            let r = datafusion::datasource::MemTable::try_new(
                right_schema(),
                vec![self.right_on.clone()],
            )
            .unwrap();
            ctx.register_table("l", Arc::new(l)).unwrap();
            ctx.register_table("r", Arc::new(r)).unwrap();
            // Left rows still held (not yet closed by the watermark) have no outer row yet.
            let sql = format!(
                "SELECT l.k, l.ts, l.v, r.ts, r.w FROM l {how} JOIN r ON l.k = r.k \
                 AND r.ts >= l.ts + INTERVAL '{lo} milliseconds' AND r.ts <= l.ts + INTERVAL '{up} milliseconds' \
                 WHERE r.k IS NOT NULL OR l.ts + INTERVAL '{up} milliseconds' < to_timestamp_millis({wm})",
                wm = self.wm
            );
            let out = async { ctx.sql(&sql).await?.collect().await }
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            rows(&out)
        }
    }

    #[tokio::test]
    async fn inner_join_equals_a_batch_join_of_the_on_time_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = JoinSim::new(
            join_spec(JoinType::Inner, "-5 seconds", "5 seconds", "10 seconds"),
            "10 seconds",
            dir.path(),
        );
        let left = synthetic(12, 20, 7);
        let right = right_events(12, 15, 99);
        for (l, r) in left.into_iter().zip(right) {
            sim.trigger(vec![l], vec![r]).await;
        }
        let out = rows(&sim.output);
        assert!(out.len() > 50, "{}", out.len());
        assert_eq!(out, sim.oracle("INNER").await);
        assert!(sim.late > 0, "some rows are behind the watermark");
        let m = sim.op.metrics();
        assert_eq!(m.operator_name, "symmetricHashJoin");
        assert!(m.custom_metrics["leftNumRowsTotal"] > 0);
        assert!(m.custom_metrics["stateOnCurrentVersionSizeBytes"] > 0);
        // State holds only rows the watermark has not closed.
        let wm_us = sim.wm * 1000;
        let (l, r) = sim.op.state_rows();
        let open = |batches: &[RecordBatch], offset_us: i64| {
            batches
                .iter()
                .map(|b| {
                    let t = event_time_micros(b.column(1)).unwrap();
                    t.iter().filter(|t| t.unwrap() + offset_us >= wm_us).count()
                })
                .sum::<usize>()
        };
        assert_eq!(l, open(&sim.left_on, 5_000_000));
        assert_eq!(r, open(&sim.right_on, 5_000_000));
    }

    #[tokio::test]
    async fn left_outer_join_emits_unmatched_left_rows_once_when_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = JoinSim::new(
            join_spec(JoinType::Left, "-5 seconds", "0 seconds", "10 seconds"),
            "10 seconds",
            dir.path(),
        );
        let left = synthetic(12, 20, 3);
        let right = right_events(12, 6, 41);
        for (l, r) in left.into_iter().zip(right) {
            sim.trigger(vec![l], vec![r]).await;
        }
        let out = rows(&sim.output);
        let expected = sim.oracle("LEFT").await;
        assert_eq!(out, expected);
        let nulls = out.iter().filter(|r| r.ends_with("|null|null")).count();
        assert!(nulls > 10, "{nulls} outer rows");
        assert!(out.len() > nulls, "and matched rows");
    }

    #[tokio::test]
    async fn eviction_late_rows_and_no_data_batches() {
        let dir = tempfile::tempdir().unwrap();
        // weather within the hour before the flight; both sides 0 delay.
        let mut sim = JoinSim::new(
            join_spec(JoinType::Left, "-1 hour", "0 seconds", "0 seconds"),
            "0 seconds",
            dir.path(),
        );
        sim.trigger(
            vec![left_rows(&[
                ("EWR", "2013-01-01T10:00:00Z", 1),
                ("JFK", "2013-01-01T10:00:00Z", 2),
            ])],
            vec![right_rows(&[("EWR", "2013-01-01T09:30:00Z", 100)])],
        )
        .await;
        assert_eq!(rows(&sim.output).len(), 1, "EWR matched at once");
        // Only the left side has seen data beyond 10:00: the watermark is min(10:00, 09:30).
        assert_eq!(sim.wm, ms("2013-01-01T09:30:00Z"));
        assert_eq!(sim.op.state_rows(), (2, 1));
        // The right side moves to 11:30: watermark 10:00 (left). Nothing closes yet
        // (a left row closes when t + 0 < wm; the right row at 09:30 when 09:30 + 1h < wm).
        sim.trigger(
            vec![],
            vec![right_rows(&[("JFK", "2013-01-01T11:30:00Z", 200)])],
        )
        .await;
        assert_eq!(sim.wm, ms("2013-01-01T10:00:00Z"));
        assert_eq!(sim.op.state_rows(), (2, 2));
        // Left at 12:00: watermark 11:30 closes both 10:00 left rows (JFK unmatched -> null
        // row, in a no-data batch) and the 09:30 right row; a late right row is dropped.
        sim.trigger(
            vec![left_rows(&[("JFK", "2013-01-01T12:00:00Z", 3)])],
            vec![right_rows(&[("EWR", "2013-01-01T09:00:00Z", 300)])],
        )
        .await;
        assert_eq!(sim.wm, ms("2013-01-01T11:30:00Z"));
        assert_eq!(sim.no_data_batches, 1);
        assert_eq!(
            sim.late, 1,
            "the 09:00 right row is behind the 10:00 watermark"
        );
        let out = rows(&sim.output);
        let t = |s: &str| ms(s) * 1000;
        assert_eq!(
            out,
            vec![
                format!(
                    "EWR|{}|1|{}|100",
                    t("2013-01-01T10:00:00Z"),
                    t("2013-01-01T09:30:00Z")
                ),
                format!("JFK|{}|2|null|null", t("2013-01-01T10:00:00Z")),
                format!(
                    "JFK|{}|3|{}|200",
                    t("2013-01-01T12:00:00Z"),
                    t("2013-01-01T11:30:00Z")
                ),
            ]
        );
        // The 11:30 right row stays until 11:30 + 1h < watermark; the 12:00 left row too.
        assert_eq!(sim.op.state_rows(), (1, 1));
        assert_eq!(out, sim.oracle("LEFT").await);
    }

    #[tokio::test]
    async fn a_restart_from_committed_state_gives_the_same_output() {
        let run = |restarts: bool| async move {
            let dir = tempfile::tempdir().unwrap();
            let mut sim = JoinSim::new(
                join_spec(JoinType::Left, "-10 seconds", "5 seconds", "5 seconds"),
                "15 seconds",
                dir.path(),
            );
            let left = synthetic(15, 12, 5);
            let right = right_events(15, 10, 6);
            let mut rng = Lcg(17);
            for (i, (l, r)) in left.into_iter().zip(right).enumerate() {
                if restarts && i % 2 == 1 {
                    sim.restart();
                }
                // Sometimes a side has nothing in a trigger.
                let l = if rng.next(5) == 0 { vec![] } else { vec![l] };
                sim.trigger(l, vec![r]).await;
            }
            let wm = sim.wm;
            (
                rows(&sim.output),
                wm,
                sim.op.state_rows(),
                sim.oracle("LEFT").await,
            )
        };
        let (plain, wm, state, oracle) = run(false).await;
        let (restarted, wm2, state2, _) = run(true).await;
        assert_eq!(plain, oracle);
        assert_eq!(restarted, plain);
        assert_eq!(
            (wm2, state2),
            (wm, state),
            "the watermark and the state come back from the checkpoint"
        );
    }

    #[tokio::test]
    async fn a_retried_batch_starts_over_from_the_committed_version() {
        let dir = tempfile::tempdir().unwrap();
        let join = join_spec(JoinType::Inner, "-5 seconds", "5 seconds", "10 seconds");
        let left_wm = WatermarkSpec::new("ts", "10 seconds").unwrap();
        let mut op = JoinSim::build(&join, &left_wm, dir.path(), None);
        let l = vec![left_rows(&[("a", "2024-05-01T10:00:00Z", 1)])];
        let r = vec![right_rows(&[("a", "2024-05-01T10:00:01Z", 2)])];
        let first = op.process(0, l.clone(), r.clone(), 0, 0).await.unwrap();
        let again = op.process(0, l, r, 0, 0).await.unwrap();
        assert_eq!(rows(&first), rows(&again));
        assert_eq!(rows(&again).len(), 1);
        assert_eq!(op.state_rows(), (1, 1));
    }

    #[test]
    fn a_changed_join_is_refused_on_restart() {
        let dir = tempfile::tempdir().unwrap();
        let left_wm = WatermarkSpec::new("ts", "10 seconds").unwrap();
        let join = join_spec(JoinType::Inner, "-5 seconds", "5 seconds", "10 seconds");
        let mut op = JoinSim::build(&join, &left_wm, dir.path(), None);
        futures::executor::block_on(op.process(0, vec![], vec![], 0, 0)).unwrap();
        op.commit(0).unwrap();
        let changed = join_spec(JoinType::Inner, "-1 minute", "5 seconds", "10 seconds");
        let err = StreamJoinOperator::new(
            &JoinPlan {
                flow: "fw",
                left_watermark: Some(&left_wm),
                join: &changed,
                where_: None,
                select: None,
            },
            &sim::schema(),
            &right_schema(),
            dir.path(),
            Some(0),
        )
        .err()
        .expect("refused");
        assert!(err.to_string().contains("time_range changed"), "{err}");
    }

    #[test]
    fn the_state_keeps_the_columns_the_join_reads_and_resumes_wider_state() {
        let dir = tempfile::tempdir().unwrap();
        let left_wm = WatermarkSpec::new("ts", "10 seconds").unwrap();
        let join = join_spec(JoinType::Left, "-5 seconds", "5 seconds", "10 seconds");
        let build = |select: Option<&[String]>, v: Option<u64>| {
            StreamJoinOperator::new(
                &JoinPlan {
                    flow: "fw",
                    left_watermark: Some(&left_wm),
                    join: &join,
                    where_: None,
                    select,
                },
                &sim::schema(),
                &right_schema(),
                dir.path(),
                v,
            )
        };
        let names = |s: &SchemaRef| -> Vec<String> {
            s.fields().iter().map(|f| f.name().clone()).collect()
        };
        // `select = *`-like default: every column is read and buffered.
        let mut op = build(None, None).unwrap();
        assert_eq!(
            names(&op.left_state_schema),
            [
                "__weir_batch",
                "__weir_row",
                "k",
                "ts",
                "v",
                "__weir_t",
                "__weir_matched"
            ]
        );
        let l = vec![left_rows(&[("a", "2024-05-01T10:00:00Z", 1)])];
        let r = vec![right_rows(&[("a", "2024-05-01T10:00:01Z", 2)])];
        futures::executor::block_on(op.process(0, l, r, 0, 0)).unwrap();
        op.commit(0).unwrap();
        // A select of fewer columns resumes the wider state as it is.
        let narrow = vec!["batch.k".to_string(), "weather.w".to_string()];
        let op = build(Some(&narrow), Some(0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(&op.left_schema), ["k", "ts", "v"]);
        assert_eq!(names(&op.right_schema), ["k", "ts", "w"]);
        assert_eq!(op.state_rows(), (1, 1));
        // A new checkpoint with that select buffers only k (read by select and on) and ts.
        let fresh = tempfile::tempdir().unwrap();
        let mut op = StreamJoinOperator::new(
            &JoinPlan {
                flow: "fw",
                left_watermark: Some(&left_wm),
                join: &join,
                where_: None,
                select: Some(&narrow),
            },
            &sim::schema(),
            &right_schema(),
            fresh.path(),
            None,
        )
        .unwrap();
        assert_eq!(names(&op.left_schema), ["k", "ts"]);
        assert_eq!(names(&op.right_schema), ["k", "ts", "w"]);
        let l = vec![left_rows(&[("a", "2024-05-01T10:00:00Z", 1)])];
        let r = vec![right_rows(&[("a", "2024-05-01T10:00:01Z", 2)])];
        let out = futures::executor::block_on(op.process(0, l, r, 0, 0)).unwrap();
        assert_eq!(rows(&out), vec!["a|2"]);
        op.commit(0).unwrap();
        // Reading `v` later needs a column that state does not hold: refused, naming it.
        let err = StreamJoinOperator::new(
            &JoinPlan {
                flow: "fw",
                left_watermark: Some(&left_wm),
                join: &join,
                where_: None,
                select: None,
            },
            &sim::schema(),
            &right_schema(),
            fresh.path(),
            Some(0),
        )
        .err()
        .expect("refused");
        assert_eq!(err.kind(), crate::error::ErrorKind::CheckpointIncompatible);
        assert!(err.to_string().contains("`v` of the left stream"), "{err}");
    }

    #[test]
    fn unbounded_joins_are_refused_with_the_reason() {
        let wm = WatermarkSpec::new("ts", "10 seconds").unwrap();
        let mut join = join_spec(JoinType::Left, "-5 seconds", "0 seconds", "1 minute");
        assert!(check_bounds(Some(&wm), &join).is_ok());
        let e = check_bounds(None, &join).unwrap_err();
        assert!(
            e.contains("left side (the flow's source) has no watermark"),
            "{e}"
        );
        assert!(e.contains("never emitted"), "{e}");
        join.how = JoinType::Inner;
        join.time_range = None;
        let e = check_bounds(Some(&wm), &join).unwrap_err();
        assert!(e.contains("no time_range"), "{e}");
        assert!(e.contains("grows without limit"), "{e}");
        join.time_range = Some(TimeRange {
            left: "ts".into(),
            right: "ts".into(),
            lower_ms: 1,
            upper_ms: 0,
        });
        assert!(
            check_bounds(Some(&wm), &join)
                .unwrap_err()
                .contains("after upper")
        );
        join.watermark = None;
        let e = check_bounds(Some(&wm), &join).unwrap_err();
        assert!(e.contains("right side `weather` has no watermark"), "{e}");
    }

    #[test]
    fn the_sql_plan_reports_unknown_columns_and_renames_collisions() {
        let left_wm = WatermarkSpec::new("ts", "10 seconds").unwrap();
        let join = join_spec(JoinType::Left, "-5 seconds", "0 seconds", "10 seconds");
        let plan = |select: Option<&'static [String]>| JoinPlan {
            flow: "fw",
            left_watermark: Some(&left_wm),
            join: &join,
            where_: None,
            select,
        };
        let schema = check_plan(&plan(None), &sim::schema(), &right_schema()).unwrap();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["k", "ts", "v", "weather_ts", "w"]);
        assert!(schema.field(4).is_nullable());
        let bad: &'static [String] = Box::leak(Box::new(["weather.nope".to_string()]));
        let err = check_plan(&plan(Some(bad)), &sim::schema(), &right_schema()).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
