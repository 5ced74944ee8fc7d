//! The outbound guard: wait for a slot under several limits, and follow
//! what the upstream says about its own.

use super::adapt::{Adaptation, Throttle};
use super::headers::UpstreamSignal;
use super::sent::SentMeter;
use crate::Decision;
use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::policy::AllOf;
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use crate::wait::{Gate, Jitter, Step, WaitError, WaitQueue, step_of, wait_blocking};
use std::time::{Duration, Instant, SystemTime};

/// Guards calls to a rate-limited upstream API (Stripe, GitHub, SendGrid):
/// callers wait their turn under every configured limit at once, and the
/// guard listens to the upstream's answers.
///
/// * **Waiting** works as in [`Pacer`](crate::Pacer): one FIFO queue, only
///   the head consults the limits, nothing is consumed before admission, so
///   a cancelled wait or a missed deadline costs nothing.
/// * **Even pacing**: calls are spread evenly at the rate of the limit
///   with the shortest period (the slowest of those), when that period is
///   a minute or less, so an upstream's fixed or sliding window takes them
///   without 429s at its edges;
///   [`bursts(true)`](OutboundLimiterBuilder::bursts) lets the limits'
///   burst go at once. The guard's adaptation scales that rate.
/// * **Several limits** ([`AllOf`]): a call passes only when all admit it,
///   and none is charged when one denies.
/// * **Upstream feedback** ([`observe`](OutboundLimiter::observe)): on a 429
///   (or a 503 with `Retry-After`) every waiter is paused until the
///   upstream's `Retry-After`, or its reset (`X-RateLimit-Reset`, IETF
///   `RateLimit`), or [`fallback_pause`](OutboundLimiterBuilder::fallback_pause)
///   when it names none; what a response reports remaining is spread
///   evenly until its reset, less the calls still in flight, and 0
///   remaining pauses until the reset. A 429 sets the guard's rate just
///   below what the upstream accepted ([`Adaptation`]); quiet periods
///   probe upwards. An advertised `RateLimit-Policy` slower than the
///   configured limits caps the rate.
///   No request is admitted while a pause recorded before its admission
///   lasts.
/// * Every pause is capped at [`max_pause`](OutboundLimiterBuilder::max_pause)
///   (default one hour, GitHub's longest window), so a hostile or broken
///   header cannot stall the client for years.
///
/// # Examples
///
/// A Stripe-shaped client: every call under the live-mode write limit, the
/// charges endpoint under a limit of its own.
///
/// ```
/// use rategate::policy::{AllOf, Limit};
/// use rategate::outbound::UpstreamSignal;
/// use rategate::{presets, OutboundLimiter, RateLimiter, TokenBucket};
/// use std::sync::Arc;
/// use std::time::SystemTime;
///
/// let write = Arc::new(RateLimiter::<TokenBucket>::new(presets::stripe_live_write())?);
/// let charges = Arc::new(RateLimiter::<TokenBucket>::new("20/s".parse()?)?);
/// let guard = OutboundLimiter::new(AllOf::new([write as Arc<dyn Limit>, charges]));
///
/// guard.wait()?; // blocking; `guard.until_ready().await` with feature tokio
/// // ... send the request, then tell the guard what came back:
/// let answer = UpstreamSignal::from_pairs(429, [("Retry-After", "1")], SystemTime::now());
/// guard.observe(&answer);
/// assert!(guard.paused_for() > std::time::Duration::from_millis(900));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct OutboundLimiter<C: Clock = QuantaClock> {
    limits: AllOf,
    clock: C,
    queue: Arc<WaitQueue>,
    jitter: Jitter,
    max_pause: u64,
    fallback_pause: u64,
    /// No admission before this time (guard clock, ns). Raised with
    /// `fetch_max`; read by every admission attempt.
    pause_until: AtomicU64,
    /// Current pacing gap in ns per unit of cost (0: none), published by
    /// `observe` from the throttle.
    gap: AtomicU64,
    /// The part of it from the configured rate and the adaptation alone
    /// (not capped by `max_pause`, which caps what headers impose).
    own_gap: AtomicU64,
    /// The gap that spreads what the upstream reports remaining, until its
    /// reset (guard clock, ns).
    remaining_gap: AtomicU64,
    remaining_until: AtomicU64,
    /// Earliest time the next paced admission may go. Stored by the queue's
    /// head after an admission (the fast path is off while pacing, so one
    /// admitter at a time), and only lowered by `observe` (`fetch_min`) when
    /// the pace quickens; a head's store that races a lowering paces one
    /// request by the older gap, which is harmless.
    next_free: AtomicU64,
    /// The earliest next admission by the configured rate alone, after the
    /// last one: a faster header never schedules before it.
    own_next: AtomicU64,
    throttle: Mutex<Throttle>,
    /// Admissions per quarter period: what is in flight, the rate sent.
    sent: SentMeter,
    checks: AtomicU64,
    admitted: AtomicU64,
    limited: AtomicU64,
}

/// Counters of an [`OutboundLimiter`], for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct OutboundStats {
    /// Times the limits were consulted (checks that could admit).
    pub checks: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Upstream answers that said the limit was hit (429, or 503 with
    /// `Retry-After`).
    pub limited: u64,
    /// The guard's rate as a fraction of its configured rate.
    pub rate_factor: f64,
}

impl<C: Clock> std::fmt::Debug for OutboundLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundLimiter")
            .field("limits", &self.limits)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl OutboundLimiter<QuantaClock> {
    /// A guard over `limits` on the default clock: one limit (a
    /// `RateLimiter`, shared in an `Arc` or not) or an [`AllOf`] of several.
    /// Use the same clock as the limits (see
    /// [`with_clock`](OutboundLimiter::with_clock)).
    pub fn new(limits: impl Into<AllOf>) -> Self {
        Self::builder(limits).build()
    }

    /// Settings for a guard over `limits`: its clock, jitter, longest and
    /// fallback pauses, adaptation and bursts.
    pub fn builder(limits: impl Into<AllOf>) -> OutboundLimiterBuilder {
        OutboundLimiterBuilder {
            limits: limits.into(),
            clock: QuantaClock::new(),
            jitter: Jitter::NONE,
            max_pause: DEFAULT_MAX_PAUSE,
            fallback_pause: 1_000_000_000,
            adaptation: Adaptation::default(),
            bursts: None,
        }
    }
}

/// Guards built from a policy file (feature `serde`).
#[cfg(feature = "serde")]
impl OutboundLimiter<QuantaClock> {
    /// A guard over the policies `names` of `file`, all of them at once
    /// (a per-second and a per-hour limit, say), on the default clock. Each
    /// named policy must be one limit for everything: `key = "global"` (the
    /// default), no tiers, the memory backend, no shadow mode (see
    /// [`Policy::direct_limiter`](crate::policy::config::Policy::direct_limiter)).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::policy::config::ConfigError) naming the policy
    /// and field: a name not in the file, or a policy that is not one limit
    /// for everything.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::OutboundLimiter;
    /// use rategate::policy::config::PolicyFile;
    ///
    /// let file = PolicyFile::from_toml(r#"
    ///     [policies.email_per_second]
    ///     quota = "10/s"
    ///     [policies.email_per_day]
    ///     algorithm = "fixed_window"
    ///     quota = "100000/d"
    /// "#)?;
    /// let guard = OutboundLimiter::from_policies(&file, &["email_per_second", "email_per_day"])?;
    /// guard.wait()?; // or `guard.until_ready().await` with feature tokio
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_policies(
        file: &crate::policy::config::PolicyFile,
        names: &[&str],
    ) -> Result<Self, crate::policy::config::ConfigError> {
        Self::from_policies_with_clock(file, names, QuantaClock::new())
    }
}

#[cfg(feature = "serde")]
impl<C: Clock + Clone + 'static> OutboundLimiter<C> {
    /// As [`from_policies`](OutboundLimiter::from_policies), with the limits
    /// and the guard on `clock` (a [`TokioClock`](crate::TokioClock) in
    /// tests under paused time).
    ///
    /// # Errors
    ///
    /// As [`from_policies`](OutboundLimiter::from_policies).
    pub fn from_policies_with_clock(
        file: &crate::policy::config::PolicyFile,
        names: &[&str],
        clock: C,
    ) -> Result<Self, crate::policy::config::ConfigError> {
        use crate::policy::config::ConfigError;
        if names.is_empty() {
            return Err(ConfigError::file(
                "an outbound guard needs at least one policy",
            ));
        }
        let limits = names
            .iter()
            .map(|&name| {
                let policy = file.policy(name).ok_or_else(|| {
                    ConfigError::named(name, "no policy of this name in the file")
                })?;
                let limiter = policy.direct_limiter(clock.clone())?;
                Ok(Arc::new(limiter) as Arc<dyn crate::policy::Limit>)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(Self::with_clock(AllOf::new(limits), clock))
    }
}

/// Settings of an [`OutboundLimiter`], from
/// [`OutboundLimiter::builder`]; [`build`](OutboundLimiterBuilder::build)
/// makes the guard.
///
/// # Examples
///
/// ```
/// use rategate::outbound::Adaptation;
/// use rategate::{Jitter, OutboundLimiter, RateLimiter, TokenBucket};
/// use std::time::Duration;
///
/// let limit = RateLimiter::<TokenBucket>::new("100/s".parse()?)?;
/// let guard = OutboundLimiter::builder(limit)
///     .max_pause(Duration::from_secs(60))
///     .fallback_pause(Duration::from_secs(2))
///     .jitter(Jitter::up_to(Duration::from_millis(50)))
///     .adaptation(Adaptation::default())
///     .build();
/// assert!(guard.paused_for().is_zero());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build`"]
pub struct OutboundLimiterBuilder<C = QuantaClock> {
    limits: AllOf,
    clock: C,
    jitter: Jitter,
    max_pause: u64,
    fallback_pause: u64,
    adaptation: Adaptation,
    bursts: Option<bool>,
}

impl<C: Clock> OutboundLimiterBuilder<C> {
    // The link names a `tokio` feature item.
    #[cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]
    /// Times pauses and pacing on `clock` (a
    /// [`TokioClock`](crate::TokioClock) in tests under paused time); use
    /// the same clock as the limits.
    pub fn clock<C2: Clock>(self, clock: C2) -> OutboundLimiterBuilder<C2> {
        OutboundLimiterBuilder {
            limits: self.limits,
            clock,
            jitter: self.jitter,
            max_pause: self.max_pause,
            fallback_pause: self.fallback_pause,
            adaptation: self.adaptation,
            bursts: self.bursts,
        }
    }

    /// Adds `jitter` to every wake-up that had to wait, pauses included, so
    /// that many clients do not come back in lockstep (default none).
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The longest pause any upstream answer can impose (default 1 hour).
    pub fn max_pause(mut self, max: Duration) -> Self {
        self.max_pause = duration_to_nanos(max);
        self
    }

    /// The pause after a 429 that names no time (default 1 s).
    pub fn fallback_pause(mut self, pause: Duration) -> Self {
        self.fallback_pause = duration_to_nanos(pause);
        self
    }

    /// How the guard's rate follows 429s (default
    /// [`Adaptation::default`]; [`Adaptation::OFF`] to only pause).
    pub fn adaptation(mut self, adaptation: Adaptation) -> Self {
        self.adaptation = adaptation;
        self
    }

    /// Lets the limits' burst go at once while the upstream raises no
    /// objection (`true`), or spreads calls evenly at the configured rate
    /// (`false`). Default: even when the limit with the shortest period has
    /// a period of a minute or less (an upstream's fixed or sliding window
    /// then takes them without a 429 at its edges), bursts otherwise.
    pub fn bursts(mut self, bursts: bool) -> Self {
        self.bursts = Some(bursts);
        self
    }

    /// The guard.
    pub fn build(self) -> OutboundLimiter<C> {
        let limits = self.limits;
        let pacing = pacing_quota(&limits);
        let (base_gap, limit) = pacing.map_or((0, 0), |q| {
            let limit = u64::from(q.limit()).max(1);
            (q.period_nanos() / limit, limit)
        });
        let mut throttle = Throttle::new(self.adaptation, base_gap, limit);
        // Spread evenly over short periods only: over an hour's quota, a
        // burst is what the quota allows, and spreading it would hold
        // every call back.
        let bursts = self
            .bursts
            .unwrap_or_else(|| pacing.is_none_or(|q| q.period_nanos() > EVEN_UP_TO));
        throttle.set_bursts(bursts);
        throttle.set_max_pause(self.max_pause);
        let gap = throttle.steady_gap();
        let own_gap = throttle.own_gap();
        let sent = SentMeter::new(throttle.every());
        OutboundLimiter {
            limits,
            clock: self.clock,
            queue: Arc::new(WaitQueue::default()),
            jitter: self.jitter,
            max_pause: self.max_pause,
            fallback_pause: self.fallback_pause,
            pause_until: AtomicU64::new(0),
            gap: AtomicU64::new(gap),
            own_gap: AtomicU64::new(own_gap),
            remaining_gap: AtomicU64::new(0),
            remaining_until: AtomicU64::new(0),
            next_free: AtomicU64::new(0),
            own_next: AtomicU64::new(0),
            throttle: Mutex::new(throttle),
            sent,
            checks: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            limited: AtomicU64::new(0),
        }
    }
}

impl<C: Clock> OutboundLimiter<C> {
    // The link names a `tokio` feature item.
    #[cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]
    /// A guard over `limits`, timing pauses and pacing on `clock` (a
    /// [`TokioClock`](crate::TokioClock) in tests under paused time), with
    /// the default settings (see [`builder`](OutboundLimiter::builder)).
    pub fn with_clock(limits: impl Into<AllOf>, clock: C) -> Self {
        OutboundLimiter::builder(limits).clock(clock).build()
    }

    /// The limits every call must pass.
    pub fn limits(&self) -> &AllOf {
        &self.limits
    }

    /// How long the current pause still lasts (zero when not paused).
    pub fn paused_for(&self) -> Duration {
        // Acquire pairs with the Release in `observe`; see there.
        let until = self.pause_until.load(Ordering::Acquire);
        Duration::from_nanos(until.saturating_sub(self.clock.now()))
    }

    /// Counters so far.
    pub fn stats(&self) -> OutboundStats {
        // Relaxed: statistics.
        OutboundStats {
            checks: self.checks.load(Ordering::Relaxed),
            admitted: self.admitted.load(Ordering::Relaxed),
            limited: self.limited.load(Ordering::Relaxed),
            rate_factor: self.throttle.lock().factor(),
        }
    }

    /// Applies what a response said: pause, slow down, or recover. Observe
    /// the response of every admitted request (429s and successes alike):
    /// the guard counts those still in flight when it spreads what an
    /// upstream reports remaining.
    pub fn observe(&self, signal: &UpstreamSignal) {
        let now = self.clock.now();
        let mut pause = None;
        let before = self.gap_at(now);
        let (steady, own, (remaining_gap, remaining_until)) = {
            let mut throttle = self.throttle.lock();
            let admitted = self.admitted.load(Ordering::Relaxed);
            let recent = self.sent.recent(now, 8);
            let in_flight = throttle.on_response(admitted, recent);
            if signal.is_limited() {
                self.limited.fetch_add(1, Ordering::Relaxed);
                // A 503 is an outage, not a limit: it pauses only.
                if !signal.is_outage() {
                    throttle.on_limited(now, self.sent.per_second(now));
                }
                // Without a `Retry-After`, the reset of the limit the answer
                // reports, if that one is spent (a limit with requests left
                // is not the one that refused): else the fallback.
                // A reset already past (clock skew) names no time either.
                let spent_reset = match signal.remaining() {
                    None | Some(0) => signal.reset_after().filter(|d| !d.is_zero()),
                    Some(_) => None,
                };
                pause = Some(
                    signal
                        .retry_after()
                        .or(spent_reset)
                        .map_or(self.fallback_pause, duration_to_nanos),
                );
            } else {
                throttle.on_accepted(now);
                if let (Some(remaining), Some(reset)) = (signal.remaining(), signal.reset_after()) {
                    let reset = duration_to_nanos(reset).min(self.max_pause);
                    let left = remaining.saturating_sub(in_flight);
                    if throttle.on_remaining(left, reset, now) {
                        pause = Some(reset);
                    }
                } else if signal.remaining() == Some(0) {
                    pause = signal.reset_after().map(duration_to_nanos);
                }
            }
            if let Some((quota, window)) = signal.policy() {
                throttle.on_policy(quota, window);
            }
            if let Some(pause) = pause {
                throttle.on_pause(now.saturating_add(pause.min(self.max_pause)));
            }
            (
                throttle.steady_gap(),
                throttle.own_gap(),
                throttle.remaining_gap(),
            )
        };
        // Relaxed: pacing parameters; a head that reads a previous value
        // paces one request by it.
        self.gap.store(steady, Ordering::Relaxed);
        self.own_gap.store(own, Ordering::Relaxed);
        self.remaining_gap.store(remaining_gap, Ordering::Relaxed);
        self.remaining_until
            .store(remaining_until, Ordering::Relaxed);
        let after = self.gap_at(now);
        if after < before {
            // A faster pace (a corrected header, a raised limit) shortens
            // the wait already scheduled in proportion. Relaxed: a pacing
            // parameter; the head's own store after an admission wins a
            // race, which only paces one request by the older gap.
            // Never before what the configured rate alone allows after the
            // last admission.
            let next = self.next_free.load(Ordering::Relaxed);
            if next > now {
                let scaled = u128::from(next - now) * u128::from(after) / u128::from(before.max(1));
                let scaled = u64::try_from(scaled).unwrap_or(u64::MAX);
                let floor = self.own_next.load(Ordering::Relaxed);
                self.next_free
                    .fetch_min(now.saturating_add(scaled).max(floor), Ordering::Relaxed);
            }
        }
        if let Some(pause) = pause {
            let until = now.saturating_add(pause.min(self.max_pause));
            // Release/Acquire with the admission's load: an admission that
            // reads the clock after this store is ordered after it and sees
            // the pause.
            self.pause_until.fetch_max(until, Ordering::Release);
        }
    }

    /// [`observe`](OutboundLimiter::observe) for a response given as status
    /// and name/value pairs, arriving now.
    pub fn observe_response<'a>(
        &self,
        status: u16,
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> UpstreamSignal {
        let signal = UpstreamSignal::from_pairs(status, headers, SystemTime::now());
        self.observe(&signal);
        signal
    }

    /// [`observe`](OutboundLimiter::observe) for an [`http`] response's
    /// status and headers (reqwest, hyper), arriving now. Feature `http`.
    #[cfg(feature = "http")]
    pub fn observe_http(
        &self,
        status: http::StatusCode,
        headers: &http::HeaderMap,
    ) -> UpstreamSignal {
        let signal = UpstreamSignal::from_http(status, headers, SystemTime::now());
        self.observe(&signal);
        signal
    }

    /// Blocks until a call of cost 1 may go.
    ///
    /// # Errors
    ///
    /// As [`wait_n`](OutboundLimiter::wait_n).
    pub fn wait(&self) -> Result<Decision, WaitError> {
        self.wait_n(1)
    }

    /// Blocks until a call of `cost` may go.
    ///
    /// # Errors
    ///
    /// [`WaitError::CostExceedsCapacity`] at once when a limit can never
    /// admit `cost`.
    pub fn wait_n(&self, cost: u32) -> Result<Decision, WaitError> {
        wait_blocking(
            self,
            self.queue.is_idle(),
            || WaitQueue::join(&self.queue),
            cost,
            None,
            &self.jitter,
        )
    }

    /// Blocks until a call of `cost` may go, or fails, consuming nothing,
    /// when it cannot go by `deadline` (a pause past the deadline included).
    ///
    /// # Errors
    ///
    /// [`WaitError::DeadlineExceeded`], [`WaitError::QueuedAtDeadline`],
    /// [`WaitError::CostExceedsCapacity`].
    pub fn wait_n_by(&self, cost: u32, deadline: Instant) -> Result<Decision, WaitError> {
        wait_blocking(
            self,
            self.queue.is_idle(),
            || WaitQueue::join(&self.queue),
            cost,
            Some(deadline),
            &self.jitter,
        )
    }
}

#[cfg(feature = "tokio")]
impl<C: Clock> OutboundLimiter<C> {
    /// Waits until a call of cost 1 may go.
    ///
    /// # Errors
    ///
    /// As [`until_n_ready`](OutboundLimiter::until_n_ready).
    pub async fn until_ready(&self) -> Result<Decision, WaitError> {
        self.until_n_ready(1).await
    }

    /// Waits until a call of `cost` (GraphQL points, a batch) may go.
    ///
    /// # Errors
    ///
    /// [`WaitError::CostExceedsCapacity`] at once when a limit can never
    /// admit `cost`.
    pub async fn until_n_ready(&self, cost: u32) -> Result<Decision, WaitError> {
        crate::wait::wait_async(
            self,
            self.queue.is_idle(),
            || WaitQueue::join(&self.queue),
            cost,
            None,
            &self.jitter,
        )
        .await
    }

    /// Waits until a call of `cost` may go, or fails, consuming nothing,
    /// when it cannot go by `deadline` (on tokio's clock).
    ///
    /// # Errors
    ///
    /// [`WaitError::DeadlineExceeded`], [`WaitError::QueuedAtDeadline`],
    /// [`WaitError::CostExceedsCapacity`].
    pub async fn until_n_ready_by(
        &self,
        cost: u32,
        deadline: tokio::time::Instant,
    ) -> Result<Decision, WaitError> {
        crate::wait::wait_async(
            self,
            self.queue.is_idle(),
            || WaitQueue::join(&self.queue),
            cost,
            Some(deadline),
            &self.jitter,
        )
        .await
    }
}

/// The longest pause by default: an hour, GitHub's longest window.
const DEFAULT_MAX_PAUSE: u64 = 3600 * 1_000_000_000;

/// The longest period over which the guard spreads calls evenly by
/// default: a minute.
const EVEN_UP_TO: u64 = 60 * 1_000_000_000;

/// The quota the guard paces and adapts by: of the limits, the one with
/// the shortest period (the one a burst meets first), the slowest of those.
fn pacing_quota(limits: &AllOf) -> Option<crate::Quota> {
    limits
        .members()
        .iter()
        .filter_map(|m| m.quota())
        .min_by(|a, b| {
            a.period_nanos().cmp(&b.period_nanos()).then_with(|| {
                // Slower first: a longer emission interval, compared
                // exactly as period_b * limit_a against period_a * limit_b.
                let lhs = u128::from(b.period_nanos()) * u128::from(a.limit());
                let rhs = u128::from(a.period_nanos()) * u128::from(b.limit());
                lhs.cmp(&rhs)
            })
        })
}

impl<C: Clock> OutboundLimiter<C> {
    /// The pacing gap at `now` (ns per unit of cost; 0: none).
    fn gap_at(&self, now: u64) -> u64 {
        // Relaxed: pacing parameters (see `observe`).
        let steady = self.gap.load(Ordering::Relaxed);
        if now < self.remaining_until.load(Ordering::Relaxed) {
            steady.max(self.remaining_gap.load(Ordering::Relaxed))
        } else {
            steady
        }
    }

    /// The pause or pacing wait at `now`, if any.
    fn held(&self, now: u64) -> Option<u64> {
        let until = self.pause_until.load(Ordering::Acquire);
        if now < until {
            return Some(until - now);
        }
        let next = self.next_free.load(Ordering::Relaxed);
        if self.gap_at(now) > 0 && now < next {
            return Some(next - now);
        }
        None
    }

    fn decide(&self, cost: u32, record: bool) -> Result<Step, WaitError> {
        let now = self.clock.now();
        if let Some(wait) = self.held(now) {
            return Ok(Step::Wait(wait));
        }
        if !record {
            return step_of(self.limits.peek_n(cost)?);
        }
        self.checks.fetch_add(1, Ordering::Relaxed);
        let step = step_of(self.limits.check_n(cost)?)?;
        if let Step::Pass(_) = step {
            self.admitted.fetch_add(1, Ordering::Relaxed);
            self.sent.record(now, u64::from(cost));
            let gap = self.gap_at(now);
            if gap > 0 {
                // Keep the schedule rather than restart it from `now`: a
                // wake-up that is late by tokio's timer resolution (it
                // rounds up to the millisecond) must not lower the paced
                // rate. Lateness beyond that is idleness and is not
                // credited, so no burst follows a pause.
                const TIMER_SLACK: u64 = 1_000_000;
                // What headers impose on a costly call waits no longer than
                // any pause may last; the configured rate is kept.
                let own = self.own_gap.load(Ordering::Relaxed);
                let step = gap
                    .saturating_mul(u64::from(cost))
                    .min(self.max_pause)
                    .max(own.saturating_mul(u64::from(cost)));
                let previous = self.next_free.load(Ordering::Relaxed);
                let start = previous.max(now.saturating_sub(TIMER_SLACK.min(step)));
                let mut next = start.saturating_add(step);
                // Spreading what remains ends at the upstream's reset.
                let until = self.remaining_until.load(Ordering::Relaxed);
                if now < until {
                    let steady = self.gap.load(Ordering::Relaxed);
                    let steady_step = steady
                        .saturating_mul(u64::from(cost))
                        .min(self.max_pause)
                        .max(own.saturating_mul(u64::from(cost)));
                    let steady_next = start.saturating_add(steady_step);
                    next = next.min(until.max(steady_next));
                }
                self.next_free.store(next, Ordering::Relaxed);
                self.own_next.store(
                    start.saturating_add(own.saturating_mul(u64::from(cost))),
                    Ordering::Relaxed,
                );
            }
        }
        Ok(step)
    }
}

impl<C: Clock> Gate for OutboundLimiter<C> {
    fn attempt(&self, cost: u32) -> Result<Step, WaitError> {
        self.decide(cost, true)
    }

    fn probe(&self, cost: u32) -> Result<Step, WaitError> {
        self.decide(cost, false)
    }

    fn fast_path(&self) -> bool {
        // While pacing, only the head may admit, so `next_free` has a single
        // writer. Paused: the head waits the pause out; newcomers queue.
        let now = self.clock.now();
        self.gap_at(now) == 0 && self.pause_until.load(Ordering::Acquire) <= now
    }
}
