use super::*;

fn log(limit: u32, period: u64) -> SlidingWindowLog {
    let quota = Quota::with_period(limit, std::time::Duration::from_nanos(period)).unwrap();
    SlidingWindowLog::from_quota(&quota).unwrap()
}

fn entries(state: &WindowLog) -> Vec<(u64, u32)> {
    let log = state.lock();
    log.entries.iter().map(|e| (e.at, e.cost)).collect()
}

#[test]
fn admits_limit_per_window_with_half_open_boundary() {
    let swl = log(3, 100);
    let state = swl.new_state();
    for (t, left) in [(10, 2), (20, 1), (30, 0)] {
        let d = swl.check(&state, t, 1).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), left);
        assert_eq!(d.reset_after_nanos(), 100);
    }
    let d = swl.check(&state, 109, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_nanos(), 1); // 10 leaves at 110
    assert_eq!(d.reset_after_nanos(), 21); // 30 leaves at 130
    // At exactly 110 the request at 10 is out: (10, 110].
    let d = swl.check(&state, 110, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert_eq!(entries(&state), vec![(20, 1), (30, 1), (110, 1)]);
}

#[test]
fn costs_and_retry_after_for_a_large_cost() {
    let swl = log(10, 1_000);
    let state = swl.new_state();
    assert!(swl.check(&state, 0, 4).unwrap().is_allowed());
    assert!(swl.check(&state, 100, 3).unwrap().is_allowed());
    assert!(swl.check(&state, 200, 2).unwrap().is_allowed());
    // 9 used: a cost of 6 needs 5 freed: the entries at 0 (4) and 100 (3).
    let d = swl.check(&state, 300, 6).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 1);
    assert_eq!(d.retry_after_nanos(), 800);
    assert_eq!(d.reset_after_nanos(), 900);
    assert!(!swl.check(&state, 1_099, 6).unwrap().is_allowed());
    assert!(swl.check(&state, 1_100, 6).unwrap().is_allowed());
    assert_eq!(
        swl.check(&state, 0, 11),
        Err(CheckError::CostExceedsCapacity {
            cost: 11,
            capacity: 10
        })
    );
}

#[test]
fn same_time_admissions_share_an_entry_and_cost_zero_records_nothing() {
    let swl = log(5, 50);
    let state = swl.new_state();
    let d = swl.check(&state, 7, 0).unwrap();
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.reset_after_nanos()), (5, 0));
    assert!(entries(&state).is_empty());
    assert!(swl.is_idle(&state, 7));
    for _ in 0..3 {
        assert!(swl.check(&state, 7, 1).unwrap().is_allowed());
    }
    assert_eq!(entries(&state), vec![(7, 3)]);
    let d = swl.check(&state, 8, 0).unwrap();
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.reset_after_nanos()), (2, 49));
}

#[test]
fn time_going_back_counts_as_no_time_elapsed() {
    let swl = log(2, 100);
    let state = swl.new_state();
    assert!(swl.check(&state, 1_000, 1).unwrap().is_allowed());
    // An earlier reading is recorded at 1 000, not at 900.
    let d = swl.check(&state, 900, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.reset_after_nanos(), 200);
    assert_eq!(entries(&state), vec![(1_000, 2)]);
    let d = swl.check(&state, 950, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_nanos(), 150);
    assert!(!swl.check(&state, 1_099, 1).unwrap().is_allowed());
    assert!(swl.check(&state, 1_100, 2).unwrap().is_allowed());
    // A probe (cost 0) writes nothing: it neither moves the log's clock
    // nor drops entries.
    assert!(swl.check(&state, 1_300, 0).unwrap().is_allowed());
    assert_eq!(entries(&state), vec![(1_100, 2)]);
    // A check at 1 300 drops the entries expired then; a reading back
    // at 1 150 counts as 1 300, so it cannot see (1 050, 1 150] again
    // with the admission at 1 100 gone from the log.
    assert!(swl.check(&state, 1_300, 1).unwrap().is_allowed());
    assert_eq!(entries(&state), vec![(1_300, 1)]);
    let d = swl.check(&state, 1_150, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.reset_after_nanos(), 250);
    assert_eq!(entries(&state), vec![(1_300, 2)]);
    assert!(!swl.is_idle(&state, 1_150));
    assert!(swl.is_idle(&state, 1_400));
    // A peek is read-only: it does not move the log's clock.
    assert!(swl.peek(&state, 5_000, 2).unwrap().is_allowed());
    assert!(!swl.check(&state, 1_350, 1).unwrap().is_allowed());
}

/// A period cut at run time (an `Adjustable` log) moves expiries
/// earlier: a denial without the lock must test expiry at the log's
/// clock, as the lock holder does, not at the request's own reading.
#[test]
fn a_shorter_period_after_a_step_back_expires_as_the_lock_holder_would() {
    for reading_without_lock in [true, false] {
        let (before, after) = (log(2, 100), log(2, 50));
        let state = before.new_state();
        assert!(before.check(&state, 0, 1).unwrap().is_allowed());
        assert!(before.check(&state, 10, 1).unwrap().is_allowed());
        // A denial at 95: of cost 1 without the lock, of cost 2 with it.
        let cost = if reading_without_lock { 1 } else { 2 };
        assert!(!before.check(&state, 95, cost).unwrap().is_allowed());
        // The period becomes 50 and the clock steps back to 20: the
        // log's clock is 95, where both entries have left.
        let d = after.check(&state, 20, 1).unwrap();
        assert!(d.is_allowed(), "{reading_without_lock}: {d:?}");
        assert_eq!((d.remaining(), d.reset_after_nanos()), (1, 125));
        assert_eq!(entries(&state), vec![(95, 1)]);
    }
}

/// A snapshot keeps a denial's reading taken without the lock.
#[test]
fn a_snapshot_keeps_the_readings_of_denials_without_the_lock() {
    let swl = log(3, 100);
    let state = swl.new_state();
    assert!(swl.check(&state, 0, 1).unwrap().is_allowed());
    assert!(swl.check(&state, 10, 1).unwrap().is_allowed());
    // 2 + 2 misses by one: denied from the summary, reading 95.
    assert!(!swl.check(&state, 95, 2).unwrap().is_allowed());
    let mut bytes = Vec::new();
    swl.save_log(&state, &mut bytes);
    let restored = swl.load_log(&bytes, 1_000, 1_000).unwrap();
    for state in [&state, &restored] {
        // A step back to 30 counts as 95.
        let d = swl.check(state, 30, 1).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.reset_after_nanos(), 165);
        assert!(!swl.check(state, 130, 3).unwrap().is_allowed());
    }
}

/// A panic while the lock is held (an allocation failing under it,
/// say) releases it as the guard unwinds: the next check takes it and
/// finds the log as the panicking holder left it.
#[test]
fn a_panic_under_the_lock_releases_it() {
    let swl = log(2, 100);
    let state = swl.new_state();
    assert!(swl.check(&state, 0, 1).unwrap().is_allowed());
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _held = state.lock();
        panic!("under the lock");
    }));
    assert!(panicked.is_err());
    assert!(swl.check(&state, 1, 1).unwrap().is_allowed());
    assert!(!swl.check(&state, 2, 1).unwrap().is_allowed());
    assert_eq!(entries(&state), vec![(0, 1), (1, 1)]);
}

/// A limit of 1 never needs a ring: its one entry stays inline.
#[test]
fn a_limit_of_one_never_allocates_a_ring() {
    let swl = log(1, 100);
    let state = swl.new_state();
    for t in (0..1_000).step_by(7) {
        swl.check(&state, t, 1).unwrap();
        assert_eq!(state.lock().entries.heap_capacity(), 0, "at {t}");
    }
    // Admitted every 105 ns (the first multiple of 7 at least 100 later).
    assert_eq!(entries(&state), vec![(945, 1)]);
}

/// A restored log's summary describes it from the start: a denial
/// without the lock after a locked one that changed nothing reports
/// the restored entries' times, as the lock holder would.
#[test]
fn a_restored_log_denies_without_the_lock_as_the_lock_holder_would() {
    let swl = log(1, 100);
    let state = swl.new_state();
    assert!(swl.check(&state, 990, 1).unwrap().is_allowed());
    let mut bytes = Vec::new();
    swl.save_log(&state, &mut bytes);
    // Restored at 50 on a clock that read 1 000 at the save: the entry
    // moves to 40.
    let restored = swl.load_log(&bytes, 1_000, 50).unwrap();
    let d = swl.check(&restored, 50, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_nanos(), 90);
    // Denied from the summary: the entry at 40 leaves at 140.
    let d = swl.check(&restored, 60, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!((d.retry_after_nanos(), d.reset_after_nanos()), (80, 80));
}

#[test]
fn ring_grows_lazily_and_never_past_limit() {
    let swl = log(6, 1_000);
    let state = swl.new_state();
    assert_eq!(state.lock().entries.heap_capacity(), 0);
    for t in 0..6 {
        assert!(swl.check(&state, t, 1).unwrap().is_allowed());
        let cap = state.lock().entries.heap_capacity();
        assert!(cap <= 6, "capacity {cap} after {} entries", t + 1);
        // The first entry is inline; the second allocates the ring.
        assert_eq!(cap == 0, t == 0, "capacity {cap} after {} entries", t + 1);
    }
    assert!(!swl.check(&state, 6, 1).unwrap().is_allowed());
    // Steady traffic reuses the ring.
    for t in 1_000..1_100 {
        swl.check(&state, t, 1).unwrap();
        assert!(state.lock().entries.heap_capacity() <= 6);
    }
}

#[cfg(target_pointer_width = "64")]
#[test]
fn documented_sizes() {
    assert_eq!(size_of::<WindowLog>(), 80);
    assert_eq!(size_of::<Entry>(), 16);
}

#[test]
fn extreme_times_saturate() {
    let swl = log(1, 1 << 40);
    let state = swl.new_state();
    let late = u64::MAX - 5;
    let d = swl.check(&state, late, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.reset_after_nanos(), 1 << 40);
    let d = swl.check(&state, u64::MAX, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_nanos(), (1 << 40) - 5);
    let long = log(1, u64::MAX);
    let state = long.new_state();
    assert!(long.check(&state, u64::MAX, 1).unwrap().is_allowed());
    let d = long.check(&state, 0, 1).unwrap();
    assert_eq!(d.retry_after_nanos(), u64::MAX);
    assert!(!swl.is_idle(&state, u64::MAX));
}
