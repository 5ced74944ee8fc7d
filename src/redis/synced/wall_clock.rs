//! A clock whose origin is the Unix epoch, so that separate processes
//! agree on windows and arrival times.

use crate::clock::duration_to_nanos;
use crate::{Clock, QuantaClock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch: the system's wall clock read once, at
/// creation, then advanced by a monotonic [`QuantaClock`].
///
/// Synced and leased limiters on different machines compare windows and
/// token-bucket arrival times, so their clocks need a common origin; a
/// [`QuantaClock`] or [`StdClock`](crate::StdClock) starts at its creation,
/// which differs per process. Nodes agree to within their NTP error, and a
/// later step of the system clock (an NTP correction) does not move this
/// clock, which never goes backwards. Clones share the origin.
///
/// A reading is about 1.8 x 10^18 ns in 2026, within `u64` until the year
/// 2554 and, in the microseconds the token-bucket sync sends, within Lua's
/// exact integers until 2112.
///
/// # Examples
///
/// ```
/// use rategate::Clock;
/// use rategate::redis::WallClock;
/// use std::time::{SystemTime, UNIX_EPOCH};
///
/// let clock = WallClock::new();
/// let system = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
/// let ours = clock.now();
/// assert!(ours.abs_diff(system.as_nanos() as u64) < 1_000_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct WallClock {
    /// The Unix time at creation, in nanoseconds.
    anchor: u64,
    since: QuantaClock,
}

impl WallClock {
    /// A clock reading the Unix time now (0 if the system clock is before
    /// 1970).
    pub fn new() -> Self {
        let anchor = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_to_nanos);
        WallClock {
            anchor,
            since: QuantaClock::new(),
        }
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for WallClock {
    #[inline]
    fn now(&self) -> u64 {
        self.anchor.saturating_add(self.since.now())
    }
}
