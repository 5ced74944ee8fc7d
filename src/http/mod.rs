//! HTTP servers (feature `http`): a tower layer for axum, hyper and tonic.
//! The header fields it sends are [`crate::headers`].
//!
//! * [`RateLimitLayer`] / [`RateLimit`]: the layer and service, for axum
//!   0.8, hyper 1 and tonic; [`ResponseFuture`]; the response bodies in
//!   [`body`] ([`RateLimitLayer::same_body`] keeps the service's own body
//!   type, for the rare service that must name it); with feature
//!   `axum`, `RateLimitLayer::around(router)` to wrap a whole `Router`;
//!   [`LayerStats`] counters; shadow mode.
//! * Client keys, [`KeyExtractor`]: the peer IP ([`ClientIp`]: trusted
//!   proxies as [`Cidr`]s, the [`ForwardedHeader`] they write, IPv6
//!   grouped by prefix), a header (API key, bearer token), a constant, a
//!   function, each with the application's check of the key
//!   ([`KeyExtractor::validate`]); [`KeyError`] when there is none.
//! * Policies: [`ClientClass`]es of clients, each with [`Rule`]s that apply by route
//!   and method ([`Matcher`]) and charge a cost (from the request's head,
//!   or from its handler through a [`Charge`]); the rules on one request
//!   are decided all or nothing, as [`AllOf`](crate::policy::AllOf)
//!   decides, and a 429 names the rule that denied.
//!   Limiters: in-memory [`Backend`]s (keyed or direct, any algorithm) and
//!   [`AsyncBackend`]s (the Redis limiter, whose store-down policy decides
//!   when Redis cannot, and the synced and leased limiters).
//! * Policy files (feature `serde`): a `PolicyLimiter` (from
//!   `policy::config`) as a rule (`Rule::from_policy`) or a tier
//!   (`ClientClass::from_policy`: its key kind as the key), or a whole layer from
//!   a `PolicyFile` (`RateLimitLayer::from_policies`); the headers report
//!   the quota of each key's tier, and a policy's `shadow = true` admits
//!   while counting.
//! * Answers: 429 with `retry-after` (whole seconds, rounded up, never 0)
//!   and an RFC 9457 problem body ([`problem_response`]), replaceable
//!   ([`Rejection`]).
//!
//! # Security
//!
//! * **Trusted proxies.** A forwarding header is read only from a peer in
//!   [`ClientIp::trust_proxies`], from the right: the first element that is
//!   not a trusted proxy is the client, each element parsed from the bytes
//!   on its own, so that what a client writes left of it (non-UTF-8 bytes,
//!   open quotes, many commas) never hides the element its proxy appended.
//!   The proxy must append the address it saw (nginx:
//!   `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`). An
//!   element the proxy itself wrote that is not an address keys the
//!   request by that proxy's address ([`ClientIp`]).
//! * **Invented keys.** A header or token key is what the client sends:
//!   give its extractor the application's check
//!   ([`KeyExtractor::validate`]), or each made-up key gets a budget of its
//!   own. An unknown key falls through to the next tier, or is answered
//!   401 ([`KeyExtractor::reject_unknown`]).
//! * **Key caps.** Every keyed limiter the layer or a policy file builds
//!   holds a bounded number of keys ([`PER_IP_MAX_KEYS`] for
//!   [`RateLimitLayer::per_ip`], `max_keys` in a policy file); build yours
//!   with [`KeyedRateLimiterBuilder::max_keys`](crate::KeyedRateLimiterBuilder::max_keys).
//! * **All or nothing.** A refused request is charged nothing, whatever
//!   runs beside it (one-rule and several-rule requests, keys past a key
//!   cap, a limiter shared by two layers); a check made directly on a
//!   shared limiter outside the layer is not covered.
//! * **Cost 0** serves a request free, even once the budget is spent.

pub mod body;
mod charge;
mod cidr;
mod client_ip;
mod decide;
#[cfg(feature = "serde")]
mod from_policy;
mod future;
mod key;
mod layer;
mod policy;
mod response;
mod stats;

pub use charge::{Charge, Rejected};
pub use cidr::{Cidr, CidrError};
pub use client_ip::{ClientIp, ForwardedHeader};
#[cfg(feature = "serde")]
pub use from_policy::PolicyLayerError;
pub use future::ResponseFuture;
pub use key::{DEFAULT_MAX_KEY_LEN, DEFAULT_MAX_TOKEN_LEN, KeyError, KeyExtractor, peer_addr};
pub use layer::{BuildError, PER_IP_MAX_KEYS, RateLimit, RateLimitLayer, RateLimitLayerBuilder};
pub use policy::{AsyncBackend, Backend, BackendFuture, ClientClass, Matcher, Rule};
pub use response::{Rejection, Responder, problem_response};
pub use stats::LayerStats;
