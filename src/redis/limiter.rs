//! The Redis-backed keyed limiter.

use super::batch::{Batcher, batch_script};
use super::cache::DenialCache;
use super::connection::{Connection, Target, connect, parse_url, share_limiter};
use super::key::{KeySpace, quota_segment};
use super::wire::Wire;
use super::{LUA_EXACT, RedisAlgorithm, RedisError};
use crate::algorithm::check_cost;
use crate::policy::StoreDown;
use crate::sync::{Arc, AtomicU64, Ordering};
use crate::{CheckError, Clock, Decision, KeyedRateLimiter, QuantaClock, Quota};
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

/// Where a Redis limiter's scripts read time.
#[derive(Debug, Clone)]
pub enum TimeSource<C> {
    /// The Redis server's `TIME`, in microseconds: every app server agrees,
    /// whatever its own clock says. The default.
    Server,
    /// The given clock, in nanoseconds (for tests, simulations and parity
    /// checks against the in-memory limiter). Every script is exact for
    /// readings below 2^52 ns (about 52 days after the clock's origin); later
    /// readings are refused ([`RedisError::TimeOutOfRange`]) and the
    /// store-down policy decides.
    Client(C),
}

/// Which path made a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The Redis script.
    Redis,
    /// The local over-limit cache: Redis had denied this key until a time
    /// not yet reached.
    LocalCache,
    /// Redis was unreachable; [`StoreDown::FailOpen`] admitted.
    FailOpen,
    /// Redis was unreachable; [`StoreDown::FailClosed`] denied.
    FailClosed,
    /// Redis was unreachable; the [`StoreDown::LocalShare`] limiter decided.
    LocalShare,
}

/// A decision and the path that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisDecision {
    decision: Decision,
    source: Source,
}

impl RedisDecision {
    /// The decision.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether the request may pass.
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// Which path decided.
    pub fn source(&self) -> Source {
        self.source
    }
}

/// Counters of a [`RedisLimiter`], read with [`RedisLimiter::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Decisions made by the Redis script.
    pub redis: u64,
    /// Denials answered by the local over-limit cache.
    pub local_cache: u64,
    /// Decisions made by the store-down policy, per policy.
    pub fail_open: u64,
    /// See [`RedisStats::fail_open`].
    pub fail_closed: u64,
    /// See [`RedisStats::fail_open`].
    pub local_share: u64,
    /// Calls to Redis that failed (connection errors, error replies,
    /// timeouts).
    pub errors: u64,
    /// Of [`RedisStats::errors`], the calls that timed out.
    pub timeouts: u64,
}

#[derive(Debug, Default)]
struct Counters {
    redis: AtomicU64,
    local_cache: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
    local_share: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    // Relaxed: statistics, ordering nothing.
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A keyed rate limiter whose state lives in Redis: one atomic Lua script
/// call per decision, shared by every app server.
///
/// Cheap to clone (the clones share connections, caches and counters).
///
/// # Examples
///
/// ```no_run
/// use rategate::policy::StoreDown;
/// use rategate::redis::RedisLimiter;
/// use rategate::{Quota, TokenBucket};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(5000)?)
///     .url("redis://127.0.0.1:6379/")
///     .prefix("api")
///     .store_down(StoreDown::LocalShare(0.25))
///     .build()
///     .await?;
/// let d = limiter.check("token-123").await?;
/// println!("allowed: {}, via {:?}", d.is_allowed(), d.source());
/// # Ok(())
/// # }
/// ```
pub struct RedisLimiter<A: RedisAlgorithm, C: Clock = QuantaClock> {
    inner: Arc<Inner<A, C>>,
}

impl<A: RedisAlgorithm, C: Clock> Clone for RedisLimiter<A, C> {
    fn clone(&self) -> Self {
        RedisLimiter {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: RedisAlgorithm, C: Clock> fmt::Debug for RedisLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("quota", &self.inner.quota)
            .field("prefix", &self.inner.prefix)
            .field("client_time", &self.inner.client_time)
            .field("store_down", &self.inner.store_down)
            .finish_non_exhaustive()
    }
}

struct Inner<A: RedisAlgorithm, C: Clock> {
    algorithm: A,
    quota: Quota,
    script: redis::Script,
    params: Vec<i64>,
    tick_nanos: u64,
    client_time: bool,
    clock: C,
    connection: Connection,
    /// Single server: concurrent decisions share script calls (see
    /// `batch.rs`); `None` on a Cluster or with batching off.
    batcher: Option<Batcher>,
    prefix: String,
    /// Where this limiter's keys live in Redis.
    keys: KeySpace,
    timeout: Duration,
    store_down: StoreDown,
    local: Option<KeyedRateLimiter<String, A, C>>,
    /// Keys Redis denied, answered locally until the denial may have
    /// changed (see `cache.rs`).
    cache: Option<DenialCache>,
    counters: Counters,
}

/// Builds a [`RedisLimiter`]; from [`RedisLimiter::builder`].
#[must_use]
pub struct RedisLimiterBuilder<A, C> {
    quota: Quota,
    target: Option<Target>,
    tls: super::Tls,
    prefix: String,
    time: TimeSource<C>,
    clock: C,
    timeout: Duration,
    store_down: StoreDown,
    local_cache: bool,
    cache_max: usize,
    batches_in_flight: usize,
    batching: bool,
    marker: PhantomData<fn() -> A>,
}

impl<A: RedisAlgorithm, C: Clock + Default> RedisLimiter<A, C> {
    /// A builder for `quota`. Name the server with
    /// [`url`](RedisLimiterBuilder::url) or
    /// [`cluster`](RedisLimiterBuilder::cluster).
    pub fn builder(quota: Quota) -> RedisLimiterBuilder<A, C> {
        RedisLimiterBuilder {
            quota,
            target: None,
            tls: super::Tls::default(),
            prefix: "rategate".to_owned(),
            time: TimeSource::Server,
            clock: C::default(),
            timeout: Duration::from_millis(100),
            store_down: StoreDown::FailOpen,
            local_cache: true,
            cache_max: 100_000,
            batches_in_flight: 2,
            batching: true,
            marker: PhantomData,
        }
    }
}

impl<A: RedisAlgorithm, C: Clock> RedisLimiterBuilder<A, C> {
    /// A single Redis server, as `redis://host:port/db`.
    pub fn url(mut self, url: &str) -> Self {
        self.target = Some(Target::Url(url.to_owned()));
        self
    }

    /// TLS settings for a `rediss://` server: a private CA, a client
    /// certificate (feature `redis-tls`). Without them a `rediss://` URL
    /// trusts the system's certificates.
    #[cfg(feature = "redis-tls")]
    pub fn tls(mut self, tls: super::Tls) -> Self {
        self.tls = tls;
        self
    }

    /// A Redis Cluster, given some of its nodes' URLs.
    pub fn cluster<S: AsRef<str>>(mut self, nodes: &[S]) -> Self {
        let nodes = nodes.iter().map(|s| s.as_ref().to_owned()).collect();
        self.target = Some(Target::Cluster(nodes));
        self
    }

    /// The master that Redis Sentinel names, followed across failovers.
    pub fn sentinel(mut self, sentinel: super::Sentinel) -> Self {
        self.target = Some(Target::Sentinel(sentinel));
        self
    }

    /// The namespace of this limiter's Redis keys (default `rategate`); it
    /// may not contain `{` or `}`. Limiters share state when prefix,
    /// algorithm, quota and time source are all equal (the nodes of one
    /// service); a different quota or algorithm never shares, whatever the
    /// prefix. Use distinct prefixes to keep limiters of one policy apart.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Where the scripts read time (default [`TimeSource::Server`]).
    pub fn time(mut self, time: TimeSource<C>) -> Self {
        if let TimeSource::Client(clock) = &time {
            self.clock = clock.clone();
        }
        self.time = time;
        self
    }

    /// The longest a call to Redis may take before the store-down policy
    /// decides (default 100 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What decides while Redis is unreachable (default
    /// [`StoreDown::FailOpen`]).
    pub fn store_down(mut self, policy: StoreDown) -> Self {
        self.store_down = policy;
        self
    }

    /// Whether to answer keys that Redis denied locally (default on): once
    /// Redis denied cost `c` with a retry-after ending at `T`, costs of at
    /// least `c` are denied locally until `T`, which is never a request
    /// Redis would admit. A full cache drops the denial that ends soonest.
    pub fn local_cache(mut self, on: bool) -> Self {
        self.local_cache = on;
        self
    }

    /// The most keys the local over-limit cache holds (default 100,000).
    pub fn local_cache_capacity(mut self, keys: usize) -> Self {
        self.cache_max = keys;
        self
    }

    /// On a single server, the most batches of concurrent decisions on the
    /// wire at once (default 2; 1 to 64, else `build` returns
    /// [`RedisError::Config`]). Each batch is one script call;
    /// with two, Redis runs one while the callers of the other are answered
    /// and ask again, instead of the two sides taking turns. Batches run in
    /// the order they were sent, each decision exactly as separate calls in
    /// arrival order would give. No effect on a Cluster.
    pub fn batches_in_flight(mut self, batches: usize) -> Self {
        self.batches_in_flight = batches;
        self
    }

    /// Whether concurrent decisions on a single server share script calls
    /// (default on; see [`batches_in_flight`](Self::batches_in_flight)).
    /// Off, every decision is a script call of its own on redis-rs's
    /// multiplexed connection, as on a Cluster: for a proxy in front of
    /// Redis that does not pass one long script, or a server that limits
    /// script run time.
    pub fn batching(mut self, on: bool) -> Self {
        self.batching = on;
        self
    }

    /// Connects (loading the script) and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] without a server, with a timeout of zero or above a day, a local share
    /// outside (0, 1] or with no batch in flight; [`RedisError::Quota`] when the quota cannot run on
    /// the script; [`RedisError::Redis`] or [`RedisError::Timeout`] when the
    /// first connection fails.
    pub async fn build(self) -> Result<RedisLimiter<A, C>, RedisError> {
        crate::redis::connection::check_wait(
            self.timeout,
            "the Redis timeout must be above zero and at most a day",
        )?;
        let algorithm = A::from_quota(&self.quota)?;
        let client_time = matches!(self.time, TimeSource::Client(_));
        let tick_nanos = if client_time { 1 } else { 1_000 };
        let params = A::script_params(&self.quota, tick_nanos)?;
        let local = match self.store_down {
            StoreDown::LocalShare(share) => Some(share_limiter::<A, C>(
                &self.quota,
                share,
                self.clock.clone(),
                "the local share must be in (0, 1]",
            )?),
            _ => None,
        };
        // The policy is part of every key: limiters with different quotas
        // or time units never share state by accident, and the key suffixes
        // name the algorithm.
        let unit = if client_time { "ns" } else { "us" };
        let policy = format!("{}:{unit}", quota_segment(&self.quota));
        let keys = KeySpace::new(&self.prefix, &policy)?;
        let script = redis::Script::new(A::SCRIPT);
        let batch_source = batch_script(A::SCRIPT);
        let batch = redis::Script::new(&batch_source);
        let timeout = self.timeout;
        // The batching connection needs only the server's address (its TLS
        // comes from `self.tls`), read once `connect` has accepted the URL.
        let single = match &self.target {
            Some(Target::Url(url)) if self.batching => Some(url.clone()),
            _ => None,
        };
        let connection = connect(self.target, &self.tls, timeout, &[&script, &batch]).await?;
        let wire = match (&connection, single) {
            (_, Some(url)) => Some(Wire::new(parse_url(&url)?, &self.tls)?),
            (Connection::Single(single), None) if self.batching && single.follows_sentinel() => {
                Some(Wire::following(
                    single.info(),
                    &self.tls,
                    Some(single.clone()),
                )?)
            }
            _ => None,
        };
        let batcher = match wire {
            Some(wire) => Some(Batcher::start(
                wire,
                A::SCRIPT,
                batch_source,
                params.clone(),
                keys.clone(),
                A::KEY_SUFFIXES,
                self.batches_in_flight,
            )?),
            None => None,
        };
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                algorithm,
                quota: self.quota,
                script,
                params,
                tick_nanos,
                client_time,
                clock: self.clock,
                connection,
                batcher,
                prefix: self.prefix,
                keys,
                timeout,
                store_down: self.store_down,
                local,
                cache: self.local_cache.then(|| DenialCache::new(self.cache_max)),
                counters: Counters::default(),
            }),
        })
    }
}

impl<A: RedisAlgorithm, C: Clock> RedisLimiter<A, C> {
    /// Decides one request of cost 1 for `key`.
    ///
    /// # Errors
    ///
    /// None in practice (cost 1 always fits); see
    /// [`check_n`](RedisLimiter::check_n).
    pub async fn check(&self, key: &str) -> Result<RedisDecision, CheckError> {
        self.check_n(key, 1).await
    }

    /// Decides one request of `cost` for `key`. Redis being down is not an
    /// error: the store-down policy decides, and the decision's
    /// [`source`](RedisDecision::source) says so.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<RedisDecision, CheckError> {
        let inner = &*self.inner;
        check_cost(cost, inner.algorithm.capacity())?;
        let now = inner.clock.now();
        if let Some(decision) = self.cached_denial(key, now, cost) {
            bump(&inner.counters.local_cache);
            return Ok(RedisDecision {
                decision,
                source: Source::LocalCache,
            });
        }
        match crate::metrics::timed_redis_call(self.call(key, now, cost)).await {
            Ok(decision) => {
                bump(&inner.counters.redis);
                if !decision.is_allowed() {
                    self.cache_denial(key, now, cost, decision.retry_after_nanos());
                }
                Ok(RedisDecision {
                    decision,
                    source: Source::Redis,
                })
            }
            Err(error) => {
                bump(&inner.counters.errors);
                if matches!(error, RedisError::Timeout) {
                    bump(&inner.counters.timeouts);
                }
                crate::metrics::store_failure(&error);
                let decision = self.store_down_decision(key, cost);
                crate::metrics::store_down(decision.source());
                Ok(decision)
            }
        }
    }

    /// Calls the script once, without the cache or the store-down policy.
    ///
    /// # Errors
    ///
    /// Whatever went wrong with Redis, as a [`RedisError`].
    pub async fn check_redis(&self, key: &str, cost: u32) -> Result<Decision, RedisError> {
        let inner = &*self.inner;
        check_cost(cost, inner.algorithm.capacity())
            .map_err(|_| RedisError::Config("cost above capacity"))?;
        self.call(key, inner.clock.now(), cost).await
    }

    async fn call(&self, key: &str, now: u64, cost: u32) -> Result<Decision, RedisError> {
        let inner = &*self.inner;
        let now_arg = if inner.client_time {
            // Every script's maths is exact for times below 2^52 ticks.
            if now >= LUA_EXACT / 2 {
                return Err(RedisError::TimeOutOfRange(now));
            }
            now as i64
        } else {
            -1
        };
        let Some(batcher) = &inner.batcher else {
            return self.call_direct(key, now_arg, cost).await;
        };
        // Counts this caller until it is answered or dropped, and holds
        // the wire for a lone caller (see `Batcher::enter`).
        let mut active = batcher.enter();
        let decided = if active.direct() {
            match active.call(key, now_arg, cost, inner.timeout).await {
                Ok(reply) => self.decode(&reply),
                Err(error) => Err(error),
            }
        } else {
            self.call_batched(batcher, key, now_arg, cost).await
        };
        drop(active);
        decided
    }

    /// One script call of its own, on a Cluster.
    async fn call_direct(
        &self,
        key: &str,
        now_arg: i64,
        cost: u32,
    ) -> Result<Decision, RedisError> {
        let inner = &*self.inner;
        let mut invocation = inner.script.prepare_invoke();
        for suffix in A::KEY_SUFFIXES {
            invocation.key(inner.keys.key(key, suffix));
        }
        invocation.arg(now_arg).arg(cost);
        for param in &inner.params {
            invocation.arg(*param);
        }
        let reply = async {
            match inner.connection.clone() {
                Connection::Single(mut c) => invocation.invoke_async::<Vec<i64>>(&mut c).await,
                Connection::Cluster(mut c) => invocation.invoke_async::<Vec<i64>>(&mut c).await,
            }
        };
        let reply = tokio::time::timeout(inner.timeout, reply)
            .await
            .map_err(|_| RedisError::Timeout)?
            .map_err(|e| {
                // The connection's own response timeout fires about when ours
                // does: count it as a timeout too.
                if e.is_timeout() {
                    RedisError::Timeout
                } else {
                    RedisError::Redis(e)
                }
            })?;
        self.decode(&reply)
    }

    /// Queues the decision with the others waiting (see `batch.rs`).
    async fn call_batched(
        &self,
        batcher: &Batcher,
        key: &str,
        now_arg: i64,
        cost: u32,
    ) -> Result<Decision, RedisError> {
        let reply = batcher.call(key, now_arg, cost, self.inner.timeout).await?;
        self.decode(&reply)
    }

    fn decode(&self, reply: &[i64]) -> Result<Decision, RedisError> {
        let bad = || RedisError::BadReply(format!("{reply:?}"));
        let &[allowed, limit, remaining, reset, retry, delay] = reply else {
            return Err(bad());
        };
        let count = |v: i64| u32::try_from(v).map_err(|_| bad());
        let ticks = |v: i64| {
            u64::try_from(v)
                .map(|t| t.saturating_mul(self.inner.tick_nanos))
                .map_err(|_| bad())
        };
        Ok(Decision::from_parts(
            allowed == 1,
            count(limit)?,
            count(remaining)?,
            ticks(reset)?,
            ticks(retry)?,
            ticks(delay)?,
        ))
    }

    fn cached_denial(&self, key: &str, now: u64, cost: u32) -> Option<Decision> {
        let wait = self.inner.cache.as_ref()?.denied_for(key, now, cost)?;
        let limit = self.inner.algorithm.capacity();
        Some(Decision::deny(limit, 0, wait, wait))
    }

    fn cache_denial(&self, key: &str, now: u64, cost: u32, retry_after: u64) {
        if let Some(cache) = &self.inner.cache {
            cache.insert(key, now, cost, retry_after);
        }
    }

    fn store_down_decision(&self, key: &str, cost: u32) -> RedisDecision {
        let inner = &*self.inner;
        let limit = inner.algorithm.capacity();
        let (decision, source) = match (&inner.store_down, &inner.local) {
            (StoreDown::LocalShare(_), Some(local)) => {
                let decision = local
                    .check_n(key, cost)
                    .unwrap_or_else(|_| Decision::deny(limit, 0, 0, 1_000_000_000));
                bump(&inner.counters.local_share);
                (decision, Source::LocalShare)
            }
            (StoreDown::FailClosed, _) | (StoreDown::LocalShare(_), None) => {
                bump(&inner.counters.fail_closed);
                let retry = 1_000_000_000;
                (Decision::deny(limit, 0, retry, retry), Source::FailClosed)
            }
            (StoreDown::FailOpen, _) => {
                bump(&inner.counters.fail_open);
                (Decision::allow(limit, limit - cost, 0), Source::FailOpen)
            }
        };
        RedisDecision { decision, source }
    }

    /// The counters so far.
    pub fn stats(&self) -> RedisStats {
        let c = &self.inner.counters;
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RedisStats {
            redis: read(&c.redis),
            local_cache: read(&c.local_cache),
            fail_open: read(&c.fail_open),
            fail_closed: read(&c.fail_closed),
            local_share: read(&c.local_share),
            errors: read(&c.errors),
            timeouts: read(&c.timeouts),
        }
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.inner.quota
    }

    /// The Redis keys that hold `key`'s state, one per
    /// [`KEY_SUFFIXES`](RedisAlgorithm::KEY_SUFFIXES) entry: all in one
    /// Cluster slot, whatever `key` is (see the [module docs](super)).
    pub fn redis_keys(&self, key: &str) -> Vec<String> {
        A::KEY_SUFFIXES
            .iter()
            .map(|suffix| self.inner.keys.key(key, suffix))
            .collect()
    }
}

/// A [`RedisLimiter`] for synchronous callers: it owns a small tokio runtime
/// and blocks the calling thread until the decision is made (within the
/// timeout). Safe to build, call and drop from any thread, also one inside
/// another async runtime (it never nests `block_on`, and its runtime shuts
/// down without blocking), though async code should use [`RedisLimiter`]
/// directly.
pub struct BlockingRedisLimiter<A: RedisAlgorithm, C: Clock = QuantaClock> {
    limiter: RedisLimiter<A, C>,
    /// Always `Some` until dropped (taken to shut it down).
    runtime: Option<tokio::runtime::Runtime>,
}

impl<A: RedisAlgorithm, C: Clock> Drop for BlockingRedisLimiter<A, C> {
    fn drop(&mut self) {
        // Dropping a runtime blocks until its tasks stop, which tokio
        // forbids (with a panic) inside an async context; this does not.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl<A: RedisAlgorithm, C: Clock> fmt::Debug for BlockingRedisLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingRedisLimiter")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl<A: RedisAlgorithm, C: Clock> BlockingRedisLimiter<A, C> {
    /// Builds the limiter that `builder` describes on an own runtime.
    ///
    /// # Errors
    ///
    /// As [`RedisLimiterBuilder::build`], and [`RedisError::Runtime`].
    pub fn new(builder: RedisLimiterBuilder<A, C>) -> Result<Self, RedisError>
    where
        C: 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rategate-redis")
            .enable_all()
            .build()
            .map_err(RedisError::Runtime)?;
        match wait_on(&runtime, builder.build()) {
            Some(Ok(limiter)) => Ok(BlockingRedisLimiter {
                limiter,
                runtime: Some(runtime),
            }),
            failed => {
                // Not dropped in place: see `Drop`.
                runtime.shutdown_background();
                Err(match failed {
                    Some(Err(error)) => error,
                    _ => RedisError::Config("the runtime stopped"),
                })
            }
        }
    }

    /// Decides one request of `cost` for `key`, blocking.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass.
    pub fn check_n(&self, key: &str, cost: u32) -> Result<RedisDecision, CheckError> {
        let limiter = self.limiter.clone();
        let owned = key.to_owned();
        // The runtime is set in `new` and taken only in `drop`.
        let decided = self.runtime.as_ref().and_then(|runtime| {
            wait_on(runtime, async move { limiter.check_n(&owned, cost).await })
        });
        decided.unwrap_or_else(|| Ok(self.limiter.store_down_decision(key, cost)))
    }

    /// Decides one request of cost 1 for `key`, blocking.
    ///
    /// # Errors
    ///
    /// None in practice (cost 1 always fits).
    pub fn check(&self, key: &str) -> Result<RedisDecision, CheckError> {
        self.check_n(key, 1)
    }

    /// The async limiter inside.
    pub fn limiter(&self) -> &RedisLimiter<A, C> {
        &self.limiter
    }
}

/// Runs `future` on `runtime` and waits for it on this thread without
/// entering the runtime (so it works from inside another runtime too).
/// `None` if the task was dropped.
fn wait_on<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().ok()
}
