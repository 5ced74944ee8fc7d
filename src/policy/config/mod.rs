//! Policy files (feature `serde`): named policies in TOML, each an
//! algorithm, a quota, a key kind, tiers and per-key overrides, a backend
//! and shadow mode; [`PolicyFile::from_toml`] checks every field and names
//! the policy and the field of the first error.
//!
//! ```toml
//! [policies.api]
//! algorithm = "sliding_window_counter"  # default "token_bucket"
//! quota = "100/m burst=20"              # the default tier's quota
//! key = "header:x-api-key"              # "global", "ip", "bearer", "header:NAME", or any name
//! shadow = false                        # decide and count, never deny
//! backend = "memory"                    # or a table, see below
//!
//! [policies.api.tiers]                  # more tiers, after "default"
//! signed_in = "5000/h"
//!
//! [policies.api.overrides]              # key -> tier
//! "partner-key" = "signed_in"
//!
//! [policies.login]
//! quota = "5/m"
//! key = "ip"
//! backend = { kind = "redis", url = "redis://127.0.0.1/", store_down = "local_share", share = 0.25 }
//! ```
//!
//! Key kinds ([`KeyKind`]): `"global"` (one limit for everyone, the
//! default), `"ip"` (the client's address), `"bearer"` (the token of
//! `Authorization: Bearer <token>`), `"header:NAME"` (a header's value; not
//! `"header:authorization"`, whose `Bearer <token>` value no header key
//! takes: that is `"bearer"`), or any other name, for the application to
//! interpret.
//!
//! Backends ([`Store`]): `"memory"` (fields `max_keys`, `sweep_interval_ms`), `"redis"`
//! (`url`, `prefix`, `timeout_ms`, `store_down` = `"open"` / `"closed"` /
//! `"local_share"` with `share`), `"synced"` (`url`, `prefix`, `interval_ms`,
//! `timeout_ms`, `share`: the local share) and `"leased"` (`url`,
//! `prefix`, `interval_ms`, `timeout_ms`, `wait_for_replicas`). [`build`] turns a [`Policy`]
//! into working limiters.
//!
//! # Memory: a cap on keys and a sweep of idle ones
//!
//! Every keyed limiter a policy builds in this process (one per tier, see
//! [`Policy::memory_tiers`]) is bounded, whether or not the file has a
//! `backend` line:
//!
//! - It holds at most `max_keys` keys per tier, [`DEFAULT_MAX_KEYS`]
//!   (1,000,000, the HTTP layer's per-IP cap) unless the file sets it:
//!   `backend = { kind = "memory", max_keys = 50000 }`. `max_keys` must be
//!   at least 1 and at most 4,294,967,295; 0 would send every client to
//!   the one overflow state below, so it is refused.
//! - It sweeps its idle keys (those whose state a fresh one would equal:
//!   a full token bucket, an expired window) once per `sweep_interval_ms`,
//!   [`DEFAULT_SWEEP_INTERVAL`] (10 s) unless the file sets it (at least
//!   1 ms), so memory follows the keys seen recently rather than every key
//!   ever seen. A sweep is run by the first check after each interval.
//! - Past the cap, a new key first triggers a sweep (at most one per sweep
//!   interval); if that frees no room, the new key shares one overflow
//!   state at the tier's quota with every other untracked key
//!   ([`Overflow::Shared`](crate::Overflow::Shared)): a flood of invented
//!   keys is limited as one client, while keys already tracked keep their
//!   own limits.

pub mod build;
mod parse;
#[cfg(feature = "redis")]
mod redis;

use crate::policy::StoreDown;
use crate::{AlgorithmKind, Quota};
use std::fmt;
use std::time::Duration;

/// The most keys a policy's keyed limiter holds per tier when the file sets
/// no `max_keys`: 1,000,000, the same cap as the HTTP layer's per-IP limit
/// (`rategate::http::PER_IP_MAX_KEYS`, feature `http`). Past it new keys
/// share one overflow state; see the [module docs](self).
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// How often a policy's keyed limiter sweeps its idle keys when the file
/// sets no `sweep_interval_ms`: every 10 seconds.
// A sweep visits every key, holding each shard's write lock in turn: once
// per 10 s keeps that scan rare even at the 1,000,000-key cap, while keys
// idle for 10 s leave the map soon after (the Redis local-share limiters
// sweep at the same interval).
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// The largest `max_keys` a policy file accepts: beyond it the cap would
/// bound nothing a machine can hold.
pub(crate) const MAX_MAX_KEYS: u64 = u32::MAX as u64;

/// Why `max_keys = 0` is refused.
pub(crate) const ZERO_MAX_KEYS: &str = "must be at least 1: with max_keys = 0 every client \
     would share one overflow limit (omit it for the default, 1000000)";

pub use build::{DynResolver, MemoryTiers, PolicyDecision, PolicyLimiter, TierLimiters};
pub use parse::PolicyFile;
#[cfg(feature = "rls")]
pub(crate) use parse::store_of;
#[cfg(feature = "rls")]
pub(crate) use redis::read_pem;
#[cfg(feature = "redis")]
pub use redis::{AnyRedisLimiter, AnySyncedLimiter};

/// Which part of a request a policy keys on: plain data for the HTTP layer
/// to interpret.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyKind {
    /// One limit for everyone (`"global"`). The default.
    Global,
    /// The client's IP address (`"ip"`).
    Ip,
    /// A request header's value (`"header:x-api-key"`; the name
    /// lower-cased).
    Header(String),
    /// The token of `Authorization: Bearer <token>` (`"bearer"`).
    Bearer,
    /// Any other name, for the application to interpret (`"user"`).
    Named(String),
}

impl KeyKind {
    fn parse(text: &str) -> Result<KeyKind, &'static str> {
        let text = text.trim();
        match text {
            "" => Err(
                "empty key kind (expected \"global\", \"ip\", \"bearer\", \"header:NAME\" \
                 or a name of your own)",
            ),
            "global" => Ok(KeyKind::Global),
            "ip" => Ok(KeyKind::Ip),
            "bearer" => Ok(KeyKind::Bearer),
            _ => match text.strip_prefix("header:").map(str::trim) {
                Some("") => Err("a header key needs a name: \"header:NAME\""),
                Some(name) if name.eq_ignore_ascii_case("authorization") => Err(
                    "a header key cannot take \"Authorization: Bearer <token>\" (it refuses \
                     the space): for the token use key = \"bearer\"",
                ),
                Some(name) => Ok(KeyKind::Header(name.to_ascii_lowercase())),
                None => Ok(KeyKind::Named(text.to_owned())),
            },
        }
    }
}

/// Where a policy's state lives.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Store {
    /// In this process.
    Memory {
        /// The most keys per tier (`max_keys`); [`DEFAULT_MAX_KEYS`] if
        /// `None`. Building refuses `Some(0)`.
        max_keys: Option<usize>,
        /// How often idle keys are swept (`sweep_interval_ms`);
        /// [`DEFAULT_SWEEP_INTERVAL`] if `None`. Building refuses zero.
        sweep_interval: Option<Duration>,
    },
    /// One atomic Redis call per decision.
    Redis {
        /// Which Redis, and how to reach it.
        connection: RedisConnection,
        /// The key prefix (`prefix`), the policy's name by default.
        prefix: String,
        /// Each call's timeout (`timeout_ms`), if set.
        timeout: Option<Duration>,
        /// `store_down`.
        store_down: StoreDown,
    },
    /// Local decisions synced to Redis in batches.
    Synced {
        /// Which Redis, and how to reach it.
        connection: RedisConnection,
        /// The key prefix (`prefix`), the policy's name by default.
        prefix: String,
        /// The sync interval (`interval_ms`), if set.
        interval: Option<Duration>,
        /// Each sync's timeout (`timeout_ms`), if set.
        timeout: Option<Duration>,
        /// The share of the quota a node keeps while Redis is down
        /// (`share`), if set.
        local_share: Option<f64>,
    },
    /// Local decisions on slices leased from Redis.
    Leased {
        /// Which Redis, and how to reach it.
        connection: RedisConnection,
        /// The key prefix (`prefix`), the policy's name by default.
        prefix: String,
        /// The lease interval (`interval_ms`), if set.
        interval: Option<Duration>,
        /// Each call's timeout (`timeout_ms`), if set.
        timeout: Option<Duration>,
        /// Replicas that must hold a grant before it is used
        /// (`wait_for_replicas`, 0 by default), as
        /// `LeasedLimiterBuilder::wait_for_replicas` (feature `redis`).
        wait_for_replicas: u32,
    },
}

/// Which Redis a Redis-backed policy talks to: exactly one of `url`,
/// `cluster` or `sentinels` in its backend table. Its `Debug` prints no
/// password: neither the master's nor one in a URL.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub enum RedisServer {
    /// One server (`url = "redis://host:6379/0"`, `rediss://` for TLS).
    Url(String),
    /// A Redis Cluster (`cluster`: some of its nodes' URLs).
    Cluster(Vec<String>),
    /// The master that Redis Sentinel names (`sentinels`: the sentinels'
    /// URLs; `master`: the master's name as they know it;
    /// `master_username`, `master_password`, `master_db`: the master's
    /// credentials and database).
    Sentinel {
        /// `master`.
        master: String,
        /// `sentinels`.
        sentinels: Vec<String>,
        /// `master_username`.
        username: Option<String>,
        /// `master_password`.
        password: Option<String>,
        /// `master_db` (default 0).
        db: i64,
    },
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls = |urls: &[String]| urls.iter().map(|u| redact(u)).collect::<Vec<_>>();
        match self {
            RedisServer::Url(url) => f.debug_tuple("Url").field(&redact(url)).finish(),
            RedisServer::Cluster(nodes) => f.debug_tuple("Cluster").field(&urls(nodes)).finish(),
            RedisServer::Sentinel {
                master,
                sentinels,
                username,
                password,
                db,
            } => f
                .debug_struct("Sentinel")
                .field("master", master)
                .field("sentinels", &urls(sentinels))
                .field("username", username)
                .field("password", &password.as_ref().map(|_| "***"))
                .field("db", db)
                .finish(),
        }
    }
}

/// `url` with its passwords replaced by `***`: the user part's
/// (`redis://user:pw@host`, where `pw` may hold any character but `@`, a
/// `/` too) and the `pass` / `password` query parameters of Unix socket
/// URLs (`redis+unix:///run/redis.sock?pass=pw`).
fn redact(url: &str) -> String {
    let Some(scheme) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    // The query starts after the user part, which may hold a `?` itself.
    let after_user = url[scheme..].rfind('@').map_or(scheme, |i| scheme + i);
    let (main, query) = match url[after_user..].find('?').map(|i| after_user + i) {
        Some(q) => (&url[..q], Some(&url[q + 1..])),
        None => (url, None),
    };
    let mut out = match main[scheme..].rfind('@').map(|i| scheme + i) {
        Some(at) => match main[scheme..at].find(':').map(|i| scheme + i) {
            Some(colon) => format!("{}***{}", &main[..=colon], &main[at..]),
            None => main.to_owned(),
        },
        None => main.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
                {
                    format!("{k}=***")
                }
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// How a Redis-backed policy reaches Redis: the server, and the TLS files
/// beyond what a `rediss://` URL says (feature `redis-tls`; paths relative
/// to the working directory).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RedisConnection {
    /// `url`, `cluster` or `sentinels`.
    pub server: RedisServer,
    /// `tls_ca`: trust this CA bundle (PEM) instead of the system's.
    pub tls_ca: Option<std::path::PathBuf>,
    /// `tls_cert` and `tls_key`: present this certificate chain and key
    /// (PEM) to the server.
    pub tls_client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl RedisConnection {
    /// One server at `url`, no TLS files.
    pub fn url(url: &str) -> RedisConnection {
        RedisConnection {
            server: RedisServer::Url(url.to_owned()),
            tls_ca: None,
            tls_client: None,
        }
    }
}

/// One named policy from a policy file.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The policy's name (its table's name).
    pub name: String,
    /// `algorithm`.
    pub algorithm: AlgorithmKind,
    /// `key`.
    pub key: KeyKind,
    /// The tiers: first `"default"` with the policy's `quota`, then the
    /// `tiers` table's, in name order.
    pub tiers: Vec<(String, Quota)>,
    /// `overrides`: key and the index of its tier in `tiers`.
    pub overrides: Vec<(String, usize)>,
    /// `backend`.
    pub backend: Store,
    /// `shadow`: decide and count, but admit every request.
    pub shadow: bool,
}

impl Policy {
    /// The default tier's quota (the `quota` field).
    pub fn quota(&self) -> Quota {
        self.tiers[0].1
    }
}

/// A policy file that cannot be used: the policy and the field at fault,
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    policy: Option<String>,
    field: Option<String>,
    message: String,
}

impl ConfigError {
    pub(crate) fn file(message: impl Into<String>) -> ConfigError {
        ConfigError {
            policy: None,
            field: None,
            message: message.into(),
        }
    }

    pub(crate) fn field(policy: &str, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            policy: Some(policy.to_owned()),
            field: Some(field.to_owned()),
            message: message.into(),
        }
    }

    pub(crate) fn named(policy: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            policy: Some(policy.to_owned()),
            field: None,
            message: message.into(),
        }
    }

    /// The policy at fault; `None` for an error in the file as a whole
    /// (TOML syntax, no `policies` table).
    pub fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// The field at fault (`"quota"`, `"backend.url"`,
    /// `"overrides.partner-key"`).
    pub fn field_name(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// Why.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.policy, &self.field) {
            (Some(p), Some(field)) => write!(f, "policy {p:?}, field {field:?}: {}", self.message),
            (Some(p), None) => write!(f, "policy {p:?}: {}", self.message),
            _ => write!(f, "policy file: {}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}
