//! The textbook boundary burst through all five algorithms side by side:
//! limit 100 per minute, 100 requests at 00:59:50 and 100 at 01:00:10
//! (59 min 50 s and 60 min 10 s after the origin; windows are aligned to the
//! minute). Each algorithm admits what its definition says, asserted
//! exactly. The per-algorithm tests (`tests/model_*.rs`) check the same
//! scenario's decision fields in more detail.

use rategate::{
    Algorithm, FixedWindow, LeakyBucket, ManualClock, Quota, RateLimiter, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket,
};
use std::time::Duration;

/// Admitted requests in each of the two bursts.
fn bursts<A: Algorithm>(quota: Quota) -> (usize, usize) {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
    clock.set(Duration::from_secs(59 * 60 + 50).as_nanos() as u64);
    let first = (0..100).filter(|_| limiter.check().is_allowed()).count();
    clock.advance(Duration::from_secs(20));
    let second = (0..100).filter(|_| limiter.check().is_allowed()).count();
    (first, second)
}

#[test]
fn fixed_window_admits_all_200_within_20_seconds() {
    // 00:59:50 is in minute 59, 01:00:10 in minute 60: two fresh windows.
    assert_eq!(
        bursts::<FixedWindow>(Quota::per_minute(100).unwrap()),
        (100, 100)
    );
}

#[test]
fn sliding_window_log_admits_100() {
    // At 01:00:10 the 100 requests of 00:59:50 are 20 s old: still in the
    // window, so nothing more passes.
    assert_eq!(
        bursts::<SlidingWindowLog>(Quota::per_minute(100).unwrap()),
        (100, 0)
    );
}

#[test]
fn sliding_window_counter_admits_its_weighted_estimate() {
    // At 01:00:10 the current window (minute 60) is 10 s old, so the
    // previous window's 100 weigh (60 - 10) / 60: ceil(100 x 50 / 60) = 84.
    // Requests pass while 84 + current + 1 <= 100: 16 of them.
    assert_eq!(
        bursts::<SlidingWindowCounter>(Quota::per_minute(100).unwrap()),
        (100, 16)
    );
}

#[test]
fn token_bucket_admits_capacity_then_the_refill() {
    // Capacity 20, refill 100 per 60 s (one token per 600 ms). The first
    // burst drains the 20 tokens; 20 s later 20 / 0.6 = 33 tokens would have
    // refilled, capped at the capacity: 20 pass again.
    let quota = Quota::per_minute(100).unwrap().burst(20).unwrap();
    assert_eq!(bursts::<TokenBucket>(quota), (20, 20));
}

#[test]
fn leaky_bucket_admits_burst_plus_one_then_the_drain() {
    // nginx semantics, 100r/m burst=20 nodelay: 21 pass at once; in 20 s the
    // bucket drains 20 000 ms x 1666 / 1000 = 33 320 thousandths, more than
    // the 20 000 held, so it is empty again: 21 pass.
    let quota: Quota = "100r/m burst=20 nodelay".parse().unwrap();
    assert_eq!(bursts::<LeakyBucket>(quota), (21, 21));
}
