//! The algorithm chosen at run time: [`AnyAlgorithm`], one enum over the
//! five algorithms, for configurations that name the algorithm as data
//! (`"sliding_window_counter"`).

use super::{
    Algorithm, FixedWindow, LeakyBucket, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
    WindowLog,
};
use crate::sync::AtomicU64;
use crate::{CheckError, Decision, Quota, QuotaError};
use std::fmt;
use std::str::FromStr;

/// The name of an algorithm, as configuration files write it.
///
/// Parses from (and displays as) `"token_bucket"`, `"leaky_bucket"`,
/// `"fixed_window"`, `"sliding_window_log"` and `"sliding_window_counter"`,
/// and parses the short names and aliases of [`from_str`](Self::from_str)
/// (`"gcra"`, `"nginx"`, `"sliding"`, ...); case, `-`, `_` and spaces do
/// not matter. Policy files and the simulator read names through it.
///
/// # Examples
///
/// ```
/// use rategate::algorithm::AlgorithmKind;
///
/// let kind: AlgorithmKind = "sliding-window-counter".parse()?;
/// assert_eq!(kind, AlgorithmKind::SlidingWindowCounter);
/// assert_eq!(kind.to_string(), "sliding_window_counter");
/// let err = "token_buckett".parse::<AlgorithmKind>().unwrap_err();
/// assert_eq!(err.name(), "token_buckett");
/// # Ok::<(), rategate::algorithm::UnknownAlgorithm>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AlgorithmKind {
    /// [`TokenBucket`] (GCRA). The default.
    #[default]
    TokenBucket,
    /// [`LeakyBucket`] (nginx `limit_req`, with the quota's `burst`,
    /// `nodelay` and `delay=N`).
    LeakyBucket,
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingWindowLog`].
    SlidingWindowLog,
    /// [`SlidingWindowCounter`].
    SlidingWindowCounter,
}

impl AlgorithmKind {
    /// Every kind, in the order of [`AlgorithmKind::NAMES`].
    pub const ALL: [AlgorithmKind; 5] = [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingWindowLog,
        AlgorithmKind::SlidingWindowCounter,
    ];

    /// The canonical names, in the order of [`AlgorithmKind::ALL`].
    pub const NAMES: [&'static str; 5] = [
        "token_bucket",
        "leaky_bucket",
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
    ];

    /// The canonical name (`"token_bucket"`).
    pub fn name(self) -> &'static str {
        let index = AlgorithmKind::ALL.iter().position(|&k| k == self);
        index.map_or("token_bucket", |i| AlgorithmKind::NAMES[i])
    }

    /// The short name (`token`, `fixed`, `log`, `counter`, `leaky`), as the
    /// simulator's `ALGORITHM:QUOTA` strings write it.
    pub fn short(self) -> &'static str {
        match self {
            AlgorithmKind::TokenBucket => "token",
            AlgorithmKind::FixedWindow => "fixed",
            AlgorithmKind::SlidingWindowLog => "log",
            AlgorithmKind::SlidingWindowCounter => "counter",
            AlgorithmKind::LeakyBucket => "leaky",
        }
    }

    /// A name for people (`"token bucket"`).
    pub fn label(self) -> &'static str {
        match self {
            AlgorithmKind::TokenBucket => "token bucket",
            AlgorithmKind::FixedWindow => "fixed window",
            AlgorithmKind::SlidingWindowLog => "sliding window log",
            AlgorithmKind::SlidingWindowCounter => "sliding window counter",
            AlgorithmKind::LeakyBucket => "leaky bucket",
        }
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AlgorithmKind {
    type Err = UnknownAlgorithm;

    /// The canonical names, the short ones, and the aliases people use
    /// (`gcra`, `bucket`, `window`, `sliding`, `nginx`, ...); case, `-`
    /// and spaces do not matter. Policy files, the simulator and the CLI
    /// all read names through this one table.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let normal = s.trim().to_ascii_lowercase().replace(['-', ' '], "_");
        Ok(match normal.as_str() {
            "token_bucket" | "token" | "gcra" | "bucket" => AlgorithmKind::TokenBucket,
            "fixed_window" | "fixed" | "window" => AlgorithmKind::FixedWindow,
            "sliding_window_log" | "log" | "sliding_log" => AlgorithmKind::SlidingWindowLog,
            "sliding_window_counter" | "counter" | "sliding" | "sliding_counter" => {
                AlgorithmKind::SlidingWindowCounter
            }
            "leaky_bucket" | "leaky" | "nginx" => AlgorithmKind::LeakyBucket,
            _ => return Err(UnknownAlgorithm { name: s.to_owned() }),
        })
    }
}

/// A name that is not an algorithm's; carries the name as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm {
    name: String,
}

impl UnknownAlgorithm {
    /// The rejected name, as written.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown algorithm {:?} (expected one of: {})",
            self.name,
            AlgorithmKind::NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}

/// Why [`AnyAlgorithm::from_name`] could not build an algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AlgorithmError {
    /// The name is not an algorithm's.
    Unknown(UnknownAlgorithm),
    /// The algorithm cannot represent the quota.
    Quota {
        /// The algorithm that refused it.
        kind: AlgorithmKind,
        /// Why.
        error: QuotaError,
    },
}

impl fmt::Display for AlgorithmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlgorithmError::Unknown(e) => e.fmt(f),
            AlgorithmError::Quota { kind, error } => write!(f, "{kind}: {error}"),
        }
    }
}

impl std::error::Error for AlgorithmError {
    // Display already prints the wrapped error's message, so the chain
    // continues below it (as `#[error(transparent)]` does): printed once.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AlgorithmError::Unknown(e) => e.source(),
            AlgorithmError::Quota { error, .. } => error.source(),
        }
    }
}

impl From<UnknownAlgorithm> for AlgorithmError {
    fn from(e: UnknownAlgorithm) -> Self {
        AlgorithmError::Unknown(e)
    }
}

/// One of the five algorithms, chosen by value: `RateLimiter<AnyAlgorithm>`
/// and `KeyedRateLimiter<K, AnyAlgorithm>` decide exactly as the algorithm
/// named would, so a configuration file can name it.
///
/// A check costs one extra branch on the variant (predicted perfectly for a
/// given limiter); the README quotes the measured difference from the static
/// type. Build the limiters with
/// [`RateLimiter::from_algorithm`](crate::RateLimiter::from_algorithm) and
/// [`KeyedRateLimiterBuilder::algorithm`](crate::KeyedRateLimiterBuilder::algorithm);
/// [`Algorithm::from_quota`] alone is [`QuotaError::AlgorithmNotChosen`].
///
/// Per-key state ([`AnyState`]) is one word for the four one-word
/// algorithms (16 bytes with the tag) and a boxed log for the sliding
/// window log.
///
/// # Examples
///
/// ```
/// use rategate::algorithm::AnyAlgorithm;
/// use rategate::{ManualClock, Quota, RateLimiter};
///
/// let quota: Quota = "2/s burst=1 nodelay".parse()?;
/// let algorithm = AnyAlgorithm::from_name("leaky_bucket", &quota)?;
/// let limiter = RateLimiter::from_algorithm(algorithm, quota, ManualClock::new());
/// assert!(limiter.check().is_allowed());
/// assert!(limiter.check().is_allowed()); // the burst of 1, not delayed
/// assert!(!limiter.check().is_allowed());
///
/// let err = AnyAlgorithm::from_name("leaky_buckets", &quota).unwrap_err();
/// assert!(err.to_string().contains("\"leaky_buckets\""));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyAlgorithm {
    /// [`TokenBucket`].
    TokenBucket(TokenBucket),
    /// [`LeakyBucket`].
    LeakyBucket(LeakyBucket),
    /// [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// [`SlidingWindowLog`].
    SlidingWindowLog(SlidingWindowLog),
    /// [`SlidingWindowCounter`].
    SlidingWindowCounter(SlidingWindowCounter),
}

/// [`AnyAlgorithm`]'s per-key state.
#[derive(Debug)]
pub enum AnyState {
    /// The state word of a one-word algorithm.
    Word(AtomicU64),
    /// The sliding window log's log, boxed so that the one-word algorithms'
    /// keys stay small.
    Log(Box<WindowLog>),
}

impl AnyAlgorithm {
    /// The algorithm `kind` for `quota`.
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when that algorithm cannot represent `quota`.
    pub fn new(kind: AlgorithmKind, quota: &Quota) -> Result<AnyAlgorithm, QuotaError> {
        Ok(match kind {
            AlgorithmKind::TokenBucket => {
                AnyAlgorithm::TokenBucket(TokenBucket::from_quota(quota)?)
            }
            AlgorithmKind::LeakyBucket => {
                AnyAlgorithm::LeakyBucket(LeakyBucket::from_quota(quota)?)
            }
            AlgorithmKind::FixedWindow => {
                AnyAlgorithm::FixedWindow(FixedWindow::from_quota(quota)?)
            }
            AlgorithmKind::SlidingWindowLog => {
                AnyAlgorithm::SlidingWindowLog(SlidingWindowLog::from_quota(quota)?)
            }
            AlgorithmKind::SlidingWindowCounter => {
                AnyAlgorithm::SlidingWindowCounter(SlidingWindowCounter::from_quota(quota)?)
            }
        })
    }

    /// The algorithm named `name` (see [`AlgorithmKind`]) for `quota`.
    ///
    /// # Errors
    ///
    /// [`AlgorithmError::Unknown`] with the name as written, or
    /// [`AlgorithmError::Quota`] when the algorithm cannot represent `quota`.
    pub fn from_name(name: &str, quota: &Quota) -> Result<AnyAlgorithm, AlgorithmError> {
        let kind: AlgorithmKind = name.parse()?;
        AnyAlgorithm::new(kind, quota).map_err(|error| AlgorithmError::Quota { kind, error })
    }

    /// The same algorithm for another quota (what a runtime quota change
    /// must use: [`Algorithm::from_quota`] names no algorithm).
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when this algorithm cannot represent `quota`.
    pub fn with_quota(&self, quota: &Quota) -> Result<AnyAlgorithm, QuotaError> {
        AnyAlgorithm::new(self.kind(), quota)
    }

    /// Which algorithm this is.
    pub fn kind(&self) -> AlgorithmKind {
        match self {
            AnyAlgorithm::TokenBucket(_) => AlgorithmKind::TokenBucket,
            AnyAlgorithm::LeakyBucket(_) => AlgorithmKind::LeakyBucket,
            AnyAlgorithm::FixedWindow(_) => AlgorithmKind::FixedWindow,
            AnyAlgorithm::SlidingWindowLog(_) => AlgorithmKind::SlidingWindowLog,
            AnyAlgorithm::SlidingWindowCounter(_) => AlgorithmKind::SlidingWindowCounter,
        }
    }
}

/// Dispatches one call on the algorithm's variant and its state's: `$call`
/// runs with `$a` bound to the concrete algorithm and `$s` to its state.
/// A state of another kind than the algorithm (only ever handed in by a
/// caller mixing limiters' states) takes `$mismatch`. Forwarding a new
/// trait method is one line: `dispatch!(self, state, |a, s| a.method(s, ..), fallback)`.
macro_rules! dispatch {
    ($self:expr, $state:expr, |$a:ident, $s:ident| $call:expr, $mismatch:expr) => {
        match ($self, $state) {
            (AnyAlgorithm::TokenBucket($a), AnyState::Word($s)) => $call,
            (AnyAlgorithm::LeakyBucket($a), AnyState::Word($s)) => $call,
            (AnyAlgorithm::FixedWindow($a), AnyState::Word($s)) => $call,
            (AnyAlgorithm::SlidingWindowCounter($a), AnyState::Word($s)) => $call,
            (AnyAlgorithm::SlidingWindowLog($a), AnyState::Log($s)) => $call,
            _ => $mismatch,
        }
    };
}

/// The decision for a state of another algorithm's kind: denied (fail
/// closed); [`Algorithm::is_idle`] says such a state is idle, so a sweep
/// replaces it with a fresh one of the right kind.
#[cold]
fn mismatched(capacity: u32) -> Result<Decision, CheckError> {
    Ok(Decision::deny(capacity, 0, 0, u64::MAX))
}

impl Algorithm for AnyAlgorithm {
    type State = AnyState;

    /// [`QuotaError::AlgorithmNotChosen`]: a quota names no algorithm, and
    /// a silent default would run one nobody chose. Choose one with
    /// [`AnyAlgorithm::new`] or [`AnyAlgorithm::from_name`].
    fn from_quota(_quota: &Quota) -> Result<Self, QuotaError> {
        Err(QuotaError::AlgorithmNotChosen)
    }

    fn new_state(&self) -> AnyState {
        match self {
            AnyAlgorithm::TokenBucket(a) => AnyState::Word(a.new_state()),
            AnyAlgorithm::LeakyBucket(a) => AnyState::Word(a.new_state()),
            AnyAlgorithm::FixedWindow(a) => AnyState::Word(a.new_state()),
            AnyAlgorithm::SlidingWindowCounter(a) => AnyState::Word(a.new_state()),
            AnyAlgorithm::SlidingWindowLog(a) => AnyState::Log(Box::new(a.new_state())),
        }
    }

    // Forced, as `RateLimiter::check` is: five inlined algorithms make the
    // function large, and as a call it copies the decision through the
    // stack (the figures are at `update_word`).
    #[inline(always)]
    fn check(&self, state: &AnyState, now: u64, cost: u32) -> Result<Decision, CheckError> {
        dispatch!(
            self,
            state,
            |a, s| a.check(s, now, cost),
            mismatched(self.capacity())
        )
    }

    #[inline(always)]
    fn check_one(&self, state: &AnyState, now: u64) -> Decision {
        dispatch!(
            self,
            state,
            |a, s| a.check_one(s, now),
            Decision::deny(self.capacity(), 0, 0, u64::MAX)
        )
    }

    #[inline(always)]
    fn peek(&self, state: &AnyState, now: u64, cost: u32) -> Result<Decision, CheckError> {
        dispatch!(
            self,
            state,
            |a, s| a.peek(s, now, cost),
            mismatched(self.capacity())
        )
    }

    #[inline]
    fn is_idle(&self, state: &AnyState, now: u64) -> bool {
        dispatch!(self, state, |a, s| a.is_idle(s, now), true)
    }

    /// Refunds as the chosen algorithm does; a state of another kind gives
    /// nothing back.
    fn refund(&self, state: &AnyState, now: u64, cost: u32) -> u32 {
        dispatch!(self, state, |a, s| a.refund(s, now, cost), 0)
    }

    #[inline]
    fn capacity(&self) -> u32 {
        match self {
            AnyAlgorithm::TokenBucket(a) => a.capacity(),
            AnyAlgorithm::LeakyBucket(a) => a.capacity(),
            AnyAlgorithm::FixedWindow(a) => a.capacity(),
            AnyAlgorithm::SlidingWindowLog(a) => a.capacity(),
            AnyAlgorithm::SlidingWindowCounter(a) => a.capacity(),
        }
    }
}
