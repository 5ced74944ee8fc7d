//! Policies built on the limiters. Today: [`AllOf`], several limits that
//! admit a request together or not at all, over anything that is a
//! [`Limit`].
//!
//! [`Tiered`]: per-key quotas, named tiers with a resolver from key to tier
//! and per-key overrides.

mod all_of;
#[cfg(feature = "serde")]
pub mod config;
mod stripes;
mod tiers;

pub use all_of::{AllOf, AllOfDecision, KeyedLimit, Limit, MemberError};
pub use tiers::{Resolve, Tier, TierError, TierId, Tiered};

#[cfg(feature = "tower")]
pub(crate) use all_of::{admits_all, admits_pair, bind};
#[cfg(feature = "tower")]
pub(crate) use stripes::keyed_lock_id;
