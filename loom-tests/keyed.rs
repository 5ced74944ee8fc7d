//! The keyed limiter's map: first-insert races, the key cap, and sweeps
//! racing checks.

use crate::{OverflowPolicy, model, sane};
use loom::sync::Arc;
use loom::thread;
use rategate::{Clock, KeyedRateLimiter, ManualClock, Quota, TokenBucket};
use std::time::Duration;

type Keyed = KeyedRateLimiter<u8, TokenBucket, ManualClock>;

fn keyed(
    limit: u32,
    max_keys: Option<usize>,
    overflow: OverflowPolicy,
) -> (Arc<Keyed>, ManualClock) {
    let clock = ManualClock::new();
    let builder = KeyedRateLimiter::<u8, TokenBucket>::builder(Quota::per_second(limit).unwrap())
        .clock(clock.clone())
        .overflow(overflow);
    let builder = match max_keys {
        Some(n) => builder.max_keys(n),
        None => builder,
    };
    (Arc::new(builder.build().unwrap()), clock)
}

/// Two threads check the same new key: one state is inserted, and the
/// capacity of 1 is granted once.
#[test]
fn first_insert_race_grants_once() {
    model(|| {
        let (limiter, _) = keyed(1, None, OverflowPolicy::Deny);
        let l2 = limiter.clone();
        let t = thread::spawn(move || l2.check(&7).is_allowed());
        let mine = limiter.check(&7).is_allowed();
        let theirs = t.join().unwrap();
        assert_eq!(u32::from(mine) + u32::from(theirs), 1);
        assert_eq!(limiter.len(), 1);
    });
}

/// Two new keys race for the last slot of a one-key cap: exactly one is
/// tracked, the other is denied by the overflow policy; the count of keys
/// never exceeds the cap.
#[test]
fn key_cap_holds_under_racing_inserts() {
    model(|| {
        let (limiter, _) = keyed(1, Some(1), OverflowPolicy::Deny);
        let l2 = limiter.clone();
        let t = thread::spawn(move || l2.check(&1).is_allowed());
        let mine = limiter.check(&2).is_allowed();
        let theirs = t.join().unwrap();
        assert_eq!(u32::from(mine) + u32::from(theirs), 1);
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.overflow_count(), 1);
    });
}

/// Two first checks of the same new key race for the last free slot of a
/// one-key cap: whatever the interleaving, both find the key tracked (one
/// inserts it, the other sees it inserted), neither goes to the overflow
/// policy, and the map holds one key.
#[test]
fn racing_first_checks_of_one_key_at_the_last_slot_are_both_tracked() {
    model(|| {
        let (limiter, _) = keyed(2, Some(1), OverflowPolicy::Deny);
        let l2 = limiter.clone();
        let t = thread::spawn(move || l2.check(&5).is_allowed());
        let mine = limiter.check(&5).is_allowed();
        let theirs = t.join().unwrap();
        assert!(
            mine && theirs,
            "a tracked key was sent to the overflow policy"
        );
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.overflow_count(), 0);
        assert!(!limiter.check(&5).is_allowed());
    });
}

/// A sweep races a check of an idle key (present, bucket full). If the
/// sweep judged the key idle and dropped it after the check consumed the
/// only token, a later check would be granted a second token: the final
/// check must be denied whatever the interleaving.
#[test]
fn sweep_never_drops_a_state_in_use() {
    model(|| {
        let (limiter, clock) = keyed(1, None, OverflowPolicy::Deny);
        assert!(limiter.check(&3).is_allowed());
        // One second later the bucket is full again: the key is idle.
        clock.advance(Duration::from_secs(1));
        let l2 = limiter.clone();
        let sweeper = thread::spawn(move || l2.sweep());
        let d = limiter.check(&3);
        sane(&d);
        assert!(d.is_allowed());
        let swept = sweeper.join().unwrap();
        assert!(swept <= 1);
        assert!(
            !limiter.check(&3).is_allowed(),
            "the sweep lost a consumed token"
        );
        assert!(limiter.len() <= 1);
        let _ = clock.now();
    });
}
