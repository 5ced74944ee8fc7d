//! Random delay added to wake-ups, so that many clients do not hit an
//! upstream in lockstep.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// A random extra delay, uniform in `[min, max]`, added to every wake-up
/// that had to wait (a slot that is free at once is taken at once, as in
/// governor's `until_ready_with_jitter`).
///
/// Randomness comes from a per-thread splitmix64 generator seeded from the
/// standard library's randomly keyed hasher: no extra dependency, no lock,
/// and distinct sequences per thread and per process. It is not for
/// cryptography; spreading wake-ups needs no more.
///
/// # Examples
///
/// ```
/// use rategate::Jitter;
/// use std::time::Duration;
///
/// let jitter = Jitter::up_to(Duration::from_millis(20));
/// for _ in 0..100 {
///     assert!(jitter.sample() <= Duration::from_millis(20));
/// }
/// let range = Jitter::between(Duration::from_millis(5), Duration::from_millis(10));
/// let d = range.sample();
/// assert!(d >= Duration::from_millis(5) && d <= Duration::from_millis(10));
/// assert_eq!(Jitter::NONE.sample(), Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Jitter {
    min: Duration,
    max: Duration,
}

impl Jitter {
    /// No jitter.
    pub const NONE: Jitter = Jitter {
        min: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// Uniform in `[0, max]`.
    pub const fn up_to(max: Duration) -> Jitter {
        Jitter {
            min: Duration::ZERO,
            max,
        }
    }

    /// Uniform in `[min, max]`; the bounds are swapped if given in reverse.
    pub fn between(min: Duration, max: Duration) -> Jitter {
        Jitter {
            min: min.min(max),
            max: min.max(max),
        }
    }

    /// The smallest delay drawn.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The largest delay drawn.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// Whether every draw is zero.
    pub fn is_none(&self) -> bool {
        self.max.is_zero()
    }

    /// One random delay in `[min, max]`.
    pub fn sample(&self) -> Duration {
        let min = self.min.as_nanos();
        let span = self.max.as_nanos() - min;
        if span == 0 {
            return self.min;
        }
        // Multiply-shift maps 64 random bits onto [0, span] with a bias
        // below 2^-64 per value for spans under 2^64 ns (584 years).
        let span = u64::try_from(span).unwrap_or(u64::MAX);
        let offset = (u128::from(next_random()) * (u128::from(span) + 1)) >> 64;
        let nanos = min + offset;
        Duration::new(
            (nanos / 1_000_000_000) as u64,
            (nanos % 1_000_000_000) as u32,
        )
    }
}

thread_local! {
    static STATE: Cell<u64> = Cell::new(RandomState::new().hash_one(0x5EED_u64));
}

/// splitmix64 over a per-thread state.
fn next_random() -> u64 {
    STATE.with(|state| {
        let x = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        state.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn samples_stay_in_bounds_and_cover_the_range() {
        let jitter = Jitter::between(Duration::from_millis(30), Duration::from_millis(10));
        assert_eq!(jitter.min(), Duration::from_millis(10));
        let (mut low, mut high) = (Duration::MAX, Duration::ZERO);
        for _ in 0..10_000 {
            let d = jitter.sample();
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(30));
            low = low.min(d);
            high = high.max(d);
        }
        // 10 000 uniform draws over 20 ms land within 0.1 ms of both ends
        // except with probability about 2 * e^-50.
        assert!(low < Duration::from_micros(10_100), "{low:?}");
        assert!(high > Duration::from_micros(29_900), "{high:?}");
    }

    #[test]
    fn extreme_bounds_do_not_overflow() {
        let jitter = Jitter::up_to(Duration::MAX);
        let _ = jitter.sample();
        assert_eq!(Jitter::up_to(Duration::ZERO).sample(), Duration::ZERO);
        assert!(Jitter::NONE.is_none());
    }
}
