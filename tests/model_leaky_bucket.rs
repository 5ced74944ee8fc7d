//! The leaky bucket against a reference model transcribed from nginx's
//! `ngx_http_limit_req_lookup` / `ngx_http_limit_req_account`
//! (`models/leaky_bucket.rs`, whose docs list its few departures from the C
//! and how it finds the fields nginx does not compute), and nginx's
//! documented examples.

mod models;

use models::leaky_bucket::{MS, Nginx};
use models::{Model, Outcome};
use proptest::prelude::*;
use rategate::{
    Clock, Decision, Delay, KeyedRateLimiter, LeakyBucket, ManualClock, Quota, RateLimiter,
};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// How to move the clock before a request.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Stay.
    Zero,
    /// Less than a millisecond.
    SubMs(u64),
    /// `k` whole milliseconds, plus or minus one nanosecond.
    Ms(u64, i8),
    /// `k` emission intervals (period / limit), plus or minus one nanosecond.
    Intervals(u64, i8),
    /// Back by up to a few seconds (saturating at 0).
    Back(u64),
}

impl Step {
    fn apply(self, clock: &ManualClock, interval: u64) {
        let now = clock.now();
        let next = match self {
            Step::Zero => now,
            Step::SubMs(n) => now + n,
            Step::Ms(k, d) => now + (k * MS).saturating_add_signed(d.into()),
            Step::Intervals(k, d) => now + (k * interval).saturating_add_signed(d.into()),
            Step::Back(n) => now.saturating_sub(n),
        };
        clock.set(next);
    }
}

#[derive(Debug, Clone)]
struct Case {
    quota: Quota,
    steps: Vec<(Step, u32)>,
}

fn quota() -> impl Strategy<Value = Quota> {
    let period = prop_oneof![
        Just(1_000_000_000u64),
        Just(60_000_000_000),
        Just(MS),
        (1u64..5_000).prop_map(|ms| ms * MS),
        1_000u64..1_000_000,
        1_000_000u64..20_000_000_000,
    ];
    let delay = prop_oneof![
        Just(Delay::Smooth),
        Just(Delay::NoDelay),
        (1u32..30).prop_map(Delay::After),
    ];
    (1u32..50, period, proptest::option::of(1u32..25), delay).prop_map(
        |(limit, period, burst, delay)| {
            let quota = Quota::with_period(limit, Duration::from_nanos(period)).unwrap();
            let quota = match burst {
                Some(b) => quota.burst(b).unwrap(),
                None => quota,
            };
            quota.delay(delay)
        },
    )
}

fn case() -> impl Strategy<Value = Case> {
    quota()
        .prop_flat_map(|quota| {
            let capacity = quota.explicit_burst().unwrap_or(0) + 1;
            let cost = prop_oneof![
                6 => Just(1u32),
                3 => 0..=capacity,
                1 => capacity..capacity + 3,
            ];
            let step = prop_oneof![
                4 => Just(Step::Zero),
                3 => (0u64..MS).prop_map(Step::SubMs),
                3 => (0u64..300, -1i8..=1).prop_map(|(k, d)| Step::Ms(k, d)),
                4 => (0u64..4, -1i8..=1).prop_map(|(k, d)| Step::Intervals(k, d)),
                1 => (1u64..3_000_000_000).prop_map(Step::Back),
            ];
            (Just(quota), proptest::collection::vec((step, cost), 1..150))
        })
        .prop_map(|(quota, steps)| Case { quota, steps })
}

fn interval(quota: &Quota) -> u64 {
    quota.emission_interval_nanos()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn direct_limiter_matches_nginx_model(case in case()) {
        let clock = ManualClock::new();
        let limiter = RateLimiter::<LeakyBucket, _>::with_clock(case.quota, clock.clone()).unwrap();
        let mut model = Nginx::new(&case.quota);
        for (i, (step, cost)) in case.steps.iter().enumerate() {
            step.apply(&clock, interval(&case.quota));
            let now = clock.now();
            let peeked = limiter.peek_n(*cost).map(|d| Outcome::of(&d));
            let got = limiter.check_n(*cost).map(|d| Outcome::of(&d));
            let want = model.request(now, *cost);
            prop_assert_eq!(&got, &want, "step {} at t={}", i, now);
            prop_assert_eq!(peeked, got, "peek disagrees with check at step {}", i);
        }
    }

    #[test]
    fn keyed_limiter_matches_one_model_per_key(
        case in case(),
        keys in proptest::collection::vec(prop_oneof![10 => 0u8..3, 1 => Just(u8::MAX)], 150),
    ) {
        let clock = ManualClock::new();
        let limiter = KeyedRateLimiter::<u8, LeakyBucket>::builder(case.quota)
            .clock(clock.clone())
            .build()
            .unwrap();
        let fresh = Nginx::new(&case.quota);
        let mut models = vec![fresh.clone(); 3];
        let mut present = [false; 3];
        // A key not held decides no earlier than the latest sweep.
        let mut swept_at = 0;
        for ((step, cost), key) in case.steps.iter().zip(keys) {
            step.apply(&clock, interval(&case.quota));
            let now = clock.now();
            if key == u8::MAX {
                // A sweep drops exactly the keys that act as new ones now.
                let idle: Vec<usize> =
                    (0..3).filter(|&k| present[k] && models[k].is_idle(now)).collect();
                prop_assert_eq!(limiter.sweep(), idle.len(), "sweep at t={}", now);
                swept_at = swept_at.max(now);
                for k in idle {
                    models[k] = fresh.clone();
                    present[k] = false;
                }
                prop_assert_eq!(limiter.len(), present.iter().filter(|&&p| p).count());
                continue;
            }
            let k = usize::from(key);
            let peeked = limiter.peek_n(&key, *cost).map(|d| Outcome::of(&d));
            let got = limiter.check_n(&key, *cost).map(|d| Outcome::of(&d));
            let at = if present[k] { now } else { now.max(swept_at) };
            let want = models[k].request(at, *cost);
            // A probe (cost 0) of a key not held does not insert it.
            present[k] |= want.is_ok() && *cost > 0;
            prop_assert_eq!(&got, &want, "key {} at t={}", key, now);
            prop_assert_eq!(peeked, got, "peek disagrees with check for key {}", key);
        }
    }
}

/// Drives a limiter through `(ms since start, requests)` bursts and returns,
/// per burst, each request's fate: `Some(delay in ms)` or `None` (rejected).
fn trace(quota: &str, bursts: &[(u64, usize)]) -> Vec<Vec<Option<u64>>> {
    let clock = ManualClock::new();
    let quota: Quota = quota.parse().unwrap();
    let limiter = RateLimiter::<LeakyBucket, _>::with_clock(quota, clock.clone()).unwrap();
    bursts
        .iter()
        .map(|&(at_ms, n)| {
            clock.set(at_ms * MS);
            (0..n)
                .map(|_| {
                    let d = limiter.check();
                    d.is_allowed().then(|| d.delay_nanos() / MS)
                })
                .collect()
        })
        .collect()
}

fn passed(fates: &[Option<u64>]) -> usize {
    fates.iter().filter(|f| f.is_some()).count()
}

/// nginx docs, `limit_req zone=one burst=5` with `rate=1r/s`: "not more than
/// 1 request per second at an average, with bursts not exceeding 5
/// requests"; excess requests are delayed to the rate "until their number
/// exceeds the maximum burst size", then rejected. Seven at once: one
/// passes, five wait 1..5 s, the seventh is rejected. One second later the
/// queue has moved by one: one more passes, behind the other four.
#[test]
fn nginx_docs_one_per_second_burst_five() {
    let fates = trace("1r/s burst=5", &[(0, 7), (1_000, 2)]);
    assert_eq!(
        fates[0],
        vec![
            Some(0),
            Some(1_000),
            Some(2_000),
            Some(3_000),
            Some(4_000),
            Some(5_000),
            None
        ]
    );
    assert_eq!(fates[1], vec![Some(5_000), None]);
}

/// nginx docs: without `burst` the default burst is zero; at 10r/s that is
/// one request per 100 ms, any other rejected, none delayed.
#[test]
fn nginx_default_burst_is_zero() {
    let fates = trace("10r/s", &[(0, 2), (50, 1), (99, 1), (100, 2), (250, 1)]);
    assert_eq!(
        fates,
        vec![
            vec![Some(0), None],
            vec![None],
            vec![None],
            vec![Some(0), None],
            vec![Some(0)],
        ]
    );
}

/// nginx blog "Rate Limiting with NGINX", `rate=10r/s`, `burst=20 nodelay`:
/// 21 simultaneous requests are all forwarded at once and take the 20
/// queue slots (25 would forward 21 and reject 4); a slot frees every
/// 100 ms, so 20 requests 101 ms later forward 1 and reject 19, and 20
/// requests 501 ms later forward 5 and reject 15.
#[test]
fn nginx_blog_burst_twenty_nodelay() {
    let fates = trace("10r/s burst=20 nodelay", &[(0, 25), (101, 20)]);
    assert_eq!(passed(&fates[0]), 21);
    assert!(fates[0][..21].iter().all(|f| *f == Some(0)));
    assert_eq!(passed(&fates[1]), 1);
    assert_eq!(fates[1][0], Some(0));

    let fates = trace("10r/s burst=20 nodelay", &[(0, 21), (501, 20)]);
    assert_eq!(passed(&fates[0]), 21);
    assert_eq!(passed(&fates[1]), 5);
    assert!(fates[1][..5].iter().all(|f| *f == Some(0)));
    assert!(fates[1][5..].iter().all(Option::is_none));
}

/// nginx blog "Rate Limiting with NGINX", two-stage rate limiting,
/// `rate=5r/s`, `burst=12 delay=8`: bursts of up to 12 excess requests, the
/// first 8 of them without delay; beyond 8 excess the rate of 5 r/s is
/// enforced by delay (200 ms per request); beyond 12 excess, rejection.
/// So of 15 requests at once: 1 + 8 pass at once, 4 wait 200, 400, 600 and
/// 800 ms, 2 are rejected.
#[test]
fn nginx_blog_two_stage_delay_eight() {
    let fates = trace("5r/s burst=12 delay=8", &[(0, 15), (200, 2)]);
    let mut want = vec![Some(0); 9];
    want.extend([Some(200), Some(400), Some(600), Some(800), None, None]);
    assert_eq!(fates[0], want);
    // 200 ms later one request has drained: the next one waits 800 ms too.
    assert_eq!(fates[1], vec![Some(800), None]);
}

const THREADS: usize = 8;

fn race(per_thread: usize, attempt: impl Fn() -> Decision + Sync) -> Vec<Decision> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    (0..per_thread).map(|_| attempt()).collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// With the clock frozen, racing threads get exactly `burst + 1`
/// admissions, whose excess (hence delay and `remaining`) are all distinct:
/// no admission was lost or duplicated.
fn assert_exactly_capacity(decisions: &[Decision], burst: u32, per_excess_ms: u64) {
    let mut admitted: Vec<(u32, u64)> = decisions
        .iter()
        .filter(|d| d.is_allowed())
        .map(|d| (d.remaining(), d.delay_nanos()))
        .collect();
    admitted.sort_unstable();
    let want: Vec<(u32, u64)> = (0..=burst)
        .map(|r| (r, u64::from(burst - r) * per_excess_ms * MS))
        .collect();
    assert_eq!(admitted, want);
}

#[test]
fn racing_threads_admit_exactly_burst_plus_one() {
    let clock = ManualClock::new();
    clock.set(3 * MS);
    let quota: Quota = "1000r/s burst=600".parse().unwrap();
    let limiter = RateLimiter::<LeakyBucket, _>::with_clock(quota, clock).unwrap();
    let decisions = race(200, || limiter.check());
    assert_exactly_capacity(&decisions, 600, 1);
}

#[test]
fn racing_threads_on_one_key_admit_exactly_burst_plus_one() {
    let clock = ManualClock::new();
    clock.set(3 * MS);
    let quota: Quota = "500r/s burst=450".parse().unwrap();
    let limiter = Arc::new(
        KeyedRateLimiter::<String, LeakyBucket>::builder(quota)
            .clock(clock)
            .build()
            .unwrap(),
    );
    let decisions = race(200, || limiter.check("hot"));
    assert_exactly_capacity(&decisions, 450, 2);
    assert_eq!(limiter.len(), 1);
}
