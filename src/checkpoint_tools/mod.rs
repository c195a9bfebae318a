//! Checkpoint tools, built on the whole engine: read-only inspection (`weir
//! inspect`), diffs between checkpoints or batches (`weir diff`), restart compatibility
//! (`weir check`), and the actions that change a checkpoint or its table — backup,
//! reset, rollback — planned first (a dry-run) and executed exactly as planned
//! (`weir checkpoint`, the console's playbook view). The checkpoint's files themselves
//! (layout, logs, lock, progress) are `crate::checkpoint`.

pub mod actions;
pub mod check;
pub mod diff;
pub mod inspect;
