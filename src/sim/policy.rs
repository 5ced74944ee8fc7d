//! Policies as users write them: an algorithm and a quota string.

use super::SimError;
use crate::{
    CheckError, Decision, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Overflow, Quota,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One of the five algorithms, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmName {
    /// [`TokenBucket`] (GCRA).
    TokenBucket,
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingWindowLog`].
    SlidingWindowLog,
    /// [`SlidingWindowCounter`].
    SlidingWindowCounter,
    /// [`LeakyBucket`] (nginx `limit_req`).
    LeakyBucket,
}

impl AlgorithmName {
    /// Every algorithm, in the README's order.
    pub const ALL: [AlgorithmName; 5] = [
        AlgorithmName::TokenBucket,
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindowLog,
        AlgorithmName::SlidingWindowCounter,
        AlgorithmName::LeakyBucket,
    ];

    /// The short name a policy string uses (`token`, `fixed`, `log`,
    /// `counter`, `leaky`).
    pub fn short(self) -> &'static str {
        match self {
            AlgorithmName::TokenBucket => "token",
            AlgorithmName::FixedWindow => "fixed",
            AlgorithmName::SlidingWindowLog => "log",
            AlgorithmName::SlidingWindowCounter => "counter",
            AlgorithmName::LeakyBucket => "leaky",
        }
    }

    /// A name for people ("token bucket").
    pub fn label(self) -> &'static str {
        match self {
            AlgorithmName::TokenBucket => "token bucket",
            AlgorithmName::FixedWindow => "fixed window",
            AlgorithmName::SlidingWindowLog => "sliding window log",
            AlgorithmName::SlidingWindowCounter => "sliding window counter",
            AlgorithmName::LeakyBucket => "leaky bucket",
        }
    }

    fn parse(name: &str) -> Option<AlgorithmName> {
        Some(
            match name.to_ascii_lowercase().replace(['-', ' '], "_").as_str() {
                "token" | "token_bucket" | "gcra" | "bucket" => AlgorithmName::TokenBucket,
                "fixed" | "fixed_window" | "window" => AlgorithmName::FixedWindow,
                "log" | "sliding_log" | "sliding_window_log" => AlgorithmName::SlidingWindowLog,
                "counter" | "sliding" | "sliding_counter" | "sliding_window_counter" => {
                    AlgorithmName::SlidingWindowCounter
                }
                "leaky" | "leaky_bucket" | "nginx" => AlgorithmName::LeakyBucket,
                _ => return None,
            },
        )
    }
}

impl fmt::Display for AlgorithmName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// A policy: an algorithm and its quota, parsed from `ALGORITHM:QUOTA`
/// (`leaky:100r/m burst=20 nodelay`, `token:5000/h`, `fixed:60/hour`).
///
/// Without an algorithm, nginx's syntax (`10r/s`, with an `r`) means the
/// leaky bucket, nginx's own algorithm, and any other rate the token bucket;
/// [`Display`](fmt::Display) always names the algorithm, so a report says
/// which one ran.
///
/// # Examples
///
/// ```
/// use rategate::sim::{AlgorithmName, Policy};
///
/// let p: Policy = "leaky:100r/m burst=20 nodelay".parse()?;
/// assert_eq!(p.algorithm(), AlgorithmName::LeakyBucket);
/// assert_eq!(p.to_string(), "leaky:100/1m burst=20 nodelay");
/// let q: Policy = "5000/h".parse()?;
/// assert_eq!(q.algorithm(), AlgorithmName::TokenBucket);
/// # Ok::<(), rategate::sim::SimError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    algorithm: AlgorithmName,
    quota: Quota,
}

impl Policy {
    /// A policy from its parts.
    pub fn new(algorithm: AlgorithmName, quota: Quota) -> Policy {
        Policy { algorithm, quota }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> AlgorithmName {
        self.algorithm
    }

    /// The quota.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.quota)
    }
}

impl FromStr for Policy {
    type Err = SimError;

    fn from_str(input: &str) -> Result<Policy, SimError> {
        let text = input.trim();
        let fail = |reason: String| SimError::Policy {
            input: input.to_owned(),
            reason,
        };
        let (algorithm, quota_text) = match text.split_once(':') {
            Some((name, rest)) => {
                let algorithm = AlgorithmName::parse(name.trim()).ok_or_else(|| {
                    fail(format!(
                        "unknown algorithm {name:?} (use token, fixed, log, counter or leaky)"
                    ))
                })?;
                (algorithm, rest.trim())
            }
            None => {
                let rate = text.split_ascii_whitespace().next().unwrap_or("");
                let nginx = rate.split_once('/').is_some_and(|(n, _)| n.ends_with('r'));
                let algorithm = if nginx {
                    AlgorithmName::LeakyBucket
                } else {
                    AlgorithmName::TokenBucket
                };
                (algorithm, text)
            }
        };
        let quota: Quota = quota_text.parse().map_err(|e| fail(format!("{e}")))?;
        // Build once so that a quota the algorithm cannot hold is reported
        // here, with the policy's text, not in the middle of a replay.
        KeyedAny::new(Policy { algorithm, quota }, ManualClock::new(), 1)
            .map_err(|e| fail(format!("{e}")))?;
        Ok(Policy { algorithm, quota })
    }
}

/// A keyed limiter of any of the five algorithms on a manual clock, chosen
/// at run time from a [`Policy`].
pub(crate) enum KeyedAny {
    Token(KeyedRateLimiter<String, TokenBucket, ManualClock>),
    Fixed(KeyedRateLimiter<String, FixedWindow, ManualClock>),
    Log(KeyedRateLimiter<String, SlidingWindowLog, ManualClock>),
    Counter(KeyedRateLimiter<String, SlidingWindowCounter, ManualClock>),
    Leaky(KeyedRateLimiter<String, LeakyBucket, ManualClock>),
}

macro_rules! each {
    ($self:expr, $l:ident => $body:expr) => {
        match $self {
            KeyedAny::Token($l) => $body,
            KeyedAny::Fixed($l) => $body,
            KeyedAny::Log($l) => $body,
            KeyedAny::Counter($l) => $body,
            KeyedAny::Leaky($l) => $body,
        }
    };
}

impl KeyedAny {
    /// A limiter holding at most `max_keys` keys. Idle keys are swept once
    /// per period of simulated time (at least a second), so memory follows
    /// the keys active in the last period; beyond the cap new keys share
    /// one state ([`Overflow::Shared`]).
    pub(crate) fn new(
        policy: Policy,
        clock: ManualClock,
        max_keys: usize,
    ) -> Result<KeyedAny, crate::QuotaError> {
        let sweep = policy.quota.period().max(Duration::from_secs(1));
        macro_rules! build {
            ($variant:ident, $alg:ty) => {
                KeyedAny::$variant(
                    KeyedRateLimiter::<String, $alg>::builder(policy.quota)
                        .clock(clock)
                        .max_keys(max_keys.max(1))
                        .overflow(Overflow::Shared)
                        .auto_sweep(sweep)
                        .build()?,
                )
            };
        }
        Ok(match policy.algorithm {
            AlgorithmName::TokenBucket => build!(Token, TokenBucket),
            AlgorithmName::FixedWindow => build!(Fixed, FixedWindow),
            AlgorithmName::SlidingWindowLog => build!(Log, SlidingWindowLog),
            AlgorithmName::SlidingWindowCounter => build!(Counter, SlidingWindowCounter),
            AlgorithmName::LeakyBucket => build!(Leaky, LeakyBucket),
        })
    }

    pub(crate) fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        each!(self, l => l.check_n(key, cost))
    }

    pub(crate) fn len(&self) -> usize {
        each!(self, l => l.len())
    }

    pub(crate) fn overflow_count(&self) -> u64 {
        each!(self, l => l.overflow_count())
    }
}
