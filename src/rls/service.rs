//! The decisions of Envoy's rate-limit service (RLS v3,
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on
//! rategate's limiters: the matching of [`config`](super::config), one
//! status per request descriptor, the overall code, shadow mode,
//! `replaces`, `hits_addend` and the per-descriptor `limit` override.
//!
//! Every rule gets one limiter of its algorithm on its domain's backend,
//! keyed by the counter key of the request's entries
//! ([`Match::counter_key`]):
//!
//! * in memory (no `backend:`, or `kind: memory`): a [`KeyedRateLimiter`]
//!   on a clock of Unix time, so fixed windows fall on multiples of their
//!   unit from the Unix epoch, as envoyproxy/ratelimit's do;
//! * on Redis (`redis`: one atomic script call per descriptor, batched),
//!   synced (`synced`: local decisions, synced in batches) or leased
//!   (`leased`: local decisions on slices leased from Redis): a
//!   [`PolicyLimiter`] built from the `backend:` fields as a policy file's
//!   `backend` table, its Redis keys named by the rule's place and the
//!   counter key.
//!
//! A reload keeps the limiter (and so the counts) of every rule whose
//! place, quota, algorithm and backend are unchanged.

use super::config::{BackendSpec, BackendValue, Config, Domain, Match, Rule, Unit};
use crate::policy::config::{KeyKind, Policy, PolicyLimiter, Store};
use crate::policy::{KeyedLimit, Limit, TierId};
use crate::sync::{AtomicU64, Ordering};
use crate::{
    AlgorithmKind, AnyAlgorithm, CheckError, Clock, Decision, KeyedRateLimiter, Quota, UnixClock,
};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Which counters a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Charge {
    /// Every matched descriptor's counter is charged only when none of
    /// them is over: a request refused by one limit takes nothing from the
    /// others (so a client over its own limit cannot spend a limit it
    /// shares with others: a per-IP flood does not drain a global budget).
    #[default]
    AllOrNothing,
    /// envoyproxy/ratelimit's: every matched descriptor's counter is
    /// charged, whether or not the request is refused.
    EveryMatch,
}

/// Rate-limit headers the service asks Envoy to add to the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Headers {
    /// None (Envoy's filter can make the draft headers itself from the
    /// statuses: `enable_x_ratelimit_headers`).
    #[default]
    Off,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    Draft,
    /// The IETF fields `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset` (envoyproxy/ratelimit's names).
    Ietf,
}

/// How the service decides.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which counters a request is charged to.
    pub charge: Charge,
    /// Global shadow mode: every decision is made and counted, and the
    /// overall code is always OK (the statuses still say which were over).
    pub shadow_mode: bool,
    /// Headers for Envoy to add.
    pub headers: Headers,
    /// The most keys one rule's limiter holds; keys past it share one
    /// overflow state (see [`KeyedRateLimiterBuilder::max_keys`](crate::KeyedRateLimiterBuilder::max_keys)).
    pub max_keys_per_rule: usize,
    /// The most distinct quotas of requests' `limit` overrides held at
    /// once; a request with a new one beyond it is refused
    /// ([`RequestError::TooManyOverrides`]).
    pub max_overrides: usize,
    /// The most distinct override quotas held at once on the domains of
    /// shared backends: each holds its own Redis connections. One unused
    /// for a minute makes room for a new one; beyond that a request with a
    /// new quota is refused ([`RequestError::TooManyOverrides`]).
    pub max_shared_overrides: usize,
    /// How often idle keys are swept.
    pub sweep_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            charge: Charge::default(),
            shadow_mode: false,
            headers: Headers::default(),
            max_keys_per_rule: 1_000_000,
            max_overrides: 1_000,
            max_shared_overrides: 64,
            sweep_interval: Duration::from_secs(10),
        }
    }
}

/// A request the service refuses to decide (gRPC `INVALID_ARGUMENT`, or
/// `RESOURCE_EXHAUSTED` for too many overrides).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The request names no domain.
    EmptyDomain,
    /// The request carries no descriptor.
    NoDescriptors,
    /// A descriptor's `limit` override has an unknown or unset unit.
    BadOverrideUnit(i32),
    /// A new override quota beyond [`Options::max_overrides`] (or
    /// [`Options::max_shared_overrides`] on a shared backend).
    TooManyOverrides,
    /// More than [`MAX_DESCRIPTORS`] descriptors, more than
    /// [`MAX_ENTRIES`] entries in one, or a key or value longer than
    /// [`MAX_ENTRY_BYTES`]: what no gateway sends, and what would cost the
    /// server time or memory out of proportion.
    TooLarge(&'static str),
    /// A `limit` override on a domain of a shared backend whose limiter
    /// could not be built (Redis unreachable): gRPC `UNAVAILABLE`, for
    /// Envoy's `failure_mode_deny` to decide.
    Unavailable(String),
}

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 256;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;
/// The longest key or value of an entry, in bytes: each distinct value
/// may be a key held in memory for a whole window.
pub const MAX_ENTRY_BYTES: usize = 4096;

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::EmptyDomain => f.write_str("rate limit domain must not be empty"),
            RequestError::NoDescriptors => {
                f.write_str("rate limit descriptor list must not be empty")
            }
            RequestError::BadOverrideUnit(n) => {
                write!(
                    f,
                    "a descriptor's limit override has unit {n}, which is not a unit"
                )
            }
            RequestError::TooManyOverrides => {
                f.write_str("too many distinct limit overrides in use")
            }
            RequestError::TooLarge(what) => write!(f, "request too large: {what}"),
            RequestError::Unavailable(why) => write!(f, "backend unavailable: {why}"),
        }
    }
}

impl std::error::Error for RequestError {}

type Keyed = KeyedRateLimiter<String, AnyAlgorithm, UnixClock>;

/// Where a rule's counters live.
#[derive(Clone)]
enum Backend {
    /// In this process.
    Memory(Arc<Keyed>),
    /// In the domain's shared store: Redis, synced or leased.
    Shared(Arc<PolicyLimiter>),
}

/// A rule's counters for `/metrics`, in hits (`rategate_rls_*_total`,
/// labelled with the domain and the rule's place), and the latency of its
/// shared backend's checks.
struct RuleStats {
    hits: metrics::Counter,
    over_limit: metrics::Counter,
    near_limit: metrics::Counter,
    shadow_mode: metrics::Counter,
    store_down: metrics::Counter,
    backend_seconds: metrics::Histogram,
}

impl RuleStats {
    fn new(domain: &str, rule: &str) -> Arc<RuleStats> {
        let (d, r) = (domain.to_owned(), rule.to_owned());
        Arc::new(RuleStats {
            hits: metrics::counter!("rategate_rls_hits_total", "domain" => d.clone(), "rule" => r.clone()),
            over_limit: metrics::counter!("rategate_rls_over_limit_total", "domain" => d.clone(), "rule" => r.clone()),
            near_limit: metrics::counter!("rategate_rls_near_limit_total", "domain" => d.clone(), "rule" => r.clone()),
            shadow_mode: metrics::counter!("rategate_rls_shadow_mode_total", "domain" => d.clone(), "rule" => r.clone()),
            store_down: metrics::counter!("rategate_rls_store_down_total", "domain" => d.clone(), "rule" => r.clone()),
            backend_seconds: metrics::histogram!("rategate_rls_backend_seconds", "domain" => d, "rule" => r),
        })
    }

    /// Counts one descriptor's decision, its cost capped at u32 (what a
    /// limit can hold; a client's u64 must not wrap the counters). Near
    /// the limit: charged, with less than a fifth of the limit left
    /// (envoyproxy/ratelimit's 80%).
    fn record(&self, plan: &Plan, outcome: &Outcome, charged: bool) {
        let hits = plan.cost.min(u64::from(u32::MAX));
        self.hits.increment(hits);
        let over = match outcome {
            Outcome::Unlimited => return,
            Outcome::Over => true,
            Outcome::Decided(d) => {
                if charged && d.is_allowed() && u64::from(d.remaining()) * 5 < u64::from(d.limit())
                {
                    self.near_limit.increment(hits);
                }
                !d.is_allowed()
            }
        };
        if over {
            if plan.shadow {
                self.shadow_mode.increment(hits);
            } else {
                self.over_limit.increment(hits);
            }
        }
    }
}

/// A rule's limiter, and what it was built for: a reload keeps it for a
/// rule at the same place with the same quota, algorithm and backend.
struct RuleLimiter {
    /// `None`: 0 requests per unit (every hit is over).
    quota: Option<Quota>,
    algorithm: AlgorithmKind,
    /// The domain's `backend:` (`None`: memory with the options' sizes).
    spec: Option<BackendSpec>,
    /// `None` for a rule of 0 requests.
    limiter: Option<Backend>,
    stats: Arc<RuleStats>,
}

/// The limiters of one loaded configuration, by rule [`id`](Rule::id).
type Limiters = HashMap<String, RuleLimiter>;

/// The limiters of one loaded configuration, and the stores of the
/// domains on a shared backend (for their `limit` overrides).
struct Loaded {
    config: Arc<Config>,
    limiters: Limiters,
    stores: HashMap<String, Store>,
}

/// The limiter of one `limit` override quota on one domain, and the
/// store it was built on (`None`: memory).
struct OverrideLimiter {
    store: Option<Store>,
    backend: Backend,
    stats: Arc<RuleStats>,
    /// When a request last used it, in Unix seconds (shared ones only are
    /// evicted by it). Relaxed loads and stores: a hint for eviction that
    /// orders no other memory (an eviction that reads it stale removes a
    /// limiter a request may still hold through its own `Arc`).
    last_used: AtomicU64,
}

impl OverrideLimiter {
    /// Whether nothing needs it: no request holds it and, in memory, it
    /// holds no key (its keys swept idle).
    fn idle(&self) -> bool {
        match &self.backend {
            Backend::Memory(l) => l.is_empty() && Arc::strong_count(l) == 1,
            Backend::Shared(l) => Arc::strong_count(l) == 1,
        }
    }
}

/// The service: a configuration, swapped whole by [`reload`](Self::reload),
/// and the limiters of its rules.
pub struct RateLimitCore {
    loaded: RwLock<Arc<Loaded>>,
    overrides: Mutex<HashMap<(String, Quota), OverrideLimiter>>,
    /// Held by a reload while it builds (and connects).
    reloading: tokio::sync::Mutex<()>,
    /// By domain: held while one of its shared overrides' limiters is
    /// built, so a domain connects once at a time (and a hung backend
    /// holds up its own domain only); inside, until when a failed (or
    /// abandoned) build is not retried.
    shared_builds: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<std::time::Instant>>>>>,
    clock: UnixClock,
    options: Options,
}

impl std::fmt::Debug for RateLimitCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitCore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// A rule's quota: `requests_per_unit` per unit, with the rule's burst
/// for the buckets. `None` for 0 requests (every hit is over) and
/// unlimited rules.
fn quota_of(rule: &Rule) -> Result<Option<Quota>, crate::QuotaError> {
    let Some(unit) = rule.unit else {
        return Ok(None);
    };
    if rule.unlimited || rule.requests_per_unit == 0 {
        return Ok(None);
    }
    let quota = Quota::with_period(rule.requests_per_unit, Duration::from_secs(unit.seconds()))?;
    match rule.burst {
        Some(b) => quota.burst(b).map(Some),
        None => Ok(Some(quota)),
    }
}

/// The key prefix of a shared backend without a `prefix` field.
pub const DEFAULT_PREFIX: &str = "rategate-rls";

/// The fields of a `backend:` whose values are whole numbers, and the one
/// that is a fraction; every other field is text (or a list of texts).
const INTEGER_FIELDS: [&str; 6] = [
    "timeout_ms",
    "interval_ms",
    "sweep_interval_ms",
    "max_keys",
    "wait_for_replicas",
    "master_db",
];

/// `spec` read as a policy file's `backend` table, for a limiter of
/// `algorithm` in `domain`: every error names the domain and the field.
fn store_of(
    domain: &str,
    spec: &BackendSpec,
    algorithm: AlgorithmKind,
) -> Result<Store, RuleError> {
    use toml::Value;
    let mut table = toml::Table::new();
    table.insert("kind".into(), Value::String(spec.kind.clone()));
    if spec.kind != "memory" && !spec.fields.contains_key("prefix") {
        table.insert("prefix".into(), Value::String(DEFAULT_PREFIX.into()));
    }
    for (name, value) in &spec.fields {
        let value = match value {
            BackendValue::List(items) => {
                Value::Array(items.iter().cloned().map(Value::String).collect())
            }
            BackendValue::Text(text) if INTEGER_FIELDS.contains(&name.as_str()) => text
                .parse::<i64>()
                .map_or_else(|_| Value::String(text.clone()), Value::Integer),
            BackendValue::Text(text) if name == "share" => text
                .parse::<f64>()
                .map_or_else(|_| Value::String(text.clone()), Value::Float),
            BackendValue::Text(text) => Value::String(text.clone()),
        };
        table.insert(name.clone(), value);
    }
    crate::policy::config::store_of(domain, &table, algorithm).map_err(|e| RuleError {
        place: domain.to_owned(),
        message: match e.field_name() {
            Some(field) => format!("{field}: {}", e.message()),
            None => e.message().to_owned(),
        },
    })
}

/// A shared limiter of `algorithm` and `quota` on `store`, named `name`
/// (the rule's place) in errors and the crate's policy metrics.
async fn shared_limiter(
    name: &str,
    algorithm: AlgorithmKind,
    quota: Quota,
    store: &Store,
) -> Result<PolicyLimiter, RuleError> {
    let policy = Policy {
        name: name.to_owned(),
        algorithm,
        key: KeyKind::Global,
        tiers: vec![("default".to_owned(), quota)],
        overrides: Vec::new(),
        backend: store.clone(),
        shadow: false,
    };
    PolicyLimiter::build(&policy, Box::new(|_: &str| TierId::DEFAULT))
        .await
        .map_err(|e| RuleError {
            place: name.to_owned(),
            message: match e.field_name() {
                Some(field) => format!("{field}: {}", e.message()),
                None => e.message().to_owned(),
            },
        })
}

/// The Redis key of a counter: `r` and the rule's [`id`](Rule::id), or
/// `o` and the domain for an override, length-prefixed, then the counter
/// key: no two rules, domains or overrides share one.
fn shared_key(tag: char, owner: &str, counter_key: &str) -> String {
    format!("{tag}{}:{owner}{counter_key}", owner.len())
}

impl RateLimitCore {
    /// A service deciding by `config`, connecting to the shared backends
    /// its domains name.
    ///
    /// # Errors
    ///
    /// A rule whose quota the algorithm cannot take (the leaky bucket
    /// needs at least one request per 1000 s), named by its place; a
    /// domain's `backend:` that is not a backend (named by the domain and
    /// field), or whose Redis cannot be reached.
    pub async fn new(config: Config, options: Options) -> Result<RateLimitCore, RuleError> {
        let clock = UnixClock::new();
        let (limiters, stores) = Self::load(&config, None, &clock, &options).await?;
        Ok(RateLimitCore {
            loaded: RwLock::new(Arc::new(Loaded {
                config: Arc::new(config),
                limiters,
                stores,
            })),
            overrides: Mutex::new(HashMap::new()),
            reloading: tokio::sync::Mutex::new(()),
            shared_builds: Mutex::new(HashMap::new()),
            clock,
            options,
        })
    }

    /// Replaces the configuration. Rules whose place, quota, algorithm
    /// and backend are unchanged keep their counts; on an error nothing
    /// changes.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub async fn reload(&self, config: Config) -> Result<(), RuleError> {
        let _one_at_a_time = self.reloading.lock().await;
        let old = Arc::clone(&self.loaded.read());
        let (limiters, stores) =
            Self::load(&config, Some(&old.limiters), &self.clock, &self.options).await?;
        *self.loaded.write() = Arc::new(Loaded {
            config: Arc::new(config),
            limiters,
            stores,
        });
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.loaded.read().config)
    }

    /// The rules in force, one line each: place, limit, algorithm,
    /// backend, and the flags that change decisions (what `/rlconfig`
    /// shows).
    pub fn effective_rules(&self) -> String {
        use std::fmt::Write;
        let loaded = Arc::clone(&self.loaded.read());
        let mut out = String::new();
        for domain in loaded.config.domains() {
            let backend = domain
                .backend
                .as_ref()
                .map_or("memory", |b| b.kind.as_str());
            // Names are the configuration's: escaped, one rule a line.
            let _ = writeln!(
                out,
                "domain {} (backend {backend})",
                domain.name.escape_debug()
            );
            for rule in domain.rules() {
                let _ = write!(out, "  {}: ", rule.path.escape_debug());
                match (rule.unlimited, rule.unit) {
                    (true, _) => out.push_str("unlimited"),
                    (false, Some(unit)) => {
                        let _ = write!(
                            out,
                            "{}/{} {}",
                            rule.requests_per_unit,
                            unit.name(),
                            rule.algorithm
                        );
                        if let Some(b) = rule.burst {
                            let _ = write!(out, " burst={b}");
                        }
                    }
                    (false, None) => out.push_str("no limit"),
                }
                if let Some(name) = &rule.name {
                    let _ = write!(out, " name={}", name.escape_debug());
                }
                if !rule.replaces.is_empty() {
                    let _ = write!(out, " replaces={}", rule.replaces.join(",").escape_debug());
                }
                if rule.shadow_mode {
                    out.push_str(" shadow_mode");
                }
                out.push('\n');
            }
        }
        out
    }

    async fn load(
        config: &Config,
        old: Option<&Limiters>,
        clock: &UnixClock,
        options: &Options,
    ) -> Result<(Limiters, HashMap<String, Store>), RuleError> {
        let mut limiters = HashMap::new();
        let mut stores = HashMap::new();
        for domain in config.domains() {
            let spec = domain.backend.as_ref();
            // The memory backend's sizes, else the options'.
            let (mut max_keys, mut sweep) = (options.max_keys_per_rule, options.sweep_interval);
            match spec {
                Some(s) if s.kind == "memory" => {
                    if let Store::Memory {
                        max_keys: keys,
                        sweep_interval,
                    } = store_of(&domain.name, s, AlgorithmKind::FixedWindow)?
                    {
                        max_keys = keys.unwrap_or(max_keys);
                        sweep = sweep_interval.unwrap_or(sweep);
                    }
                }
                Some(s) => {
                    // Overrides are fixed windows, which every shared
                    // backend takes.
                    stores.insert(
                        domain.name.clone(),
                        store_of(&domain.name, s, AlgorithmKind::FixedWindow)?,
                    );
                }
                None => {}
            }
            let shared = spec.is_some_and(|s| s.kind != "memory");
            for rule in domain.rules() {
                let error = |message: String| RuleError {
                    place: rule.path.clone(),
                    message,
                };
                if rule.unlimited || rule.unit.is_none() {
                    continue;
                }
                let quota = quota_of(rule).map_err(|e| error(e.to_string()))?;
                let kept = old.and_then(|o| o.get(&rule.id)).filter(|r| {
                    r.quota == quota && r.algorithm == rule.algorithm && r.spec.as_ref() == spec
                });
                let (limiter, stats) = match (kept, quota) {
                    (Some(r), _) => (r.limiter.clone(), Arc::clone(&r.stats)),
                    (None, None) => (None, RuleStats::new(&domain.name, &rule.path)),
                    (None, Some(quota)) => {
                        let backend = match spec.filter(|_| shared) {
                            None => Backend::Memory(Arc::new(
                                Self::limiter(quota, rule.algorithm, clock, max_keys, sweep)
                                    .map_err(|e| error(e.to_string()))?,
                            )),
                            Some(s) => {
                                let store = store_of(&domain.name, s, rule.algorithm)?;
                                Backend::Shared(Arc::new(
                                    shared_limiter(&rule.path, rule.algorithm, quota, &store)
                                        .await?,
                                ))
                            }
                        };
                        (Some(backend), RuleStats::new(&domain.name, &rule.path))
                    }
                };
                limiters.insert(
                    rule.id.clone(),
                    RuleLimiter {
                        quota,
                        algorithm: rule.algorithm,
                        spec: spec.cloned(),
                        limiter,
                        stats,
                    },
                );
            }
        }
        Ok((limiters, stores))
    }

    fn limiter(
        quota: Quota,
        algorithm: AlgorithmKind,
        clock: &UnixClock,
        max_keys: usize,
        sweep: Duration,
    ) -> Result<Keyed, crate::QuotaError> {
        KeyedRateLimiter::<String, AnyAlgorithm>::builder(quota)
            .clock(clock.clone())
            .algorithm(AnyAlgorithm::new(algorithm, &quota)?)
            .max_keys(max_keys)
            .auto_sweep(sweep)
            .build()
    }

    /// Decides `request`.
    ///
    /// # Errors
    ///
    /// [`RequestError`] for a request without a domain or descriptors, an
    /// override with a bad unit, one override quota too many, or an
    /// override whose shared backend cannot be reached.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, RequestError> {
        if request.domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(RequestError::NoDescriptors);
        }
        if request.descriptors.len() > MAX_DESCRIPTORS {
            return Err(RequestError::TooLarge("more than 256 descriptors"));
        }
        for d in &request.descriptors {
            if d.entries.len() > MAX_ENTRIES {
                return Err(RequestError::TooLarge(
                    "a descriptor with more than 64 entries",
                ));
            }
            if d.entries
                .iter()
                .any(|e| e.key.len() > MAX_ENTRY_BYTES || e.value.len() > MAX_ENTRY_BYTES)
            {
                return Err(RequestError::TooLarge("a key or value above 4096 bytes"));
            }
        }
        let loaded = Arc::clone(&self.loaded.read());
        let domain = loaded.config.domain(&request.domain);
        // What each descriptor is decided by; `None`: no limit (no match,
        // an unknown domain, unlimited, or replaced).
        let mut plans: Vec<Option<Plan>> = Vec::with_capacity(request.descriptors.len());
        let mut replaced: Vec<&str> = Vec::new();
        let matches: Vec<Option<Match<'_>>> = request
            .descriptors
            .iter()
            // A descriptor with a `limit` override is not matched: the
            // override replaces the rules (and their `replaces`).
            .map(|d| {
                domain
                    .filter(|_| d.limit.is_none())
                    .and_then(|dom| matching(dom, d))
            })
            .collect();
        for m in matches.iter().flatten() {
            replaced.extend(m.rule.replaces.iter().map(String::as_str));
        }
        for (descriptor, m) in request.descriptors.iter().zip(&matches) {
            let cost = cost_of(request, descriptor);
            if let Some(over) = &descriptor.limit {
                // The override bypasses the rules, for a known domain only.
                if domain.is_none() {
                    plans.push(None);
                    continue;
                }
                let unit =
                    Unit::from_number(over.unit).ok_or(RequestError::BadOverrideUnit(over.unit))?;
                let key = counter_key(descriptor);
                plans.push(Some(
                    self.override_plan(
                        &loaded,
                        &request.domain,
                        over.requests_per_unit,
                        unit,
                        key,
                        cost,
                    )
                    .await?,
                ));
                continue;
            }
            let Some(m) = m else {
                plans.push(None);
                continue;
            };
            let rule = m.rule;
            if rule.unlimited {
                plans.push(Some(Plan::unlimited()));
                continue;
            }
            if rule.name.as_deref().is_some_and(|n| replaced.contains(&n)) {
                plans.push(None);
                continue;
            }
            let Some(unit) = rule.unit else {
                plans.push(None);
                continue;
            };
            let current = RateLimit {
                name: rule.name.clone().unwrap_or_default(),
                requests_per_unit: rule.requests_per_unit,
                unit: unit.number(),
            };
            let found = loaded.limiters.get(rule.id.as_str());
            // `None` for a rule of 0 requests: every hit is over.
            let limiter = found.and_then(|r| r.limiter.clone());
            let key = match &limiter {
                Some(Backend::Shared(_)) => shared_key('r', &rule.id, &m.counter_key),
                _ => m.counter_key.clone(),
            };
            plans.push(Some(Plan {
                limiter,
                key,
                cost,
                current: Some(current),
                unit: Some(unit),
                shadow: rule.shadow_mode,
                stats: found.map(|r| Arc::clone(&r.stats)),
            }));
        }
        let now = self.clock.now();
        let all_or_nothing = self.options.charge == Charge::AllOrNothing;
        // Refused outright: a rule of 0 requests or a cost above u32.
        let doomed = plans
            .iter()
            .flatten()
            .filter(|p| p.enforced())
            .any(Plan::doomed);
        let shared = plans.iter().flatten().any(Plan::is_shared);
        let outcomes = if shared {
            // Boxed: the shared checks' futures would make every
            // request's future (allocated and moved per call) larger.
            Box::pin(self.decide_shared(&plans, all_or_nothing && doomed)).await
        } else {
            self.decide_memory(&plans, doomed)
        };
        // Whether the enforced plans were charged: always with every
        // match; all or nothing, unless the request was refused (on a
        // shared backend, unless refused outright).
        let refused = plans.iter().zip(&outcomes).any(|(p, o)| {
            let enforced = p.as_ref().is_some_and(Plan::enforced);
            enforced
                && match o {
                    Some(Outcome::Over) => true,
                    Some(Outcome::Decided(d)) => !d.is_allowed(),
                    _ => false,
                }
        });
        let enforced_charged = !all_or_nothing || if shared { !doomed } else { !refused };
        for (plan, outcome) in plans.iter().zip(&outcomes) {
            if let (Some(plan), Some(outcome)) = (plan, outcome)
                && let Some(stats) = &plan.stats
            {
                stats.record(plan, outcome, plan.shadow || enforced_charged);
            }
        }
        let statuses: Vec<DescriptorStatus> = plans
            .iter()
            .zip(outcomes)
            .map(|(plan, outcome)| status(plan.as_ref(), outcome, now))
            .collect();
        let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
        let overall = if over && !self.options.shadow_mode {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let shadow: Vec<bool> = plans
            .iter()
            .map(|p| p.as_ref().is_some_and(|p| p.shadow))
            .collect();
        let response_headers_to_add = self.headers(&statuses, &shadow);
        Ok(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            ..Default::default()
        })
    }

    /// The plan of a descriptor's `limit` override: a fixed window of its
    /// quota on the domain's backend, one limiter per quota and domain.
    async fn override_plan(
        &self,
        loaded: &Loaded,
        domain: &str,
        requests_per_unit: u32,
        unit: Unit,
        key: String,
        cost: u64,
    ) -> Result<Plan, RequestError> {
        let current = Some(RateLimit {
            name: String::new(),
            requests_per_unit,
            unit: unit.number(),
        });
        let quota = if requests_per_unit == 0 {
            None
        } else {
            Quota::with_period(requests_per_unit, Duration::from_secs(unit.seconds())).ok()
        };
        let store = loaded.stores.get(domain);
        let (limiter, stats) = match quota {
            None => (None, None),
            Some(quota) => {
                let id = (domain.to_owned(), quota);
                let (backend, stats) = match self.found_override(&id, store) {
                    Some(found) => found,
                    None => match store {
                        None => self.memory_override(id, quota, unit)?,
                        // Boxed: the build's future is large, and only a
                        // new quota's first request runs it.
                        Some(store) => Box::pin(self.shared_override(id, quota, store)).await?,
                    },
                };
                (Some(backend), Some(stats))
            }
        };
        let key = match &limiter {
            Some(Backend::Shared(_)) => shared_key('o', domain, &key),
            _ => key,
        };
        Ok(Plan {
            limiter,
            key,
            cost,
            current,
            unit: Some(unit),
            shadow: false,
            stats,
        })
    }

    /// The override limiter of `id` built on `store`, marked used now.
    fn found_override(
        &self,
        id: &(String, Quota),
        store: Option<&Store>,
    ) -> Option<(Backend, Arc<RuleStats>)> {
        let overrides = self.overrides.lock();
        let o = overrides.get(id).filter(|o| o.store.as_ref() == store)?;
        o.last_used.store(self.seconds(), Ordering::Relaxed);
        Some((o.backend.clone(), Arc::clone(&o.stats)))
    }

    /// Now in Unix seconds.
    fn seconds(&self) -> u64 {
        self.clock.now() / 1_000_000_000
    }

    /// A new in-memory override limiter for `id`: at most
    /// [`Options::max_overrides`], the idle ones making room.
    fn memory_override(
        &self,
        id: (String, Quota),
        quota: Quota,
        unit: Unit,
    ) -> Result<(Backend, Arc<RuleStats>), RequestError> {
        let backend = Backend::Memory(Arc::new(
            Self::limiter(
                quota,
                AlgorithmKind::FixedWindow,
                &self.clock,
                self.options.max_keys_per_rule,
                self.options.sweep_interval,
            )
            .map_err(|_| RequestError::BadOverrideUnit(unit.number()))?,
        ));
        let mut overrides = self.overrides.lock();
        if let Some(o) = overrides.get(&id).filter(|o| o.store.is_none()) {
            return Ok((o.backend.clone(), Arc::clone(&o.stats)));
        }
        let held =
            |o: &HashMap<_, OverrideLimiter>| o.values().filter(|o| o.store.is_none()).count();
        if held(&overrides) >= self.options.max_overrides {
            // Quotas that nothing needs make room.
            overrides.retain(|_, o| o.store.is_some() || !o.idle());
        }
        if held(&overrides) >= self.options.max_overrides {
            return Err(RequestError::TooManyOverrides);
        }
        Ok(self.insert_override(&mut overrides, id, None, backend))
    }

    /// A new override limiter for `id` on a shared `store`: built (and
    /// connected) one at a time per domain within the store's timeout
    /// (1 s without one), at most [`Options::max_shared_overrides`] held,
    /// and not tried again for a second after a build failed or was
    /// abandoned (its caller gone, as when Envoy's deadline passes).
    async fn shared_override(
        &self,
        id: (String, Quota),
        quota: Quota,
        store: &Store,
    ) -> Result<(Backend, Arc<RuleStats>), RequestError> {
        let domain = id.0.as_str();
        // The domains are the configuration's (an unknown one has no
        // overrides), so this map is bounded by it.
        let gate = Arc::clone(
            self.shared_builds
                .lock()
                .entry(domain.to_owned())
                .or_default(),
        );
        let mut retry_after = gate.lock().await;
        // Built by the caller this one waited for.
        if let Some(found) = self.found_override(&id, Some(store)) {
            return Ok(found);
        }
        if retry_after.is_some_and(|until| std::time::Instant::now() < until) {
            return Err(RequestError::Unavailable(format!(
                "the backend of domain '{domain}' failed to connect less than a second ago"
            )));
        }
        {
            let mut overrides = self.overrides.lock();
            let held =
                |o: &HashMap<_, OverrideLimiter>| o.values().filter(|o| o.store.is_some()).count();
            if held(&overrides) >= self.options.max_shared_overrides {
                let now = self.seconds();
                overrides.retain(|_, o| {
                    o.store.is_none()
                        || !o.idle()
                        || now.saturating_sub(o.last_used.load(Ordering::Relaxed)) < 60
                });
            }
            if held(&overrides) >= self.options.max_shared_overrides {
                return Err(RequestError::TooManyOverrides);
            }
        }
        let timeout = match store {
            Store::Redis { timeout, .. }
            | Store::Synced { timeout, .. }
            | Store::Leased { timeout, .. } => *timeout,
            Store::Memory { .. } => None,
        }
        .unwrap_or(Duration::from_secs(1));
        // Set before the build: if this future is dropped mid-build, the
        // next caller backs off as after a failure.
        *retry_after = Some(std::time::Instant::now() + timeout + Duration::from_secs(1));
        let built = tokio::time::timeout(
            timeout,
            shared_limiter(domain, AlgorithmKind::FixedWindow, quota, store),
        )
        .await;
        let limiter = match built {
            Ok(Ok(limiter)) => limiter,
            failed => {
                *retry_after = Some(std::time::Instant::now() + Duration::from_secs(1));
                return Err(RequestError::Unavailable(match failed {
                    Ok(Err(e)) => e.message,
                    _ => format!("connecting took longer than {timeout:?}"),
                }));
            }
        };
        *retry_after = None;
        let mut overrides = self.overrides.lock();
        let backend = Backend::Shared(Arc::new(limiter));
        Ok(self.insert_override(&mut overrides, id, Some(store.clone()), backend))
    }

    fn insert_override(
        &self,
        overrides: &mut HashMap<(String, Quota), OverrideLimiter>,
        id: (String, Quota),
        store: Option<Store>,
        backend: Backend,
    ) -> (Backend, Arc<RuleStats>) {
        let stats = RuleStats::new(&id.0, "override");
        overrides.insert(
            id,
            OverrideLimiter {
                store,
                backend: backend.clone(),
                stats: Arc::clone(&stats),
                last_used: AtomicU64::new(self.seconds()),
            },
        );
        (backend, stats)
    }

    /// Each plan's outcome, all in memory, charging as the options say.
    /// `doomed`: an enforced plan is over whatever its counter holds.
    fn decide_memory(&self, plans: &[Option<Plan>], doomed: bool) -> Vec<Option<Outcome>> {
        let mut decisions: Vec<Option<Outcome>> = plans.iter().map(|_| None).collect();
        match self.options.charge {
            Charge::EveryMatch => {
                for (plan, out) in plans.iter().zip(decisions.iter_mut()) {
                    if let Some(plan) = plan {
                        *out = Some(plan.check_memory(true));
                    }
                }
            }
            Charge::AllOrNothing => {
                // Shadow rules never refuse: each is charged on its own,
                // outside the decision (an over shadow rule must not hold
                // back the enforced ones).
                for (plan, out) in plans.iter().zip(decisions.iter_mut()) {
                    if let Some(plan) = plan.as_ref().filter(|p| p.shadow) {
                        *out = Some(plan.check_memory(true));
                    }
                }
                // The enforced plans, charged together only when all
                // admit (the crate's all-or-nothing decision, under the
                // lock stripes of every key). One that is over whatever
                // its counter holds (0 requests, a cost above u32:
                // `doomed`) refuses the request before anything is charged.
                let mut slot: Vec<Option<usize>> = vec![None; plans.len()];
                let mut charged = Vec::new();
                if !doomed {
                    for (i, p) in plans.iter().enumerate() {
                        let Some(p) = p.as_ref().filter(|p| p.enforced()) else {
                            continue;
                        };
                        let (Some(Backend::Memory(limiter)), Ok(cost)) =
                            (&p.limiter, u32::try_from(p.cost))
                        else {
                            continue;
                        };
                        if cost > 0 {
                            slot[i] = Some(charged.len());
                            charged
                                .push((KeyedLimit::new(Arc::clone(limiter), p.key.clone()), cost));
                        }
                    }
                }
                let limits: Vec<(&dyn Limit, u32)> =
                    charged.iter().map(|(l, c)| (l as &dyn Limit, *c)).collect();
                let mut verdicts = vec![Decision::allowed(0, 0, Duration::ZERO); limits.len()];
                // A member (or members on one state, a descriptor sent
                // twice) whose cost can never pass: the request is over,
                // and nothing was charged.
                let over = match crate::policy::all_of::decide_costs(&limits, &mut verdicts) {
                    Ok(_) => None,
                    Err(e) => Some(e.member),
                };
                for (i, plan) in plans.iter().enumerate() {
                    let Some(plan) = plan.as_ref().filter(|p| !p.shadow) else {
                        continue;
                    };
                    decisions[i] = Some(match (slot[i], over) {
                        (Some(k), Some(m)) if k == m => Outcome::Over,
                        (Some(k), None) => Outcome::Decided(verdicts[k]),
                        // Not charged: unlimited, cost 0, over whatever
                        // its counter holds, or refused with the request.
                        _ => plan.check_memory(false),
                    });
                }
            }
        }
        decisions
    }

    /// Each plan's outcome on a domain of a shared backend: every
    /// descriptor's counter is charged by its own atomic check, all at
    /// once (a shared store has no all-or-nothing across keys); when
    /// `doomed` (all or nothing, and a request refused outright: a rule of
    /// 0 requests, a cost above u32) none of its enforced descriptors is.
    async fn decide_shared(&self, plans: &[Option<Plan>], doomed: bool) -> Vec<Option<Outcome>> {
        let checks = plans.iter().map(|plan| async move {
            let plan = plan.as_ref()?;
            Some(plan.check(!doomed || plan.shadow).await)
        });
        futures_util::future::join_all(checks).await
    }

    /// The headers of the binding status among the enforced ones
    /// (`shadow[i]`: status `i` is a shadow rule's, which binds nothing).
    fn headers(&self, statuses: &[DescriptorStatus], shadow: &[bool]) -> Vec<HeaderValue> {
        let names = match self.options.headers {
            Headers::Off => return Vec::new(),
            Headers::Draft => [
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset",
            ],
            Headers::Ietf => ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"],
        };
        // The binding status: an over-limit one, else the one with the
        // fewest remaining.
        let binding = statuses
            .iter()
            .zip(shadow)
            .filter(|(s, shadow)| s.current_limit.is_some() && !**shadow)
            .map(|(s, _)| s)
            .min_by_key(|s| (s.code != Code::OverLimit as i32, s.limit_remaining));
        let Some(s) = binding else {
            return Vec::new();
        };
        let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
        let reset = s.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
        [
            limit.to_string(),
            s.limit_remaining.to_string(),
            reset.to_string(),
        ]
        .into_iter()
        .zip(names)
        .map(|(value, key)| HeaderValue {
            key: key.to_owned(),
            value,
            ..Default::default()
        })
        .collect()
    }
}

/// A rule whose quota cannot be built, by its place in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// The rule's place (`domain.key_value.key`).
    pub place: String,
    /// Why.
    pub message: String,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

impl std::error::Error for RuleError {}

/// How one descriptor is decided.
struct Plan {
    /// `None`: every hit is over (0 requests per unit) or unlimited.
    limiter: Option<Backend>,
    key: String,
    cost: u64,
    current: Option<RateLimit>,
    /// `None`: unlimited.
    unit: Option<Unit>,
    shadow: bool,
    /// `None`: unlimited.
    stats: Option<Arc<RuleStats>>,
}

enum Outcome {
    Decided(Decision),
    /// Over whatever the counter holds: a cost above the capacity, or a
    /// rule of 0 requests.
    Over,
    Unlimited,
}

impl Plan {
    fn unlimited() -> Plan {
        Plan {
            limiter: None,
            key: String::new(),
            cost: 0,
            current: None,
            unit: None,
            shadow: false,
            stats: None,
        }
    }

    fn is_shared(&self) -> bool {
        matches!(self.limiter, Some(Backend::Shared(_)))
    }

    /// Whether it can refuse the request: a limit not in shadow mode.
    fn enforced(&self) -> bool {
        !self.shadow && self.unit.is_some()
    }

    /// Whether it is over whatever its counter holds: a rule of 0
    /// requests, or a cost above u32.
    fn doomed(&self) -> bool {
        self.limiter.is_none() || u32::try_from(self.cost).is_err()
    }

    /// The outcome before any check: unlimited, over whatever the counter
    /// holds, or the cost to check.
    fn settled(&self) -> Result<u32, Outcome> {
        if self.unit.is_none() {
            return Err(Outcome::Unlimited);
        }
        if self.limiter.is_none() {
            return Err(Outcome::Over);
        }
        u32::try_from(self.cost).map_err(|_| Outcome::Over)
    }

    /// Decides this plan alone, in memory; `commit`: records an
    /// admission.
    fn check_memory(&self, commit: bool) -> Outcome {
        let cost = match self.settled() {
            Ok(cost) => cost,
            Err(outcome) => return outcome,
        };
        let Some(Backend::Memory(limiter)) = &self.limiter else {
            return Outcome::Over;
        };
        let result = if commit && cost > 0 {
            limiter.check_n(self.key.as_str(), cost)
        } else {
            limiter.peek_n(self.key.as_str(), cost)
        };
        outcome(result)
    }

    /// Decides this plan alone, on any backend; `commit`: records an
    /// admission (a shared backend's look is a check of cost 0).
    async fn check(&self, commit: bool) -> Outcome {
        let cost = match self.settled() {
            Ok(cost) => cost,
            Err(outcome) => return outcome,
        };
        match &self.limiter {
            Some(Backend::Shared(limiter)) => {
                let started = std::time::Instant::now();
                let result = limiter
                    .check_n(self.key.as_str(), if commit { cost } else { 0 })
                    .await;
                if let Some(stats) = &self.stats {
                    stats
                        .backend_seconds
                        .record(started.elapsed().as_secs_f64());
                    if result.as_ref().is_ok_and(|d| d.store_down()) {
                        stats.store_down.increment(1);
                    }
                }
                outcome(result.map(|d| d.decision()))
            }
            _ => self.check_memory(commit),
        }
    }
}

fn outcome(result: Result<Decision, CheckError>) -> Outcome {
    match result {
        Ok(d) => Outcome::Decided(d),
        Err(CheckError::CostExceedsCapacity { .. }) => Outcome::Over,
    }
}

/// A plan's status from its outcome.
fn status(plan: Option<&Plan>, outcome: Option<Outcome>, now: u64) -> DescriptorStatus {
    let ok = DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    };
    let (Some(plan), Some(outcome)) = (plan, outcome) else {
        return ok;
    };
    let reset = |unit: Unit| {
        let period = unit.seconds() * 1_000_000_000;
        let left = period - now % period;
        ProtoDuration {
            seconds: i64::try_from(left.div_ceil(1_000_000_000)).unwrap_or(i64::MAX),
            nanos: 0,
        }
    };
    let (over, remaining, until) = match outcome {
        Outcome::Unlimited => {
            return DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: u32::MAX,
                ..Default::default()
            };
        }
        Outcome::Over => (true, 0, plan.unit.map(reset)),
        Outcome::Decided(d) => {
            let secs = d.reset_after().as_nanos().div_ceil(1_000_000_000);
            let until = Some(ProtoDuration {
                seconds: i64::try_from(secs).unwrap_or(i64::MAX).max(1),
                nanos: 0,
            });
            (!d.is_allowed(), d.remaining(), until)
        }
    };
    DescriptorStatus {
        code: if over && !plan.shadow {
            Code::OverLimit as i32
        } else {
            Code::Ok as i32
        },
        current_limit: plan.current.clone(),
        limit_remaining: if over { 0 } else { remaining },
        duration_until_reset: until,
        ..Default::default()
    }
}

/// The request's entries as `(key, value)` pairs, matched in `domain`.
fn matching<'a>(domain: &'a Domain, descriptor: &RateLimitDescriptor) -> Option<Match<'a>> {
    let entries: Vec<(&str, &str)> = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    domain.matching(&entries)
}

/// The counter key of an override: the request's entries, encoded as a
/// rule's counter key is.
fn counter_key(descriptor: &RateLimitDescriptor) -> String {
    super::config::counter_key(
        descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str())),
    )
}

/// The descriptor's hits: its own `hits_addend` when set (0 checks
/// without charging), else the request's, at least 1.
fn cost_of(request: &RateLimitRequest, descriptor: &RateLimitDescriptor) -> u64 {
    match &descriptor.hits_addend {
        Some(n) => n.value,
        None => u64::from(request.hits_addend.max(1)),
    }
}
