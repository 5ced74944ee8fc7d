//! [`LeakyBucket`] on Redis: nginx's `(excess, last)` in a hash.

use crate::algorithm::{Algorithm, LeakyBucket};
use crate::redis::{LUA_EXACT, RedisAlgorithm};
use crate::{Delay, Quota, QuotaError};

/// Thousandths of a request per request, as in nginx.
const UNIT: u64 = 1_000;

/// Milliseconds added to every TTL the script sets. The TTL is otherwise
/// exactly the time until the bucket is idle, but Redis counts it on its own
/// clock: in client-time mode the clients' clocks (or a test's manual clock)
/// need not keep pace with it.
const TTL_GRACE_MS: i64 = 1_000;

/// The script `scripts/leaky_bucket.lua` keeps one hash per key, nginx's
/// state: `e`, the excess in thousandths of a request, and `l`, the
/// millisecond of the last admission that moved it. Time is whole
/// milliseconds, `floor(ticks / ticks per ms)`, so the script decides alike
/// in nanosecond and microsecond ticks. Admissions write; denials and costs
/// of 0 write nothing. The TTL is the time until the bucket has drained to a
/// new key's level, plus a grace of one second.
///
/// Parameters: `[rate, burst x 1000, delay x 1000, ticks per ms, grace ms]`
/// for ticks of `tick_nanos` (1 or 1000, a divisor of a millisecond), the
/// rate in thousandths of a request per second: the numbers [`LeakyBucket`]
/// derives from the quota, independent of the tick.
///
/// # Limits
///
/// As in memory: a rate below one request per 1000 s is refused with
/// [`QuotaError::RateTooLow`], a burst above [`LeakyBucket::MAX_BURST`] with
/// [`QuotaError::LimitTooLarge`]. Times are exact doubles below 2^53 ticks.
/// The horizon, the longest drain (of a full bucket plus one request:
/// `(burst + 1) x 10^6 / rate` ms, rounded up; one second for `1r/s`), must
/// be at most 2^51 ticks (26 days in nanosecond ticks, 71 years in
/// microseconds), else [`QuotaError::BurstOverflow`], so that every `now`
/// below 2^52 ticks is served (server time, in microseconds since 1970,
/// reaches 2^52 in the year 2112); the script refuses (an error reply) a
/// request at `2^53 - horizon` ticks or later. The in-memory word stops its
/// clock after 2^41 ms (69.7 years) from the clock's origin; the hash does
/// not, which only matters for server time past 2039.
///
/// # Examples
///
/// ```
/// use rategate::redis::RedisAlgorithm;
/// use rategate::{LeakyBucket, Quota};
///
/// let quota: Quota = "10r/s burst=20 delay=5".parse()?;
/// assert_eq!(
///     LeakyBucket::script_params(&quota, 1)?,
///     [10_000, 20_000, 5_000, 1_000_000, 1_000]
/// );
/// # Ok::<(), rategate::QuotaError>(())
/// ```
impl RedisAlgorithm for LeakyBucket {
    const SCRIPT: &'static str = include_str!("../scripts/leaky_bucket.lua");

    const KEY_SUFFIXES: &'static [&'static str] = &["lb"];

    fn script_params(quota: &Quota, tick_nanos: u64) -> Result<Vec<i64>, QuotaError> {
        // Refuses a rate below 1/1000 s and a burst above MAX_BURST.
        LeakyBucket::from_quota(quota)?;
        let ticks_per_ms = (1_000_000 / tick_nanos.max(1)).max(1);
        // nginx's units, as `LeakyBucket::from_quota` derives them: between
        // 1 and 10^12 (a quota is at most one request per nanosecond).
        let rate = (u128::from(quota.limit()) * 1_000_000_000_000
            / u128::from(quota.period_nanos())) as u64;
        let burst = quota.explicit_burst().unwrap_or(0);
        let delay = match quota.delay_mode() {
            Delay::Smooth => 0,
            Delay::NoDelay => burst,
            Delay::After(n) => n,
        };
        let burst = u64::from(burst) * UNIT;
        let delay = u64::from(delay) * UNIT;
        // The longest drain, in ms: below 2^34 since burst + 1000 < 2^24.
        let horizon = ((burst + UNIT) * UNIT).div_ceil(rate);
        if horizon
            .checked_mul(ticks_per_ms)
            .is_none_or(|t| t > LUA_EXACT / 4)
        {
            return Err(QuotaError::BurstOverflow);
        }
        // All below 2^53 (the rate at most 10^12): the casts are exact.
        Ok(vec![
            rate as i64,
            burst as i64,
            delay as i64,
            ticks_per_ms as i64,
            TTL_GRACE_MS,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(quota: &str, tick_nanos: u64) -> Result<Vec<i64>, QuotaError> {
        LeakyBucket::script_params(&quota.parse().unwrap(), tick_nanos)
    }

    #[test]
    fn params_are_nginx_units_in_any_tick() {
        assert_eq!(
            params("100r/m burst=3", 1).unwrap(),
            [1_666, 3_000, 0, 1_000_000, TTL_GRACE_MS]
        );
        assert_eq!(
            params("10r/s burst=20 nodelay", 1_000).unwrap(),
            [10_000, 20_000, 20_000, 1_000, TTL_GRACE_MS]
        );
        assert_eq!(
            params("1/1ns", 1).unwrap(),
            [1_000_000_000_000, 0, 0, 1_000_000, TTL_GRACE_MS]
        );
    }

    #[test]
    fn refuses_what_memory_refuses() {
        for quota in ["1/1001s", "1r/s burst=8389"] {
            let q: Quota = quota.parse().unwrap();
            assert_eq!(
                LeakyBucket::script_params(&q, 1).unwrap_err(),
                LeakyBucket::from_quota(&q).unwrap_err()
            );
        }
        // The horizon: (burst + 1) x 10^6 ms at the slowest rate, at most
        // 2^51 ticks.
        assert!(params("1/1000s burst=2250", 1).is_ok());
        assert_eq!(
            params("1/1000s burst=2251", 1),
            Err(QuotaError::BurstOverflow)
        );
        let slowest = format!("1/1000s burst={}", LeakyBucket::MAX_BURST);
        assert!(params(&slowest, 1_000).is_ok());
    }
}
