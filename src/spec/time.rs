//! Timestamp text: the session time zone for text without a zone, Spark's DST
//! rules, and Spark datetime patterns (`timestamp_format`). A value type of the spec
//! (checked when the pipeline is loaded) that the file readers apply.
//!
//! **Zone.** Text that names its zone (`Z`, `+02:00`) is that instant. Text without
//! a zone is a wall-clock time in the session time zone (Spark's
//! `spark.sql.session.timeZone`, the reader's `timeZone` option; UTC when not set),
//! converted as `java.time.LocalDateTime.atZone` does, which is what Spark uses:
//!
//! - a wall-clock time inside a gap (the hour skipped when clocks move forward) is
//!   moved later by the length of the gap (`2024-03-10 02:30` in `America/New_York`
//!   is `03:30 EDT` = `07:30Z`);
//! - a wall-clock time inside an overlap (the hour lived twice when clocks move back)
//!   takes the earlier offset, i.e. the earlier instant (`2024-11-03 01:30` in
//!   `America/New_York` is `01:30 EDT` = `05:30Z`).
//!
//! `TIMESTAMP_NTZ` columns keep the wall-clock time as written (no zone applies).
//!
//! **Patterns.** Without `timestamp_format` the text is ISO-8601 (`T` or a space
//! between date and time, optional fraction and zone), as Arrow's parser reads it.
//! With it, the text must match the pattern, written in Spark's datetime pattern
//! letters: `yyyy` `yy` `MM` `M` `MMM` `MMMM` `dd` `d` `DDD` `HH` `H` `hh` `h` `a`
//! `mm` `m` `ss` `s`, a fraction `S`..`SSSSSSSSS` (after a `.`: any number of digits),
//! an offset `XXX` `XX` `X` `xxx` `xx` `x` `ZZZZZ` `Z` (`Z` in the text is accepted
//! for `+00:00`), `EEE`/`E` day names, `'quoted text'`, and optional sections
//! `[...]`. Other letters (zone names `VV`, `z`, week fields ...) are refused when the
//! pipeline is loaded. A pattern without a time of day reads midnight.

use chrono::{DateTime, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone};

/// How a source reads timestamp text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimestampOptions {
    /// The session time zone for text without a zone; `None` is UTC.
    pub time_zone: Option<chrono_tz::Tz>,
    /// A Spark datetime pattern the text must match; `None` is ISO-8601.
    pub format: Option<TimestampFormat>,
}

impl TimestampOptions {
    /// Whether the defaults apply (UTC, ISO-8601): Arrow's own parser can be used.
    pub fn is_default(&self) -> bool {
        self.time_zone.is_none() && self.format.is_none()
    }

    /// Microseconds since the epoch of timestamp text for a `TIMESTAMP` column
    /// (`ntz = false`: zone-less text is in the session zone) or a `TIMESTAMP_NTZ`
    /// column (`ntz = true`: the wall-clock time as if it were UTC).
    pub fn parse_micros(&self, text: &str, ntz: bool) -> Option<i64> {
        let text = text.trim();
        let parsed = match &self.format {
            Some(format) => format.parse(text)?,
            None => parse_iso(text)?,
        };
        let instant = match parsed {
            Parsed::Instant(t) if !ntz => t.timestamp_micros(),
            // NTZ keeps the wall clock the text shows, offset or not.
            Parsed::Instant(t) => t.naive_local().and_utc().timestamp_micros(),
            Parsed::Local(local) if ntz => local.and_utc().timestamp_micros(),
            Parsed::Local(local) => match &self.time_zone {
                None => local.and_utc().timestamp_micros(),
                Some(tz) => local_to_utc(tz, &local)?.timestamp_micros(),
            },
        };
        within_range(instant)
    }
}

/// 0001-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999999Z in microseconds (Spark's and Delta's range).
const MIN_MICROS: i64 = -62_135_596_800_000_000;
const MAX_MICROS: i64 = 253_402_300_799_999_999;

fn within_range(micros: i64) -> Option<i64> {
    (MIN_MICROS..=MAX_MICROS)
        .contains(&micros)
        .then_some(micros)
}

/// What the text said: an instant (it had a zone) or a wall-clock time.
enum Parsed {
    Instant(DateTime<FixedOffset>),
    Local(NaiveDateTime),
}

/// A wall-clock time in `tz` as an instant, with `LocalDateTime.atZone`'s rules:
/// in a gap, later by the gap's length; in an overlap, the earlier instant.
pub fn local_to_utc(tz: &chrono_tz::Tz, local: &NaiveDateTime) -> Option<DateTime<chrono::Utc>> {
    match tz.from_local_datetime(local) {
        LocalResult::Single(t) => Some(t.with_timezone(&chrono::Utc)),
        LocalResult::Ambiguous(earlier, _) => Some(earlier.with_timezone(&chrono::Utc)),
        LocalResult::None => {
            // The offset in force just before the gap: the one a day earlier (zones
            // never change offset twice within a day around a transition).
            let probe = local.and_utc() - chrono::Duration::days(1);
            let before = tz.offset_from_utc_datetime(&probe.naive_utc()).fix();
            let utc = *local - chrono::Duration::seconds(i64::from(before.local_minus_utc()));
            Some(utc.and_utc())
        }
    }
}

/// ISO-8601 text: with a zone an instant, without one a wall-clock time.
fn parse_iso(text: &str) -> Option<Parsed> {
    use arrow::compute::kernels::cast_utils::string_to_datetime;
    if has_zone(text) {
        let t = string_to_datetime(&chrono::Utc, text).ok()?;
        Some(Parsed::Instant(t.fixed_offset()))
    } else {
        // Parsed as if UTC, which leaves the wall-clock fields untouched.
        let t = string_to_datetime(&chrono::Utc, text).ok()?;
        Some(Parsed::Local(t.naive_utc()))
    }
}

/// Whether ISO-8601 text carries a zone: `Z` or an offset after the time of day.
fn has_zone(text: &str) -> bool {
    let Some(time) = text.get(10..) else {
        return false;
    };
    time.ends_with(['Z', 'z']) || time.contains('+') || time.contains('-')
}

/// A compiled Spark datetime pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct TimestampFormat {
    pattern: String,
    /// chrono formats, one per combination of the optional sections (longest first).
    variants: Vec<Variant>,
}

#[derive(Debug, Clone, PartialEq)]
struct Variant {
    chrono: String,
    has_offset: bool,
    has_time: bool,
}

impl TimestampFormat {
    /// Compiles a Spark pattern; `Err` names the unsupported part.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let mut variants = Vec::new();
        for expanded in expand_optional(pattern)? {
            variants.push(translate(&expanded)?);
        }
        variants.dedup();
        if variants.is_empty() {
            return Err("the pattern is empty".into());
        }
        Ok(TimestampFormat {
            pattern: pattern.to_string(),
            variants,
        })
    }

    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether `text` matches the pattern (inference uses it).
    pub fn matches(&self, text: &str) -> bool {
        self.parse(text.trim()).is_some()
    }

    fn parse(&self, text: &str) -> Option<Parsed> {
        for v in &self.variants {
            if v.has_offset {
                // Spark's `X` accepts `Z` for a zero offset.
                let fixed;
                let text = match text.strip_suffix(['Z', 'z']) {
                    Some(rest) => {
                        fixed = format!("{rest}+00:00");
                        fixed.as_str()
                    }
                    None => text,
                };
                if let Ok(t) = DateTime::parse_from_str(text, &v.chrono) {
                    return Some(Parsed::Instant(t));
                }
            } else if v.has_time {
                if let Ok(t) = NaiveDateTime::parse_from_str(text, &v.chrono) {
                    return Some(Parsed::Local(t));
                }
            } else if let Ok(d) = NaiveDate::parse_from_str(text, &v.chrono) {
                return Some(Parsed::Local(d.and_hms_opt(0, 0, 0)?));
            }
        }
        None
    }
}

/// The pattern with each `[...]` section present or absent (at most 64 variants),
/// longest first so that the most specific form is tried first.
fn expand_optional(pattern: &str) -> Result<Vec<String>, String> {
    let mut out = vec![String::new()];
    let mut stack: Vec<Vec<String>> = Vec::new();
    let mut quoted = false;
    for c in pattern.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                for s in stack.last_mut().unwrap_or(&mut out) {
                    s.push(c);
                }
            }
            '[' if !quoted => stack.push(vec![String::new()]),
            ']' if !quoted => {
                let section = stack
                    .pop()
                    .ok_or("a `]` without its `[` (optional sections are written `[...]`)")?;
                let target = stack.last_mut().unwrap_or(&mut out);
                let mut next = Vec::new();
                for prefix in target.iter() {
                    next.push(prefix.clone());
                    for s in &section {
                        next.push(format!("{prefix}{s}"));
                    }
                }
                if next.len() > 64 {
                    return Err("too many optional sections (at most 6)".into());
                }
                *target = next;
            }
            _ => {
                for s in stack.last_mut().unwrap_or(&mut out) {
                    s.push(c);
                }
            }
        }
    }
    if !stack.is_empty() {
        return Err("an optional section `[` is not closed with `]`".into());
    }
    if quoted {
        return Err("a quoted text `'` is not closed".into());
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    Ok(out)
}

/// One pattern (without optional sections) as a chrono format.
fn translate(pattern: &str) -> Result<Variant, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::new();
    let mut has_offset = false;
    let mut has_time = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // Quoted text; '' is a quote.
            if chars.get(i + 1) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                push_literal(&mut out, chars[i]);
                i += 1;
            }
            i += 1;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            // `.SSS`: the dot and any number of fraction digits.
            if c == '.' && chars.get(i + 1) == Some(&'S') {
                let mut j = i + 1;
                while chars.get(j) == Some(&'S') {
                    j += 1;
                }
                out.push_str("%.f");
                has_time = true;
                i = j;
                continue;
            }
            push_literal(&mut out, c);
            i += 1;
            continue;
        }
        let mut n = 1;
        while chars.get(i + n) == Some(&c) {
            n += 1;
        }
        let spec = match (c, n) {
            ('y', 2) => "%y",
            ('y', _) | ('u', _) => "%Y",
            ('M', 1 | 2) | ('L', 1 | 2) => "%m",
            ('M', 3) | ('L', 3) => "%b",
            ('M', _) | ('L', _) => "%B",
            ('d', 1 | 2) => "%d",
            ('D', 1..=3) => "%j",
            ('E', 1..=3) => "%a",
            ('E', _) => "%A",
            ('a', 1) => "%p",
            ('H', 1 | 2) => {
                has_time = true;
                "%H"
            }
            ('h', 1 | 2) => {
                has_time = true;
                "%I"
            }
            ('m', 1 | 2) => {
                has_time = true;
                "%M"
            }
            ('s', 1 | 2) => {
                has_time = true;
                "%S"
            }
            ('S', 3) => "%3f",
            ('S', 6) => "%6f",
            ('S', 9) => "%9f",
            ('X' | 'x', 1 | 2) | ('Z', 1..=3) => {
                has_offset = true;
                "%z"
            }
            ('X' | 'x', 3) | ('Z', 5) => {
                has_offset = true;
                "%:z"
            }
            _ => {
                return Err(format!(
                    "unsupported pattern letters `{}` in {pattern:?}; supported: yyyy yy MM M MMM MMMM dd d DDD \
                     HH H hh h a mm m ss s SSS SSSSSS SSSSSSSSS XXX XX X xxx xx x Z ZZZZZ E EEE EEEE, 'text', [optional]",
                    c.to_string().repeat(n)
                ));
            }
        };
        out.push_str(spec);
        i += n;
    }
    Ok(Variant {
        chrono: out,
        has_offset,
        has_time,
    })
}

fn push_literal(out: &mut String, c: char) {
    if c == '%' {
        out.push_str("%%");
    } else {
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_micros()
    }

    fn zoned(tz: &str) -> TimestampOptions {
        TimestampOptions {
            time_zone: Some(tz.parse().unwrap()),
            format: None,
        }
    }

    #[test]
    fn zone_less_text_is_in_the_session_zone_with_spark_dst_rules() {
        let ny = zoned("America/New_York");
        // Standard time, summer time.
        assert_eq!(
            ny.parse_micros("2024-01-15 09:00:00", false),
            Some(micros("2024-01-15T14:00:00Z"))
        );
        assert_eq!(
            ny.parse_micros("2024-07-15T09:00:00", false),
            Some(micros("2024-07-15T13:00:00Z"))
        );
        // Gap: 02:30 does not exist on 2024-03-10; moved later by the gap (03:30 EDT).
        assert_eq!(
            ny.parse_micros("2024-03-10 02:30:00", false),
            Some(micros("2024-03-10T07:30:00Z"))
        );
        // Overlap: 01:30 happens twice on 2024-11-03; the earlier offset (EDT) wins.
        assert_eq!(
            ny.parse_micros("2024-11-03 01:30:00", false),
            Some(micros("2024-11-03T05:30:00Z"))
        );
        // Text with a zone ignores the session zone.
        assert_eq!(
            ny.parse_micros("2024-11-03T01:30:00Z", false),
            Some(micros("2024-11-03T01:30:00Z"))
        );
        assert_eq!(
            ny.parse_micros("2024-11-03T01:30:00-06:00", false),
            Some(micros("2024-11-03T07:30:00Z"))
        );
        // NTZ keeps the wall clock.
        assert_eq!(
            ny.parse_micros("2024-03-10 02:30:00", true),
            Some(micros("2024-03-10T02:30:00Z"))
        );
        // UTC by default; junk is None.
        let utc = TimestampOptions::default();
        assert_eq!(
            utc.parse_micros("2024-03-10 02:30:00", false),
            Some(micros("2024-03-10T02:30:00Z"))
        );
        assert_eq!(utc.parse_micros("yesterday", false), None);
        // Half-hour zones and a southern-hemisphere overlap.
        let adelaide = zoned("Australia/Adelaide");
        assert_eq!(
            adelaide.parse_micros("2024-04-07 02:30:00", false),
            Some(micros("2024-04-06T16:00:00Z"))
        );
    }

    #[test]
    fn spark_patterns() {
        let f = TimestampFormat::new("dd/MM/yyyy HH:mm[:ss][.SSS]").unwrap();
        let opts = TimestampOptions {
            time_zone: Some("Europe/Paris".parse().unwrap()),
            format: Some(f),
        };
        assert_eq!(
            opts.parse_micros("03/06/2024 14:05", false),
            Some(micros("2024-06-03T12:05:00Z"))
        );
        assert_eq!(
            opts.parse_micros("03/06/2024 14:05:07.250", false),
            Some(micros("2024-06-03T12:05:07.250Z"))
        );
        assert_eq!(opts.parse_micros("2024-06-03T14:05:00", false), None);
        let f = TimestampFormat::new("yyyy-MM-dd'T'HH:mm:ssXXX").unwrap();
        let opts = TimestampOptions {
            time_zone: None,
            format: Some(f),
        };
        assert_eq!(
            opts.parse_micros("2024-06-03T14:05:00+02:00", false),
            Some(micros("2024-06-03T12:05:00Z"))
        );
        assert_eq!(
            opts.parse_micros("2024-06-03T14:05:00Z", false),
            Some(micros("2024-06-03T14:05:00Z"))
        );
        let date_only = TimestampFormat::new("yyyyMMdd").unwrap();
        assert!(date_only.matches("20240603"));
        assert!(!date_only.matches("2024-06-03"));
        let e = TimestampFormat::new("yyyy-MM-dd VV").unwrap_err();
        assert!(e.contains("`VV`"), "{e}");
        assert!(TimestampFormat::new("yyyy-MM-dd[ HH").is_err());
    }
}
