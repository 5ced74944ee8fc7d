//! Sliding window counter on one `AtomicU64`: Cloudflare's approximation of
//! a sliding window from two fixed-window counts.
//!
//! The algorithm is the one Cloudflare describes in "How we built rate
//! limiting capable of scaling to millions of domains" (2017). Time is cut
//! into windows of one period aligned to the clock's origin; each key keeps
//! the count of the current window and of the one before. At a time
//! `elapsed` into the current window, the requests of the last period are
//! estimated by assuming the previous window's requests were spread evenly
//! over it:
//!
//! ```text
//! estimate = previous x (period - elapsed) / period + current
//! ```
//!
//! and a request of `cost` passes if `estimate + cost <= limit`. Cloudflare
//! measured 0.003% of 400 million requests wrongly allowed or limited
//! against an exact sliding window; `measure/accuracy.rs` repeats the
//! measurement on a bursty synthetic trace.

use super::fixed_window::{WindowTag, bits_for};
use super::{Algorithm, Divisor, check_cost, update_word};
use crate::sync::{AtomicU64, Ordering};
use crate::{CheckError, Decision, Quota, QuotaError};

/// The largest limit the state's packing supports: both counts take
/// `bits(limit)` bits, at most 20, which leaves at least 24 bits for the
/// window index.
const MAX_LIMIT: u32 = (1 << 20) - 1;

/// Sliding window counter (Cloudflare): at most `limit` requests in any
/// period, estimated from the counts of the current and the previous window.
///
/// # Rounding
///
/// The weighted previous count is rounded **up**. A request passes if
///
/// ```text
/// ceil(previous x (period - elapsed) / period) + current + cost <= limit
/// ```
///
/// Because `current + cost` and `limit` are whole numbers, this is exactly
/// the real-valued test `previous x (period - elapsed) / period + current +
/// cost <= limit`: rounding up loses nothing, whereas rounding down would
/// admit a request whenever the estimate exceeded the limit by less than
/// one. `remaining` is `limit` minus the rounded estimate after the request
/// (`elapsed` is in nanoseconds, so the maths is exact in `u128`).
///
/// # Decisions
///
/// * `reset_after`: until both counts have lost all influence, the end of
///   the next window when the current count is non-zero, else the end of
///   the current window when the previous one is, else zero.
/// * `retry_after` on a denial: the earliest time at which the same cost
///   would pass if nothing else arrived. Exact: the weighted previous count
///   shrinks as the window goes on, so the answer may lie later in the
///   current window, in the next one (where the current count becomes the
///   previous), or at the start of the one after.
/// * The quota's burst is ignored: the limit is also the capacity.
/// * A clock that steps back before the start of the stored window counts
///   as the start of that window: no time has elapsed.
///
/// # Refund
///
/// A refund lowers the current window's count (the window of `now`, or the
/// later one a clock that stepped back still sees), never below zero. The
/// previous window's count is left alone: a request admitted there already
/// weighs less than its cost, and its weight is fading.
///
/// # State and its limits
///
/// One `AtomicU64` per key, `window_tag << 2b | current << b | previous`
/// with `b = bits(limit)`, updated by compare-exchange; 0 for a key never
/// seen. Denials, and admissions of cost 0, write nothing. Limits above
/// 2^20 - 1 = 1,048,575 are refused with [`QuotaError::LimitTooLarge`].
///
/// The window index keeps the `64 - 2b` bits left (at least 24) and is
/// decoded as the window nearest to the current one, which is exact for any
/// state untouched for less than `2^(63 - 2b)` windows: at least 2^23
/// windows (97 days of one-second windows), at least 2^31 windows for limits
/// below 65,536, and always exact when every reachable window fits. Beyond
/// that horizon old counts may be decoded as current or later ones and deny
/// requests that should pass, never admit more; only a clock stepping back
/// by more than the horizon could forget counts early.
///
/// # Examples
///
/// ```
/// use rategate::{ManualClock, Quota, RateLimiter, SlidingWindowCounter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let quota = Quota::per_minute(100)?;
/// let limiter = RateLimiter::<SlidingWindowCounter, _>::with_clock(quota, clock.clone())?;
/// assert!(limiter.check_n(60)?.is_allowed());
/// // 15 s into the next minute the 60 still weigh 60 x 45/60 = 45.
/// clock.advance(Duration::from_secs(75));
/// let d = limiter.peek();
/// assert_eq!(d.remaining(), 54);
/// assert!(limiter.check_n(55)?.is_allowed());
/// assert!(!limiter.check().is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowCounter {
    /// Requests per period, 1 to `MAX_LIMIT`; also the capacity.
    limit: u32,
    /// Window length in nanoseconds, at least `limit`.
    period: u64,
    /// `b = bits(limit)`, 1 to 20: the width of each count. The previous
    /// window's count is in bits `0..b`, the current one in `b..2b`.
    count_bits: u32,
    /// The current window's index, truncated, in bits `2b..64`.
    tag: WindowTag,
}

/// A decoded state: the window it describes and its two counts.
/// Crate-visible, with `pack` and `counts_at`, for the batched Redis sync,
/// which folds other nodes' counts into a key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) window: u64,
    pub(crate) current: u64,
    pub(crate) previous: u64,
}

impl SlidingWindowCounter {
    fn unpack(&self, word: u64) -> (u64, u64, u64) {
        let b = self.count_bits;
        let mask = (1u64 << b) - 1;
        (word >> (2 * b), (word >> b) & mask, word & mask)
    }

    pub(crate) fn pack(&self, counts: Counts) -> u64 {
        let b = self.count_bits;
        (self.tag.tag(counts.window) << (2 * b)) | (counts.current << b) | counts.previous
    }

    /// The counts as seen from window `now_window`.
    #[inline(always)]
    pub(crate) fn counts_at(&self, word: u64, now_window: u64) -> Counts {
        let (tag, current, previous) = self.unpack(word);
        let fresh = Counts {
            window: now_window,
            current: 0,
            previous: 0,
        };
        if current == 0 && previous == 0 {
            return fresh;
        }
        let stored = self.tag.untag(tag, now_window);
        if stored >= now_window {
            // The same window, or a clock that stepped back: stay in it.
            Counts {
                window: stored,
                current,
                previous,
            }
        } else if stored + 1 == now_window {
            Counts {
                window: now_window,
                current: 0,
                previous: current,
            }
        } else {
            fresh
        }
    }

    /// `ceil(previous x (period - elapsed) / period)`, for `elapsed < period`.
    #[inline]
    fn weighted(&self, previous: u64, elapsed: u64) -> u64 {
        if previous == 0 {
            return 0;
        }
        // The common case fits a u64 (a count below 2^20 times a period
        // below 2^44 ns, about 4.9 hours): divide without a hardware divide.
        if let Some(weight) = previous.checked_mul(self.period - elapsed) {
            return self.tag.per_period().divide_ceil(weight);
        }
        let period = u128::from(self.period);
        let weight = u128::from(previous) * (period - u128::from(elapsed));
        // At most `previous`, a u64.
        weight.div_ceil(period) as u64
    }

    /// The pure decision core: given the stored word, decide a request of
    /// `cost` (at most the limit) at `now`. Returns the decision and the word
    /// to store: a new one when a request of non-zero cost is admitted (its
    /// current count is then above the one it replaces), else `word` itself
    /// (nothing to write).
    // Always inlined: as a call, the check's compare-exchange loop received
    // the decision through the stack, in pieces the CPU cannot forward to
    // the loads that read it back (the figures are at `update_word`).
    #[inline(always)]
    pub(crate) fn decide(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        // A denial in the stored window first: when the current count alone
        // leaves no room for the cost, the weighted estimate (at least the
        // current count) leaves none either. Where tags keep the whole
        // window index, whether `now` is still in the stored window takes a
        // multiplication on the stored word instead of a division of the
        // reading (as the fixed window's denial does), and the decision's
        // other fields (a division by a count for the retry time) are
        // derived when asked, by `decide_eager` from what the decision keeps
        // (see `Decision::deny_counter`): a flood of denials pays for none.
        let b = self.count_bits;
        let current = (word >> b) & ((1 << b) - 1);
        if cost > 0 && current + u64::from(cost) > u64::from(self.limit) {
            if let Some(stored) = self.tag.exact(word >> (2 * b)) {
                // A window ending past u64::MAX nanoseconds holds every `now`.
                let in_window = (stored + 1)
                    .checked_mul(self.period)
                    .is_none_or(|end| now < end);
                if in_window {
                    let decision = Decision::deny_counter(
                        self.limit,
                        cost,
                        self.count_bits,
                        self.tag.per_period(),
                        now,
                        word,
                    );
                    return (decision, word);
                }
            }
        }
        self.decide_eager(word, now, cost)
    }

    /// [`decide`](Self::decide) with every field of the decision computed.
    #[inline(always)]
    fn decide_eager(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        let counts = self.counts_at(word, self.tag.window_of(now));
        let (period, limit) = (u128::from(self.period), u64::from(self.limit));
        // The window's start fits: window <= u64::MAX / period.
        let start = counts.window * self.period;
        // A `now` before the stored window counts as its start.
        let elapsed = now.saturating_sub(start);
        let Counts {
            current, previous, ..
        } = counts;
        let cost = u64::from(cost);
        // Times in u128: windows may end past u64::MAX. A duration beyond
        // u64 nanoseconds (periods over 2^63 ns) saturates.
        let until = |t: u128| u64::try_from(t - u128::from(now)).unwrap_or(u64::MAX);
        // The admission without a division. With w = previous x (period -
        // elapsed) and r = limit - current - cost, the estimate
        // ceil(w / period) + current + cost is within the limit iff
        // ceil(w / period) <= r, iff w <= r x period; and then `remaining`,
        // r - ceil(w / period), is floor((r x period - w) / period): left to
        // the decision's accessor, as the token bucket leaves its own. In
        // u64 whenever the products fit (periods below 2^44 ns, about 4.9
        // hours, with any count); otherwise, and for every denial and
        // probe, the general path below.
        let fast = if current + cost <= limit && cost > 0 {
            let r = limit - current - cost;
            match (
                previous.checked_mul(self.period - elapsed),
                r.checked_mul(self.period),
            ) {
                (Some(w), Some(r_period)) if w <= r_period => Some((w, r_period)),
                _ => None,
            }
        } else {
            None
        };
        if let Some((w, r_period)) = fast {
            // The count leaves at the end of the next window.
            let reset_after = until(u128::from(start) + 2 * period);
            let decision =
                Decision::allow_per(self.limit, r_period - w, self.tag.per_period(), reset_after);
            let after = Counts {
                current: current + cost,
                ..counts
            };
            return (decision, self.pack(after));
        }
        let estimate = self.weighted(previous, elapsed) + current;
        let reset_at = |current: u64, previous: u64| {
            let start = u128::from(start);
            match (current, previous) {
                (0, 0) => None,
                (0, _) => Some(start + period),
                _ => Some(start + 2 * period),
            }
        };
        // Cost 0 is a probe: admitted even when a clock that stepped back
        // before the window's start sees the previous count at full weight.
        if estimate + cost <= limit || cost == 0 {
            let after = Counts {
                current: current + cost,
                ..counts
            };
            let reset_after = reset_at(after.current, previous).map_or(0, until);
            // At most the limit, a u32.
            let remaining = limit.saturating_sub(estimate + cost) as u32;
            let decision = Decision::allow(self.limit, remaining, reset_after);
            (decision, if cost > 0 { self.pack(after) } else { word })
        } else {
            let remaining = limit.saturating_sub(estimate) as u32;
            let reset_after = reset_at(current, previous).map_or(0, until);
            let retry_at = self.retry_at(counts, u128::from(start), cost);
            let decision = Decision::deny(self.limit, remaining, reset_after, until(retry_at));
            (decision, word)
        }
    }

    /// The earliest time at which a request of `cost` passes if nothing else
    /// arrives, given counts that deny it at their window's `start +
    /// elapsed`.
    #[inline(always)]
    fn retry_at(&self, counts: Counts, start: u128, cost: u64) -> u128 {
        let (period, limit) = (self.period, u64::from(self.limit));
        let (current, previous) = (counts.current, counts.previous);
        // `floor(room x period / by)` capped at the period; counts and costs
        // are below 2^21, so the product fits a u64 for periods below 2^43
        // ns (about 2.4 hours) and takes the u128 path only beyond.
        let share = |room: u64, by: u64| -> u64 {
            let quotient = match room.checked_mul(period) {
                Some(product) => product / by,
                None => (u128::from(room) * u128::from(period) / u128::from(by)) as u64,
            };
            quotient.min(period)
        };
        // Later in this window: ceil(previous x (period - e) / period) <= room
        // holds iff previous x (period - e) <= room x period, that is
        // e >= period - floor(room x period / previous).
        if let Some(room) = limit.checked_sub(current + cost) {
            // `previous` is not 0 here (with room, only it can cause the
            // denial); checked anyway.
            if previous > 0 {
                let shrink = share(room, previous);
                if shrink > 0 {
                    return start + u128::from(period - shrink);
                }
            }
        }
        // In the next window `current` becomes the previous count, and the
        // same rule applies with room = limit - cost (cost <= limit). With
        // no room at all the count must leave entirely, at the window after.
        let room = limit - cost;
        let wait = if current <= room {
            0
        } else if room == 0 {
            period
        } else {
            period - share(room, current)
        };
        start + u128::from(period) + u128::from(wait)
    }
}

impl SlidingWindowCounter {
    /// A state word saved at `then`, restored at `now` (see
    /// [`Snapshot`](crate::snapshot::Snapshot)): both counts move to the
    /// window holding the current window's moved end (and the one before).
    pub(crate) fn moved(&self, word: u64, then: u64, now: u64) -> Option<u64> {
        let counts = self.counts_at(word, then / self.period);
        if counts.current == 0 && counts.previous == 0 {
            return Some(0);
        }
        let window = super::moved_window(counts.window, self.period, then, now);
        Some(self.pack(Counts { window, ..counts }))
    }
}

/// Both counts keep the widest packing (20 bits each, any limit up to
/// `MAX_LIMIT`); a change keeps the period, else [`QuotaError::PeriodFixed`].
impl super::Adjust for SlidingWindowCounter {
    fn adjustable(quota: &Quota) -> Result<Self, QuotaError> {
        let count_bits = bits_for(MAX_LIMIT);
        Ok(SlidingWindowCounter {
            count_bits,
            tag: WindowTag::new(u64::BITS - 2 * count_bits, quota.period_nanos()),
            ..SlidingWindowCounter::from_quota(quota)?
        })
    }

    fn retune(&self, quota: &Quota) -> Result<Self, QuotaError> {
        super::adjustable::same_period(self.period, quota)?;
        let fresh = SlidingWindowCounter::from_quota(quota)?;
        if fresh.count_bits > self.count_bits {
            return Err(QuotaError::LimitTooLarge {
                limit: quota.limit().into(),
                max: (1 << self.count_bits) - 1,
            });
        }
        Ok(SlidingWindowCounter {
            limit: quota.limit(),
            ..*self
        })
    }
}

/// A denial that [`SlidingWindowCounter::decide`] left to be derived when
/// asked, computed whole: the counter of `limit`, `count_bits` and the
/// period `per_period` divides by, deciding `cost` on `word` at `now`.
pub(crate) fn denial(
    limit: u32,
    cost: u32,
    count_bits: u32,
    per_period: Divisor,
    now: u64,
    word: u64,
) -> Decision {
    let counter = SlidingWindowCounter {
        limit,
        period: per_period.d,
        count_bits,
        tag: WindowTag::from_divisor(u64::BITS - 2 * count_bits, per_period),
    };
    counter.decide_eager(word, now, cost).0
}

impl super::DecideWord for SlidingWindowCounter {
    #[inline(always)]
    fn decide_word(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        self.decide(word, now, cost)
    }
}

impl Algorithm for SlidingWindowCounter {
    /// `window_tag << 2b | current << b | previous`; 0: never seen.
    type State = AtomicU64;

    fn refund(&self, state: &AtomicU64, now: u64, cost: u32) -> u32 {
        let window = now / self.period;
        let taken = |counts: Counts| counts.current.min(u64::from(cost));
        // Relaxed: see `update_word`; the same compare-exchange on the same
        // word as a check.
        let refunded = state.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
            let counts = self.counts_at(word, window);
            let take = taken(counts);
            let current = counts.current - take;
            (take > 0).then(|| self.pack(Counts { current, ..counts }))
        });
        // At most `cost`.
        refunded.map_or(0, |word| taken(self.counts_at(word, window)) as u32)
    }

    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        let limit = quota.limit();
        if limit > MAX_LIMIT {
            return Err(QuotaError::LimitTooLarge {
                limit: limit.into(),
                max: MAX_LIMIT.into(),
            });
        }
        let period = quota.period_nanos();
        let count_bits = bits_for(limit);
        Ok(SlidingWindowCounter {
            limit,
            period,
            count_bits,
            tag: WindowTag::new(u64::BITS - 2 * count_bits, period),
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
        let counts = self.counts_at(state.load(Ordering::Relaxed), self.tag.window_of(now));
        counts.current == 0 && counts.previous == 0
    }

    fn capacity(&self) -> u32 {
        self.limit
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn counter(limit: u32, period: u64) -> SlidingWindowCounter {
        let quota = Quota::with_period(limit, Duration::from_nanos(period)).unwrap();
        SlidingWindowCounter::from_quota(&quota).unwrap()
    }

    #[test]
    fn refuses_limits_the_packing_cannot_count() {
        let quota = Quota::per_hour(MAX_LIMIT + 1).unwrap();
        assert_eq!(
            SlidingWindowCounter::from_quota(&quota),
            Err(QuotaError::LimitTooLarge {
                limit: 1 << 20,
                max: (1 << 20) - 1
            })
        );
        let top = SlidingWindowCounter::from_quota(&Quota::per_hour(MAX_LIMIT).unwrap()).unwrap();
        assert_eq!(top.count_bits, 20);
        let state = top.new_state();
        assert!(top.check(&state, 1, MAX_LIMIT).unwrap().is_allowed());
        assert!(!top.check(&state, 2, 1).unwrap().is_allowed());
    }

    #[test]
    fn previous_window_weighs_in_linearly_rounded_up() {
        let sw = counter(10, 100);
        let state = sw.new_state();
        assert!(sw.check(&state, 50, 10).unwrap().is_allowed());
        // Window 1, 30 ns in: ceil(10 x 70 / 100) = 7.
        let d = sw.peek(&state, 130, 1).unwrap();
        assert_eq!(d.remaining(), 2);
        // 65 ns in: 10 x 35 / 100 = 3.5, rounded up to 4.
        assert_eq!(sw.peek(&state, 165, 1).unwrap().remaining(), 5);
        assert!(sw.check(&state, 165, 6).unwrap().is_allowed());
        // Full: 4 + 6. The next unit fits once 10 x (100 - e) <= 300, e = 70.
        let d = sw.check(&state, 165, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 5);
        assert!(!sw.check(&state, 169, 1).unwrap().is_allowed());
        assert!(sw.check(&state, 170, 1).unwrap().is_allowed());
    }

    #[test]
    fn retry_after_can_lie_in_the_next_windows() {
        let sw = counter(10, 100);
        let state = sw.new_state();
        assert!(sw.check(&state, 10, 8).unwrap().is_allowed());
        // Same window, cost 3 needs 11: next window, where 8 x (100 - e)
        // <= 7 x 100 from e = 13 (8 x 87 = 696).
        let d = sw.check(&state, 20, 3).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 93);
        assert_eq!(d.reset_after_nanos(), 180);
        assert!(!sw.check(&state, 112, 3).unwrap().is_allowed());
        assert!(sw.check(&state, 113, 3).unwrap().is_allowed());
        // Cost 10 needs every count gone: the start of window 3.
        let d = sw.check(&state, 150, 10).unwrap();
        assert_eq!(d.retry_after_nanos(), 150);
        assert_eq!(d.reset_after_nanos(), 150);
        assert!(sw.check(&state, 300, 10).unwrap().is_allowed());
    }

    #[test]
    fn rollover_and_idleness() {
        let sw = counter(4, 10);
        let state = sw.new_state();
        assert!(sw.is_idle(&state, 0));
        let d = sw.check(&state, 5, 1).unwrap();
        assert_eq!(d.reset_after_nanos(), 15);
        assert!(!sw.is_idle(&state, 19));
        assert!(sw.is_idle(&state, 20));
        // Cost 0 passes and writes nothing.
        let d = sw.check(&state, 12, 0).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.reset_after_nanos(), 8);
        // Two windows on, both counts are gone.
        let d = sw.check(&state, 25, 4).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
    }

    #[test]
    fn clock_stepping_back_counts_as_the_windows_start() {
        let sw = counter(10, 100);
        let state = sw.new_state();
        assert!(sw.check(&state, 50, 10).unwrap().is_allowed());
        assert!(sw.check(&state, 190, 9).unwrap().is_allowed());
        // Back to window 0: seen as time 100, where the previous 10 weigh 10.
        let d = sw.check(&state, 60, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert!(!sw.is_idle(&state, 60));
        // Back within window 1: the previous count weighs more again.
        assert!(!sw.check(&state, 150, 1).unwrap().is_allowed());
        assert!(sw.check(&state, 200, 1).unwrap().is_allowed());
    }

    #[test]
    fn window_tag_wrap_only_ever_denies() {
        // The largest limit leaves 24 tag bits; windows of 2^20 - 1 ns.
        let sw = counter(MAX_LIMIT, u64::from(MAX_LIMIT));
        let p = u64::from(MAX_LIMIT);
        let state = sw.new_state();
        assert!(sw.check(&state, 0, MAX_LIMIT).unwrap().is_allowed());
        // Within 2^23 windows the tag decodes exactly: long over.
        assert!(sw.is_idle(&state, 5 * p));
        assert!(
            sw.peek(&state, (1 << 23) * p, MAX_LIMIT)
                .unwrap()
                .is_allowed()
        );
        // 2^24 windows on, the tag repeats: the stale count reads as
        // current and denies, never the other way round.
        let d = sw.peek(&state, (1 << 24) * p, 1).unwrap();
        assert!(!d.is_allowed());
        assert!(!sw.is_idle(&state, (1 << 24) * p));
    }

    #[test]
    fn end_of_the_clock() {
        let sw = counter(2, 10);
        let state = sw.new_state();
        // The last window starts at u64::MAX - 5 and ends past the clock.
        let d = sw.check(&state, u64::MAX, 2).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.reset_after_nanos(), 15);
        // Next window: 2 x (10 - e) <= 1 x 10 from e = 5.
        let d = sw.check(&state, u64::MAX, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 10);
        // Durations beyond u64 nanoseconds saturate.
        let huge = SlidingWindowCounter::from_quota(
            &Quota::with_period(1, Duration::from_nanos(u64::MAX)).unwrap(),
        )
        .unwrap();
        let state = huge.new_state();
        assert!(huge.check(&state, 7, 1).unwrap().is_allowed());
        let d = huge.check(&state, 7, 1).unwrap();
        assert_eq!(
            (d.reset_after_nanos(), d.retry_after_nanos()),
            (u64::MAX, u64::MAX)
        );
    }
}
