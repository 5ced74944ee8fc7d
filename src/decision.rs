//! The outcome of a check, carrying everything HTTP headers need.

use std::time::Duration;

/// What a check decided, with the numbers a caller needs to answer it.
///
/// * [`is_allowed`](Decision::is_allowed): pass or reject;
/// * [`limit`](Decision::limit): the most requests that can pass at once
///   (`X-RateLimit-Limit`);
/// * [`remaining`](Decision::remaining): requests of cost 1 that could pass
///   right after this decision (`X-RateLimit-Remaining`);
/// * [`reset_after`](Decision::reset_after): time until the limiter is back
///   to `remaining == limit`, as if this key had never been seen
///   (`X-RateLimit-Reset`, as seconds from now);
/// * [`retry_after`](Decision::retry_after): on a denial, the time after
///   which a retry of the same cost would pass, if nothing else arrives in
///   between (`Retry-After`); zero when allowed;
/// * [`delay`](Decision::delay): for the leaky bucket in delay mode, how
///   long an admitted request must wait before it proceeds; zero otherwise.
///
/// # Examples
///
/// ```
/// use rategate::{ManualClock, Quota, RateLimiter, TokenBucket};
///
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::<TokenBucket, _>::with_clock(Quota::per_second(2)?, clock)?;
/// assert!(limiter.check().is_allowed());
/// assert!(limiter.check().is_allowed());
/// let denied = limiter.check();
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.remaining(), 0);
/// assert_eq!(denied.retry_after_secs(), 1); // 500 ms, rounded up for Retry-After
/// assert_eq!(denied.headers()[0], ("X-RateLimit-Limit", "2".to_string()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    allowed: bool,
    limit: u32,
    /// At most `limit`.
    remaining: u32,
    reset_after: u64,
    /// Zero when allowed.
    retry_after: u64,
    delay: u64,
}

impl Decision {
    /// An admitted request.
    #[inline]
    pub(crate) fn allow(limit: u32, remaining: u32, reset_after: u64) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: 0,
            delay: 0,
        }
    }

    /// A rejected request.
    #[inline]
    pub(crate) fn deny(limit: u32, remaining: u32, reset_after: u64, retry_after: u64) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_after,
            retry_after,
            delay: 0,
        }
    }

    /// A decision from its fields, as a Redis script returns them.
    #[cfg(feature = "redis")]
    pub(crate) fn from_parts(
        allowed: bool,
        limit: u32,
        remaining: u32,
        reset_after: u64,
        retry_after: u64,
        delay: u64,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            reset_after,
            retry_after,
            delay,
        }
    }

    /// The same decision, admitted after waiting `delay` nanoseconds.
    #[inline]
    #[allow(dead_code)] // used by the leaky bucket's delay mode
    pub(crate) fn with_delay(self, delay: u64) -> Decision {
        Decision { delay, ..self }
    }

    /// Whether the request may pass.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The most requests that can pass at once.
    #[inline]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Requests of cost 1 that could pass right after this decision.
    #[inline]
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Time until the limiter is as if this key had never been seen.
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after)
    }

    /// [`reset_after`](Decision::reset_after) in nanoseconds.
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        self.reset_after
    }

    /// On a denial, the time after which the same request would pass;
    /// zero when allowed.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after)
    }

    /// [`retry_after`](Decision::retry_after) in nanoseconds.
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        self.retry_after
    }

    /// How long an admitted request must wait before proceeding (the leaky
    /// bucket's delay mode); zero otherwise.
    #[inline]
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay)
    }

    /// [`delay`](Decision::delay) in nanoseconds.
    #[inline]
    pub fn delay_nanos(&self) -> u64 {
        self.delay
    }

    /// `Retry-After` in whole seconds, rounded up so that a client that
    /// waits this long will pass; zero when allowed.
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.div_ceil(1_000_000_000)
    }

    /// `X-RateLimit-Reset` in whole seconds from now, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        self.reset_after.div_ceil(1_000_000_000)
    }

    /// The response headers for this decision: `X-RateLimit-Limit`,
    /// `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds from now), and
    /// on a denial `Retry-After` (seconds), to send with HTTP 429.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("X-RateLimit-Limit", self.limit.to_string()),
            ("X-RateLimit-Remaining", self.remaining.to_string()),
            ("X-RateLimit-Reset", self.reset_after_secs().to_string()),
        ];
        if !self.allowed {
            headers.push(("Retry-After", self.retry_after_secs().to_string()));
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_fields() {
        let d = Decision::allow(10, 7, 2_500_000_000);
        assert!(d.is_allowed());
        assert_eq!((d.limit(), d.remaining()), (10, 7));
        assert_eq!(d.reset_after(), Duration::from_millis(2500));
        assert_eq!(d.reset_after_secs(), 3);
        assert_eq!(d.retry_after(), Duration::ZERO);
        assert_eq!(d.retry_after_secs(), 0);
        assert_eq!(d.delay(), Duration::ZERO);
        assert_eq!(
            d.headers(),
            vec![
                ("X-RateLimit-Limit", "10".to_string()),
                ("X-RateLimit-Remaining", "7".to_string()),
                ("X-RateLimit-Reset", "3".to_string()),
            ]
        );
    }

    #[test]
    fn denied_fields_round_retry_after_up() {
        let d = Decision::deny(5, 0, 4_000_000_000, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 1);
        assert_eq!(d.retry_after_secs(), 1);
        assert_eq!(d.reset_after_secs(), 4);
        assert_eq!(d.headers()[3], ("Retry-After", "1".to_string()));
        let exact = Decision::deny(5, 0, 0, 2_000_000_000);
        assert_eq!(exact.retry_after_secs(), 2);
    }

    #[test]
    fn delay_is_carried() {
        let d = Decision::allow(3, 1, 10).with_delay(250);
        assert_eq!(d.delay_nanos(), 250);
        assert_eq!(d.delay(), Duration::from_nanos(250));
        assert!(d.is_allowed());
    }
}
