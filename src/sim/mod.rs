//! The simulator and log replay (feature `sim`): what each algorithm and
//! policy does, drawn.
//!
//! Everything here drives the real limiters of this crate on a
//! [`ManualClock`](crate::ManualClock): no algorithm is re-implemented, so
//! what a picture shows is what the library decides.
//!
//! * [`scenarios`]: the classic cases, each a function returning a
//!   [`Scenario`] (its headline numbers, typed, and an SVG):
//!   [`boundary_burst`](scenarios::boundary_burst),
//!   [`burst_vs_smoothing`](scenarios::burst_vs_smoothing),
//!   [`three_servers`](scenarios::three_servers),
//!   [`counter_vs_log`](scenarios::counter_vs_log),
//!   [`vendor_quotas`](scenarios::vendor_quotas),
//!   [`outbound_adaptation`](scenarios::outbound_adaptation); [`simulate`] runs them all
//!   and [`write_report`] writes the SVGs, `summary.json` and a
//!   self-contained `index.html`.
//! * [`replay`]: a user's traffic (CSV of time, key, cost, or nginx's
//!   `combined` access log) under one or more [`LimitSpec`] strings such as
//!   `leaky:100r/m burst=20 nodelay`, streamed in bounded memory.
//! * [`sample`]: seeded generators of such logs.
//!
//! The command-line front end is the `rategate-sim` binary:
//!
//! ```text
//! cargo run --release --features sim --bin rategate-sim
//! cargo run --release --features sim --bin rategate-sim -- replay \
//!     --policy "leaky:10r/s burst=20 nodelay" --policy "fixed:300/m" docs/sim/sample-access.log
//! ```

mod error;
mod plot;
mod policy;
pub mod replay;
mod report;
mod rng;
pub mod sample;
pub mod scenarios;

pub use error::SimError;
pub use policy::LimitSpec;
pub use report::{Simulation, simulate, text_table, write_report};
pub use rng::SplitMix64;
pub use scenarios::Scenario;

/// Nanoseconds per second.
pub(crate) const SEC: u64 = 1_000_000_000;
