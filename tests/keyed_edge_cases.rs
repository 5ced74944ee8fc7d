//! The keyed limiter's edges: a key whose `Clone` panics, two first checks
//! of one key at the last free slot, sweeps racing a clock that steps back,
//! unreasonable shard counts, `len` against the key cap, and hostile keys.

use rategate::{
    Clock, KeyedRateLimiter, ManualClock, Overflow, Quota, SlidingWindowLog, TokenBucket,
};
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

/// A key whose `Clone` panics for the value 13.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bomb(u32);

impl Clone for Bomb {
    fn clone(&self) -> Self {
        assert_ne!(self.0, 13, "this key cannot be cloned");
        Bomb(self.0)
    }
}

#[test]
fn a_panicking_first_check_gives_its_slot_back() {
    let limiter = KeyedRateLimiter::<Bomb, TokenBucket>::builder(Quota::per_second(5).unwrap())
        .clock(ManualClock::new())
        .max_keys(1)
        .overflow(Overflow::Deny)
        .build()
        .unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| limiter.check(&Bomb(13))));
    assert!(panicked.is_err());
    assert_eq!(limiter.len(), 0);
    // The cap's one slot is free: a new key is tracked, not denied.
    assert!(limiter.check(&Bomb(1)).is_allowed());
    assert_eq!((limiter.len(), limiter.overflow_count()), (1, 0));
}

/// A key whose hash takes about 30 µs, which widens the window between two
/// threads' lookups and inserts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlowKey(u32);

impl Hash for SlowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_micros(30) {
            std::hint::spin_loop();
        }
        self.0.hash(state);
    }
}

#[test]
fn two_first_checks_of_one_key_at_the_last_slot_both_find_it() {
    for overflow in [Overflow::Deny, Overflow::Shared] {
        let mut tracked_denials = 0;
        for _round in 0..150 {
            // The shared bucket is already empty, so a check wrongly sent to
            // it is denied under either policy.
            let limiter =
                KeyedRateLimiter::<SlowKey, TokenBucket>::builder(Quota::per_hour(100).unwrap())
                    .clock(ManualClock::new())
                    .max_keys(1)
                    .overflow(overflow)
                    .build()
                    .unwrap();
            assert!(limiter.check(&SlowKey(0)).is_allowed());
            assert!(limiter.reset(&SlowKey(0)));
            if overflow == Overflow::Shared {
                // Fill the map, drain the shared bucket with other keys,
                // then free the slot.
                assert!(limiter.check(&SlowKey(1)).is_allowed());
                while limiter.check(&SlowKey(2)).is_allowed() {}
                assert!(limiter.reset(&SlowKey(1)));
            }
            let barrier = Barrier::new(2);
            let both: Vec<bool> = thread::scope(|s| {
                let handles: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            limiter.check(&SlowKey(7)).is_allowed()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            tracked_denials += both.iter().filter(|&&a| !a).count();
            assert_eq!(limiter.len(), 1);
        }
        assert_eq!(tracked_denials, 0, "{overflow:?}: a tracked key overflowed");
    }
}

#[test]
fn a_sweep_does_not_let_a_lagging_reading_forget_the_key() {
    // Quota 1/min: admitted at 10 s; the sweep at 70 s drops the full
    // bucket; a check read at 15 s counts as 70 s, so the next request
    // passes only a minute after it.
    let clock = ManualClock::new();
    let limiter = KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_minute(1).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let at = |secs| clock.set(Duration::from_secs(secs).as_nanos() as u64);
    at(10);
    assert!(limiter.check("k").is_allowed());
    at(70);
    assert_eq!(limiter.sweep(), 1);
    at(15);
    let lagging = limiter.check("k");
    assert!(lagging.is_allowed());
    at(75);
    let next = limiter.check("k");
    assert!(!next.is_allowed(), "two admissions 5 s apart");
    assert_eq!(next.retry_after(), Duration::from_secs(55));
    at(130);
    assert!(limiter.check("k").is_allowed());
}

#[test]
fn a_sweep_does_not_reopen_a_log_window() {
    // 100 per minute, 100 admitted at 59 s, a sweep at 119 s, 100 more read
    // at 60 s (recorded at 119 s): nothing more until 179 s.
    let clock = ManualClock::new();
    let limiter =
        KeyedRateLimiter::<String, SlidingWindowLog>::builder(Quota::per_minute(100).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    let at = |secs| clock.set(Duration::from_secs(secs).as_nanos() as u64);
    let admitted = |n| (0..n).filter(|_| limiter.check("k").is_allowed()).count();
    at(59);
    assert_eq!(admitted(100), 100);
    at(119);
    assert_eq!(limiter.sweep(), 1);
    at(60);
    assert_eq!(admitted(100), 100);
    at(121);
    assert_eq!(admitted(100), 0, "a window of the recorded times holds 200");
    at(179);
    assert_eq!(admitted(100), 100);
}

#[test]
fn any_shard_count_builds_a_working_limiter() {
    // Shards only spread contention: a count out of range is kept within 2
    // to 65,536, and decisions are the same whatever the count.
    for shards in [0, 1, 3, 1 << 16, (1 << 16) + 1, 1 << 40, usize::MAX] {
        let limiter = KeyedRateLimiter::<u64, TokenBucket>::builder(Quota::per_second(1).unwrap())
            .shards(shards)
            .build()
            .unwrap();
        assert!(limiter.check(&1).is_allowed(), "{shards}");
        assert!(!limiter.check(&1).is_allowed(), "{shards}");
    }
}

#[test]
fn len_counts_keys_and_never_exceeds_the_cap() {
    let clock = ManualClock::new();
    let limiter = KeyedRateLimiter::<u32, TokenBucket>::builder(Quota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(64)
        .build()
        .unwrap();
    thread::scope(|s| {
        for t in 0..4u32 {
            let limiter = &limiter;
            s.spawn(move || {
                for k in 0..200 {
                    limiter.check(&(t * 1_000 + k));
                    assert!(limiter.len() <= 64);
                }
            });
        }
    });
    assert_eq!(limiter.len(), 64);
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 64);
    assert!(limiter.is_empty());
    assert!(clock.now() > 0);
}

/// Hostile keys (empty, a megabyte long, brace- and NUL-laden, invalid
/// UTF-8 bytes as a key type of its own) are keys like any other: each is
/// limited on its own, to exactly its quota, in every algorithm, and
/// nothing panics.
fn hostile_keys_are_limited_like_any_other<A: rategate::algorithm::Algorithm>() {
    let clock = rategate::ManualClock::new();
    let quota = Quota::per_minute(3).unwrap();
    let capacity = A::from_quota(&quota).unwrap().capacity();
    let limiter = KeyedRateLimiter::<String, A, _>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let keys = [
        String::new(),
        "x".repeat(1 << 20),
        "{}{{}}{0}%s%n\u{0}\r\n".to_string(),
        "\u{202e}🦀".repeat(1_000),
    ];
    for round in 0..capacity + 2 {
        for key in &keys {
            let d = limiter.check(key);
            let len = key.len();
            assert_eq!(
                d.is_allowed(),
                round < capacity,
                "round {round}, key of {len} bytes"
            );
        }
        clock.advance(Duration::from_nanos(1));
    }
    assert_eq!(limiter.len(), keys.len());
    let bytes = KeyedRateLimiter::<Vec<u8>, A, _>::builder(quota)
        .clock(clock)
        .build()
        .unwrap();
    let invalid = vec![0xff, 0xfe, b'{', 0];
    for _ in 0..capacity {
        assert!(bytes.check(&invalid).is_allowed());
    }
    assert!(!bytes.check(&invalid).is_allowed());
}

#[test]
fn hostile_keys_in_every_algorithm() {
    hostile_keys_are_limited_like_any_other::<rategate::TokenBucket>();
    hostile_keys_are_limited_like_any_other::<rategate::FixedWindow>();
    hostile_keys_are_limited_like_any_other::<rategate::SlidingWindowCounter>();
    hostile_keys_are_limited_like_any_other::<rategate::SlidingWindowLog>();
    hostile_keys_are_limited_like_any_other::<rategate::LeakyBucket>();
}
