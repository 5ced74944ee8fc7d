//! `KeyedRateLimiter::check_many` decides as separate checks at the same
//! instant would: every algorithm, keys repeated within a batch, keys new
//! to the map, a key cap, and time moving between batches.

use proptest::prelude::*;
use rategate::{
    Algorithm, Clock, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Overflow, Quota,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How the limiters of a comparison are built.
#[derive(Debug, Clone, Copy)]
struct Options {
    max_keys: Option<usize>,
    overflow: Overflow,
    auto_sweep: bool,
}

fn options() -> impl Strategy<Value = Options> {
    (
        prop::option::of(1usize..4),
        prop_oneof![
            Just(Overflow::Shared),
            Just(Overflow::Deny),
            Just(Overflow::Allow)
        ],
        any::<bool>(),
    )
        .prop_map(|(max_keys, overflow, auto_sweep)| Options {
            max_keys,
            overflow,
            auto_sweep,
        })
}

/// Runs `batches` (a gap in ms, then keys) through `check_many` on one
/// limiter and through `check` on another, on clocks moved alike.
fn same_as_separate_checks<A: Algorithm>(
    quota: Quota,
    options: Options,
    batches: &[(u64, Vec<u8>)],
) -> Result<(), TestCaseError> {
    let build = |clock: &ManualClock| {
        let mut builder = KeyedRateLimiter::<u8, A, _>::builder(quota)
            .clock(clock.clone())
            .overflow(options.overflow);
        if let Some(n) = options.max_keys {
            builder = builder.max_keys(n);
        }
        if options.auto_sweep {
            builder = builder.auto_sweep(Duration::from_millis(300));
        }
        builder.build().unwrap()
    };
    let (batch_clock, single_clock) = (ManualClock::new(), ManualClock::new());
    let (batched, single) = (build(&batch_clock), build(&single_clock));
    for (gap, keys) in batches {
        batch_clock.advance_nanos(gap * 1_000_000);
        single_clock.advance_nanos(gap * 1_000_000);
        let mut got = Vec::new();
        let admitted = batched.check_many(keys, |key, d| got.push((*key, d)));
        let want: Vec<_> = keys.iter().map(|k| (*k, single.check(k))).collect();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(
            admitted,
            want.iter().filter(|(_, d)| d.is_allowed()).count()
        );
        prop_assert_eq!(batched.len(), single.len());
    }
    Ok(())
}

fn batches() -> impl Strategy<Value = Vec<(u64, Vec<u8>)>> {
    prop::collection::vec((0u64..400, prop::collection::vec(0u8..6, 0..12)), 1..20)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_algorithm(batches in batches(), options in options()) {
        let quota: Quota = "5/s burst=3".parse().unwrap();
        same_as_separate_checks::<TokenBucket>(quota, options, &batches)?;
        same_as_separate_checks::<FixedWindow>(quota, options, &batches)?;
        same_as_separate_checks::<SlidingWindowCounter>(quota, options, &batches)?;
        same_as_separate_checks::<SlidingWindowLog>(quota, options, &batches)?;
        same_as_separate_checks::<LeakyBucket>(quota, options, &batches)?;
    }
}

/// A clock that moves one second forward at every reading.
#[derive(Clone, Default)]
struct Ticking(Arc<AtomicU64>);

impl Clock for Ticking {
    fn now(&self) -> u64 {
        self.0.fetch_add(1_000_000_000, Ordering::Relaxed)
    }
}

#[test]
fn one_clock_reading_per_batch() {
    // 1 a second: a reading per key would admit every "a".
    let limiter = KeyedRateLimiter::<&str, TokenBucket, _>::builder(Quota::per_second(1).unwrap())
        .clock(Ticking::default())
        .build()
        .unwrap();
    let mut allowed = Vec::new();
    limiter.check_many(["a", "a", "a"].iter(), |_, d| allowed.push(d.is_allowed()));
    assert_eq!(allowed, [true, false, false]);
}

#[test]
fn decisions_in_order() {
    let clock = ManualClock::new();
    let limiter =
        KeyedRateLimiter::<String, TokenBucket, _>::builder(Quota::per_second(2).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    let keys = ["a", "b", "a", "a", "b", "c"];
    let mut decisions = Vec::new();
    assert_eq!(
        limiter.check_many(keys, |k, d| decisions.push((k, d.is_allowed()))),
        5
    );
    assert_eq!(
        decisions,
        [
            ("a", true),
            ("b", true),
            ("a", true),
            ("a", false),
            ("b", true),
            ("c", true)
        ]
    );
    assert_eq!(limiter.len(), 3);
}
