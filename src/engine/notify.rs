//! In-process commit notices between flows: when a flow commits to a Delta table,
//! flows of the same process that stream from that table wake at once instead of
//! at their next idle poll. A hop inside one `weir run` then adds the time of a
//! batch, not a polling interval. Flows in other processes still see the commit
//! at their next poll (the table's `_delta_log` is the truth either way; a notice
//! only says "plan now").

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use tokio::sync::watch;

fn registry() -> &'static Mutex<HashMap<PathBuf, watch::Sender<u64>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, watch::Sender<u64>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

fn key(table: &Path) -> PathBuf {
    crate::spec::normalize(&std::path::absolute(table).unwrap_or_else(|_| table.to_path_buf()))
}

/// A receiver that changes whenever a flow of this process commits to `table`.
pub fn subscribe(table: &Path) -> watch::Receiver<u64> {
    let mut map = match registry().lock() {
        Ok(m) => m,
        Err(poisoned) => poisoned.into_inner(),
    };
    map.entry(key(table))
        .or_insert_with(|| watch::channel(0).0)
        .subscribe()
}

/// Tells the flows streaming from `table` that it has a new version.
pub fn published(table: &Path) {
    let map = match registry().lock() {
        Ok(m) => m,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(tx) = map.get(&key(table)) {
        tx.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_commit_wakes_a_subscriber_even_if_it_happened_before_the_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let table = dir.path().join("t");
        let mut rx = subscribe(&table);
        rx.borrow_and_update();
        published(&table);
        // The notice is kept until seen.
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
            .await
            .expect("woken")
            .expect("sender alive");
        assert_eq!(*rx.borrow_and_update(), 1);
        // Another table's commit does not wake it.
        published(&dir.path().join("other"));
        assert!(!rx.has_changed().expect("sender alive"));
    }
}
