//! Sources: where a flow's rows come from.

pub mod delta;
pub mod delta_cdf;
pub mod files;
pub mod kafka;
