//! Per-key quotas: named tiers, a resolver from key to tier, and per-key
//! overrides ([`Tiered`]).

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::{CheckError, Decision, KeyedRateLimiter};
use dashmap::DashMap;
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};

use crate::sync::{AtomicUsize, Ordering};

/// A tier's position among a [`Tiered`]'s tiers, in the order they were
/// given: `TierId::new(0)` is the first (the default tier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TierId(usize);

impl TierId {
    /// The first tier, which also takes keys a resolver sends to a tier
    /// that does not exist.
    pub const DEFAULT: TierId = TierId(0);

    /// The `index`-th tier (from 0).
    pub const fn new(index: usize) -> TierId {
        TierId(index)
    }

    /// The tier's position.
    pub const fn index(self) -> usize {
        self.0
    }
}

/// Says which tier a key is in: a closure `Fn(&Q) -> TierId`, or a
/// [`TierId`] for "every key not overridden is in this tier".
///
/// The resolver runs on every check, so a key's tier may change at any
/// time (a user signs in, a customer upgrades): the next check uses the
/// new tier.
pub trait Resolve<Q: ?Sized>: Send + Sync {
    /// The tier of `key`.
    fn resolve(&self, key: &Q) -> TierId;
}

impl<Q: ?Sized, F: Fn(&Q) -> TierId + Send + Sync> Resolve<Q> for F {
    #[inline]
    fn resolve(&self, key: &Q) -> TierId {
        self(key)
    }
}

impl<Q: ?Sized> Resolve<Q> for TierId {
    #[inline]
    fn resolve(&self, _: &Q) -> TierId {
        *self
    }
}

/// A named tier and its limiter.
#[derive(Debug)]
pub struct Tier<L> {
    name: String,
    limiter: L,
}

impl<L> Tier<L> {
    /// The tier's name (`"anonymous"`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tier's limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }
}

/// Why a [`Tiered`] could not be built or a key's tier set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TierError {
    /// No tier was given.
    NoTiers,
    /// Two tiers have this name.
    DuplicateName(String),
    /// No tier has this id.
    UnknownTier(TierId),
}

impl fmt::Display for TierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TierError::NoTiers => f.write_str("at least one tier is needed"),
            TierError::DuplicateName(name) => write!(f, "two tiers are named {name:?}"),
            TierError::UnknownTier(id) => write!(f, "there is no tier {}", id.index()),
        }
    }
}

impl std::error::Error for TierError {}

/// Per-key quotas: one limiter per named tier (GitHub's anonymous 60/h and
/// signed-in 5,000/h), a resolver that says which tier a key is in, and
/// per-key overrides that take precedence over it.
///
/// A check resolves the key's tier (an override if the key has one, else
/// the resolver; an id beyond the last tier means the first tier) and
/// checks the key in that tier's limiter. The limiters are untouched: a
/// `Tiered` of [`KeyedRateLimiter`]s checks exactly as the tier's keyed
/// limiter does, plus the resolver's call (and one map lookup while any
/// override is set).
///
/// # Changing tier
///
/// A key's tier change takes effect on its next check. Each tier keeps its
/// own state per key, so a key that moves to another tier starts there
/// afresh (with that tier's full burst), and what it used in its old tier
/// stays there until it expires or is swept: a key moved back within the
/// period finds its old usage again. A promotion (60/h to 5,000/h) thus
/// gives the new quota at once; a demotion gives the lower quota's full
/// burst once. The same holds on Redis ([`Tiered<RedisLimiter>`](Tiered)):
/// the Redis key names contain the policy (the quota), so a key's state in
/// another tier is another Redis key.
///
/// # Examples
///
/// ```
/// use rategate::policy::{TierId, Tiered};
/// use rategate::{KeyedRateLimiter, ManualClock, Quota, TokenBucket};
///
/// const ANONYMOUS: TierId = TierId::new(0);
/// const SIGNED_IN: TierId = TierId::new(1);
/// let clock = ManualClock::new();
/// let tier = |quota: &str| {
///     KeyedRateLimiter::<String, TokenBucket>::builder(quota.parse()?)
///         .clock(clock.clone())
///         .build()
/// };
/// let limiter = Tiered::new(
///     [("anonymous", tier("60/h")?), ("signed_in", tier("5000/h")?)],
///     |key: &str| if key.starts_with("user:") { SIGNED_IN } else { ANONYMOUS },
/// )?;
/// assert_eq!(limiter.check("user:alice").limit(), 5000);
/// assert_eq!(limiter.check("203.0.113.9").limit(), 60);
/// // An override: this address is a partner's, with the signed-in quota.
/// limiter.set_tier("198.51.100.7".to_string(), SIGNED_IN)?;
/// assert_eq!(limiter.check("198.51.100.7").limit(), 5000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Tiered<L, R, K = String> {
    tiers: Vec<Tier<L>>,
    resolver: R,
    overrides: DashMap<K, TierId>,
    /// Keys in `overrides`: while 0, checks skip the map. Relaxed: a check
    /// racing with `set_tier` may use either tier, as it may if it came a
    /// moment earlier or later; the map itself orders its entries.
    overridden: AtomicUsize,
}

impl<L: fmt::Debug, R, K: Hash + Eq + fmt::Debug> fmt::Debug for Tiered<L, R, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tiered")
            .field("tiers", &self.tiers)
            .field("overrides", &self.overrides)
            .finish_non_exhaustive()
    }
}

impl<L, R, K: Hash + Eq> Tiered<L, R, K> {
    /// Tiers in order (the first is the default) and the resolver.
    ///
    /// # Errors
    ///
    /// [`TierError::NoTiers`] for an empty list, and
    /// [`TierError::DuplicateName`] when two tiers share a name.
    pub fn new<N: Into<String>>(
        tiers: impl IntoIterator<Item = (N, L)>,
        resolver: R,
    ) -> Result<Self, TierError> {
        let mut list: Vec<Tier<L>> = Vec::new();
        for (name, limiter) in tiers {
            let name = name.into();
            if list.iter().any(|t| t.name == name) {
                return Err(TierError::DuplicateName(name));
            }
            list.push(Tier { name, limiter });
        }
        if list.is_empty() {
            return Err(TierError::NoTiers);
        }
        Ok(Tiered {
            tiers: list,
            resolver,
            overrides: DashMap::new(),
            overridden: AtomicUsize::new(0),
        })
    }

    /// The tiers, in order.
    pub fn tiers(&self) -> &[Tier<L>] {
        &self.tiers
    }

    /// The id of the tier named `name`.
    pub fn id(&self, name: &str) -> Option<TierId> {
        self.tiers.iter().position(|t| t.name == name).map(TierId)
    }

    /// The tier `id`; the first tier for an id beyond the last.
    pub fn tier(&self, id: TierId) -> &Tier<L> {
        self.tiers.get(id.0).unwrap_or(&self.tiers[0])
    }

    /// Puts `key` in tier `id` whatever the resolver says, from its next
    /// check on.
    ///
    /// # Errors
    ///
    /// [`TierError::UnknownTier`] when there is no tier `id`.
    pub fn set_tier(&self, key: K, id: TierId) -> Result<(), TierError> {
        if id.0 >= self.tiers.len() {
            return Err(TierError::UnknownTier(id));
        }
        if self.overrides.insert(key, id).is_none() {
            // Relaxed: see the field.
            self.overridden.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes `key`'s override: the resolver decides its tier again.
    /// Returns whether it had one.
    pub fn clear_tier<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.overrides.remove(key).is_some();
        if removed {
            // Relaxed: see the field.
            self.overridden.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// The tier `key` is in now: its override, else the resolver's answer.
    #[inline]
    pub fn tier_of<Q>(&self, key: &Q) -> TierId
    where
        R: Resolve<Q>,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Relaxed: see the field.
        if self.overridden.load(Ordering::Relaxed) != 0 {
            if let Some(id) = self.overrides.get(key) {
                return *id;
            }
        }
        self.resolver.resolve(key)
    }

    /// The tier `key` is in now, with its limiter.
    #[inline]
    pub fn select<Q>(&self, key: &Q) -> &Tier<L>
    where
        R: Resolve<Q>,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.tier(self.tier_of(key))
    }
}

impl<K, A, C, S, R> Tiered<KeyedRateLimiter<K, A, C, S>, R, K>
where
    K: Hash + Eq,
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Decides one request of cost 1 for `key` in its tier.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        R: Resolve<Q>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.select(key).limiter.check(key)
    }

    /// Decides one request of `cost` for `key` in its tier.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass in
    /// the key's tier.
    #[inline]
    pub fn check_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, CheckError>
    where
        R: Resolve<Q>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.select(key).limiter.check_n(key, cost)
    }

    /// What [`check`](Tiered::check) would decide now, recording nothing.
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        R: Resolve<Q>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.select(key).limiter.peek(key)
    }

    /// Sweeps every tier's idle keys; returns how many were dropped.
    pub fn sweep(&self) -> usize {
        self.tiers.iter().map(|t| t.limiter.sweep()).sum()
    }

    /// Keys held over all tiers (a key counts once per tier holding it).
    pub fn len(&self) -> usize {
        self.tiers.iter().map(|t| t.limiter.len()).sum()
    }

    /// Whether no tier holds a key.
    pub fn is_empty(&self) -> bool {
        self.tiers.iter().all(|t| t.limiter.is_empty())
    }
}

#[cfg(feature = "redis")]
impl<A, C, R> Tiered<crate::redis::RedisLimiter<A, C>, R, String>
where
    A: crate::redis::RedisAlgorithm,
    C: Clock,
    R: Resolve<str>,
{
    /// Decides one request of `cost` for `key` in its tier's Redis limiter.
    /// Each tier's Redis keys contain its quota, so a key that changes
    /// tier starts afresh there (see [`Tiered`]).
    ///
    /// # Errors
    ///
    /// As [`RedisLimiter::check_n`](crate::redis::RedisLimiter::check_n).
    pub async fn check_n(
        &self,
        key: &str,
        cost: u32,
    ) -> Result<crate::redis::RedisDecision, CheckError> {
        self.select(key).limiter.check_n(key, cost).await
    }

    /// Decides one request of cost 1 for `key` in its tier.
    ///
    /// # Errors
    ///
    /// As [`RedisLimiter::check`](crate::redis::RedisLimiter::check).
    pub async fn check(&self, key: &str) -> Result<crate::redis::RedisDecision, CheckError> {
        self.check_n(key, 1).await
    }
}
