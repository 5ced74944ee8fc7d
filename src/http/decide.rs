//! Deciding one request: pick its tier and key, check the rules that apply
//! (all or nothing through [`AllOf`]), and report what each limit says.

use super::fields::RateLimitFields;
use super::key::KeyError;
use super::policy::{Backend, BackendFuture, Rule, RuleLimiter, Tier};
use crate::policy::{AllOf, Limit};
use crate::sync::Arc;
use crate::{CheckError, Decision, Quota};
use http::HeaderValue;
use http::request::Parts;

/// One limit's state after a decision, for the headers.
#[derive(Debug, Clone)]
pub(crate) struct PolicyState {
    pub(crate) name: Arc<str>,
    pub(crate) fields: RateLimitFields,
    /// The rule's `ratelimit-policy` item, built once with the rule.
    pub(crate) policy: HeaderValue,
}

/// What the limits said about a request.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) tier: Arc<str>,
    /// Every rule that applied, in the tier's order.
    pub(crate) policies: Vec<PolicyState>,
    /// The one the `x-ratelimit-*` fields and `retry-after` come from: on a
    /// denial the limit with the longest wait, else the one with the
    /// fewest remaining.
    pub(crate) binding: usize,
    pub(crate) allowed: bool,
    /// On a denial, `retry-after` in whole seconds (at least 1), from the
    /// decision itself.
    pub(crate) retry_after_secs: Option<u64>,
}

impl Report {
    fn single(tier: &Tier, rule: &Rule, decision: &Decision, quota: &Quota) -> Report {
        Report {
            tier: Arc::clone(&tier.name),
            policies: vec![PolicyState {
                name: Arc::clone(&rule.name),
                fields: RateLimitFields::new(decision, quota),
                policy: rule.policy_header.clone(),
            }],
            binding: 0,
            allowed: decision.is_allowed(),
            retry_after_secs: retry_after_secs(decision),
        }
    }

    pub(crate) fn binding(&self) -> &PolicyState {
        // `binding` indexes `policies`, never empty in a report.
        &self.policies[self.binding.min(self.policies.len() - 1)]
    }
}

/// A check still waiting on an async backend.
pub(crate) struct Pending {
    pub(crate) tier: Arc<str>,
    pub(crate) policy: Arc<str>,
    pub(crate) policy_header: HeaderValue,
    pub(crate) quota: Quota,
    pub(crate) future: BackendFuture,
}

impl Pending {
    /// The verdict once the backend has answered.
    pub(crate) fn finish(&self, result: Result<Decision, CheckError>) -> Verdict {
        match result {
            Ok(decision) => Verdict::Decided(Report {
                tier: Arc::clone(&self.tier),
                policies: vec![PolicyState {
                    name: Arc::clone(&self.policy),
                    fields: RateLimitFields::new(&decision, &self.quota),
                    policy: self.policy_header.clone(),
                }],
                binding: 0,
                allowed: decision.is_allowed(),
                retry_after_secs: retry_after_secs(&decision),
            }),
            Err(error) => Verdict::CostTooHigh {
                policy: Arc::clone(&self.policy),
                error,
            },
        }
    }
}

/// The outcome of deciding a request.
pub(crate) enum Verdict {
    /// No rule applies: the request passes untouched.
    Unlimited,
    /// The limits decided (allowed or denied).
    Decided(Report),
    /// No tier found a key.
    NoKey(KeyError),
    /// A rule's cost can never pass.
    CostTooHigh { policy: Arc<str>, error: CheckError },
    /// An async backend must be awaited.
    Pending(Pending),
}

/// Decides the request whose head is `parts` under `tiers`.
pub(crate) fn decide(tiers: &[Tier], parts: &Parts) -> Verdict {
    let mut last_error = None;
    for tier in tiers {
        match tier.key.extract(parts) {
            Ok(key) => return decide_tier(tier, key, parts),
            Err(error) => last_error = Some(error),
        }
    }
    // The last tier's error: tiers run from the most specific (a token) to
    // the fallback (the client IP), whose failure says the most.
    last_error.map_or(Verdict::Unlimited, Verdict::NoKey)
}

fn decide_tier(tier: &Tier, key: String, parts: &Parts) -> Verdict {
    let mut applying = tier.rules.iter().filter(|rule| rule.applies(parts));
    let Some(first) = applying.next() else {
        return Verdict::Unlimited;
    };
    if applying.next().is_none() {
        return decide_one(tier, first, key, parts);
    }
    let rules: Vec<&Rule> = tier.rules.iter().filter(|r| r.applies(parts)).collect();
    decide_all(tier, &rules, key, parts)
}

/// The common case, one rule: one check, nothing allocated but the key.
fn decide_one(tier: &Tier, rule: &Rule, key: String, parts: &Parts) -> Verdict {
    let cost = rule.cost_of(parts);
    match &rule.limiter {
        RuleLimiter::Sync(backend) => match backend.check_n(&key, cost) {
            Ok(decision) => {
                Verdict::Decided(Report::single(tier, rule, &decision, &backend.quota()))
            }
            Err(error) => Verdict::CostTooHigh {
                policy: Arc::clone(&rule.name),
                error,
            },
        },
        RuleLimiter::Async(backend) => Verdict::Pending(Pending {
            tier: Arc::clone(&tier.name),
            policy: Arc::clone(&rule.name),
            policy_header: rule.policy_header.clone(),
            quota: backend.quota(),
            future: backend.check_n(key, cost),
        }),
    }
}

/// One member of the request's [`AllOf`]: a backend bound to the request's
/// key and this rule's cost. The `AllOf` is checked with cost 1, so each
/// member spends its own cost.
struct Bound {
    backend: Arc<dyn Backend>,
    key: Arc<str>,
    cost: u32,
}

impl Limit for Bound {
    fn check_n(&self, times: u32) -> Result<Decision, CheckError> {
        self.backend
            .check_n(&self.key, self.cost.saturating_mul(times))
    }

    fn peek_n(&self, times: u32) -> Result<Decision, CheckError> {
        self.backend
            .peek_n(&self.key, self.cost.saturating_mul(times))
    }

    fn quota(&self) -> Option<Quota> {
        Some(self.backend.quota())
    }

    fn state_id(&self) -> usize {
        // Every key of one backend shares its lock stripe, as `KeyedLimit`
        // does: `AllOf`s on the same limiter serialize on it.
        Arc::as_ptr(&self.backend).cast::<()>() as usize
    }
}

/// Several rules: admitted by all or by none, through [`AllOf`].
fn decide_all(tier: &Tier, rules: &[&Rule], key: String, parts: &Parts) -> Verdict {
    let key: Arc<str> = Arc::from(key);
    let mut members: Vec<Arc<dyn Limit>> = Vec::with_capacity(rules.len());
    let mut bound: Vec<(&Rule, Arc<dyn Backend>, u32)> = Vec::with_capacity(rules.len());
    for rule in rules {
        // The builder refuses async rules beside others.
        let RuleLimiter::Sync(backend) = &rule.limiter else {
            continue;
        };
        let cost = rule.cost_of(parts);
        members.push(Arc::new(Bound {
            backend: Arc::clone(backend),
            key: Arc::clone(&key),
            cost,
        }));
        bound.push((rule, Arc::clone(backend), cost));
    }
    let all = AllOf::new(members);
    let decision = match all.check_n(1) {
        Ok(decision) => decision,
        Err(error) => {
            // Name the rule whose cost can never pass.
            let policy = bound
                .iter()
                .find(|(_, backend, cost)| backend.peek_n(&key, *cost).is_err())
                .map_or_else(
                    || Arc::clone(&tier.name),
                    |(rule, ..)| Arc::clone(&rule.name),
                );
            return Verdict::CostTooHigh { policy, error };
        }
    };
    let allowed = decision.is_allowed();
    // Each limit's own state for the headers: after an admission, a cost-0
    // probe (what is left now); after a denial, which recorded nothing, a
    // peek at the cost that was refused (who refused, and for how long).
    let mut policies = Vec::with_capacity(bound.len());
    let mut binding = 0;
    let mut best: Option<Decision> = None;
    for (index, (rule, backend, cost)) in bound.iter().enumerate() {
        let probe = backend
            .peek_n(&key, if allowed { 0 } else { *cost })
            .unwrap_or(decision);
        let better = match best {
            None => true,
            Some(b) if allowed => probe.remaining() < b.remaining(),
            Some(b) => {
                !probe.is_allowed()
                    && (b.is_allowed() || probe.retry_after_nanos() > b.retry_after_nanos())
            }
        };
        if better {
            best = Some(probe);
            binding = index;
        }
        policies.push(PolicyState {
            name: Arc::clone(&rule.name),
            fields: RateLimitFields::new(&probe, &backend.quota()),
            policy: rule.policy_header.clone(),
        });
    }
    Verdict::Decided(Report {
        tier: Arc::clone(&tier.name),
        policies,
        binding,
        allowed,
        retry_after_secs: retry_after_secs(&decision),
    })
}

fn retry_after_secs(decision: &Decision) -> Option<u64> {
    (!decision.is_allowed()).then(|| decision.retry_after_secs())
}
