//! The sliding window counter's Lua script against the in-memory
//! `SlidingWindowCounter`, on a real `redis-server` and a 3-master Redis
//! Cluster started on free loopback ports. The script keeps two keys (even
//! and odd window indexes), hash-tagged into one slot, so it is also the
//! multi-key script on Redis Cluster.
//!
//! Every decision field identical on random traces in client time (steps of
//! 0, window, retry and reset edges, steps back, long gaps; costs from 0 to
//! the limit; several keys; clocks starting anywhere below 2^51 ns; products
//! `previous x (period - elapsed)` far past 2^53), exactly the limit
//! admitted by 64 concurrent tasks at one frozen time, TTLs equal to the
//! time until the state is idle (and the stale key deleted), a smoke test in
//! server time, and the script's errors.
//!
//! The quotas keep to where the in-memory window tag decodes exactly below
//! 2^52 ns (`limit < 512`, or a period of at least 2^30 ns): see the
//! `RedisAlgorithm` impl's docs.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

#[macro_use]
#[path = "support/redis_parity.rs"]
mod redis_parity;

use proptest::prelude::*;
use rategate::redis::{RedisAlgorithm, RedisError};
use rategate::{ManualClock, Quota, SlidingWindowCounter};
use redis_parity::{Target, assert_spread, client_limiter, hammer, parity_on, raw_call, runtime};
use redis_server::{RedisCluster, RedisServer};
use std::time::Duration;

persistent!(
    PersistentSlidingWindowCounter,
    SlidingWindowCounter,
    "sliding_window_counter.lua"
);

/// Limits 1 to 40 over periods from the limit to 2^45 x the limit, with
/// remainders; now and then limits up to 2^20 - 1 over periods of 2^30 ns
/// to 2^51 ns.
fn quotas() -> impl Strategy<Value = Quota> {
    let per = prop_oneof![1u64..1_000, 1u64..1_000_000_000, 1u64..(1 << 45)];
    let small = (1u32..=40, per, 0u64..7)
        .prop_map(|(limit, per, extra)| (limit, u64::from(limit) * per + extra));
    let large = (512u32..(1 << 20), (1u64 << 30)..(1 << 51));
    prop_oneof![4 => small, 1 => large].prop_map(|(limit, period)| {
        Quota::with_period(limit, Duration::from_nanos(period)).unwrap()
    })
}

#[test]
fn parity_single_server() {
    let server = RedisServer::start();
    parity_on::<SlidingWindowCounter, PersistentSlidingWindowCounter>(
        Target::Single(&server),
        quotas(),
        128,
        "swc",
    );
}

#[test]
fn parity_cluster() {
    let cluster = RedisCluster::start();
    parity_on::<SlidingWindowCounter, PersistentSlidingWindowCounter>(
        Target::Cluster(&cluster),
        quotas(),
        48,
        "swc",
    );
}

/// Products `previous x (period - elapsed)` and `room x period` far past
/// 2^53: exact multiples of the period, and the values where a rounded
/// double product would be off by one (found by search): 997 x (period -
/// e) is one more than a multiple of the period, and 149 x period / 999
/// rounds across a whole number.
#[test]
fn exact_products_past_2_53() {
    let server = RedisServer::start();
    // period = 2m, m = 2^50 - 1 odd.
    let m = (1u64 << 50) - 1;
    let period = 2 * m;
    let quota = Quota::with_period(1000, Duration::from_nanos(period)).unwrap();
    let w1 = period;
    let e = 865_034_431_937_261;
    let multiples = [
        (5, 998),
        // Window 1, half way: ceil(998 x m / 2m) = 499 exactly.
        (w1 + m, 0),
        (w1 + m - 1, 0),
        (w1 + m + 1, 0),
        (w1 + 1, 3),
        (w1 + m, 502),
        (w1 + m, 1),
        (w1 + period - 1, 1),
        (w1 + period - 1, 500),
        // Back within window 1.
        (w1 + 3, 1),
    ];
    let weight = [(5, 997), (w1 + e, 0), (w1 + e, 385), (w1 + e, 1)];
    // 999 weigh 999 at the start of window 1; cost 851 leaves room 149.
    let share = [(5, 999), (w1 + 1, 851), (w1 + 1, 850)];
    runtime().block_on(async {
        for (prefix, steps) in [
            ("mul", &multiples[..]),
            ("weight", &weight),
            ("share", &share),
        ] {
            redis_parity::replay::<SlidingWindowCounter, PersistentSlidingWindowCounter>(
                &server, quota, prefix, steps,
            )
            .await;
        }
    });
}

#[test]
fn atomic_under_concurrency_single_server() {
    let server = RedisServer::start();
    let quota = Quota::per_minute(50).unwrap();
    runtime().block_on(hammer::<SlidingWindowCounter>(
        &Target::Single(&server),
        quota,
        &["hot"],
    ));
}

#[test]
fn atomic_under_concurrency_cluster() {
    let cluster = RedisCluster::start();
    let quota = Quota::per_minute(20).unwrap();
    let keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
    runtime().block_on(hammer::<SlidingWindowCounter>(
        &Target::Cluster(&cluster),
        quota,
        &keys,
    ));
    assert_spread(&cluster);
}

#[test]
fn server_time_smoke() {
    let server = RedisServer::start();
    // After 5 in one window, the next fits once 5 x (1 - e) <= 4 in the
    // next: at most 1.2 hours on.
    let quota = Quota::per_hour(5).unwrap();
    runtime().block_on(redis_parity::server_time_smoke::<SlidingWindowCounter>(
        &server,
        quota,
        Duration::from_secs(4_320),
    ));
}

#[test]
fn ttls_last_until_the_state_is_idle() {
    let server = RedisServer::start();
    // The clock starts at 2^40 ns: window 18 (even) of a minute, 19.5 s in.
    let quota = Quota::per_minute(10).unwrap();
    let s = 1_000_000_000;
    let steps: &[(u64, u32, &[bool])] = &[
        // Window 18: even = (18, 3); no odd key.
        (0, 3, &[true, false]),
        // Window 19: odd = (19, 2); even, its previous window, kept as long.
        (60 * s, 2, &[true, true]),
        // Cost 0 and denials write nothing.
        (0, 0, &[]),
        (0, 10, &[]),
        // Window 21: a fresh state; the stale even key (18) is deleted.
        (120 * s, 1, &[false, true]),
        // Window 22: even = (22, 1), odd (21) is its previous.
        (60 * s, 1, &[true, true]),
        // Still window 22.
        (10 * s, 4, &[true, true]),
    ];
    runtime().block_on(redis_parity::ttls_cover_the_time_to_idle::<
        SlidingWindowCounter,
    >(&server, quota, steps));
}

/// The script refuses a cost above the limit and a window whose successor
/// would end at 2^53 ticks or later; the limiter refuses times from 2^53 on.
#[test]
fn script_errors() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let quota = Quota::with_period(3, Duration::from_secs(1)).unwrap();
        let err = raw_call::<SlidingWindowCounter>(&server, quota, "k", 0, 4)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cost exceeds capacity"), "{err}");
        let ok = raw_call::<SlidingWindowCounter>(&server, quota, "k", 0, 3)
            .await
            .unwrap();
        assert_eq!(ok, [1, 3, 0, 2_000_000_000, 0, 0]);

        // The script's own guard: the last window whose successor ends below
        // 2^53, then the next (raw calls: the limiter refuses client times
        // from 2^52 before calling).
        let exact = 1u64 << 53;
        let p = 1_000_000_000;
        let last_start = (exact / p - 2) * p;
        let call =
            |key, now, cost| raw_call::<SlidingWindowCounter>(&server, quota, key, now, cost);
        let d = call("a", last_start + p - 1, 3).await.unwrap();
        assert_eq!(d[0], 1);
        assert_eq!(d[3], p as i64 + 1, "reset after the next window");
        assert!(call("a", last_start + p, 1).await.is_err());

        let clock = ManualClock::new();
        let target = Target::Single(&server);
        let limiter = client_limiter::<SlidingWindowCounter>(&target, quota, "edge", &clock).await;
        clock.set((1 << 52) - 1);
        assert!(limiter.check_redis("b", 1).await.unwrap().is_allowed());
        clock.set(1 << 52);
        let err = limiter.check_redis("b", 1).await.unwrap_err();
        assert!(matches!(err, RedisError::TimeOutOfRange(_)), "{err:?}");
    });
    assert_eq!(SlidingWindowCounter::KEY_SUFFIXES, ["even", "odd"]);
}
