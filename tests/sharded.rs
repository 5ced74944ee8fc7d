//! `Sharded`: racing threads on one key admit exactly the limit; random
//! sequences never admit more than the unsharded quota allows over any
//! window; a cost above one shard's capacity is a typed error.
//!
//! The bounds are checked against simple models of admitted totals written
//! here from the definitions (per-window sums, sliding sums, `u128` maths),
//! not from the crate's decision cores. Times in the sequences never go back.

use proptest::prelude::*;
use rategate::algorithm::Splittable;
use rategate::{
    Algorithm, CheckError, Decision, FixedWindow, KeyedRateLimiter, ManualClock, Quota, QuotaError,
    RateLimiter, Sharded, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::collections::HashMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

const THREADS: usize = 8;
const CHECKS_PER_THREAD: usize = 400;

fn quota(limit: u32, period: u64) -> Quota {
    Quota::with_period(limit, Duration::from_nanos(period)).unwrap()
}

/// `THREADS` threads released together, each calling `check` (true:
/// admitted) `CHECKS_PER_THREAD` times; returns the number admitted.
fn race(check: impl Fn() -> bool + Sync) -> u32 {
    let admitted = AtomicU32::new(0);
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                barrier.wait();
                let mine = (0..CHECKS_PER_THREAD).filter(|_| check()).count();
                admitted.fetch_add(mine as u32, Ordering::Relaxed);
            });
        }
    });
    admitted.into_inner()
}

/// 8 threads on one key with the clock frozen, through the direct and the
/// keyed limiter: exactly `expected` admitted, then nothing; and one thread
/// alone on another key: exactly `expected` too.
fn exactly_the_limit<A: Algorithm>(quota: Quota, expected: u32) {
    let clock = ManualClock::new();
    clock.set(1_000_000);
    let direct = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
    assert_eq!(race(|| direct.check().is_allowed()), expected);
    let denied = direct.check();
    assert!(!denied.is_allowed());
    assert_eq!((denied.limit(), denied.remaining()), (expected, 0));

    let keyed = KeyedRateLimiter::<u64, A>::builder(quota)
        .clock(clock)
        .build()
        .unwrap();
    assert_eq!(race(|| keyed.check(&7).is_allowed()), expected);
    assert!(!keyed.check(&7).is_allowed());
    // One thread alone reaches every shard through the fallback.
    let alone = (0..2 * expected).filter(|_| keyed.check(&8).is_allowed());
    assert_eq!(alone.count() as u32, expected);
}

#[test]
fn eight_threads_admit_exactly_the_limit_fixed_window() {
    // 1 003 over 4 shards: 251, 251, 251, 250.
    exactly_the_limit::<Sharded<FixedWindow, 4>>(quota(1_003, 1_000_000_000), 1_003);
}

#[test]
fn eight_threads_admit_exactly_the_limit_token_bucket() {
    // A burst of 1 001: 251, 250, 250, 250.
    let q = quota(100, 1_000_000_000).burst(1_001).unwrap();
    exactly_the_limit::<Sharded<TokenBucket, 4>>(q, 1_001);
}

#[test]
fn eight_threads_admit_exactly_the_limit_other_windows() {
    exactly_the_limit::<Sharded<SlidingWindowLog, 4>>(quota(1_002, 1_000_000_000), 1_002);
    exactly_the_limit::<Sharded<SlidingWindowCounter, 3>>(quota(1_000, 1_000_000_000), 1_000);
}

#[test]
fn cost_above_one_shard_is_a_typed_error() {
    let clock = ManualClock::new();
    // 10 over 4 shards: 3, 3, 2, 2. The largest cost is 3.
    let q = quota(10, 1_000);
    let over = Err(CheckError::CostExceedsCapacity {
        cost: 4,
        capacity: 3,
    });
    let direct = RateLimiter::<Sharded<FixedWindow, 4>, _>::with_clock(q, clock.clone()).unwrap();
    assert_eq!(direct.check_n(4), over);
    assert_eq!(direct.peek_n(4), over);
    assert!(direct.check_n(3).unwrap().is_allowed());
    let keyed = KeyedRateLimiter::<u64, Sharded<TokenBucket, 4>>::builder(q)
        .clock(clock)
        .build()
        .unwrap();
    assert_eq!(keyed.check_n(&1, 4), over);
    assert!(keyed.is_empty(), "an impossible cost inserted a key");
    assert!(keyed.check_n(&1, 3).unwrap().is_allowed());
    // The whole quota must give each shard at least 1.
    assert_eq!(
        RateLimiter::<Sharded<SlidingWindowLog, 4>>::new(quota(3, 1_000)).unwrap_err(),
        QuotaError::LimitBelowShards {
            limit: 3,
            shards: 4
        }
    );
}

#[test]
fn keyed_sweep_drops_a_key_only_when_every_shard_is_idle() {
    let clock = ManualClock::new();
    let keyed = KeyedRateLimiter::<u64, Sharded<FixedWindow, 2>>::builder(quota(4, 1_000))
        .clock(clock.clone())
        .build()
        .unwrap();
    // Four admissions fill both shards, whichever is home.
    for _ in 0..4 {
        assert!(keyed.check(&1).is_allowed());
    }
    clock.set(999);
    assert_eq!(keyed.sweep(), 0);
    assert!(!keyed.check(&1).is_allowed());
    clock.set(1_000);
    assert_eq!(keyed.sweep(), 1);
    assert!(keyed.is_empty());
}

/// A random sequence: time steps (never back) and costs.
fn steps(max_step: u64, max_cost: u32) -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec((0..=max_step, 0..=max_cost), 1..120)
}

/// Runs `steps` through a sharded and an unsharded direct limiter on one
/// manual clock; `each` sees (now, cost, sharded decision, unsharded
/// decision) for every step. Also checks on each denial that `retry_after`
/// is exact: the same cost passes then, not a nanosecond before.
fn run<A: Splittable, const N: usize>(
    q: Quota,
    steps: &[(u64, u32)],
    mut each: impl FnMut(u64, u32, Decision, Decision) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let sharded = RateLimiter::<Sharded<A, N>, _>::with_clock(q, clock.clone()).unwrap();
    let whole = RateLimiter::<A, _>::with_clock(q, clock.clone()).unwrap();
    let capacity = rategate::Algorithm::capacity(sharded.algorithm());
    let mut now = 0u64;
    for &(step, cost) in steps {
        now += step;
        let cost = cost.min(capacity);
        clock.set(now);
        let d = sharded.check_n(cost).unwrap();
        let w = whole.check_n(cost).unwrap();
        prop_assert!(d.remaining() <= d.limit(), "{d:?}");
        if !d.is_allowed() {
            let retry = d.retry_after_nanos();
            prop_assert!(retry > 0, "denied with no wait: {d:?}");
            clock.set(now + retry);
            prop_assert!(sharded.peek_n(cost).unwrap().is_allowed(), "{d:?}");
            clock.set(now + retry - 1);
            prop_assert!(!sharded.peek_n(cost).unwrap().is_allowed(), "{d:?}");
            clock.set(now);
        }
        each(now, cost, d, w)?;
    }
    Ok(())
}

/// A quota of `limit` (at least 4) per `period` (at least the limit).
fn window_quota() -> impl Strategy<Value = Quota> {
    (4u32..=40, 0u64..=2_000).prop_map(|(limit, extra)| quota(limit, u64::from(limit) + extra))
}

proptest! {
    /// Per window, the admitted cost never exceeds the limit; on a denial
    /// `remaining` is exactly what the window has left and `retry_after`
    /// the time to the next window.
    #[test]
    fn fixed_window_never_exceeds_the_limit_per_window(
        q in window_quota(),
        steps in steps(300, 12),
    ) {
        let (limit, period) = (u64::from(q.limit()), q.period_nanos());
        let mut used: HashMap<u64, u64> = HashMap::new();
        run::<FixedWindow, 4>(q, &steps, |now, cost, d, _| {
            let window = now / period;
            let until_end = (window + 1) * period - now;
            let in_window = used.entry(window).or_default();
            if d.is_allowed() {
                *in_window += u64::from(cost);
                prop_assert!(*in_window <= limit, "window {window}: {in_window} > {limit}");
                if cost > 0 {
                    prop_assert_eq!(d.reset_after_nanos(), until_end);
                }
            } else {
                prop_assert_eq!(u64::from(d.remaining()), limit - *in_window);
                prop_assert_eq!(d.retry_after_nanos(), until_end);
                prop_assert_eq!(d.reset_after_nanos(), until_end);
            }
            Ok(())
        })?;
    }

    /// With costs of 1 one thread (home shard, then the fallback) admits
    /// exactly what the unsharded fixed window admits, request by request.
    #[test]
    fn fixed_window_cost_one_matches_unsharded(
        q in window_quota(),
        steps in steps(300, 1).prop_map(|s| s.into_iter().map(|(t, _)| (t, 1)).collect::<Vec<_>>()),
    ) {
        let period = q.period_nanos();
        let mut admitted: HashMap<u64, u32> = HashMap::new();
        run::<FixedWindow, 4>(q, &steps, |now, _, d, w| {
            prop_assert_eq!(d.is_allowed(), w.is_allowed(), "at {}: {:?} vs {:?}", now, d, w);
            let count = admitted.entry(now / period).or_default();
            *count += u32::from(d.is_allowed());
            // Alone, the estimate is never above the truth.
            prop_assert!(d.remaining() <= q.limit() - *count);
            Ok(())
        })?;
    }

    /// Over any span `[t_i, t_j]` of request times the admitted cost is at
    /// most `burst + (t_j - t_i) / T`, the whole bucket's bound.
    #[test]
    fn token_bucket_never_exceeds_the_whole_buckets_bound(
        (limit, period, burst) in (4u32..=40, 0u64..=2_000, 4u32..=40)
            .prop_map(|(l, extra, b)| (l, u64::from(l) + extra, b)),
        steps in steps(200, 10),
    ) {
        let q = quota(limit, period).burst(burst).unwrap();
        let interval = u128::from(period.div_ceil(u64::from(limit)));
        let mut admitted: Vec<(u64, u32)> = Vec::new();
        run::<TokenBucket, 4>(q, &steps, |now, cost, d, _| {
            if d.is_allowed() && cost > 0 {
                admitted.push((now, cost));
            }
            Ok(())
        })?;
        for i in 0..admitted.len() {
            let mut sum = 0u128;
            for &(t, cost) in &admitted[i..] {
                sum += u128::from(cost);
                let bound = u128::from(burst) + u128::from(t - admitted[i].0) / interval;
                prop_assert!(sum <= bound, "{} admitted over [{}, {}], bound {}", sum, admitted[i].0, t, bound);
            }
        }
    }

    /// In every window `(t - period, t]` ending at a request the admitted
    /// cost is at most the limit; with costs of 1 the decisions are the
    /// unsharded log's; a denial's `remaining` is what the window has left.
    #[test]
    fn sliding_window_log_never_exceeds_the_limit_in_any_window(
        q in window_quota(),
        steps in steps(300, 6),
        unit in any::<bool>(),
    ) {
        let (limit, period) = (u64::from(q.limit()), q.period_nanos());
        let steps: Vec<_> = steps.into_iter().map(|(t, c)| (t, if unit { 1 } else { c })).collect();
        let mut log: Vec<(u64, u32)> = Vec::new();
        run::<SlidingWindowLog, 4>(q, &steps, |now, cost, d, w| {
            let in_window: u64 = log
                .iter()
                .filter(|(t, _)| now - t < period)
                .map(|&(_, c)| u64::from(c))
                .sum();
            if d.is_allowed() {
                prop_assert!(in_window + u64::from(cost) <= limit);
                log.push((now, cost));
            } else {
                prop_assert_eq!(u64::from(d.remaining()), limit - in_window);
            }
            if unit {
                prop_assert_eq!(d.is_allowed(), w.is_allowed(), "at {}", now);
            }
            Ok(())
        })?;
    }

    /// After each admission the estimate of the key's combined counts,
    /// `previous x (period - elapsed) / period + current`, is at most the
    /// limit (in exact `u128` maths).
    #[test]
    fn sliding_window_counter_keeps_the_combined_estimate_within_the_limit(
        q in window_quota(),
        steps in steps(300, 8),
    ) {
        let (limit, period) = (u128::from(q.limit()), q.period_nanos());
        let mut per_window: HashMap<u64, u128> = HashMap::new();
        run::<SlidingWindowCounter, 4>(q, &steps, |now, cost, d, _| {
            if !d.is_allowed() {
                return Ok(());
            }
            let window = now / period;
            *per_window.entry(window).or_default() += u128::from(cost);
            let current = per_window[&window];
            let previous = window
                .checked_sub(1)
                .and_then(|w| per_window.get(&w))
                .copied()
                .unwrap_or(0);
            let elapsed = u128::from(now - window * period);
            let p = u128::from(period);
            prop_assert!(
                previous * (p - elapsed) + current * p <= limit * p,
                "at {}: previous {}, current {}, limit {}", now, previous, current, limit
            );
            Ok(())
        })?;
    }
}

/// A request of cost 15 that falls past the home shard drains the other
/// one: the next check must not count that shard as full. `remaining`
/// is what actually passes next, for every inner algorithm.
#[test]
fn remaining_counts_a_shard_drained_by_a_larger_cost() {
    fn case<A: Splittable>() {
        let limiter = RateLimiter::<Sharded<A, 2>, _>::with_clock(
            quota(30, 1_000_000_000),
            ManualClock::new(),
        )
        .unwrap();
        assert!(limiter.check_n(1).unwrap().is_allowed());
        assert!(limiter.check_n(15).unwrap().is_allowed());
        let reported = limiter.check().remaining();
        let passed = (0..40).filter(|_| limiter.check().is_allowed()).count();
        assert_eq!(
            (reported, passed),
            (13, 13),
            "{}",
            std::any::type_name::<A>()
        );
    }
    case::<FixedWindow>();
    case::<SlidingWindowLog>();
    case::<SlidingWindowCounter>();
    case::<TokenBucket>();
}
