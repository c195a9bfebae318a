//! The one table of a pipeline file's source and sink keys: which kinds take each key,
//! its type and default as docs/pipeline.md's reference states them, and the anchor of
//! that reference.
//!
//! A `[flow.source]` is one TOML table whatever its `type` (see `file::FilesSourceFile`),
//! so which keys a source may hold is decided here, not by serde: [`refusal`] refuses
//! every key [`KEYS`] does not list for the source's kind, which makes a new source key
//! one row of [`KEYS`] (and a field of `FilesSourceFile`). The sinks are a tagged serde
//! enum, whose variants refuse unknown keys themselves; their rows are checked against
//! it, and every row against the reference's tables, by this module's tests.

/// What takes a key: a source type and, where it changes the keys allowed, its format;
/// or a sink type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    FilesCsv,
    FilesJson,
    FilesParquet,
    Delta,
    /// A Kafka source without `format` (Spark's Kafka columns).
    Kafka,
    /// A Kafka source parsing `value` as JSON (`format = "json"`).
    KafkaJson,
    /// A Kafka source parsing `value` as CSV (`format = "csv"`).
    KafkaCsv,
    DeltaSink,
    DeltaMergeSink,
    MemorySink,
    ConsoleSink,
    /// A `[[flow.expect]]` table (an expectation; docs/expectations.md).
    Expectation,
    PostgresSink,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::FilesCsv,
        Kind::FilesJson,
        Kind::FilesParquet,
        Kind::Delta,
        Kind::Kafka,
        Kind::KafkaJson,
        Kind::KafkaCsv,
        Kind::DeltaSink,
        Kind::DeltaMergeSink,
        Kind::MemorySink,
        Kind::ConsoleSink,
        Kind::Expectation,
        Kind::PostgresSink,
    ];

    /// The `type` of the `[flow.source]` or `[flow.sink]` table of this kind.
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::FilesCsv | Kind::FilesJson | Kind::FilesParquet => "files",
            Kind::Delta | Kind::DeltaSink => "delta",
            Kind::Kafka | Kind::KafkaJson | Kind::KafkaCsv => "kafka",
            Kind::DeltaMergeSink => "delta_merge",
            Kind::MemorySink => "memory",
            Kind::ConsoleSink => "console",
            // No `type` key: the table's name.
            Kind::Expectation => "expect",
            Kind::PostgresSink => "postgres",
        }
    }

    pub fn is_sink(self) -> bool {
        matches!(
            self,
            Kind::DeltaSink
                | Kind::DeltaMergeSink
                | Kind::MemorySink
                | Kind::ConsoleSink
                | Kind::PostgresSink
        )
    }

    /// The source kind of a source `type` and `format`; `None` for an unknown type or a
    /// files source without its (required) format.
    pub fn of_source(type_name: &str, format: Option<&str>) -> Option<Kind> {
        Some(match (type_name, format) {
            ("files", Some("csv")) => Kind::FilesCsv,
            ("files", Some("json")) => Kind::FilesJson,
            ("files", Some("parquet")) => Kind::FilesParquet,
            ("delta", _) => Kind::Delta,
            ("kafka", None) => Kind::Kafka,
            ("kafka", Some("json")) => Kind::KafkaJson,
            ("kafka", Some("csv")) => Kind::KafkaCsv,
            _ => return None,
        })
    }

    fn format(self) -> &'static str {
        match self {
            Kind::FilesCsv | Kind::KafkaCsv => "csv",
            Kind::FilesJson | Kind::KafkaJson => "json",
            Kind::FilesParquet => "parquet",
            _ => "",
        }
    }
}

/// One key as the kinds in `kinds` take it.
#[derive(Debug)]
pub struct Key {
    pub key: &'static str,
    /// Another spelling of the key (Spark's `charset` for `encoding`).
    pub alias: Option<&'static str>,
    /// Kinds of one source or sink type; a key of several types has a row per type.
    pub kinds: &'static [Kind],
    /// The reference's type and default cells, word for word.
    pub ty: &'static str,
    pub default: &'static str,
    /// The reference's section documenting the key (docs/pipeline.md).
    pub anchor: &'static str,
    /// What a kind of the same type that does not take the key says (`{format}` is the
    /// source's format); empty when every kind of the type takes it.
    pub elsewhere: &'static str,
    /// The key set to a value that is valid on its own (TOML lines, the key first, then
    /// any key it needs), for the tests that prove which kinds take it.
    pub sample: &'static str,
}

const FILES: &[Kind] = &[Kind::FilesCsv, Kind::FilesJson, Kind::FilesParquet];
const TEXT_FILES: &[Kind] = &[Kind::FilesCsv, Kind::FilesJson];
const DELTA: &[Kind] = &[Kind::Delta];
const KAFKA: &[Kind] = &[Kind::Kafka, Kind::KafkaJson, Kind::KafkaCsv];
const KAFKA_PARSED: &[Kind] = &[Kind::KafkaJson, Kind::KafkaCsv];
const DELTA_SINKS: &[Kind] = &[Kind::DeltaSink, Kind::DeltaMergeSink];

const FILES_DOC: &str = "pipeline.md#flowsource-with-type--files";
const DELTA_DOC: &str = "pipeline.md#flowsource-with-type--delta";
const KAFKA_DOC: &str = "pipeline.md#flowsource-with-type--kafka";
const SINK_DOC: &str = "pipeline.md#flowsink";
const EXPECT_DOC: &str = "pipeline.md#flowexpect";
const EXPECT: &[Kind] = &[Kind::Expectation];

const fn key(
    key: &'static str,
    kinds: &'static [Kind],
    ty: &'static str,
    default: &'static str,
    anchor: &'static str,
    sample: &'static str,
) -> Key {
    Key {
        key,
        alias: None,
        kinds,
        ty,
        default,
        anchor,
        elsewhere: "",
        sample,
    }
}

impl Key {
    const fn elsewhere(self, elsewhere: &'static str) -> Key {
        Key { elsewhere, ..self }
    }

    const fn alias(self, alias: &'static str) -> Key {
        Key {
            alias: Some(alias),
            ..self
        }
    }

    fn is(&self, name: &str) -> bool {
        self.key == name || self.alias == Some(name)
    }
}

const CSV_ONLY: &str =
    "a [csv] table is only allowed with format = \"csv\" (this source has format = \"{format}\")";
const JSON_ONLY_NON_NUMERIC: &str = "`allow_non_numeric_numbers` applies to JSON files; for CSV use csv.nan_value, csv.positive_inf, csv.negative_inf";

/// Every key of `[flow.source]`, `[flow.sink]` (besides `type`) and `[[flow.expect]]`, in
/// the order of the reference's tables.
// One row a line, so the table reads (and diffs) as one.
#[rustfmt::skip]
pub const KEYS: &[Key] = &[
    // type = "files" (docs/sources.md)
    key("path", FILES, "path", "required", FILES_DOC, r#"path = "in""#),
    key("format", FILES, r#"`"csv"`, `"json"`, `"parquet"`"#, "required", FILES_DOC, "format = \"json\""),
    key("schema", FILES, "Spark DDL string", "inferred", FILES_DOC, r#"schema = "id BIGINT""#),
    key("infer_column_types", FILES, "bool", "`true`", FILES_DOC, "infer_column_types = false"),
    key("schema_inference_max_files", FILES, "integer", "50", FILES_DOC, "schema_inference_max_files = 10"),
    key("schema_inference_max_bytes", FILES, "size", r#"`"50 GB"`"#, FILES_DOC, r#"schema_inference_max_bytes = "1 MiB""#),
    key("path_glob_filter", FILES, "glob", "none", FILES_DOC, r#"path_glob_filter = "*.json""#),
    key("max_files_per_trigger", FILES, "integer >= 1", "1000", FILES_DOC, "max_files_per_trigger = 5"),
    key("max_bytes_per_trigger", FILES, "size", "none", FILES_DOC, r#"max_bytes_per_trigger = "1 MiB""#),
    key("min_file_age", FILES, "duration", r#"`"0 seconds"`"#, FILES_DOC, r#"min_file_age = "1 second""#),
    key("follow_symlinks", FILES, r#"`"never"` or `"inside_root"`"#, r#"`"never"`"#, FILES_DOC, r#"follow_symlinks = "inside_root""#),
    key("allow_overwrites", FILES, "bool", "`false`", FILES_DOC, "allow_overwrites = true"),
    key("csv", &[Kind::FilesCsv], "table", "see example", FILES_DOC, r#"csv = { delimiter = ";" }"#)
        .elsewhere(CSV_ONLY),
    key("schema_evolution", FILES, r#"`"add_new_columns"`, `"rescue"`, `"fail_on_new_columns"`, `"none"`"#, "`add_new_columns` without `schema`, `none` with it", FILES_DOC, r#"schema_evolution = "rescue""#),
    key("schema_hints", FILES, "Spark DDL string", "none", FILES_DOC, r#"schema_hints = "id BIGINT""#),
    key("schema_location", FILES, "path", "the checkpoint", FILES_DOC, r#"schema_location = "schemas""#),
    key("bad_records_path", FILES, "path", "none", FILES_DOC, r#"bad_records_path = "bad""#),
    key("bad_records_table", FILES, "path", "none", FILES_DOC, r#"bad_records_table = "lake/bad""#),
    key("encoding", TEXT_FILES, "string", r#"`"UTF-8"`"#, FILES_DOC, r#"encoding = "ISO-8859-1""#)
        .alias("charset")
        .elsewhere("`encoding` applies to CSV and JSON files; Parquet stores its strings as UTF-8"),
    key("allow_non_numeric_numbers", &[Kind::FilesJson], "bool", "`true`", FILES_DOC, "allow_non_numeric_numbers = false")
        .elsewhere(JSON_ONLY_NON_NUMERIC),
    key("max_record_size", FILES, "size", "none", FILES_DOC, r#"max_record_size = "1 MiB""#),
    key("max_file_size", TEXT_FILES, "size", r#"`"1 GiB"`"#, FILES_DOC, r#"max_file_size = "1 GiB""#)
        .elsewhere("`max_file_size` applies to CSV and JSON files (decoded whole); Parquet files are read by row group"),
    key("mode", TEXT_FILES, r#"`"permissive"`, `"failfast"`"#, r#"`"permissive"`"#, FILES_DOC, r#"mode = "failfast""#)
        .elsewhere("`mode` applies to CSV and JSON (Spark's PERMISSIVE / FAILFAST); a Parquet file is either readable or failed as a whole"),
    key("prefers_decimal", &[Kind::FilesJson], "bool", "`false`", FILES_DOC, "prefers_decimal = true")
        .elsewhere("`prefers_decimal` applies to JSON schema inference (Spark's prefersDecimal); pin CSV or Parquet columns with schema_hints, e.g. \"price DECIMAL(12,2)\""),
    key("session_time_zone", FILES, "IANA zone name", r#"`"UTC"`"#, FILES_DOC, r#"session_time_zone = "Europe/Paris""#),
    key("timestamp_format", FILES, "Spark datetime pattern", "ISO-8601", FILES_DOC, r#"timestamp_format = "yyyy-MM-dd HH:mm""#),
    key("partition_columns", FILES, "array of names", "discovered", FILES_DOC, r#"partition_columns = ["date"]"#),
    key("partition_column_type_inference", FILES, "bool", "`true`", FILES_DOC, "partition_column_type_inference = false"),
    key("include_existing_files", FILES, "bool", "`true`", FILES_DOC, "include_existing_files = false"),
    key("modified_after", FILES, "ISO-8601 timestamp", "none", FILES_DOC, r#"modified_after = "2024-06-01T00:00:00Z""#),
    key("use_notifications", FILES, "bool", "`false`", FILES_DOC, "use_notifications = true"),
    key("backfill_interval", FILES, "duration", r#"`"1 minute"`"#, FILES_DOC, "backfill_interval = \"5 minutes\"\nuse_notifications = true"),
    key("storage_options", FILES, "table of strings", "none", FILES_DOC, r#"storage_options = { aws_region = "eu-west-1" }"#),
    key("use_incremental_listing", FILES, r#"`"auto"`, `"true"`, `"false"`"#, r#"`"auto"`"#, FILES_DOC, r#"use_incremental_listing = "true""#),
    // type = "delta" (docs/delta-source.md)
    key("path", DELTA, "path", "required", DELTA_DOC, r#"path = "lake/in""#),
    key("starting_version", DELTA, r#"integer or `"latest"`"#, "none", DELTA_DOC, "starting_version = 1"),
    key("max_files_per_trigger", DELTA, "integer >= 1", "1000", DELTA_DOC, "max_files_per_trigger = 5"),
    key("max_bytes_per_trigger", DELTA, "size", "none", DELTA_DOC, r#"max_bytes_per_trigger = "1 MiB""#),
    key("skip_change_commits", DELTA, "bool", "`false`", DELTA_DOC, "skip_change_commits = true"),
    key("read_change_feed", DELTA, "bool", "`false`", DELTA_DOC, "read_change_feed = true\nstarting_version = 0"),
    key("starting_timestamp", DELTA, "ISO-8601 timestamp", "none", DELTA_DOC, "starting_timestamp = \"2024-06-01T00:00:00Z\"\nread_change_feed = true"),
    key("storage_options", DELTA, "table of strings", "none", DELTA_DOC, r#"storage_options = { aws_region = "eu-west-1" }"#),
    // type = "kafka" (docs/kafka.md)
    key("bootstrap_servers", KAFKA, "string", "required", KAFKA_DOC, r#"bootstrap_servers = "localhost:9092""#),
    key("subscribe", KAFKA, "list of strings", "", KAFKA_DOC, r#"subscribe = ["events"]"#),
    key("subscribe_pattern", KAFKA, "string", "", KAFKA_DOC, r#"subscribe_pattern = "ev.*""#),
    key("starting_offsets", KAFKA, "string", r#"`"latest"`"#, KAFKA_DOC, r#"starting_offsets = "earliest""#),
    key("max_offsets_per_trigger", KAFKA, "integer >= 1", "none", KAFKA_DOC, "max_offsets_per_trigger = 100"),
    key("min_offsets_per_trigger", KAFKA, "integer >= 1", "none", KAFKA_DOC, "min_offsets_per_trigger = 10"),
    key("max_trigger_delay", KAFKA, "duration", r#"`"15 minutes"`"#, KAFKA_DOC, r#"max_trigger_delay = "1 minute""#),
    key("fail_on_data_loss", KAFKA, "bool", "`true`", KAFKA_DOC, "fail_on_data_loss = false"),
    key("include_headers", KAFKA, "bool", "`false`", KAFKA_DOC, "include_headers = true"),
    key("format", KAFKA, r#"`"json"` \| `"csv"`"#, "none", KAFKA_DOC, "format = \"json\"\nschema = \"id BIGINT\""),
    key("schema", KAFKA_PARSED, "Spark DDL", "required with `format`", KAFKA_DOC, r#"schema = "id BIGINT""#),
    key("csv", &[Kind::KafkaCsv], "", "", KAFKA_DOC, r#"csv = { delimiter = ";" }"#)
        .elsewhere(CSV_ONLY),
    key("allow_non_numeric_numbers", &[Kind::KafkaJson], "", "", KAFKA_DOC, "allow_non_numeric_numbers = false")
        .elsewhere(JSON_ONLY_NON_NUMERIC),
    key("max_record_size", KAFKA_PARSED, "", "", KAFKA_DOC, r#"max_record_size = "1 MiB""#),
    key("mode", KAFKA_PARSED, "", "", KAFKA_DOC, r#"mode = "failfast""#),
    key("session_time_zone", KAFKA_PARSED, "", "", KAFKA_DOC, r#"session_time_zone = "Europe/Paris""#),
    key("timestamp_format", KAFKA_PARSED, "", "", KAFKA_DOC, r#"timestamp_format = "yyyy-MM-dd HH:mm""#),
    key("bad_records_path", KAFKA_PARSED, "", "", KAFKA_DOC, r#"bad_records_path = "bad""#),
    key("bad_records_table", KAFKA_PARSED, "", "", KAFKA_DOC, r#"bad_records_table = "lake/bad""#),
    key("kafka", KAFKA, "table of strings", "", KAFKA_DOC, r#"kafka = { "security.protocol" = "PLAINTEXT" }"#),
    // [flow.sink] (docs/sinks.md)
    key("path", &[Kind::DeltaSink, Kind::DeltaMergeSink], "path", "required", SINK_DOC, r#"path = "lake/out""#),
    key("keys", &[Kind::DeltaMergeSink], "array of names", "required", SINK_DOC, r#"keys = ["id"]"#),
    key("order_by", &[Kind::DeltaMergeSink], "column", "none", SINK_DOC, r#"order_by = "id""#),
    key("partition_by", DELTA_SINKS, "array of names", "none", SINK_DOC, r#"partition_by = ["id"]"#),
    key("merge_schema", &[Kind::DeltaSink], "bool", "`true` with `add_new_columns`, else `false`", SINK_DOC, "merge_schema = true"),
    key("idempotent", &[Kind::DeltaSink], "bool", "`true`", SINK_DOC, "idempotent = true"),
    key("null_safe_keys", &[Kind::DeltaMergeSink], "bool", "`false`", SINK_DOC, "null_safe_keys = true"),
    key("allow_existing_table", DELTA_SINKS, "bool", "`false`", SINK_DOC, "allow_existing_table = true"),
    key("table_properties", DELTA_SINKS, "table of strings", "none", SINK_DOC, r#"table_properties = { "delta.enableChangeDataFeed" = "true" }"#),
    key("column_mapping_mode", &[Kind::DeltaSink], r#"`"name"`, `"id"`, `"none"`"#, "none", SINK_DOC, r#"column_mapping_mode = "name""#),
    key("optimize_every", DELTA_SINKS, "duration", "none", SINK_DOC, r#"optimize_every = "1 hour""#),
    key("storage_options", DELTA_SINKS, "table of strings", "none", SINK_DOC, r#"storage_options = { aws_region = "eu-west-1" }"#),
    key("url", &[Kind::PostgresSink], "libpq URL", "required", SINK_DOC, r#"url = "postgresql://weir@127.0.0.1:5432/lake""#),
    key("table", &[Kind::PostgresSink], "`name` or `schema.name`", "required", SINK_DOC, r#"table = "bronze_flights""#),
    key("keys", &[Kind::PostgresSink], "array of names", "none (append)", SINK_DOC, r#"keys = ["id"]"#),
    key("order_by", &[Kind::PostgresSink], "column", "none", SINK_DOC, "order_by = \"id\"\nkeys = [\"id\"]"),
    key("name", &[Kind::MemorySink], "string", "the flow name", SINK_DOC, r#"name = "m""#),
    key("num_rows", &[Kind::ConsoleSink], "integer", "20", SINK_DOC, "num_rows = 5"),
    // [[flow.expect]] (docs/expectations.md)
    key("name", EXPECT, "string", "required", EXPECT_DOC, r#"name = "has_id""#),
    key("constraint", EXPECT, "SQL boolean expression", "required", EXPECT_DOC, r#"constraint = "id IS NOT NULL""#),
    key("on_violation", EXPECT, r#"`"warn"`, `"drop"`, `"fail"`"#, r#"`"warn"`"#, EXPECT_DOC, r#"on_violation = "drop""#),
];

/// Whether `kind` takes `key` (or its alias).
pub fn accepts(kind: Kind, key: &str) -> bool {
    KEYS.iter().any(|k| k.is(key) && k.kinds.contains(&kind))
}

/// The keys `kind` takes, in the reference's order.
pub fn keys_of(kind: Kind) -> impl Iterator<Item = &'static Key> {
    KEYS.iter().filter(move |k| k.kinds.contains(&kind))
}

/// Why a source of `type_name` refuses `key`, or `None` if it takes it. `kind` is the
/// source's kind when known (a files source without `format` has none yet): then keys
/// its format does not take are refused too, else only keys no kind of the type takes.
pub fn refusal(type_name: &str, kind: Option<Kind>, key: &str) -> Option<String> {
    let of_type = |k: &Kind| !k.is_sink() && k.type_name() == type_name;
    let rows = || KEYS.iter().filter(|r| r.is(key));
    let Some(row) = rows().find(|r| r.kinds.iter().any(of_type)) else {
        return Some(refused_by_type(
            type_name,
            key,
            rows().flat_map(|r| r.kinds),
        ));
    };
    let kind = kind?;
    if row.kinds.contains(&kind) {
        return None;
    }
    if kind == Kind::Kafka {
        return Some(format!(
            "`{key}` applies to a kafka source with format = \"json\" or \"csv\" (parsing `value`); \
             without format, rows have Spark's Kafka columns (key, value, topic, partition, offset, timestamp, timestampType)"
        ));
    }
    Some(if row.elsewhere.is_empty() {
        format!(
            "`{key}` does not apply to a {type_name} source with format = \"{}\"",
            kind.format()
        )
    } else {
        row.elsewhere.replace("{format}", kind.format())
    })
}

/// A key no kind of the source's type takes: where it belongs, or what to use instead.
fn refused_by_type<'a>(
    type_name: &str,
    key: &str,
    taken_by: impl Iterator<Item = &'a Kind> + Clone,
) -> String {
    let only = |t: &str| {
        taken_by.clone().next().is_some()
            && taken_by.clone().all(|k| !k.is_sink() && k.type_name() == t)
    };
    if type_name != "kafka" && only("kafka") {
        return format!("`{key}` is a Kafka-source option; this source has type = \"{type_name}\"");
    }
    match type_name {
        "delta" => {
            let delta: Vec<&str> = keys_of(Kind::Delta).map(|k| k.key).collect();
            let listed = match delta.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => delta.join(""),
            };
            format!(
                "`{key}` is a files-source option; a delta source takes {listed} (the table's schema is its own)"
            )
        }
        "kafka" => {
            let hint = match key {
                "path" => {
                    "a kafka source reads topics: bootstrap_servers and subscribe (or subscribe_pattern)"
                }
                "max_files_per_trigger" | "max_bytes_per_trigger" => "use max_offsets_per_trigger",
                "schema_evolution" | "schema_hints" | "infer_column_types" | "prefers_decimal" => {
                    "with format, the value's columns are the given `schema`; other fields stay in _rescued_data"
                }
                _ => "see docs/kafka.md for a kafka source's options",
            };
            format!("`{key}` is not an option of a kafka source; {hint}")
        }
        _ if only("delta") => format!(
            "`{key}` is a Delta-source option (docs/delta-source.md); this source has type = \"{type_name}\""
        ),
        _ => format!("`{key}` is not an option of a {type_name} source"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The least a source or sink of `kind` needs, as TOML lines (key, line).
    fn minimal(kind: Kind) -> Vec<(&'static str, &'static str)> {
        let mut lines = vec![("type", "")];
        lines.extend(match kind {
            Kind::FilesCsv => vec![("path", r#"path = "in""#), ("format", r#"format = "csv""#)],
            Kind::FilesJson => vec![("path", r#"path = "in""#), ("format", r#"format = "json""#)],
            Kind::FilesParquet => {
                vec![
                    ("path", r#"path = "in""#),
                    ("format", r#"format = "parquet""#),
                ]
            }
            Kind::Delta => vec![("path", r#"path = "lake/in""#)],
            Kind::Kafka | Kind::KafkaJson | Kind::KafkaCsv => {
                let mut kafka = vec![
                    (
                        "bootstrap_servers",
                        r#"bootstrap_servers = "localhost:9092""#,
                    ),
                    ("subscribe", r#"subscribe = ["events"]"#),
                ];
                match kind {
                    Kind::KafkaJson => kafka.push(("format", r#"format = "json""#)),
                    Kind::KafkaCsv => kafka.push(("format", r#"format = "csv""#)),
                    _ => {}
                }
                if kind != Kind::Kafka {
                    kafka.push(("schema", r#"schema = "id BIGINT""#));
                }
                kafka
            }
            Kind::DeltaSink => vec![("path", r#"path = "lake/out""#)],
            Kind::DeltaMergeSink => vec![
                ("path", r#"path = "lake/out""#),
                ("keys", r#"keys = ["id"]"#),
            ],
            Kind::PostgresSink => vec![
                ("url", r#"url = "postgresql://weir@127.0.0.1:5432/lake""#),
                ("table", r#"table = "t""#),
            ],
            Kind::MemorySink | Kind::ConsoleSink => vec![],
            Kind::Expectation => vec![
                ("name", r#"name = "e""#),
                ("constraint", r#"constraint = "true""#),
            ],
        });
        lines
    }

    /// A one-flow pipeline whose source (or sink) of `kind` also holds `sample`.
    fn pipeline_with(kind: Kind, sample: &str) -> String {
        let given: Vec<&str> = sample
            .lines()
            .filter_map(|l| l.split('=').next())
            .map(str::trim)
            .collect();
        // subscribe and subscribe_pattern exclude each other.
        let replaced = |k: &str| {
            given.contains(&k) || (k == "subscribe" && given.contains(&"subscribe_pattern"))
        };
        let mut table = vec![format!("type = \"{}\"", kind.type_name())];
        table.extend(
            minimal(kind)
                .into_iter()
                .filter(|(k, _)| *k != "type" && !replaced(k))
                .map(|(_, line)| line.to_string()),
        );
        table.extend(sample.lines().map(str::to_string));
        if kind == Kind::Expectation {
            let table = table[1..].join("\n");
            return format!(
                "[[flow]]\nname = \"a\"\n[flow.source]\ntype = \"files\"\npath = \"in\"\nformat = \"json\"\n[[flow.expect]]\n{table}\n[flow.sink]\ntype = \"memory\"\n"
            );
        }
        let table = table.join("\n");
        if kind.is_sink() {
            format!(
                "[[flow]]\nname = \"a\"\n[flow.source]\ntype = \"files\"\npath = \"in\"\nformat = \"json\"\n[flow.sink]\n{table}\n"
            )
        } else {
            format!(
                "[[flow]]\nname = \"a\"\n[flow.source]\n{table}\n[flow.sink]\ntype = \"memory\"\n"
            )
        }
    }

    fn parse(text: &str) -> Result<crate::spec::Pipeline, String> {
        crate::pipeline::parse(std::path::Path::new("/weir-keys-test/pipeline.toml"), text)
            .map_err(|e| e.to_string())
    }

    /// Which table a kind's keys are in: a source, a sink, an expectation.
    fn side(kind: Kind) -> u8 {
        match kind {
            Kind::Expectation => 2,
            k if k.is_sink() => 1,
            _ => 0,
        }
    }

    /// Every kind takes every key its rows list (each row's sample is valid on its own)
    /// and refuses, naming it, every other key of its side (source or sink).
    #[test]
    fn each_kind_takes_exactly_the_keys_the_table_lists_for_it() {
        let mut checked = 0;
        for kind in Kind::ALL {
            let side: Vec<&Key> = KEYS
                .iter()
                .filter(|k| k.kinds.iter().any(|x| side(*x) == side(kind)))
                .collect();
            let mut seen = BTreeSet::new();
            for row in side {
                if !seen.insert(row.key) {
                    continue;
                }
                // The sample of the row for this kind, else of the key's first row.
                let sample = KEYS
                    .iter()
                    .find(|k| k.key == row.key && k.kinds.contains(&kind))
                    .unwrap_or(row)
                    .sample;
                let text = pipeline_with(kind, sample);
                match (accepts(kind, row.key), parse(&text)) {
                    (true, Ok(_)) => {}
                    (true, Err(e)) => panic!("{kind:?} should take `{}`:\n{text}\n{e}", row.key),
                    (false, Ok(_)) => panic!(
                        "{kind:?} takes `{}`, which the table does not list for it:\n{text}",
                        row.key
                    ),
                    (false, Err(e)) => assert!(
                        e.contains(&format!("`{}`", row.key))
                            || e.contains(&format!("[{}]", row.key)),
                        "{kind:?} refuses `{}` without naming it:\n{text}\n{e}",
                        row.key
                    ),
                }
                checked += 1;
            }
        }
        assert!(checked > 300, "only {checked} kind and key pairs");
    }

    /// A source written inline (`source = { ... }`, as `[[flow.union]]` and
    /// `[flow.stream_join]` take it) has its keys checked as a `[flow.source]` table.
    #[test]
    fn an_inline_source_refuses_the_keys_of_another_kind() {
        let text = "[[flow]]\nname = \"a\"\nwatermark = { column = \"ts\", delay = \"1 minute\" }\n\
                    [flow.source]\ntype = \"files\"\npath = \"in\"\nformat = \"json\"\n\
                    [[flow.union]]\nsource = { type = \"delta\", path = \"lake/u\", format = \"csv\" }\n\
                    [flow.sink]\ntype = \"memory\"\n";
        let e = parse(text).err().unwrap_or_default();
        assert!(
            e.contains("flow[0].union[0].source.format: `format` is a files-source option"),
            "{e}"
        );
    }

    /// The names serde lists after "expected" for an unknown key.
    fn expected_names(message: &str) -> BTreeSet<String> {
        let (_, list) = message
            .split_once("expected")
            .unwrap_or_else(|| panic!("{message}"));
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .filter(|k| k != "type")
            .collect()
    }

    /// The table has a row for every key of the file's source struct and sink variants,
    /// and no key they do not have: a field without a row is refused for every kind.
    #[test]
    fn the_table_names_every_key_the_file_structs_read() {
        for kind in [
            Kind::FilesJson,
            Kind::DeltaSink,
            Kind::DeltaMergeSink,
            Kind::MemorySink,
            Kind::ConsoleSink,
            Kind::Expectation,
            Kind::PostgresSink,
        ] {
            let message = parse(&pipeline_with(kind, "no_such_key = 1"))
                .err()
                .unwrap_or_default();
            let serde: BTreeSet<String> = expected_names(&message);
            let table: BTreeSet<String> = KEYS
                .iter()
                .filter(|k| {
                    if side(kind) != 0 {
                        k.kinds.contains(&kind)
                    } else {
                        side(k.kinds[0]) == 0
                    }
                })
                .flat_map(|k| std::iter::once(k.key).chain(k.alias))
                .map(str::to_string)
                .collect();
            let missing: Vec<&String> = serde.iter().filter(|k| !table.contains(*k)).collect();
            assert!(
                missing.is_empty(),
                "{kind:?}: keys without a row: {missing:?}"
            );
            let extra: Vec<&String> = table
                .iter()
                .filter(|k| {
                    !serde.contains(*k) && !KEYS.iter().any(|r| r.alias == Some(k.as_str()))
                })
                .collect();
            assert!(
                extra.is_empty(),
                "{kind:?}: rows of keys the file does not read: {extra:?}"
            );
        }
    }

    /// GitHub's anchor of a heading.
    fn slug(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// The code spans of a cell outside parentheses: the keys a row names.
    fn keys_named(cell: &str) -> Vec<String> {
        let (mut depth, mut code, mut out, mut token) = (0i32, false, Vec::new(), String::new());
        for c in cell.chars() {
            match c {
                '`' if code => {
                    code = false;
                    if depth == 0 {
                        let name = token
                            .trim_start_matches("[flow.source.")
                            .trim_end_matches(']');
                        out.push(name.to_string());
                    }
                    token.clear();
                }
                '`' => code = true,
                _ if code => token.push(c),
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
        }
        out
    }

    /// The first table under each heading of docs/pipeline.md, by anchor: rows of cells.
    fn reference_tables() -> std::collections::BTreeMap<String, Vec<Vec<String>>> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/pipeline.md");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut tables = std::collections::BTreeMap::new();
        let mut anchor = String::new();
        for line in text.lines() {
            if line.starts_with('#') {
                anchor = format!("pipeline.md#{}", slug(line.trim_start_matches('#')));
            } else if let Some(row) = line.strip_prefix('|') {
                let cells: Vec<String> = row
                    .replace("\\|", "\u{0}")
                    .split('|')
                    .map(|c| c.trim().replace('\u{0}', "\\|"))
                    .collect();
                let rows: &mut Vec<Vec<String>> = tables.entry(anchor.clone()).or_default();
                let done = rows.last().is_some_and(|r: &Vec<String>| r.is_empty());
                if !done && !cells[0].starts_with("---") {
                    rows.push(cells);
                }
            } else if tables.get(&anchor).is_some_and(|r| !r.is_empty()) {
                // A blank line ends the section's first table.
                tables.entry(anchor.clone()).or_default().push(Vec::new());
            }
        }
        tables
    }

    /// A key the reference lists: its name, its sink type (empty for a source key), and
    /// a source key's type and default cells.
    type Documented<'a> = (String, &'static str, Option<(&'a str, &'a str)>);

    /// docs/pipeline.md's key tables list the table's keys, with its types and defaults,
    /// under each row's anchor; and they list no key the table does not have there.
    #[test]
    fn the_reference_lists_the_keys_of_the_table() {
        let tables = reference_tables();
        let mut anchors: Vec<&str> = KEYS.iter().map(|k| k.anchor).collect();
        anchors.dedup();
        for anchor in anchors {
            let rows = tables
                .get(anchor)
                .unwrap_or_else(|| panic!("docs/{anchor}: no table"));
            let header = &rows[0];
            let rows = rows[1..].iter().filter(|r| !r.is_empty());
            let mut documented: Vec<Documented<'_>> = Vec::new();
            for cells in rows {
                if header[0] == "key" {
                    for name in keys_named(&cells[0]) {
                        documented.push((name, "", Some((cells[1].as_str(), cells[2].as_str()))));
                    }
                } else {
                    let sink = cells[0].trim_matches('`');
                    let kind = Kind::ALL
                        .into_iter()
                        .find(|k| k.is_sink() && k.type_name() == sink);
                    let kind =
                        kind.unwrap_or_else(|| panic!("docs/{anchor}: unknown sink type {sink}"));
                    for name in keys_named(&cells[1]) {
                        documented.push((name, kind.type_name(), None));
                    }
                }
            }
            for row in KEYS.iter().filter(|k| k.anchor == anchor) {
                let sinks: Vec<&str> = row
                    .kinds
                    .iter()
                    .filter(|k| k.is_sink())
                    .map(|k| k.type_name())
                    .collect();
                if sinks.is_empty() {
                    let doc = documented.iter().find(|(n, _, _)| n == row.key);
                    let Some((_, _, Some((ty, default)))) = doc else {
                        panic!("docs/{anchor} does not list `{}`", row.key);
                    };
                    assert_eq!(
                        (*ty, *default),
                        (row.ty, row.default),
                        "docs/{anchor}: `{}`",
                        row.key
                    );
                }
                for sink in sinks {
                    assert!(
                        documented
                            .iter()
                            .any(|(n, s, _)| n == row.key && *s == sink),
                        "docs/{anchor}: the {sink} sink's keys do not list `{}`",
                        row.key
                    );
                }
            }
            for (name, sink, _) in &documented {
                let known = KEYS.iter().any(|k| {
                    k.anchor == anchor
                        && k.key == name
                        && (sink.is_empty()
                            || k.kinds
                                .iter()
                                .any(|x| x.is_sink() && x.type_name() == *sink))
                });
                assert!(
                    known,
                    "docs/{anchor} lists `{name}` {sink}, which the table of keys does not"
                );
            }
        }
    }
}
