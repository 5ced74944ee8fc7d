//! Time sources.
//!
//! A limiter reads time as `u64` nanoseconds since its clock's origin, through
//! the [`Clock`] trait. Four clocks ship with the crate:
//!
//! * [`QuantaClock`], the default: a TSC-backed [`quanta`] clock (the raw
//!   counter where the OS vouches for its synchronization across cores,
//!   else clamped per thread so that no thread sees time go backwards);
//! * [`StdClock`]: [`std::time::Instant`], for platforms where the TSC is not
//!   trusted;
//! * [`UnixClock`]: nanoseconds since the Unix epoch, so
//!   that windows fall on Unix multiples of their period (a 1 h window
//!   resets on the hour, and separate processes agree on window edges);
//! * [`ManualClock`]: time moves only when a test says so; clones share one
//!   time.

use crate::sync::{Arc, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time for a limiter: nanoseconds since the clock's origin.
///
/// Clones of a clock must share one origin, so that every limiter handle built
/// from one clock agrees on what "now" is.
///
/// # Examples
///
/// ```
/// use rategate::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.now(), 5_000_000);
/// ```
pub trait Clock: Clone + Send + Sync + 'static {
    /// Nanoseconds elapsed since this clock's origin.
    fn now(&self) -> u64;
}

/// Saturating conversion of a [`Duration`] to nanoseconds in a `u64`
/// (enough for 584 years).
pub(crate) fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A high-water mark that makes a raw clock reading monotonic for everyone
/// who reads it through the mark.
///
/// Public only so the loom models can reach it (the module is private).
#[derive(Debug, Default)]
pub struct Monotonic {
    latest: AtomicU64,
}

impl Monotonic {
    /// Returns `max(raw, every value returned before)`: a reading earlier than
    /// one already handed out counts as no time elapsed.
    #[inline]
    pub fn clamp(&self, raw: u64) -> u64 {
        // Relaxed is enough: the mark orders nothing but itself, and all
        // operations on one atomic are totally ordered (its modification
        // order), so readers can never observe it going back.
        let seen = self.latest.load(Ordering::Relaxed);
        if raw <= seen {
            return seen;
        }
        // Only writers that advance the mark touch the cache line for writing.
        let previous = self.latest.fetch_max(raw, Ordering::Relaxed);
        previous.max(raw)
    }
}

/// The default clock: [`quanta`]'s TSC-backed clock, which does not go back
/// on a thread as far as the operating system can tell.
///
/// Reading the TSC costs a few nanoseconds, far less than a system call. On
/// a machine whose TSCs are not synchronized, a reading on one core can be
/// slightly earlier than one taken just before on another core, so a thread
/// that migrates between cores could see time step back (governor's issue
/// 299). What each constructor guarantees:
///
/// * [`QuantaClock::new`] (the default): time does not go back on a
///   thread, as far as the operating system can tell. Where it vouches for
///   the counter (on Linux, the kernel's own clocksource is `tsc`, which the
///   kernel keeps only while it trusts every CPU's TSC to be synchronized,
///   and which its `CLOCK_MONOTONIC` then relies on), readings are the raw
///   counter and cost nothing more (on x86-64 the clock then reads the TSC
///   itself, `rdtsc` inline, and turns ticks into nanoseconds with one
///   64-bit multiplication by quanta's own calibration, where quanta's
///   reading is a call and a 128-bit shift: a check takes 65 to 77
///   instructions against 99 through quanta's reading,
///   `measure/wait_instructions.rs` mode `check` under callgrind, and a
///   token bucket's denial 12.8 ns
///   against 14.4 on a 2-vCPU VM, `cargo bench --bench direct`, builds
///   with and without it). Elsewhere it keeps a per-thread
///   high-water mark of the counter (a thread-local read and write per
///   reading, no shared write). The check is made once per process, when
///   the first clock is built. What the raw mode does not rule out: the
///   kernel reads the TSC with a fence and clamps its own clock, quanta
///   does neither, and the kernel may stop trusting the TSC after this
///   process looked; a reading can then be slightly earlier than the
///   thread's previous one. Every algorithm counts that as no time elapsed
///   (never granting extra); where readings must never step back on a
///   thread, use [`QuantaClock::per_thread`] (a thread-local read and write per
///   reading; `cargo bench --bench clock`).
/// * [`QuantaClock::per_thread`]: always the per-thread mark.
/// * [`QuantaClock::strict`]: a high-water mark shared by all threads, so
///   readings are totally ordered across threads; it costs an atomic
///   read-modify-write on one shared cache line per advancing reading.
///
/// Across threads no clock can do more for a limiter than the first two:
/// between reading the clock and applying its decision a thread can be
/// overtaken, so decisions on one key may arrive out of clock order, and
/// every algorithm treats a time earlier than its state's as no time
/// elapsed (never granting extra).
///
/// Clones share the origin (and the shared mark).
///
/// # Examples
///
/// ```
/// use rategate::{Clock, QuantaClock};
///
/// let clock = QuantaClock::new();
/// let a = clock.now();
/// let b = clock.clone().now();
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone)]
pub struct QuantaClock {
    inner: Arc<QuantaInner>,
}

#[derive(Debug)]
struct QuantaInner {
    clock: quanta::Clock,
    origin: u64,
    clamp: Clamp,
}

/// How a [`QuantaClock`] keeps its readings monotonic.
#[derive(Debug)]
enum Clamp {
    /// The counter itself is monotonic across cores (the OS vouches for it),
    /// and it is the x86-64 TSC: read inline and scaled by one 64-bit
    /// multiplication by `nanos_per_tick`, nanoseconds per tick as a binary
    /// fraction (`2^64` is one nanosecond per tick).
    Tsc { nanos_per_tick: u64 },
    /// The counter itself is monotonic across cores (the OS vouches for it).
    None,
    /// A per-thread high-water mark of the raw counter.
    PerThread,
    /// A high-water mark shared by all threads.
    Shared(Monotonic),
}

/// Whether the operating system keeps its own monotonic clock on the TSC,
/// which it does only once it has checked that the TSCs of all CPUs are
/// synchronized. Read once per process.
fn counter_is_synchronized() -> bool {
    static SYNCHRONIZED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SYNCHRONIZED.get_or_init(|| {
        cfg!(target_os = "linux")
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|source| source.trim() == "tsc")
    })
}

/// The x86-64 time-stamp counter, read inline (quanta reads the same
/// counter through a call and scales it with a 128-bit shift).
#[cfg(all(target_arch = "x86_64", not(rategate_loom)))]
#[inline]
fn read_tsc() -> u64 {
    // SAFETY: `rdtsc` exists on every x86-64 CPU and touches no memory.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(all(target_arch = "x86_64", not(rategate_loom))))]
fn read_tsc() -> u64 {
    unreachable!("Clamp::Tsc is only chosen on x86-64")
}

/// Nanoseconds per TSC tick as a binary fraction (see [`Clamp::Tsc`]), from
/// quanta's calibration of `clock`, when `clock` reads the TSC at all and
/// the TSC ticks faster than once a nanosecond; else `None` (quanta's own
/// reading then serves).
#[cfg(all(target_arch = "x86_64", not(rategate_loom)))]
fn tsc_scale(clock: &quanta::Clock) -> Option<u64> {
    // quanta reads the TSC when it finds it invariant, else the OS clock in
    // nanoseconds. A TSC reading between two of quanta's raw readings says
    // which: nanoseconds since boot cannot bracket a counter that ticks at
    // GHz rates since power-on, except by a coincidence of a few
    // nanoseconds, which the scale test below also has to survive.
    let before = clock.raw();
    let tsc = read_tsc();
    let after = clock.raw();
    if !(before <= tsc && tsc <= after) {
        return None;
    }
    // quanta's scale, applied to 2^60 ticks: the nanoseconds per tick in
    // 60 fractional bits. quanta's OS fallback does not scale (one tick, one
    // nanosecond), nor may a counter slower than 1 GHz be scaled into a
    // 64-bit fraction.
    const SPAN: u64 = 1 << 60;
    let nanos = clock.delta_as_nanos(0, SPAN);
    (nanos > 0 && nanos < SPAN).then_some(nanos << 4)
}

#[cfg(not(all(target_arch = "x86_64", not(rategate_loom))))]
fn tsc_scale(_clock: &quanta::Clock) -> Option<u64> {
    None
}

#[cfg(not(rategate_loom))]
std::thread_local! {
    /// The largest raw counter value this thread has read. Raw values are
    /// the TSC (or the OS monotonic clock quanta falls back to), one scale
    /// for every `quanta::Clock` in the process, so one mark serves all.
    static LAST_RAW: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl QuantaClock {
    /// A new clock whose origin is now: the raw counter where the OS vouches
    /// for it, else clamped per thread (see the type's docs for what each
    /// guarantees).
    pub fn new() -> Self {
        let clamp = if counter_is_synchronized() {
            Clamp::None
        } else {
            Clamp::PerThread
        };
        Self::build(clamp)
    }

    /// A new clock whose origin is now, clamped per thread whatever the OS
    /// says about the counter.
    pub fn per_thread() -> Self {
        Self::build(Clamp::PerThread)
    }

    /// A new clock whose origin is now, clamped by a high-water mark shared
    /// by all threads (readings totally ordered across threads).
    pub fn strict() -> Self {
        Self::build(Clamp::Shared(Monotonic::default()))
    }

    fn build(clamp: Clamp) -> Self {
        let clock = quanta::Clock::new();
        let clamp = match clamp {
            Clamp::None => tsc_scale(&clock)
                .map_or(Clamp::None, |nanos_per_tick| Clamp::Tsc { nanos_per_tick }),
            other => other,
        };
        let origin = match clamp {
            Clamp::Tsc { .. } => read_tsc(),
            _ => clock.raw(),
        };
        QuantaClock {
            inner: Arc::new(QuantaInner {
                clock,
                origin,
                clamp,
            }),
        }
    }

    #[cfg(not(rategate_loom))]
    #[inline]
    fn thread_clamped(raw: u64) -> u64 {
        LAST_RAW.with(|last| {
            let clamped = raw.max(last.get());
            last.set(clamped);
            clamped
        })
    }

    #[cfg(rategate_loom)]
    fn thread_clamped(raw: u64) -> u64 {
        raw
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        let inner = &*self.inner;
        if let Clamp::Tsc { nanos_per_tick } = inner.clamp {
            // A counter below the origin (a lagging core just after
            // creation) gives 0, as quanta's own scaling does.
            let ticks = read_tsc().saturating_sub(inner.origin);
            return ((u128::from(ticks) * u128::from(nanos_per_tick)) >> 64) as u64;
        }
        let mut raw = inner.clock.raw();
        if let Clamp::PerThread = inner.clamp {
            raw = Self::thread_clamped(raw);
        }
        // A raw value below the origin (a lagging core just after creation)
        // gives 0: quanta saturates the delta.
        let nanos = inner.clock.delta_as_nanos(inner.origin, raw);
        match &inner.clamp {
            Clamp::Shared(mark) => mark.clamp(nanos),
            _ => nanos,
        }
    }
}

/// The wall clock: nanoseconds since the Unix epoch (1970-01-01 00:00 UTC),
/// read from [`SystemTime`] once, at creation, then advanced by a
/// monotonic [`QuantaClock`]. Clones share the origin.
///
/// # Which clock to choose
///
/// For pure rate limiting keep the monotonic default ([`QuantaClock`]): it
/// starts at zero and nothing outside the process can move it. Choose
/// `UnixClock` when time must mean the same thing in several processes or
/// on the wall: with it a [`FixedWindow`](crate::FixedWindow) or
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) of one hour resets
/// on the hour, as an API's documented reset does, separate processes agree
/// on window edges and arrival times (to the accuracy of their clocks'
/// synchronisation when they started: the Redis synced and leased limiters
/// use it for that), and [`reset_at`](UnixClock::reset_at) reports the
/// reset as a Unix time. (The Redis limiter's scripts count in the server's
/// Unix time.)
///
/// A later step of the system clock (an NTP correction) does not move a
/// `UnixClock`, which never goes backwards; it drifts from the wall clock
/// only as the processor's clock does (parts per million: a clock created
/// anew, by a restart, reads the wall clock again). A reading is about
/// 1.8 x 10^18 ns in 2026, within `u64` until the year 2554. The leaky
/// bucket keeps milliseconds below 2^41 from its clock's origin, which Unix
/// time passes in 2039: use a monotonic clock for it.
///
/// # Examples
///
/// ```
/// use rategate::{Clock, FixedWindow, Quota, RateLimiter, UnixClock};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let clock = UnixClock::new();
/// let hourly = RateLimiter::<FixedWindow, _>::with_clock(Quota::per_hour(5000)?, clock.clone())?;
/// let decision = hourly.check();
/// // The window resets at the top of the next hour.
/// let reset = clock.reset_at(&decision).duration_since(UNIX_EPOCH)?;
/// assert_eq!(reset.as_secs() % 3600, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct UnixClock {
    /// The Unix time at creation, in nanoseconds.
    anchor: u64,
    since: QuantaClock,
}

impl UnixClock {
    /// A clock reading the Unix time now (0 if the system clock is before
    /// 1970).
    pub fn new() -> Self {
        let anchor = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_to_nanos);
        UnixClock {
            anchor,
            since: QuantaClock::new(),
        }
    }

    /// When the state a `decision` of a limiter on this clock describes
    /// resets (`now + reset_after`), as a [`SystemTime`]. Read just after the
    /// decision; late by the time between the two. For a window algorithm,
    /// round to the window: resets fall on multiples of its period.
    pub fn reset_at(&self, decision: &crate::Decision) -> SystemTime {
        let at = self.now().saturating_add(decision.reset_after_nanos());
        UNIX_EPOCH + Duration::from_nanos(at)
    }
}

impl Default for UnixClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for UnixClock {
    #[inline]
    fn now(&self) -> u64 {
        self.anchor.saturating_add(self.since.now())
    }
}

/// A clock on [`std::time::Instant`] (monotonic by the standard library's
/// contract; a system call or vDSO read per call).
///
/// # Examples
///
/// ```
/// use rategate::{Clock, StdClock};
///
/// let clock = StdClock::new();
/// assert!(clock.now() < 1_000_000_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StdClock {
    origin: Instant,
}

impl StdClock {
    /// A new clock whose origin is now.
    pub fn new() -> Self {
        StdClock {
            origin: Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now(&self) -> u64 {
        duration_to_nanos(self.origin.elapsed())
    }
}

/// A clock that moves only when told to, for tests and simulations.
///
/// Clones share one time. Unlike the real clocks it may be [`set`] backwards,
/// so tests can check how limiters treat a clock that steps back (as no time
/// elapsed).
///
/// [`set`]: ManualClock::set
///
/// # Examples
///
/// ```
/// use rategate::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(shared.now(), 1_000_000_000);
/// shared.set(10);
/// assert_eq!(clock.now(), 10);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves time forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        self.advance_nanos(duration_to_nanos(by));
    }

    /// Moves time forward by `nanos` nanoseconds (saturating).
    pub fn advance_nanos(&self, nanos: u64) {
        // Relaxed: the clock's value orders no other memory.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(nanos))
            });
    }

    /// Sets the time, forwards or backwards.
    pub fn set(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clamps_steps_back() {
        let mark = Monotonic::default();
        assert_eq!(mark.clamp(100), 100);
        // A reading from a core whose TSC lags: no time elapsed.
        assert_eq!(mark.clamp(90), 100);
        assert_eq!(mark.clamp(100), 100);
        assert_eq!(mark.clamp(150), 150);
        assert_eq!(mark.clamp(0), 150);
    }

    #[test]
    fn monotonic_across_threads() {
        let mark = Arc::new(Monotonic::default());
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let mark = Arc::clone(&mark);
                std::thread::spawn(move || {
                    let mut last = 0;
                    // Readings that jump around, as skewed cores would give.
                    for i in 0..10_000u64 {
                        let raw = i * 10 + (t * 7919 + i * 104_729) % 97;
                        let got = mark.clamp(raw);
                        assert!(got >= last, "went back from {last} to {got}");
                        assert!(got >= raw);
                        last = got;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn quanta_clock_is_monotonic_and_shared() {
        let clock = QuantaClock::new();
        let other = clock.clone();
        let mut last = 0;
        for i in 0..10_000 {
            let now = if i % 2 == 0 { clock.now() } else { other.now() };
            assert!(now >= last);
            last = now;
        }
        std::thread::sleep(Duration::from_millis(2));
        assert!(clock.now() >= last + 1_000_000);
    }

    #[test]
    fn inline_tsc_reading_keeps_quantas_scale() {
        // Where the default clock reads the TSC itself, its nanoseconds are
        // quanta's: the same interval measured both ways agrees to within
        // the two readings' spacing plus a part in a million of scale.
        let clock = QuantaClock::new();
        let inner = &*clock.inner;
        if !matches!(inner.clamp, Clamp::Tsc { .. }) {
            // Not a machine where the OS vouches for the TSC: nothing to compare.
            return;
        }
        let (a, raw_a) = (clock.now(), inner.clock.raw());
        std::thread::sleep(Duration::from_millis(20));
        let (b, raw_b) = (clock.now(), inner.clock.raw());
        let ours = b - a;
        let quantas = inner.clock.delta_as_nanos(raw_a, raw_b);
        assert!(ours >= 20_000_000, "{ours}");
        assert!(
            ours.abs_diff(quantas) < 50_000 + quantas / 1_000_000,
            "{ours} vs {quantas}"
        );
        // And against the OS clock, to a part in a hundred.
        let start = (clock.now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (ours, os) = (clock.now() - start.0, start.1.elapsed().as_nanos() as u64);
        assert!(ours.abs_diff(os) < os / 100 + 200_000, "{ours} vs {os}");
    }

    #[test]
    fn tsc_scale_refuses_an_unscaled_clock() {
        // quanta's OS fallback (no counter) reports one nanosecond per raw
        // unit, and its raw readings do not bracket the TSC: never scaled.
        let mock = quanta::Clock::mock().0;
        assert_eq!(tsc_scale(&mock), None);
    }

    #[test]
    fn strict_quanta_clock_is_monotonic_across_threads() {
        let clock = QuantaClock::strict();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let clock = clock.clone();
                std::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..10_000 {
                        let now = clock.now();
                        assert!(now >= last);
                        last = now;
                    }
                    last
                })
            })
            .collect();
        let latest = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap();
        assert!(clock.now() >= latest);
    }

    #[test]
    fn per_thread_clamp_survives_a_counter_step_back() {
        // Simulate a migration to a lagging core: the thread's mark is ahead
        // of what the counter now reads.
        let clock = QuantaClock::per_thread();
        let ahead = clock.inner.clock.raw() + 1_000_000_000;
        LAST_RAW.with(|last| last.set(ahead));
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        assert!(a >= clock.inner.clock.delta_as_nanos(clock.inner.origin, ahead));
    }

    #[test]
    fn std_clock_advances() {
        let clock = StdClock::new();
        let a = clock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(clock.now() >= a + 2_000_000);
    }

    #[test]
    fn manual_clock_shares_time_and_saturates() {
        let clock = ManualClock::new();
        let clone = clock.clone();
        clock.advance(Duration::from_nanos(7));
        assert_eq!(clone.now(), 7);
        clone.set(3);
        assert_eq!(clock.now(), 3);
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), u64::MAX);
    }
}
