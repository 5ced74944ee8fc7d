//! `SlidingWindowCounter` against a sequential reference model, through the
//! direct and the keyed limiters on a `ManualClock`; concurrency; the
//! textbook boundary burst.
//!
//! The model is written from the documented rule, not from the crate's
//! code: a list of admitted `(time, cost)` per key and plain `u128` maths.
//! A request passes at `t` if the real-valued estimate fits,
//! `previous x (period - elapsed) + (current + cost) x period <= limit x
//! period`; `remaining` is the most further units the same test admits;
//! `retry_after` is found by bisection over time; `reset_after` is when the
//! last admission's window and the one after it are over.

use proptest::prelude::*;
use rategate::{
    CheckError, Clock, Decision, KeyedRateLimiter, ManualClock, Quota, QuotaError, RateLimiter,
    SlidingWindowCounter,
};
use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

/// Every field of a decision.
type Fields = (bool, u32, u32, u64, u64, u64);

fn fields(d: &Decision) -> Fields {
    (
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        d.reset_after_nanos(),
        d.retry_after_nanos(),
        d.delay_nanos(),
    )
}

#[derive(Debug, Default, Clone)]
struct KeyModel {
    /// Admitted requests: (time they counted at, cost).
    admitted: Vec<(u128, u128)>,
    /// Start of the window of the latest admission: a clock that steps back
    /// before it counts as this time.
    floor: u128,
}

impl KeyModel {
    /// Cost admitted in window `w`.
    fn in_window(&self, w: u128, period: u128) -> u128 {
        self.admitted
            .iter()
            .filter(|&&(t, _)| t / period == w)
            .map(|&(_, c)| c)
            .sum()
    }
}

#[derive(Debug)]
struct Model {
    limit: u128,
    period: u128,
    keys: HashMap<u8, KeyModel>,
}

fn saturate(t: u128) -> u64 {
    u64::try_from(t).unwrap_or(u64::MAX)
}

impl Model {
    fn new(limit: u32, period: u64) -> Model {
        Model {
            limit: limit.into(),
            period: period.into(),
            keys: HashMap::new(),
        }
    }

    /// (previous-window cost, current-window cost, elapsed) at time `t`.
    fn counts(&self, k: &KeyModel, t: u128) -> (u128, u128, u128) {
        let w = t / self.period;
        let previous = if w == 0 {
            0
        } else {
            k.in_window(w - 1, self.period)
        };
        (previous, k.in_window(w, self.period), t % self.period)
    }

    /// `limit x period - previous x (period - elapsed)`: the room, in
    /// units of 1/period requests, before the current count and the cost.
    fn scaled_room(&self, k: &KeyModel, t: u128) -> (i128, u128) {
        let (previous, current, elapsed) = self.counts(k, t);
        let room =
            (self.limit * self.period) as i128 - (previous * (self.period - elapsed)) as i128;
        (room, current)
    }

    fn passes(&self, k: &KeyModel, t: u128, cost: u128) -> bool {
        let (room, current) = self.scaled_room(k, t);
        ((current + cost) * self.period) as i128 <= room
    }

    /// Whole units the estimate still admits at `t`, floored at zero.
    fn units(&self, k: &KeyModel, t: u128) -> u128 {
        let (room, current) = self.scaled_room(k, t);
        let whole = room.div_euclid(self.period as i128) - current as i128;
        whole.max(0) as u128
    }

    fn reset_at(&self, k: &KeyModel, t: u128) -> Option<u128> {
        let w = t / self.period;
        if k.in_window(w, self.period) > 0 {
            Some((w + 2) * self.period)
        } else if w > 0 && k.in_window(w - 1, self.period) > 0 {
            Some((w + 1) * self.period)
        } else {
            None
        }
    }

    fn decide(&mut self, key: u8, now: u64, cost: u32, record: bool) -> Result<Fields, CheckError> {
        if u128::from(cost) > self.limit {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.limit as u32,
            });
        }
        let mut k = self.keys.get(&key).cloned().unwrap_or_default();
        let now = u128::from(now);
        let t = now.max(k.floor);
        let cost = u128::from(cost);
        let limit = self.limit as u32;
        if self.passes(&k, t, cost) {
            let remaining = self.units(&k, t) - cost;
            if cost > 0 {
                k.admitted.push((t, cost));
                k.floor = t / self.period * self.period;
            }
            let reset = self.reset_at(&k, t).map_or(0, |r| saturate(r - now));
            if record && cost > 0 {
                self.keys.insert(key, k);
            }
            Ok((true, limit, remaining as u32, reset, 0, 0))
        } else {
            // The estimate never grows without arrivals: bisect for the
            // first time it admits `cost`; two windows on it is zero.
            let (mut lo, mut hi) = (t, (t / self.period + 2) * self.period);
            assert!(self.passes(&k, hi, cost));
            while lo + 1 < hi {
                let mid = lo + (hi - lo) / 2;
                if self.passes(&k, mid, cost) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            let reset = self.reset_at(&k, t).map_or(0, |r| saturate(r - now));
            Ok((
                false,
                limit,
                self.units(&k, t) as u32,
                reset,
                saturate(hi - now),
                0,
            ))
        }
    }

    /// Keys whose admissions no longer weigh at `now`.
    fn idle_keys(&self, now: u64) -> Vec<u8> {
        let mut idle: Vec<u8> = self
            .keys
            .iter()
            .filter(|(_, k)| {
                let t = u128::from(now).max(k.floor);
                let (previous, current, _) = self.counts(k, t);
                previous == 0 && current == 0
            })
            .map(|(&key, _)| key)
            .collect();
        idle.sort_unstable();
        idle
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
        let mut model = Model::new(limit, period);
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
        let mut model = Model::new(limit, period);
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
                    if u128::from(cost) <= model.limit && !held.contains(&key) {
                        held.push(key);
                    }
                }
                Op::Peek(key, cost) => {
                    let got = limiter.peek_n(&key, cost).map(|d| fields(&d));
                    prop_assert_eq!(got, model.decide(key, now, cost, false), "key {} peek {} at {}", key, cost, now);
                }
                Op::Sweep => {
                    let idle = model.idle_keys(now);
                    let expected = held.iter().filter(|k| !model.keys.contains_key(k) || idle.contains(k)).count();
                    prop_assert_eq!(limiter.sweep(), expected, "sweep at {}", now);
                    // Dropped keys start afresh, in the model too.
                    held.retain(|k| model.keys.contains_key(k) && !idle.contains(k));
                    model.keys.retain(|k, _| !idle.contains(k));
                    prop_assert_eq!(limiter.len(), held.len());
                }
                _ => {}
            }
        }
    }
}

#[test]
fn model_sanity() {
    let mut m = Model::new(10, 100);
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
