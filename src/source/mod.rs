//! Sources: where a flow's rows come from.

pub mod delta;
pub mod files;
pub mod kafka;
