//! The rate-limiting algorithms.
//!
//! Each algorithm is a pure decision core, `(state, now, cost) -> (decision,
//! new state)` with time passed in, plus a thin compare-exchange loop that
//! applies it to the algorithm's atomic state. The limiters
//! ([`RateLimiter`](crate::RateLimiter),
//! [`KeyedRateLimiter`](crate::KeyedRateLimiter)) are generic over
//! [`Algorithm`], so an algorithm is chosen by type.

mod fixed_window;
mod leaky_bucket;
mod sharded;
mod sliding_window_counter;
mod sliding_window_log;
mod token_bucket;

pub use fixed_window::FixedWindow;
pub use leaky_bucket::LeakyBucket;
pub use sharded::{Sharded, ShardedState, Splittable};
pub use sliding_window_counter::SlidingWindowCounter;
pub use sliding_window_log::{SlidingWindowLog, WindowLog};
pub use token_bucket::TokenBucket;

use crate::{CheckError, Decision, Quota, QuotaError};

/// A rate-limiting algorithm: its parameters (`self`) and the per-key state
/// it updates lock-free.
///
/// Times are nanoseconds from the limiter clock's origin. Implementations
/// treat a time earlier than one they have already seen as no time elapsed,
/// never as a reason to grant more.
pub trait Algorithm: Send + Sync + Sized + 'static {
    /// One key's state. A fresh state means "never seen".
    type State: Send + Sync;

    /// Builds the algorithm's parameters from a quota.
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when the algorithm cannot represent the quota.
    fn from_quota(quota: &Quota) -> Result<Self, QuotaError>;

    /// A state for a key that was never seen.
    fn new_state(&self) -> Self::State;

    /// Decides a request of `cost` at `now` and, if it is admitted, records it.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass.
    fn check(&self, state: &Self::State, now: u64, cost: u32) -> Result<Decision, CheckError>;

    /// Decides as [`check`](Algorithm::check) would, recording nothing.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` could never pass.
    fn peek(&self, state: &Self::State, now: u64, cost: u32) -> Result<Decision, CheckError>;

    /// Whether `state` carries no information at `now`: a fresh state would
    /// decide every future request the same way, so the key can be dropped.
    fn is_idle(&self, state: &Self::State, now: u64) -> bool;

    /// The largest cost that can ever pass; at least 1.
    fn capacity(&self) -> u32;
}

/// The error for a cost above capacity.
#[inline]
pub(crate) fn check_cost(cost: u32, capacity: u32) -> Result<(), CheckError> {
    if cost > capacity {
        Err(CheckError::CostExceedsCapacity { cost, capacity })
    } else {
        Ok(())
    }
}
