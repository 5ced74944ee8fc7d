//! How each algorithm runs as a Lua script.

use crate::algorithm::Algorithm;
use crate::{Quota, QuotaError};

/// Lua numbers are doubles: integers are exact below 2^53. Every value a
/// script computes with must stay below this.
pub const LUA_EXACT: u64 = 1 << 53;

/// An algorithm that can decide on Redis, in one Lua script call.
///
/// # The script contract
///
/// * `KEYS`: the algorithm's keys, `<prefix>:<policy>:{<tag>}:<suffix>` for
///   each of [`KEY_SUFFIXES`](RedisAlgorithm::KEY_SUFFIXES), the tag being
///   the user key escaped (never empty, never a brace); the `{...}` hash tag
///   puts them in one Redis Cluster slot.
/// * `ARGV[1]`: now in ticks, or `-1` to read the server's `TIME` (the
///   script then uses microseconds since the Unix epoch, and the caller
///   passes microsecond parameters).
/// * `ARGV[2]`: the cost.
/// * `ARGV[3..]`: [`script_params`](RedisAlgorithm::script_params), in
///   ticks where they are durations.
/// * Returns `{allowed (0|1), limit, remaining, reset_after, retry_after,
///   delay}`, durations in ticks; or a Redis error reply for a cost above
///   capacity (`ERR cost exceeds capacity`), which callers prevent.
/// * Every key gets a TTL no shorter than the time until its state is idle,
///   so idle keys vanish.
/// * Integer maths only, exact below [`LUA_EXACT`]; floor divisions are
///   corrected so double rounding cannot make them off by one.
///
/// A tick is one nanosecond in client-time mode (times from the limiter's
/// [`Clock`](crate::Clock)) and one microsecond in server-time mode.
pub trait RedisAlgorithm: Algorithm {
    /// The Lua source.
    const SCRIPT: &'static str;

    /// Suffixes of the keys the script touches (one or two).
    const KEY_SUFFIXES: &'static [&'static str];

    /// The script's parameters (`ARGV[3..]`) for `quota` with ticks of
    /// `tick_nanos` nanoseconds (1 or 1000).
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] when the quota cannot be expressed in whole ticks
    /// or its maths would leave Lua's exact integer range.
    fn script_params(quota: &Quota, tick_nanos: u64) -> Result<Vec<i64>, QuotaError>;
}
