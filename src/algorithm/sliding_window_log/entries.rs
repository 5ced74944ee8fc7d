//! The sliding window log's entries: one inline, then a ring on the heap.

use std::collections::VecDeque;

/// The log's entries, oldest first: the first one inline, so that a key
/// with one admission time in its window (a client seen once, or any key
/// of a limit of 1) allocates nothing; a second entry at a distinct time
/// moves them to a ring on the heap, which grows by doubling from 4 slots
/// up to `limit` slots and is kept (a keyed limiter's sweep frees an idle
/// key whole).
#[derive(Debug)]
pub(super) enum Entries {
    Inline(Option<Entry>),
    Ring(VecDeque<Entry>),
}

/// The entries of either kind, oldest first.
pub(super) type EntriesIter<'a> =
    std::iter::Chain<std::slice::Iter<'a, Entry>, std::slice::Iter<'a, Entry>>;

impl Default for Entries {
    fn default() -> Self {
        Entries::Inline(None)
    }
}

impl Entries {
    /// Room for `count` entries (restoring a snapshot).
    pub(super) fn with_capacity(count: usize) -> Entries {
        if count <= 1 {
            Entries::Inline(None)
        } else {
            Entries::Ring(VecDeque::with_capacity(count))
        }
    }

    #[inline]
    pub(super) fn front(&self) -> Option<&Entry> {
        match self {
            Entries::Inline(entry) => entry.as_ref(),
            Entries::Ring(ring) => ring.front(),
        }
    }

    #[inline]
    pub(super) fn back(&self) -> Option<&Entry> {
        match self {
            Entries::Inline(entry) => entry.as_ref(),
            Entries::Ring(ring) => ring.back(),
        }
    }

    #[inline]
    pub(super) fn front_mut(&mut self) -> Option<&mut Entry> {
        match self {
            Entries::Inline(entry) => entry.as_mut(),
            Entries::Ring(ring) => ring.front_mut(),
        }
    }

    #[inline]
    pub(super) fn back_mut(&mut self) -> Option<&mut Entry> {
        match self {
            Entries::Inline(entry) => entry.as_mut(),
            Entries::Ring(ring) => ring.back_mut(),
        }
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<Entry> {
        match self {
            Entries::Inline(entry) => entry.take(),
            Entries::Ring(ring) => ring.pop_front(),
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        match self {
            Entries::Inline(entry) => usize::from(entry.is_some()),
            Entries::Ring(ring) => ring.len(),
        }
    }

    /// Oldest first.
    #[inline]
    pub(super) fn iter(&self) -> EntriesIter<'_> {
        // As a ring's own iterator does: its two slices, one after the other.
        let (first, second) = match self {
            Entries::Inline(entry) => (entry.as_slice(), &[][..]),
            Entries::Ring(ring) => ring.as_slices(),
        };
        first.iter().chain(second)
    }

    /// Appends `entry`, the newest; a log of `limit` never holds more than
    /// `limit` entries, so the ring never grows past that.
    #[inline]
    pub(super) fn push_back(&mut self, entry: Entry, limit: u32) {
        match self {
            Entries::Inline(slot @ None) => *slot = Some(entry),
            Entries::Inline(Some(first)) => {
                // Two entries: a ring of min(4, limit) slots (limit >= 2 here).
                let mut ring = VecDeque::new();
                Entries::grow_and_push(&mut ring, *first, limit);
                Entries::grow_and_push(&mut ring, entry, limit);
                *self = Entries::Ring(ring);
            }
            Entries::Ring(ring) => Entries::grow_and_push(ring, entry, limit),
        }
    }

    /// Appends `entry` to `ring`, growing it by doubling from 4 slots but
    /// never past `limit`: the log can never hold more live entries.
    #[inline]
    fn grow_and_push(ring: &mut VecDeque<Entry>, entry: Entry, limit: u32) {
        if ring.len() == ring.capacity() {
            let len = ring.len();
            let target = (len * 2).max(4).min(limit as usize).max(len + 1);
            ring.reserve_exact(target - len);
        }
        ring.push_back(entry);
    }

    /// The ring's slots on the heap (0 while inline).
    #[cfg(test)]
    pub(super) fn heap_capacity(&self) -> usize {
        match self {
            Entries::Inline(_) => 0,
            Entries::Ring(ring) => ring.capacity(),
        }
    }
}

/// One admission time and the cost admitted at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) at: u64,
    pub(super) cost: u32,
}
