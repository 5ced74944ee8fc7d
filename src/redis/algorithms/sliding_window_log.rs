//! [`SlidingWindowLog`] on Redis: the log as a sorted set.

use crate::algorithm::{Algorithm, SlidingWindowLog};
use crate::redis::{LUA_EXACT, RedisAlgorithm};
use crate::{Quota, QuotaError};

/// Milliseconds added to every TTL the script sets. The TTL is otherwise
/// exactly the time until the log is idle, but Redis counts it on its own
/// clock: in client-time mode the clients' clocks (or a test's manual clock)
/// need not keep pace with it, and the state, including the latest reading,
/// must not vanish while a client can still see it as live.
const TTL_GRACE_MS: i64 = 1_000;

/// The script `scripts/sliding_window_log.lua` keeps one sorted set per key:
/// each admission time is a member (score: the time in ticks; member:
/// `"<time>:<cost>"`, same-time admissions merged), and the member
/// `"~<latest>:<used>"` at score `+inf` holds the latest reading and the sum
/// of the costs. Each check drops the expired entries (`ZREMRANGEBYSCORE`),
/// so the set holds at most `limit + 1` members, as the in-memory ring holds
/// at most `limit` entries. The TTL is the time until the newest entry
/// leaves the window, plus a grace of one second.
///
/// Parameters: `[limit, period, ticks per ms, grace ms]` for ticks of
/// `tick_nanos` (1 or 1000, a divisor of a millisecond), the period in
/// ticks rounded up (exact: with whole-tick times, `now - t >= period`
/// holds exactly when it holds for the rounded period).
///
/// # Limits
///
/// Times are exact doubles below 2^53 ticks. A period above 2^51 ticks (26
/// days in nanosecond ticks, 71 years in microseconds) is refused with
/// [`QuotaError::PeriodOverflow`], so that every `now` below 2^52 ticks is
/// served (server time, in microseconds since 1970, reaches 2^52 in the year
/// 2112); the script refuses (an error reply) a request whose time,
/// `max(now, latest)`, is `2^53 - period` ticks or later.
///
/// # Examples
///
/// ```
/// use rategate::redis::RedisAlgorithm;
/// use rategate::{Quota, SlidingWindowLog};
///
/// let quota = Quota::per_second(3)?;
/// // Client time (nanosecond ticks) and server time (microseconds).
/// assert_eq!(
///     SlidingWindowLog::script_params(&quota, 1)?,
///     [3, 1_000_000_000, 1_000_000, 1_000]
/// );
/// assert_eq!(
///     SlidingWindowLog::script_params(&quota, 1_000)?,
///     [3, 1_000_000, 1_000, 1_000]
/// );
/// # Ok::<(), rategate::QuotaError>(())
/// ```
impl RedisAlgorithm for SlidingWindowLog {
    const SCRIPT: &'static str = include_str!("../scripts/sliding_window_log.lua");

    const KEY_SUFFIXES: &'static [&'static str] = &["log"];

    fn script_params(quota: &Quota, tick_nanos: u64) -> Result<Vec<i64>, QuotaError> {
        SlidingWindowLog::from_quota(quota)?;
        let tick_nanos = tick_nanos.max(1);
        let period = quota.period_nanos().div_ceil(tick_nanos);
        if period > LUA_EXACT / 4 {
            return Err(QuotaError::PeriodOverflow);
        }
        // The period is at most 2^51: the casts are exact.
        Ok(vec![
            i64::from(quota.limit()),
            period as i64,
            (1_000_000 / tick_nanos).max(1) as i64,
            TTL_GRACE_MS,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn params_in_ticks() {
        let quota = Quota::with_period(7, Duration::from_nanos(1_500)).unwrap();
        assert_eq!(
            SlidingWindowLog::script_params(&quota, 1).unwrap(),
            [7, 1_500, 1_000_000, TTL_GRACE_MS]
        );
        // 1.5 us rounds up to 2 whole microsecond ticks.
        assert_eq!(
            SlidingWindowLog::script_params(&quota, 1_000).unwrap(),
            [7, 2, 1_000, TTL_GRACE_MS]
        );
    }

    #[test]
    fn periods_past_a_quarter_of_the_exact_range_are_refused() {
        let edge = Quota::with_period(1, Duration::from_nanos(LUA_EXACT / 4)).unwrap();
        assert!(SlidingWindowLog::script_params(&edge, 1).is_ok());
        let over = Quota::with_period(1, Duration::from_nanos(LUA_EXACT / 4 + 1)).unwrap();
        assert_eq!(
            SlidingWindowLog::script_params(&over, 1),
            Err(QuotaError::PeriodOverflow)
        );
        // The same period is fine in microseconds.
        assert!(SlidingWindowLog::script_params(&over, 1_000).is_ok());
    }
}
