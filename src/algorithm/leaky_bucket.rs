//! Placeholder, replaced by the real algorithm.

/// Placeholder.
#[derive(Debug)]
pub struct LeakyBucket;
