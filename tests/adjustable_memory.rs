//! Changing an `Adjustable` quota frees what each change replaced: a
//! million changes, on a direct and on a keyed limiter, with checks between
//! them (on another thread too), leave the bytes held where a thousand
//! left them.
//!
//! A global allocator counts the bytes held (allocated less freed) by the
//! whole process; this binary holds this one test, so nothing else
//! allocates meanwhile. Not a timing test.

use rategate::algorithm::Adjustable;
use rategate::{KeyedRateLimiter, Quota, RateLimiter, TokenBucket};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

struct Counting;

/// Bytes allocated and not yet freed.
static HELD: AtomicI64 = AtomicI64::new(0);

fn size(layout: Layout) -> i64 {
    i64::try_from(layout.size()).expect("an allocation fits i64")
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a sum read after the threads are joined.
        HELD.fetch_add(size(layout), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(size(layout), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MILLION: u32 = 1_000_000;

fn quota(i: u32) -> Quota {
    Quota::per_second(100 + i % 1000).unwrap()
}

#[test]
fn a_million_quota_changes_hold_no_more_memory_than_a_thousand() {
    let direct = RateLimiter::<Adjustable<TokenBucket>>::new(quota(0)).unwrap();
    let keyed = KeyedRateLimiter::<u64, Adjustable<TokenBucket>>::new(quota(0)).unwrap();
    keyed.check(&1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // A checker racing the changes: it holds a version while the next
        // one is swapped in, which must still be freed afterwards.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                direct.check();
                keyed.check(&1);
            }
        });
        let mut after_thousand = 0;
        for i in 1..=MILLION {
            direct.set_quota(quota(i)).unwrap();
            keyed.set_quota(quota(i)).unwrap();
            if i == 1_000 {
                after_thousand = HELD.load(Ordering::Relaxed);
            }
        }
        stop.store(true, Ordering::Relaxed);
        let after_million = HELD.load(Ordering::Relaxed);
        // One version per limiter is current and a racing check may hold
        // the one before; 4 KiB covers those and the allocator's noise. A
        // leak of one version per change would be tens of megabytes.
        assert!(
            after_million - after_thousand < 4096,
            "{} bytes more held after a million changes than after a thousand",
            after_million - after_thousand
        );
    });
    assert_eq!(direct.quota(), quota(MILLION));
    assert_eq!(keyed.quota(), quota(MILLION));
}
