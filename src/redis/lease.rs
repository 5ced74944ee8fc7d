//! Quota leases: a hard global bound with local decisions.
//!
//! Each window of each key has a budget of `limit` units in Redis
//! (fixed windows of the quota's period). A node takes a *slice* of it, sized
//! by its recent demand, and admits locally, lock-free, until the slice is
//! spent; a background task renews slices before they run out (as soon as a
//! check leaves less than about one tick's demand, and for the next window
//! shortly before it starts), and gives back the slices of keys that saw no
//! traffic during a tick. The script grants `min(asked, limit - granted)`
//! atomically, so the units granted for a window never exceed the limit,
//! and a node admits only units granted to it for the window it is in:
//!
//! > For every key and window, the admissions of all nodes together never
//! > exceed the limit.
//!
//! * A slice dies with its window (its Redis key expires); a return adds
//!   back only to the window it came from, while that window lasts.
//! * A node with no traffic holds no quota: an idle tick returns its slices.
//! * When the slice cannot cover a check's cost, the check **denies** (never
//!   exceeds) and asks for a renewal at least as large as that cost (a
//!   cost above the usual slice size still passes once the window's budget
//!   allows it), with a `retry_after` of the last renewal's round trip; or
//!   of the window's end once Redis has said that what is left of the
//!   window's budget, with what this node holds, cannot cover the cost.
//!   [`acquire_n`](LeasedLimiter::acquire_n) instead waits for the renewal.
//! * Redis unreachable: nodes admit what they hold and deny beyond it; the
//!   bound holds through the outage. Units of a request that timed out are
//!   counted as granted in Redis and never used (under-admission, never
//!   over); a failed return loses its units the same way. So after a
//!   failed round the next waits (the interval doubled per failed round in
//!   a row, at most 1 s: [`RedisError::Backoff`]) and asks for the
//!   smallest slice only, and grants that too few replicas acknowledged
//!   ([`RedisError::NotReplicated`]) are given back at once: a slow Redis
//!   or a lagging replica spends the window's budget a slice at a time.
//! * The bound assumes Redis keeps its data: a Redis that restarts empty in
//!   the middle of a window forgets what it granted in it.
//!
//! Every window of a key costs about one round trip per node per tick while
//! the key is busy, so leases cost a little more Redis traffic than the
//! [synced limiter](super::SyncedLimiter) but no overshoot; unused slices
//! held at a window's end are lost to that window (a small under-admission).
//!
//! Redis keys: `<prefix>:<limit>/<period>:{<tag>}:lease:<window>` (the tag
//! is the user key escaped, see the [module docs](super)), the units of that window's
//! budget granted and not returned, with a TTL of two periods plus 1 s (never
//! shorter than the window on any node's clock: an early expiry would reopen
//! the budget). Clocks: as for the synced limiter, every node needs the same
//! origin ([`UnixClock`]).

mod builder;

pub use builder::LeasedLimiterBuilder;

use super::RedisError;
use super::connection::Target;
use super::key::{KeySpace, quota_segment};
use super::synced::store::{Lua, Record, Store};
use super::task::{Control, TaskSlot};
use crate::UnixClock;
use crate::algorithm::check_cost;
use crate::sync::{Arc, AtomicU64, Ordering};
use crate::{CheckError, Clock, Decision, Quota};
use dashmap::DashMap;
use std::fmt;
use std::time::{Duration, Instant};

const TAG_MASK: u64 = u32::MAX as u64;

/// Counters of a [`LeasedLimiter`], read with [`LeasedLimiter::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Renewal rounds that reached Redis.
    pub rounds: u64,
    /// Round trips to Redis.
    pub round_trips: u64,
    /// Units asked for, and of them granted.
    pub asked: u64,
    /// See [`asked`](LeaseStats::asked).
    pub granted: u64,
    /// Units given back (idle keys, shutdown).
    pub returned: u64,
    /// Failed round trips (connection errors, error replies, timeouts).
    pub errors: u64,
    /// Of [`errors`](LeaseStats::errors), those that timed out.
    pub timeouts: u64,
    /// How long the last round's Redis exchange took.
    pub last_latency: Duration,
}

#[derive(Debug, Default)]
struct Counters {
    rounds: AtomicU64,
    round_trips: AtomicU64,
    asked: AtomicU64,
    granted: AtomicU64,
    returned: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    last_latency_nanos: AtomicU64,
}

/// One key's lease.
#[derive(Debug, Default)]
struct Lease {
    /// Units this node may still admit, per window: two slots, for windows
    /// of each parity, each `tag << 32 | units` with `tag` the window's low
    /// 32 bits. A slot holding another window than the one asked about holds
    /// nothing for it.
    slots: [AtomicU64; 2],
    /// Units admitted and units denied since the last regular tick: the
    /// demand that sizes the next slice.
    used: AtomicU64,
    denied: AtomicU64,
    /// 1: a check asked for a renewal that has not been made yet.
    wanted: AtomicU64,
    /// The slice size last chosen; a check that leaves fewer units than
    /// half of it asks for a renewal.
    target: AtomicU64,
    /// The largest cost denied since the last round: the next slice is at
    /// least this large, so that any cost within the limit can pass.
    need: AtomicU64,
    /// What Redis last said is left of a window's budget (not granted to
    /// any node): `tag << 32 | units`, the tag as in `slots`; 0: unknown.
    room: AtomicU64,
}

impl Lease {
    fn slot(&self, window: u64) -> &AtomicU64 {
        &self.slots[(window & 1) as usize]
    }

    /// Units held for `window`.
    fn held(&self, window: u64) -> u64 {
        // Relaxed: the slot is self-contained; every change to it is a
        // compare-exchange on the one word.
        let word = self.slot(window).load(Ordering::Relaxed);
        if word >> 32 == window & TAG_MASK {
            word & TAG_MASK
        } else {
            0
        }
    }

    /// Spends `cost` units of `window` if held: the units left, or `None`.
    fn spend(&self, window: u64, cost: u64) -> Option<u64> {
        let slot = self.slot(window);
        // Relaxed: see `held`. The compare-exchange never lets two checks
        // spend the same unit.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let units = word & TAG_MASK;
            if word >> 32 != window & TAG_MASK || units < cost {
                return None;
            }
            match slot.compare_exchange_weak(
                word,
                word - cost,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(units - cost),
                Err(observed) => word = observed,
            }
        }
    }

    /// Adds `units` granted for `window`. A slot holding an older window
    /// (of the same parity: over) is replaced; if it holds a newer one,
    /// `window` is over and the units are dropped (never used: safe).
    fn credit(&self, window: u64, units: u64) {
        let slot = self.slot(window);
        let tag = window & TAG_MASK;
        // Relaxed: see `held`.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let have = word >> 32;
            let ahead = ((have.wrapping_sub(tag) & TAG_MASK) as u32 as i32) > 0;
            let new = if have == tag {
                (tag << 32) | ((word & TAG_MASK) + units).min(TAG_MASK)
            } else if !ahead || word & TAG_MASK == 0 {
                (tag << 32) | units.min(TAG_MASK)
            } else {
                return;
            };
            match slot.compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(observed) => word = observed,
            }
        }
    }

    /// What Redis last said is left of `window`'s budget, if it said.
    fn room(&self, window: u64) -> Option<u64> {
        // Relaxed: a hint written by the rounds; stale only until the next.
        let word = self.room.load(Ordering::Relaxed);
        (word != 0 && word >> 32 == (window & TAG_MASK) + 1).then_some(word & TAG_MASK)
    }

    /// Records what is left of `window`'s budget (`units` below 2^32: the
    /// limit is a u32).
    fn set_room(&self, window: u64, units: u64) {
        // The tag is offset by one so that a word of 0 means "unknown".
        let word = (((window & TAG_MASK) + 1) << 32) | units.min(TAG_MASK);
        self.room.store(word, Ordering::Relaxed);
    }

    /// Whether `cost` cannot pass in `window` whatever renewals do: what
    /// this node holds plus what Redis last said is left is too little.
    fn cannot_fit(&self, window: u64, cost: u64) -> bool {
        self.room(window)
            .is_some_and(|room| self.held(window) + room < cost)
    }

    /// Takes every unit held for `window` (to give them back).
    fn drain(&self, window: u64) -> u64 {
        let slot = self.slot(window);
        // Relaxed: see `held`. Once taken, no check can spend them.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            if word >> 32 != window & TAG_MASK || word & TAG_MASK == 0 {
                return 0;
            }
            match slot.compare_exchange_weak(
                word,
                word & !TAG_MASK,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return word & TAG_MASK,
                Err(observed) => word = observed,
            }
        }
    }

    /// Whether the lease holds nothing and nobody wants anything of it.
    fn idle(&self) -> bool {
        // Relaxed: read under the map shard's write lock (no check runs).
        self.slots
            .iter()
            .all(|s| s.load(Ordering::Relaxed) & TAG_MASK == 0)
            && self.used.load(Ordering::Relaxed) == 0
            && self.denied.load(Ordering::Relaxed) == 0
            && self.wanted.load(Ordering::Relaxed) == 0
    }
}

/// A keyed limiter with a hard global bound: each node decides locally on
/// a slice of the key's window budget leased from Redis; see the
/// [module docs](self).
///
/// Cheap to clone; clones share the leases, the connection and the task.
/// The task stops when the last clone is dropped; call
/// [`shutdown`](LeasedLimiter::shutdown) first to give the slices back.
///
/// # Examples
///
/// ```no_run
/// use rategate::redis::LeasedLimiter;
/// use rategate::Quota;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = LeasedLimiter::builder(Quota::per_second(1_000)?)
///     .url("redis://127.0.0.1:6379/")
///     .build()
///     .await?;
/// // The first check of a key has no slice yet: wait for one.
/// let first = limiter.acquire("tenant-1").await?;
/// // Then local and lock-free until the slice runs low.
/// let next = limiter.check("tenant-1");
/// # let _ = (first, next);
/// limiter.shutdown().await?; // returns the unused slices
/// # Ok(())
/// # }
/// ```
pub struct LeasedLimiter<C: Clock = UnixClock> {
    handle: Arc<Handle<C>>,
}

impl<C: Clock> Clone for LeasedLimiter<C> {
    fn clone(&self) -> Self {
        LeasedLimiter {
            handle: Arc::clone(&self.handle),
        }
    }
}

impl<C: Clock> fmt::Debug for LeasedLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.handle.inner;
        f.debug_struct("LeasedLimiter")
            .field("quota", &inner.quota)
            .field("prefix", &inner.prefix)
            .field("interval", &inner.interval)
            .field("keys", &inner.map.len())
            .finish_non_exhaustive()
    }
}

/// Owns the task; dropping the last limiter clone stops it.
struct Handle<C: Clock> {
    inner: Arc<Inner<C>>,
    task: TaskSlot,
}

struct Inner<C: Clock> {
    quota: Quota,
    limit: u64,
    period: u64,
    clock: C,
    map: DashMap<String, Arc<Lease>>,
    store: Store,
    lua: Lua,
    prefix: String,
    /// Where the windows' budgets live in Redis.
    keys: KeySpace,
    interval: Duration,
    min_slice: u64,
    max_slice: u64,
    counters: Counters,
    /// Wakes the task for renewals that cannot wait for the tick (a wake
    /// with no task running is kept for the next one: harmless).
    control: Arc<Control>,
    /// One round at a time, and what the rounds remember.
    round_lock: tokio::sync::Mutex<RoundState>,
}

/// What a round leaves for the next.
#[derive(Debug, Default)]
pub(crate) struct RoundState {
    /// Rounds in a row that failed.
    failures: u32,
    /// No round before this instant, after failures (real time: the
    /// limiter's clock places windows, and may be a test's, standing
    /// still).
    retry_at: Option<tokio::time::Instant>,
}

/// Whether a round is the regular tick (which measures demand and returns
/// idle slices) or an early renewal for the keys that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    Tick,
    Renew,
}

impl<C: Clock> LeasedLimiter<C> {
    /// Decides one request of cost 1 for `key`, locally.
    pub fn check(&self, key: &str) -> Decision {
        self.check_n(key, 1)
            .unwrap_or_else(crate::limiter::never_passes)
    }

    /// Decides one request of `cost` for `key` on this node's slice of the
    /// current window, lock-free (a key's first check inserts it under its
    /// map shard's lock). When the slice cannot cover `cost` the request is
    /// denied and a renewal is asked for.
    ///
    /// Decision fields: `limit` is the quota's limit; `remaining` the units
    /// this node still holds for the window (what it can admit without
    /// Redis); `reset_after` the time to the window's end.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` exceeds the limit.
    pub fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        let inner = &*self.handle.inner;
        check_cost(cost, inner.quota.limit())?;
        let now = inner.clock.now();
        match inner.map.get(key) {
            Some(lease) => Ok(inner.decide(&lease, now, cost)),
            None => {
                // Decide under the shard's write lock, so that a sweep
                // cannot drop the new lease between insert and decision.
                let lease = inner.map.entry(key.to_owned()).or_default();
                Ok(inner.decide(lease.value(), now, cost))
            }
        }
    }

    /// As [`check`](LeasedLimiter::check), but waits for a renewal when the
    /// slice cannot cover the request.
    ///
    /// # Errors
    ///
    /// As [`acquire_n`](LeasedLimiter::acquire_n).
    pub async fn acquire(&self, key: &str) -> Result<Decision, CheckError> {
        self.acquire_n(key, 1).await
    }

    /// As [`check_n`](LeasedLimiter::check_n), but when the slice cannot
    /// cover `cost` and the window's budget is not known to be spent, makes
    /// the renewal now and decides again: it waits for the round in
    /// progress (within the timeout) and makes one only if that round did
    /// not cover `cost`, so concurrent callers share rounds. The first
    /// request of a key on a node goes this way.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` exceeds the limit.
    /// Redis failing is not an error: the request is denied.
    pub async fn acquire_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        let decision = self.check_n(key, cost)?;
        let inner = &self.handle.inner;
        if decision.is_allowed() || inner.cannot_fit(key, u64::from(cost)) {
            return Ok(decision);
        }
        // Errors are counted; the decision below then denies.
        let renewed = inner.renew_for(key, cost).await;
        let decision = self.check_n(key, cost)?;
        if renewed.is_err() && !decision.is_allowed() {
            crate::metrics::store_down_by("lease_unrenewed");
        }
        Ok(decision)
    }

    /// Runs a regular round now: sizes and renews the slices of busy keys,
    /// prefetches the next window's near its start, and returns the slices
    /// of keys idle since the last round. Returns how many keys it asked or
    /// returned for.
    ///
    /// # Errors
    ///
    /// The first failure of the round.
    pub async fn sync_now(&self) -> Result<usize, RedisError> {
        self.handle.inner.round(Round::Tick).await
    }

    /// Starts the background task on the current tokio runtime, if it is
    /// not running.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] outside a tokio runtime.
    pub fn start(&self) -> Result<(), RedisError> {
        let inner = Arc::clone(&self.handle.inner);
        let control = Arc::clone(&inner.control);
        self.handle.task.start(
            move || {
                control.reset();
                control
            },
            |control| run_task(inner, control),
        )
    }

    /// Stops the background task (waiting for a round in progress). Slices
    /// held are kept and still used.
    pub async fn stop(&self) {
        self.handle.task.stop().await;
    }

    /// Stops the background task and gives every slice back. Checks
    /// afterwards deny until [`start`](LeasedLimiter::start),
    /// [`sync_now`](LeasedLimiter::sync_now) or
    /// [`acquire_n`](LeasedLimiter::acquire_n) renews.
    ///
    /// # Errors
    ///
    /// The failure of the return call (its units are lost to the window,
    /// never double-spent).
    pub async fn shutdown(&self) -> Result<(), RedisError> {
        self.stop().await;
        self.handle.inner.give_back_all().await
    }

    /// Units this node holds for `key` in the current window.
    pub fn held(&self, key: &str) -> u64 {
        let inner = &*self.handle.inner;
        let window = inner.clock.now() / inner.period;
        inner
            .map
            .get(key)
            .map_or(0, |lease| lease.held(window) + lease.held(window + 1))
    }

    /// Units this node holds over all keys (current and next window).
    pub fn held_total(&self) -> u64 {
        let inner = &*self.handle.inner;
        let window = inner.clock.now() / inner.period;
        inner
            .map
            .iter()
            .map(|l| l.held(window) + l.held(window + 1))
            .sum()
    }

    /// The counters so far.
    pub fn stats(&self) -> LeaseStats {
        let c = &self.handle.inner.counters;
        // Relaxed: statistics.
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseStats {
            rounds: read(&c.rounds),
            round_trips: read(&c.round_trips),
            asked: read(&c.asked),
            granted: read(&c.granted),
            returned: read(&c.returned),
            errors: read(&c.errors),
            timeouts: read(&c.timeouts),
            last_latency: Duration::from_nanos(read(&c.last_latency_nanos)),
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

    /// The Redis keys of `key`'s budgets for the current and the next
    /// window: both in one Cluster slot, whatever `key` is.
    pub fn redis_keys(&self, key: &str) -> Vec<String> {
        let inner = &*self.handle.inner;
        let window = inner.clock.now() / inner.period;
        vec![inner.key(key, window), inner.key(key, window + 1)]
    }
}

/// The background task: a regular round every interval, early renewals
/// when checks ask for them, until stopped.
async fn run_task<C: Clock>(inner: Arc<Inner<C>>, control: Arc<Control>) {
    let mut next = tokio::time::Instant::now() + inner.interval;
    loop {
        let woken = tokio::time::timeout_at(next, control.wake.notified())
            .await
            .is_ok();
        if control.stopped() {
            return;
        }
        if woken && tokio::time::Instant::now() < next {
            // Errors are counted in the stats; the next round retries.
            let _ = inner.round(Round::Renew).await;
            continue;
        }
        let _ = inner.round(Round::Tick).await;
        next += inner.interval;
        let now = tokio::time::Instant::now();
        if next < now {
            next = now + inner.interval;
        }
    }
}

/// One planned request: a window of a key, units asked (> 0) or given back
/// (< 0).
struct Plan {
    lease: Arc<Lease>,
    window: u64,
    amount: i64,
}

impl<C: Clock> Inner<C> {
    fn decide(&self, lease: &Lease, now: u64, cost: u32) -> Decision {
        let window = now / self.period;
        let end = (u128::from(window) + 1) * u128::from(self.period);
        let until_end = u64::try_from(end - u128::from(now)).unwrap_or(u64::MAX);
        // The limit is a u32 and units held never exceed it.
        let limit = self.quota.limit();
        let cost64 = u64::from(cost);
        if cost == 0 {
            return Decision::allow(limit, lease.held(window).min(self.limit) as u32, 0);
        }
        // Relaxed below: demand counters and flags, read by the task.
        match lease.spend(window, cost64) {
            Some(left) => {
                lease.used.fetch_add(cost64, Ordering::Relaxed);
                if left < lease.target.load(Ordering::Relaxed) / 2 {
                    self.want(lease);
                }
                Decision::allow(limit, left.min(self.limit) as u32, until_end)
            }
            None => {
                lease.denied.fetch_add(cost64, Ordering::Relaxed);
                // The next slice covers this cost (a slice only as large as
                // the usual demand would never let it pass).
                lease.need.fetch_max(cost64, Ordering::Relaxed);
                let retry = if lease.cannot_fit(window, cost64) {
                    // Redis said the window cannot cover it: not before
                    // the next one (unless other nodes give slices back).
                    until_end
                } else {
                    self.want(lease);
                    let latency = self.counters.last_latency_nanos.load(Ordering::Relaxed);
                    latency.clamp(1_000_000, until_end.max(1_000_000))
                };
                let held = lease.held(window).min(self.limit) as u32;
                Decision::deny(limit, held, until_end, retry)
            }
        }
    }

    /// Asks the task for an early renewal of `lease` (once per renewal).
    fn want(&self, lease: &Lease) {
        // Relaxed: the flag is read by the renewal round with a swap; the
        // Notify wakes it (a lost wake-up only delays to the regular tick).
        if lease.wanted.swap(1, Ordering::Relaxed) == 0 {
            self.control.wake.notify_one();
        }
    }

    /// Whether `cost` for `key` is known not to fit in the current window.
    fn cannot_fit(&self, key: &str, cost: u64) -> bool {
        let window = self.clock.now() / self.period;
        // A hint; a stale one costs one round trip.
        self.map
            .get(key)
            .is_some_and(|l| l.cannot_fit(window, cost))
    }

    fn key(&self, key: &str, window: u64) -> String {
        self.keys.key(key, &format!("lease:{window}"))
    }

    /// The renewal an [`acquire_n`](LeasedLimiter::acquire_n) waits for:
    /// waits for the round in progress, within the store's timeout, and
    /// runs one only if `key`'s slice still cannot cover `cost` (callers
    /// that waited together share the round that served them).
    async fn renew_for(&self, key: &str, cost: u32) -> Result<usize, RedisError> {
        let Ok(one) = tokio::time::timeout(self.store.timeout(), self.round_lock.lock()).await
        else {
            return Err(RedisError::Timeout);
        };
        let window = self.clock.now() / self.period;
        let Some(lease) = self.map.get(key).map(|l| Arc::clone(l.value())) else {
            return Ok(0);
        };
        if lease.held(window) >= u64::from(cost) {
            return Ok(0);
        }
        // A round that ran meanwhile may have taken this key's request and
        // granted too little: asked again. Relaxed: read by this task's
        // own round, after the lock.
        lease.wanted.store(1, Ordering::Relaxed);
        lease.need.fetch_max(u64::from(cost), Ordering::Relaxed);
        self.round_locked(Round::Renew, one).await
    }

    /// One round: plan, ask and give back in one batch, apply.
    async fn round(&self, round: Round) -> Result<usize, RedisError> {
        let one = self.round_lock.lock().await;
        self.round_locked(round, one).await
    }

    /// [`round`](Inner::round), the lock held.
    async fn round_locked(
        &self,
        round: Round,
        mut state: tokio::sync::MutexGuard<'_, RoundState>,
    ) -> Result<usize, RedisError> {
        let now = self.clock.now();
        let window = now / self.period;
        let until_next =
            u64::try_from((u128::from(window) + 1) * u128::from(self.period) - u128::from(now))
                .unwrap_or(u64::MAX);
        let latency = self.counters.last_latency_nanos.load(Ordering::Relaxed);
        let horizon = u64::try_from(self.interval.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(latency.saturating_mul(2));
        // Within a tick (plus round trips) of the next window: fill its
        // slot too, so the window starts with slices in hand.
        let prefetch = until_next <= horizon;
        let failing = state.failures > 0;
        if state
            .retry_at
            .is_some_and(|at| tokio::time::Instant::now() < at)
        {
            return Err(RedisError::Backoff);
        }
        let mut plans: Vec<(String, Plan)> = Vec::new();
        for item in self.map.iter() {
            let lease = item.value();
            // Relaxed throughout: counters and flags (see `decide`).
            let wanted = lease.wanted.swap(0, Ordering::Relaxed) == 1;
            if round == Round::Renew && !wanted {
                continue;
            }
            let target = if round == Round::Tick {
                let demand =
                    lease.used.swap(0, Ordering::Relaxed) + lease.denied.swap(0, Ordering::Relaxed);
                if demand == 0 && !wanted {
                    // Idle for a whole tick: give everything back.
                    for w in [window, window + 1] {
                        let units = lease.drain(w);
                        if units > 0 {
                            plans.push((item.key().clone(), self.plan(lease, w, -(units as i64))));
                        }
                    }
                    continue;
                }
                let target = demand
                    .saturating_mul(2)
                    .clamp(self.min_slice, self.max_slice);
                lease.target.store(target, Ordering::Relaxed);
                target
            } else {
                lease.target.load(Ordering::Relaxed).max(self.min_slice)
            };
            // A denied cost above the usual slice: ask for enough to cover
            // it (at most the limit, which a cost never exceeds). After a
            // failed round, whose grants may have been made and lost (a
            // reply that came after the timeout), the smallest slice: a
            // slow Redis spends the window's budget a slice at a time.
            let need = lease.need.swap(0, Ordering::Relaxed).min(self.limit);
            let target = if failing {
                self.min_slice.max(need)
            } else {
                target.max(need)
            };
            let mut windows = vec![window];
            if prefetch {
                windows.push(window + 1);
            }
            for w in windows {
                let held = lease.held(w);
                if held < target {
                    let ask = (target - held) as i64;
                    plans.push((item.key().clone(), self.plan(lease, w, ask)));
                }
            }
        }
        let result = self.execute(plans).await;
        match &result {
            Ok(_) => *state = RoundState::default(),
            Err(_) => {
                state.failures = state.failures.saturating_add(1);
                let backoff = self
                    .interval
                    .saturating_mul(1 << (state.failures - 1).min(10))
                    .min(Duration::from_secs(1));
                state.retry_at = Some(tokio::time::Instant::now() + backoff);
            }
        }
        if round == Round::Tick {
            self.sweep();
        }
        result
    }

    fn plan(&self, lease: &Arc<Lease>, window: u64, amount: i64) -> Plan {
        Plan {
            lease: Arc::clone(lease),
            window,
            amount,
        }
    }

    /// Gives back every unit held, for the current and the next window.
    async fn give_back_all(&self) -> Result<(), RedisError> {
        let _one = self.round_lock.lock().await;
        let window = self.clock.now() / self.period;
        let mut plans = Vec::new();
        for item in self.map.iter() {
            for w in [window, window + 1] {
                let units = item.value().drain(w);
                if units > 0 {
                    plans.push((
                        item.key().clone(),
                        self.plan(item.value(), w, -(units as i64)),
                    ));
                }
            }
        }
        let result = self.execute(plans).await.map(|_| ());
        self.sweep();
        result
    }

    async fn execute(&self, plans: Vec<(String, Plan)>) -> Result<usize, RedisError> {
        let c = &self.counters;
        if plans.is_empty() {
            return Ok(0);
        }
        let records: Vec<Record> = plans
            .iter()
            .map(|(key, plan)| Record {
                keys: vec![self.key(key, plan.window)],
                args: vec![plan.amount],
            })
            .collect();
        let life = u128::from(self.period) * 2;
        let ttl_ms = i64::try_from(life.div_ceil(1_000_000))
            .unwrap_or(i64::MAX / 2)
            .saturating_add(1_000);
        let header = [i64::from(self.quota.limit()), ttl_ms];
        let started = Instant::now();
        let outcome =
            crate::metrics::timed_redis_call(self.store.run(&self.lua, &header, &records, 2)).await;
        if let Some(error) = &outcome.error {
            crate::metrics::store_failure(error);
        }
        // Relaxed: statistics.
        c.last_latency_nanos.store(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        c.round_trips
            .fetch_add(outcome.round_trips, Ordering::Relaxed);
        c.errors.fetch_add(outcome.errors, Ordering::Relaxed);
        c.timeouts.fetch_add(outcome.timeouts, Ordering::Relaxed);
        for ((_, plan), reply) in plans.iter().zip(&outcome.replies) {
            let amount = plan.amount.unsigned_abs();
            if plan.amount > 0 {
                c.asked.fetch_add(amount, Ordering::Relaxed);
            }
            // A failed request grants nothing here; a failed return's units
            // are gone (they may have reached Redis: never reuse them).
            let Some(&[moved, granted]) = reply.as_deref() else {
                continue;
            };
            let moved = u64::try_from(moved).unwrap_or(0);
            if plan.amount > 0 {
                c.granted.fetch_add(moved, Ordering::Relaxed);
                plan.lease.credit(plan.window, moved);
                // What no node holds of the window now: whether a large
                // cost can still pass in it (see `Lease::cannot_fit`).
                let granted = u64::try_from(granted).unwrap_or(self.limit);
                plan.lease
                    .set_room(plan.window, self.limit.saturating_sub(granted));
            } else {
                c.returned.fetch_add(moved, Ordering::Relaxed);
            }
        }
        if outcome.round_trips > 0 {
            c.rounds.fetch_add(1, Ordering::Relaxed);
        }
        // Grants the master made that too few replicas acknowledged are
        // not used; given back at once, so that a replica that lags does
        // not spend the window's budget on grants nobody uses. Without
        // `WAIT`: a give-back lost in a failover only under-admits.
        let undo: Vec<Record> = plans
            .iter()
            .zip(&outcome.unreplicated)
            .filter_map(|((key, plan), reply)| {
                let &[moved, _] = reply.as_deref()? else {
                    return None;
                };
                (plan.amount > 0 && moved > 0).then(|| Record {
                    keys: vec![self.key(key, plan.window)],
                    args: vec![-moved],
                })
            })
            .collect();
        if !undo.is_empty() {
            let undone = self.store.run_unwaited(&self.lua, &header, &undo, 2).await;
            c.round_trips
                .fetch_add(undone.round_trips, Ordering::Relaxed);
            c.errors.fetch_add(undone.errors, Ordering::Relaxed);
            c.timeouts.fetch_add(undone.timeouts, Ordering::Relaxed);
        }
        match outcome.error {
            None => Ok(plans.len()),
            Some(error) => Err(error),
        }
    }

    /// Drops leases that hold nothing and saw no traffic.
    fn sweep(&self) {
        // `retain` holds each shard's write lock: no check is using a lease
        // while it is judged and dropped.
        self.map.retain(|_, lease| !lease.idle());
    }
}
