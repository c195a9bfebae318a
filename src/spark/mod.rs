//! Apache Spark Structured Streaming queries, read-only, from the files Spark
//! already writes: the checkpoint and the event log. `weir attach --spark`,
//! `weir inspect`, `weir diff` and `weir check` use this module, and it
//! produces the same progress records, checkpoint batches and health verdicts
//! as weir's own flows, so the console, the health classifier and the
//! playbooks never need to know where a record came from.
//!
//! ```text
//!  <checkpoint>/metadata, offsets/, commits/, sources/, state/ ──► checkpoint ──► inspect, diff, check
//!                                                                      │
//!  event log (rolling dir, legacy file, dir of apps; zstd/lz4/snappy) ─┤
//!        └─► eventlog (files) ─► codec (incremental decoders) ─► events ─► progress (normalise)
//!                                                                      ▼
//!                                                           feed: per query, Updates ─► console
//! ```
//!
//! | module | does |
//! |---|---|
//! | [`checkpoint`] | Spark's checkpoint files: metadata, offsets (v1/v2, named sources), commits (v1/v2), source logs with `.compact`, state operators and their stores (HDFS, RocksDB, format v2); every missing or torn file named |
//! | [`inspect`] | `weir inspect` / `weir diff` over a Spark checkpoint (text and `--json`) |
//! | [`check`] | `weir check CHECKPOINT`: the verdict Spark itself reaches at restart, with its error class |
//! | [`codec`] | incremental decoders for Spark's event-log codecs (zstd, lz4-java blocks, xerial snappy) |
//! | [`eventlog`] | finding an application's event-log files, tailing them with bounded memory, the streaming events |
//! | [`progress`] | either rendering of `StreamingQueryProgress` into weir's progress record |
//! | [`errors`] | Spark's error classes and messages routed to health states and playbooks |
//! | [`backlog`] | a file source's backlog: files listed in its directory, not yet in its source log |
//! | [`feed`] | what `weir attach --spark` follows, per query: progress, batches, status, errors, health |
//!
//! The formats followed are those Spark 4.3 writes (see `docs/spark-attach.md`),
//! read tolerantly: unknown fields and event types are skipped, a torn last
//! line waits for its newline, names starting with `.` are ignored as Spark
//! ignores them.

pub mod backlog;
pub mod check;
pub mod checkpoint;
pub mod codec;
pub mod errors;
pub mod eventlog;
pub mod feed;
pub mod inspect;
pub mod progress;

use std::path::Path;

/// Whether `dir` holds a Spark checkpoint: `offsets/` with `metadata` (or, when
/// `metadata` was lost, `commits/`), and no `_weir/` (weir writes Spark's layout
/// too, plus its own `_weir/`).
pub fn is_spark_checkpoint(dir: &Path) -> bool {
    (dir.join("metadata").is_file() || dir.join("commits").is_dir())
        && dir.join("offsets").is_dir()
        && !dir.join("_weir").exists()
}

/// Epoch ms as ISO-8601 UTC with milliseconds.
pub(crate) fn iso(ms: i64) -> String {
    crate::records::iso_millis(ms)
}
