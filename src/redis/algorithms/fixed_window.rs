//! [`FixedWindow`] on Redis: `scripts/fixed_window.lua`, one hash holding
//! the window index and its count.

use crate::algorithm::{Algorithm, FixedWindow};
use crate::redis::{LUA_EXACT, RedisAlgorithm};
use crate::{Quota, QuotaError};

/// The script's parameters: `[limit, period, ticks_per_ms]`.
///
/// * `limit`: requests per window, also the capacity, as in memory.
/// * `period`: the window in ticks, rounded **up** when the quota's period
///   is not a whole number of ticks (sub-microsecond remainders in server
///   time): windows are never shorter than the quota says. At most 2^51
///   ticks, so that every `now` below 2^52 ticks is served (server time, in
///   microseconds since 1970, reaches 2^52 in the year 2112).
/// * `ticks_per_ms`: `1_000_000 / tick_nanos`, for the key's TTL.
///
/// Redis stores the real window index. The in-memory state truncates it to
/// at least 32 bits and decodes it exactly for states untouched for fewer
/// than `2^(63 - bits(limit))` windows; below 2^53 nanoseconds there are
/// fewer windows than that, so decisions are identical in nanosecond ticks.
///
/// # Errors
///
/// What [`FixedWindow::from_quota`] refuses; [`QuotaError::PeriodOverflow`]
/// for a period above 2^51 ticks (in nanosecond ticks, about 26 days).
impl RedisAlgorithm for FixedWindow {
    const SCRIPT: &'static str = include_str!("../scripts/fixed_window.lua");

    const KEY_SUFFIXES: &'static [&'static str] = &["fw"];

    fn script_params(quota: &Quota, tick_nanos: u64) -> Result<Vec<i64>, QuotaError> {
        FixedWindow::from_quota(quota)?;
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
        let quota = Quota::per_minute(7).unwrap();
        assert_eq!(
            FixedWindow::script_params(&quota, 1),
            Ok(vec![7, 60_000_000_000, 1_000_000])
        );
        assert_eq!(
            FixedWindow::script_params(&quota, 1000),
            Ok(vec![7, 60_000_000, 1000])
        );
        let odd = Quota::with_period(3, Duration::from_nanos(1500)).unwrap();
        assert_eq!(FixedWindow::script_params(&odd, 1000), Ok(vec![3, 2, 1000]));
    }

    #[test]
    fn refuses_periods_past_a_quarter_of_the_exact_range() {
        let edge = Quota::with_period(1, Duration::from_nanos(1 << 51)).unwrap();
        assert!(FixedWindow::script_params(&edge, 1).is_ok());
        let over = Quota::with_period(1, Duration::from_nanos((1 << 51) + 1)).unwrap();
        assert_eq!(
            FixedWindow::script_params(&over, 1),
            Err(QuotaError::PeriodOverflow)
        );
        assert!(FixedWindow::script_params(&over, 1000).is_ok());
    }
}
