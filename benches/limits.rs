//! The physical limits of a check on this machine, to read every other
//! benchmark against: what no limiter that reads the time and updates one
//! shared word can beat.
//!
//! * `clock`: one TSC read scaled to nanoseconds since an origin, as cheaply
//!   as it can be done: on x86-64 `rdtsc` inline and one 64-bit multiply
//!   (what the default clock does where the kernel trusts the TSC), else
//!   quanta's reading.
//! * `cas`: one uncontended compare-exchange on a word in cache, each one
//!   depending on the last (as successive checks of one key do).
//! * `clock_cas`: the two together, the new value computed from the reading:
//!   the floor of a direct check.
//! * `dram`: one random, dependent memory access in a 256 MiB table (a
//!   pointer chase: each load's address comes from the previous load, so
//!   misses cannot overlap), the cost of a cache miss to memory.
//! * `clock_dram_cas`: a reading, one such miss, and a compare-exchange on
//!   the word found: the floor of a keyed check whose key is not in cache
//!   (one miss per lookup).

mod common;

use common::config;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

/// A TSC read scaled to nanoseconds since an origin.
struct Clock {
    clock: quanta::Clock,
    origin: u64,
    /// Nanoseconds per tick in 64 fractional bits, when the TSC is read
    /// inline (x86-64, and quanta itself counts in TSC ticks).
    #[cfg(target_arch = "x86_64")]
    nanos_per_tick: Option<u64>,
}

impl Clock {
    fn new() -> Self {
        let clock = quanta::Clock::new();
        #[cfg(target_arch = "x86_64")]
        {
            // quanta's scale applied to 2^60 ticks; 2^60 back means quanta
            // does not count ticks (its OS fallback).
            let nanos = clock.delta_as_nanos(0, 1 << 60);
            let nanos_per_tick = (nanos > 0 && nanos < 1 << 60).then_some(nanos << 4);
            // SAFETY: rdtsc exists on every x86-64 CPU and touches no memory.
            #[allow(unused_unsafe)]
            let origin = match nanos_per_tick {
                Some(_) => unsafe { core::arch::x86_64::_rdtsc() },
                None => clock.raw(),
            };
            Clock {
                clock,
                origin,
                nanos_per_tick,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let origin = clock.raw();
            Clock { clock, origin }
        }
    }

    #[inline]
    fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if let Some(per_tick) = self.nanos_per_tick {
            // SAFETY: as above.
            #[allow(unused_unsafe)]
            let ticks = unsafe { core::arch::x86_64::_rdtsc() }.saturating_sub(self.origin);
            return ((u128::from(ticks) * u128::from(per_tick)) >> 64) as u64;
        }
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// 256 MiB of words forming one random cycle: `next[i]` is the index to
/// visit after `i`, each entry on its own cache line.
struct Chase {
    next: Vec<AtomicU64>,
}

const LINE_WORDS: usize = 8; // 64-byte lines of u64s
const CHASE_LINES: usize = (256 << 20) / 64;

impl Chase {
    fn new() -> Self {
        // A random permutation of the lines (xorshift; fixed seed), linked
        // into one cycle so the chase visits every line before repeating.
        let mut order: Vec<usize> = (0..CHASE_LINES).collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let next: Vec<AtomicU64> = (0..CHASE_LINES * LINE_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        for (i, &line) in order.iter().enumerate() {
            let to = order[(i + 1) % order.len()] * LINE_WORDS;
            next[line * LINE_WORDS].store(to as u64, Ordering::Relaxed);
        }
        Chase { next }
    }
}

fn physical_limit(c: &mut Criterion) {
    let mut group = c.benchmark_group("physical_limit");

    let clock = Clock::new();
    group.bench_function(BenchmarkId::new("clock", "this_machine"), |b| {
        b.iter(|| clock.now())
    });

    let word = AtomicU64::new(0);
    group.bench_function(BenchmarkId::new("cas", "this_machine"), |b| {
        b.iter(|| {
            let current = word.load(Ordering::Relaxed);
            word.compare_exchange(current, current + 1, Ordering::Relaxed, Ordering::Relaxed)
        })
    });

    group.bench_function(BenchmarkId::new("clock_cas", "this_machine"), |b| {
        b.iter(|| {
            let now = clock.now();
            let current = word.load(Ordering::Relaxed);
            word.compare_exchange(
                current,
                now.max(current) + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
        })
    });

    let chase = Chase::new();
    let mut at = 0usize;
    group.bench_function(BenchmarkId::new("dram", "this_machine"), |b| {
        b.iter(|| {
            at = chase.next[at].load(Ordering::Relaxed) as usize;
            black_box(at)
        })
    });

    group.bench_function(BenchmarkId::new("clock_dram_cas", "this_machine"), |b| {
        b.iter(|| {
            let slot = &chase.next[at];
            let current = slot.load(Ordering::Relaxed);
            let now = clock.now();
            // Keep the cycle intact: write back the same link (a CAS that
            // succeeds, like an admission), then follow it.
            let _ = slot.compare_exchange(current, current, Ordering::Relaxed, Ordering::Relaxed);
            at = current as usize;
            black_box(now)
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = physical_limit
}
criterion_main!(benches);
