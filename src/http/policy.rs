//! What limits a request: classes of keys, rules per route and method, costs,
//! and the limiters behind them.

use super::key::KeyExtractor;
use crate::algorithm::Algorithm;
use crate::headers::RateLimitFields;
use crate::policy::Held;
use crate::sync::Arc;
use crate::{CheckError, Clock, Decision, KeyedRateLimiter, Quota, RateLimiter};
use http::request::Parts;
use http::{HeaderValue, Method};
use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;

/// A limiter the layer checks synchronously, keyed by the request's client
/// key: a [`KeyedRateLimiter<String, _>`](KeyedRateLimiter) with any
/// algorithm, a [`RateLimiter`] (one state for every key: a global limit),
/// or a type of your own.
pub trait Backend: Send + Sync + 'static {
    /// Decides a request of `cost` for `key` and records it if admitted.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` can never pass.
    fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError>;

    /// Decides as [`check_n`](Backend::check_n) would, recording nothing.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Backend::check_n).
    fn peek_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError>;

    /// The quota enforced (what `x-ratelimit-limit` and `RateLimit-Policy`
    /// report).
    fn quota(&self) -> Quota;

    /// The quota `key` is checked under, which the headers report:
    /// [`quota`](Backend::quota) unless keys have quotas of their own (a
    /// policy's tiers).
    fn quota_for(&self, key: &str) -> Quota {
        let _ = key;
        self.quota()
    }

    /// The all-or-nothing protocol (see
    /// [`AllOf`](crate::policy::AllOf)): which lock stripe guards `key`'s
    /// state. The default, the backend's address, is right for one state
    /// for every key (a [`RateLimiter`]); a backend with a state per key
    /// returns one per key, the same whichever handle checks it.
    ///
    /// `key_id` is the key's own lock id, computed once per request for
    /// every rule: a backend with a state per key returns it.
    #[doc(hidden)]
    fn lock_id(&self, key: &str, key_id: u64) -> u64 {
        let _ = (key, key_id);
        crate::policy::address_of(self) as u64
    }

    /// The all-or-nothing protocol: finds `key`'s state and peeks `cost`
    /// there, while the stripes in `held` are held. The default peeks; the
    /// state is the one [`lock_id`](Backend::lock_id) names.
    #[doc(hidden)]
    fn reserve_held(
        &self,
        key: &str,
        key_id: u64,
        cost: u32,
        held: u64,
    ) -> Held<(Decision, crate::policy::StateId)> {
        let _ = held;
        let state =
            crate::policy::StateId::of(crate::policy::address_of(self), self.lock_id(key, key_id));
        Held::Decided(self.peek_n(key, cost).map(|d| (d, state)))
    }

    /// The all-or-nothing protocol: checks `cost` for `key` while the
    /// stripes in `held` are held. The default checks.
    #[doc(hidden)]
    fn check_held(
        &self,
        key: &str,
        cost: u32,
        held: u64,
        reserved: Option<crate::policy::StateId>,
    ) -> Held<Decision> {
        let _ = (held, reserved);
        Held::Decided(self.check_n(key, cost))
    }
}

impl<A, C, S> Backend for KeyedRateLimiter<String, A, C, S>
where
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    #[inline]
    fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        KeyedRateLimiter::check_n(self, key, cost)
    }

    fn peek_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        KeyedRateLimiter::peek_n(self, key, cost)
    }

    fn quota(&self) -> Quota {
        KeyedRateLimiter::quota(self)
    }

    fn lock_id(&self, _key: &str, key_id: u64) -> u64 {
        // As `KeyedLimit` does: one key's state, one lock, whichever
        // handle checks it (and one for the key's rules together).
        key_id
    }

    fn reserve_held(
        &self,
        key: &str,
        key_id: u64,
        cost: u32,
        held: u64,
    ) -> Held<(Decision, crate::policy::StateId)> {
        KeyedRateLimiter::reserve_held(self, key, key_id, cost, held)
    }

    fn check_held(
        &self,
        key: &str,
        cost: u32,
        held: u64,
        _reserved: Option<crate::policy::StateId>,
    ) -> Held<Decision> {
        KeyedRateLimiter::check_held(self, key, cost, held)
    }
}

impl<A: Algorithm, C: Clock> Backend for RateLimiter<A, C> {
    #[inline]
    fn check_n(&self, _key: &str, cost: u32) -> Result<Decision, CheckError> {
        RateLimiter::check_n(self, cost)
    }

    fn peek_n(&self, _key: &str, cost: u32) -> Result<Decision, CheckError> {
        RateLimiter::peek_n(self, cost)
    }

    fn quota(&self) -> Quota {
        RateLimiter::quota(self)
    }
}

/// The future an [`AsyncBackend`] returns.
pub type BackendFuture = Pin<Box<dyn Future<Output = Result<Decision, CheckError>> + Send>>;

/// A limiter the layer awaits (a Redis limiter: one round trip per
/// decision; or a synced or leased limiter, which decide locally and return
/// a ready future), so its path boxes a future.
///
/// A backend that cannot reach its store decides by its own policy (the
/// Redis limiter's `StoreDown`), so the layer never sees a store error.
pub trait AsyncBackend: Send + Sync + 'static {
    /// Decides a request of `cost` for `key` and records it if admitted.
    fn check_n(&self, key: String, cost: u32) -> BackendFuture;

    /// The quota enforced.
    fn quota(&self) -> Quota;

    /// The quota `key` is checked under, which the headers report:
    /// [`quota`](AsyncBackend::quota) unless keys have quotas of their own
    /// (a policy's tiers).
    fn quota_for(&self, key: &str) -> Quota {
        let _ = key;
        self.quota()
    }
}

#[cfg(feature = "redis")]
impl<A, C> AsyncBackend for crate::redis::RedisLimiter<A, C>
where
    A: crate::redis::RedisAlgorithm,
    C: Clock,
{
    fn check_n(&self, key: String, cost: u32) -> BackendFuture {
        let limiter = self.clone();
        Box::pin(async move {
            let decision = limiter.check_n(&key, cost).await?;
            Ok(decision.decision())
        })
    }

    fn quota(&self) -> Quota {
        crate::redis::RedisLimiter::quota(self)
    }
}

/// The synced limiter decides locally (its background task syncs with
/// Redis), so its future is ready at once.
#[cfg(feature = "redis")]
impl<A, C> AsyncBackend for crate::redis::SyncedLimiter<A, C>
where
    A: crate::redis::SyncAlgorithm,
    C: Clock,
{
    fn check_n(&self, key: String, cost: u32) -> BackendFuture {
        Box::pin(std::future::ready(crate::redis::SyncedLimiter::check_n(
            self, &key, cost,
        )))
    }

    fn quota(&self) -> Quota {
        crate::redis::SyncedLimiter::quota(self)
    }
}

/// The leased limiter decides locally within the slices it leases from
/// Redis; a key whose slice cannot cover the request (its first request on
/// this node) waits for one renewal round trip
/// ([`acquire_n`](crate::redis::LeasedLimiter::acquire_n)).
#[cfg(feature = "redis")]
impl<C: Clock> AsyncBackend for crate::redis::LeasedLimiter<C> {
    fn check_n(&self, key: String, cost: u32) -> BackendFuture {
        let limiter = self.clone();
        Box::pin(async move { limiter.acquire_n(&key, cost).await })
    }

    fn quota(&self) -> Quota {
        crate::redis::LeasedLimiter::quota(self)
    }
}

/// A shared handle: keep one to read the limiter's statistics or stop it.
impl<B: AsyncBackend + ?Sized> AsyncBackend for Arc<B> {
    fn check_n(&self, key: String, cost: u32) -> BackendFuture {
        (**self).check_n(key, cost)
    }

    fn quota(&self) -> Quota {
        (**self).quota()
    }

    fn quota_for(&self, key: &str) -> Quota {
        (**self).quota_for(key)
    }
}

/// Whether a rule applies to a request: by method, path, or any test.
///
/// # Examples
///
/// ```
/// use rategate::http::Matcher;
///
/// let (get, _) = http::Request::get("/v1/charges").body(())?.into_parts();
/// let (post, _) = http::Request::post("/v1/charges").body(())?.into_parts();
/// assert!(Matcher::reads().matches(&get));
/// assert!(Matcher::writes().matches(&post));
/// assert!(Matcher::path_prefix("/v1").matches(&get));
/// assert!(!Matcher::path_prefix("/v").matches(&get)); // whole segments only
/// let rest = !Matcher::path_prefix("/graphql");
/// assert!(rest.clone().and(Matcher::writes()).matches(&post));
/// assert!(!rest.and(Matcher::writes()).matches(&get));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Matcher {
    test: Test,
}

type MatchFn = dyn Fn(&Parts) -> bool + Send + Sync;

#[derive(Clone)]
enum Test {
    Reads,
    Writes,
    Methods(Arc<[Method]>),
    /// Without a trailing `/`.
    PathPrefix(Arc<str>),
    And(Arc<(Matcher, Matcher)>),
    Or(Arc<(Matcher, Matcher)>),
    Not(Arc<Matcher>),
    Fn(Arc<MatchFn>),
}

/// Whether `path` is `prefix` or continues it after a `/`.
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `GET`, `HEAD` and `OPTIONS`: the reads.
fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.test {
            Test::Reads => f.write_str("Reads"),
            Test::Writes => f.write_str("Writes"),
            Test::Methods(methods) => f.debug_tuple("Methods").field(methods).finish(),
            Test::PathPrefix(prefix) => f.debug_tuple("PathPrefix").field(prefix).finish(),
            Test::And(both) => f.debug_tuple("And").field(&both.0).field(&both.1).finish(),
            Test::Or(either) => f
                .debug_tuple("Or")
                .field(&either.0)
                .field(&either.1)
                .finish(),
            Test::Not(inner) => f.debug_tuple("Not").field(inner).finish(),
            Test::Fn(_) => f.write_str("Fn"),
        }
    }
}

impl Matcher {
    fn new(test: Test) -> Matcher {
        Matcher { test }
    }

    /// Requests for which `f` is true.
    pub fn from_fn(f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Matcher {
        Matcher::new(Test::Fn(Arc::new(f)))
    }

    /// Reads: `GET`, `HEAD` and `OPTIONS` (Stripe's read limit).
    pub fn reads() -> Matcher {
        Matcher::new(Test::Reads)
    }

    /// Writes: every method that is not a read (Stripe's write limit).
    pub fn writes() -> Matcher {
        Matcher::new(Test::Writes)
    }

    /// Requests with one of `methods`.
    pub fn methods(methods: impl IntoIterator<Item = Method>) -> Matcher {
        Matcher::new(Test::Methods(methods.into_iter().collect()))
    }

    /// Requests whose path is `prefix` or continues it after a `/`
    /// (`/graphql` matches `/graphql` and `/graphql/x`, not `/graphqlx`).
    pub fn path_prefix(prefix: &str) -> Matcher {
        Matcher::new(Test::PathPrefix(Arc::from(prefix.trim_end_matches('/'))))
    }

    /// Requests both matchers match.
    pub fn and(self, other: Matcher) -> Matcher {
        Matcher::new(Test::And(Arc::new((self, other))))
    }

    /// Requests either matcher matches.
    pub fn or(self, other: Matcher) -> Matcher {
        Matcher::new(Test::Or(Arc::new((self, other))))
    }

    /// Whether the request whose head is `parts` matches.
    pub fn matches(&self, parts: &Parts) -> bool {
        match &self.test {
            Test::Reads => is_read(&parts.method),
            Test::Writes => !is_read(&parts.method),
            Test::Methods(methods) => methods.contains(&parts.method),
            Test::PathPrefix(prefix) => under(parts.uri.path(), prefix),
            Test::And(both) => both.0.matches(parts) && both.1.matches(parts),
            Test::Or(either) => either.0.matches(parts) || either.1.matches(parts),
            Test::Not(inner) => !inner.matches(parts),
            Test::Fn(f) => f(parts),
        }
    }
}

/// Requests the matcher does not match (`!Matcher::path_prefix("/graphql")`:
/// every other path).
impl std::ops::Not for Matcher {
    type Output = Matcher;

    fn not(self) -> Matcher {
        match self.test {
            // `!!m` is `m`.
            Test::Not(inner) => Arc::unwrap_or_clone(inner),
            test => Matcher::new(Test::Not(Arc::new(Matcher::new(test)))),
        }
    }
}

/// The `ratelimit-policy` item of `name` under `quota`.
fn policy_header(name: &str, quota: &Quota) -> HeaderValue {
    // The item depends on the quota only; any decision gives it. Names are
    // escaped into printable ASCII, so the value always parses.
    let item = RateLimitFields::new(
        &crate::Decision::allow(quota.limit(), quota.limit(), 0),
        quota,
    )
    .policy_item(name);
    HeaderValue::from_str(&item).unwrap_or_else(|_| HeaderValue::from_static("\"default\";q=0"))
}

type CostFn = dyn Fn(&Parts) -> u32 + Send + Sync;

#[derive(Clone)]
pub(crate) enum RuleLimiter {
    Sync(Arc<dyn Backend>),
    Async(Arc<dyn AsyncBackend>),
}

/// One named limit: a limiter, the requests it applies to (all by
/// default), and what each costs (1 by default).
///
/// The name is the policy name in `RateLimit-Policy` / `RateLimit` and in
/// 429 bodies.
///
/// # Examples
///
/// ```
/// use rategate::http::{Matcher, Rule};
/// use rategate::{KeyedRateLimiter, Quota, TokenBucket};
/// use std::sync::Arc;
///
/// let points = Arc::new(KeyedRateLimiter::<String, TokenBucket>::new(Quota::per_hour(5000)?)?);
/// // Uploads: charged by their declared size, in KiB.
/// let uploads = Rule::new("upload-kib", Arc::clone(&points))
///     .when(Matcher::path_prefix("/upload"))
///     .cost(|parts| {
///         let length = parts.headers.get("content-length").and_then(|v| v.to_str().ok());
///         length.and_then(|v| v.parse::<u32>().ok()).map_or(1, |n| n / 1024 + 1)
///     });
/// // GraphQL: charged in points the handler computes from the query
/// // (see `Charge`).
/// let graphql = Rule::new("graphql", points)
///     .when(Matcher::path_prefix("/graphql"))
///     .charged_by_handler();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) limiter: RuleLimiter,
    pub(crate) when: Option<Matcher>,
    pub(crate) cost: Option<Arc<CostFn>>,
    /// `"name";q=..;w=..` for each quota the rule checks under (its
    /// backend's first, then a policy's other tiers'): fixed by the name
    /// and the quota, built once.
    pub(crate) policy_headers: Arc<[(Quota, HeaderValue)]>,
    /// The length of the quoted name that starts each item (the
    /// `ratelimit` item starts with it too).
    pub(crate) name_len: usize,
    /// Decided and counted, never denied.
    pub(crate) shadow: bool,
    /// Its cost is set by the request's handler, through [`Charge`].
    pub(crate) by_handler: bool,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quota = match &self.limiter {
            RuleLimiter::Sync(b) => b.quota(),
            RuleLimiter::Async(b) => b.quota(),
        };
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("quota", &quota)
            .field("async", &matches!(self.limiter, RuleLimiter::Async(_)))
            .field("when", &self.when)
            .finish_non_exhaustive()
    }
}

impl Rule {
    /// A rule named `name` checked by `limiter`, in memory.
    pub fn new<B: Backend>(name: &str, limiter: Arc<B>) -> Rule {
        Rule::from_limiter(name, RuleLimiter::Sync(limiter))
    }

    /// A rule named `name` checked by an async `limiter` (a Redis limiter).
    /// A class holding one must hold no other rule
    /// ([`BuildError::AsyncNotAlone`](super::BuildError::AsyncNotAlone)):
    /// its store cannot take part in an all-or-nothing check.
    pub fn new_async<B: AsyncBackend>(name: &str, limiter: Arc<B>) -> Rule {
        Rule::from_limiter(name, RuleLimiter::Async(limiter))
    }

    pub(crate) fn from_limiter(name: &str, limiter: RuleLimiter) -> Rule {
        let quota = match &limiter {
            RuleLimiter::Sync(b) => b.quota(),
            RuleLimiter::Async(b) => b.quota(),
        };
        let mut quoted = String::new();
        crate::headers::write_sf_string(&mut quoted, name);
        Rule {
            name: Arc::from(name),
            limiter,
            when: None,
            cost: None,
            policy_headers: Arc::from([(quota, policy_header(name, &quota))]),
            name_len: quoted.len(),
            shadow: false,
            by_handler: false,
        }
    }

    /// Adds the `ratelimit-policy` items of `quotas` (a policy's tiers) to
    /// those built once.
    #[cfg(feature = "serde")]
    pub(crate) fn with_tier_quotas(mut self, quotas: &[Quota]) -> Rule {
        let mut headers = self.policy_headers.to_vec();
        for quota in quotas {
            if !headers.iter().any(|(q, _)| q == quota) {
                headers.push((*quota, policy_header(&self.name, quota)));
            }
        }
        self.policy_headers = Arc::from(headers);
        self
    }

    /// The `ratelimit-policy` item under `quota`: built once for the
    /// rule's quotas, else now.
    pub(crate) fn policy_header(&self, quota: &Quota) -> HeaderValue {
        match self.policy_headers.iter().find(|(q, _)| q == quota) {
            Some((_, header)) => header.clone(),
            None => policy_header(&self.name, quota),
        }
    }

    /// Applies only to requests `matcher` matches.
    pub fn when(mut self, matcher: Matcher) -> Rule {
        self.when = Some(matcher);
        self
    }

    /// Charges each request what `cost` computes from its head, instead
    /// of 1. A cost above what the limiter can ever admit is answered 400
    /// (see [`Rejection::CostTooHigh`](super::Rejection::CostTooHigh)).
    ///
    /// A cost of 0 serves the request without charging it, and is never
    /// denied, even once the budget is spent: use it for requests that are
    /// free on purpose. A cost a client states in a header is the client's
    /// word; for a cost in the body (a GraphQL query), see
    /// [`charged_by_handler`](Rule::charged_by_handler).
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u32 + Send + Sync + 'static) -> Rule {
        self.cost = Some(Arc::new(cost));
        self
    }

    /// Shadow mode for this rule alone (a dry run of one new limit): its
    /// requests are decided, counted and given headers, but a denial
    /// serves the request and counts in
    /// [`LayerStats::shadow_limited`](super::LayerStats::shadow_limited).
    /// A denied request consumes nothing, as always. Such a rule must be
    /// its class's only one
    /// ([`BuildError::ShadowNotAlone`](super::BuildError::ShadowNotAlone)).
    pub fn shadow(mut self, on: bool) -> Rule {
        self.shadow = on;
        self
    }

    /// Leaves the request's charge to its handler, which knows the cost
    /// once it has read the body (the points of a GraphQL query). The layer
    /// decides nothing when the request arrives; it puts a
    /// [`Charge`](super::Charge) in the request's extensions, and the
    /// handler's [`Charge::charge`](super::Charge::charge)`(points)` decides this rule at that cost and the
    /// request's other rules at theirs, all or nothing, answering a 429
    /// with the usual fields when they do not fit. A request whose handler
    /// never charges it is charged 1 when the request is dropped. Only an
    /// in-memory rule can be charged by the handler.
    pub fn charged_by_handler(mut self) -> Rule {
        self.by_handler = true;
        self
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn applies(&self, parts: &Parts) -> bool {
        self.when.as_ref().is_none_or(|m| m.matches(parts))
    }

    pub(crate) fn cost_of(&self, parts: &Parts) -> u32 {
        self.cost.as_ref().map_or(1, |f| f(parts))
    }
}

/// A class of clients, keyed its own way, with its own rules (GitHub:
/// signed-in requests by token at 5,000/h, anonymous ones by IP at 60/h).
///
/// The layer tries classes in order; the first whose key extractor finds a
/// key decides the request with every rule of that class that applies to
/// it, all or nothing.
///
/// # Which rule the fields report
///
/// A response's `x-ratelimit-*` fields and `retry-after` report one rule.
/// On a 429, the rule that denied (the one with the longest wait when
/// several did). On an admitted request, the rule named by
/// [`report`](ClientClass::report) when it applied, else the one with the fewest
/// requests remaining. GitHub's clients read the hourly budget from every
/// response: name it with `report("hourly")` so that a per-second rule
/// beside it does not take its place.
#[derive(Clone, Debug)]
pub struct ClientClass {
    pub(crate) name: Arc<str>,
    pub(crate) key: KeyExtractor,
    pub(crate) rules: Vec<Rule>,
    /// The rule whose fields an admitted request reports, by name.
    pub(crate) report: Option<Arc<str>>,
    /// Keyed on a header or bearer token from a policy file, with no
    /// check of its keys yet: the builder refuses it without one.
    pub(crate) unchecked_key: bool,
}

impl ClientClass {
    /// A class named `name` whose requests are keyed by `key`.
    pub fn new(name: &str, key: KeyExtractor) -> ClientClass {
        ClientClass {
            name: Arc::from(name),
            key,
            rules: Vec::new(),
            report: None,
            unchecked_key: false,
        }
    }

    /// The application's check of this class's keys: a key `known`
    /// refuses is not a budget (see [`KeyExtractor::validate`]; it
    /// replaces a check the extractor had).
    pub fn validate(mut self, known: impl Fn(&str) -> bool + Send + Sync + 'static) -> ClientClass {
        self.key = self.key.validate(known);
        self.unchecked_key = false;
        self
    }

    /// Adds a rule.
    pub fn rule(mut self, rule: Rule) -> ClientClass {
        self.rules.push(rule);
        self
    }

    /// The rule whose budget an admitted request's fields report, when it
    /// applies to the request (see the type's docs; by default the rule
    /// with the fewest remaining).
    pub fn report(mut self, rule: &str) -> ClientClass {
        self.report = Some(Arc::from(rule));
        self
    }

    /// The rules that apply to the request whose head is `parts`, in the
    /// class's order, with their places in the class.
    pub(crate) fn applying<'a>(
        &'a self,
        parts: &'a Parts,
    ) -> impl Iterator<Item = (usize, &'a Rule)> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| rule.applies(parts))
    }

    /// The class's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: Method, uri: &str) -> Parts {
        let (parts, ()) = http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap()
            .into_parts();
        parts
    }

    #[test]
    fn methods_split_reads_from_writes() {
        let reads = Matcher::reads();
        let writes = Matcher::writes();
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            let parts = head(method.clone(), "/");
            assert!(reads.matches(&parts), "{method}");
            assert!(!writes.matches(&parts), "{method}");
        }
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            let parts = head(method.clone(), "/");
            assert!(!reads.matches(&parts), "{method}");
            assert!(writes.matches(&parts), "{method}");
        }
        let put_or_patch = Matcher::methods([Method::PUT, Method::PATCH]);
        assert!(put_or_patch.matches(&head(Method::PATCH, "/")));
        assert!(!put_or_patch.matches(&head(Method::POST, "/")));
    }

    #[test]
    fn path_prefixes_match_whole_segments() {
        let graphql = Matcher::path_prefix("/graphql/");
        for (path, expected) in [
            ("/graphql", true),
            ("/graphql/", true),
            ("/graphql/x?first=5", true),
            ("/graphqlx", false),
            ("/v1/graphql", false),
            ("/", false),
        ] {
            assert_eq!(
                graphql.matches(&head(Method::GET, path)),
                expected,
                "{path}"
            );
        }
        // "/" (trimmed to nothing) is every path.
        assert!(Matcher::path_prefix("/").matches(&head(Method::GET, "/v1/charges")));
    }

    #[test]
    fn combinators_follow_their_truth_tables() {
        let yes = || Matcher::from_fn(|_| true);
        let no = || Matcher::from_fn(|_| false);
        let parts = head(Method::GET, "/");
        for (a, b) in [(false, false), (false, true), (true, false), (true, true)] {
            let m = |v: bool| if v { yes() } else { no() };
            assert_eq!(m(a).and(m(b)).matches(&parts), a && b, "{a} and {b}");
            assert_eq!(m(a).or(m(b)).matches(&parts), a || b, "{a} or {b}");
            assert_eq!((!m(a)).matches(&parts), !a, "not {a}");
        }
        let graphql = Matcher::path_prefix("/graphql");
        let rest_writes = (!graphql.clone()).and(Matcher::writes());
        assert!(rest_writes.matches(&head(Method::POST, "/v1/charges")));
        assert!(!rest_writes.matches(&head(Method::POST, "/graphql")));
        assert!(!rest_writes.matches(&head(Method::GET, "/v1/charges")));
        // Two negations give the matcher back, not a chain of three.
        let twice = !!graphql;
        assert!(matches!(twice.test, Test::PathPrefix(_)));
        assert!(twice.matches(&head(Method::GET, "/graphql")));
    }

    #[test]
    fn a_rules_debug_says_when_it_applies() {
        let limiter = Arc::new(
            RateLimiter::<crate::TokenBucket>::new(Quota::per_second(5).unwrap()).unwrap(),
        );
        let rule = Rule::new("writes", limiter).when(Matcher::writes());
        let debug = format!("{rule:?}");
        assert!(debug.contains("when: Some(Writes)"), "{debug}");
    }

    #[test]
    fn debug_shows_what_a_matcher_tests() {
        let m = (!Matcher::path_prefix("/graphql/"))
            .and(Matcher::reads().or(Matcher::from_fn(|_| true)));
        assert_eq!(
            format!("{m:?}"),
            r#"And(Not(PathPrefix("/graphql")), Or(Reads, Fn))"#
        );
    }
}
