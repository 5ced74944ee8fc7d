//! Policies as users write them: an algorithm and a quota string.

use super::SimError;
use crate::{
    AlgorithmKind, CheckError, Decision, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock,
    Overflow, Quota, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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
/// use rategate::AlgorithmKind;
/// use rategate::sim::LimitSpec;
///
/// let p: LimitSpec = "leaky:100r/m burst=20 nodelay".parse()?;
/// assert_eq!(p.algorithm(), AlgorithmKind::LeakyBucket);
/// assert_eq!(p.to_string(), "leaky:100/1m burst=20 nodelay");
/// let q: LimitSpec = "5000/h".parse()?;
/// assert_eq!(q.algorithm(), AlgorithmKind::TokenBucket);
/// # Ok::<(), rategate::sim::SimError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitSpec {
    algorithm: AlgorithmKind,
    quota: Quota,
}

impl LimitSpec {
    /// A policy from its parts.
    pub fn new(algorithm: AlgorithmKind, quota: Quota) -> LimitSpec {
        LimitSpec { algorithm, quota }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> AlgorithmKind {
        self.algorithm
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }
}

impl fmt::Display for LimitSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.short(), self.quota)
    }
}

impl FromStr for LimitSpec {
    type Err = SimError;

    fn from_str(input: &str) -> Result<LimitSpec, SimError> {
        let text = input.trim();
        let fail = |reason: String| SimError::Policy {
            input: input.to_owned(),
            reason,
        };
        let (algorithm, quota_text) = match text.split_once(':') {
            Some((name, rest)) => {
                let algorithm = name.trim().parse::<AlgorithmKind>().map_err(|_| {
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
                    AlgorithmKind::LeakyBucket
                } else {
                    AlgorithmKind::TokenBucket
                };
                (algorithm, text)
            }
        };
        let quota: Quota = quota_text.parse().map_err(|e| fail(format!("{e}")))?;
        // Build once so that a quota the algorithm cannot hold is reported
        // here, with the policy's text, not in the middle of a replay.
        KeyedAny::new(LimitSpec { algorithm, quota }, ManualClock::new(), 1)
            .map_err(|e| fail(format!("{e}")))?;
        Ok(LimitSpec { algorithm, quota })
    }
}

/// A keyed limiter of any of the five algorithms on a manual clock, chosen
/// at run time from a [`LimitSpec`].
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
        policy: LimitSpec,
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
            AlgorithmKind::TokenBucket => build!(Token, TokenBucket),
            AlgorithmKind::FixedWindow => build!(Fixed, FixedWindow),
            AlgorithmKind::SlidingWindowLog => build!(Log, SlidingWindowLog),
            AlgorithmKind::SlidingWindowCounter => build!(Counter, SlidingWindowCounter),
            AlgorithmKind::LeakyBucket => build!(Leaky, LeakyBucket),
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
