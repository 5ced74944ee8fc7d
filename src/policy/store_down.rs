//! What decides while a shared store is down.

/// What decides while the shared store (Redis) is unreachable or slower
/// than the timeout: the Redis limiter's builder and a policy file's
/// `store_down` (`"open"`, `"closed"`, `"local_share"` with `share`) take it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StoreDown {
    /// Admit every request (availability first). The default; `"open"` in a
    /// policy file.
    FailOpen,
    /// Deny every request, with a `retry_after` of one second; `"closed"`.
    FailClosed,
    /// Decide with a local in-memory limiter per key that enforces this
    /// share (0 < share <= 1) of the quota: with N app servers, `1/N` keeps
    /// the global rate about where Redis would; `"local_share"` with `share`.
    LocalShare(f64),
}
