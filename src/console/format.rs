//! How the console writes numbers: rates in rows/s, sizes in decimal bytes,
//! durations in ms/s/m/h, clock times in UTC. Compact forms keep columns
//! narrow at 80 columns.

/// A count or rate in at most 5 characters: `950`, `1.2k`, `12k`, `3.4M`.
pub fn compact(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    let sign = if v < 0.0 { "-" } else { "" };
    let (x, suffix) = if a >= 1e12 {
        (a / 1e12, "T")
    } else if a >= 1e9 {
        (a / 1e9, "G")
    } else if a >= 1e6 {
        (a / 1e6, "M")
    } else if a >= 1e3 {
        (a / 1e3, "k")
    } else {
        return if a >= 10.0 || a == a.trunc() {
            format!("{sign}{a:.0}")
        } else {
            format!("{sign}{a:.1}")
        };
    };
    if x >= 100.0 {
        format!("{sign}{x:.0}{suffix}")
    } else if x >= 10.0 {
        let r = format!("{x:.1}");
        let r = r.strip_suffix(".0").unwrap_or(&r).to_string();
        format!("{sign}{r}{suffix}")
    } else {
        format!("{sign}{x:.1}{suffix}")
    }
}

/// A count: `compact` of an integer.
pub fn count(v: u64) -> String {
    compact(v as f64)
}

/// A rate in rows/s: `1.2k/s`.
pub fn rate(v: f64) -> String {
    format!("{}/s", compact(v))
}

/// Bytes in decimal units, as the demo prints them: `512 B`, `1.2 kB`, `32.7 MB`.
pub fn bytes(v: u64) -> String {
    let f = v as f64;
    for (limit, unit) in [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")] {
        if f >= limit {
            return format!("{:.1} {unit}", f / limit);
        }
    }
    format!("{v} B")
}

/// A duration in milliseconds: `850ms`, `1.2s`, `42s`, `4m 10s`, `2h 05m`, `3d 4h`.
pub fn duration_ms(ms: i64) -> String {
    if ms < 0 {
        return format!("-{}", duration_ms(-ms));
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms as f64 / 1000.0;
    if s < 10.0 {
        return format!("{s:.1}s");
    }
    let secs = ms / 1000;
    if secs < 60 {
        return format!("{secs}s");
    }
    if secs < 3600 {
        return format!("{}m {:02}s", secs / 60, secs % 60);
    }
    if secs < 86_400 {
        return format!("{}h {:02}m", secs / 3600, (secs % 3600) / 60);
    }
    format!("{}d {}h", secs / 86_400, (secs % 86_400) / 3600)
}

/// A rough time to go: `~45 s`, `~4 min`, `~2 h`, `~3 d`.
pub fn eta(secs: f64) -> String {
    if !secs.is_finite() {
        return "never".into();
    }
    let s = secs.max(0.0);
    if s < 90.0 {
        format!("~{:.0} s", s.max(1.0))
    } else if s < 90.0 * 60.0 {
        format!("~{:.0} min", s / 60.0)
    } else if s < 48.0 * 3600.0 {
        format!("~{:.0} h", s / 3600.0)
    } else {
        format!("~{:.0} d", s / 86_400.0)
    }
}

/// An axis label for a time offset in seconds (<= 0): `-5m`, `-2m30s`, `-45s`, `0`.
pub fn offset_label(secs: f64) -> String {
    let s = secs.round() as i64;
    if s == 0 {
        return "0".into();
    }
    let a = s.abs();
    let sign = if s < 0 { "-" } else { "+" };
    if a < 60 {
        format!("{sign}{a}s")
    } else if a % 60 == 0 && a < 3600 {
        format!("{sign}{}m", a / 60)
    } else if a < 3600 {
        format!("{sign}{}m{:02}s", a / 60, a % 60)
    } else if a % 3600 == 0 {
        format!("{sign}{}h", a / 3600)
    } else {
        format!("{sign}{}h{:02}m", a / 3600, (a % 3600) / 60)
    }
}

/// A span of time as an axis or window label: `1m`, `5m`, `1h`, `90s`, `1h30m`.
pub fn span_ms(ms: i64) -> String {
    offset_label(ms.abs() as f64 / 1000.0)
        .trim_start_matches('+')
        .to_string()
}

/// Wall-clock time of day in UTC: `10:07:56Z`.
pub fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

/// Date and time in UTC: `2026-03-01 10:33:57Z`.
pub fn datetime(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

/// Month, day and time in UTC: `03-01 10:33:57Z`.
pub fn month_day_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

/// Parses Spark's ISO-8601 timestamps (`2026-11-30T10:07:56.410Z`) to epoch ms.
pub fn parse_iso_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .ok()
        .map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_numbers_fit_five_columns() {
        assert_eq!(compact(0.0), "0");
        assert_eq!(compact(4.0), "4");
        assert_eq!(compact(1.6), "1.6");
        assert_eq!(compact(950.0), "950");
        assert_eq!(compact(1234.0), "1.2k");
        assert_eq!(compact(12_000.0), "12k");
        assert_eq!(compact(12_340.0), "12.3k");
        assert_eq!(compact(336_776.0), "337k");
        assert_eq!(compact(3_400_000.0), "3.4M");
        for v in [0.0, 9.9, 99.5, 999.0, 9_999.0, 99_999.0, 999_999.0, 1e8] {
            assert!(compact(v).len() <= 5, "{v} -> {}", compact(v));
        }
    }

    #[test]
    fn bytes_and_durations() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(32_700_000), "32.7 MB");
        assert_eq!(duration_ms(850), "850ms");
        assert_eq!(duration_ms(1_240), "1.2s");
        assert_eq!(duration_ms(42_000), "42s");
        assert_eq!(duration_ms(250_000), "4m 10s");
        assert_eq!(duration_ms(7_500_000), "2h 05m");
        assert_eq!(eta(240.0), "~4 min");
        assert_eq!(eta(30.0), "~30 s");
        assert_eq!(offset_label(-300.0), "-5m");
        assert_eq!(offset_label(-150.0), "-2m30s");
        assert_eq!(offset_label(0.0), "0");
    }

    #[test]
    fn iso_timestamps() {
        let ms = parse_iso_ms("2026-11-30T10:07:56.410Z").unwrap();
        assert_eq!(clock(ms), "10:07:56Z");
        assert_eq!(datetime(ms), "2026-11-30 10:07:56Z");
        assert_eq!(parse_iso_ms("nope"), None);
    }
}
