//! The lock stripes an all-or-nothing decision holds (the HTTP layer's
//! rules, [`AllOf`](crate::policy::AllOf)): which stripe guards a limit's
//! state, and taking a set of them in order.
//!
//! Every decision the layer or an `AllOf` makes holds the stripes of the
//! states it decides on, from its first peek to its last check, so no
//! other such decision changes them in between. The keyed limiter keeps a
//! key whose stripe is held (a sweep leaves it, `reset` waits for it), so
//! a key a decision found stays where it was found until the decision
//! ends.

#[cfg(not(rategate_loom))]
use crossbeam_utils::CachePadded;
use std::hash::{Hash, Hasher};

/// Lock stripes shared by every all-or-nothing decision in the process,
/// chosen by lock id: two `AllOf`s that share a limit always take a common
/// stripe. A `u64` mask names a set of them.
#[cfg(not(rategate_loom))]
const STRIPES: usize = 64;

/// Under loom, one stripe: a stripe is chosen from addresses, which differ
/// between a model's executions, and loom needs every execution to touch
/// the same objects. The models then check the commit under the lock
/// (that no interleaving charges a subset); that one state always maps to
/// one stripe is a pure function, tested apart.
#[cfg(rategate_loom)]
const STRIPES: usize = 1;

/// Each stripe on a cache line of its own: a `Mutex<()>` is one byte, so
/// unpadded all 64 would share one line and every lock taken on one core
/// would evict the line from the others, whichever stripes they take.
#[cfg(not(rategate_loom))]
static LOCKS: [CachePadded<crate::sync::Mutex<()>>; STRIPES] =
    [const { CachePadded::new(parking_lot::const_mutex(())) }; STRIPES];

#[cfg(not(rategate_loom))]
fn stripe_lock(stripe: usize) -> &'static crate::sync::Mutex<()> {
    &LOCKS[stripe % STRIPES]
}

// Loom objects cannot live in a `static`: loom's lazy statics are created
// afresh in each execution of a model.
#[cfg(rategate_loom)]
loom::lazy_static! {
    static ref LOCKS: Vec<crate::sync::Mutex<()>> =
        (0..STRIPES).map(|_| crate::sync::Mutex::new(())).collect();
}

#[cfg(rategate_loom)]
fn stripe_lock(stripe: usize) -> &'static crate::sync::Mutex<()> {
    &LOCKS[stripe % STRIPES]
}

pub(crate) fn stripe_of(lock_id: u64) -> usize {
    // Fibonacci hashing: neighbouring addresses spread over the 64.
    (lock_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (u64::BITS - 6)) as usize % STRIPES
}

/// The lock id of `key` in a keyed limiter: one key's state always gets
/// the same one, whichever handle checks it. The limiter is left out on
/// purpose: the rules of one request share its key, so an `AllOf` over
/// one client's limits (the HTTP layer's rules) takes one stripe, not one
/// per limiter. Keys of different limiters that share a stripe only share
/// a lock.
pub(crate) fn keyed_lock_id<Q: Hash + ?Sized>(key: &Q) -> u64 {
    let mut hasher = StripeHasher(0);
    key.hash(&mut hasher);
    hasher.finish()
}

/// A small multiply-rotate hash (FxHash's step) for choosing stripes: a
/// collision only makes two `AllOf`s share a lock, so no DoS resistance is
/// needed, and it costs a few cycles per 8 bytes instead of SipHash's.
struct StripeHasher(u64);

impl Hasher for StripeHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        // The last 0-7 bytes without a copy of variable length (a call to
        // `memcpy`): two overlapping 4-byte reads, or the first, middle
        // and last byte, as wyhash reads short inputs; the length mixed in.
        // (Two keys whose words collide only share a stripe.)
        let rest = chunks.remainder();
        let n = rest.len();
        let tail = if n >= 4 {
            let lo = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let hi = u32::from_le_bytes([rest[n - 4], rest[n - 3], rest[n - 2], rest[n - 1]]);
            u64::from(lo) | u64::from(hi) << 32
        } else if n > 0 {
            u64::from(rest[0]) | u64::from(rest[n / 2]) << 8 | u64::from(rest[n - 1]) << 16
        } else {
            0
        };
        self.write_u64(tail ^ (n as u64) << 61);
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u8(&mut self, byte: u8) {
        self.write_u64(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Whether no decision holds the stripe of `lock_id` at this moment (a
/// sweep keeps a key whose stripe is held). Never blocks.
pub(crate) fn is_free(lock_id: u64) -> bool {
    stripe_lock(stripe_of(lock_id)).try_lock().is_some()
}

/// Runs `f` holding the stripe of `lock_id` alone (`reset` of a key, which
/// must not remove a key a decision is using).
/// Every stripe: a change to a limiter's parameters waits for the
/// decisions in progress and keeps new ones out while it lands.
pub(crate) const ALL_STRIPES: u64 = u64::MAX >> (64 - STRIPES);

pub(crate) fn with_stripe<R>(lock_id: u64, f: impl FnOnce() -> R) -> R {
    with_stripes(mask_of(lock_id), f)
}

/// The bit of `lock_id`'s stripe in a mask of stripes.
pub(crate) fn mask_of(lock_id: u64) -> u64 {
    1 << stripe_of(lock_id)
}

/// Runs `f` holding the stripes in `mask`, taken in ascending order in
/// every `AllOf` (so no lock cycle is possible), each guard on its own
/// stack frame: nothing is allocated.
///
/// Code of the application's own runs while a decision holds its stripes
/// (a `Limit` or `Backend` of its own, a key resolver, a clock). If it
/// takes stripes itself (`set_quota`, `reset`, another `AllOf`), waiting
/// would deadlock: on its own stripes, or on a lower one held by a thread
/// that waits for one of them. So a thread that already holds stripes
/// only tries the others, and runs `f` without those it could not get:
/// a change made from inside a decision does not wait for the decisions
/// of other threads.
pub(crate) fn with_stripes<R>(mask: u64, f: impl FnOnce() -> R) -> R {
    let held = held::get();
    if held != 0 {
        return try_stripes(mask & !held, f);
    }
    lock_stripes(mask, || {
        let _held = held::Mark::set(mask);
        f()
    })
}

fn lock_stripes<R>(mask: u64, f: impl FnOnce() -> R) -> R {
    let _guard = (mask != 0).then(|| stripe_lock(mask.trailing_zeros() as usize).lock());
    let rest = mask & mask.wrapping_sub(1);
    // The last stripe runs `f` itself, one frame fewer (most `AllOf`s on
    // one key take one stripe), and at one call site: `f` is inlined
    // once, not twice.
    if rest == 0 {
        f()
    } else {
        lock_stripes(rest, f)
    }
}

/// The stripes in `mask` that are free now, taken without waiting, then
/// `f` (see [`with_stripes`]).
#[cold]
fn try_stripes<R>(mask: u64, f: impl FnOnce() -> R) -> R {
    let mut guards = Vec::new();
    let mut taken = 0;
    let mut rest = mask;
    while rest != 0 {
        let stripe = rest.trailing_zeros() as usize;
        if let Some(guard) = stripe_lock(stripe).try_lock() {
            guards.push(guard);
            taken |= 1 << stripe;
        }
        rest &= rest - 1;
    }
    let _held = held::Mark::set(held::get() | taken);
    f()
}

/// Which stripes this thread holds.
#[cfg(not(rategate_loom))]
mod held {
    use std::cell::Cell;

    std::thread_local! {
        static HELD: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn get() -> u64 {
        HELD.with(Cell::get)
    }

    /// Records a mask until dropped (a panic included), then restores the
    /// one before.
    pub(super) struct Mark(u64);

    impl Mark {
        pub(super) fn set(mask: u64) -> Mark {
            Mark(HELD.with(|held| held.replace(mask)))
        }
    }

    impl Drop for Mark {
        fn drop(&mut self) {
            HELD.with(|held| held.set(self.0));
        }
    }
}

/// Under loom, model threads share an OS thread: no record, and the models
/// take no stripe from inside a decision.
#[cfg(rategate_loom)]
mod held {
    pub(super) fn get() -> u64 {
        0
    }

    pub(super) struct Mark;

    impl Mark {
        pub(super) fn set(_mask: u64) -> Mark {
            Mark
        }
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_state_one_stripe_and_keys_spread() {
        // A key's id is the same whatever the handle's key type.
        assert_eq!(
            keyed_lock_id("user-1"),
            keyed_lock_id(&"user-1".to_string())
        );
        assert_ne!(keyed_lock_id("user-1"), keyed_lock_id("user-2"));
        let stripes: std::collections::HashSet<usize> = (0..1000)
            .map(|k| stripe_of(keyed_lock_id(&format!("user-{k}"))))
            .collect();
        assert!(stripes.len() > 56, "1000 keys on {} stripes", stripes.len());
        assert!(stripes.iter().all(|&s| s < STRIPES));
        // Short keys too (1 to 5 bytes: the tail's two reads).
        for prefix in ["", "k-"] {
            let stripes: std::collections::HashSet<usize> = (0..1000)
                .map(|k| stripe_of(keyed_lock_id(&format!("{prefix}{k}"))))
                .collect();
            assert!(stripes.len() > 56, "{prefix}: {} stripes", stripes.len());
        }
    }

    #[test]
    fn stripes_are_taken_and_released() {
        let mask = (1 << 3) | (1 << 40);
        with_stripes(mask, || {
            assert!(stripe_lock(3).try_lock().is_none());
            assert!(stripe_lock(40).try_lock().is_none());
            assert!(stripe_lock(4).try_lock().is_some());
        });
        assert!(stripe_lock(3).try_lock().is_some());
    }
}
