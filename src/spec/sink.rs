//! Where a flow writes.

use std::path::PathBuf;

/// Where a flow writes.
#[derive(Debug, Clone)]
pub enum SinkSpec {
    Delta {
        path: PathBuf,
        partition_by: Vec<String>,
        merge_schema: bool,
        /// `false` (unsafe, drills only) skips the replay check of application transactions.
        idempotent: bool,
        /// A new checkpoint may write into a table that already has data (docs/sinks).
        allow_existing_table: bool,
    },
    /// Delta MERGE on `keys` per batch (upsert), latest row per key within a batch.
    DeltaMerge {
        path: PathBuf,
        keys: Vec<String>,
        order_by: Option<String>,
        partition_by: Vec<String>,
        /// A new checkpoint may write into a table that already has data.
        allow_existing_table: bool,
        /// Keys match when both are null (`<=>`); by default `=` never matches a null key.
        null_safe_keys: bool,
    },
    Memory {
        name: String,
    },
    Console {
        num_rows: usize,
    },
}

impl SinkSpec {
    /// Whether a new checkpoint may start over a table that already has rows.
    pub fn allows_existing_table(&self) -> bool {
        match self {
            SinkSpec::Delta {
                allow_existing_table,
                ..
            }
            | SinkSpec::DeltaMerge {
                allow_existing_table,
                ..
            } => *allow_existing_table,
            _ => true,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            SinkSpec::Delta { path, .. } => format!("DeltaSink[{}]", path.display()),
            SinkSpec::DeltaMerge { path, keys, .. } => {
                format!(
                    "DeltaMergeSink[{}, keys={}]",
                    path.display(),
                    keys.join(",")
                )
            }
            SinkSpec::Memory { name } => format!("MemorySink[{name}]"),
            SinkSpec::Console { .. } => "ConsoleSink".to_string(),
        }
    }
}
