//! Waiting for slots under paused tokio time: schedules per algorithm, costs,
//! keys, deadlines, cancellation, jitter, and the absence of a stampede.
#![cfg(feature = "tokio")]

use rategate::{
    Algorithm, Clock, FixedWindow, Jitter, KeyedPacer, KeyedRateLimiter, LeakyBucket, ManualClock,
    Pacer, Quota, RateLimiter, Sharded, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
    TokioClock, WaitError,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A tokio-time clock that counts its readings: every check or peek reads
/// the clock exactly once, so readings count limiter consultations.
#[derive(Clone)]
struct CountingClock {
    inner: TokioClock,
    reads: Arc<AtomicU64>,
}

impl CountingClock {
    fn new() -> Self {
        CountingClock {
            inner: TokioClock::new(),
            reads: Arc::default(),
        }
    }
    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Clock for CountingClock {
    fn now(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.now()
    }
}

/// Spawns `costs.len()` waiters in order on one pacer and returns, in
/// completion order, (waiter index, admission time in ms from the start).
async fn run_waiters<A: Algorithm, C: Clock>(
    pacer: Arc<Pacer<A, C>>,
    costs: &[u32],
) -> Vec<(usize, u64)> {
    let start = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = costs
        .iter()
        .enumerate()
        .map(|(i, &cost)| {
            let (pacer, log) = (Arc::clone(&pacer), Arc::clone(&log));
            tokio::spawn(async move {
                pacer.until_n_ready(cost).await.unwrap();
                let ms = start.elapsed().as_millis() as u64;
                log.lock().unwrap().push((i, ms));
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(log).ok().unwrap().into_inner().unwrap()
}

/// The schedule a single client gets on a manual clock by checking, and on
/// a denial advancing exactly the reported retry time: what the head of the
/// queue does, one request after another. Milliseconds.
fn sequential_schedule<A: Algorithm>(quota: Quota, costs: &[u32]) -> Vec<u64> {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
    costs
        .iter()
        .map(|&cost| {
            loop {
                let d = limiter.check_n(cost).unwrap();
                if d.is_allowed() {
                    assert_eq!(d.delay_nanos(), 0, "delay mode is tested apart");
                    break clock.now() / 1_000_000;
                }
                // tokio's timer fires on whole milliseconds.
                clock.advance_nanos(d.retry_after_nanos().div_ceil(1_000_000) * 1_000_000);
            }
        })
        .collect()
}

async fn assert_schedule<A: Algorithm>(quota: Quota, n: usize, expected: Option<&[u64]>) {
    let clock = CountingClock::new();
    let limiter = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
    let pacer = Arc::new(Pacer::new(limiter));
    let costs = vec![1; n];
    let got = run_waiters(pacer, &costs).await;
    let order: Vec<usize> = got.iter().map(|&(i, _)| i).collect();
    assert_eq!(order, (0..n).collect::<Vec<_>>(), "arrival order");
    let times: Vec<u64> = got.iter().map(|&(_, t)| t).collect();
    assert_eq!(
        times,
        sequential_schedule::<A>(quota, &costs),
        "{}",
        std::any::type_name::<A>()
    );
    if let Some(expected) = expected {
        assert_eq!(times, expected);
    }
    // No stampede: at most one denial (learning the slot) per admission.
    assert!(
        clock.reads() <= 2 * n as u64,
        "{} reads for {n} admissions",
        clock.reads()
    );
}

#[tokio::test(start_paused = true)]
async fn token_bucket_releases_one_emission_interval_apart() {
    let quota = Quota::per_second(10).unwrap().burst(1).unwrap();
    assert_schedule::<TokenBucket>(quota, 6, Some(&[0, 100, 200, 300, 400, 500])).await;
    // With a burst of 3: three at once, then one per 100 ms.
    let quota = Quota::per_second(10).unwrap().burst(3).unwrap();
    assert_schedule::<TokenBucket>(quota, 6, Some(&[0, 0, 0, 100, 200, 300])).await;
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_releases_at_its_rate() {
    let quota: Quota = "10r/s".parse().unwrap();
    assert_schedule::<LeakyBucket>(quota, 5, Some(&[0, 100, 200, 300, 400])).await;
}

#[tokio::test(start_paused = true)]
async fn fixed_window_releases_a_window_at_a_time() {
    let quota = Quota::with_period(2, Duration::from_millis(100)).unwrap();
    assert_schedule::<FixedWindow>(quota, 6, Some(&[0, 0, 100, 100, 200, 200])).await;
}

#[tokio::test(start_paused = true)]
async fn sliding_window_log_releases_as_entries_expire() {
    let quota = Quota::with_period(2, Duration::from_millis(100)).unwrap();
    assert_schedule::<SlidingWindowLog>(quota, 6, Some(&[0, 0, 100, 100, 200, 200])).await;
}

#[tokio::test(start_paused = true)]
async fn sliding_window_counter_follows_its_weighted_schedule() {
    let quota = Quota::with_period(4, Duration::from_millis(100)).unwrap();
    assert_schedule::<SlidingWindowCounter>(quota, 12, None).await;
}

#[tokio::test(start_paused = true)]
async fn sharded_token_bucket_follows_its_schedule() {
    let quota = Quota::per_second(20).unwrap().burst(4).unwrap();
    assert_schedule::<Sharded<TokenBucket, 2>>(quota, 10, None).await;
}

#[tokio::test(start_paused = true)]
async fn costs_wait_for_enough_capacity_in_order() {
    let quota = Quota::per_second(10).unwrap().burst(5).unwrap();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, TokioClock::new()).unwrap();
    let got = run_waiters(Arc::new(limiter.into_pacer()), &[5, 3, 5, 1]).await;
    // 5 at once; 3 more need 300 ms; 5 more need 500 ms after that; 1 more 100 ms.
    assert_eq!(got, vec![(0, 0), (1, 300), (2, 800), (3, 900)]);
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_capacity_fails_at_once() {
    let quota = Quota::per_second(10).unwrap().burst(5).unwrap();
    let pacer = RateLimiter::<TokenBucket, _>::with_clock(quota, TokioClock::new())
        .unwrap()
        .into_pacer();
    let start = Instant::now();
    assert_eq!(
        pacer.until_n_ready(6).await,
        Err(WaitError::CostExceedsCapacity {
            cost: 6,
            capacity: 5
        })
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(
        pacer.limiter().peek_n(5).unwrap().is_allowed(),
        "nothing consumed"
    );
}

#[tokio::test(start_paused = true)]
async fn keys_wait_independently_and_in_order() {
    let quota = Quota::per_second(10).unwrap().burst(1).unwrap();
    let limiter = KeyedRateLimiter::<String, TokenBucket>::builder(quota)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let pacer = Arc::new(KeyedPacer::new(limiter));
    let start = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let (pacer, log) = (Arc::clone(&pacer), Arc::clone(&log));
            let key = if i % 2 == 0 { "alice" } else { "bob" };
            tokio::spawn(async move {
                pacer.until_key_ready(key).await.unwrap();
                log.lock()
                    .unwrap()
                    .push((i, start.elapsed().as_millis() as u64));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let got = log.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![(0, 0), (1, 0), (2, 100), (3, 100), (4, 200), (5, 200)]
    );
    assert_eq!(
        pacer.waiting_keys(),
        0,
        "queues removed with their last waiter"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deadline_before_the_slot_fails_at_once_and_consumes_nothing() {
    let quota = Quota::per_second(1).unwrap().burst(1).unwrap();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, TokioClock::new()).unwrap();
    let pacer = limiter.into_pacer();
    pacer.until_ready().await.unwrap();
    let start = Instant::now();
    let err = pacer
        .until_ready_by(start + Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WaitError::DeadlineExceeded {
            ready_in: Duration::from_secs(1)
        }
    );
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "failed at once, not at the deadline"
    );
    // A deadline the slot meets passes, at the slot.
    pacer
        .until_ready_by(start + Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "the failed wait took nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deadline_reached_in_line_consumes_nothing() {
    let quota = Quota::per_second(1).unwrap().burst(1).unwrap();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, TokioClock::new()).unwrap();
    let pacer = Arc::new(limiter.into_pacer());
    pacer.until_ready().await.unwrap();
    let start = Instant::now();
    let head = tokio::spawn({
        let pacer = Arc::clone(&pacer);
        async move { pacer.until_ready().await.map(|_| start.elapsed()) }
    });
    tokio::task::yield_now().await;
    let short = tokio::spawn({
        let pacer = Arc::clone(&pacer);
        async move {
            pacer
                .until_ready_by(start + Duration::from_millis(300))
                .await
        }
    });
    tokio::task::yield_now().await;
    let last = tokio::spawn({
        let pacer = Arc::clone(&pacer);
        async move { pacer.until_ready().await.map(|_| start.elapsed()) }
    });
    assert_eq!(
        short.await.unwrap(),
        Err(WaitError::QueuedAtDeadline { ahead: 1 })
    );
    assert_eq!(head.await.unwrap(), Ok(Duration::from_secs(1)));
    // The expired waiter took no slot: the last one gets the next.
    assert_eq!(last.await.unwrap(), Ok(Duration::from_secs(2)));
}

#[tokio::test(start_paused = true)]
async fn dropped_waiters_leak_nothing() {
    let quota = Quota::per_second(10).unwrap().burst(1).unwrap();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, TokioClock::new()).unwrap();
    let pacer = Arc::new(limiter.into_pacer());
    pacer.until_ready().await.unwrap();
    let start = Instant::now();
    // Head and a queued waiter both cancelled by a timeout before their slot.
    let cancelled: Vec<_> = (0..2)
        .map(|_| {
            let pacer = Arc::clone(&pacer);
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(50), pacer.until_ready()).await
            })
        })
        .collect();
    for c in cancelled {
        assert!(c.await.unwrap().is_err(), "timed out");
    }
    // And one dropped by select! against another branch.
    tokio::select! {
        _ = pacer.until_ready() => panic!("no slot before 100 ms"),
        _ = tokio::time::sleep(Duration::from_millis(30)) => {} // at 80 ms
    }
    pacer.until_ready().await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(100),
        "the first free slot"
    );
    pacer.until_ready().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn jitter_delays_each_wait_within_its_bounds() {
    let quota = Quota::per_second(10).unwrap().burst(1).unwrap();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, TokioClock::new()).unwrap();
    let pacer = Arc::new(Pacer::with_jitter(
        limiter,
        Jitter::between(Duration::from_millis(10), Duration::from_millis(40)),
    ));
    let got = run_waiters(pacer, &[1; 30]).await;
    assert_eq!(got[0].1, 0, "a free slot is taken at once, without jitter");
    let gaps: Vec<u64> = got.windows(2).map(|w| w[1].1 - w[0].1).collect();
    for &gap in &gaps {
        // 100 ms to the slot, plus 10..=40 ms, plus up to 1 ms of timer rounding.
        assert!((110..=141).contains(&gap), "gap {gap} ms in {gaps:?}");
    }
    let distinct: std::collections::BTreeSet<_> = gaps.iter().collect();
    assert!(distinct.len() > 5, "jitter varies: {gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_delay_mode_reserves_one_slot_per_consultation() {
    let clock = CountingClock::new();
    let quota: Quota = "10r/s burst=5".parse().unwrap();
    let limiter = RateLimiter::<LeakyBucket, _>::with_clock(quota, clock.clone()).unwrap();
    let pacer = Arc::new(limiter.into_pacer());
    let got = run_waiters(Arc::clone(&pacer), &[1; 6]).await;
    assert_eq!(
        got,
        vec![(0, 0), (1, 100), (2, 200), (3, 300), (4, 400), (5, 500)]
    );
    assert_eq!(
        clock.reads(),
        6,
        "each waiter reserved its slot with one check"
    );
    // With a deadline, a delayed slot past it is refused without reserving.
    let start = Instant::now();
    pacer.until_ready().await.unwrap(); // bucket drained by now: at once
    let err = pacer
        .until_ready_by(start + Duration::from_millis(50))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WaitError::DeadlineExceeded {
            ready_in: Duration::from_millis(100)
        }
    );
    let d = pacer.until_ready().await.unwrap();
    assert_eq!(
        d.delay(),
        Duration::from_millis(100),
        "the refused slot was not taken"
    );
}

#[tokio::test(start_paused = true)]
async fn many_waiters_consult_about_twice_per_admission() {
    let clock = CountingClock::new();
    let quota = Quota::per_second(100).unwrap();
    let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone()).unwrap();
    let got = run_waiters(Arc::new(limiter.into_pacer()), &[1; 300]).await;
    assert_eq!(got.len(), 300);
    let last = got.last().unwrap().1;
    // 100 at once, then 100 per second.
    assert_eq!(last, 2000);
    let per = clock.reads() as f64 / 300.0;
    assert!(per <= 2.0, "{per} consultations per admission");
}

#[test]
fn blocking_waiters_pass_one_interval_apart() {
    // Real threads and real time (a few ms). Arrival order among threads
    // cannot be forced here without sleeps long enough to make it moot; the
    // queue's FIFO order for parked threads is tested in the crate's unit
    // tests, and the async tests above share this engine.
    let quota = Quota::per_second(500).unwrap().burst(1).unwrap();
    let pacer = Arc::new(RateLimiter::<TokenBucket>::new(quota).unwrap().into_pacer());
    let start = std::time::Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..5)
        .map(|_| {
            let (pacer, log) = (Arc::clone(&pacer), Arc::clone(&log));
            std::thread::spawn(move || {
                pacer.wait().unwrap();
                log.lock().unwrap().push(start.elapsed());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut got = log.lock().unwrap().clone();
    got.sort();
    assert_eq!(got.len(), 5);
    // A slot every 2 ms: the fifth cannot pass before 8 ms after the first.
    assert!(
        got[4] - got[0] >= Duration::from_millis(8) - Duration::from_micros(100),
        "{got:?}"
    );
    let err = pacer.wait_n(2).unwrap_err();
    assert_eq!(
        err,
        WaitError::CostExceedsCapacity {
            cost: 2,
            capacity: 1
        }
    );
    let err = pacer
        .wait_n_by(1, std::time::Instant::now() + Duration::from_micros(10))
        .unwrap_err();
    assert!(matches!(err, WaitError::DeadlineExceeded { .. }), "{err}");
}
