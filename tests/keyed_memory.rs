//! Memory stays bounded under a flood of distinct keys.
//!
//! A counting global allocator (this test binary's own) measures live heap
//! bytes. A cap of 100,000 keys must hold against 10 million distinct keys,
//! with the clock frozen (no key ever becomes idle, so every key past the cap
//! goes to the overflow policy) and with time moving (idle keys are swept
//! and their room reused).

use rategate::{KeyedRateLimiter, ManualClock, Overflow, Quota, TokenBucket};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let live = if new_size >= layout.size() {
            LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size()
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed) - (layout.size() - new_size)
        };
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CAP: usize = 100_000;
const FLOOD: u64 = 10_000_000;

/// Both scenarios run in one test so that no other test's allocations run
/// concurrently in this binary and pollute the counts.
#[test]
fn key_flood_stays_under_the_cap() {
    flood_with_frozen_clock();
    flood_with_moving_clock();
}

fn flood_with_frozen_clock() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(10).unwrap();
    let base = LIVE.load(Ordering::Relaxed);
    let limiter = KeyedRateLimiter::<u64, TokenBucket>::builder(quota)
        .clock(clock)
        .max_keys(CAP)
        .overflow(Overflow::Shared)
        .build()
        .unwrap();
    for key in 0..CAP as u64 {
        assert!(limiter.check(&key).is_allowed());
    }
    let at_cap = LIVE.load(Ordering::Relaxed) - base;
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let bytes_per_key = at_cap as f64 / CAP as f64;
    println!("token bucket, u64 keys: {at_cap} bytes for {CAP} keys = {bytes_per_key:.1} B/key");

    let mut admitted_overflow = 0;
    for key in CAP as u64..FLOOD {
        admitted_overflow += u64::from(limiter.check(&key).is_allowed());
    }
    assert_eq!(limiter.len(), CAP);
    // The keys past the cap shared one bucket of 10 per minute.
    assert_eq!(admitted_overflow, 10);
    assert_eq!(limiter.overflow_count(), FLOOD - CAP as u64);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    println!("peak during the flood: {peak} bytes");
    assert!(
        peak <= at_cap + 4096,
        "memory grew past the cap: {peak} > {at_cap}"
    );
    // Keys tracked before the flood keep their own buckets.
    assert!(limiter.check(&0).is_allowed());
    assert!(bytes_per_key < 64.0, "{bytes_per_key} bytes per key");
}

fn flood_with_moving_clock() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap();
    let base = LIVE.load(Ordering::Relaxed);
    let limiter = KeyedRateLimiter::<u64, TokenBucket>::builder(quota)
        .clock(clock.clone())
        .max_keys(CAP)
        .overflow(Overflow::Deny)
        .build()
        .unwrap();
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let mut bound = None;
    let mut admitted = 0u64;
    for key in 0..FLOOD {
        // 100 new keys per millisecond: a key is idle 100 ms after its one
        // request, so about 10,000 keys are live at a time and sweeps on a
        // full map always find room.
        if key % 100 == 0 {
            clock.advance(Duration::from_millis(1));
        }
        admitted += u64::from(limiter.check(&key).is_allowed());
        assert!(limiter.len() <= CAP);
        if key == FLOOD / 10 {
            // By now the map has filled and been swept several times: its
            // peak so far (a table resize holds the old and the new table for
            // a moment) is the bound for the other 9 million keys.
            bound = Some(PEAK.load(Ordering::Relaxed) - base);
            PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
    let bound = bound.unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    println!("moving clock: {admitted} admitted, peak {peak} bytes, bound {bound}");
    assert!(peak <= bound + 4096, "memory grew: {peak} > {bound}");
    assert!(
        bound < 3 * 2_500_000,
        "{bound} bytes for at most {CAP} keys"
    );
    // Sweeps made room, so fresh keys were admitted, not denied for good.
    assert!(admitted > FLOOD * 9 / 10, "only {admitted} admitted");
}
