//! rategate: lock-free rate limiting.
//!
//! A check reads a clock and runs one compare-exchange loop on an atomic:
//! nanoseconds, no locks on the decision path.
//!
//! # The pieces
//!
//! * [`Quota`]: `limit` requests per period, a burst, nginx-style options;
//!   parses `"10r/s"`, `"5000/h"`, `"100/1m burst=20"`.
//! * [`RateLimiter`]: one state shared by all callers.
//! * [`KeyedRateLimiter`]: one state per key (user, IP, API key) in a
//!   concurrent map with bounded memory ([`KeyedRateLimiterBuilder`], [`Overflow`]).
//! * Algorithms, chosen by type ([`algorithm`]): [`TokenBucket`] (GCRA),
//!   [`FixedWindow`], [`SlidingWindowLog`], [`SlidingWindowCounter`],
//!   [`LeakyBucket`] (nginx `limit_req`); [`Sharded`] stripes a hot key's
//!   state over cache-padded shards. [`AnyAlgorithm`] is one of them
//!   chosen at run time from a name ([`AlgorithmKind`]).
//! * [`Decision`]: allowed or not, limit, remaining, reset, retry-after, and
//!   the HTTP headers they make.
//! * Clocks ([`Clock`]): [`QuantaClock`] (default, monotonic),
//!   [`StdClock`], [`UnixClock`] (windows on the wall clock), [`ManualClock`]
//!   (tests).
//! * Waiting for a slot instead of failing: [`Pacer`] and [`KeyedPacer`]
//!   (blocking, and async with feature `tokio`), with deadlines
//!   ([`WaitError`]) and [`Jitter`]; with feature `tokio`, `TokioClock`
//!   follows tokio's (pausable) time.
//! * Outbound calls: [`OutboundLimiter`] waits under several limits and
//!   follows the upstream's 429s and rate-limit headers
//!   ([`outbound::UpstreamSignal`], [`outbound::Adaptation`]); [`presets`] for Stripe and
//!   GitHub.
//! * Policies on a live limiter: `refund` gives back an admitted cost,
//!   [`algorithm::Adjustable`] lets `set_quota` change the quota in place,
//!   [`snapshot`] saves a keyed limiter's state for a fresh one.
//! * [`policy::AllOf`]: several limits that admit a request together or
//!   not at all.
//! * [`headers`]: rate-limit header names and the values a decision gives
//!   them (`x-ratelimit-*`, the IETF `RateLimit` fields).
//! * With feature `http`, the `http` module: `RateLimitLayer`, a tower
//!   layer for axum, hyper and tonic (client keys behind trusted proxies,
//!   classes of clients, per-route rules, costs, shadow mode).
//! * Errors: [`QuotaError`] for configurations that cannot work,
//!   [`CheckError`] for requests that can never pass.
//! * With feature `redis`, the `redis` module: `RedisLimiter` (one atomic
//!   Lua call per decision, single node or Cluster, store-down policies),
//!   `SyncedLimiter` (local decisions synced in batches) and
//!   `LeasedLimiter` (local decisions on slices of a hard global quota).
//! * With feature `sim`, the `sim` module and the `rategate-sim` binary:
//!   the classic scenarios drawn as SVG, and a user's access log replayed
//!   under several policies.
//!
//! # Guides
//!
//! One guide per area (algorithms, keyed limiters, HTTP servers, outbound
//! calls, Redis, policies, simulation, verification, performance) is the
//! `guide` module when the crate is documented with all features (as on
//! docs.rs), and `docs/` in the source.
//!
//! # Example
//!
//! ```
//! use rategate::{FixedWindow, KeyedRateLimiter, Quota};
//!
//! // GitHub-style: 5000 requests per fixed hour per API token.
//! let quota: Quota = "5000/h".parse()?;
//! let limiter = KeyedRateLimiter::<String, FixedWindow>::new(quota)?;
//! let decision = limiter.check("token-123");
//! if decision.is_allowed() {
//!     // serve, sending decision.headers(&quota)
//! } else {
//!     // 429 Too Many Requests, Retry-After: decision.retry_after_secs()
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// docs.rs (nightly) marks each feature-gated item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod algorithm;
mod clock;
mod decision;
mod error;
pub mod headers;
#[cfg(feature = "http")]
pub mod http;
mod keyed;
mod limiter;
mod map;
mod metrics;
pub mod outbound;
pub mod policy;
mod quota;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "rls")]
pub mod rls;
#[cfg(feature = "serde")]
mod serde_strings;
#[cfg(feature = "sim")]
pub mod sim;
pub mod snapshot;
mod stripes;
mod sync;
mod wait;

pub use algorithm::Sharded;
pub use algorithm::{
    Algorithm, FixedWindow, LeakyBucket, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
pub use algorithm::{AlgorithmKind, AnyAlgorithm};
pub use clock::{Clock, ManualClock, QuantaClock, StdClock, UnixClock};
pub use decision::Decision;
pub use error::{CheckError, QuotaError};
pub use keyed::{DefaultKeyHasher, KeyedRateLimiter, KeyedRateLimiterBuilder, Overflow};
pub use limiter::RateLimiter;
pub use outbound::{OutboundLimiter, presets};
pub use quota::{Delay, Quota};
pub use wait::{Jitter, KeyedPacer, Pacer, WaitError};
#[cfg(feature = "tokio")]
pub use wait::{TokioClock, UntilReady};

/// Internals the loom models in `loom-tests/` check directly. Only under
/// `--cfg rategate_loom`; not part of the API.
#[cfg(rategate_loom)]
#[doc(hidden)]
pub mod loom_internals {
    pub use crate::clock::Monotonic;
}

/// The README's code blocks, compiled (and the runnable ones run) as
/// doctests with the features they use.
#[cfg(all(
    doctest,
    feature = "axum",
    feature = "redis",
    feature = "serde",
    feature = "tokio"
))]
#[doc = include_str!("../README.md")]
struct Readme;

/// The guides of `docs/`, one page per area, each opening with an example.
/// Their code blocks are doctests, compiled with the features they use.
#[cfg(all(
    any(doc, doctest),
    feature = "axum",
    feature = "redis",
    feature = "serde",
    feature = "tokio"
))]
pub mod guide {
    #[doc = include_str!("../docs/algorithms.md")]
    pub mod algorithms {}
    #[doc = include_str!("../docs/keyed.md")]
    pub mod keyed {}
    #[doc = include_str!("../docs/http.md")]
    pub mod http {}
    #[doc = include_str!("../docs/outbound.md")]
    pub mod outbound {}
    #[doc = include_str!("../docs/redis.md")]
    pub mod redis {}
    #[doc = include_str!("../docs/policies.md")]
    pub mod policies {}
    #[doc = include_str!("../docs/gateway.md")]
    pub mod gateway {}
    #[doc = include_str!("../docs/simulate.md")]
    pub mod simulate {}
    #[doc = include_str!("../docs/verification.md")]
    pub mod verification {}
    #[doc = include_str!("../docs/performance.md")]
    pub mod performance {}
}
