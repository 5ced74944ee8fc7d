//! Leaky bucket reference model, transcribed from nginx's
//! `ngx_http_limit_req_lookup` / `ngx_http_limit_req_account` (one zone,
//! `account = 1`): signed `excess` in thousandths, whole milliseconds,
//! `if (ms) last = now`. The model's only departures from the C are the
//! ones rategate documents: a request of cost `c` adds `1000 * c` and is
//! floored at `1000 * (c - 1)` (nginx: 0, the same for `c = 1`), a cost of 0
//! records nothing, and a step back in time counts as `ms = 0`.
//!
//! The decision fields nginx does not compute are found by brute force on
//! copies of the model: `remaining` by sending cost-1 requests until one is
//! rejected, `retry_after` and `reset_after` by searching for the first
//! millisecond at which the request would pass, or the node would act as a
//! new one.
//!
//! Covers: any steps, back included, for quotas `LeakyBucket` accepts, at
//! times below `(2^41 - 2^36)` ms. The crate's state holds milliseconds up
//! to `2^41 - 2` and treats later ones as that last one (and any wait
//! ending past it as never); the model has no such horizon. Below the bound
//! every wait the model computes (at most 2^35 ms for the largest burst and
//! the slowest rate) ends within the crate's range.

use super::{Model, Outcome};
use rategate::{CheckError, Delay, Quota};

pub const MS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Node {
    /// Thousandths of a request (nginx: `lr->excess`).
    excess: i64,
    /// Milliseconds (nginx: `lr->last`).
    last: i64,
}

/// One `limit_req` zone holding one key.
#[derive(Debug, Clone)]
pub struct Nginx {
    /// `ctx->rate`: thousandths of a request per second.
    rate: i64,
    /// `limit->burst`: burst * 1000.
    burst: i64,
    /// `limit->delay`: delay * 1000.
    delay: i64,
    node: Option<Node>,
}

impl Nginx {
    /// `ctx->rate * ms / 1000`, in 128 bits and capped: the searches below
    /// look far ahead, where a fast rate times the gap overflows 64 bits
    /// (any leak past the excess drains the bucket all the same).
    fn leak(rate: i64, ms: i64) -> i64 {
        let leak = i128::from(rate) * i128::from(ms) / 1000;
        leak.min(i128::from(i64::MAX / 4)) as i64
    }

    /// `ngx_http_limit_req_lookup` with `account = 1`: `Ok(excess)` when
    /// admitted (NGX_OK), `Err(excess)` when rejected (NGX_BUSY).
    fn lookup(&mut self, now_ns: u64, cost: u32, account: bool) -> Result<i64, i64> {
        let now = (now_ns / MS) as i64;
        let cost = i64::from(cost);
        let Some(lr) = self.node.as_mut() else {
            // A new node: nginx stores excess = 0 and last = now.
            let excess = (1000 * (cost - 1)).max(0);
            if account && cost > 0 {
                self.node = Some(Node { excess, last: now });
            }
            return Ok(excess);
        };
        let mut ms = now - lr.last;
        if ms < 0 {
            // nginx: 0 down to -60 s, 1 beyond; rategate: always 0.
            ms = 0;
        }
        let mut excess = lr.excess - Self::leak(self.rate, ms) + 1000 * cost;
        let floor = 1000 * (cost - 1).max(0);
        if excess < floor {
            excess = floor;
        }
        if excess > self.burst {
            return Err(excess);
        }
        if account && cost > 0 {
            lr.excess = excess;
            if ms != 0 {
                lr.last = now;
            }
        }
        Ok(excess)
    }

    /// Whether the node would take its next request as a new node does.
    pub fn is_idle(&self, now_ns: u64) -> bool {
        self.node.is_none_or(|lr| {
            let ms = ((now_ns / MS) as i64 - lr.last).max(0);
            lr.excess - Self::leak(self.rate, ms) + 1000 <= 0
        })
    }

    /// The first millisecond after `now_ms` at which `pred` holds, by
    /// binary search (`pred` is monotone in time). The search spans 2^42 ms,
    /// more than the crate's whole range of 2^41 ms: enough for any step
    /// back plus the longest wait (under 2^35 ms).
    fn first_ms(now_ms: u64, pred: impl Fn(u64) -> bool) -> u64 {
        let (mut lo, mut hi) = (now_ms, now_ms + (1 << 42));
        assert!(pred(hi), "never within 2^42 ms");
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if pred(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }
}

impl Model for Nginx {
    fn new(quota: &Quota) -> Self {
        // limit_req_zone: rate=Nr/s -> N * 1000, Nr/m -> N * 1000 / 60; any
        // period: N * 1000 per period in seconds.
        let rate =
            i128::from(quota.limit()) * 1_000 * 1_000_000_000 / i128::from(quota.period_nanos());
        let burst = i64::from(quota.explicit_burst().unwrap_or(0));
        // limit_req: nodelay sets delay to "infinity"; the default is 0.
        let delay = match quota.delay_mode() {
            Delay::Smooth => 0,
            Delay::NoDelay => i64::MAX / 1000,
            Delay::After(n) => i64::from(n),
        };
        Nginx {
            rate: rate as i64,
            burst: burst * 1000,
            delay: delay * 1000,
            node: None,
        }
    }

    /// Pours `1000 x cost` out of the level drained to now, never below one
    /// request under empty (where the node is forgotten, a new one); the
    /// stored excess stays at least 0.
    fn refund(&mut self, now: u64, cost: u32) -> u32 {
        let now = (now / MS) as i64;
        let Some(lr) = self.node.as_mut() else {
            return 0;
        };
        let ms = (now - lr.last).max(0);
        let level = (lr.excess - Self::leak(self.rate, ms)).max(-1000);
        if level <= -1000 || cost == 0 {
            return 0;
        }
        let after = level - 1000 * i64::from(cost);
        if after <= -1000 {
            self.node = None;
            return ((level + 1000 + 999) / 1000).min(cost.into()) as u32;
        }
        lr.excess = after.max(0);
        if ms != 0 {
            lr.last = now;
        }
        cost
    }

    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        let capacity = (self.burst / 1000 + 1) as u32;
        if cost > capacity {
            return Err(CheckError::CostExceedsCapacity { cost, capacity });
        }
        let now_ms = now / MS;
        let result = self.lookup(now, cost, true);
        let mut remaining = 0;
        let mut probe = self.clone();
        while probe.lookup(now, 1, true).is_ok() {
            remaining += 1;
        }
        let reset_after = if self.is_idle(now) {
            0
        } else {
            Self::first_ms(now_ms, |t| self.is_idle(t * MS)) * MS - now
        };
        let (allowed, retry_after, delay) = match result {
            Ok(excess) => {
                // ngx_http_limit_req_account: delay in ms.
                let delay_ms = if excess <= self.delay {
                    0
                } else {
                    (excess - self.delay) * 1000 / self.rate
                };
                (true, 0, delay_ms as u64 * MS)
            }
            Err(_) => {
                let passes = |t: u64| self.clone().lookup(t * MS, cost, false).is_ok();
                (false, Self::first_ms(now_ms, passes) * MS - now, 0)
            }
        };
        Ok(Outcome {
            allowed,
            limit: capacity,
            remaining,
            reset_after,
            retry_after,
            delay,
        })
    }
}

impl super::Retune for Nginx {
    /// nginx reloaded with the new zone rate and `limit_req` burst and
    /// delay, the node kept.
    fn set_quota(&mut self, quota: &Quota) {
        let fresh = <Nginx as Model>::new(quota);
        self.rate = fresh.rate;
        self.burst = fresh.burst;
        self.delay = fresh.delay;
    }
}
