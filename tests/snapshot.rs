//! Snapshots: a keyed limiter's state saved after random traffic and
//! restored into a fresh limiter, on a clock at another time (a multiple of
//! the period and of a millisecond away, so windows line up), decides every
//! later request exactly as the original does; bad or mismatched snapshots
//! give typed errors and leave the limiter unchanged; corrupted bytes never
//! panic.

use proptest::prelude::*;
use rategate::snapshot::{Snapshot, SnapshotError};
use rategate::{
    FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Quota, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket,
};
use std::time::Duration;

type Keyed<A> = KeyedRateLimiter<u32, A, ManualClock>;

fn keyed<A: Snapshot>(quota: Quota, clock: &ManualClock) -> Keyed<A> {
    KeyedRateLimiter::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn quotas() -> impl Strategy<Value = Quota> {
    (1u32..=10, 1u64..=20, prop::option::of(1u32..=10)).prop_map(|(limit, ms, burst)| {
        let quota =
            Quota::with_period(limit, Duration::from_millis(ms * u64::from(limit))).unwrap();
        burst.map_or(quota, |b| quota.burst(b).unwrap())
    })
}

/// (nanoseconds to advance, key, cost).
fn traffic() -> impl Strategy<Value = Vec<(u64, u32, u32)>> {
    prop::collection::vec((0u64..30_000_000, 0u32..4, 0u32..=3), 0..60)
}

fn round_trip<A: Snapshot>(
    quota: Quota,
    before: &[(u64, u32, u32)],
    after: &[(u64, u32, u32)],
    start: u64,
    shift: u64,
) -> Result<(), TestCaseError> {
    let old_clock = ManualClock::new();
    old_clock.set(start);
    let old = keyed::<A>(quota, &old_clock);
    for &(gap, key, cost) in before {
        old_clock.advance_nanos(gap);
        let _ = old.check_n(&key, cost);
    }
    let bytes = old.snapshot();
    // The new process's clock: elsewhere, by a whole number of periods and
    // of milliseconds.
    let step = quota.period_nanos() * 1_000_000;
    let new_clock = ManualClock::new();
    new_clock.set(old_clock_now(&old_clock) % step + shift * step);
    let new = keyed::<A>(quota, &new_clock);
    let restored = new.restore(&bytes).unwrap();
    prop_assert!(restored <= old.len());
    for &(gap, key, cost) in after {
        old_clock.advance_nanos(gap);
        new_clock.advance_nanos(gap);
        prop_assert_eq!(
            new.check_n(&key, cost),
            old.check_n(&key, cost),
            "key {}",
            key
        );
    }
    Ok(())
}

fn old_clock_now(clock: &ManualClock) -> u64 {
    use rategate::Clock;
    clock.now()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn round_trips_decide_as_the_original(
        quota in quotas(),
        before in traffic(),
        after in traffic(),
        start in 0u64..1 << 50,
        shift in 0u64..3,
    ) {
        round_trip::<TokenBucket>(quota, &before, &after, start, shift)?;
        round_trip::<FixedWindow>(quota, &before, &after, start, shift)?;
        round_trip::<SlidingWindowCounter>(quota, &before, &after, start, shift)?;
        round_trip::<SlidingWindowLog>(quota, &before, &after, start, shift)?;
        round_trip::<LeakyBucket>(quota, &before, &after, start, shift)?;
    }

    /// Any corruption of a snapshot is an error or a restore, never a panic.
    #[test]
    fn corrupted_snapshots_never_panic(
        before in traffic(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let quota = Quota::per_second(5).unwrap();
        let clock = ManualClock::new();
        let old = keyed::<SlidingWindowLog>(quota, &clock);
        for &(gap, key, cost) in &before {
            clock.advance_nanos(gap);
            let _ = old.check_n(&key, cost);
        }
        let mut bytes = old.snapshot();
        for (at, byte) in flips {
            let at = at.index(bytes.len());
            bytes[at] ^= byte;
        }
        let fresh = keyed::<SlidingWindowLog>(quota, &clock);
        let _ = fresh.restore(&bytes);
        let _ = fresh.restore(&bytes[..cut.index(bytes.len())]);
    }
}

#[test]
fn mismatched_and_malformed_snapshots_are_typed_errors() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(10).unwrap();
    let tb = keyed::<TokenBucket>(quota, &clock);
    assert!(tb.check_n(&7, 4).unwrap().is_allowed());
    let bytes = tb.snapshot();

    let fw = keyed::<FixedWindow>(quota, &clock);
    assert_eq!(
        fw.restore(&bytes),
        Err(SnapshotError::AlgorithmMismatch {
            expected: 2,
            found: 1
        })
    );
    let other = keyed::<TokenBucket>(Quota::per_minute(11).unwrap(), &clock);
    assert_eq!(other.restore(&bytes), Err(SnapshotError::QuotaMismatch));
    let fresh = keyed::<TokenBucket>(quota, &clock);
    assert_eq!(fresh.restore(b"nope"), Err(SnapshotError::NotASnapshot));
    let mut version = bytes.clone();
    version[4] = 9;
    assert_eq!(
        fresh.restore(&version),
        Err(SnapshotError::UnsupportedVersion(9))
    );
    assert_eq!(
        fresh.restore(&bytes[..bytes.len() - 1]),
        Err(SnapshotError::Truncated)
    );
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(fresh.restore(&long), Err(SnapshotError::Truncated));
    // A string key where u32 keys were saved: 4 bytes of a u32 are valid
    // UTF-8 here, so use a state of the wrong length instead.
    let mut bad_state = bytes.clone();
    let state_len_at = bytes.len() - 8 - 4;
    bad_state[state_len_at] = 7;
    bad_state.pop();
    assert_eq!(
        fresh.restore(&bad_state),
        Err(SnapshotError::BadState { index: 0 })
    );
    assert!(fresh.is_empty());
    assert_eq!(fresh.restore(&bytes), Ok(1));
    assert_eq!(fresh.restore(&bytes), Ok(0)); // already held: kept
    assert_eq!(fresh.peek_n(&7, 0).unwrap().remaining(), 6);
}

#[test]
fn the_key_cap_is_respected() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(10).unwrap();
    let old = keyed::<FixedWindow>(quota, &clock);
    for key in 0..5 {
        assert!(old.check(&key).is_allowed());
    }
    let capped: Keyed<FixedWindow> = KeyedRateLimiter::builder(quota)
        .clock(clock.clone())
        .max_keys(3)
        .build()
        .unwrap();
    assert_eq!(
        capped.restore(&old.snapshot()),
        Err(SnapshotError::MapFull { restored: 3 })
    );
    assert_eq!(capped.len(), 3);
}
