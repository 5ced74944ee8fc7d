//! Windows on the wall clock: a fixed window or sliding window counter read
//! through a clock whose origin is the Unix epoch resets on Unix multiples
//! of its period (a 1 h window on the hour), so two processes agree on the
//! window edges; `UnixClock` never goes back and reports resets as Unix
//! times. Deterministic parts run on a `ManualClock` set to a Unix time.

use rategate::{
    Clock, Decision, FixedWindow, ManualClock, Quota, RateLimiter, SlidingWindowCounter, UnixClock,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 2024-05-01 13:59:59.5 UTC, in nanoseconds since the epoch.
const HALF_A_SECOND_BEFORE_TWO: u64 = 1_714_571_999_500_000_000;
const HOUR: u64 = 3_600_000_000_000;

#[test]
fn an_hourly_fixed_window_resets_on_the_hour() {
    let clock = ManualClock::new();
    clock.set(HALF_A_SECOND_BEFORE_TWO);
    let limiter =
        RateLimiter::<FixedWindow, _>::with_clock(Quota::per_hour(3).unwrap(), clock.clone())
            .unwrap();
    assert!(limiter.check_n(3).unwrap().is_allowed());
    let denied = limiter.check();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_millis(500));
    // The reset as a Unix time: 14:00:00 exactly.
    let reset = clock.now() + denied.reset_after_nanos();
    assert_eq!(reset % HOUR, 0);
    assert_eq!(reset / 1_000_000_000, 1_714_572_000);
    clock.advance(Duration::from_millis(500));
    assert_eq!(limiter.check_n(3).unwrap().remaining(), 0);
}

/// Two "processes" whose limiters were built at different times agree on
/// every decision when they read the same Unix time.
#[test]
fn separate_limiters_agree_on_window_edges() {
    for quota in [Quota::per_hour(10).unwrap(), Quota::per_minute(7).unwrap()] {
        let (a, b) = (ManualClock::new(), ManualClock::new());
        a.set(HALF_A_SECOND_BEFORE_TWO - 40 * HOUR);
        let first = RateLimiter::<SlidingWindowCounter, _>::with_clock(quota, a.clone()).unwrap();
        a.set(HALF_A_SECOND_BEFORE_TWO);
        b.set(HALF_A_SECOND_BEFORE_TWO);
        let second = RateLimiter::<SlidingWindowCounter, _>::with_clock(quota, b.clone()).unwrap();
        for step in 0..200u64 {
            let gap = (step * 7_919_000_000) % quota.period_nanos();
            a.advance_nanos(gap);
            b.advance_nanos(gap);
            let (x, y): (Decision, Decision) = (first.check(), second.check());
            assert_eq!(x, y, "step {step}");
        }
    }
}

#[test]
fn unix_clock_reads_the_wall_clock_and_never_goes_back() {
    let clock = UnixClock::new();
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let now = clock.now();
    assert!(now.abs_diff(u64::try_from(wall.as_nanos()).unwrap()) < 5_000_000_000);
    let mut last = now;
    for _ in 0..10_000 {
        let t = clock.now();
        assert!(t >= last);
        last = t;
    }
    let limiter =
        RateLimiter::<FixedWindow, _>::with_clock(Quota::per_hour(5).unwrap(), clock.clone())
            .unwrap();
    let reset = clock.reset_at(&limiter.check());
    assert_eq!(
        reset.duration_since(UNIX_EPOCH).unwrap().as_secs() % 3600,
        0
    );
}
