//! A `[flow.source]` table, checked into a [`SourceSpec`]: which keys its kind takes
//! ([`super::keys`]), then each key's value.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use super::keys::{self, Kind};
use super::{Context, file, resolve_path};
use crate::spec::{
    CsvOptions, DEFAULT_INFERENCE_MAX_BYTES, DEFAULT_MAX_FILES_PER_TRIGGER, DeltaSourceOptions,
    EvolutionMode, FileFormat, FilesSource, PipelineError, SourceSpec, StartingVersion,
};

/// A source of one of the `types` this place of the file takes; `allowed` lists them for
/// the error of another type.
pub(super) fn resolve_source(
    cx: &Context<'_>,
    base: &Path,
    src: file::SourceFile,
    types: &[&str],
    allowed: &str,
) -> Result<SourceSpec, PipelineError> {
    let kind = src.kind.get_ref().as_str();
    Ok(match kind {
        "files" if types.contains(&kind) => SourceSpec::Files(resolve_files(cx, base, src)?),
        "delta" if types.contains(&kind) => SourceSpec::Delta(resolve_delta(cx, base, src)?),
        "kafka" if types.contains(&kind) => SourceSpec::Kafka(resolve_kafka(cx, base, src)?),
        other => {
            return Err(cx.error(
                src.kind.span(),
                format!("unknown source type {other:?}; allowed: {allowed}"),
            ));
        }
    })
}

/// Refuses the first key (in file order) that a source of `src`'s type does not take,
/// or, when its `kind` is known, that this kind does not take (see [`keys::refusal`]).
fn refuse_keys(
    cx: &Context<'_>,
    src: &file::SourceFile,
    kind: Option<Kind>,
) -> Result<(), PipelineError> {
    let type_name = src.kind.get_ref().as_str();
    for (key, span) in source_keys(cx.text, &src.kind.span()) {
        if key == "type" {
            continue;
        }
        if let Some(message) = keys::refusal(type_name, kind, &key) {
            return Err(cx.error(span, message));
        }
    }
    Ok(())
}

/// The keys of the source table whose `type` value is at `type_span`, with the spans of
/// their names, in file order. serde reads the table into one struct for every type, so
/// the keys as written are taken from the TOML document itself.
fn source_keys(text: &str, type_span: &Range<usize>) -> Vec<(String, Range<usize>)> {
    use toml::de::{DeTable, DeValue};
    fn find<'t, 'i>(table: &'t DeTable<'i>, at: &Range<usize>) -> Option<&'t DeTable<'i>> {
        let is_it = table
            .iter()
            .any(|(k, v)| k.get_ref() == "type" && v.span() == *at);
        if is_it {
            return Some(table);
        }
        table.values().find_map(|v| match v.get_ref() {
            DeValue::Table(inner) => find(inner, at),
            DeValue::Array(items) => items.iter().find_map(|i| match i.get_ref() {
                DeValue::Table(inner) => find(inner, at),
                _ => None,
            }),
            _ => None,
        })
    }
    let (doc, _) = DeTable::parse_recoverable(text);
    let mut keys: Vec<(String, Range<usize>)> = find(doc.get_ref(), type_span)
        .map(|t| {
            t.keys()
                .map(|k| (k.get_ref().to_string(), k.span()))
                .collect()
        })
        .unwrap_or_default();
    keys.sort_by_key(|(_, span)| span.start);
    keys
}

/// A `[csv]` dialect over `csv` (the defaults of the source's type); `header` and
/// `comment` are the caller's, as a Kafka value is one record.
fn resolve_csv(
    cx: &Context<'_>,
    c: &file::CsvFile,
    mut csv: CsvOptions,
) -> Result<CsvOptions, PipelineError> {
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
    Ok(csv)
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

/// A `type = "kafka"` source (docs/kafka.md): Spark's Kafka options in snake case, and
/// the `format` shortcut parsing `value` with the files source's decoders.
fn resolve_kafka(
    cx: &Context<'_>,
    base: &Path,
    src: file::FilesSourceFile,
) -> Result<crate::spec::KafkaSourceSpec, PipelineError> {
    use crate::spec::{KafkaSourceSpec, KafkaSubscribe, KafkaValueFormat};
    let at = src.kind.span();
    let format = src.format.as_ref().map(|f| f.get_ref().as_str());
    refuse_keys(cx, &src, Kind::of_source("kafka", format))?;
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
        None => None,
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
                if c.header == Some(true) {
                    return Err(cx.error(
                        at,
                        "csv.header = true does not apply to Kafka: each value is one record, read by position".into(),
                    ));
                }
                csv = resolve_csv(cx, c, csv)?;
            }
            let text = resolve_text(cx, &src)?;
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
    refuse_keys(cx, &files, None)?;
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
    refuse_keys(cx, &files, Kind::of_source("files", Some(format.as_str())))?;
    let mut csv = CsvOptions::default();
    if let Some(c) = &files.csv {
        if let Some(h) = c.header {
            csv.header = h;
        }
        csv.comment = single_byte(cx, &c.comment, "comment")?;
        csv = resolve_csv(cx, c, csv)?;
    }
    let text = resolve_text(cx, &files)?;
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
    // On object storage the source lists the bucket: incremental listing, with a full
    // listing every `backfill_interval` (docs/object-storage.md#files-source).
    let remote = files
        .path
        .as_deref()
        .is_some_and(crate::storage::location::is_remote_text);
    if let Some(n) = files
        .use_notifications
        .as_ref()
        .filter(|_| remote && use_notifications)
    {
        return Err(cx.error(
            n.span(),
            "`use_notifications` watches a local directory (inotify); a path on object storage is \
             listed instead, from the last key seen with use_incremental_listing (docs/object-storage.md#files-source)"
                .into(),
        ));
    }
    let use_incremental_listing = match &files.use_incremental_listing {
        None => crate::spec::IncrementalListing::default(),
        Some(v) => v
            .get_ref()
            .parse::<crate::spec::IncrementalListing>()
            .map_err(|m| cx.error(v.span(), m))?,
    };
    if let Some(backfill) = files
        .backfill_interval
        .as_ref()
        .filter(|_| !use_notifications && !remote)
    {
        return Err(cx.error(
            backfill.span(),
            "`backfill_interval` is the period of the full listing beside file notifications: \
             set use_notifications = true with it, or remove it (a local directory is listed whole every trigger; \
             on object storage it paces the full listings beside incremental ones)"
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
        use_incremental_listing,
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
) -> Result<crate::spec::TextOptions, PipelineError> {
    use crate::spec::{TextEncoding, TextOptions};
    use crate::spec::{TimestampFormat, TimestampOptions};
    let mut text = TextOptions::default();
    if let Some(e) = &files.encoding {
        text.encoding = TextEncoding::from_label(e.get_ref()).map_err(|m| cx.error(e.span(), m))?;
    }
    if let Some(b) = &files.allow_non_numeric_numbers {
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
    refuse_keys(cx, &src, Some(Kind::Delta))?;
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
    options.read_change_feed = src.read_change_feed.as_ref().is_some_and(|r| *r.get_ref());
    if let Some(t) = &src.starting_timestamp {
        if let Some(v) = &src.starting_version {
            return Err(cx.error(
                v.span(),
                "starting_version and starting_timestamp both say where the flow starts; give one of them (Delta's \
                 startingVersion or startingTimestamp)"
                    .into(),
            ));
        }
        if !options.read_change_feed {
            return Err(cx.error(
                t.span(),
                "starting_timestamp applies with read_change_feed = true (the change data feed); a Delta source \
                 reading the table's files starts at starting_version"
                    .into(),
            ));
        }
        options.starting_timestamp_ms = Some(parse_modified_after(t.get_ref()).ok_or_else(|| {
            cx.error(
                t.span(),
                format!(
                    "invalid starting_timestamp {:?}; write an ISO-8601 timestamp such as \"2024-06-01T00:00:00Z\" (UTC when no zone is given)",
                    t.get_ref()
                ),
            )
        })?);
    }
    if let Some(r) = src.read_change_feed.as_ref().filter(|r| *r.get_ref()) {
        let refusal = match (&options.starting_version, options.starting_timestamp_ms) {
            (None, None) => Some(
                "read_change_feed = true needs starting_version (a table version; 0 reads the whole feed) or \
                 starting_timestamp: weir does not read the table's snapshot as inserts first, as Spark does without them",
            ),
            (Some(StartingVersion::Latest), _) => Some(
                "read_change_feed = true takes a numeric starting_version (or starting_timestamp), not \"latest\"",
            ),
            _ => None,
        };
        if let Some(message) = refusal {
            return Err(cx.error(r.span(), message.into()));
        }
        if options.skip_change_commits {
            return Err(cx.error(
                r.span(),
                "skip_change_commits does not apply with read_change_feed = true: the change feed reads every change \
                 commit (updates and deletes are its rows)"
                    .into(),
            ));
        }
    }
    Ok(options)
}
