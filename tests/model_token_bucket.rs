//! The token bucket (GCRA) against an independently written reference model
//! (`models/token_bucket.rs`): a plain token bucket that keeps its credit in
//! nanoseconds of refill time and refills it lazily. Both are driven with
//! the same random sequences of (advance time, cost) on a manual clock;
//! every decision must agree.

mod models;

use models::token_bucket::ModelBucket;
use models::{Model, Outcome};
use proptest::prelude::*;
use rategate::{KeyedRateLimiter, ManualClock, Quota, RateLimiter, TokenBucket};
use std::time::Duration;

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
        let mut model = ModelBucket::with_params(case.limit, case.period, case.burst);
        let interval = case.period.div_ceil(u64::from(case.limit));
        for (i, (gap, cost)) in case.steps.iter().enumerate() {
            clock.advance_nanos(gap.nanos(interval));
            let now = clock.now_for_test();
            let peeked = limiter.peek_n(*cost).map(|d| Outcome::of(&d));
            let got = limiter.check_n(*cost).map(|d| Outcome::of(&d));
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
            (0..3).map(|_| ModelBucket::with_params(case.limit, case.period, case.burst)).collect();
        let interval = case.period.div_ceil(u64::from(case.limit));
        for ((gap, cost), key) in case.steps.iter().zip(keys) {
            clock.advance_nanos(gap.nanos(interval));
            let now = clock.now_for_test();
            let got = limiter.check_n(&key, *cost).map(|d| Outcome::of(&d));
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

/// Quotas whose state could overflow `u64` time are refused; at the end of
/// time `remaining` counts only what can still pass, and a denial that can
/// never pass reports nothing remaining.
#[test]
fn extreme_quotas_are_refused_or_exact() {
    use rategate::{QuotaError, Sharded};
    let huge: Quota = "4/18446744073709550903ns".parse().unwrap();
    assert_eq!(
        RateLimiter::<TokenBucket>::new(huge).err(),
        Some(QuotaError::BurstOverflow)
    );
    assert_eq!(
        RateLimiter::<Sharded<TokenBucket, 4>>::new(huge).err(),
        Some(QuotaError::BurstOverflow)
    );
    // The largest tolerance accepted: 4 x 2^61 ns = 2^63 ns > 2^63 - 1.
    let edge = Quota::with_period(4, Duration::from_nanos(4 << 61))
        .unwrap()
        .burst(4)
        .unwrap();
    assert!(RateLimiter::<TokenBucket>::new(edge).is_err());
    // 5 split over 4 shards: shard 0 holds 2 tokens refilled at a quarter
    // of the rate, a tolerance of 8 intervals where the whole has 5.
    let interval = (1u64 << 60) + (1 << 58);
    let uneven = Quota::with_period(5, Duration::from_nanos(5 * interval)).unwrap();
    assert!(RateLimiter::<TokenBucket>::new(uneven).is_ok());
    assert_eq!(
        RateLimiter::<Sharded<TokenBucket, 4>>::new(uneven).err(),
        Some(QuotaError::BurstOverflow)
    );
    let ok = Quota::with_period(4, Duration::from_nanos(1 << 61)).unwrap();
    let clock = ManualClock::new();
    clock.set(1_000);
    let sharded = RateLimiter::<Sharded<TokenBucket, 4>, _>::with_clock(ok, clock).unwrap();
    assert_eq!((0..8).filter(|_| sharded.check().is_allowed()).count(), 4);

    // Near u64::MAX: only three more TATs fit below the end of time.
    let interval = 1u64 << 40;
    let quota = Quota::with_period(1, Duration::from_nanos(interval))
        .unwrap()
        .burst(4)
        .unwrap();
    let clock = ManualClock::new();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone()).unwrap();
    clock.set(u64::MAX - 3 * interval - 7);
    let probe = limiter.peek_n(0).unwrap();
    let first = limiter.check();
    assert!(first.is_allowed());
    let passed = 1 + (0..8).filter(|_| limiter.check().is_allowed()).count() as u32;
    assert_eq!(passed, 3);
    assert_eq!(probe.remaining(), 3);
    assert_eq!(first.remaining(), 2);
    let never = limiter.check();
    assert!(!never.is_allowed());
    assert_eq!(never.remaining(), 0);
    assert_eq!(never.retry_after_nanos(), u64::MAX);
}
