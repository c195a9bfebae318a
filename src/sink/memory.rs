//! In-memory sink for tests: batches kept per sink name in the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::record_batch::RecordBatch;

use super::SinkCommit;
use crate::error::Result;

type Store = Arc<Mutex<Vec<(u64, Vec<RecordBatch>)>>>;

fn registry() -> &'static Mutex<HashMap<String, Store>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Store>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

pub struct MemorySink {
    name: String,
    store: Store,
}

impl MemorySink {
    /// The sink registered under `name` in this process (created empty on first use).
    pub fn named(name: &str) -> Self {
        let mut map = registry().lock().unwrap_or_else(|p| p.into_inner());
        let store = map.entry(name.to_string()).or_default().clone();
        MemorySink {
            name: name.to_string(),
            store,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn add_batch(&mut self, batch_id: u64, batches: Vec<RecordBatch>) -> Result<SinkCommit> {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if store.iter().any(|(id, _)| *id == batch_id) {
            return Ok(SinkCommit {
                skipped: true,
                ..Default::default()
            });
        }
        let rows = batches.iter().map(RecordBatch::num_rows).sum::<usize>() as u64;
        store.push((batch_id, batches));
        Ok(SinkCommit {
            num_output_rows: rows,
            ..Default::default()
        })
    }
}

/// All batches written to the memory sink `name`, in batch order.
pub fn memory_sink_batches(name: &str) -> Vec<RecordBatch> {
    let map = registry().lock().unwrap_or_else(|p| p.into_inner());
    let Some(store) = map.get(name) else {
        return Vec::new();
    };
    let mut entries = store.lock().unwrap_or_else(|p| p.into_inner()).clone();
    entries.sort_by_key(|(id, _)| *id);
    entries.into_iter().flat_map(|(_, b)| b).collect()
}
