//! Quotas for the rate limits vendors publish, each with a link to the
//! vendor's page. Figures change: check the linked page before relying on
//! one, and prefer what the upstream's own headers say at run time
//! ([`OutboundLimiter::observe`](crate::OutboundLimiter::observe)).
//!
//! A preset's quota has the vendor's burst (a second's worth), but an
//! [`OutboundLimiter`](crate::OutboundLimiter) built on it spreads its
//! calls evenly at the quota's rate unless told
//! [`bursts(true)`](crate::outbound::OutboundLimiterBuilder::bursts): an
//! upstream's window then takes them without 429s at its edges.
//!
//! Only limits with a published figure are here. For a vendor whose limit
//! depends on the account (SendGrid's per-endpoint limits are reported in
//! its `X-RateLimit-*` headers rather than fixed in its docs), build the
//! quota yourself and let the headers correct it:
//!
//! ```
//! use rategate::{OutboundLimiter, Quota, RateLimiter, TokenBucket};
//!
//! // SendGrid mail send, at a limit your account was given (an example figure).
//! let mail_send = RateLimiter::<TokenBucket>::new(Quota::per_second(10)?)?;
//! let sendgrid = OutboundLimiter::new(mail_send);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::Quota;
use std::time::Duration;

/// A quota from a constant figure. Every call site passes a non-zero limit
/// of at most one per nanosecond, which `Quota` accepts; the unit tests
/// build each preset.
fn fixed(limit: u32, period: Duration) -> Quota {
    Quota::with_period(limit, period)
        .unwrap_or_else(|e| unreachable!("preset {limit} per {period:?}: {e}"))
}

/// Stripe, live mode, read requests: 100 per second.
/// <https://docs.stripe.com/rate-limits>
pub fn stripe_live_read() -> Quota {
    fixed(100, Duration::from_secs(1))
}

/// Stripe, live mode, write requests: 100 per second.
/// <https://docs.stripe.com/rate-limits>
pub fn stripe_live_write() -> Quota {
    fixed(100, Duration::from_secs(1))
}

/// Stripe, test mode (sandbox), read requests: 25 per second.
/// <https://docs.stripe.com/rate-limits>
pub fn stripe_test_read() -> Quota {
    fixed(25, Duration::from_secs(1))
}

/// Stripe, test mode (sandbox), write requests: 25 per second.
/// <https://docs.stripe.com/rate-limits>
pub fn stripe_test_write() -> Quota {
    fixed(25, Duration::from_secs(1))
}

/// GitHub REST API, authenticated user: 5,000 requests per hour.
/// <https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api>
pub fn github_rest_authenticated() -> Quota {
    fixed(5000, Duration::from_secs(3600))
}

/// GitHub REST API, unauthenticated: 60 requests per hour (per IP).
/// <https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api>
pub fn github_rest_unauthenticated() -> Quota {
    fixed(60, Duration::from_secs(3600))
}

/// GitHub GraphQL API, authenticated user: 5,000 points per hour; wait with
/// the query's point cost (`until_n_ready(points)`).
/// <https://docs.github.com/en/graphql/overview/rate-limits-and-query-limits-for-the-graphql-api>
pub fn github_graphql_points() -> Quota {
    fixed(5000, Duration::from_secs(3600))
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_preset_builds_with_its_published_figure() {
        let per = |q: Quota| (q.limit(), q.period().as_secs());
        assert_eq!(per(stripe_live_read()), (100, 1));
        assert_eq!(per(stripe_live_write()), (100, 1));
        assert_eq!(per(stripe_test_read()), (25, 1));
        assert_eq!(per(stripe_test_write()), (25, 1));
        assert_eq!(per(github_rest_authenticated()), (5000, 3600));
        assert_eq!(per(github_rest_unauthenticated()), (60, 3600));
        assert_eq!(per(github_graphql_points()), (5000, 3600));
    }
}
