//! Operators on Arrow record batches: the flow's `where` predicate, `select`
//! list and stream-static joins, evaluated by DataFusion, and the stateful
//! operators (windows, aggregates, deduplication).
//!
//! SQL dialect: DataFusion's, with identifier normalisation off so that
//! unquoted names keep their case (`Photo` means the column `Photo`, as a
//! Spark user expects). `*` expands to the source's data columns, not to the
//! hidden `_metadata` struct (Spark's file-metadata column: `file_path`,
//! `file_name`, `file_size`, `file_modification_time`), which must be selected
//! by name, e.g. `_metadata.file_path AS source_file`.

pub mod aggregate;
pub mod dedup;
pub mod expect;
pub mod join;
pub mod stateful;
pub mod stream_join;
pub mod union;
pub mod watermark;
pub mod window;

pub use stateful::{StatefulOperator, build, validate};
pub use watermark::{Split, split_late};

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::error::{Error, Result};
use crate::spec::JoinSpec;

use crate::schema::METADATA_COLUMN;

/// Checks that `sql` is one SQL expression (or a select item with an alias when
/// `select_item`), without resolving column names.
pub fn check_sql_syntax(sql: &str, select_item: bool) -> std::result::Result<(), String> {
    sql_fragment(sql, select_item).map(|_| ())
}

/// One SQL expression (or select item) of a pipeline file, parsed on its own with
/// DataFusion's SQL parser and rendered back from its syntax tree: the statements weir
/// builds contain only these renderings, never the text as written, so a fragment can
/// never reach into the rest of the statement. Comments (`--`, `/* */`) and anything
/// after the expression are refused: `on = "a.id = b.id --"` would otherwise hide the
/// flow's `where`.
pub fn sql_fragment(sql: &str, select_item: bool) -> std::result::Result<String, String> {
    use datafusion::sql::sqlparser::tokenizer::{Tokenizer, Whitespace};
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|e| e.to_string())?;
    if let Some(comment) = tokens.iter().find_map(|t| match t {
        Token::Whitespace(
            w @ (Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_)),
        ) => Some(w.to_string()),
        _ => None,
    }) {
        return Err(format!(
            "a comment (`{}`) is not allowed in a pipeline expression: each key holds one expression, \
             and a comment would hide what follows it; remove it",
            comment.trim_end()
        ));
    }
    let mut parser = Parser::new(&dialect).with_tokens(tokens);
    let rendered = if select_item {
        parser
            .parse_select_item()
            .map_err(|e| e.to_string())?
            .to_string()
    } else {
        parser.parse_expr().map_err(|e| e.to_string())?.to_string()
    };
    match parser.peek_token().token {
        Token::EOF => Ok(rendered),
        other => Err(format!("unexpected `{other}` after the expression")),
    }
}

/// A flow's stateless `where` + `select` (+ stream-static joins), planned by DataFusion per batch.
pub struct Projection {
    flow: String,
    where_: Option<String>,
    select: Option<Vec<String>>,
    /// The stream's data columns (quoted), what `*` expands to.
    data_columns: Vec<String>,
    dims: join::Dimensions,
    sql: Option<String>,
    /// Why the SQL could not be built (a fragment that is not one expression).
    invalid: Option<String>,
    /// Whether the query works row by row (see [`Projection::row_wise`]); `None` until
    /// the SQL is first planned.
    row_wise: Option<bool>,
    /// The `_metadata` fields the query reads (see [`Projection::metadata_fields`]);
    /// all (`None`) until [`Projection::check`] planned it.
    metadata_fields: MetadataFields,
    ctx: SessionContext,
}

/// The fields of the hidden `_metadata` column a flow's query reads: `None`, every field
/// (the whole struct is read, or a field by a means other than `_metadata.<field>`).
pub type MetadataFields = Option<std::collections::BTreeSet<String>>;

/// The `_metadata` fields `plan` reads: each `get_field(_metadata, '<name>')` (how
/// DataFusion plans `_metadata.<name>`) names one; any other use of the column (the
/// whole struct, a reference from a correlated subquery) reads them all.
fn metadata_fields_of(
    plan: &datafusion::logical_expr::LogicalPlan,
) -> datafusion::error::Result<MetadataFields> {
    use datafusion::common::ScalarValue;
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr;
    let mut fields = std::collections::BTreeSet::new();
    let mut whole = false;
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                match e {
                    Expr::ScalarFunction(f) if f.name() == "get_field" => {
                        if let [
                            Expr::Column(c),
                            Expr::Literal(ScalarValue::Utf8(Some(name)), _),
                        ] = f.args.as_slice()
                            && c.name == METADATA_COLUMN
                        {
                            fields.insert(name.clone());
                            // The column below is this field's, not the whole struct.
                            return Ok(TreeNodeRecursion::Jump);
                        }
                    }
                    Expr::Column(c) if c.name == METADATA_COLUMN => whole = true,
                    // `batch._metadata` in a correlated subquery: counted whole.
                    Expr::OuterReferenceColumn(_, c) if c.name == METADATA_COLUMN => whole = true,
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok((!whole).then_some(fields))
}

/// Rows per query when the projection is row-wise ([`Projection::apply`]): the input of
/// a micro-batch goes through in chunks, each chunk's input freed once its output is out.
pub const CHUNK_ROWS: usize = 131_072;

impl Projection {
    /// `input` is the schema of source batches (data columns plus `_metadata`).
    pub fn new(
        flow: &str,
        input: &SchemaRef,
        where_: Option<&str>,
        select: Option<&[String]>,
    ) -> Self {
        Self::with_joins(flow, input, where_, select, &[])
    }

    /// [`Projection::new`] with stream-static joins (see [`join`]).
    pub fn with_joins(
        flow: &str,
        input: &SchemaRef,
        where_: Option<&str>,
        select: Option<&[String]>,
        joins: &[JoinSpec],
    ) -> Self {
        let data_columns: Vec<String> = input
            .fields()
            .iter()
            .filter(|f| f.name() != METADATA_COLUMN)
            .map(|f| f.name().clone())
            .collect();
        let mut config = SessionConfig::new().with_target_partitions(1);
        config.options_mut().sql_parser.enable_ident_normalization = false;
        // `current_timestamp()` is an instant in UTC (Spark's TIMESTAMP), not a timestamp_ntz.
        config.options_mut().execution.time_zone = Some("UTC".to_string());
        let mut p = Projection {
            flow: flow.to_string(),
            where_: where_.map(str::to_string),
            select: select.map(<[String]>::to_vec),
            data_columns,
            dims: join::Dimensions::new(flow, joins),
            sql: None,
            invalid: None,
            row_wise: None,
            metadata_fields: None,
            ctx: SessionContext::new_with_config(config),
        };
        p.rebuild_sql();
        p
    }

    fn rebuild_sql(&mut self) {
        self.row_wise = None;
        match self.build_sql() {
            Ok(sql) => {
                self.sql = sql;
                self.invalid = None;
            }
            Err(message) => {
                self.sql = None;
                self.invalid = Some(message);
            }
        }
    }

    /// The query over `batch`, built from the parsed fragments ([`sql_fragment`]).
    fn build_sql(&self) -> std::result::Result<Option<String>, String> {
        if self.where_.is_none() && self.select.is_none() && self.dims.is_empty() {
            return Ok(None);
        }
        let joined = !self.dims.is_empty();
        let stream_items = || -> String {
            self.data_columns
                .iter()
                .map(|c| {
                    if joined {
                        format!("batch.{}", quote_ident(c))
                    } else {
                        quote_ident(c)
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let items = match &self.select {
            None if joined => {
                let specs: Vec<&JoinSpec> = self.dims.specs().collect();
                let loaded: Vec<(&JoinSpec, &SchemaRef)> = specs
                    .iter()
                    .zip(self.dims.schemas())
                    .filter_map(|(spec, (_, schema))| schema.map(|s| (*spec, s)))
                    .collect();
                join::default_items(&self.data_columns, &loaded).join(", ")
            }
            None => stream_items(),
            Some(items) => items
                .iter()
                .map(|item| {
                    if item.trim() == "*" {
                        Ok(stream_items())
                    } else {
                        sql_fragment(item, true).map_err(|m| format!("select `{item}`: {m}"))
                    }
                })
                .collect::<std::result::Result<Vec<_>, _>>()?
                .join(", "),
        };
        let specs: Vec<JoinSpec> = self.dims.specs().cloned().collect();
        let mut sql = format!("SELECT {items} FROM {}", join::from_clause(&specs)?);
        if let Some(w) = &self.where_ {
            let w = sql_fragment(w, false).map_err(|m| format!("where `{w}`: {m}"))?;
            sql.push_str(&format!(" WHERE {w}"));
        }
        Ok(Some(sql))
    }

    fn invalid_error(&self) -> Result<()> {
        match &self.invalid {
            Some(message) => Err(Error::Plan {
                flow: self.flow.clone(),
                message: message.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Re-reads dimensions that changed (and re-plans the SQL when one did).
    async fn prepare(&mut self) -> Result<()> {
        if self.dims.is_empty() {
            return Ok(());
        }
        if self.dims.refresh(&self.ctx).await? {
            self.rebuild_sql();
        }
        Ok(())
    }

    /// The dimensions' state after the last batch (`weir.dimensions` in progress).
    pub fn dimensions(&mut self) -> Vec<crate::records::DimensionProgress> {
        self.dims.take_progress()
    }

    /// The columns of `USING`-style join conditions (`on = ["carrier"]`).
    fn join_key_columns(&self) -> Vec<String> {
        self.dims
            .specs()
            .filter_map(|j| match &j.on {
                crate::spec::JoinOn::Columns(c) => Some(c.clone()),
                crate::spec::JoinOn::Condition(_) => None,
            })
            .flatten()
            .collect()
    }

    /// Whether the projection changes batches at all.
    pub fn is_identity(&self) -> bool {
        self.sql.is_none() && self.invalid.is_none()
    }

    /// Applies `where` and `select` to one micro-batch. Without either, drops `_metadata`.
    pub async fn apply(&mut self, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        self.prepare().await?;
        self.invalid_error()?;
        let Some(sql) = &self.sql else {
            return batches
                .into_iter()
                .map(|b| drop_metadata(&b))
                .collect::<Result<Vec<_>>>();
        };
        let Some(first) = batches.first() else {
            return Ok(Vec::new());
        };
        let schema = first.schema();
        let batches =
            join::normalize_join_keys(batches, &self.join_key_columns()).map_err(|e| {
                Error::Arrow {
                    context: format!("flow {}: normalising float join keys", self.flow),
                    source: e,
                }
            })?;
        let sql = sql.clone();
        // One session state for the whole micro-batch: `current_timestamp()` is one
        // instant for all its rows, as in Spark, whatever the number of chunks.
        let state = self.ctx.state();
        let num_rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if num_rows <= CHUNK_ROWS || !self.row_wise(&state, &schema, &sql).await? {
            return self.query(&state, &schema, &sql, batches).await;
        }
        // Row by row: the same rows in the same order as one query over the whole input,
        // in chunks, so that the input and the output of the whole micro-batch are never
        // in memory together (each chunk's input is dropped once its output is out).
        let mut out = Vec::new();
        let mut chunk = Vec::new();
        let mut chunk_rows = 0;
        for batch in batches {
            let mut offset = 0;
            while offset < batch.num_rows() {
                let take = (batch.num_rows() - offset).min(CHUNK_ROWS - chunk_rows);
                chunk.push(if offset == 0 && take == batch.num_rows() {
                    batch.clone()
                } else {
                    batch.slice(offset, take)
                });
                offset += take;
                chunk_rows += take;
                if chunk_rows == CHUNK_ROWS {
                    let full = std::mem::take(&mut chunk);
                    out.extend(self.query(&state, &schema, &sql, full).await?);
                    chunk_rows = 0;
                }
            }
        }
        if !chunk.is_empty() {
            out.extend(self.query(&state, &schema, &sql, chunk).await?);
        }
        Ok(out)
    }

    /// Runs the flow's query over `batches` registered as `batch`.
    async fn query(
        &self,
        state: &datafusion::execution::SessionState,
        schema: &SchemaRef,
        sql: &str,
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        query_batches(&self.flow, &self.ctx, state, schema, sql, batches).await
    }

    /// Whether the query computes each output row from one input row alone (filters,
    /// projections, joins with the dimensions; no aggregate, window, sort, limit,
    /// distinct or union anywhere, subqueries included): then running it over chunks
    /// of the input gives the same rows in the same order as one run over all of it.
    async fn row_wise(
        &mut self,
        state: &datafusion::execution::SessionState,
        schema: &SchemaRef,
        sql: &str,
    ) -> Result<bool> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        use datafusion::logical_expr::LogicalPlan;
        if let Some(known) = self.row_wise {
            return Ok(known);
        }
        let table = datafusion::datasource::MemTable::try_new(schema.clone(), vec![vec![]])
            .map_err(|e| self.sql_error("registering the batch", e))?;
        self.ctx
            .register_table("batch", Arc::new(table))
            .map_err(|e| self.sql_error("registering the batch", e))?;
        let planned = state.create_logical_plan(sql).await;
        let _ = self.ctx.deregister_table("batch");
        let plan = planned.map_err(|e| self.sql_error(&format!("planning `{sql}`"), e))?;
        let mut row_wise = true;
        plan.apply_with_subqueries(|node| {
            row_wise &= matches!(
                node,
                LogicalPlan::Projection(_)
                    | LogicalPlan::Filter(_)
                    | LogicalPlan::Join(_)
                    | LogicalPlan::TableScan(_)
                    | LogicalPlan::SubqueryAlias(_)
            );
            Ok(if row_wise {
                TreeNodeRecursion::Continue
            } else {
                TreeNodeRecursion::Stop
            })
        })
        .map_err(|e| self.sql_error(&format!("planning `{sql}`"), e))?;
        self.row_wise = Some(row_wise);
        Ok(row_wise)
    }

    /// Plans the query against a schema without data, to report errors before anything runs.
    pub async fn check(&mut self, input: &SchemaRef) -> Result<SchemaRef> {
        self.prepare().await?;
        self.invalid_error()?;
        let Some(sql) = self.sql.clone() else {
            self.metadata_fields = Some(Default::default());
            let fields: Vec<_> = input
                .fields()
                .iter()
                .filter(|f| f.name() != METADATA_COLUMN)
                .cloned()
                .collect();
            return Ok(Arc::new(arrow::datatypes::Schema::new(fields)));
        };
        let table = datafusion::datasource::MemTable::try_new(input.clone(), vec![vec![]])
            .map_err(|e| self.sql_error("registering the batch", e))?;
        self.ctx
            .register_table("batch", Arc::new(table))
            .map_err(|e| self.sql_error("registering the batch", e))?;
        let planned = async {
            let df = self.ctx.sql(&sql).await?;
            let schema = Arc::new(df.schema().as_arrow().clone());
            // The plan as built from the SQL (wildcards are expanded there), before the
            // optimiser folds plain column lists into the table scan: every column the
            // query reads is named in an expression.
            let fields = metadata_fields_of(df.logical_plan())?;
            Ok((schema, fields))
        }
        .await
        .map_err(|e| self.sql_error(&format!("planning `{sql}`"), e));
        let _ = self.ctx.deregister_table("batch");
        let (schema, fields) = planned?;
        self.metadata_fields = fields;
        Ok(schema)
    }

    /// The `_metadata` fields the query reads, once [`Projection::check`] planned it
    /// (every field before): a source may leave the others empty.
    pub fn metadata_fields(&self) -> MetadataFields {
        self.metadata_fields.clone()
    }

    fn sql_error(&self, context: &str, e: datafusion::error::DataFusionError) -> Error {
        sql_error(&self.flow, context, e)
    }

    /// The projection as a [`RowWiseQuery`] over micro-batch rows of `schema`, when it
    /// computes each output row from one input row alone and joins no dimension (a
    /// dimension is refreshed per micro-batch); `None` otherwise. Its
    /// `current_timestamp()` is the instant this is called, one for the micro-batch.
    pub async fn row_wise_query(&mut self, schema: &SchemaRef) -> Result<Option<RowWiseQuery>> {
        if !self.dims.is_empty() {
            return Ok(None);
        }
        self.invalid_error()?;
        let state = self.ctx.state();
        let start = state.execution_props().query_execution_start_time;
        let sql = self.sql.clone();
        if let Some(sql) = &sql
            && !self.row_wise(&state, schema, sql).await?
        {
            return Ok(None);
        }
        Ok(Some(RowWiseQuery {
            flow: self.flow.clone(),
            sql,
            schema: schema.clone(),
            config: self.ctx.copied_config(),
            start: start.unwrap_or_else(chrono::Utc::now),
            direct: true,
        }))
    }
}

fn sql_error(flow: &str, context: &str, e: datafusion::error::DataFusionError) -> Error {
    Error::Sql {
        flow: flow.to_string(),
        context: context.to_string(),
        source: Box::new(e),
    }
}

/// A row-wise projection of one micro-batch that threads run over parts of its rows at
/// once, each with a [`RowWiseRunner`] of its own: parts in the input's order give the
/// rows one query over the whole input gives, in the same order (the projection is
/// row-wise, [`Projection::row_wise_query`]), with one `current_timestamp()` for all.
#[derive(Clone)]
pub struct RowWiseQuery {
    flow: String,
    /// `None`: no `where` or `select`, the rows lose `_metadata` only.
    sql: Option<String>,
    schema: SchemaRef,
    config: SessionConfig,
    start: chrono::DateTime<chrono::Utc>,
    /// Whether a plan of a projection or filter of the rows is evaluated directly
    /// ([`DirectPlan`]; always, but in tests of the other way).
    direct: bool,
}

impl RowWiseQuery {
    /// A runner for one thread: a DataFusion session of its own (the rows are registered
    /// as `batch` in it), the micro-batch's start time fixed.
    pub fn runner(&self) -> RowWiseRunner {
        let ctx = SessionContext::new_with_config(self.config.clone());
        let mut state = ctx.state();
        state.execution_props_mut().query_execution_start_time = Some(self.start);
        let task = Arc::new(datafusion::execution::TaskContext::from(&state));
        RowWiseRunner {
            query: self.clone(),
            ctx,
            state,
            task,
            plan: std::sync::Mutex::new(None),
        }
    }
}

/// See [`RowWiseQuery::runner`].
pub struct RowWiseRunner {
    query: RowWiseQuery,
    ctx: SessionContext,
    state: datafusion::execution::SessionState,
    task: Arc<datafusion::execution::TaskContext>,
    /// The physical plan of the first run, for the next runs (`None` until then, or
    /// when the plan has another in-memory scan, e.g. a `VALUES` list: each run is
    /// planned then).
    plan: std::sync::Mutex<Option<Kept>>,
}

/// A row-wise query's physical plan kept for the next runs.
#[derive(Clone)]
enum Kept {
    /// Its one in-memory scan of `batch` pointed at each run's rows ([`with_batch`]).
    Plan(Arc<dyn ExecutionPlan>),
    /// A projection (and filter) of the scan, evaluated on each run's rows.
    Direct(Arc<DirectPlan>),
}

/// A physical plan that is a projection, a filter, or both, over the in-memory scan of
/// `batch` (what `select` and `where` over a file source's rows plan to): its physical
/// expressions are evaluated on each run's rows, as `ProjectionExec` and `FilterExec`
/// evaluate them, without re-pointing and executing the plan (which costs ~450
/// allocations a run: BENCHMARKS.md, "Bronze ingest: the batch boundaries").
struct DirectPlan {
    /// The scan's columns of the rows (`None`: all).
    columns: Option<Vec<usize>>,
    /// `FilterExec`'s predicate (rows where it is true are kept).
    predicate: Option<Arc<dyn datafusion::physical_plan::PhysicalExpr>>,
    /// `ProjectionExec`'s expressions (`None`: the scan's columns as they are).
    exprs: Option<Vec<Arc<dyn datafusion::physical_plan::PhysicalExpr>>>,
    /// The plan's output schema.
    schema: SchemaRef,
}

impl DirectPlan {
    /// `plan` as a [`DirectPlan`] when it is one: `ProjectionExec`? over `FilterExec`
    /// (without a projection of its own)? over the in-memory scan, no node with a limit.
    fn of(plan: &Arc<dyn ExecutionPlan>) -> Option<DirectPlan> {
        use datafusion::physical_plan::filter::FilterExec;
        use datafusion::physical_plan::projection::ProjectionExec;
        let mut node = plan;
        let mut exprs = None;
        if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
            exprs = Some(projection.expr().iter().map(|e| e.expr.clone()).collect());
            node = projection.input();
        }
        let mut predicate = None;
        if let Some(filter) = node.downcast_ref::<FilterExec>() {
            if filter.projection().is_some() || filter.fetch().is_some() {
                return None;
            }
            predicate = Some(filter.predicate().clone());
            node = filter.input();
        }
        let scan = memory_source(node)?;
        if node.fetch().is_some() || scan.partitions().len() != 1 {
            return None;
        }
        Some(DirectPlan {
            columns: scan.projection().clone(),
            predicate,
            exprs,
            schema: plan.schema(),
        })
    }

    /// The plan's rows for `batches`: an output batch per input batch that keeps a row.
    fn run(&self, batches: Vec<RecordBatch>) -> datafusion::error::Result<Vec<RecordBatch>> {
        let mut out = Vec::with_capacity(batches.len());
        for batch in &batches {
            let rows = self.run_one(batch)?;
            if rows.num_rows() > 0 {
                out.push(rows);
            }
        }
        Ok(out)
    }

    fn run_one(&self, batch: &RecordBatch) -> datafusion::error::Result<RecordBatch> {
        let mut rows = match &self.columns {
            Some(columns) => batch.project(columns)?,
            None => batch.clone(),
        };
        if let Some(predicate) = &self.predicate {
            let mask = predicate.evaluate(&rows)?.into_array(rows.num_rows())?;
            let mask = datafusion::common::cast::as_boolean_array(&mask)?;
            rows = arrow::compute::filter_record_batch(&rows, mask)?;
        }
        let columns = match &self.exprs {
            Some(exprs) => exprs
                .iter()
                .map(|e| e.evaluate(&rows)?.into_array(rows.num_rows()))
                .collect::<datafusion::error::Result<Vec<_>>>()?,
            None => rows.columns().to_vec(),
        };
        let options =
            arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }
}

impl RowWiseRunner {
    /// The projection of `batches` (rows of the micro-batch's schema).
    ///
    /// The SQL is parsed, planned and optimised once, at the first run; later runs
    /// execute that plan over their own rows. The plan depends on the rows' schema and
    /// the micro-batch's start time only (`current_timestamp()` is folded at planning),
    /// both fixed for the runner, so every run gives the rows planning it again would.
    pub async fn run(&self, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        let q = &self.query;
        let Some(sql) = &q.sql else {
            return batches.iter().map(drop_metadata).collect();
        };
        if batches.is_empty() {
            return Ok(Vec::new());
        }
        let kept = self.plan.lock().map_or(None, |plan| plan.clone());
        let rows = async {
            let plan = match kept {
                Some(Kept::Direct(direct)) => return direct.run(batches),
                Some(Kept::Plan(plan)) => with_batch(plan, &q.schema, batches)?,
                None => self.plan_first(sql, batches).await?,
            };
            datafusion::physical_plan::collect(plan, self.task.clone()).await
        }
        .await;
        rows.map_err(|e| sql_error(&q.flow, &format!("evaluating `{sql}`"), e))
    }

    /// Plans `sql` over `batches` registered as `batch`, and keeps the plan for the next
    /// runs when its only in-memory scan is `batch`'s.
    async fn plan_first(
        &self,
        sql: &str,
        batches: Vec<RecordBatch>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let first = batches.first().cloned();
        let table =
            datafusion::datasource::MemTable::try_new(self.query.schema.clone(), vec![batches])?;
        self.ctx.register_table("batch", Arc::new(table))?;
        let plan = async {
            let logical = self.state.create_logical_plan(sql).await?;
            self.state.create_physical_plan(&logical).await
        }
        .await;
        let _ = self.ctx.deregister_table("batch");
        let plan = plan?;
        if let Some(first) = first
            && only_scan_reads(&plan, &first)?
            && let Ok(mut kept) = self.plan.lock()
        {
            // Kept without the rows, which the runner must not hold on to.
            *kept = Some(match DirectPlan::of(&plan).filter(|_| self.query.direct) {
                Some(direct) => Kept::Direct(Arc::new(direct)),
                None => Kept::Plan(with_batch(plan.clone(), &self.query.schema, Vec::new())?),
            });
        }
        Ok(plan)
    }
}

/// Whether `plan`'s one in-memory scan (of `batch` or a `VALUES` list) is the one
/// reading `first` (the first of `batch`'s rows): not when `batch` was optimised away
/// and a `VALUES` list is left, nor when there are two scans.
fn only_scan_reads(
    plan: &Arc<dyn ExecutionPlan>,
    first: &RecordBatch,
) -> datafusion::error::Result<bool> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut scans = 0;
    let mut reads_first = false;
    plan.apply(|node| {
        if let Some(scan) = memory_source(node) {
            scans += 1;
            reads_first = scan
                .partitions()
                .first()
                .and_then(|p| p.first())
                .is_some_and(|b| {
                    b.num_columns() == first.num_columns()
                        && b.columns()
                            .iter()
                            .zip(first.columns())
                            .all(|(a, b)| Arc::ptr_eq(a, b))
                });
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(scans == 1 && reads_first)
}

fn memory_source(
    node: &Arc<dyn ExecutionPlan>,
) -> Option<&datafusion::datasource::memory::MemorySourceConfig> {
    node.downcast_ref::<datafusion::datasource::source::DataSourceExec>()?
        .data_source()
        .downcast_ref()
}

/// `plan` (whose one in-memory scan is `batch`'s, [`only_scan_reads`]) over `batches`: the scan
/// replaced by one of `batches` with the same projection, the nodes above rebuilt (so
/// none keeps the state of an earlier execution).
fn with_batch(
    plan: Arc<dyn ExecutionPlan>,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    let mut batches = Some(batches);
    let rebound = plan.transform_up(|node| {
        let Some(scan) = memory_source(&node) else {
            return Ok(Transformed::no(node));
        };
        let rows = batches.take().unwrap_or_default();
        let exec = datafusion::datasource::memory::MemorySourceConfig::try_new_exec(
            &[rows],
            schema.clone(),
            scan.projection().clone(),
        )?;
        Ok(Transformed::yes(exec as Arc<dyn ExecutionPlan>))
    })?;
    Ok(rebound.data)
}

/// Runs `sql` over `batches` (of `schema`) registered as `batch` in `ctx`, planned and
/// executed with `state` (a state of `ctx`: its start time is `current_timestamp()`).
async fn query_batches(
    flow: &str,
    ctx: &SessionContext,
    state: &datafusion::execution::SessionState,
    schema: &SchemaRef,
    sql: &str,
    batches: Vec<RecordBatch>,
) -> Result<Vec<RecordBatch>> {
    let table = datafusion::datasource::MemTable::try_new(schema.clone(), vec![batches])
        .map_err(|e| sql_error(flow, "registering the batch", e))?;
    ctx.register_table("batch", Arc::new(table))
        .map_err(|e| sql_error(flow, "registering the batch", e))?;
    let result = async {
        let plan = state.create_logical_plan(sql).await?;
        datafusion::dataframe::DataFrame::new(state.clone(), plan)
            .collect()
            .await
    }
    .await
    .map_err(|e| sql_error(flow, &format!("evaluating `{sql}`"), e));
    let _ = ctx.deregister_table("batch");
    result
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn drop_metadata(batch: &RecordBatch) -> Result<RecordBatch> {
    match batch.schema().index_of(METADATA_COLUMN) {
        Ok(i) => {
            let mut b = batch.clone();
            b.remove_column(i);
            Ok(b)
        }
        Err(_) => Ok(batch.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(n: i64, per_batch: i64) -> (SchemaRef, Vec<RecordBatch>) {
        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batches = (0..n)
            .step_by(per_batch as usize)
            .map(|start| {
                let values: Int64Array = (start..(start + per_batch).min(n)).collect();
                RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap()
            })
            .collect();
        (schema, batches)
    }

    fn column<T: arrow::datatypes::ArrowPrimitiveType>(
        batches: &[RecordBatch],
        i: usize,
    ) -> Vec<T::Native> {
        use arrow::array::AsArray;
        batches
            .iter()
            .flat_map(|b| b.column(i).as_primitive::<T>().values().to_vec())
            .collect()
    }

    #[tokio::test]
    async fn a_row_wise_query_runs_in_chunks_with_one_timestamp_per_micro_batch() {
        use arrow::datatypes::Int64Type;
        // Batches larger than a chunk, so chunks also cut batches.
        let n = 3 * CHUNK_ROWS as i64 + 1_000;
        let (schema, batches) = numbers(n, 200_000);
        let select = vec!["v".to_string(), "current_timestamp() AS t".to_string()];
        let mut p = Projection::new("f", &schema, Some("v % 3 = 0"), Some(&select));
        let out = p.apply(batches).await.unwrap();
        assert_eq!(p.row_wise, Some(true));
        let expected: Vec<i64> = (0..n).filter(|v| v % 3 == 0).collect();
        assert_eq!(
            column::<Int64Type>(&out, 0),
            expected,
            "same rows, same order"
        );
        let mut times: Vec<i64> = out
            .iter()
            .flat_map(|b| {
                let t = arrow::compute::cast(b.column(1), &arrow::datatypes::DataType::Int64);
                let t = t.unwrap();
                column::<Int64Type>(&[RecordBatch::try_from_iter([("t", t)]).unwrap()], 0)
            })
            .collect();
        times.dedup();
        assert_eq!(
            times.len(),
            1,
            "one current_timestamp() for the micro-batch"
        );
    }

    /// The `_metadata` fields each query reads, from DataFusion's plan: `_metadata.<field>`
    /// and `_metadata['<field>']` read one field, in subqueries too; the whole struct
    /// (selected, tested, under `batch.*`, or the outer one in a correlated subquery)
    /// reads them all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_wise_query_gives_the_whole_batch_s_rows_part_by_part_from_two_threads() {
        use arrow::datatypes::{Int64Type, TimestampNanosecondType};
        let n = 50_000;
        let (schema, batches) = numbers(n, 1_000);
        let select = vec!["v * 2 AS w".to_string(), "now() AS t".to_string()];
        let mut whole = Projection::new("f", &schema, Some("v % 7 <> 0"), Some(&select));
        let expected = whole.apply(batches.clone()).await.unwrap();
        let mut p = Projection::new("f", &schema, Some("v % 7 <> 0"), Some(&select));
        let query = p.row_wise_query(&schema).await.unwrap().expect("row-wise");
        // Two threads, each a contiguous half, each in parts of a few batches.
        let halves: Vec<Vec<RecordBatch>> = batches.chunks(25).map(<[_]>::to_vec).collect();
        let mut handles = Vec::new();
        for half in halves {
            let runner = query.runner();
            handles.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for part in half.chunks(4) {
                    out.extend(runner.run(part.to_vec()).await.unwrap());
                }
                out
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.extend(h.await.unwrap());
        }
        assert_eq!(
            column::<Int64Type>(&out, 0),
            column::<Int64Type>(&expected, 0)
        );
        let instants = column::<TimestampNanosecondType>(&out, 1);
        assert!(
            instants.windows(2).all(|w| w[0] == w[1]),
            "one now() per micro-batch"
        );
        // Not row-wise: an aggregate needs the whole batch.
        let count = vec!["count(*) AS n".to_string()];
        let mut agg = Projection::new("f", &schema, None, Some(&count));
        assert!(agg.row_wise_query(&schema).await.unwrap().is_none());
        // No `where`/`select`: the rows as they are.
        let mut plain = Projection::new("f", &schema, None, None);
        let q = plain
            .row_wise_query(&schema)
            .await
            .unwrap()
            .expect("identity");
        assert_eq!(q.runner().run(batches).await.unwrap().len(), 50);
    }

    /// A runner plans its query once and runs that plan over each part's rows: a
    /// projection or filter of the rows evaluated directly, another plan re-pointed at
    /// each part's rows (forced here); a plan without the scan of `batch` (optimised
    /// away) is planned at each run. All give, part by part, the rows of the query over
    /// the whole batch.
    #[tokio::test]
    async fn a_runner_plans_once_and_runs_the_plan_over_each_part() {
        use arrow::datatypes::Int64Type;
        let (schema, batches) = numbers(10_000, 500);
        for (where_, select, kept) in [
            (Some("v % 3 = 0"), "v + 1 AS w", true),
            (None, "v * 2 AS w", true),
            (Some("v > 20"), "v", true),
            (None, "v", true),
            // Optimised to no scan at all: planned at each run.
            (Some("v < 0 AND 1 = 0"), "v + 1 AS w", false),
        ] {
            let select = vec![select.to_string()];
            let mut whole = Projection::new("f", &schema, where_, Some(&select));
            let expected = whole.apply(batches.clone()).await.unwrap();
            let mut p = Projection::new("f", &schema, where_, Some(&select));
            let query = p.row_wise_query(&schema).await.unwrap().expect("row-wise");
            for direct in [true, false] {
                let mut query = query.clone();
                query.direct = direct;
                let runner = query.runner();
                let mut out = Vec::new();
                for part in batches.chunks(3) {
                    out.extend(runner.run(part.to_vec()).await.unwrap());
                    let plan = runner.plan.lock().unwrap().clone();
                    assert_eq!(plan.is_some(), kept, "{where_:?} {select:?}");
                    match plan {
                        Some(Kept::Direct(_)) => assert!(direct),
                        Some(Kept::Plan(p)) => {
                            assert!(!direct, "{where_:?} {select:?}: planned, not direct");
                            // The kept plan holds no rows.
                            use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
                            let mut held = usize::MAX;
                            p.apply(|node| {
                                if let Some(scan) = memory_source(node) {
                                    held = scan.partitions().iter().map(Vec::len).sum();
                                }
                                Ok(TreeNodeRecursion::Continue)
                            })
                            .unwrap();
                            assert_eq!(held, 0);
                        }
                        None => {}
                    }
                }
                assert_eq!(
                    column::<Int64Type>(&out, 0),
                    column::<Int64Type>(&expected, 0),
                    "{where_:?} {select:?} direct {direct}"
                );
                assert_eq!(out.is_empty(), !kept);
                let schemas_match = out.iter().all(|b| b.schema() == expected[0].schema());
                assert!(
                    expected.is_empty() || schemas_match,
                    "{where_:?} {select:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn the_metadata_fields_a_query_reads() {
        let data = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, true),
        ]));
        let schema = crate::source::files::batch_schema(&data);
        async fn read(
            schema: &SchemaRef,
            where_: Option<&str>,
            select: Option<&[&str]>,
        ) -> Option<String> {
            let select: Option<Vec<String>> =
                select.map(|s| s.iter().map(|i| i.to_string()).collect());
            let mut p = Projection::new("f", schema, where_, select.as_deref());
            assert_eq!(p.metadata_fields(), None, "all fields before planning");
            p.check(schema).await.unwrap();
            p.metadata_fields()
                .map(|f| f.into_iter().collect::<Vec<_>>().join(","))
        }
        let fields = |where_, select| read(&schema, where_, select);
        let some = |s: &str| Some(s.to_string());
        assert_eq!(fields(None, None).await, some(""));
        assert_eq!(fields(Some("v > 0"), Some(&["*"])).await, some(""));
        assert_eq!(
            fields(None, Some(&["*", "_metadata.file_path AS source_file"])).await,
            some("file_path")
        );
        assert_eq!(
            fields(
                Some("_metadata.file_size > 0"),
                Some(&["v", "upper(_metadata.file_name) AS n"])
            )
            .await,
            some("file_name,file_size")
        );
        assert_eq!(fields(None, Some(&["v", "_metadata"])).await, None);
        assert_eq!(
            fields(None, Some(&["v", "_metadata['file_name'] AS n"])).await,
            some("file_name")
        );
        assert_eq!(
            fields(Some("_metadata IS NOT NULL"), Some(&["v"])).await,
            None
        );
        assert_eq!(fields(None, Some(&["batch.*"])).await, None);
        assert_eq!(
            fields(None, Some(&["v", "struct(_metadata.file_path) AS s"])).await,
            some("file_path")
        );
        assert_eq!(
            fields(
                Some("v IN (SELECT v FROM batch WHERE _metadata.file_size > 0)"),
                None
            )
            .await,
            some("file_size")
        );
        // The outer `_metadata` from a correlated subquery.
        assert_eq!(
            fields(
                Some(
                    "EXISTS (SELECT 1 FROM batch b2 WHERE b2.v = batch.v \
                     AND get_field(batch._metadata, 'file_name') = 'a.csv')"
                ),
                Some(&["v"])
            )
            .await,
            None
        );
    }

    #[tokio::test]
    async fn a_query_over_the_whole_batch_is_not_chunked() {
        use arrow::datatypes::Int64Type;
        let n = 2 * CHUNK_ROWS as i64 + 5;
        let (schema, batches) = numbers(n, 8192);
        let select = vec!["count(*) AS n".to_string()];
        let mut p = Projection::new("f", &schema, None, Some(&select));
        let out = p.apply(batches).await.unwrap();
        assert_eq!(p.row_wise, Some(false));
        assert_eq!(column::<Int64Type>(&out, 0), vec![n]);
    }

    #[test]
    fn syntax() {
        assert!(check_sql_syntax("dep_delay > 15", false).is_ok());
        assert!(check_sql_syntax("_metadata.file_path AS source_file", true).is_ok());
        assert!(check_sql_syntax("dep_delay >", false).is_err());
        assert!(check_sql_syntax("a b c", false).is_err());
    }
}
