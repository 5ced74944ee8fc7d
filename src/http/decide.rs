//! Deciding one request: pick its class and key, check the rules that apply
//! (all or nothing, as [`AllOf`](crate::policy::AllOf) decides), and report what each limit says.

use super::key::{Key, KeyError};
use super::policy::{AsyncBackend, Backend, BackendFuture, ClientClass, Rule, RuleLimiter};
use crate::headers::RateLimitFields;
use crate::policy::{Held, Member, StateId};
use crate::sync::Arc;
use crate::{CheckError, Decision, Quota};
use http::HeaderValue;
use http::request::Parts;
use smallvec::SmallVec;

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

/// What the limits said about a request.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) class: Arc<str>,
    /// Every rule that applied, in the class's order.
    pub(crate) policies: Vec<PolicyState>,
    /// The one the `x-ratelimit-*` fields and `retry-after` come from: on a
    /// denial the limit with the longest wait, else the class's reported
    /// rule when it applied, else the one with the fewest remaining.
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
    fn single(class: Arc<str>, rule: &Rule, decision: &Decision, quota: &Quota) -> Report {
        Report {
            class,
            policies: vec![PolicyState::new(rule, decision, quota)],
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
    pub(crate) class: Arc<str>,
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
            &self.class,
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
    class: &Arc<str>,
    rule: &Rule,
    result: Result<Decision, CheckError>,
    quota: impl FnOnce() -> Quota,
    report_allowed: bool,
) -> Verdict {
    match result {
        Ok(decision) if decision.is_allowed() && !report_allowed => Verdict::Allowed,
        Ok(decision) => Verdict::Decided(Box::new(Report::single(
            Arc::clone(class),
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
    /// No class found a key.
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
    /// A rule is charged by the handler: nothing is decided yet.
    Deferred(Box<Deferred>),
    /// A rule is charged by the handler, and the client's budget cannot
    /// take the least the request will cost: refused at the door, or in
    /// shadow mode deferred as usual.
    Door(Box<Report>, Box<Deferred>),
}

/// A request whose charge is left to its handler ([`super::Charge`]):
/// what the decision will need once the handler knows the cost.
#[derive(Debug)]
pub(crate) struct Deferred {
    /// The index of the request's class in the layer's classes.
    pub(crate) class: usize,
    pub(crate) key: String,
    /// The rules that applied, by index in the class, each with its cost;
    /// `None` for a rule the handler charges.
    pub(crate) rules: SmallVec<[(usize, Option<u32>); INLINE]>,
}

/// Decides the request whose head is `parts` under `classes`. An admitted
/// request gets a [`Report`] only when `report_allowed` (its response
/// carries the rate-limit fields); otherwise [`Verdict::Allowed`], without
/// the per-rule states a report builds.
pub(crate) fn decide(classes: &[ClientClass], parts: &Parts, report_allowed: bool) -> Verdict {
    let mut custom_error = None;
    for (at, class) in classes.iter().enumerate() {
        match class.key.find_key(parts, &mut custom_error) {
            Ok(Some(key)) => return decide_class(at, class, key, parts, report_allowed),
            Ok(None) => {}
            Err(error) => return Verdict::NoKey(error),
        }
    }
    no_key(classes, parts, custom_error, report_allowed)
}

/// No class found a key: the last class's error (classes run from the most
/// specific, a token, to the fallback, the client IP, whose failure says
/// the most). Rare, and out of the decision's way. A built-in extractor
/// is asked again for its reason (it depends on the request alone); a
/// key function of the application's own is not called twice: its error
/// was kept (`custom_error`, the last such class's, which is the last
/// class's when that class is one).
#[cold]
fn no_key(
    classes: &[ClientClass],
    parts: &Parts,
    custom_error: Option<KeyError>,
    report_allowed: bool,
) -> Verdict {
    let Some(class) = classes.last() else {
        return Verdict::Unlimited;
    };
    match custom_error {
        Some(error) if class.key.is_custom() => Verdict::NoKey(error),
        _ => match class.key.extract_key(parts) {
            Err(error) => Verdict::NoKey(error),
            // A built-in extractor that found no key a moment ago finds
            // none now; should one ever, the request is decided with it.
            Ok(key) => decide_class(classes.len() - 1, class, key, parts, report_allowed),
        },
    }
}

/// The rules of `class` that apply to the request, decided for `key`: all
/// or nothing, through the one decision [`AllOf`](crate::policy::AllOf)
/// makes, whatever their number.
fn decide_class(
    at: usize,
    class: &ClientClass,
    key: Key<'_>,
    parts: &Parts,
    report_allowed: bool,
) -> Verdict {
    // Each rule's matcher runs once.
    let applying: SmallVec<[(usize, &Rule); INLINE]> = class.applying(parts).collect();
    // An async rule stands alone in its class (the builder refuses it beside
    // others): its store cannot take part in an all-or-nothing decision.
    if let Some((_, rule)) = applying.first() {
        if let RuleLimiter::Async(backend) = &rule.limiter {
            let cost = rule.cost_of(parts);
            return pending(class, rule, &**backend, key, cost, report_allowed);
        }
    }
    if applying.iter().any(|(_, rule)| rule.by_handler) {
        // Each cost the request knows now; `None` for a rule its handler
        // charges.
        let rules: SmallVec<[(usize, Option<u32>); INLINE]> = applying
            .iter()
            .map(|&(i, rule)| (i, (!rule.by_handler).then(|| rule.cost_of(parts))))
            .collect();
        // At the door: a client whose budget cannot take even the least
        // this request will cost (the known costs, and 1 for each rule the
        // handler charges: an uncharged request costs 1) is refused before
        // its handler runs. Nothing is recorded here.
        let least = rules
            .iter()
            .zip(&applying)
            .map(|(&(_, cost), &(_, rule))| (rule, cost.unwrap_or(1)));
        let deferred = Box::new(Deferred {
            class: at,
            key: key.into_owned(),
            rules: rules.iter().copied().collect(),
        });
        // A cost no limit can hold is the handler's charge to refuse; a
        // denial here is the layer's to answer (or, in shadow mode, to
        // serve with the `Charge` the handler expects).
        return match decide_rules(class, least, deferred.key.as_str(), true, false) {
            Verdict::Decided(report) if !report.allowed => Verdict::Door(report, deferred),
            _ => Verdict::Deferred(deferred),
        };
    }
    let rules = applying
        .iter()
        .map(|&(_, rule)| (rule, rule.cost_of(parts)));
    decide_rules(class, rules, key.as_str(), report_allowed, true)
}

/// `rules`, each with its cost, decided for `key` all or nothing.
/// Without `commit`, nothing is recorded: the verdict says whether the
/// rules would admit the costs now.
pub(crate) fn decide_rules<'a>(
    class: &'a ClientClass,
    rules: impl Iterator<Item = (&'a Rule, u32)>,
    key: &'a str,
    report_allowed: bool,
    commit: bool,
) -> Verdict {
    // Hashed once for every rule.
    let key_id = crate::stripes::keyed_lock_id(key);
    let members: SmallVec<[Bound<'_>; INLINE]> = rules
        .filter_map(|(rule, cost)| match &rule.limiter {
            RuleLimiter::Sync(backend) => Some(Bound {
                rule,
                backend: &**backend,
                key,
                key_id,
                cost,
            }),
            RuleLimiter::Async(_) => None,
        })
        .collect();
    if members.is_empty() {
        return Verdict::Unlimited;
    }
    let mut decisions: SmallVec<[Decision; INLINE]> =
        smallvec::smallvec![Decision::allow(0, 0, 0); members.len()];
    match crate::policy::decide(&members, commit, &mut decisions) {
        Ok(true) if !report_allowed => Verdict::Allowed,
        Ok(allowed) => Verdict::Decided(Box::new(report(class, &members, &decisions, allowed))),
        Err(error) => {
            let rule = members[error.member].rule;
            cost_too_high(rule, error.error)
        }
    }
}

/// One rule on an async backend: the check to await.
fn pending(
    class: &ClientClass,
    rule: &Rule,
    backend: &dyn AsyncBackend,
    key: Key<'_>,
    cost: u32,
    report_allowed: bool,
) -> Verdict {
    Verdict::Pending(Box::new(Pending {
        class: Arc::clone(&class.name),
        rule: rule.clone(),
        quota: backend.quota_for(key.as_str()),
        future: backend.check_n(key.into_owned(), cost),
        report_allowed,
    }))
}

/// Rules decided without a heap allocation for the members.
const INLINE: usize = 4;

/// One member of the request's all-or-nothing decision: a rule's backend
/// bound to the request's key and the rule's cost.
struct Bound<'a> {
    rule: &'a Rule,
    backend: &'a dyn Backend,
    key: &'a str,
    /// The key's lock id.
    key_id: u64,
    cost: u32,
}

impl Member for Bound<'_> {
    fn cost(&self) -> u32 {
        self.cost
    }

    fn lock_id(&self) -> u64 {
        self.backend.lock_id(self.key, self.key_id)
    }

    fn reserve(&self, cost: u32, held: u64) -> Held<(Decision, StateId)> {
        self.backend.reserve_held(self.key, self.key_id, cost, held)
    }

    fn check(&self, cost: u32, held: u64, reserved: Option<StateId>) -> Held<Decision> {
        self.backend.check_held(self.key, cost, held, reserved)
    }
}

/// The report of the rules' decisions: each rule's own decision (after an
/// admission what is left, after a denial its peek), and the one the
/// fields come from.
fn report(
    class: &ClientClass,
    members: &[Bound<'_>],
    decisions: &[Decision],
    allowed: bool,
) -> Report {
    let policies = members
        .iter()
        .zip(decisions)
        .map(|(member, decision)| {
            PolicyState::new(member.rule, decision, &member.backend.quota_for(member.key))
        })
        .collect();
    let reported = class.report.as_ref().and_then(|name| {
        members
            .iter()
            .position(|member| *member.rule.name == **name)
    });
    let binding = match reported {
        Some(at) if allowed => at,
        _ => crate::policy::bind(decisions).binding().unwrap_or(0),
    };
    Report {
        class: Arc::clone(&class.name),
        policies,
        binding,
        allowed,
        // A shadow rule stands alone in its class.
        shadow: !allowed && members.iter().all(|member| member.rule.shadow),
        retry_after_secs: retry_after_secs(&decisions[binding]),
    }
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

    fn class(name: &str, key: KeyExtractor) -> ClientClass {
        let limiter =
            KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_second(5).unwrap())
                .build()
                .unwrap();
        ClientClass::new(name, key).rule(Rule::new("r", Arc::new(limiter)))
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
        let classes = [
            class("signed-in", KeyExtractor::bearer_token()),
            class("users", counting(&calls)),
        ];
        assert_eq!(
            no_key(decide(&classes, &parts, false)),
            KeyError::Custom("no user".to_string())
        );
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // A key function first, a built-in extractor last: the built-in's
        // error; the function still runs once.
        let calls = Arc::new(AtomicUsize::new(0));
        let classes = [
            class("users", counting(&calls)),
            class("signed-in", KeyExtractor::bearer_token()),
        ];
        assert_eq!(
            no_key(decide(&classes, &parts, false)),
            KeyError::MissingHeader(http::header::AUTHORIZATION)
        );
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // No class: unlimited.
        assert!(matches!(decide(&[], &parts, false), Verdict::Unlimited));
    }
}
