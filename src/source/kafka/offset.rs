//! Kafka positions as Spark's Kafka source keeps them, and the planning rules that
//! move them: `KafkaSourceOffset` JSON, `startingOffsets`, `maxOffsetsPerTrigger`
//! (Spark's `rateLimit`), `minOffsetsPerTrigger` + `maxTriggerDelay` (Spark's
//! `delayBatch`) and the data-loss checks of `getOffsetRangesFromResolvedOffsets`.
//! Everything here is pure: the broker is asked by the caller.
//!
//! An offset is the position of the *next* record to read, per partition (Kafka's
//! `KafkaConsumer.position()`): a batch reads `[start, end)` of each partition.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A topic's partition (Kafka's `TopicPartition`, printed `topic-N` as Kafka does).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Offsets per partition, in (topic, partition) order.
pub type PartitionOffsets = BTreeMap<TopicPartition, i64>;

/// `startingOffsets` JSON: `-2` is the earliest offset, `-1` the latest (Spark's
/// `KafkaOffsetRangeLimit.EARLIEST` / `LATEST`).
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;

/// Spark's `KafkaSourceOffset`: `{"topic":{"0":123,"1":456}}`, partitions as JSON
/// object keys. weir writes topics and partitions in sorted order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KafkaSourceOffset {
    pub partitions: PartitionOffsets,
}

impl KafkaSourceOffset {
    pub fn new(partitions: PartitionOffsets) -> Self {
        KafkaSourceOffset { partitions }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let mut topics = serde_json::Map::new();
        for (tp, offset) in &self.partitions {
            let entry = topics
                .entry(tp.topic.clone())
                .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
            if let serde_json::Value::Object(parts) = entry {
                parts.insert(tp.partition.to_string(), serde_json::Value::from(*offset));
            }
        }
        serde_json::Value::Object(topics)
    }

    /// Parses Spark's JSON (also what `startingOffsets` accepts); the error says what is wrong.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        let topics = value.as_object().ok_or_else(|| {
            format!("expected an object {{\"topic\":{{\"0\":123}}}}, found {value}")
        })?;
        let mut partitions = PartitionOffsets::new();
        for (topic, parts) in topics {
            let parts = parts.as_object().ok_or_else(|| {
                format!("topic {topic:?}: expected an object of partition offsets, found {parts}")
            })?;
            for (partition, offset) in parts {
                let p: i32 = partition.parse().map_err(|_| {
                    format!("topic {topic:?}: partition {partition:?} is not a number")
                })?;
                let o = offset.as_i64().ok_or_else(|| {
                    format!("topic {topic:?} partition {p}: offset {offset} is not an integer")
                })?;
                partitions.insert(TopicPartition::new(topic.clone(), p), o);
            }
        }
        Ok(KafkaSourceOffset { partitions })
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        Self::from_json(&value)
    }
}

impl fmt::Display for KafkaSourceOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

/// Where a new query starts (Spark's `startingOffsets`; a query with a checkpoint
/// resumes from it instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingOffsets {
    Earliest,
    Latest,
    /// Per partition; `-2` earliest, `-1` latest. Must name every subscribed partition.
    Specific(PartitionOffsets),
}

impl StartingOffsets {
    /// `"earliest"`, `"latest"` or Spark's JSON.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "earliest" => Ok(StartingOffsets::Earliest),
            "latest" => Ok(StartingOffsets::Latest),
            json if json.starts_with('{') => {
                let offsets = KafkaSourceOffset::parse(json)?;
                if let Some((tp, o)) = offsets.partitions.iter().find(|(_, o)| **o < EARLIEST) {
                    return Err(format!(
                        "partition {tp}: offset {o} is invalid; use an offset >= 0, -2 for earliest or -1 for latest"
                    ));
                }
                Ok(StartingOffsets::Specific(offsets.partitions))
            }
            other => Err(format!(
                "invalid starting offsets {other:?}; allowed: \"earliest\", \"latest\", or JSON such as {{\"topic\":{{\"0\":23,\"1\":-2}}}} (-2 earliest, -1 latest)"
            )),
        }
    }
}

/// Bounds on how much one batch reads (Spark's `ReadLimit`s of the Kafka source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerLimits {
    /// `maxOffsetsPerTrigger`: at most this many offsets over all partitions.
    pub max_offsets: Option<u64>,
    /// `minOffsetsPerTrigger`: wait until this many offsets are available...
    pub min_offsets: Option<u64>,
    /// ...or `maxTriggerDelay` passed since the last batch (ms; Spark's default 15 min).
    pub max_trigger_delay_ms: i64,
}

/// Spark's default `maxTriggerDelay`.
pub const DEFAULT_MAX_TRIGGER_DELAY_MS: i64 = 15 * 60 * 1000;

impl Default for TriggerLimits {
    fn default() -> Self {
        TriggerLimits {
            max_offsets: None,
            min_offsets: None,
            max_trigger_delay_ms: DEFAULT_MAX_TRIGGER_DELAY_MS,
        }
    }
}

/// Spark's `rateLimit`: spreads `limit` offsets over the partitions in proportion to
/// their backlog (`until - from`), at least one offset for a partition with any,
/// never past `until`. Partitions missing from `from` start at `from_new` (their
/// earliest offset); a partition known to neither keeps `until`.
pub fn rate_limit(
    limit: u64,
    from: &PartitionOffsets,
    until: &PartitionOffsets,
    from_new: &PartitionOffsets,
) -> PartitionOffsets {
    let begin_of = |tp: &TopicPartition| from.get(tp).or_else(|| from_new.get(tp)).copied();
    let sizes: BTreeMap<&TopicPartition, i64> = until
        .iter()
        .filter_map(|(tp, end)| {
            let begin = begin_of(tp)?;
            let size = end - begin;
            (size > 0).then_some((tp, size))
        })
        .collect();
    let total = sizes.values().sum::<i64>() as f64;
    if total < 1.0 {
        return until.clone();
    }
    until
        .iter()
        .map(|(tp, end)| {
            let off = match (sizes.get(tp), begin_of(tp)) {
                (Some(size), Some(begin)) => {
                    let prorate = limit as f64 * (*size as f64 / total);
                    // Don't completely starve small partitions (Spark's words).
                    let prorate = if prorate < 1.0 {
                        prorate.ceil()
                    } else {
                        prorate.floor()
                    } as i64;
                    (*end).min(begin.saturating_add(prorate))
                }
                _ => *end,
            };
            (tp.clone(), off)
        })
        .collect()
}

/// Spark's `delayBatch`: `true` when fewer than `min_offsets` are available and
/// `max_trigger_delay` has not passed since `last_trigger_ms` (which moves to `now_ms`
/// whenever a batch is allowed).
pub fn delay_batch(
    min_offsets: u64,
    latest: &PartitionOffsets,
    current: &PartitionOffsets,
    last_trigger_ms: &mut i64,
    now_ms: i64,
    max_trigger_delay_ms: i64,
) -> bool {
    if now_ms - *last_trigger_ms >= max_trigger_delay_ms {
        *last_trigger_ms = now_ms;
        return false;
    }
    let available: i64 = latest
        .iter()
        .map(|(tp, o)| o - current.get(tp).copied().unwrap_or(0))
        .sum();
    if (available as f64) < min_offsets as f64 {
        true
    } else {
        *last_trigger_ms = now_ms;
        false
    }
}

/// The records of one partition a batch reads: offsets `[from, until)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OffsetRange {
    pub tp: TopicPartition,
    pub from: i64,
    pub until: i64,
}

impl OffsetRange {
    pub fn size(&self) -> i64 {
        (self.until - self.from).max(0)
    }
}

/// Records the checkpoint expected that Kafka no longer has (retention, deleted
/// records, a deleted partition or topic), or a partition whose offsets went back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DataLoss {
    pub tp: TopicPartition,
    /// The missing offsets `[from, until)`, when known.
    pub from: Option<i64>,
    pub until: Option<i64>,
    pub message: String,
}

impl DataLoss {
    /// How many offsets are gone (0 when not countable).
    pub fn offsets(&self) -> u64 {
        match (self.from, self.until) {
            (Some(f), Some(u)) if u > f => (u - f) as u64,
            _ => 0,
        }
    }
}

/// Spark's `getOffsetRangesFromResolvedOffsets`: the ranges of a batch from its start
/// and end offsets. Partitions in `until` but not in `from` are new and start at
/// their earliest offset (`new_earliest`; a new partition not there was deleted
/// again). Partitions in `from` but not in `until` are gone. Every anomaly is
/// returned as a [`DataLoss`]; the caller fails or skips by `failOnDataLoss`.
/// Empty ranges are dropped.
pub fn offset_ranges(
    from: &PartitionOffsets,
    until: &PartitionOffsets,
    new_earliest: &PartitionOffsets,
) -> (Vec<OffsetRange>, Vec<DataLoss>) {
    let mut losses = Vec::new();
    for tp in until.keys().filter(|tp| !from.contains_key(*tp)) {
        match new_earliest.get(tp) {
            None => losses.push(DataLoss {
                tp: tp.clone(),
                from: None,
                until: None,
                message: format!(
                    "cannot find the earliest offset of new partition {tp}; it was deleted again"
                ),
            }),
            Some(&o) if o != 0 => losses.push(DataLoss {
                tp: tp.clone(),
                from: Some(0),
                until: Some(o),
                message: format!("added partition {tp} starts from {o} instead of 0"),
            }),
            Some(_) => {}
        }
    }
    for tp in from.keys().filter(|tp| !until.contains_key(*tp)) {
        losses.push(DataLoss {
            tp: tp.clone(),
            from: from.get(tp).copied(),
            until: None,
            message: format!("partition {tp} is gone (its topic was deleted or unsubscribed)"),
        });
    }
    let mut ranges = Vec::new();
    for (tp, &end) in until {
        let Some(&start) = from.get(tp).or_else(|| new_earliest.get(tp)) else {
            continue;
        };
        if end < start {
            losses.push(DataLoss {
                tp: tp.clone(),
                from: Some(end),
                until: Some(start),
                message: format!(
                    "partition {tp}'s offset went back from {start} to {end} (the topic was recreated or truncated)"
                ),
            });
        }
        let range = OffsetRange {
            tp: tp.clone(),
            from: start,
            until: end,
        };
        if range.size() > 0 {
            ranges.push(range);
        }
    }
    (ranges, losses)
}

pub use crate::error::FAIL_ON_DATA_LOSS_TRUE_HINT;

#[cfg(test)]
mod tests {
    use super::*;

    fn offs(items: &[(&str, i32, i64)]) -> PartitionOffsets {
        items
            .iter()
            .map(|(t, p, o)| (TopicPartition::new(*t, *p), *o))
            .collect()
    }

    #[test]
    fn offset_json_is_sparks_shape() {
        let o = KafkaSourceOffset::new(offs(&[("b", 1, 456), ("a", 10, 3), ("a", 2, 1)]));
        assert_eq!(
            o.to_json().to_string(),
            r#"{"a":{"2":1,"10":3},"b":{"1":456}}"#
        );
        let back = KafkaSourceOffset::parse(r#"{"b":{"1":456},"a":{"10":3,"2":1}}"#).unwrap();
        assert_eq!(back, o);
        // A real offset line written by Spark 4 (offsets/N, third line).
        let spark = KafkaSourceOffset::parse(r#"{"events":{"2":1130,"1":1093,"3":1105,"0":1117}}"#)
            .unwrap();
        assert_eq!(spark.partitions.len(), 4);
        assert_eq!(spark.partitions[&TopicPartition::new("events", 2)], 1130);
        assert!(KafkaSourceOffset::parse(r#"{"t":{"x":1}}"#).is_err());
        assert!(KafkaSourceOffset::parse(r#"{"t":{"0":"1"}}"#).is_err());
        assert!(KafkaSourceOffset::parse("[]").is_err());
    }

    #[test]
    fn starting_offsets_words_and_json() {
        assert_eq!(
            StartingOffsets::parse("earliest").unwrap(),
            StartingOffsets::Earliest
        );
        assert_eq!(
            StartingOffsets::parse("latest").unwrap(),
            StartingOffsets::Latest
        );
        assert_eq!(
            StartingOffsets::parse(r#"{"t":{"0":23,"1":-2}}"#).unwrap(),
            StartingOffsets::Specific(offs(&[("t", 0, 23), ("t", 1, -2)]))
        );
        let e = StartingOffsets::parse("beginning").unwrap_err();
        assert!(e.contains("allowed"), "{e}");
        let e = StartingOffsets::parse(r#"{"t":{"0":-5}}"#).unwrap_err();
        assert!(e.contains("t-0"), "{e}");
    }

    #[test]
    fn rate_limit_prorates_like_spark() {
        // Spark's KafkaMicroBatchSourceSuite "maxOffsetsPerTrigger": 3 partitions with
        // backlogs 100, 10, 1 and a limit of 10: floor(10*100/111)=9, floor(10*10/111)=0 -> ceil
        // only when < 1, so 0.9 -> 1, and 0.09 -> 1.
        let from = offs(&[("t", 0, 0), ("t", 1, 0), ("t", 2, 0)]);
        let until = offs(&[("t", 0, 100), ("t", 1, 10), ("t", 2, 1)]);
        let got = rate_limit(10, &from, &until, &PartitionOffsets::new());
        assert_eq!(got, offs(&[("t", 0, 9), ("t", 1, 1), ("t", 2, 1)]));
        // Never past the end; nothing to read keeps the end.
        let got = rate_limit(1000, &from, &until, &PartitionOffsets::new());
        assert_eq!(got, until);
        let got = rate_limit(5, &until, &until, &PartitionOffsets::new());
        assert_eq!(got, until);
        // A new partition starts at its earliest offset.
        let from = offs(&[("t", 0, 50)]);
        let until = offs(&[("t", 0, 100), ("t", 1, 100)]);
        let got = rate_limit(20, &from, &until, &offs(&[("t", 1, 0)]));
        // backlogs 50 and 100: 20*50/150=6.67 -> 6, 20*100/150=13.3 -> 13
        assert_eq!(got, offs(&[("t", 0, 56), ("t", 1, 13)]));
    }

    #[test]
    fn delay_batch_waits_for_min_offsets_or_the_delay() {
        let current = offs(&[("t", 0, 10)]);
        let latest = offs(&[("t", 0, 15)]);
        let mut last = 0;
        // The first trigger never waits (Spark's lastTriggerMillis starts at 0).
        assert!(!delay_batch(
            100, &latest, &current, &mut last, 1_000_000, 60_000
        ));
        assert_eq!(last, 1_000_000);
        // 5 available < 100, 10 s after the last batch: wait.
        assert!(delay_batch(
            100, &latest, &current, &mut last, 1_010_000, 60_000
        ));
        assert_eq!(last, 1_000_000);
        // The delay passed: run.
        assert!(!delay_batch(
            100, &latest, &current, &mut last, 1_060_000, 60_000
        ));
        // Enough offsets: run at once.
        let latest = offs(&[("t", 0, 200)]);
        assert!(!delay_batch(
            100, &latest, &current, &mut last, 1_061_000, 60_000
        ));
        assert_eq!(last, 1_061_000);
    }

    #[test]
    fn ranges_report_new_gone_and_backward_partitions() {
        let from = offs(&[("t", 0, 5), ("t", 1, 7), ("gone", 0, 3)]);
        let until = offs(&[
            ("t", 0, 9),
            ("t", 1, 4),
            ("t", 2, 6),
            ("t", 3, 6),
            ("t", 4, 1),
        ]);
        let new_earliest = offs(&[("t", 2, 0), ("t", 3, 2)]);
        let (ranges, losses) = offset_ranges(&from, &until, &new_earliest);
        assert_eq!(
            ranges,
            vec![
                OffsetRange {
                    tp: TopicPartition::new("t", 0),
                    from: 5,
                    until: 9
                },
                OffsetRange {
                    tp: TopicPartition::new("t", 2),
                    from: 0,
                    until: 6
                },
                OffsetRange {
                    tp: TopicPartition::new("t", 3),
                    from: 2,
                    until: 6
                },
            ]
        );
        let msgs: Vec<&str> = losses.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(losses.len(), 4, "{msgs:?}");
        assert!(msgs[0].contains("t-3 starts from 2"), "{msgs:?}");
        assert_eq!(losses[0].offsets(), 2);
        assert!(msgs[1].contains("t-4"), "{msgs:?}");
        assert!(msgs[2].contains("gone-0 is gone"), "{msgs:?}");
        assert!(
            msgs[3].contains("t-1's offset went back from 7 to 4"),
            "{msgs:?}"
        );
    }
}
