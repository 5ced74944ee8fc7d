//! The sliding window log's Lua script against the in-memory
//! `SlidingWindowLog`, on a real `redis-server` and a 3-master Redis Cluster
//! started on free loopback ports: every decision field identical on random
//! traces in client time (time steps of 0, window edges, retry and reset
//! edges, steps back; costs including 0; several keys), exactly the limit
//! admitted by 64 concurrent tasks at one frozen time, and a smoke test in
//! server time.
#![cfg(feature = "redis")]

#[path = "support/redis_parity.rs"]
mod redis_parity;
#[path = "support/redis_server.rs"]
mod redis_server;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rategate::redis::{RedisAlgorithm, RedisError, RedisLimiter, Source};
use rategate::{Clock, Decision, ManualClock, Quota, RateLimiter, SlidingWindowLog};
use redis_parity::{Target, client_limiter, runtime};
use redis_server::{RedisCluster, RedisServer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Keys per trace.
const KEYS: usize = 3;
/// Where the traces' clock starts, so that steps back have room.
const START: u64 = 1 << 40;
/// A trace stops comparing once it has run this long: the script's TTLs are
/// at least one second of Redis's clock (a grace on top of the time until
/// idle), so until then no key can expire under the manual clock.
const REAL_TIME_BUDGET: Duration = Duration::from_millis(400);

/// How the clock moves before a step.
#[derive(Debug, Clone)]
enum Move {
    Stay,
    /// Forward by this many 64ths of the period.
    Forward(u64),
    /// Forward by the period, plus -1, 0 or 1 ns.
    Period(i8),
    /// Forward by the last decision's retry_after (true) or reset_after
    /// (false), plus -1, 0 or 1 ns.
    Edge(bool, i8),
    /// Back by this many 64ths of the period, plus 1 ns.
    Back(u64),
}

#[derive(Debug, Clone)]
struct Trace {
    limit: u32,
    period: u64,
    /// (move, key, cost); the cost is reduced modulo limit + 1.
    steps: Vec<(Move, usize, u32)>,
}

fn traces() -> impl Strategy<Value = Trace> {
    let period = prop_oneof![
        Just(1_000_000_000u64),
        Just(3_000_000_007),
        Just(60_000_000_000),
        Just(1_234_567),
        1u64..5_000_000_000,
    ];
    let step = (
        prop_oneof![
            2 => Just(Move::Stay),
            3 => (0u64..96).prop_map(Move::Forward),
            1 => (-1i8..=1).prop_map(Move::Period),
            3 => (any::<bool>(), -1i8..=1).prop_map(|(r, d)| Move::Edge(r, d)),
            1 => (0u64..48).prop_map(Move::Back),
        ],
        0..KEYS,
        prop_oneof![3 => Just(1u32), 2 => 0u32..7],
    );
    (1u32..6, period, prop::collection::vec(step, 1..60)).prop_map(|(limit, period, steps)| Trace {
        limit,
        period,
        steps,
    })
}

fn offset(base: u64, delta: i8) -> u64 {
    base.saturating_add_signed(delta.into())
}

/// Runs `trace` through one in-memory limiter per key and the Redis limiter
/// on the same manual clock, comparing every decision.
async fn parity(target: &Target<'_>, trace: &Trace, case: usize) -> Result<(), TestCaseError> {
    let quota = Quota::with_period(trace.limit, Duration::from_nanos(trace.period)).unwrap();
    let clock = ManualClock::new();
    clock.set(START);
    let redis =
        client_limiter::<SlidingWindowLog>(target, quota, &format!("swl{case}"), &clock).await;
    let memory: Vec<_> = (0..KEYS)
        .map(|_| RateLimiter::<SlidingWindowLog, _>::with_clock(quota, clock.clone()).unwrap())
        .collect();
    let mut last: Decision = memory[0].peek();
    let began = Instant::now();
    for (i, (step, key, cost)) in trace.steps.iter().enumerate() {
        if began.elapsed() > REAL_TIME_BUDGET {
            break;
        }
        let p = trace.period;
        match *step {
            Move::Stay => {}
            Move::Forward(n) => clock.advance_nanos(p / 64 * n + p % 64 * n / 64),
            Move::Period(d) => clock.advance_nanos(offset(p, d)),
            Move::Edge(retry, d) => {
                let base = if retry {
                    last.retry_after_nanos()
                } else {
                    last.reset_after_nanos()
                };
                clock.advance_nanos(offset(base, d));
            }
            Move::Back(n) => clock.set(clock.now().saturating_sub(p / 64 * n + 1)),
        }
        let cost = cost % (trace.limit + 1);
        let want = memory[*key].check_n(cost).unwrap();
        let got = redis.check_n(&format!("k{key}"), cost).await.unwrap();
        prop_assert_eq!(got.source(), Source::Redis);
        prop_assert_eq!(
            got.decision(),
            want,
            "step {} at {} (key {}, cost {})",
            i,
            clock.now(),
            key,
            cost
        );
        last = want;
    }
    Ok(())
}

fn parity_on(target: Target<'_>) {
    let rt = runtime();
    let case = AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&traces(), |trace| {
            let case = case.fetch_add(1, Ordering::Relaxed);
            rt.block_on(parity(&target, &trace, case))
        })
        .unwrap();
}

#[test]
fn parity_single_server() {
    let server = RedisServer::start();
    parity_on(Target::Single(&server));
}

#[test]
fn parity_cluster() {
    let cluster = RedisCluster::start();
    parity_on(Target::Cluster(&cluster));
}

/// The hand-written cases of the in-memory unit tests, on Redis: the
/// half-open window, costs, same-time merging, cost 0 and steps back.
#[test]
fn known_traces() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let target = Target::Single(&server);
        let clock = ManualClock::new();
        let quota = Quota::with_period(2, Duration::from_nanos(100)).unwrap();
        let redis = client_limiter::<SlidingWindowLog>(&target, quota, "known", &clock).await;
        let check = |t: u64, cost: u32| {
            clock.set(t);
            let redis = redis.clone();
            async move { redis.check_n("k", cost).await.unwrap().decision() }
        };
        assert!(check(1_000, 1).await.is_allowed());
        let d = check(900, 1).await;
        assert!(d.is_allowed());
        assert_eq!(d.reset_after_nanos(), 200);
        let d = check(950, 1).await;
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 150);
        assert!(!check(1_099, 1).await.is_allowed());
        assert!(check(1_100, 2).await.is_allowed());
        // A probe (cost 0) writes nothing, as in memory: it neither moves
        // the log's clock nor drops entries.
        let members = || {
            let out = server
                .cli(&["ZRANGE", &redis.redis_keys("k")[0], "0", "-1", "WITHSCORES"])
                .unwrap();
            out.lines().map(str::to_owned).collect::<Vec<_>>()
        };
        let before = members();
        assert!(check(1_300, 0).await.is_allowed());
        assert_eq!(members(), before);
        // A check at 1 300 drops what expired then; a reading back at 1 150
        // counts as 1 300.
        assert!(check(1_300, 1).await.is_allowed());
        let d = check(1_150, 1).await;
        assert!(d.is_allowed());
        assert_eq!(d.reset_after_nanos(), 250);
        // One sorted set: the entry at 1 300 (cost 2) and the state member.
        let members = server
            .cli(&["ZRANGE", &redis.redis_keys("k")[0], "0", "-1", "WITHSCORES"])
            .unwrap();
        let members: Vec<&str> = members.lines().collect();
        assert_eq!(members, ["1300:2", "1300", "~1300:2", "inf"]);
    });
}

/// 64 tasks over 4 limiters (4 connections) at one frozen time: exactly the
/// limit passes.
async fn hammer(target: &Target<'_>) {
    let clock = ManualClock::new();
    clock.set(START);
    let quota = Quota::per_minute(50).unwrap();
    let mut limiters = Vec::new();
    for _ in 0..4 {
        limiters.push(client_limiter::<SlidingWindowLog>(target, quota, "hammer", &clock).await);
    }
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let limiter = limiters[i % 4].clone();
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..3 {
                    let d = limiter
                        .check_redis("hot", 1)
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    admitted += u32::from(d.is_allowed());
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert_eq!(admitted, 50);
    let d = limiters[0].check("hot").await.unwrap().decision();
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert_eq!(d.retry_after(), Duration::from_secs(60));
}

#[test]
fn atomic_under_concurrency_single_server() {
    let server = RedisServer::start();
    runtime().block_on(hammer(&Target::Single(&server)));
}

#[test]
fn atomic_under_concurrency_cluster() {
    let cluster = RedisCluster::start();
    runtime().block_on(hammer(&Target::Cluster(&cluster)));
}

#[test]
fn server_time_smoke() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = RedisLimiter::<SlidingWindowLog>::builder(Quota::per_hour(5).unwrap())
            .url(&server.url())
            .prefix("server")
            .local_cache(false)
            .build()
            .await
            .unwrap();
        let hour = Duration::from_secs(3_600);
        for left in (0..5).rev() {
            let d = limiter.check("u").await.unwrap();
            assert_eq!(d.source(), Source::Redis);
            let d = d.decision();
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), left);
            assert_eq!(d.reset_after(), hour);
        }
        let d = limiter.check("u").await.unwrap().decision();
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert!(d.retry_after() <= hour && d.retry_after() > hour - Duration::from_secs(60));
        // The TTL: until the newest entry leaves the window, plus the grace.
        let pttl: u64 = server
            .cli(&["PTTL", &limiter.redis_keys("u")[0]])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!((3_590_000..=3_601_000).contains(&pttl), "TTL {pttl} ms");
    });
}

/// Every client time below 2^52 is served, with the longest period; the
/// script itself refuses a time whose window would end at 2^53 or later.
#[test]
fn times_at_the_edge_of_lua_exact_integers() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let clock = ManualClock::new();
        let period = 1u64 << 51;
        let quota = Quota::with_period(1, Duration::from_nanos(period)).unwrap();
        let redis =
            client_limiter::<SlidingWindowLog>(&Target::Single(&server), quota, "edge", &clock)
                .await;
        clock.set((1 << 52) - 1);
        let d = redis.check_redis("k", 1).await.unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.reset_after_nanos(), period);
        let d = redis.check_redis("k", 1).await.unwrap();
        assert_eq!(d.retry_after_nanos(), period);
        clock.set(1 << 52);
        let err = redis.check_redis("k", 1).await.unwrap_err();
        assert!(matches!(err, RedisError::TimeOutOfRange(_)), "{err:?}");

        // The script, called directly past what the limiter sends.
        let mut con = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let params = SlidingWindowLog::script_params(&quota, 1).unwrap();
        let script = redis::Script::new(SlidingWindowLog::SCRIPT);
        let call = |now: u64| {
            let mut invocation = script.prepare_invoke();
            invocation.key("raw").arg(now).arg(1);
            for p in &params {
                invocation.arg(*p);
            }
            invocation
        };
        let exact = 1u64 << 53;
        let served: Vec<i64> = call(exact - period - 1)
            .invoke_async(&mut con)
            .await
            .unwrap();
        assert_eq!(served, [1, 1, 0, period as i64, 0, 0]);
        let refused = call(exact - period)
            .invoke_async::<Vec<i64>>(&mut con)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("out of range"), "{refused}");
    });
}
