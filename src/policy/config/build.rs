//! Working limiters from a [`Policy`]: in memory a [`Tiered`] of
//! `KeyedRateLimiter<String, AnyAlgorithm>`, and with feature `redis` the
//! Redis, synced and leased limiters, one per tier; [`PolicyLimiter`]
//! checks any of them by key, applies shadow mode and counts decisions
//! (feature `metrics`).

use super::{ConfigError, KeyKind, Policy};
use crate::algorithm::AnyAlgorithm;
use crate::clock::{Clock, QuantaClock};
use crate::policy::{TierId, Tiered};
use crate::{CheckError, Decision, KeyedRateLimiter, Quota, RateLimiter};
use std::time::Duration;

/// A resolver from key to tier that an application supplies at run time
/// (a user signed in, a customer's plan); policy files only set overrides.
pub type DynResolver = Box<dyn Fn(&str) -> TierId + Send + Sync>;

/// The in-memory form of a policy: one keyed limiter per tier.
pub type MemoryTiers<C = QuantaClock> =
    Tiered<KeyedRateLimiter<String, AnyAlgorithm, C>, DynResolver, String>;

impl Policy {
    /// The policy's tiers in memory on `clock`, whatever its backend, with
    /// its overrides set and `resolver` for the other keys
    /// (`Box::new(|_: &str| TierId::DEFAULT)`: all in the default tier).
    ///
    /// Each tier's keyed limiter holds at most the memory backend's
    /// `max_keys` keys ([`DEFAULT_MAX_KEYS`](super::DEFAULT_MAX_KEYS) if it
    /// sets none, or for another backend) and sweeps its idle keys once per
    /// `sweep_interval` ([`DEFAULT_SWEEP_INTERVAL`](super::DEFAULT_SWEEP_INTERVAL)
    /// if none) of `clock`; past the cap new keys share one overflow state
    /// (see the [module docs](super)).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field when a quota does not fit the
    /// algorithm (which [`PolicyFile`](super::PolicyFile) has already
    /// checked for a loaded file), or for a memory backend with
    /// `max_keys: Some(0)` or a zero `sweep_interval` (which a loaded file
    /// cannot have).
    pub fn memory_tiers<C: Clock + Clone>(
        &self,
        clock: C,
        resolver: DynResolver,
    ) -> Result<MemoryTiers<C>, ConfigError> {
        let (max_keys, sweep_interval) = self.memory_bounds()?;
        let tiers = self
            .tiers
            .iter()
            .map(|(name, quota)| {
                let algorithm = self.algorithm_for(name, quota)?;
                let limiter = KeyedRateLimiter::builder(*quota)
                    .clock(clock.clone())
                    .max_keys(max_keys)
                    .auto_sweep(sweep_interval)
                    .algorithm(algorithm)
                    .build()
                    .map_err(|e| self.field_error(name, e.to_string()))?;
                Ok((name.clone(), limiter))
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        self.with_overrides(tiers, resolver)
    }

    /// The key cap and the sweep interval of the policy's keyed limiters:
    /// the memory backend's, else the defaults. A `Policy` made in code
    /// skips the file's checks, so they are repeated here.
    fn memory_bounds(&self) -> Result<(usize, Duration), ConfigError> {
        let (max_keys, sweep_interval) = match self.backend {
            super::Store::Memory {
                max_keys,
                sweep_interval,
            } => (max_keys, sweep_interval),
            _ => (None, None),
        };
        let max_keys = match max_keys {
            Some(0) => {
                let message = super::ZERO_MAX_KEYS;
                return Err(ConfigError::field(&self.name, "backend.max_keys", message));
            }
            Some(n) => n,
            None => super::DEFAULT_MAX_KEYS,
        };
        let sweep_interval = match sweep_interval {
            Some(d) if d < Duration::from_millis(1) => {
                let field = "backend.sweep_interval_ms";
                return Err(ConfigError::field(
                    &self.name,
                    field,
                    "must be at least 1 ms",
                ));
            }
            Some(d) => d,
            None => super::DEFAULT_SWEEP_INTERVAL,
        };
        Ok((max_keys, sweep_interval))
    }

    /// The policy as one limit for everything it guards: its algorithm at
    /// its default tier's quota, one state on `clock`: what a global limit
    /// in this process, or an outbound guard's limit
    /// ([`OutboundLimiter::from_policies`](crate::OutboundLimiter::from_policies)),
    /// needs.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field when the policy needs more than one
    /// state: a `key` other than `"global"`, tiers or overrides, a backend
    /// other than `"memory"` (Redis state is shared between processes, which
    /// one local limiter cannot be), or shadow mode (a direct limiter always
    /// enforces).
    pub fn direct_limiter<C: Clock>(
        &self,
        clock: C,
    ) -> Result<RateLimiter<AnyAlgorithm, C>, ConfigError> {
        let refuse = |field: &str, why: &str| Err(ConfigError::field(&self.name, field, why));
        if self.key != KeyKind::Global {
            return refuse("key", "one limit for everything needs key = \"global\"");
        }
        if self.tiers.len() != 1 {
            return refuse("tiers", "one limit for everything has exactly one tier");
        }
        if !self.overrides.is_empty() {
            return refuse("overrides", "one limit for everything has no overrides");
        }
        if !matches!(self.backend, super::Store::Memory { .. }) {
            return refuse(
                "backend",
                "one limit in this process needs backend = \"memory\"",
            );
        }
        if self.shadow {
            return refuse("shadow", "a direct limiter always enforces; remove shadow");
        }
        let quota = self.tiers[0].1;
        let algorithm = self.algorithm_for("default", &quota)?;
        Ok(RateLimiter::from_algorithm(algorithm, quota, clock))
    }

    fn algorithm_for(&self, tier: &str, quota: &Quota) -> Result<AnyAlgorithm, ConfigError> {
        AnyAlgorithm::new(self.algorithm, quota).map_err(|e| self.field_error(tier, e.to_string()))
    }

    /// An error in tier `tier`'s quota field.
    pub(crate) fn field_error(&self, tier: &str, message: String) -> ConfigError {
        let field = if tier == "default" {
            "quota".to_owned()
        } else {
            format!("tiers.{tier}")
        };
        ConfigError::field(&self.name, &field, message)
    }

    /// Tiers with the policy's overrides set.
    pub(crate) fn with_overrides<L>(
        &self,
        tiers: Vec<(String, L)>,
        resolver: DynResolver,
    ) -> Result<Tiered<L, DynResolver, String>, ConfigError> {
        let tiered = Tiered::new(tiers, resolver)
            .map_err(|e| ConfigError::field(&self.name, "tiers", e.to_string()))?;
        for (key, index) in &self.overrides {
            tiered
                .set_tier(key.clone(), TierId::new(*index))
                .map_err(|e| {
                    ConfigError::field(&self.name, &format!("overrides.{key}"), e.to_string())
                })?;
        }
        Ok(tiered)
    }
}

/// A decision by a [`PolicyLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyDecision {
    decision: Decision,
    tier: TierId,
    shadow: bool,
    store_down: bool,
}

impl PolicyDecision {
    /// The limiter's decision (in shadow mode, what it would have enforced).
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether to serve the request: the decision, or always in shadow mode.
    pub fn admit(&self) -> bool {
        self.shadow || self.decision.is_allowed()
    }

    /// Whether Redis could not be reached and the backend's `store_down`
    /// policy decided (the Redis backend; the synced and leased backends
    /// decide in the process either way, and count such decisions in
    /// `rategate_store_down_total` only).
    pub fn store_down(&self) -> bool {
        self.store_down
    }

    /// Whether shadow mode admitted a request the limit denied.
    pub fn shadow_denied(&self) -> bool {
        self.shadow && !self.decision.is_allowed()
    }

    /// The tier the key was checked in.
    pub fn tier(&self) -> TierId {
        self.tier
    }
}

/// The limiters of one backend, one per tier.
#[non_exhaustive]
pub enum TierLimiters {
    /// In memory.
    Memory(MemoryTiers),
    /// One Redis call per decision.
    #[cfg(feature = "redis")]
    Redis(Tiered<super::redis::AnyRedisLimiter, DynResolver, String>),
    /// Local decisions synced to Redis.
    #[cfg(feature = "redis")]
    Synced(Tiered<super::redis::AnySyncedLimiter, DynResolver, String>),
    /// Local decisions on leased slices.
    #[cfg(feature = "redis")]
    Leased(Tiered<crate::redis::LeasedLimiter, DynResolver, String>),
}

/// A policy made into working limiters: its name, key kind and tiers on
/// its backend, with shadow mode; what the HTTP layer needs to apply it.
///
/// # Examples
///
/// ```
/// use rategate::policy::TierId;
/// use rategate::policy::config::{PolicyFile, PolicyLimiter};
///
/// let file = PolicyFile::from_toml(r#"
///     [policies.search]
///     algorithm = "fixed_window"
///     quota = "2/m"
///     key = "ip"
///     shadow = true
/// "#)?;
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let limiter = rt.block_on(PolicyLimiter::build(
///     file.policy("search").unwrap(),
///     Box::new(|_: &str| TierId::DEFAULT),
/// ))?;
/// for _ in 0..2 {
///     assert!(limiter.try_check_n("10.0.0.1", 1).unwrap()?.decision().is_allowed());
/// }
/// let third = limiter.try_check_n("10.0.0.1", 1).unwrap()?;
/// assert!(!third.decision().is_allowed());
/// assert!(third.admit() && third.shadow_denied()); // shadow mode
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PolicyLimiter {
    name: String,
    key: KeyKind,
    shadow: bool,
    tiers: Vec<(String, Quota)>,
    /// The default tier's quota (also that of a tier id beyond the last).
    default_quota: Quota,
    backends: TierLimiters,
}

impl std::fmt::Debug for PolicyLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyLimiter")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("shadow", &self.shadow)
            .field("tiers", &self.tiers)
            .finish_non_exhaustive()
    }
}

impl PolicyLimiter {
    /// Builds `policy`'s limiters on its backend (connecting to Redis for
    /// the Redis backends), with `resolver` for keys without an override.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the policy and field: a Redis backend
    /// without feature `redis` (`backend`), or a connection that failed
    /// (`backend.url`).
    pub async fn build(
        policy: &Policy,
        resolver: DynResolver,
    ) -> Result<PolicyLimiter, ConfigError> {
        let backends = match &policy.backend {
            super::Store::Memory { .. } => {
                TierLimiters::Memory(policy.memory_tiers(QuantaClock::new(), resolver)?)
            }
            #[cfg(feature = "redis")]
            backend => super::redis::build(policy, backend, resolver).await?,
            #[cfg(not(feature = "redis"))]
            _ => {
                return Err(ConfigError::field(
                    &policy.name,
                    "backend",
                    "this backend needs rategate's feature \"redis\"",
                ));
            }
        };
        Ok(PolicyLimiter {
            name: policy.name.clone(),
            key: policy.key.clone(),
            shadow: policy.shadow,
            tiers: policy.tiers.clone(),
            default_quota: policy.quota(),
            backends,
        })
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the policy keys on.
    pub fn key_kind(&self) -> &KeyKind {
        &self.key
    }

    /// Whether the policy is in shadow mode.
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// The tiers' names and quotas, the default tier first.
    pub fn tiers(&self) -> &[(String, Quota)] {
        &self.tiers
    }

    /// The limiters.
    pub fn limiters(&self) -> &TierLimiters {
        &self.backends
    }

    /// The keys held in this process over all tiers (0 for the Redis
    /// backend, whose state is in Redis); with feature `metrics` also sets
    /// the `rategate_live_keys` gauge. Call it from a periodic task.
    pub fn record_live_keys(&self) -> usize {
        #[cfg(feature = "redis")]
        fn sum<L>(tiers: &Tiered<L, DynResolver, String>, len: impl Fn(&L) -> usize) -> usize {
            tiers.tiers().iter().map(|t| len(t.limiter())).sum()
        }
        let keys = match &self.backends {
            TierLimiters::Memory(t) => t.len(),
            #[cfg(feature = "redis")]
            TierLimiters::Synced(t) => sum(t, super::AnySyncedLimiter::len),
            #[cfg(feature = "redis")]
            TierLimiters::Leased(t) => sum(t, crate::redis::LeasedLimiter::len),
            #[cfg(feature = "redis")]
            TierLimiters::Redis(_) => 0,
        };
        crate::metrics::live_keys(&self.name, keys);
        keys
    }

    /// Decides a request of `cost` for `key` in its tier, without waiting:
    /// `None` for the Redis backend, whose checks are async.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass.
    pub fn try_check_n(&self, key: &str, cost: u32) -> Option<Result<PolicyDecision, CheckError>> {
        let (tier, result) = match &self.backends {
            TierLimiters::Memory(t) => (t.tier_of(key), t.select(key).limiter().check_n(key, cost)),
            #[cfg(feature = "redis")]
            TierLimiters::Synced(t) => (t.tier_of(key), t.select(key).limiter().check_n(key, cost)),
            #[cfg(feature = "redis")]
            TierLimiters::Leased(t) => (t.tier_of(key), t.select(key).limiter().check_n(key, cost)),
            #[cfg(feature = "redis")]
            TierLimiters::Redis(_) => return None,
        };
        Some(result.map(|d| self.decided(key, d, tier)))
    }

    /// Decides a request of `cost` for `key` in its tier, on any backend.
    /// The leased backend waits for a slice when the one it holds cannot
    /// cover `cost` ([`acquire_n`](crate::redis::LeasedLimiter::acquire_n):
    /// one round trip within its timeout; the first request of a key on
    /// a node goes this way) rather than deny;
    /// [`try_check_n`](Self::try_check_n) does not wait.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<PolicyDecision, CheckError> {
        #[cfg(feature = "redis")]
        match &self.backends {
            TierLimiters::Redis(t) => {
                let tier = t.tier_of(key);
                let d = t.tier(tier).limiter().check_n_sourced(key, cost).await?;
                let store_down = !matches!(
                    d.source(),
                    crate::redis::Source::Redis | crate::redis::Source::LocalCache
                );
                return Ok(PolicyDecision {
                    store_down,
                    ..self.decided(key, d.decision(), tier)
                });
            }
            TierLimiters::Leased(t) => {
                let tier = t.tier_of(key);
                let d = t.tier(tier).limiter().acquire_n(key, cost).await?;
                return Ok(self.decided(key, d, tier));
            }
            _ => {}
        }
        match self.try_check_n(key, cost) {
            Some(result) => result,
            None => unreachable_backend(),
        }
    }

    /// The default tier's quota (the policy's `quota`).
    pub fn quota(&self) -> Quota {
        self.default_quota
    }

    /// The quota `key` is checked under now: its tier's (an override, else
    /// the resolver's answer; the default tier for an id beyond the last).
    pub fn quota_for(&self, key: &str) -> Quota {
        let tier = match &self.backends {
            TierLimiters::Memory(t) => t.tier_of(key),
            #[cfg(feature = "redis")]
            TierLimiters::Redis(t) => t.tier_of(key),
            #[cfg(feature = "redis")]
            TierLimiters::Synced(t) => t.tier_of(key),
            #[cfg(feature = "redis")]
            TierLimiters::Leased(t) => t.tier_of(key),
        };
        // A built policy has at least its default tier.
        self.tiers
            .get(tier.index())
            .map_or(self.default_quota, |(_, q)| *q)
    }

    /// Decides as [`try_check_n`](Self::try_check_n) would, recording
    /// nothing: `None` unless the policy is in memory (the other backends
    /// have no peek).
    #[cfg(feature = "http")]
    pub(crate) fn try_peek_n(&self, key: &str, cost: u32) -> Option<Result<Decision, CheckError>> {
        match &self.backends {
            TierLimiters::Memory(t) => Some(t.select(key).limiter().peek_n(key, cost)),
            #[cfg(feature = "redis")]
            _ => None,
        }
    }

    /// Whether the policy's limiters are in this process and decide
    /// without waiting and with a peek (the memory backend).
    #[cfg(feature = "http")]
    pub(crate) fn is_memory(&self) -> bool {
        matches!(self.backends, TierLimiters::Memory(_))
    }

    /// Applies shadow mode and records the decision.
    /// The all-or-nothing protocol for a memory policy (the HTTP layer's
    /// rules): `key`'s tier's limiter finds its state and peeks `cost`;
    /// `None` for another backend.
    #[cfg(feature = "http")]
    pub(crate) fn reserve_held(
        &self,
        key: &str,
        key_id: u64,
        cost: u32,
        held: u64,
    ) -> Option<crate::policy::Held<(Decision, crate::policy::StateId)>> {
        match &self.backends {
            TierLimiters::Memory(t) => Some(
                t.select(key)
                    .limiter()
                    .reserve_held(key, key_id, cost, held),
            ),
            #[cfg(feature = "redis")]
            _ => None,
        }
    }

    /// The all-or-nothing protocol: checks `cost` for `key` in the tier
    /// its reservation chose (`reserved`; else the key's tier now: a tier
    /// change between a peek and its check must not move the check),
    /// counted as [`try_check_n`](Self::try_check_n) counts; `None` for
    /// another backend than memory.
    #[cfg(feature = "http")]
    pub(crate) fn check_held(
        &self,
        key: &str,
        cost: u32,
        held: u64,
        reserved: Option<crate::policy::StateId>,
    ) -> Option<crate::policy::Held<Decision>> {
        use crate::policy::Held;
        match &self.backends {
            TierLimiters::Memory(t) => {
                let reserved_tier = reserved.and_then(|id| {
                    (0..t.len()).map(TierId::new).find(|&tier| {
                        crate::policy::address_of(t.tier(tier).limiter()) == id.owner()
                    })
                });
                let tier = reserved_tier.unwrap_or_else(|| t.tier_of(key));
                Some(match t.tier(tier).limiter().check_held(key, cost, held) {
                    Held::Decided(result) => {
                        Held::Decided(result.map(|d| self.decided(key, d, tier).decision()))
                    }
                    Held::NeedStripe(lock_id) => Held::NeedStripe(lock_id),
                })
            }
            #[cfg(feature = "redis")]
            _ => None,
        }
    }

    fn decided(&self, key: &str, decision: Decision, tier: TierId) -> PolicyDecision {
        let decided = PolicyDecision {
            decision,
            tier,
            shadow: self.shadow,
            store_down: false,
        };
        crate::metrics::policy_decision(&self.name, key, decision.is_allowed(), self.shadow);
        decided
    }
}

/// Only the Redis backend has no synchronous check, and `check_n` handles
/// it first: a permanent denial rather than a panic.
#[cold]
fn unreachable_backend() -> Result<PolicyDecision, CheckError> {
    Ok(PolicyDecision {
        decision: Decision::deny(0, 0, 0, u64::MAX),
        tier: TierId::DEFAULT,
        shadow: false,
        store_down: false,
    })
}
