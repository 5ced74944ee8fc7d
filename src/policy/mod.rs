//! Policies built on the limiters. Today: [`AllOf`], several limits that
//! admit a request together or not at all, over anything that is a
//! [`Limit`].

mod all_of;
mod stripes;

pub use all_of::{AllOf, AllOfDecision, KeyedLimit, Limit, MemberError};

#[cfg(feature = "tower")]
pub(crate) use all_of::decide_all;
#[cfg(feature = "tower")]
pub(crate) use stripes::keyed_lock_id;
