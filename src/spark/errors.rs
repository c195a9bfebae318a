//! Spark's errors routed to weir's health states, so a Spark query that
//! stopped gets the same playbooks as a weir flow.
//!
//! A `QueryTerminatedEvent` carries the root cause's text (with its Java
//! stack trace) and its error class (`errorClassOnException`, null for
//! exceptions without one). Routing, first match wins:
//!
//! | error class (prefix) or message | state | domain, retry |
//! |---|---|---|
//! | `STATE_STORE_*_SCHEMA_NOT_COMPATIBLE`, `STREAMING_STATEFUL_OPERATOR_*`, `STREAMING_CHECKPOINT_MISSING_METADATA_FILE`, `STREAMING_QUERY_EVOLUTION_ERROR`, `INVALID_LOG_VERSION`, `CANNOT_LOAD_STATE_STORE`, `CONCURRENT_STREAM_LOG_UPDATE`, checksum failures; "There are [N] sources in the checkpoint offsets", "Concurrent update to the log", "another query with same id is already active", "Failed to read log file", "Incomplete log file", "Wrong basePath" | `checkpoint_incompatible` | user (storage damage: external), no |
//! | `FAILED_READ_FILE.FILE_NOT_EXIST`, `PATH_NOT_FOUND` on a source, Kafka timeouts, `DELTA_FILE_NOT_FOUND*`, connection errors on a source | `source_unavailable` | external, yes |
//! | `FAILED_READ_FILE.*`, `MALFORMED_RECORD_IN_PARSING`, `CANNOT_PARSE_*`, `UNKNOWN_FIELD_EXCEPTION` (Auto Loader), `CF_*SCHEMA*`, `DELTA_SCHEMA_CHANGED*`, `DELTA_FAILED_TO_MERGE_FIELDS`, Delta write schema mismatch | `schema_mismatch` | user, no (Auto Loader's new-columns stop: a restart continues) |
//! | `FOREACH_BATCH_USER_FUNCTION_ERROR`, `TASK_WRITE_FAILED`, `DELTA_CONCURRENT_*`, `DELTA_TABLE_NOT_FOUND`, "Parent path is not a directory", any error naming the sink's path | `sink_unavailable` | external, yes |
//! | an error naming a source's path | `source_unavailable` | external, yes |
//! | anything else | none (shown as the query's error; health from its progress) | internal, no |

use crate::records::Domain;
use crate::records::{ErrorFacts, HealthState};

/// Where a query reads and writes (from its progress records), to place errors that name a path.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    pub sources: Vec<String>,
    pub sink: Option<String>,
}

/// A terminated query's error, routed.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    pub facts: ErrorFacts,
    pub state: Option<HealthState>,
    pub error_class: Option<String>,
}

/// `[CLASS.SUB] text` at the start of a message (after a Java exception class).
pub fn class_in(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    let c = &text[start + 1..end];
    (!c.is_empty()
        && c.chars()
            .all(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit() || ch == '_' || ch == '.'))
    .then(|| c.to_string())
}

/// The readable part of an exception: its first line without the Java class, plus the
/// last line of a Python traceback when there is one; at most 500 characters.
pub fn summary(exception: &str) -> String {
    let body = exception.split("\n\tat ").next().unwrap_or(exception);
    let first = body.lines().next().unwrap_or("").trim();
    // `org.apache.spark.SparkException: [X] ...` -> `[X] ...`
    let first = match first.split_once(": ") {
        Some((cls, rest)) if cls.contains('.') && !cls.contains(' ') => rest,
        _ => first,
    };
    let mut out = first.to_string();
    if body.contains("Traceback (most recent call last)")
        && let Some(last) = body.lines().rev().map(str::trim).find(|l| !l.is_empty())
        && last != first
    {
        out.push_str(" ... ");
        out.push_str(last);
    } else if body.lines().count() > 1 {
        // Multi-line Spark messages: the second line often holds the detail.
        if let Some(second) = body.lines().nth(1).map(str::trim).filter(|l| !l.is_empty()) {
            out.push(' ');
            out.push_str(second);
        }
    }
    let mut chars: Vec<char> = out.chars().collect();
    if chars.len() > 500 {
        chars.truncate(497);
        return chars.into_iter().collect::<String>() + "...";
    }
    out
}

fn any_prefix(class: &str, prefixes: &[&str]) -> bool {
    prefixes.iter().any(|p| {
        class == *p
            || class.starts_with(&format!("{p}."))
            || (p.ends_with('_') && class.starts_with(p))
    })
}

const CHECKPOINT_CLASSES: &[&str] = &[
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE",
    "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION",
    "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE",
    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART",
    "STATE_STORE_VALUE_SCHEMA_EVOLUTION_THRESHOLD_EXCEEDED",
    "STATE_STORE_STATE_SCHEMA_FILES_THRESHOLD_EXCEEDED",
    "STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED",
    "STATE_STORE_BASE_CHECKPOINT_ID_MISMATCH",
    "STDS_MIXED_CHECKPOINT_FORMAT_VERSIONS_NOT_SUPPORTED",
    "STREAM_STREAM_JOIN_INCOMPATIBLE_STATE_STORE_CONFIGS",
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY",
    "STREAMING_CHECKPOINT_MISSING_METADATA_FILE",
    "STREAMING_QUERY_EVOLUTION_ERROR",
    "INVALID_LOG_VERSION",
    "CONCURRENT_STREAM_LOG_UPDATE",
];

/// Damage to files (storage), not a change made by the user.
const CHECKPOINT_DAMAGE_CLASSES: &[&str] = &[
    "CANNOT_LOAD_STATE_STORE",
    "CHECKPOINT_FILE_CHECKSUM_VERIFICATION_FAILED",
    "STATE_STORE_ROW_CHECKSUM_VERIFICATION_FAILED",
    "STATE_STORE_UNEXPECTED_EMPTY_FILE_IN_ROCKSDB_ZIP",
    "STREAMING_CHECKPOINT_LOG_WRITE_FAILURE",
];

const CHECKPOINT_MESSAGES: &[&str] = &[
    "sources in the checkpoint offsets and now there are",
    "Concurrent update to the log",
    "Multiple streaming queries are concurrently using",
    "another query with same id is already active",
    "Failed to read log file",
    "Incomplete log file",
    "Log file was malformed",
    "UnsupportedLogVersion",
    "Wrong basePath",
    "doesn't exist SQLSTATE",
];

const SCHEMA_CLASSES: &[&str] = &[
    "FAILED_READ_FILE",
    "MALFORMED_RECORD_IN_PARSING",
    "CANNOT_PARSE_",
    "UNKNOWN_FIELD_EXCEPTION",
    "CF_SCHEMA",
    "CF_NEW_COLUMN",
    "DELTA_SCHEMA_CHANGED",
    "DELTA_FAILED_TO_MERGE_FIELDS",
    "DELTA_SCHEMA_MISMATCH",
    "DELTA_METADATA_MISMATCH",
    "_LEGACY_ERROR_TEMP_DELTA_0007",
    "INCOMPATIBLE_DATA_FOR_TABLE",
    "DATATYPE_MISMATCH",
];

const SOURCE_CLASSES: &[&str] = &[
    "FAILED_READ_FILE.FILE_NOT_EXIST",
    "KAFKA_",
    "DELTA_FILE_NOT_FOUND",
    "DELTA_SOURCE_IGNORE_DELETE",
    "DELTA_SOURCE_TABLE_IGNORE_CHANGES",
];

const SINK_CLASSES: &[&str] = &[
    "FOREACH_BATCH_USER_FUNCTION_ERROR",
    "TASK_WRITE_FAILED",
    "DELTA_CONCURRENT_",
    "DELTA_TABLE_NOT_FOUND",
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_PROTOCOL_CHANGED",
];

const TRANSIENT_MESSAGES: &[&str] = &[
    "java.net.ConnectException",
    "java.net.UnknownHostException",
    "java.net.SocketTimeoutException",
    "TimeoutException",
    "Connection refused",
    "Timeout expired",
];

fn strip_scheme(p: &str) -> &str {
    p.trim_start_matches("file://").trim_start_matches("file:")
}

/// Routes a terminated query's exception.
pub fn route(exception: &str, error_class: Option<&str>, paths: &Paths) -> Routed {
    let class = error_class
        .map(str::to_string)
        .or_else(|| class_in(exception.lines().next().unwrap_or("")));
    let summary = summary(exception);
    let message = match &class {
        Some(c) if !summary.contains(&format!("[{c}]")) => format!("[{c}] {summary}"),
        _ => summary,
    };
    let head = exception.split("\n\tat ").next().unwrap_or(exception);
    let mentions = |p: &str| {
        let p = strip_scheme(p).trim_end_matches('/');
        !p.is_empty() && head.contains(p)
    };
    let on_sink = paths.sink.as_deref().is_some_and(mentions);
    let on_source = paths.sources.iter().any(|s| mentions(s));
    let c = class.as_deref().unwrap_or("");
    let (state, domain, retryable, kind) = if any_prefix(c, CHECKPOINT_CLASSES)
        || CHECKPOINT_MESSAGES.iter().any(|m| head.contains(m))
    {
        (
            Some(HealthState::CheckpointIncompatible),
            Domain::User,
            false,
            "checkpoint_incompatible",
        )
    } else if any_prefix(c, CHECKPOINT_DAMAGE_CLASSES) {
        (
            Some(HealthState::CheckpointIncompatible),
            Domain::External,
            false,
            "checkpoint_corrupt",
        )
    } else if any_prefix(c, SOURCE_CLASSES) {
        (
            Some(HealthState::SourceUnavailable),
            Domain::External,
            true,
            "source_unavailable",
        )
    } else if any_prefix(c, SCHEMA_CLASSES) {
        let restart_continues = c.starts_with("UNKNOWN_FIELD_EXCEPTION");
        (
            Some(HealthState::SchemaMismatch),
            Domain::User,
            restart_continues,
            "schema_mismatch",
        )
    } else if c.starts_with("CF_")
        || (c == "PATH_NOT_FOUND" && !on_sink)
        || (TRANSIENT_MESSAGES.iter().any(|m| head.contains(m)) && !on_sink)
    {
        (
            Some(HealthState::SourceUnavailable),
            Domain::External,
            true,
            "source_unavailable",
        )
    } else if any_prefix(c, SINK_CLASSES)
        || on_sink
        || head.contains("Parent path is not a directory")
        || head.contains("ConcurrentAppendException")
    {
        let user_fn = c == "FOREACH_BATCH_USER_FUNCTION_ERROR";
        (
            Some(HealthState::SinkUnavailable),
            if user_fn {
                Domain::User
            } else {
                Domain::External
            },
            !user_fn,
            "sink_unavailable",
        )
    } else if on_source {
        (
            Some(HealthState::SourceUnavailable),
            Domain::External,
            true,
            "source_unavailable",
        )
    } else {
        (None, Domain::Internal, false, "internal")
    };
    Routed {
        facts: ErrorFacts {
            kind: kind.into(),
            domain,
            retryable,
            message,
            path: None,
            waiting: false,
        },
        state,
        error_class: class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Paths {
        Paths {
            sources: vec!["file:/data/in".into()],
            sink: Some("file:/data/out".into()),
        }
    }

    #[test]
    fn routes_the_observed_spark_errors() {
        let cases = [
            (
                "org.apache.spark.sql.execution.streaming.state.StateStoreValueSchemaNotCompatible: [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema.\nPlease check number and type of fields.\n\tat x",
                Some("STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"),
                Some(HealthState::CheckpointIncompatible),
            ),
            (
                "java.lang.AssertionError: assertion failed: There are [1] sources in the checkpoint offsets and now there are [2] sources requested by the query. Cannot continue.\n\tat x",
                None,
                Some(HealthState::CheckpointIncompatible),
            ),
            (
                "org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS] An error occurred during loading state.",
                None,
                Some(HealthState::CheckpointIncompatible),
            ),
            (
                "org.apache.spark.SparkException: [FAILED_READ_FILE.NO_HINT] Encountered error while reading file file:///data/in/part_001.json.  SQLSTATE: KD001",
                Some("FAILED_READ_FILE.NO_HINT"),
                Some(HealthState::SchemaMismatch),
            ),
            (
                "py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n  File \"x.py\", line 81, in fb\nRuntimeError: simulated sink failure in batch 2\n\n\tat py4j.Protocol",
                Some("FOREACH_BATCH_USER_FUNCTION_ERROR"),
                Some(HealthState::SinkUnavailable),
            ),
            (
                "org.apache.hadoop.fs.ParentNotDirectoryException: Parent path is not a directory: file:/data/out\n\tat x",
                None,
                Some(HealthState::SinkUnavailable),
            ),
            (
                "java.io.FileNotFoundException: File file:/data/in/part_9.json does not exist\n\tat x",
                None,
                Some(HealthState::SourceUnavailable),
            ),
            (
                "org.apache.kafka.common.errors.TimeoutException: Timeout expired while fetching topic metadata",
                None,
                Some(HealthState::SourceUnavailable),
            ),
            ("java.lang.NullPointerException\n\tat x", None, None),
        ];
        for (text, class, want) in cases {
            let r = route(text, class, &paths());
            assert_eq!(r.state, want, "{text}");
        }
        let r = route(cases[4].0, cases[4].1, &paths());
        assert!(
            r.facts
                .message
                .starts_with("[FOREACH_BATCH_USER_FUNCTION_ERROR]"),
            "{}",
            r.facts.message
        );
        assert!(
            r.facts
                .message
                .ends_with("RuntimeError: simulated sink failure in batch 2"),
            "{}",
            r.facts.message
        );
        assert_eq!(r.facts.domain, Domain::User);
        let r = route(cases[2].0, None, &paths());
        assert_eq!(
            r.error_class.as_deref(),
            Some("CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS")
        );
        assert_eq!(r.facts.kind.as_str(), "checkpoint_corrupt");
    }
}
