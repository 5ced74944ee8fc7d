//! The sliding window log against an independently written reference model:
//! a plain list of every admission ever made, `(time, cost)` in `u128`,
//! that sums the costs inside `(now - period, now]` from scratch on every
//! request. Both are driven with the same random sequences of (move the
//! clock, cost) on a manual clock, including steps of zero, exact window
//! edges and steps back; every decision field must agree.

use proptest::prelude::*;
use rategate::{
    CheckError, Clock, Decision, KeyedRateLimiter, ManualClock, Quota, RateLimiter,
    SlidingWindowLog,
};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Every admission, never pruned. `latest` is the latest reading a check
/// has seen: an earlier reading counts as it (no time elapsed).
#[derive(Debug, Clone)]
struct ModelLog {
    limit: u128,
    period: u128,
    admitted: Vec<(u128, u32)>,
    latest: u128,
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    allowed: bool,
    limit: u32,
    remaining: u32,
    reset_after: u64,
    retry_after: u64,
    delay: u64,
}

fn to_u64(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

impl ModelLog {
    fn new(limit: u32, period: u64) -> Self {
        ModelLog {
            limit: limit.into(),
            period: period.into(),
            admitted: Vec::new(),
            latest: 0,
        }
    }

    /// Admissions still counting at `t`: admitted at `a` with `t - period < a`.
    fn in_window(&self, t: u128) -> Vec<(u128, u32)> {
        self.admitted
            .iter()
            .copied()
            .filter(|&(a, _)| a + self.period > t)
            .collect()
    }

    fn used(&self, t: u128) -> u128 {
        self.in_window(t).iter().map(|&(_, c)| u128::from(c)).sum()
    }

    fn is_idle(&self, now: u64) -> bool {
        self.in_window(self.latest.max(now.into())).is_empty()
    }

    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        if u128::from(cost) > self.limit {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.limit as u32,
            });
        }
        let real = u128::from(now);
        self.latest = self.latest.max(real);
        let t = self.latest;
        let used = self.used(t);
        let allowed = used + u128::from(cost) <= self.limit;
        if allowed && cost > 0 {
            self.admitted.push((t, cost));
        }
        let window = self.in_window(t);
        let reset_after = window
            .iter()
            .map(|&(a, _)| a + self.period - real)
            .max()
            .unwrap_or(0);
        let retry_after = if allowed {
            0
        } else {
            // The earliest expiry time after which what is left in the window
            // plus this cost fits.
            let mut expiries: Vec<u128> = window.iter().map(|&(a, _)| a + self.period).collect();
            expiries.sort_unstable();
            let at = expiries
                .into_iter()
                .find(|&e| {
                    let left: u128 = window
                        .iter()
                        .filter(|&&(a, _)| a + self.period > e)
                        .map(|&(_, c)| u128::from(c))
                        .sum();
                    left + u128::from(cost) <= self.limit
                })
                .expect("an empty window always fits");
            at - real
        };
        let used_after = self.used(t);
        Ok(Outcome {
            allowed,
            limit: self.limit as u32,
            remaining: (self.limit - used_after) as u32,
            reset_after: to_u64(reset_after),
            retry_after: to_u64(retry_after),
            delay: 0,
        })
    }
}

fn outcome(d: Decision) -> Outcome {
    Outcome {
        allowed: d.is_allowed(),
        limit: d.limit(),
        remaining: d.remaining(),
        reset_after: d.reset_after_nanos(),
        retry_after: d.retry_after_nanos(),
        delay: d.delay_nanos(),
    }
}

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
        let mut model = ModelLog::new(case.limit, case.period);
        for (i, (step, cost)) in case.steps.iter().enumerate() {
            step.apply(&clock, case.period);
            let now = clock.now();
            let peeked = limiter.peek_n(*cost).map(outcome);
            let got = limiter.check_n(*cost).map(outcome);
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
        let fresh = ModelLog::new(case.limit, case.period);
        let mut models = vec![fresh.clone(); 3];
        let mut present = [false; 3];
        for ((step, cost), key) in case.steps.iter().zip(keys) {
            step.apply(&clock, case.period);
            let now = clock.now();
            if key == u8::MAX {
                // A sweep drops exactly the keys whose log is empty now; a
                // dropped key starts again as never seen.
                let idle: Vec<usize> =
                    (0..3).filter(|&k| present[k] && models[k].is_idle(now)).collect();
                prop_assert_eq!(limiter.sweep(), idle.len(), "sweep at t={}", now);
                for k in idle {
                    models[k] = fresh.clone();
                    present[k] = false;
                }
                prop_assert_eq!(limiter.len(), present.iter().filter(|&&p| p).count());
                continue;
            }
            let k = usize::from(key);
            let peeked = limiter.peek_n(&key, *cost).map(outcome);
            let got = limiter.check_n(&key, *cost).map(outcome);
            let want = models[k].request(now, *cost);
            present[k] |= want.is_ok();
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
