//! Shared by the bench suites: the list of algorithms, the quotas (the same
//! for rategate and governor), a cheap key generator and the criterion
//! configuration.
//!
//! Naming, which `scripts/bench-table.sh` relies on: every benchmark is
//! `group/function/variant`; rategate rows use the algorithm's name as the
//! function, governor's rows use `governor`, and a rategate row is compared
//! with the governor row of the same group and variant.

#![allow(dead_code)] // each suite uses part of this module

use criterion::Criterion;
use rategate::{
    Algorithm, Delay, FixedWindow, LeakyBucket, Quota, QuotaError, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket,
};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Runs one generic benchmark body per algorithm.
pub trait PerAlgorithm {
    /// The body for algorithm `A`, reported under `name`.
    fn run<A: Algorithm>(&mut self, name: &'static str);
}

/// Every algorithm the suites measure: one line each.
pub fn for_each_algorithm(body: &mut impl PerAlgorithm) {
    body.run::<TokenBucket>("token_bucket");
    // One line per algorithm.
    body.run::<FixedWindow>("fixed_window");
    body.run::<SlidingWindowCounter>("sliding_window_counter");
    body.run::<SlidingWindowLog>("sliding_window_log");
    body.run::<LeakyBucket>("leaky_bucket");
}

/// Short runs, no plots: the whole suite fits in a few minutes on 2 noisy
/// cores. Command-line flags (`--measurement-time`, `--warm-up-time`, ...)
/// override.
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
}

/// The allowed path's rate: 1,000 per microsecond, one per nanosecond. No
/// check, which takes several nanoseconds, can outrun it, nor can two
/// threads together. The windows hold at most 1,000 admissions, so the
/// sliding window log's per-key ring stays small (at 10^9 per second it
/// would grow to tens of millions of entries).
pub const ALLOW_LIMIT: u32 = 1_000;
/// The allowed path's period in nanoseconds.
pub const ALLOW_PERIOD_NANOS: u64 = 1_000;
/// The allowed path's burst, without delay: the token bucket's capacity (as
/// governor's), about a millisecond of slack for a thread that is preempted
/// between reading the clock and deciding and so decides on a stale time.
/// An algorithm that cannot hold that much gets its largest burst: the leaky
/// bucket, which drains in whole milliseconds as nginx does, then passes
/// 8,389 requests per millisecond per key. The windows ignore the burst.
pub const ALLOW_BURST: u32 = 1 << 20;

/// The quota of the allowed path; see [`ALLOW_LIMIT`] and [`ALLOW_BURST`].
pub fn allow_quota<A: Algorithm>() -> Quota {
    let with_burst = |burst| {
        Quota::with_period(ALLOW_LIMIT, Duration::from_nanos(ALLOW_PERIOD_NANOS))
            .and_then(|q| q.burst(burst))
            .expect("valid quota")
            .delay(Delay::NoDelay)
    };
    let quota = with_burst(ALLOW_BURST);
    match A::from_quota(&quota) {
        Ok(_) => quota,
        Err(QuotaError::LimitTooLarge { max, .. }) => {
            with_burst(u32::try_from(max).unwrap_or(u32::MAX).max(1))
        }
        Err(e) => panic!("allow quota {quota} rejected: {e}"),
    }
}

/// The same allowed-path quota for governor: one cell per nanosecond, burst
/// [`ALLOW_BURST`].
pub fn governor_allow_quota() -> governor::Quota {
    let interval = Duration::from_nanos(ALLOW_PERIOD_NANOS / u64::from(ALLOW_LIMIT));
    governor::Quota::with_period(interval)
        .expect("nonzero period")
        .allow_burst(NonZeroU32::new(ALLOW_BURST).expect("nonzero"))
}

/// The quota of the denied path: one request per minute (the leaky bucket
/// refuses rates below one per 1,000 s), exhausted by one check before
/// measuring; each benchmark runs for seconds.
pub fn deny_quota() -> Quota {
    Quota::per_minute(1).expect("valid quota")
}

/// The same denied-path quota for governor.
pub fn governor_deny_quota() -> governor::Quota {
    governor::Quota::per_minute(NonZeroU32::MIN)
}

/// Whether a trial run with `denied` denials out of `checks` stayed on the
/// allowed path: none, or a few (at most 1 in 1,000) from stale clock
/// readings after a preemption on a busy machine, which are reported.
/// Otherwise the benchmark `id` is left out, with a note on stderr.
pub fn on_allowed_path(id: &str, denied: u64, checks: u64) -> bool {
    if denied == 0 {
        return true;
    }
    if denied * 1_000 <= checks {
        eprintln!("note: {id}: {denied} of {checks} trial checks denied; measured anyway");
        return true;
    }
    eprintln!("note: {id} skipped: {denied} of {checks} trial checks denied");
    false
}

/// How many of `n` calls of `check` (true: admitted) were denied: the
/// sanity check that an allowed-path benchmark stays on that path.
pub fn denials(n: u64, mut check: impl FnMut() -> bool) -> u64 {
    (0..n).filter(|_| !check()).count() as u64
}

/// As [`denials`], with `check` running on two threads at once.
pub fn denials_two_threads(n: u64, check: impl Fn(u64, &mut KeyRng) -> bool + Sync) -> u64 {
    let denied = AtomicU64::new(0);
    two_threads(n, |t, rng| {
        if !check(t, rng) {
            // Relaxed: a counter read after the threads are joined.
            denied.fetch_add(1, Ordering::Relaxed);
        }
    });
    denied.into_inner()
}

/// wyrand: a one-multiply generator, cheap enough not to hide the check.
#[derive(Debug, Clone)]
pub struct KeyRng(u64);

impl KeyRng {
    pub fn new(seed: u64) -> Self {
        KeyRng(seed)
    }

    /// A uniform key in `0..n` (multiply-shift, no division).
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        let r = (t >> 64) as u64 ^ t as u64;
        ((u128::from(r) * u128::from(n)) >> 64) as u64
    }
}

/// Threads in the contention benchmarks.
pub const THREADS: u64 = 2;

/// Runs `op(thread, rng)` `iters` times on each of two threads released
/// together by a barrier; returns the slower thread's time divided by the
/// thread count, so criterion reports the *aggregate* time per operation
/// (its inverse is the operations per second of both threads together; each
/// thread sees twice this time per operation).
pub fn two_threads<R>(iters: u64, op: impl Fn(u64, &mut KeyRng) -> R + Sync) -> Duration {
    let barrier = Barrier::new(THREADS as usize);
    thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    let mut rng = KeyRng::new(t + 1);
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(op(t, &mut rng));
                    }
                    start.elapsed()
                })
            })
            .collect();
        let slowest = handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .max()
            .unwrap_or_default();
        slowest / THREADS as u32
    })
}
