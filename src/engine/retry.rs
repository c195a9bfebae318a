//! Retries with exponential backoff for transient source and sink errors.
//!
//! A listing that fails because a mount blinked, or a Delta commit that fails
//! on an I/O error, is retried `retry_attempts` times (pipeline key
//! `[flow.health]`), waiting `retry_backoff`, then twice that, ... (at most
//! [`MAX_BACKOFF`]) before the error stops the flow and becomes a health state
//! (`source_unavailable`, `sink_unavailable`). Only errors that say a retry can
//! help ([`Error::retryable`]) and that come from the source or the sink are
//! retried; a schema change, a bad pipeline or a corrupt checkpoint fail at once.
//!
//! Retrying is safe at both call sites: listing reads only, and a sink write
//! carries the batch's Delta application transaction, so a write that landed
//! before its error was reported is skipped on the next attempt.
//!
//! Usage at a call site:
//!
//! ```text
//! let mut retry = Retry::new(&spec.health, "list the source");
//! let listing = loop {
//!     match src.list(now) {
//!         Ok(l) => break l,
//!         Err(e) if retry.again(&e).await => continue,
//!         Err(e) => return Err(e),
//!     }
//! };
//! ```

use std::time::Duration;

use crate::error::Error;
use crate::spec::HealthConfig;

/// Longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The retry budget of one operation.
#[derive(Debug, Clone)]
pub struct Retry {
    what: &'static str,
    attempts: u32,
    backoff: Duration,
    done: u32,
}

impl Retry {
    pub fn new(config: &HealthConfig, what: &'static str) -> Self {
        Retry {
            what,
            attempts: config.retry_attempts,
            backoff: config.retry_backoff,
            done: 0,
        }
    }

    /// Whether `error` is one a retry can cure: retryable and from the source or the sink.
    pub fn transient(error: &Error) -> bool {
        error.retryable() && error.kind().is_transient()
    }

    /// The wait before retry number `n` (0-based).
    pub fn delay(&self, n: u32) -> Duration {
        self.backoff
            .saturating_mul(2u32.saturating_pow(n))
            .min(MAX_BACKOFF)
    }

    /// Retries made so far.
    pub fn retries(&self) -> u32 {
        self.done
    }

    /// After a failure: waits and returns `true` when the operation should be tried
    /// again, `false` when the error must stop the flow.
    pub async fn again(&mut self, error: &Error) -> bool {
        if !Self::transient(error) || self.done >= self.attempts {
            if self.done > 0 {
                tracing::error!(what = self.what, retries = self.done, error = %error, "giving up after retries");
            }
            return false;
        }
        let wait = self.delay(self.done);
        self.done += 1;
        tracing::warn!(
            what = self.what,
            attempt = self.done,
            of = self.attempts,
            wait_ms = wait.as_millis() as u64,
            error = %error,
            "transient error; retrying with backoff"
        );
        tokio::time::sleep(wait).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(attempts: u32, backoff_ms: u64) -> HealthConfig {
        HealthConfig {
            retry_attempts: attempts,
            retry_backoff: Duration::from_millis(backoff_ms),
            ..Default::default()
        }
    }

    fn source_error() -> Error {
        Error::SourceIo {
            path: "/x".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = Retry::new(&cfg(10, 1000), "x");
        assert_eq!(r.delay(0), Duration::from_secs(1));
        assert_eq!(r.delay(1), Duration::from_secs(2));
        assert_eq!(r.delay(3), Duration::from_secs(8));
        assert_eq!(r.delay(9), MAX_BACKOFF);
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_the_budget_is_spent() {
        let mut r = Retry::new(&cfg(2, 5), "list");
        let start = std::time::Instant::now();
        let e = source_error();
        assert!(r.again(&e).await);
        assert!(r.again(&e).await);
        assert!(!r.again(&e).await);
        assert_eq!(r.retries(), 2);
        assert!(
            start.elapsed() >= Duration::from_millis(15),
            "waited 5 + 10 ms"
        );
    }

    #[tokio::test]
    async fn permanent_errors_fail_at_once() {
        let mut r = Retry::new(&cfg(5, 100), "list");
        let e = Error::SchemaMismatch {
            flow: "f".into(),
            message: "no".into(),
        };
        assert!(!r.again(&e).await);
        let changed = Error::SchemaChanged {
            flow: "f".into(),
            batch_id: 0,
            added: vec![],
            file: String::new(),
            version: 1,
        };
        assert!(changed.retryable());
        assert!(!r.again(&changed).await, "a schema change is not transient");
        assert_eq!(r.retries(), 0);
    }
}
