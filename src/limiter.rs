//! The direct limiter: one bucket shared by every caller.

use crate::algorithm::{Adjust, Adjustable, Algorithm, TokenBucket};
use crate::clock::{Clock, QuantaClock};
use crate::{CheckError, Decision, Quota, QuotaError};

/// A rate limiter with one state, for a limit that applies to everyone
/// (an outbound API's quota, a whole service's budget).
///
/// The algorithm is chosen by type: `RateLimiter<TokenBucket>` (the default),
/// and the others in [`algorithm`](crate::algorithm). Checks are lock-free:
/// a read of the clock and a compare-exchange loop on the algorithm's state.
/// Share a limiter between threads by reference or in an `Arc`.
///
/// # Examples
///
/// ```
/// use rategate::{Quota, RateLimiter, TokenBucket};
///
/// let limiter = RateLimiter::<TokenBucket>::new(Quota::per_second(5)?)?;
/// let passed = (0..10).filter(|_| limiter.check().is_allowed()).count();
/// assert!(passed >= 5);
/// # Ok::<(), rategate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct RateLimiter<A: Algorithm = TokenBucket, C: Clock = QuantaClock> {
    algorithm: A,
    state: A::State,
    clock: C,
    quota: Quota,
}

impl<A: Algorithm> RateLimiter<A, QuantaClock> {
    /// A limiter for `quota` on the default clock.
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when the algorithm cannot represent `quota`.
    pub fn new(quota: Quota) -> Result<Self, QuotaError> {
        Self::with_clock(quota, QuantaClock::new())
    }
}

impl<A: Algorithm, C: Clock> RateLimiter<A, C> {
    /// A limiter for `quota` reading time from `clock`.
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when the algorithm cannot represent `quota`.
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        Ok(Self::from_algorithm(A::from_quota(&quota)?, quota, clock))
    }

    /// A limiter with `algorithm`, already built for `quota` (an
    /// [`AnyAlgorithm`](crate::algorithm::AnyAlgorithm) chosen at run time),
    /// reading time from `clock`.
    pub fn from_algorithm(algorithm: A, quota: Quota, clock: C) -> Self {
        RateLimiter {
            state: algorithm.new_state(),
            algorithm,
            clock,
            quota,
        }
    }

    /// Decides one request of cost 1 and records it if admitted.
    // Forced: with the algorithm chosen at run time the check is large
    // enough that it would otherwise stay a call, which copies the
    // decision through the stack (the figures are at
    // `algorithm::update_word`).
    #[inline(always)]
    pub fn check(&self) -> Decision {
        self.algorithm.check_one(&self.state, self.clock.now())
    }

    /// Decides one request of `cost` (GraphQL points, bytes, batch size)
    /// and records it if admitted.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` is more than can ever
    /// pass at once: such a request would otherwise be denied forever.
    // Forced: with the algorithm chosen at run time the check is large
    // enough that it would otherwise stay a call, which copies the
    // decision through the stack (the figures are at
    // `algorithm::update_word`).
    #[inline(always)]
    pub fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
        self.algorithm.check(&self.state, self.clock.now(), cost)
    }

    /// What [`check`](RateLimiter::check) would decide now, consuming nothing.
    #[inline]
    pub fn peek(&self) -> Decision {
        let result = self.algorithm.peek(&self.state, self.clock.now(), 1);
        result.unwrap_or_else(never_passes)
    }

    /// What [`check_n`](RateLimiter::check_n) would decide now, consuming
    /// nothing.
    ///
    /// # Errors
    ///
    /// As [`check_n`](RateLimiter::check_n).
    #[inline]
    pub fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        self.algorithm.peek(&self.state, self.clock.now(), cost)
    }

    /// Gives back up to `cost` of what earlier checks admitted (a request
    /// that failed before doing its work), as the algorithm's
    /// [`refund`](Algorithm::refund) documents: never more room than a
    /// limiter never used. Returns how much was given back. Lock-free, as a
    /// check is.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::{ManualClock, Quota, RateLimiter, TokenBucket};
    ///
    /// let limiter = RateLimiter::<TokenBucket, _>::with_clock(Quota::per_minute(10)?, ManualClock::new())?;
    /// assert!(limiter.check_n(10)?.is_allowed());
    /// assert!(!limiter.check().is_allowed());
    /// // The work failed before it started: give 4 back.
    /// assert_eq!(limiter.refund(4), 4);
    /// assert_eq!(limiter.peek().remaining(), 3);
    /// // Never past a full bucket.
    /// assert_eq!(limiter.refund(100), 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn refund(&self, cost: u32) -> u32 {
        self.algorithm.refund(&self.state, self.clock.now(), cost)
    }

    /// The quota this limiter enforces (the latest one set, for an
    /// [`Adjustable`] algorithm).
    pub fn quota(&self) -> Quota {
        self.algorithm.current_quota().unwrap_or(self.quota)
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The algorithm's parameters.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }
}

impl<A: Adjust, C: Clock> RateLimiter<Adjustable<A>, C> {
    /// Makes `quota` the one every later check enforces, keeping the state:
    /// see [`Adjustable`] for what each algorithm's state then means (a
    /// window that used 90 of 100, moved to 50, denies until it is back
    /// below 50; a raised quota takes effect at once). Checks stay
    /// lock-free; a check racing the change decides under either quota.
    ///
    /// # Errors
    ///
    /// As [`Adjustable::set_quota`]; the quota in force is then unchanged.
    pub fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
        self.algorithm.set_quota(quota)
    }
}

/// The decision for a request of cost 1 that can never pass, which only an
/// algorithm breaking the [`Algorithm::capacity`] contract (at least 1) gives:
/// a permanent denial rather than a panic.
#[cold]
pub(crate) fn never_passes(_: CheckError) -> Decision {
    Decision::deny(0, 0, 0, u64::MAX)
}
