//! Shared by `tests/redis_parity_{token_bucket,fixed_window,
//! sliding_window_counter}.rs`: random traces run through the in-memory
//! `RateLimiter` and the `RedisLimiter` on one `ManualClock`, compared field
//! by field; a concurrent hammer; a server-time smoke test; a TTL check.
//!
//! # Why the parity runs turn key expiry off
//!
//! Redis expires keys on its own wall clock, while a trace's manual clock
//! stands still, jumps, or steps back. A TTL that is exactly the time until
//! a state is idle (as the scripts set it) can therefore run out in real
//! time while the manual clock says the state still counts, and the next
//! step would see a fresh key. So the parity runs use [`persistent!`]: the
//! same script source behind a prelude that makes `PEXPIRE` a no-op and
//! drops `SET`'s `PX`, nothing else. The TTLs themselves are checked by
//! [`ttls_cover_the_time_to_idle`] with the real script.
// Each test file uses a part of this module.
#![allow(dead_code, unused_macros)]

pub use crate::redis_server::runtime;
use crate::redis_server::{RedisCluster, RedisServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rategate::redis::{RedisAlgorithm, RedisLimiter, Source, TimeSource};
use rategate::{Algorithm, Clock, Decision, ManualClock, Quota, RateLimiter};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Declares `$name`, the algorithm `$alg` whose script is
/// `src/redis/scripts/$file` behind a prelude that turns key expiry off
/// (see the module docs). Everything else delegates to `$alg`.
macro_rules! persistent {
    ($name:ident, $alg:ty, $file:literal) => {
        #[derive(Debug)]
        struct $name($alg);

        impl ::rategate::Algorithm for $name {
            type State = <$alg as ::rategate::Algorithm>::State;

            fn from_quota(quota: &::rategate::Quota) -> Result<Self, ::rategate::QuotaError> {
                <$alg as ::rategate::Algorithm>::from_quota(quota).map($name)
            }

            fn new_state(&self) -> Self::State {
                self.0.new_state()
            }

            fn check(
                &self,
                state: &Self::State,
                now: u64,
                cost: u32,
            ) -> Result<::rategate::Decision, ::rategate::CheckError> {
                self.0.check(state, now, cost)
            }

            fn peek(
                &self,
                state: &Self::State,
                now: u64,
                cost: u32,
            ) -> Result<::rategate::Decision, ::rategate::CheckError> {
                self.0.peek(state, now, cost)
            }

            fn is_idle(&self, state: &Self::State, now: u64) -> bool {
                self.0.is_idle(state, now)
            }

            fn capacity(&self) -> u32 {
                self.0.capacity()
            }

            fn refund(&self, state: &Self::State, now: u64, cost: u32) -> u32 {
                self.0.refund(state, now, cost)
            }
        }

        impl ::rategate::redis::RedisAlgorithm for $name {
            const SCRIPT: &'static str = concat!(
                "local redis_real = redis\n",
                "local redis = setmetatable({\n",
                "  call = function(command, ...)\n",
                "    if command == 'PEXPIRE' then return 1 end\n",
                "    if command == 'SET' then\n",
                "      local key, value = ...\n",
                "      return redis_real.call('SET', key, value)\n",
                "    end\n",
                "    return redis_real.call(command, ...)\n",
                "  end,\n",
                "}, { __index = redis_real })\n",
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/src/redis/scripts/",
                    $file
                )),
            );

            const KEY_SUFFIXES: &'static [&'static str] =
                <$alg as ::rategate::redis::RedisAlgorithm>::KEY_SUFFIXES;

            fn script_params(
                quota: &::rategate::Quota,
                tick_nanos: u64,
            ) -> Result<Vec<i64>, ::rategate::QuotaError> {
                <$alg as ::rategate::redis::RedisAlgorithm>::script_params(quota, tick_nanos)
            }
        }

        #[test]
        fn persistent_script_is_the_real_one() {
            let real = <$alg as ::rategate::redis::RedisAlgorithm>::SCRIPT;
            let wrapped = <$name as ::rategate::redis::RedisAlgorithm>::SCRIPT;
            assert!(wrapped.ends_with(real) && wrapped.len() < real.len() + 400);
        }
    };
}

/// Keys per trace.
pub const KEYS: usize = 3;
/// Traces keep their times below this; the scripts serve every time below
/// 2^52 ticks exactly for any quota their `script_params` accept.
pub const TIME_CAP: u64 = 1 << 52;

/// A single server or a cluster.
pub enum Target<'a> {
    Single(&'a RedisServer),
    Cluster(&'a RedisCluster),
}

/// A limiter in client time on `clock`, without the local cache.
pub async fn client_limiter<A: RedisAlgorithm>(
    target: &Target<'_>,
    quota: Quota,
    prefix: &str,
    clock: &ManualClock,
) -> RedisLimiter<A, ManualClock> {
    let builder = RedisLimiter::<A, ManualClock>::builder(quota)
        .prefix(prefix)
        .time(TimeSource::Client(clock.clone()))
        .timeout(Duration::from_secs(5))
        .local_cache(false);
    let builder = match target {
        Target::Single(server) => builder.url(&server.url()),
        Target::Cluster(cluster) => builder.cluster(&cluster.urls()),
    };
    builder.build().await.unwrap()
}

/// How the clock moves before a step.
#[derive(Debug, Clone)]
pub enum Move {
    Stay,
    /// Forward by this many 64ths of the period.
    Forward(u64),
    /// Forward by this many emission intervals (period / limit), plus -1, 0
    /// or 1 ns.
    Intervals(u64, i8),
    /// To the next multiple of the period (a window edge), plus -1, 0 or 1.
    WindowEdge(i8),
    /// Forward by the last decision's retry_after (true) or reset_after
    /// (false), plus -1, 0 or 1 ns.
    Edge(bool, i8),
    /// Back by this many 64ths of the period, plus 1 ns (not below 0).
    Back(u64),
    /// Forward by this many periods (long idle gaps).
    Far(u64),
}

/// A random walk of the clock over several keys.
#[derive(Debug, Clone)]
pub struct Trace {
    pub quota: Quota,
    /// Where the clock starts.
    pub start: u64,
    /// (move, key, cost); the cost is reduced modulo capacity + 1.
    pub steps: Vec<(Move, usize, u32)>,
}

/// Traces over the quotas of `quotas`.
pub fn traces(quotas: impl Strategy<Value = Quota>) -> impl Strategy<Value = Trace> {
    let start = prop_oneof![Just(0u64), Just(1u64 << 40), 0u64..TIME_CAP / 2,];
    let step = (
        prop_oneof![
            3 => Just(Move::Stay),
            3 => (0u64..160).prop_map(Move::Forward),
            2 => (1u64..4, -1i8..=1).prop_map(|(n, d)| Move::Intervals(n, d)),
            2 => (-1i8..=1).prop_map(Move::WindowEdge),
            3 => (any::<bool>(), -1i8..=1).prop_map(|(r, d)| Move::Edge(r, d)),
            2 => (0u64..160).prop_map(Move::Back),
            1 => (2u64..1_000_000).prop_map(Move::Far),
        ],
        0..KEYS,
        prop_oneof![3 => Just(1u32), 1 => Just(0u32), 1 => Just(u32::MAX), 3 => any::<u32>()],
    );
    (quotas, start, prop::collection::vec(step, 1..80)).prop_map(|(quota, start, steps)| Trace {
        quota,
        start,
        steps,
    })
}

/// The time after `now` moved by `step`; back to `start` where it would
/// reach [`TIME_CAP`].
fn advance(now: u64, step: &Move, quota: &Quota, last: &Decision, start: u64) -> u64 {
    let p = quota.period_nanos();
    let unit = quota.emission_interval_nanos();
    let fraction = |n: u64| p / 64 * n + p % 64 * n / 64;
    let next = match *step {
        Move::Stay => Some(now),
        Move::Forward(n) => now.checked_add(fraction(n)),
        Move::Intervals(n, d) => unit
            .checked_mul(n)
            .and_then(|t| now.checked_add(t))
            .map(|t| t.saturating_add_signed(d.into())),
        Move::WindowEdge(d) => (now / p)
            .checked_add(1)
            .and_then(|w| w.checked_mul(p))
            .map(|t| t.saturating_add_signed(d.into())),
        Move::Edge(retry, d) => {
            let by = if retry {
                last.retry_after_nanos()
            } else {
                last.reset_after_nanos()
            };
            now.checked_add(by)
                .map(|t| t.saturating_add_signed(d.into()))
        }
        Move::Back(n) => Some(now.saturating_sub(fraction(n) + 1)),
        Move::Far(n) => p.checked_mul(n).and_then(|t| now.checked_add(t)),
    };
    next.filter(|&t| t < TIME_CAP).unwrap_or(start)
}

/// Runs `trace` through one in-memory `RateLimiter<A>` per key and one
/// `RedisLimiter<R>` (client time, the same manual clock), comparing every
/// decision.
pub async fn parity<A: Algorithm, R: RedisAlgorithm>(
    target: &Target<'_>,
    trace: &Trace,
    prefix: &str,
) -> Result<(), TestCaseError> {
    let quota = trace.quota;
    let clock = ManualClock::new();
    clock.set(trace.start);
    let redis = client_limiter::<R>(target, quota, prefix, &clock).await;
    let memory: Vec<_> = (0..KEYS)
        .map(|_| RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap())
        .collect();
    let capacity = memory[0].algorithm().capacity();
    let mut last = memory[0].peek();
    for (i, (step, key, cost)) in trace.steps.iter().enumerate() {
        clock.set(advance(clock.now(), step, &quota, &last, trace.start));
        let cost = cost % (capacity + 1);
        let want = memory[*key].check_n(cost).unwrap();
        let got = redis.check_n(&format!("user-{key}"), cost).await.unwrap();
        prop_assert_eq!(got.source(), Source::Redis, "step {}: the script failed", i);
        prop_assert_eq!(
            got.decision(),
            want,
            "step {} at {} ns (key {}, cost {})",
            i,
            clock.now(),
            key,
            cost
        );
        last = want;
    }
    Ok(())
}

/// `cases` random traces through [`parity`] (`PROPTEST_CASES` overrides,
/// for longer runs).
pub fn parity_on<A: Algorithm, R: RedisAlgorithm>(
    target: Target<'_>,
    quotas: impl Strategy<Value = Quota>,
    cases: u32,
    tag: &str,
) {
    let rt = runtime();
    let case = AtomicUsize::new(0);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&traces(quotas), |trace| {
            let prefix = format!("{tag}{}", case.fetch_add(1, Ordering::Relaxed));
            rt.block_on(parity::<A, R>(&target, &trace, &prefix))
        })
        .unwrap();
}

/// Replays `steps` of `(now, cost)` on one key through the in-memory
/// `RateLimiter<A>` and the `RedisLimiter<R>` (client time), comparing every
/// decision: hand-picked edge cases.
pub async fn replay<A: Algorithm, R: RedisAlgorithm>(
    server: &RedisServer,
    quota: Quota,
    prefix: &str,
    steps: &[(u64, u32)],
) {
    let clock = ManualClock::new();
    let redis = client_limiter::<R>(&Target::Single(server), quota, prefix, &clock).await;
    let memory = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
    for (i, &(now, cost)) in steps.iter().enumerate() {
        clock.set(now);
        let want = memory.check_n(cost).unwrap();
        let got = redis.check_n("k", cost).await.unwrap();
        assert_eq!(got.source(), Source::Redis, "step {i}: the script failed");
        assert_eq!(got.decision(), want, "step {i} at {now} ns, cost {cost}");
    }
}

/// 64 tasks over 4 limiters (4 connections) at one frozen time, each
/// checking every key of `keys` three times: each key admits exactly the
/// capacity, and the admissions' `remaining` are `capacity - 1` down to 0,
/// each once (no two admissions saw the same state).
pub async fn hammer<A: RedisAlgorithm>(target: &Target<'_>, quota: Quota, keys: &[&str]) {
    let clock = ManualClock::new();
    clock.set(1 << 45);
    let mut limiters = Vec::new();
    for _ in 0..4 {
        limiters.push(client_limiter::<A>(target, quota, "hammer", &clock).await);
    }
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let limiter = limiters[i % 4].clone();
            let keys = keys.clone();
            tokio::spawn(async move {
                let mut remaining = Vec::new();
                for round in 0..3 {
                    for j in 0..keys.len() {
                        let key = (i + j + round) % keys.len();
                        let d = limiter.check(&keys[key]).await.unwrap();
                        assert_eq!(d.source(), Source::Redis);
                        if d.is_allowed() {
                            remaining.push((key, d.decision().remaining()));
                        }
                    }
                }
                remaining
            })
        })
        .collect();
    let mut admitted = vec![Vec::new(); keys.len()];
    for task in tasks {
        for (key, remaining) in task.await.unwrap() {
            admitted[key].push(remaining);
        }
    }
    let capacity = A::from_quota(&quota).unwrap().capacity();
    let expected: Vec<u32> = (0..capacity).collect();
    for (key, mut remaining) in admitted.into_iter().enumerate() {
        remaining.sort_unstable();
        assert_eq!(remaining, expected, "key {}", keys[key]);
    }
}

/// In server time (microsecond ticks): `quota`'s capacity passes with
/// `remaining` counting down, then a denial that asks to wait at most
/// `max_retry`.
pub async fn server_time_smoke<A: RedisAlgorithm>(
    server: &RedisServer,
    quota: Quota,
    max_retry: Duration,
) {
    let limiter = RedisLimiter::<A>::builder(quota)
        .url(&server.url())
        .prefix("server")
        .local_cache(false)
        .build()
        .await
        .unwrap();
    let capacity = A::from_quota(&quota).unwrap().capacity();
    for left in (0..capacity).rev() {
        let d = limiter.check("u").await.unwrap();
        assert_eq!(d.source(), Source::Redis);
        let d = d.decision();
        assert!(d.is_allowed());
        assert_eq!((d.limit(), d.remaining()), (capacity, left));
        assert!(d.reset_after() > Duration::ZERO && d.reset_after() <= 2 * quota.period());
    }
    let d = limiter.check("u").await.unwrap().decision();
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert!(d.retry_after() > Duration::ZERO && d.retry_after() <= max_retry);
    for key in limiter.redis_keys("u") {
        let pttl: i64 = server.cli(&["PTTL", &key]).unwrap().trim().parse().unwrap();
        // -2: the key does not exist (a two-key script's older window).
        assert!(pttl == -2 || pttl > 0, "{key}: PTTL {pttl}");
    }
}

/// The server's clock in milliseconds (`TIME`, rounded down).
fn server_ms(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]).unwrap();
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().unwrap());
    let (secs, micros) = (parts.next().unwrap(), parts.next().unwrap());
    secs * 1000 + micros / 1000
}

/// With the real script, on one key walked forward by `steps` of
/// `(forward_ns, cost, keys)`: after each step whose `keys` is not empty
/// (an admission that wrote, with a `reset_after` of at least 200 ms), the
/// keys marked `true` (in `KEY_SUFFIXES` order) expire
/// `max(ceil(reset_after / 1 ms), 1)` after the call, which is when the
/// state becomes idle, and those marked `false` do not exist.
pub async fn ttls_cover_the_time_to_idle<A: RedisAlgorithm>(
    server: &RedisServer,
    quota: Quota,
    steps: &[(u64, u32, &[bool])],
) {
    let clock = ManualClock::new();
    clock.set(1 << 40);
    let limiter = client_limiter::<A>(&Target::Single(server), quota, "ttl", &clock).await;
    for (i, &(forward, cost, keys)) in steps.iter().enumerate() {
        clock.advance_nanos(forward);
        let before = server_ms(server);
        let d = limiter.check_n("u", cost).await.unwrap();
        let after = server_ms(server);
        assert_eq!(d.source(), Source::Redis);
        let d = d.decision();
        if keys.is_empty() {
            continue;
        }
        assert!(
            d.is_allowed() && d.reset_after() >= Duration::from_millis(200),
            "step {i}: {d:?}"
        );
        let ttl = d.reset_after_nanos().div_ceil(1_000_000).max(1);
        for (key, &present) in limiter.redis_keys("u").iter().zip(keys) {
            let at: i64 = server
                .cli(&["PEXPIRETIME", key])
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            if present {
                let at = u64::try_from(at).unwrap_or_else(|_| panic!("step {i}: {key}: {at}"));
                assert!(
                    (before + ttl..=after + ttl).contains(&at),
                    "step {i}: {key} expires at {at}, want {ttl} ms after [{before}, {after}]"
                );
            } else {
                assert_eq!(at, -2, "step {i}: {key} should not exist");
            }
        }
    }
}

/// Every node of `cluster` holds some of the keys: the keys really spread
/// over the slots.
pub fn assert_spread(cluster: &RedisCluster) {
    for node in &cluster.nodes {
        let keys: u64 = node.cli(&["DBSIZE"]).unwrap().trim().parse().unwrap();
        assert!(keys > 0, "node {} holds no key", node.port);
    }
}

/// Calls `A`'s script directly (nanosecond ticks), bypassing the limiter's
/// own checks.
pub async fn raw_call<A: RedisAlgorithm>(
    server: &RedisServer,
    quota: Quota,
    key: &str,
    now: u64,
    cost: u32,
) -> redis::RedisResult<Vec<i64>> {
    let client = redis::Client::open(server.url())?;
    let mut con = client.get_multiplexed_async_connection().await?;
    let script = redis::Script::new(A::SCRIPT);
    let mut invocation = script.prepare_invoke();
    for suffix in A::KEY_SUFFIXES {
        invocation.key(format!("raw:{{{key}}}:{suffix}"));
    }
    invocation.arg(now).arg(cost);
    for param in A::script_params(&quota, 1).unwrap() {
        invocation.arg(param);
    }
    invocation.invoke_async(&mut con).await
}
