//! The leaky bucket's Lua script against the in-memory `LeakyBucket` (nginx
//! `limit_req` semantics), on a real `redis-server` and a 3-master Redis
//! Cluster started on free loopback ports: every decision field identical on
//! random traces in client time (time steps of 0, sub-millisecond steps,
//! retry and reset edges, steps back; costs including 0; all delay modes;
//! several keys), exactly the capacity admitted by 64 concurrent tasks at
//! one frozen time, and a smoke test in server time.
#![cfg(feature = "redis")]

#[path = "support/redis_parity.rs"]
mod redis_parity;
#[path = "support/redis_server.rs"]
mod redis_server;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rategate::redis::{RedisAlgorithm, RedisError, RedisLimiter, Source};
use rategate::{Clock, Decision, Delay, LeakyBucket, ManualClock, Quota, RateLimiter};
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
const MS: u64 = 1_000_000;

/// How the clock moves before a step.
#[derive(Debug, Clone)]
enum Move {
    Stay,
    /// Forward by this many 16ths of one request's drain time.
    Forward(u64),
    /// Forward by this many nanoseconds (sub-millisecond edges).
    Nanos(u64),
    /// Forward by the last decision's retry_after (true) or reset_after
    /// (false), plus this offset in ns.
    Edge(bool, i64),
    /// Back by this many 16ths of one request's drain time, plus 1 ns.
    Back(u64),
}

#[derive(Debug, Clone)]
struct Trace {
    quota: Quota,
    /// (move, key, cost); the cost is reduced modulo capacity + 1.
    steps: Vec<(Move, usize, u32)>,
}

fn quotas() -> impl Strategy<Value = Quota> {
    let nginx = prop_oneof![
        Just("2r/s burst=2"),
        Just("100r/m burst=3"),
        Just("10r/s burst=5 nodelay"),
        Just("5r/s burst=12 delay=8"),
        Just("1r/s"),
        Just("7/1500ms burst=4 delay=2"),
        Just("1000r/s burst=3"),
        Just("3/7ms burst=2 nodelay"),
        Just("1/1000s burst=2"),
        Just("1r/m burst=1"),
    ]
    .prop_map(|s| s.parse::<Quota>().unwrap());
    let random = (
        1u32..20,
        prop_oneof![(1u64..120_000).prop_map(|ms| ms * MS), MS..120_000 * MS],
        0u32..7,
        0u8..3,
        0u32..8,
    )
        .prop_map(|(limit, period, burst, mode, after)| {
            let mut quota = Quota::with_period(limit, Duration::from_nanos(period)).unwrap();
            if burst > 0 {
                quota = quota.burst(burst).unwrap();
            }
            quota.delay(match mode {
                0 => Delay::Smooth,
                1 => Delay::NoDelay,
                _ => Delay::After(after),
            })
        });
    prop_oneof![nginx, random]
}

fn traces() -> impl Strategy<Value = Trace> {
    let step = (
        prop_oneof![
            2 => Just(Move::Stay),
            3 => (0u64..40).prop_map(Move::Forward),
            1 => prop_oneof![
                Just(1u64),
                Just(MS - 1),
                Just(MS),
                Just(MS + 1),
                0..3 * MS
            ]
            .prop_map(Move::Nanos),
            3 => (
                any::<bool>(),
                prop_oneof![Just(-(MS as i64)), Just(-1i64), Just(0), Just(1)]
            )
                .prop_map(|(r, d)| Move::Edge(r, d)),
            1 => (0u64..24).prop_map(Move::Back),
        ],
        0..KEYS,
        prop_oneof![3 => Just(1u32), 2 => 0u32..8],
    );
    (quotas(), prop::collection::vec(step, 1..60)).prop_map(|(quota, steps)| Trace { quota, steps })
}

/// Nanoseconds one request takes to drain, at least 1 (a scale for steps).
fn drain_nanos(quota: &Quota) -> u64 {
    (quota.period_nanos() / u64::from(quota.limit())).max(1)
}

/// Runs `trace` through one in-memory limiter per key and the Redis limiter
/// on the same manual clock, comparing every decision.
async fn parity(target: &Target<'_>, trace: &Trace, case: usize) -> Result<(), TestCaseError> {
    let quota = trace.quota;
    let clock = ManualClock::new();
    clock.set(START);
    let redis = client_limiter::<LeakyBucket>(target, quota, &format!("lb{case}"), &clock).await;
    let memory: Vec<_> = (0..KEYS)
        .map(|_| RateLimiter::<LeakyBucket, _>::with_clock(quota, clock.clone()).unwrap())
        .collect();
    let capacity = quota.explicit_burst().unwrap_or(0) + 1;
    let drain = drain_nanos(&quota);
    let mut last: Decision = memory[0].peek();
    let began = Instant::now();
    for (i, (step, key, cost)) in trace.steps.iter().enumerate() {
        if began.elapsed() > REAL_TIME_BUDGET {
            break;
        }
        match *step {
            Move::Stay => {}
            Move::Forward(n) => clock.advance_nanos(drain / 16 * n + drain % 16 * n / 16),
            Move::Nanos(n) => clock.advance_nanos(n),
            Move::Edge(retry, d) => {
                let base = if retry {
                    last.retry_after_nanos()
                } else {
                    last.reset_after_nanos()
                };
                clock.advance_nanos(base.saturating_add_signed(d));
            }
            Move::Back(n) => clock.set(clock.now().saturating_sub(drain / 16 * n + 1)),
        }
        let cost = cost % (capacity + 1);
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

/// The in-memory unit test's nginx accounting, on Redis, with the hash
/// holding nginx's `excess` and `last`.
#[test]
fn known_trace_and_stored_state() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let clock = ManualClock::new();
        let quota: Quota = "2r/s burst=2".parse().unwrap();
        let redis =
            client_limiter::<LeakyBucket>(&Target::Single(&server), quota, "known", &clock).await;
        let stored = redis.redis_keys("k")[0].clone();
        let state = || {
            let out = server.cli(&["HMGET", &stored, "e", "l"]).unwrap();
            out.lines().map(str::to_owned).collect::<Vec<_>>()
        };
        let d = redis.check("k").await.unwrap().decision();
        assert!(d.is_allowed());
        assert_eq!((d.remaining(), d.delay_nanos()), (2, 0));
        assert_eq!(d.reset_after_nanos(), 500 * MS);
        assert_eq!(state(), ["0", "0"]);
        // 100 ms later: 0 - 200 + 1000 = 800, waits 400 ms.
        clock.set(100 * MS + 999_999);
        let d = redis.check("k").await.unwrap().decision();
        assert_eq!(d.delay_nanos(), 400 * MS);
        assert_eq!(d.reset_after_nanos(), 1_000 * MS - (100 * MS + 999_999));
        assert_eq!(state(), ["800", "100"]);
        clock.set(100 * MS);
        assert!(redis.check("k").await.unwrap().is_allowed());
        let d = redis.check("k").await.unwrap().decision();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 400 * MS);
        assert_eq!(state(), ["1800", "100"]);
    });
}

/// 64 tasks over 4 limiters (4 connections) at one frozen time: exactly
/// burst + 1 pass.
async fn hammer(target: &Target<'_>) {
    let clock = ManualClock::new();
    clock.set(1_000_000 * MS);
    let quota: Quota = "10r/s burst=40 nodelay".parse().unwrap();
    let mut limiters = Vec::new();
    for _ in 0..4 {
        limiters.push(client_limiter::<LeakyBucket>(target, quota, "hammer", &clock).await);
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
                    assert_eq!(d.delay_nanos(), 0);
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
    assert_eq!(admitted, 41);
    let d = limiters[0].check("hot").await.unwrap().decision();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Duration::from_millis(100));
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
        let quota: Quota = "1r/s burst=3 delay=1".parse().unwrap();
        let limiter = RedisLimiter::<LeakyBucket>::builder(quota)
            .url(&server.url())
            .prefix("server")
            .local_cache(false)
            .build()
            .await
            .unwrap();
        // The first and one excess request pass at once, the next two wait
        // about 1 s and 2 s (less the little drained meanwhile).
        for (left, wait_s) in [(3, 0), (2, 0), (1, 1), (0, 2)] {
            let d = limiter.check("u").await.unwrap();
            assert_eq!(d.source(), Source::Redis);
            let d = d.decision();
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), left);
            let wait = Duration::from_secs(wait_s);
            assert!(
                d.delay() <= wait && d.delay() + Duration::from_millis(100) > wait,
                "{d:?}"
            );
        }
        let d = limiter.check("u").await.unwrap().decision();
        assert!(!d.is_allowed());
        let second = Duration::from_secs(1);
        assert!(
            d.retry_after() <= second && d.retry_after() > second / 2,
            "{d:?}"
        );
        // The TTL: until drained to a new key's level (4 s), plus the grace.
        let pttl: u64 = server
            .cli(&["PTTL", &limiter.redis_keys("u")[0]])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!((4_500..=5_000).contains(&pttl), "TTL {pttl} ms");
    });
}

/// Every client time below 2^52 is served, with the longest drain; the
/// script itself refuses a time whose drain could reach 2^53.
#[test]
fn times_at_the_edge_of_lua_exact_integers() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let clock = ManualClock::new();
        // The longest drain at the slowest rate within 2^51 ns: (2250 + 1)
        // requests of 1000 s each.
        let quota: Quota = "1/1000s burst=2250 nodelay".parse().unwrap();
        let horizon = 2_251 * 1_000_000_000_000u64;
        let redis =
            client_limiter::<LeakyBucket>(&Target::Single(&server), quota, "edge", &clock).await;
        clock.set((1 << 52) - 1);
        let d = redis.check_redis("k", 2_251).await.unwrap();
        assert!(d.is_allowed());
        // The state drains from the millisecond the request fell in.
        let since_ms = ((1u64 << 52) - 1) % MS;
        assert_eq!(d.reset_after_nanos(), horizon - since_ms);
        clock.set(1 << 52);
        let err = redis.check_redis("k", 1).await.unwrap_err();
        assert!(matches!(err, RedisError::TimeOutOfRange(_)), "{err:?}");

        // The script, called directly past what the limiter sends.
        let mut con = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let params = LeakyBucket::script_params(&quota, 1).unwrap();
        let script = redis::Script::new(LeakyBucket::SCRIPT);
        let call = |now: u64| {
            let mut invocation = script.prepare_invoke();
            invocation.key("raw").arg(now).arg(1);
            for p in &params {
                invocation.arg(*p);
            }
            invocation
        };
        let exact = 1u64 << 53;
        let t = exact - horizon - MS;
        let served: Vec<i64> = call(t).invoke_async(&mut con).await.unwrap();
        let reset = (1_000_000_000_000 - t % MS) as i64;
        assert_eq!(served, [1, 2_251, 2_250, reset, 0, 0]);
        let refused = call(exact - horizon)
            .invoke_async::<Vec<i64>>(&mut con)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("out of range"), "{refused}");
    });
}
