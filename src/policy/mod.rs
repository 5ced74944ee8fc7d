//! Policies built on the limiters: [`AllOf`], several limits that admit a
//! request together or not at all, over anything that is a [`Limit`].
//!
//! [`Tiered`]: per-key quotas, named tiers with a resolver from key to tier
//! and per-key overrides.

pub(crate) mod all_of;
mod all_or_nothing;
#[cfg(feature = "serde")]
pub mod config;
mod store_down;
mod tiers;

pub use all_of::{AllOf, AllOfDecision, KeyedLimit, Limit};
pub use all_or_nothing::MemberError;
#[doc(hidden)]
pub use all_or_nothing::{Held, StateId};
pub use store_down::StoreDown;
pub use tiers::{Resolve, Tier, TierError, TierId, Tiered};

pub(crate) use all_of::address_of;
#[cfg(feature = "http")]
pub(crate) use all_of::bind;
#[cfg(feature = "http")]
pub(crate) use all_or_nothing::{Member, decide};
