//! Deciding one request: pick its tier and key, check the rules that apply
//! (all or nothing, as [`AllOf`](crate::policy::AllOf) decides), and report what each limit says.

use super::fields::RateLimitFields;
use super::key::{Key, KeyError};
use super::policy::{Applying, AsyncBackend, Backend, BackendFuture, Rule, RuleLimiter, Tier};
use crate::policy::Limit;
use crate::sync::Arc;
use crate::{CheckError, Decision, Quota};
use http::HeaderValue;
use http::request::Parts;

/// One limit's state after a decision, for the headers.
#[derive(Debug, Clone)]
pub(crate) struct PolicyState {
    pub(crate) name: Arc<str>,
    pub(crate) fields: RateLimitFields,
    /// The rule's `ratelimit-policy` item under the key's quota, built
    /// once with the rule.
    pub(crate) policy: HeaderValue,
    /// The length of the quoted name that starts `policy` (and the
    /// `ratelimit` item).
    pub(crate) name_len: usize,
}

impl PolicyState {
    fn new(rule: &Rule, decision: &Decision, quota: &Quota) -> PolicyState {
        PolicyState {
            name: Arc::clone(&rule.name),
            fields: RateLimitFields::new(decision, quota),
            policy: rule.policy_header(quota),
            name_len: rule.name_len,
        }
    }
}

/// The rules that applied to a request: one or two inline (most
/// requests), more on the heap.
#[derive(Debug, Clone)]
pub(crate) enum Policies {
    One(PolicyState),
    Two([PolicyState; 2]),
    Many(Vec<PolicyState>),
}

impl std::ops::Deref for Policies {
    type Target = [PolicyState];

    fn deref(&self) -> &[PolicyState] {
        match self {
            Policies::One(one) => std::slice::from_ref(one),
            Policies::Two(two) => two,
            Policies::Many(many) => many,
        }
    }
}

/// What the limits said about a request.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) tier: Arc<str>,
    /// Every rule that applied, in the tier's order.
    pub(crate) policies: Policies,
    /// The one the `x-ratelimit-*` fields and `retry-after` come from: on a
    /// denial the limit with the longest wait, else the one with the
    /// fewest remaining.
    pub(crate) binding: usize,
    pub(crate) allowed: bool,
    /// A shadow rule denied: the request is served, counted as a shadow
    /// denial.
    pub(crate) shadow: bool,
    /// On a denial, `retry-after` in whole seconds (at least 1), from the
    /// decision itself.
    pub(crate) retry_after_secs: Option<u64>,
}

impl Report {
    /// Out of line, as [`report_all`] is.
    #[inline(never)]
    fn single(tier: Arc<str>, rule: &Rule, decision: &Decision, quota: &Quota) -> Report {
        Report {
            tier,
            policies: Policies::One(PolicyState::new(rule, decision, quota)),
            binding: 0,
            allowed: decision.is_allowed(),
            shadow: rule.shadow && !decision.is_allowed(),
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
    /// The rule (a clone: the check outlives the call).
    pub(crate) rule: Rule,
    pub(crate) quota: Quota,
    pub(crate) future: BackendFuture,
    /// Whether an admission needs a report (its response carries the
    /// fields), as [`decide`] was asked.
    pub(crate) report_allowed: bool,
}

impl Pending {
    /// The verdict once the backend has answered.
    pub(crate) fn finish(&self, result: Result<Decision, CheckError>) -> Verdict {
        single_verdict(
            &self.tier,
            &self.rule,
            result,
            || self.quota,
            self.report_allowed,
        )
    }
}

/// The verdict on one rule's decision: [`Verdict::Allowed`] for an
/// admission that needs no report (nothing built: no per-rule state, no
/// quota looked up), else the report (`quota`: the key's).
fn single_verdict(
    tier: &Arc<str>,
    rule: &Rule,
    result: Result<Decision, CheckError>,
    quota: impl FnOnce() -> Quota,
    report_allowed: bool,
) -> Verdict {
    match result {
        Ok(decision) if decision.is_allowed() && !report_allowed => Verdict::Allowed,
        Ok(decision) => Verdict::Decided(Box::new(Report::single(
            Arc::clone(tier),
            rule,
            &decision,
            &quota(),
        ))),
        Err(error) => cost_too_high(rule, error),
    }
}

/// A rule's cost that can never pass: a configuration error, rare, out
/// of the decision's way.
#[cold]
#[inline(never)]
fn cost_too_high(rule: &Rule, error: CheckError) -> Verdict {
    Verdict::CostTooHigh {
        policy: Arc::clone(&rule.name),
        error,
        shadow: rule.shadow,
    }
}

/// The outcome of deciding a request.
pub(crate) enum Verdict {
    /// No rule applies: the request passes untouched.
    Unlimited,
    /// Every rule admitted the request, and no report was asked for (the
    /// fields go on 429s only): nothing to write into the response.
    Allowed,
    /// The limits decided (allowed or denied). Boxed, as `Pending` is: a
    /// verdict is moved from the decision to the response future, and
    /// the common one (an admission without a report) then moves a few
    /// words instead of a report's few hundred bytes.
    Decided(Box<Report>),
    /// No tier found a key.
    NoKey(KeyError),
    /// A rule's cost can never pass (`shadow`: the rule is in shadow
    /// mode, so the request is served).
    CostTooHigh {
        policy: Arc<str>,
        error: CheckError,
        shadow: bool,
    },
    /// An async backend must be awaited.
    Pending(Box<Pending>),
}

/// Decides the request whose head is `parts` under `tiers`. An admitted
/// request gets a [`Report`] only when `report_allowed` (its response
/// carries the rate-limit fields); otherwise [`Verdict::Allowed`], without
/// the per-rule states a report builds.
pub(crate) fn decide(tiers: &[Tier], parts: &Parts, report_allowed: bool) -> Verdict {
    let mut custom_error = None;
    for tier in tiers {
        if let Some(key) = tier.key.find_key(parts, &mut custom_error) {
            return decide_tier(tier, key, parts, report_allowed);
        }
    }
    no_key(tiers, parts, custom_error, report_allowed)
}

/// No tier found a key: the last tier's error (tiers run from the most
/// specific, a token, to the fallback, the client IP, whose failure says
/// the most). Rare, and out of the decision's way. A built-in extractor
/// is asked again for its reason (it depends on the request alone); a
/// key function of the application's own is not called twice: its error
/// was kept (`custom_error`, the last such tier's, which is the last
/// tier's when that tier is one).
#[cold]
#[inline(never)]
fn no_key(
    tiers: &[Tier],
    parts: &Parts,
    custom_error: Option<KeyError>,
    report_allowed: bool,
) -> Verdict {
    let Some(tier) = tiers.last() else {
        return Verdict::Unlimited;
    };
    match custom_error {
        Some(error) if tier.key.is_custom() => Verdict::NoKey(error),
        _ => match tier.key.extract_key(parts) {
            Err(error) => Verdict::NoKey(error),
            // A built-in extractor that found no key a moment ago finds
            // none now; should one ever, the request is decided with it.
            Ok(key) => decide_tier(tier, key, parts, report_allowed),
        },
    }
}

// Always inlined into `decide`: one frame on the request's path, not two
// (the copy in `no_key` is cold).
#[inline(always)]
fn decide_tier(tier: &Tier, key: Key<'_>, parts: &Parts, report_allowed: bool) -> Verdict {
    let mut rules = tier.applying(parts);
    let Some(first) = rules.next() else {
        return Verdict::Unlimited;
    };
    match rules.next() {
        None => decide_one(tier, first, key, parts, report_allowed),
        Some(second) => decide_several(tier, [first, second], rules, &key, parts, report_allowed),
    }
}

/// Several rules, all in memory (the builder refuses an async rule
/// beside others; one that got here anyway is left out). Kept out of
/// `decide_tier` (inlined into [`decide`]), whose one-rule path then
/// spans fewer cache lines: at saturation each line of code a request
/// runs is fetched again per request.
#[inline(never)]
fn decide_several<'a>(
    tier: &'a Tier,
    [first, second]: [&'a Rule; 2],
    mut rest: Applying<'a>,
    key: &'a Key<'_>,
    parts: &'a Parts,
    report_allowed: bool,
) -> Verdict {
    let key = key.as_str();
    let bound = |rule| Bound::new(rule, key, parts);
    match (bound(first), bound(second), rest.next()) {
        // Two rules in memory (the example's signed-in requests).
        (Some(a), Some(b), None) => decide_two(tier, [a, b], report_allowed),
        (a, b, third) => {
            let members = [a, b]
                .into_iter()
                .chain(third.into_iter().chain(rest).map(bound));
            decide_many(tier, members.flatten(), report_allowed)
        }
    }
}

/// Three rules or more (or one left out): up to [`INLINE`] members on
/// the stack, more on the heap.
#[inline(never)]
fn decide_many<'a>(
    tier: &Tier,
    mut members: impl Iterator<Item = Bound<'a>>,
    report_allowed: bool,
) -> Verdict {
    let Some(first) = members.next() else {
        return Verdict::Unlimited;
    };
    let mut inline = [first; INLINE];
    let mut n = 1;
    let mut spill = Vec::new();
    for member in members {
        if n < INLINE {
            inline[n] = member;
        } else {
            if spill.is_empty() {
                spill.extend_from_slice(&inline);
            }
            spill.push(member);
        }
        n += 1;
    }
    if spill.is_empty() {
        decide_all(tier, &inline[..n], report_allowed)
    } else {
        decide_all(tier, &spill, report_allowed)
    }
}

/// The common case, one rule: one check, nothing allocated (the key
/// borrowed or on the stack, unless the backend is async or the key new).
fn decide_one(
    tier: &Tier,
    rule: &Rule,
    key: Key<'_>,
    parts: &Parts,
    report_allowed: bool,
) -> Verdict {
    let cost = rule.cost_of(parts);
    match &rule.limiter {
        RuleLimiter::Sync(backend) => {
            let key = key.as_str();
            decide_sync(tier, rule, &**backend, key, cost, report_allowed)
        }
        RuleLimiter::Async(backend) => pending(tier, rule, &**backend, key, cost, report_allowed),
    }
}

/// One rule on an async backend: the check to await. Out of line, as
/// [`decide_several`] is, and laid out as cold: beside a store's round
/// trip its call costs nothing, and the in-memory path runs straight.
#[cold]
#[inline(never)]
fn pending(
    tier: &Tier,
    rule: &Rule,
    backend: &dyn AsyncBackend,
    key: Key<'_>,
    cost: u32,
    report_allowed: bool,
) -> Verdict {
    Verdict::Pending(Box::new(Pending {
        tier: Arc::clone(&tier.name),
        rule: rule.clone(),
        quota: backend.quota_for(key.as_str()),
        future: backend.check_n(key.into_owned(), cost),
        report_allowed,
    }))
}

/// One in-memory rule.
fn decide_sync(
    tier: &Tier,
    rule: &Rule,
    backend: &dyn Backend,
    key: &str,
    cost: u32,
    report_allowed: bool,
) -> Verdict {
    single_verdict(
        &tier.name,
        rule,
        backend.check_n(key, cost),
        || backend.quota_for(key),
        report_allowed,
    )
}

/// Rules decided together without a heap allocation for the members.
const INLINE: usize = 4;

/// One member of the request's all-or-nothing check: a rule's backend
/// bound to the request's key and the rule's cost, borrowed for the check.
/// It is checked with cost 1, so each member spends its own cost.
#[derive(Clone, Copy)]
struct Bound<'a> {
    rule: &'a Rule,
    backend: &'a dyn Backend,
    key: &'a str,
    cost: u32,
}

impl<'a> Bound<'a> {
    /// `rule` bound to `key` and its cost for the request whose head is
    /// `parts`; `None` for an async rule.
    fn new(rule: &'a Rule, key: &'a str, parts: &Parts) -> Option<Bound<'a>> {
        match &rule.limiter {
            RuleLimiter::Sync(backend) => Some(Bound {
                rule,
                backend: &**backend,
                key,
                cost: rule.cost_of(parts),
            }),
            RuleLimiter::Async(_) => None,
        }
    }
}

impl Limit for Bound<'_> {
    fn check_n(&self, times: u32) -> Result<Decision, CheckError> {
        self.backend
            .check_n(self.key, self.cost.saturating_mul(times))
    }

    fn peek_n(&self, times: u32) -> Result<Decision, CheckError> {
        self.backend
            .peek_n(self.key, self.cost.saturating_mul(times))
    }

    fn quota(&self) -> Option<Quota> {
        Some(self.backend.quota_for(self.key))
    }

    fn state_id(&self) -> usize {
        // One per backend, as `KeyedLimit` has: two rules on one limiter
        // are not decided nested.
        (self.backend as *const dyn Backend).cast::<()>() as usize
    }

    fn lock_id(&self) -> u64 {
        self.backend.lock_id(self.key)
    }

    fn peek_then_check_n(
        &self,
        times: u32,
        commit: &mut dyn FnMut(&Decision) -> bool,
    ) -> Result<Decision, CheckError> {
        self.backend
            .peek_then_check_n(self.key, self.cost.saturating_mul(times), commit)
    }
}

/// Several rules: admitted by all or by none, through the all-or-nothing
/// check [`AllOf`](crate::policy::AllOf) runs, each limit looked up once.
/// Each member's own decision (after an admission what is left, after a denial
/// its peek at the refused cost) gives its rule's headers.
fn decide_all(tier: &Tier, members: &[Bound<'_>], report_allowed: bool) -> Verdict {
    let none = Decision::allow(0, 0, 0);
    let mut inline = [none; INLINE];
    let mut spill = Vec::new();
    let decisions: &mut [Decision] = if members.len() <= INLINE {
        &mut inline[..members.len()]
    } else {
        spill.resize(members.len(), none);
        &mut spill
    };
    let result = crate::policy::admits_all(members, 1, decisions);
    verdict_of_all(tier, members, result, decisions, report_allowed)
}

/// [`decide_all`] for two rules (the common case of several), through
/// the pair's shorter path.
fn decide_two(tier: &Tier, members: [Bound<'_>; 2], report_allowed: bool) -> Verdict {
    let none = Decision::allow(0, 0, 0);
    let mut decisions = [none; 2];
    let result = crate::policy::admits_pair(&members, 1, &mut decisions);
    verdict_of_all(tier, &members, result, &decisions, report_allowed)
}

/// The verdict on the rules' all-or-nothing check.
#[inline]
fn verdict_of_all(
    tier: &Tier,
    members: &[Bound<'_>],
    result: Result<bool, crate::policy::MemberError>,
    decisions: &[Decision],
    report_allowed: bool,
) -> Verdict {
    match result {
        // The binding decision is found only for the headers.
        Ok(true) if !report_allowed => Verdict::Allowed,
        Ok(allowed) => report_all(tier, members, decisions, allowed),
        Err(error) => Verdict::CostTooHigh {
            policy: Arc::clone(&members[error.member].rule.name),
            error: error.error,
            shadow: false,
        },
    }
}

/// The report of several rules' decisions, out of line: an admission
/// without one (the common case) then runs fewer cache lines of code.
#[inline(never)]
fn report_all(
    tier: &Tier,
    members: &[Bound<'_>],
    decisions: &[Decision],
    allowed: bool,
) -> Verdict {
    let report = crate::policy::bind(decisions);
    let state = |(member, decision): (&Bound<'_>, &Decision)| {
        PolicyState::new(member.rule, decision, &member.backend.quota_for(member.key))
    };
    let policies = match (members, decisions) {
        ([a, b], [da, db]) => Policies::Two([state((a, da)), state((b, db))]),
        _ => Policies::Many(members.iter().zip(decisions.iter()).map(state).collect()),
    };
    Verdict::Decided(Box::new(Report {
        tier: Arc::clone(&tier.name),
        policies,
        binding: report.binding().unwrap_or(0),
        allowed,
        // A shadow rule stands alone in its tier.
        shadow: false,
        retry_after_secs: retry_after_secs(&report.decision()),
    }))
}

fn retry_after_secs(decision: &Decision) -> Option<u64> {
    (!decision.is_allowed()).then(|| decision.retry_after_secs())
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;
    use crate::http::KeyExtractor;
    use crate::{KeyedRateLimiter, TokenBucket};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting(calls: &Arc<AtomicUsize>) -> KeyExtractor {
        let calls = Arc::clone(calls);
        KeyExtractor::try_from_fn(move |_| {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(KeyError::Custom("no user".to_string()))
        })
    }

    fn tier(name: &str, key: KeyExtractor) -> Tier {
        let limiter =
            KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_second(5).unwrap())
                .build()
                .unwrap();
        Tier::new(name, key).rule(Rule::new("r", Arc::new(limiter)))
    }

    #[test]
    fn no_key_is_the_last_tiers_error_and_each_key_function_runs_once() {
        let (parts, ()) = http::Request::get("/").body(()).unwrap().into_parts();
        let no_key = |verdict: Verdict| match verdict {
            Verdict::NoKey(error) => error,
            _ => panic!("a verdict other than NoKey"),
        };
        // A key function last: its own error, from its only call.
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers = [
            tier("signed-in", KeyExtractor::bearer_token()),
            tier("users", counting(&calls)),
        ];
        assert_eq!(
            no_key(decide(&tiers, &parts, false)),
            KeyError::Custom("no user".to_string())
        );
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // A key function first, a built-in extractor last: the built-in's
        // error; the function still runs once.
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers = [
            tier("users", counting(&calls)),
            tier("signed-in", KeyExtractor::bearer_token()),
        ];
        assert_eq!(
            no_key(decide(&tiers, &parts, false)),
            KeyError::MissingHeader(http::header::AUTHORIZATION)
        );
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // No tier: unlimited.
        assert!(matches!(decide(&[], &parts, false), Verdict::Unlimited));
    }
}
