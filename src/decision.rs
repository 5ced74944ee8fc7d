//! The outcome of a check, carrying everything HTTP headers need.

use crate::algorithm::Divisor;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// What a check decided, with the numbers a caller needs to answer it.
///
/// * [`is_allowed`](Decision::is_allowed): pass or reject;
/// * [`limit`](Decision::limit): the most requests that can pass at once
///   (the capacity: the burst for the buckets; `x-ratelimit-limit` is the
///   quota's limit instead, see [`headers`](Decision::headers));
/// * [`remaining`](Decision::remaining): requests of cost 1 that could pass
///   right after this decision (`x-ratelimit-remaining`);
/// * [`reset_after`](Decision::reset_after): time until the limiter is back
///   to `remaining == limit`, as if this key had never been seen
///   (`x-ratelimit-reset`);
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
/// // Lower-case names, usable with `http::HeaderName::from_static`.
/// let headers = denied.headers(&limiter.quota());
/// assert_eq!(headers[0], ("x-ratelimit-limit", "2".to_string()));
/// assert!(headers.contains(&("retry-after", "1".to_string())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Cost
///
/// A check fills a `Decision` with what its algorithm already computed;
/// anything that needs more work is derived when asked for. The token
/// bucket's `remaining` is a division (room left / emission interval), done
/// by [`remaining`](Decision::remaining) rather than by the check, so a
/// caller that only asks [`is_allowed`](Decision::is_allowed) never pays for
/// it; likewise a leaky bucket's denial leaves its retry and reset times
/// (two divisions by the drain rate) and its `remaining` (the drain since
/// the last admission) to [`retry_after`](Decision::retry_after),
/// [`reset_after`](Decision::reset_after) and
/// [`remaining`](Decision::remaining), its admission of a cost leaves its
/// `remaining` and reset time (a division by the drain rate) to them, and a
/// sliding window counter's denial in the stored window leaves all three (a
/// division by a count) to them. Every accessor returns the same
/// value whenever it is called, and two decisions are equal when every
/// accessor agrees.
///
/// What that saves a caller that only asks `is_allowed`
/// (`cargo bench --bench direct`, rows `direct_deny/*/manual` against
/// `manual_fields`, which reads every field; one run on a 2-vCPU VM): the
/// sliding window counter's denial 5.6 ns against 48.8, the leaky
/// bucket's 3.1 against 13.3, the fixed window's 4.7 against 11.1.
#[derive(Clone, Copy)]
pub struct Decision {
    allowed: bool,
    /// Which fields are derived when asked (see [`Lazy`]).
    lazy: Lazy,
    limit: u32,
    /// `remaining` before the division by `per`: nanoseconds of room for the
    /// token bucket, a count (with `per` one) for the others. The quotient
    /// is at most `limit`.
    room: u64,
    per: Divisor,
    reset_after: u64,
    /// When allowed: the delay before the request proceeds (leaky bucket,
    /// delay mode). When denied: the retry time. The two never coexist.
    wait: u64,
}

/// A decision whose fields are derived when asked, from what the check kept.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lazy {
    /// Every field is stored (`remaining` may still be a division).
    No,
    /// A leaky bucket's denial: `room` holds the cost less the burst in
    /// thousandths (an `i32`), `per` the drain rate, `reset_after` the
    /// check's reading and `wait` the slot word it was denied on (see
    /// [`leaky_denial_times`](crate::algorithm::leaky_denial_times) and
    /// [`leaky_denial_remaining`](crate::algorithm::leaky_denial_remaining)).
    LeakyDenial,
    /// A leaky bucket's admission of a cost: `room` holds the slot word
    /// it stored, `per` the drain rate and `reset_after` the check's reading
    /// (see [`leaky_admission_fields`](crate::algorithm::leaky_admission_fields));
    /// `wait` is the delay, as for any admission.
    LeakyAdmission,
    /// A sliding window counter's denial in the stored window: `room`
    /// holds the cost (low 32 bits) and the counter's count width (high),
    /// `per` the division by its period, `reset_after` the check's reading
    /// and `wait` the state word it was denied on (see
    /// [`counter_denial`](crate::algorithm::counter_denial)).
    CounterDenial,
}

impl Decision {
    /// An admitted request, as a limit of your own decides it (a
    /// [`Limit`](crate::policy::Limit) or an HTTP backend): at most `limit`
    /// requests pass at once, `remaining` (at most `limit`) could pass
    /// right after this one, and the limit is full again after
    /// `reset_after`.
    ///
    /// ```
    /// use rategate::Decision;
    /// use std::time::Duration;
    ///
    /// let d = Decision::allowed(10, 7, Duration::from_secs(3));
    /// assert!(d.is_allowed());
    /// assert_eq!((d.limit(), d.remaining(), d.reset_after_secs()), (10, 7, 3));
    /// ```
    pub fn allowed(limit: u32, remaining: u32, reset_after: Duration) -> Decision {
        let nanos = crate::clock::duration_to_nanos(reset_after);
        Decision::allow(limit, remaining.min(limit), nanos)
    }

    /// A refused request, as a limit of your own decides it: as
    /// [`allowed`](Decision::allowed), and a retry of the same cost passes
    /// after `retry_after` (`Retry-After`).
    ///
    /// ```
    /// use rategate::Decision;
    /// use std::time::Duration;
    ///
    /// let d = Decision::denied(10, 0, Duration::from_secs(60), Duration::from_millis(1500));
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after_secs(), 2);
    /// ```
    pub fn denied(
        limit: u32,
        remaining: u32,
        reset_after: Duration,
        retry_after: Duration,
    ) -> Decision {
        Decision::deny(
            limit,
            remaining.min(limit),
            crate::clock::duration_to_nanos(reset_after),
            crate::clock::duration_to_nanos(retry_after),
        )
    }

    /// An admitted request.
    #[inline]
    pub(crate) fn allow(limit: u32, remaining: u32, reset_after: u64) -> Decision {
        Decision::allow_per(limit, u64::from(remaining), Divisor::ONE, reset_after)
    }

    /// An admitted request whose `remaining` is `room / per` (computed when
    /// asked for).
    #[inline]
    pub(crate) fn allow_per(limit: u32, room: u64, per: Divisor, reset_after: u64) -> Decision {
        Decision {
            allowed: true,
            lazy: Lazy::No,
            limit,
            room,
            per,
            reset_after,
            wait: 0,
        }
    }

    /// A rejected request.
    #[inline]
    pub(crate) fn deny(limit: u32, remaining: u32, reset_after: u64, retry_after: u64) -> Decision {
        Decision::deny_per(
            limit,
            u64::from(remaining),
            Divisor::ONE,
            reset_after,
            retry_after,
        )
    }

    /// A rejected request whose `remaining` is `room / per`.
    #[inline]
    pub(crate) fn deny_per(
        limit: u32,
        room: u64,
        per: Divisor,
        reset_after: u64,
        retry_after: u64,
    ) -> Decision {
        Decision {
            allowed: false,
            lazy: Lazy::No,
            limit,
            room,
            per,
            reset_after,
            wait: retry_after,
        }
    }

    /// A leaky bucket's denial: `shift` the cost less the burst in
    /// thousandths, `word` the slot denied on, `now` the reading,
    /// `per_rate` the drain rate. `remaining`, `reset_after` and
    /// `retry_after` are derived when asked, with the values the check
    /// itself would have computed.
    #[inline]
    pub(crate) fn deny_leaky(
        limit: u32,
        shift: i32,
        word: u64,
        now: u64,
        per_rate: Divisor,
    ) -> Decision {
        Decision {
            allowed: false,
            lazy: Lazy::LeakyDenial,
            limit,
            room: u64::from(shift as u32),
            per: per_rate,
            reset_after: now,
            wait: word,
        }
    }

    /// A leaky bucket's admission (of a cost, not a probe) whose `remaining`
    /// and `reset_after` are derived when asked from the slot `word` it
    /// stored, the reading `now` and the drain rate `per_rate`; a delay is
    /// added with [`with_delay`](Self::with_delay).
    #[inline]
    pub(crate) fn allow_leaky(limit: u32, word: u64, now: u64, per_rate: Divisor) -> Decision {
        Decision {
            allowed: true,
            lazy: Lazy::LeakyAdmission,
            limit,
            room: word,
            per: per_rate,
            reset_after: now,
            wait: 0,
        }
    }

    /// A lazy leaky admission's `(remaining, reset_after)`.
    fn leaky_admission(&self) -> (u32, u64) {
        crate::algorithm::leaky_admission_fields(self.room, self.reset_after, self.per, self.limit)
    }

    /// A sliding window counter's denial whose `remaining`, `reset_after`
    /// and `retry_after` are derived when asked, by the counter of `limit`,
    /// `count_bits` and the period `per_period` divides by, deciding `cost`
    /// on `word` at `now` again with every field computed.
    #[inline]
    pub(crate) fn deny_counter(
        limit: u32,
        cost: u32,
        count_bits: u32,
        per_period: Divisor,
        now: u64,
        word: u64,
    ) -> Decision {
        Decision {
            allowed: false,
            lazy: Lazy::CounterDenial,
            limit,
            room: u64::from(count_bits) << 32 | u64::from(cost),
            per: per_period,
            reset_after: now,
            wait: word,
        }
    }

    /// A lazy counter denial, computed whole.
    fn counter_denial(&self) -> Decision {
        crate::algorithm::counter_denial(
            self.limit,
            self.room as u32,
            (self.room >> 32) as u32,
            self.per,
            self.reset_after,
            self.wait,
        )
    }

    /// A leaky denial's `(reset_after, retry_after)`.
    #[inline]
    fn leaky_times(&self) -> (u64, u64) {
        crate::algorithm::leaky_denial_times(
            self.wait,
            self.room as u32 as i32,
            self.reset_after,
            self.per,
        )
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
            lazy: Lazy::No,
            limit,
            room: u64::from(remaining),
            per: Divisor::ONE,
            reset_after,
            wait: if allowed { delay } else { retry_after },
        }
    }

    /// The same decision, admitted after waiting `delay` nanoseconds.
    #[inline]
    #[allow(dead_code)] // used by the leaky bucket's delay mode
    pub(crate) fn with_delay(self, delay: u64) -> Decision {
        debug_assert!(self.allowed, "only an admitted request is delayed");
        Decision {
            wait: if self.allowed { delay } else { self.wait },
            ..self
        }
    }

    /// Every field as the accessors report it: what equality, hashing and
    /// `Debug` look at.
    fn fields(&self) -> (bool, u32, u32, u64, u64, u64) {
        (
            self.allowed,
            self.limit,
            self.remaining(),
            self.reset_after_nanos(),
            self.retry_after_nanos(),
            self.delay_nanos(),
        )
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
        match self.lazy {
            Lazy::No => {}
            Lazy::LeakyDenial => {
                return crate::algorithm::leaky_denial_remaining(
                    self.wait,
                    self.reset_after,
                    self.per,
                    self.limit,
                );
            }
            Lazy::CounterDenial => return self.counter_denial().remaining(),
            Lazy::LeakyAdmission => return self.leaky_admission().0,
        }
        // At most `limit` by construction; saturate rather than wrap if an
        // algorithm ever broke that.
        u32::try_from(self.per.divide(self.room)).unwrap_or(u32::MAX)
    }

    /// Time until the limiter is as if this key had never been seen.
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_nanos())
    }

    /// [`reset_after`](Decision::reset_after) in nanoseconds.
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        match self.lazy {
            Lazy::No => self.reset_after,
            Lazy::LeakyDenial => self.leaky_times().0,
            Lazy::CounterDenial => self.counter_denial().reset_after,
            Lazy::LeakyAdmission => self.leaky_admission().1,
        }
    }

    /// On a denial, the time after which the same request would pass;
    /// zero when allowed.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_nanos())
    }

    /// [`retry_after`](Decision::retry_after) in nanoseconds.
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        if self.allowed {
            return 0;
        }
        match self.lazy {
            Lazy::No => self.wait,
            Lazy::LeakyDenial => self.leaky_times().1,
            Lazy::CounterDenial => self.counter_denial().wait,
            // Admissions returned above.
            Lazy::LeakyAdmission => 0,
        }
    }

    /// How long an admitted request must wait before proceeding (the leaky
    /// bucket's delay mode); zero otherwise.
    #[inline]
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_nanos())
    }

    /// [`delay`](Decision::delay) in nanoseconds.
    #[inline]
    pub fn delay_nanos(&self) -> u64 {
        if self.allowed { self.wait } else { 0 }
    }

    /// `Retry-After` in whole seconds, rounded up so that a client that
    /// waits this long will pass, and at least 1 on a denial (a client told
    /// 0 would retry at once and be denied again); zero when allowed.
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            0
        } else {
            self.retry_after_nanos().div_ceil(1_000_000_000).max(1)
        }
    }

    /// `x-ratelimit-reset` in whole seconds from now, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        self.reset_after_nanos().div_ceil(1_000_000_000)
    }

    /// The response headers for this decision made under `quota`, with
    /// lower-case names (as `http::HeaderName::from_static` requires) and
    /// the values the HTTP layer sends: `x-ratelimit-limit` (the quota's
    /// limit per its period: 100 for `100/s burst=10`),
    /// `x-ratelimit-remaining`, `x-ratelimit-reset` (the Unix time in whole
    /// seconds when the limiter is back to full capacity, the layer's
    /// default; [`RateLimitFields::reset_value`](crate::headers::RateLimitFields::reset_value)
    /// gives seconds from now), `x-ratelimit-used`, the IETF draft's `ratelimit-policy` and
    /// `ratelimit` (policy name `default`), and on a denial `retry-after`
    /// (seconds, at least 1). [`RateLimitFields`](crate::headers::RateLimitFields)
    /// says what each means per algorithm, and gives other policy names.
    ///
    /// ```
    /// use rategate::{Quota, RateLimiter, TokenBucket};
    ///
    /// let quota: Quota = "100/s burst=10".parse()?;
    /// let limiter = RateLimiter::<TokenBucket>::new(quota)?;
    /// let headers = limiter.check().headers(&quota);
    /// assert_eq!(headers[0], ("x-ratelimit-limit", "100".to_string()));
    /// assert_eq!(headers[1], ("x-ratelimit-remaining", "9".to_string()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn headers(&self, quota: &crate::Quota) -> Vec<(&'static str, String)> {
        use crate::headers::*;
        let fields = RateLimitFields::new(self, quota);
        let unix_now = crate::headers::unix_now_nanos();
        let mut headers = vec![
            (X_RATELIMIT_LIMIT, fields.limit().to_string()),
            (X_RATELIMIT_REMAINING, fields.remaining().to_string()),
            (
                X_RATELIMIT_RESET,
                fields
                    .reset_value(ResetFormat::UnixSeconds, unix_now)
                    .to_string(),
            ),
            (X_RATELIMIT_USED, fields.used().to_string()),
            (RATELIMIT_POLICY, fields.policy_item("default")),
            (RATELIMIT, fields.state_item("default")),
        ];
        if let Some(secs) = fields.retry_after_secs() {
            headers.push((RETRY_AFTER, secs.to_string()));
        }
        headers
    }
}

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.fields() == other.fields()
    }
}

impl Eq for Decision {}

impl Hash for Decision {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fields().hash(state);
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("reset_after", &self.reset_after_nanos())
            .field("retry_after", &self.retry_after_nanos())
            .field("delay", &self.delay_nanos())
            .finish()
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
    }

    #[test]
    fn denied_fields_round_retry_after_up() {
        let d = Decision::deny(5, 0, 4_000_000_000, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 1);
        assert_eq!(d.retry_after_secs(), 1);
        assert_eq!(d.reset_after_secs(), 4);
        let exact = Decision::deny(5, 0, 0, 2_000_000_000);
        assert_eq!(exact.retry_after_secs(), 2);
        // A denial never says "retry after 0".
        assert_eq!(Decision::deny(5, 0, 0, 0).retry_after_secs(), 1);
    }

    #[test]
    fn headers_report_the_quota_limit_not_a_smaller_burst() {
        let quota: crate::Quota = "100/s burst=10".parse().unwrap();
        let d = Decision::deny(10, 0, 1_000_000_000, 10_000_000);
        let unix_secs = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        let before = unix_secs();
        let mut headers = d.headers(&quota);
        let after = unix_secs();
        // The reset as the layer writes it by default: the Unix time, in
        // whole seconds rounded up, one second from now.
        let (name, reset) = headers.remove(2);
        let reset: u64 = reset.parse().unwrap();
        assert_eq!(name, "x-ratelimit-reset");
        assert!((before + 1..=after + 2).contains(&reset), "{reset}");
        assert_eq!(
            headers,
            vec![
                ("x-ratelimit-limit", "100".to_string()),
                ("x-ratelimit-remaining", "0".to_string()),
                ("x-ratelimit-used", "10".to_string()),
                ("ratelimit-policy", r#""default";q=100;w=1"#.to_string()),
                ("ratelimit", r#""default";r=0;t=1"#.to_string()),
                ("retry-after", "1".to_string()),
            ]
        );
    }

    #[test]
    fn a_burst_above_the_limit_advertises_the_capacity_over_its_refill_time() {
        // A token bucket `1r/s burst=5`, four tokens left.
        let quota: crate::Quota = "1r/s burst=5".parse().unwrap();
        let d = Decision::allow(5, 4, 1_000_000_000);
        let headers = d.headers(&quota);
        assert_eq!(headers[0], ("x-ratelimit-limit", "5".to_string()));
        assert_eq!(headers[1], ("x-ratelimit-remaining", "4".to_string()));
        assert_eq!(headers[3], ("x-ratelimit-used", "1".to_string()));
        assert_eq!(
            headers[4],
            ("ratelimit-policy", r#""default";q=5;w=5"#.to_string())
        );
        assert_eq!(
            headers[5],
            ("ratelimit", r#""default";r=4;t=1"#.to_string())
        );
        // A leaky bucket `10r/s burst=20`: capacity 21 over 2.1 s, said as
        // 30 per 3 s (rounded down to stay within the rate).
        let nginx: crate::Quota = "10r/s burst=20".parse().unwrap();
        let d = Decision::allow(21, 21, 0);
        let headers = d.headers(&nginx);
        assert_eq!(headers[0], ("x-ratelimit-limit", "21".to_string()));
        assert_eq!(
            headers[4],
            ("ratelimit-policy", r#""default";q=30;w=3"#.to_string())
        );
    }

    #[test]
    fn remaining_is_divided_when_asked_and_equality_compares_what_accessors_say() {
        use crate::algorithm::Divisor;
        // 2.5 intervals of 40 ns of room: 2 requests.
        let lazy = Decision::allow_per(10, 100, Divisor::new(40), 7);
        assert_eq!(lazy.remaining(), 2);
        let eager = Decision::allow(10, 2, 7);
        assert_eq!(lazy, eager);
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        assert_eq!(state.hash_one(lazy), state.hash_one(eager));
        assert_ne!(lazy, Decision::allow(10, 3, 7));
        assert_eq!(format!("{lazy:?}"), format!("{eager:?}"));
        assert!(format!("{lazy:?}").contains("remaining: 2"));
        // Retry and delay share a field but never leak into each other.
        let denied = Decision::deny_per(10, 39, Divisor::new(40), 5, 40);
        assert_eq!(
            (
                denied.remaining(),
                denied.retry_after_nanos(),
                denied.delay_nanos()
            ),
            (0, 40, 0)
        );
        let delayed = Decision::allow(3, 1, 10).with_delay(250);
        assert_eq!(
            (delayed.retry_after_nanos(), delayed.delay_nanos()),
            (0, 250)
        );
    }

    #[test]
    fn delay_is_carried() {
        let d = Decision::allow(3, 1, 10).with_delay(250);
        assert_eq!(d.delay_nanos(), 250);
        assert_eq!(d.delay(), Duration::from_nanos(250));
        assert!(d.is_allowed());
    }
}
