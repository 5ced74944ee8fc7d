//! Errors of the Redis backend.

use crate::QuotaError;
use std::fmt;

/// Why a Redis limiter could not be built or a call to Redis failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RedisError {
    /// The quota cannot run on this algorithm's script.
    Quota(QuotaError),
    /// A builder setting that cannot work.
    Config(&'static str),
    /// Redis answered with an error, or the connection failed.
    Redis(redis::RedisError),
    /// Redis did not answer within the configured timeout.
    Timeout,
    /// The script returned something other than the six decision integers.
    BadReply(String),
    /// A client-time reading beyond the scripts' exact range (2^52 ns,
    /// about 52 days after the clock's origin).
    TimeOutOfRange(u64),
    /// The blocking limiter's runtime could not start.
    Runtime(std::io::Error),
    /// The TLS settings cannot be used (a certificate or key that does not
    /// parse, a `rediss://` URL without the `redis-tls` feature); the
    /// message says which.
    Tls(String),
    /// No sentinel named a master that answers as one; the message says
    /// what each sentinel answered.
    Sentinel(String),
    /// Fewer replicas than asked for acknowledged a lease's grants in
    /// time; the grants are not used.
    NotReplicated {
        /// Replicas that hold the writes.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
    /// The leased limiter's last rounds failed, and it waits before the
    /// next (the interval doubled per failed round in a row, at most 1 s),
    /// so that a slow Redis does not spend the window's budget on grants
    /// that come too late to use.
    Backoff,
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisError::Quota(e) => write!(f, "quota not supported on Redis: {e}"),
            RedisError::Config(what) => write!(f, "invalid Redis limiter setting: {what}"),
            RedisError::Redis(e) => write!(f, "Redis error: {e}"),
            RedisError::Timeout => f.write_str("Redis did not answer in time"),
            RedisError::BadReply(reply) => write!(f, "unexpected script reply: {reply}"),
            RedisError::TimeOutOfRange(t) => write!(
                f,
                "client time {t} ns is beyond the scripts' exact range (2^52); use server time"
            ),
            RedisError::Runtime(e) => write!(f, "could not start the blocking runtime: {e}"),
            RedisError::Tls(what) => write!(f, "TLS to Redis: {what}"),
            RedisError::Sentinel(what) => write!(f, "Redis Sentinel: {what}"),
            RedisError::NotReplicated { acked, wanted } => write!(
                f,
                "{acked} of the {wanted} replicas asked for acknowledged the writes in time"
            ),
            RedisError::Backoff => {
                f.write_str("the last lease rounds failed; waiting before the next")
            }
        }
    }
}

impl std::error::Error for RedisError {
    // Display already prints the wrapped error's message, so the chain
    // continues below it (as `#[error(transparent)]` does): printed once.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisError::Quota(e) => e.source(),
            RedisError::Redis(e) => e.source(),
            RedisError::Runtime(e) => e.source(),
            _ => None,
        }
    }
}

impl From<QuotaError> for RedisError {
    fn from(e: QuotaError) -> Self {
        RedisError::Quota(e)
    }
}

impl From<redis::RedisError> for RedisError {
    fn from(e: redis::RedisError) -> Self {
        RedisError::Redis(e)
    }
}
