//! Fixed window counter on one `AtomicU64`.
//!
//! Time is cut into windows of one period, aligned to the clock's origin
//! (window `n` is `[n x period, (n + 1) x period)`), and each key counts what
//! it admitted in the current window; the count starts again at zero when a
//! new window begins. It is the simplest of the classic algorithms (the
//! "fixed window counter" of Stripe's and Cloudflare's rate-limiting write-ups)
//! and the cheapest, at the price of the well-known *boundary burst*: up to
//! twice the limit can pass within one period, `limit` at the end of one
//! window and `limit` again at the start of the next.
//!
//! The window index and the count share one word, so a rollover and an
//! increment are a single compare-exchange and can never interleave wrongly.

use super::{Algorithm, Divisor, check_cost, update_word};
use crate::sync::{AtomicU64, Ordering};
use crate::{CheckError, Decision, Quota, QuotaError};

/// Fixed window counter: at most `limit` requests per window of the quota's
/// period, windows aligned to the clock's origin.
///
/// A request of `cost` passes if `count + cost <= limit`, where `count` is
/// what was admitted in the current window. The quota's burst is ignored: a
/// fixed window admits its whole limit at once by nature, so the limit is
/// also the capacity.
///
/// State: one `AtomicU64` per key, `window_tag << b | count` with
/// `b = bits(limit)` (the bits any count up to the limit needs, 1 to 32),
/// updated by compare-exchange. A count of 0 means nothing was admitted,
/// whatever the tag, so 0 is a key never seen. Denials, and admissions of
/// cost 0, write nothing.
///
/// Decisions: `remaining` is `limit - count` after the request;
/// `reset_after` is the time to the end of the current window when the
/// window holds anything, zero otherwise; on a denial `retry_after` is the
/// time to the next window, where any allowed cost fits. A clock that steps
/// back into an earlier window stays in the window the state holds: no time
/// has elapsed.
///
/// # Refund
///
/// A refund lowers the count of the window a check at `now` would count in,
/// never below zero; a window that has ended takes nothing back (its count
/// is already forgotten), nor does the later window a clock that stepped
/// back still sees. A window emptied by refunds is a key never seen.
///
/// # Window index wrap
///
/// The stored window index is truncated to the bits the count leaves free
/// (`64 - bits(limit)`, at least 32) and decoded as the window nearest to the
/// current one. Whenever every window the clock can reach fits in those bits
/// the index is exact; otherwise it is exact for any state untouched for
/// less than `2^(63 - bits(limit))` windows, which is at least 2^62 ns
/// (146 years) because `period >= limit`. Beyond that horizon an old count
/// may be decoded as belonging to the current or a later window: it then
/// denies requests that should pass (until that window, as decoded, ends)
/// but never admits more than the limit allows. Only a clock stepping back
/// by more than the horizon could make a count be forgotten early.
///
/// Times are computed in `u128`, so the last window, which may end after
/// `u64::MAX` nanoseconds, reports exact durations too.
///
/// # Examples
///
/// ```
/// use rategate::{FixedWindow, ManualClock, Quota, RateLimiter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::<FixedWindow, _>::with_clock(Quota::per_minute(3)?, clock.clone())?;
/// clock.advance(Duration::from_secs(50));
/// assert_eq!(limiter.check_n(3)?.remaining(), 0);
/// let denied = limiter.check();
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after(), Duration::from_secs(10)); // the next minute
/// clock.advance(Duration::from_secs(10));
/// assert!(limiter.check().is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    /// Requests per window, at least 1; also the capacity.
    limit: u32,
    /// Window length in nanoseconds, at least `limit`.
    period: u64,
    /// Bits of the count, in the low bits of the state word:
    /// `bits(limit)`, 1 to 32, so any count up to `limit` fits.
    count_bits: u32,
    /// The window index, truncated, in the remaining high bits.
    tag: WindowTag,
}

impl FixedWindow {
    /// The pure decision core: given the stored word, decide a request of
    /// `cost` (at most the limit) at `now`. Returns the decision and the word
    /// to store: a new one when a request of non-zero cost is admitted (its
    /// count is then above any count it replaces in its window), else `word`
    /// itself (nothing to write).
    // Always inlined: as a call, the check's compare-exchange loop received
    // the decision through the stack, in pieces the CPU cannot forward to
    // the loads that read it back (the figures are at `update_word`).
    #[inline(always)]
    pub(crate) fn decide(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        let count = word & ((1 << self.count_bits) - 1);
        // A count of 0 is a fresh state whatever its tag says.
        let (window, used) = if count == 0 {
            (self.tag.window_of(now), 0)
        } else if let Some(stored) = self.tag.exact(word >> self.count_bits) {
            // The tag is the whole window index: whether `now` is past the
            // stored window's end takes a multiplication, not a division
            // (the common denial: a window already full).
            match (stored + 1).checked_mul(self.period) {
                Some(end) if now >= end => (self.tag.window_of(now), 0),
                // The same window, or a clock that stepped back.
                _ => (stored, count),
            }
        } else {
            let current = self.tag.window_of(now);
            let stored = self.tag.untag(word >> self.count_bits, current);
            if stored < current {
                // A new window: the old count no longer matters.
                (current, 0)
            } else {
                // The same window, or a clock that stepped back: stay in the
                // stored window.
                (stored, count)
            }
        };
        // window >= now / period, so the window ends after `now`, and at most
        // one period after it (later only when the clock stepped back).
        let end = (u128::from(window) + 1) * u128::from(self.period);
        let until_end = u64::try_from(end - u128::from(now)).unwrap_or(u64::MAX);
        let limit = u64::from(self.limit);
        // Both at most 2^32 - 1: no overflow.
        let after = used + u64::from(cost);
        // Cost 0 is a probe: admitted even over a limit cut at run time.
        if after <= limit || cost == 0 {
            let reset_after = if after > 0 { until_end } else { 0 };
            // At most the limit, a u32.
            let left = limit.saturating_sub(after) as u32;
            let decision = Decision::allow(self.limit, left, reset_after);
            let new_word = if cost > 0 {
                (self.tag.tag(window) << self.count_bits) | after
            } else {
                word
            };
            (decision, new_word)
        } else {
            // cost <= limit, so a denial means used > 0: the window ends the
            // state, and the next window admits any allowed cost.
            // After a run-time limit cut `used` may exceed the limit.
            let left = limit.saturating_sub(used) as u32;
            let decision = Decision::deny(self.limit, left, until_end, until_end);
            (decision, word)
        }
    }
}

impl FixedWindow {
    /// The window a stored `word` counts in, judged from `now`'s window,
    /// and its count; a count of 0 (a fresh state) is reported in `now`'s
    /// window. For the batched Redis sync, which folds other nodes'
    /// admissions into a key's state.
    #[cfg(feature = "redis")]
    pub(crate) fn stored(&self, word: u64, now: u64) -> (u64, u64) {
        let count = word & ((1 << self.count_bits) - 1);
        let current = self.tag.window_of(now);
        if count == 0 {
            (current, 0)
        } else {
            (self.tag.untag(word >> self.count_bits, current), count)
        }
    }

    /// The word holding `count` (clamped to the limit) in `window` (a
    /// window the clock can reach).
    #[cfg(feature = "redis")]
    pub(crate) fn word(&self, window: u64, count: u64) -> u64 {
        (self.tag.tag(window) << self.count_bits) | count.min(u64::from(self.limit))
    }
}

/// The count keeps all 32 bits, so any later limit fits; a change keeps the
/// period (the window index), else [`QuotaError::PeriodFixed`].
impl super::Adjust for FixedWindow {
    fn adjustable(quota: &Quota) -> Result<Self, QuotaError> {
        let period = quota.period_nanos();
        Ok(FixedWindow {
            count_bits: u32::BITS,
            tag: WindowTag::new(u64::BITS - u32::BITS, period),
            ..FixedWindow::from_quota(quota)?
        })
    }

    fn retune(&self, quota: &Quota) -> Result<Self, QuotaError> {
        super::adjustable::same_period(self.period, quota)?;
        if bits_for(quota.limit()) > self.count_bits {
            return Err(QuotaError::LimitTooLarge {
                limit: quota.limit().into(),
                max: (1 << self.count_bits) - 1,
            });
        }
        Ok(FixedWindow {
            limit: quota.limit(),
            ..*self
        })
    }
}

impl FixedWindow {
    /// A state word saved at `then`, restored at `now` (see
    /// [`Snapshot`](crate::snapshot::Snapshot)): the count moves to the
    /// window holding its window's moved end.
    pub(crate) fn moved(&self, word: u64, then: u64, now: u64) -> Option<u64> {
        let count = word & ((1 << self.count_bits) - 1);
        if count == 0 {
            return Some(0);
        }
        let stored = self.tag.untag(word >> self.count_bits, then / self.period);
        let window = super::moved_window(stored, self.period, then, now);
        Some((self.tag.tag(window) << self.count_bits) | count)
    }
}

/// `bits(n)`: the number of bits needed to hold any value up to `n`.
#[inline]
pub(super) fn bits_for(n: u32) -> u32 {
    u32::BITS - n.leading_zeros()
}

impl super::DecideWord for FixedWindow {
    #[inline(always)]
    fn decide_word(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        self.decide(word, now, cost)
    }
}

impl Algorithm for FixedWindow {
    /// `window_tag << count_bits | count`; 0: never seen.
    type State = AtomicU64;

    fn refund(&self, state: &AtomicU64, now: u64, cost: u32) -> u32 {
        let current = now / self.period;
        // What a refund can take from `word`: only a count in `now`'s window.
        let taken = |word: u64| {
            let count = word & ((1 << self.count_bits) - 1);
            let live = count > 0 && self.tag.untag(word >> self.count_bits, current) == current;
            if live { count.min(u64::from(cost)) } else { 0 }
        };
        // Relaxed: see `update_word`; the same compare-exchange on the same
        // word as a check. Lowering the count leaves the tag bits alone.
        let refunded = state.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
            let take = taken(word);
            (take > 0).then(|| word - take)
        });
        // At most `cost`.
        refunded.map_or(0, |word| taken(word) as u32)
    }

    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        let limit = quota.limit();
        let period = quota.period_nanos();
        let count_bits = bits_for(limit);
        Ok(FixedWindow {
            limit,
            period,
            count_bits,
            tag: WindowTag::new(u64::BITS - count_bits, period),
        })
    }

    fn new_state(&self) -> AtomicU64 {
        AtomicU64::new(0)
    }

    // Always inlined: left a call (in some callers it was), the decision
    // came back through the stack (the figures are at `update_word`).
    #[inline(always)]
    fn check(&self, state: &AtomicU64, now: u64, cost: u32) -> Result<Decision, CheckError> {
        check_cost(cost, self.limit)?;
        // The shared compare-exchange loop; its comment argues the orderings.
        Ok(update_word(state, self, now, cost))
    }

    #[inline]
    fn peek(&self, state: &AtomicU64, now: u64, cost: u32) -> Result<Decision, CheckError> {
        check_cost(cost, self.limit)?;
        // Relaxed: see `update_word`.
        Ok(self.decide(state.load(Ordering::Relaxed), now, cost).0)
    }

    #[inline]
    fn is_idle(&self, state: &AtomicU64, now: u64) -> bool {
        // Relaxed: see `update_word`. Callers that drop the key hold a lock that
        // excludes concurrent checks of it.
        let word = state.load(Ordering::Relaxed);
        let count = word & ((1 << self.count_bits) - 1);
        let current = self.tag.window_of(now);
        count == 0 || self.tag.untag(word >> self.count_bits, current) < current
    }

    fn capacity(&self) -> u32 {
        self.limit
    }
}

/// A window index kept in the top `bits` bits of a state word, the low
/// `bits` bits of the index; shared by the window algorithms.
///
/// When every window the clock can reach (`0 ..= u64::MAX / period`) fits in
/// `bits`, the tag is the whole index. Otherwise a tag is decoded as the
/// window congruent to it (modulo `2^bits`) nearest to the current window,
/// which is the stored one whenever the two are less than `2^(bits - 1)`
/// windows apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WindowTag {
    /// Bits kept of a window index, 1 to 63.
    bits: u32,
    /// The last window the clock can reach, `u64::MAX / period`.
    last: u64,
    /// Division by the period without a hardware divide (a check divides
    /// the time by it once).
    per_period: Divisor,
    /// Whether tags keep the whole window index (`last < 2^bits`), decided
    /// once here rather than on every check.
    whole: bool,
}

impl WindowTag {
    /// Tags of `bits` bits (1 to 63) for windows of `period` nanoseconds.
    pub(super) fn new(bits: u32, period: u64) -> WindowTag {
        let last = u64::MAX / period.max(1);
        WindowTag {
            bits,
            last,
            per_period: Divisor::new(period),
            whole: last < 1u64 << bits,
        }
    }

    /// The tags of [`new`](Self::new)`(bits, period)`, from the division
    /// by the period that it made (no division here).
    pub(super) fn from_divisor(bits: u32, per_period: Divisor) -> WindowTag {
        // Divisor::new(period) keeps u64::MAX / period, which `new` computes.
        let last = per_period.m;
        WindowTag {
            bits,
            last,
            per_period,
            whole: last < 1u64 << bits,
        }
    }

    /// The index of the window `now` is in: `now / period`.
    #[inline]
    pub(super) fn window_of(&self, now: u64) -> u64 {
        self.per_period.divide(now)
    }

    /// Division by the period, for arithmetic beyond the window index.
    #[inline]
    pub(super) fn per_period(&self) -> Divisor {
        self.per_period
    }

    /// The tag of `window`.
    #[inline]
    pub(super) fn tag(&self, window: u64) -> u64 {
        window & ((1 << self.bits) - 1)
    }

    /// The window a stored `tag` stands for when tags keep the whole window
    /// index (every window the clock can reach fits the tag's bits), without
    /// judging it from the current window; `None` when tags are truncated.
    #[inline]
    pub(super) fn exact(&self, tag: u64) -> Option<u64> {
        self.whole.then_some(tag)
    }

    /// The window a stored `tag` stands for, judged from `current`, the
    /// window `now` is in. The result is always a window the clock can reach.
    #[inline]
    pub(super) fn untag(&self, tag: u64, current: u64) -> u64 {
        let modulus = 1u64 << self.bits;
        if self.whole {
            return tag;
        }
        // Windows from `current` forward to the next window with this tag.
        let ahead = tag.wrapping_sub(current) & (modulus - 1);
        let behind = modulus - ahead;
        if ahead == 0 {
            current
        } else if ahead < modulus / 2 {
            match current.checked_add(ahead) {
                Some(w) if w <= self.last => w,
                // No such window: `current + ahead > last >= modulus`, so
                // `current > behind`.
                _ => current - behind,
            }
        } else {
            match current.checked_sub(behind) {
                Some(w) => w,
                // No such window: `current < behind`, so
                // `current + ahead < modulus <= last`.
                None => current + ahead,
            }
        }
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn window(limit: u32, period: u64) -> FixedWindow {
        let quota = Quota::with_period(limit, Duration::from_nanos(period)).unwrap();
        FixedWindow::from_quota(&quota).unwrap()
    }

    /// Tags rebuilt from the period's divisor (a deferred denial's) are the
    /// tags built from the period.
    #[test]
    fn tags_from_the_divisor_equal_tags_from_the_period() {
        for period in [
            1,
            2,
            3,
            999,
            1 << 20,
            60_000_000_000,
            1 << 40,
            u64::MAX / 3,
            u64::MAX,
        ] {
            for bits in [1, 2, 24, 40, 62, 63] {
                assert_eq!(
                    WindowTag::from_divisor(bits, Divisor::new(period)),
                    WindowTag::new(bits, period),
                    "period {period} bits {bits}"
                );
            }
        }
    }

    #[test]
    fn admits_limit_per_window_then_denies_until_next() {
        let fw = window(3, 1000);
        let state = fw.new_state();
        for left in (0..3).rev() {
            let d = fw.check(&state, 250, 1).unwrap();
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), left);
            assert_eq!(d.reset_after_nanos(), 750);
        }
        let d = fw.check(&state, 400, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!((d.reset_after_nanos(), d.retry_after_nanos()), (600, 600));
        assert!(!fw.check(&state, 999, 1).unwrap().is_allowed());
        let d = fw.check(&state, 1000, 3).unwrap();
        assert!(d.is_allowed());
        assert_eq!((d.remaining(), d.reset_after_nanos()), (0, 1000));
    }

    #[test]
    fn cost_rules() {
        let fw = window(5, 100);
        let state = fw.new_state();
        assert_eq!(
            fw.check(&state, 0, 6),
            Err(CheckError::CostExceedsCapacity {
                cost: 6,
                capacity: 5
            })
        );
        // Cost 0 passes, writes nothing, and reports an idle state.
        let d = fw.check(&state, 10, 0).unwrap();
        assert!(d.is_allowed());
        assert_eq!((d.remaining(), d.reset_after_nanos()), (5, 0));
        assert_eq!(state.load(Ordering::Relaxed), 0);
        assert!(fw.check(&state, 10, 4).unwrap().is_allowed());
        let d = fw.check(&state, 20, 2).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 1);
        assert!(fw.check(&state, 20, 1).unwrap().is_allowed());
    }

    #[test]
    fn clock_stepping_back_stays_in_the_stored_window() {
        let fw = window(2, 100);
        let state = fw.new_state();
        assert!(fw.check(&state, 250, 2).unwrap().is_allowed());
        // Back into window 1: still window 2, full.
        let d = fw.check(&state, 150, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 150);
        assert_eq!(d.reset_after_nanos(), 150);
        assert!(!fw.is_idle(&state, 150));
        assert!(fw.check(&state, 300, 1).unwrap().is_allowed());
    }

    #[test]
    fn peek_writes_nothing_and_idle_means_window_over() {
        let fw = window(1, 50);
        let state = fw.new_state();
        assert!(fw.is_idle(&state, 0));
        assert!(fw.peek(&state, 0, 1).unwrap().is_allowed());
        assert!(fw.peek(&state, 0, 1).unwrap().is_allowed());
        assert!(fw.check(&state, 0, 1).unwrap().is_allowed());
        assert!(!fw.peek(&state, 49, 1).unwrap().is_allowed());
        assert!(!fw.is_idle(&state, 49));
        assert!(fw.is_idle(&state, 50));
    }

    #[test]
    fn packing_uses_the_bits_the_limit_leaves() {
        assert_eq!(window(1, 1).count_bits, 1);
        assert_eq!(window(100, 1000).count_bits, 7);
        let big = window(u32::MAX, u64::from(u32::MAX));
        assert_eq!(big.count_bits, 32);
        let state = big.new_state();
        assert!(big.check(&state, 5, u32::MAX).unwrap().is_allowed());
        assert!(!big.check(&state, 6, 1).unwrap().is_allowed());
        assert!(
            big.check(&state, u64::from(u32::MAX), 1)
                .unwrap()
                .is_allowed()
        );
    }

    #[test]
    fn end_of_the_clock() {
        // The last window, [u64::MAX - 5, u64::MAX + 5), ends past the clock.
        let fw = window(2, 10);
        let state = fw.new_state();
        let d = fw.check(&state, u64::MAX, 2).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.reset_after_nanos(), 5);
        let d = fw.check(&state, u64::MAX - 3, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 8);
    }

    #[test]
    fn truncated_tags_decode_to_the_nearest_window() {
        // 4-bit tags for 100 windows: truncation happens.
        let tag = WindowTag::new(4, u64::MAX / 100);
        assert_eq!(tag.last, 100);
        for stored in 0..=100u64 {
            for current in 0..=100u64 {
                let got = tag.untag(tag.tag(stored), current);
                assert_eq!(got % 16, stored % 16);
                assert!(got <= 100);
                if stored.abs_diff(current) < 8 {
                    assert_eq!(got, stored, "stored {stored} current {current}");
                }
            }
        }
        // Every window fits: exact at any distance.
        let exact = WindowTag::new(8, u64::MAX / 200);
        assert_eq!(exact.untag(exact.tag(199), 0), 199);
        assert_eq!(exact.untag(exact.tag(0), 199), 0);
    }

    #[test]
    fn wrapped_tag_never_grants_extra() {
        // A 1-bit tag: window 2 decodes like window 0 (or 4).
        let fw = FixedWindow {
            limit: 2,
            period: 10,
            count_bits: 2,
            tag: WindowTag::new(1, 10),
        };
        let state = fw.new_state();
        assert!(fw.check(&state, 20, 2).unwrap().is_allowed());
        // Window 4 has the same tag: the stale count reads as current and
        // denies, never the other way round.
        assert!(!fw.check(&state, 40, 1).unwrap().is_allowed());
        assert!(fw.check(&state, 30, 1).unwrap().is_allowed());
    }
}
