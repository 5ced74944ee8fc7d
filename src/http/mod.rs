//! HTTP: rate-limit header fields, and (feature `tower`) a tower layer for
//! servers.
//!
//! Always available: the header names ([`X_RATELIMIT_LIMIT`],
//! [`RATELIMIT_POLICY`], ...: lower-case `&'static str`s, usable with
//! `http::HeaderName::from_static`), [`RateLimitFields`] (what one decision
//! under one quota puts in them, per algorithm) and [`ResetFormat`].
//!
//! With feature `tower`:
//!
//! * [`RateLimitLayer`] / [`RateLimit`]: the layer and service, for axum
//!   0.8, hyper 1 and tonic; [`ResponseFuture`] and [`ResponseBody`];
//!   [`RateLimitLayer::same_body`] ([`BodyKind`]: [`Wrapped`] or
//!   [`SameBody`]) to keep the service's own body type; with feature
//!   `axum`, `RateLimitLayer::around(router)` to wrap a whole `Router`;
//!   [`LayerStats`] counters; shadow mode.
//! * Client keys, [`KeyExtractor`]: the peer IP ([`ClientIp`]: trusted
//!   proxies as [`Cidr`]s, the [`ForwardedHeader`] they write, IPv6
//!   grouped by prefix), a header (API key, bearer token), a constant, a
//!   function, each with the application's check of the key
//!   ([`KeyExtractor::validate`]); [`KeyError`] when there is none.
//! * Policies: [`Tier`]s of keys, each with [`Rule`]s that apply by route
//!   and method ([`Matcher`]) and charge a cost (from the request's head,
//!   or from its handler through a [`Charge`]); the rules on one request
//!   are decided all or nothing, as [`AllOf`](crate::policy::AllOf)
//!   decides, and a 429 names the rule that denied.
//!   Limiters: in-memory [`Backend`]s (keyed or direct, any algorithm) and
//!   [`AsyncBackend`]s (the Redis limiter, whose store-down policy decides
//!   when Redis cannot, and the synced and leased limiters).
//! * Policy files (features `tower` and `serde`): a `PolicyLimiter` (from
//!   `policy::config`) as a rule (`Rule::from_policy`) or a tier
//!   (`Tier::from_policy`: its key kind as the key), or a whole layer from
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
//!   with [`KeyedBuilder::max_keys`](crate::KeyedBuilder::max_keys).
//! * **All or nothing.** A refused request is charged nothing, whatever
//!   runs beside it (one-rule and several-rule requests, keys past a key
//!   cap, a limiter shared by two layers); a check made directly on a
//!   shared limiter outside the layer is not covered.
//! * **Cost 0** serves a request free, even once the budget is spent.

// The list above names the `tower` feature's items; without it they do
// not exist, and the docs built then do not link them.
#![cfg_attr(not(feature = "tower"), allow(rustdoc::broken_intra_doc_links))]

mod fields;

pub use fields::{
    RATELIMIT, RATELIMIT_POLICY, RETRY_AFTER, RateLimitFields, ResetFormat, X_RATELIMIT_LIMIT,
    X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, X_RATELIMIT_USED,
};

#[cfg(feature = "tower")]
mod body;
#[cfg(feature = "tower")]
mod charge;
#[cfg(feature = "tower")]
mod cidr;
#[cfg(feature = "tower")]
mod client_ip;
#[cfg(feature = "tower")]
mod decide;
#[cfg(all(feature = "tower", feature = "serde"))]
mod from_policy;
#[cfg(feature = "tower")]
mod future;
#[cfg(feature = "tower")]
mod key;
#[cfg(feature = "tower")]
mod layer;
#[cfg(feature = "tower")]
mod policy;
#[cfg(feature = "tower")]
mod response;
#[cfg(feature = "tower")]
mod stats;

#[cfg(feature = "tower")]
pub use body::{BodyKind, ResponseBody, SameBody, Wrapped};
#[cfg(feature = "tower")]
pub use charge::{Charge, Rejected};
#[cfg(feature = "tower")]
pub use cidr::{Cidr, CidrError};
#[cfg(feature = "tower")]
pub use client_ip::{ClientIp, ForwardedHeader};
#[cfg(all(feature = "tower", feature = "serde"))]
pub use from_policy::PolicyLayerError;
#[cfg(feature = "tower")]
pub use future::ResponseFuture;
#[cfg(feature = "tower")]
pub use key::{DEFAULT_MAX_KEY_LEN, KeyError, KeyExtractor, peer_addr};
#[cfg(feature = "tower")]
pub use layer::{BuildError, PER_IP_MAX_KEYS, RateLimit, RateLimitBuilder, RateLimitLayer};
#[cfg(feature = "tower")]
pub use policy::{AsyncBackend, Backend, BackendFuture, Matcher, Rule, Tier};
#[cfg(feature = "tower")]
pub use response::{Rejection, Responder, problem_response};
#[cfg(feature = "tower")]
pub use stats::LayerStats;
