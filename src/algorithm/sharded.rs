//! Per-shard counters for hot keys: one key's quota striped over `N`
//! cache-padded shards, so threads on different cores stop fighting over one
//! cache line.
//!
//! A key checked by many cores at once turns its single atomic into the
//! bottleneck: every compare-exchange must first take the cache line from the
//! core that wrote it last. The remedy is the one of striped counters
//! (`java.util.concurrent.atomic.LongAdder`, the Linux kernel's per-CPU
//! counters, `crossbeam_utils::CachePadded`'s own motivation): give each
//! thread its own line. For a limiter the counter must not overshoot, so the
//! *quota* is split too: each shard gets a share of the limit (budgeted per
//! shard), and a request the calling thread's shard cannot take falls back to
//! the other shards in order, so it is denied only when no shard can take it.
//!
//! See [`Sharded`] for the exact accuracy trade-offs.

use super::{
    Algorithm, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket, check_cost,
};
use crate::sync::{AtomicUsize, Ordering};
use crate::{CheckError, Decision, Quota, QuotaError};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::Duration;

/// An algorithm whose quota can be split into per-shard quotas whose
/// admissions, summed over the shards, never exceed what the whole quota
/// admits.
///
/// Implemented for [`FixedWindow`], [`SlidingWindowCounter`],
/// [`SlidingWindowLog`] and [`TokenBucket`]. The leaky bucket is not
/// splittable: its delay mode queues requests behind one another, and a
/// queue split in `N` would make a request wait behind only its own shard's
/// share of the queue.
///
/// # Examples
///
/// ```
/// use rategate::algorithm::{Algorithm, FixedWindow, Splittable};
/// use rategate::Quota;
///
/// let quota = Quota::per_second(10)?;
/// // 10 over 4 shards: 3, 3, 2, 2.
/// let shares: Vec<u32> = (0..4)
///     .map(|i| FixedWindow::share(&quota, i, 4).map(|fw| fw.capacity()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(shares, [3, 3, 2, 2]);
/// # Ok::<(), rategate::QuotaError>(())
/// ```
pub trait Splittable: Algorithm {
    /// The parameters of shard `index` (`0..shards`) when `quota` is split
    /// over `shards` shards.
    ///
    /// Contract: the `shards` shards, each on its own state and each
    /// admitting by its own rule, admit together over any span of time at
    /// most what one `Self::from_quota(quota)` can admit over that span, and
    /// their capacities sum to its capacity.
    ///
    /// # Errors
    ///
    /// [`QuotaError::LimitBelowShards`] when the limit (or burst) is smaller
    /// than `shards`, so some shard would get nothing; otherwise what
    /// [`Algorithm::from_quota`] gives for a shard's quota.
    fn share(quota: &Quota, index: usize, shards: usize) -> Result<Self, QuotaError>;
}

/// Shard `index`'s share of `total` over `shards`: `total / shards`, plus one
/// for each of the first `total % shards` shards. The shares sum to `total`
/// exactly and differ by at most one, the larger first.
fn share_of(total: u32, index: usize, shards: usize) -> Result<u32, QuotaError> {
    // usize is at most 64 bits on every supported target.
    let n = u64::try_from(shards).unwrap_or(u64::MAX);
    let whole = u64::from(total);
    if n == 0 || whole < n {
        return Err(QuotaError::LimitBelowShards {
            limit: whole,
            shards: n,
        });
    }
    let index = u64::try_from(index).unwrap_or(u64::MAX);
    let share = whole / n + u64::from(index < whole % n);
    // At most `total`, a u32.
    Ok(u32::try_from(share).unwrap_or(total))
}

/// `quota`'s period with a limit of `limit`, the windows' per-shard quota.
fn window_share(quota: &Quota, index: usize, shards: usize) -> Result<Quota, QuotaError> {
    let limit = share_of(quota.limit(), index, shards)?;
    // limit <= quota.limit() <= period: a valid quota.
    Quota::with_period(limit, quota.period())
}

/// Shares of the limit, same windows: each shard counts at most its share in
/// every window, and the windows of all shards are the same (aligned to the
/// clock's origin, one period long), so the shard counts of a window sum to
/// the key's count for it, at most the limit. The split is exact.
impl Splittable for FixedWindow {
    fn share(quota: &Quota, index: usize, shards: usize) -> Result<Self, QuotaError> {
        FixedWindow::from_quota(&window_share(quota, index, shards)?)
    }
}

/// Shares of the limit, same windows. Each shard's estimate
/// `previous x (period - elapsed) / period + current` is at most its share
/// after each of its admissions and only falls between them (the weight
/// shrinks within a window, and at a rollover the estimate becomes the old
/// current count, no more than the old estimate), so the shards' estimates,
/// which sum to the estimate of the key's combined counts (the weighting is
/// linear), never exceed the limit together.
///
/// The shard limit of 2^20 - 1 applies to each share, so a sharded counter
/// accepts limits up to `shards` times that.
impl Splittable for SlidingWindowCounter {
    fn share(quota: &Quota, index: usize, shards: usize) -> Result<Self, QuotaError> {
        SlidingWindowCounter::from_quota(&window_share(quota, index, shards)?)
    }
}

/// Shares of the limit, same window length: each shard admits at most its
/// share in any window `(t - period, t]`, so all together at most the limit.
impl Splittable for SlidingWindowLog {
    fn share(quota: &Quota, index: usize, shards: usize) -> Result<Self, QuotaError> {
        SlidingWindowLog::from_quota(&window_share(quota, index, shards)?)
    }
}

/// Shard `i` is a bucket of `b_i` tokens (the burst `b` split into shares
/// that sum to `b` exactly) refilled one token per `N x T`, where `T` is the
/// whole bucket's emission interval: a rate of exactly 1/N of the whole
/// bucket's.
///
/// Why the sum is bounded: a GCRA bucket of capacity `c` and interval `I`
/// admits, over any span of length `t`, at most `c + t / I` (its theoretical
/// arrival time starts at least at the first admission, grows by `I` per
/// token, and may end at most `c x I` past the last admission). The shards
/// together admit at most `sum(b_i + t / (N x T)) = b + t / T`, the whole
/// bucket's own bound, and their long-run rate is its rate.
///
/// Only the burst has a minimum (at least `N`); the rate is split exactly in
/// time, so any limit works. [`QuotaError::BurstOverflow`] when `N x T` or a
/// shard's `b_i x N x T` overflows `u64` nanoseconds.
impl Splittable for TokenBucket {
    fn share(quota: &Quota, index: usize, shards: usize) -> Result<Self, QuotaError> {
        let burst = share_of(quota.burst_or(quota.limit()), index, shards)?;
        let n = u64::try_from(shards).unwrap_or(u64::MAX);
        let interval = quota
            .emission_interval_nanos()
            .checked_mul(n)
            .ok_or(QuotaError::BurstOverflow)?;
        // One token per `interval`: the bucket's emission interval is
        // `interval / 1`, exactly.
        let shard = Quota::with_period(1, Duration::from_nanos(interval))?.burst(burst)?;
        TokenBucket::from_quota(&shard)
    }
}

/// Any [`Splittable`] algorithm with one key's quota striped over `N`
/// cache-padded shards (default 4), for keys hot enough that one atomic
/// becomes the bottleneck across cores.
///
/// # How a check runs
///
/// Each thread has a *home shard*, `i mod N` for the `i`-th thread (from 0,
/// process-wide) that ever checked a sharded limiter: a thread-local index
/// assigned round-robin once per thread, so consecutive threads land on
/// different cache lines. A check goes to the home shard; if that shard
/// denies, it tries the others in order (`home + 1`, `home + 2`, ... modulo
/// `N`). A request is denied only when every shard denied it, and with the
/// clock frozen a denial stays a denial, so racing threads admit together
/// exactly the limit, never more (the shares sum to it) and never less.
///
/// State: [`ShardedState`], `N` states of the inner algorithm, each on its
/// own cache line (`CachePadded`: 128 bytes on x86-64 and aarch64, so 512
/// bytes per key for `N = 4`, whatever the inner state).
///
/// # When it pays
///
/// On a direct limiter checked by many cores at once, from about 8 threads:
/// on a 16-core machine `Sharded<FixedWindow, 4>` took about twice the
/// plain fixed window's checks per second at 16 threads, and it cost about
/// half below 4 threads, where the fallback to other shards and the
/// reads of every shard's `remaining` outweigh the bounced line. In a keyed
/// map it gains little, because the map's lock for the key's shard is a
/// line every check still writes. `scripts/scale.sh` measures it on your
/// machine (docs/performance.md has a table).
///
/// # Refund
///
/// A refund goes to the thread's home shard first (where its checks land),
/// then to the others in the order a check tries them, each taking back
/// what its inner algorithm's refund allows, until `cost` is given back.
///
/// # Accuracy trade-offs
///
/// * **What can pass.** The split never admits more than the whole quota:
///   see each algorithm's [`Splittable`] implementation (exact for the
///   windows, the same `b + t / T` bound for the token bucket). It can admit
///   *less* when room is fragmented: a request passes only if one shard has
///   room for all of it.
/// * **Cost.** The largest cost that can ever pass is one shard's capacity
///   (the largest share, `ceil(limit / N)`, or `ceil(burst / N)` for the
///   token bucket), which [`capacity`] reports; beyond it a check fails with
///   [`CheckError::CostExceedsCapacity`].
/// * **Cost 1.** The fixed window and the log then decide exactly as the
///   unsharded algorithm would on the same times: a shard is full only at
///   its share, so some shard has room exactly when the key's count is below
///   the limit. The counter and the token bucket keep fractional room per
///   shard (a weighted previous count, a partly refilled token), so up to
///   `N - 1` requests' worth of room can sit spread over the shards, each
///   part below one request, where one state would have pooled it.
/// * **Limit.** [`Decision::limit`] is the whole quota's (the sum of the
///   shares): what can pass at once over several requests.
/// * **Remaining** is the sum of every shard's `remaining`, each read once
///   during the check (the admitting shard's after its admission, the
///   others as they were tried or, for the shards after the admitting one,
///   by a probe of cost 0: one load each, no write), capped at the limit.
///   For one thread it is exact: that many cost-1 requests pass next with
///   the clock frozen. Under concurrency it is a snapshot, as for any
///   limiter: others may take room between the reads and the next request.
///   Reading every shard costs a load of each shard's cache line per
///   admission (shared, not written, so the owners' next writes only
///   invalidate it).
/// * **Retry-after** on a denial is the minimum over the shards that could
///   ever take the cost: the earliest time at which some shard, hence the
///   sharded limiter, would pass the same cost if nothing else arrived.
/// * **Reset-after** is the largest over the shards: the time until every
///   shard, hence the key, is fresh.
/// * **Windows.** The fixed window stays exact: all shards share the
///   windows, and the shard counts of a window sum to the key's count. The
///   sliding window log keeps every admission time, in one shard's log each:
///   the union is the key's log. The sliding window counter weights each
///   shard's previous count separately, which sums to the same linear
///   estimate; only the room is per shard (see above). A clock stepping
///   back counts as no time elapsed for each shard on its own: a shard that
///   has not seen the later time decides at the earlier one.
/// * **Idle.** A key is idle when every shard is.
///
/// [`capacity`]: Algorithm::capacity
///
/// # Examples
///
/// ```
/// use rategate::{FixedWindow, ManualClock, Quota, RateLimiter, Sharded};
///
/// let limiter = RateLimiter::<Sharded<FixedWindow, 4>, _>::with_clock(
///     Quota::per_second(10)?,
///     ManualClock::new(),
/// )?;
/// // Shares 3, 3, 2, 2: a check falls back until every shard is full.
/// let admitted = (0..20).filter(|_| limiter.check().is_allowed()).count();
/// assert_eq!(admitted, 10);
/// let denied = limiter.check();
/// assert_eq!((denied.limit(), denied.remaining()), (10, 0));
/// // One shard's capacity is the most one request can cost.
/// assert!(limiter.check_n(4).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharded<A, const N: usize = 4> {
    /// Shard `i`'s parameters, `A::share(quota, i, N)`.
    shards: [A; N],
    /// The sum of the shards' capacities: the whole quota's limit or burst.
    limit: u32,
    /// The largest shard capacity (shard 0's), at least 1.
    capacity: u32,
}

/// The state of a [`Sharded`] key: one inner state per shard, each on its own
/// cache line.
///
/// # Examples
///
/// ```
/// use rategate::algorithm::{Algorithm, Sharded, ShardedState};
/// use rategate::{Quota, TokenBucket};
///
/// let sharded = Sharded::<TokenBucket, 2>::from_quota(&Quota::per_second(4)?)?;
/// let state: ShardedState<_, 2> = sharded.new_state();
/// assert!(sharded.is_idle(&state, 0));
/// assert!(sharded.check(&state, 0, 2)?.is_allowed());
/// assert!(!sharded.is_idle(&state, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ShardedState<S, const N: usize> {
    /// Shard `i`'s state, padded and aligned to a cache line so no two
    /// shards share one.
    shards: [CachePadded<S>; N],
}

impl<S: fmt::Debug, const N: usize> fmt::Debug for ShardedState<S, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.shards.iter().map(|s| &**s))
            .finish()
    }
}

/// The denials gathered while trying shards.
struct Denials {
    /// The sum of the denying shards' `remaining`.
    remaining: u64,
    /// The largest `reset_after` seen.
    reset_after: u64,
    /// The smallest `retry_after` of a shard that could take the cost.
    retry_after: u64,
}

impl<A: Splittable, const N: usize> Sharded<A, N> {
    /// Runs `decide` (a check or a peek) on the home shard, then on the
    /// others in order until one admits, and combines the shards' decisions.
    #[inline]
    fn decide(
        &self,
        state: &ShardedState<A::State, N>,
        now: u64,
        cost: u32,
        decide: impl Fn(&A, &A::State) -> Result<Decision, CheckError>,
    ) -> Result<Decision, CheckError> {
        check_cost(cost, self.capacity)?;
        // N >= 1 (asserted at compile time in `from_quota`).
        let home = home_index() % N;
        let mut denials = Denials {
            remaining: 0,
            reset_after: 0,
            retry_after: u64::MAX,
        };
        // Shards in the order home, home + 1, ... (mod N). home < N and
        // offset < N, and an array of N cache lines has N far below
        // usize::MAX / 2, so the sum does not overflow.
        for offset in 0..N {
            let index = (home + offset) % N;
            let (Some(algorithm), Some(shard)) = (self.shards.get(index), state.shards.get(index))
            else {
                continue;
            };
            let decision = if cost <= algorithm.capacity() {
                decide(algorithm, shard)?
            } else {
                // A smaller share can never take this cost: only read what it
                // holds (a cost of 0 always passes and records nothing).
                let held = algorithm.peek(shard, now, 0)?;
                denials.remaining += u64::from(held.remaining());
                denials.reset_after = denials.reset_after.max(held.reset_after_nanos());
                continue;
            };
            if decision.is_allowed() {
                let own = decision.remaining();
                // The shards not tried are read (a probe of cost 0: a load
                // each, no write), not guessed: an earlier request of a
                // larger cost may have fallen past the home shard and drained
                // one of them, so no guess from the admitting shard is safe.
                let mut untried = 0;
                let mut reset_after = decision.reset_after_nanos().max(denials.reset_after);
                for later in offset + 1..N {
                    let index = (home + later) % N;
                    if let (Some(other), Some(other_state)) =
                        (self.shards.get(index), state.shards.get(index))
                    {
                        let held = other.peek(other_state, now, 0)?;
                        untried += u64::from(held.remaining());
                        reset_after = reset_after.max(held.reset_after_nanos());
                    }
                }
                let remaining = (u64::from(own) + denials.remaining + untried)
                    .min(u64::from(self.limit)) as u32;
                return Ok(Decision::allow(self.limit, remaining, reset_after)
                    .with_delay(decision.delay_nanos()));
            }
            denials.remaining += u64::from(decision.remaining());
            denials.reset_after = denials.reset_after.max(decision.reset_after_nanos());
            denials.retry_after = denials.retry_after.min(decision.retry_after_nanos());
        }
        // At least one shard has the largest capacity, which admits `cost`,
        // so `retry_after` was set.
        let remaining = denials.remaining.min(u64::from(self.limit)) as u32;
        Ok(Decision::deny(
            self.limit,
            remaining,
            denials.reset_after,
            denials.retry_after,
        ))
    }

    /// The parameters of each shard, shard 0 first.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::algorithm::{Algorithm, Sharded, TokenBucket};
    /// use rategate::Quota;
    ///
    /// let sharded = Sharded::<TokenBucket, 4>::from_quota(&Quota::per_second(10)?)?;
    /// let bursts: Vec<u32> = sharded.shards().iter().map(|s| s.capacity()).collect();
    /// assert_eq!(bursts, [3, 3, 2, 2]);
    /// # Ok::<(), rategate::QuotaError>(())
    /// ```
    pub fn shards(&self) -> &[A] {
        &self.shards
    }
}

impl<A: Splittable, const N: usize> Algorithm for Sharded<A, N> {
    /// One inner state per shard; see [`ShardedState`].
    type State = ShardedState<A::State, N>;

    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        const { assert!(N >= 1, "a Sharded limiter needs at least one shard") };
        let shards: Vec<A> = (0..N)
            .map(|index| A::share(quota, index, N))
            .collect::<Result<_, _>>()?;
        // Exactly N shares were made, so this never fails; were it to, the
        // quota is refused rather than a panic raised.
        let shards: [A; N] = shards
            .try_into()
            .map_err(|_| QuotaError::LimitBelowShards {
                limit: quota.limit().into(),
                shards: u64::try_from(N).unwrap_or(u64::MAX),
            })?;
        let limit: u64 = shards.iter().map(|s| u64::from(s.capacity())).sum();
        // The shares sum to the whole quota's limit or burst, a u32.
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        let capacity = shards.iter().map(A::capacity).max().unwrap_or(1);
        Ok(Sharded {
            shards,
            limit,
            capacity,
        })
    }

    fn new_state(&self) -> Self::State {
        ShardedState {
            shards: self
                .shards
                .each_ref()
                .map(|shard| CachePadded::new(shard.new_state())),
        }
    }

    #[inline]
    fn check(&self, state: &Self::State, now: u64, cost: u32) -> Result<Decision, CheckError> {
        // Each shard's check orders its own state (see the inner algorithm);
        // the shards are independent, so nothing orders one against another.
        // With a frozen clock a shard that denied stays full, so trying them
        // one after another cannot miss room that a single state would find.
        self.decide(state, now, cost, |a, s| a.check(s, now, cost))
    }

    #[inline]
    fn peek(&self, state: &Self::State, now: u64, cost: u32) -> Result<Decision, CheckError> {
        self.decide(state, now, cost, |a, s| a.peek(s, now, cost))
    }

    fn is_idle(&self, state: &Self::State, now: u64) -> bool {
        self.shards
            .iter()
            .zip(state.shards.iter())
            .all(|(a, s)| a.is_idle(s, now))
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn refund(&self, state: &Self::State, now: u64, cost: u32) -> u32 {
        let home = home_index() % N;
        let mut left = cost;
        // As in `decide`: home, home + 1, ... (mod N), no overflow.
        for offset in 0..N {
            let index = (home + offset) % N;
            if let (Some(shard), Some(shard_state)) =
                (self.shards.get(index), state.shards.get(index))
            {
                // Each inner refund gives back at most what it is asked.
                left -= shard.refund(shard_state, now, left);
            }
        }
        cost - left
    }
}

/// Hands out thread indices, from 0, one per thread on its first sharded
/// check.
#[cfg(not(rategate_loom))]
static NEXT_HOME: AtomicUsize = AtomicUsize::new(0);

#[cfg(not(rategate_loom))]
thread_local! {
    /// This thread's index; `usize::MAX` until its first sharded check.
    /// A `const` initializer and no destructor: reading it is one
    /// thread-local load.
    static HOME: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// The calling thread's index, assigned round-robin on its first call; a
/// limiter takes it modulo its shard count.
#[cfg(not(rategate_loom))]
#[inline]
pub(crate) fn home_index() -> usize {
    HOME.try_with(|home| {
        let index = home.get();
        if index != usize::MAX {
            return index;
        }
        // Relaxed: the counter only has to hand out distinct consecutive
        // values (a read-modify-write does); it publishes no other memory.
        // The mask keeps the sentinel out of reach when the counter wraps.
        let index = NEXT_HOME.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
        home.set(index);
        index
    })
    // Only during the thread's teardown: any shard will do.
    .unwrap_or(0)
}

#[cfg(rategate_loom)]
loom::lazy_static! {
    /// Under loom: reset for each execution, so every interleaving starts
    /// from the same assignment.
    static ref NEXT_HOME: AtomicUsize = AtomicUsize::new(0);
}

#[cfg(rategate_loom)]
loom::thread_local! {
    /// Under loom: per modelled thread (loom runs its threads on one OS
    /// thread, where a std thread-local would be shared).
    static HOME: usize = NEXT_HOME.fetch_add(1, Ordering::Relaxed);
}

#[cfg(rategate_loom)]
pub(crate) fn home_index() -> usize {
    HOME.with(|home| *home)
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    fn quota(limit: u32, period: u64) -> Quota {
        Quota::with_period(limit, Duration::from_nanos(period)).unwrap()
    }

    #[test]
    fn shares_sum_to_the_whole_and_differ_by_at_most_one() {
        for total in [4u32, 5, 7, 10, 1_000, u32::MAX] {
            for shards in [1usize, 2, 3, 4] {
                let shares: Vec<u32> = (0..shards)
                    .map(|i| share_of(total, i, shards).unwrap())
                    .collect();
                let sum: u64 = shares.iter().map(|&s| u64::from(s)).sum();
                assert_eq!(sum, u64::from(total), "{total} over {shards}");
                assert!(shares.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
            }
        }
        assert_eq!(
            share_of(3, 0, 4),
            Err(QuotaError::LimitBelowShards {
                limit: 3,
                shards: 4
            })
        );
        assert!(share_of(1, 0, 0).is_err());
    }

    #[test]
    fn too_small_to_split_is_a_typed_error() {
        let small = quota(3, 1_000);
        assert_eq!(
            Sharded::<FixedWindow, 4>::from_quota(&small),
            Err(QuotaError::LimitBelowShards {
                limit: 3,
                shards: 4
            })
        );
        // The token bucket splits its burst: 3 tokens cannot feed 4 shards,
        // but a burst of 4 can, whatever the limit.
        assert!(Sharded::<TokenBucket, 4>::from_quota(&small).is_err());
        assert!(Sharded::<TokenBucket, 4>::from_quota(&small.burst(4).unwrap()).is_ok());
        assert!(Sharded::<SlidingWindowLog, 4>::from_quota(&quota(4, 1_000)).is_ok());
        let message = QuotaError::LimitBelowShards {
            limit: 3,
            shards: 4,
        }
        .to_string();
        assert!(message.contains("3") && message.contains("4 shards"));
    }

    #[test]
    fn token_bucket_shards_refill_at_a_nth_of_the_rate() {
        // 10 per 1000 ns: T = 100 ns. Shards: one token per 400 ns.
        let sharded = Sharded::<TokenBucket, 4>::from_quota(&quota(10, 1_000)).unwrap();
        let whole = TokenBucket::from_quota(&quota(10, 1_000)).unwrap();
        let bursts: Vec<u32> = sharded.shards().iter().map(|s| s.capacity()).collect();
        assert_eq!(bursts, [3, 3, 2, 2]);
        assert_eq!((sharded.capacity(), sharded.limit), (3, 10));
        let state = sharded.new_state();
        assert_eq!(drain(&sharded, &state, 0), 10);
        // Each shard grows a token every 400 ns, none sooner.
        let d = sharded.check(&state, 0, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 400);
        assert_eq!(d.remaining(), 0);
        // reset: the fullest shards (3 tokens) take 1 200 ns.
        assert_eq!(d.reset_after_nanos(), 1_200);
        assert_eq!(drain(&sharded, &state, 399), 0);
        assert_eq!(drain(&sharded, &state, 400), 4);
        // Checks every 100 ns over [0, 4 000]: the whole bucket's bound is
        // 10 + 4 000 / 100 = 50, which both reach.
        let sharded_state = sharded.new_state();
        let whole_state = whole.new_state();
        let (mut total, mut whole_total) = (0, 0);
        for now in (0..=4_000).step_by(100) {
            total += drain(&sharded, &sharded_state, now);
            whole_total += drain_whole(&whole, &whole_state, now);
        }
        assert_eq!((total, whole_total), (50, 50));
        let state = sharded_state;
        assert!(sharded.is_idle(&state, 4_000 + 1_200));
        assert!(!sharded.is_idle(&state, 4_000 + 1_199));
    }

    fn drain<A: Splittable, const N: usize>(
        s: &Sharded<A, N>,
        state: &ShardedState<A::State, N>,
        now: u64,
    ) -> u32 {
        let mut n = 0;
        while s.check(state, now, 1).unwrap().is_allowed() {
            n += 1;
        }
        n
    }

    fn drain_whole(tb: &TokenBucket, state: &crate::sync::AtomicU64, now: u64) -> u32 {
        let mut n = 0;
        while tb.check(state, now, 1).unwrap().is_allowed() {
            n += 1;
        }
        n
    }

    #[test]
    fn fallback_fills_every_shard_and_remaining_is_exact_alone() {
        // Equal shares, so the figures do not depend on the home shard.
        let fw = Sharded::<FixedWindow, 4>::from_quota(&quota(8, 1_000)).unwrap();
        let state = fw.new_state();
        // One thread: its home shard first, then the next ones in order.
        // Every shard is read, so `remaining` is exact.
        for estimate in (0..8).rev() {
            let d = fw.check(&state, 100, 1).unwrap();
            assert!(d.is_allowed());
            let fields = (d.limit(), d.remaining(), d.reset_after_nanos());
            assert_eq!(fields, (8, estimate, 900));
        }
        let d = fw.check(&state, 100, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!((d.remaining(), d.retry_after_nanos()), (0, 900));
        assert!(!fw.is_idle(&state, 999));
        assert!(fw.is_idle(&state, 1_000));
        assert!(fw.check(&state, 1_000, 2).unwrap().is_allowed());
    }

    #[test]
    fn cost_above_one_shard_is_an_error_and_fragmented_room_denies() {
        // 10 over 4: 3, 3, 2, 2.
        let fw = Sharded::<FixedWindow, 4>::from_quota(&quota(10, 1_000)).unwrap();
        let state = fw.new_state();
        assert_eq!(
            fw.check(&state, 0, 4),
            Err(CheckError::CostExceedsCapacity {
                cost: 4,
                capacity: 3
            })
        );
        assert_eq!(fw.peek(&state, 0, 4), fw.check(&state, 0, 4));
        // Two requests of 3 fill the 3-shares wherever home is.
        assert!(fw.check(&state, 0, 3).unwrap().is_allowed());
        assert!(fw.check(&state, 0, 3).unwrap().is_allowed());
        // 4 left over two shards of 2: a cost of 3 cannot pass.
        let d = fw.check(&state, 0, 3).unwrap();
        assert!(!d.is_allowed());
        assert_eq!((d.remaining(), d.retry_after_nanos()), (4, 1_000));
        assert!(fw.check(&state, 0, 2).unwrap().is_allowed());
        assert!(fw.check(&state, 0, 2).unwrap().is_allowed());
        assert!(!fw.check(&state, 0, 1).unwrap().is_allowed());
        // Cost 0 always passes and records nothing.
        assert!(fw.check(&state, 0, 0).unwrap().is_allowed());
    }

    #[test]
    fn peek_records_nothing() {
        let log = Sharded::<SlidingWindowLog, 2>::from_quota(&quota(2, 100)).unwrap();
        let state = log.new_state();
        for _ in 0..3 {
            assert!(log.peek(&state, 5, 1).unwrap().is_allowed());
        }
        assert!(log.is_idle(&state, 5));
        assert!(log.check(&state, 5, 1).unwrap().is_allowed());
        assert!(log.check(&state, 6, 1).unwrap().is_allowed());
        let d = log.peek(&state, 7, 1).unwrap();
        assert!(!d.is_allowed());
        // The entry at 5 leaves at 105, the one at 6 at 106.
        assert_eq!((d.retry_after_nanos(), d.reset_after_nanos()), (98, 99));
        assert!(log.check(&state, 105, 1).unwrap().is_allowed());
    }

    #[test]
    fn sliding_window_counter_splits_and_accepts_larger_limits() {
        let big = Quota::per_hour(4 * ((1 << 20) - 1)).unwrap();
        assert!(SlidingWindowCounter::from_quota(&big).is_err());
        let sharded = Sharded::<SlidingWindowCounter, 4>::from_quota(&big).unwrap();
        assert_eq!(sharded.capacity(), (1 << 20) - 1);
        let sw = Sharded::<SlidingWindowCounter, 2>::from_quota(&quota(4, 100)).unwrap();
        let state = sw.new_state();
        assert_eq!(drain(&sw, &state, 50), 4);
        // 50 ns into the next window each shard weighs ceil(2 x 50/100) = 1.
        assert_eq!(drain(&sw, &state, 150), 2);
        assert!(sw.is_idle(&state, 300));
    }

    #[test]
    fn home_index_is_fixed_per_thread_and_distinct_across_threads() {
        let mine = home_index();
        assert_eq!(home_index(), mine);
        let theirs = std::thread::spawn(home_index).join().unwrap();
        assert_ne!(mine, theirs);
    }
}
