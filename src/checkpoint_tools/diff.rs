//! `weir diff`: two checkpoints (each at its last committed batch), or two
//! batches of one checkpoint, side by side: offsets, watermark, files, state
//! sizes and the schema in effect, with the schema differences field by field.
//! Reads only.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::source::files::ledger::Ledger;

/// One side of a diff.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Side {
    pub label: String,
    pub query_id: Option<String>,
    pub batch_id: Option<u64>,
    pub committed: bool,
    pub end_offset: Option<serde_json::Value>,
    /// `batchWatermarkMs` of `offsets/N`.
    pub watermark_ms: Option<i64>,
    /// `nextBatchWatermarkMs` of `commits/N`.
    pub next_watermark_ms: Option<i64>,
    pub batch_timestamp_ms: Option<i64>,
    /// Files of batch N in the ledger.
    pub files: Option<usize>,
    /// Per stateful operator: bytes of state version N (delta + snapshot).
    pub state_bytes: BTreeMap<u64, u64>,
    /// The schema version in effect at the batch, and its DDL.
    pub schema_version: Option<u64>,
    pub schema_ddl: Option<String>,
}

/// A field that differs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Change {
    pub field: String,
    pub a: String,
    pub b: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diff {
    pub a: Side,
    pub b: Side,
    pub changes: Vec<Change>,
    /// Columns added, removed or retyped from A to B.
    pub schema_changes: Vec<String>,
}

/// The side of `checkpoint` at `batch` (default: the last committed batch).
pub fn side(checkpoint: &Path, batch: Option<u64>) -> Result<Side> {
    let cp = Checkpoint::at(checkpoint);
    if !checkpoint.is_dir() {
        return Err(Error::checkpoint(
            checkpoint,
            "no such checkpoint directory",
        ));
    }
    let commits = Checkpoint::batch_ids(&cp.commits_dir())?;
    let batch_id = batch.or_else(|| commits.last().copied());
    let label = match batch {
        Some(b) => format!("{} @ batch {b}", checkpoint.display()),
        None => checkpoint.display().to_string(),
    };
    let offsets = match batch_id {
        Some(id) if cp.offsets_path(id).exists() => Some(cp.read_offsets(id)?),
        Some(id) => {
            let kept = Checkpoint::batch_ids(&cp.offsets_dir())?;
            let why = match kept.first() {
                Some(&first) if id < first => format!(
                    "; the checkpoint keeps batches {first}..={} (older ones are removed after each commit \
                     beyond the flow's min_batches_to_retain, docs/maintenance.md)",
                    kept.last().copied().unwrap_or(first)
                ),
                _ => String::new(),
            };
            return Err(Error::checkpoint(
                cp.offsets_path(id),
                format!("batch {id} has no offsets{why}"),
            ));
        }
        None => None,
    };
    let commit = match batch_id {
        Some(id) if commits.contains(&id) => Some(cp.read_commit(id)?),
        _ => None,
    };
    let files = match (batch_id, Ledger::open_read_only(&cp.ledger_path())?) {
        (Some(id), Some(l)) => Some(l.files_for_batch(id)?.len()),
        _ => None,
    };
    let mut state_bytes = BTreeMap::new();
    let state_dir = cp.root().join("state");
    if let Some(id) = batch_id {
        for op in Checkpoint::batch_ids(&state_dir)? {
            let versions =
                crate::state::StateStore::list_versions(&state_dir.join(op.to_string()))?;
            if let Some(f) = versions.get(&id) {
                state_bytes.insert(
                    op,
                    f.delta_bytes.unwrap_or(0) + f.snapshot_bytes.unwrap_or(0),
                );
            }
        }
    }
    let at = offsets.as_ref().map(|o| o.metadata.batch_timestamp_ms);
    // The schema a batch was written with: the last version recorded before its commit
    // (a schema change stops a planned batch, which is re-run with the new version).
    let written_at = batch_id
        .filter(|id| commits.contains(id))
        .and_then(|id| std::fs::metadata(cp.commit_path(id)).ok())
        .and_then(|m| m.modified().ok())
        .map(|t| chrono::DateTime::<chrono::Utc>::from(t).timestamp_millis())
        .or(at);
    let history = crate::source::files::schema_store::history(&cp)?;
    let schema = history
        .iter()
        .rev()
        .find(|(_, v)| written_at.is_none_or(|t| v.created_at_ms <= t))
        .or(history.first());
    Ok(Side {
        label,
        query_id: cp.read_metadata().ok().map(|m| m.id.to_string()),
        batch_id,
        committed: commit.is_some(),
        end_offset: offsets
            .as_ref()
            .and_then(|o| o.offsets.first().cloned().flatten()),
        watermark_ms: offsets.as_ref().map(|o| o.metadata.batch_watermark_ms),
        next_watermark_ms: commit.map(|c| c.next_batch_watermark_ms),
        batch_timestamp_ms: at,
        files,
        state_bytes,
        schema_version: schema.map(|(v, _)| *v),
        schema_ddl: schema.map(|(_, s)| s.ddl.clone()),
    })
}

fn show<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".to_string(), |v| v.to_string())
}

/// Compares two sides.
pub fn diff(a: Side, b: Side) -> Diff {
    let mut rows: Vec<(&str, String, String)> = vec![
        ("query id", show(&a.query_id), show(&b.query_id)),
        ("batch", show(&a.batch_id), show(&b.batch_id)),
        (
            "committed",
            a.committed.to_string(),
            b.committed.to_string(),
        ),
        ("end offset", show(&a.end_offset), show(&b.end_offset)),
        ("watermark ms", show(&a.watermark_ms), show(&b.watermark_ms)),
        (
            "next watermark ms",
            show(&a.next_watermark_ms),
            show(&b.next_watermark_ms),
        ),
        ("files in batch", show(&a.files), show(&b.files)),
        (
            "schema version",
            show(&a.schema_version),
            show(&b.schema_version),
        ),
    ];
    let ops: std::collections::BTreeSet<u64> = a
        .state_bytes
        .keys()
        .chain(b.state_bytes.keys())
        .copied()
        .collect();
    let op_rows: Vec<(String, String, String)> = ops
        .iter()
        .map(|op| {
            (
                format!("state {op} bytes"),
                show(&a.state_bytes.get(op)),
                show(&b.state_bytes.get(op)),
            )
        })
        .collect();
    let mut changes: Vec<Change> = Vec::new();
    for (f, x, y) in rows.drain(..) {
        // Kafka offsets are compared topic by topic and partition by partition below.
        if f == "end offset" && kafka_offsets(&a).is_some() && kafka_offsets(&b).is_some() {
            continue;
        }
        changes.push(Change {
            field: f.to_string(),
            a: x,
            b: y,
        });
    }
    if let (Some(x), Some(y)) = (kafka_offsets(&a), kafka_offsets(&b)) {
        changes.extend(kafka_changes(&x, &y));
    }
    for (f, x, y) in op_rows {
        changes.push(Change {
            field: f,
            a: x,
            b: y,
        });
    }
    changes.retain(|c| c.a != c.b);
    let schema_changes = schema_changes(a.schema_ddl.as_deref(), b.schema_ddl.as_deref());
    Diff {
        a,
        b,
        changes,
        schema_changes,
    }
}

/// A side's end offset as a Kafka source's (`None`: not a Kafka source).
fn kafka_offsets(side: &Side) -> Option<crate::source::kafka::PartitionOffsets> {
    side.end_offset
        .as_ref()
        .and_then(|v| crate::source::kafka::KafkaSourceOffset::from_json(v).ok())
        .map(|o| o.partitions)
}

/// Kafka offsets side by side: the topics (a changed subscription), then each
/// partition whose offset differs, one only side has (a partition that went away or
/// was added), or whose offset went back from A to B (a recreated topic, or B older).
fn kafka_changes(
    a: &crate::source::kafka::PartitionOffsets,
    b: &crate::source::kafka::PartitionOffsets,
) -> Vec<Change> {
    let topics = |m: &crate::source::kafka::PartitionOffsets| {
        m.keys()
            .map(|tp| tp.topic.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut out = vec![Change {
        field: "kafka topics".into(),
        a: topics(a),
        b: topics(b),
    }];
    let tps: std::collections::BTreeSet<&crate::source::kafka::TopicPartition> =
        a.keys().chain(b.keys()).collect();
    for tp in tps {
        let (x, y) = (a.get(tp), b.get(tp));
        let (x_text, y_text) = match (x, y) {
            (Some(x), Some(y)) if y < x => (x.to_string(), format!("{y} (went back)")),
            (Some(x), Some(y)) => (x.to_string(), y.to_string()),
            (Some(x), None) => (x.to_string(), "- (partition gone)".into()),
            (None, Some(y)) => ("- (no partition)".into(), y.to_string()),
            (None, None) => continue,
        };
        out.push(Change {
            field: format!("kafka {tp}"),
            a: x_text,
            b: y_text,
        });
    }
    out
}

fn schema_changes(a: Option<&str>, b: Option<&str>) -> Vec<String> {
    let parse = |d: Option<&str>| -> BTreeMap<String, String> {
        d.and_then(|d| crate::schema::parse_ddl(d).ok())
            .map(|s| {
                s.fields()
                    .iter()
                    .map(|f| (f.name().clone(), f.data_type().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (x, y) = (parse(a), parse(b));
    let mut out = Vec::new();
    for (name, t) in &y {
        match x.get(name) {
            None => out.push(format!("+ {name} {t}")),
            Some(old) if old != t => out.push(format!("~ {name} {old} -> {t}")),
            Some(_) => {}
        }
    }
    for (name, t) in &x {
        if !y.contains_key(name) {
            out.push(format!("- {name} {t}"));
        }
    }
    out
}

/// The human form.
pub fn render(d: &Diff) -> String {
    let mut out = format!("A  {}\nB  {}\n", d.a.label, d.b.label);
    if d.changes.is_empty() && d.schema_changes.is_empty() {
        out.push_str("no differences\n");
        return out;
    }
    let w = d
        .changes
        .iter()
        .map(|c| c.field.len())
        .max()
        .unwrap_or(5)
        .max(5);
    if !d.changes.is_empty() {
        out.push_str(&format!("\n{:<w$}  A -> B\n", "field"));
        for c in &d.changes {
            out.push_str(&format!("{:<w$}  {} -> {}\n", c.field, c.a, c.b));
        }
    }
    if !d.schema_changes.is_empty() {
        out.push_str("\nschema (A -> B)\n");
        for s in &d.schema_changes {
            out.push_str(&format!("  {s}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kafka::{PartitionOffsets, TopicPartition};

    fn offsets(entries: &[(&str, i32, i64)]) -> PartitionOffsets {
        entries
            .iter()
            .map(|(t, p, o)| (TopicPartition::new(*t, *p), *o))
            .collect()
    }

    #[test]
    fn kafka_offsets_are_compared_by_topic_and_partition() {
        let a = offsets(&[("events", 0, 10), ("events", 1, 7), ("old", 0, 3)]);
        let b = offsets(&[("events", 0, 20), ("events", 1, 5), ("events", 2, 4)]);
        let changes: Vec<(String, String, String)> = kafka_changes(&a, &b)
            .into_iter()
            .filter(|c| c.a != c.b)
            .map(|c| (c.field, c.a, c.b))
            .collect();
        let row = |f: &str, a: &str, b: &str| (f.to_string(), a.to_string(), b.to_string());
        assert_eq!(
            changes,
            vec![
                row("kafka topics", "events,old", "events"),
                row("kafka events-0", "10", "20"),
                row("kafka events-1", "7", "5 (went back)"),
                row("kafka events-2", "- (no partition)", "4"),
                row("kafka old-0", "3", "- (partition gone)"),
            ]
        );
    }
}
