//! Policies built on the limiters. Today: [`AllOf`], several limits that
//! admit a request together or not at all, over anything that is a
//! [`Limit`].

mod all_of;

pub use all_of::{AllOf, AllOfDecision, KeyedLimit, Limit, MemberError};

pub(crate) use all_of::{decide_all, keyed_lock_id};
