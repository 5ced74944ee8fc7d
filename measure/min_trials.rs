//! The min-of-trials harness: rategate against governor on the single-thread
//! paths, timed as the fastest of many interleaved trials, which a busy or
//! noisy machine can make slower but not faster. Criterion's medians (in
//! `benches/`) remain the reported figures; this harness separates two
//! changes a few nanoseconds apart where one criterion run moves by more.
//!
//! ```sh
//! cargo run --release --example min_trials -- [PATHS] [TRIALS] [CALLS]
//! ```
//!
//! PATHS is a comma-separated list (default: every path below), TRIALS the
//! number of rounds (default 100), CALLS the calls per path per round
//! (default 100,000). Each round runs every chosen path once, in order, so a
//! burst of other work weighs on all of them alike. Each call's `Decision`
//! (governor: its `Result`) goes through `black_box` whole, as criterion
//! treats a benchmark's return value, so fields computed on every check are
//! paid for.
//!
//! Paths, on the same quotas as the criterion suites (`benches/common`):
//!
//! | path | what |
//! |---|---|
//! | `allow`, `gallow` | direct check, allowed: rategate's token bucket, governor |
//! | `deny`, `gdeny` | direct check, denied (one per minute, exhausted) |
//! | `fwdeny`, `swcdeny`, `swldeny`, `lbdeny` | the other algorithms' denials |
//! | `fwallow`, `swcallow`, `swlallow` | the window algorithms' admissions |
//! | `keyed`, `gkeyed` | keyed check, 1M live `u64` keys drawn at random |
//! | `keyed1k`, `gkeyed1k` | keyed check, 1,000 live keys |
//! | `clock` | one read of the default clock |
//! | `clockcas` | a clock read and one uncontended compare-exchange (the direct floor) |
//!
//! The report gives each path's minimum and median over the trials, and for
//! each rategate path with a governor counterpart the ratio of the minima.

#[path = "../benches/common/mod.rs"]
mod common;

use common::{KeyRng, allow_quota, deny_quota, governor_allow_quota, governor_deny_quota};
use rategate::{
    Algorithm, Clock, FixedWindow, KeyedRateLimiter, LeakyBucket, QuantaClock, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One path: a name and a body that makes `calls` calls.
type Body = Box<dyn FnMut(u64)>;

const ALL: &str = "allow,gallow,deny,gdeny,fwdeny,swcdeny,swldeny,lbdeny,fwallow,swcallow,swlallow,keyed,gkeyed,keyed1k,gkeyed1k,clock,clockcas";

/// Governor's counterpart of each rategate path that has one.
const PAIRS: [(&str, &str); 4] = [
    ("allow", "gallow"),
    ("deny", "gdeny"),
    ("keyed", "gkeyed"),
    ("keyed1k", "gkeyed1k"),
];

/// A body that calls `check` `calls` times, each result through
/// `black_box` whole.
fn looped<R>(mut check: impl FnMut() -> R + 'static) -> Body {
    Box::new(move |calls| {
        for _ in 0..calls {
            black_box(check());
        }
    })
}

fn allowed<A: Algorithm + 'static>() -> Body {
    let limiter = RateLimiter::<A>::new(allow_quota::<A>()).expect("allow quota");
    // As the criterion suites: a path whose trial run is denied is not the
    // allowed path (a few stale readings after a preemption are tolerated).
    let denied = common::denials(100_000, || limiter.check().is_allowed());
    assert!(
        common::on_allowed_path(std::any::type_name::<A>(), denied, 100_000),
        "not on the allowed path"
    );
    looped(move || limiter.check())
}

fn denied<A: Algorithm + 'static>() -> Body {
    let limiter = RateLimiter::<A>::new(deny_quota()).expect("deny quota");
    assert!(limiter.check().is_allowed());
    assert!(!limiter.check().is_allowed());
    looped(move || limiter.check())
}

fn keyed(keys: u64) -> Body {
    let limiter = KeyedRateLimiter::<u64, TokenBucket>::new(allow_quota::<TokenBucket>())
        .expect("keyed limiter");
    for key in 0..keys {
        assert!(limiter.check(&key).is_allowed());
    }
    let mut rng = KeyRng::new(1);
    looped(move || limiter.check(&rng.below(keys)))
}

fn governor_keyed(keys: u64) -> Body {
    let limiter = governor::RateLimiter::keyed(governor_allow_quota());
    for key in 0..keys {
        assert!(limiter.check_key(&key).is_ok());
    }
    let mut rng = KeyRng::new(1);
    looped(move || limiter.check_key(&rng.below(keys)))
}

fn body(path: &str) -> Option<Body> {
    Some(match path {
        "allow" => allowed::<TokenBucket>(),
        "fwallow" => allowed::<FixedWindow>(),
        "swcallow" => allowed::<SlidingWindowCounter>(),
        "swlallow" => allowed::<SlidingWindowLog>(),
        "gallow" => {
            let limiter = governor::RateLimiter::direct(governor_allow_quota());
            looped(move || limiter.check())
        }
        "deny" => denied::<TokenBucket>(),
        "fwdeny" => denied::<FixedWindow>(),
        "swcdeny" => denied::<SlidingWindowCounter>(),
        "swldeny" => denied::<SlidingWindowLog>(),
        "lbdeny" => denied::<LeakyBucket>(),
        "gdeny" => {
            let limiter = governor::RateLimiter::direct(governor_deny_quota());
            assert!(limiter.check().is_ok());
            looped(move || limiter.check())
        }
        "keyed" => keyed(1_000_000),
        "gkeyed" => governor_keyed(1_000_000),
        "keyed1k" => keyed(1_000),
        "gkeyed1k" => governor_keyed(1_000),
        "clock" => {
            let clock = QuantaClock::new();
            looped(move || clock.now())
        }
        "clockcas" => {
            let clock = QuantaClock::new();
            let word = AtomicU64::new(0);
            looped(move || {
                let now = clock.now();
                // Relaxed: a lone word, as the limiters' state words.
                let old = word.load(Ordering::Relaxed);
                word.compare_exchange(old, now, Ordering::Relaxed, Ordering::Relaxed)
            })
        }
        _ => return None,
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let paths = args.next().unwrap_or_else(|| ALL.to_string());
    let trials: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(100)
        .max(1);
    let calls: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mut bodies: Vec<(String, Body, Vec<f64>)> = paths
        .split(',')
        .map(|p| {
            let body = body(p).unwrap_or_else(|| panic!("unknown path {p:?}; paths: {ALL}"));
            (p.to_string(), body, Vec::with_capacity(trials))
        })
        .collect();
    for _ in 0..trials {
        for (_, body, times) in &mut bodies {
            let start = Instant::now();
            body(calls);
            times.push(start.elapsed().as_nanos() as f64 / calls as f64);
        }
    }
    println!("{trials} trials of {calls} calls per path; ns per call");
    println!("| path | min | median |");
    println!("|---|---:|---:|");
    let mut minima = Vec::new();
    for (name, _, times) in &mut bodies {
        times.sort_by(f64::total_cmp);
        let n = times.len();
        let median = (times[(n - 1) / 2] + times[n / 2]) / 2.0;
        let min = times[0];
        println!("| {name} | {min:.1} | {median:.1} |");
        minima.push((name.clone(), min));
    }
    let min_of = |n: &str| minima.iter().find(|(m, _)| m == n).map(|(_, t)| *t);
    for (ours, theirs) in PAIRS {
        if let (Some(a), Some(b)) = (min_of(ours), min_of(theirs)) {
            println!("{ours} / {theirs}: {:.2} (minima)", a / b);
        }
    }
    if let Some(deny) = min_of("deny") {
        for other in ["fwdeny", "swcdeny", "swldeny", "lbdeny"] {
            if let Some(t) = min_of(other) {
                println!("{other} - deny: {:+.1} ns (minima)", t - deny);
            }
        }
    }
}
