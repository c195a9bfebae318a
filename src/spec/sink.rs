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
    },
    /// Delta MERGE on `keys` per batch (upsert), latest row per key within a batch.
    DeltaMerge {
        path: PathBuf,
        keys: Vec<String>,
        order_by: Option<String>,
        partition_by: Vec<String>,
    },
    Memory {
        name: String,
    },
    Console {
        num_rows: usize,
    },
}

impl SinkSpec {
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
