//! [`TokenBucket`] (GCRA) on Redis: `scripts/token_bucket.lua`, one key
//! holding the theoretical arrival time.

use crate::algorithm::{Algorithm, TokenBucket};
use crate::redis::{LUA_EXACT, RedisAlgorithm};
use crate::{Quota, QuotaError};

/// The script's parameters: `[interval, capacity, tau, ticks_per_ms]`.
///
/// * `interval`: the emission interval in ticks, `period / limit` rounded
///   up (in nanosecond ticks exactly the in-memory interval; in microsecond
///   ticks less than one tick per token slow, never fast: the script admits
///   at most `capacity + limit x t / period` over any span `t`, as memory does).
/// * `capacity`: the burst, by default the limit, as in memory.
/// * `tau = capacity x interval`: at most 2^51 ticks, a quarter of Lua's
///   exact range, so that every `now` below 2^52 ticks is served (server
///   time, in microseconds since 1970, reaches 2^52 in the year 2112).
/// * `ticks_per_ms`: `1_000_000 / tick_nanos`, for the key's TTL.
///
/// # Errors
///
/// What [`TokenBucket::from_quota`] refuses; [`QuotaError::RateTooHigh`]
/// when the interval is shorter than one tick; [`QuotaError::BurstOverflow`]
/// when `tau` exceeds 2^51 ticks (in nanosecond ticks, about 26 days).
impl RedisAlgorithm for TokenBucket {
    const SCRIPT: &'static str = include_str!("../scripts/token_bucket.lua");

    const KEY_SUFFIXES: &'static [&'static str] = &["tat"];

    fn script_params(quota: &Quota, tick_nanos: u64) -> Result<Vec<i64>, QuotaError> {
        TokenBucket::from_quota(quota)?;
        let tick_nanos = tick_nanos.max(1);
        // Finer than one tick per request: rounding up would halve the rate
        // or worse, so refuse it.
        if quota.period_nanos() / u64::from(quota.limit()) < tick_nanos {
            return Err(QuotaError::RateTooHigh {
                limit: quota.limit().into(),
                period_nanos: quota.period_nanos(),
            });
        }
        // ceil(ceil(period / limit) / tick) = ceil(period / (limit x tick)).
        let interval = quota.emission_interval_nanos().div_ceil(tick_nanos);
        let capacity = quota.burst_or(quota.limit());
        let tau = interval
            .checked_mul(u64::from(capacity))
            .filter(|&tau| tau <= LUA_EXACT / 4)
            .ok_or(QuotaError::BurstOverflow)?;
        let ticks_per_ms = (1_000_000 / tick_nanos).max(1);
        // Each is at most 2^51: the casts are exact.
        Ok(vec![
            interval as i64,
            i64::from(capacity),
            tau as i64,
            ticks_per_ms as i64,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn nanosecond_params_are_the_in_memory_ones() {
        let quota = Quota::per_minute(7).unwrap().burst(3).unwrap();
        let interval = 60_000_000_000_u64.div_ceil(7) as i64;
        assert_eq!(interval, 8_571_428_572);
        assert_eq!(
            TokenBucket::script_params(&quota, 1),
            Ok(vec![interval, 3, 3 * interval, 1_000_000])
        );
        // Microseconds: the interval rounds up to whole ticks, never faster.
        assert_eq!(
            TokenBucket::script_params(&quota, 1000),
            Ok(vec![8_571_429, 3, 3 * 8_571_429, 1000])
        );
    }

    #[test]
    fn refuses_what_lua_cannot_count() {
        // One request per 500 ns: finer than a microsecond tick.
        let fine = Quota::with_period(2, Duration::from_nanos(1000)).unwrap();
        assert!(TokenBucket::script_params(&fine, 1).is_ok());
        assert!(matches!(
            TokenBucket::script_params(&fine, 1000),
            Err(QuotaError::RateTooHigh { .. })
        ));
        // tau = 2^51 passes, one tick more does not.
        let edge = Quota::with_period(1, Duration::from_nanos(1 << 51)).unwrap();
        assert!(TokenBucket::script_params(&edge, 1).is_ok());
        let over = Quota::with_period(1, Duration::from_nanos((1 << 51) + 1)).unwrap();
        assert_eq!(
            TokenBucket::script_params(&over, 1),
            Err(QuotaError::BurstOverflow)
        );
        assert!(TokenBucket::script_params(&over, 1000).is_ok());
    }
}
