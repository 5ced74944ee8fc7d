//! The token bucket never admits faster than configured, exactly: over any
//! span `[t_i, t_j]` of admission times, the admitted cost is at most
//! `burst + limit x (t_j - t_i) / period`, compared in exact integers, for
//! awkward rates whose period the limit does not divide (167 per minute,
//! 3 per 10 ns, random ones). Requests are made at the earliest time the
//! limiter says they may pass (`retry_after` exactly), where an interval
//! rounded down by even a fraction of a nanosecond breaks the bound at once.

use proptest::prelude::*;
use rategate::{Clock, ManualClock, Quota, RateLimiter, TokenBucket};
use std::time::Duration;

/// How the clock moves before the next request.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// To the previous denial's `retry_after`, exactly.
    Retry,
    /// Forward by this many nanoseconds.
    Forward(u64),
    /// Forward by this fraction (in 1/64ths) of the period.
    Fraction(u64),
}

fn quotas() -> impl Strategy<Value = Quota> {
    let awkward = (1u32..=50, 1u64..=1_000_000_000, prop::option::of(1u32..=20)).prop_map(
        |(limit, extra, burst)| {
            let period = u64::from(limit) + extra;
            let quota = Quota::with_period(limit, Duration::from_nanos(period)).unwrap();
            burst.map_or(quota, |b| quota.burst(b).unwrap())
        },
    );
    prop_oneof![
        1 => Just(Quota::per_minute(167).unwrap()),
        1 => Just(Quota::per_minute(167).unwrap().burst(1).unwrap()),
        1 => Just(Quota::with_period(3, Duration::from_nanos(10)).unwrap().burst(1).unwrap()),
        4 => awkward,
    ]
}

fn steps() -> impl Strategy<Value = Vec<(Step, u32)>> {
    let step = prop_oneof![
        6 => Just(Step::Retry),
        1 => (0u64..1_000).prop_map(Step::Forward),
        1 => (0u64..128).prop_map(Step::Fraction),
    ];
    prop::collection::vec((step, prop_oneof![4 => Just(1u32), 1 => 1u32..=4]), 1..250)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn never_faster_than_the_quota(quota in quotas(), steps in steps()) {
        let clock = ManualClock::new();
        let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone()).unwrap();
        let limit = u128::from(quota.limit());
        let period = u128::from(quota.period_nanos());
        let burst = u128::from(quota.burst_or(quota.limit()));
        let mut admitted: Vec<(u64, u32)> = Vec::new();
        let mut retry = 0;
        for (step, cost) in steps {
            let cost = cost.min(quota.burst_or(quota.limit()));
            clock.advance_nanos(match step {
                Step::Retry => retry,
                Step::Forward(n) => n,
                Step::Fraction(n) => quota.period_nanos() / 64 * n,
            });
            let now = clock.now();
            let decision = limiter.check_n(cost).unwrap();
            retry = decision.retry_after_nanos();
            if !decision.is_allowed() {
                continue;
            }
            admitted.push((now, cost));
            // Every span ending at this admission.
            let mut total = 0u128;
            for &(start, c) in admitted.iter().rev() {
                total += u128::from(c);
                let elapsed = u128::from(now - start);
                prop_assert!(
                    total * period <= burst * period + limit * elapsed,
                    "{} admitted in {} ns under {}", total, elapsed, quota
                );
            }
        }
    }
}

/// 167 per minute, burst 1: the 168th request passes no earlier than one
/// full minute after the first, and the interval times 167 is not short of
/// the minute.
#[test]
fn one_hundred_sixty_seven_per_minute_spans_the_minute() {
    let quota = Quota::per_minute(167).unwrap().burst(1).unwrap();
    assert!(quota.emission_interval_nanos() * 167 >= 60_000_000_000);
    let clock = ManualClock::new();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone()).unwrap();
    let mut passed = 0;
    while passed < 168 {
        let d = limiter.check();
        if d.is_allowed() {
            passed += 1;
        } else {
            clock.advance_nanos(d.retry_after_nanos());
        }
    }
    assert!(clock.now() >= 60_000_000_000);
}
