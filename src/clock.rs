//! The wall clock, in the unit every timestamp weir records uses: milliseconds since
//! the Unix epoch (UTC).

/// Now, in ms since the epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
