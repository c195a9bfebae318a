//! Stream-static joins: each micro-batch joined with dimension tables.
//!
//! Semantics follow Spark's stream-static join: the static side is read as of the
//! batch, so an update to a dimension is seen by the next batch; rows of the
//! stream are never re-joined later (a batch joined before the update keeps
//! what it got). Only `inner` and `left` (outer on the stream side) are allowed,
//! as in Spark, where a right/full outer join with a static side is unsupported
//! because a dimension row's absence from every future batch is never known.
//!
//! A dimension is loaded into memory (Arrow batches) at flow start and re-read
//! only when it changes: a Delta table when its version changes (checked before
//! each batch, one `_delta_log` listing), a CSV/Parquet file when its size or
//! modification time changes. Each batch's progress says which dimensions were
//! reloaded (`weir.dimensions`).
//!
//! The join is part of the flow's SQL: `SELECT <select> FROM batch <joins> WHERE <where>`,
//! planned by DataFusion, with each dimension registered under its `alias`.

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionContext};

use crate::error::{Error, Result};
use crate::records::DimensionProgress;
use crate::spec::{DimensionFormat, JoinOn, JoinSpec};

/// A loaded dimension and what identifies the content read.
struct Dimension {
    spec: JoinSpec,
    /// Delta version, or (size, mtime) of the file: reload when it changes.
    stamp: Option<(i64, i64)>,
    batches: Vec<RecordBatch>,
    schema: Option<SchemaRef>,
    reloaded: bool,
    /// A Delta dimension's table, kept so each batch's check reads only new commits.
    delta: Option<deltalake::DeltaTable>,
}

/// The dimensions of a flow.
pub struct Dimensions {
    flow: String,
    dims: Vec<Dimension>,
}

impl Dimensions {
    pub fn new(flow: &str, joins: &[JoinSpec]) -> Self {
        Dimensions {
            flow: flow.to_string(),
            dims: joins
                .iter()
                .map(|spec| Dimension {
                    spec: spec.clone(),
                    stamp: None,
                    batches: Vec::new(),
                    schema: None,
                    reloaded: false,
                    delta: None,
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dims.is_empty()
    }

    /// Re-reads every dimension whose content changed since the last call (float join
    /// keys normalised, see [`normalize_join_keys`]), and registers
    /// each with `ctx` under its alias. Returns whether any was reloaded.
    pub async fn refresh(&mut self, ctx: &SessionContext) -> Result<bool> {
        let mut any = false;
        for dim in &mut self.dims {
            let stamp = current_stamp(dim).await?;
            if stamp.is_some() && stamp == dim.stamp && dim.schema.is_some() {
                continue;
            }
            let (schema, batches) = load(&self.flow, &dim.spec, dim.delta.as_ref()).await?;
            tracing::info!(flow = %self.flow, alias = %dim.spec.alias, path = %dim.spec.table.display(),
                rows = batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
                version = ?stamp.filter(|_| dim.spec.format == DimensionFormat::Delta).map(|s| s.0),
                "dimension loaded");
            let keys: Vec<String> = match &dim.spec.on {
                JoinOn::Columns(c) => c.clone(),
                JoinOn::Condition(_) => Vec::new(),
            };
            let batches = normalize_join_keys(batches, &keys).map_err(|e| Error::Arrow {
                context: format!("flow {}: normalising float join keys", self.flow),
                source: e,
            })?;
            dim.stamp = stamp;
            dim.schema = Some(schema.clone());
            dim.batches = batches;
            dim.reloaded = true;
            any = true;
            let table =
                datafusion::datasource::MemTable::try_new(schema, vec![dim.batches.clone()])
                    .map_err(|e| sql_error(&self.flow, "registering a dimension", e))?;
            let _ = ctx.deregister_table(dim.spec.alias.as_str());
            ctx.register_table(dim.spec.alias.as_str(), Arc::new(table))
                .map_err(|e| sql_error(&self.flow, "registering a dimension", e))?;
        }
        Ok(any)
    }

    /// The schema of each dimension, once loaded, by alias.
    pub fn schemas(&self) -> Vec<(&str, Option<&SchemaRef>)> {
        self.dims
            .iter()
            .map(|d| (d.spec.alias.as_str(), d.schema.as_ref()))
            .collect()
    }

    pub fn specs(&self) -> impl Iterator<Item = &JoinSpec> {
        self.dims.iter().map(|d| &d.spec)
    }

    /// The dimensions' state for a batch's progress; `reloaded` says whether they were
    /// (re)read since the previous call.
    pub fn take_progress(&mut self) -> Vec<DimensionProgress> {
        let out = self.progress();
        for d in &mut self.dims {
            d.reloaded = false;
        }
        out
    }

    pub fn progress(&self) -> Vec<DimensionProgress> {
        self.dims
            .iter()
            .map(|d| DimensionProgress {
                alias: d.spec.alias.clone(),
                path: d.spec.table.display().to_string(),
                version: match d.spec.format {
                    DimensionFormat::Delta => d.stamp.map(|s| s.0),
                    _ => None,
                },
                num_rows: d.batches.iter().map(|b| b.num_rows() as u64).sum(),
                reloaded: d.reloaded,
            })
            .collect()
    }
}

fn sql_error(flow: &str, context: &str, e: datafusion::error::DataFusionError) -> Error {
    Error::Sql {
        flow: flow.to_string(),
        context: context.to_string(),
        source: Box::new(e),
    }
}

fn missing(spec: &JoinSpec, what: &str) -> Error {
    Error::Source {
        path: spec.table.clone(),
        message: format!(
            "dimension {:?} ({what}) cannot be read; a stream-static join needs its static side to exist \
             (if another flow of the pipeline writes it, run that flow first)",
            spec.alias
        ),
    }
}

/// What identifies the dimension's content now.
/// A Delta table is loaded once, then brought up to date incrementally (only commits
/// after the version held are read).
async fn current_stamp(dim: &mut Dimension) -> Result<Option<(i64, i64)>> {
    let spec = &dim.spec;
    match spec.format {
        DimensionFormat::Delta => {
            match dim.delta.as_mut() {
                Some(table) => {
                    table
                        .update_incremental(None)
                        .await
                        .map_err(|source| Error::Delta {
                            path: spec.table.display().to_string(),
                            source,
                        })?
                }
                None => dim.delta = crate::delta::open_existing(&spec.table).await?,
            }
            Ok(dim
                .delta
                .as_ref()
                .and_then(|t| t.version())
                .map(|v| (v as i64, 0)))
        }
        DimensionFormat::Csv | DimensionFormat::Parquet => match std::fs::metadata(&spec.table) {
            Ok(m) => Ok(Some((m.len() as i64, crate::clock::modified_ms(&m)))),
            Err(_) => Ok(None),
        },
    }
}

async fn load(
    flow: &str,
    spec: &JoinSpec,
    delta: Option<&deltalake::DeltaTable>,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let ctx = SessionContext::new();
    let path = spec.table.display().to_string();
    let df = match spec.format {
        DimensionFormat::Delta => {
            let Some(table) = delta else {
                return Err(missing(spec, "no Delta table at the path"));
            };
            let delta_err = |source| Error::Delta {
                path: path.clone(),
                source,
            };
            table
                .update_datafusion_session(&ctx.state())
                .map_err(delta_err)?;
            let provider = table
                .table_provider()
                .await
                .map_err(|e| sql_error(flow, &format!("reading dimension {path}"), e))?;
            ctx.read_table(provider)
                .map_err(|e| sql_error(flow, &format!("reading dimension {path}"), e))?
        }
        DimensionFormat::Csv => {
            if !spec.table.is_file() {
                return Err(missing(spec, "no such file"));
            }
            let mut options = CsvReadOptions::new().has_header(true);
            if let Some(null) = &spec.null_value {
                options = options.null_regex(Some(format!("^{}$", regex_escape(null))));
            }
            ctx.read_csv(path.as_str(), options)
                .await
                .map_err(|e| sql_error(flow, &format!("reading dimension {path}"), e))?
        }
        DimensionFormat::Parquet => {
            if !spec.table.is_file() {
                return Err(missing(spec, "no such file"));
            }
            ctx.read_parquet(path.as_str(), ParquetReadOptions::default())
                .await
                .map_err(|e| sql_error(flow, &format!("reading dimension {path}"), e))?
        }
    };
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let batches = df
        .collect()
        .await
        .map_err(|e| sql_error(flow, &format!("reading dimension {path}"), e))?;
    Ok((schema, batches))
}

fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Guesses a dimension's format from its path: a directory with `_delta_log` is Delta,
/// `.parquet` is Parquet, anything else CSV.
pub fn format_of(path: &Path) -> DimensionFormat {
    if path.join("_delta_log").is_dir() || path.extension().is_none() {
        DimensionFormat::Delta
    } else if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
    {
        DimensionFormat::Parquet
    } else {
        DimensionFormat::Csv
    }
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The `FROM` clause: `batch` and its joins.
pub fn from_clause(joins: &[JoinSpec]) -> std::result::Result<String, String> {
    let mut sql = "batch".to_string();
    for j in joins {
        // Columns of one name: `USING`, so an unqualified reference to them is not ambiguous.
        let cond = match &j.on {
            JoinOn::Columns(cols) => format!(
                "USING ({})",
                cols.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", ")
            ),
            JoinOn::Condition(c) => format!(
                "ON {}",
                super::sql_fragment(c, false)
                    .map_err(|m| format!("join `{}` on `{c}`: {m}", j.alias))?
            ),
        };
        sql.push_str(&format!(" {} {} {}", j.how.sql(), quote(&j.alias), cond));
    }
    Ok(sql)
}

/// The default select list of a flow with joins: the stream's columns, then each
/// dimension's columns except `USING` keys; a name already taken is prefixed with
/// the dimension's alias (`airports_name`).
pub fn default_items(stream_columns: &[String], dims: &[(&JoinSpec, &SchemaRef)]) -> Vec<String> {
    let mut taken: Vec<String> = stream_columns.to_vec();
    let mut items: Vec<String> = stream_columns
        .iter()
        .map(|c| format!("batch.{}", quote(c)))
        .collect();
    for (spec, schema) in dims {
        for f in schema.fields() {
            if matches!(&spec.on, JoinOn::Columns(cols) if cols.contains(f.name())) {
                continue;
            }
            let mut name = f.name().clone();
            if taken.contains(&name) {
                name = format!("{}_{}", spec.alias, f.name());
            }
            items.push(format!(
                "{}.{} AS {}",
                quote(&spec.alias),
                quote(f.name()),
                quote(&name)
            ));
            taken.push(name);
        }
    }
    items
}

/// The float columns among `keys` normalised as Spark's `NormalizeFloatingNumbers` does
/// for join keys: `-0.0` joins `0.0` and `NaN` joins `NaN` (Spark's join semantics).
pub fn normalize_join_keys(
    batches: Vec<RecordBatch>,
    keys: &[String],
) -> std::result::Result<Vec<RecordBatch>, arrow::error::ArrowError> {
    if keys.is_empty() {
        return Ok(batches);
    }
    batches
        .into_iter()
        .map(|b| {
            let touched = b.schema().fields().iter().any(|f| {
                keys.contains(f.name())
                    && matches!(
                        f.data_type(),
                        arrow::datatypes::DataType::Float32 | arrow::datatypes::DataType::Float64
                    )
            });
            if !touched {
                return Ok(b);
            }
            let columns = b
                .schema()
                .fields()
                .iter()
                .zip(b.columns())
                .map(|(f, c)| {
                    if keys.contains(f.name()) {
                        crate::state::table::normalize_float_key(c)
                    } else {
                        c.clone()
                    }
                })
                .collect();
            RecordBatch::try_new(b.schema(), columns)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::spec::JoinType;

    fn spec(alias: &str, on: JoinOn) -> JoinSpec {
        JoinSpec {
            table: PathBuf::from("/x"),
            format: DimensionFormat::Csv,
            alias: alias.into(),
            on,
            how: JoinType::Left,
            null_value: None,
        }
    }

    #[test]
    fn from_clause_joins_in_order() {
        let joins = vec![
            spec("airlines", JoinOn::Columns(vec!["carrier".into()])),
            spec(
                "dest_airport",
                JoinOn::Condition("batch.dest = dest_airport.faa".into()),
            ),
        ];
        assert_eq!(
            from_clause(&joins).unwrap(),
            "batch LEFT JOIN \"airlines\" USING (\"carrier\") \
             LEFT JOIN \"dest_airport\" ON batch.dest = dest_airport.faa"
        );
    }

    #[test]
    fn default_items_rename_collisions_and_drop_using_keys() {
        use arrow::datatypes::{DataType, Field, Schema};
        let airlines: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("carrier", DataType::Utf8, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let airports: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("faa", DataType::Utf8, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let a = spec("airlines", JoinOn::Columns(vec!["carrier".into()]));
        let b = spec(
            "airports",
            JoinOn::Condition("batch.dest = airports.faa".into()),
        );
        let items = default_items(
            &["carrier".into(), "dest".into()],
            &[(&a, &airlines), (&b, &airports)],
        );
        assert_eq!(
            items,
            vec![
                "batch.\"carrier\"",
                "batch.\"dest\"",
                "\"airlines\".\"name\" AS \"name\"",
                "\"airports\".\"faa\" AS \"faa\"",
                "\"airports\".\"name\" AS \"airports_name\"",
            ]
        );
    }

    #[tokio::test]
    async fn a_csv_dimension_reloads_only_when_the_file_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("airlines.csv");
        std::fs::write(&path, "carrier,name\nAA,American\n").expect("write");
        let mut s = spec("airlines", JoinOn::Columns(vec!["carrier".into()]));
        s.table = path.clone();
        let mut dims = Dimensions::new("f", &[s]);
        let ctx = SessionContext::new();
        assert!(dims.refresh(&ctx).await.expect("load"));
        assert!(dims.take_progress()[0].reloaded);
        assert!(!dims.refresh(&ctx).await.expect("unchanged"));
        assert!(!dims.take_progress()[0].reloaded);
        assert_eq!(dims.progress()[0].num_rows, 1);
        std::fs::write(&path, "carrier,name\nAA,American\nUA,United Air Lines\n").expect("write");
        assert!(dims.refresh(&ctx).await.expect("changed"));
        assert_eq!(dims.progress()[0].num_rows, 2);
        assert!(dims.progress()[0].reloaded);
    }

    #[tokio::test]
    async fn a_missing_dimension_is_a_clear_error() {
        let mut s = spec("airlines", JoinOn::Columns(vec!["carrier".into()]));
        s.table = PathBuf::from("/nonexistent/airlines.csv");
        let mut dims = Dimensions::new("f", &[s]);
        let err = dims
            .refresh(&SessionContext::new())
            .await
            .expect_err("missing");
        assert!(err.to_string().contains("dimension \"airlines\""), "{err}");
    }
}
