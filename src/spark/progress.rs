//! Spark's `StreamingQueryProgress` in either rendering, normalised into
//! weir's progress record ([`StreamingQueryProgress`]), the one the console,
//! the health classifier and the playbooks read.
//!
//! | | `progress.json()` (listener, `lastProgress`) | event log `QueryProgressEvent` |
//! |---|---|---|
//! | `numInputRows`, `inputRowsPerSecond`, `processedRowsPerSecond` | present | absent: summed over `sources[]` |
//! | source offsets | JSON values | JSON-encoded strings: decoded |
//! | doubles | one decimal | full precision |
//! | empty `metrics` | omitted | `{}` |
//!
//! Both become the same record. Missing fields default (an older Spark
//! without `batchDuration` takes `durationMs.triggerExecution`); numbers that
//! do not fit (negative counts) are clamped, never a reason to drop a record.
//! Rates Spark could not compute (`NaN`, omitted) are 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use crate::records::{SinkProgress, SourceProgress, StateOperatorProgress, StreamingQueryProgress};

/// A number as Spark's JSON writes it: a number, or a string (`"NaN"`, `"12"`), or null.
fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(match v {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.parse::<f64>().ok().filter(|f| f.is_finite()),
        _ => None,
    })
}

fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(match v {
        Some(serde_json::Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Some(serde_json::Value::String(s)) => s.parse::<i64>().ok(),
        _ => None,
    })
}

fn lenient_map_i64<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, i64>, D::Error> {
    let v = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    Ok(v.into_iter()
        .filter_map(|(k, v)| {
            let n = match v {
                serde_json::Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
                serde_json::Value::String(s) => s.parse().ok(),
                _ => None,
            }?;
            Some((k, n))
        })
        .collect())
}

fn lenient_map_str<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let v = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    Ok(v.into_iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::String(s) => Some((k, s)),
            serde_json::Value::Null => None,
            other => Some((k, other.to_string())),
        })
        .collect())
}

/// Whether a progress event reports an idle trigger rather than a batch: Spark before
/// 3.5 posts one every `spark.sql.streaming.noDataProgressEventInterval` (10 s) while no
/// data arrives, repeating a batch id with no input rows and no `addBatch` timing (a
/// batch that ran, even an empty one, always has `addBatch`; Spark's
/// `ProgressReporter.updateIdleness`). 3.5+ posts `QueryIdleEvent` instead.
pub fn is_idle_progress(p: &RawProgress) -> bool {
    p.num_input_rows.unwrap_or(0) == 0 && !p.duration_ms.contains_key("addBatch")
}

/// A progress record as Spark wrote it (either rendering).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawProgress {
    pub id: String,
    #[serde(default)]
    pub run_id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub timestamp: String,
    pub batch_id: u64,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub batch_duration: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_input_rows: Option<i64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    pub input_rows_per_second: Option<f64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    pub processed_rows_per_second: Option<f64>,
    #[serde(default, deserialize_with = "lenient_map_i64")]
    pub duration_ms: BTreeMap<String, i64>,
    #[serde(default, deserialize_with = "lenient_map_str")]
    pub event_time: BTreeMap<String, String>,
    #[serde(default)]
    pub state_operators: Vec<RawStateOperator>,
    #[serde(default)]
    pub sources: Vec<RawSource>,
    #[serde(default)]
    pub sink: Option<RawSink>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawStateOperator {
    #[serde(default)]
    pub operator_name: String,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_rows_total: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_rows_updated: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub all_updates_time_ms: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_rows_removed: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub all_removals_time_ms: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub commit_time_ms: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub memory_used_bytes: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_rows_dropped_by_watermark: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_shuffle_partitions: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_state_store_instances: Option<i64>,
    #[serde(default, deserialize_with = "lenient_map_i64")]
    pub custom_metrics: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawSource {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub start_offset: serde_json::Value,
    #[serde(default)]
    pub end_offset: serde_json::Value,
    #[serde(default)]
    pub latest_offset: serde_json::Value,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_input_rows: Option<i64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    pub input_rows_per_second: Option<f64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    pub processed_rows_per_second: Option<f64>,
    #[serde(default, deserialize_with = "lenient_map_str")]
    pub metrics: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawSink {
    #[serde(default)]
    pub description: String,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num_output_rows: Option<i64>,
}

/// An offset as the event log writes it (a JSON-encoded string) or as `json()` does.
fn decode_offset(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::String(s) => {
            serde_json::from_str(&s).unwrap_or(serde_json::Value::String(s))
        }
        other => other,
    }
}

fn count(v: Option<i64>) -> u64 {
    v.map_or(0, |n| u64::try_from(n).unwrap_or(0))
}

/// The record weir's console and classifier read.
pub fn normalise(raw: RawProgress) -> StreamingQueryProgress {
    let sources: Vec<SourceProgress> = raw
        .sources
        .into_iter()
        .map(|s| SourceProgress {
            description: s.description,
            start_offset: decode_offset(s.start_offset),
            end_offset: decode_offset(s.end_offset),
            latest_offset: decode_offset(s.latest_offset),
            num_input_rows: count(s.num_input_rows),
            input_rows_per_second: s.input_rows_per_second.unwrap_or(0.0),
            processed_rows_per_second: s.processed_rows_per_second.unwrap_or(0.0),
            metrics: s.metrics,
        })
        .collect();
    let sum_rows: u64 = sources.iter().map(|s| s.num_input_rows).sum();
    let sum_in: f64 = sources.iter().map(|s| s.input_rows_per_second).sum();
    let sum_proc: f64 = sources.iter().map(|s| s.processed_rows_per_second).sum();
    let duration_ms: BTreeMap<String, u64> = raw
        .duration_ms
        .into_iter()
        .map(|(k, v)| (k, u64::try_from(v).unwrap_or(0)))
        .collect();
    let batch_duration = raw
        .batch_duration
        .map(|d| u64::try_from(d).unwrap_or(0))
        .or_else(|| duration_ms.get("triggerExecution").copied())
        .unwrap_or(0);
    StreamingQueryProgress {
        id: raw.id,
        run_id: raw.run_id,
        name: raw.name.unwrap_or_default(),
        timestamp: raw.timestamp,
        batch_id: raw.batch_id,
        batch_duration,
        num_input_rows: raw.num_input_rows.map_or(sum_rows, |n| count(Some(n))),
        input_rows_per_second: raw.input_rows_per_second.unwrap_or(sum_in),
        processed_rows_per_second: raw.processed_rows_per_second.unwrap_or(sum_proc),
        duration_ms,
        event_time: raw.event_time,
        state_operators: raw
            .state_operators
            .into_iter()
            .map(|o| StateOperatorProgress {
                operator_name: o.operator_name,
                num_rows_total: count(o.num_rows_total),
                num_rows_updated: count(o.num_rows_updated),
                all_updates_time_ms: count(o.all_updates_time_ms),
                num_rows_removed: count(o.num_rows_removed),
                all_removals_time_ms: count(o.all_removals_time_ms),
                commit_time_ms: count(o.commit_time_ms),
                memory_used_bytes: count(o.memory_used_bytes),
                num_rows_dropped_by_watermark: count(o.num_rows_dropped_by_watermark),
                num_shuffle_partitions: count(o.num_shuffle_partitions),
                num_state_store_instances: count(o.num_state_store_instances),
                custom_metrics: o.custom_metrics,
            })
            .collect(),
        sources,
        sink: raw
            .sink
            .map(|s| SinkProgress {
                description: s.description,
                num_output_rows: s.num_output_rows.unwrap_or(-1),
            })
            .unwrap_or(SinkProgress {
                description: String::new(),
                num_output_rows: -1,
            }),
        weir: Default::default(),
    }
}

/// Parses and normalises one `progress.json()` record.
pub fn from_json(text: &str) -> Result<StreamingQueryProgress, serde_json::Error> {
    serde_json::from_str::<RawProgress>(text).map(normalise)
}

#[cfg(test)]
mod tests {
    /// Issue #46: Spark 3.4's idle progress (every 10 s without data: the batch id
    /// repeated, no rows, no `addBatch`) is not a batch; an empty batch that ran is.
    #[test]
    fn an_idle_progress_event_of_spark_before_3_5_is_not_a_batch() {
        let parse = |t: &str| serde_json::from_str::<RawProgress>(t).unwrap();
        let idle = parse(
            r#"{"id":"q","runId":"r","name":null,"timestamp":"2023-05-01T10:00:10.000Z","batchId":3,"numInputRows":0,"inputRowsPerSecond":0.0,"processedRowsPerSecond":0.0,"durationMs":{"latestOffset":1,"triggerExecution":1},"stateOperators":[],"sources":[],"sink":{"description":"MemorySink","numOutputRows":-1}}"#,
        );
        assert!(is_idle_progress(&idle));
        let empty_batch = parse(
            r#"{"id":"q","runId":"r","timestamp":"2023-05-01T10:00:00.000Z","batchId":3,"numInputRows":0,"durationMs":{"addBatch":40,"latestOffset":1,"triggerExecution":60}}"#,
        );
        assert!(!is_idle_progress(&empty_batch));
        let batch = parse(
            r#"{"id":"q","runId":"r","timestamp":"2023-05-01T10:00:00.000Z","batchId":2,"numInputRows":5,"durationMs":{"triggerExecution":60}}"#,
        );
        assert!(!is_idle_progress(&batch));
    }

    use super::*;

    #[test]
    fn both_renderings_give_the_same_record() {
        let listener = r#"{"id":"q","runId":"r","name":"rate_window","timestamp":"2026-11-30T10:14:58.000Z","batchId":8,"batchDuration":535,"numInputRows":40,"inputRowsPerSecond":20.0,"processedRowsPerSecond":74.8,"durationMs":{"addBatch":405,"triggerExecution":535},"eventTime":{"watermark":"2026-11-30T10:14:45.094Z"},"stateOperators":[{"operatorName":"stateStoreSave","numRowsTotal":9,"customMetrics":{"SnapshotLastUploaded.partition_0_default":-1}}],"sources":[{"description":"RateStreamV2[rowsPerSecond=20","startOffset":16,"endOffset":18,"latestOffset":18,"numInputRows":40,"inputRowsPerSecond":20.0,"processedRowsPerSecond":74.8}],"sink":{"description":"MemorySink","numOutputRows":3}}"#;
        let eventlog = r#"{"id":"q","runId":"r","name":"rate_window","timestamp":"2026-11-30T10:14:58.000Z","batchId":8,"batchDuration":535,"durationMs":{"triggerExecution":535,"addBatch":405},"eventTime":{"watermark":"2026-11-30T10:14:45.094Z"},"stateOperators":[{"operatorName":"stateStoreSave","numRowsTotal":9,"customMetrics":{"SnapshotLastUploaded.partition_0_default":-1},"snapshotCustomMetricNames":[]}],"sources":[{"description":"RateStreamV2[rowsPerSecond=20","startOffset":"16","endOffset":"18","latestOffset":"18","numInputRows":40,"inputRowsPerSecond":20.0,"processedRowsPerSecond":74.76635514018692,"metrics":{}}],"sink":{"description":"MemorySink","numOutputRows":3,"metrics":{}},"observedMetrics":{}}"#;
        let a = from_json(listener).unwrap();
        let b = from_json(eventlog).unwrap();
        assert_eq!(a.num_input_rows, 40);
        assert_eq!(b.num_input_rows, 40, "summed from the sources");
        assert_eq!(
            b.sources[0].end_offset,
            serde_json::json!(18),
            "decoded from a string"
        );
        assert_eq!(a.sources[0].end_offset, b.sources[0].end_offset);
        assert!((b.processed_rows_per_second - 74.766).abs() < 0.01);
        assert_eq!(a.state_operators, b.state_operators);
        assert_eq!(a.duration_ms, b.duration_ms);
        assert_eq!(b.sink.num_output_rows, 3);
    }

    #[test]
    fn file_offsets_and_missing_fields() {
        let rec = r#"{"id":"q","timestamp":"2026-01-01T00:00:00.000Z","batchId":0,"durationMs":{"triggerExecution":900},"sources":[{"description":"FileStreamSource[file:/in]","startOffset":null,"endOffset":"{\"logOffset\":0}","inputRowsPerSecond":"NaN"}]}"#;
        let p = from_json(rec).unwrap();
        assert_eq!(p.batch_duration, 900);
        assert_eq!(p.sources[0].end_offset, serde_json::json!({"logOffset": 0}));
        assert_eq!(p.sources[0].input_rows_per_second, 0.0);
        assert_eq!(p.sink.num_output_rows, -1);
        assert_eq!(p.name, "");
    }
}
