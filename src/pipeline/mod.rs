//! Pipeline files: TOML with one `[[flow]]` table per streaming query, read and
//! checked into the spec types (`crate::spec`).
//!
//! [`load`] reads a file ([`file`]: the TOML as written), checks it completely and
//! resolves relative paths against the file's own directory. Every error names the file, the line and
//! column, the key, and what is allowed; nothing runs before the whole file is
//! valid. The format is documented in `docs/pipeline.md`.

pub mod file;
pub mod keys;
mod source;

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::spec::{
    AlertCondition, AlertRule, AlertTarget, AlertsSpec, DimensionFormat, EvolutionMode, FlowSpec,
    HumanDuration, JoinOn, JoinSpec, JoinType, OutputMode, Pipeline, PipelineError, SinkSpec,
    SourceSpec, StatefulSpec, StreamJoinSpec, TimeRange, Trigger, UnionSpec, WatermarkPolicy,
    WatermarkSpec, dependency_order, normalize,
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

/// Letters and digits of any script (`vols_été`, `航班`: issue #46), `_` and `-`: no
/// space, separator, dot or control character, since the name is a directory name (the
/// default checkpoint), a Prometheus label value and a SQL table name.
fn valid_flow_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
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
/// sources, files sources' landing zones), refused elsewhere before anything runs: a URL
/// taken as a relative directory would create `./s3:/bucket/...` and read nothing
/// (docs/object-storage.md).
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
                "{key} = {text:?}: this key takes a local path for now (give a directory on this machine); object-store URLs are read and written by Delta sinks, Delta sources and files sources so far (docs/object-storage.md#what-runs-where)"
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
            let remote_ok = matches!(source.kind.get_ref().as_str(), "delta" | "files");
            check("source path", p, remote_ok)?;
            if remote_ok {
                // Other kinds refuse the key itself (the keys table).
                remember_storage_options(cx, span.clone(), "source", p, &source.storage_options)?;
            }
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
        file::SinkFile::Delta {
            path,
            storage_options,
            ..
        }
        | file::SinkFile::DeltaMerge {
            path,
            storage_options,
            ..
        } => {
            check("sink path", path, true)?;
            remember_storage_options(cx, span.clone(), "sink", path, storage_options)?;
        }
        _ => {}
    }
    if let Some(l) = &flow.late_rows {
        check("late_rows path", &l.path, false)?;
    }
    if let Some(q) = &flow.quarantine_path {
        check("quarantine_path", q.get_ref(), false)?;
    }
    for j in flow.join.iter().flatten() {
        check("join table", &j.get_ref().table, false)?;
    }
    Ok(())
}

/// One `[[flow]]`, resolved part by part in the order its rows meet them: the source,
/// the trigger, `where`/`select`, the sink, the stateful operator, the joins and union,
/// then the checkpoint's retention.
/// A table's `storage_options`: checked against its store's keys (a misspelt key is
/// refused by name, its value never shown; unused for a local path), then remembered for
/// its location, so every
/// command that loads the pipeline (run, table, sql, check, inspect) reaches the table
/// with them (`crate::storage::remember_options`).
fn remember_storage_options(
    cx: &Context<'_>,
    span: Range<usize>,
    role: &str,
    path: &str,
    options: &Option<std::collections::BTreeMap<String, String>>,
) -> Result<(), PipelineError> {
    let Some(options) = options else {
        return Ok(());
    };
    let options: crate::storage::StorageOptions = options.iter().collect();
    let location = crate::storage::Location::parse(path, Path::new(""))
        .map_err(|e| cx.error(span.clone(), format!("{role} path: {e}")))?;
    if !location.is_remote() {
        // As deltalake does, options are not used for a local path (a pipeline may point
        // a table at disk for a local run and keep its options).
        return Ok(());
    }
    options
        .validate(location.backend())
        .map_err(|e| cx.error(span, format!("{role} {e}")))?;
    crate::storage::remember_options(&location, options);
    Ok(())
}

fn resolve_flow(
    cx: &Context<'_>,
    base: &Path,
    span: Range<usize>,
    flow: file::FlowFile,
) -> Result<FlowSpec, PipelineError> {
    refuse_remote_locations(cx, span.clone(), &flow)?;
    let file::FlowFile {
        name,
        source,
        expect,
        quarantine_path,
        where_,
        select,
        sink,
        trigger,
        checkpoint,
        watermark,
        group_by,
        aggregates,
        drop_duplicates,
        drop_duplicates_within_watermark,
        output_mode,
        late_rows,
        freshness,
        health,
        join,
        stream_join,
        union,
        multiple_watermark_policy,
        min_batches_to_retain,
        state_memory_limit,
    } = flow;
    let name = name.into_inner();
    let source = source::resolve_source(
        cx,
        base,
        source,
        &["files", "delta", "kafka"],
        "\"files\" (a directory of CSV, JSON lines or Parquet files), \"delta\" (a Delta table read as a stream) or \"kafka\" (Kafka topics)",
    )?;
    let trigger = resolve_trigger(cx, trigger)?;
    check_where_select(cx, &span, &where_, &select)?;
    let expectations = resolve_expectations(cx, expect)?;
    let quarantine_path = match quarantine_path {
        None => None,
        Some(q)
            if !expectations
                .iter()
                .any(|e| e.on_violation == crate::spec::OnViolation::Drop) =>
        {
            return Err(cx.error(
                q.span(),
                "quarantine_path receives the rows the `drop` expectations remove, and this flow has none; \
                 add a [[flow.expect]] with on_violation = \"drop\", or remove quarantine_path"
                    .into(),
            ));
        }
        Some(q) => Some(resolve_path(base, q.get_ref())),
    };
    let (mut sink, optimize_every, merge_schema_given) =
        resolve_sink(cx, base, &span, &name, sink, &source)?;
    let checkpoint = match checkpoint {
        Some(c) => resolve_path(base, &c),
        None => base.join("_checkpoints").join(&name),
    };
    let stateful = resolve_stateful(
        cx,
        &span,
        &name,
        StatefulFile {
            watermark,
            group_by,
            aggregates,
            drop_duplicates,
            drop_duplicates_within_watermark,
            output_mode,
            state_memory_limit,
        },
    )?;
    let late_rows = late_rows.map(|l| resolve_path(base, &l.path));
    if late_rows.is_some() && stateful.watermark.is_none() {
        return Err(cx.error(
            span.clone(),
            "late_rows needs a watermark = { column = ..., delay = ... }: rows are late only relative to one".into(),
        ));
    }
    let health = resolve_health(cx, &source, freshness, health)?;
    let joins = resolve_joins(cx, base, join)?;
    let union = resolve_union(cx, base, union, &stateful, &source)?;
    // The sink takes new columns when any source of a union evolves its schema.
    if let (SinkSpec::Delta { merge_schema, .. }, false) = (&mut sink, merge_schema_given)
        && union.iter().any(|u| {
            matches!(&u.source, SourceSpec::Files(f) if f.schema_evolution == EvolutionMode::AddNewColumns)
        })
    {
        *merge_schema = true;
    }
    if let (Some(sj), false) = (&stream_join, union.is_empty()) {
        return Err(cx.error(
            sj.span(),
            "a flow with [[flow.union]] sources cannot also have a stream_join: union the sources in one flow \
             and join its output table in the next (chain the flows)"
                .into(),
        ));
    }
    let multiple_watermark_policy =
        resolve_watermark_policy(cx, multiple_watermark_policy, union.is_empty())?;
    let stream_join = match stream_join {
        None => None,
        Some(sj) => Some(resolve_stream_join(
            cx, base, sj, &stateful, &joins, &source,
        )?),
    };
    let min_batches_to_retain = resolve_min_batches_to_retain(cx, min_batches_to_retain)?;
    Ok(FlowSpec {
        min_batches_to_retain,
        optimize_every,
        union,
        multiple_watermark_policy,
        stream_join,
        joins,
        name,
        source,
        expectations,
        quarantine_path,
        where_: where_.map(|w| w.into_inner()),
        select: select.map(|s| s.into_iter().map(|i| i.into_inner()).collect()),
        sink,
        trigger,
        checkpoint,
        stateful,
        late_rows,
        health,
    })
}

fn resolve_trigger(
    cx: &Context<'_>,
    trigger: Option<toml::Spanned<file::TriggerFile>>,
) -> Result<Trigger, PipelineError> {
    let Some(t) = trigger else {
        return Ok(Trigger::ProcessingTime(Duration::ZERO));
    };
    let span = t.span();
    Ok(match t.into_inner() {
        file::TriggerFile::Word(w) => Trigger::parse(&w).map_err(|m| cx.error(span, m))?,
        file::TriggerFile::ProcessingTime { processing_time } => {
            Trigger::ProcessingTime(processing_time.0)
        }
    })
}

/// `[[flow.expect]]`: each a unique, non-empty name, a constraint that parses as one SQL
/// expression (its columns are resolved against the source's schema when the flow is
/// planned: `weir validate` with a known schema, `weir run` before its first batch), and
/// `on_violation` one of Lakeflow's three actions.
fn resolve_expectations(
    cx: &Context<'_>,
    expect: Option<Vec<toml::Spanned<file::ExpectFile>>>,
) -> Result<Vec<crate::spec::ExpectationSpec>, PipelineError> {
    let mut out: Vec<crate::spec::ExpectationSpec> = Vec::new();
    for e in expect.unwrap_or_default() {
        let e = e.into_inner();
        let name_span = e.name.span();
        let name = e.name.into_inner();
        if name.trim().is_empty() {
            return Err(cx.error(
                name_span,
                "an expectation's `name` is empty; name what it checks, e.g. \"has_dep_time\" (progress records and metrics count by it)".into(),
            ));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(cx.error(
                name_span,
                format!("expectation name {name:?} is used twice in this flow; each [[flow.expect]] needs its own name (its counts are reported by it, as Lakeflow requires a unique name per dataset)"),
            ));
        }
        let constraint_span = e.constraint.span();
        let constraint = e.constraint.into_inner();
        crate::ops::check_sql_syntax(&constraint, false).map_err(|m| {
            cx.error(
                constraint_span.clone(),
                format!("invalid SQL constraint: {m}; `constraint` takes one boolean SQL expression over the input row, e.g. \"dep_time IS NOT NULL\""),
            )
        })?;
        let on_violation = match e.on_violation {
            None => crate::spec::OnViolation::Warn,
            Some(v) => {
                let span = v.span();
                let word = v.into_inner();
                crate::spec::OnViolation::parse(&word).ok_or_else(|| {
                    cx.error(
                        span,
                        format!(
                            "unknown on_violation {word:?}; allowed: \"warn\" (keep the row, count it; the default), \"drop\" (remove the row, count it) or \"fail\" (stop the batch before anything is written)"
                        ),
                    )
                })?
            }
        };
        let located = cx.error(constraint_span, String::new());
        out.push(crate::spec::ExpectationSpec {
            name,
            constraint,
            on_violation,
            at: crate::spec::KeyAt {
                file: located.file,
                line: located.line,
                column: located.column,
                key: located.key,
            },
        });
    }
    Ok(out)
}

/// `where` and `select` parse as one SQL expression each (planned against the schema later).
fn check_where_select(
    cx: &Context<'_>,
    span: &Range<usize>,
    where_: &Option<toml::Spanned<String>>,
    select: &Option<Vec<toml::Spanned<String>>>,
) -> Result<(), PipelineError> {
    if let Some(w) = where_ {
        crate::ops::check_sql_syntax(w.get_ref(), false).map_err(|m| {
            cx.error(
                w.span(),
                format!("invalid SQL predicate: {m}; `where` takes one boolean SQL expression, e.g. \"dep_delay > 15\""),
            )
        })?;
    }
    if let Some(select) = select {
        if select.is_empty() {
            return Err(cx.error(
                span.clone(),
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
    Ok(())
}

/// A Delta sink's `table_properties`: set as the table's `configuration` when the sink
/// creates it. Values Delta would refuse at the first batch are refused here instead.
fn check_table_properties(
    cx: &Context<'_>,
    span: &Range<usize>,
    properties: std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, String>, PipelineError> {
    for (key, value) in &properties {
        let refusal = if key.trim().is_empty() {
            Some("a table property needs a name".to_string())
        } else if key == "delta.columnMapping.mode" {
            Some("set column mapping with the sink's column_mapping_mode key".to_string())
        } else if key == "delta.enableChangeDataFeed"
            && !matches!(value.to_ascii_lowercase().as_str(), "true" | "false")
        {
            Some(format!(
                "table_properties: delta.enableChangeDataFeed = {value:?} is not a boolean; use \"true\" or \"false\""
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            return Err(cx.error(
                span.clone(),
                format!("table_properties key {key:?}: {message}"),
            ));
        }
    }
    Ok(properties)
}

/// The sink, its `optimize_every`, and whether the file gave `merge_schema` (else it
/// follows the sources' schema evolution, the union's included later).
fn resolve_sink(
    cx: &Context<'_>,
    base: &Path,
    span: &Range<usize>,
    flow_name: &str,
    sink: file::SinkFile,
    source: &SourceSpec,
) -> Result<(SinkSpec, Option<Duration>, bool), PipelineError> {
    let optimize_every = match &sink {
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
    let merge_schema_given = matches!(
        &sink,
        file::SinkFile::Delta {
            merge_schema: Some(_),
            ..
        }
    );
    let sink = match sink {
        file::SinkFile::Delta {
            path,
            partition_by,
            merge_schema,
            idempotent,
            allow_existing_table,
            column_mapping_mode,
            table_properties,
            optimize_every: _,
            storage_options: _,
        } => SinkSpec::Delta {
            table_properties: check_table_properties(cx, span, table_properties)?,
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
                source,
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
            table_properties,
            optimize_every: _,
            storage_options: _,
        } => {
            let table_properties = check_table_properties(cx, span, table_properties)?;
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
                table_properties,
            }
        }
        file::SinkFile::Postgres {
            url,
            table,
            keys,
            order_by,
        } => {
            // The sink's keys are not spanned (an internally tagged enum): the error
            // points at the flow and names the key.
            crate::sink::postgres::check_url(&url).map_err(|e| cx.error(span.clone(), e))?;
            crate::sink::postgres::TableName::parse(&table)
                .map_err(|e| cx.error(span.clone(), e))?;
            if keys.iter().any(|k| k.trim().is_empty()) {
                return Err(cx.error(
                    span.clone(),
                    "a postgres sink's keys name columns: keys = [\"col\", ...] (or leave keys out to append)".into(),
                ));
            }
            if order_by.is_some() && keys.is_empty() {
                return Err(cx.error(
                    span.clone(),
                    "a postgres sink's order_by needs keys: it picks the latest row per key (leave it out to append)".into(),
                ));
            }
            SinkSpec::Postgres {
                url,
                table,
                keys,
                order_by,
            }
        }
        file::SinkFile::Memory { name } => SinkSpec::Memory {
            name: name.unwrap_or_else(|| flow_name.to_string()),
        },
        file::SinkFile::Console { num_rows } => SinkSpec::Console { num_rows },
    };
    Ok((sink, optimize_every, merge_schema_given))
}

/// The keys of a `[[flow]]` that make its stateful operator.
struct StatefulFile {
    watermark: Option<file::WatermarkFile>,
    group_by: Option<Vec<toml::Spanned<String>>>,
    aggregates: Option<Vec<toml::Spanned<String>>>,
    drop_duplicates: Option<toml::Spanned<Vec<String>>>,
    drop_duplicates_within_watermark: bool,
    output_mode: Option<toml::Spanned<String>>,
    state_memory_limit: Option<toml::Spanned<crate::spec::ByteSize>>,
}

/// Watermark, aggregation, deduplication and output mode, with the checks that need no
/// schema (the rest runs against the schema: `weir validate`, the flow's start).
fn resolve_stateful(
    cx: &Context<'_>,
    span: &Range<usize>,
    name: &str,
    file: StatefulFile,
) -> Result<StatefulSpec, PipelineError> {
    let output_mode = match &file.output_mode {
        None => OutputMode::Append,
        Some(m) => m
            .get_ref()
            .parse::<OutputMode>()
            .map_err(|msg| cx.error(m.span(), msg))?,
    };
    // Window specs are user text: checked here, without the schema, so a bad one is an
    // error at its file:line (never a panic or an allocation failure in the first batch).
    let mut group_by = Vec::new();
    for item in file.group_by.unwrap_or_default() {
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
    for item in file.aggregates.unwrap_or_default() {
        crate::ops::check_sql_syntax(item.get_ref(), true).map_err(|m| {
            cx.error(
                item.span(),
                format!("invalid SQL expression in `aggregates`: {m}; each entry is one aggregate, e.g. \"count(*) AS n\""),
            )
        })?;
        aggregates.push(item.into_inner());
    }
    let stateful = StatefulSpec {
        flow: name.to_string(),
        watermark: file.watermark.map(watermark_spec),
        group_by,
        aggregates,
        drop_duplicates: file.drop_duplicates.as_ref().map(|d| d.get_ref().clone()),
        drop_duplicates_within_watermark: file.drop_duplicates_within_watermark,
        output_mode,
        state_memory_limit: file.state_memory_limit.as_ref().map(|b| b.get_ref().0),
    };
    if let Some(limit) = &file.state_memory_limit
        && (file.drop_duplicates.is_none() || stateful.has_aggregation())
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
    if let Some(keys) = &file.drop_duplicates
        && !stateful.has_aggregation()
    {
        crate::ops::stateful::check_dedup_bounds(&stateful, keys.get_ref())
            .map_err(|m| cx.error(keys.span(), m))?;
    }
    let mode_at = || file.output_mode.as_ref().map_or(span.clone(), |m| m.span());
    if stateful.output_mode == OutputMode::Complete && !stateful.has_aggregation() {
        return Err(cx.error(
            mode_at(),
            "output_mode = \"complete\" rewrites the whole result table every batch, which needs an aggregation \
             (group_by + aggregates); use output_mode = \"append\""
                .into(),
        ));
    }
    if stateful.output_mode != OutputMode::Append && !stateful.is_stateful() {
        return Err(cx.error(
            mode_at(),
            format!(
                "output_mode = \"{}\" only applies to an aggregation; a flow without one appends its rows (output_mode = \"append\")",
                stateful.output_mode
            ),
        ));
    }
    Ok(stateful)
}

fn watermark_spec(w: file::WatermarkFile) -> WatermarkSpec {
    WatermarkSpec {
        column: w.column,
        delay_ms: w.delay.as_millis(),
        max_future_ms: w.max_future.map(|d| d.as_millis()),
    }
}

/// `[[flow.join]]`: dimension tables, each with its own alias.
fn resolve_joins(
    cx: &Context<'_>,
    base: &Path,
    join: Option<Vec<toml::Spanned<file::JoinFile>>>,
) -> Result<Vec<JoinSpec>, PipelineError> {
    let mut joins = Vec::new();
    for j in join.unwrap_or_default() {
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
    Ok(joins)
}

fn resolve_watermark_policy(
    cx: &Context<'_>,
    policy: Option<toml::Spanned<String>>,
    single_source: bool,
) -> Result<WatermarkPolicy, PipelineError> {
    match &policy {
        None => Ok(WatermarkPolicy::Min),
        Some(p) if single_source => Err(cx.error(
            p.span(),
            "multiple_watermark_policy combines the watermarks of several sources; this flow has one \
             (add [[flow.union]] sources, or remove the key)"
                .into(),
        )),
        Some(p) => p
            .get_ref()
            .parse::<WatermarkPolicy>()
            .map_err(|m| cx.error(p.span(), m)),
    }
}

fn resolve_min_batches_to_retain(
    cx: &Context<'_>,
    n: Option<toml::Spanned<i64>>,
) -> Result<u64, PipelineError> {
    let Some(n) = n else {
        return Ok(crate::spec::DEFAULT_MIN_BATCHES_TO_RETAIN);
    };
    match u64::try_from(*n.get_ref()) {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(cx.error(
            n.span(),
            format!(
                "min_batches_to_retain = {} must be at least 1: a restart needs the last committed batch's \
                 offsets and commit (Spark: \"minBatchesToRetain has to be positive\"); the default is {}",
                n.get_ref(),
                crate::spec::DEFAULT_MIN_BATCHES_TO_RETAIN
            ),
        )),
    }
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
        let source = source::resolve_source(
            cx,
            base,
            u.source,
            &["files", "delta"],
            "\"files\" or \"delta\"",
        )?;
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
        let watermark = u.watermark.map(watermark_spec);
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
    let source = source::resolve_source(
        cx,
        base,
        sj.source,
        &["files", "delta", "kafka"],
        "\"files\", \"delta\" or \"kafka\"",
    )?;
    let watermark = sj.watermark.map(watermark_spec);
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
