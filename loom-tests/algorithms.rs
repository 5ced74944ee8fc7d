//! Models of each algorithm's state machine through the `Algorithm` trait:
//! racing checks on one state with the clock frozen admit exactly what the
//! algorithm allows, never report more remaining than the limit, and racing
//! a clock advance never admits more than the refill allows.

use crate::{model, sane};
use loom::sync::Arc;
use loom::thread;
use rategate::{
    Algorithm, FixedWindow, LeakyBucket, Quota, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

/// `costs.len()` threads each check once with their cost at time `now` on a
/// state already holding `pre` (a prior check of that cost at `now`);
/// the admitted total cost must be `expected`, and no two admissions may
/// report the same `remaining` (each saw a different state).
fn racing_checks<A: Algorithm>(
    quota: Quota,
    pre: u32,
    costs: &'static [u32],
    now: u64,
    expected: u32,
) {
    model(move || {
        let algorithm = Arc::new(A::from_quota(&quota).unwrap());
        let state = Arc::new(algorithm.new_state());
        if pre > 0 {
            assert!(algorithm.check(&state, now, pre).unwrap().is_allowed());
        }
        let handles: Vec<_> = costs
            .iter()
            .map(|&cost| {
                let (algorithm, state) = (algorithm.clone(), state.clone());
                thread::spawn(move || {
                    let d = algorithm.check(&state, now, cost).unwrap();
                    sane(&d);
                    (d.is_allowed(), cost, d.remaining())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let admitted: u32 = results.iter().filter(|r| r.0).map(|r| r.1).sum();
        assert_eq!(admitted, expected, "{results:?}");
        let mut remaining: Vec<_> = results.iter().filter(|r| r.0).map(|r| r.2).collect();
        let n = remaining.len();
        remaining.sort_unstable();
        remaining.dedup();
        assert_eq!(
            remaining.len(),
            n,
            "two admissions saw the same state: {results:?}"
        );
        let after = algorithm.peek(&state, now, 1).unwrap();
        sane(&after);
        assert!(!algorithm.is_idle(&state, now));
    });
}

/// One check at `t0` fills the state, then a thread checks at `t1` while
/// another checks at `t0` (a reading taken before the first's): the later
/// reading may get the refill, the earlier one must not.
fn racing_times<A: Algorithm>(quota: Quota, t0: u64, t1: u64, max_admitted: u32) {
    model(move || {
        let algorithm = Arc::new(A::from_quota(&quota).unwrap());
        let state = Arc::new(algorithm.new_state());
        while algorithm.check(&state, t0, 1).unwrap().is_allowed() {}
        let handles: Vec<_> = [t1, t0]
            .into_iter()
            .map(|now| {
                let (algorithm, state) = (algorithm.clone(), state.clone());
                thread::spawn(move || {
                    let d = algorithm.check(&state, now, 1).unwrap();
                    sane(&d);
                    u32::from(d.is_allowed())
                })
            })
            .collect();
        let admitted: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(admitted <= max_admitted, "{admitted} admitted");
    });
}

const SECOND: u64 = 1_000_000_000;

#[test]
fn token_bucket_racing_checks() {
    racing_checks::<TokenBucket>(Quota::per_second(3).unwrap(), 1, &[1, 1, 1], SECOND, 2);
    racing_checks::<TokenBucket>(Quota::per_second(3).unwrap(), 0, &[2, 2], SECOND, 2);
}

#[test]
fn token_bucket_racing_times() {
    racing_times::<TokenBucket>(
        Quota::per_second(2).unwrap(),
        SECOND,
        SECOND + SECOND / 2,
        1,
    );
}

#[test]
fn sliding_window_log_racing_checks() {
    let quota = Quota::per_second(3).unwrap();
    racing_checks::<SlidingWindowLog>(quota, 1, &[1, 1, 1], SECOND, 2);
    racing_checks::<SlidingWindowLog>(quota, 0, &[2, 2], SECOND, 2);
}

#[test]
fn sliding_window_log_racing_times() {
    let quota = Quota::per_second(2).unwrap();
    // Half a window later nothing has expired: nobody passes.
    racing_times::<SlidingWindowLog>(quota, SECOND, SECOND + SECOND / 2, 0);
    // A full window later both entries expired for the later reading.
    racing_times::<SlidingWindowLog>(quota, SECOND, 2 * SECOND, 2);
}

/// A full log (limit 2: entries at 0 and 10) while one thread checks at the
/// older entry's expiry (the locked path drops it, admits, and publishes a
/// new summary) and another checks 1 ns before it (a denial the summary
/// alone can decide). The denial must be one of the two sequential ones,
/// field for field: a summary read torn across the publication mixes them.
#[test]
fn sliding_window_log_denial_without_the_lock_reads_a_whole_summary() {
    model(|| {
        let swl = SlidingWindowLog::from_quota(&Quota::per_second(2).unwrap()).unwrap();
        let (swl, state) = (Arc::new(swl), Arc::new(swl.new_state()));
        assert!(swl.check(&state, 0, 1).unwrap().is_allowed());
        assert!(swl.check(&state, 10, 1).unwrap().is_allowed());
        let [admit, deny] = [SECOND, SECOND - 1].map(|now| {
            let (swl, state) = (swl.clone(), state.clone());
            thread::spawn(move || swl.check(&state, now, 1).unwrap())
        });
        let (admitted, denied) = (admit.join().unwrap(), deny.join().unwrap());
        assert!(admitted.is_allowed(), "{admitted:?}");
        assert_eq!(admitted.reset_after_nanos(), SECOND);
        assert!(!denied.is_allowed(), "{denied:?}");
        assert_eq!(denied.remaining(), 0);
        let fields = (denied.retry_after_nanos(), denied.reset_after_nanos());
        // First: the entry at 0 frees a slot 1 ns later, the one at 10
        // leaves 11 ns later. After the admission at 1 s (its reading counts
        // as 1 s): the entry at 10 frees the slot, the one at 1 s leaves last.
        assert!(
            fields == (1, 11) || fields == (11, SECOND + 1),
            "a torn summary: {denied:?}"
        );
    });
}

#[test]
fn leaky_bucket_racing_checks() {
    // burst=1 nodelay: two pass at once (burst + 1).
    let quota: Quota = "10r/s burst=1 nodelay".parse().unwrap();
    racing_checks::<LeakyBucket>(quota, 0, &[1, 1, 1], SECOND, 2);
    racing_checks::<LeakyBucket>(quota, 1, &[1, 1], SECOND, 1);
}

#[test]
fn leaky_bucket_racing_times() {
    let quota: Quota = "10r/s burst=1 nodelay".parse().unwrap();
    // 100 ms drains one request's worth of excess.
    racing_times::<LeakyBucket>(quota, SECOND, SECOND + 100 * 1_000_000, 1);
}

#[test]
fn fixed_window_racing_checks() {
    let quota = Quota::per_second(3).unwrap();
    racing_checks::<FixedWindow>(quota, 1, &[1, 1, 1], SECOND, 2);
    racing_checks::<FixedWindow>(quota, 0, &[2, 2], SECOND, 2);
}

#[test]
fn fixed_window_racing_times() {
    let quota = Quota::per_second(2).unwrap();
    // Same window: nobody passes.
    racing_times::<FixedWindow>(quota, SECOND, SECOND + SECOND / 2, 0);
    // Next window: two fit; the earlier reading may land in either window,
    // never beyond the new window's limit.
    racing_times::<FixedWindow>(quota, SECOND, 2 * SECOND, 2);
}

#[test]
fn sliding_window_counter_racing_checks() {
    let quota = Quota::per_second(3).unwrap();
    racing_checks::<SlidingWindowCounter>(quota, 1, &[1, 1, 1], SECOND, 2);
    racing_checks::<SlidingWindowCounter>(quota, 0, &[2, 2], SECOND, 2);
}

#[test]
fn sliding_window_counter_racing_times() {
    let quota = Quota::per_second(2).unwrap();
    // At the next window's start the previous window weighs fully.
    racing_times::<SlidingWindowCounter>(quota, SECOND, 2 * SECOND, 0);
    // Two windows later both counts are gone.
    racing_times::<SlidingWindowCounter>(quota, SECOND, 3 * SECOND, 2);
}

/// The fallback under races, clock frozen: a two-shard key with two slots
/// per shard; the main thread (home shard 0, the first index handed out in
/// each execution) fills its shard, then two threads check once each. Their
/// homes are 1 and 0, so one admits at home and the other only through the
/// fallback, racing it for shard 1: both must pass, each decision is sane,
/// and the key is then full.
#[test]
fn sharded_fallback_admits_exactly_the_limit() {
    use rategate::Sharded;
    use rategate::algorithm::Splittable;

    fn racing<A: Splittable>(quota: Quota) {
        model(move || {
            let sharded = Arc::new(Sharded::<A, 2>::from_quota(&quota).unwrap());
            let state = Arc::new(sharded.new_state());
            for _ in 0..2 {
                assert!(sharded.check(&state, SECOND, 1).unwrap().is_allowed());
            }
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (sharded, state) = (sharded.clone(), state.clone());
                    thread::spawn(move || {
                        let d = sharded.check(&state, SECOND, 1).unwrap();
                        sane(&d);
                        assert_eq!(d.limit(), 4);
                        u32::from(d.is_allowed())
                    })
                })
                .collect();
            let admitted: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(admitted, 2);
            let after = sharded.peek(&state, SECOND, 1).unwrap();
            assert!(!after.is_allowed());
            assert_eq!(after.remaining(), 0);
            assert!(!sharded.is_idle(&state, SECOND));
        });
    }

    racing::<FixedWindow>(Quota::per_second(4).unwrap());
    racing::<TokenBucket>(Quota::per_second(4).unwrap());
}
