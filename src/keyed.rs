//! The keyed limiter: one state per user, IP or API key, in a concurrent
//! map with bounded memory.

use crate::algorithm::{Algorithm, TokenBucket};
use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::limiter::never_passes;
use crate::map::KeyMap;
use crate::policy::{Held, StateId};
use crate::stripes::{keyed_lock_id, mask_of};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crate::{CheckError, Decision, Quota, QuotaError};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::time::Duration;

// Refund (and later policies) on the keyed limiter, in their own file.
mod policies;

/// What a [`KeyedRateLimiter`] does with a new key when it already holds
/// `max_keys` keys and a sweep freed no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// New keys share one extra state with the same quota, so a flood of
    /// fresh keys (random source IPs) is limited as one client, while keys
    /// already tracked keep their own state. The default.
    #[default]
    Shared,
    /// New keys are denied until a sweep frees room (fail closed).
    Deny,
    /// New keys are admitted untracked (fail open).
    Allow,
}

const DEFAULT_FULL_SWEEP_INTERVAL: u64 = 1_000_000_000;

/// Where a key not in the map was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// On a fresh state of its own, inserted.
    Own,
    /// By the [`Overflow`] policy: the map was full.
    Overflow,
}

/// A check outside an all-or-nothing decision passes no stripe mask, and
/// `check_new` asks for a stripe only when given one.
#[cold]
fn unreachable_held() -> Decision {
    Decision::deny(0, 0, 1, 1)
}

/// The keyed limiters' default key hasher: [foldhash]'s fast variant, seeded
/// at random per process and per map.
///
/// Hashing is most of a keyed check's work when the map is in cache:
/// foldhash hashes a `u64` in a few instructions where the standard
/// library's SipHash-1-3 takes dozens (the performance guide, docs/performance.md, has
/// both). The trade-off is hash flooding: foldhash is *minimally*
/// DoS-resistant (random seeds, so colliding keys cannot be computed
/// offline), not resistant to an attacker who studies a long-running
/// process's timing to recover its seed and then sends keys that collide.
/// Keys are often client-chosen (API keys, IPs); where that threat matters,
/// choose SipHash with
/// [`KeyedRateLimiterBuilder::hasher`]`(std::collections::hash_map::RandomState::new())`.
/// The cap on keys ([`KeyedRateLimiterBuilder::max_keys`]) bounds memory either way,
/// not the cost of colliding lookups.
///
/// [foldhash]: https://docs.rs/foldhash
pub type DefaultKeyHasher = foldhash::fast::RandomState;

/// A rate limiter with one state per key (user id, IP, API key), any
/// `K: Hash + Eq`.
///
/// States live in a [`dashmap::DashMap`]. A check of a known key takes the key's shard
/// lock for reading (shared with every other reader) and decides with the
/// algorithm's compare-exchange loop; only a key's first check takes a write
/// lock, to insert it.
///
/// # Bounded memory
///
/// A key whose state carries no information (a full token bucket, an expired
/// window) is *idle* and can be dropped without changing any future decision.
/// [`sweep`](KeyedRateLimiter::sweep) drops idle keys; with
/// [`auto_sweep`](KeyedRateLimiterBuilder::auto_sweep) checks run one sweep per interval.
/// With [`max_keys`](KeyedRateLimiterBuilder::max_keys) the map never holds more than
/// that many keys: a new key that finds the map full triggers a sweep (at
/// most one per sweep interval, 1 s unless `auto_sweep` sets another, so a
/// flood of fresh keys does not turn every check into a scan), and if no room
/// was freed the [`Overflow`] policy decides.
///
/// A sweep takes each shard's write lock in turn, so it never drops a key
/// that a check is using at that moment.
///
/// # Time that steps back
///
/// A sweep drops a key whose state is idle at the sweep's time `T`, and
/// takes `T` as a time the limiter has seen: a new key's check at a reading
/// earlier than the latest sweep's `T` is decided at `T` (no time elapsed
/// since it), so a reading that lags a sweep (a thread preempted between
/// reading the clock and checking, a clock stepped back) never finds a
/// dropped key's history forgotten. Quota 1/min, admitted at 10 s, a sweep
/// at 70 s, then a check at 15 s: the check is decided, and recorded, at
/// 70 s, so a check at 75 s is denied. (A key never dropped would deny the
/// check at 15 s and admit the one at 75 s: either way the second admission
/// is recorded a minute after the first.) The limit holds in every window
/// of the times at which requests are recorded, as each
/// [algorithm](crate::algorithm) promises for its own state.
///
/// Memory per key is what the map stores: the key, the algorithm's state
/// (8 bytes for the token bucket) and one control byte, divided by the hash
/// table's load (between 7/16 and 7/8 after growth). The README lists
/// measured bytes per key.
///
/// # Examples
///
/// ```
/// use rategate::{KeyedRateLimiter, Quota, TokenBucket};
///
/// let limiter = KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_minute(2)?)
///     .max_keys(100_000)
///     .build()?;
/// assert!(limiter.check("alice").is_allowed());
/// assert!(limiter.check("alice").is_allowed());
/// assert!(!limiter.check("alice").is_allowed());
/// assert!(limiter.check("bob").is_allowed());
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), rategate::QuotaError>(())
/// ```
///
/// The defaults make the common case short: `KeyedRateLimiter` alone is
/// `KeyedRateLimiter<String, TokenBucket>`.
///
/// ```
/// use rategate::{KeyedRateLimiter, Quota};
///
/// let per_user: KeyedRateLimiter = KeyedRateLimiter::new(Quota::per_minute(100)?)?;
/// assert!(per_user.check("alice").is_allowed());
/// # Ok::<(), rategate::QuotaError>(())
/// ```
pub struct KeyedRateLimiter<
    K = String,
    A: Algorithm = TokenBucket,
    C = QuantaClock,
    S = DefaultKeyHasher,
> {
    algorithm: A,
    clock: C,
    quota: Quota,
    map: KeyMap<K, A::State, S>,
    /// Keys in the map or about to be inserted: a slot is reserved here
    /// before an insert, so the map never exceeds `max_keys`.
    len: AtomicUsize,
    max_keys: Option<usize>,
    overflow: Overflow,
    /// The state new keys share under [`Overflow::Shared`].
    overflow_state: A::State,
    overflow_count: AtomicU64,
    auto_sweep: Option<u64>,
    next_auto_sweep: AtomicU64,
    full_sweep_interval: u64,
    next_full_sweep: AtomicU64,
    /// The latest time a sweep judged keys at (a high-water mark). A key a
    /// sweep dropped was idle at that time, so a new key's check is decided
    /// no earlier than it: a clock reading that lags a sweep then counts as
    /// no time elapsed since the sweep, as it would in the dropped state.
    swept_at: AtomicU64,
}

/// The most map shards a keyed limiter accepts.
const MAX_SHARDS: usize = 1 << 16;

/// One reserved key slot: given back when dropped, unless [`keep`]
/// (`KeySlot::keep`) says the key was inserted. A panic between the
/// reservation and the insert (a key's `Hash` or `Eq` run by the map while
/// it grows) drops it during unwinding, so the slot is not leaked.
struct KeySlot<'a> {
    len: &'a AtomicUsize,
}

impl KeySlot<'_> {
    /// The key is in the map: the slot stays taken.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for KeySlot<'_> {
    fn drop(&mut self) {
        // Relaxed: `len` is a counter that guards only itself.
        self.len.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<K, A: Algorithm, C, S> fmt::Debug for KeyedRateLimiter<K, A, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimiter")
            .field("quota", &self.quota)
            .field("len", &self.len.load(Ordering::Relaxed))
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}

/// Builds a [`KeyedRateLimiter`]; from [`KeyedRateLimiter::builder`].
#[derive(Debug)]
#[must_use]
pub struct KeyedRateLimiterBuilder<K, A, C = QuantaClock, S = DefaultKeyHasher> {
    quota: Quota,
    clock: C,
    hasher: S,
    shards: Option<usize>,
    max_keys: Option<usize>,
    overflow: Overflow,
    auto_sweep: Option<Duration>,
    algorithm: Option<A>,
    marker: PhantomData<fn() -> K>,
}

impl<K: Hash + Eq, A: Algorithm> KeyedRateLimiter<K, A, QuantaClock, DefaultKeyHasher> {
    /// A keyed limiter for `quota` on the default clock, without a key cap.
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when the algorithm cannot represent `quota`.
    pub fn new(quota: Quota) -> Result<Self, QuotaError> {
        Self::builder(quota).build()
    }

    /// A builder to choose the clock, the key cap, the overflow policy and
    /// automatic sweeps.
    pub fn builder(quota: Quota) -> KeyedRateLimiterBuilder<K, A> {
        KeyedRateLimiterBuilder {
            quota,
            clock: QuantaClock::new(),
            hasher: DefaultKeyHasher::default(),
            shards: None,
            max_keys: None,
            overflow: Overflow::default(),
            auto_sweep: None,
            algorithm: None,
            marker: PhantomData,
        }
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock, S: BuildHasher + Clone>
    KeyedRateLimiterBuilder<K, A, C, S>
{
    /// Reads time from `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedRateLimiterBuilder<K, A, C2, S> {
        KeyedRateLimiterBuilder {
            quota: self.quota,
            clock,
            hasher: self.hasher,
            shards: self.shards,
            max_keys: self.max_keys,
            overflow: self.overflow,
            auto_sweep: self.auto_sweep,
            algorithm: self.algorithm,
            marker: PhantomData,
        }
    }

    /// Hashes keys with `hasher` instead of [`DefaultKeyHasher`] (foldhash):
    /// `std::collections::hash_map::RandomState::new()` for SipHash-1-3,
    /// resistant to hash flooding by keys an attacker chooses.
    pub fn hasher<S2: BuildHasher + Clone>(
        self,
        hasher: S2,
    ) -> KeyedRateLimiterBuilder<K, A, C, S2> {
        KeyedRateLimiterBuilder {
            quota: self.quota,
            clock: self.clock,
            hasher,
            shards: self.shards,
            max_keys: self.max_keys,
            overflow: self.overflow,
            auto_sweep: self.auto_sweep,
            algorithm: self.algorithm,
            marker: PhantomData,
        }
    }

    /// The number of map shards (the default is four per CPU): kept
    /// within 2 to 65,536 and rounded up to a power of two. Shards only
    /// spread contention; no count changes a decision.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Holds at most `max_keys` keys; see [`Overflow`] for what happens
    /// beyond. Zero sends every key to the overflow policy.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// What to do with new keys when the map is full.
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// Sweeps idle keys once per `every` (of the limiter's clock), run by the
    /// first check after each interval has passed. A zero interval is
    /// treated as one nanosecond.
    pub fn auto_sweep(mut self, every: Duration) -> Self {
        self.auto_sweep = Some(every);
        self
    }

    /// Decides with `algorithm`, already built for the quota (an
    /// [`AnyAlgorithm`](crate::algorithm::AnyAlgorithm) chosen at run
    /// time); without it, [`build`](KeyedRateLimiterBuilder::build) makes
    /// one from the quota.
    pub fn algorithm(mut self, algorithm: A) -> Self {
        self.algorithm = Some(algorithm);
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when the algorithm cannot represent the quota
    /// ([`QuotaError::AlgorithmNotChosen`] for an
    /// [`AnyAlgorithm`](crate::algorithm::AnyAlgorithm) without
    /// [`algorithm`](KeyedRateLimiterBuilder::algorithm)).
    pub fn build(self) -> Result<KeyedRateLimiter<K, A, C, S>, QuotaError> {
        let algorithm = match self.algorithm {
            Some(algorithm) => algorithm,
            None => A::from_quota(&self.quota)?,
        };
        let shards = self
            .shards
            .map(|shards| shards.clamp(2, MAX_SHARDS).next_power_of_two());
        let map = KeyMap::new(self.hasher, shards);
        let auto_sweep = self.auto_sweep.map(|d| duration_to_nanos(d).max(1));
        let full_sweep_interval = auto_sweep.unwrap_or(DEFAULT_FULL_SWEEP_INTERVAL);
        let start = self.clock.now();
        Ok(KeyedRateLimiter {
            overflow_state: algorithm.new_state(),
            algorithm,
            clock: self.clock,
            quota: self.quota,
            map,
            len: AtomicUsize::new(0),
            max_keys: self.max_keys,
            overflow: self.overflow,
            overflow_count: AtomicU64::new(0),
            auto_sweep,
            next_auto_sweep: AtomicU64::new(start.saturating_add(auto_sweep.unwrap_or(0))),
            full_sweep_interval,
            next_full_sweep: AtomicU64::new(start),
            swept_at: AtomicU64::new(0),
        })
    }
}

impl<K, A, C, S> KeyedRateLimiter<K, A, C, S>
where
    K: Hash + Eq,
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Decides one request of cost 1 for `key` and records it if admitted.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // As `check_n`, through the algorithm's cost-1 check (no `Result`
        // to merge and unwrap on the hot path).
        if let Some(state) = self.map.get(key) {
            let now = self.clock.now();
            let decision = self.algorithm.check_one(&state, now);
            drop(state);
            self.maybe_auto_sweep(now);
            return decision;
        }
        match self.check_absent(key, 1, None) {
            Held::Decided(result) => result.unwrap_or_else(never_passes),
            Held::NeedStripe(_) => unreachable_held(),
        }
    }

    /// Decides one request of `cost` for `key` and records it if admitted.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass; the
    /// key is then not inserted.
    #[inline]
    pub fn check_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The clock is read once the key's state is found, not before the
        // lookup, so that the lookup's cache misses overlap the clock read.
        // The decision is returned straight from the arm that made it, not
        // through a closure's result, which the algorithm chosen at run
        // time would copy through the stack.
        if let Some(state) = self.map.get(key) {
            let now = self.clock.now();
            let result = self.algorithm.check(&state, now, cost);
            drop(state);
            self.maybe_auto_sweep(now);
            return result;
        }
        match self.check_absent(key, cost, None) {
            Held::Decided(result) => result,
            // Without a stripe mask the overflow state is checked at once.
            Held::NeedStripe(_) => Ok(unreachable_held()),
        }
    }

    /// [`check_n`](KeyedRateLimiter::check_n) of a key the map did not hold
    /// a moment ago; `held`, the stripes an all-or-nothing decision holds
    /// (`None` outside one).
    fn check_absent<Q>(&self, key: &Q, cost: u32, held: Option<u64>) -> Held<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // A probe of a key not held writes nothing, not even the key.
        let (result, now) = if cost == 0 {
            let now = self.clock.now();
            (Held::Decided(self.peek_new(now, cost)), now)
        } else {
            // No lock is held here, so a sweep cannot deadlock on it.
            if let Err(e) = crate::algorithm::check_cost(cost, self.algorithm.capacity()) {
                return Held::Decided(Err(e));
            }
            let now = self.clock.now();
            (self.check_new(key, now, cost, held), now)
        };
        self.maybe_auto_sweep(now);
        result
    }

    /// Decides one request of cost 1 for each of `keys`, in order, all at
    /// one reading of the clock, and calls `each` with every key's decision;
    /// returns how many were admitted. Each key is decided on its own, as a
    /// [`check`](KeyedRateLimiter::check) at that instant would decide it
    /// (a key named twice is checked twice); for several limits that must
    /// all admit one request, see [`AllOf`](crate::policy::AllOf).
    ///
    /// For a server that decides many keys at once (a batch of messages
    /// from different tenants, a request touching several resources): the
    /// clock is read once, and every decision (its retry and reset times
    /// too) is measured from that reading, so `each` should be quick.
    /// Without a clock read between lookups, one key's cache misses overlap
    /// the next's (`cargo bench --bench keyed -- keyed_batch` compares
    /// batches with separate checks).
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::{KeyedRateLimiter, ManualClock, Quota, TokenBucket};
    ///
    /// let limiter = KeyedRateLimiter::<u64, TokenBucket, _>::builder(Quota::per_second(1)?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let mut allowed = Vec::new();
    /// let admitted = limiter.check_many([&1, &2, &1], |key, d| allowed.push((*key, d.is_allowed())));
    /// assert_eq!(admitted, 2);
    /// assert_eq!(allowed, [(1, true), (2, true), (1, false)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_many<'q, Q, I>(&self, keys: I, mut each: impl FnMut(&'q Q, Decision)) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'q,
        I: IntoIterator<Item = &'q Q>,
    {
        let now = self.clock.now();
        let mut admitted = 0;
        for key in keys {
            // As `check`: the decision straight from the algorithm's cost-1
            // check under the map's read guard (dropped with the match).
            let decision = match self.map.get(key) {
                Some(state) => self.algorithm.check_one(&state, now),
                None => match crate::algorithm::check_cost(1, self.algorithm.capacity()) {
                    Ok(()) => match self.check_new(key, now, 1, None) {
                        Held::Decided(result) => result.unwrap_or_else(never_passes),
                        Held::NeedStripe(_) => unreachable_held(),
                    },
                    Err(e) => never_passes(e),
                },
            };
            // As after a separate check: under a key cap, when a sweep
            // runs decides which keys find room.
            self.maybe_auto_sweep(now);
            admitted += usize::from(decision.is_allowed());
            each(key, decision);
        }
        admitted
    }

    /// What [`check`](KeyedRateLimiter::check) would decide now, recording
    /// nothing and inserting no key.
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.peek_n(key, 1).unwrap_or_else(never_passes)
    }

    /// What [`check_n`](KeyedRateLimiter::check_n) would decide now,
    /// recording nothing and inserting no key.
    ///
    /// # Errors
    ///
    /// As [`check_n`](KeyedRateLimiter::check_n).
    pub fn peek_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        let known = self
            .map
            .with(key, |state| self.algorithm.peek(state, now, cost));
        match known {
            Some(result) => result,
            None => self.peek_new(now, cost),
        }
    }

    /// The all-or-nothing protocol ([`crate::policy::AllOf`], the HTTP
    /// layer): finds `key`'s state and peeks `cost` there, while the
    /// decision holds the stripes in `held` (always the key's own). A key
    /// not held is inserted with a fresh state when there is room (a fresh
    /// state decides as a key never seen does), so that the check which
    /// may follow finds it here: the key's held stripe keeps sweeps away
    /// from it. A key that belongs in the overflow state needs that
    /// state's stripe too.
    ///
    /// `key_id` is [`keyed_lock_id`]`(key)`, which the caller has computed.
    pub(crate) fn reserve_held<Q>(
        &self,
        key: &Q,
        key_id: u64,
        cost: u32,
        held: u64,
    ) -> Held<(Decision, StateId)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let _ = key_id;
        let own = StateId::of(crate::policy::address_of(self), self.map.hash_of(key));
        let now = self.clock.now();
        if let Some(result) = self
            .map
            .with(key, |state| self.algorithm.peek(state, now, cost))
        {
            return Held::Decided(result.map(|d| (d, own)));
        }
        if cost == 0 {
            // A probe of a key not held writes nothing, not even the key.
            return Held::Decided(self.peek_new(now, 0).map(|d| (d, own)));
        }
        if let Err(e) = crate::algorithm::check_cost(cost, self.algorithm.capacity()) {
            return Held::Decided(Err(e));
        }
        let (result, place) = self.decide_new(key, now, cost, Some(held), |state, now| {
            self.algorithm.peek(state, now, cost)
        });
        let id = match place {
            Place::Own => own,
            Place::Overflow => StateId::overflow(crate::policy::address_of(self)),
        };
        match result {
            Held::Decided(result) => Held::Decided(result.map(|d| (d, id))),
            Held::NeedStripe(lock_id) => Held::NeedStripe(lock_id),
        }
    }

    /// The all-or-nothing protocol: checks `cost` for `key` while the
    /// decision holds the stripes in `held`; a key that goes to the
    /// overflow state needs that state's stripe too.
    pub(crate) fn check_held<Q>(&self, key: &Q, cost: u32, held: u64) -> Held<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(state) = self.map.get(key) {
            let now = self.clock.now();
            let result = self.algorithm.check(&state, now, cost);
            drop(state);
            self.maybe_auto_sweep(now);
            return Held::Decided(result);
        }
        self.check_absent(key, cost, Some(held))
    }

    /// The lock id of the stripe that guards the overflow state: one per
    /// limiter, whatever the key.
    fn overflow_lock_id(&self) -> u64 {
        crate::policy::address_of(&self.overflow_state) as u64
    }

    /// What a first check of a key not held would decide.
    fn peek_new(&self, now: u64, cost: u32) -> Result<Decision, CheckError> {
        // As a new key's check would decide: see `check_new`.
        let now = now.max(self.swept_at.load(Ordering::Relaxed));
        let full = self
            .max_keys
            .is_some_and(|cap| self.len.load(Ordering::Relaxed) >= cap);
        if !full {
            return self.algorithm.peek(&self.algorithm.new_state(), now, cost);
        }
        match self.overflow {
            Overflow::Shared => self.algorithm.peek(&self.overflow_state, now, cost),
            Overflow::Deny | Overflow::Allow => self.overflow_decision(now, cost),
        }
    }

    /// First check of a key not in the map: reserve a slot, insert, decide.
    /// Inside an all-or-nothing decision (`held`), a key that goes to the
    /// overflow state needs that state's stripe: without it nothing is
    /// decided.
    #[cold]
    fn check_new<Q>(&self, key: &Q, now: u64, cost: u32, held: Option<u64>) -> Held<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (result, place) = self.decide_new(key, now, cost, held, |state, now| {
            self.algorithm.check(state, now, cost)
        });
        if place == Place::Overflow && matches!(result, Held::Decided(_)) {
            // Relaxed: a statistic.
            self.overflow_count.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Decides a key not in the map by `decide`: on a fresh state of its
    /// own, inserted when there is room, else by the [`Overflow`] policy.
    /// Inside an all-or-nothing decision (`held`), the shared overflow
    /// state needs its own stripe: without it nothing is decided.
    fn decide_new<Q>(
        &self,
        key: &Q,
        now: u64,
        cost: u32,
        held: Option<u64>,
        decide: impl Fn(&A::State, u64) -> Result<Decision, CheckError>,
    ) -> (Held<Decision>, Place)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // A sweep may have dropped this key after `now` was read (a thread
        // preempted between its clock reading and this check, or a clock
        // stepped back): the dropped state was idle at the sweep's time, and
        // counting a lagging reading as that time keeps "no time elapsed"
        // true for the key. Relaxed: a sweep stores the mark before it takes
        // the shard lock that removes the key, and this check found the key
        // missing under that lock, after its release.
        let now = now.max(self.swept_at.load(Ordering::Relaxed));
        if let Some(result) = self.insert_and(key, |state| decide(state, now)) {
            return (Held::Decided(result), Place::Own);
        }
        // Full. Sweep at most once per interval (under a flood of new keys
        // the other new keys go straight to the overflow policy), then look
        // again: the key may have been inserted meanwhile, or room freed.
        if self.elect_full_sweep(now) {
            self.sweep_at(now);
            if let Some(result) = self.insert_and(key, |state| decide(state, now)) {
                return (Held::Decided(result), Place::Own);
            }
        }
        let result = match (self.overflow, held) {
            (Overflow::Shared, Some(held)) if held & mask_of(self.overflow_lock_id()) == 0 => {
                Held::NeedStripe(self.overflow_lock_id())
            }
            (Overflow::Shared, _) => Held::Decided(decide(&self.overflow_state, now)),
            (Overflow::Deny | Overflow::Allow, _) => {
                Held::Decided(self.overflow_decision(now, cost))
            }
        };
        (result, Place::Overflow)
    }

    /// Under the key's shard write lock: runs `decide` on the key's state
    /// if it is there (a racing first check inserted it), else reserves a
    /// slot and inserts a fresh state for it. `None` when the key is absent
    /// and the map is full. Deciding presence and room under one lock means
    /// two first checks of one key at the last free slot both find it: one
    /// inserts, the other sees it inserted.
    fn insert_and<Q>(
        &self,
        key: &Q,
        decide: impl FnOnce(&A::State) -> Result<Decision, CheckError>,
    ) -> Option<Result<Decision, CheckError>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.map.with_or_insert_if(
            // Cloned before any slot is taken: a panicking clone leaks none.
            key.to_owned(),
            || self.reserve_slot(),
            || self.algorithm.new_state(),
            |state, slot| {
                if let Some(slot) = slot {
                    slot.keep();
                }
                decide(state)
            },
        )
    }

    fn overflow_decision(&self, now: u64, cost: u32) -> Result<Decision, CheckError> {
        let capacity = self.algorithm.capacity();
        crate::algorithm::check_cost(cost, capacity)?;
        Ok(if self.overflow == Overflow::Allow {
            Decision::allow(capacity, capacity - cost, 0)
        } else {
            // Room may appear at the next sweep.
            let next = self.next_full_sweep.load(Ordering::Relaxed);
            let retry = next.saturating_sub(now).max(1);
            Decision::deny(capacity, 0, retry, retry)
        })
    }

    /// Reserves room for one more key, if the cap allows.
    fn reserve_slot(&self) -> Option<KeySlot<'_>> {
        // Relaxed: `len` is a counter that guards only itself; each
        // reservation is one atomic read-modify-write on it, which never lets
        // two reservations take the last slot.
        let reserved = match self.max_keys {
            None => {
                self.len.fetch_add(1, Ordering::Relaxed);
                true
            }
            Some(cap) => self
                .len
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < cap).then_some(n + 1)
                })
                .is_ok(),
        };
        // Lazily: a `KeySlot` gives its slot back when dropped, so one must
        // exist only for a slot actually taken.
        reserved.then(|| KeySlot { len: &self.len })
    }

    /// Whether this caller runs the sweep a full map asks for: at most one
    /// per sweep interval, and only under a key cap.
    fn elect_full_sweep(&self, now: u64) -> bool {
        if self.max_keys.is_none() {
            return false;
        }
        let next = self.next_full_sweep.load(Ordering::Relaxed);
        now >= next
            && self
                .next_full_sweep
                .compare_exchange(
                    next,
                    now.saturating_add(self.full_sweep_interval),
                    // Relaxed: the compare-exchange only elects one sweeper.
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    fn maybe_auto_sweep(&self, now: u64) {
        let Some(every) = self.auto_sweep else {
            return;
        };
        // Relaxed: electing the sweeper is all this atomic does.
        let next = self.next_auto_sweep.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_auto_sweep
                .compare_exchange(
                    next,
                    now.saturating_add(every),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.sweep_at(now);
        }
    }

    /// Drops every idle key (one whose state a fresh state would equal in
    /// every future decision). Returns how many were dropped.
    pub fn sweep(&self) -> usize {
        self.sweep_at(self.clock.now())
    }

    fn sweep_at(&self, now: u64) -> usize {
        // Before any key is dropped: a check that then misses a dropped key
        // learns the mark through the shard lock (see `check_new`).
        self.swept_at.fetch_max(now, Ordering::Relaxed);
        let mut removed = 0;
        // `retain` holds each shard's write lock while it visits the shard:
        // no check is using a state while it is judged idle and dropped.
        // A key whose stripe an all-or-nothing decision holds is kept:
        // that decision found it here and checks it here.
        self.map.retain(|key, state| {
            let idle =
                self.algorithm.is_idle(state, now) && crate::stripes::is_free(keyed_lock_id(key));
            removed += usize::from(idle);
            !idle
        });
        self.len.fetch_sub(removed, Ordering::Relaxed);
        removed
    }

    /// Releases the map's unused capacity (after a sweep of many keys).
    pub fn shrink_to_fit(&self) {
        self.map.shrink_to_fit();
    }

    /// Forgets `key`, as if it had never been seen. Returns whether it was
    /// present. Waits for an all-or-nothing decision using the key (the
    /// HTTP layer's, an [`AllOf`](crate::policy::AllOf)'s) to finish.
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = crate::stripes::with_stripe(keyed_lock_id(key), || self.map.remove(key));
        if removed {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// The number of keys held, counting slots reserved by first checks
    /// that are inserting their key at this moment; never above
    /// [`max_keys`](KeyedRateLimiterBuilder::max_keys). Exact when no check or sweep is
    /// running (a sweep subtracts what it dropped once it is done).
    pub fn len(&self) -> usize {
        // Relaxed: a snapshot of a counter.
        self.len.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many checks of new keys the [`Overflow`] policy decided because
    /// the map was full.
    pub fn overflow_count(&self) -> u64 {
        self.overflow_count.load(Ordering::Relaxed)
    }

    /// The key cap, if any.
    pub fn max_keys(&self) -> Option<usize> {
        self.max_keys
    }

    /// The quota every key gets (the latest one set, for an
    /// [`Adjustable`](crate::algorithm::Adjustable) algorithm).
    pub fn quota(&self) -> Quota {
        self.algorithm.current_quota().unwrap_or(self.quota)
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}
