//! Pipeline files: TOML with one `[[flow]]` table per streaming query, read and
//! checked into the spec types (`crate::spec`).
//!
//! [`load`] reads a file ([`file`]: the TOML as written), checks it completely and
//! resolves relative paths against the file's own directory. Every error names the file, the line and
//! column, the key, and what is allowed; nothing runs before the whole file is
//! valid. The format is documented in `docs/pipeline.md`.

pub mod file;

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::spec::{
    AlertCondition, AlertRule, AlertTarget, AlertsSpec, CsvOptions, DEFAULT_INFERENCE_MAX_BYTES,
    DEFAULT_MAX_FILES_PER_TRIGGER, DeltaSourceOptions, DimensionFormat, EvolutionMode, FileFormat,
    FilesSource, FlowSpec, HumanDuration, JoinOn, JoinSpec, JoinType, OutputMode, Pipeline,
    PipelineError, SinkSpec, SourceSpec, StartingVersion, StatefulSpec, StreamJoinSpec, TimeRange,
    Trigger, UnionSpec, WatermarkPolicy, WatermarkSpec, dependency_order, normalize,
};

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
    let file: file::PipelineFile = toml::from_str(text).map_err(|e| {
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
        flows.push(resolve_flow(&cx, &base, span.clone(), flow)?);
        if let Some((last, earlier)) = flows.split_last() {
            check_tables_written(last, earlier).map_err(|m| cx.error(span.clone(), m))?;
        }
        let this = flows.last().map(|f: &FlowSpec| f.reads());
        if let Some(reads) = this
            && flows
                .last()
                .and_then(FlowSpec::writes)
                .is_some_and(|w| reads.contains(&w))
        {
            return Err(cx.error(
                span,
                format!("flow {name:?} reads the table it writes; a flow's sink must differ from its source"),
            ));
        }
    }
    dependency_order(&flows).map_err(|m| cx.error(0..0, m))?;
    let alerts = resolve_alerts(&cx, file.alerts, &flows)?;
    Ok(Pipeline {
        path: path.to_path_buf(),
        flows,
        alerts,
    })
}

/// `[alerts]`: every rule checked before anything runs (docs/operate.md).
fn resolve_alerts(
    cx: &Context<'_>,
    file: Option<toml::Spanned<file::AlertsFile>>,
    flows: &[FlowSpec],
) -> Result<AlertsSpec, PipelineError> {
    use crate::spec::alerts::{DEFAULT_ALERT_QUEUE, DEFAULT_ALERT_TIMEOUT, DEFAULT_EVALUATE_EVERY};
    let Some(file) = file else {
        return Ok(AlertsSpec::default());
    };
    let file = file.into_inner();
    let duration = |v: &toml::Spanned<String>, what: &str| -> Result<Duration, PipelineError> {
        let d = HumanDuration::parse(v.get_ref()).map_err(|m| cx.error(v.span(), m))?;
        if d.0.is_zero() {
            return Err(cx.error(v.span(), format!("{what} must be longer than 0")));
        }
        Ok(d.0)
    };
    let evaluate_every = match &file.evaluate_every {
        Some(v) => duration(v, "evaluate_every")?,
        None => DEFAULT_EVALUATE_EVERY,
    };
    let queue = match &file.queue {
        Some(q) if !(1..=10_000).contains(q.get_ref()) => {
            return Err(cx.error(
                q.span(),
                format!(
                    "queue = {} is out of range; notifications waiting per rule, 1 to 10000 (default {DEFAULT_ALERT_QUEUE})",
                    q.get_ref()
                ),
            ));
        }
        Some(q) => usize::try_from(*q.get_ref()).unwrap_or(DEFAULT_ALERT_QUEUE),
        None => DEFAULT_ALERT_QUEUE,
    };
    let default_timeout = match &file.timeout {
        Some(v) => duration(v, "timeout")?,
        None => DEFAULT_ALERT_TIMEOUT,
    };
    let mut names = BTreeSet::new();
    let mut rules = Vec::with_capacity(file.rule.len());
    for rule in file.rule {
        let rule = rule.into_inner();
        let name = rule.name.get_ref().trim().to_string();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(cx.error(
                rule.name.span(),
                format!("invalid rule name {name:?}; use letters, digits, '_', '-' and '.'"),
            ));
        }
        if !names.insert(name.clone()) {
            return Err(cx.error(
                rule.name.span(),
                format!("duplicate rule name {name:?}; rule names must be unique"),
            ));
        }
        let mut watched = Vec::new();
        if let Some(list) = &rule.flows {
            for f in list.get_ref() {
                if !flows.iter().any(|x| &x.name == f.get_ref()) {
                    return Err(cx.error(
                        f.span(),
                        format!(
                            "no flow named {:?}; flows in this file: {}",
                            f.get_ref(),
                            flows
                                .iter()
                                .map(|x| x.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                watched.push(f.get_ref().clone());
            }
        }
        let mut conditions = Vec::new();
        if let Some(states) = &rule.health {
            if states.get_ref().is_empty() {
                return Err(cx.error(
                    states.span(),
                    "health lists no state; name the states that fire, e.g. [\"lagging\", \"sink_unavailable\"]".into(),
                ));
            }
            let mut state_names = Vec::new();
            for s in states.get_ref() {
                match crate::records::HealthState::parse(s.get_ref()) {
                    Some(crate::records::HealthState::Healthy) => {
                        return Err(cx.error(
                            s.span(),
                            "healthy cannot fire an alert; name the unhealthy states that should"
                                .into(),
                        ));
                    }
                    Some(state) => state_names.push(state.as_str().to_string()),
                    None => {
                        return Err(cx.error(
                            s.span(),
                            format!(
                                "unknown health state {:?}; one of: {}",
                                s.get_ref(),
                                crate::records::HealthState::ALL[1..]
                                    .iter()
                                    .map(|h| h.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ));
                    }
                }
            }
            conditions.push(AlertCondition::Health(state_names));
        }
        if let Some(v) = &rule.freshness {
            conditions.push(AlertCondition::Freshness(duration(v, "freshness")?));
        }
        if let Some(v) = &rule.backlog_seconds {
            let secs = *v.get_ref();
            if !secs.is_finite() || secs < 0.0 {
                return Err(cx.error(
                    v.span(),
                    format!("backlog_seconds = {secs} must be a number of seconds, 0 or more"),
                ));
            }
            conditions.push(AlertCondition::BacklogSeconds(secs));
        }
        if let Some(v) = &rule.failed_batches {
            let n = *v.get_ref();
            if n < 1 {
                return Err(cx.error(
                    v.span(),
                    format!("failed_batches = {n} must be 1 or more (failed batch attempts since the last commit)"),
                ));
            }
            conditions.push(AlertCondition::FailedBatches(n.unsigned_abs()));
        }
        let condition = match conditions.len() {
            1 => conditions.remove(0),
            n => {
                return Err(cx.error(
                    rule.name.span(),
                    format!(
                        "rule {name:?} has {n} conditions; give exactly one of health, freshness, backlog_seconds, failed_batches"
                    ),
                ));
            }
        };
        let target = match (&rule.command, &rule.url) {
            (Some(c), None) => {
                if c.get_ref().first().is_none_or(|p| p.trim().is_empty()) {
                    return Err(cx.error(
                        c.span(),
                        "command is empty; give the program and its arguments, e.g. [\"/usr/local/bin/page\", \"--team\", \"data\"]".into(),
                    ));
                }
                AlertTarget::Command(c.get_ref().clone())
            }
            (None, Some(u)) => {
                let ok = url::Url::parse(u.get_ref().trim())
                    .ok()
                    .filter(|p| matches!(p.scheme(), "http" | "https") && p.host().is_some());
                if ok.is_none() {
                    return Err(cx.error(
                        u.span(),
                        format!(
                            "url {:?} is not an http:// or https:// URL with a host",
                            u.get_ref()
                        ),
                    ));
                }
                AlertTarget::Url(u.get_ref().trim().to_string())
            }
            (Some(_), Some(u)) => {
                return Err(cx.error(
                    u.span(),
                    format!("rule {name:?} has both command and url; give one target per rule"),
                ));
            }
            (None, None) => {
                return Err(cx.error(
                    rule.name.span(),
                    format!("rule {name:?} has no target; add command = [\"program\", \"arg\"] or url = \"http://...\""),
                ));
            }
        };
        let timeout = match &rule.timeout {
            Some(v) => duration(v, "timeout")?,
            None => default_timeout,
        };
        rules.push(AlertRule {
            name,
            flows: watched,
            condition,
            target,
            timeout,
        });
    }
    Ok(AlertsSpec {
        rules,
        evaluate_every,
        queue,
    })
}

/// Issue #18: every table a flow writes is its own (a side table on the sink's path
/// would take the sink's batch, or the sink the side table's), two flows share a table
/// only when both just append to it, and no two sources share a `bad_records_path`.
fn check_tables_written(flow: &FlowSpec, earlier: &[FlowSpec]) -> Result<(), String> {
    let mine = flow.tables_written();
    for (i, (key, path)) in mine.iter().enumerate() {
        if let Some((other, _)) = mine[..i].iter().find(|(_, p)| p == path) {
            return Err(format!(
                "flow {:?} writes {} as both {other} and {key}; each table a flow writes needs its own path",
                flow.name,
                path.display()
            ));
        }
        for e in earlier {
            for (other_key, other_path) in e.tables_written() {
                if &other_path != path {
                    continue;
                }
                let both_append = *key == "sink.path"
                    && other_key == "sink.path"
                    && flow.sink_appends_only()
                    && e.sink_appends_only();
                if !both_append {
                    return Err(format!(
                        "flows {:?} ({other_key}) and {:?} ({key}) both write {}; two flows may share a table \
                         only when both are Delta sinks in output mode append (a MERGE, a complete-mode \
                         overwrite or a side table would overwrite or skip the other's batches)",
                        e.name,
                        flow.name,
                        path.display()
                    ));
                }
            }
        }
    }
    let dirs = |f: &FlowSpec| -> Vec<std::path::PathBuf> {
        f.sources()
            .into_iter()
            .filter_map(|s| s.quarantine().0.map(crate::spec::normalize))
            .collect()
    };
    let mine = dirs(flow);
    for (i, dir) in mine.iter().enumerate() {
        let shared = mine[..i].contains(dir) || earlier.iter().any(|e| dirs(e).contains(dir));
        if shared {
            return Err(format!(
                "bad_records_path {} is used twice (flow {:?}); give each source its own quarantine directory",
                dir.display(),
                flow.name
            ));
        }
    }
    Ok(())
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

/// A path key's value, relative to the pipeline file's directory. An object-store URL
/// (`s3://...`) is kept as written, never joined to the directory: the keys that accept
/// one hand it to `crate::storage`, the others are refused first
/// ([`refuse_remote_locations`]).
fn resolve_path(base: &Path, path: &str) -> PathBuf {
    if crate::storage::location::is_remote_text(path) {
        return PathBuf::from(path);
    }
    if let Ok(crate::storage::Location::Local(p)) = crate::storage::Location::parse(path, base) {
        return p;
    }
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Object-store URLs where weir reads and writes through `crate::storage` (Delta sinks and
/// sources), refused elsewhere before anything runs: a URL taken as a relative directory
/// would create `./s3:/bucket/...` and read nothing (docs/object-storage.md).
fn refuse_remote_locations(
    cx: &Context<'_>,
    span: Range<usize>,
    flow: &file::FlowFile,
) -> Result<(), PipelineError> {
    let check = |key: &str, text: &str, remote_ok: bool| -> Result<(), PipelineError> {
        if !crate::storage::location::is_remote_text(text) {
            return Ok(());
        }
        let base = Path::new("");
        if let Err(e) = crate::storage::Location::parse(text, base) {
            return Err(cx.error(span.clone(), format!("{key}: {e}")));
        }
        if remote_ok {
            return Ok(());
        }
        Err(cx.error(
            span.clone(),
            format!(
                "{key} = {text:?}: this key takes a local path for now; object-store URLs are read and written by Delta sinks and Delta sources (docs/object-storage.md#what-runs-where)"
            ),
        ))
    };
    if let Some(c) = &flow.checkpoint {
        check("checkpoint", c, false)?;
    }
    let sources = std::iter::once(&flow.source)
        .chain(flow.union.iter().flatten().map(|u| &u.get_ref().source))
        .chain(flow.stream_join.iter().map(|j| &j.get_ref().source));
    for source in sources {
        if let Some(p) = &source.path {
            let delta = source.kind.get_ref() == "delta";
            check("source path", p, delta)?;
        }
        let side = [
            ("schema_location", &source.schema_location),
            ("bad_records_path", &source.bad_records_path),
            ("bad_records_table", &source.bad_records_table),
        ];
        for (key, value) in side {
            if let Some(v) = value {
                check(key, v, false)?;
            }
        }
    }
    match &flow.sink {
        file::SinkFile::Delta { path, .. } | file::SinkFile::DeltaMerge { path, .. } => {
            check("sink path", path, true)?;
        }
        _ => {}
    }
    if let Some(l) = &flow.late_rows {
        check("late_rows path", &l.path, false)?;
    }
    for j in flow.join.iter().flatten() {
        check("join table", &j.get_ref().table, false)?;
    }
    Ok(())
}

fn resolve_flow(
    cx: &Context<'_>,
    base: &Path,
    span: Range<usize>,
    flow: file::FlowFile,
) -> Result<FlowSpec, PipelineError> {
    refuse_remote_locations(cx, span.clone(), &flow)?;
    let name = flow.name.into_inner();
    let source = match flow.source.kind.get_ref().as_str() {
        "files" => SourceSpec::Files(resolve_files(cx, base, flow.source)?),
        "delta" => SourceSpec::Delta(resolve_delta(cx, base, flow.source)?),
        "kafka" => SourceSpec::Kafka(resolve_kafka(cx, base, flow.source)?),
        other => {
            return Err(cx.error(
                flow.source.kind.span(),
                format!("unknown source type {other:?}; allowed: \"files\" (a directory of CSV, JSON lines or Parquet files), \"delta\" (a Delta table read as a stream) or \"kafka\" (Kafka topics)"),
            ));
        }
    };
    let trigger = match flow.trigger {
        None => Trigger::ProcessingTime(Duration::ZERO),
        Some(t) => {
            let tspan = t.span();
            match t.into_inner() {
                file::TriggerFile::Word(w) => Trigger::parse(&w).map_err(|m| cx.error(tspan, m))?,
                file::TriggerFile::ProcessingTime { processing_time } => {
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
    let merge_schema_given = match &flow.sink {
        file::SinkFile::Delta { merge_schema, .. } => *merge_schema,
        _ => None,
    };
    let optimize_every = match &flow.sink {
        file::SinkFile::Delta { optimize_every, .. }
        | file::SinkFile::DeltaMerge { optimize_every, .. } => match optimize_every {
            Some(d) if d.0.is_zero() => {
                return Err(cx.error(
                    span.clone(),
                    "sink optimize_every = \"0\" would compact after every batch; give an interval such as \"1h\", \
                     or leave it out (no automatic OPTIMIZE; `weir table optimize` runs one by hand)"
                        .into(),
                ));
            }
            other => other.map(|d| d.0),
        },
        _ => None,
    };
    let sink = match flow.sink {
        file::SinkFile::Delta {
            path,
            partition_by,
            merge_schema,
            idempotent,
            allow_existing_table,
            column_mapping_mode,
            optimize_every: _,
        } => SinkSpec::Delta {
            column_mapping_mode: match column_mapping_mode.as_deref() {
                None => None,
                Some(m) => crate::spec::ColumnMappingMode::parse(m)
                    .map_err(|e| cx.error(span.clone(), e))?,
            },
            path: resolve_path(base, &path),
            partition_by,
            // Auto Loader's add_new_columns only continues after its restart if the table
            // takes the new columns, so the sink merges them unless told otherwise.
            merge_schema: merge_schema.unwrap_or(matches!(
                &source,
                SourceSpec::Files(f) if f.schema_evolution == EvolutionMode::AddNewColumns
            )),
            idempotent,
            allow_existing_table,
        },
        file::SinkFile::DeltaMerge {
            path,
            keys,
            order_by,
            partition_by,
            allow_existing_table,
            null_safe_keys,
            optimize_every: _,
        } => {
            if keys.is_empty() || keys.iter().any(|k| k.trim().is_empty()) {
                return Err(cx.error(
                    span.clone(),
                    "a delta_merge sink needs keys = [\"col\", ...]: the columns a row is matched on (MERGE ... ON t.key = s.key)".into(),
                ));
            }
            SinkSpec::DeltaMerge {
                path: resolve_path(base, &path),
                keys,
                order_by,
                partition_by,
                allow_existing_table,
                null_safe_keys,
            }
        }
        file::SinkFile::Memory { name: sink_name } => SinkSpec::Memory {
            name: sink_name.unwrap_or_else(|| name.clone()),
        },
        file::SinkFile::Console { num_rows } => SinkSpec::Console { num_rows },
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
    // Window specs are user text: checked here, without the schema, so a bad one is an
    // error at its file:line (never a panic or an allocation failure in the first batch).
    let mut group_by = Vec::new();
    for item in flow.group_by.unwrap_or_default() {
        let window = crate::ops::window::WindowSpec::parse_item(item.get_ref())
            .map_err(|m| cx.error(item.span(), format!("flow {name:?}: {m}")))?;
        if window.is_none() {
            crate::ops::check_sql_syntax(item.get_ref(), true).map_err(|m| {
                cx.error(
                    item.span(),
                    format!("invalid SQL expression in `group_by`: {m}; each entry is one expression or window(...)"),
                )
            })?;
        }
        group_by.push(item.into_inner());
    }
    let mut aggregates = Vec::new();
    for item in flow.aggregates.unwrap_or_default() {
        crate::ops::check_sql_syntax(item.get_ref(), true).map_err(|m| {
            cx.error(
                item.span(),
                format!("invalid SQL expression in `aggregates`: {m}; each entry is one aggregate, e.g. \"count(*) AS n\""),
            )
        })?;
        aggregates.push(item.into_inner());
    }
    let stateful = StatefulSpec {
        flow: name.clone(),
        watermark: flow.watermark.map(|w| WatermarkSpec {
            column: w.column,
            delay_ms: w.delay.as_millis(),
            max_future_ms: w.max_future.map(|d| d.as_millis()),
        }),
        group_by,
        aggregates,
        drop_duplicates: flow.drop_duplicates.as_ref().map(|d| d.get_ref().clone()),
        drop_duplicates_within_watermark: flow.drop_duplicates_within_watermark,
        output_mode,
        state_memory_limit: flow.state_memory_limit.as_ref().map(|b| b.get_ref().0),
    };
    if let Some(limit) = &flow.state_memory_limit
        && (flow.drop_duplicates.is_none() || stateful.has_aggregation())
    {
        return Err(cx.error(
            limit.span(),
            "state_memory_limit bounds the memory of a drop_duplicates state (it spills the rest to disk); \
             aggregation and join state stay in memory, so this flow has nothing to bound: remove it"
                .into(),
        ));
    }
    // A deduplication's state must be bounded by the watermark: checked here, without
    // the schema, so an inferred schema is refused before anything runs too.
    if let Some(keys) = &flow.drop_duplicates
        && !stateful.has_aggregation()
    {
        crate::ops::stateful::check_dedup_bounds(&stateful, keys.get_ref())
            .map_err(|m| cx.error(keys.span(), m))?;
    }
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
    let health = resolve_health(cx, &source, flow.freshness, flow.health)?;
    let mut joins = Vec::new();
    for j in flow.join.unwrap_or_default() {
        let jspan = j.span();
        let j = j.into_inner();
        let table = resolve_path(base, &j.table);
        let format = match &j.format {
            None => crate::ops::join::format_of(&table),
            Some(f) => match f.get_ref().as_str() {
                "delta" => DimensionFormat::Delta,
                "csv" => DimensionFormat::Csv,
                "parquet" => DimensionFormat::Parquet,
                other => {
                    return Err(cx.error(
                        f.span(),
                        format!("unknown join table format {other:?}; allowed: \"delta\", \"csv\", \"parquet\""),
                    ));
                }
            },
        };
        let alias = match &j.alias {
            Some(a) if valid_flow_name(a.get_ref()) && a.get_ref() != "batch" => {
                a.get_ref().clone()
            }
            Some(a) => {
                return Err(cx.error(
                    a.span(),
                    format!("invalid join alias {:?}; use letters, digits and '_' (not \"batch\", the stream's name in SQL)", a.get_ref()),
                ));
            }
            None => table
                .file_stem()
                .map(|s| s.to_string_lossy().replace(['-', '.'], "_"))
                .unwrap_or_else(|| "dim".to_string()),
        };
        if joins.iter().any(|x: &JoinSpec| x.alias == alias) {
            return Err(cx.error(
                jspan,
                format!("two joins are named {alias:?}; give one an `alias`"),
            ));
        }
        let on = resolve_join_on(cx, &j.on, "batch.dest = airports.faa")?;
        let how = match j.how.as_ref().map(|h| h.get_ref().as_str()) {
            None | Some("inner") => JoinType::Inner,
            Some("left") | Some("left_outer") => JoinType::Left,
            Some(other) => {
                let at = j.how.as_ref().map_or(jspan.clone(), |h| h.span());
                return Err(cx.error(
                    at,
                    format!(
                        "join how = {other:?} is not supported with a static table; allowed: \"inner\", \"left\" \
                         (as in Spark, a right or full outer join would need to know a dimension row matches no future batch)"
                    ),
                ));
            }
        };
        joins.push(JoinSpec {
            table,
            format,
            alias,
            on,
            how,
            null_value: j.null_value,
        });
    }
    let union = resolve_union(cx, base, flow.union, &stateful, &source)?;
    // The sink takes new columns when any source of a union evolves its schema.
    let mut sink = sink;
    if let (SinkSpec::Delta { merge_schema, .. }, None) = (&mut sink, merge_schema_given)
        && union.iter().any(|u| {
            matches!(&u.source, SourceSpec::Files(f) if f.schema_evolution == EvolutionMode::AddNewColumns)
        })
    {
        *merge_schema = true;
    }
    if let (Some(sj), false) = (&flow.stream_join, union.is_empty()) {
        return Err(cx.error(
            sj.span(),
            "a flow with [[flow.union]] sources cannot also have a stream_join: union the sources in one flow \
             and join its output table in the next (chain the flows)"
                .into(),
        ));
    }
    let multiple_watermark_policy = match &flow.multiple_watermark_policy {
        None => WatermarkPolicy::Min,
        Some(_) if union.is_empty() => {
            let at = flow
                .multiple_watermark_policy
                .as_ref()
                .map_or(span.clone(), |p| p.span());
            return Err(cx.error(
                at,
                "multiple_watermark_policy combines the watermarks of several sources; this flow has one \
                 (add [[flow.union]] sources, or remove the key)"
                    .into(),
            ));
        }
        Some(p) => p
            .get_ref()
            .parse::<WatermarkPolicy>()
            .map_err(|m| cx.error(p.span(), m))?,
    };
    let stream_join = match flow.stream_join {
        None => None,
        Some(sj) => Some(resolve_stream_join(
            cx, base, sj, &stateful, &joins, &source,
        )?),
    };
    let min_batches_to_retain = match &flow.min_batches_to_retain {
        None => crate::spec::DEFAULT_MIN_BATCHES_TO_RETAIN,
        Some(n) => match u64::try_from(*n.get_ref()) {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(cx.error(
                    n.span(),
                    format!(
                        "min_batches_to_retain = {} must be at least 1: a restart needs the last committed batch's \
                         offsets and commit (Spark: \"minBatchesToRetain has to be positive\"); the default is {}",
                        n.get_ref(),
                        crate::spec::DEFAULT_MIN_BATCHES_TO_RETAIN
                    ),
                ));
            }
        },
    };
    Ok(FlowSpec {
        min_batches_to_retain,
        optimize_every,
        union,
        multiple_watermark_policy,
        stream_join,
        joins,
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
        health,
    })
}

fn resolve_health(
    cx: &Context<'_>,
    source: &SourceSpec,
    freshness: Option<HumanDuration>,
    health: Option<toml::Spanned<file::HealthFile>>,
) -> Result<crate::spec::HealthConfig, PipelineError> {
    let cap = match source {
        SourceSpec::Files(f) => f.max_files_per_trigger,
        SourceSpec::Delta(d) => d.max_files_per_trigger,
        SourceSpec::Kafka(_) => u64::MAX,
    };
    let mut cfg = crate::spec::HealthConfig {
        freshness: freshness.map(|f| f.0).filter(|f| !f.is_zero()),
        max_files_per_trigger: Some(cap),
        ..Default::default()
    };
    let Some(h) = health else {
        return Ok(cfg);
    };
    let h = h.into_inner();
    if let Some(w) = h.window_batches {
        let v = *w.get_ref();
        if !(2..=1000).contains(&v) {
            return Err(cx.error(
                w.span(),
                format!("window_batches = {v}: the lagging rules compare batches; use 2 to 1000 (default 5)"),
            ));
        }
        cfg.window_batches = v as usize;
    }
    for (value, slot, what) in [
        (&h.rate_tolerance, &mut cfg.rate_tolerance, "rate_tolerance"),
        (
            &h.max_rescued_ratio,
            &mut cfg.max_rescued_ratio,
            "max_rescued_ratio",
        ),
    ] {
        if let Some(v) = value {
            let x = *v.get_ref();
            if !(0.0..=1.0).contains(&x) {
                return Err(cx.error(
                    v.span(),
                    format!("{what} = {x}: a fraction between 0 and 1 (e.g. 0.1 for 10%)"),
                ));
            }
            *slot = x;
        }
    }
    if let Some(a) = h.retry_attempts {
        let v = *a.get_ref();
        if v > 100 {
            return Err(cx.error(
                a.span(),
                format!("retry_attempts = {v}: at most 100 (0 turns retries off; default 3)"),
            ));
        }
        cfg.retry_attempts = v as u32;
    }
    if let Some(b) = h.retry_backoff {
        cfg.retry_backoff = b.0;
    }
    Ok(cfg)
}

/// `[[flow.union]]`: the flow's other sources, each with its own watermark (by default
/// the flow's column and delay). A source read twice would duplicate its rows, so every
/// source's path must differ; a union source's watermark needs the flow's own.
fn resolve_union(
    cx: &Context<'_>,
    base: &Path,
    union: Option<Vec<toml::Spanned<file::UnionFile>>>,
    stateful: &StatefulSpec,
    first: &SourceSpec,
) -> Result<Vec<UnionSpec>, PipelineError> {
    let mut out: Vec<UnionSpec> = Vec::new();
    for u in union.unwrap_or_default() {
        let uspan = u.span();
        let u = u.into_inner();
        let source = match u.source.kind.get_ref().as_str() {
            "files" => SourceSpec::Files(resolve_files(cx, base, u.source)?),
            "delta" => SourceSpec::Delta(resolve_delta(cx, base, u.source)?),
            other => {
                return Err(cx.error(
                    u.source.kind.span(),
                    format!("unknown source type {other:?}; allowed: \"files\" or \"delta\""),
                ));
            }
        };
        let path = normalize(source.path());
        if normalize(first.path()) == path || out.iter().any(|o| normalize(o.source.path()) == path)
        {
            return Err(cx.error(
                uspan,
                format!(
                    "{} is already a source of this flow; reading it twice would write each of its rows twice",
                    source.path().display()
                ),
            ));
        }
        let watermark = u.watermark.map(|w| WatermarkSpec {
            column: w.column,
            delay_ms: w.delay.as_millis(),
            max_future_ms: w.max_future.map(|d| d.as_millis()),
        });
        if watermark.is_some() && stateful.watermark.is_none() {
            return Err(cx.error(
                uspan,
                "a [[flow.union]] source has a watermark but the flow's own source has none: give the flow a \
                 watermark = { column = ..., delay = ... } too (each source's watermark holds the flow's back)"
                    .into(),
            ));
        }
        out.push(UnionSpec { source, watermark });
    }
    Ok(out)
}

/// `[flow.stream_join]`: the right stream, its watermark, the condition, and the bounds
/// that keep the state finite (refused without them, see `ops::stream_join::check_bounds`).
fn resolve_stream_join(
    cx: &Context<'_>,
    base: &Path,
    sj: toml::Spanned<file::StreamJoinFile>,
    stateful: &StatefulSpec,
    joins: &[JoinSpec],
    left_source: &SourceSpec,
) -> Result<StreamJoinSpec, PipelineError> {
    let span = sj.span();
    let sj = sj.into_inner();
    let alias = sj.alias.get_ref().clone();
    if !valid_flow_name(&alias) || alias == "batch" || alias.contains('-') {
        return Err(cx.error(
            sj.alias.span(),
            format!("invalid stream_join alias {alias:?}; use letters, digits and '_' (not \"batch\", the left stream's name in SQL)"),
        ));
    }
    if joins.iter().any(|j| j.alias == alias) {
        return Err(cx.error(
            sj.alias.span(),
            format!("a [[flow.join]] is also named {alias:?}; give the stream a different alias"),
        ));
    }
    if !joins.is_empty() {
        return Err(cx.error(
            span,
            "a flow with a stream_join cannot also have [[flow.join]] dimensions yet: join the dimension in an upstream or downstream flow".into(),
        ));
    }
    if stateful.has_aggregation() || stateful.has_deduplication() {
        return Err(cx.error(
            span,
            "a stream_join and group_by/aggregates/drop_duplicates in the same flow are not supported: \
             join in one flow and aggregate or deduplicate its output table in the next (chain the flows)"
                .into(),
        ));
    }
    let source = match sj.source.kind.get_ref().as_str() {
        "files" => SourceSpec::Files(resolve_files(cx, base, sj.source)?),
        "delta" => SourceSpec::Delta(resolve_delta(cx, base, sj.source)?),
        "kafka" => SourceSpec::Kafka(resolve_kafka(cx, base, sj.source)?),
        other => {
            return Err(cx.error(
                sj.source.kind.span(),
                format!(
                    "unknown source type {other:?}; allowed: \"files\", \"delta\" or \"kafka\""
                ),
            ));
        }
    };
    let watermark = sj.watermark.map(|w| WatermarkSpec {
        column: w.column,
        delay_ms: w.delay.as_millis(),
        max_future_ms: w.max_future.map(|d| d.as_millis()),
    });
    let on = resolve_join_on(cx, &sj.on, &format!("batch.origin = {alias}.origin"))?;
    let how = match sj.how.as_ref().map(|h| h.get_ref().as_str()) {
        None | Some("inner") => JoinType::Inner,
        Some("left") | Some("left_outer") => JoinType::Left,
        Some(other) => {
            let at = sj.how.as_ref().map_or(span.clone(), |h| h.span());
            return Err(cx.error(
                at,
                format!("stream_join how = {other:?} is not supported; allowed: \"inner\", \"left\" (for a right outer join, swap the two streams)"),
            ));
        }
    };
    let time_range = match sj.time_range {
        None => None,
        Some(tr) => {
            let tspan = tr.span();
            let tr = tr.into_inner();
            let signed = |v: &toml::Spanned<String>| -> Result<i64, PipelineError> {
                let text = v.get_ref().trim();
                let (neg, rest) = match text.strip_prefix('-') {
                    Some(r) => (true, r.trim()),
                    None => (false, text.strip_prefix('+').unwrap_or(text).trim()),
                };
                let d = HumanDuration::parse(rest).map_err(|m| {
                    cx.error(
                        v.span(),
                        format!(
                            "invalid duration {text:?}: {m}; e.g. \"-1 hour\" or \"0 seconds\""
                        ),
                    )
                })?;
                Ok(if neg { -d.as_millis() } else { d.as_millis() })
            };
            let lower_ms = signed(&tr.lower)?;
            let upper_ms = signed(&tr.upper)?;
            let left = tr
                .left
                .or_else(|| stateful.watermark.as_ref().map(|w| w.column.clone()));
            let right = tr
                .right
                .or_else(|| watermark.as_ref().map(|w| w.column.clone()));
            // A side without a watermark has no default column; check_bounds reports that.
            let _ = tspan;
            Some(TimeRange {
                left: left.unwrap_or_default(),
                right: right.unwrap_or_default(),
                lower_ms,
                upper_ms,
            })
        }
    };
    // A widened schema would change the buffered rows' columns, which the join's state
    // cannot follow (a restart would be refused as incompatible).
    for (side, src) in [
        ("the flow's source", left_source),
        ("the stream_join source", &source),
    ] {
        if let SourceSpec::Files(f) = src
            && f.schema_evolution == EvolutionMode::AddNewColumns
        {
            return Err(cx.error(
                span,
                format!(
                    "{side} uses schema_evolution = \"add_new_columns\", which a stream-stream join cannot follow \
                     (its state holds rows of the old schema); give the source a `schema`, or set \
                     schema_evolution = \"rescue\" (new columns go to _rescued_data) or \"fail_on_new_columns\""
                ),
            ));
        }
    }
    let join = StreamJoinSpec {
        alias,
        source,
        watermark,
        on,
        time_range,
        how,
    };
    crate::ops::stream_join::check_bounds(stateful.watermark.as_ref(), &join)
        .map_err(|m| cx.error(span, m))?;
    Ok(join)
}

/// A join's `on`: column name(s) present on both sides, or a SQL condition.
fn resolve_join_on(
    cx: &Context<'_>,
    on: &toml::Spanned<file::JoinOnFile>,
    example: &str,
) -> Result<JoinOn, PipelineError> {
    match on.get_ref() {
        file::JoinOnFile::Columns(cols) if !cols.is_empty() => Ok(JoinOn::Columns(cols.clone())),
        file::JoinOnFile::Text(t) if !t.trim().is_empty() => {
            if t.chars().all(|c| c.is_alphanumeric() || c == '_') {
                return Ok(JoinOn::Columns(vec![t.clone()]));
            }
            crate::ops::check_sql_syntax(t, false).map_err(|m| {
                cx.error(
                    on.span(),
                    format!("invalid join condition: {m}; e.g. \"{example}\""),
                )
            })?;
            Ok(JoinOn::Condition(t.clone()))
        }
        _ => Err(cx.error(
            on.span(),
            format!(
                "`on` is empty; give a column present on both sides, a list of them, or a condition (\"{example}\")"
            ),
        )),
    }
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

/// A files or Delta source's `path` (required).
fn required_path(cx: &Context<'_>, src: &file::FilesSourceFile) -> Result<String, PipelineError> {
    src.path.clone().ok_or_else(|| {
        cx.error(
            src.kind.span(),
            format!(
                "missing field `path`; a {} source reads a directory: path = \"...\"",
                src.kind.get_ref()
            ),
        )
    })
}

/// Kafka-only keys set on a files or Delta source, refused by name.
fn refuse_kafka_keys(cx: &Context<'_>, src: &file::FilesSourceFile) -> Result<(), PipelineError> {
    let kafka_keys = [
        (
            "bootstrap_servers",
            src.bootstrap_servers.as_ref().map(|s| s.span()),
        ),
        ("subscribe", src.subscribe.as_ref().map(|s| s.span())),
        (
            "subscribe_pattern",
            src.subscribe_pattern.as_ref().map(|s| s.span()),
        ),
        (
            "starting_offsets",
            src.starting_offsets.as_ref().map(|s| s.span()),
        ),
        (
            "max_offsets_per_trigger",
            src.max_offsets_per_trigger.as_ref().map(|s| s.span()),
        ),
        (
            "min_offsets_per_trigger",
            src.min_offsets_per_trigger.as_ref().map(|s| s.span()),
        ),
        (
            "max_trigger_delay",
            src.max_trigger_delay.as_ref().map(|_| src.kind.span()),
        ),
        (
            "fail_on_data_loss",
            src.fail_on_data_loss.as_ref().map(|s| s.span()),
        ),
        (
            "include_headers",
            src.include_headers.as_ref().map(|s| s.span()),
        ),
        ("kafka", src.kafka.as_ref().map(|s| s.span())),
    ];
    if let Some((key, Some(span))) = kafka_keys.into_iter().find(|(_, s)| s.is_some()) {
        return Err(cx.error(
            span,
            format!(
                "`{key}` is a Kafka-source option; this source has type = {:?}",
                src.kind.get_ref()
            ),
        ));
    }
    Ok(())
}

/// A `type = "kafka"` source (docs/kafka.md): Spark's Kafka options in snake case, and
/// the `format` shortcut parsing `value` with the files source's decoders.
fn resolve_kafka(
    cx: &Context<'_>,
    base: &Path,
    src: file::FilesSourceFile,
) -> Result<crate::spec::KafkaSourceSpec, PipelineError> {
    use crate::spec::{KafkaSourceSpec, KafkaSubscribe, KafkaValueFormat};
    let at = src.kind.span();
    let not_kafka = [
        ("path", src.path.is_some()),
        ("starting_version", src.starting_version.is_some()),
        ("skip_change_commits", src.skip_change_commits.is_some()),
        ("infer_column_types", !src.infer_column_types),
        (
            "schema_inference_max_files",
            src.schema_inference_max_files.is_some(),
        ),
        (
            "schema_inference_max_bytes",
            src.schema_inference_max_bytes.is_some(),
        ),
        ("path_glob_filter", src.path_glob_filter.is_some()),
        ("max_files_per_trigger", src.max_files_per_trigger.is_some()),
        ("max_bytes_per_trigger", src.max_bytes_per_trigger.is_some()),
        ("min_file_age", src.min_file_age.is_some()),
        ("follow_symlinks", src.follow_symlinks.is_some()),
        ("allow_overwrites", src.allow_overwrites),
        ("schema_evolution", src.schema_evolution.is_some()),
        ("schema_hints", src.schema_hints.is_some()),
        ("schema_location", src.schema_location.is_some()),
        ("encoding", src.encoding.is_some()),
        ("partition_columns", src.partition_columns.is_some()),
        (
            "partition_column_type_inference",
            src.partition_column_type_inference.is_some(),
        ),
        (
            "include_existing_files",
            src.include_existing_files.is_some(),
        ),
        ("modified_after", src.modified_after.is_some()),
        ("use_notifications", src.use_notifications.is_some()),
        ("backfill_interval", src.backfill_interval.is_some()),
        ("prefers_decimal", src.prefers_decimal.is_some()),
    ];
    if let Some((key, _)) = not_kafka.iter().find(|(_, set)| *set) {
        let hint = match *key {
            "path" => {
                "a kafka source reads topics: bootstrap_servers and subscribe (or subscribe_pattern)"
            }
            "max_files_per_trigger" | "max_bytes_per_trigger" => "use max_offsets_per_trigger",
            "schema_evolution" | "schema_hints" | "infer_column_types" | "prefers_decimal" => {
                "with format, the value's columns are the given `schema`; other fields stay in _rescued_data"
            }
            _ => "see docs/kafka.md for a kafka source's options",
        };
        return Err(cx.error(
            at,
            format!("`{key}` is not an option of a kafka source; {hint}"),
        ));
    }
    let bootstrap = src.bootstrap_servers.as_ref().ok_or_else(|| {
        cx.error(
            at.clone(),
            "missing field `bootstrap_servers`; a kafka source needs bootstrap_servers = \"host:port\"".into(),
        )
    })?;
    let subscribe = match (&src.subscribe, &src.subscribe_pattern) {
        (Some(t), None) => {
            if t.get_ref().is_empty() || t.get_ref().iter().any(|n| n.trim().is_empty()) {
                return Err(cx.error(
                    t.span(),
                    "subscribe lists topic names, e.g. subscribe = [\"events\"]".into(),
                ));
            }
            KafkaSubscribe::Topics(t.get_ref().clone())
        }
        (None, Some(p)) => KafkaSubscribe::Pattern(p.get_ref().clone()),
        (Some(t), Some(_)) => {
            return Err(cx.error(
                t.span(),
                "give one of subscribe and subscribe_pattern, not both (Spark's subscribe / subscribePattern)".into(),
            ));
        }
        (None, None) => {
            return Err(cx.error(
                at,
                "a kafka source needs subscribe = [\"topic\", ...] or subscribe_pattern = \"regex\"".into(),
            ));
        }
    };
    for (v, what) in [
        (&src.max_offsets_per_trigger, "max_offsets_per_trigger"),
        (&src.min_offsets_per_trigger, "min_offsets_per_trigger"),
    ] {
        if let Some(v) = v
            && *v.get_ref() == 0
        {
            return Err(cx.error(v.span(), format!("{what} must be at least 1")));
        }
    }
    if let (Some(min), Some(max)) = (&src.min_offsets_per_trigger, &src.max_offsets_per_trigger)
        && min.get_ref() > max.get_ref()
    {
        return Err(cx.error(
            min.span(),
            format!(
                "min_offsets_per_trigger ({}) is above max_offsets_per_trigger ({}): no batch could ever satisfy both",
                min.get_ref(),
                max.get_ref()
            ),
        ));
    }
    let value_format = match src.format.as_ref().map(|f| (*f.get_ref(), f.span())) {
        None => {
            for (key, set) in [
                ("schema", src.schema.is_some()),
                ("csv", src.csv.is_some()),
                ("bad_records_path", src.bad_records_path.is_some()),
                ("bad_records_table", src.bad_records_table.is_some()),
                (
                    "allow_non_numeric_numbers",
                    src.allow_non_numeric_numbers.is_some(),
                ),
                ("max_record_size", src.max_record_size.is_some()),
                ("session_time_zone", src.session_time_zone.is_some()),
                ("timestamp_format", src.timestamp_format.is_some()),
                ("mode", src.mode.is_some()),
            ] {
                if set {
                    return Err(cx.error(
                        at,
                        format!("`{key}` applies to a kafka source with format = \"json\" or \"csv\" (parsing `value`); without format, rows have Spark's Kafka columns (key, value, topic, partition, offset, timestamp, timestampType)"),
                    ));
                }
            }
            None
        }
        Some((file::FormatFile::Parquet, span)) => {
            return Err(cx.error(
                span,
                "a kafka source's format is \"json\" or \"csv\" (how `value` is parsed)".into(),
            ));
        }
        Some((f, span)) => {
            let format = match f {
                file::FormatFile::Json => FileFormat::Json,
                _ => FileFormat::Csv,
            };
            let ddl = src.schema.as_ref().ok_or_else(|| {
                cx.error(
                    span,
                    "format needs schema = \"...\" (Spark DDL of the value's columns, as from_json(value, schema) takes)".into(),
                )
            })?;
            let schema =
                std::sync::Arc::new(crate::schema::parse_ddl(ddl.get_ref()).map_err(|e| {
                    cx.error(
                        ddl.span(),
                        format!(
                            "invalid schema: {e}; write Spark DDL, e.g. \"id BIGINT, ts TIMESTAMP\""
                        ),
                    )
                })?);
            let mut csv = CsvOptions {
                header: false,
                ..CsvOptions::default()
            };
            if let Some(c) = &src.csv {
                if format != FileFormat::Csv {
                    return Err(cx.error(
                        c.header_span(),
                        "a [csv] table is only allowed with format = \"csv\"".into(),
                    ));
                }
                if c.header == Some(true) {
                    return Err(cx.error(
                        at,
                        "csv.header = true does not apply to Kafka: each value is one record, read by position".into(),
                    ));
                }
                if let Some(d) = single_byte(cx, &c.delimiter, "delimiter")? {
                    csv.delimiter = d;
                }
                if let Some(q) = single_byte(cx, &c.quote, "quote")? {
                    csv.quote = q;
                }
                csv.escape = single_byte(cx, &c.escape, "escape")?;
                csv.null_value = c.null_value.clone();
                if let Some(v) = &c.empty_value {
                    csv.empty_value = v.clone();
                }
                if let Some(v) = &c.nan_value {
                    csv.nan_value = v.clone();
                }
                if let Some(v) = &c.positive_inf {
                    csv.positive_inf = v.clone();
                }
                if let Some(v) = &c.negative_inf {
                    csv.negative_inf = v.clone();
                }
            }
            let text = resolve_text(cx, &src, format)?;
            Some(KafkaValueFormat {
                format,
                schema,
                csv,
                text,
            })
        }
    };
    let spec = KafkaSourceSpec {
        bootstrap_servers: bootstrap.get_ref().clone(),
        locator: KafkaSourceSpec::locator_of(&subscribe),
        subscribe,
        starting_offsets: src
            .starting_offsets
            .as_ref()
            .map_or_else(|| "latest".to_string(), |s| s.get_ref().clone()),
        max_offsets_per_trigger: src.max_offsets_per_trigger.as_ref().map(|v| *v.get_ref()),
        min_offsets_per_trigger: src.min_offsets_per_trigger.as_ref().map(|v| *v.get_ref()),
        max_trigger_delay: src
            .max_trigger_delay
            .as_ref()
            .map_or(crate::spec::DEFAULT_KAFKA_MAX_TRIGGER_DELAY, |d| d.0),
        fail_on_data_loss: src.fail_on_data_loss.as_ref().is_none_or(|b| *b.get_ref()),
        include_headers: src.include_headers.as_ref().is_some_and(|b| *b.get_ref()),
        client: src
            .kafka
            .as_ref()
            .map(|k| k.get_ref().clone())
            .unwrap_or_default(),
        value_format,
        bad_records_path: src
            .bad_records_path
            .as_deref()
            .map(|p| resolve_path(base, p)),
        bad_records_table: src
            .bad_records_table
            .as_deref()
            .map(|p| resolve_path(base, p)),
    };
    // The settings the client is built from, checked now (starting_offsets JSON,
    // subscribe_pattern, security settings): a bad one is refused before anything runs.
    crate::source::kafka::KafkaSourceOptions::from_spec(&spec).map_err(|m| {
        let span = if m.starts_with("starting_offsets") {
            src.starting_offsets.as_ref().map(|s| s.span())
        } else if m.starts_with("subscribe_pattern") {
            src.subscribe_pattern.as_ref().map(|s| s.span())
        } else if m.starts_with("bootstrap_servers") {
            Some(bootstrap.span())
        } else {
            src.kafka.as_ref().map(|k| k.span())
        };
        cx.error(span.unwrap_or(at.clone()), m)
    })?;
    Ok(spec)
}

fn resolve_files(
    cx: &Context<'_>,
    base: &Path,
    files: file::FilesSourceFile,
) -> Result<FilesSource, PipelineError> {
    refuse_kafka_keys(cx, &files)?;
    if let Some(v) = &files.starting_version {
        return Err(cx.error(
            v.span(),
            "starting_version applies to a delta source; a files source starts with the files present (the ledger decides what is new)".into(),
        ));
    }
    if let Some(v) = &files.skip_change_commits {
        return Err(cx.error(
            v.span(),
            "skip_change_commits applies to a delta source (Delta's skipChangeCommits)".into(),
        ));
    }
    let format = match files.format.as_ref().map(|f| *f.get_ref()) {
        Some(file::FormatFile::Json) => FileFormat::Json,
        Some(file::FormatFile::Csv) => FileFormat::Csv,
        Some(file::FormatFile::Parquet) => FileFormat::Parquet,
        None => {
            return Err(cx.error(
                files.kind.span(),
                "missing field `format`; a files source needs format = \"csv\", \"json\" or \"parquet\"".into(),
            ));
        }
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
        if let Some(v) = &c.empty_value {
            csv.empty_value = v.clone();
        }
        if let Some(v) = &c.nan_value {
            csv.nan_value = v.clone();
        }
        if let Some(v) = &c.positive_inf {
            csv.positive_inf = v.clone();
        }
        if let Some(v) = &c.negative_inf {
            csv.negative_inf = v.clone();
        }
    }
    let text = resolve_text(cx, &files, format)?;
    let modified_after_ms = match &files.modified_after {
        None => None,
        Some(t) => Some(parse_modified_after(t.get_ref()).ok_or_else(|| {
            cx.error(
                t.span(),
                format!(
                    "invalid modified_after {:?}; write an ISO-8601 timestamp such as \"2024-06-01T00:00:00Z\" (UTC when no zone is given)",
                    t.get_ref()
                ),
            )
        })?),
    };
    let partition_columns = match &files.partition_columns {
        None => None,
        Some(cols) => {
            let mut seen = BTreeSet::new();
            for c in cols.get_ref() {
                if c.is_empty() || c.contains(['/', '=']) || !seen.insert(c.to_lowercase()) {
                    return Err(cx.error(
                        cols.span(),
                        format!("invalid partition column {c:?}: names must be non-empty, unique (ignoring case) and free of '/' and '='"),
                    ));
                }
            }
            Some(cols.get_ref().clone())
        }
    };
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
    if let (Some(p), Some(_)) = (&files.prefers_decimal, &schema) {
        return Err(cx.error(
            p.span(),
            "`prefers_decimal` applies to schema inference, and this source gives its `schema`; declare the columns as DECIMAL(p,s) there".into(),
        ));
    }
    let path_glob_filter = match &files.path_glob_filter {
        None => None,
        Some(g) => Some(glob::Pattern::new(g.get_ref()).map_err(|e| {
            cx.error(
                g.span(),
                format!("invalid glob pattern: {e}; e.g. \"*.csv\" or \"2024-*/*.json\""),
            )
        })?),
    };
    let follow_symlinks = match &files.follow_symlinks {
        None => crate::spec::FollowSymlinks::default(),
        Some(f) => f.get_ref().parse().map_err(|m| cx.error(f.span(), m))?,
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
    let use_notifications = files
        .use_notifications
        .as_ref()
        .is_some_and(|b| *b.get_ref());
    if let Some(backfill) = files
        .backfill_interval
        .as_ref()
        .filter(|_| !use_notifications)
    {
        return Err(cx.error(
            backfill.span(),
            "`backfill_interval` is the period of the full listing beside file notifications: \
             set use_notifications = true with it, or remove it (a listing source lists every trigger)"
                .into(),
        ));
    }
    Ok(FilesSource {
        schema_evolution,
        schema_hints: files.schema_hints.as_ref().map(|h| h.get_ref().clone()),
        schema_location: files
            .schema_location
            .as_deref()
            .map(|p| resolve_path(base, p)),
        bad_records_table: files
            .bad_records_table
            .as_deref()
            .map(|p| resolve_path(base, p)),
        bad_records_path: files
            .bad_records_path
            .as_deref()
            .map(|p| resolve_path(base, p)),
        path: resolve_path(base, &required_path(cx, &files)?),
        format,
        csv,
        schema,
        infer_column_types: files.infer_column_types,
        schema_inference_max_files: files.schema_inference_max_files.unwrap_or(50).max(1),
        schema_inference_max_bytes: files
            .schema_inference_max_bytes
            .map_or(DEFAULT_INFERENCE_MAX_BYTES, |b| b.0),
        path_glob_filter,
        max_files_per_trigger,
        max_bytes_per_trigger: files.max_bytes_per_trigger.map(|b| b.0),
        min_file_age: files.min_file_age.map(|d| d.0).unwrap_or(Duration::ZERO),
        follow_symlinks,
        allow_overwrites: files.allow_overwrites,
        text,
        partition_columns,
        partition_column_type_inference: files
            .partition_column_type_inference
            .as_ref()
            .is_none_or(|b| *b.get_ref()),
        include_existing_files: files
            .include_existing_files
            .as_ref()
            .is_none_or(|b| *b.get_ref()),
        modified_after_ms,
        use_notifications,
        backfill_interval: files
            .backfill_interval
            .as_ref()
            .map_or(crate::spec::DEFAULT_BACKFILL_INTERVAL, |d| d.get_ref().0),
    })
}

/// Auto Loader's `modifiedAfter` value: an ISO-8601 timestamp (UTC without a zone) or a date.
fn parse_modified_after(text: &str) -> Option<i64> {
    use arrow::compute::kernels::cast_utils::string_to_datetime;
    let text = text.trim();
    if let Ok(t) = string_to_datetime(&chrono::Utc, text) {
        return Some(t.timestamp_millis());
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc().timestamp_millis())
}

/// The text-format options of a files source (`encoding`, `allow_non_numeric_numbers`,
/// `max_record_size`, `session_time_zone`, `timestamp_format`).
fn resolve_text(
    cx: &Context<'_>,
    files: &file::FilesSourceFile,
    format: FileFormat,
) -> Result<crate::spec::TextOptions, PipelineError> {
    use crate::spec::{TextEncoding, TextOptions};
    use crate::spec::{TimestampFormat, TimestampOptions};
    let mut text = TextOptions::default();
    if let Some(e) = &files.encoding {
        if format == FileFormat::Parquet {
            return Err(cx.error(
                e.span(),
                "`encoding` applies to CSV and JSON files; Parquet stores its strings as UTF-8"
                    .into(),
            ));
        }
        text.encoding = TextEncoding::from_label(e.get_ref()).map_err(|m| cx.error(e.span(), m))?;
    }
    if let Some(b) = &files.allow_non_numeric_numbers {
        if format != FileFormat::Json {
            return Err(cx.error(
                b.span(),
                "`allow_non_numeric_numbers` applies to JSON files; for CSV use csv.nan_value, csv.positive_inf, csv.negative_inf".into(),
            ));
        }
        text.allow_non_numeric_numbers = *b.get_ref();
    }
    if let Some(max) = &files.max_record_size {
        if max.0 == 0 {
            return Err(cx.error(
                0..0,
                "max_record_size must be at least 1 byte, e.g. \"1 MiB\"".into(),
            ));
        }
        text.max_record_bytes = Some(max.0);
    }
    if let Some(max) = &files.max_file_size {
        if format == FileFormat::Parquet {
            return Err(cx.error(
                0..0,
                "max_file_size applies to CSV and JSON files (decoded whole); Parquet files are read by row group".into(),
            ));
        }
        if max.0 == 0 {
            return Err(cx.error(
                0..0,
                "max_file_size must be at least 1 byte, e.g. \"4 GiB\"".into(),
            ));
        }
        text.max_file_bytes = max.0;
    }
    let mut timestamps = TimestampOptions::default();
    if let Some(tz) = &files.session_time_zone {
        let name = tz.get_ref().trim();
        timestamps.time_zone = Some(name.parse::<chrono_tz::Tz>().map_err(|_| {
            cx.error(
                tz.span(),
                format!("unknown time zone {name:?}; use an IANA zone name such as \"UTC\", \"Europe/Paris\", \"America/New_York\""),
            )
        })?);
    }
    if let Some(f) = &files.timestamp_format {
        timestamps.format = Some(TimestampFormat::new(f.get_ref()).map_err(|m| {
            cx.error(
                f.span(),
                format!("invalid timestamp_format: {m}; e.g. \"yyyy-MM-dd HH:mm:ss\" or \"dd/MM/yyyy HH:mm[:ss]\""),
            )
        })?);
    }
    text.timestamps = timestamps;
    if let Some(m) = &files.mode {
        if format == FileFormat::Parquet {
            return Err(cx.error(
                m.span(),
                "`mode` applies to CSV and JSON (Spark's PERMISSIVE / FAILFAST); a Parquet file is either readable or failed as a whole".into(),
            ));
        }
        text.mode = m
            .get_ref()
            .parse::<crate::spec::ParseMode>()
            .map_err(|e| cx.error(m.span(), e))?;
        if text.mode == crate::spec::ParseMode::FailFast
            && let Some(key) = [
                ("bad_records_path", files.bad_records_path.is_some()),
                ("bad_records_table", files.bad_records_table.is_some()),
            ]
            .iter()
            .find(|(_, set)| *set)
            .map(|(k, _)| *k)
        {
            return Err(cx.error(
                m.span(),
                format!("mode = \"failfast\" stops at the first malformed record, so `{key}` would never receive one; remove `{key}`, or keep mode = \"permissive\" to quarantine malformed records"),
            ));
        }
    }
    if let Some(p) = &files.prefers_decimal {
        if format != FileFormat::Json {
            return Err(cx.error(
                p.span(),
                "`prefers_decimal` applies to JSON schema inference (Spark's prefersDecimal); pin CSV or Parquet columns with schema_hints, e.g. \"price DECIMAL(12,2)\"".into(),
            ));
        }
        text.prefers_decimal = *p.get_ref();
    }
    Ok(text)
}

/// A `type = "delta"` source: only the Delta source's keys are allowed.
fn resolve_delta(
    cx: &Context<'_>,
    base: &Path,
    src: file::FilesSourceFile,
) -> Result<DeltaSourceOptions, PipelineError> {
    refuse_kafka_keys(cx, &src)?;
    let only_files = [
        ("format", src.format.is_some()),
        ("schema", src.schema.is_some()),
        ("infer_column_types", !src.infer_column_types),
        (
            "schema_inference_max_files",
            src.schema_inference_max_files.is_some(),
        ),
        (
            "schema_inference_max_bytes",
            src.schema_inference_max_bytes.is_some(),
        ),
        ("path_glob_filter", src.path_glob_filter.is_some()),
        ("min_file_age", src.min_file_age.is_some()),
        ("follow_symlinks", src.follow_symlinks.is_some()),
        ("allow_overwrites", src.allow_overwrites),
        ("csv", src.csv.is_some()),
        ("schema_evolution", src.schema_evolution.is_some()),
        ("schema_hints", src.schema_hints.is_some()),
        ("schema_location", src.schema_location.is_some()),
        ("bad_records_path", src.bad_records_path.is_some()),
        ("bad_records_table", src.bad_records_table.is_some()),
        ("encoding", src.encoding.is_some()),
        (
            "allow_non_numeric_numbers",
            src.allow_non_numeric_numbers.is_some(),
        ),
        ("max_record_size", src.max_record_size.is_some()),
        ("max_file_size", src.max_file_size.is_some()),
        ("session_time_zone", src.session_time_zone.is_some()),
        ("timestamp_format", src.timestamp_format.is_some()),
        ("partition_columns", src.partition_columns.is_some()),
        (
            "partition_column_type_inference",
            src.partition_column_type_inference.is_some(),
        ),
        (
            "include_existing_files",
            src.include_existing_files.is_some(),
        ),
        ("modified_after", src.modified_after.is_some()),
        ("use_notifications", src.use_notifications.is_some()),
        ("backfill_interval", src.backfill_interval.is_some()),
        ("mode", src.mode.is_some()),
        ("prefers_decimal", src.prefers_decimal.is_some()),
    ];
    if let Some((key, _)) = only_files.iter().find(|(_, set)| *set) {
        return Err(cx.error(
            src.kind.span(),
            format!(
                "`{key}` is a files-source option; a delta source takes path, starting_version, \
                 max_files_per_trigger, max_bytes_per_trigger and skip_change_commits (the table's schema is its own)"
            ),
        ));
    }
    let mut options = DeltaSourceOptions::new(resolve_path(base, &required_path(cx, &src)?));
    if let Some(n) = &src.max_files_per_trigger {
        if *n.get_ref() == 0 {
            return Err(cx.error(n.span(), "max_files_per_trigger must be at least 1".into()));
        }
        options.max_files_per_trigger = *n.get_ref();
    }
    options.max_bytes_per_trigger = src.max_bytes_per_trigger.map(|b| b.0);
    options.skip_change_commits = src.skip_change_commits.is_some_and(|s| *s.get_ref());
    options.starting_version = match &src.starting_version {
        None => None,
        Some(v) => Some(match v.get_ref() {
            file::StartingVersionFile::Version(n) if *n >= 0 => StartingVersion::Version(*n as u64),
            file::StartingVersionFile::Word(w) if w == "latest" => StartingVersion::Latest,
            other => {
                return Err(cx.error(
                    v.span(),
                    format!("invalid starting_version {other:?}; use a table version (0, 1, ...) or \"latest\""),
                ));
            }
        }),
    };
    Ok(options)
}

impl file::CsvFile {
    fn header_span(&self) -> Range<usize> {
        [&self.delimiter, &self.quote, &self.escape, &self.comment]
            .into_iter()
            .flatten()
            .map(|s| s.span())
            .next()
            .unwrap_or(0..0)
    }
}
