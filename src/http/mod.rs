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
//!   function; [`KeyError`] when there is none.
//! * Policies: [`Tier`]s of keys, each with [`Rule`]s that apply by route
//!   and method ([`Matcher`]) and charge a cost; several rules on one
//!   request are checked all or nothing, as [`AllOf`](crate::policy::AllOf)
//!   decides (each limit looked up once, nothing allocated for up to four
//!   rules), and a 429 names the rule that denied.
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
