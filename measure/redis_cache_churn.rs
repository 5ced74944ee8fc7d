//! What a new key's allow-then-deny costs with the local over-limit cache
//! empty and with it full of live denials (a client rotating keys fills
//! it). A full cache drops the denial that ends soonest instead of scanning
//! its entries, so the two figures should be alike.
//!
//! Starts its own `redis-server` on a free loopback port. Run with:
//!
//! ```sh
//! cargo run --release --features redis --example redis_cache_churn
//! ```

#[cfg(feature = "redis")]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

#[cfg(feature = "redis")]
fn run() {
    use rategate::redis::RedisLimiter;
    use rategate::{Quota, TokenBucket};
    use std::time::Instant;

    const CAPACITY: usize = 50_000;
    let server = redis_server::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for fill in [0, CAPACITY] {
            // One an hour: the second check of a key is always denied, and
            // the denial stays live for the whole run.
            let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(1).unwrap())
                .url(&server.url())
                .prefix(&format!("churn-{fill}"))
                .local_cache_capacity(CAPACITY)
                .build()
                .await
                .unwrap();
            let fillers: Vec<_> = (0..64)
                .map(|t| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        for i in (t..fill).step_by(64) {
                            let key = format!("fill-{i}");
                            limiter.check(&key).await.unwrap();
                            limiter.check(&key).await.unwrap();
                        }
                    })
                })
                .collect();
            for filler in fillers {
                filler.await.unwrap();
            }
            let keys = 2_000;
            let start = Instant::now();
            for i in 0..keys {
                let key = format!("new-{i}");
                assert!(limiter.check(&key).await.unwrap().is_allowed());
                assert!(!limiter.check(&key).await.unwrap().is_allowed());
            }
            println!(
                "cache holding {fill:>6} live denials: a new key's allow + deny takes {:?}",
                start.elapsed() / keys
            );
        }
    });
}

fn main() {
    #[cfg(feature = "redis")]
    run();
    #[cfg(not(feature = "redis"))]
    eprintln!("this example needs the Redis backend: --features redis");
}
