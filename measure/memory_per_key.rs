//! Heap bytes per live key in a keyed limiter: rategate's
//! `KeyedRateLimiter<u64, A>` for each algorithm and governor's
//! `DefaultKeyedRateLimiter<u64>`, with 1,000,000 keys each checked once.
//!
//! A counting global allocator measures the live heap before the limiter is
//! built and after the last key's check; the difference over the key count
//! is the figure (map tables at their load factor after growth, shard
//! headers, everything the limiter allocates). A second figure is taken after
//! `shrink_to_fit`.
//!
//! Run with `cargo run --release --example memory_per_key`.

use rategate::{
    Algorithm, FixedWindow, KeyedRateLimiter, LeakyBucket, Quota, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator (that is, `System`) with
        // this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: u64 = 1_000_000;
const LIMIT: u32 = 10;

struct Row {
    name: &'static str,
    state_bytes: usize,
    live: usize,
    shrunk: usize,
}

/// Runs the measurement for one algorithm.
trait PerAlgorithm {
    fn run<A: Algorithm>(&mut self, name: &'static str);
}

/// Every algorithm measured: one line each.
fn for_each_algorithm(body: &mut impl PerAlgorithm) {
    body.run::<TokenBucket>("token_bucket");
    // One line per algorithm.
    body.run::<FixedWindow>("fixed_window");
    body.run::<SlidingWindowCounter>("sliding_window_counter");
    body.run::<SlidingWindowLog>("sliding_window_log");
    body.run::<LeakyBucket>("leaky_bucket");
}

struct Measure(Vec<Row>);

impl PerAlgorithm for Measure {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        let quota = Quota::per_second(LIMIT).expect("valid quota");
        let before = LIVE.load(Ordering::Relaxed);
        let limiter = KeyedRateLimiter::<u64, A>::new(quota).expect("quota fits");
        for key in 0..KEYS {
            limiter.check(&key);
        }
        assert_eq!(limiter.len() as u64, KEYS);
        let live = LIVE.load(Ordering::Relaxed) - before;
        limiter.shrink_to_fit();
        let shrunk = LIVE.load(Ordering::Relaxed) - before;
        drop(limiter);
        self.0.push(Row {
            name,
            state_bytes: size_of::<A::State>(),
            live,
            shrunk,
        });
    }
}

fn governor_row() -> Row {
    let quota = governor::Quota::per_second(NonZeroU32::new(LIMIT).expect("nonzero"));
    let before = LIVE.load(Ordering::Relaxed);
    let limiter = governor::RateLimiter::keyed(quota);
    for key in 0..KEYS {
        let _ = limiter.check_key(&key);
    }
    assert_eq!(limiter.len() as u64, KEYS);
    let live = LIVE.load(Ordering::Relaxed) - before;
    limiter.shrink_to_fit();
    let shrunk = LIVE.load(Ordering::Relaxed) - before;
    Row {
        name: "governor (GCRA, DashMap)",
        state_bytes: size_of::<governor::state::InMemoryState>(),
        live,
        shrunk,
    }
}

fn main() {
    let mut rows = Measure(Vec::new());
    for_each_algorithm(&mut rows);
    let mut rows = rows.0;
    rows.push(governor_row());

    println!(
        "{KEYS} u64 keys, each checked once; quota {LIMIT}/s; std RandomState; \
         DashMap default shards\n"
    );
    println!("| limiter | state bytes | bytes/key live | bytes/key after shrink_to_fit |");
    println!("|---|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {} | {:.1} | {:.1} |",
            row.name,
            row.state_bytes,
            row.live as f64 / KEYS as f64,
            row.shrunk as f64 / KEYS as f64,
        );
    }
}
