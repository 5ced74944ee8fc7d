//! Guarding calls to a rate-limited upstream: [`OutboundLimiter`] waits
//! under several limits at once and adapts to the upstream's answers
//! ([`UpstreamSignal`], [`Adaptation`]); [`presets`] holds vendors'
//! published limits.

mod adapt;
mod guard;
mod headers;
pub mod presets;
mod sent;

pub use adapt::Adaptation;
pub use guard::{OutboundLimiter, OutboundLimiterBuilder, OutboundStats};
pub use headers::{HeaderError, UNIX_TIME_THRESHOLD, UpstreamSignal, parse_retry_after};
