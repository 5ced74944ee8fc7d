//! What limits a request: tiers of keys, rules per route and method, costs,
//! and the limiters behind them.

use super::fields::RateLimitFields;
use super::key::KeyExtractor;
use crate::algorithm::Algorithm;
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

    /// Which lock stripe guards `key`'s state when several rules are
    /// checked together (see
    /// [`Limit::lock_id`](crate::policy::Limit::lock_id)): the same for
    /// every key by default (one state for all, as a [`RateLimiter`] has);
    /// the keyed limiter mixes in the key.
    fn lock_id(&self, key: &str) -> u64 {
        let _ = key;
        (self as *const Self).cast::<()>() as usize as u64
    }

    /// Peeks `cost` for `key`, shows the peek to `commit`, and checks `cost`
    /// if `commit` returns `true`; returns the check's decision after a
    /// commit, else the peek's. The layer decides several rules on one
    /// request through it (see
    /// [`Limit::peek_then_check_n`](crate::policy::Limit::peek_then_check_n)).
    /// The default peeks and checks separately; the keyed limiter looks the
    /// key up once for both.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Backend::check_n); `commit` is then not called.
    fn peek_then_check_n(
        &self,
        key: &str,
        cost: u32,
        commit: &mut dyn FnMut(&Decision) -> bool,
    ) -> Result<Decision, CheckError> {
        let peek = self.peek_n(key, cost)?;
        if commit(&peek) {
            self.check_n(key, cost)
        } else {
            Ok(peek)
        }
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
        *KeyedRateLimiter::quota(self)
    }

    fn lock_id(&self, key: &str) -> u64 {
        // As `KeyedLimit` does: one key's state, one lock, whichever
        // handle checks it (and one for the key's rules together).
        crate::policy::keyed_lock_id(key)
    }

    fn peek_then_check_n(
        &self,
        key: &str,
        cost: u32,
        commit: &mut dyn FnMut(&Decision) -> bool,
    ) -> Result<Decision, CheckError> {
        KeyedRateLimiter::peek_then_check_n(self, key, cost, commit)
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
        *RateLimiter::quota(self)
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
        *crate::redis::RedisLimiter::quota(self)
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
        *crate::redis::SyncedLimiter::quota(self)
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
        *crate::redis::LeasedLimiter::quota(self)
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
/// The built-in tests (methods, path prefixes, and their `and`, `or` and
/// `!`) are decided inline, without a call through a pointer per test;
/// [`from_fn`](Matcher::from_fn) takes any other. A matcher that is a set
/// of methods and at most one path prefix, or its negation (`reads()`,
/// `writes()`, `!path_prefix("/graphql")`,
/// `(!path_prefix("/graphql")).and(reads())`) is *flat*; when every rule
/// of a tier is flat (or has no matcher), and at most 32 rules name at
/// most three distinct prefixes, the tier decides which rules apply from a table
/// built with it: one method lookup, one comparison per distinct prefix
/// and one load per request, however many rules there are. Otherwise each
/// rule's matcher is tested on the method and path, read once.
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
    /// The same test as one method mask and at most one path prefix, when
    /// it is one (most rules: `reads`, `!path_prefix(..).and(writes())`):
    /// decided in a few instructions, without walking the tree.
    flat: Option<Flat>,
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

/// A matcher that is "the method is in `methods`, and the path is (or,
/// `negated`, is not) under `prefix`".
#[derive(Clone)]
struct Flat {
    /// [`method_bit`]s.
    methods: u16,
    prefix: Option<Arc<str>>,
    negated: bool,
}

impl Flat {
    fn methods(methods: u16) -> Option<Flat> {
        Some(Flat {
            methods,
            prefix: None,
            negated: false,
        })
    }

    #[inline]
    fn test(&self, head: &Head<'_>) -> bool {
        self.decides(head.method, |prefix| under(head.path, prefix.as_bytes()))
    }

    /// Whether it matches a request of method bit `method` whose path is
    /// under its prefix when `is_under` says so: the request read here
    /// ([`test`](Flat::test)), or a class of requests when a tier builds
    /// its table.
    #[inline]
    fn decides(&self, method: u16, is_under: impl FnOnce(&Arc<str>) -> bool) -> bool {
        self.methods & method != 0
            && self
                .prefix
                .as_ref()
                .is_none_or(|prefix| is_under(prefix) != self.negated)
    }

    /// Both: the methods both allow, and the one prefix either tests.
    fn and(a: &Flat, b: &Flat) -> Option<Flat> {
        let (prefix, negated) = match (&a.prefix, &b.prefix) {
            (Some(_), Some(_)) => return None,
            (Some(p), None) => (Some(p), a.negated),
            (None, Some(p)) => (Some(p), b.negated),
            (None, None) => (None, false),
        };
        Some(Flat {
            methods: a.methods & b.methods,
            prefix: prefix.cloned(),
            negated,
        })
    }

    /// Neither: the other methods, or the other paths (not both at once:
    /// "not (M and P)" is an `or`).
    fn not(&self) -> Option<Flat> {
        match &self.prefix {
            None => Flat::methods(ALL & !self.methods),
            Some(prefix) if self.methods == ALL => Some(Flat {
                methods: ALL,
                prefix: Some(Arc::clone(prefix)),
                negated: !self.negated,
            }),
            Some(_) => None,
        }
    }
}

/// Whether `path` is `prefix` or continues it after a `/`.
#[inline]
fn under(path: &[u8], prefix: &[u8]) -> bool {
    // Byte by byte: a prefix is a few bytes, shorter than a call to
    // `memcmp` (what `starts_with` compiles to).
    path.len() >= prefix.len()
        && path.iter().zip(prefix).all(|(a, b)| a == b)
        && path.get(prefix.len()).is_none_or(|&next| next == b'/')
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
    fn new(test: Test, flat: Option<Flat>) -> Matcher {
        Matcher { test, flat }
    }

    /// Requests for which `f` is true.
    pub fn from_fn(f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Matcher {
        Matcher::new(Test::Fn(Arc::new(f)), None)
    }

    /// Reads: `GET`, `HEAD` and `OPTIONS` (Stripe's read limit).
    pub fn reads() -> Matcher {
        Matcher::new(Test::Reads, Flat::methods(READS))
    }

    /// Writes: every method that is not a read (Stripe's write limit).
    pub fn writes() -> Matcher {
        Matcher::new(Test::Writes, Flat::methods(ALL & !READS))
    }

    /// Requests with one of `methods`.
    pub fn methods(methods: impl IntoIterator<Item = Method>) -> Matcher {
        let methods: Arc<[Method]> = methods.into_iter().collect();
        let bits = methods
            .iter()
            .map(method_bit)
            .fold(0, |bits, bit| bits | bit);
        // An extension method is one bit for all of them: such a list is
        // compared method by method.
        let flat = if bits & EXTENSION == 0 {
            Flat::methods(bits)
        } else {
            None
        };
        Matcher::new(Test::Methods(methods), flat)
    }

    /// Requests whose path is `prefix` or continues it after a `/`
    /// (`/graphql` matches `/graphql` and `/graphql/x`, not `/graphqlx`).
    pub fn path_prefix(prefix: &str) -> Matcher {
        let prefix: Arc<str> = Arc::from(prefix.trim_end_matches('/'));
        let flat = Some(Flat {
            methods: ALL,
            prefix: Some(Arc::clone(&prefix)),
            negated: false,
        });
        Matcher::new(Test::PathPrefix(prefix), flat)
    }

    /// Requests both matchers match.
    pub fn and(self, other: Matcher) -> Matcher {
        let flat = match (&self.flat, &other.flat) {
            (Some(a), Some(b)) => Flat::and(a, b),
            _ => None,
        };
        Matcher::new(Test::And(Arc::new((self, other))), flat)
    }

    /// Requests either matcher matches.
    pub fn or(self, other: Matcher) -> Matcher {
        Matcher::new(Test::Or(Arc::new((self, other))), None)
    }

    /// Whether the request whose head is `parts` matches.
    pub fn matches(&self, parts: &Parts) -> bool {
        self.test(&Head::new(parts))
    }

    /// [`matches`](Self::matches) on a head read once for every rule.
    #[inline]
    pub(crate) fn test(&self, head: &Head<'_>) -> bool {
        match &self.flat {
            Some(flat) => flat.test(head),
            None => self.walk(head),
        }
    }

    fn walk(&self, head: &Head<'_>) -> bool {
        match &self.test {
            Test::Reads => head.method & READS != 0,
            Test::Writes => head.method & READS == 0,
            Test::Methods(methods) => methods.contains(&head.parts.method),
            Test::PathPrefix(prefix) => under(head.path, prefix.as_bytes()),
            Test::And(both) => both.0.test(head) && both.1.test(head),
            Test::Or(either) => either.0.test(head) || either.1.test(head),
            Test::Not(inner) => !inner.test(head),
            Test::Fn(f) => f(head.parts),
        }
    }
}

/// What the built-in matchers read from a request, read once per request
/// rather than once per rule: its method as a bit and its path.
pub(crate) struct Head<'a> {
    pub(crate) parts: &'a Parts,
    /// [`method_bit`] of the method.
    method: u16,
    path: &'a [u8],
}

impl<'a> Head<'a> {
    pub(crate) fn new(parts: &'a Parts) -> Head<'a> {
        Head {
            parts,
            method: method_bit(&parts.method),
            path: parts.uri.path().as_bytes(),
        }
    }
}

/// Which of a tier's rules apply to a request, looked up rather than
/// tested rule by rule: when every rule's matcher is flat (or absent),
/// whether a rule applies depends only on the request's method (one of
/// [`METHOD_CLASSES`]) and on which of the tier's distinct path prefixes
/// its path is under. The tier's rules are tested once for each such
/// class when the tier is built, and a request then costs one method
/// lookup, one comparison per distinct prefix (one for the example's
/// `/graphql`, however many rules name it) and one load, instead of a
/// matcher per rule.
#[derive(Clone, Debug)]
struct Classes {
    /// The distinct prefixes the rules' matchers name; bit `i` of a path's
    /// class says whether it is under `prefixes[i]`.
    prefixes: Box<[Arc<str>]>,
    /// Bit `r` set when rule `r` applies, at `method << prefixes.len() |
    /// path class`; empty when every class has the same rules (`every`).
    masks: Box<[u32]>,
    /// The rules that apply to every request, when `masks` is empty: read
    /// from the tier itself, no table's cache line touched.
    every: u32,
}

/// The nine standard methods and "any other".
const METHOD_CLASSES: usize = 10;
/// Past this many distinct prefixes (a table of `10 << n` entries) or
/// [`u32::BITS`] rules, a tier tests its rules one by one.
const MAX_PREFIXES: usize = 3;

impl Classes {
    /// The table for `rules`, or `None` when some matcher is not flat (an
    /// `or`, a function, an extension method named) or the table would be
    /// too large.
    fn of(rules: &[Rule]) -> Option<Classes> {
        if rules.len() > u32::BITS as usize {
            return None;
        }
        let flats: Vec<Option<&Flat>> = rules
            .iter()
            .map(|rule| match &rule.when {
                None => Some(None),
                Some(matcher) => matcher.flat.as_ref().map(Some),
            })
            .collect::<Option<_>>()?;
        let mut prefixes: Vec<Arc<str>> = Vec::new();
        for prefix in flats
            .iter()
            .flatten()
            .filter_map(|flat| flat.prefix.as_ref())
        {
            if !prefixes.contains(prefix) {
                prefixes.push(Arc::clone(prefix));
            }
        }
        if prefixes.len() > MAX_PREFIXES {
            return None;
        }
        let applies = |flat: &Option<&Flat>, method: usize, path: usize| {
            flat.is_none_or(|flat| {
                flat.decides(method_bit_of(method), |prefix| {
                    let at = prefixes.iter().position(|p| p == prefix);
                    at.is_some_and(|at| path >> at & 1 == 1)
                })
            })
        };
        let width = 1usize << prefixes.len();
        let masks: Vec<u32> = (0..METHOD_CLASSES * width)
            .map(|at| {
                let (method, path) = (at / width, at % width);
                flats
                    .iter()
                    .enumerate()
                    .filter(|(_, flat)| applies(flat, method, path))
                    .fold(0, |mask, (rule, _)| mask | 1 << rule)
            })
            .collect();
        // No rule depends on the request: nothing to read.
        let every = masks[0];
        let masks = if masks.iter().all(|&m| m == every) {
            Box::default()
        } else {
            masks.into()
        };
        Some(Classes {
            prefixes: prefixes.into(),
            masks,
            every,
        })
    }

    /// The rules that apply to the request whose head is `parts`, as bits.
    #[inline]
    fn mask(&self, parts: &Parts) -> u32 {
        if self.masks.is_empty() {
            return self.every;
        }
        let path = parts.uri.path().as_bytes();
        let class = self.prefixes.iter().enumerate().fold(
            method_class(&parts.method) << self.prefixes.len(),
            |class, (i, prefix)| class | usize::from(under(path, prefix.as_bytes())) << i,
        );
        // `class` < 10 << prefixes.len(), the table's length.
        self.masks.get(class).copied().unwrap_or(0)
    }
}

/// A tier's rules that apply to one request.
pub(crate) enum Applying<'a> {
    /// The bits of [`Classes::mask`], lowest first.
    Mask { rules: &'a [Rule], mask: u32 },
    /// Each rule's matcher tested on the head.
    Walk {
        rules: std::slice::Iter<'a, Rule>,
        head: Head<'a>,
    },
}

impl<'a> Iterator for Applying<'a> {
    type Item = &'a Rule;

    #[inline]
    fn next(&mut self) -> Option<&'a Rule> {
        match self {
            Applying::Mask { rules, mask } => {
                while *mask != 0 {
                    let at = mask.trailing_zeros() as usize;
                    *mask &= *mask - 1;
                    if let Some(rule) = rules.get(at) {
                        return Some(rule);
                    }
                }
                None
            }
            Applying::Walk { rules, head } => rules.find(|rule| rule.applies(head)),
        }
    }
}

/// `GET`, `HEAD` and `OPTIONS` as [`method_bit`]s.
const READS: u16 = 1 | (1 << 1) | (1 << 2);
/// Every extension method's [`method_bit`].
const EXTENSION: u16 = 1 << 15;
/// Every method.
const ALL: u16 = ((1 << 9) - 1) | EXTENSION;

/// One bit per standard method (the reads first);
/// [`EXTENSION`] for any other.
fn method_bit(method: &Method) -> u16 {
    method_bit_of(method_class(method))
}

/// The method's place among the standard ones (the reads first),
/// [`METHOD_CLASSES`]` - 1` for any other.
fn method_class(method: &Method) -> usize {
    // A match on the method's variant (one jump), not nine comparisons.
    match *method {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::OPTIONS => 2,
        Method::POST => 3,
        Method::PUT => 4,
        Method::DELETE => 5,
        Method::PATCH => 6,
        Method::CONNECT => 7,
        Method::TRACE => 8,
        _ => METHOD_CLASSES - 1,
    }
}

/// [`method_bit`] of a [`method_class`].
fn method_bit_of(class: usize) -> u16 {
    if class < METHOD_CLASSES - 1 {
        1 << class
    } else {
        EXTENSION
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
            test => {
                let flat = self.flat.as_ref().and_then(Flat::not);
                let inner = Matcher::new(test, self.flat);
                Matcher::new(Test::Not(Arc::new(inner)), flat)
            }
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
/// // GraphQL: charged in points, computed from the request.
/// let graphql = Rule::new("graphql", points)
///     .when(Matcher::path_prefix("/graphql"))
///     .cost(|parts| parts.uri.query().map_or(1, |q| q.len() as u32 / 10 + 1));
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
    /// A tier holding one must hold no other rule
    /// ([`BuildError::AsyncNotAlone`](super::BuildError::AsyncNotAlone)):
    /// its store cannot take part in an all-or-nothing check.
    pub fn new_async<B: AsyncBackend>(name: &str, limiter: B) -> Rule {
        Rule::from_limiter(name, RuleLimiter::Async(Arc::new(limiter)))
    }

    pub(crate) fn from_limiter(name: &str, limiter: RuleLimiter) -> Rule {
        let quota = match &limiter {
            RuleLimiter::Sync(b) => b.quota(),
            RuleLimiter::Async(b) => b.quota(),
        };
        let mut quoted = String::new();
        super::fields::write_sf_string(&mut quoted, name);
        Rule {
            name: Arc::from(name),
            limiter,
            when: None,
            cost: None,
            policy_headers: Arc::from([(quota, policy_header(name, &quota))]),
            name_len: quoted.len(),
            shadow: false,
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

    /// Charges each request what `cost` says (GraphQL points) instead of 1.
    /// A cost above what the limiter can ever admit is answered 400 (see
    /// [`Rejection::CostTooHigh`](super::Rejection::CostTooHigh)).
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u32 + Send + Sync + 'static) -> Rule {
        self.cost = Some(Arc::new(cost));
        self
    }

    /// Shadow mode for this rule alone (a dry run of one new limit): its
    /// requests are decided, counted and given headers, but a denial
    /// serves the request and counts in
    /// [`LayerStats::shadow_limited`](super::LayerStats::shadow_limited).
    /// A denied request consumes nothing, as always. Such a rule must be
    /// its tier's only one
    /// ([`BuildError::ShadowNotAlone`](super::BuildError::ShadowNotAlone)).
    pub fn shadow(mut self, on: bool) -> Rule {
        self.shadow = on;
        self
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn applies(&self, head: &Head<'_>) -> bool {
        self.when.as_ref().is_none_or(|m| m.test(head))
    }

    pub(crate) fn cost_of(&self, parts: &Parts) -> u32 {
        self.cost.as_ref().map_or(1, |f| f(parts))
    }
}

/// A class of clients, keyed its own way, with its own rules (GitHub:
/// signed-in requests by token at 5,000/h, anonymous ones by IP at 60/h).
///
/// The layer tries tiers in order; the first whose key extractor finds a
/// key decides the request with every rule of that tier that applies to
/// it, all or nothing.
#[derive(Clone, Debug)]
pub struct Tier {
    pub(crate) name: Arc<str>,
    pub(crate) key: KeyExtractor,
    pub(crate) rules: Vec<Rule>,
    /// Which rules apply to a request, as a table when every matcher is
    /// flat (built again with each rule).
    classes: Option<Classes>,
}

impl Tier {
    /// A tier named `name` whose requests are keyed by `key`.
    pub fn new(name: &str, key: KeyExtractor) -> Tier {
        Tier {
            name: Arc::from(name),
            key,
            rules: Vec::new(),
            classes: Classes::of(&[]),
        }
    }

    /// Adds a rule.
    pub fn rule(mut self, rule: Rule) -> Tier {
        self.rules.push(rule);
        self.classes = Classes::of(&self.rules);
        self
    }

    /// The rules that apply to the request whose head is `parts`, in the
    /// tier's order.
    #[inline]
    pub(crate) fn applying<'a>(&'a self, parts: &'a Parts) -> Applying<'a> {
        match &self.classes {
            Some(classes) => Applying::Mask {
                rules: &self.rules,
                mask: classes.mask(parts),
            },
            None => Applying::Walk {
                rules: self.rules.iter(),
                head: Head::new(parts),
            },
        }
    }

    /// The tier's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keyed limiter's `Backend` methods (the check, and the
    /// peek-then-check that the layer's rules checked together run on one
    /// lookup) against its own `check_n` and `peek_n`, on two
    /// limiters driven with the same (time, key, cost, operation)
    /// sequences; a key cap of two sends the third key to the overflow
    /// state, so that new keys and the overflow path are taken too.
    fn backend_decides_as_the_limiter<A: Algorithm>(
        steps: &[(u64, u8, u32, u8)],
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        use crate::ManualClock;
        use std::time::Duration;
        let limiter = |clock: &ManualClock| {
            KeyedRateLimiter::<String, A>::builder(Quota::per_second(3).unwrap().burst(4).unwrap())
                .clock(clock.clone())
                .max_keys(2)
                .build()
                .unwrap()
        };
        let (clock, own_clock) = (ManualClock::new(), ManualClock::new());
        let (backend, own) = (limiter(&clock), limiter(&own_clock));
        for &(advance_ms, key, cost, op) in steps {
            clock.advance(Duration::from_millis(advance_ms));
            own_clock.advance(Duration::from_millis(advance_ms));
            let key = format!("k{key}");
            let (mut seen, mut own_seen) = (None, None);
            let (got, want) = match op {
                0 => (
                    Backend::check_n(&backend, &key, cost),
                    own.check_n(key.as_str(), cost),
                ),
                _ => {
                    let commit = op == 1;
                    (
                        Backend::peek_then_check_n(&backend, &key, cost, &mut |peek| {
                            seen = Some(*peek);
                            commit
                        }),
                        // The reference: a peek, then a check if committed
                        // (one thread, one instant: as one lookup decides).
                        own.peek_n(key.as_str(), cost).and_then(|peek| {
                            own_seen = Some(peek);
                            if commit {
                                own.check_n(key.as_str(), cost)
                            } else {
                                Ok(peek)
                            }
                        }),
                    )
                }
            };
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(seen, own_seen);
            proptest::prop_assert_eq!(backend.len(), own.len());
            proptest::prop_assert_eq!(
                Backend::peek_n(&backend, &key, 1),
                own.peek_n(key.as_str(), 1)
            );
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn the_keyed_backend_decides_as_the_keyed_limiter(
            steps in proptest::collection::vec((0u64..700, 0u8..3, 0u32..6, 0u8..3), 1..60),
        ) {
            backend_decides_as_the_limiter::<crate::TokenBucket>(&steps)?;
            backend_decides_as_the_limiter::<crate::LeakyBucket>(&steps)?;
            backend_decides_as_the_limiter::<crate::SlidingWindowLog>(&steps)?;
        }
    }

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

    /// The standard methods, `ext` and another extension method.
    fn every_method(ext: &Method) -> [Method; 11] {
        [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::CONNECT,
            Method::TRACE,
            ext.clone(),
            Method::from_bytes(b"OTHER").unwrap(),
        ]
    }

    /// The tree's meaning, read without any flat form.
    fn reference(m: &Matcher, head: &Head<'_>) -> bool {
        match &m.test {
            Test::Reads => {
                [Method::GET, Method::HEAD, Method::OPTIONS].contains(&head.parts.method)
            }
            Test::Writes => {
                ![Method::GET, Method::HEAD, Method::OPTIONS].contains(&head.parts.method)
            }
            Test::Methods(methods) => methods.contains(&head.parts.method),
            Test::PathPrefix(prefix) => {
                let path = head.parts.uri.path();
                path == &**prefix || path.starts_with(&format!("{prefix}/"))
            }
            Test::And(both) => reference(&both.0, head) && reference(&both.1, head),
            Test::Or(either) => reference(&either.0, head) || reference(&either.1, head),
            Test::Not(inner) => !reference(inner, head),
            Test::Fn(f) => f(head.parts),
        }
    }

    #[test]
    fn flat_forms_decide_as_the_tree_does() {
        let ext = Method::from_bytes(b"PURGE").unwrap();
        let atoms = || {
            vec![
                Matcher::reads(),
                Matcher::writes(),
                Matcher::methods([Method::PUT, Method::PATCH]),
                Matcher::methods([Method::GET, ext.clone()]),
                Matcher::path_prefix("/a"),
                Matcher::path_prefix("/a/b/"),
                Matcher::from_fn(|p| p.uri.path().contains('x')),
            ]
        };
        let mut matchers = Vec::new();
        for a in atoms() {
            matchers.push(!a.clone());
            matchers.push(a.clone());
            for b in atoms() {
                matchers.push(a.clone().and(b.clone()));
                matchers.push(!a.clone().and(b.clone()));
                matchers.push((!a.clone()).and(b.clone()));
                matchers.push(!(!a.clone()).and(!b.clone()));
                matchers.push(a.clone().or(b.clone()));
                matchers.push(!a.clone().or(b.clone()));
            }
        }
        let methods = every_method(&ext);
        let paths = [
            "/", "/a", "/a/", "/ab", "/a/b", "/a/bx", "/a/b/c", "/x", "/b/a",
        ];
        for m in &matchers {
            for method in &methods {
                for path in paths {
                    let parts = head(method.clone(), path);
                    let h = Head::new(&parts);
                    assert_eq!(m.test(&h), reference(m, &h), "{m:?} on {method} {path}");
                }
            }
        }
        // The forms rules use take the flat path.
        let graphql = || Matcher::path_prefix("/graphql");
        for m in [
            Matcher::reads(),
            Matcher::writes(),
            !graphql(),
            (!graphql()).and(Matcher::reads()),
            graphql().and(Matcher::writes()),
            Matcher::methods([Method::PUT, Method::PATCH]),
        ] {
            assert!(m.flat.is_some(), "{m:?}");
        }
        let walked = [
            Matcher::reads().or(graphql()),
            !graphql().and(Matcher::writes()),
            Matcher::methods([ext]),
        ];
        assert!(walked.iter().all(|m| m.flat.is_none()));
    }

    #[test]
    fn a_tiers_table_picks_the_rules_their_matchers_pick() {
        let limiter = Arc::new(
            RateLimiter::<crate::TokenBucket>::new(Quota::per_second(5).unwrap()).unwrap(),
        );
        let ext = Method::from_bytes(b"PURGE").unwrap();
        let prefix = Matcher::path_prefix;
        // Flat forms over four prefixes (a tier naming all four walks),
        // no matcher, and forms that are not flat.
        let candidates: Vec<Option<Matcher>> = vec![
            None,
            Some(Matcher::reads()),
            Some(Matcher::writes()),
            Some(Matcher::methods([Method::PUT, Method::PATCH])),
            Some(prefix("/a")),
            Some(!prefix("/a")),
            Some((!prefix("/a")).and(Matcher::reads())),
            Some(prefix("/a/b").and(Matcher::writes())),
            Some(!prefix("/a/b")),
            Some(prefix("/c").and(Matcher::methods([Method::DELETE]))),
            Some(prefix("/d")),
            Some(Matcher::reads().or(prefix("/c"))),
            Some(Matcher::from_fn(|p| p.uri.path().contains('x'))),
            Some(Matcher::methods([ext.clone()])),
        ];
        let methods = every_method(&ext);
        let paths = [
            "/", "/a", "/a/", "/ab", "/a/b", "/a/bx", "/a/b/c", "/c", "/c/x", "/d/e", "/x",
        ];
        let (mut tables, mut walks) = (0, 0);
        // A fixed stream of tiers of one to seven rules drawn from the
        // candidates (a linear congruential generator: the same tiers on
        // every run).
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut draw = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize % n
        };
        for _ in 0..400 {
            let mut tier = Tier::new("t", KeyExtractor::global());
            for _ in 0..1 + draw(7) {
                let rule = Rule::new("r", Arc::clone(&limiter));
                tier = tier.rule(match &candidates[draw(candidates.len())] {
                    Some(m) => rule.when(m.clone()),
                    None => rule,
                });
            }
            if tier.classes.is_some() {
                tables += 1;
            } else {
                walks += 1;
            }
            for method in &methods {
                for path in paths {
                    let parts = head(method.clone(), path);
                    let h = Head::new(&parts);
                    let expected: Vec<usize> = (0..tier.rules.len())
                        .filter(|&i| tier.rules[i].when.as_ref().is_none_or(|m| reference(m, &h)))
                        .collect();
                    let got: Vec<usize> = tier
                        .applying(&parts)
                        .map(|rule| {
                            tier.rules
                                .iter()
                                .position(|r| std::ptr::eq(r, rule))
                                .unwrap()
                        })
                        .collect();
                    assert_eq!(got, expected, "{:?} on {method} {path}", tier.rules);
                }
            }
        }
        // Both paths were taken, many times.
        assert!(
            tables > 100 && walks > 100,
            "{tables} tables, {walks} walks"
        );
        // The example's tiers take the table; four prefixes, an `or` or a
        // function walk.
        let graphql = || prefix("/graphql");
        let rule = |m: Matcher| Rule::new("r", Arc::clone(&limiter)).when(m);
        let example = Tier::new("t", KeyExtractor::global())
            .rule(rule(!graphql()))
            .rule(rule((!graphql()).and(Matcher::reads())))
            .rule(rule((!graphql()).and(Matcher::writes())))
            .rule(rule(graphql()));
        assert_eq!(example.classes.as_ref().unwrap().prefixes.len(), 1);
        let unmatched =
            Tier::new("t", KeyExtractor::global()).rule(Rule::new("r", Arc::clone(&limiter)));
        let classes = unmatched.classes.as_ref().unwrap();
        assert!(classes.masks.is_empty() && classes.every == 1);
        let four = ["/a", "/b", "/c", "/d"]
            .into_iter()
            .fold(Tier::new("t", KeyExtractor::global()), |t, p| {
                t.rule(rule(prefix(p)))
            });
        assert!(four.classes.is_none());
        let with_fn = Tier::new("t", KeyExtractor::global()).rule(rule(Matcher::from_fn(|_| true)));
        assert!(with_fn.classes.is_none());
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
