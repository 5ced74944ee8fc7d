//! The rate-limiting algorithms.
//!
//! Each algorithm is a pure decision core, `(state, now, cost) -> (decision,
//! new state)` with time passed in, plus a thin compare-exchange loop that
//! applies it to the algorithm's atomic state. The limiters
//! ([`RateLimiter`](crate::RateLimiter),
//! [`KeyedRateLimiter`](crate::KeyedRateLimiter)) are generic over
//! [`Algorithm`], so an algorithm is chosen by type.

mod adjustable;
mod any;
mod fixed_window;
mod leaky_bucket;
mod sharded;
mod sliding_window_counter;
mod sliding_window_log;
mod token_bucket;

pub use adjustable::{Adjust, Adjustable};
pub use any::{AlgorithmError, AlgorithmKind, AnyAlgorithm, AnyState, UnknownAlgorithm};
pub use fixed_window::FixedWindow;
pub use leaky_bucket::LeakyBucket;
pub(crate) use leaky_bucket::admission_fields as leaky_admission_fields;
pub(crate) use leaky_bucket::denial_remaining as leaky_denial_remaining;
pub(crate) use leaky_bucket::denial_times as leaky_denial_times;
#[cfg(feature = "http")]
pub(crate) use sharded::home_index;
pub use sharded::{Sharded, ShardedState, Splittable};
pub use sliding_window_counter::SlidingWindowCounter;
pub(crate) use sliding_window_counter::denial as counter_denial;
pub use sliding_window_log::{SlidingWindowLog, WindowLog};
pub use token_bucket::TokenBucket;

use crate::sync::{AtomicU64, Ordering};
use crate::{CheckError, Decision, Quota, QuotaError};

/// A rate-limiting algorithm: its parameters (`self`) and the per-key state
/// it updates lock-free.
///
/// Times are nanoseconds from the limiter clock's origin. Implementations
/// treat a time earlier than one they have already seen as no time elapsed,
/// never as a reason to grant more.
///
/// A request of cost 0 is a *probe*, the same in every algorithm: it is
/// always admitted (even after the clock stepped back), writes nothing, and
/// reports the state as [`peek`](Algorithm::peek) of cost 0 does.
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

    /// Decides a request of cost 1 at `now` as [`check`](Algorithm::check)
    /// does, with a cost the algorithm can never admit (a capacity of 0,
    /// which no algorithm built from a quota has) a permanent denial. What
    /// [`RateLimiter::check`](crate::RateLimiter::check) calls; an
    /// implementation that dispatches (the run-time choice) overrides it so
    /// that no `Result` is merged and unwrapped on the hot path.
    #[inline(always)]
    fn check_one(&self, state: &Self::State, now: u64) -> Decision {
        self.check(state, now, 1)
            .unwrap_or_else(crate::limiter::never_passes)
    }

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

    /// Gives back up to `cost` of what earlier checks of `state` admitted, at
    /// `now` (a request that failed before doing its work; GraphQL points
    /// charged up front and corrected after). Returns how much was given
    /// back: less than `cost` when the state holds less than that in use.
    ///
    /// A refund never creates capacity the key did not have: it never leaves
    /// the state with more room than a key never seen, and it gives back only
    /// what the current state still counts (each algorithm documents exactly
    /// what, under "Refund"). A refund of 0 writes nothing. It updates the
    /// state as a check does (one compare-exchange loop on the same word; the
    /// sliding window log under its lock), so refunds racing checks lose
    /// nothing.
    fn refund(&self, state: &Self::State, now: u64, cost: u32) -> u32;

    /// The quota these parameters enforce now, for parameters that change at
    /// run time ([`Adjustable`]); `None` (the default): the quota they were
    /// built from, which the limiter keeps.
    fn current_quota(&self) -> Option<Quota> {
        None
    }
}

/// Division by a divisor fixed at construction, by a multiply-high and one
/// correction instead of a hardware divide (tens of cycles on the hot path).
///
/// With `m = floor((2^64 - 1) / d)`, `q = floor(n * m / 2^64)` is either the
/// true quotient or one less: `n * m / 2^64 <= n / d`, and
/// `n * m / 2^64 > n / d - n / 2^64 > n / d - 1`. One compare fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Divisor {
    d: u64,
    m: u64,
}

impl Divisor {
    /// Division by one: `divide(n) == n`.
    pub(crate) const ONE: Divisor = Divisor { d: 1, m: u64::MAX };

    /// `d` must be at least 1 (callers validate it at construction).
    pub(crate) const fn new(d: u64) -> Divisor {
        let d = if d == 0 { 1 } else { d };
        Divisor { d, m: u64::MAX / d }
    }

    /// `n / d`, rounded down.
    #[inline]
    pub(crate) fn divide(self, n: u64) -> u64 {
        let q = ((u128::from(n) * u128::from(self.m)) >> 64) as u64;
        // q <= n / d, so q * d <= n: no overflow, no underflow.
        if n - q * self.d >= self.d { q + 1 } else { q }
    }

    /// `n / d`, rounded up.
    #[inline]
    pub(crate) fn divide_ceil(self, n: u64) -> u64 {
        let q = self.divide(n);
        // q * d <= n: no overflow.
        q + u64::from(q * self.d < n)
    }
}

/// The thin compare-exchange loop every one-word algorithm shares: decide on
/// the stored word with the pure core `decide`, and if it returns a new word,
/// install it only if the word is still the one decided on; otherwise decide
/// again on the value observed. A decision that returns the word it was
/// given (a denial, a probe) writes nothing and returns at once: storing the
/// same value would change nothing. (A plain word rather than an `Option`
/// keeps the loop in registers: the optimiser spilled the `Option` to the
/// stack on the token bucket's hot path.)
///
/// Relaxed throughout: each state word is self-contained and publishes no
/// other memory. The compare-exchange makes read-decide-write atomic, and all
/// operations on one atomic follow its single modification order, so no
/// admission is lost or counted twice.
///
/// Always inlined, as are the window algorithms' and the leaky bucket's
/// `decide` and `check`: as calls (their decisions are large enough that
/// they stayed calls) they move each decision through the stack. Builds
/// with and without the crate's inline attributes, paired
/// (`cargo bench --bench direct`, rows `direct_{allow,deny}/*/manual`):
/// the fixed window's denial took 2.9 ns against 4.1, the sliding window
/// counter's 3.4 against 6.6 and its admission 8.8 against 10.8, the leaky
/// bucket's denial 3.1 against 3.4; the token bucket's rows did not move,
/// so its own functions are plain `#[inline]`.
///
/// `RateLimiter::check` and `check_n`, `Algorithm::check_one` and
/// `AnyAlgorithm`'s dispatch are always inlined for the same reason, and
/// paired the same way (`cargo bench --bench dynamic`, those five
/// attributes against plain `#[inline]`): the run-time choice's denial
/// took 3.9 ns against 6.4 for the sliding window counter and 3.3 against
/// 3.7 for the token bucket, the static sliding window counter's denial
/// 4.2 against 5.5.
///
/// The decision core comes as a [`DecideWord`] rather than a closure: a
/// closure wrapping a large `decide` stayed a call even with `decide`
/// itself always inlined, and the decision then came back through the
/// stack.
#[inline(always)]
pub(crate) fn update_word<D: DecideWord>(
    state: &AtomicU64,
    core: &D,
    now: u64,
    cost: u32,
) -> Decision {
    let mut word = state.load(Ordering::Relaxed);
    loop {
        let (decision, new_word) = core.decide_word(word, now, cost);
        if new_word == word {
            return decision;
        }
        match state.compare_exchange_weak(word, new_word, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return decision,
            Err(observed) => word = observed,
        }
    }
}

/// The pure decision core of a one-word algorithm, for [`update_word`]:
/// the decision on the stored `word` for a request of `cost` at `now`, and
/// the word to store (`word` itself: nothing to write).
pub(crate) trait DecideWord {
    fn decide_word(&self, word: u64, now: u64, cost: u32) -> (Decision, u64);
}

/// A time `t` of a clock that read `then` when a snapshot was taken, on a
/// clock that reads `now` at the restore: the time between counts as no time
/// elapsed. Clamped to `u64`.
pub(crate) fn moved_time(t: u64, then: u64, now: u64) -> u64 {
    let t = i128::from(t) + i128::from(now) - i128::from(then);
    t.clamp(0, i128::from(u64::MAX)) as u64
}

/// The window, of `period`, that holds the moved end of window `window`:
/// a count restored there is held at least as long as it was before, never
/// released early (a window of the restoring clock may start elsewhere).
pub(crate) fn moved_window(window: u64, period: u64, then: u64, now: u64) -> u64 {
    let end = (u128::from(window) + 1) * u128::from(period);
    let end = u64::try_from(end).unwrap_or(u64::MAX);
    moved_time(end, then, now).saturating_sub(1) / period
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

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::Divisor;

    #[test]
    fn divisor_matches_hardware_division() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let edges = [
            1,
            2,
            3,
            7,
            1_000,
            600_000_000,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ];
        for &d in &edges {
            let div = Divisor::new(d);
            for &n in &edges {
                assert_eq!(div.divide(n), n / d, "{n} / {d}");
            }
            assert_eq!(div.divide(0), 0);
        }
        for _ in 0..200_000 {
            let d = next() >> (next() % 64);
            let n = next() >> (next() % 64);
            let d = d.max(1);
            assert_eq!(Divisor::new(d).divide(n), n / d, "{n} / {d}");
            assert_eq!(
                Divisor::new(d).divide_ceil(n),
                n.div_ceil(d),
                "ceil {n} / {d}"
            );
        }
    }
}
