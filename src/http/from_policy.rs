//! Policy-file policies behind the layer (features `http` and `serde`):
//! a [`PolicyLimiter`] as a [`Rule`], its key kind as a [`ClientClass`]'s key,
//! and a whole layer from a [`PolicyFile`].

use super::key::KeyExtractor;
use super::layer::{BuildError, RateLimitLayer, RateLimitLayerBuilder};
use super::policy::{AsyncBackend, Backend, BackendFuture, ClientClass, Rule, RuleLimiter};
use crate::policy::config::{ConfigError, KeyKind, PolicyFile, PolicyLimiter};
use crate::policy::{Held, StateId, TierId};
use crate::sync::Arc;
use crate::{CheckError, Decision, Quota};
use http::HeaderName;
use std::fmt;

/// Why a policy could not be put behind the layer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyLayerError {
    /// The policy keys on a name of the application's own (`key =
    /// "user"`): the layer cannot know where that key is in a request.
    /// Give the class an explicit extractor:
    /// `ClientClass::new(name, KeyExtractor::from_fn(..)).rule(Rule::from_policy(limiter))`.
    NamedKey {
        /// The policy.
        policy: String,
        /// The key kind's name.
        name: String,
    },
    /// The policy keys on a header whose name is not a valid HTTP header
    /// name.
    InvalidHeaderName {
        /// The policy.
        policy: String,
        /// The name as written.
        name: String,
    },
    /// [`RateLimitLayer::from_policies`] was asked for a policy the file
    /// does not hold.
    UnknownPolicy(String),
    /// The policy's limiters could not be built (a Redis server that
    /// cannot be reached, a backend that needs feature `redis`).
    Config(ConfigError),
    /// The layer could not be built (no policy named).
    Build(BuildError),
}

impl fmt::Display for PolicyLayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyLayerError::NamedKey { policy, name } => write!(
                f,
                "policy {policy:?} keys on {name:?}, which the layer cannot find in a request \
                 (it knows \"global\", \"ip\", \"bearer\" and \"header:NAME\"): \
                 give its class an explicit key extractor \
                 (ClientClass::new(name, extractor).rule(Rule::from_policy(limiter)))"
            ),
            PolicyLayerError::InvalidHeaderName { policy, name } => {
                write!(f, "policy {policy:?}: {name:?} is not a valid header name")
            }
            PolicyLayerError::UnknownPolicy(name) => {
                write!(f, "the policy file has no policy {name:?}")
            }
            PolicyLayerError::Config(e) => e.fmt(f),
            PolicyLayerError::Build(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PolicyLayerError {
    // Display already prints the wrapped error's message, so the chain
    // continues below it (as `#[error(transparent)]` does): printed once.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PolicyLayerError::Config(e) => e.source(),
            PolicyLayerError::Build(e) => e.source(),
            _ => None,
        }
    }
}

impl From<ConfigError> for PolicyLayerError {
    fn from(e: ConfigError) -> Self {
        PolicyLayerError::Config(e)
    }
}

impl From<BuildError> for PolicyLayerError {
    fn from(e: BuildError) -> Self {
        PolicyLayerError::Build(e)
    }
}

/// A memory-backed policy, checked in `call`.
struct SyncPolicy(Arc<PolicyLimiter>);

impl Backend for SyncPolicy {
    fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        match self.0.try_check_n(key, cost) {
            Some(result) => result.map(|d| d.decision()),
            // Only a memory policy is wrapped here.
            None => Ok(never_admitted()),
        }
    }

    fn peek_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        self.0.try_peek_n(key, cost).unwrap_or(Ok(never_admitted()))
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }

    fn quota_for(&self, key: &str) -> Quota {
        PolicyLimiter::quota_for(&self.0, key)
    }

    fn lock_id(&self, _key: &str, key_id: u64) -> u64 {
        // One key's state, one lock, as for a keyed limiter: clients are
        // not serialized on one stripe.
        key_id
    }

    fn reserve_held(
        &self,
        key: &str,
        key_id: u64,
        cost: u32,
        held: u64,
    ) -> Held<(Decision, StateId)> {
        self.0
            .reserve_held(key, key_id, cost, held)
            .unwrap_or(Held::Decided(Ok((
                never_admitted(),
                StateId::of(0, key_id),
            ))))
    }

    fn check_held(
        &self,
        key: &str,
        cost: u32,
        held: u64,
        reserved: Option<StateId>,
    ) -> Held<Decision> {
        self.0
            .check_held(key, cost, held, reserved)
            .unwrap_or(Held::Decided(Ok(never_admitted())))
    }
}

/// A policy on Redis (one call per decision), or synced or leased (local
/// decisions, a renewal round trip when a leased slice runs out).
struct AsyncPolicy(Arc<PolicyLimiter>);

impl AsyncBackend for AsyncPolicy {
    fn check_n(&self, key: String, cost: u32) -> BackendFuture {
        let limiter = Arc::clone(&self.0);
        Box::pin(async move {
            let d = limiter.check_n(&key, cost).await?;
            Ok(d.decision())
        })
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }

    fn quota_for(&self, key: &str) -> Quota {
        PolicyLimiter::quota_for(&self.0, key)
    }
}

/// A denial no retry passes: what a backend answers for a check it cannot
/// make (never reached: each wrapper holds only the backends it checks).
#[cold]
fn never_admitted() -> Decision {
    Decision::deny(0, 0, 0, u64::MAX)
}

impl Rule {
    /// The rule a policy-file policy makes: named after the policy, its
    /// tiers' quotas per key (the headers report the quota of the key's
    /// tier), and shadow mode when the policy has `shadow = true`.
    ///
    /// A policy in memory is checked in `call`, like [`Rule::new`]; on
    /// Redis, synced or leased it is awaited, like
    /// [`Rule::new_async`] (so it must be its class's only rule; a synced
    /// policy too, since it has no peek to take part in an all-or-nothing
    /// check). A shadow policy must also be its class's only rule
    /// ([`Rule::shadow`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use rategate::http::{KeyExtractor, RateLimitLayer, Rule, ClientClass};
    /// use rategate::policy::TierId;
    /// use rategate::policy::config::{PolicyFile, PolicyLimiter};
    /// use std::sync::Arc;
    ///
    /// let file = PolicyFile::from_toml(r#"
    ///     [policies.per-user]
    ///     quota = "100/m"
    ///     key = "user"
    /// "#)?;
    /// let limiter = PolicyLimiter::build(
    ///     file.policy("per-user").unwrap(),
    ///     Box::new(|_: &str| TierId::DEFAULT),
    /// ).await?;
    /// // A key kind of the application's own: an explicit extractor.
    /// let by_user = KeyExtractor::from_fn(|parts| {
    ///     parts.headers.get("x-user")?.to_str().ok().map(str::to_owned)
    /// });
    /// let layer = RateLimitLayer::builder()
    ///     .class(ClientClass::new("users", by_user).rule(Rule::from_policy(Arc::new(limiter))))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_policy(limiter: Arc<PolicyLimiter>) -> Rule {
        let name = limiter.name().to_owned();
        let shadow = limiter.shadow();
        let quotas: Vec<Quota> = limiter.tiers().iter().map(|(_, q)| *q).collect();
        let backend = if limiter.is_memory() {
            RuleLimiter::Sync(Arc::new(SyncPolicy(limiter)))
        } else {
            RuleLimiter::Async(Arc::new(AsyncPolicy(limiter)))
        };
        Rule::from_limiter(&name, backend)
            .with_tier_quotas(&quotas)
            .shadow(shadow)
    }
}

impl ClientClass {
    /// A class of one policy-file policy: named after the policy, keyed as
    /// its `key` says (`"global"`: one key for all; `"ip"`: the peer's
    /// address, as [`KeyExtractor::peer_ip`]; `"bearer"`: the token of
    /// `Authorization: Bearer <token>`, as [`KeyExtractor::bearer_token`];
    /// `"header:NAME"`: that header's value), with [`Rule::from_policy`] as
    /// its rule. A request without the key (no header, or no bearer token)
    /// goes on to the layer's next class, and is answered `400` if no class
    /// has its key. Behind a reverse proxy, key by
    /// [`KeyExtractor::client_ip`] with
    /// `ClientClass::new(..).rule(Rule::from_policy(..))` instead.
    ///
    /// A header or bearer key must be checked by the application
    /// ([`ClientClass::validate`], or the builder's
    /// [`validate_keys`](RateLimitLayerBuilder::validate_keys)): the layer is
    /// not built otherwise, since every invented key would be a fresh
    /// budget.
    ///
    /// # Errors
    ///
    /// [`PolicyLayerError::NamedKey`] for a key kind of the application's
    /// own (`key = "user"`), which needs an explicit extractor;
    /// [`PolicyLayerError::InvalidHeaderName`] for a header name HTTP does
    /// not allow.
    pub fn from_policy(limiter: Arc<PolicyLimiter>) -> Result<ClientClass, PolicyLayerError> {
        let key = policy_key(limiter.name(), limiter.key_kind())?;
        let name = limiter.name().to_owned();
        let mut class = ClientClass::new(&name, key).rule(Rule::from_policy(limiter.clone()));
        class.unchecked_key = matches!(limiter.key_kind(), KeyKind::Bearer | KeyKind::Header(_));
        Ok(class)
    }
}

/// The extractor key kind `kind` of policy `policy` names.
fn policy_key(policy: &str, kind: &KeyKind) -> Result<KeyExtractor, PolicyLayerError> {
    match kind {
        KeyKind::Global => Ok(KeyExtractor::global()),
        KeyKind::Ip => Ok(KeyExtractor::peer_ip()),
        KeyKind::Bearer => Ok(KeyExtractor::bearer_token()),
        KeyKind::Header(name) => HeaderName::from_bytes(name.as_bytes())
            .map(KeyExtractor::header)
            .map_err(|_| PolicyLayerError::InvalidHeaderName {
                policy: policy.to_owned(),
                name: name.clone(),
            }),
        KeyKind::Named(name) => Err(PolicyLayerError::NamedKey {
            policy: policy.to_owned(),
            name: name.clone(),
        }),
    }
}

impl RateLimitLayer {
    /// A layer of the policies `names` of `file`, one [class](ClientClass) each
    /// ([`ClientClass::from_policy`]), tried in the order given: the first whose
    /// key the request has decides it (a `"header:x-api-key"` or
    /// `"bearer"` policy before an `"ip"` one: clients with a key by key,
    /// the others by address).
    /// Each policy's keys go to its default tier unless the file overrides
    /// them; for a resolver of your own, build with [`PolicyLimiter::build`]
    /// and [`ClientClass::from_policy`].
    ///
    /// The builder's defaults apply (the rate-limit fields on 429s only),
    /// and no key check: a policy keyed on a header or a bearer token is
    /// refused ([`BuildError::UncheckedKeys`](super::BuildError::UncheckedKeys)).
    /// For those, and other header choices, start from a builder:
    /// `RateLimitLayer::builder().validate_keys(|class, key| ..).policies(&file,
    /// names).await?.build()?` ([`RateLimitLayerBuilder::policies`]).
    ///
    /// # Errors
    ///
    /// [`PolicyLayerError::UnknownPolicy`] for a name the file lacks,
    /// [`PolicyLayerError::Config`] when a policy's limiters cannot be built
    /// (a Redis server that does not answer), the errors of
    /// [`ClientClass::from_policy`], and [`PolicyLayerError::Build`] for no names
    /// or a Redis policy that is not alone in its class.
    pub async fn from_policies(
        file: &PolicyFile,
        names: &[&str],
    ) -> Result<RateLimitLayer, PolicyLayerError> {
        Ok(RateLimitLayer::builder()
            .policies(file, names)
            .await?
            .build()?)
    }
}

impl RateLimitLayerBuilder {
    /// Adds the policies `names` of `file` as classes, one each, as
    /// [`RateLimitLayer::from_policies`] does, keeping the builder's other
    /// choices (header fields, shadow mode, a responder).
    ///
    /// # Errors
    ///
    /// As [`RateLimitLayer::from_policies`], except the build errors, which
    /// come from [`build`](RateLimitLayerBuilder::build).
    pub async fn policies(
        mut self,
        file: &PolicyFile,
        names: &[&str],
    ) -> Result<RateLimitLayerBuilder, PolicyLayerError> {
        for name in names {
            let policy = file
                .policy(name)
                .ok_or_else(|| PolicyLayerError::UnknownPolicy((*name).to_owned()))?;
            // The key kind first: a policy the layer cannot key fails
            // before any connection is made.
            policy_key(&policy.name, &policy.key)?;
            let limiter = PolicyLimiter::build(policy, Box::new(|_: &str| TierId::DEFAULT)).await?;
            self = self.class(ClientClass::from_policy(Arc::new(limiter))?);
        }
        Ok(self)
    }
}
