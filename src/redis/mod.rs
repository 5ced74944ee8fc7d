//! The Redis backend (feature `redis`): every app server asks the same Redis,
//! and one Lua script per algorithm makes each decision atomic.
//!
//! * [`RedisLimiter`]: async, keyed, on a single Redis or a Redis Cluster;
//!   [`BlockingRedisLimiter`] for synchronous callers.
//! * Scripts are loaded once and called by SHA (`EVALSHA`), reloaded
//!   transparently after `NOSCRIPT` (a restart or `SCRIPT FLUSH`). On a
//!   single server, decisions waiting at the same moment share one script
//!   call (the script looped over them, atomically, in arrival order).
//! * [`TimeSource::Server`] (default): scripts read the server's `TIME` in
//!   microseconds, so app servers with skewed clocks agree.
//!   [`TimeSource::Client`]: the caller's clock in nanoseconds, for tests and
//!   parity checks against the in-memory limiter.
//! * Keys are `<prefix>:<policy>:{<tag>}:<suffix>`. The tag is the user
//!   key, escaped so that it is never empty and never holds a brace: a
//!   client-chosen key cannot pick its own slot layout, and all of a key's
//!   Redis keys share one Cluster slot. The policy (the quota, and the time
//!   unit or the algorithm; the suffix names the algorithm's state) keeps
//!   limiters of different policies apart even under one prefix: limiters
//!   share state exactly when prefix, algorithm, quota (and, for
//!   [`RedisLimiter`], time source) are equal, which is how the nodes of
//!   one service share a limit. Each key has a TTL, so idle keys vanish.
//! * When Redis is down or slow (every call has a timeout), a [`StoreDown`](crate::policy::StoreDown)
//!   policy decides: fail open, fail closed, or a local limiter held to a share
//!   with a share of the quota. Reconnection is automatic. The decision's
//!   [`Source`] and the [`RedisStats`] counters say which path decided.
//! * A local over-limit cache answers a key that Redis denied until its
//!   retry-after has passed, without a round trip (on by default).
//! * [`SyncedLimiter`]: decisions stay local and lock-free; a background
//!   task syncs every key's delta to Redis in one round trip per node each
//!   interval (bounded overshoot, see [`synced`]).
//! * [`LeasedLimiter`]: decisions stay local on slices of the global quota
//!   leased from Redis; the global limit is never exceeded (see [`lease`]).

mod algorithm;
mod algorithms;
mod batch;
mod cache;
mod connection;
mod error;
mod key;
pub mod lease;
mod limiter;
mod sentinel;
mod single;
pub mod synced;
mod task;
mod wire;

pub use algorithm::{LUA_EXACT, RedisAlgorithm};
pub use connection::Tls;
pub use error::RedisError;
pub use lease::{LeaseStats, LeasedLimiter, LeasedLimiterBuilder};
pub use limiter::{
    BlockingRedisLimiter, RedisDecision, RedisLimiter, RedisLimiterBuilder, RedisStats, Source,
    TimeSource,
};
pub use sentinel::Sentinel;
pub use synced::{SyncAlgorithm, SyncStats, SyncedLimiter, SyncedLimiterBuilder};
