//! `SlidingWindowCounter` against a sequential reference model, through the
//! direct and the keyed limiters on a `ManualClock`; concurrency; the
//! textbook boundary burst.
//!
//! The model (`models/sliding_window_counter.rs`) is written from the
//! documented rule, not from the crate's code: a list of admitted
//! `(time, cost)` per key and plain `u128` maths.

mod models;

use models::Outcome;
use models::sliding_window_counter::ModelCounter;
use proptest::prelude::*;
use rategate::{
    CheckError, Clock, Decision, KeyedRateLimiter, ManualClock, Quota, QuotaError, RateLimiter,
    SlidingWindowCounter,
};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

/// Every field of a decision.
type Fields = (bool, u32, u32, u64, u64, u64);

fn tuple(o: Outcome) -> Fields {
    (
        o.allowed,
        o.limit,
        o.remaining,
        o.reset_after,
        o.retry_after,
        o.delay,
    )
}

fn fields(d: &Decision) -> Fields {
    tuple(Outcome::of(d))
}

/// One model per key (the shared keyed wrapper), answering in `Fields`.
struct Keyed(models::Keyed<ModelCounter>);

impl Keyed {
    fn new(limit: u32, period: u64) -> Keyed {
        Keyed(models::Keyed::new(ModelCounter::with_params(limit, period)))
    }

    fn decide(&mut self, key: u8, now: u64, cost: u32, record: bool) -> Result<Fields, CheckError> {
        let now = self.0.time_for(key, now);
        let got = self
            .0
            .decide_with(key, cost, record, |m| m.decide(now, cost, record));
        got.map(tuple)
    }

    fn idle_keys(&self, now: u64) -> Vec<u8> {
        self.0.idle_keys(now)
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Forward by this many nanoseconds.
    Advance(u64),
    /// Forward to `k` window edges ahead, plus `offset` (-1, 0, 1).
    ToEdge(u64, i64),
    /// Back by this many nanoseconds (saturating at zero).
    Back(u64),
    Check(u8, u32),
    Peek(u8, u32),
    Sweep,
}

fn op(limit: u32, period: u64) -> impl Strategy<Value = Op> {
    let cost = prop_oneof![
        6 => Just(1u32),
        1 => Just(0u32),
        3 => 0..=limit,
        1 => Just(limit + 1),
        1 => (limit + 1)..=limit.saturating_add(5),
    ];
    let key = 0u8..3;
    prop_oneof![
        2 => Just(Op::Advance(0)),
        3 => (0..=period * 3).prop_map(Op::Advance),
        1 => (0..=period / 4).prop_map(Op::Advance),
        3 => (0u64..3, -1i64..=1).prop_map(|(k, o)| Op::ToEdge(k, o)),
        1 => (0..=period * 2).prop_map(Op::Back),
        10 => (key.clone(), cost.clone()).prop_map(|(k, c)| Op::Check(k, c)),
        2 => (key, cost).prop_map(|(k, c)| Op::Peek(k, c)),
        1 => Just(Op::Sweep),
    ]
}

/// A quota, a start time (some near the end of the clock) and operations.
fn scenario() -> impl Strategy<Value = (u32, u64, u64, Vec<Op>)> {
    (1u32..=12, prop_oneof![Just(0u64), 1u64..=1000]).prop_flat_map(|(limit, extra)| {
        let period = u64::from(limit) + extra;
        let start = prop_oneof![
            3 => 0..=period * 5,
            1 => (0..=period * 5).prop_map(|back| u64::MAX - back),
        ];
        (
            Just(limit),
            Just(period),
            start,
            prop::collection::vec(op(limit, period), 1..80),
        )
    })
}

/// Moves the clock as `op` says; false for a non-clock operation.
fn move_clock(clock: &ManualClock, period: u64, op: &Op) -> bool {
    let now = clock.now();
    match *op {
        Op::Advance(n) => clock.advance_nanos(n),
        Op::ToEdge(k, offset) => {
            let edge = (u128::from(now / period) + 1 + u128::from(k)) * u128::from(period);
            let target = (edge as i128 + i128::from(offset)).max(i128::from(now));
            clock.set(u64::try_from(target).unwrap_or(u64::MAX));
        }
        Op::Back(n) => clock.set(now.saturating_sub(n)),
        _ => return false,
    }
    true
}

fn quota(limit: u32, period: u64) -> Quota {
    Quota::with_period(limit, Duration::from_nanos(period)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn direct_limiter_matches_model((limit, period, start, ops) in scenario()) {
        let clock = ManualClock::new();
        clock.set(start);
        let limiter = RateLimiter::<SlidingWindowCounter, _>::with_clock(
            quota(limit, period),
            clock.clone(),
        )
        .unwrap();
        let mut model = Keyed::new(limit, period);
        for op in &ops {
            if move_clock(&clock, period, op) {
                continue;
            }
            let now = clock.now();
            match *op {
                Op::Check(_, cost) => {
                    let got = limiter.check_n(cost).map(|d| fields(&d));
                    prop_assert_eq!(got, model.decide(0, now, cost, true), "check {} at {}", cost, now);
                }
                Op::Peek(_, cost) => {
                    let got = limiter.peek_n(cost).map(|d| fields(&d));
                    prop_assert_eq!(got, model.decide(0, now, cost, false), "peek {} at {}", cost, now);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn keyed_limiter_matches_model((limit, period, start, ops) in scenario()) {
        let clock = ManualClock::new();
        clock.set(start);
        let limiter = KeyedRateLimiter::<u8, SlidingWindowCounter>::builder(quota(limit, period))
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut model = Keyed::new(limit, period);
        // Keys the limiter holds, as the model sees them.
        let mut held: Vec<u8> = Vec::new();
        for op in &ops {
            if move_clock(&clock, period, op) {
                continue;
            }
            let now = clock.now();
            match *op {
                Op::Check(key, cost) => {
                    let got = limiter.check_n(&key, cost).map(|d| fields(&d));
                    prop_assert_eq!(got, model.decide(key, now, cost, true), "key {} check {} at {}", key, cost, now);
                    if cost > 0 && u128::from(cost) <= model.0.fresh().limit() && !held.contains(&key) {
                        held.push(key);
                    }
                }
                Op::Peek(key, cost) => {
                    let got = limiter.peek_n(&key, cost).map(|d| fields(&d));
                    prop_assert_eq!(got, model.decide(key, now, cost, false), "key {} peek {} at {}", key, cost, now);
                }
                Op::Sweep => {
                    let idle = model.idle_keys(now);
                    let expected = held.iter().filter(|k| !model.0.holds(**k) || idle.contains(k)).count();
                    prop_assert_eq!(limiter.sweep(), expected, "sweep at {}", now);
                    // Dropped keys start afresh, in the model too.
                    held.retain(|k| model.0.holds(*k) && !idle.contains(k));
                    model.0.sweep(now, &idle);
                    prop_assert_eq!(limiter.len(), held.len());
                }
                _ => {}
            }
        }
    }
}

#[test]
fn model_sanity() {
    let mut m = Keyed::new(10, 100);
    assert_eq!(m.decide(0, 50, 10, true), Ok((true, 10, 0, 150, 0, 0)));
    // 130: 10 x 70/100 = 7 weighs; 165: 3.5 weighs, so 6 more fit, and a
    // 7th once 10 x (100 - e) <= 300, at e = 70.
    assert_eq!(m.decide(0, 130, 1, false), Ok((true, 10, 2, 170, 0, 0)));
    assert_eq!(m.decide(0, 165, 6, true), Ok((true, 10, 0, 135, 0, 0)));
    assert_eq!(m.decide(0, 165, 1, true), Ok((false, 10, 0, 135, 5, 0)));
}

#[test]
fn limits_beyond_the_packing_are_refused() {
    let max = (1u32 << 20) - 1;
    assert!(RateLimiter::<SlidingWindowCounter>::new(Quota::per_hour(max).unwrap()).is_ok());
    assert_eq!(
        RateLimiter::<SlidingWindowCounter>::new(Quota::per_hour(max + 1).unwrap()).unwrap_err(),
        QuotaError::LimitTooLarge {
            limit: u64::from(max) + 1,
            max: u64::from(max)
        }
    );
}

/// The textbook boundary burst: 100 per minute, 100 requests at 59:50 and
/// 100 at 60:10 (minutes from the origin, windows aligned to the minute).
///
/// At 59:50 window 59 is fresh and window 58 empty: all 100 pass. At 60:10,
/// elapsed = 10 s into window 60, the previous window's 100 weigh
/// 100 x (60 - 10)/60 = 83.33, rounded up to 84, so a request passes while
/// 84 + current + 1 <= 100: current = 0..=15, 16 requests (116 in 20 s,
/// where a fixed window admits 200 and an exact sliding log 100). The 17th
/// fits once 100 x (60 - e)/60 <= 100 - 16 - 1 = 83, at e = 10.2 s: its
/// retry_after is 200 ms.
#[test]
fn boundary_burst_is_mostly_absorbed() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<SlidingWindowCounter, _>::with_clock(
        Quota::per_minute(100).unwrap(),
        clock.clone(),
    )
    .unwrap();
    clock.set(Duration::from_secs(59 * 60 + 50).as_nanos() as u64);
    let first = (0..100).filter(|_| limiter.check().is_allowed()).count();
    clock.set(Duration::from_secs(60 * 60 + 10).as_nanos() as u64);
    let second = (0..100).filter(|_| limiter.check().is_allowed()).count();
    assert_eq!((first, second), (100, 16));
    let denied = limiter.check();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_millis(200));
    // Both windows hold requests: the influence ends with window 61.
    assert_eq!(denied.reset_after(), Duration::from_secs(110));
    clock.advance(Duration::from_millis(200));
    assert!(limiter.check().is_allowed());
}

const THREADS: usize = 8;

/// Runs `THREADS` threads, each calling `attempt` `per_thread` times at once;
/// returns the total of what the calls return.
fn race(per_thread: usize, attempt: impl Fn() -> u64 + Send + Sync + 'static) -> u64 {
    let attempt = Arc::new(attempt);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (attempt, barrier) = (Arc::clone(&attempt), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                (0..per_thread).map(|_| attempt()).sum::<u64>()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

/// With the clock frozen halfway through window 1 after 600 admitted in
/// window 0, the previous count weighs 300: exactly 700 more may pass.
#[test]
fn threads_racing_on_one_limiter_never_exceed_the_limit() {
    for _ in 0..20 {
        let clock = ManualClock::new();
        let limiter = Arc::new(
            RateLimiter::<SlidingWindowCounter, _>::with_clock(
                Quota::per_second(1000).unwrap(),
                clock.clone(),
            )
            .unwrap(),
        );
        assert!(limiter.check_n(600).unwrap().is_allowed());
        clock.set(1_500_000_000);
        let l = Arc::clone(&limiter);
        let admitted = race(200, move || u64::from(l.check().is_allowed()));
        assert_eq!(admitted, 700);
        assert_eq!(limiter.peek().remaining(), 0);
    }
}

#[test]
fn threads_racing_on_one_key_never_exceed_the_limit() {
    for _ in 0..20 {
        let clock = ManualClock::new();
        clock.set(7_000_000_000);
        let limiter = Arc::new(
            KeyedRateLimiter::<String, SlidingWindowCounter>::builder(
                Quota::per_second(1000).unwrap(),
            )
            .clock(clock)
            .build()
            .unwrap(),
        );
        let l = Arc::clone(&limiter);
        let admitted = race(400, move || u64::from(l.check("hot").is_allowed()));
        assert_eq!(admitted, 1000);
        assert_eq!(limiter.len(), 1);
    }
}

#[test]
fn threads_racing_with_mixed_costs_never_exceed_the_limit() {
    for round in 0..20u64 {
        let clock = ManualClock::new();
        let limiter = Arc::new(
            RateLimiter::<SlidingWindowCounter, _>::with_clock(
                Quota::per_second(1000).unwrap(),
                clock,
            )
            .unwrap(),
        );
        let l = Arc::clone(&limiter);
        let next = Arc::new(std::sync::atomic::AtomicU64::new(round));
        let admitted = race(300, move || {
            let cost = 1 + (next.fetch_add(7, std::sync::atomic::Ordering::Relaxed) % 3) as u32;
            match l.check_n(cost) {
                Ok(d) if d.is_allowed() => u64::from(cost),
                _ => 0,
            }
        });
        assert!(admitted <= 1000 && admitted > 997, "{admitted}");
    }
}
