//! Typed errors: what is wrong with a quota, and why a check cannot be made.

use std::fmt;

/// A quota or limiter configuration that cannot work.
///
/// Returned by the [`Quota`](crate::Quota) constructors, by quota parsing, and
/// when a limiter is built from a quota its algorithm cannot represent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The limit (requests per period) is zero.
    ZeroLimit,
    /// The period is zero.
    ZeroPeriod,
    /// The period does not fit in `u64` nanoseconds (about 584 years).
    PeriodOverflow,
    /// More than one request per nanosecond: the algorithms keep time in
    /// nanoseconds and cannot represent a finer rate.
    RateTooHigh {
        /// Requests per period.
        limit: u64,
        /// The period in nanoseconds.
        period_nanos: u64,
    },
    /// Slower than the algorithm can count: the leaky bucket keeps its rate
    /// in thousandths of a request per second, as nginx does, so it needs
    /// at least one request per 1000 seconds.
    RateTooLow {
        /// Requests per period.
        limit: u64,
        /// The period in nanoseconds.
        period_nanos: u64,
    },
    /// The burst capacity is zero.
    ZeroBurst,
    /// The burst (or an algorithm's state) would not fit in its arithmetic:
    /// `burst x emission interval` is beyond 2^63 - 1 nanoseconds (about
    /// 292 years), past which a token bucket's state could overflow.
    BurstOverflow,
    /// The algorithm packs its state in a fixed number of bits and cannot
    /// count this high.
    LimitTooLarge {
        /// What was asked for.
        limit: u64,
        /// The largest value the algorithm supports.
        max: u64,
    },
    /// [`Sharded`](crate::Sharded) splits a limit or burst over its shards
    /// and each shard needs a share of at least 1, so the value must be at
    /// least the number of shards.
    LimitBelowShards {
        /// The limit or burst to split.
        limit: u64,
        /// The number of shards.
        shards: u64,
    },
    /// A limiter of [`AnyAlgorithm`](crate::AnyAlgorithm) was built from a
    /// quota alone, which names no algorithm: build it with
    /// [`RateLimiter::from_algorithm`](crate::RateLimiter::from_algorithm)
    /// or [`KeyedRateLimiterBuilder::algorithm`](crate::KeyedRateLimiterBuilder::algorithm)
    /// and an [`AnyAlgorithm::from_name`](crate::AnyAlgorithm::from_name).
    AlgorithmNotChosen,
    /// A run-time quota change ([`Adjustable`](crate::algorithm::Adjustable))
    /// asked a window algorithm for another period: its state counts in
    /// windows of the period it was built with, so only the limit may change.
    PeriodFixed {
        /// The period the limiter keeps, in nanoseconds.
        period_nanos: u64,
    },
    /// A quota string could not be parsed.
    Parse {
        /// The text that was rejected.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::ZeroLimit => f.write_str("the limit must be at least 1 request per period"),
            QuotaError::ZeroPeriod => f.write_str("the period must be longer than zero"),
            QuotaError::PeriodOverflow => {
                f.write_str("the period does not fit in u64 nanoseconds (about 584 years)")
            }
            QuotaError::RateTooHigh {
                limit,
                period_nanos,
            } => write!(
                f,
                "{limit} requests per {period_nanos} ns is more than one request per nanosecond"
            ),
            QuotaError::RateTooLow {
                limit,
                period_nanos,
            } => write!(
                f,
                "{limit} requests per {period_nanos} ns is less than one request per 1000 seconds"
            ),
            QuotaError::ZeroBurst => f.write_str("the burst must be at least 1"),
            QuotaError::BurstOverflow => {
                f.write_str("burst x emission interval is beyond 2^63 - 1 ns (about 292 years)")
            }
            QuotaError::LimitTooLarge { limit, max } => write!(
                f,
                "a limit or burst of {limit} is larger than this algorithm supports ({max})"
            ),
            QuotaError::LimitBelowShards { limit, shards } => write!(
                f,
                "a limit or burst of {limit} cannot be split over {shards} shards (each needs at least 1)"
            ),
            QuotaError::AlgorithmNotChosen => f.write_str(
                "a quota alone names no algorithm: build an AnyAlgorithm limiter with \
                 RateLimiter::from_algorithm or KeyedRateLimiterBuilder::algorithm",
            ),
            QuotaError::PeriodFixed { period_nanos } => write!(
                f,
                "this algorithm's windows keep their period of {period_nanos} ns: only the limit can change at run time"
            ),
            QuotaError::Parse { input, reason } => {
                write!(f, "invalid quota {input:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for QuotaError {}

/// Why a check could not be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckError {
    /// The cost is larger than the most the limiter can ever admit at once,
    /// so the request could never pass. Retrying will not help.
    CostExceedsCapacity {
        /// The cost asked for.
        cost: u32,
        /// The largest cost that can pass.
        capacity: u32,
    },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::CostExceedsCapacity { cost, capacity } => write!(
                f,
                "a cost of {cost} can never pass: the capacity is {capacity}"
            ),
        }
    }
}

impl std::error::Error for CheckError {}
