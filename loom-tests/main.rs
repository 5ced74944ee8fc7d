//! Loom models of rategate's lock-free state machines.
//!
//! Built only with the crate's loom cfg, which swaps every atomic, `Arc`,
//! mutex and the keyed map's locks for loom's:
//!
//! ```sh
//! RUSTFLAGS="--cfg rategate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test --release --test loom
//! ```
//!
//! Each model uses 2-3 threads and checks invariants that a lost update, a
//! torn read-modify-write or a check/sweep race would break.
#![cfg(rategate_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;
use rategate::{Algorithm, Clock, Decision, ManualClock, Quota, RateLimiter, TokenBucket};
use std::time::Duration;

mod algorithms;
mod all_of;
mod keyed;
mod refund;

/// Runs `f` under loom's exhaustive scheduler.
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Checks the decision fields that must hold whatever the interleaving.
pub(crate) fn sane(d: &Decision) {
    assert!(d.remaining() <= d.limit(), "remaining above limit: {d:?}");
    if d.is_allowed() {
        assert_eq!(
            d.retry_after_nanos(),
            0,
            "allowed with a retry-after: {d:?}"
        );
    }
}

#[test]
fn monotonic_clamp_never_goes_back() {
    model(|| {
        let mark = Arc::new(rategate::loom_internals::Monotonic::default());
        let handles: Vec<_> = [[5u64, 3], [4, 9]]
            .into_iter()
            .map(|readings| {
                let mark = Arc::clone(&mark);
                thread::spawn(move || {
                    let mut last = 0;
                    for raw in readings {
                        let got = mark.clamp(raw);
                        assert!(got >= raw && got >= last, "{got} after {last} for {raw}");
                        last = got;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // Every reading was recorded: the mark is the largest.
        assert_eq!(mark.clamp(0), 9);
    });
}

#[test]
fn manual_clock_advances_lose_nothing() {
    model(|| {
        let clock = ManualClock::new();
        let other = clock.clone();
        let t = thread::spawn(move || other.advance(Duration::from_nanos(3)));
        clock.advance(Duration::from_nanos(4));
        t.join().unwrap();
        assert_eq!(clock.now(), 7);
    });
}

/// Three threads, capacity 2, frozen clock: exactly two admitted, with
/// distinct `remaining` values (no two threads saw the same token).
#[test]
fn token_bucket_admits_exactly_capacity() {
    model(|| {
        let quota = Quota::per_second(2).unwrap();
        let limiter =
            Arc::new(RateLimiter::<TokenBucket, _>::with_clock(quota, ManualClock::new()).unwrap());
        let admitted = Arc::new(AtomicU32::new(0));
        let seen = Arc::new(AtomicU32::new(0));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let (limiter, admitted, seen) = (limiter.clone(), admitted.clone(), seen.clone());
                thread::spawn(move || {
                    let d = limiter.check();
                    sane(&d);
                    if d.is_allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                        let bit = 1 << d.remaining();
                        assert_eq!(
                            seen.fetch_or(bit, Ordering::Relaxed) & bit,
                            0,
                            "remaining {} twice",
                            d.remaining()
                        );
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 2);
        assert!(!limiter.peek().is_allowed());
    });
}

/// A check races a clock advance: whatever the order, the total admitted is
/// what the capacity plus the refill allow, and no more.
#[test]
fn token_bucket_with_time_moving() {
    model(|| {
        let clock = ManualClock::new();
        let quota = Quota::with_period(1, Duration::from_nanos(10)).unwrap();
        let limiter =
            Arc::new(RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone()).unwrap());
        assert!(limiter.check().is_allowed());
        let l2 = limiter.clone();
        let t = thread::spawn(move || l2.check_n(1).unwrap().is_allowed());
        clock.advance(Duration::from_nanos(10));
        let mine = limiter.check().is_allowed();
        let theirs = t.join().unwrap();
        // One token refilled: exactly one of the two passes.
        assert_eq!(u32::from(mine) + u32::from(theirs), 1);
    });
}

/// Direct use of the trait's state, as the keyed map does.
#[test]
fn token_bucket_weighted_costs_never_overdraw() {
    model(|| {
        let quota = Quota::per_second(3).unwrap();
        let tb = Arc::new(TokenBucket::from_quota(&quota).unwrap());
        let state = Arc::new(tb.new_state());
        let handles: Vec<_> = [2u32, 2]
            .into_iter()
            .map(|cost| {
                let (tb, state) = (tb.clone(), state.clone());
                thread::spawn(move || {
                    let d = tb.check(&state, 0, cost).unwrap();
                    sane(&d);
                    u32::from(d.is_allowed()) * cost
                })
            })
            .collect();
        let total: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 2);
        // One token left: a cost of 1 fits, a cost of 2 does not.
        assert!(tb.peek(&state, 0, 1).unwrap().is_allowed());
        assert!(!tb.peek(&state, 0, 2).unwrap().is_allowed());
    });
}

pub(crate) use rategate::Overflow as OverflowPolicy;
