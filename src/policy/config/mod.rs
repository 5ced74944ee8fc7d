//! Policy files (feature `serde`): named policies in TOML, each an
//! algorithm, a quota, a key kind, tiers and per-key overrides, a backend
//! and shadow mode; [`PolicyFile::from_toml`] checks every field and names
//! the policy and the field of the first error.
//!
//! ```toml
//! [policies.api]
//! algorithm = "sliding_window_counter"  # default "token_bucket"
//! quota = "100/m burst=20"              # the default tier's quota
//! key = "header:x-api-key"              # "ip", "global", "header:NAME", or any name
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
//! backend = { kind = "redis", url = "redis://127.0.0.1/", store_down = "insurance", share = 0.25 }
//! ```
//!
//! Backends: `"memory"` (fields `max_keys`), `"redis"` (`url`, `prefix`,
//! `timeout_ms`, `store_down` = `"open"` / `"closed"` / `"insurance"` with
//! `share`), `"synced"` (`url`, `prefix`, `interval_ms`, `timeout_ms`,
//! `share`: the outage share) and `"leased"` (`url`, `prefix`,
//! `interval_ms`, `timeout_ms`). [`build`] turns a [`Policy`] into working
//! limiters.

pub mod build;
mod parse;
#[cfg(feature = "redis")]
mod redis;

use crate::{AlgorithmKind, Quota};
use std::fmt;
use std::time::Duration;

pub use build::{Backends, DynResolver, MemoryTiers, PolicyDecision, PolicyLimiter};
pub use parse::PolicyFile;
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
    /// Any other name, for the application to interpret (`"user"`).
    Named(String),
}

impl KeyKind {
    fn parse(text: &str) -> Result<KeyKind, &'static str> {
        let text = text.trim();
        match text {
            "" => Err("empty key kind"),
            "global" => Ok(KeyKind::Global),
            "ip" => Ok(KeyKind::Ip),
            _ => match text.strip_prefix("header:") {
                Some("") => Err("a header key needs a name: \"header:NAME\""),
                Some(name) => Ok(KeyKind::Header(name.trim().to_ascii_lowercase())),
                None => Ok(KeyKind::Named(text.to_owned())),
            },
        }
    }
}

/// What decides while Redis is down, for the `redis` backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StoreDownConfig {
    /// `"open"`: admit (the default).
    Open,
    /// `"closed"`: deny.
    Closed,
    /// `"insurance"` with `share`: a local limiter at that share of the
    /// quota.
    Insurance(f64),
}

/// Where a policy's state lives.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Backend {
    /// In this process.
    Memory {
        /// The most keys per tier (`max_keys`); unbounded if `None`.
        max_keys: Option<usize>,
    },
    /// One atomic Redis call per decision.
    Redis {
        /// The server (`url`).
        url: String,
        /// The key prefix (`prefix`), the policy's name by default.
        prefix: String,
        /// Each call's timeout (`timeout_ms`), if set.
        timeout: Option<Duration>,
        /// `store_down`.
        store_down: StoreDownConfig,
    },
    /// Local decisions synced to Redis in batches.
    Synced {
        /// The server (`url`).
        url: String,
        /// The key prefix (`prefix`), the policy's name by default.
        prefix: String,
        /// The sync interval (`interval_ms`), if set.
        interval: Option<Duration>,
        /// Each sync's timeout (`timeout_ms`), if set.
        timeout: Option<Duration>,
        /// The share of the quota a node keeps while Redis is down
        /// (`share`), if set.
        outage_share: Option<f64>,
    },
    /// Local decisions on slices leased from Redis.
    Leased {
        /// The server (`url`).
        url: String,
        /// The key prefix (`prefix`), the policy's name by default.
        prefix: String,
        /// The lease interval (`interval_ms`), if set.
        interval: Option<Duration>,
        /// Each call's timeout (`timeout_ms`), if set.
        timeout: Option<Duration>,
    },
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
    pub backend: Backend,
    /// `shadow`: decide and count, but admit every request.
    pub shadow: bool,
}

impl Policy {
    /// The default tier's quota (the `quota` field).
    pub fn quota(&self) -> &Quota {
        &self.tiers[0].1
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
