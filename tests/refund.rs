//! Refunds and run-time quota changes against the reference models: for
//! every algorithm, random sequences of (advance time, check / peek / refund
//! / change the quota, cost) on a manual clock, on a direct limiter and on a
//! keyed one (three keys, one model each); every decision and every amount
//! given back must agree with the model's, whose refund and quota change are
//! written from the documented semantics. Plus the shared promises: a refund
//! never leaves more room than a key never seen, and a refund for a key not
//! held is a no-op.

mod models;

use models::fixed_window::ModelWindow;
use models::leaky_bucket::Nginx;
use models::sliding_window_counter::ModelCounter;
use models::sliding_window_log::ModelLog;
use models::token_bucket::ModelBucket;
use models::{Model, Outcome, Retune};
use proptest::prelude::*;
use rategate::algorithm::{Adjust, Adjustable, Sharded};
use rategate::{
    Algorithm, Clock, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
enum Op {
    Check,
    Peek,
    Refund,
    /// A new limit for the same period, and a new burst.
    SetQuota(u32, Option<u32>),
}

/// How far the clock moves before an operation.
#[derive(Debug, Clone, Copy)]
enum Gap {
    Zero,
    Nanos(u64),
    /// `n` emission intervals (period / limit), plus or minus one ns.
    Intervals(u64, i8),
    /// `n / 16` of the period.
    Sixteenths(u64),
}

impl Gap {
    fn nanos(self, quota: &Quota) -> u64 {
        let unit = quota.emission_interval_nanos();
        match self {
            Gap::Zero => 0,
            Gap::Nanos(n) => n,
            Gap::Intervals(n, d) => (unit * n).saturating_add_signed(d.into()),
            Gap::Sixteenths(n) => quota.period_nanos() / 16 * n,
        }
    }
}

/// Limits 1 to 12 over periods of at least a millisecond per request (so
/// the leaky bucket's rate is whole), with or without a burst.
fn quotas() -> impl Strategy<Value = Quota> {
    (
        1u32..=12,
        1_000_000u64..=50_000_000,
        0u64..1000,
        prop::option::of(1u32..=12),
    )
        .prop_map(|(limit, per, extra, burst)| {
            let period = Duration::from_nanos(u64::from(limit) * per + extra);
            let quota = Quota::with_period(limit, period).unwrap();
            burst.map_or(quota, |b| quota.burst(b).unwrap())
        })
}

/// The quota an [`Op::SetQuota`] sets in place of `quota`.
fn changed(quota: &Quota, limit: u32, burst: Option<u32>) -> Quota {
    let new = Quota::with_period(limit, quota.period()).unwrap();
    burst.map_or(new, |b| new.burst(b).unwrap())
}

fn ops() -> impl Strategy<Value = Vec<(Gap, Op, u32, u8)>> {
    ops_with(0)
}

/// Operations, with quota changes at this weight (0: none).
fn ops_with(changes: u32) -> impl Strategy<Value = Vec<(Gap, Op, u32, u8)>> {
    let gap = prop_oneof![
        3 => Just(Gap::Zero),
        1 => (0u64..2_000_000).prop_map(Gap::Nanos),
        2 => (0u64..4, -1i8..=1).prop_map(|(n, d)| Gap::Intervals(n, d)),
        2 => (0u64..20).prop_map(Gap::Sixteenths),
    ];
    let op = prop_oneof![
        4 => Just(Op::Check),
        1 => Just(Op::Peek),
        3 => Just(Op::Refund),
        changes => (1u32..=12, prop::option::of(1u32..=12)).prop_map(|(l, b)| Op::SetQuota(l, b)),
    ];
    prop::collection::vec((gap, op, 0u32..=14, 0u8..3), 1..120)
}

/// Sets a direct limiter's quota (only [`Adjustable`] ones can).
type SetDirect<A> = fn(&RateLimiter<A, ManualClock>, Quota);

/// Drives one direct limiter and one model with the same operations.
fn direct<A: Algorithm, M: Model + Retune>(
    quota: Quota,
    ops: &[(Gap, Op, u32, u8)],
    set_quota: SetDirect<A>,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
    let mut model = M::new(&quota);
    for (i, &(gap, op, cost, _)) in ops.iter().enumerate() {
        clock.advance_nanos(gap.nanos(&quota));
        let now = clock.now();
        match op {
            Op::Check => {
                let got = limiter.check_n(cost).map(|d| Outcome::of(&d));
                prop_assert_eq!(got, model.request(now, cost), "check {} at t={}", i, now);
            }
            Op::Peek => {
                let got = limiter.peek_n(cost).map(|d| Outcome::of(&d));
                prop_assert_eq!(got, model.peek(now, cost), "peek {} at t={}", i, now);
            }
            Op::Refund => {
                let given = limiter.refund(cost);
                prop_assert_eq!(given, model.refund(now, cost), "refund {} at t={}", i, now);
                prop_assert!(given <= cost);
            }
            Op::SetQuota(limit, burst) => {
                let new = changed(&quota, limit, burst);
                set_quota(&limiter, new);
                model.set_quota(&new);
                prop_assert_eq!(limiter.quota(), new);
            }
        }
        // Never more room than a key never seen.
        let capacity = limiter.algorithm().capacity();
        prop_assert!(limiter.peek_n(0).unwrap().remaining() <= capacity);
    }
    Ok(())
}

/// Sets a keyed limiter's quota (only [`Adjustable`] ones can).
type SetKeyed<A> = fn(&KeyedRateLimiter<u8, A, ManualClock>, Quota);

/// Drives a keyed limiter (keys 0 to 2) and one model per key.
fn keyed<A: Algorithm, M: Model + Retune>(
    quota: Quota,
    ops: &[(Gap, Op, u32, u8)],
    set_quota: SetKeyed<A>,
) -> Result<(), TestCaseError> {
    let mut current = quota;
    let clock = ManualClock::new();
    let limiter = KeyedRateLimiter::<u8, A, _>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut models: Vec<Option<M>> = vec![None, None, None];
    for &(gap, op, cost, key) in ops {
        clock.advance_nanos(gap.nanos(&quota));
        let now = clock.now();
        let slot = &mut models[usize::from(key)];
        match op {
            Op::Check | Op::Peek => {
                let mut model = slot.clone().unwrap_or_else(|| M::new(&current));
                let (got, want) = if matches!(op, Op::Check) {
                    (limiter.check_n(&key, cost), model.request(now, cost))
                } else {
                    (limiter.peek_n(&key, cost), model.peek(now, cost))
                };
                let got = got.map(|d| Outcome::of(&d));
                prop_assert_eq!(got, want, "key {} at t={}", key, now);
                // The limiter holds a key once it admitted a cost.
                if matches!(op, Op::Check) && cost > 0 && want.is_ok_and(|o| o.allowed) {
                    *slot = Some(model);
                }
            }
            Op::Refund => {
                let held = limiter.len();
                let want = slot.as_mut().map_or(0, |m| m.refund(now, cost));
                prop_assert_eq!(limiter.refund(&key, cost), want, "key {} at t={}", key, now);
                // A refund inserts no key.
                prop_assert_eq!(limiter.len(), held);
            }
            Op::SetQuota(limit, burst) => {
                current = changed(&quota, limit, burst);
                set_quota(&limiter, current);
                models
                    .iter_mut()
                    .flatten()
                    .for_each(|m| m.set_quota(&current));
            }
        }
    }
    Ok(())
}

/// For limiters whose quota is fixed: the operations never change it.
fn fixed<A: Algorithm>(_: &RateLimiter<A, ManualClock>, _: Quota) {
    unreachable!("no quota change for a fixed algorithm")
}

fn fixed_keyed<A: Algorithm>(_: &KeyedRateLimiter<u8, A, ManualClock>, _: Quota) {
    unreachable!("no quota change for a fixed algorithm")
}

fn adjust<A: Adjust>(limiter: &RateLimiter<Adjustable<A>, ManualClock>, quota: Quota) {
    limiter.set_quota(quota).unwrap();
}

fn adjust_keyed<A: Adjust>(
    limiter: &KeyedRateLimiter<u8, Adjustable<A>, ManualClock>,
    quota: Quota,
) {
    limiter.set_quota(quota).unwrap();
}

/// Refunds and quota changes on an [`Adjustable`] algorithm.
fn adjustable<A: Adjust, M: Model + Retune>(
    quota: Quota,
    ops: &[(Gap, Op, u32, u8)],
) -> Result<(), TestCaseError> {
    direct::<Adjustable<A>, M>(quota, ops, adjust)?;
    keyed::<Adjustable<A>, M>(quota, ops, adjust_keyed)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fixed_window_quota_changes(quota in quotas(), ops in ops_with(2)) {
        adjustable::<FixedWindow, ModelWindow>(quota, &ops)?;
    }

    #[test]
    fn sliding_window_counter_quota_changes(quota in quotas(), ops in ops_with(2)) {
        adjustable::<SlidingWindowCounter, ModelCounter>(quota, &ops)?;
    }

    #[test]
    fn sliding_window_log_quota_changes(quota in quotas(), ops in ops_with(2)) {
        adjustable::<SlidingWindowLog, ModelLog>(quota, &ops)?;
    }

    #[test]
    fn leaky_bucket_quota_changes(quota in quotas(), ops in ops_with(2)) {
        adjustable::<LeakyBucket, Nginx>(quota, &ops)?;
    }

    #[test]
    fn token_bucket_quota_changes(quota in quotas(), ops in ops_with(2)) {
        adjustable::<TokenBucket, ModelBucket>(quota, &ops)?;
    }

    #[test]
    fn token_bucket(quota in quotas(), ops in ops()) {
        direct::<TokenBucket, ModelBucket>(quota, &ops, fixed)?;
        keyed::<TokenBucket, ModelBucket>(quota, &ops, fixed_keyed)?;
    }

    #[test]
    fn fixed_window(quota in quotas(), ops in ops()) {
        direct::<FixedWindow, ModelWindow>(quota, &ops, fixed)?;
        keyed::<FixedWindow, ModelWindow>(quota, &ops, fixed_keyed)?;
    }

    #[test]
    fn sliding_window_counter(quota in quotas(), ops in ops()) {
        direct::<SlidingWindowCounter, ModelCounter>(quota, &ops, fixed)?;
        keyed::<SlidingWindowCounter, ModelCounter>(quota, &ops, fixed_keyed)?;
    }

    #[test]
    fn sliding_window_log(quota in quotas(), ops in ops()) {
        direct::<SlidingWindowLog, ModelLog>(quota, &ops, fixed)?;
        keyed::<SlidingWindowLog, ModelLog>(quota, &ops, fixed_keyed)?;
    }

    #[test]
    fn leaky_bucket(quota in quotas(), ops in ops()) {
        direct::<LeakyBucket, Nginx>(quota, &ops, fixed)?;
        keyed::<LeakyBucket, Nginx>(quota, &ops, fixed_keyed)?;
    }

    /// A sharded limiter gives back at most what its shards hold in use,
    /// never leaves more room than a fresh one, and a refund of everything
    /// admitted (clock frozen) restores every shard.
    #[test]
    fn sharded_token_bucket(costs in prop::collection::vec((1u32..=3, any::<bool>()), 1..40)) {
        let quota = Quota::per_minute(12).unwrap();
        let limiter =
            RateLimiter::<Sharded<TokenBucket, 4>, _>::with_clock(quota, ManualClock::new()).unwrap();
        let mut in_use = 0;
        for (cost, refund) in costs {
            if refund {
                let given = limiter.refund(cost);
                prop_assert_eq!(given, cost.min(in_use));
                in_use -= given;
            } else if limiter.check_n(cost).unwrap().is_allowed() {
                in_use += cost;
            }
            prop_assert_eq!(limiter.peek_n(0).unwrap().remaining(), 12 - in_use);
        }
        prop_assert_eq!(limiter.refund(u32::MAX), in_use);
        prop_assert_eq!((0..20).filter(|_| limiter.check().is_allowed()).count(), 12);
    }
}

#[test]
fn refund_of_a_key_not_held_inserts_nothing() {
    let limiter =
        KeyedRateLimiter::<String, TokenBucket, _>::builder(Quota::per_second(2).unwrap())
            .clock(ManualClock::new())
            .build()
            .unwrap();
    assert_eq!(limiter.refund("nobody", 5), 0);
    assert!(limiter.is_empty());
    assert!(limiter.check_n("a", 2).unwrap().is_allowed());
    assert!(limiter.reset("a"));
    assert_eq!(limiter.refund("a", 1), 0);
    assert!(limiter.is_empty());
}

/// The examples of the issue: each algorithm's refund in one line.
#[test]
fn documented_semantics() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap();
    // Token bucket: the TAT moves back, never below now.
    let tb = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone()).unwrap();
    assert!(tb.check_n(10).unwrap().is_allowed());
    clock.advance(Duration::from_millis(250)); // 2.5 tokens refilled
    assert_eq!(tb.refund(3), 3);
    assert_eq!(tb.peek_n(0).unwrap().remaining(), 5);
    assert_eq!(tb.refund(10), 5); // 4.5 tokens short of full: 5 whole ones
    assert_eq!(tb.peek_n(0).unwrap().remaining(), 10);
    // Fixed window: only within the same window.
    let fw = RateLimiter::<FixedWindow, _>::with_clock(quota, clock.clone()).unwrap();
    assert!(fw.check_n(4).unwrap().is_allowed());
    assert_eq!(fw.refund(1), 1);
    assert_eq!(fw.peek().remaining(), 6);
    clock.advance(Duration::from_secs(1));
    assert_eq!(fw.refund(3), 0);
    // Sliding window log: the oldest entries go first.
    let log = RateLimiter::<SlidingWindowLog, _>::with_clock(quota, clock.clone()).unwrap();
    assert!(log.check_n(6).unwrap().is_allowed());
    clock.advance(Duration::from_millis(500));
    assert!(log.check_n(4).unwrap().is_allowed());
    assert_eq!(log.refund(5), 5); // the 6 at 0 s become 1
    clock.advance(Duration::from_millis(500)); // the 1 at 0 s leaves
    assert_eq!(log.peek_n(0).unwrap().remaining(), 6);
    // Leaky bucket: water out, never below a new key's level.
    let lb =
        RateLimiter::<LeakyBucket, _>::with_clock(quota.burst(4).unwrap(), clock.clone()).unwrap();
    assert!(lb.check_n(5).unwrap().is_allowed());
    assert!(!lb.check().is_allowed());
    assert_eq!(lb.refund(2), 2);
    assert_eq!(lb.peek_n(0).unwrap().remaining(), 2);
    assert_eq!(lb.refund(9), 3);
    assert_eq!(lb.peek_n(0).unwrap().remaining(), 5);
}
