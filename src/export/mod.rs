//! `weir export pyspark`: a pipeline as one runnable PySpark Structured Streaming script.
//!
//! The pipeline is read through [`crate::pipeline::load`] (never re-parsed here). Each flow
//! becomes a function that builds its streaming query with the Spark counterpart of every
//! weir key ([`pyspark`], the table in `docs/spark.md`), and `main` starts them in
//! dependency order. A key whose Spark counterpart would compute something else is not
//! exported: [`pyspark`] returns every such [`Refusal`] (flow, key, reason) and no script.
//!
//! ```text
//!   Pipeline ──► check (Refusals) ──► per flow: source ─► SQL (where/select/joins) ─►
//!                                      watermark ─► stateful op ─► sink/foreachBatch
//!            ──► script = header + PATHS/TRIGGERS + prelude.py (helpers, main) + flows
//! ```

pub mod handoff;
pub mod sql;

use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::ops::window::WindowSpec;
use crate::spec::{
    DeltaSourceOptions, DimensionFormat, EvolutionMode, FileFormat, FilesSource, FlowSpec, JoinOn,
    JoinSpec, JoinType, OutputMode, Pipeline, SinkSpec, SourceSpec, StartingVersion, TextEncoding,
    Trigger,
};
use sql::Kind;

/// Where the script runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Apache Spark with Delta Lake from Maven Central (`delta-spark`).
    Oss,
    /// A Databricks job: file sources become Auto Loader (`cloudFiles.*`).
    Databricks,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Oss => "oss",
            Target::Databricks => "databricks",
        }
    }
}

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub target: Target,
    /// Only these flows (empty: all), in the pipeline's dependency order.
    pub flows: Vec<String>,
}

/// A key that cannot be exported faithfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub flow: String,
    /// The pipeline key, e.g. `source.min_file_age` or `select[2]`.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flow {:?}: {}: {}", self.flow, self.key, self.reason)
    }
}

/// The Delta Lake release the scripts are written and tested for (docs/spark.md).
pub const DELTA_VERSION: &str = "4.4.0";
/// The Spark release that Delta release is built for.
pub const SPARK_VERSION: &str = "4.2.0";
/// The Maven coordinates passed to `spark-submit --packages`.
pub const DELTA_PACKAGE: &str = "io.delta:delta-spark_4.2_2.13:4.4.0";

const PRELUDE: &str = include_str!("prelude.py");

/// The PySpark script of `pipeline`, or every reason it cannot be written.
pub fn pyspark(pipeline: &Pipeline, options: &ExportOptions) -> Result<String, Vec<Refusal>> {
    let order = crate::spec::dependency_order(&pipeline.flows).map_err(|reason| {
        vec![Refusal {
            flow: String::new(),
            key: "flow".into(),
            reason,
        }]
    })?;
    for name in &options.flows {
        if pipeline.flow(name).is_none() {
            return Err(vec![Refusal {
                flow: name.clone(),
                key: "--flow".into(),
                reason: format!(
                    "no such flow in {}; flows: {}",
                    pipeline.path.display(),
                    pipeline
                        .flows
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }]);
        }
    }
    let flows: Vec<&FlowSpec> = order
        .iter()
        .filter(|f| options.flows.is_empty() || options.flows.contains(&f.name))
        .collect();
    let base = pipeline_dir(&pipeline.path);
    let mut g = Generator {
        target: options.target,
        base: base.clone(),
        paths: Vec::new(),
        refusals: Vec::new(),
    };
    let mut bodies = Vec::new();
    for flow in &flows {
        bodies.push(g.flow(flow));
    }
    if !g.refusals.is_empty() {
        return Err(g.refusals);
    }
    Ok(g.script(pipeline, &flows, &bodies))
}

fn pipeline_dir(path: &Path) -> PathBuf {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    std::path::absolute(&dir).unwrap_or(dir)
}

/// A Python string literal (JSON's escapes are Python's).
fn py(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn py_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items.iter().map(|s| py(s)).collect::<Vec<_>>().join(", ")
    )
}

/// A Python identifier for a flow name (`bronze-flights` -> `flow_bronze_flights`).
fn fn_name(flow: &str) -> String {
    format!("flow_{}", flow.replace('-', "_"))
}

/// Milliseconds as Spark's interval text, in the largest exact unit.
pub fn interval(ms: i64) -> String {
    let units = [
        (86_400_000, "days"),
        (3_600_000, "hours"),
        (60_000, "minutes"),
        (1000, "seconds"),
    ];
    for (size, unit) in units {
        if ms != 0 && ms % size == 0 {
            return format!("{} {unit}", ms / size);
        }
    }
    if ms == 0 {
        "0 seconds".into()
    } else {
        format!("{ms} milliseconds")
    }
}

fn trigger_text(t: &Trigger) -> String {
    match t {
        Trigger::AvailableNow => "available_now".into(),
        Trigger::Once => "once".into(),
        Trigger::ProcessingTime(d) => interval(d.as_millis() as i64),
    }
}

fn backtick(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// An object-store URL as the target Spark reads it: OSS Spark reaches S3 through
/// Hadoop's S3A connector (`s3a://`, the hadoop-aws jars), Databricks through `s3://`
/// (docs/object-storage.md). Other URLs and local paths are kept.
fn spark_url(target: Target, text: &str) -> String {
    match (target, text.split_once("://")) {
        (Target::Oss, Some(("s3", rest))) => format!("s3a://{rest}"),
        (Target::Databricks, Some(("s3a", rest))) => format!("s3://{rest}"),
        _ => text.to_string(),
    }
}

struct Generator {
    target: Target,
    base: PathBuf,
    /// (key, path relative to base when under it), in order of first use.
    paths: Vec<(String, String)>,
    refusals: Vec<Refusal>,
}

/// Text of one flow: its function and the Delta tables it needs before it starts.
struct FlowCode {
    name: String,
    code: String,
    delta_inputs: Vec<String>,
}

impl Generator {
    fn refuse(&mut self, flow: &FlowSpec, key: &str, reason: impl Into<String>) {
        self.refusals.push(Refusal {
            flow: flow.name.clone(),
            key: key.into(),
            reason: reason.into(),
        });
    }

    /// Registers a path under `key` and returns the Python expression for it.
    fn path(&mut self, key: String, path: &Path) -> String {
        let shown = match path.strip_prefix(&self.base) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
            _ => path.display().to_string(),
        };
        let shown = spark_url(self.target, &shown);
        if !self.paths.iter().any(|(k, _)| *k == key) {
            self.paths.push((key.clone(), shown));
        }
        format!("_path(args, {})", py(&key))
    }

    fn sql(
        &mut self,
        flow: &FlowSpec,
        key: &str,
        text: &str,
        kind: Kind,
        qualify: &[(&str, &str)],
    ) -> String {
        match sql::to_spark(text, kind, qualify) {
            Ok(s) => s,
            Err(reason) => {
                self.refuse(flow, key, reason);
                String::new()
            }
        }
    }

    fn flow(&mut self, flow: &FlowSpec) -> FlowCode {
        let name = &flow.name;
        let mut code = String::new();
        let mut notes: Vec<String> = Vec::new();
        let mut delta_inputs = Vec::new();
        let checkpoint = self.path(
            format!("{name}.checkpoint"),
            &spark_checkpoint(&flow.checkpoint),
        );
        let _ = writeln!(code, "def {}(spark, args):", fn_name(name));
        let _ = writeln!(
            code,
            "    \"\"\"{name}: {} -> {}.\"\"\"",
            describe_source(&flow.source),
            flow.sink.describe()
        );
        let _ = writeln!(code, "    checkpoint = {checkpoint}");
        // Sources.
        if flow.is_union() {
            self.refuse(
                flow,
                "union",
                "several sources in one flow ([[flow.union]]: unionByName with per-source watermarks) are not exported yet; \
                 export one flow per source writing the same table",
            );
        }
        if !flow.expectations.is_empty() {
            // A dropped or failing row must not pass unseen on Spark.
            self.refuse(
                flow,
                "expect",
                "expectations ([[flow.expect]]) are not exported yet: open-source Spark has no `expect`; \
                 remove them for the export, or run the flow with weir (docs/expectations.md)",
            );
        }
        self.source(flow, "source", &flow.source, &mut code, "df", &mut notes);
        if let SourceSpec::Delta(_) = &flow.source {
            delta_inputs.push(format!("{name}.source"));
        }
        if flow.health.freshness.is_some() {
            notes.push("freshness and [flow.health] are weir's monitoring thresholds; Spark has no counterpart (watch the query's progress instead)".into());
        }
        // Stateless part: where, select, dimension joins, as weir plans it:
        // SELECT <select> FROM batch <joins> WHERE <where>.
        let joined = !flow.joins.is_empty() || flow.stream_join.is_some();
        let mut qualify: Vec<(&str, &str)> = Vec::new();
        if let Some(sj) = &flow.stream_join {
            if let JoinOn::Columns(cols) = &sj.on {
                for c in cols {
                    qualify.push((c.as_str(), "batch"));
                }
            }
            let lw = flow.stateful.watermark.as_ref();
            let rw = sj.watermark.as_ref();
            match (lw, rw) {
                (Some(lw), Some(rw)) => {
                    let _ = writeln!(
                        code,
                        "    df = df.withWatermark({}, {})",
                        py(&lw.column),
                        py(&interval(lw.delay_ms))
                    );
                    self.source(
                        flow,
                        "stream_join.source",
                        &sj.source,
                        &mut code,
                        "right",
                        &mut notes,
                    );
                    if let SourceSpec::Delta(_) = &sj.source {
                        delta_inputs.push(format!("{name}.stream_join.source"));
                    }
                    let _ = writeln!(
                        code,
                        "    right = right.withWatermark({}, {})",
                        py(&rw.column),
                        py(&interval(rw.delay_ms))
                    );
                    let _ = writeln!(code, "    right.createOrReplaceTempView({})", py(&sj.alias));
                }
                _ => self.refuse(
                    flow,
                    "stream_join.watermark",
                    "a stream-stream join needs a watermark on both sides (weir refuses it too)",
                ),
            }
            if flow.late_rows.is_some() {
                self.refuse(
                    flow,
                    "late_rows",
                    "a stream-stream join's late rows depend on the watermarks of both sides, which Spark does not expose \
                     to a side query; remove late_rows (Spark counts them in numRowsDroppedByWatermark)",
                );
            }
        }
        for (i, j) in flow.joins.iter().enumerate() {
            self.dimension(flow, i, j, &mut code);
            if j.format == DimensionFormat::Delta {
                delta_inputs.push(format!("{name}.join.{}", j.alias));
            }
        }
        // `star`: the source's data columns, when `_metadata` was made a column (files sources).
        // `*` is expanded to the stream's columns in their order (Spark puts USING keys first).
        let star = matches!(flow.source, SourceSpec::Files(_)) && flow.stream_join.is_none();
        if flow.where_.is_some() || flow.select.is_some() || joined || star {
            if !star {
                let _ = writeln!(code, "    star = list(df.columns)");
            }
            let _ = writeln!(code, "    df.createOrReplaceTempView(\"batch\")");
            let star_items = if joined {
                "*[\"batch.\" + _q(c) for c in star]".to_string()
            } else {
                "*[_q(c) for c in star]".to_string()
            };
            let items: String = match &flow.select {
                Some(items) => {
                    let mut out = Vec::new();
                    for (i, item) in items.iter().enumerate() {
                        if item.trim() == "*" {
                            out.push(star_items.clone());
                        } else {
                            out.push(py(&self.sql(
                                flow,
                                &format!("select[{i}]"),
                                item,
                                Kind::SelectItem,
                                &qualify,
                            )));
                        }
                    }
                    format!("[{}]", out.join(", "))
                }
                None if joined => {
                    let mut sides = Vec::new();
                    for j in &flow.joins {
                        let using = match &j.on {
                            JoinOn::Columns(c) => py_list(c),
                            JoinOn::Condition(_) => "[]".into(),
                        };
                        sides.push(format!(
                            "({}, spark.table({}).columns, {using})",
                            py(&j.alias),
                            py(&j.alias)
                        ));
                    }
                    if let Some(sj) = &flow.stream_join {
                        let using = match &sj.on {
                            JoinOn::Columns(c) => py_list(c),
                            JoinOn::Condition(_) => "[]".into(),
                        };
                        sides.push(format!("({}, right.columns, {using})", py(&sj.alias)));
                    }
                    format!("_default_items(star, [{}])", sides.join(", "))
                }
                None => format!("[{star_items}]"),
            };
            let mut from = "batch".to_string();
            for (i, j) in flow.joins.iter().enumerate() {
                let cond = match &j.on {
                    JoinOn::Columns(cols) => format!(
                        "USING ({})",
                        cols.iter()
                            .map(|c| backtick(c))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    JoinOn::Condition(c) => {
                        format!(
                            "ON {}",
                            self.sql(flow, &format!("join[{i}].on"), c, Kind::Expr, &[])
                        )
                    }
                };
                let how = match j.how {
                    JoinType::Inner => "INNER JOIN",
                    JoinType::Left => "LEFT OUTER JOIN",
                };
                from.push_str(&format!(" {how} {} {cond}", backtick(&j.alias)));
            }
            if let Some(sj) = &flow.stream_join {
                let a = backtick(&sj.alias);
                let mut conds = match &sj.on {
                    JoinOn::Columns(cols) => cols
                        .iter()
                        .map(|c| format!("batch.{} = {a}.{}", backtick(c), backtick(c)))
                        .collect::<Vec<_>>(),
                    JoinOn::Condition(c) => vec![format!(
                        "({})",
                        self.sql(flow, "stream_join.on", c, Kind::Expr, &[])
                    )],
                };
                if let Some(tr) = &sj.time_range {
                    let (l, r) = (
                        format!("batch.{}", backtick(&tr.left)),
                        format!("{a}.{}", backtick(&tr.right)),
                    );
                    let bound = |ms: i64| {
                        if ms == 0 {
                            l.clone()
                        } else {
                            format!("{l} + INTERVAL {ms} MILLISECONDS")
                        }
                    };
                    conds.push(format!("{r} >= {}", bound(tr.lower_ms)));
                    conds.push(format!("{r} <= {}", bound(tr.upper_ms)));
                } else {
                    self.refuse(flow, "stream_join.time_range", "a stream-stream join needs a time_range bounding its state (weir refuses it too)");
                }
                let how = match sj.how {
                    JoinType::Inner => "INNER JOIN",
                    JoinType::Left => "LEFT OUTER JOIN",
                };
                from.push_str(&format!(" {how} {a} ON {}", conds.join(" AND ")));
            }
            let where_ = match &flow.where_ {
                Some(w) => format!(
                    " WHERE {}",
                    self.sql(flow, "where", w, Kind::Expr, &qualify)
                ),
                None => String::new(),
            };
            let _ = writeln!(code, "    items = {items}");
            let _ = writeln!(
                code,
                "    df = spark.sql(\"SELECT \" + \", \".join(items) + {})",
                py(&format!(" FROM {from}{where_}"))
            );
        }
        // Event time and state.
        let st = &flow.stateful;
        if flow.stream_join.is_none()
            && let Some(wm) = &st.watermark
        {
            if flow.late_rows.is_some() {
                let _ = writeln!(code, "    events = df");
            }
            let _ = writeln!(
                code,
                "    df = df.withWatermark({}, {})",
                py(&wm.column),
                py(&interval(wm.delay_ms))
            );
        }
        if st.has_aggregation() {
            self.aggregation(flow, &mut code);
        } else if let Some(keys) = &st.drop_duplicates {
            let method = if st.drop_duplicates_within_watermark {
                "dropDuplicatesWithinWatermark"
            } else {
                "dropDuplicates"
            };
            let _ = writeln!(
                code,
                "    df = df.{method}({})",
                if keys.is_empty() {
                    String::new()
                } else {
                    py_list(keys)
                }
            );
            notes.push(format!(
                "{method} keeps one row per key; weir keeps the first in batch order, Spark the first it meets in \
                 its partitions: with duplicates that differ outside the key the kept row may differ"
            ));
        }
        // Sink.
        let mut queries = vec!["query".to_string()];
        self.sink(flow, &mut code, &mut notes);
        // late_rows: a companion query (see prelude: _late_rows).
        if let (Some(late), Some(wm), None) = (&flow.late_rows, &st.watermark, &flow.stream_join) {
            if st.is_stateful() {
                let table = self.path(format!("{name}.late_rows"), late);
                let ck = self.path(
                    format!("{name}.late_rows.checkpoint"),
                    &spark_checkpoint(&flow.checkpoint.with_file_name(format!(
                            "{}.late_rows",
                            flow.checkpoint
                                .file_name()
                                .map(|n| n.to_string_lossy().to_string())
                                .unwrap_or_default()
                        ))),
                );
                let drops = st.drops_late_rows();
                let _ = writeln!(code, "    late_checkpoint = {ck}");
                let _ = writeln!(code, "    late_table = {table}");
                let _ = writeln!(code, "    late_app_id = []");
                let _ = writeln!(code);
                let _ = writeln!(code, "    def late_rows(batch, batch_id):");
                let _ = writeln!(code, "        if not late_app_id:");
                let _ = writeln!(
                    code,
                    "            late_app_id.append(_query_id(spark, late_checkpoint))"
                );
                let _ = writeln!(
                    code,
                    "        _late_rows(spark, batch, batch_id, late_table, late_checkpoint.rstrip(\"/\") + \"/_weir_watermarks\", late_app_id[0], {}, {}, {})",
                    py(&wm.column),
                    wm.delay_ms,
                    if drops { "True" } else { "False" }
                );
                let _ = writeln!(code);
                let _ = writeln!(
                    code,
                    "    late = (events.writeStream.queryName({}).foreachBatch(late_rows)",
                    py(&format!("{name}.late_rows"))
                );
                let _ = writeln!(
                    code,
                    "            .option(\"checkpointLocation\", late_checkpoint))"
                );
                let _ = writeln!(
                    code,
                    "    late_query = _trigger(late, args, {}).start()",
                    py(name)
                );
                queries.push("late_query".into());
                notes.push(
                    "late_rows: Spark's stateful operators drop late rows without exposing them; a companion query \
                     (<flow>.late_rows) applies weir's rule (event time < watermark, or null) to its own batches. \
                     Spark's aggregation itself drops by window end against the previous batch's watermark, so a \
                     row near the watermark can be both aggregated by Spark and listed here (docs/spark.md)"
                        .into(),
                );
            } else {
                notes.push("late_rows: a flow without a stateful operator drops nothing (as in Spark), so there is nothing to write".into());
            }
        }
        let _ = writeln!(code, "    return [{}]", queries.join(", "));
        if !notes.is_empty() {
            let mut header = String::new();
            for n in &notes {
                for (i, line) in wrap(n, 88).iter().enumerate() {
                    let _ = writeln!(header, "# {}{line}", if i == 0 { "" } else { "  " });
                }
            }
            code = header + &code;
        }
        FlowCode {
            name: name.clone(),
            code,
            delta_inputs,
        }
    }

    /// Writes `var = spark.readStream...` for a source.
    fn source(
        &mut self,
        flow: &FlowSpec,
        key: &str,
        source: &SourceSpec,
        code: &mut String,
        var: &str,
        notes: &mut Vec<String>,
    ) {
        let pkey = format!("{}.{key}", flow.name);
        match source {
            SourceSpec::Delta(d) => {
                let p = self.path(pkey, &d.path);
                let _ = writeln!(code, "    {var} = (spark.readStream.format(\"delta\")");
                for (k, v) in delta_options(d) {
                    let _ = writeln!(code, "          .option({}, {})", py(&k), py(&v));
                }
                let _ = writeln!(code, "          .load({p}))");
            }
            SourceSpec::Files(f) => self.files(flow, key, &pkey, f, code, var, notes),
            SourceSpec::Kafka(_) => self.refuse(
                flow,
                key,
                "a kafka source is not exported yet (Spark's own format(\"kafka\") reads the same offsets; write its readStream by hand)",
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn files(
        &mut self,
        flow: &FlowSpec,
        key: &str,
        pkey: &str,
        f: &FilesSource,
        code: &mut String,
        var: &str,
        notes: &mut Vec<String>,
    ) {
        if !f.min_file_age.is_zero() {
            self.refuse(flow, &format!("{key}.min_file_age"), "Spark's file source and Auto Loader have no minimum file age (they expect files to be moved into the directory complete); remove it and land files atomically");
        }
        if f.bad_records_table.is_some() {
            self.refuse(flow, &format!("{key}.bad_records_table"), "Spark's readers do not report a corrupt record's line, which the quarantine table holds; use bad_records_path with --target databricks (badRecordsPath), or remove it");
        }
        let oss = self.target == Target::Oss;
        if oss {
            if f.allow_overwrites {
                self.refuse(flow, &format!("{key}.allow_overwrites"), "Spark's file source identifies a file by its path only and never reads a rewritten file again; use --target databricks (cloudFiles.allowOverwrites)");
            }
            if f.bad_records_path.is_some() {
                self.refuse(flow, &format!("{key}.bad_records_path"), "badRecordsPath is a Databricks option; OSS Spark keeps corrupt records in the table (PERMISSIVE); use --target databricks, or remove it");
            }
            if f.schema.is_none() {
                let recorded = crate::source::files::schema_store::latest(
                    f.schema_location.as_deref().unwrap_or(&flow.checkpoint),
                )
                .ok()
                .flatten()
                .map(|(v, s)| {
                    format!(
                        " (weir inferred, version {v}: schema = \"{}\")",
                        crate::schema::to_ddl(&s)
                    )
                });
                self.refuse(flow, &format!("{key}.schema"), format!(
                    "OSS Spark's file source needs a fixed schema and never infers or evolves it like Auto Loader; give `schema`{} or use --target databricks",
                    recorded.unwrap_or_default()
                ));
            } else if f.schema_evolution != EvolutionMode::None {
                self.refuse(flow, &format!("{key}.schema_evolution"), format!(
                    "OSS Spark's file source drops fields its schema lacks instead of rescuing them (\"{}\"); use --target databricks (cloudFiles.schemaEvolutionMode) or schema_evolution = \"none\"",
                    f.schema_evolution.as_str()
                ));
            }
        }
        let p = self.path(pkey.to_string(), &f.path);
        let fmt = f.format.as_str();
        let mut opts: Vec<(String, String)> = Vec::new();
        let schema_ddl = f.schema.as_ref().map(|s| crate::schema::to_ddl(s));
        if oss {
            let _ = writeln!(code, "    {var} = (spark.readStream.format({})", py(fmt));
            if let Some(ddl) = &schema_ddl {
                let ddl = if f.format == FileFormat::Parquet {
                    ddl.clone()
                } else {
                    format!("{ddl}, _corrupt_record STRING")
                };
                let _ = writeln!(code, "          .schema({})", py(&ddl));
            }
            opts.push(("recursiveFileLookup".into(), "true".into()));
            // Spark's file source takes one of the two limits; weir's default file limit
            // (1000) yields to an explicit byte limit, an explicit file limit wins.
            match f.max_bytes_per_trigger {
                Some(b)
                    if f.max_files_per_trigger == crate::spec::DEFAULT_MAX_FILES_PER_TRIGGER =>
                {
                    opts.push(("maxBytesPerTrigger".into(), b.to_string()));
                }
                Some(_) => {
                    opts.push((
                        "maxFilesPerTrigger".into(),
                        f.max_files_per_trigger.to_string(),
                    ));
                    notes.push("max_bytes_per_trigger: Spark's file source takes maxFilesPerTrigger or maxBytesPerTrigger, not both; the file limit is kept (batch sizes differ, not the rows)".into());
                }
                None => opts.push((
                    "maxFilesPerTrigger".into(),
                    f.max_files_per_trigger.to_string(),
                )),
            }
            if f.format != FileFormat::Parquet {
                opts.push(("mode".into(), f.text.mode.spark_name().into()));
                opts.push(("columnNameOfCorruptRecord".into(), "_corrupt_record".into()));
            }
            notes.push("_rescued_data: OSS Spark has no rescued-data column; a record that does not fit the schema is kept whole in _rescued_data ({\"_corrupt_record\", \"_file_path\"}) and a field the schema lacks is dropped (weir rescues the field alone). --target databricks keeps Auto Loader's rescued data".into());
            if f.format == FileFormat::Csv && f.csv.header {
                notes.push("CSV: Spark matches columns by position (the header must list the schema's columns in order: enforceSchema=false checks it); weir matches them by name per file".into());
            }
        } else {
            if f.schema.is_none() {
                // Auto Loader's inference sample is a session conf, read when the stream is
                // defined (not a reader option).
                for (conf, value) in [
                    (
                        "spark.databricks.cloudFiles.schemaInference.sampleSize.numFiles",
                        f.schema_inference_max_files.to_string(),
                    ),
                    (
                        "spark.databricks.cloudFiles.schemaInference.sampleSize.numBytes",
                        f.schema_inference_max_bytes.to_string(),
                    ),
                ] {
                    let _ = writeln!(code, "    spark.conf.set({}, {})", py(conf), py(&value));
                }
            }
            let _ = writeln!(code, "    {var} = (spark.readStream.format(\"cloudFiles\")");
            if let Some(ddl) = &schema_ddl {
                // Auto Loader expects partition columns in a given schema; weir reads one the
                // schema does not name as a STRING.
                let mut ddl = ddl.clone();
                let given = f.schema.as_ref().map(|s| s.fields().clone());
                for c in f.partition_columns.iter().flatten() {
                    if !given.iter().flatten().any(|x| x.name() == c) {
                        ddl.push_str(&format!(", {} STRING", backtick(c)));
                    }
                }
                let _ = writeln!(code, "          .schema({})", py(&ddl));
            }
            opts.push(("cloudFiles.format".into(), fmt.into()));
            let loc = match &f.schema_location {
                Some(l) => l.clone(),
                None => spark_checkpoint(&flow.checkpoint),
            };
            let loc = self.path(format!("{}.schema_location", flow.name), &loc);
            let _ = writeln!(
                code,
                "          .option(\"cloudFiles.schemaLocation\", {loc})"
            );
            if f.schema.is_none() {
                opts.push((
                    "cloudFiles.inferColumnTypes".into(),
                    f.infer_column_types.to_string(),
                ));
            }
            opts.push((
                "cloudFiles.schemaEvolutionMode".into(),
                // Auto Loader's own spelling (camelCase), not weir's snake_case key values.
                match f.schema_evolution {
                    EvolutionMode::AddNewColumns => "addNewColumns",
                    EvolutionMode::Rescue => "rescue",
                    EvolutionMode::FailOnNewColumns => "failOnNewColumns",
                    EvolutionMode::None => "none",
                }
                .to_string(),
            ));
            if let Some(h) = &f.schema_hints {
                opts.push(("cloudFiles.schemaHints".into(), h.clone()));
            }
            opts.push(("rescuedDataColumn".into(), "_rescued_data".into()));
            if f.format != FileFormat::Parquet && f.text.mode == crate::spec::ParseMode::FailFast {
                opts.push(("mode".into(), "FAILFAST".into()));
            }
            opts.push((
                "cloudFiles.maxFilesPerTrigger".into(),
                f.max_files_per_trigger.to_string(),
            ));
            if let Some(b) = f.max_bytes_per_trigger {
                opts.push(("cloudFiles.maxBytesPerTrigger".into(), b.to_string()));
            }
            if f.allow_overwrites {
                opts.push(("cloudFiles.allowOverwrites".into(), "true".into()));
            }
            if f.use_notifications {
                opts.push(("cloudFiles.useNotifications".into(), "true".into()));
                opts.push((
                    "cloudFiles.backfillInterval".into(),
                    format!("{} seconds", f.backfill_interval.as_secs().max(1)),
                ));
            }
            if let Some(b) = &f.bad_records_path {
                let bp = self.path(format!("{}.bad_records_path", flow.name), b);
                let _ = writeln!(code, "          .option(\"badRecordsPath\", {bp})");
            }
        }
        if let Some(g) = &f.path_glob_filter {
            opts.push(("pathGlobFilter".into(), g.as_str().to_string()));
        }
        if f.use_notifications && oss {
            notes.push(format!("{pkey}.use_notifications: Spark's file source has no file-notification mode; the script lists the directory every trigger (the same files, found later)"));
        }
        if !f.include_existing_files {
            if oss {
                self.refuse(flow, &format!("{key}.include_existing_files"), "Spark's file source always reads the files present at its first start; use --target databricks (cloudFiles.includeExistingFiles)");
            } else {
                opts.push(("cloudFiles.includeExistingFiles".into(), "false".into()));
            }
        }
        if let Some(ms) = f.modified_after_ms {
            match chrono::DateTime::from_timestamp_millis(ms) {
                Some(t) if !oss => opts.push(("modifiedAfter".into(), t.format("%Y-%m-%dT%H:%M:%S%.3f").to_string())),
                _ => self.refuse(flow, &format!("{key}.modified_after"), "Spark's file source applies modifiedAfter to batch reads only; use --target databricks (Auto Loader's modifiedAfter)"),
            }
        }
        if let Some(cols) = &f.partition_columns {
            if oss && !cols.is_empty() {
                self.refuse(flow, &format!("{key}.partition_columns"), "the OSS script reads the directory recursively (recursiveFileLookup, as weir lists it), which turns off Spark's partition discovery; use --target databricks (cloudFiles.partitionColumns), or remove it");
            } else if !oss {
                // Auto Loader: a comma-separated list; "" turns discovery off (weir's `[]`).
                opts.push(("cloudFiles.partitionColumns".into(), cols.join(",")));
            }
        }
        let text = &f.text;
        if f.format != FileFormat::Parquet {
            if text.encoding == TextEncoding::Latin1 {
                opts.push(("encoding".into(), "ISO-8859-1".into()));
            }
            if text.max_record_bytes.is_some() {
                self.refuse(flow, &format!("{key}.max_record_size"), "Spark's readers have no limit on a record's size in bytes (CSV's maxCharsPerColumn counts characters of one column); remove it");
            }
            if let Some(tz) = &text.timestamps.time_zone {
                opts.push(("timeZone".into(), tz.name().to_string()));
            }
            if let Some(fmt) = &text.timestamps.format {
                opts.push(("timestampFormat".into(), fmt.pattern().to_string()));
            }
        }
        if f.format == FileFormat::Json {
            opts.push((
                "allowNonNumericNumbers".into(),
                text.allow_non_numeric_numbers.to_string(),
            ));
            if text.prefers_decimal {
                opts.push(("prefersDecimal".into(), "true".into()));
            }
        }
        if f.format == FileFormat::Csv {
            let c = &f.csv;
            opts.push(("header".into(), c.header.to_string()));
            if c.header && oss {
                opts.push(("enforceSchema".into(), "false".into()));
            }
            opts.push(("sep".into(), (c.delimiter as char).to_string()));
            opts.push(("quote".into(), (c.quote as char).to_string()));
            // weir's default is RFC 4180 (a quote inside quotes is doubled); Spark's is a backslash.
            opts.push((
                "escape".into(),
                (c.escape.unwrap_or(c.quote) as char).to_string(),
            ));
            if let Some(n) = &c.null_value {
                opts.push(("nullValue".into(), n.clone()));
            }
            if let Some(cm) = c.comment {
                opts.push(("comment".into(), (cm as char).to_string()));
            }
            opts.push(("emptyValue".into(), c.empty_value.clone()));
            opts.push(("nanValue".into(), c.nan_value.clone()));
            opts.push(("positiveInf".into(), c.positive_inf.clone()));
            opts.push(("negativeInf".into(), c.negative_inf.clone()));
        }
        for (k, v) in opts {
            let _ = writeln!(code, "          .option({}, {})", py(&k), py(&v));
        }
        let _ = writeln!(code, "          .load({p}))");
        // The data columns, `_rescued_data`, and (for the flow's own source) `_metadata` as a
        // column: a temp view hides metadata columns, and `*` must not include it.
        let metadata = if var == "df" && flow.stream_join.is_none() {
            ", \"_metadata\""
        } else {
            ""
        };
        if oss {
            let rescued = if f.format == FileFormat::Parquet {
                "\"CAST(NULL AS STRING) AS _rescued_data\""
            } else {
                "_RESCUED"
            };
            let _ = writeln!(
                code,
                "    data = [c for c in {var}.columns if c != \"_corrupt_record\"]"
            );
            let _ = writeln!(
                code,
                "    {var} = {var}.selectExpr(*[_q(c) for c in data], {rescued}{metadata})"
            );
            if var == "df" {
                let _ = writeln!(code, "    star = data + [\"_rescued_data\"]");
            }
        } else if var == "df" {
            let _ = writeln!(code, "    star = list(df.columns)");
            let _ = writeln!(
                code,
                "    df = df.selectExpr(*[_q(c) for c in star]{metadata})"
            );
        }
    }

    fn dimension(&mut self, flow: &FlowSpec, i: usize, j: &JoinSpec, code: &mut String) {
        let p = self.path(format!("{}.join.{}", flow.name, j.alias), &j.table);
        match j.format {
            DimensionFormat::Delta => {
                let _ = writeln!(
                    code,
                    "    spark.read.format(\"delta\").load({p}).createOrReplaceTempView({})",
                    py(&j.alias)
                );
            }
            DimensionFormat::Parquet => {
                let _ = writeln!(
                    code,
                    "    spark.read.parquet({p}).createOrReplaceTempView({})",
                    py(&j.alias)
                );
            }
            DimensionFormat::Csv => {
                // The types weir's reader (DataFusion) infers, fixed, so both engines agree.
                let schema = csv_dimension_schema(j);
                let _ = writeln!(
                    code,
                    "    (spark.read.format(\"csv\").option(\"header\", \"true\")"
                );
                if let Some(n) = &j.null_value {
                    let _ = writeln!(code, "     .option(\"nullValue\", {})", py(n));
                }
                match schema {
                    Some(ddl) => {
                        let _ = writeln!(code, "     .schema({})", py(&ddl));
                    }
                    None => {
                        let _ = writeln!(
                            code,
                            "     .option(\"inferSchema\", \"true\")  # not readable at export: Spark's inference"
                        );
                    }
                }
                let _ = writeln!(
                    code,
                    "     .load({p}).createOrReplaceTempView({}))",
                    py(&j.alias)
                );
            }
        }
        let _ = i;
    }

    fn aggregation(&mut self, flow: &FlowSpec, code: &mut String) {
        let st = &flow.stateful;
        let mut keys = Vec::new();
        let mut names = Vec::new();
        for (i, item) in st.group_by.iter().enumerate() {
            match WindowSpec::parse_item(item) {
                Ok(Some(w)) => {
                    let args: Vec<String> = std::iter::once(py(&w.column))
                        .chain(w.args.iter().map(|a| py(a)))
                        .collect();
                    keys.push(format!(
                        "F.window({}).alias(\"__weir_window\")",
                        args.join(", ")
                    ));
                    names.push(format!(
                        "__weir_window.start AS {}",
                        backtick(&w.start_column())
                    ));
                    names.push(format!(
                        "__weir_window.end AS {}",
                        backtick(&w.end_column())
                    ));
                }
                Ok(None) => {
                    let s = self.sql(flow, &format!("group_by[{i}]"), item, Kind::SelectItem, &[]);
                    match sql::output_name(item) {
                        Some(n) => names.push(backtick(&n)),
                        None => self.refuse(flow, &format!("group_by[{i}]"), format!("`{item}`: give the expression a name (`... AS name`): DataFusion and Spark name an unnamed expression differently")),
                    }
                    match sql::plain_identifier(item) {
                        Some(col) => keys.push(format!("F.col({})", py(&col))),
                        None => keys.push(format!("F.expr({})", py(&s))),
                    }
                }
                Err(e) => self.refuse(flow, &format!("group_by[{i}]"), e),
            }
        }
        let mut aggs = Vec::new();
        for (i, a) in st.aggregates.iter().enumerate() {
            let s = self.sql(flow, &format!("aggregates[{i}]"), a, Kind::SelectItem, &[]);
            match sql::output_name(a) {
                Some(n) => names.push(backtick(&n)),
                None => self.refuse(
                    flow,
                    &format!("aggregates[{i}]"),
                    format!("`{a}`: name the aggregate (`... AS name`)"),
                ),
            }
            aggs.push(format!("F.expr({})", py(&s)));
        }
        let _ = writeln!(code, "    df = (df.groupBy({})", keys.join(", "));
        let _ = writeln!(code, "            .agg({})", aggs.join(", "));
        let _ = writeln!(
            code,
            "            .selectExpr({}))",
            names.iter().map(|n| py(n)).collect::<Vec<_>>().join(", ")
        );
    }

    fn sink(&mut self, flow: &FlowSpec, code: &mut String, notes: &mut Vec<String>) {
        let name = &flow.name;
        let mode = flow.stateful.output_mode;
        let _ = writeln!(
            code,
            "    writer = (df.writeStream.queryName({}).outputMode({})",
            py(name),
            py(mode.as_str())
        );
        let _ = writeln!(
            code,
            "              .option(\"checkpointLocation\", checkpoint))"
        );
        match &flow.sink {
            SinkSpec::Delta {
                path,
                partition_by,
                merge_schema,
                idempotent,
                column_mapping_mode,
                table_properties,
                ..
            } => {
                table_property_defaults(table_properties, code, notes);
                if !idempotent {
                    self.refuse(flow, "sink.idempotent", "idempotent = false is an unsafe setting for drills only; Spark's Delta sink is always idempotent");
                }
                if let Some(mode) = column_mapping_mode {
                    // Delta's default table properties for tables this session creates.
                    let _ = writeln!(
                        code,
                        "    spark.conf.set(\"spark.databricks.delta.properties.defaults.columnMapping.mode\", {})",
                        py(mode.as_str())
                    );
                    notes.push(format!("column_mapping_mode = \"{}\": the sink's table is created with delta.columnMapping.mode = {} (a session default for new tables); an existing table keeps its own", mode.as_str(), mode.as_str()));
                }
                let p = self.path(format!("{name}.sink"), path);
                if mode == OutputMode::Update {
                    // Spark's Delta sink takes append and complete only; weir appends the changed groups.
                    let _ = writeln!(code, "    table = {p}");
                    let _ = writeln!(code, "    app_id = []");
                    let _ = writeln!(code);
                    let _ = writeln!(code, "    def append_changed(batch, batch_id):");
                    let _ = writeln!(code, "        if not app_id:");
                    let _ = writeln!(
                        code,
                        "            app_id.append(_query_id(spark, checkpoint))"
                    );
                    let _ = writeln!(
                        code,
                        "        _append(batch, table, app_id[0], batch_id, partition_by={}, merge_schema={})",
                        py_list(partition_by),
                        if *merge_schema { "True" } else { "False" }
                    );
                    let _ = writeln!(code);
                    let _ = writeln!(
                        code,
                        "    query = _trigger(writer.foreachBatch(append_changed), args, {}).start()",
                        py(name)
                    );
                    notes.push("output_mode = \"update\": Spark's Delta sink takes append and complete only, so each batch's changed groups are appended by foreachBatch (txnAppId = query id, txnVersion = batch id), as weir does".into());
                } else {
                    let _ = writeln!(code, "    writer = writer.format(\"delta\")");
                    if !partition_by.is_empty() {
                        let _ = writeln!(
                            code,
                            "    writer = writer.partitionBy({})",
                            partition_by
                                .iter()
                                .map(|c| py(c))
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                    }
                    if *merge_schema {
                        let _ = writeln!(
                            code,
                            "    writer = writer.option(\"mergeSchema\", \"true\")"
                        );
                    }
                    let _ = writeln!(
                        code,
                        "    query = _trigger(writer, args, {}).start({p})",
                        py(name)
                    );
                }
            }
            SinkSpec::DeltaMerge {
                path,
                keys,
                order_by,
                partition_by,
                null_safe_keys,
                table_properties,
                ..
            } => {
                table_property_defaults(table_properties, code, notes);
                let p = self.path(format!("{name}.sink"), path);
                let _ = writeln!(code, "    table = {p}");
                let _ = writeln!(code, "    app_id = []");
                let _ = writeln!(code);
                let _ = writeln!(code, "    def merge(batch, batch_id):");
                let _ = writeln!(code, "        if not app_id:");
                let _ = writeln!(
                    code,
                    "            app_id.append(_query_id(spark, checkpoint))"
                );
                let _ = writeln!(
                    code,
                    "        _merge(spark, batch, table, app_id[0], batch_id, {}, {}, {}, {})",
                    py_list(keys),
                    order_by.as_deref().map_or("None".to_string(), py),
                    if *null_safe_keys { "True" } else { "False" },
                    py_list(partition_by)
                );
                let _ = writeln!(code);
                let _ = writeln!(
                    code,
                    "    query = _trigger(writer.foreachBatch(merge), args, {}).start()",
                    py(name)
                );
                notes.push("delta_merge: foreachBatch + Delta MERGE on the keys (null-safe <=>; with order_by, WHEN MATCHED AND (t.o IS NULL OR s.o >= t.o)), after weir's in-batch reduction (greatest order_by, then the row read last: Spark's read order); idempotent by txnAppId = query id, txnVersion = batch id".into());
            }
            SinkSpec::Postgres { .. } => self.refuse(
                flow,
                "sink.type",
                "the postgres sink is not exported yet (foreachBatch + JDBC with the same weir_sink_commits marker table is planned)",
            ),
            SinkSpec::Memory { name: table } => {
                let _ = writeln!(
                    code,
                    "    query = _trigger(writer.format(\"memory\").queryName({}), args, {}).start()",
                    py(table),
                    py(name)
                );
            }
            SinkSpec::Console { num_rows } => {
                let _ = writeln!(
                    code,
                    "    query = _trigger(writer.format(\"console\").option(\"numRows\", {num_rows}), args, {}).start()",
                    py(name)
                );
            }
        }
    }

    fn script(&self, pipeline: &Pipeline, flows: &[&FlowSpec], bodies: &[FlowCode]) -> String {
        let mut s = String::new();
        let names: Vec<&str> = flows.iter().map(|f| f.name.as_str()).collect();
        let file = pipeline
            .path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let _ = writeln!(s, "#!/usr/bin/env python3");
        let _ = writeln!(
            s,
            "\"\"\"The weir pipeline {file} as PySpark Structured Streaming (written by `weir export pyspark`)."
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Target: {} ({}).",
            self.target.as_str(),
            match self.target {
                Target::Oss => "Apache Spark with Delta Lake",
                Target::Databricks => "a Databricks job; file sources read with Auto Loader",
            }
        );
        let _ = writeln!(s, "Flows, in dependency order: {}.", names.join(", "));
        let _ = writeln!(s);
        match self.target {
            Target::Oss => {
                let _ = writeln!(
                    s,
                    "Run with Spark {SPARK_VERSION} and Delta Lake {DELTA_VERSION} (docs/spark.md):"
                );
                let _ = writeln!(
                    s,
                    "    pip install pyspark=={SPARK_VERSION} delta-spark=={DELTA_VERSION}"
                );
                let _ = writeln!(
                    s,
                    "    spark-submit --packages {DELTA_PACKAGE} SCRIPT.py [--base DIR] [--path KEY=PATH]... [--flow NAME]... [--trigger T]"
                );
            }
            Target::Databricks => {
                let _ = writeln!(
                    s,
                    "Run as a Databricks job (spark_python_task) with parameters"
                );
                let _ = writeln!(
                    s,
                    "    [\"--base\", \"dbfs:/...\", \"--trigger\", \"available_now\"]"
                );
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Paths default to the pipeline's, relative to --base (the pipeline's directory);"
        );
        let _ = writeln!(
            s,
            "--path KEY=PATH overrides one. Each flow's Spark checkpoint is its own (<weir checkpoint>.spark);"
        );
        let _ = writeln!(
            s,
            "`weir export pyspark --handoff` fills it so that Spark resumes where weir stopped."
        );
        let _ = writeln!(s, "\"\"\"");
        let _ = writeln!(s);
        s.push_str(PRELUDE);
        let _ = writeln!(s);
        let _ = writeln!(s);
        let _ = writeln!(s, "TARGET = {}", py(self.target.as_str()));
        let _ = writeln!(s, "APP_NAME = {}", py(&format!("weir:{file}")));
        // A flow that keeps its late rows needs Spark to call the same rows late as weir:
        // one watermark for late rows and eviction (the prelude's _session; docs/spark.md).
        let single = flows.iter().any(|f| f.late_rows.is_some());
        let _ = writeln!(
            s,
            "SINGLE_WATERMARK = {}",
            if single { "True" } else { "False" }
        );
        let _ = writeln!(s, "BASE = {}", py(&self.base.display().to_string()));
        let _ = writeln!(s, "PATHS = {{");
        for (k, v) in &self.paths {
            let _ = writeln!(s, "    {}: {},", py(k), py(v));
        }
        let _ = writeln!(s, "}}");
        let _ = writeln!(
            s,
            "ORDER = {}",
            py_list(&names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        );
        let _ = writeln!(s, "TRIGGERS = {{");
        for f in flows {
            let _ = writeln!(s, "    {}: {},", py(&f.name), py(&trigger_text(&f.trigger)));
        }
        let _ = writeln!(s, "}}");
        let _ = writeln!(
            s,
            "# The Delta tables a flow reads: it waits for them (processing time) or skips (available_now)."
        );
        let _ = writeln!(s, "DELTA_INPUTS = {{");
        for b in bodies {
            let _ = writeln!(s, "    {}: {},", py(&b.name), py_list(&b.delta_inputs));
        }
        let _ = writeln!(s, "}}");
        for b in bodies {
            let _ = writeln!(s);
            let _ = writeln!(s);
            s.push_str(&b.code);
        }
        let _ = writeln!(s);
        let _ = writeln!(s);
        let _ = writeln!(s, "FLOWS = {{");
        for b in bodies {
            let _ = writeln!(s, "    {}: {},", py(&b.name), fn_name(&b.name));
        }
        let _ = writeln!(s, "}}");
        let _ = writeln!(s);
        let _ = writeln!(s, "if __name__ == \"__main__\":");
        let _ = writeln!(s, "    sys.exit(main())");
        s
    }
}

/// The Spark checkpoint of a flow: its own directory beside weir's (`<checkpoint>.spark`).
pub fn spark_checkpoint(weir_checkpoint: &Path) -> PathBuf {
    let mut name = weir_checkpoint
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".spark");
    weir_checkpoint.with_file_name(name)
}

fn describe_source(s: &SourceSpec) -> String {
    match s {
        SourceSpec::Files(f) => format!("files ({}) {}", f.format.as_str(), f.path.display()),
        SourceSpec::Delta(d) => format!("delta {}", d.path.display()),
        SourceSpec::Kafka(k) => format!("kafka {} {}", k.bootstrap_servers, k.locator.display()),
    }
}

/// A Delta sink's `table_properties` as Delta's session defaults for the tables the
/// session creates (`spark.databricks.delta.properties.defaults.<name without delta.>`).
fn table_property_defaults(
    properties: &std::collections::BTreeMap<String, String>,
    code: &mut String,
    notes: &mut Vec<String>,
) {
    for (key, value) in properties {
        if let Some(name) = key.strip_prefix("delta.") {
            let _ = writeln!(
                code,
                "    spark.conf.set({}, {})",
                py(&format!(
                    "spark.databricks.delta.properties.defaults.{name}"
                )),
                py(value)
            );
            notes.push(format!(
                "table_properties {key} = {value}: set for the tables this session creates (Delta's session default); an existing table keeps its own"
            ));
        } else {
            notes.push(format!(
                "table_properties {key}: not a delta.* property, not exported (set it with ALTER TABLE ... SET TBLPROPERTIES)"
            ));
        }
    }
}

/// Spark's Delta streaming source options for weir's keys.
pub fn delta_options(d: &DeltaSourceOptions) -> Vec<(String, String)> {
    let mut out = vec![(
        "maxFilesPerTrigger".to_string(),
        d.max_files_per_trigger.to_string(),
    )];
    if let Some(b) = d.max_bytes_per_trigger {
        out.push(("maxBytesPerTrigger".into(), format!("{b}b")));
    }
    match &d.starting_version {
        Some(StartingVersion::Version(v)) => out.push(("startingVersion".into(), v.to_string())),
        Some(StartingVersion::Latest) => out.push(("startingVersion".into(), "latest".into())),
        None => {}
    }
    if d.skip_change_commits {
        out.push(("skipChangeCommits".into(), "true".into()));
    }
    if d.read_change_feed {
        out.push(("readChangeFeed".into(), "true".into()));
    }
    if let Some(ms) = d.starting_timestamp_ms
        && let Some(t) = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
    {
        out.push((
            "startingTimestamp".into(),
            t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        ));
    }
    out
}

/// The schema weir's dimension reader (DataFusion, header, the null value) infers for a CSV
/// dimension, as Spark DDL; `None` when the file cannot be read now.
fn csv_dimension_schema(j: &JoinSpec) -> Option<String> {
    use datafusion::prelude::{CsvReadOptions, SessionContext};
    if !j.table.is_file() {
        return None;
    }
    let path = j.table.to_str()?.to_string();
    let null = j.null_value.clone();
    let run = async move {
        let ctx = SessionContext::new();
        let mut options = CsvReadOptions::new().has_header(true);
        let regex;
        if let Some(n) = &null {
            regex = format!("^{}$", regex_escape(n));
            options = options.null_regex(Some(regex));
        }
        let df = ctx.read_csv(path.as_str(), options).await.ok()?;
        Some(crate::schema::to_ddl(df.schema().as_arrow()))
    };
    crate::background::block_on(run).ok()?
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

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    #[test]
    fn s3_urls_become_s3a_for_oss_spark_and_s3_for_databricks() {
        assert_eq!(super::spark_url(Target::Oss, "s3://lake/t"), "s3a://lake/t");
        assert_eq!(
            super::spark_url(Target::Databricks, "s3a://lake/t"),
            "s3://lake/t"
        );
        assert_eq!(super::spark_url(Target::Oss, "gs://lake/t"), "gs://lake/t");
        assert_eq!(super::spark_url(Target::Oss, "lake/t"), "lake/t");
    }

    use super::*;

    #[test]
    fn intervals_use_the_largest_exact_unit() {
        assert_eq!(interval(86_400_000), "1 days");
        assert_eq!(interval(7_200_000), "2 hours");
        assert_eq!(interval(90_000), "90 seconds");
        assert_eq!(interval(1500), "1500 milliseconds");
        assert_eq!(interval(0), "0 seconds");
    }

    #[test]
    fn spark_checkpoint_sits_beside_weirs() {
        assert_eq!(
            spark_checkpoint(Path::new("/p/_checkpoints/bronze")),
            PathBuf::from("/p/_checkpoints/bronze.spark")
        );
    }
}
