//! The Redis limiter's own machinery against a real `redis-server` that the
//! test starts on a free loopback port: store-down policies through a kill
//! and restart, timeouts, automatic reconnection, NOSCRIPT reloads, the
//! local over-limit cache, key TTLs and the blocking API.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

#[path = "support/delay_proxy.rs"]
mod delay_proxy;

use rategate::policy::StoreDown;
use rategate::redis::{BlockingRedisLimiter, RedisLimiter, RedisStats, Source, TimeSource};
use rategate::{ManualClock, Quota, TokenBucket};
use redis_server::RedisServer;
use redis_server::runtime;
use std::future::Future;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_millis(100);

async fn limiter(
    server: &RedisServer,
    quota: Quota,
    policy: StoreDown,
) -> RedisLimiter<TokenBucket> {
    RedisLimiter::<TokenBucket>::builder(quota)
        .url(&server.url())
        .prefix("faults")
        .timeout(TIMEOUT)
        .store_down(policy)
        .local_cache(false)
        .build()
        .await
        .unwrap()
}

/// Kills Redis in the middle of a run and restarts it: while it is down
/// every call returns within the timeout (plus scheduling slack) and the
/// policy decides; once it is back the same limiter uses Redis again.
fn survive_outage(policy: StoreDown, expect: Source) -> RedisStats {
    let rt = runtime();
    rt.block_on(async {
        let mut server = RedisServer::start();
        let quota = Quota::per_minute(60).unwrap().burst(4).unwrap();
        let limiter = limiter(&server, quota, policy).await;
        for _ in 0..3 {
            let d = limiter.check("k").await.unwrap();
            assert_eq!(d.source(), Source::Redis);
            assert!(d.is_allowed());
        }

        server.kill();
        let mut admitted = 0;
        for _ in 0..20 {
            let start = Instant::now();
            let d = limiter.check("k").await.unwrap();
            let took = start.elapsed();
            assert!(
                took < TIMEOUT + Duration::from_millis(400),
                "a call took {took:?}"
            );
            assert_eq!(d.source(), expect, "{d:?}");
            admitted += u32::from(d.is_allowed());
        }
        match policy {
            StoreDown::FailOpen => assert_eq!(admitted, 20),
            StoreDown::FailClosed => assert_eq!(admitted, 0),
            // Half the quota: a burst of 2 at 30 a minute (one every 2 s).
            StoreDown::LocalShare(_) => assert!((2..=3).contains(&admitted), "{admitted}"),
        }

        server.restart();
        // Reconnection is automatic; the restarted server has no scripts,
        // so the first call also exercises the NOSCRIPT reload.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let d = limiter.check("k").await.unwrap();
            if d.source() == Source::Redis {
                assert!(d.is_allowed(), "a fresh server has a full bucket");
                break;
            }
            assert!(Instant::now() < deadline, "never reconnected");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        limiter.stats()
    })
}

#[test]
fn outage_fail_open() {
    let stats = survive_outage(StoreDown::FailOpen, Source::FailOpen);
    assert!(
        stats.fail_open >= 20 && stats.errors >= 20 && stats.redis >= 4,
        "{stats:?}"
    );
}

#[test]
fn outage_fail_closed() {
    let stats = survive_outage(StoreDown::FailClosed, Source::FailClosed);
    assert!(stats.fail_closed >= 20 && stats.errors >= 20, "{stats:?}");
}

#[test]
fn outage_local_share() {
    let stats = survive_outage(StoreDown::LocalShare(0.5), Source::LocalShare);
    assert!(stats.local_share >= 20 && stats.errors >= 20, "{stats:?}");
}

#[test]
fn slow_redis_times_out_into_the_policy() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
        let limiter = limiter(
            &server,
            Quota::per_second(10).unwrap(),
            StoreDown::FailClosed,
        )
        .await;
        assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
        // Block the server for a second: it accepts but does not answer.
        let port = server.port;
        let pause = std::thread::spawn(move || {
            std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "1"])
                .output()
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let start = Instant::now();
        let d = limiter.check("k").await.unwrap();
        assert!(start.elapsed() < TIMEOUT + Duration::from_millis(400));
        assert_eq!(d.source(), Source::FailClosed);
        assert!(limiter.stats().timeouts >= 1);
        pause.join().unwrap();
    });
}

#[test]
fn scripts_reload_after_flush_and_keys_expire() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let quota = Quota::per_second(2).unwrap();
        let limiter = limiter(&server, quota, StoreDown::FailClosed).await;
        assert_eq!(limiter.check("ttl").await.unwrap().source(), Source::Redis);
        server.cli(&["SCRIPT", "FLUSH"]).unwrap();
        let d = limiter.check("ttl").await.unwrap();
        assert_eq!(d.source(), Source::Redis, "NOSCRIPT was not handled");
        let keys = server.cli(&["KEYS", "faults:*"]).unwrap();
        let key = keys.lines().next().expect("the script stored a key");
        assert!(key.contains("{ttl}"), "keys are hash-tagged: {key}");
        let pttl: i64 = server.cli(&["PTTL", key]).unwrap().trim().parse().unwrap();
        assert!(pttl > 0 && pttl <= 1_001, "TTL {pttl} ms");
    });
}

#[test]
fn local_cache_answers_denied_keys_until_retry_after() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        clock.set(1_000_000_000);
        let limiter =
            RedisLimiter::<TokenBucket, ManualClock>::builder(Quota::per_minute(2).unwrap())
                .url(&server.url())
                .prefix("cache")
                .time(TimeSource::Client(clock.clone()))
                .build()
                .await
                .unwrap();
        assert!(limiter.check("k").await.unwrap().is_allowed());
        assert!(limiter.check("k").await.unwrap().is_allowed());
        let denied = limiter.check("k").await.unwrap();
        assert_eq!(denied.source(), Source::Redis);
        assert!(!denied.is_allowed());
        assert_eq!(denied.decision().retry_after(), Duration::from_secs(30));
        let cached = limiter.check("k").await.unwrap();
        assert_eq!(cached.source(), Source::LocalCache);
        assert!(!cached.is_allowed());
        assert_eq!(cached.decision().retry_after(), Duration::from_secs(30));
        // Another key is unaffected.
        assert_eq!(
            limiter.check("other").await.unwrap().source(),
            Source::Redis
        );
        clock.advance(Duration::from_secs(30));
        let again = limiter.check("k").await.unwrap();
        assert_eq!(again.source(), Source::Redis);
        assert!(again.is_allowed());
        assert_eq!(limiter.stats().local_cache, 1);
        assert_eq!(limiter.stats().redis, 5);
    });
}

#[test]
fn blocking_api_from_a_thread_and_from_inside_a_runtime() {
    let server = RedisServer::start();
    let builder = RedisLimiter::<TokenBucket>::builder(Quota::per_minute(3).unwrap())
        .url(&server.url())
        .prefix("blocking");
    let limiter = BlockingRedisLimiter::new(builder).unwrap();
    let remaining: Vec<u32> = (0..3)
        .map(|_| limiter.check("b").unwrap().decision().remaining())
        .collect();
    assert_eq!(remaining, [2, 1, 0]);
    assert!(!limiter.check("b").unwrap().is_allowed());
    // From inside another runtime: no nested block_on, no panic.
    let rt = runtime();
    let d = rt.block_on(async { limiter.check("c").unwrap() });
    assert!(d.is_allowed());
    assert!(
        limiter.check_n("c", 4).is_err(),
        "cost above capacity is a typed error"
    );
}

#[test]
fn unreachable_at_build_is_a_typed_error() {
    let rt = runtime();
    let port = redis_server::free_port();
    let result = rt.block_on(
        RedisLimiter::<TokenBucket>::builder(Quota::per_second(1).unwrap())
            .url(&format!("redis://127.0.0.1:{port}/"))
            .timeout(TIMEOUT)
            .build(),
    );
    let error = result.unwrap_err();
    assert!(!error.to_string().is_empty());
    let no_server =
        rt.block_on(RedisLimiter::<TokenBucket>::builder(Quota::per_second(1).unwrap()).build());
    assert!(matches!(
        no_server,
        Err(rategate::redis::RedisError::Config(_))
    ));
    let bad_share = rt.block_on(
        RedisLimiter::<TokenBucket>::builder(Quota::per_second(1).unwrap())
            .url("redis://127.0.0.1:1/")
            .store_down(StoreDown::LocalShare(1.5))
            .build(),
    );
    assert!(matches!(
        bad_share,
        Err(rategate::redis::RedisError::Config(_))
    ));
}

/// Two denials with different costs: the cache must not combine the later
/// deadline (cost 5, 5 s) with the smaller cost (3, 3 s) and deny cost 3
/// after 3 s, which Redis admits.
#[test]
fn local_cache_never_denies_what_redis_admits() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        clock.set(1_000_000_000);
        let quota = Quota::with_period(10, Duration::from_secs(10)).unwrap();
        let limiter = RedisLimiter::<TokenBucket, ManualClock>::builder(quota)
            .url(&server.url())
            .prefix("cache-costs")
            .time(TimeSource::Client(clock.clone()))
            .build()
            .await
            .unwrap();
        assert!(limiter.check_n("k", 10).await.unwrap().is_allowed());
        let five = limiter.check_n("k", 5).await.unwrap();
        assert!(!five.is_allowed());
        assert_eq!(five.decision().retry_after(), Duration::from_secs(5));
        let three = limiter.check_n("k", 3).await.unwrap();
        assert_eq!(three.source(), Source::Redis);
        assert!(!three.is_allowed());
        assert_eq!(three.decision().retry_after(), Duration::from_secs(3));
        // Within 3 s the cache may answer both costs; cost 5 still waits.
        clock.advance(Duration::from_secs(1));
        let cached = limiter.check_n("k", 3).await.unwrap();
        assert_eq!(cached.source(), Source::LocalCache);
        assert_eq!(cached.decision().retry_after(), Duration::from_secs(2));
        clock.advance(Duration::from_secs(2));
        let again = limiter.check_n("k", 3).await.unwrap();
        assert!(
            again.is_allowed(),
            "Redis admits cost 3 after 3 s: {again:?}"
        );
        assert_eq!(again.source(), Source::Redis);
    });
}

/// Built, used and dropped inside an async context (a current-thread
/// `block_on`, as in `async fn main`): dropping used to panic ("Cannot drop
/// a runtime in a context where blocking is not allowed"), and an
/// unreachable server panicked in `new` instead of returning `Err`.
#[test]
fn blocking_limiter_lives_and_dies_inside_async_code() {
    let server = RedisServer::start();
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    current.block_on(async {
        let builder = RedisLimiter::<TokenBucket>::builder(Quota::per_minute(3).unwrap())
            .url(&server.url())
            .prefix("blocking-async");
        let limiter = BlockingRedisLimiter::new(builder).unwrap();
        assert!(limiter.check("a").unwrap().is_allowed());
        drop(limiter);
        let port = redis_server::free_port();
        let unreachable = RedisLimiter::<TokenBucket>::builder(Quota::per_minute(3).unwrap())
            .url(&format!("redis://127.0.0.1:{port}/"))
            .timeout(TIMEOUT);
        assert!(BlockingRedisLimiter::new(unreachable).is_err());
    });
    runtime().block_on(async {
        let builder = RedisLimiter::<TokenBucket>::builder(Quota::per_minute(3).unwrap())
            .url(&server.url())
            .prefix("blocking-async");
        let limiter = BlockingRedisLimiter::new(builder).unwrap();
        assert!(limiter.check("b").unwrap().is_allowed());
    });
}

/// A full over-limit cache (every entry still live) makes room for a new
/// denial by dropping the one that ends soonest: no scan of the whole
/// cache per denial (a client rotating keys made every denial pay for one)
/// and the new key is answered locally. The work per insertion is bounded
/// by construction (a heap pop and push); the unit tests in
/// `src/redis/cache.rs` check the bookkeeping, and the cost is visible in
/// `measure/redis_throughput.rs`, not timed here.
#[test]
fn full_local_cache_still_caches_new_denials() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        clock.set(1_000_000_000);
        let limiter =
            RedisLimiter::<TokenBucket, ManualClock>::builder(Quota::per_hour(1).unwrap())
                .url(&server.url())
                .prefix("cache-full")
                .time(TimeSource::Client(clock.clone()))
                .local_cache_capacity(50)
                .build()
                .await
                .unwrap();
        for i in 0..50 {
            let key = format!("k{i}");
            assert!(limiter.check(&key).await.unwrap().is_allowed());
            assert!(!limiter.check(&key).await.unwrap().is_allowed());
            // One minute later each, so k0 ends soonest.
            clock.advance(Duration::from_secs(60));
        }
        assert!(limiter.check("new").await.unwrap().is_allowed());
        assert_eq!(limiter.check("new").await.unwrap().source(), Source::Redis);
        let cached = limiter.check("new").await.unwrap();
        assert_eq!(
            cached.source(),
            Source::LocalCache,
            "the new denial was dropped"
        );
        // k0's denial made room; k1's is still there.
        assert_eq!(
            limiter.check("k1").await.unwrap().source(),
            Source::LocalCache
        );
        assert_eq!(limiter.check("k0").await.unwrap().source(), Source::Redis);
    });
}

/// 64 concurrent tasks making `each` decisions over keys `k0`..`k3`, all
/// of them Redis's: how many each key admitted.
async fn burst(limiter: &RedisLimiter<TokenBucket>, each: usize) -> [u32; 4] {
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut admitted = [0u32; 4];
                for i in 0..each {
                    let key = (t + i) % 4;
                    let d = limiter.check(&format!("k{key}")).await.unwrap();
                    assert_eq!(d.source(), Source::Redis);
                    admitted[key] += u32::from(d.is_allowed());
                }
                admitted
            })
        })
        .collect();
    let mut total = [0u32; 4];
    for task in tasks {
        for (sum, n) in total.iter_mut().zip(task.await.unwrap()) {
            *sum += n;
        }
    }
    total
}

/// Concurrent decisions on one server share script calls (batched, with
/// one server `TIME` reading per batch): 64 tasks over 4 keys at 25 an
/// hour still admit exactly 25 per key, and every decision is Redis's.
#[test]
fn concurrent_decisions_are_batched_and_stay_exact() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(25).unwrap())
            .url(&server.url())
            .prefix("batched")
            .timeout(Duration::from_secs(2))
            .local_cache(false)
            .build()
            .await
            .unwrap();
        assert_eq!(burst(&limiter, 20).await, [25; 4]);
        assert_eq!(limiter.stats().redis, 64 * 20);
        // Fewer script calls than decisions: they were shared.
        let stats = server.cli(&["INFO", "commandstats"]).unwrap();
        let calls: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(calls > 0 && calls < 64 * 20, "{calls} script calls");
    });
}

/// The scripts the server holds (`INFO memory`).
fn cached_scripts(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "memory"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("number_of_cached_scripts in INFO memory")
}

/// A lone caller calls the single-decision script itself, without the
/// batching task (which sends the looped batch script): after a `SCRIPT
/// FLUSH`, a run of one caller at a time reloads only the single script.
/// Then concurrent callers do go through the batching task, whose script
/// is reloaded after `NOSCRIPT`, and both paths keep the decisions exact.
#[test]
fn a_lone_caller_calls_directly_and_batches_reload_after_flush() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(25).unwrap())
            .url(&server.url())
            .prefix("lone")
            .timeout(Duration::from_secs(2))
            .local_cache(false)
            .build()
            .await
            .unwrap();
        assert_eq!(cached_scripts(&server), 2, "single and batch scripts");
        server.cli(&["SCRIPT", "FLUSH"]).unwrap();
        let mut admitted = 0;
        for _ in 0..30 {
            let d = limiter.check("alone").await.unwrap();
            assert_eq!(d.source(), Source::Redis);
            admitted += u32::from(d.is_allowed());
        }
        assert_eq!(admitted, 25);
        assert_eq!(cached_scripts(&server), 1, "a lone caller used a batch");

        assert_eq!(burst(&limiter, 10).await, [25; 4]);
        assert_eq!(cached_scripts(&server), 2, "no batch was sent");
        assert_eq!(limiter.stats().redis, 30 + 64 * 10);
        assert_eq!(limiter.stats().errors, 0);
    });
}

/// Queued callers set no timer of their own: the batching task answers
/// each by its deadline, counted from the moment the caller asked, not
/// from when its batch was sent. With Redis hung, a lone caller A holds
/// the wire for the whole timeout; B asks 200 ms later and queues behind
/// it, so its batch is sent only when A gives up. B is still answered (by
/// the store-down policy) within the timeout of its asking, where a batch
/// bounded from its sending would keep it for 300 ms more.
#[test]
fn a_queued_caller_is_answered_within_the_timeout_of_its_asking() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
        let timeout = Duration::from_millis(500);
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_second(1000).unwrap())
            .url(&server.url())
            .prefix("hung")
            .timeout(timeout)
            .store_down(StoreDown::FailClosed)
            .local_cache(false)
            .build()
            .await
            .unwrap();
        assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
        let port = server.port;
        let pause = std::thread::spawn(move || {
            std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "3"])
                .output()
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ask = |key: &'static str| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let d = limiter.check(key).await.unwrap();
                (d.source(), start.elapsed())
            })
        };
        let a = ask("a");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let b = ask("b");
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert_eq!(a.0, Source::FailClosed);
        assert_eq!(b.0, Source::FailClosed);
        assert!(a.1 >= timeout, "A gave up after {:?}", a.1);
        assert!(
            b.1 < timeout + Duration::from_millis(200),
            "B waited {:?}",
            b.1
        );
        assert_eq!(limiter.stats().timeouts, 2);
        pause.join().unwrap();
    });
}

/// Where each of `tasks` concurrent decisions on distinct keys came from.
async fn concurrent_sources(limiter: &RedisLimiter<TokenBucket>, tasks: usize) -> Vec<Source> {
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let d = limiter.check(&format!("c{t}")).await.unwrap();
                let took = start.elapsed();
                assert!(took < TIMEOUT + Duration::from_millis(400), "took {took:?}");
                d.source()
            })
        })
        .collect();
    let mut sources = Vec::new();
    for h in handles {
        sources.push(h.await.unwrap());
    }
    sources
}

/// The batching task's own connection: dropped when Redis goes away
/// (queued callers get the store-down policy within the timeout), opened
/// again once it is back, and the batch script reloaded on the restarted
/// server (which has none).
#[test]
fn batches_reconnect_and_reload_after_a_restart() {
    let rt = runtime();
    rt.block_on(async {
        let mut server = RedisServer::start();
        let limiter = limiter(
            &server,
            Quota::per_second(1000).unwrap(),
            StoreDown::FailClosed,
        )
        .await;
        let up = concurrent_sources(&limiter, 32).await;
        assert!(up.iter().all(|s| *s == Source::Redis), "{up:?}");
        server.kill();
        for _ in 0..3 {
            let down = concurrent_sources(&limiter, 32).await;
            assert!(down.iter().all(|s| *s == Source::FailClosed), "{down:?}");
        }
        server.restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let back = concurrent_sources(&limiter, 32).await;
            if back.iter().all(|s| *s == Source::Redis) {
                break;
            }
            assert!(Instant::now() < deadline, "never reconnected: {back:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stats = limiter.stats();
        assert!(
            stats.errors >= 3 * 32 && stats.fail_closed >= 3 * 32,
            "{stats:?}"
        );
    });
}

/// The batching task's own connection logs in as the URL's user and
/// selects its database, as the shared connection does: a burst's
/// decisions all land in database 3 and stay exact.
#[test]
fn batches_use_the_urls_user_password_and_database() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        server
            .cli(&[
                "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "&*", "+@all",
            ])
            .unwrap();
        server
            .cli(&["CONFIG", "SET", "requirepass", "admin-pw"])
            .unwrap();
        let url = format!("redis://app:app-pw@127.0.0.1:{}/3", server.port);
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(25).unwrap())
            .url(&url)
            .prefix("authed")
            .timeout(Duration::from_secs(2))
            .local_cache(false)
            .build()
            .await
            .unwrap();
        assert_eq!(burst(&limiter, 10).await, [25; 4]);
        let keys = |db: &str| {
            let out = std::process::Command::new("redis-cli")
                .args(["-p", &server.port.to_string()])
                .args(["--user", "app", "--pass", "app-pw", "--no-auth-warning"])
                .args(["-n", db, "KEYS", "authed:*"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines().filter(|l| l.starts_with("authed:")).count()
        };
        assert_eq!(keys("3"), 4);
        assert_eq!(keys("0"), 0);
    });
}

/// A lone caller's call borrows the batching connection; when its future
/// is dropped mid-call (polled once, so its command is written and its
/// reply not yet read), the reply still owed on that socket must never
/// answer a later decision: every decision on another key counts down
/// exactly.
#[test]
fn a_cancelled_lone_call_never_answers_a_later_one() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(25).unwrap())
            .url(&server.url())
            .prefix("cancel")
            .timeout(Duration::from_secs(2))
            .local_cache(false)
            .build()
            .await
            .unwrap();
        let mut cancelled = 0;
        for i in 0..40u32 {
            let noise = format!("noise{i}");
            // Redis holds every command for 50 ms, so the noise call's reply
            // cannot have arrived by the end of its first poll: on a loaded
            // machine the poll's write and its read can be further apart
            // than a round trip to an idle Redis (CI once saw 1 of 40
            // calls still pending).
            server
                .cli(&["CLIENT", "PAUSE", "50", "ALL"])
                .expect("CLIENT PAUSE");
            {
                let mut call = std::pin::pin!(limiter.check(&noise));
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                if call.as_mut().poll(&mut cx).is_pending() {
                    cancelled += 1;
                }
            }
            let d = limiter.check("exact").await.unwrap();
            assert_eq!(d.source(), Source::Redis);
            if i < 25 {
                assert!(d.is_allowed(), "decision {i}: {d:?}");
                assert_eq!(d.decision().remaining(), 24 - i, "decision {i}");
            } else {
                assert!(!d.is_allowed(), "decision {i}: {d:?}");
            }
        }
        assert_eq!(cancelled, 40, "calls cancelled mid-way");
    });
}

/// A lone caller's future that is polled once and then neither polled nor
/// dropped keeps the connection; callers queued meanwhile still get an
/// answer (the store-down policy's) within the timeout of their asking.
/// Replies pass through a proxy that holds them, so the first poll cannot
/// already see the stalled call's answer.
#[test]
fn a_stalled_lone_call_does_not_hold_up_the_queue_past_its_deadline() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let proxy = delay_proxy::DelayProxy::start(server.port);
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_second(1000).unwrap())
            .url(&proxy.url())
            .prefix("faults")
            .timeout(TIMEOUT)
            .store_down(StoreDown::FailClosed)
            .local_cache(false)
            .build()
            .await
            .unwrap();
        assert_eq!(limiter.check("warm").await.unwrap().source(), Source::Redis);
        proxy.set_delay(Duration::from_secs(2));
        let mut stalled = std::pin::pin!(limiter.check("stalled"));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(stalled.as_mut().poll(&mut cx).is_pending());
        let start = Instant::now();
        let d = tokio::time::timeout(Duration::from_secs(5), limiter.check("queued"))
            .await
            .expect("a queued caller waited past its timeout")
            .unwrap();
        assert_eq!(d.source(), Source::FailClosed);
        assert!(start.elapsed() < TIMEOUT + Duration::from_millis(400));
    });
}

/// Two batches on the wire at once, on one connection (a proxy holds each
/// reply 20 ms, so a batch written within 20 ms of the previous one was
/// written while that one's reply was owed): every reply still goes to its
/// own batch, each caller's decision counting down its own key exactly (8
/// keys, costs 1 to 3, so a reply handed to the wrong batch shows). Then
/// the connection is cut while two batches are outstanding: every caller
/// of both gets a connection error at once (not a timeout, nothing left
/// waiting), and the limiter decides on a new connection afterwards.
/// A depth of batches in flight outside 1..=64 is a typed error at build,
/// never a panic (a huge value used to overflow the driver's bounds).
#[test]
fn batches_in_flight_out_of_range_is_a_config_error() {
    use rategate::redis::RedisError;
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        for depth in [0, 65, usize::MAX] {
            let built = RedisLimiter::<TokenBucket>::builder(Quota::per_second(10).unwrap())
                .url(&server.url())
                .batches_in_flight(depth)
                .build()
                .await;
            assert!(
                matches!(built, Err(RedisError::Config(_))),
                "depth {depth}: {:?}",
                built.err()
            );
        }
        for depth in [1, 64] {
            let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_second(10).unwrap())
                .url(&server.url())
                .batches_in_flight(depth)
                .build()
                .await
                .unwrap();
            assert!(limiter.check("k").await.unwrap().is_allowed());
        }
    });
}

#[test]
fn two_batches_in_flight_match_their_replies_and_fail_together() {
    use rategate::redis::{RedisAlgorithm, RedisError};
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let proxy = delay_proxy::DelayProxy::start(server.port);
        let timeout = Duration::from_secs(5);
        let limiter = RedisLimiter::<TokenBucket>::builder(
            Quota::with_period(1000, Duration::from_secs(86_400)).unwrap(),
        )
        .url(&proxy.url())
        .prefix("inflight")
        .timeout(timeout)
        .local_cache(false)
        .batches_in_flight(2)
        .build()
        .await
        .unwrap();
        let single = redis::Script::new(<TokenBucket as RedisAlgorithm>::SCRIPT)
            .get_hash()
            .to_owned();
        let batches = |since: Instant| -> Vec<delay_proxy::Evalsha> {
            proxy
                .evalshas()
                .into_iter()
                .filter(|e| e.sha != single && e.at >= since)
                .collect()
        };

        let delay = Duration::from_millis(20);
        proxy.set_delay(delay);
        let start = Instant::now();
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let cost = 1 + t % 3;
                    for round in 0..12u32 {
                        let d = limiter.check_redis(&format!("k{t}"), cost).await.unwrap();
                        assert!(d.is_allowed(), "task {t} round {round}: {d:?}");
                        assert_eq!(
                            d.remaining(),
                            1000 - cost * (round + 1),
                            "task {t} round {round}: another batch's reply"
                        );
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        let sent = batches(start);
        let overlapped = sent
            .windows(2)
            .filter(|w| w[0].connection == w[1].connection && w[1].at - w[0].at < delay / 2)
            .count();
        assert!(
            overlapped >= 5,
            "{overlapped} of {} batches written while another was on the wire",
            sent.len()
        );

        // Replies held 1 s; the connection cut once two batches are on it.
        proxy.set_delay(Duration::from_secs(1));
        let start = Instant::now();
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let result = limiter.check_redis(&format!("cut{t}"), 1).await;
                    (result, Instant::now())
                })
            })
            .collect();
        // (The first caller may call alone, holding the connection for
        // the delay; the others then go out as two batches.)
        while batches(start).len() < 2 {
            assert!(start.elapsed() < Duration::from_secs(3), "no two batches");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let on_wire = batches(start);
        assert!(
            on_wire[0].at.elapsed() < Duration::from_millis(900),
            "a reply came"
        );
        // Replies of the batches on the wire are already held (Redis
        // answers within a millisecond); callers still queued go out on a
        // new connection after the cut, answered without delay.
        proxy.set_delay(Duration::ZERO);
        let cut = Instant::now();
        proxy.cut();
        let mut failed = 0;
        for h in handles {
            let (result, at) = h.await.unwrap();
            let took = at.saturating_duration_since(cut);
            assert!(
                took < Duration::from_millis(500),
                "answered {took:?} after the cut"
            );
            match result {
                Ok(d) => assert_eq!(d.remaining(), 999),
                Err(RedisError::Redis(_)) => failed += 1,
                Err(other) => panic!("not a connection error: {other:?}"),
            }
        }
        let per_decision = <TokenBucket as RedisAlgorithm>::KEY_SUFFIXES.len();
        let sent: usize = on_wire.iter().map(|e| e.keys / per_decision).sum();
        assert!(
            failed >= sent,
            "{failed} callers failed, {sent} were on the wire in {} batches",
            on_wire.len()
        );

        let d = limiter.check_redis("after", 1).await.unwrap();
        assert_eq!(d.remaining(), 999);
    });
}

/// With batching off, concurrent callers each call the single-decision
/// script: after a `SCRIPT FLUSH`, only it is loaded again, and the
/// decisions stay exact.
#[test]
fn batching_can_be_turned_off() {
    let rt = runtime();
    rt.block_on(async {
        let server = RedisServer::start();
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(25).unwrap())
            .url(&server.url())
            .prefix("unbatched")
            .timeout(Duration::from_secs(2))
            .local_cache(false)
            .batching(false)
            .build()
            .await
            .unwrap();
        server.cli(&["SCRIPT", "FLUSH"]).unwrap();
        assert_eq!(burst(&limiter, 10).await, [25; 4]);
        assert_eq!(cached_scripts(&server), 1, "a batch was sent");
        assert_eq!(limiter.stats().errors, 0);
    });
}

/// Behind a proxy that accepts connections and closes them at once (its
/// backend down, `maxclients` reached), the batching connection backs off
/// instead of opening a socket per batch: 32 tasks deciding for 2 s open
/// a few dozen connections, not tens of thousands; the store-down policy
/// decides meanwhile.
#[test]
fn sockets_that_close_before_answering_are_not_reopened_at_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let open: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    let upstream_port = server.port;
    {
        let (accepted, closing, open) = (
            Arc::clone(&accepted),
            Arc::clone(&closing),
            Arc::clone(&open),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if closing.load(Ordering::Relaxed) {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    drop(client);
                    continue;
                }
                // Before the fault: forward to the real server.
                let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", upstream_port))
                else {
                    continue;
                };
                open.lock().unwrap().push(client.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
                    (upstream, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
    }
    runtime().block_on(async {
        let limiter = Arc::new(
            RedisLimiter::<TokenBucket>::builder(Quota::per_second(1_000).unwrap())
                .url(&format!("redis://127.0.0.1:{port}/"))
                .store_down(StoreDown::FailClosed)
                .build()
                .await
                .unwrap(),
        );
        assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
        // From now on the proxy closes what it accepts, and the sockets
        // open through it close too.
        closing.store(true, Ordering::Relaxed);
        for socket in open.lock().unwrap().drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        let start = Instant::now();
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move {
                    let mut decided = 0;
                    while start.elapsed() < Duration::from_secs(2) {
                        let d = limiter.check("k").await.unwrap();
                        assert_eq!(d.source(), Source::FailClosed);
                        decided += 1;
                        tokio::task::yield_now().await;
                    }
                    decided
                })
            })
            .collect();
        let mut decided = 0;
        for task in tasks {
            decided += task.await.unwrap();
        }
        let opened = accepted.load(Ordering::Relaxed);
        assert!(decided > 1_000, "only {decided} decisions");
        assert!(opened < 100, "{opened} connections opened in 2 s");
    });
}
