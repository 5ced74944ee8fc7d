//! The algorithm chosen at run time: `AnyAlgorithm` of each kind decides
//! exactly as the reference model of the algorithm it names (times moving
//! forward), and exactly as the static type (times also stepping back),
//! through the direct and the keyed limiter; names parse as configuration
//! files write them, and bad ones are named in the error.

mod models;

use models::fixed_window::ModelWindow;
use models::leaky_bucket::Nginx;
use models::sliding_window_counter::ModelCounter;
use models::sliding_window_log::ModelLog;
use models::token_bucket::ModelBucket;
use models::{Model, Outcome};
use proptest::prelude::*;
use rategate::algorithm::{AlgorithmError, AnyState, UnknownAlgorithm};
use rategate::{
    Algorithm, AlgorithmKind, AnyAlgorithm, Delay, FixedWindow, KeyedRateLimiter, LeakyBucket,
    ManualClock, Quota, QuotaError, RateLimiter, SlidingWindowCounter, SlidingWindowLog,
    TokenBucket,
};
use std::time::Duration;

fn quota(limit: u32, period: u64, burst: Option<u32>, delay: Delay) -> Option<Quota> {
    let q = Quota::with_period(limit, Duration::from_nanos(period)).ok()?;
    let q = match burst {
        Some(b) => q.burst(b).ok()?,
        None => q,
    };
    Some(q.delay(delay))
}

fn dynamic(
    kind: AlgorithmKind,
    q: Quota,
) -> Option<(RateLimiter<AnyAlgorithm, ManualClock>, ManualClock)> {
    let clock = ManualClock::new();
    let algorithm = AnyAlgorithm::new(kind, &q).ok()?;
    Some((
        RateLimiter::from_algorithm(algorithm, q, clock.clone()),
        clock,
    ))
}

/// Every decision of the dynamic limiter of `kind` equals the model's `M`,
/// for forward-moving times from 0.
fn matches_model<M: Model>(
    kind: AlgorithmKind,
    q: Quota,
    steps: &[(u64, u32)],
) -> Result<(), TestCaseError> {
    let Some((limiter, clock)) = dynamic(kind, q) else {
        return Ok(());
    };
    let mut model = M::new(&q);
    let mut now = 0u64;
    for (i, &(step, cost)) in steps.iter().enumerate() {
        now += step;
        clock.set(now);
        let peeked = limiter.peek_n(cost).map(|d| Outcome::of(&d));
        prop_assert_eq!(peeked, model.peek(now, cost), "{} step {} peek", kind, i);
        let got = limiter.check_n(cost).map(|d| Outcome::of(&d));
        prop_assert_eq!(
            got,
            model.request(now, cost),
            "{} step {} at {}",
            kind,
            i,
            now
        );
    }
    Ok(())
}

/// The dynamic limiter of `kind` and the static `A` decide and refund the
/// same, times stepping back included.
fn matches_static<A: Algorithm>(
    kind: AlgorithmKind,
    q: Quota,
    steps: &[(i64, u32)],
) -> Result<(), TestCaseError> {
    let Some((limiter, clock)) = dynamic(kind, q) else {
        prop_assert!(RateLimiter::<A, _>::with_clock(q, ManualClock::new()).is_err());
        return Ok(());
    };
    prop_assert_eq!(limiter.algorithm().kind(), kind);
    let static_clock = ManualClock::new();
    let reference = RateLimiter::<A, _>::with_clock(q, static_clock.clone()).unwrap();
    prop_assert_eq!(
        limiter.algorithm().capacity(),
        reference.algorithm().capacity()
    );
    let mut now = 1u64 << 40;
    for (i, &(step, cost)) in steps.iter().enumerate() {
        now = now.saturating_add_signed(step);
        clock.set(now);
        static_clock.set(now);
        prop_assert_eq!(
            limiter.check_n(cost),
            reference.check_n(cost),
            "{} step {}",
            kind,
            i
        );
        // Every third step also gives part of the cost back: refunds
        // dispatch to the same algorithm.
        if i % 3 == 2 {
            prop_assert_eq!(
                limiter.refund(cost / 2 + 1),
                reference.refund(cost / 2 + 1),
                "{} step {} refund",
                kind,
                i
            );
        }
    }
    Ok(())
}

fn delay() -> impl Strategy<Value = Delay> {
    prop_oneof![
        Just(Delay::Smooth),
        Just(Delay::NoDelay),
        (0u32..6).prop_map(Delay::After)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn dynamic_matches_the_reference_models(
        limit in 1u32..20,
        period_ms in 1u64..5_000,
        burst in proptest::option::of(1u32..25),
        delay in delay(),
        steps in proptest::collection::vec((0u64..400_000_000, 0u32..6), 1..40),
    ) {
        let Some(q) = quota(limit, period_ms * 1_000_000, burst, delay) else { return Ok(()) };
        matches_model::<ModelBucket>(AlgorithmKind::TokenBucket, q, &steps)?;
        matches_model::<Nginx>(AlgorithmKind::LeakyBucket, q, &steps)?;
        matches_model::<ModelWindow>(AlgorithmKind::FixedWindow, q, &steps)?;
        matches_model::<ModelLog>(AlgorithmKind::SlidingWindowLog, q, &steps)?;
        matches_model::<ModelCounter>(AlgorithmKind::SlidingWindowCounter, q, &steps)?;
    }

    #[test]
    fn dynamic_matches_the_static_types(
        limit in 1u32..30,
        period in 1u64..10_000_000_000,
        burst in proptest::option::of(1u32..40),
        delay in delay(),
        steps in proptest::collection::vec((-300_000_000i64..600_000_000, 0u32..8), 1..40),
    ) {
        let Some(q) = quota(limit, period, burst, delay) else { return Ok(()) };
        matches_static::<TokenBucket>(AlgorithmKind::TokenBucket, q, &steps)?;
        matches_static::<LeakyBucket>(AlgorithmKind::LeakyBucket, q, &steps)?;
        matches_static::<FixedWindow>(AlgorithmKind::FixedWindow, q, &steps)?;
        matches_static::<SlidingWindowLog>(AlgorithmKind::SlidingWindowLog, q, &steps)?;
        matches_static::<SlidingWindowCounter>(AlgorithmKind::SlidingWindowCounter, q, &steps)?;
    }
}

#[test]
fn names_parse_as_written_and_display_canonically() {
    for (kind, name) in AlgorithmKind::ALL.iter().zip(AlgorithmKind::NAMES) {
        assert_eq!(name.parse::<AlgorithmKind>(), Ok(*kind));
        assert_eq!(kind.to_string(), name);
        assert_eq!(
            name.to_uppercase()
                .replace('_', "-")
                .parse::<AlgorithmKind>(),
            Ok(*kind)
        );
    }
    assert_eq!(
        "gcra".parse::<AlgorithmKind>(),
        Ok(AlgorithmKind::TokenBucket)
    );
    assert_eq!(
        " fixed_window ".parse::<AlgorithmKind>(),
        Ok(AlgorithmKind::FixedWindow)
    );
    // One alias table for policy files, the simulator and the CLI.
    for (alias, kind) in [
        ("token", AlgorithmKind::TokenBucket),
        ("Leaky Bucket", AlgorithmKind::LeakyBucket),
        ("nginx", AlgorithmKind::LeakyBucket),
        ("sliding", AlgorithmKind::SlidingWindowCounter),
        ("log", AlgorithmKind::SlidingWindowLog),
        ("window", AlgorithmKind::FixedWindow),
    ] {
        assert_eq!(alias.parse::<AlgorithmKind>(), Ok(kind), "{alias}");
    }
    for bad in ["", "sliding_window", "token_bucket2", "tokens"] {
        let err: UnknownAlgorithm = bad.parse::<AlgorithmKind>().unwrap_err();
        assert_eq!(err.name(), bad);
        let text = err.to_string();
        assert!(text.contains(&format!("{bad:?}")), "{text}");
        assert!(text.contains("sliding_window_counter"), "{text}");
    }
}

#[test]
fn from_name_names_the_bad_value_or_the_algorithm_refusing_the_quota() {
    let q = Quota::per_second(10).unwrap();
    match AnyAlgorithm::from_name("sliding_widow_counter", &q) {
        Err(AlgorithmError::Unknown(e)) => assert_eq!(e.name(), "sliding_widow_counter"),
        other => panic!("{other:?}"),
    }
    // The leaky bucket needs at least one request per 1000 s; the others not.
    let slow = Quota::with_period(1, Duration::from_secs(5_000)).unwrap();
    let err = AnyAlgorithm::from_name("leaky_bucket", &slow).unwrap_err();
    assert!(matches!(
        err,
        AlgorithmError::Quota {
            kind: AlgorithmKind::LeakyBucket,
            error: QuotaError::RateTooLow { .. }
        }
    ));
    assert!(err.to_string().starts_with("leaky_bucket: "), "{err}");
    assert!(AnyAlgorithm::from_name("token_bucket", &slow).is_ok());
    // The trait's constructor cannot name an algorithm: no silent default,
    // whichever way the limiter is built from a quota alone.
    assert_eq!(
        AnyAlgorithm::from_quota(&q).unwrap_err(),
        QuotaError::AlgorithmNotChosen
    );
    assert_eq!(
        rategate::RateLimiter::<AnyAlgorithm>::new(q).unwrap_err(),
        QuotaError::AlgorithmNotChosen
    );
    assert_eq!(
        KeyedRateLimiter::<String, AnyAlgorithm>::new(q).unwrap_err(),
        QuotaError::AlgorithmNotChosen
    );
}

#[test]
fn leaky_bucket_by_name_keeps_nginx_options() {
    // 1r/s burst=3 delay=1: two pass at once, the next two are delayed.
    let q: Quota = "1r/s burst=3 delay=1".parse().unwrap();
    let (limiter, _clock) = dynamic(AlgorithmKind::LeakyBucket, q).unwrap();
    let delays: Vec<_> = (0..5).map(|_| limiter.check()).collect();
    assert!(delays[..4].iter().all(|d| d.is_allowed()));
    assert_eq!(delays[1].delay(), Duration::ZERO);
    assert_eq!(delays[2].delay(), Duration::from_secs(1));
    assert_eq!(delays[3].delay(), Duration::from_secs(2));
    assert!(!delays[4].is_allowed());
}

#[test]
fn keyed_limiter_with_a_run_time_algorithm_keeps_keys_apart_and_sweeps() {
    for kind in AlgorithmKind::ALL {
        // Two at once: the leaky bucket needs nginx's `burst=1 nodelay`.
        let q: Quota = match kind {
            AlgorithmKind::LeakyBucket => "2r/s burst=1 nodelay".parse().unwrap(),
            _ => Quota::per_second(2).unwrap(),
        };
        let clock = ManualClock::new();
        let limiter = KeyedRateLimiter::<String, AnyAlgorithm>::builder(q)
            .clock(clock.clone())
            .algorithm(AnyAlgorithm::new(kind, &q).unwrap())
            .build()
            .unwrap();
        assert!(limiter.check("a").is_allowed(), "{kind}");
        assert!(limiter.check("a").is_allowed(), "{kind}");
        assert!(!limiter.check("a").is_allowed(), "{kind}");
        assert!(limiter.check("b").is_allowed(), "{kind}");
        assert_eq!(limiter.len(), 2);
        clock.advance(Duration::from_secs(3));
        assert_eq!(limiter.sweep(), 2, "{kind}");
        assert!(limiter.is_empty());
    }
}

#[test]
fn a_state_of_another_kind_is_denied_and_idle() {
    let q = Quota::per_second(5).unwrap();
    let log = AnyAlgorithm::new(AlgorithmKind::SlidingWindowLog, &q).unwrap();
    let bucket = AnyAlgorithm::new(AlgorithmKind::TokenBucket, &q).unwrap();
    let log_state = log.new_state();
    assert!(matches!(log_state, AnyState::Log(_)));
    assert!(!bucket.check(&log_state, 0, 1).unwrap().is_allowed());
    assert_eq!(
        bucket.check_one(&log_state, 0),
        bucket.check(&log_state, 0, 1).unwrap()
    );
    assert!(!bucket.peek(&log_state, 0, 1).unwrap().is_allowed());
    assert!(bucket.is_idle(&log_state, 0));
    let word_state = bucket.new_state();
    assert!(!log.check(&word_state, 0, 1).unwrap().is_allowed());
    // The right kinds decide.
    assert!(bucket.check(&word_state, 0, 1).unwrap().is_allowed());
    assert!(log.check(&log_state, 0, 1).unwrap().is_allowed());
}
