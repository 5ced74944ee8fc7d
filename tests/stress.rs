//! Threads racing on one key with the clock frozen: the token bucket admits
//! exactly its burst, however the compare-exchanges interleave; every
//! algorithm admits exactly its capacity, the sliding window log through
//! its lock with more threads than cores (waiters spin, then yield).

use rategate::algorithm::Algorithm;
use rategate::{
    FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};

const THREADS: usize = 8;
const ATTEMPTS_PER_THREAD: usize = 2_000;
const BURST: u32 = 5_000;

fn quota() -> Quota {
    Quota::per_hour(100).unwrap().burst(BURST).unwrap()
}

/// Runs `attempt` from 8 threads released together; returns the total cost
/// admitted.
fn race(attempt: impl Fn(usize) -> u64 + Sync) -> u64 {
    let admitted = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (admitted, barrier, attempt) = (&admitted, &barrier, &attempt);
            s.spawn(move || {
                barrier.wait();
                let mut mine = 0;
                for i in 0..ATTEMPTS_PER_THREAD {
                    mine += attempt(t * ATTEMPTS_PER_THREAD + i);
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn direct_limiter_admits_exactly_burst() {
    let clock = ManualClock::new();
    clock.set(1_000_000);
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota(), clock).unwrap();
    let admitted = race(|_| u64::from(limiter.check().is_allowed()));
    assert_eq!(admitted, u64::from(BURST));
    assert!(!limiter.peek().is_allowed());
}

#[test]
fn keyed_limiter_admits_exactly_burst_on_one_key() {
    let clock = ManualClock::new();
    let limiter = KeyedRateLimiter::<String, TokenBucket>::builder(quota())
        .clock(clock)
        .build()
        .unwrap();
    let admitted = race(|_| u64::from(limiter.check("hot").is_allowed()));
    assert_eq!(admitted, u64::from(BURST));
    assert_eq!(limiter.len(), 1);
}

#[test]
fn weighted_costs_never_exceed_burst_and_fill_it() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota(), clock).unwrap();
    // Costs 1..=4 in a fixed pattern; cost-1 requests are in the mix, so the
    // bucket is drained to exactly zero in the end.
    let admitted = race(|i| {
        let cost = (i % 4) as u32 + 1;
        match limiter.check_n(cost) {
            Ok(d) if d.is_allowed() => u64::from(cost),
            Ok(_) => 0,
            Err(e) => panic!("{e}"),
        }
    });
    assert_eq!(admitted, u64::from(BURST));
}

/// Every algorithm's state, raced by 8 threads (more than this machine's
/// cores, so a lock holder is preempted while others wait): exactly the
/// capacity passes. With `spread`, each check reads a nanosecond of its
/// own within the quota's window (and its millisecond, for the leaky
/// bucket): for the sliding window log every admission is then a new
/// entry, so its ring grows, reallocating under the lock, as threads wait
/// on it. The token bucket is raced at one reading: its last slot frees at
/// an exact nanosecond, so a check whose reading lags one already recorded
/// may find it not yet free (one fewer admitted, never one more).
fn racing_checks_admit_exactly_capacity<A: Algorithm>(quota: &Quota, spread: bool) {
    let algorithm = A::from_quota(quota).unwrap();
    let state = algorithm.new_state();
    let admitted = race(|i| {
        let now = 1_000_000 + if spread { i as u64 } else { 0 };
        u64::from(algorithm.check(&state, now, 1).unwrap().is_allowed())
    });
    assert_eq!(admitted, u64::from(algorithm.capacity()));
    let after = algorithm.check(&state, 1_000_000, 1).unwrap();
    assert!(!after.is_allowed(), "{after:?}");
}

#[test]
fn every_algorithm_admits_exactly_its_capacity_under_contention() {
    let windows = Quota::per_hour(BURST).unwrap();
    let leaky: Quota = format!("100r/m burst={}", BURST - 1).parse().unwrap();
    racing_checks_admit_exactly_capacity::<TokenBucket>(&quota(), false);
    racing_checks_admit_exactly_capacity::<FixedWindow>(&windows, true);
    racing_checks_admit_exactly_capacity::<SlidingWindowCounter>(&windows, true);
    racing_checks_admit_exactly_capacity::<SlidingWindowLog>(&windows, true);
    racing_checks_admit_exactly_capacity::<LeakyBucket>(&leaky, true);
}
