//! Token bucket as GCRA, the generic cell rate algorithm (ITU-T I.371),
//! on one `AtomicU64`.
//!
//! GCRA keeps a single number per key, the *theoretical arrival time* (TAT):
//! the time at which the bucket would be full again. A request of cost `c`
//! at `now` moves it to `max(TAT, now) + c x T`, where `T` is the emission
//! interval (period / limit), and is admitted if the bucket would then hold
//! no more than its capacity, `new TAT - now <= capacity x T` (the burst
//! tolerance `tau`). This is exactly a token bucket of `capacity` tokens
//! refilled one per `T`, without a timer and in one word.

use super::{Algorithm, Divisor, check_cost, update_word};
use crate::sync::{AtomicU64, Ordering};
use crate::{CheckError, Decision, Quota, QuotaError};

/// The largest burst tolerance (`capacity x interval`) a token bucket
/// accepts: 2^63 - 1 ns, about 292 years, so that the TAT of a bucket whose
/// clock has not yet passed the other half of `u64` time never overflows.
pub(crate) const MAX_TAU: u64 = u64::MAX / 2;

/// Token bucket (GCRA): `capacity` requests at once, refilled at the quota's
/// rate. The capacity is the quota's burst, by default its limit.
///
/// State: one `AtomicU64` per key (the theoretical arrival time, 0 for a key
/// never seen), updated by compare-exchange. Denials write nothing, and
/// neither does a check of cost 0: a probe that is always admitted and
/// reports the bucket as it is, even after the clock stepped back.
///
/// The burst tolerance, `capacity x interval`, must be at most 2^63 - 1 ns
/// (about 292 years; [`QuotaError::BurstOverflow`] otherwise), so the state
/// cannot overflow while the clock is in the first half of `u64` time.
/// `remaining` counts only requests whose TAT still fits in `u64`, so it
/// stays exact at the end of time too.
///
/// The emission interval is `period / limit` rounded *up* to a whole
/// nanosecond ([`Quota::emission_interval_nanos`]), so the bucket never
/// admits faster than configured: over any span of `t` nanoseconds it admits
/// at most `capacity + limit x t / period` (exactly, not on average). A rate
/// that does not divide the period evenly runs less than one nanosecond per
/// request slow instead (for 167 per minute, 1 part in 4e8).
///
/// # Refund
///
/// A refund of `cost` moves the TAT back by `cost x interval`, but never
/// below `now`: the tokens go back into the bucket as it is now, never past
/// full (so a bucket that refilled in between keeps its refill, as Bucket4j's
/// `addTokens` does, and a full bucket takes nothing back).
///
/// # Examples
///
/// ```
/// use rategate::{ManualClock, Quota, RateLimiter, TokenBucket};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let quota = Quota::per_minute(100)?.burst(20)?;
/// let limiter = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone())?;
/// let admitted = (0..30).filter(|_| limiter.check().is_allowed()).count();
/// assert_eq!(admitted, 20);
/// clock.advance(Duration::from_millis(600)); // one token every 600 ms
/// assert!(limiter.check().is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Nanoseconds per token, at least 1.
    interval: u64,
    /// Tokens the bucket holds when full, at least 1.
    capacity: u32,
    /// `capacity x interval`, checked not to overflow.
    tau: u64,
    /// Division by `interval` without a hardware divide.
    per_interval: Divisor,
}

impl TokenBucket {
    /// The pure decision core: given the stored TAT, decide a request of
    /// `cost` (at most the capacity) at `now`. Returns the decision and the
    /// TAT to store: a new one when admitted at cost 1 or more (it always
    /// moves by at least one interval), else `tat` itself (nothing to write).
    #[inline]
    pub(crate) fn decide(&self, tat: u64, now: u64, cost: u32) -> (Decision, u64) {
        // A TAT in the past means a full bucket: start from now. A `now` that
        // went backwards leaves `base = tat`: no time elapsed.
        let base = tat.max(now);
        // How far ahead of now the bucket already is (tau or less, unless the
        // clock stepped back).
        let used = base - now;
        // cost <= capacity, so this is at most tau: no overflow.
        let increment = u64::from(cost) * self.interval;
        // A TAT past u64::MAX nanoseconds (584 years from the origin) cannot
        // be stored: such a request is denied rather than granted on a
        // saturated state.
        let new_tat = base.checked_add(increment);
        match new_tat {
            // Admitted when the bucket would then be at most tau ahead
            // (`used + increment <= tau`, written so it cannot overflow).
            // Cost 0 is a probe: admitted whatever the state (even after a
            // step back put `used` past tau), and nothing is written.
            Some(new_tat) if (used <= self.tau && increment <= self.tau - used) || cost == 0 => {
                let ahead = used + increment;
                let room = self.room(new_tat, ahead);
                let decision = Decision::allow_per(self.capacity, room, self.per_interval, ahead);
                // A probe's `new_tat` is `max(tat, now)`: keep `tat`.
                (decision, if cost > 0 { new_tat } else { tat })
            }
            _ => (self.denial(base, used, increment, new_tat.is_some()), tat),
        }
    }

    /// A state word saved at `then`, restored at `now` (see
    /// [`Snapshot`](crate::snapshot::Snapshot)): the TAT moves with the clock.
    pub(crate) fn moved(&self, tat: u64, then: u64, now: u64) -> Option<u64> {
        Some(if tat == 0 {
            0
        } else {
            super::moved_time(tat, then, now)
        })
    }

    /// The decision for a request of `increment` nanoseconds that does not
    /// fit: the bucket is `used` ahead of now at `base`.
    #[inline]
    fn denial(&self, base: u64, used: u64, increment: u64, storable: bool) -> Decision {
        let room = self.room(base, used);
        // A TAT past u64::MAX stays past it at any later `now`: the request
        // never passes (u64::MAX: never). Otherwise it passes once the bucket
        // has drained to `tau - increment` ahead of now.
        let retry_after = if storable {
            used + increment - self.tau
        } else {
            u64::MAX
        };
        Decision::deny_per(self.capacity, room, self.per_interval, used, retry_after)
    }

    /// The room for cost-1 requests after a state whose TAT is `tat`,
    /// `ahead` of now, in nanoseconds: each request needs one interval within
    /// the burst tolerance, and one interval before the TAT reaches u64::MAX
    /// (which matters only within `tau` of the end of time, where it keeps
    /// `remaining` exact). `remaining` is this divided by the interval, which
    /// the decision does when asked: room <= tau = capacity x interval, so
    /// the quotient fits a u32.
    #[inline]
    fn room(&self, tat: u64, ahead: u64) -> u64 {
        self.tau.saturating_sub(ahead).min(u64::MAX - tat)
    }
}

impl super::DecideWord for TokenBucket {
    #[inline]
    fn decide_word(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        self.decide(word, now, cost)
    }
}

impl Algorithm for TokenBucket {
    /// The theoretical arrival time in nanoseconds; 0: never seen.
    type State = AtomicU64;

    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        let interval = quota.emission_interval_nanos();
        let capacity = quota.burst_or(quota.limit());
        // A bucket whose tolerance reaches past half of u64 time could not
        // work for long: its TAT would overflow once the clock passes the
        // other half. Refuse it rather than deny every check later.
        let tau = interval
            .checked_mul(u64::from(capacity))
            .filter(|&tau| tau <= MAX_TAU)
            .ok_or(QuotaError::BurstOverflow)?;
        Ok(TokenBucket {
            interval,
            capacity,
            tau,
            per_interval: Divisor::new(interval),
        })
    }

    fn new_state(&self) -> AtomicU64 {
        AtomicU64::new(0)
    }

    #[inline]
    fn check(&self, state: &AtomicU64, now: u64, cost: u32) -> Result<Decision, CheckError> {
        check_cost(cost, self.capacity)?;
        // The shared compare-exchange loop; its comment argues the orderings.
        Ok(update_word(state, self, now, cost))
    }

    #[inline]
    fn peek(&self, state: &AtomicU64, now: u64, cost: u32) -> Result<Decision, CheckError> {
        check_cost(cost, self.capacity)?;
        // Relaxed: see `update_word`.
        Ok(self.decide(state.load(Ordering::Relaxed), now, cost).0)
    }

    #[inline]
    fn is_idle(&self, state: &AtomicU64, now: u64) -> bool {
        // Relaxed: see `update_word`. Callers that drop the key hold a lock that
        // excludes concurrent checks of it.
        state.load(Ordering::Relaxed) <= now
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn refund(&self, state: &AtomicU64, now: u64, cost: u32) -> u32 {
        let back = u64::from(cost).saturating_mul(self.interval);
        let lowered = |tat: u64| tat.saturating_sub(back).max(now);
        // Relaxed: see `update_word`; the same compare-exchange on the same
        // word as a check, so a racing check sees the TAT before or after.
        let refunded = state.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
            // A TAT at or before now is a full bucket: nothing to give back.
            (tat > now && cost > 0).then(|| lowered(tat))
        });
        refunded.map_or(0, |tat| {
            // At most `back`, so the quotient is at most `cost`.
            self.per_interval.divide_ceil(tat - lowered(tat)) as u32
        })
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    fn bucket(limit: u32, period: u64, burst: u32) -> TokenBucket {
        let quota = Quota::with_period(limit, std::time::Duration::from_nanos(period))
            .unwrap()
            .burst(burst)
            .unwrap();
        TokenBucket::from_quota(&quota).unwrap()
    }

    #[test]
    fn fresh_bucket_admits_capacity_then_denies() {
        let tb = bucket(10, 1000, 3); // one token per 100 ns, 3 at once
        let state = tb.new_state();
        for left in (0..3).rev() {
            let d = tb.check(&state, 0, 1).unwrap();
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), left);
        }
        let d = tb.check(&state, 0, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 100);
        assert_eq!(d.reset_after_nanos(), 300);
        assert!(tb.check(&state, 100, 1).unwrap().is_allowed());
    }

    #[test]
    fn cost_above_capacity_is_an_error() {
        let tb = bucket(10, 1000, 3);
        let state = tb.new_state();
        assert_eq!(
            tb.check(&state, 0, 4),
            Err(CheckError::CostExceedsCapacity {
                cost: 4,
                capacity: 3
            })
        );
        assert!(tb.check(&state, 0, 3).unwrap().is_allowed());
    }

    #[test]
    fn time_going_back_grants_nothing_extra() {
        let tb = bucket(10, 1000, 2);
        let state = tb.new_state();
        assert!(tb.check(&state, 1_000, 2).unwrap().is_allowed());
        // An earlier reading: still empty, retry measured from that reading.
        let d = tb.check(&state, 900, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert!(!tb.check(&state, 1_000, 1).unwrap().is_allowed());
        assert!(tb.check(&state, 1_100, 1).unwrap().is_allowed());
    }

    #[test]
    fn peek_does_not_consume_and_idle_means_full() {
        let tb = bucket(1, 50, 1);
        let state = tb.new_state();
        assert!(tb.is_idle(&state, 0));
        assert!(tb.peek(&state, 0, 1).unwrap().is_allowed());
        assert!(tb.peek(&state, 0, 1).unwrap().is_allowed());
        assert!(tb.check(&state, 0, 1).unwrap().is_allowed());
        assert!(!tb.is_idle(&state, 49));
        assert!(tb.is_idle(&state, 50));
    }

    #[test]
    fn tat_beyond_u64_is_denied_not_wrapped() {
        let tb = bucket(1, 1 << 40, 4);
        let state = tb.new_state();
        let d = tb.check(&state, u64::MAX - 1, 4).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), u64::MAX); // never, at a later time
        let edge = u64::MAX - (4 << 40);
        assert!(tb.check(&state, edge, 4).unwrap().is_allowed());
        assert!(!tb.check(&state, edge, 1).unwrap().is_allowed());
    }
}
