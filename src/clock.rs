//! The wall clock, in the unit every timestamp weir records uses: milliseconds since
//! the Unix epoch (UTC); files' modification times, and durations, in the same unit.

/// Now, in ms since the epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Milliseconds since `t` (a duration for progress records, which count whole ms).
pub fn ms_since(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A file's modification time, in ms since the epoch (0 when the file system has none).
pub fn modified_ms(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
