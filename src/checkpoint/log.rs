//! Spark's `offsets/N` and `commits/N` file formats (`OffsetSeqLog`, `CommitLog`, version `v1`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Line 2 of `offsets/N` (Spark's `OffsetSeqMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct OffsetSeqMetadata {
    /// The watermark this batch runs with (ms since the epoch); 0 before any event time is seen.
    #[serde(default)]
    pub batch_watermark_ms: i64,
    /// When the batch was planned (ms since the epoch); `current_timestamp()` in the batch.
    #[serde(default)]
    pub batch_timestamp_ms: i64,
    /// Settings that must not change across restarts of this checkpoint.
    #[serde(default)]
    pub conf: BTreeMap<String, String>,
}

/// A planned batch: metadata plus one end offset per source (`null` written as `-` like Spark).
#[derive(Debug, Clone, PartialEq)]
pub struct OffsetSeq {
    pub metadata: OffsetSeqMetadata,
    pub offsets: Vec<Option<serde_json::Value>>,
}

const VERSION: &str = "v1";

impl OffsetSeq {
    pub fn render(&self) -> String {
        let mut out = String::from(VERSION);
        out.push('\n');
        out.push_str(&serde_json::to_string(&self.metadata).unwrap_or_else(|_| "{}".to_string()));
        for offset in &self.offsets {
            out.push('\n');
            match offset {
                Some(v) => out.push_str(&v.to_string()),
                None => out.push('-'),
            }
        }
        out
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        check_version(lines.next())?;
        let meta_line = lines
            .next()
            .ok_or_else(|| "truncated: the batch metadata line (line 2) is missing".to_string())?;
        let metadata: OffsetSeqMetadata = serde_json::from_str(meta_line)
            .map_err(|e| format!("line 2 is not valid batch metadata ({e})"))?;
        let mut offsets = Vec::new();
        for (i, line) in lines.enumerate() {
            if line.trim() == "-" {
                offsets.push(None);
            } else {
                offsets.push(Some(serde_json::from_str(line).map_err(|e| {
                    format!("line {} is not a valid source offset ({e})", i + 3)
                })?));
            }
        }
        if offsets.is_empty() {
            return Err("truncated: no source offset after the metadata line".to_string());
        }
        Ok(OffsetSeq { metadata, offsets })
    }
}

/// The key of a union's watermark policy in `offsets/N`'s conf (Spark's name).
pub const MULTIPLE_WATERMARK_POLICY: &str = "spark.sql.streaming.multipleWatermarkPolicy";

/// `commits/N` (Spark's `CommitMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CommitMetadata {
    #[serde(default)]
    pub next_batch_watermark_ms: i64,
    /// weir's addition for a flow of several sources (`[[flow.union]]`): each source's
    /// own watermark after the batch (`null`: no data yet), so a restart combines them as
    /// the run before it did. Spark keeps these in memory only (and reads past the field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_watermarks_ms: Vec<Option<i64>>,
}

impl CommitMetadata {
    pub fn render(&self) -> String {
        format!(
            "{VERSION}\n{}",
            serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
        )
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        check_version(lines.next())?;
        let line = lines
            .next()
            .ok_or_else(|| "truncated: the commit metadata line (line 2) is missing".to_string())?;
        serde_json::from_str(line).map_err(|e| format!("line 2 is not valid commit metadata ({e})"))
    }
}

fn check_version(line: Option<&str>) -> Result<(), String> {
    match line.map(str::trim) {
        Some(VERSION) => Ok(()),
        Some("") | None => Err("empty or truncated file (expected \"v1\" on line 1)".to_string()),
        Some(other) if other.starts_with('v') => Err(format!(
            "unsupported log version {other:?}; this weir reads \"v1\" (written by Spark 2.x-4.x and weir)"
        )),
        Some(other) => Err(format!(
            "not a checkpoint log file: line 1 is {:?}, expected \"v1\"",
            other.chars().take(40).collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPARK_OFFSETS: &str = include_str!("../../tests/fixtures/spark/checkpoint/offsets/5");
    const SPARK_COMMIT: &str = include_str!("../../tests/fixtures/spark/checkpoint/commits/5");

    #[test]
    fn reads_real_spark_offsets() {
        let seq = OffsetSeq::parse(SPARK_OFFSETS).unwrap();
        assert_eq!(seq.metadata.batch_watermark_ms, 1772362150000);
        assert_eq!(seq.metadata.batch_timestamp_ms, 1796033276588);
        assert_eq!(
            seq.metadata.conf["spark.sql.shuffle.partitions"],
            serde_json::Value::from("2").as_str().unwrap()
        );
        assert_eq!(seq.offsets, vec![Some(serde_json::json!({"logOffset": 5}))]);
        // weir writes the same shape back.
        assert_eq!(OffsetSeq::parse(&seq.render()).unwrap(), seq);
    }

    #[test]
    fn reads_real_spark_commit() {
        let c = CommitMetadata::parse(SPARK_COMMIT).unwrap();
        assert_eq!(c.next_batch_watermark_ms, 1772362150000);
        assert_eq!(c.render(), "v1\n{\"nextBatchWatermarkMs\":1772362150000}");
    }

    #[test]
    fn truncated_and_foreign_files_are_named() {
        assert!(OffsetSeq::parse("").unwrap_err().contains("truncated"));
        assert!(OffsetSeq::parse("v1\n").unwrap_err().contains("line 2"));
        assert!(
            OffsetSeq::parse("v1\n{\"batchWatermarkMs\":0}")
                .unwrap_err()
                .contains("no source offset")
        );
        assert!(
            OffsetSeq::parse("v9\n{}\n{}")
                .unwrap_err()
                .contains("unsupported")
        );
        assert!(
            CommitMetadata::parse("hello")
                .unwrap_err()
                .contains("not a checkpoint log")
        );
    }
}
