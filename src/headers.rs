//! Rate-limit header fields: their names, and the values one decision under
//! one quota gives them. Pure text, no HTTP types and no feature:
//! [`Decision::headers`] and the HTTP layer both write what
//! [`RateLimitFields`] computes, so they send the same values.
//!
//! The IETF fields follow draft-ietf-httpapi-ratelimit-headers-11 (May
//! 2026): `RateLimit-Policy: "name";q=100;w=60` advertises a policy (quota
//! `q` per window `w` seconds) and `RateLimit: "name";r=50;t=30` its state
//! (`r` units remaining, `t` seconds until the quota resets). Both are
//! Structured Field lists, one item per policy.

use crate::{Decision, Quota};

/// `x-ratelimit-limit`: the quota's limit per its period (`100` for
/// `100/s burst=10`), as GitHub and most APIs send it; the capacity where
/// the burst is larger (see [`RateLimitFields`]).
pub const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
/// `x-ratelimit-remaining`: requests of cost 1 that could pass right after
/// this one.
pub const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
/// `x-ratelimit-reset`: when the limiter is back to full capacity, as Unix
/// seconds (GitHub's convention) or seconds from now ([`ResetFormat`]).
pub const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";
/// `x-ratelimit-used`: the part of the capacity in use now (capacity minus
/// remaining).
pub const X_RATELIMIT_USED: &str = "x-ratelimit-used";
/// `ratelimit`: the IETF draft's per-policy state, `"name";r=50;t=30`.
pub const RATELIMIT: &str = "ratelimit";
/// `ratelimit-policy`: the IETF draft's policy list, `"name";q=100;w=60`.
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// `retry-after`: on a denial, whole seconds to wait, rounded up, never 0.
pub const RETRY_AFTER: &str = "retry-after";

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The Unix time now in nanoseconds, for a Unix-time reset. A clock set
/// before 1970 gives 0: a reset "in the past" rather than a panic.
pub(crate) fn unix_now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// How `x-ratelimit-reset` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResetFormat {
    /// The Unix time, in whole seconds rounded up, at which the limiter is
    /// back to full capacity (GitHub, Twitter). The layer's default.
    #[default]
    UnixSeconds,
    /// Whole seconds from now, rounded up.
    DeltaSeconds,
}

/// The header values of one decision under one quota.
///
/// What each field means depends on the algorithm, since only some have
/// windows:
///
/// | field | fixed window | sliding window log / counter | token bucket (GCRA) | leaky bucket |
/// |---|---|---|---|---|
/// | limit, `q` | requests per window | requests per sliding window | requests per period (the sustained rate; the burst is the capacity) | requests per period (the drain rate) |
/// | `w` | the window | the sliding window's length | the period over which `q` tokens are restored, one every period / `q` (no window exists) | the period over which `q` requests drain |
/// | remaining, `r` | left in this window | left in the sliding window now | whole tokens in the bucket | free places in the queue |
/// | used | counted in this window | counted in the sliding window (the counter: weighted) | tokens missing from a full bucket | places taken in the queue |
/// | reset, `t` | the window's end | when every counted request has left the sliding window (the counter: up to two windows) | when the bucket is full again | when the queue is empty |
///
/// `retry-after` is always the time until a retry of the same cost would
/// pass (for the token bucket usually much less than reset).
///
/// **A burst above the limit** (a token bucket `1r/s burst=5`, a leaky
/// bucket `10r/s burst=20`, whose capacity is `burst + 1`): `remaining`
/// can exceed the quota's limit, so the fields advertise the capacity
/// instead, over the time the rate takes to restore it: for `1r/s burst=5`
/// the limit is 5 and the policy `q=5;w=5`, never a remaining above the
/// advertised quota. Fixed and sliding windows ignore a burst; their
/// capacity is the limit.
///
/// # Examples
///
/// ```
/// use rategate::headers::RateLimitFields;
/// use rategate::{ManualClock, Quota, RateLimiter, TokenBucket};
///
/// let quota: Quota = "100/s burst=10".parse()?;
/// let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, ManualClock::new())?;
/// let fields = RateLimitFields::new(&limiter.check(), &quota);
/// assert_eq!(fields.limit(), 100); // the quota's limit, not the burst
/// assert_eq!(fields.remaining(), 9);
/// assert_eq!(fields.used(), 1);
/// assert_eq!(fields.policy_item("api"), r#""api";q=100;w=1"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitFields {
    limit: u32,
    remaining: u32,
    used: u32,
    reset_after_nanos: u64,
    /// `Some` on a denial.
    retry_after_nanos: Option<u64>,
    /// `q` per `w` seconds: the quota, rescaled when its period is not a
    /// whole number of seconds.
    window_quota: u64,
    window_secs: u64,
}

impl RateLimitFields {
    /// The fields of `decision`, made under `quota`.
    pub fn new(decision: &Decision, quota: &Quota) -> RateLimitFields {
        // The advertised policy: the quota, or where the decision's capacity
        // is larger (a burst above the limit), the capacity over the time
        // the quota's rate takes to restore it, so `remaining <= q` always.
        let capacity = decision.limit();
        let (limit, period) = if capacity > quota.limit() {
            let scaled = u128::from(quota.period_nanos()) * u128::from(capacity)
                / u128::from(quota.limit().max(1));
            (capacity, u64::try_from(scaled).unwrap_or(u64::MAX))
        } else {
            (quota.limit(), quota.period_nanos())
        };
        let period = period.max(1);
        let (window_quota, window_secs) = if period % NANOS_PER_SEC == 0 {
            (u64::from(limit), period / NANOS_PER_SEC)
        } else {
            // `w` is an integer: say how many fit in the next whole second
            // count (10 per 100 ms is q=100;w=1), rounded down so a client
            // pacing itself by it stays within the quota.
            let secs = period.div_ceil(NANOS_PER_SEC);
            let q = u128::from(limit) * u128::from(secs) * u128::from(NANOS_PER_SEC)
                / u128::from(period);
            (u64::try_from(q).unwrap_or(u64::MAX), secs)
        };
        RateLimitFields {
            limit,
            remaining: decision.remaining(),
            used: capacity.saturating_sub(decision.remaining()),
            reset_after_nanos: decision.reset_after_nanos(),
            retry_after_nanos: (!decision.is_allowed()).then_some(decision.retry_after_nanos()),
            window_quota,
            window_secs,
        }
    }

    /// `x-ratelimit-limit`: the quota's limit per its period, or the
    /// capacity where the burst is larger.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// `x-ratelimit-remaining` and `r`.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// `x-ratelimit-used`: capacity minus remaining.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Whole seconds until full capacity, rounded up (`t`, and
    /// `x-ratelimit-reset` as [`ResetFormat::DeltaSeconds`]).
    pub fn reset_secs(&self) -> u64 {
        self.reset_after_nanos.div_ceil(NANOS_PER_SEC)
    }

    /// `x-ratelimit-reset` in `format`, given the Unix time now in
    /// nanoseconds (ignored for [`ResetFormat::DeltaSeconds`]).
    pub fn reset_value(&self, format: ResetFormat, unix_now_nanos: u128) -> u64 {
        match format {
            ResetFormat::DeltaSeconds => self.reset_secs(),
            ResetFormat::UnixSeconds => {
                let at = unix_now_nanos.saturating_add(u128::from(self.reset_after_nanos));
                u64::try_from(at.div_ceil(u128::from(NANOS_PER_SEC))).unwrap_or(u64::MAX)
            }
        }
    }

    /// On a denial, `retry-after` in whole seconds, rounded up and at
    /// least 1 (a client told 0 retries at once and is denied again);
    /// `None` when allowed.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_nanos
            .map(|nanos| nanos.div_ceil(NANOS_PER_SEC).max(1))
    }

    /// The `ratelimit-policy` list item: `"name";q=100;w=60`.
    pub fn policy_item(&self, name: &str) -> String {
        let mut item = sf_string(name);
        item.put(b";q=");
        write_u64(&mut item, self.window_quota);
        item.put(b";w=");
        write_u64(&mut item, self.window_secs);
        item
    }

    /// The `ratelimit` list item: `"name";r=50;t=30`.
    pub fn state_item(&self, name: &str) -> String {
        let mut item = String::with_capacity(name.len() + 16);
        self.write_state_item(&mut item, name);
        item
    }

    /// Writes [`state_item`](Self::state_item) to `out`, allocating
    /// nothing.
    pub(crate) fn write_state_item(&self, out: &mut impl AsciiSink, name: &str) {
        write_sf_string(out, name);
        self.write_state_params(out);
    }

    /// Writes the state item's parameters, `;r=50;t=30`.
    pub(crate) fn write_state_params(&self, out: &mut impl AsciiSink) {
        out.put(b";r=");
        out.put_u64(u64::from(self.remaining));
        out.put(b";t=");
        out.put_u64(self.reset_secs());
    }
}

/// Where header text is written: a `String`, or the layer's response
/// buffer. Everything written is ASCII.
pub(crate) trait AsciiSink {
    /// Appends `ascii`.
    fn put(&mut self, ascii: &[u8]);

    /// Appends `n` in decimal.
    fn put_u64(&mut self, n: u64) {
        write_u64(self, n);
    }
}

impl AsciiSink for String {
    fn put(&mut self, ascii: &[u8]) {
        // ASCII is UTF-8; anything else (never written) is dropped.
        self.push_str(std::str::from_utf8(ascii).unwrap_or_default());
    }
}

/// `name` as a Structured Field string (RFC 8941 section 3.3.3): quoted,
/// with `"` and `\` escaped; characters outside printable ASCII, which a
/// string cannot hold, become `_`.
fn sf_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    write_sf_string(&mut out, name);
    out
}

/// Writes `name` as [`sf_string`] would give it, allocating nothing.
pub(crate) fn write_sf_string(out: &mut impl AsciiSink, name: &str) {
    out.put(b"\"");
    // Runs of characters that need no escape are written at once.
    let mut plain = 0;
    for (at, c) in name.char_indices() {
        let replacement: &[u8] = match c {
            '"' => b"\\\"",
            '\\' => b"\\\\",
            ' '..='~' => continue,
            _ => b"_",
        };
        out.put(&name.as_bytes()[plain..at]);
        out.put(replacement);
        plain = at + c.len_utf8();
    }
    out.put(&name.as_bytes()[plain..]);
    out.put(b"\"");
}

/// Two decimal digits for each of 0..100: `00`, `01`, ..., `99`.
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// How many decimal digits `n` has.
pub(crate) fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Writes `n` in decimal over the whole of `out`, which must be
/// [`decimal_len(n)`](decimal_len) bytes long (a longer one keeps the
/// leading zeros). Two digits per division.
pub(crate) fn format_u64(mut n: u64, out: &mut [u8]) {
    let mut at = out.len();
    while n >= 10 && at >= 2 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        out[at] = PAIRS[pair];
        out[at + 1] = PAIRS[pair + 1];
    }
    // An odd digit left, or the number 0.
    if (n > 0 || at == out.len()) && at >= 1 {
        at -= 1;
        out[at] = b'0' + (n % 10) as u8;
    }
    for b in &mut out[..at] {
        *b = b'0';
    }
}

/// Writes `n` in decimal without the formatting machinery.
pub(crate) fn write_u64(out: &mut (impl AsciiSink + ?Sized), n: u64) {
    let mut digits = [0u8; 20];
    let len = decimal_len(n);
    format_u64(n, &mut digits[..len]);
    out.put(&digits[..len]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn quota(limit: u32, period: Duration) -> Quota {
        Quota::with_period(limit, period).unwrap()
    }

    #[test]
    fn window_rescales_sub_second_periods() {
        let d = Decision::allow(10, 10, 0);
        let f = RateLimitFields::new(&d, &quota(10, Duration::from_millis(100)));
        assert_eq!(f.policy_item("p"), r#""p";q=100;w=1"#);
        let f = RateLimitFields::new(&d, &quota(60, Duration::from_secs(3600)));
        assert_eq!(f.policy_item("p"), r#""p";q=60;w=3600"#);
        let d = Decision::allow(3, 3, 0);
        let f = RateLimitFields::new(&d, &quota(3, Duration::from_millis(1500)));
        assert_eq!(f.policy_item("p"), r#""p";q=4;w=2"#);
    }

    #[test]
    fn retry_after_is_never_zero_on_denial() {
        let q = quota(1, Duration::from_secs(1));
        let f = RateLimitFields::new(&Decision::deny(1, 0, 1, 1), &q);
        assert_eq!(f.retry_after_secs(), Some(1));
        let f = RateLimitFields::new(&Decision::deny(1, 0, 0, 0), &q);
        assert_eq!(f.retry_after_secs(), Some(1));
        let f = RateLimitFields::new(&Decision::deny(1, 0, 0, 2_000_000_001), &q);
        assert_eq!(f.retry_after_secs(), Some(3));
        let f = RateLimitFields::new(&Decision::allow(1, 0, 5), &q);
        assert_eq!(f.retry_after_secs(), None);
    }

    #[test]
    fn reset_formats() {
        let q = quota(5, Duration::from_secs(10));
        let f = RateLimitFields::new(&Decision::allow(5, 4, 2_500_000_000), &q);
        assert_eq!(f.reset_value(ResetFormat::DeltaSeconds, 0), 3);
        let now = 1_700_000_000 * u128::from(NANOS_PER_SEC) + 900_000_000;
        // 1_700_000_000.9 + 2.5 = ...03.4, rounded up.
        assert_eq!(f.reset_value(ResetFormat::UnixSeconds, now), 1_700_000_004);
        assert_eq!(f.state_item("x"), r#""x";r=4;t=3"#);
        assert_eq!(f.used(), 1);
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(sf_string("é\n"), r#""__""#);
        assert_eq!(sf_string("plain-name"), r#""plain-name""#);
        assert_eq!(sf_string("x\"y"), r#""x\"y""#);
        assert_eq!(sf_string(""), r#""""#);
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in (0..1000).chain([9_999, 10_000, 99_999, 1_000_000_007, u64::MAX - 1, u64::MAX]) {
            let mut out = String::new();
            write_u64(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn names_are_lower_case() {
        for name in [
            X_RATELIMIT_LIMIT,
            X_RATELIMIT_REMAINING,
            X_RATELIMIT_RESET,
            X_RATELIMIT_USED,
            RATELIMIT,
            RATELIMIT_POLICY,
            RETRY_AFTER,
        ] {
            assert_eq!(name, name.to_ascii_lowercase());
        }
    }
}
