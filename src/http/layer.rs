//! The tower layer and service: decide in `call`, then answer or serve.

use super::body::{BodyKind, SameBody, Wrapped};
use super::charge::Charge;
use super::decide::{Deferred, Pending, Report, Verdict, decide};
use super::future::ResponseFuture;
use super::key::KeyExtractor;
use super::policy::{ClientClass, Rule, RuleLimiter};
use super::response::{HeaderOptions, Rejection, Responder, problem_response, write_headers};
use super::stats::{Counters, LayerStats, StripedCounters};
use crate::headers::ResetFormat;
use crate::sync::Arc;
use crate::{KeyedRateLimiter, Quota, QuotaError, TokenBucket};
use bytes::Bytes;
use http::{Request, Response};
use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// Why a [`RateLimitLayerBuilder`] could not build a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// No class was added: nothing would be limited.
    NoClasses,
    /// A class from a policy file keys on a header or a bearer token, and
    /// nothing checks its keys: every invented key would be a fresh budget.
    /// Give the builder [`validate_keys`](RateLimitLayerBuilder::validate_keys)
    /// (or the class [`ClientClass::validate`]).
    UncheckedKeys {
        /// The class (the policy's name).
        class: String,
    },
    /// A class holds an async (Redis) rule beside other rules. A store
    /// reached over the network cannot take part in an all-or-nothing
    /// check, so such a rule must be its class's only one.
    AsyncNotAlone {
        /// The class.
        class: String,
        /// The async rule.
        rule: String,
    },
    /// A class holds a shadow rule beside other rules. Its denials must not
    /// deny, so it cannot take part in an all-or-nothing check: such a
    /// rule must be its class's only one.
    ShadowNotAlone {
        /// The class.
        class: String,
        /// The shadow rule.
        rule: String,
    },
    /// An async (Redis) rule is charged by the handler: only an in-memory
    /// rule can be decided when the handler calls
    /// [`Charge::charge`](super::Charge::charge).
    AsyncChargedByHandler {
        /// The class.
        class: String,
        /// The async rule.
        rule: String,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::NoClasses => f.write_str("a rate-limit layer needs at least one class"),
            BuildError::UncheckedKeys { class } => write!(
                f,
                "class {class:?} keys on a header or bearer token from a policy file, and \
                 nothing checks its keys, so every invented key would get a fresh budget: \
                 give the builder .validate_keys(|class, key| ...) to admit only keys the \
                 application issued (or .validate_keys(|_, _| true) to accept any key)"
            ),
            BuildError::AsyncNotAlone { class, rule } => write!(
                f,
                "class {class:?}: the async rule {rule:?} must be the class's only rule \
                 (it cannot be checked all-or-nothing with others)"
            ),
            BuildError::ShadowNotAlone { class, rule } => write!(
                f,
                "class {class:?}: the shadow rule {rule:?} must be the class's only rule \
                 (it cannot be checked all-or-nothing with others)"
            ),
            BuildError::AsyncChargedByHandler { class, rule } => write!(
                f,
                "class {class:?}: the async rule {rule:?} cannot be charged by the handler \
                 (only in-memory rules can)"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// The configuration every clone of the layer and its services shares.
pub(crate) struct Config {
    pub(crate) classes: Vec<ClientClass>,
    shadow: bool,
    headers: HeaderOptions,
    responder: Option<Responder>,
    /// Written by every request: striped by thread, each stripe on cache
    /// lines of its own, so that the rules and options read beside them
    /// stay shared and cores do not pass one counter's line around. (Their
    /// alignment also puts the whole `Config` after the `Arc`'s counts,
    /// which every clone of a service writes.)
    pub(crate) counters: StripedCounters,
}

/// What to do with a request once decided. (The report and the pending
/// check are boxed, as in [`Verdict`]: the common admission moves a few
/// words, not a report's few hundred bytes.)
pub(crate) enum Settled {
    /// Call the service; add these headers to its response.
    Serve(Option<Box<Report>>),
    /// Send this response instead.
    Answer(Response<Bytes>),
    /// Await the backend first.
    Wait(Box<Pending>),
    /// Call the service with a [`Charge`] for its handler.
    Defer(Box<Deferred>),
}

impl Config {
    /// What to do with a request the limits decided.
    pub(crate) fn settle(&self, verdict: Verdict) -> Settled {
        let c = self.counters.here();
        match verdict {
            Verdict::Unlimited => {
                Counters::bump(&c.unlimited);
                Settled::Serve(None)
            }
            Verdict::Allowed => {
                Counters::bump(&c.allowed);
                Settled::Serve(None)
            }
            Verdict::Decided(report) if report.allowed => {
                Counters::bump(&c.allowed);
                Settled::Serve(Some(report))
            }
            Verdict::Decided(report) if self.shadow || report.shadow => {
                Counters::bump(&c.shadow_limited);
                Settled::Serve(Some(report))
            }
            Verdict::Door(report, deferred) if self.shadow || report.shadow => {
                Counters::bump(&c.shadow_limited);
                Settled::Defer(deferred)
            }
            Verdict::Door(report, _) | Verdict::Decided(report) => {
                Counters::bump(&c.limited);
                let binding = report.binding();
                let mut response = self.respond(&Rejection::Limited {
                    class: &report.class,
                    policy: &binding.name,
                    retry_after_secs: report.retry_after_secs.unwrap_or(1).max(1),
                    fields: &binding.fields,
                });
                write_headers(response.headers_mut(), &report, &self.headers, true);
                Settled::Answer(response)
            }
            Verdict::NoKey(error) => {
                Counters::bump(&c.no_key);
                if self.shadow {
                    return Settled::Serve(None);
                }
                Settled::Answer(self.respond(&Rejection::NoKey { error: &error }))
            }
            Verdict::CostTooHigh {
                policy,
                error,
                shadow,
            } => {
                Counters::bump(&c.cost_too_high);
                if self.shadow || shadow {
                    return Settled::Serve(None);
                }
                Settled::Answer(self.respond(&Rejection::CostTooHigh {
                    policy: &policy,
                    error: &error,
                }))
            }
            Verdict::Pending(pending) => Settled::Wait(pending),
            Verdict::Deferred(deferred) => Settled::Defer(deferred),
        }
    }

    fn respond(&self, rejection: &Rejection<'_>) -> Response<Bytes> {
        match &self.responder {
            Some(responder) => responder(rejection),
            None => problem_response(rejection),
        }
    }

    /// The service's response with `report`'s headers added.
    pub(crate) fn finish<B, K: BodyKind<B>>(
        &self,
        response: Response<B>,
        report: &Report,
    ) -> Response<K::Body> {
        let mut response = K::response(response);
        // A shadow-mode pass is a would-be 429: it always gets them.
        if self.headers.on_allowed || !report.allowed {
            write_headers(response.headers_mut(), report, &self.headers, false);
        }
        response
    }
}

/// The builder's check of policy-file keys: (class, key) -> issued.
type KeyCheck = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// Builds a [`RateLimitLayer`]; from [`RateLimitLayer::builder`].
#[must_use]
pub struct RateLimitLayerBuilder {
    classes: Vec<ClientClass>,
    key_check: Option<KeyCheck>,
    shadow: bool,
    headers: HeaderOptions,
    responder: Option<Responder>,
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("classes", &self.classes)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayerBuilder {
    /// The application's check of the keys of classes from a policy file
    /// that key on a header or a bearer token (`key = "header:x-api-key"`,
    /// `key = "bearer"`): `check(class, key)` is true for a key the
    /// application issued. A key it refuses is not a budget: the request
    /// goes on to the next class (by IP, say). Without a check such
    /// classes are refused at [`build`](Self::build)
    /// ([`BuildError::UncheckedKeys`]); `|_, _| true` accepts any key,
    /// every invented one a fresh budget.
    pub fn validate_keys(
        mut self,
        check: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.key_check = Some(Arc::new(check));
        self
    }

    /// Adds a class. Classes are tried in order: the first whose key extractor
    /// finds a key decides the request.
    pub fn class(mut self, class: ClientClass) -> Self {
        self.classes.push(class);
        self
    }

    /// Shadow mode (a dry run, to launch a new limit safely): every request
    /// is decided and counted, but none is rejected (a would-be 429 is
    /// served with the rate-limit fields it would have carried); the
    /// would-be 429s are counted in [`LayerStats::shadow_limited`]. A
    /// denied request consumes nothing, as always.
    pub fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// How `x-ratelimit-reset` is written (default
    /// [`ResetFormat::UnixSeconds`], as GitHub does).
    pub fn reset_format(mut self, format: ResetFormat) -> Self {
        self.headers.reset = format;
        self
    }

    /// Whether to send `x-ratelimit-limit`, `-remaining`, `-reset` and
    /// `-used` (default on; on 429s only unless
    /// [`headers_on_allowed`](Self::headers_on_allowed) is on).
    pub fn x_ratelimit_headers(mut self, on: bool) -> Self {
        self.headers.x_ratelimit = on;
        self
    }

    /// Whether to send the IETF draft's `ratelimit-policy` and `ratelimit`
    /// (default on; on 429s only unless
    /// [`headers_on_allowed`](Self::headers_on_allowed) is on).
    pub fn ietf_headers(mut self, on: bool) -> Self {
        self.headers.ietf = on;
        self
    }

    /// Whether to send the rate-limit fields on every response (`true`, as
    /// GitHub does), or only on 429s and on shadow mode's would-be 429s
    /// (`false`, the default).
    ///
    /// Off by default because the fields on every response are most of
    /// the layer's cost per request: six more `HeaderMap` inserts, six
    /// more lines for the server to write and the client to parse (about
    /// 4,900 of the 6,100 instructions the layer adds to a request with one
    /// rule; see the guide docs/http.md). It is also the
    /// usual default: Envoy's rate-limit filters send `x-ratelimit-*` only
    /// when `enable_x_ratelimit_headers` is set (default `OFF`),
    /// tower_governor adds `x-ratelimit-limit` / `-remaining` only after
    /// `use_headers()`, nginx's `limit_req` sends none, and the IETF
    /// draft lets a server send the fields on any response it chooses
    /// (MAY). With the default a client learns its budget from its first
    /// 429, which always carries every field the layer is set to write and
    /// `retry-after`.
    ///
    /// ```
    /// use rategate::http::{RateLimitLayer, KeyExtractor, Rule, ClientClass};
    /// use rategate::{KeyedRateLimiter, Quota, TokenBucket};
    /// use std::sync::Arc;
    ///
    /// let limiter = Arc::new(KeyedRateLimiter::<String, TokenBucket>::new(Quota::per_hour(60)?)?);
    /// // GitHub-style: `x-ratelimit-*` and `ratelimit` on every response.
    /// let layer = RateLimitLayer::builder()
    ///     .class(ClientClass::new("anonymous", KeyExtractor::peer_ip()).rule(Rule::new("hourly", limiter)))
    ///     .headers_on_allowed(true)
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn headers_on_allowed(mut self, on: bool) -> Self {
        self.headers.on_allowed = on;
        self
    }

    /// Writes the layer's own answers (429s, missing keys, costs that never
    /// pass) instead of [`problem_response`]. For 429s the layer then adds
    /// `retry-after` and the rate-limit headers.
    pub fn responder(
        mut self,
        responder: impl Fn(&Rejection<'_>) -> Response<Bytes> + Send + Sync + 'static,
    ) -> Self {
        self.responder = Some(Arc::new(responder));
        self
    }

    /// Builds the layer.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoClasses`] without a class; [`BuildError::AsyncNotAlone`]
    /// for an async rule beside others in a class, and
    /// [`BuildError::ShadowNotAlone`] for a shadow rule beside others.
    pub fn build(mut self) -> Result<RateLimitLayer, BuildError> {
        if self.classes.is_empty() {
            return Err(BuildError::NoClasses);
        }
        for class in &mut self.classes {
            if class.unchecked_key {
                let Some(check) = self.key_check.clone() else {
                    return Err(BuildError::UncheckedKeys {
                        class: class.name.to_string(),
                    });
                };
                let name = Arc::clone(&class.name);
                *class = class.clone().validate(move |key| check(&name, key));
            }
        }
        for class in &self.classes {
            if let Some(rule) = class
                .rules
                .iter()
                .find(|r| r.by_handler && matches!(r.limiter, RuleLimiter::Async(_)))
            {
                return Err(BuildError::AsyncChargedByHandler {
                    class: class.name.to_string(),
                    rule: rule.name.to_string(),
                });
            }
            if class.rules.len() > 1 {
                if let Some(rule) = class
                    .rules
                    .iter()
                    .find(|r| matches!(r.limiter, RuleLimiter::Async(_)))
                {
                    return Err(BuildError::AsyncNotAlone {
                        class: class.name.to_string(),
                        rule: rule.name.to_string(),
                    });
                }
                if let Some(rule) = class.rules.iter().find(|r| r.shadow) {
                    return Err(BuildError::ShadowNotAlone {
                        class: class.name.to_string(),
                        rule: rule.name.to_string(),
                    });
                }
            }
        }
        Ok(self.assemble())
    }

    /// The layer, without the checks (for configurations that cannot fail
    /// them).
    fn assemble(self) -> RateLimitLayer {
        RateLimitLayer {
            config: Arc::new(Config {
                classes: self.classes,
                shadow: self.shadow,
                headers: self.headers,
                responder: self.responder,
                counters: StripedCounters::default(),
            }),
            kind: PhantomData,
        }
    }
}

/// The most client keys [`RateLimitLayer::per_ip`] holds in memory.
pub const PER_IP_MAX_KEYS: usize = 1_000_000;

/// A tower [`Layer`] that rate-limits HTTP requests (axum, hyper, tonic).
///
/// Each request is keyed by its [class](ClientClass) (client IP, API key, token, a
/// function), checked against every [rule](Rule) of the class that applies
/// to it, all or nothing, and then either served, or answered `429 Too Many
/// Requests` with `retry-after`, the rate-limit header fields and an RFC
/// 9457 problem body. By default the fields go on 429s only (and on shadow
/// mode's would-be 429s);
/// [`headers_on_allowed(true)`](RateLimitLayerBuilder::headers_on_allowed) adds
/// them to every response, as GitHub does.
///
/// In-memory limiters are decided synchronously in `call` (the response
/// future is a named type, nothing boxed); an async backend (Redis) is
/// awaited in a boxed future. Clones share one configuration and one set
/// of counters.
///
/// A leaky bucket in delay mode admits with a delay the layer does not
/// wait out: such a request is served at once.
///
/// # Cost
///
/// With in-memory limiters a request is decided in `call`: each limit is
/// found and checked under its lock stripe, and an admission without the
/// rate-limit fields allocates nothing for up to four rules. Wrap the
/// whole `Router` ([`RateLimitLayer::around`], feature `axum`) rather
/// than each route (`Router::layer` puts a copy in every route). The
/// instructions per request are counted by `scripts/hot-lines.sh`, and the
/// guide `docs/http.md` lists them.
///
/// # Examples
///
/// ```
/// use rategate::http::{ClientIp, KeyExtractor, Matcher, RateLimitLayer, Rule, ClientClass};
/// use rategate::{KeyedRateLimiter, Quota, TokenBucket};
/// use std::sync::Arc;
///
/// type Keyed = KeyedRateLimiter<String, TokenBucket>;
/// // GitHub-style classes: tokens at 5,000/h, anonymous clients by IP at 60/h.
/// let signed_in = Arc::new(Keyed::new(Quota::per_hour(5000)?)?);
/// let anonymous = Arc::new(Keyed::builder(Quota::per_hour(60)?).max_keys(1_000_000).build()?);
/// // Stripe-style: writes limited apart from reads.
/// let writes = Arc::new(Keyed::new(Quota::per_second(25)?)?);
/// let layer = RateLimitLayer::builder()
///     .class(ClientClass::new("signed-in", KeyExtractor::bearer_token())
///         .rule(Rule::new("hourly", signed_in))
///         .rule(Rule::new("writes", writes).when(Matcher::writes())))
///     .class(ClientClass::new("anonymous", KeyExtractor::client_ip(
///             ClientIp::new().trust_proxies(["10.0.0.0/8"])?))
///         .rule(Rule::new("hourly", anonymous)))
///     .build()?;
/// // axum: Router::new().route(...).layer(layer)
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Response bodies
///
/// A layered service's responses carry a [`ResponseBody`](super::body::ResponseBody)
/// (`K` = [`Wrapped`], the default), which holds any body the service
/// returns. [`same_body`](RateLimitLayer::same_body) keeps the service's
/// own body type instead, for bodies made from bytes (axum's `Body`):
/// axum then does not box each response's body again.
pub struct RateLimitLayer<K = Wrapped> {
    config: Arc<Config>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for RateLimitLayer<K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for RateLimitLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("classes", &self.config.classes)
            .field("shadow", &self.config.shadow)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A builder to add classes, shadow mode, header choices and a responder.
    pub fn builder() -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            key_check: None,
            classes: Vec::new(),
            shadow: false,
            headers: HeaderOptions::default(),
            responder: None,
        }
    }

    /// One class, `default`, keyed by `key` and limited by `rule`.
    pub fn new(key: KeyExtractor, rule: Rule) -> RateLimitLayer {
        // One rule, sync or async, always stands alone: nothing to check.
        Self::builder()
            .class(ClientClass::new("default", key).rule(rule))
            .assemble()
    }

    /// Each peer IP address (IPv6 by /64) limited to `quota` by a token
    /// bucket, at most [`PER_IP_MAX_KEYS`] addresses held (beyond them new
    /// addresses share one limit), idle ones swept every 10 seconds. Behind a proxy use
    /// [`new`](RateLimitLayer::new) with [`ClientIp::trust_proxies`](super::ClientIp::trust_proxies).
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when the token bucket cannot represent `quota`.
    pub fn per_ip(quota: Quota) -> Result<RateLimitLayer, QuotaError> {
        let limiter = KeyedRateLimiter::<String, TokenBucket>::builder(quota)
            .max_keys(PER_IP_MAX_KEYS)
            // As a policy file's memory policies: a sweep visits every key,
            // so it runs rarely, and often enough that idle addresses do not
            // wait for the cap to be reached.
            .auto_sweep(std::time::Duration::from_secs(10))
            .build()?;
        let rule = Rule::new("per-ip", Arc::new(limiter));
        Ok(Self::new(KeyExtractor::peer_ip(), rule))
    }

    /// The same layer, its services' responses keeping the service's own
    /// body type `B` (`B: From<Bytes>`: axum's `Body`,
    /// `http_body_util::Full<Bytes>`) instead of a
    /// [`ResponseBody<B>`](super::body::ResponseBody): the layer writes its own
    /// answers (429s) as a `B` made from their bytes. With axum this saves
    /// boxing each response's body again (an allocation per request);
    /// wrapped around the whole `Router`, the layered router is served as
    /// it is (see docs/http.md).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body_util::Full;
    /// use rategate::http::RateLimitLayer;
    /// use rategate::Quota;
    /// use tower::{Layer, Service};
    ///
    /// let layer = RateLimitLayer::per_ip(Quota::per_second(10)?)?.same_body();
    /// let app = tower::service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from("hello"))))
    /// });
    /// // Its responses are `Response<Full<Bytes>>`, a 429's body included.
    /// fn answers_full<S: Service<http::Request<()>, Response = http::Response<Full<Bytes>>>>(_: &S) {}
    /// answers_full(&layer.layer(app));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn same_body(self) -> RateLimitLayer<SameBody> {
        RateLimitLayer {
            config: self.config,
            kind: PhantomData,
        }
    }
}

#[cfg(feature = "axum")]
impl RateLimitLayer {
    /// `router` with this layer wrapped once around it (with
    /// [`same_body`](RateLimitLayer::same_body)), ready for `axum::serve`
    /// with each connection's peer address: the cheapest placement, each
    /// request passing through the layer once, before routing, instead of
    /// through the copy of it that `Router::layer` puts in each route
    /// (`scripts/hot-lines.sh` counts the difference). The router's handlers are made routes once
    /// (`with_state(())`), as `Router::into_make_service_with_connect_info`
    /// does.
    ///
    /// ```no_run
    /// use axum::{Router, routing::get};
    /// use rategate::http::RateLimitLayer;
    /// use rategate::Quota;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::per_ip(Quota::per_minute(60)?)?;
    /// let router = Router::new().route("/", get(|| async { "hello" }));
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    /// axum::serve(listener, layer.around(router)).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn around(
        &self,
        router: axum::Router,
    ) -> axum::extract::connect_info::IntoMakeServiceWithConnectInfo<
        RateLimit<axum::Router, SameBody>,
        std::net::SocketAddr,
    > {
        let limited = self.clone().same_body().layer(router.with_state(()));
        axum::ServiceExt::<axum::extract::Request>::into_make_service_with_connect_info(limited)
    }
}

impl<K> RateLimitLayer<K> {
    /// The counters so far (shared by every clone and service).
    pub fn stats(&self) -> LayerStats {
        self.config.counters.snapshot()
    }
}

impl<S, K> Layer<S> for RateLimitLayer<K> {
    type Service = RateLimit<S, K>;

    fn layer(&self, inner: S) -> RateLimit<S, K> {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
            kind: PhantomData,
        }
    }
}

/// The rate-limiting service that [`RateLimitLayer`] wraps around `S`; `K`
/// types its responses' bodies (see [`RateLimitLayer::same_body`]).
pub struct RateLimit<S, K = Wrapped> {
    inner: S,
    config: Arc<Config>,
    kind: PhantomData<fn() -> K>,
}

impl<S: Clone, K> Clone for RateLimit<S, K> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
            kind: PhantomData,
        }
    }
}

impl<S: fmt::Debug, K> fmt::Debug for RateLimit<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, K> RateLimit<S, K> {
    /// The counters so far (shared with the layer).
    pub fn stats(&self) -> LayerStats {
        self.config.counters.snapshot()
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, K, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: BodyKind<ResBody>,
{
    type Response = Response<K::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        // An admitted request needs its report only for the fields on
        // every response.
        let verdict = decide(&self.config.classes, &parts, self.config.headers.on_allowed);
        let mut request = Request::from_parts(parts, body);
        // The common case served here: an admission with nothing to write,
        // without `settle`'s frame and its match of every verdict.
        if matches!(verdict, Verdict::Allowed) {
            Counters::bump(&self.config.counters.here().allowed);
            return ResponseFuture::serving(self.inner.call(request), None, &self.config);
        }
        match self.config.settle(verdict) {
            Settled::Serve(report) => {
                let future = self.inner.call(request);
                ResponseFuture::serving(future, report, &self.config)
            }
            Settled::Answer(response) => ResponseFuture::answered(response),
            Settled::Defer(deferred) => {
                let charge = Charge::new(Arc::clone(&self.config), *deferred);
                request.extensions_mut().insert(charge);
                ResponseFuture::serving(self.inner.call(request), None, &self.config)
            }
            Settled::Wait(pending) => {
                // The service made ready by `poll_ready` goes with the
                // request; this one keeps a fresh clone (tower's pattern
                // for a service called after an await). Two small
                // allocations per wait, beside a round trip to the store:
                // the pending check's box (the decision's) and the
                // future's waiting state.
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::waiting(pending, ready, request, Arc::clone(&self.config))
            }
        }
    }
}
