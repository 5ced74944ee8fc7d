//! The decisions of Envoy's rate-limit service (RLS v3,
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on
//! rategate's in-memory keyed limiters: the matching of
//! [`config`](super::config), one status per request descriptor, the
//! overall code, shadow mode, `replaces`, `hits_addend` and the
//! per-descriptor `limit` override.
//!
//! Every rule gets one [`KeyedRateLimiter`] of its algorithm, keyed by the
//! counter key of the request's entries ([`Match::counter_key`]), on a
//! clock of Unix time, so fixed windows fall on multiples of their unit
//! from the Unix epoch, as envoyproxy/ratelimit's do. A reload keeps the
//! limiter (and so the counts) of every rule whose place, quota and
//! algorithm are unchanged.

use super::config::{Config, Domain, Match, Rule, Unit};
use crate::policy::{KeyedLimit, Limit};
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
    /// A new override quota beyond [`Options::max_overrides`].
    TooManyOverrides,
    /// More than [`MAX_DESCRIPTORS`] descriptors, more than
    /// [`MAX_ENTRIES`] entries in one, or a key or value longer than
    /// [`MAX_ENTRY_BYTES`]: what no gateway sends, and what would cost the
    /// server time or memory out of proportion.
    TooLarge(&'static str),
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
        }
    }
}

impl std::error::Error for RequestError {}

type Keyed = KeyedRateLimiter<String, AnyAlgorithm, UnixClock>;

/// A rule's limiter, and what it was built for: a reload keeps it for a
/// rule at the same place with the same quota and algorithm.
struct RuleLimiter {
    quota: Quota,
    algorithm: AlgorithmKind,
    limiter: Arc<Keyed>,
}

/// The limiters of one loaded configuration, by rule place (which starts
/// with the domain's name, so it is unique across domains).
type Limiters = HashMap<String, RuleLimiter>;

/// The limiters of one loaded configuration.
struct Loaded {
    config: Arc<Config>,
    limiters: Limiters,
}

/// The service: a configuration, swapped whole by [`reload`](Self::reload),
/// and the limiters of its rules.
pub struct RateLimitCore {
    loaded: RwLock<Arc<Loaded>>,
    overrides: Mutex<HashMap<(String, Quota), Arc<Keyed>>>,
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

impl RateLimitCore {
    /// A service deciding by `config`.
    ///
    /// # Errors
    ///
    /// A rule whose quota the algorithm cannot take (the leaky bucket
    /// needs at least one request per 1000 s), named by its place.
    pub fn new(config: Config, options: Options) -> Result<RateLimitCore, RuleError> {
        let clock = UnixClock::new();
        let loaded = Self::load(&config, None, &clock, &options)?;
        Ok(RateLimitCore {
            loaded: RwLock::new(Arc::new(Loaded {
                config: Arc::new(config),
                limiters: loaded,
            })),
            overrides: Mutex::new(HashMap::new()),
            clock,
            options,
        })
    }

    /// Replaces the configuration. Rules whose place, quota and algorithm
    /// are unchanged keep their counts; on an error nothing changes.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn reload(&self, config: Config) -> Result<(), RuleError> {
        let old = Arc::clone(&self.loaded.read());
        let limiters = Self::load(&config, Some(&old.limiters), &self.clock, &self.options)?;
        *self.loaded.write() = Arc::new(Loaded {
            config: Arc::new(config),
            limiters,
        });
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.loaded.read().config)
    }

    fn load(
        config: &Config,
        old: Option<&Limiters>,
        clock: &UnixClock,
        options: &Options,
    ) -> Result<Limiters, RuleError> {
        let mut limiters = HashMap::new();
        for domain in config.domains() {
            // A domain that asks for a shared store must not be counted in
            // this process alone: refused rather than served from memory.
            if let Some(backend) = domain.backend.as_ref().filter(|b| b.kind != "memory") {
                return Err(RuleError {
                    place: domain.name.clone(),
                    message: format!(
                        "backend kind '{}': this server decides in memory only",
                        backend.kind
                    ),
                });
            }
            for rule in domain.rules() {
                let error = |message: String| RuleError {
                    place: rule.path.clone(),
                    message,
                };
                let Some(quota) = quota_of(rule).map_err(|e| error(e.to_string()))? else {
                    continue;
                };
                let kept = old
                    .and_then(|o| o.get(&rule.path))
                    .filter(|r| r.quota == quota && r.algorithm == rule.algorithm);
                let limiter = match kept {
                    Some(r) => Arc::clone(&r.limiter),
                    None => Arc::new(
                        Self::limiter(quota, rule.algorithm, clock, options)
                            .map_err(|e| error(e.to_string()))?,
                    ),
                };
                limiters.insert(
                    rule.path.clone(),
                    RuleLimiter {
                        quota,
                        algorithm: rule.algorithm,
                        limiter,
                    },
                );
            }
        }
        Ok(limiters)
    }

    fn limiter(
        quota: Quota,
        algorithm: AlgorithmKind,
        clock: &UnixClock,
        options: &Options,
    ) -> Result<Keyed, crate::QuotaError> {
        KeyedRateLimiter::<String, AnyAlgorithm>::builder(quota)
            .clock(clock.clone())
            .algorithm(AnyAlgorithm::new(algorithm, &quota)?)
            .max_keys(options.max_keys_per_rule)
            .auto_sweep(options.sweep_interval)
            .build()
    }

    /// Decides `request`.
    ///
    /// # Errors
    ///
    /// [`RequestError`] for a request without a domain or descriptors, an
    /// override with a bad unit, or one override quota too many.
    pub fn should_rate_limit(
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
                plans.push(Some(self.override_plan(
                    &request.domain,
                    over.requests_per_unit,
                    unit,
                    key,
                    cost,
                )?));
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
            // `None` for a rule of 0 requests: every hit is over.
            let limiter = loaded
                .limiters
                .get(rule.path.as_str())
                .map(|r| Arc::clone(&r.limiter));
            plans.push(Some(Plan {
                limiter,
                key: m.counter_key.clone(),
                cost,
                current: Some(current),
                unit: Some(unit),
                shadow: rule.shadow_mode,
            }));
        }
        let statuses = self.decide(&plans);
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

    fn override_plan(
        &self,
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
        let limiter = match quota {
            None => None,
            Some(quota) => {
                let mut overrides = self.overrides.lock();
                let id = (domain.to_owned(), quota);
                match overrides.get(&id) {
                    Some(l) => Some(Arc::clone(l)),
                    None => {
                        if overrides.len() >= self.options.max_overrides {
                            // Quotas whose limiters hold no key (swept
                            // idle) and that no request holds make room.
                            overrides.retain(|_, l| !l.is_empty() || Arc::strong_count(l) > 1);
                        }
                        if overrides.len() >= self.options.max_overrides {
                            return Err(RequestError::TooManyOverrides);
                        }
                        let limiter = Arc::new(
                            Self::limiter(
                                quota,
                                AlgorithmKind::FixedWindow,
                                &self.clock,
                                &self.options,
                            )
                            .map_err(|_| RequestError::BadOverrideUnit(unit.number()))?,
                        );
                        overrides.insert(id, Arc::clone(&limiter));
                        Some(limiter)
                    }
                }
            }
        };
        Ok(Plan {
            limiter,
            key,
            cost,
            current,
            unit: Some(unit),
            shadow: false,
        })
    }

    /// Each plan's status, charging as the options say.
    fn decide(&self, plans: &[Option<Plan>]) -> Vec<DescriptorStatus> {
        let now = self.clock.now();
        let mut decisions: Vec<Option<Outcome>> = plans.iter().map(|_| None).collect();
        match self.options.charge {
            Charge::EveryMatch => {
                for (plan, out) in plans.iter().zip(decisions.iter_mut()) {
                    if let Some(plan) = plan {
                        *out = Some(plan.check(true));
                    }
                }
            }
            Charge::AllOrNothing => {
                // Shadow rules never refuse: each is charged on its own,
                // outside the decision (an over shadow rule must not hold
                // back the enforced ones).
                for (plan, out) in plans.iter().zip(decisions.iter_mut()) {
                    if let Some(plan) = plan.as_ref().filter(|p| p.shadow) {
                        *out = Some(plan.check(true));
                    }
                }
                // The enforced plans, charged together only when all
                // admit (the crate's all-or-nothing decision, under the
                // lock stripes of every key). One that is over whatever
                // its counter holds (0 requests, a cost above u32) refuses
                // the request before anything is charged.
                let enforced = |p: &&Plan| !p.shadow && p.unit.is_some();
                let doomed = plans
                    .iter()
                    .flatten()
                    .filter(enforced)
                    .any(|p| p.limiter.is_none() || u32::try_from(p.cost).is_err());
                let mut slot: Vec<Option<usize>> = vec![None; plans.len()];
                let mut charged = Vec::new();
                if !doomed {
                    for (i, p) in plans.iter().enumerate() {
                        let Some(p) = p.as_ref().filter(enforced) else {
                            continue;
                        };
                        let (Some(limiter), Ok(cost)) = (&p.limiter, u32::try_from(p.cost)) else {
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
                        _ => plan.check(false),
                    });
                }
            }
        }
        plans
            .iter()
            .zip(decisions)
            .map(|(plan, outcome)| status(plan.as_ref(), outcome, now))
            .collect()
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
    limiter: Option<Arc<Keyed>>,
    key: String,
    cost: u64,
    current: Option<RateLimit>,
    /// `None`: unlimited.
    unit: Option<Unit>,
    shadow: bool,
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
        }
    }

    /// Decides this plan alone; `commit`: records an admission.
    fn check(&self, commit: bool) -> Outcome {
        if self.unit.is_none() {
            return Outcome::Unlimited;
        }
        let Some(limiter) = &self.limiter else {
            return Outcome::Over;
        };
        let Ok(cost) = u32::try_from(self.cost) else {
            return Outcome::Over;
        };
        let result = if commit && cost > 0 {
            limiter.check_n(self.key.as_str(), cost)
        } else {
            limiter.peek_n(self.key.as_str(), cost)
        };
        match result {
            Ok(d) => Outcome::Decided(d),
            Err(CheckError::CostExceedsCapacity { .. }) => Outcome::Over,
        }
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

/// The counter key of an override: the request's entries, each length
/// prefixed so that no two lists of entries share one.
fn counter_key(descriptor: &RateLimitDescriptor) -> String {
    let mut key = String::from("override");
    for e in &descriptor.entries {
        key.push_str(&format!(
            ":{}:{}:{}:{}",
            e.key.len(),
            e.key,
            e.value.len(),
            e.value
        ));
    }
    key
}

/// The descriptor's hits: its own `hits_addend` when set (0 checks
/// without charging), else the request's, at least 1.
fn cost_of(request: &RateLimitRequest, descriptor: &RateLimitDescriptor) -> u64 {
    match &descriptor.hits_addend {
        Some(n) => n.value,
        None => u64::from(request.hits_addend.max(1)),
    }
}
