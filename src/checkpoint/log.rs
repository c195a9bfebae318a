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

/// What is wrong with a log file, and the error class Spark raises for it at restart
/// where it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogError {
    pub message: String,
    pub spark_error_class: Option<&'static str>,
}

impl LogError {
    fn new(message: impl Into<String>) -> Self {
        LogError {
            message: message.into(),
            spark_error_class: None,
        }
    }
}

impl std::fmt::Display for LogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A log file's version (line 1, at most `max`) and the lines after it, as Spark's
/// `HDFSMetadataLog` writes them (`\n`-separated, no trailing newline).
pub fn split_log(text: &str, max: u32) -> Result<(u32, Vec<&str>), LogError> {
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or("").trim();
    if first.is_empty() {
        return Err(LogError::new(
            "empty file: the write was torn, truncated before its version on line 1 (Spark fails reading it at restart)",
        ));
    }
    let Some(v) = first.strip_prefix('v').and_then(|v| v.parse::<u32>().ok()) else {
        return Err(LogError::new(format!(
            "not a checkpoint log file: line 1 is {:?}, expected a version like \"v1\"",
            first.chars().take(40).collect::<String>()
        )));
    };
    if v == 0 || v > max {
        return Err(LogError {
            message: format!(
                "unsupported log version v{v}: the highest this reader takes is v{max} (written by a newer Spark?)"
            ),
            spark_error_class: Some("INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION"),
        });
    }
    Ok((v, lines.collect()))
}

/// Line `n` (1-based) of a log file as JSON; a line cut short is named a torn write.
pub fn json_line<T: serde::de::DeserializeOwned>(n: usize, line: &str) -> Result<T, LogError> {
    serde_json::from_str(line).map_err(|e| {
        let what = if e.is_eof() {
            "ends in the middle of its JSON (a torn write)"
        } else {
            "is not valid JSON"
        };
        LogError::new(format!("line {n} {what}: {e}"))
    })
}

/// One source's offset in `offsets/N`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceOffset {
    /// The source's name (offsets log v2, named sources).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `None` for `-` (the source has no offset yet).
    pub offset: Option<serde_json::Value>,
}

/// `offsets/N` of any version up to `max`: v1 (weir, Spark 2.x-4.x) or v2 (named
/// sources, `name:offset`).
pub fn parse_offsets(
    text: &str,
    max: u32,
) -> Result<(u32, OffsetSeqMetadata, Vec<SourceOffset>), LogError> {
    let (version, lines) = split_log(text, max)?;
    let meta_line = lines
        .first()
        .filter(|l| !l.trim().is_empty())
        .ok_or_else(|| LogError::new("truncated: no batch metadata on line 2 (a torn write)"))?;
    let metadata: OffsetSeqMetadata = json_line(2, meta_line)?;
    let mut sources = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(1) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (name, body) = split_source_name(line);
        let offset = if body.trim() == "-" {
            None
        } else {
            Some(json_line::<serde_json::Value>(i + 2, body)?)
        };
        sources.push(SourceOffset {
            name: name.map(str::to_string),
            offset,
        });
    }
    Ok((version, metadata, sources))
}

/// `src_a:{"logOffset":1}` -> (`src_a`, `{...}`); a plain JSON value or `-` has no name.
fn split_source_name(line: &str) -> (Option<&str>, &str) {
    let starts_json = line
        .chars()
        .next()
        .is_some_and(|c| matches!(c, '{' | '[' | '"' | '-' | '0'..='9'));
    if starts_json {
        return (None, line);
    }
    match line.split_once(':') {
        Some((name, rest)) => (Some(name), rest),
        None => (None, line),
    }
}

/// `commits/N` of any version up to `max`: its version and line 2 as `T` (weir's
/// [`CommitMetadata`], or a reader's view with v2's `stateUniqueIds`).
pub fn parse_commit<T: serde::de::DeserializeOwned>(
    text: &str,
    max: u32,
) -> Result<(u32, T), LogError> {
    let (version, lines) = split_log(text, max)?;
    let line = lines
        .first()
        .filter(|l| !l.trim().is_empty())
        .ok_or_else(|| LogError::new("truncated: no commit metadata on line 2 (a torn write)"))?;
    Ok((version, json_line(2, line)?))
}

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

    /// A `v1` file, as weir writes it, with at least one source.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (_, metadata, sources) = parse_offsets(text, 1).map_err(|e| e.message)?;
        if sources.is_empty() {
            return Err("truncated: no source offset after the metadata line".to_string());
        }
        Ok(OffsetSeq {
            metadata,
            offsets: sources.into_iter().map(|s| s.offset).collect(),
        })
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

    /// A `v1` file, as weir writes it.
    pub fn parse(text: &str) -> Result<Self, String> {
        parse_commit(text, 1).map(|(_, c)| c).map_err(|e| e.message)
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
