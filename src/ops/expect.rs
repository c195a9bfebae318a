//! Expectations (`[[flow.expect]]`): Lakeflow Declarative Pipelines' `expect`,
//! `expect_or_drop` and `expect_or_fail` over a flow's input rows, before `where` and
//! `select` (docs/expectations.md).
//!
//! Each constraint is parsed, resolved against the input's schema and compiled to a
//! DataFusion physical expression once per flow ([`Expectations::plan`]); each batch
//! evaluates them on its Arrow rows, vectorised ([`Expectations::apply`]): one boolean
//! array per expectation, the counts from its true count, one filter for the rows a
//! `drop` expectation removes. A row passes an expectation when the constraint is true;
//! false or NULL violate it (Lakeflow's constraint "must evaluate to true or false for
//! each record"; a NULL is not a pass, unlike a Delta CHECK constraint).

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::logical_expr::ExprSchemable;
use datafusion::physical_plan::PhysicalExpr;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::{Error, Result};
use crate::records::ExpectationProgress;
use crate::schema::METADATA_COLUMN;
use crate::spec::{ExpectationSpec, OnViolation};

/// A flow's expectations, compiled against its input rows' schema.
pub struct Expectations {
    flow: String,
    /// The rows' schema the checks were compiled against.
    schema: Option<SchemaRef>,
    specs: Vec<ExpectationSpec>,
    checks: Vec<Check>,
}

struct Check {
    spec: ExpectationSpec,
    /// The constraint as rendered from its syntax tree (what was compiled).
    sql: String,
    expr: Arc<dyn PhysicalExpr>,
}

/// Why expectation `index` of the flow cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub index: usize,
    pub message: String,
}

/// Rows that passed and failed each expectation (in the flow's order), and rows the
/// `drop` expectations removed (a row failing two of them is removed once).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: Vec<u64>,
    pub failed: Vec<u64>,
    pub dropped: u64,
}

impl Counts {
    /// Adds `other`'s counts (of the same expectations) to these.
    pub fn add(&mut self, other: &Counts) {
        for (a, b) in self.passed.iter_mut().zip(&other.passed) {
            *a += b;
        }
        for (a, b) in self.failed.iter_mut().zip(&other.failed) {
            *a += b;
        }
        self.dropped += other.dropped;
    }
}

impl Expectations {
    /// A flow without expectations.
    pub fn none(flow: &str) -> Self {
        Expectations {
            flow: flow.to_string(),
            schema: None,
            specs: Vec::new(),
            checks: Vec::new(),
        }
    }

    /// Compiles `specs` against `input` (the rows' schema, `_metadata` included): each
    /// constraint must be one SQL expression of type BOOLEAN over the input's columns.
    pub fn plan(
        flow: &str,
        specs: &[ExpectationSpec],
        input: &SchemaRef,
    ) -> std::result::Result<Self, Invalid> {
        let mut config = SessionConfig::new().with_target_partitions(1);
        config.options_mut().sql_parser.enable_ident_normalization = false;
        config.options_mut().execution.time_zone = Some("UTC".to_string());
        let ctx = SessionContext::new_with_config(config);
        let mut checks = Vec::with_capacity(specs.len());
        for (index, spec) in specs.iter().enumerate() {
            let invalid = |message: String| Invalid { index, message };
            let sql = super::sql_fragment(&spec.constraint, false).map_err(&invalid)?;
            let schema =
                DFSchema::try_from(input.as_ref().clone()).map_err(|e| invalid(e.to_string()))?;
            let expr = ctx
                .parse_sql_expr(&sql, &schema)
                .map_err(|e| invalid(columns_hint(e.to_string(), input)))?;
            let ty = expr
                .get_type(&schema)
                .map_err(|e| invalid(columns_hint(e.to_string(), input)))?;
            if !matches!(ty, DataType::Boolean | DataType::Null) {
                return Err(invalid(format!(
                    "the constraint is of type {ty}, not BOOLEAN; write a condition each row must meet, e.g. \"{} IS NOT NULL\"",
                    input.fields().first().map_or("col", |f| f.name().as_str())
                )));
            }
            let expr = ctx
                .create_physical_expr(expr, &schema)
                .map_err(|e| invalid(e.to_string()))?;
            checks.push(Check {
                spec: spec.clone(),
                sql,
                expr,
            });
        }
        Ok(Expectations {
            flow: flow.to_string(),
            schema: Some(input.clone()),
            specs: specs.to_vec(),
            checks,
        })
    }

    /// [`Expectations::plan`] for the engine: an invalid expectation is the pipeline's
    /// error at the key of its constraint.
    pub fn plan_flow(flow: &str, specs: &[ExpectationSpec], input: &SchemaRef) -> Result<Self> {
        Self::plan(flow, specs, input).map_err(|i| invalid_error(specs, &i))
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// Whether a constraint names the hidden `_metadata` column (then the source fills
    /// every field of it).
    pub fn reads_metadata(&self) -> bool {
        self.checks.iter().any(|c| c.sql.contains(METADATA_COLUMN))
    }

    /// Whether a row's file is named: by a `fail` expectation's error.
    pub fn names_files(&self) -> bool {
        self.checks
            .iter()
            .any(|c| c.spec.on_violation == OnViolation::Fail)
    }

    /// Zero counts for these expectations.
    pub fn zero(&self) -> Counts {
        Counts {
            passed: vec![0; self.checks.len()],
            failed: vec![0; self.checks.len()],
            dropped: 0,
        }
    }

    /// Evaluates every expectation on every row of `batches` and adds the counts to
    /// `counts`: the rows no `drop` expectation removed, or the error of the first
    /// `fail` expectation a row violates (naming the row's file or offset, else
    /// `source`, and the row). With `quarantine`, the removed rows go there
    /// ([`quarantine_rows`]).
    pub fn apply(
        &self,
        batches: Vec<RecordBatch>,
        counts: &mut Counts,
        batch_id: u64,
        source: &str,
        mut quarantine: Option<&mut Vec<RecordBatch>>,
    ) -> Result<Vec<RecordBatch>> {
        if self.checks.is_empty() {
            return Ok(batches);
        }
        let mut out = Vec::with_capacity(batches.len());
        let mut replanned: Option<Expectations> = None;
        for batch in batches {
            let rows = batch.num_rows();
            if rows == 0 {
                continue;
            }
            // Compiled expressions address columns by position: rows of another shape
            // (a source whose schema moved on) get the constraints planned for theirs.
            let this = match &self.schema {
                Some(s) if !same_shape(s, &batch.schema()) => {
                    if replanned
                        .as_ref()
                        .and_then(|r| r.schema.as_ref())
                        .is_none_or(|r| !same_shape(r, &batch.schema()))
                    {
                        replanned = Some(
                            Expectations::plan(&self.flow, &self.specs, &batch.schema())
                                .map_err(|i| invalid_error(&self.specs, &i))?,
                        );
                    }
                    replanned.as_ref().unwrap_or(self)
                }
                _ => self,
            };
            let mut keep: Option<BooleanArray> = None;
            // Each violated expectation's passing rows, for the quarantine's names.
            let mut violated: Vec<(&str, BooleanArray)> = Vec::new();
            for (i, check) in this.checks.iter().enumerate() {
                let passed = self.evaluate(check, &batch)?;
                let n = passed.true_count();
                counts.passed[i] += n as u64;
                counts.failed[i] += (rows - n) as u64;
                if n == rows {
                    continue;
                }
                if quarantine.is_some() {
                    violated.push((check.spec.name.as_str(), passed.clone()));
                }
                match check.spec.on_violation {
                    OnViolation::Warn => {}
                    OnViolation::Drop => {
                        keep = Some(match keep {
                            None => passed,
                            Some(k) => {
                                arrow::compute::and(&k, &passed).map_err(|e| self.arrow_error(e))?
                            }
                        });
                    }
                    OnViolation::Fail => {
                        return Err(self.failed(check, &batch, &passed, batch_id, source));
                    }
                }
            }
            match keep {
                None => out.push(batch),
                Some(keep) => {
                    let kept = keep.true_count();
                    counts.dropped += (rows - kept) as u64;
                    if let Some(q) = quarantine.as_deref_mut()
                        && kept < rows
                    {
                        q.push(
                            quarantine_rows(&batch, &keep, &violated, batch_id)
                                .map_err(|e| self.arrow_error(e))?,
                        );
                    }
                    if kept > 0 {
                        out.push(
                            arrow::compute::filter_record_batch(&batch, &keep)
                                .map_err(|e| self.arrow_error(e))?,
                        );
                    }
                }
            }
        }
        Ok(out)
    }

    /// The rows of `batch` that pass `check`: true where the constraint is true, false
    /// where it is false or NULL.
    fn evaluate(&self, check: &Check, batch: &RecordBatch) -> Result<BooleanArray> {
        let rows = batch.num_rows();
        let value = check
            .expr
            .evaluate(batch)
            .and_then(|v| v.into_array(rows))
            .map_err(|e| Error::Sql {
                flow: self.flow.clone(),
                context: format!(
                    "evaluating expectation {:?} (constraint `{}`)",
                    check.spec.name, check.sql
                ),
                source: Box::new(e),
            })?;
        Ok(match value.data_type() {
            DataType::Boolean if value.null_count() == 0 => value.as_boolean().clone(),
            DataType::Boolean => arrow::compute::prep_null_mask_filter(value.as_boolean()),
            // A constraint that is NULL for every row (e.g. `NULL`): no row passes.
            _ => BooleanArray::from(vec![false; rows]),
        })
    }

    fn failed(
        &self,
        check: &Check,
        batch: &RecordBatch,
        passed: &BooleanArray,
        batch_id: u64,
        source: &str,
    ) -> Error {
        let failed = (passed.len() - passed.true_count()) as u64;
        let first = (0..passed.len()).find(|&i| !passed.value(i)).unwrap_or(0);
        let (path, location) = locate(batch, first);
        Error::ExpectationFailed(Box::new(crate::error::ExpectationFailure {
            flow: self.flow.clone(),
            name: check.spec.name.clone(),
            constraint: check.sql.clone(),
            batch_id,
            failed,
            location: location.unwrap_or_else(|| format!("source {source}")),
            path,
            row: render_row(batch, first),
        }))
    }

    fn arrow_error(&self, e: arrow::error::ArrowError) -> Error {
        Error::Arrow {
            context: format!("flow {}: applying expectations", self.flow),
            source: e,
        }
    }

    /// Each expectation's counts under Lakeflow's event-log names; `dataset` is the flow.
    pub fn progress(&self, counts: &Counts) -> Vec<ExpectationProgress> {
        self.checks
            .iter()
            .enumerate()
            .map(|(i, c)| ExpectationProgress {
                name: c.spec.name.clone(),
                dataset: self.flow.clone(),
                passed_records: counts.passed.get(i).copied().unwrap_or(0),
                failed_records: counts.failed.get(i).copied().unwrap_or(0),
            })
            .collect()
    }
}

/// The rows of `batch` that `keep` removes, as the quarantine table has them: the data
/// columns, then `_expectations` (the names of the expectations the row failed, in the
/// flow's order: `drop` ones and any other), `_source_file` (`_metadata.file_path`, null
/// for a row not read from a file) and `_batch_id`.
pub fn quarantine_rows(
    batch: &RecordBatch,
    keep: &BooleanArray,
    violated: &[(&str, BooleanArray)],
    batch_id: u64,
) -> std::result::Result<RecordBatch, arrow::error::ArrowError> {
    use arrow::array::{ArrayRef, Int64Array, ListBuilder, StringBuilder};
    use arrow::datatypes::{Field, Schema};
    let gone = arrow::compute::not(keep)?;
    let rows = arrow::compute::filter_record_batch(batch, &gone)?;
    let failed: Vec<(&str, BooleanArray)> = violated
        .iter()
        .map(|(name, passed)| {
            arrow::compute::filter(passed, &gone).map(|a| (*name, a.as_boolean().clone()))
        })
        .collect::<std::result::Result<_, _>>()?;
    let n = rows.num_rows();
    // Parquet's name for a list's items, which Delta writers use: the table's files
    // agree whichever write path (direct append, delta-rs's write) wrote them.
    let mut names = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new(
        "element",
        DataType::Utf8,
        true,
    )));
    for r in 0..n {
        for (name, passed) in &failed {
            if !passed.value(r) {
                names.values().append_value(name);
            }
        }
        names.append(true);
    }
    let names = names.finish();
    let source_file: ArrayRef = rows
        .column_by_name(METADATA_COLUMN)
        .and_then(|m| m.as_struct_opt())
        .and_then(|m| m.column_by_name("file_path"))
        .filter(|c| c.data_type() == &DataType::Utf8)
        .cloned()
        .unwrap_or_else(|| arrow::array::new_null_array(&DataType::Utf8, n));
    let mut fields: Vec<Field> = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (f, c) in rows.schema().fields().iter().zip(rows.columns()) {
        if f.name() != METADATA_COLUMN {
            fields.push(f.as_ref().clone());
            columns.push(c.clone());
        }
    }
    fields.push(Field::new(
        "_expectations",
        names.data_type().clone(),
        false,
    ));
    columns.push(Arc::new(names));
    fields.push(Field::new("_source_file", DataType::Utf8, true));
    columns.push(source_file);
    fields.push(Field::new("_batch_id", DataType::Int64, false));
    columns.push(Arc::new(Int64Array::from(vec![batch_id as i64; n])));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// Whether rows of `a` and `b` have the same columns (names and types) in the same order.
fn same_shape(a: &SchemaRef, b: &SchemaRef) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

/// The pipeline error of an invalid expectation, at its constraint's key.
pub fn invalid_error(specs: &[ExpectationSpec], invalid: &Invalid) -> Error {
    let message = match specs.get(invalid.index) {
        Some(spec) => {
            return Error::Pipeline(spec.at.error(format!(
                "expectation {:?}: invalid constraint `{}`: {}",
                spec.name, spec.constraint, invalid.message
            )));
        }
        None => invalid.message.clone(),
    };
    Error::Plan {
        flow: String::new(),
        message,
    }
}

/// DataFusion's "No field named" error with the input's columns listed as a user reads
/// them (without the hidden `_metadata`, which a constraint may still name).
fn columns_hint(message: String, input: &SchemaRef) -> String {
    if !message.contains("No field named") {
        return message;
    }
    let columns: Vec<&str> = input
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .filter(|n| *n != METADATA_COLUMN)
        .collect();
    let unknown = message
        .split("No field named ")
        .nth(1)
        .and_then(|rest| rest.split(['.', ' ']).next())
        .unwrap_or("?");
    format!(
        "unknown column {unknown}; the input rows have {} (and _metadata)",
        columns.join(", ")
    )
}

/// Where row `row` of `batch` comes from: a file's path (`_metadata.file_path`), or a
/// Kafka record's topic, partition and offset.
fn locate(batch: &RecordBatch, row: usize) -> (Option<PathBuf>, Option<String>) {
    let string = |array: &dyn Array| -> Option<String> {
        let value = arrow::util::display::array_value_to_string(array, row).ok()?;
        (!value.is_empty() && array.is_valid(row)).then_some(value)
    };
    let kafka = |topic: Option<String>, partition: Option<String>, offset: Option<String>| {
        Some(format!(
            "topic {} partition {} offset {}",
            topic?, partition?, offset?
        ))
    };
    if let Some(meta) = batch.column_by_name(METADATA_COLUMN)
        && let Some(meta) = meta.as_struct_opt()
    {
        if let Some(path) = meta
            .column_by_name("file_path")
            .and_then(|c| string(c.as_ref()))
        {
            // Spark's `file:` URI; the error's path is the file's.
            let file = url::Url::parse(&path)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .unwrap_or_else(|| PathBuf::from(&path));
            return (Some(file), Some(format!("file {path}")));
        }
        let field = |n: &str| meta.column_by_name(n).and_then(|c| string(c.as_ref()));
        if let Some(at) = kafka(field("topic"), field("partition"), field("offset")) {
            return (None, Some(at));
        }
    }
    let field = |n: &str| batch.column_by_name(n).and_then(|c| string(c.as_ref()));
    (
        None,
        kafka(field("topic"), field("partition"), field("offset")),
    )
}

/// Row `row` of `batch` as a JSON object (without `_metadata`), cut to 500 characters.
fn render_row(batch: &RecordBatch, row: usize) -> String {
    let mut one = batch.slice(row, 1);
    if let Ok(i) = one.schema().index_of(METADATA_COLUMN) {
        one.remove_column(i);
    }
    let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
    let text = match writer.write(&one).and_then(|()| writer.finish()) {
        Ok(()) => String::from_utf8_lossy(&writer.into_inner())
            .trim_end()
            .to_string(),
        Err(e) => format!("(row {row} not shown: {e})"),
    };
    match text.char_indices().nth(500) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    fn spec(name: &str, constraint: &str, on: OnViolation) -> ExpectationSpec {
        ExpectationSpec {
            name: name.into(),
            constraint: constraint.into(),
            on_violation: on,
            at: Default::default(),
        }
    }

    fn rows() -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("dep_time", DataType::Int64, true),
            Field::new("carrier", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5])),
                Arc::new(Int64Array::from(vec![
                    Some(517),
                    None,
                    Some(2400),
                    Some(-1),
                    None,
                ])),
                Arc::new(StringArray::from(vec![
                    Some("UA"),
                    Some("AA"),
                    None,
                    Some("B6"),
                    Some("UA"),
                ])),
            ],
        )
        .unwrap();
        (schema, batch)
    }

    /// warn keeps and counts; drop removes (a row failing two drop expectations once);
    /// NULL counts as a violation.
    #[test]
    fn warn_counts_drop_removes_and_null_violates() {
        let (schema, batch) = rows();
        let specs = [
            spec("has_dep_time", "dep_time IS NOT NULL", OnViolation::Warn),
            spec(
                "valid_time",
                "dep_time BETWEEN 0 AND 2400",
                OnViolation::Drop,
            ),
            spec("has_carrier", "carrier IS NOT NULL", OnViolation::Drop),
        ];
        let e = Expectations::plan("f", &specs, &schema).unwrap();
        let mut counts = e.zero();
        let out = e.apply(vec![batch], &mut counts, 0, "s", None).unwrap();
        assert_eq!(counts.passed, vec![3, 2, 4]);
        assert_eq!(counts.failed, vec![2, 3, 1]);
        assert_eq!(counts.dropped, 4, "ids 2, 3, 4, 5");
        let ids: Vec<i64> = out
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(ids, vec![1]);
    }

    #[test]
    fn fail_names_the_expectation_and_the_first_failing_row() {
        let (schema, batch) = rows();
        let specs = [spec(
            "has_dep_time",
            "dep_time IS NOT NULL",
            OnViolation::Fail,
        )];
        let e = Expectations::plan("f", &specs, &schema).unwrap();
        let mut counts = e.zero();
        let err = e
            .apply(vec![batch], &mut counts, 7, "files /in", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"has_dep_time\""), "{err}");
        assert!(err.contains("2 row(s) of batch 7"), "{err}");
        assert!(err.contains(r#"{"id":2,"carrier":"AA"}"#), "{err}");
        assert!(err.contains("source files /in"), "{err}");
    }

    #[test]
    fn a_constraint_of_an_unknown_column_or_not_boolean_is_refused() {
        let (schema, _) = rows();
        let e = Expectations::plan("f", &[spec("x", "dep_tme > 0", OnViolation::Warn)], &schema)
            .err()
            .unwrap();
        assert!(
            e.message.contains("unknown column dep_tme"),
            "{}",
            e.message
        );
        assert!(e.message.contains("id, dep_time, carrier"), "{}", e.message);
        let e = Expectations::plan(
            "f",
            &[spec("x", "dep_time + 1", OnViolation::Warn)],
            &schema,
        )
        .err()
        .unwrap();
        assert!(e.message.contains("not BOOLEAN"), "{}", e.message);
    }
}
