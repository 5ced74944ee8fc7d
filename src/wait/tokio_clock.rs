//! A clock that follows tokio's time.

use crate::Clock;

/// A [`Clock`] reading [`tokio::time::Instant`]: it follows tokio's time,
/// so under `tokio::time::pause()` (or `#[tokio::test(start_paused = true)]`)
/// a limiter's time stands still and jumps exactly as tokio's timers do, and
/// tests of waiting run instantly and deterministically. In a running
/// program it is the monotonic clock tokio reads (`std::time::Instant`).
///
/// Clones share one origin. Needs the `tokio` feature.
///
/// # Examples
///
/// ```
/// use rategate::{Clock, TokioClock};
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
/// let clock = TokioClock::new();
/// tokio::time::sleep(Duration::from_millis(250)).await; // instant: time is paused
/// assert_eq!(clock.now(), 250_000_000);
/// # });
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is tokio's now.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> u64 {
        crate::clock::duration_to_nanos(
            tokio::time::Instant::now().saturating_duration_since(self.origin),
        )
    }
}
