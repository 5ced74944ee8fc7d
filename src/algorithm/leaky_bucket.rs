//! Leaky bucket with nginx `limit_req` semantics, on one `AtomicU64`.
//!
//! This is the algorithm of nginx's `ngx_http_limit_req_module.c`
//! (`ngx_http_limit_req_lookup` and `ngx_http_limit_req_account`),
//! transcribed with its integer units so that a configuration behaves as it
//! does in nginx:
//!
//! * the rate is kept in thousandths of a request per second: `10r/s` is
//!   10 000 and `100r/m` is `100 * 1000 / 60` = 1 666, truncated as nginx
//!   does. A quota of `limit` per any other period uses
//!   `limit * 10^12 / period_ns` truncated, which is `limit * 10^6 /
//!   period_ms` for whole milliseconds and gives nginx's numbers for `r/s`
//!   and `r/m`;
//! * time is whole milliseconds, `now_ms = now_ns / 1_000_000`;
//! * per key, `excess` (thousandths of a request) and `last` (ms). A request
//!   at `now_ms` computes `ms = now_ms - last` and
//!   `excess = old - rate * ms / 1000 + 1000`, floored at zero; it is
//!   rejected if `excess > burst * 1000`, and otherwise stores `excess` and,
//!   only if `ms != 0`, `last = now_ms`. A rejected request changes nothing.
//!   A key's first request stores `excess = 0, last = now_ms`;
//! * an admitted request whose `excess` is above `delay * 1000` waits
//!   `(excess - delay * 1000) * 1000 / rate` ms (truncated), where `delay` is
//!   0 by default ([`Delay::Smooth`], every excess request waits its turn),
//!   `burst` with `nodelay` ([`Delay::NoDelay`]), or `n` with `delay=n`
//!   ([`Delay::After`], two-stage limiting). The wait is returned in
//!   [`Decision::delay`]; the caller sleeps, where nginx holds the request.
//!
//! The burst has nginx's meaning: how many requests beyond the rate may be
//! queued (default 0), so `burst + 1` requests pass at once.
//!
//! # Where this differs from nginx
//!
//! * **Cost-weighted requests** are an extension: a request of cost `c`
//!   adds `1000 * c`. So that a bucket never holds more than `burst + 1`
//!   requests, the drain floors the level at one request *below* empty
//!   before the cost is added:
//!   `excess = max(old - rate * ms / 1000, -1000) + 1000 * c`.
//!   For `c = 1` this is exactly nginx's
//!   `max(old - rate * ms / 1000 + 1000, 0)`; for any cost, a long-idle key
//!   and a new key decide alike (a new key's first request of cost `c`
//!   leaves `1000 * (c - 1)`). Clamping after adding, as nginx does for one
//!   request, would let a long-idle key take a cost of `burst + 1` with an
//!   excess of 0 and then `burst` more at once.
//!   A cost of 0 is always admitted and records nothing.
//! * **Time going backwards**: nginx counts a step back of up to 60 s as
//!   `ms = 0` and a longer one as `ms = 1` (then moves `last` back to the
//!   earlier time, which lets the bucket drain the same interval twice).
//!   Here every step back counts as `ms = 0` and `last` stays, so a clock
//!   that steps back never grants anything.
//! * nginx reads a cached per-event-loop millisecond clock
//!   (`ngx_current_msec`); here each check reads the limiter's clock.
//! * One limiter is one `limit_req` zone; nginx's several `limit_req`
//!   directives on one request (checked all, accounted together) are for
//!   the caller to compose.
//! * nginx forgets a key after its node is least recently used and drained
//!   for 60 s; here a keyed limiter's sweep drops a key as soon as it is
//!   idle (drained to a new key's state).
//! * The decision also reports `remaining`, `reset_after` and
//!   `retry_after`, which nginx does not compute.

use super::{Algorithm, Divisor, check_cost, update_word};
use crate::sync::{AtomicU64, Ordering};
use crate::{CheckError, Decision, Delay, Quota, QuotaError};

const NANOS_PER_MS: u64 = 1_000_000;
/// Thousandths of a request per request.
const UNIT: u64 = 1_000;
/// A decision's `remaining` is its room in thousandths divided by this,
/// when asked: the check itself does not divide.
const PER_UNIT: Divisor = Divisor::new(UNIT);
/// Low bits of the state word: the excess, in thousandths.
const EXCESS_BITS: u32 = 23;
const EXCESS_MASK: u64 = (1 << EXCESS_BITS) - 1;
/// The latest millisecond the state word can hold: the high 41 bits hold
/// `last_ms + 1`, so that the word 0 means "never seen".
const MAX_MS: u64 = (1 << (64 - EXCESS_BITS)) - 2;

/// Leaky bucket as nginx's `limit_req`: a rate (the quota's), a burst of
/// excess requests queued beyond it (the quota's explicit burst, default 0)
/// and a delay mode (the quota's [`Delay`]).
///
/// State: one `AtomicU64` per key, updated by compare-exchange; denials
/// write nothing. The word packs the excess in thousandths of a request in
/// its low 23 bits and `last_ms + 1` in its high 41 bits (0: never seen).
///
/// # Decision fields
///
/// * `limit`: `burst + 1`.
/// * `remaining`: cost-1 requests that would pass right after this one,
///   `(burst * 1000 - excess) / 1000` (`burst + 1` only on an idle key).
/// * `reset_after`: until the key has drained to a new key's state (the
///   excess plus the request in service, `excess + 1000`, drained), when
///   `remaining` is back to `burst + 1` and a sweep may drop the key. That is
///   one request's drain (`1000 / rate` s) after the excess itself reaches 0.
/// * `retry_after` (denials): until the millisecond at which the drain since
///   `last` has made room for the same cost. The milliseconds are rounded up,
///   as nginx only drains whole ones, and the wait is exact to the
///   nanosecond from `now`: the request passes then and not one nanosecond
///   earlier.
/// * `delay` (admissions): nginx's wait, truncated to whole milliseconds.
///
/// Times that fall after the last millisecond the state can hold (below)
/// are `u64::MAX`: never.
///
/// # Refund
///
/// A refund pours `cost` requests of water back out: the level drained to
/// `now` falls by `1000 x cost`, never below a new key's level (one request
/// below empty, where the key becomes one never seen). The stored excess
/// cannot go below empty, so a refund that would leave the level between
/// the two keeps it at empty: less room than exact, never more.
///
/// # Limits of the packing
///
/// * The burst is at most [`LeakyBucket::MAX_BURST`] (8 388: `burst * 1000`
///   must fit 23 bits); larger ones are refused with
///   [`QuotaError::LimitTooLarge`].
/// * `last_ms` is stored whole, without wrapping, up to `2^41 - 2` ms
///   (about 69.7 years) from the clock's origin. A later reading counts as
///   that last millisecond: the bucket stops draining, so it never admits
///   more, and a limiter that old denies once its burst is spent.
/// * The rate must be at least one thousandth of a request per second (one
///   request per 1000 s; nginx's slowest is `1r/m`); slower quotas are
///   refused with [`QuotaError::RateTooLow`].
///
/// # Examples
///
/// nginx's `limit_req zone=one burst=5` on a `rate=1r/s` zone:
///
/// ```
/// use rategate::{LeakyBucket, ManualClock, Quota, RateLimiter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let quota: Quota = "1r/s burst=5".parse()?;
/// let limiter = RateLimiter::<LeakyBucket, _>::with_clock(quota, clock.clone())?;
/// let first = limiter.check();
/// assert!(first.is_allowed() && first.delay().is_zero());
/// // The 5 excess requests are queued, one second apart...
/// for queued in 1..=5 {
///     let d = limiter.check();
///     assert!(d.is_allowed());
///     assert_eq!(d.delay(), Duration::from_secs(queued));
/// }
/// // ...and a 7th finds the queue full.
/// let rejected = limiter.check();
/// assert!(!rejected.is_allowed());
/// assert_eq!(rejected.retry_after(), Duration::from_secs(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    /// The drain rate in thousandths of a request per second (nginx's
    /// `ctx->rate`), between 1 and 10^12.
    rate: u64,
    /// Division by `rate` without a hardware divide.
    per_rate: Divisor,
    /// `burst * 1000`, the most excess an admitted request may leave
    /// (nginx's `limit->burst`); at most `EXCESS_MASK`.
    burst: u64,
    /// The excess above which an admitted request is delayed, in
    /// thousandths (nginx's `limit->delay`).
    delay: u64,
    /// `burst + 1`: the most requests that pass at once.
    capacity: u32,
}

/// A key's state unpacked: the excess in thousandths and the millisecond
/// of the last admission that moved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    excess: u64,
    last_ms: u64,
}

impl Slot {
    /// `None` for the word of a key never seen.
    #[inline]
    fn unpack(word: u64) -> Option<Slot> {
        let time = word >> EXCESS_BITS;
        time.checked_sub(1).map(|last_ms| Slot {
            excess: word & EXCESS_MASK,
            last_ms,
        })
    }

    /// `excess <= EXCESS_MASK` and `last_ms <= MAX_MS`, so the word is
    /// nonzero and unpacks to `self`.
    #[inline]
    fn pack(self) -> u64 {
        ((self.last_ms + 1) << EXCESS_BITS) | self.excess
    }
}

/// Nanoseconds from `now` until millisecond `ms` starts (0 if it has), or
/// `u64::MAX` (never) past the last millisecond the state can hold.
#[inline]
fn until_ms(ms: u64, now: u64) -> u64 {
    if ms > MAX_MS {
        return u64::MAX;
    }
    // ms <= MAX_MS < 2^41: the product is below 2^61.
    (ms * NANOS_PER_MS).saturating_sub(now)
}

/// The level `slot` has drained to at `now_ms` at `rate`, in thousandths,
/// floored at one request below empty (a new key's level), and the `last`
/// an update at `now_ms` stores.
#[inline]
fn drained(rate: u64, slot: Slot, now_ms: u64) -> (i64, u64) {
    // A step back counts as no time elapsed and keeps `last`.
    let ms = now_ms.saturating_sub(slot.last_ms);
    // Saturation is harmless: any leak past the excess floors.
    // leak <= u64::MAX / 1000 < i64::MAX.
    let leak = rate.saturating_mul(ms) / UNIT;
    let level = (slot.excess as i64 - leak as i64).max(-(UNIT as i64));
    (level, if ms != 0 { now_ms } else { slot.last_ms })
}

impl LeakyBucket {
    /// The largest burst the packed state supports.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::{Algorithm, LeakyBucket, Quota, QuotaError};
    ///
    /// let max = Quota::per_second(10)?.burst(LeakyBucket::MAX_BURST)?;
    /// assert!(LeakyBucket::from_quota(&max).is_ok());
    /// let over = Quota::per_second(10)?.burst(LeakyBucket::MAX_BURST + 1)?;
    /// assert!(matches!(
    ///     LeakyBucket::from_quota(&over),
    ///     Err(QuotaError::LimitTooLarge { .. })
    /// ));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub const MAX_BURST: u32 = (EXCESS_MASK / UNIT) as u32;

    /// A state word saved at `then`, restored at `now` (see
    /// [`Snapshot`](crate::snapshot::Snapshot)): `last` moves with the clock,
    /// rounded up to a whole millisecond (less drain, never more).
    pub(crate) fn moved(&self, word: u64, then: u64, now: u64) -> Option<u64> {
        let Some(slot) = Slot::unpack(word) else {
            return Some(0);
        };
        let last = super::moved_time(slot.last_ms * NANOS_PER_MS, then, now);
        let last_ms = last.div_ceil(NANOS_PER_MS).min(MAX_MS);
        Some(Slot { last_ms, ..slot }.pack())
    }

    /// The level `slot` has drained to at `now_ms`, in thousandths, floored
    /// at one request below empty (a new key's level), and the `last` an
    /// update at `now_ms` stores.
    #[inline]
    fn drained(&self, slot: Slot, now_ms: u64) -> (i64, u64) {
        drained(self.rate, slot, now_ms)
    }

    /// The pure decision core: given the stored word, decide a request of
    /// `cost` (at most the capacity) at `now`. Returns the decision and the
    /// word to store: a new one when the request is admitted with a cost
    /// (its excess or time then differs from the stored slot's, or it is a
    /// new key's first), else `word` itself (nothing to write).
    // Always inlined: as a call, the check's compare-exchange loop received
    // the decision through the stack, in pieces the CPU cannot forward to
    // the loads that read it back (the figures are at `update_word`).
    #[inline(always)]
    pub(crate) fn decide(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        // A denial first, decided without draining. The request is denied
        // iff its excess, `stored - leak + 1000 x cost`, exceeds the burst
        // (the floors below cannot matter then), that is iff the leak falls
        // short of `need`; `leak = rate x ms / 1000` (truncated) reaches it
        // first after `drain_ms(need)` ms, so the request is denied iff
        // `now_ms < last_ms + drain_ms(need)` (a step back, `now_ms <
        // last_ms`, counts as no time elapsed: denied too, as drain_ms >= 1
        // for need >= 1). That millisecond is the retry time's, and the
        // test compares it with the reading in nanoseconds: the state's
        // chain of arithmetic runs alongside the clock's, which the
        // comparison alone then waits for. The decision keeps what its
        // accessors need to derive the rest (see `Decision::deny_leaky`).
        let stored = Slot::unpack(word);
        if let Some(slot) = stored {
            // cost <= MAX_BURST + 1 and burst, excess < 2^24: small.
            let need = (slot.excess + UNIT * u64::from(cost)) as i64 - self.burst as i64;
            if need > 0 {
                let fits_ms = slot.last_ms + drain_ms(self.per_rate, need as u64);
                // floor(now / 10^6), clamped at MAX_MS, is below `fits_ms`.
                let denied = fits_ms > MAX_MS
                    || fits_ms
                        .checked_mul(NANOS_PER_MS)
                        .is_none_or(|fits| now < fits);
                if denied {
                    return self.denial(word, now, cost);
                }
            }
        }
        let now_ms = (now / NANOS_PER_MS).min(MAX_MS);
        // The level the drain leaves at now_ms, in thousandths, floored at
        // one request below empty (a new key's level), and the `last` an
        // admission would store.
        let (level, last_ms) = match stored {
            None => (-(UNIT as i64), now_ms),
            Some(slot) => self.drained(slot, now_ms),
        };
        // cost <= MAX_BURST + 1: the product is small.
        let excess = (level + (UNIT * u64::from(cost)) as i64).max(0) as u64;

        if excess <= self.burst {
            let over = excess.saturating_sub(self.delay);
            // No division for a request that is not delayed (nodelay mode,
            // or within the delay allowance).
            let delay_ms = if over == 0 {
                0
            } else {
                self.per_rate.divide(over * UNIT)
            };
            if cost > 0 {
                // An admission: its `remaining` (the room below the burst)
                // and reset time (a division by the drain rate) are derived
                // when asked from the slot it stores (see
                // `Decision::allow_leaky`).
                let slot = Slot { excess, last_ms }.pack();
                let decision = Decision::allow_leaky(self.capacity, slot, now, self.per_rate);
                return (decision.with_delay(delay_ms * NANOS_PER_MS), slot);
            }
            // A probe (cost 0) records nothing: it reports the drained level
            // (each further cost-1 request adds 1000); `remaining` is this
            // room in whole requests, divided when asked.
            let room = (self.burst as i64 - level) as u64;
            let decision =
                Decision::allow_per(self.capacity, room, PER_UNIT, self.reset(stored, now));
            (decision.with_delay(delay_ms * NANOS_PER_MS), word)
        } else {
            // Unreachable: the test above denies every request this would
            // (see there). Kept as the same denial, should the two ever
            // disagree, rather than an admission past the burst.
            self.denial(word, now, cost)
        }
    }

    /// The denial of `cost` on the slot `word` at `now`: what its accessors
    /// need to derive every field (see `Decision::deny_leaky`), and the word
    /// unchanged.
    #[inline(always)]
    fn denial(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        // `UNIT * cost - burst` fits an i32: cost <= MAX_BURST + 1 and
        // burst <= 1000 * MAX_BURST, both below 2^24.
        let shift = (UNIT * u64::from(cost)) as i64 - self.burst as i64;
        let decision = Decision::deny_leaky(self.capacity, shift as i32, word, now, self.per_rate);
        (decision, word)
    }

    /// Nanoseconds from `now` until the stored `slot` has drained to a new
    /// key's level (one request below empty), when `remaining` is back to
    /// the capacity and the key is idle.
    #[inline]
    fn reset(&self, slot: Option<Slot>, now: u64) -> u64 {
        slot.map_or(0, |s| {
            until_ms(s.last_ms + drain_ms(self.per_rate, s.excess + UNIT), now)
        })
    }
}

/// The smallest `ms` after which a drain at `per_rate` has removed at least
/// `amount` thousandths: `rate * ms / 1000 >= amount` (the division
/// truncates, as nginx's does).
#[inline]
fn drain_ms(per_rate: Divisor, amount: u64) -> u64 {
    // amount <= excess + 1000 * cost < 2^25: the product is small.
    per_rate.divide_ceil(amount * UNIT)
}

/// A denial's `(reset_after, retry_after)` in nanoseconds, from what the
/// check stored in its [`Decision`]: the slot `word` it was denied on, the
/// cost less the burst in thousandths (`shift`), the reading `now` and the
/// drain rate. The same values the check computed before it left them to
/// the accessors: the reset is when the slot (and the request in service)
/// has drained, the retry when the drain since `last` has removed what the
/// cost overshoots by.
pub(crate) fn denial_times(word: u64, shift: i32, now: u64, per_rate: Divisor) -> (u64, u64) {
    // A denial's word is a known key's; a 0 (never seen) is the fresh slot
    // the check would have started at `now`.
    let slot = Slot::unpack(word).unwrap_or(Slot {
        excess: 0,
        last_ms: (now / NANOS_PER_MS).min(MAX_MS),
    });
    let reset = until_ms(slot.last_ms + drain_ms(per_rate, slot.excess + UNIT), now);
    // excess + 1000 * cost - burst, floored at zero.
    let over = (slot.excess as i64 + i64::from(shift)).max(0) as u64;
    let retry = until_ms(slot.last_ms + drain_ms(per_rate, over), now);
    (reset, retry)
}

/// An admission's `(remaining, reset_after)` from what the check stored in
/// its [`Decision`]: the slot `word` it stored, the reading `now`, the
/// drain rate and the bucket's `capacity`. The values the check would have
/// computed: the room the admission left below the burst, in whole
/// requests, and the time until the slot (this request included) drains.
pub(crate) fn admission_fields(
    word: u64,
    now: u64,
    per_rate: Divisor,
    capacity: u32,
) -> (u32, u64) {
    // An admission stores a known key's slot, never 0.
    let Some(slot) = Slot::unpack(word) else {
        return (capacity, 0);
    };
    // capacity = burst + 1, and burst <= MAX_BURST: small.
    let burst = (u64::from(capacity) - 1) * UNIT;
    let remaining = (burst.saturating_sub(slot.excess) / UNIT) as u32;
    let reset = until_ms(slot.last_ms + drain_ms(per_rate, slot.excess + UNIT), now);
    (remaining, reset)
}

/// A denial's `remaining` from what the check stored in its [`Decision`]
/// (see [`denial_times`]): the room the slot `word` has left at `now`
/// below the burst of a bucket of `capacity`, in whole requests.
pub(crate) fn denial_remaining(word: u64, now: u64, per_rate: Divisor, capacity: u32) -> u32 {
    let now_ms = (now / NANOS_PER_MS).min(MAX_MS);
    let level =
        Slot::unpack(word).map_or(-(UNIT as i64), |slot| drained(per_rate.d, slot, now_ms).0);
    // capacity = burst + 1, and burst <= MAX_BURST: small.
    let burst = (u64::from(capacity) - 1) * UNIT;
    ((burst as i64 - level).max(0) as u64 / UNIT) as u32
}

impl super::DecideWord for LeakyBucket {
    #[inline(always)]
    fn decide_word(&self, word: u64, now: u64, cost: u32) -> (Decision, u64) {
        self.decide(word, now, cost)
    }
}

impl Algorithm for LeakyBucket {
    /// The packed `(excess, last_ms + 1)`; 0: never seen.
    type State = AtomicU64;

    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        // limit <= period (at most one per ns), so rate <= 10^12.
        let rate = u128::from(quota.limit()) * 1_000_000_000_000 / u128::from(quota.period_nanos());
        if rate == 0 {
            return Err(QuotaError::RateTooLow {
                limit: quota.limit().into(),
                period_nanos: quota.period_nanos(),
            });
        }
        let burst = quota.explicit_burst().unwrap_or(0);
        if burst > Self::MAX_BURST {
            return Err(QuotaError::LimitTooLarge {
                limit: burst.into(),
                max: Self::MAX_BURST.into(),
            });
        }
        let delay = match quota.delay_mode() {
            Delay::Smooth => 0,
            Delay::NoDelay => burst,
            Delay::After(n) => n,
        };
        Ok(LeakyBucket {
            rate: rate as u64,
            per_rate: Divisor::new(rate as u64),
            burst: u64::from(burst) * UNIT,
            delay: u64::from(delay) * UNIT,
            capacity: burst + 1,
        })
    }

    fn new_state(&self) -> AtomicU64 {
        AtomicU64::new(0)
    }

    // Always inlined: left a call (in some callers it was), the decision
    // came back through the stack (the figures are at `update_word`).
    #[inline(always)]
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
        Slot::unpack(state.load(Ordering::Relaxed)).is_none_or(|slot| {
            let now_ms = (now / NANOS_PER_MS).min(MAX_MS);
            now_ms.saturating_sub(slot.last_ms) >= drain_ms(self.per_rate, slot.excess + UNIT)
        })
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn refund(&self, state: &AtomicU64, now: u64, cost: u32) -> u32 {
        let now_ms = (now / NANOS_PER_MS).min(MAX_MS);
        let floor = -(UNIT as i64);
        // The drained level and `last` of `word`, for a known key.
        let drained_at = |word| Slot::unpack(word).map(|slot| self.drained(slot, now_ms));
        // u32::MAX x 1000 < 2^42: no overflow.
        let back = (UNIT * u64::from(cost)) as i64;
        // Relaxed: see `update_word`; the same compare-exchange on the same
        // word as a check.
        let refunded = state.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
            let (level, last_ms) = drained_at(word).filter(|&(l, _)| l > floor && cost > 0)?;
            let after = level - back;
            Some(if after <= floor {
                // Down to a new key's level: exactly a key never seen.
                0
            } else {
                // Stored excess cannot go below empty: rounding up to 0
                // keeps less room than the refund would give, never more.
                let excess = after.max(0) as u64;
                Slot { excess, last_ms }.pack()
            })
        });
        refunded.ok().and_then(drained_at).map_or(0, |(level, _)| {
            // What the level could fall, in whole requests, up to `cost`.
            let room = (level - floor) as u64;
            room.div_ceil(UNIT).min(u64::from(cost)) as u32
        })
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests;
