//! Per-partition lag of a Kafka flow, as the console shows it: for each subscribed
//! partition, the latest offset minus the committed one (messages), and in time the
//! newest message's timestamp minus the timestamp of the oldest message not yet
//! committed (ms; 0 when caught up). Measured against the cluster, independently of
//! the batches, so the console sees the latest offset move while a batch runs.

use super::offset::{PartitionOffsets, TopicPartition};
use super::{KafkaSource, Result};

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

/// The lag of every subscribed partition, given the flow's committed offsets.
pub async fn measure(
    source: &mut KafkaSource,
    committed: Option<&PartitionOffsets>,
) -> Result<Vec<PartitionLag>> {
    let latest = source.latest_offsets(None).await?;
    let client = source.client().await?;
    let mut out = Vec::with_capacity(latest.len());
    for (tp, l) in latest {
        let from = committed.and_then(|c| c.get(&tp).copied());
        let messages = (l - from.unwrap_or(0)).max(0) as u64;
        let lag_ms = match from {
            Some(f) if messages > 0 => {
                let ts = |offset: i64| {
                    let client = client.clone();
                    let tp = tp.clone();
                    async move { client.record_timestamp(&tp, offset).await.ok().flatten() }
                };
                match (ts(l - 1).await, ts(f).await) {
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
