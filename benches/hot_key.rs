//! One hot key hammered by several threads at once: the case `Sharded` is
//! for. Two threads, and as many as the machine has cores when that is more
//! (`std::thread::available_parallelism`); `RATEGATE_BENCH_THREADS` (a
//! comma-separated list, such as `1,2,4,8,16`) sets the thread counts
//! instead (`scripts/scale.sh` runs it so).
//!
//! * `direct`: one direct limiter shared by every thread.
//! * `keyed`: a keyed limiter, every thread on the same key (so the map's
//!   shard lock for that key is shared too).
//! * `distinct_keys` (token bucket and governor): a keyed limiter, each
//!   thread cycling through 1,000 keys of its own: no shared key, so what
//!   is left is the map and the clock, the baseline a hot key is held to.
//!
//! Limiters: governor (direct and keyed, its defaults), rategate's
//! `TokenBucket` and `FixedWindow`, and both striped over four cache-padded
//! shards, `Sharded<FixedWindow, 4>` and `Sharded<TokenBucket, 4>`. All on
//! their default clocks.
//!
//! Allowed path: one request per nanosecond with a burst (a window) of 2^30,
//! which no thread count here can outrun, even on one shard (a quarter of
//! the rate); every sample counts its denials and fails if there were any.
//!
//! Each sample starts the threads, which wait on a barrier and then run
//! `iters` checks each; the time reported per iteration is the slowest
//! thread's time divided by the thread count: the *aggregate* time per
//! check, whose inverse (criterion's throughput line) is the checks per
//! second of all threads together.

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use rategate::{
    Algorithm, FixedWindow, KeyedRateLimiter, Quota, RateLimiter, Sharded, TokenBucket,
};
use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Requests per period on the allowed path: one per nanosecond, the most a
/// quota can express, with a burst (a window) of 2^30, about a second. The
/// large burst is for the noisy machine: a thread preempted between reading
/// the clock and deciding comes back with a stale reading, which a bucket
/// whose theoretical arrival time has moved on by more than the burst would
/// deny (governor and rategate alike).
const LIMIT: u32 = 1 << 30;
/// The allowed path's period in nanoseconds.
const PERIOD_NANOS: u64 = 1 << 30;

fn quota() -> Quota {
    Quota::with_period(LIMIT, Duration::from_nanos(PERIOD_NANOS))
        .and_then(|q| q.burst(LIMIT))
        .expect("valid quota")
}

/// governor's equivalent: one cell per nanosecond, the same burst.
fn governor_quota() -> governor::Quota {
    governor::Quota::with_period(Duration::from_nanos(PERIOD_NANOS / u64::from(LIMIT)))
        .expect("nonzero period")
        .allow_burst(NonZeroU32::new(LIMIT).expect("nonzero"))
}

/// Keys per thread in the `distinct_keys` rows.
const KEYS_PER_THREAD: u64 = 1_000;

/// `RATEGATE_BENCH_THREADS` when set; else two threads, and the machine's
/// core count when it is larger.
fn thread_counts() -> Vec<usize> {
    if let Ok(list) = std::env::var("RATEGATE_BENCH_THREADS") {
        let counts: Vec<usize> = list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("RATEGATE_BENCH_THREADS: numbers, such as 1,2,4")
            })
            .collect();
        assert!(
            counts.iter().all(|&n| n > 0),
            "RATEGATE_BENCH_THREADS: each count at least 1"
        );
        return counts;
    }
    let cores = thread::available_parallelism().map_or(1, NonZeroUsize::get);
    if cores > 2 { vec![2, cores] } else { vec![2] }
}

/// Thread `t`'s key for its `i`th check in the `distinct_keys` rows: keys
/// `t, t + threads, t + 2 x threads, ...`, 1,000 of them.
fn own_key(threads: usize, t: usize, i: u64) -> u64 {
    (i % KEYS_PER_THREAD) * threads as u64 + t as u64
}

/// Runs `check(thread, i)` (true: admitted) for `i` in `0..iters` on each
/// of `threads` threads released together; returns the slowest thread's
/// time divided by `threads`, so criterion reports the aggregate time per
/// check. Fails if anything was denied: the run left the allowed path.
fn hammer(threads: usize, iters: u64, check: impl Fn(usize, u64) -> bool + Sync) -> Duration {
    let barrier = Barrier::new(threads);
    let denied = AtomicU64::new(0);
    let slowest = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, check, denied) = (&barrier, &check, &denied);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut no = 0u64;
                    for i in 0..iters {
                        no += u64::from(!black_box(check(t, i)));
                    }
                    let elapsed = start.elapsed();
                    // Relaxed: read after the threads are joined.
                    denied.fetch_add(no, Ordering::Relaxed);
                    elapsed
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .max()
            .unwrap_or_default()
    });
    let denied = denied.into_inner();
    assert_eq!(denied, 0, "{denied} checks denied on the allowed path");
    slowest / u32::try_from(threads).expect("few threads")
}

fn rategate<A: Algorithm>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    threads: usize,
    distinct: bool,
) {
    let direct = RateLimiter::<A>::new(quota()).expect("quota fits");
    group.bench_function(BenchmarkId::new(name, "direct"), |b| {
        b.iter_custom(|iters| hammer(threads, iters, |_, _| direct.check().is_allowed()))
    });
    let keyed = KeyedRateLimiter::<u64, A>::new(quota()).expect("quota fits");
    assert!(keyed.check(&0).is_allowed());
    group.bench_function(BenchmarkId::new(name, "keyed"), |b| {
        b.iter_custom(|iters| hammer(threads, iters, |_, _| keyed.check(&0).is_allowed()))
    });
    assert_eq!(keyed.len(), 1);
    if distinct {
        let keyed = KeyedRateLimiter::<u64, A>::new(quota()).expect("quota fits");
        group.bench_function(BenchmarkId::new(name, "distinct_keys"), |b| {
            b.iter_custom(|iters| {
                hammer(threads, iters, |t, i| {
                    keyed.check(&own_key(threads, t, i)).is_allowed()
                })
            })
        });
    }
}

fn governor(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let direct = governor::RateLimiter::direct(governor_quota());
    group.bench_function(BenchmarkId::new("governor", "direct"), |b| {
        b.iter_custom(|iters| hammer(threads, iters, |_, _| direct.check().is_ok()))
    });
    let keyed = governor::RateLimiter::keyed(governor_quota());
    assert!(keyed.check_key(&0u64).is_ok());
    group.bench_function(BenchmarkId::new("governor", "keyed"), |b| {
        b.iter_custom(|iters| hammer(threads, iters, |_, _| keyed.check_key(&0u64).is_ok()))
    });
    let keyed = governor::RateLimiter::keyed(governor_quota());
    group.bench_function(BenchmarkId::new("governor", "distinct_keys"), |b| {
        b.iter_custom(|iters| {
            hammer(threads, iters, |t, i| {
                keyed.check_key(&own_key(threads, t, i)).is_ok()
            })
        })
    });
}

fn hot_key(c: &mut Criterion) {
    for threads in thread_counts() {
        let mut group = c.benchmark_group(format!("hot_key_{threads}_threads"));
        group.throughput(Throughput::Elements(1));
        governor(&mut group, threads);
        rategate::<TokenBucket>(&mut group, "token_bucket", threads, true);
        rategate::<FixedWindow>(&mut group, "fixed_window", threads, false);
        rategate::<Sharded<FixedWindow, 4>>(&mut group, "sharded_fixed_window_4", threads, false);
        rategate::<Sharded<TokenBucket, 4>>(&mut group, "sharded_token_bucket_4", threads, false);
        group.finish();
    }
}

/// One second of warm-up and three of measurement; `RATEGATE_BENCH_QUICK`
/// halves the warm-up and measures for 1.5 s (`scripts/scale.sh`, whose
/// five thread counts must fit in minutes).
fn config() -> Criterion {
    let quick = std::env::var_os("RATEGATE_BENCH_QUICK").is_some();
    let (warm_up, measure) = if quick { (500, 1_500) } else { (1_000, 3_000) };
    Criterion::default()
        .warm_up_time(Duration::from_millis(warm_up))
        .measurement_time(Duration::from_millis(measure))
}

criterion_group! {
    name = benches;
    config = config();
    targets = hot_key
}
criterion_main!(benches);
