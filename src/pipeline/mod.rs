//! Pipeline files: TOML with one `[[flow]]` table per streaming query.
//!
//! [`load`] reads a file, checks it completely and resolves relative paths
//! against the file's own directory. Every error names the file, the line and
//! column, the key, and what is allowed; nothing runs before the whole file is
//! valid. The format is documented in `docs/pipeline.md`.

pub mod spec;
pub mod units;

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow::datatypes::SchemaRef;

use crate::ops::stateful::{OutputMode, StatefulSpec};
use crate::ops::watermark::WatermarkSpec;
use crate::schema::evolve::EvolutionMode;
use crate::source::files::{CsvOptions, FileFormat};
pub use units::{ByteSize, HumanDuration};

/// An invalid pipeline file: where, which key, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PipelineError {
    pub file: PathBuf,
    /// 1-based; 0 when the error is not tied to a position (e.g. the file cannot be read).
    pub line: usize,
    pub column: usize,
    /// Dotted key path, e.g. `flow[0].source.max_bytes_per_trigger`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        } else {
            write!(f, "{}: ", self.file.display())?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

/// A checked pipeline with absolute paths.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub path: PathBuf,
    pub flows: Vec<FlowSpec>,
}

impl Pipeline {
    pub fn flow(&self, name: &str) -> Option<&FlowSpec> {
        self.flows.iter().find(|f| f.name == name)
    }
}

/// When a flow runs its micro-batches (Spark's `Trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Start a batch every interval; zero = as soon as the previous one ends. Polls when idle.
    ProcessingTime(Duration),
    /// Process everything present at start in bounded batches, then stop.
    AvailableNow,
    /// One batch with everything present (up to the limits), then stop.
    Once,
}

impl Trigger {
    /// Parses the CLI/TOML words: `available_now` / `available-now`, `once`, or a duration.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "available_now" | "available-now" | "availableNow" => Ok(Trigger::AvailableNow),
            "once" => Ok(Trigger::Once),
            other => HumanDuration::parse(other)
                .map(|d| Trigger::ProcessingTime(d.0))
                .map_err(|_| {
                    format!(
                        "invalid trigger {text:?}; allowed: \"available_now\", \"once\", or a processing-time interval such as \"10 seconds\""
                    )
                }),
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::ProcessingTime(d) => {
                write!(f, "processing_time({})", humantime::format_duration(*d))
            }
            Trigger::AvailableNow => f.write_str("available_now"),
            Trigger::Once => f.write_str("once"),
        }
    }
}

/// One streaming query, resolved.
#[derive(Debug, Clone)]
pub struct FlowSpec {
    pub name: String,
    pub source: SourceSpec,
    pub where_: Option<String>,
    pub select: Option<Vec<String>>,
    pub sink: SinkSpec,
    pub trigger: Trigger,
    pub checkpoint: PathBuf,
    /// Watermark, aggregation, deduplication and output mode (DESIGN.md §6).
    pub stateful: StatefulSpec,
    /// Delta table receiving rows behind the watermark (instead of dropping them).
    pub late_rows: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub enum SourceSpec {
    Files(FilesSource),
}

/// Auto Loader-style file source options.
#[derive(Debug, Clone)]
pub struct FilesSource {
    pub path: PathBuf,
    pub format: FileFormat,
    pub csv: CsvOptions,
    /// Given schema (data columns), or `None` to infer from the first files.
    pub schema: Option<SchemaRef>,
    pub infer_column_types: bool,
    pub schema_inference_max_files: usize,
    pub path_glob_filter: Option<glob::Pattern>,
    pub max_files_per_trigger: u64,
    pub max_bytes_per_trigger: Option<u64>,
    pub min_file_age: Duration,
    pub allow_overwrites: bool,
    pub schema_evolution: EvolutionMode,
    pub schema_hints: Option<String>,
    pub schema_location: Option<PathBuf>,
    pub bad_records_path: Option<PathBuf>,
}

/// Where a flow writes.
#[derive(Debug, Clone)]
pub enum SinkSpec {
    Delta {
        path: PathBuf,
        partition_by: Vec<String>,
        merge_schema: bool,
        /// `false` (unsafe, drills only) skips the replay check of application transactions.
        idempotent: bool,
    },
    Memory {
        name: String,
    },
    Console {
        num_rows: usize,
    },
}

impl SinkSpec {
    pub fn describe(&self) -> String {
        match self {
            SinkSpec::Delta { path, .. } => format!("DeltaSink[{}]", path.display()),
            SinkSpec::Memory { name } => format!("MemorySink[{name}]"),
            SinkSpec::Console { .. } => "ConsoleSink".to_string(),
        }
    }
}

/// Default `max_files_per_trigger` (Auto Loader's default).
pub const DEFAULT_MAX_FILES_PER_TRIGGER: u64 = 1000;

/// Reads and checks a pipeline file.
pub fn load(path: &Path) -> Result<Pipeline, PipelineError> {
    let text = std::fs::read_to_string(path).map_err(|e| PipelineError {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        key: String::new(),
        message: format!("cannot read the pipeline file: {e}"),
    })?;
    parse(path, &text)
}

/// Checks a pipeline given as text; `path` is used for messages and to resolve relative paths.
pub fn parse(path: &Path, text: &str) -> Result<Pipeline, PipelineError> {
    let cx = Context { path, text };
    let file: spec::PipelineFile = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        cx.error(span, e.message().trim_end().to_string())
    })?;
    let base = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let base = if base.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base
    };
    let base = std::path::absolute(&base).unwrap_or(base);
    if file.flow.is_empty() {
        return Err(cx.error(
            0..0,
            "the file declares no flow; add at least one [[flow]] table with name, source and sink"
                .into(),
        ));
    }
    let mut names = BTreeSet::new();
    let mut flows = Vec::with_capacity(file.flow.len());
    for flow in file.flow {
        let span = flow.span();
        let flow = flow.into_inner();
        let name = flow.name.get_ref().clone();
        if !valid_flow_name(&name) {
            return Err(cx.error(
                flow.name.span(),
                format!(
                    "invalid flow name {name:?}; use letters, digits, '_' and '-' (it names the checkpoint directory)"
                ),
            ));
        }
        if !names.insert(name.clone()) {
            return Err(cx.error(
                flow.name.span(),
                format!("duplicate flow name {name:?}; flow names must be unique in a pipeline"),
            ));
        }
        flows.push(resolve_flow(&cx, &base, span, flow)?);
    }
    Ok(Pipeline {
        path: path.to_path_buf(),
        flows,
    })
}

fn valid_flow_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

struct Context<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Context<'_> {
    fn error(&self, span: Range<usize>, message: String) -> PipelineError {
        let (line, column) = line_col(self.text, span.start);
        PipelineError {
            file: self.path.to_path_buf(),
            line,
            column,
            key: key_path_at(self.text, span.start).unwrap_or_default(),
            message,
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(offset, |i| offset - i - 1) + 1;
    (line, column)
}

/// Finds the dotted key whose key or value covers `offset`, e.g. `flow[1].sink.path`.
fn key_path_at(text: &str, offset: usize) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    let (table, _) = DeTable::parse_recoverable(text);
    fn walk(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
        for (key, value) in table.iter() {
            let in_key = key.span().contains(&offset);
            let in_value = value.span().contains(&offset);
            // Array-of-tables entries have spans for each element; check them too.
            match value.get_ref() {
                DeValue::Table(inner) if in_key || in_value || table_contains(inner, offset) => {
                    path.push(key.get_ref().to_string());
                    walk(inner, offset, path);
                    return true;
                }
                DeValue::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let hit = item.span().contains(&offset)
                            || matches!(item.get_ref(), DeValue::Table(t) if table_contains(t, offset));
                        if hit {
                            path.push(format!("{}[{i}]", key.get_ref()));
                            if let DeValue::Table(inner) = item.get_ref() {
                                walk(inner, offset, path);
                            }
                            return true;
                        }
                    }
                    if in_key || in_value {
                        path.push(key.get_ref().to_string());
                        return true;
                    }
                }
                _ if in_key || in_value => {
                    path.push(key.get_ref().to_string());
                    return true;
                }
                _ => {}
            }
        }
        false
    }
    fn table_contains(table: &DeTable<'_>, offset: usize) -> bool {
        table.iter().any(|(k, v)| {
            k.span().contains(&offset)
                || v.span().contains(&offset)
                || matches!(v.get_ref(), DeValue::Table(t) if table_contains(t, offset))
                || matches!(v.get_ref(), DeValue::Array(a) if a.iter().any(|i| i.span().contains(&offset)
                    || matches!(i.get_ref(), DeValue::Table(t) if table_contains(t, offset))))
        })
    }
    let mut path = Vec::new();
    walk(table.get_ref(), offset, &mut path);
    if path.is_empty() {
        // A header like `[flow.sink]` with a missing field points at the header line.
        return header_key_at(text, offset);
    }
    Some(path.join("."))
}

/// For errors reported on a table header (`[[flow]]`, `[flow.source]`), the header's name.
fn header_key_at(text: &str, offset: usize) -> Option<String> {
    let line = text[..offset.min(text.len())]
        .rsplit('\n')
        .next()
        .unwrap_or_default();
    let rest = &text[offset.min(text.len())..];
    let full = format!("{line}{}", rest.split('\n').next().unwrap_or_default());
    let trimmed = full.trim();
    trimmed
        .strip_prefix("[[")
        .and_then(|s| s.strip_suffix("]]"))
        .or_else(|| trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')))
        .map(|s| s.trim().to_string())
}

fn resolve_path(base: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn resolve_flow(
    cx: &Context<'_>,
    base: &Path,
    span: Range<usize>,
    flow: spec::FlowFile,
) -> Result<FlowSpec, PipelineError> {
    let name = flow.name.into_inner();
    let source = match flow.source.kind.get_ref().as_str() {
        "files" => SourceSpec::Files(resolve_files(cx, base, flow.source)?),
        other => {
            return Err(cx.error(
                flow.source.kind.span(),
                format!("unknown source type {other:?}; allowed: \"files\" (a directory of CSV, JSON lines or Parquet files)"),
            ));
        }
    };
    let trigger = match flow.trigger {
        None => Trigger::ProcessingTime(Duration::ZERO),
        Some(t) => {
            let tspan = t.span();
            match t.into_inner() {
                spec::TriggerFile::Word(w) => Trigger::parse(&w).map_err(|m| cx.error(tspan, m))?,
                spec::TriggerFile::ProcessingTime { processing_time } => {
                    Trigger::ProcessingTime(processing_time.0)
                }
            }
        }
    };
    if let Some(w) = &flow.where_ {
        crate::ops::check_sql_syntax(w.get_ref(), false).map_err(|m| {
            cx.error(
                w.span(),
                format!("invalid SQL predicate: {m}; `where` takes one boolean SQL expression, e.g. \"dep_delay > 15\""),
            )
        })?;
    }
    if let Some(select) = &flow.select {
        if select.is_empty() {
            return Err(cx.error(
                span,
                "`select` is empty; list SQL expressions (e.g. [\"*\", \"_metadata.file_path AS source_file\"]) or remove the key".into(),
            ));
        }
        for item in select {
            crate::ops::check_sql_syntax(item.get_ref(), true).map_err(|m| {
                cx.error(
                    item.span(),
                    format!("invalid SQL expression in `select`: {m}; each entry is one expression, optionally with `AS name`, or \"*\""),
                )
            })?;
        }
    }
    let sink = match flow.sink {
        spec::SinkFile::Delta {
            path,
            partition_by,
            merge_schema,
            idempotent,
        } => SinkSpec::Delta {
            path: resolve_path(base, &path),
            partition_by,
            merge_schema,
            idempotent,
        },
        spec::SinkFile::Memory { name: sink_name } => SinkSpec::Memory {
            name: sink_name.unwrap_or_else(|| name.clone()),
        },
        spec::SinkFile::Console { num_rows } => SinkSpec::Console { num_rows },
    };
    let checkpoint = match flow.checkpoint {
        Some(c) => resolve_path(base, &c),
        None => base.join("_checkpoints").join(&name),
    };
    let output_mode = match &flow.output_mode {
        None => OutputMode::Append,
        Some(m) => m
            .get_ref()
            .parse::<OutputMode>()
            .map_err(|msg| cx.error(m.span(), msg))?,
    };
    let stateful = StatefulSpec {
        flow: name.clone(),
        watermark: flow.watermark.map(|w| WatermarkSpec {
            column: w.column,
            delay_ms: w.delay.as_millis(),
        }),
        group_by: flow.group_by.unwrap_or_default(),
        aggregates: flow.aggregates.unwrap_or_default(),
        drop_duplicates: flow.drop_duplicates,
        drop_duplicates_within_watermark: flow.drop_duplicates_within_watermark,
        output_mode,
    };
    // Checks that need no schema; the rest runs against the schema (validate, flow start).
    if stateful.output_mode == OutputMode::Complete && !stateful.has_aggregation() {
        let at = flow.output_mode.as_ref().map_or(span.clone(), |m| m.span());
        return Err(cx.error(
            at,
            "output_mode = \"complete\" rewrites the whole result table every batch, which needs an aggregation \
             (group_by + aggregates); use output_mode = \"append\""
                .into(),
        ));
    }
    if stateful.output_mode != OutputMode::Append && !stateful.is_stateful() {
        let at = flow.output_mode.as_ref().map_or(span.clone(), |m| m.span());
        return Err(cx.error(
            at,
            format!(
                "output_mode = \"{}\" only applies to an aggregation; a flow without one appends its rows (output_mode = \"append\")",
                stateful.output_mode
            ),
        ));
    }
    let late_rows = flow.late_rows.map(|l| resolve_path(base, &l.path));
    if late_rows.is_some() && stateful.watermark.is_none() {
        return Err(cx.error(
            span.clone(),
            "late_rows needs a watermark = { column = ..., delay = ... }: rows are late only relative to one".into(),
        ));
    }
    Ok(FlowSpec {
        name,
        source,
        where_: flow.where_.map(|w| w.into_inner()),
        select: flow
            .select
            .map(|s| s.into_iter().map(|i| i.into_inner()).collect()),
        sink,
        trigger,
        checkpoint,
        stateful,
        late_rows,
    })
}

fn single_byte(
    cx: &Context<'_>,
    value: &Option<toml::Spanned<String>>,
    what: &str,
) -> Result<Option<u8>, PipelineError> {
    match value {
        None => Ok(None),
        Some(v) => {
            let s = v.get_ref();
            let unescaped = if s == "\\t" { "\t" } else { s.as_str() };
            if unescaped.len() == 1 && unescaped.is_ascii() {
                Ok(Some(unescaped.as_bytes()[0]))
            } else {
                Err(cx.error(
                    v.span(),
                    format!("the CSV {what} must be one ASCII character, got {s:?}"),
                ))
            }
        }
    }
}

fn resolve_files(
    cx: &Context<'_>,
    base: &Path,
    files: spec::FilesSourceFile,
) -> Result<FilesSource, PipelineError> {
    let format = match files.format {
        spec::FormatFile::Json => FileFormat::Json,
        spec::FormatFile::Csv => FileFormat::Csv,
        spec::FormatFile::Parquet => FileFormat::Parquet,
    };
    let mut csv = CsvOptions::default();
    if let Some(c) = &files.csv {
        if format != FileFormat::Csv {
            return Err(cx.error(
                c.header_span(),
                format!(
                    "a [csv] table is only allowed with format = \"csv\" (this source has format = \"{}\")",
                    format.as_str()
                ),
            ));
        }
        if let Some(h) = c.header {
            csv.header = h;
        }
        if let Some(d) = single_byte(cx, &c.delimiter, "delimiter")? {
            csv.delimiter = d;
        }
        if let Some(q) = single_byte(cx, &c.quote, "quote")? {
            csv.quote = q;
        }
        csv.escape = single_byte(cx, &c.escape, "escape")?;
        csv.comment = single_byte(cx, &c.comment, "comment")?;
        csv.null_value = c.null_value.clone();
    }
    let schema = match &files.schema {
        None => None,
        Some(ddl) => Some(std::sync::Arc::new(
            crate::schema::parse_ddl(ddl.get_ref()).map_err(|e| {
                cx.error(
                    ddl.span(),
                    format!("invalid schema: {e}; write Spark DDL, e.g. \"id BIGINT, ts TIMESTAMP, amount DECIMAL(12,2)\""),
                )
            })?,
        )),
    };
    let path_glob_filter = match &files.path_glob_filter {
        None => None,
        Some(g) => Some(glob::Pattern::new(g.get_ref()).map_err(|e| {
            cx.error(
                g.span(),
                format!("invalid glob pattern: {e}; e.g. \"*.csv\" or \"2024-*/*.json\""),
            )
        })?),
    };
    let max_files_per_trigger = match &files.max_files_per_trigger {
        None => DEFAULT_MAX_FILES_PER_TRIGGER,
        Some(n) if *n.get_ref() == 0 => {
            return Err(cx.error(n.span(), "max_files_per_trigger must be at least 1".into()));
        }
        Some(n) => *n.get_ref(),
    };
    let schema_evolution = match &files.schema_evolution {
        None => EvolutionMode::default_for(schema.is_some()),
        Some(m) => {
            let mode = m
                .get_ref()
                .parse::<EvolutionMode>()
                .map_err(|e| cx.error(m.span(), e))?;
            if schema.is_some() && mode == EvolutionMode::AddNewColumns {
                return Err(cx.error(
                    m.span(),
                    "schema_evolution = \"add_new_columns\" needs an inferred schema (a given `schema` is never widened); \
                     remove `schema` (use `schema_hints` to pin types) or use \"rescue\" / \"none\""
                        .into(),
                ));
            }
            mode
        }
    };
    if let Some(h) = &files.schema_hints {
        crate::schema::hints::parse_hints(h.get_ref()).map_err(|e| {
            cx.error(
                h.span(),
                format!("invalid schema_hints: {e}; write Spark DDL for the columns to pin, e.g. \"amount DECIMAL(12,2), ts TIMESTAMP\""),
            )
        })?;
    }
    Ok(FilesSource {
        schema_evolution,
        schema_hints: files.schema_hints.as_ref().map(|h| h.get_ref().clone()),
        schema_location: files
            .schema_location
            .as_deref()
            .map(|p| resolve_path(base, p)),
        bad_records_path: files
            .bad_records_path
            .as_deref()
            .map(|p| resolve_path(base, p)),
        path: resolve_path(base, &files.path),
        format,
        csv,
        schema,
        infer_column_types: files.infer_column_types,
        schema_inference_max_files: files.schema_inference_max_files.unwrap_or(50).max(1),
        path_glob_filter,
        max_files_per_trigger,
        max_bytes_per_trigger: files.max_bytes_per_trigger.map(|b| b.0),
        min_file_age: files.min_file_age.map(|d| d.0).unwrap_or(Duration::ZERO),
        allow_overwrites: files.allow_overwrites,
    })
}

impl spec::CsvFile {
    fn header_span(&self) -> Range<usize> {
        [&self.delimiter, &self.quote, &self.escape, &self.comment]
            .into_iter()
            .flatten()
            .map(|s| s.span())
            .next()
            .unwrap_or(0..0)
    }
}
