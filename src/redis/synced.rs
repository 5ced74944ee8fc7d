//! Batched sync: local, lock-free decisions, reconciled with Redis in one
//! round trip per node every interval.
//!
//! A [`SyncedLimiter`] decides every request in memory, with the algorithm's
//! own `check` on the key's atomic state, exactly as a
//! [`KeyedRateLimiter`] does: nanoseconds, no
//! network. A background tokio task wakes every interval (1 s by default),
//! takes the keys checked since the last sync with the units each admitted
//! locally, sends them all to Redis in one Lua call (on a Redis Cluster, one
//! pipeline per master: one round trip per node), and brings back each key's
//! global usage. The other nodes' share of it is folded into the local
//! state, so a local decision counts *global usage at the last sync plus
//! local usage since*.
//!
//! # Algorithms
//!
//! [`SyncAlgorithm`] is implemented for:
//!
//! * [`FixedWindow`](crate::FixedWindow): Redis holds one counter per key and
//!   window (`INCRBY` of the node's delta, with a TTL), and each node adds the
//!   other nodes' increase to its window count.
//! * [`SlidingWindowCounter`](crate::SlidingWindowCounter): the same
//!   counters, for the current and the previous window, folded into the
//!   state's two counts.
//! * [`TokenBucket`](crate::TokenBucket) (GCRA): Redis holds a global
//!   theoretical arrival time (TAT). A node sends the debt it added, `cost x
//!   emission interval` summed over its admissions, and its local TAT; Redis
//!   keeps `max(TAT + debt, local TAT)`: debts stack, so every admission is
//!   paid for once, and a local TAT ahead of an idle global one still counts.
//!   The node then sets its TAT to `max(local, global + its advance since the
//!   sync)`, an advance being counted from the later of its TAT at the sync
//!   and the sync's time (so refill during idleness is not taken for use).
//!   Times travel in microseconds, rounded up (at most 1 µs of extra debt
//!   per key and sync).
//!
//! Not supported, and why:
//!
//! * [`SlidingWindowLog`](crate::SlidingWindowLog): its decisions depend on
//!   every admission's timestamp, so a sync would have to ship (and every
//!   node keep) the whole log: as many entries as the limit per key, not a
//!   delta.
//! * [`LeakyBucket`](crate::LeakyBucket): its level drains in arrival order,
//!   and in delay mode each admission's delay depends on exactly which
//!   requests came before it; requests spread over nodes have no such order
//!   until they reach Redis, so deltas cannot be merged after the fact
//!   (merging them as a token bucket would drop the delays, which are the
//!   point of the algorithm).
//!
//! # Overshoot bound
//!
//! Synced limits are soft: between syncs a node does not see what the
//! others admit. Let `I` be the sync interval, `δ` the longest sync round
//! trip (at most the [timeout](SyncedLimiterBuilder::timeout)), and `a_i(x)` the
//! most node `i` admits for a key during any span of length `x`. While every
//! sync succeeds on schedule:
//!
//! > Whenever one limiter would admit at most `B` (fixed window: `limit` per
//! > window; sliding window counter: an estimate of at most `limit`; token
//! > bucket: `capacity + t / T` over any span `t`, `T` the emission
//! > interval), all nodes together admit at most
//! > `B + Σ_{i ≠ j} a_i(2 (I + δ))` for some node `j`.
//!
//! Derivation. After a sync that Redis executes at `τ`, the node's count is
//! `R(τ) + s`: Redis's total at `τ` (every node's admissions up to its last
//! sync executed before `τ`) plus the node's own admissions since it took its
//! deltas (the fold adds exactly the others' increase, by compare-exchange,
//! so concurrent admissions are kept). It admits only while that is within
//! the limit. Take the last admission of the span, by node `j` at `t`, and
//! `j`'s last sync before it, executed at `τ_j`. Everything admitted is either
//! in `R(τ_j)`, or `j`'s own since (both within the limit by `j`'s check), or
//! another node `i`'s admissions that `R(τ_j)` misses: those after `i`'s last
//! sync executed before `τ_j`. That sync took its deltas after
//! `τ_j - (I + δ)`, and `t < τ_j + I + δ` (`j`'s next sync would have
//! folded by then), so they lie in a span shorter than `2 (I + δ)`. For the
//! token bucket the same holds of debt: Redis's TAT is at least
//! `t₀ + T x (cost admitted since t₀)` for every `t₀` (debts stack; the
//! local TAT covers a refilled bucket), so `j`'s check bounds all but the
//! missed admissions by `capacity + (t - t₀) / T`.
//!
//! In numbers: `a_i(x)` is at most node `i`'s offered load over `x`, and at
//! most `limit` per window (fixed window) or `capacity + x / T` (token
//! bucket, whose local TAT refills at the quota's rate whatever others do).
//! With `N` nodes each offered `λ` requests a second, the overshoot is at
//! most `(N - 1) x min(limit, 2 λ (I + δ))` per window for the fixed window;
//! for the token bucket at most `(N - 1) x min(λ, rate) x 2 (I + δ)` over any
//! span under steady overload (where every node's bucket is empty after each
//! sync and refills at `rate = 1 / T`), *not* per window: debt beyond the
//! capacity pushes the global TAT into the future and every node denies
//! until it is paid back. A fixed window synced about as often as it is
//! long is no limit at all (each node may admit the whole window's limit
//! before its first sync in it): make the interval a small fraction of the
//! period. `examples/multi_node.rs` measures it with 4 processes sharing
//! 1000/s, offered 3000/s for 10 s: fixed window +23% at `I = 100 ms` (bound
//! +47%) and +200% at `I = 1 s` (bound +300%); token bucket +1.4% and +16%
//! (bounds +4% and +41%); leases +0%.
//!
//! What the bound leaves out: a node's first check of a key starts from an
//! empty local state (it learns the global usage at its first sync); counts
//! are clamped to the limit, so the sliding window counter forgets any
//! overshoot beyond the limit when it weighs the previous window; admissions
//! that race with a sync can be sent twice (counted twice: conservative).
//!
//! # Redis unreachable
//!
//! Every call has a [timeout](SyncedLimiterBuilder::timeout). When a sync fails,
//! the taken deltas go back into the keys' pending units (deltas of windows
//! that no decision can see any more are dropped), decisions go on locally,
//! and with an [local share](SyncedLimiterBuilder::local_share) below 1 each key
//! whose node failed is also held to that share of its quota by a local
//! limiter until a sync of that node succeeds (with `N` nodes, `1 / N` keeps
//! the global rate near the limit). On a Cluster this is tracked per slot
//! range: a dead master degrades only the keys it serves.
//! The next successful sync reconciles: Redis gets every kept delta. If Redis
//! came back empty (a restart without persistence), each window's hash has a
//! new incarnation id (set by whichever node recreated it), and a node that
//! sees a new id takes everything in the hash but its own delta as news from
//! other nodes, so the views add up exactly again (what Redis lost stays in
//! the nodes' local states until the window ends). A timed-out call that did
//! reach Redis is sent again (counted twice: conservative).
//!
//! # Redis keys
//!
//! * `<prefix>:<alg>:<quota>:{<tag>}:sync:<window>` (window algorithms,
//!   `alg` `fw` or `swc`): a hash, `t` the window's total over all nodes and
//!   `i` its incarnation id; TTL the window's life (one period, two for the
//!   sliding window counter) plus 1 s.
//! * `<prefix>:tb:<quota>:{<tag>}:sync` (token bucket): the global TAT in
//!   microseconds; TTL until it has passed plus 1 s.
//!
//! The tag is the user key escaped (see the [module docs](super)): never
//! empty, never a brace, so all of a key's Redis keys share one Cluster
//! slot. The algorithm and quota in the name keep limiters of different
//! policies apart under one prefix.
//!
//! # Clocks
//!
//! Windows and TATs are compared across nodes, so every node's clock must
//! share one origin: the default [`UnixClock`] counts nanoseconds since the
//! Unix epoch (nodes agree to within their NTP error), and tests use one
//! [`ManualClock`](crate::ManualClock) for all nodes.

mod builder;
mod degraded;
mod merge;
pub(crate) mod store;

pub use builder::SyncedLimiterBuilder;

use super::RedisError;
use super::connection::{Target, share_limiter};
use super::key::{KeySpace, quota_segment};
use super::task::{Control, TaskSlot};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use crate::{CheckError, Clock, Decision, KeyedRateLimiter, Quota, UnixClock};
use dashmap::DashMap;
use degraded::DegradedSlots;
use merge::{Pending, Sealed, Shape};
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};
use store::{Lua, Record, Store};

/// An algorithm a [`SyncedLimiter`] can sync: [`FixedWindow`](crate::FixedWindow),
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) and
/// [`TokenBucket`](crate::TokenBucket). Sealed; the [module docs](self) say
/// why the others are not.
pub trait SyncAlgorithm: Sealed {}

impl SyncAlgorithm for crate::FixedWindow {}
impl SyncAlgorithm for crate::SlidingWindowCounter {}
impl SyncAlgorithm for crate::TokenBucket {}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A random incarnation id for the Redis hashes a sync creates: below
/// 2^52 (exact in Lua), never 0 (which means "no hash").
fn incarnation() -> i64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    let bits = hasher.finish() & ((1 << 52) - 1);
    // At most 2^52: fits an i64.
    bits.max(1) as i64
}

/// Syncs in which a key checked (but admitting nothing) is still synced,
/// so that a node that only denies learns when room frees up.
const LINGER: u64 = 2;

/// The TTL margin for clock skew between nodes, in milliseconds.
const TTL_MARGIN_MS: i64 = 1_000;

/// Counters of a [`SyncedLimiter`], read with [`SyncedLimiter::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncStats {
    /// Sync rounds that reached Redis and succeeded (rounds with nothing
    /// to send are not counted).
    pub syncs: u64,
    /// Keys synced, summed over successful rounds.
    pub keys_synced: u64,
    /// Round trips to Redis (one per node per round, plus script reloads).
    pub round_trips: u64,
    /// Failed round trips (connection errors, error replies, timeouts).
    pub errors: u64,
    /// Of [`errors`](SyncStats::errors), those that timed out.
    pub timeouts: u64,
    /// How long the last round's Redis exchange took, success or failure.
    pub last_sync_latency: Duration,
    /// Units of windows that no decision could see any more when they were
    /// to be sent (after a long outage, or with an interval beyond the
    /// period): dropped, not sent.
    pub stale_units: u64,
    /// Whether the last sync of some keys failed: their decisions are
    /// local only (and held to the local share) until a sync of their
    /// node succeeds. On a Cluster this is per master (per slot range).
    pub degraded: bool,
}

#[derive(Debug, Default)]
struct Counters {
    syncs: AtomicU64,
    keys_synced: AtomicU64,
    round_trips: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    last_latency_nanos: AtomicU64,
    stale_units: AtomicU64,
}

/// One key: its algorithm state, what it has not sent yet, and what the
/// sync last learnt.
#[derive(Debug, Default)]
struct Entry {
    /// The algorithm's state: global usage at the last sync plus local
    /// usage since, decided on by the algorithm's `check`.
    state: AtomicU64,
    /// Window algorithms: admitted units not sent yet, per window.
    pending: Pending,
    /// Token bucket: admitted cost not sent yet.
    units: AtomicU64,
    /// Syncs left in which to sync this key even without pending units;
    /// reset to [`LINGER`] by every check.
    linger: AtomicU64,
    /// 1 once a sync has brought this key's global usage back: until then
    /// the node has not heard what the others admitted, and the key is held
    /// to the local share (see `SyncedLimiter::check_n`).
    heard: AtomicU64,
    /// Window algorithms: per window, the global total this node has folded
    /// in (its own sent units included) and the incarnation id of the Redis
    /// hash it came from. Only the sync, serialized by the sync lock,
    /// touches it.
    seen: Mutex<Vec<Seen>>,
}

/// What a node knows of one window of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    window: u64,
    total: u64,
    incarnation: u64,
}

/// What one sync took from one key.
struct Taken {
    entry: Arc<Entry>,
    /// Window algorithms: `(window, units)`, one per record.
    windows: Vec<(u64, u64)>,
    /// Token bucket: the cost taken and the fold's reference time.
    units: u64,
    reference: u64,
    /// Index of the key's first record in the batch.
    first: usize,
}

/// A keyed rate limiter that decides locally and syncs usage with Redis in
/// batches; see the [module docs](self) for the design and its overshoot
/// bound.
///
/// Cheap to clone; clones share the keys, the connection and the sync task.
/// The task stops when the last clone is dropped; call
/// [`shutdown`](SyncedLimiter::shutdown) first to flush what was not sent.
///
/// # Examples
///
/// ```no_run
/// use rategate::redis::SyncedLimiter;
/// use rategate::{Quota, SlidingWindowCounter};
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = SyncedLimiter::<SlidingWindowCounter>::builder(Quota::per_minute(600)?)
///     .url("redis://127.0.0.1:6379/")
///     .interval(Duration::from_millis(200))
///     .local_share(0.25) // four app servers
///     .build()
///     .await?;
/// let decision = limiter.check("api-key-7"); // local: no await
/// assert!(decision.is_allowed());
/// limiter.shutdown().await?; // flushes the last deltas
/// # Ok(())
/// # }
/// ```
pub struct SyncedLimiter<A: SyncAlgorithm, C: Clock = UnixClock> {
    handle: Arc<Handle<A, C>>,
}

impl<A: SyncAlgorithm, C: Clock> Clone for SyncedLimiter<A, C> {
    fn clone(&self) -> Self {
        SyncedLimiter {
            handle: Arc::clone(&self.handle),
        }
    }
}

impl<A: SyncAlgorithm, C: Clock> fmt::Debug for SyncedLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.handle.inner;
        f.debug_struct("SyncedLimiter")
            .field("quota", &inner.quota)
            .field("prefix", &inner.prefix)
            .field("interval", &inner.interval)
            .field("keys", &inner.map.len())
            .finish_non_exhaustive()
    }
}

/// Owns the task; dropping the last limiter clone stops it.
struct Handle<A: SyncAlgorithm, C: Clock> {
    inner: Arc<Inner<A, C>>,
    task: TaskSlot,
}

struct Inner<A: SyncAlgorithm, C: Clock> {
    algorithm: A,
    quota: Quota,
    /// The quota's limit and period, for window maths.
    limit: u64,
    period: u64,
    /// Token bucket: the emission interval in nanoseconds.
    emission: u64,
    clock: C,
    map: DashMap<String, Arc<Entry>>,
    store: Store,
    lua: Lua,
    prefix: String,
    /// Where the keys' global usage lives in Redis.
    keys: KeySpace,
    interval: Duration,
    /// Decides alongside the synced state while Redis is unreachable.
    local: Option<KeyedRateLimiter<String, A, C>>,
    /// The Cluster slots (all of them on a single server) whose last sync
    /// failed: their keys are held to the local share.
    degraded: DegradedSlots,
    counters: Counters,
    /// One sync at a time (the task, `sync_now`, `shutdown`).
    sync_lock: tokio::sync::Mutex<()>,
}

impl<A: SyncAlgorithm, C: Clock> SyncedLimiter<A, C> {
    /// Decides one request of cost 1 for `key`, locally.
    pub fn check(&self, key: &str) -> Decision {
        self.check_n(key, 1)
            .unwrap_or_else(crate::limiter::never_passes)
    }

    /// Decides one request of `cost` for `key`, locally and lock-free (a
    /// key's first check inserts it under its map shard's lock), and
    /// records it for the next sync if admitted.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass.
    pub fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        let inner = &*self.handle.inner;
        let capacity = inner.algorithm.capacity();
        crate::algorithm::check_cost(cost, capacity)?;
        let now = inner.clock.now();
        match inner.map.get(key) {
            Some(entry) => inner.decide(key, &entry, now, cost),
            None => {
                // Decide under the shard's write lock, so that a sweep
                // cannot drop the new entry between insert and admission.
                let entry = inner.map.entry(key.to_owned()).or_default();
                inner.decide(key, entry.value(), now, cost)
            }
        }
    }

    /// Syncs now: sends every pending delta and brings back the global
    /// usage of the keys checked lately. Returns how many keys were synced.
    /// Waits for a sync in progress (the task's) to finish first.
    ///
    /// # Errors
    ///
    /// The first failure of the round ([`RedisError::Timeout`],
    /// [`RedisError::Redis`], ...); the keys of failed nodes keep their
    /// deltas for the next round.
    pub async fn sync_now(&self) -> Result<usize, RedisError> {
        self.handle.inner.sync_round().await
    }

    /// Starts the background sync task on the current tokio runtime, if it
    /// is not running.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] outside a tokio runtime, or with an interval
    /// above half the quota's period (see [`SyncedLimiterBuilder::interval`]).
    pub fn start(&self) -> Result<(), RedisError> {
        let inner = Arc::clone(&self.handle.inner);
        if inner.interval.saturating_mul(2) > inner.quota.period() {
            return Err(RedisError::Config(
                "the sync interval must be at most half the quota's period: with a longer one \
                 every node may admit a whole period's limit before it hears from the others",
            ));
        }
        self.handle.task.start(
            || Arc::new(Control::default()),
            |control| run_task(inner, control),
        )
    }

    /// Stops the background task (waiting for a sync in progress), without
    /// a final sync. Decisions go on locally.
    pub async fn stop(&self) {
        self.handle.task.stop().await;
    }

    /// Stops the background task and flushes every pending delta to Redis.
    /// Decisions still work afterwards, locally, but nothing is synced
    /// unless [`start`](SyncedLimiter::start) or
    /// [`sync_now`](SyncedLimiter::sync_now) is called.
    ///
    /// # Errors
    ///
    /// As [`sync_now`](SyncedLimiter::sync_now): the deltas of a failed
    /// flush stay pending.
    pub async fn shutdown(&self) -> Result<(), RedisError> {
        self.stop().await;
        self.handle.inner.sync_round().await.map(|_| ())
    }

    /// The counters so far.
    pub fn stats(&self) -> SyncStats {
        let inner = &*self.handle.inner;
        let c = &inner.counters;
        // Relaxed: statistics.
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SyncStats {
            syncs: read(&c.syncs),
            keys_synced: read(&c.keys_synced),
            round_trips: read(&c.round_trips),
            errors: read(&c.errors),
            timeouts: read(&c.timeouts),
            last_sync_latency: Duration::from_nanos(read(&c.last_latency_nanos)),
            stale_units: read(&c.stale_units),
            degraded: inner.degraded.any(),
        }
    }

    /// The number of keys held locally.
    pub fn len(&self) -> usize {
        self.handle.inner.map.len()
    }

    /// Whether no key is held locally.
    pub fn is_empty(&self) -> bool {
        self.handle.inner.map.is_empty()
    }

    /// The quota every key gets.
    pub fn quota(&self) -> Quota {
        self.handle.inner.quota
    }

    /// The sync interval.
    pub fn interval(&self) -> Duration {
        self.handle.inner.interval
    }

    /// The Redis keys a sync now would use for `key`: the windows a
    /// decision still looks at (window algorithms), or the key's global TAT
    /// (token bucket). All in one Cluster slot, whatever `key` is.
    pub fn redis_keys(&self, key: &str) -> Vec<String> {
        let inner = &*self.handle.inner;
        let shape = inner.algorithm.shape();
        if !shape.windowed() {
            return vec![inner.key(key, None)];
        }
        let current = inner.clock.now() / inner.period;
        (current.saturating_sub(shape.lookback())..=current)
            .map(|w| inner.key(key, Some(w)))
            .collect()
    }
}

/// The background task: a sync every interval until stopped.
async fn run_task<A: SyncAlgorithm, C: Clock>(inner: Arc<Inner<A, C>>, control: Arc<Control>) {
    let mut next = tokio::time::Instant::now() + inner.interval;
    loop {
        // A wake before the deadline is a stop; the timeout is the tick.
        let _ = tokio::time::timeout_at(next, control.wake.notified()).await;
        if control.stopped() {
            return;
        }
        // Errors are counted in the stats and retried next interval.
        let _ = inner.sync_round().await;
        next += inner.interval;
        let now = tokio::time::Instant::now();
        if next < now {
            // Fell behind (a slow Redis): skip the missed ticks.
            next = now + inner.interval;
        }
    }
}

impl<A: SyncAlgorithm, C: Clock> Inner<A, C> {
    /// Decides for `key`: the local share first where this node has not
    /// heard the key's global usage (a key not synced yet, or whose node
    /// failed its last sync), then the synced state.
    fn decide(
        &self,
        key: &str,
        entry: &Entry,
        now: u64,
        cost: u32,
    ) -> Result<Decision, CheckError> {
        if let Some(local) = &self.local {
            // Relaxed: a flag the sync sets; a decision made a moment
            // before it is seen is one the share also allows.
            let unheard = entry.heard.load(Ordering::Relaxed) == 0;
            // On a Cluster a dead master must not throttle the keys of
            // the live ones: degraded is per slot.
            let degraded = self.degraded.is_degraded(key);
            if degraded {
                // A key never heard counts too: its first sync failed.
                crate::metrics::store_down_by("local_share");
            }
            if unheard || degraded {
                match local.check_n(key, cost) {
                    Ok(decision) if decision.is_allowed() => {}
                    Ok(decision) => return Ok(decision),
                    // Beyond the share's capacity: cannot pass until Redis
                    // is heard, which the next sync may bring.
                    Err(_) => {
                        let capacity = self.algorithm.capacity();
                        let retry = duration_nanos(self.interval);
                        return Ok(Decision::deny(capacity, 0, retry, retry));
                    }
                }
            }
        }
        self.admit(entry, now, cost)
    }

    fn admit(&self, entry: &Entry, now: u64, cost: u32) -> Result<Decision, CheckError> {
        let decision = self.algorithm.check(&entry.state, now, cost)?;
        // Relaxed: a hint for the sync; written only when it changes, so a
        // hot key's checks do not all write the same cache line.
        if entry.linger.load(Ordering::Relaxed) != LINGER {
            entry.linger.store(LINGER, Ordering::Relaxed);
        }
        if decision.is_allowed() && cost > 0 {
            let shape = self.algorithm.shape();
            if shape.windowed() {
                let window = shape.admitted_window(self.period, now, &decision);
                entry.pending.add(window, u64::from(cost));
            } else {
                // Relaxed: the sync takes it with a swap (see Pending::add).
                entry.units.fetch_add(u64::from(cost), Ordering::Relaxed);
            }
        }
        Ok(decision)
    }

    fn key(&self, key: &str, window: Option<u64>) -> String {
        match window {
            Some(w) => self.keys.key(key, &format!("sync:{w}")),
            None => self.keys.key(key, "sync"),
        }
    }

    /// One sync round: take, send, fold (or put back), sweep.
    async fn sync_round(&self) -> Result<usize, RedisError> {
        let _one = self.sync_lock.lock().await;
        let now = self.clock.now();
        let shape = self.algorithm.shape();
        let (taken, records, header) = if shape.windowed() {
            self.take_windows(now, shape)
        } else {
            self.take_units(now)
        };
        if taken.is_empty() {
            self.sweep(now);
            return Ok(0);
        }
        let started = Instant::now();
        let outs = if shape.windowed() { 2 } else { 1 };
        let outcome =
            crate::metrics::timed_redis_call(self.store.run(&self.lua, &header, &records, outs))
                .await;
        if let Some(error) = &outcome.error {
            crate::metrics::store_failure(error);
        }
        let c = &self.counters;
        // Relaxed: statistics.
        c.last_latency_nanos.store(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        c.round_trips
            .fetch_add(outcome.round_trips, Ordering::Relaxed);
        c.errors.fetch_add(outcome.errors, Ordering::Relaxed);
        c.timeouts.fetch_add(outcome.timeouts, Ordering::Relaxed);
        let folded_at = self.clock.now();
        let mut synced = 0;
        for t in &taken {
            let count = if shape.windowed() { t.windows.len() } else { 1 };
            let replies: Option<Vec<&Vec<i64>>> = outcome.replies[t.first..t.first + count]
                .iter()
                .map(Option::as_ref)
                .collect();
            match replies {
                Some(replies) => {
                    synced += 1;
                    // Relaxed: a flag (see `decide`).
                    t.entry.heard.store(1, Ordering::Relaxed);
                    if shape.windowed() {
                        self.fold_windows(t, &replies, folded_at, shape);
                    } else {
                        let tat = replies[0].first().copied().unwrap_or(0);
                        let global = u64::try_from(tat).unwrap_or(0).saturating_mul(1_000);
                        merge::fold_tat(&t.entry.state, global, t.reference);
                    }
                }
                None => self.put_back(t),
            }
        }
        // Relaxed: statistics.
        c.keys_synced.fetch_add(synced as u64, Ordering::Relaxed);
        for &range in &outcome.ok_slots {
            self.degraded.set(range, false);
        }
        for &range in &outcome.failed_slots {
            self.degraded.set(range, true);
        }
        self.sweep(folded_at);
        match outcome.error {
            None => {
                c.syncs.fetch_add(1, Ordering::Relaxed);
                Ok(synced)
            }
            Some(error) => Err(error),
        }
    }

    /// Whether this sync should include the entry, counting down its
    /// linger.
    fn due(entry: &Entry, pending: bool) -> bool {
        // Relaxed: a hint (see `admit`); a check racing with the decrement
        // at worst costs or saves one sync of the key.
        let linger = entry.linger.load(Ordering::Relaxed);
        if linger > 0 {
            entry.linger.store(linger - 1, Ordering::Relaxed);
        }
        pending || linger > 0
    }

    /// Window algorithms: takes the pending units of every key due, with
    /// one record per window to send or read (the current window, and the
    /// previous one for the sliding window counter, always).
    fn take_windows(&self, now: u64, shape: Shape<'_>) -> (Vec<Taken>, Vec<Record>, Vec<i64>) {
        let current = now / self.period;
        // Windows read back: those a decision here still looks at.
        let oldest = current.saturating_sub(shape.lookback());
        // Windows sent: also the previous one for the fixed window, which a
        // node whose clock lags a little may still be deciding in.
        let keep = current.saturating_sub(1);
        let (mut taken, mut records) = (Vec::new(), Vec::new());
        for item in self.map.iter() {
            let entry = item.value();
            if !Self::due(entry, !entry.pending.is_empty()) {
                continue;
            }
            let mut windows: Vec<(u64, u64)> = (oldest..=current).map(|w| (w, 0)).collect();
            for (window, units) in entry.pending.take(current) {
                if window < keep {
                    // Relaxed: statistics.
                    self.counters
                        .stale_units
                        .fetch_add(units, Ordering::Relaxed);
                    continue;
                }
                match windows.iter_mut().find(|(w, _)| *w == window) {
                    Some(slot) => slot.1 += units,
                    None => windows.push((window, units)),
                }
            }
            windows.sort_unstable();
            let first = records.len();
            for &(window, units) in &windows {
                records.push(Record {
                    keys: vec![self.key(item.key(), Some(window))],
                    args: vec![i64::try_from(units).unwrap_or(i64::MAX)],
                });
            }
            taken.push(Taken {
                entry: Arc::clone(entry),
                windows,
                units: 0,
                reference: 0,
                first,
            });
        }
        // A window's count matters for one period (fixed) or two (sliding),
        // measured from its start; the TTL runs from now, within it.
        let life = u128::from(self.period) * u128::from(1 + shape.lookback());
        let ttl_ms = i64::try_from(life.div_ceil(1_000_000)).unwrap_or(i64::MAX / 2);
        let header = vec![ttl_ms.saturating_add(TTL_MARGIN_MS), incarnation()];
        (taken, records, header)
    }

    /// Token bucket: takes the pending cost of every key due, with its
    /// local TAT.
    fn take_units(&self, now: u64) -> (Vec<Taken>, Vec<Record>, Vec<i64>) {
        let (mut taken, mut records) = (Vec::new(), Vec::new());
        let micros = |ns: u64| i64::try_from(ns.div_ceil(1_000)).unwrap_or(i64::MAX);
        for item in self.map.iter() {
            let entry = item.value();
            // Relaxed: see `Pending::add`; the swap sees every earlier add.
            if !Self::due(entry, entry.units.load(Ordering::Relaxed) > 0) {
                continue;
            }
            let units = entry.units.swap(0, Ordering::Relaxed);
            // Read after the swap: every taken unit's admission is in it.
            let tat = entry.state.load(Ordering::Relaxed);
            let debt =
                u64::try_from(u128::from(units) * u128::from(self.emission)).unwrap_or(u64::MAX);
            if tat.div_ceil(1_000) >= super::LUA_EXACT / 2 || debt >= super::LUA_EXACT {
                // Beyond Lua's exact integers (2^52 µs: the year 2112 on
                // the wall clock): kept local.
                entry.units.fetch_add(units, Ordering::Relaxed);
                continue;
            }
            records.push(Record {
                keys: vec![self.key(item.key(), None)],
                args: vec![micros(debt), micros(tat)],
            });
            taken.push(Taken {
                entry: Arc::clone(entry),
                windows: Vec::new(),
                units,
                reference: tat.max(now),
                first: records.len() - 1,
            });
        }
        (taken, records, vec![micros(now), TTL_MARGIN_MS])
    }

    /// Folds the other nodes' increase of each window into the state.
    fn fold_windows(&self, t: &Taken, replies: &[&Vec<i64>], now: u64, shape: Shape<'_>) {
        let mut seen = t.entry.seen.lock();
        for (&(window, sent), reply) in t.windows.iter().zip(replies) {
            let &[total, incarnation] = reply.as_slice() else {
                continue;
            };
            let total = u64::try_from(total).unwrap_or(0);
            let incarnation = u64::try_from(incarnation).unwrap_or(0);
            let known = seen.iter_mut().find(|s| s.window == window);
            let others = match &known {
                // The same hash as last time: its growth beyond our own
                // units is the others'. (Less than we knew cannot happen
                // to one hash; take it as a fresh start all the same.)
                Some(k) if k.incarnation == incarnation => total
                    .checked_sub(k.total + sent)
                    .unwrap_or_else(|| total.saturating_sub(sent)),
                // First sight of this window, or a hash created anew (Redis
                // lost its data, or the key expired): all of it but our own
                // units is news.
                _ => total.saturating_sub(sent),
            };
            let now_seen = Seen {
                window,
                total,
                incarnation,
            };
            match known {
                Some(k) => *k = now_seen,
                None => seen.push(now_seen),
            }
            shape.fold_window(&t.entry.state, now, window, others, self.limit);
        }
        // Only windows a decision can still see are worth remembering.
        let oldest = (now / self.period).saturating_sub(shape.lookback());
        seen.retain(|s| s.window >= oldest);
    }

    /// A failed key keeps what was taken, for the next round.
    fn put_back(&self, t: &Taken) {
        for &(window, units) in &t.windows {
            t.entry.pending.add(window, units);
        }
        // Relaxed: see `Pending::add`.
        t.entry.units.fetch_add(t.units, Ordering::Relaxed);
        t.entry.linger.store(LINGER, Ordering::Relaxed);
    }

    /// Drops keys whose state is idle and that have nothing to send.
    fn sweep(&self, now: u64) {
        // `retain` holds each shard's write lock: no check is using an
        // entry while it is judged and dropped.
        self.map.retain(|_, entry| {
            // Relaxed: under the shard's write lock, no check runs on it.
            entry.linger.load(Ordering::Relaxed) > 0
                || !entry.pending.is_empty()
                || entry.units.load(Ordering::Relaxed) > 0
                || !self.algorithm.is_idle(&entry.state, now)
        });
    }
}
