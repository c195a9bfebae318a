//! Per-partition lag of a Kafka flow, as the console shows it: for each subscribed
//! partition, the latest offset minus the committed one (messages), and in time the
//! newest message's timestamp minus the timestamp of the oldest message not yet
//! committed (ms; 0 when caught up). Measured against the cluster, independently of
//! the batches, so the console sees the latest offset move while a batch runs.
//!
//! A [`LagProbe`] asks little of the cluster per measurement: the latest offsets of
//! the subscribed partitions (one ListOffsets request per partition, sent at once:
//! rskafka asks offsets partition by partition), the partition list only every
//! [`PARTITIONS_REFRESH`] (new partitions and topics show within that time), and a
//! record's timestamp only when the offset it is asked at moved (small fetches, all
//! partitions at once).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::offset::{PartitionOffsets, TopicPartition};
use super::{KafkaSource, Result};

/// How often a probe lists the subscribed partitions again.
pub const PARTITIONS_REFRESH: Duration = Duration::from_secs(5);

/// One partition's lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub tp: TopicPartition,
    /// The partition's latest offset (the next offset to be written).
    pub latest: i64,
    /// The next offset the flow reads (its last committed end offset); `None` before
    /// the flow's first commit.
    pub committed: Option<i64>,
    /// Messages between them.
    pub messages: u64,
    /// The newest message's timestamp minus the oldest unread one's (ms).
    pub lag_ms: Option<i64>,
}

/// Measures lag again and again, remembering what has not changed since the last
/// measurement (the partition list for a while, the timestamps at unchanged offsets).
#[derive(Debug, Default)]
pub struct LagProbe {
    partitions: Option<(Instant, BTreeSet<TopicPartition>)>,
    /// Timestamps (ms) of records by partition and offset; `None`: no record there.
    timestamps: HashMap<(TopicPartition, i64), Option<i64>>,
}

impl LagProbe {
    pub fn new() -> Self {
        LagProbe::default()
    }

    /// The lag of every subscribed partition, given the flow's committed offsets.
    pub async fn measure(
        &mut self,
        source: &mut KafkaSource,
        committed: Option<&PartitionOffsets>,
    ) -> Result<Vec<PartitionLag>> {
        let result = self.measure_inner(source, committed).await;
        if result.is_err() {
            // After a failure, ask for everything again (the cluster may have changed).
            *self = LagProbe::default();
        }
        result
    }

    async fn measure_inner(
        &mut self,
        source: &mut KafkaSource,
        committed: Option<&PartitionOffsets>,
    ) -> Result<Vec<PartitionLag>> {
        let parts = match &self.partitions {
            Some((at, parts)) if at.elapsed() < PARTITIONS_REFRESH => parts.clone(),
            _ => {
                let parts = source.partitions().await?;
                self.partitions = Some((Instant::now(), parts.clone()));
                parts
            }
        };
        let client = source.client().await?;
        let latest = match client.offsets(parts.iter(), true).await {
            Ok(l) => l,
            Err(e) => {
                source.forget_client();
                return Err(e);
            }
        };
        // The offsets whose record timestamps are needed: each partition's newest
        // record and its oldest unread one, when there are unread records.
        let mut wanted: Vec<(TopicPartition, i64)> = Vec::new();
        for (tp, l) in &latest {
            if let Some(f) = committed.and_then(|c| c.get(tp).copied())
                && *l > f
            {
                wanted.push((tp.clone(), l - 1));
                wanted.push((tp.clone(), f));
            }
        }
        let missing: Vec<(TopicPartition, i64)> = wanted
            .iter()
            .filter(|k| !self.timestamps.contains_key(*k))
            .cloned()
            .collect();
        let fetched = futures::future::join_all(missing.into_iter().map(|(tp, offset)| {
            let client = client.clone();
            async move {
                let ts = client.record_timestamp(&tp, offset).await;
                ((tp, offset), ts)
            }
        }))
        .await;
        for (key, ts) in fetched {
            // A failed fetch is asked again next time; the lag in time is unknown now.
            if let Ok(ts) = ts {
                self.timestamps.insert(key, ts);
            }
        }
        let wanted: BTreeSet<(TopicPartition, i64)> = wanted.into_iter().collect();
        self.timestamps.retain(|k, _| wanted.contains(k));

        let mut out = Vec::with_capacity(latest.len());
        for (tp, l) in latest {
            let from = committed.and_then(|c| c.get(&tp).copied());
            let messages = (l - from.unwrap_or(0)).max(0) as u64;
            let lag_ms = match from {
                Some(f) if messages > 0 => {
                    let ts = |o: i64| self.timestamps.get(&(tp.clone(), o)).copied().flatten();
                    match (ts(l - 1), ts(f)) {
                        (Some(newest), Some(oldest)) => Some((newest - oldest).max(0)),
                        _ => None,
                    }
                }
                Some(_) => Some(0),
                None => None,
            };
            out.push(PartitionLag {
                tp,
                latest: l,
                committed: from,
                messages,
                lag_ms,
            });
        }
        Ok(out)
    }
}

/// The lag of every subscribed partition, given the flow's committed offsets (one
/// measurement of a fresh [`LagProbe`]).
pub async fn measure(
    source: &mut KafkaSource,
    committed: Option<&PartitionOffsets>,
) -> Result<Vec<PartitionLag>> {
    LagProbe::new().measure(source, committed).await
}
