//! A first look at rategate on the in-memory default: a direct limiter for
//! an outbound API, a keyed limiter per user, a cost-weighted request, and
//! the HTTP headers a server would send.
//!
//! Run with `cargo run --example quickstart`.

use rategate::{Decision, KeyedRateLimiter, Quota, RateLimiter, TokenBucket};
use std::error::Error;

fn describe(label: &str, d: &Decision) {
    if d.is_allowed() {
        println!(
            "  {label:<22} passed   remaining {:>2}/{}",
            d.remaining(),
            d.limit()
        );
    } else {
        println!(
            "  {label:<22} DENIED   remaining {:>2}/{}   retry after {:.0?} (HTTP 429, Retry-After: {})",
            d.remaining(),
            d.limit(),
            d.retry_after(),
            d.retry_after_secs()
        );
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    // 1. One limit for everyone: 5 requests per second, token bucket.
    let quota: Quota = "5r/s".parse()?;
    let limiter = RateLimiter::<TokenBucket>::new(quota)?;
    println!("Direct limiter, quota {quota} (token bucket, burst 5):");
    for i in 1..=7 {
        describe(&format!("request {i}"), &limiter.check());
    }
    let denied = limiter.check();
    println!(
        "  waiting {:.0?} as the denial advised...",
        denied.retry_after()
    );
    std::thread::sleep(denied.retry_after());
    describe("request after waiting", &limiter.check());

    // 2. One limit per user: 3 requests per minute each.
    let per_user = Quota::per_minute(3)?;
    let users = KeyedRateLimiter::<String, TokenBucket>::new(per_user)?;
    println!("\nKeyed limiter, {per_user} per user:");
    for user in ["alice", "alice", "bob", "alice", "alice", "bob"] {
        describe(user, &users.check(user));
    }

    // 3. Cost-weighted requests (GraphQL points): 100 points a minute.
    let points = RateLimiter::<TokenBucket>::new(Quota::per_minute(100)?)?;
    println!("\nCost-weighted, 100 points per minute:");
    describe("query costing 60", &points.check_n(60)?);
    describe("query costing 60", &points.check_n(60)?);
    match points.check_n(500) {
        Ok(d) => describe("query costing 500", &d),
        Err(e) => println!("  query costing 500      rejected outright: {e}"),
    }

    // 4. What a server sends back on a denial.
    println!("\nHeaders for alice's last denial:");
    for (name, value) in users.check("alice").headers(&per_user) {
        println!("  {name}: {value}");
    }
    Ok(())
}
