//! `KeyedRateLimiter::check_many` decides as separate checks at the same
//! instant would: every algorithm, keys repeated within a batch, keys new
//! to the map, a key cap, and time moving between batches.

use proptest::prelude::*;
use rategate::{
    Algorithm, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Quota,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

/// Runs `batches` (a gap in ms, then keys) through `check_many` on one
/// limiter and through `check` on another, on clocks moved alike.
fn same_as_separate_checks<A: Algorithm>(
    quota: Quota,
    max_keys: Option<usize>,
    batches: &[(u64, Vec<u8>)],
) -> Result<(), TestCaseError> {
    let build = |clock: &ManualClock| {
        let builder = KeyedRateLimiter::<u8, A, _>::builder(quota).clock(clock.clone());
        match max_keys {
            Some(n) => builder.max_keys(n).build().unwrap(),
            None => builder.build().unwrap(),
        }
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
    fn every_algorithm(batches in batches(), capped in any::<bool>()) {
        let quota: Quota = "5/s burst=3".parse().unwrap();
        let cap = capped.then_some(3);
        same_as_separate_checks::<TokenBucket>(quota, cap, &batches)?;
        same_as_separate_checks::<FixedWindow>(quota, cap, &batches)?;
        same_as_separate_checks::<SlidingWindowCounter>(quota, cap, &batches)?;
        same_as_separate_checks::<SlidingWindowLog>(quota, cap, &batches)?;
        same_as_separate_checks::<LeakyBucket>(quota, cap, &batches)?;
    }
}

#[test]
fn one_clock_reading_per_batch() {
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
