//! [`SlidingWindowCounter`] on Redis: `scripts/sliding_window_counter.lua`,
//! two hashes (one for even window indexes, one for odd), each holding a
//! window index and its count; hash-tagged into one Cluster slot, so the
//! script is a multi-key script that runs on Redis Cluster too.

use crate::algorithm::{Algorithm, SlidingWindowCounter};
use crate::redis::{LUA_EXACT, RedisAlgorithm};
use crate::{Quota, QuotaError};

/// The script's parameters: `[limit, period, ticks_per_ms]`.
///
/// * `limit`: requests per period, also the capacity; at most the in-memory
///   maximum, 2^20 - 1, which keeps the script's `room x (period mod count)`
///   below 2^40.
/// * `period`: the window in ticks, rounded **up** when the quota's period
///   is not a whole number of ticks (sub-microsecond remainders in server
///   time): windows are never shorter than the quota says. At most 2^51
///   ticks, so that every `now` below 2^52 ticks is served (server time, in
///   microseconds since 1970, reaches 2^52 in the year 2112).
/// * `ticks_per_ms`: `1_000_000 / tick_nanos`, for the keys' TTL.
///
/// # Parity with the in-memory limiter
///
/// Redis stores real window indexes. The in-memory state truncates the
/// index to `64 - 2 x bits(limit)` bits (at least 24) and decodes it
/// exactly for states untouched for fewer than `2^(63 - 2 x bits(limit))`
/// windows. Times below 2^53 nanoseconds span at most `2^53 / period`
/// windows, so decisions are identical in nanosecond ticks for every time
/// below 2^53 when `limit < 512` or `period >= 2^(2 x bits(limit) - 10)`
/// nanoseconds (any period of 2^30 ns, about 1.07 s, or more). Beyond that
/// the in-memory limiter may read a long-idle count as current and deny;
/// Redis decides exactly.
///
/// # Errors
///
/// What [`SlidingWindowCounter::from_quota`] refuses
/// ([`QuotaError::LimitTooLarge`] above 2^20 - 1);
/// [`QuotaError::PeriodOverflow`] for a period above 2^51 ticks (in
/// nanosecond ticks, about 26 days).
impl RedisAlgorithm for SlidingWindowCounter {
    const SCRIPT: &'static str = include_str!("../scripts/sliding_window_counter.lua");

    const KEY_SUFFIXES: &'static [&'static str] = &["even", "odd"];

    fn script_params(quota: &Quota, tick_nanos: u64) -> Result<Vec<i64>, QuotaError> {
        SlidingWindowCounter::from_quota(quota)?;
        let tick_nanos = tick_nanos.max(1);
        let period = quota.period_nanos().div_ceil(tick_nanos);
        if period > LUA_EXACT / 4 {
            return Err(QuotaError::PeriodOverflow);
        }
        let ticks_per_ms = (1_000_000 / tick_nanos).max(1);
        // period is at most 2^51: the casts are exact.
        Ok(vec![
            i64::from(quota.limit()),
            period as i64,
            ticks_per_ms as i64,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn params_in_nanosecond_and_microsecond_ticks() {
        let quota = Quota::per_hour(1000).unwrap();
        assert_eq!(
            SlidingWindowCounter::script_params(&quota, 1),
            Ok(vec![1000, 3_600_000_000_000, 1_000_000])
        );
        assert_eq!(
            SlidingWindowCounter::script_params(&quota, 1000),
            Ok(vec![1000, 3_600_000_000, 1000])
        );
    }

    #[test]
    fn refuses_what_memory_or_lua_cannot_count() {
        let big = Quota::per_hour(1 << 20).unwrap();
        assert!(matches!(
            SlidingWindowCounter::script_params(&big, 1000),
            Err(QuotaError::LimitTooLarge { .. })
        ));
        let over = Quota::with_period(1, Duration::from_nanos((1 << 51) + 1)).unwrap();
        assert_eq!(
            SlidingWindowCounter::script_params(&over, 1),
            Err(QuotaError::PeriodOverflow)
        );
        assert!(SlidingWindowCounter::script_params(&over, 1000).is_ok());
    }
}
