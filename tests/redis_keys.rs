//! Redis key names against a real 3-master Redis Cluster (and a single
//! server) that the tests start on free loopback ports: client-chosen keys
//! can neither break out of their hash tag nor pick their own slot layout,
//! and distinct keys never share state.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rategate::redis::{LeasedLimiter, RedisError, RedisLimiter, Source, SyncedLimiter};
use rategate::{
    FixedWindow, LeakyBucket, Quota, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use redis_server::runtime;
use redis_server::{RedisCluster, RedisServer};
use std::collections::HashSet;
use std::time::Duration;

/// The slot Redis itself computes for `key` (`CLUSTER KEYSLOT`).
fn slot(connection: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(connection)
        .unwrap()
}

/// The security defect: at 5 a minute on a Cluster, with the default
/// fail-open policy, the keys `""` and `"}evil"` gave the sliding window
/// counter's two window keys different slots, every call failed with
/// CROSSSLOT and fail-open admitted everything (20 of 20). Every key must
/// be limited by Redis.
#[test]
fn hostile_keys_cannot_switch_the_limit_off_on_a_cluster() {
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        let limiter = RedisLimiter::<SlidingWindowCounter>::builder(Quota::per_minute(5).unwrap())
            .cluster(&cluster.urls())
            .timeout(Duration::from_secs(2))
            .local_cache(false)
            .build()
            .await
            .unwrap();
        for key in ["", "}evil", "{", "{}", "ok", "}", "a}b{c"] {
            let mut admitted = 0;
            for _ in 0..20 {
                let d = limiter.check(key).await.unwrap();
                assert_eq!(d.source(), Source::Redis, "key {key:?}: {d:?}");
                admitted += u32::from(d.is_allowed());
            }
            assert_eq!(admitted, 5, "key {key:?}");
        }
        assert_eq!(limiter.stats().errors, 0);
    });
}

/// Keys that could collide if braces or the empty key were passed through
/// raw stay apart: each gets its own budget.
#[test]
fn lookalike_keys_do_not_share_state() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = RedisLimiter::<FixedWindow>::builder(Quota::per_minute(2).unwrap())
            .url(&server.url())
            .local_cache(false)
            .build()
            .await
            .unwrap();
        let keys = ["", "%", "%25", "}", "%7D", "{", "%7B", "a}:x", "a"];
        for key in keys {
            for n in 0..2 {
                let d = limiter.check(key).await.unwrap();
                assert!(d.is_allowed(), "key {key:?}, request {n}: {d:?}");
            }
        }
        let stored: HashSet<String> = keys.iter().flat_map(|k| limiter.redis_keys(k)).collect();
        assert_eq!(stored.len(), keys.len());
    });
}

#[test]
fn prefixes_with_braces_are_typed_errors() {
    runtime().block_on(async {
        for prefix in ["a{b", "}", "{x}"] {
            let r = RedisLimiter::<TokenBucket>::builder(Quota::per_second(1).unwrap())
                .url("redis://127.0.0.1:1/")
                .prefix(prefix)
                .build()
                .await;
            assert!(matches!(r, Err(RedisError::Config(_))), "{prefix:?}");
            let s = SyncedLimiter::<FixedWindow>::builder(Quota::per_second(1).unwrap())
                .url("redis://127.0.0.1:1/")
                .prefix(prefix)
                .build()
                .await;
            assert!(matches!(s, Err(RedisError::Config(_))), "{prefix:?}");
            let l = LeasedLimiter::builder(Quota::per_second(1).unwrap())
                .url("redis://127.0.0.1:1/")
                .prefix(prefix)
                .build()
                .await;
            assert!(matches!(l, Err(RedisError::Config(_))), "{prefix:?}");
        }
    });
}

/// Where a limiter keeps a user key's state: its Redis keys.
type Layout<'a> = Box<dyn Fn(&str) -> Vec<String> + 'a>;

/// Arbitrary keys: braces, colons, percent signs, NUL, any Unicode, the
/// empty key and very long keys.
fn user_keys() -> impl Strategy<Value = Vec<String>> {
    let one = prop_oneof![
        Just(String::new()),
        prop::collection::vec(
            prop::sample::select(vec!['{', '}', ':', '%', '\0', 'a', '7', 'D', 'é']),
            0..12
        )
        .prop_map(|cs| cs.into_iter().collect::<String>()),
        any::<String>(),
        (1usize..4, any::<char>()).prop_map(|(n, c)| c.to_string().repeat(n * 3000)),
    ];
    prop::collection::vec(one, 1..6)
}

/// The property: for every limiter kind (the five algorithms, the synced
/// limiter and the leased one), each user key's Redis keys share one slot
/// (asked of the cluster itself), distinct user keys get distinct Redis
/// keys, and a decision for each really runs on the Cluster (no CROSSSLOT,
/// no fail-open).
#[test]
fn any_key_gets_one_slot_and_its_own_redis_keys_on_a_cluster() {
    let cluster = RedisCluster::start();
    let rt = runtime();
    let client = redis::Client::open(cluster.urls()[0].as_str()).unwrap();
    let connection = std::cell::RefCell::new(client.get_connection().unwrap());
    let urls = cluster.urls();
    let quota = Quota::per_minute(1_000).unwrap();
    let (tb, fw, swc, log, lb, synced, leased) = rt.block_on(async {
        macro_rules! central {
            ($alg:ty) => {
                RedisLimiter::<$alg>::builder(quota)
                    .cluster(&urls)
                    .timeout(Duration::from_secs(2))
                    .local_cache(false)
                    .build()
                    .await
                    .unwrap()
            };
        }
        (
            central!(TokenBucket),
            central!(FixedWindow),
            central!(SlidingWindowCounter),
            central!(SlidingWindowLog),
            central!(LeakyBucket),
            SyncedLimiter::<SlidingWindowCounter>::builder(quota)
                .cluster(&urls)
                .background(false)
                .timeout(Duration::from_secs(2))
                .build()
                .await
                .unwrap(),
            LeasedLimiter::builder(quota)
                .cluster(&urls)
                .background(false)
                .timeout(Duration::from_secs(2))
                .build()
                .await
                .unwrap(),
        )
    });
    let mut runner = TestRunner::new(Config {
        cases: 40,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&user_keys(), |keys| {
            let distinct: HashSet<&String> = keys.iter().collect();
            let layouts: Vec<(&str, Layout)> = vec![
                ("token bucket", Box::new(|k| tb.redis_keys(k))),
                ("fixed window", Box::new(|k| fw.redis_keys(k))),
                ("sliding window counter", Box::new(|k| swc.redis_keys(k))),
                ("sliding window log", Box::new(|k| log.redis_keys(k))),
                ("leaky bucket", Box::new(|k| lb.redis_keys(k))),
                ("synced", Box::new(|k| synced.redis_keys(k))),
                ("leased", Box::new(|k| leased.redis_keys(k))),
            ];
            for (name, layout) in &layouts {
                let mut all = HashSet::new();
                let mut per_key = 0;
                for key in &distinct {
                    let redis_keys = layout(key);
                    per_key = redis_keys.len();
                    let first = slot(&mut connection.borrow_mut(), &redis_keys[0]);
                    for k in &redis_keys {
                        prop_assert_eq!(
                            slot(&mut connection.borrow_mut(), k),
                            first,
                            "{} {:?}",
                            name,
                            key
                        );
                    }
                    all.extend(redis_keys);
                }
                prop_assert_eq!(all.len(), distinct.len() * per_key, "{} collide", name);
            }
            rt.block_on(async {
                for key in &distinct {
                    for d in [
                        tb.check(key).await.unwrap(),
                        fw.check(key).await.unwrap(),
                        swc.check(key).await.unwrap(),
                        log.check(key).await.unwrap(),
                        lb.check(key).await.unwrap(),
                    ] {
                        prop_assert_eq!(d.source(), Source::Redis, "{:?}: {:?}", key, d);
                    }
                    synced.check(key);
                    let lease = leased.acquire(key).await.unwrap();
                    prop_assert!(lease.is_allowed(), "{:?}: {:?}", key, lease);
                }
                prop_assert!(synced.sync_now().await.is_ok());
                Ok(())
            })?;
            Ok(())
        })
        .unwrap();
    assert_eq!(synced.stats().errors, 0);
    assert_eq!(leased.stats().errors, 0);
}

/// Every builder defaulted to the prefix `rategate`, so a token bucket at
/// 10 an hour and one at 10 a second shared `rategate:{u}:tat`: after the
/// first admitted 10, the second admitted 0 of 10. The policy (algorithm,
/// quota, time unit) is part of every key now; limiters of one policy and
/// prefix still share, which is how nodes share a limit.
#[test]
fn limiters_of_different_policies_never_share_state() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let build = |quota: Quota| {
            RedisLimiter::<TokenBucket>::builder(quota)
                .url(&server.url())
                .local_cache(false)
                .build()
        };
        let hourly = build(Quota::per_hour(10).unwrap()).await.unwrap();
        let per_second = build(Quota::per_second(10).unwrap()).await.unwrap();
        let hourly_too = build(Quota::per_hour(10).unwrap()).await.unwrap();
        for _ in 0..10 {
            assert!(hourly.check("u").await.unwrap().is_allowed());
        }
        let mut admitted = 0;
        for _ in 0..10 {
            admitted += u32::from(per_second.check("u").await.unwrap().is_allowed());
        }
        assert_eq!(admitted, 10, "another quota, its own state");
        // The same policy and prefix: one shared state.
        assert!(!hourly_too.check("u").await.unwrap().is_allowed());

        // Synced limiters: fixed window and sliding window counter of one
        // quota, and two quotas of one algorithm, keep apart too.
        let clock = rategate::ManualClock::new();
        clock.set(3_600_000_000_000);
        let quota = Quota::per_minute(5).unwrap();
        let fw = SyncedLimiter::<FixedWindow>::builder(quota)
            .url(&server.url())
            .clock(clock.clone())
            .background(false)
            .build()
            .await
            .unwrap();
        let swc = SyncedLimiter::<SlidingWindowCounter>::builder(quota)
            .url(&server.url())
            .clock(clock.clone())
            .background(false)
            .build()
            .await
            .unwrap();
        for _ in 0..5 {
            assert!(fw.check("u").is_allowed());
        }
        fw.sync_now().await.unwrap();
        swc.check_n("u", 0).unwrap();
        swc.sync_now().await.unwrap();
        assert_eq!(swc.check_n("u", 0).unwrap().remaining(), 5);
        let leases = |limit| {
            LeasedLimiter::builder(Quota::per_minute(limit).unwrap())
                .url(&server.url())
                .clock(clock.clone())
                .background(false)
                .build()
        };
        let small = leases(1).await.unwrap();
        let large = leases(50).await.unwrap();
        for _ in 0..50 {
            assert!(large.acquire("u").await.unwrap().is_allowed());
        }
        assert!(
            small.acquire("u").await.unwrap().is_allowed(),
            "its own budget"
        );
    });
}
