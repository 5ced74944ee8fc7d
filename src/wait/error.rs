//! Why a wait for a slot ended without one.

use crate::CheckError;
use std::fmt;
use std::time::Duration;

/// Why waiting for a slot ended without admitting the request. In every case
/// nothing was consumed from any limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// The cost is more than can ever pass at once: waiting would be endless.
    /// Returned at once.
    CostExceedsCapacity {
        /// The cost asked for.
        cost: u32,
        /// The largest cost that can pass.
        capacity: u32,
    },
    /// The limiter's next slot for this request comes after the deadline.
    DeadlineExceeded {
        /// How long after the error the request would have passed, had
        /// nothing else arrived.
        ready_in: Duration,
    },
    /// The deadline passed while other waiters were still ahead in line.
    QueuedAtDeadline {
        /// Waiters that were ahead at the deadline.
        ahead: usize,
    },
    /// The limiter reports no time at which the request could pass (its
    /// state cannot represent one, such as a leaky bucket 70 years after
    /// its clock's origin).
    NeverReady,
}

impl From<CheckError> for WaitError {
    fn from(error: CheckError) -> Self {
        match error {
            CheckError::CostExceedsCapacity { cost, capacity } => {
                WaitError::CostExceedsCapacity { cost, capacity }
            }
            #[allow(unreachable_patterns)] // CheckError is non_exhaustive
            _ => WaitError::NeverReady,
        }
    }
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::CostExceedsCapacity { cost, capacity } => write!(
                f,
                "a cost of {cost} can never pass: the capacity is {capacity}"
            ),
            WaitError::DeadlineExceeded { ready_in } => write!(
                f,
                "no slot before the deadline: the request could pass in {ready_in:?}"
            ),
            WaitError::QueuedAtDeadline { ahead } => write!(
                f,
                "the deadline passed with {ahead} waiter(s) still ahead in line"
            ),
            WaitError::NeverReady => {
                f.write_str("the limiter reports no time at which this request could pass")
            }
        }
    }
}

impl std::error::Error for WaitError {}
