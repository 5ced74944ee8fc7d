//! Snapshots of a keyed limiter's live state, to restore into a fresh one
//! (a rolling restart that must not hand every client a fresh burst).
//!
//! # Format (version 1)
//!
//! A snapshot is bytes, every integer little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `RGSN` |
//! | 1 | format version, 1 |
//! | 1 | algorithm: 1 token bucket, 2 fixed window, 3 sliding window counter, 4 sliding window log, 5 leaky bucket |
//! | 4 | quota limit (u32) |
//! | 8 | quota period in nanoseconds (u64) |
//! | 4 | quota burst (u32), 0 if unset |
//! | 1 | delay mode: 0 smooth, 1 nodelay, 2 after `n` |
//! | 4 | delay `n` (u32), 0 unless mode 2 |
//! | 8 | the limiter clock's reading when the snapshot was taken (u64 ns) |
//! | 8 | number of keys (u64) |
//!
//! then per key: the key's length (u32) and bytes ([`SnapshotKey`]), the
//! state's length (u32) and bytes. A state is the algorithm's state word
//! (u64) for the one-word algorithms, and for the sliding window log its
//! latest reading (u64), entry count (u32) and entries (time u64, cost u32),
//! oldest first. Times are the snapshot clock's nanoseconds.
//!
//! # Time across the restore
//!
//! The time between the snapshot and the restore counts as no time elapsed:
//! every stored time moves by the difference between the two clocks'
//! readings, so each key resumes exactly where it stopped (a restart never
//! grants extra). Window counts move to the restoring clock's window that
//! holds their window's moved end, so they are held at least as long as they
//! would have been (longer by part of a window when the two clocks' windows
//! are not aligned, as with two monotonic clocks of different origins).

use crate::algorithm::{
    Algorithm, FixedWindow, LeakyBucket, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use crate::sync::{AtomicU64, Ordering};
use crate::{Delay, Quota};
use std::fmt;
use std::net::IpAddr;

/// The snapshot format's magic bytes.
const MAGIC: &[u8; 4] = b"RGSN";
/// The format version this crate writes and reads.
pub const VERSION: u8 = 1;
/// The header's length in bytes.
const HEADER: usize = 43;

/// An algorithm whose per-key state can be saved in a snapshot and loaded
/// into a fresh limiter.
pub trait Snapshot: Algorithm {
    /// The algorithm's code in the snapshot header.
    const KIND: u8;

    /// Appends `state`'s bytes to `out`.
    fn save(&self, state: &Self::State, out: &mut Vec<u8>);

    /// A state from [`save`](Snapshot::save)'s bytes, saved when the
    /// snapshot's clock read `then`, restored at `now`; `None` if the bytes
    /// are malformed.
    fn load(&self, bytes: &[u8], then: u64, now: u64) -> Option<Self::State>;
}

macro_rules! one_word_snapshot {
    ($alg:ty, $kind:literal) => {
        /// The state word, moved with the clock on load.
        impl Snapshot for $alg {
            const KIND: u8 = $kind;

            fn save(&self, state: &AtomicU64, out: &mut Vec<u8>) {
                // Relaxed: see `update_word`; a snapshot is a reading of
                // each word, not of all keys at one instant.
                out.extend(state.load(Ordering::Relaxed).to_le_bytes());
            }

            fn load(&self, bytes: &[u8], then: u64, now: u64) -> Option<AtomicU64> {
                let word = u64::from_le_bytes(bytes.try_into().ok()?);
                self.moved(word, then, now).map(AtomicU64::new)
            }
        }
    };
}

one_word_snapshot!(TokenBucket, 1);
one_word_snapshot!(FixedWindow, 2);
one_word_snapshot!(SlidingWindowCounter, 3);
one_word_snapshot!(LeakyBucket, 5);

/// The log's entries, moved with the clock on load.
impl Snapshot for SlidingWindowLog {
    const KIND: u8 = 4;

    fn save(&self, state: &Self::State, out: &mut Vec<u8>) {
        self.save_log(state, out);
    }

    fn load(&self, bytes: &[u8], then: u64, now: u64) -> Option<Self::State> {
        self.load_log(bytes, then, now)
    }
}

/// A key type a snapshot can hold: its bytes, and back.
pub trait SnapshotKey: Sized {
    /// Appends the key's bytes.
    fn write(&self, out: &mut Vec<u8>);
    /// The key from its bytes; `None` if they are not one.
    fn read(bytes: &[u8]) -> Option<Self>;
}

impl SnapshotKey for String {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend(self.as_bytes());
    }
    fn read(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

impl SnapshotKey for Vec<u8> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend(self);
    }
    fn read(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

impl SnapshotKey for IpAddr {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            IpAddr::V4(ip) => out.extend(ip.octets()),
            IpAddr::V6(ip) => out.extend(ip.octets()),
        }
    }
    fn read(bytes: &[u8]) -> Option<Self> {
        match bytes.len() {
            4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
            _ => None,
        }
    }
}

macro_rules! integer_key {
    ($($t:ty),*) => {$(
        impl SnapshotKey for $t {
            fn write(&self, out: &mut Vec<u8>) {
                out.extend(self.to_le_bytes());
            }
            fn read(bytes: &[u8]) -> Option<Self> {
                bytes.try_into().ok().map(<$t>::from_le_bytes)
            }
        }
    )*};
}

integer_key!(u8, u16, u32, u64, u128, i32, i64);

/// Why a snapshot could not be restored. The limiter is left unchanged
/// unless the error is [`MapFull`](SnapshotError::MapFull).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The bytes do not start with the magic `RGSN`.
    NotASnapshot,
    /// A format version this crate does not read.
    UnsupportedVersion(u8),
    /// The snapshot was taken from another algorithm.
    AlgorithmMismatch {
        /// The restoring limiter's algorithm code.
        expected: u8,
        /// The snapshot's.
        found: u8,
    },
    /// The snapshot was taken under another quota.
    QuotaMismatch,
    /// The bytes end early, or go on after the last key.
    Truncated,
    /// Key number `index` (from 0) is not a key of this type.
    BadKey {
        /// The key's position in the snapshot.
        index: u64,
    },
    /// Key number `index`'s state is malformed for this algorithm and quota.
    BadState {
        /// The key's position in the snapshot.
        index: u64,
    },
    /// The limiter's key cap was reached after `restored` keys.
    MapFull {
        /// Keys restored before the cap was reached.
        restored: usize,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::NotASnapshot => f.write_str("not a rategate snapshot (no RGSN magic)"),
            SnapshotError::UnsupportedVersion(v) => {
                write!(
                    f,
                    "snapshot format version {v} is not supported (this crate reads {VERSION})"
                )
            }
            SnapshotError::AlgorithmMismatch { expected, found } => write!(
                f,
                "snapshot of algorithm {found} cannot be restored into algorithm {expected}"
            ),
            SnapshotError::QuotaMismatch => {
                f.write_str("snapshot was taken under another quota than the limiter's")
            }
            SnapshotError::Truncated => f.write_str("snapshot bytes are truncated or overlong"),
            SnapshotError::BadKey { index } => {
                write!(f, "key {index} of the snapshot is malformed")
            }
            SnapshotError::BadState { index } => {
                write!(f, "state of key {index} of the snapshot is malformed")
            }
            SnapshotError::MapFull { restored } => {
                write!(f, "the limiter's key cap was reached after {restored} keys")
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

/// The quota fields as the header stores them.
fn quota_fields(quota: &Quota) -> [u8; 21] {
    let mut out = [0u8; 21];
    out[0..4].copy_from_slice(&quota.limit().to_le_bytes());
    out[4..12].copy_from_slice(&quota.period_nanos().to_le_bytes());
    out[12..16].copy_from_slice(&quota.explicit_burst().unwrap_or(0).to_le_bytes());
    let (mode, n) = match quota.delay_mode() {
        Delay::Smooth => (0u8, 0u32),
        Delay::NoDelay => (1, 0),
        Delay::After(n) => (2, n),
    };
    out[16] = mode;
    out[17..21].copy_from_slice(&n.to_le_bytes());
    out
}

/// Writes the header of a snapshot of `keys` keys.
pub(crate) fn write_header<A: Snapshot>(out: &mut Vec<u8>, quota: &Quota, then: u64, keys: u64) {
    out.extend(MAGIC);
    out.push(VERSION);
    out.push(A::KIND);
    out.extend(quota_fields(quota));
    out.extend(then.to_le_bytes());
    out.extend(keys.to_le_bytes());
}

/// A reader over a snapshot's bytes.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Checks the header against the restoring limiter; returns the reader
    /// positioned at the first key, the snapshot's `then` and its key count.
    pub(crate) fn open<A: Snapshot>(
        bytes: &'a [u8],
        quota: &Quota,
    ) -> Result<(Reader<'a>, u64, u64), SnapshotError> {
        if bytes.len() < 5 || &bytes[..4] != MAGIC {
            return Err(SnapshotError::NotASnapshot);
        }
        if bytes[4] != VERSION {
            return Err(SnapshotError::UnsupportedVersion(bytes[4]));
        }
        let (header, rest) = bytes
            .split_at_checked(HEADER)
            .ok_or(SnapshotError::Truncated)?;
        if header[5] != A::KIND {
            return Err(SnapshotError::AlgorithmMismatch {
                expected: A::KIND,
                found: header[5],
            });
        }
        if header[6..27] != quota_fields(quota) {
            return Err(SnapshotError::QuotaMismatch);
        }
        let word = |at: usize| header[at..at + 8].try_into().map(u64::from_le_bytes);
        let then = word(27).map_err(|_| SnapshotError::Truncated)?;
        let keys = word(35).map_err(|_| SnapshotError::Truncated)?;
        Ok((Reader { bytes: rest }, then, keys))
    }

    /// The next length-prefixed field.
    pub(crate) fn field(&mut self) -> Result<&'a [u8], SnapshotError> {
        let (len, rest) = self
            .bytes
            .split_first_chunk::<4>()
            .ok_or(SnapshotError::Truncated)?;
        let len =
            usize::try_from(u32::from_le_bytes(*len)).map_err(|_| SnapshotError::Truncated)?;
        let (field, rest) = rest.split_at_checked(len).ok_or(SnapshotError::Truncated)?;
        self.bytes = rest;
        Ok(field)
    }

    /// Whether every byte was read.
    pub(crate) fn is_done(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Appends a length-prefixed field written by `write`.
pub(crate) fn write_field(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend([0u8; 4]);
    write(out);
    // A key or a state longer than 4 GiB cannot be; saturate rather than panic.
    let len = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}
