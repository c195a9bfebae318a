//! Human-readable durations ("10 seconds", "5 min", "250ms") and sizes
//! ("256 MiB", "1 GB", "4096") as they appear in pipeline files.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// A duration written as a human string, e.g. `"10 seconds"`, `"2 minutes"`, `"500 ms"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// Parses "10 seconds", "10s", "1 minute 30 seconds", "0". Units: ms, s/sec/second(s),
    /// m/min/minute(s), h/hour(s), d/day(s).
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        if trimmed == "0" {
            return Ok(HumanDuration(Duration::ZERO));
        }
        humantime::parse_duration(trimmed)
            .map(HumanDuration)
            .map_err(|e| {
                format!(
                    "invalid duration {text:?} ({e}); write a number and a unit, e.g. \"10 seconds\", \"5 minutes\", \"500 ms\""
                )
            })
    }

    pub fn as_millis(&self) -> i64 {
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        HumanDuration::parse(&text).map_err(de::Error::custom)
    }
}

/// A size in bytes written as a human string (`"256 MiB"`, `"1 GB"`) or a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse::<bytesize::ByteSize>()
            .map(|b| ByteSize(b.as_u64()))
            .map_err(|e| {
                format!(
                    "invalid size {text:?} ({e}); write a number and a unit, e.g. \"256 MiB\", \"1 GB\", \"4096\""
                )
            })
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", bytesize::ByteSize::b(self.0).display().iec())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"256 MiB\" or a number of bytes")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            HumanDuration::parse("10 seconds").unwrap().0,
            Duration::from_secs(10)
        );
        assert_eq!(
            HumanDuration::parse("5 minutes").unwrap().0,
            Duration::from_secs(300)
        );
        assert_eq!(
            HumanDuration::parse("500ms").unwrap().0,
            Duration::from_millis(500)
        );
        assert_eq!(HumanDuration::parse("0").unwrap().0, Duration::ZERO);
        assert!(
            HumanDuration::parse("ten seconds")
                .unwrap_err()
                .contains("e.g.")
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(ByteSize::parse("256 MiB").unwrap().0, 256 * 1024 * 1024);
        assert_eq!(ByteSize::parse("1 GB").unwrap().0, 1_000_000_000);
        assert_eq!(ByteSize::parse("4096").unwrap().0, 4096);
        assert!(ByteSize::parse("lots").is_err());
    }
}
