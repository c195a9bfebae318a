//! Health thresholds and the retry budget of a flow (pipeline keys `freshness` and
//! `[flow.health]`, docs/health.md).

use std::time::Duration;

/// Thresholds of the classifier (pipeline keys `freshness` and `[flow.health]`,
/// see docs/health.md).
#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// Batches the lagging rules look at.
    pub window_batches: usize,
    /// Maximum wall clock - max event time before the flow is lagging.
    pub freshness: Option<Duration>,
    /// Processing rate below `input rate × (1 - tolerance)` counts as slower.
    pub rate_tolerance: f64,
    /// Rescued rows / input rows over the window above which the schema does not fit.
    pub max_rescued_ratio: f64,
    /// The source's `max_files_per_trigger` (to tell a flow capped by it).
    pub max_files_per_trigger: Option<u64>,
    /// Attempts of a transient source/sink error before it becomes a state.
    pub retry_attempts: u32,
    /// First wait between attempts; doubled each time, at most 30 s.
    pub retry_backoff: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            window_batches: 5,
            freshness: None,
            rate_tolerance: 0.1,
            max_rescued_ratio: 0.5,
            max_files_per_trigger: None,
            retry_attempts: 3,
            retry_backoff: Duration::from_secs(1),
        }
    }
}
