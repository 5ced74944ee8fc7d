//! The token bucket's (GCRA's) Lua script against the in-memory
//! `TokenBucket`, on a real `redis-server` and a 3-master Redis Cluster
//! started on free loopback ports: every decision field identical on random
//! traces in client time (steps of 0, interval, window, retry and reset
//! edges, steps back, long gaps; costs from 0 to the burst; several keys;
//! clocks starting anywhere below 2^51 ns), exactly the burst admitted by 64
//! concurrent tasks at one frozen time, TTLs equal to the time until the
//! bucket is full, a smoke test in server time, and the script's errors.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

#[macro_use]
#[path = "support/redis_parity.rs"]
mod redis_parity;

use proptest::prelude::*;
use rategate::redis::{RedisAlgorithm, RedisError};
use rategate::{ManualClock, Quota, TokenBucket};
use redis_parity::{Target, assert_spread, client_limiter, hammer, parity_on, raw_call, runtime};
use redis_server::{RedisCluster, RedisServer};
use std::time::Duration;

persistent!(PersistentTokenBucket, TokenBucket, "token_bucket.lua");

/// Limits 1 to 40 over periods from the limit to 2^45 x the limit, with
/// remainders (intervals rounded up), and bursts 1 to 60 or the default.
/// `tau` stays below 60 x 2^45 + 60 < 2^51.
fn quotas() -> impl Strategy<Value = Quota> {
    let per = prop_oneof![1u64..1_000, 1u64..1_000_000_000, 1u64..(1 << 45)];
    (1u32..=40, per, 0u64..7, prop::option::of(1u32..=60)).prop_map(|(limit, per, extra, burst)| {
        let period = Duration::from_nanos(u64::from(limit) * per + extra);
        let quota = Quota::with_period(limit, period).unwrap();
        burst.map_or(quota, |b| quota.burst(b).unwrap())
    })
}

#[test]
fn parity_single_server() {
    let server = RedisServer::start();
    parity_on::<TokenBucket, PersistentTokenBucket>(Target::Single(&server), quotas(), 128, "tb");
}

#[test]
fn parity_cluster() {
    let cluster = RedisCluster::start();
    parity_on::<TokenBucket, PersistentTokenBucket>(Target::Cluster(&cluster), quotas(), 48, "tb");
}

#[test]
fn atomic_under_concurrency_single_server() {
    let server = RedisServer::start();
    let quota = Quota::per_hour(100).unwrap().burst(40).unwrap();
    runtime().block_on(hammer::<TokenBucket>(
        &Target::Single(&server),
        quota,
        &["hot"],
    ));
}

#[test]
fn atomic_under_concurrency_cluster() {
    let cluster = RedisCluster::start();
    let quota = Quota::per_hour(100).unwrap().burst(20).unwrap();
    let keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
    runtime().block_on(hammer::<TokenBucket>(
        &Target::Cluster(&cluster),
        quota,
        &keys,
    ));
    assert_spread(&cluster);
}

#[test]
fn server_time_smoke() {
    let server = RedisServer::start();
    // One token every 12 minutes.
    let quota = Quota::per_hour(5).unwrap();
    runtime().block_on(redis_parity::server_time_smoke::<TokenBucket>(
        &server,
        quota,
        Duration::from_secs(720),
    ));
}

#[test]
fn ttls_last_until_the_state_is_idle() {
    let server = RedisServer::start();
    // One token every 8.57 s (not whole milliseconds), 5 at once.
    let quota = Quota::per_minute(7).unwrap().burst(5).unwrap();
    let s = 1_000_000_000;
    let steps: &[(u64, u32, &[bool])] = &[
        (0, 1, &[true]),
        (0, 2, &[true]),
        // Cost 0 is a probe and writes nothing, as in memory.
        (s, 0, &[]),
        (3 * s, 1, &[true]),
        // Full again: a cost-0 probe, nothing written.
        (100 * s, 0, &[]),
        (0, 5, &[true]),
        (0, 1, &[]),
        (9 * s, 1, &[true]),
    ];
    runtime().block_on(redis_parity::ttls_cover_the_time_to_idle::<TokenBucket>(
        &server, quota, steps,
    ));
}

/// The script refuses a cost above the burst and a base time from
/// 2^53 - tau on; the limiter refuses times from 2^53 on.
#[test]
fn script_errors() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let quota = Quota::per_second(2).unwrap().burst(3).unwrap();
        let err = raw_call::<TokenBucket>(&server, quota, "k", 0, 4)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cost exceeds capacity"), "{err}");
        assert_eq!(
            raw_call::<TokenBucket>(&server, quota, "k", 0, 3)
                .await
                .unwrap()[0],
            1
        );

        // The script's own guard, just below 2^53 (raw calls: the limiter
        // refuses client times from 2^52 before calling).
        let tau = 1_500_000_000;
        let exact = 1u64 << 53;
        let call = |key, now, cost| raw_call::<TokenBucket>(&server, quota, key, now, cost);
        assert_eq!(call("a", exact - tau - 1, 3).await.unwrap()[0], 1);
        // The stored TAT, 2^53 - 1, is now past the line too.
        assert!(call("a", exact - tau - 1, 1).await.is_err());
        assert!(call("b", exact - tau, 1).await.is_err());

        let clock = ManualClock::new();
        let target = Target::Single(&server);
        let limiter = client_limiter::<TokenBucket>(&target, quota, "edge", &clock).await;
        clock.set((1 << 52) - 1);
        assert!(limiter.check_redis("c", 1).await.unwrap().is_allowed());
        clock.set(1 << 52);
        let err = limiter.check_redis("c", 1).await.unwrap_err();
        assert!(matches!(err, RedisError::TimeOutOfRange(_)), "{err:?}");
    });
    assert_eq!(TokenBucket::KEY_SUFFIXES, ["tat"]);
}
