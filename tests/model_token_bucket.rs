//! The token bucket (GCRA) against an independently written reference model:
//! a plain token bucket that keeps its credit in nanoseconds of refill time
//! and refills it lazily. Both are driven with the same random sequences of
//! (advance time, cost) on a manual clock; every decision must agree.

use proptest::prelude::*;
use rategate::{
    CheckError, Decision, KeyedRateLimiter, ManualClock, Quota, RateLimiter, TokenBucket,
};
use std::time::Duration;

/// A token bucket the textbook way. `credit` is the bucket's content
/// measured in nanoseconds of refill (tokens x interval), so fractional
/// tokens are exact; the bucket starts full.
struct ModelBucket {
    interval: u128,
    capacity: u128,
    credit: u128,
    last: u128,
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    allowed: bool,
    limit: u32,
    remaining: u32,
    reset_after: u64,
    retry_after: u64,
}

impl ModelBucket {
    fn new(limit: u32, period: u64, burst: Option<u32>) -> Self {
        let interval = u128::from(period / u64::from(limit));
        let capacity = u128::from(burst.unwrap_or(limit));
        ModelBucket {
            interval,
            capacity,
            credit: capacity * interval,
            last: 0,
        }
    }

    /// Time only moves forward in this model's inputs.
    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        if u128::from(cost) > self.capacity {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.capacity as u32,
            });
        }
        let now = u128::from(now);
        let full = self.capacity * self.interval;
        self.credit = (self.credit + (now - self.last)).min(full);
        self.last = now;
        let need = u128::from(cost) * self.interval;
        let allowed = self.credit >= need;
        let retry_after = if allowed {
            self.credit -= need;
            0
        } else {
            need - self.credit
        };
        Ok(Outcome {
            allowed,
            limit: self.capacity as u32,
            remaining: (self.credit / self.interval) as u32,
            reset_after: (full - self.credit) as u64,
            retry_after: retry_after as u64,
        })
    }
}

fn outcome(d: Decision) -> Outcome {
    assert_eq!(d.delay_nanos(), 0, "a token bucket never delays");
    Outcome {
        allowed: d.is_allowed(),
        limit: d.limit(),
        remaining: d.remaining(),
        reset_after: d.reset_after_nanos(),
        retry_after: d.retry_after_nanos(),
    }
}

#[derive(Debug, Clone)]
struct Case {
    limit: u32,
    period: u64,
    burst: Option<u32>,
    steps: Vec<(Gap, u32)>,
}

/// How far to move the clock before a request: nothing, a little, exactly
/// some emission intervals (plus or minus one nanosecond), or a long pause.
#[derive(Debug, Clone, Copy)]
enum Gap {
    Zero,
    Nanos(u64),
    Intervals(u64, i8),
    Long(u64),
}

impl Gap {
    fn nanos(self, interval: u64) -> u64 {
        match self {
            Gap::Zero => 0,
            Gap::Nanos(n) => n,
            Gap::Intervals(k, delta) => (k * interval).saturating_add_signed(delta.into()),
            Gap::Long(n) => n * interval * 1000,
        }
    }
}

fn case() -> impl Strategy<Value = Case> {
    (1u32..60, prop_oneof![1u64..2_000, 1_000u64..10_000_000_000])
        .prop_filter("at most one per ns", |(limit, period)| {
            u64::from(*limit) <= *period
        })
        .prop_flat_map(|(limit, period)| {
            let gap = prop_oneof![
                3 => Just(Gap::Zero),
                3 => (0u64..5_000).prop_map(Gap::Nanos),
                3 => (0u64..4, -1i8..=1).prop_map(|(k, d)| Gap::Intervals(k, d)),
                1 => (0u64..3).prop_map(Gap::Long),
            ];
            (
                Just(limit),
                Just(period),
                proptest::option::of(1u32..80),
                proptest::collection::vec((gap, 0u32..12), 1..200),
            )
        })
        .prop_map(|(limit, period, burst, steps)| Case {
            limit,
            period,
            burst,
            steps,
        })
}

fn quota(case: &Case) -> Quota {
    let quota = Quota::with_period(case.limit, Duration::from_nanos(case.period)).unwrap();
    match case.burst {
        Some(b) => quota.burst(b).unwrap(),
        None => quota,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn direct_limiter_matches_model(case in case()) {
        let clock = ManualClock::new();
        let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota(&case), clock.clone()).unwrap();
        let mut model = ModelBucket::new(case.limit, case.period, case.burst);
        let interval = case.period / u64::from(case.limit);
        for (i, (gap, cost)) in case.steps.iter().enumerate() {
            clock.advance_nanos(gap.nanos(interval));
            let now = clock.now_for_test();
            let peeked = limiter.peek_n(*cost).map(outcome);
            let got = limiter.check_n(*cost).map(outcome);
            let want = model.request(now, *cost);
            prop_assert_eq!(&got, &want, "step {} at t={}", i, now);
            prop_assert_eq!(peeked, got, "peek disagrees with check at step {}", i);
        }
    }

    #[test]
    fn keyed_limiter_matches_one_model_per_key(case in case(), keys in proptest::collection::vec(0u8..3, 200)) {
        let clock = ManualClock::new();
        let limiter = KeyedRateLimiter::<u8, TokenBucket>::builder(quota(&case))
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut models: Vec<ModelBucket> =
            (0..3).map(|_| ModelBucket::new(case.limit, case.period, case.burst)).collect();
        let interval = case.period / u64::from(case.limit);
        for ((gap, cost), key) in case.steps.iter().zip(keys) {
            clock.advance_nanos(gap.nanos(interval));
            let now = clock.now_for_test();
            let got = limiter.check_n(&key, *cost).map(outcome);
            let want = models[usize::from(key)].request(now, *cost);
            prop_assert_eq!(got, want, "key {} at t={}", key, now);
        }
    }
}

/// `Clock::now` without importing the trait into every call site.
trait NowForTest {
    fn now_for_test(&self) -> u64;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> u64 {
        rategate::Clock::now(self)
    }
}

#[test]
fn keyed_idle_keys_are_swept_without_changing_decisions() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(2).unwrap();
    let limiter = KeyedRateLimiter::<String, TokenBucket>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check("a").is_allowed());
    assert!(limiter.check("b").is_allowed());
    assert!(limiter.check("b").is_allowed());
    clock.advance(Duration::from_millis(500));
    // "a" is full again after 500 ms; "b" still owes 500 ms.
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.check("b").remaining(), 0);
    assert_eq!(limiter.check("a").remaining(), 1);
}
