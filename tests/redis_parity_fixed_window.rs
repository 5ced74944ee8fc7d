//! The fixed window's Lua script against the in-memory `FixedWindow`, on a
//! real `redis-server` and a 3-master Redis Cluster started on free loopback
//! ports: every decision field identical on random traces in client time
//! (steps of 0, window, retry and reset edges, steps back, long gaps; costs
//! from 0 to the limit; several keys; clocks starting anywhere below
//! 2^51 ns), exactly the limit admitted by 64 concurrent tasks at one frozen
//! time, TTLs equal to the time until the window ends, a smoke test in
//! server time, and the script's errors.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

#[macro_use]
#[path = "support/redis_parity.rs"]
mod redis_parity;

use proptest::prelude::*;
use rategate::redis::{RedisAlgorithm, RedisError};
use rategate::{FixedWindow, ManualClock, Quota};
use redis_parity::{Target, assert_spread, client_limiter, hammer, parity_on, raw_call, runtime};
use redis_server::{RedisCluster, RedisServer};
use std::time::Duration;

persistent!(PersistentFixedWindow, FixedWindow, "fixed_window.lua");

/// Limits 1 to 40 (and now and then up to 100 000) over periods from the
/// limit to 2^45 x the limit, with remainders.
fn quotas() -> impl Strategy<Value = Quota> {
    let limit = prop_oneof![4 => 1u32..=40, 1 => 1u32..=100_000];
    let per = prop_oneof![1u64..1_000, 1u64..1_000_000_000, 1u64..(1 << 45)];
    (limit, per, 0u64..7).prop_map(|(limit, per, extra)| {
        let per = per.min((1 << 51) / u64::from(limit) - 1);
        let period = Duration::from_nanos(u64::from(limit) * per + extra);
        Quota::with_period(limit, period).unwrap()
    })
}

#[test]
fn parity_single_server() {
    let server = RedisServer::start();
    parity_on::<FixedWindow, PersistentFixedWindow>(Target::Single(&server), quotas(), 128, "fw");
}

#[test]
fn parity_cluster() {
    let cluster = RedisCluster::start();
    parity_on::<FixedWindow, PersistentFixedWindow>(Target::Cluster(&cluster), quotas(), 48, "fw");
}

#[test]
fn atomic_under_concurrency_single_server() {
    let server = RedisServer::start();
    let quota = Quota::per_minute(50).unwrap();
    runtime().block_on(hammer::<FixedWindow>(
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
    runtime().block_on(hammer::<FixedWindow>(
        &Target::Cluster(&cluster),
        quota,
        &keys,
    ));
    assert_spread(&cluster);
}

#[test]
fn server_time_smoke() {
    let server = RedisServer::start();
    let quota = Quota::per_hour(5).unwrap();
    runtime().block_on(redis_parity::server_time_smoke::<FixedWindow>(
        &server,
        quota,
        Duration::from_secs(3_600),
    ));
}

#[test]
fn ttls_last_until_the_state_is_idle() {
    let server = RedisServer::start();
    // The clock starts at 2^40 ns, 19.5 s into a minute.
    let quota = Quota::per_minute(10).unwrap();
    let s = 1_000_000_000;
    let steps: &[(u64, u32, &[bool])] = &[
        (0, 3, &[true]),
        // Cost 0 and denials write nothing.
        (s, 0, &[]),
        (s, 8, &[]),
        (10 * s, 2, &[true]),
        (60 * s, 1, &[true]),
        (0, 9, &[true]),
    ];
    runtime().block_on(redis_parity::ttls_cover_the_time_to_idle::<FixedWindow>(
        &server, quota, steps,
    ));
}

/// The script refuses a cost above the limit and a window that would end at
/// 2^53 ticks or later; the limiter refuses times from 2^52 on.
#[test]
fn script_errors() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let quota = Quota::with_period(3, Duration::from_secs(1)).unwrap();
        let err = raw_call::<FixedWindow>(&server, quota, "k", 0, 4)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cost exceeds capacity"), "{err}");
        let ok = raw_call::<FixedWindow>(&server, quota, "k", 0, 3)
            .await
            .unwrap();
        assert_eq!(ok, [1, 3, 0, 1_000_000_000, 0, 0]);

        // The script's own guard: the last window that ends below 2^53,
        // then the one after it (raw calls: the limiter refuses client times
        // from 2^52 before calling).
        let exact = 1u64 << 53;
        let last_end = exact / 1_000_000_000 * 1_000_000_000;
        let call = |key, now, cost| raw_call::<FixedWindow>(&server, quota, key, now, cost);
        let d = call("a", last_end - 1, 3).await.unwrap();
        assert_eq!(d[0], 1);
        assert_eq!(d[3], 1, "reset after 1 tick");
        assert!(call("a", last_end, 1).await.is_err());

        let clock = ManualClock::new();
        let target = Target::Single(&server);
        let limiter = client_limiter::<FixedWindow>(&target, quota, "edge", &clock).await;
        clock.set((1 << 52) - 1);
        assert!(limiter.check_redis("b", 1).await.unwrap().is_allowed());
        clock.set(1 << 52);
        let err = limiter.check_redis("b", 1).await.unwrap_err();
        assert!(matches!(err, RedisError::TimeOutOfRange(_)), "{err:?}");
    });
    assert_eq!(FixedWindow::KEY_SUFFIXES, ["fw"]);
}
