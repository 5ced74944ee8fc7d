//! Models of refunds racing checks on one state, clock frozen: whatever the
//! interleaving, a refund gives back exactly what it was asked (the state
//! held at least that much in use), the racing checks admit no more than
//! was given back, and nothing is lost or counted twice: the room left at
//! the end is exactly the room at the start, minus what was admitted, plus
//! what was given back.

use crate::{model, sane};
use loom::sync::Arc;
use loom::thread;
use rategate::{
    Algorithm, FixedWindow, LeakyBucket, Quota, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

const NOW: u64 = 1_000_000_000;

/// Fills the state with `pre` at `NOW`, then one thread refunds `refund`
/// while `checks.len()` threads check their cost once each.
fn refund_races_checks<A: Algorithm>(quota: Quota, pre: u32, refund: u32, checks: &'static [u32]) {
    assert!(refund <= pre, "the model needs the refund covered");
    model(move || {
        let algorithm = Arc::new(A::from_quota(&quota).unwrap());
        let state = Arc::new(algorithm.new_state());
        let room = algorithm.peek(&state, NOW, 0).unwrap().remaining();
        assert!(algorithm.check(&state, NOW, pre).unwrap().is_allowed());
        let refunder = {
            let (algorithm, state) = (algorithm.clone(), state.clone());
            thread::spawn(move || algorithm.refund(&state, NOW, refund))
        };
        let checkers: Vec<_> = checks
            .iter()
            .map(|&cost| {
                let (algorithm, state) = (algorithm.clone(), state.clone());
                thread::spawn(move || {
                    let d = algorithm.check(&state, NOW, cost).unwrap();
                    sane(&d);
                    u32::from(d.is_allowed()) * cost
                })
            })
            .collect();
        let admitted: u32 = checkers.into_iter().map(|h| h.join().unwrap()).sum();
        let given = refunder.join().unwrap();
        assert_eq!(given, refund, "the state held {pre} in use");
        let left = algorithm.peek(&state, NOW, 0).unwrap().remaining();
        assert_eq!(left + pre + admitted, room + given, "admitted {admitted}");
    });
}

#[test]
fn token_bucket_refund_races_checks() {
    let quota = Quota::per_second(3).unwrap();
    // Full: the checks pass only on what the refund gives back.
    refund_races_checks::<TokenBucket>(quota, 3, 1, &[1, 1]);
    // Room for one: a check may pass before, during or after the refund.
    refund_races_checks::<TokenBucket>(quota, 2, 1, &[1, 1]);
}

#[test]
fn fixed_window_refund_races_checks() {
    let quota = Quota::per_second(3).unwrap();
    refund_races_checks::<FixedWindow>(quota, 3, 1, &[1, 1]);
    // Room for one: a check may pass before, during or after the refund.
    refund_races_checks::<FixedWindow>(quota, 2, 1, &[1, 1]);
}

#[test]
fn sliding_window_counter_refund_races_checks() {
    let quota = Quota::per_second(3).unwrap();
    refund_races_checks::<SlidingWindowCounter>(quota, 3, 1, &[1, 1]);
    // Room for one: a check may pass before, during or after the refund.
    refund_races_checks::<SlidingWindowCounter>(quota, 2, 1, &[1, 1]);
}

#[test]
fn sliding_window_log_refund_races_checks() {
    let quota = Quota::per_second(3).unwrap();
    refund_races_checks::<SlidingWindowLog>(quota, 3, 1, &[1, 1]);
    // Room for one: a check may pass before, during or after the refund.
    refund_races_checks::<SlidingWindowLog>(quota, 2, 1, &[1, 1]);
}

#[test]
fn leaky_bucket_refund_races_checks() {
    // burst=2 nodelay: three pass at once.
    let quota: Quota = "10r/s burst=2 nodelay".parse().unwrap();
    refund_races_checks::<LeakyBucket>(quota, 3, 1, &[1, 1]);
    refund_races_checks::<LeakyBucket>(quota, 2, 1, &[1, 1]);
}
