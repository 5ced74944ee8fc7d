//! The sliding window log against an independently written reference model
//! (`models/sliding_window_log.rs`): a plain list of every admission ever
//! made, `(time, cost)` in `u128`, that sums the costs inside
//! `(now - period, now]` from scratch on every request. Both are driven with the same random sequences of (move the
//! clock, cost) on a manual clock, including steps of zero, exact window
//! edges and steps back; every decision field must agree.

mod models;

use models::sliding_window_log::ModelLog;
use models::{Model, Outcome};
use proptest::prelude::*;
use rategate::{
    Clock, Decision, KeyedRateLimiter, ManualClock, Quota, RateLimiter, SlidingWindowLog,
};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// How to move the clock before a request.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Stay.
    Zero,
    /// A few nanoseconds.
    Nanos(u64),
    /// `k` periods, plus or minus one nanosecond: the window's edges.
    Periods(u64, i8),
    /// A fraction `n / 16` of a period.
    Sixteenths(u64),
    /// Back by a fraction `n / 16` of a period (saturating at 0).
    Back(u64),
}

impl Step {
    fn apply(self, clock: &ManualClock, period: u64) {
        let now = clock.now();
        let next = match self {
            Step::Zero => now,
            Step::Nanos(n) => now.saturating_add(n),
            Step::Periods(k, d) => now.saturating_add((k * period).saturating_add_signed(d.into())),
            Step::Sixteenths(n) => now.saturating_add(period / 16 * n),
            Step::Back(n) => now.saturating_sub(period / 16 * n),
        };
        clock.set(next);
    }
}

#[derive(Debug, Clone)]
struct Case {
    limit: u32,
    period: u64,
    steps: Vec<(Step, u32)>,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Zero),
        3 => (0u64..50).prop_map(Step::Nanos),
        3 => (0u64..3, -1i8..=1).prop_map(|(k, d)| Step::Periods(k, d)),
        4 => (1u64..16).prop_map(Step::Sixteenths),
        1 => (1u64..40).prop_map(Step::Back),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (1u32..12, prop_oneof![1u64..200, 1_000u64..10_000_000_000])
        .prop_filter("at most one per ns", |(limit, period)| {
            u64::from(*limit) <= *period
        })
        .prop_flat_map(|(limit, period)| {
            let cost = prop_oneof![6 => Just(1u32), 3 => 0..=limit, 1 => limit..limit + 3];
            (
                Just(limit),
                Just(period),
                proptest::collection::vec((step(), cost), 1..150),
            )
        })
        .prop_map(|(limit, period, steps)| Case {
            limit,
            period,
            steps,
        })
}

fn quota(case: &Case) -> Quota {
    Quota::with_period(case.limit, Duration::from_nanos(case.period)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn direct_limiter_matches_model(case in case()) {
        let clock = ManualClock::new();
        let limiter =
            RateLimiter::<SlidingWindowLog, _>::with_clock(quota(&case), clock.clone()).unwrap();
        let mut model = ModelLog::with_params(case.limit, case.period);
        for (i, (step, cost)) in case.steps.iter().enumerate() {
            step.apply(&clock, case.period);
            let now = clock.now();
            let peeked = limiter.peek_n(*cost).map(|d| Outcome::of(&d));
            let got = limiter.check_n(*cost).map(|d| Outcome::of(&d));
            let want = model.request(now, *cost);
            prop_assert_eq!(&got, &want, "step {} at t={}", i, now);
            prop_assert_eq!(peeked, got, "peek disagrees with check at step {}", i);
        }
    }

    #[test]
    fn keyed_limiter_matches_one_model_per_key(
        case in case(),
        keys in proptest::collection::vec(prop_oneof![10 => 0u8..3, 1 => Just(u8::MAX)], 150),
    ) {
        let clock = ManualClock::new();
        let limiter = KeyedRateLimiter::<u8, SlidingWindowLog>::builder(quota(&case))
            .clock(clock.clone())
            .build()
            .unwrap();
        let fresh = ModelLog::with_params(case.limit, case.period);
        let mut models = vec![fresh.clone(); 3];
        let mut present = [false; 3];
        // A key not held decides no earlier than the latest sweep.
        let mut swept_at = 0;
        for ((step, cost), key) in case.steps.iter().zip(keys) {
            step.apply(&clock, case.period);
            let now = clock.now();
            if key == u8::MAX {
                // A sweep drops exactly the keys whose log is empty now; a
                // dropped key starts again as never seen.
                let idle: Vec<usize> =
                    (0..3).filter(|&k| present[k] && models[k].is_idle(now)).collect();
                prop_assert_eq!(limiter.sweep(), idle.len(), "sweep at t={}", now);
                swept_at = swept_at.max(now);
                for k in idle {
                    models[k] = fresh.clone();
                    present[k] = false;
                }
                prop_assert_eq!(limiter.len(), present.iter().filter(|&&p| p).count());
                continue;
            }
            let k = usize::from(key);
            let peeked = limiter.peek_n(&key, *cost).map(|d| Outcome::of(&d));
            let got = limiter.check_n(&key, *cost).map(|d| Outcome::of(&d));
            let at = if present[k] { now } else { now.max(swept_at) };
            let want = models[k].request(at, *cost);
            // A probe (cost 0) of a key not held does not insert it.
            present[k] |= want.is_ok() && *cost > 0;
            prop_assert_eq!(&got, &want, "key {} at t={}", key, now);
            prop_assert_eq!(peeked, got, "peek disagrees with check for key {}", key);
        }
    }
}

/// The fixed window's classic flaw, which the log does not have: 100 per
/// minute, 100 requests at 59 min 50 s and 100 more at 60 min 10 s. A fixed
/// window would pass all 200 within 20 s; the log passes exactly 100.
#[test]
fn no_boundary_burst() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(100).unwrap();
    let limiter = RateLimiter::<SlidingWindowLog, _>::with_clock(quota, clock.clone()).unwrap();
    let first = Duration::from_secs(59 * 60 + 50);
    clock.advance(first);
    let passed = (0..100).filter(|_| limiter.check().is_allowed()).count();
    assert_eq!(passed, 100);
    clock.advance(Duration::from_secs(20)); // 60 min 10 s
    let decisions: Vec<Decision> = (0..100).map(|_| limiter.check()).collect();
    assert!(decisions.iter().all(|d| !d.is_allowed()));
    // The first slot frees when the burst at 59:50 leaves, at 60:50.
    assert_eq!(decisions[0].retry_after(), Duration::from_secs(40));
    assert_eq!(decisions[0].reset_after(), Duration::from_secs(40));
    clock.advance(Duration::from_secs(40) - Duration::from_nanos(1));
    assert!(!limiter.check().is_allowed());
    clock.advance(Duration::from_nanos(1)); // 60 min 50 s: (59:50, 60:50]
    let passed = (0..150).filter(|_| limiter.check().is_allowed()).count();
    assert_eq!(passed, 100);
}

const THREADS: usize = 8;

/// Runs `attempt` on 8 threads at once, `per_thread` times each, and
/// returns every decision.
fn race(per_thread: usize, attempt: impl Fn() -> Decision + Sync) -> Vec<Decision> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    (0..per_thread).map(|_| attempt()).collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// With the clock frozen, racing threads get exactly `limit` admissions, and
/// the admitted decisions' `remaining` are `limit - 1` down to 0, once each:
/// the admissions were serialised.
fn assert_exactly_limit(decisions: &[Decision], limit: u32) {
    let mut remaining: Vec<u32> = decisions
        .iter()
        .filter(|d| d.is_allowed())
        .map(|d| d.remaining())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..limit).collect::<Vec<_>>());
}

#[test]
fn racing_threads_admit_exactly_the_limit() {
    let clock = ManualClock::new();
    clock.set(1_000);
    let quota = Quota::per_second(1_000).unwrap();
    let limiter = RateLimiter::<SlidingWindowLog, _>::with_clock(quota, clock).unwrap();
    let decisions = race(400, || limiter.check());
    assert_exactly_limit(&decisions, 1_000);
}

#[test]
fn racing_threads_on_one_key_admit_exactly_the_limit() {
    let clock = ManualClock::new();
    clock.set(1_000);
    let quota = Quota::per_minute(777).unwrap();
    let limiter = Arc::new(
        KeyedRateLimiter::<String, SlidingWindowLog>::builder(quota)
            .clock(clock)
            .build()
            .unwrap(),
    );
    let decisions = race(300, || limiter.check("hot"));
    assert_exactly_limit(&decisions, 777);
    assert_eq!(limiter.len(), 1);
}
