//! The Redis limiter behind the layer, over real HTTP and a real
//! `redis-server`: exact 429 counts and headers from Redis, two servers
//! (two layers) sharing one Redis budget, and the store-down policy
//! deciding once Redis is killed.

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/http.rs"]
mod support;

use axum::Router;
use axum::routing::get;
use rategate::http::{BuildError, ClientClass, KeyExtractor, RateLimitLayer, Rule};
use rategate::policy::StoreDown;
use rategate::redis::RedisLimiter;
use rategate::{FixedWindow, KeyedRateLimiter, Quota, TokenBucket};
use redis_server::RedisServer;
use std::sync::Arc;
use std::time::Duration;
use support::{Client, serve};

async fn redis_limiter(server: &RedisServer, policy: StoreDown) -> RedisLimiter<FixedWindow> {
    RedisLimiter::<FixedWindow>::builder(Quota::per_hour(3).unwrap())
        .url(&server.url())
        .prefix("http")
        .timeout(Duration::from_millis(200))
        .store_down(policy)
        // Every decision goes to Redis (the cache would answer repeated
        // denials locally, which is fine in production, not for counting).
        .local_cache(false)
        .build()
        .await
        .unwrap()
}

/// `rule` keyed by `x-api-key`, the rate-limit fields on every response.
fn with_fields(rule: Rule) -> RateLimitLayer {
    RateLimitLayer::builder()
        .class(
            ClientClass::new(
                "default",
                KeyExtractor::header(http::HeaderName::from_static("x-api-key")),
            )
            .rule(rule),
        )
        .headers_on_allowed(true)
        .build()
        .unwrap()
}

fn app(limiter: RedisLimiter<FixedWindow>) -> (Router, RateLimitLayer) {
    // The fields on every response: the test reads them from 200s.
    let layer = with_fields(Rule::new_async("redis", Arc::new(limiter)));
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    (router, layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_decides_behind_the_layer() {
    let mut server = RedisServer::start();
    let limiter = redis_limiter(&server, StoreDown::FailClosed).await;
    let (router, layer) = app(limiter.clone());
    let (second_router, _) = app(limiter.clone());
    let mut a = Client::connect(serve(router).await).await;
    // A second app server on the same Redis.
    let mut b = Client::connect(serve(second_router).await).await;
    let key = [("x-api-key", "acct-1")];
    for n in 1..=3u64 {
        let client = if n % 2 == 0 { &mut b } else { &mut a };
        let r = client.send("GET", "/", &key).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.num("x-ratelimit-limit"), 3);
        assert_eq!(r.num("x-ratelimit-remaining"), 3 - n);
        assert_eq!(r.header("ratelimit-policy"), Some(r#""redis";q=3;w=3600"#));
    }
    for client in [&mut a, &mut b] {
        let r = client.send("GET", "/", &key).await;
        assert_eq!(r.status, 429);
        assert!(r.num("retry-after") >= 1);
        assert!(r.body.contains(r#""policy":"redis""#), "{}", r.body);
    }
    // Another key, its own budget.
    let r = a.send("GET", "/", &[("x-api-key", "acct-2")]).await;
    assert_eq!(
        (r.status.as_u16(), r.num("x-ratelimit-remaining")),
        (200, 2)
    );
    assert_eq!(limiter.stats().redis, 6);

    // Redis gone: the store-down policy (fail closed) decides, within the
    // timeout, and the layer answers as for any denial.
    server.kill();
    let r = a.send("GET", "/", &[("x-api-key", "acct-3")]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.num("retry-after"), 1);
    assert!(limiter.stats().fail_closed >= 1);
    let stats = layer.stats();
    assert_eq!((stats.allowed, stats.limited), (3, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_serves_while_redis_is_down() {
    let mut server = RedisServer::start();
    let limiter = redis_limiter(&server, StoreDown::FailOpen).await;
    let (router, _) = app(limiter.clone());
    let mut client = Client::connect(serve(router).await).await;
    server.kill();
    for _ in 0..5 {
        let r = client.send("GET", "/", &[("x-api-key", "k")]).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(limiter.stats().fail_open, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_rule_must_stand_alone() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, StoreDown::FailOpen).await;
    let local = Arc::new(
        KeyedRateLimiter::<String, TokenBucket>::new(Quota::per_hour(5).unwrap()).unwrap(),
    );
    let error = RateLimitLayer::builder()
        .class(
            ClientClass::new("t", KeyExtractor::global())
                .rule(Rule::new("local", local))
                .rule(Rule::new_async("redis", Arc::new(limiter))),
        )
        .build()
        .unwrap_err();
    assert_eq!(
        error,
        BuildError::AsyncNotAlone {
            class: "t".into(),
            rule: "redis".into()
        }
    );
    assert!(error.to_string().contains("only rule"));
}

/// The synced and leased limiters decide locally behind the layer (their
/// background tasks talk to Redis): one app server admits exactly the
/// quota, then answers 429 with the rate-limit headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_and_leased_limiters_behind_the_layer() {
    use rategate::redis::{LeasedLimiter, SyncedLimiter};
    let server = RedisServer::start();
    let quota = Quota::per_hour(4).unwrap();
    let synced = Arc::new(
        SyncedLimiter::<FixedWindow>::builder(quota)
            .url(&server.url())
            .prefix("http-synced")
            .timeout(Duration::from_millis(200))
            .build()
            .await
            .unwrap(),
    );
    let leased = Arc::new(
        LeasedLimiter::builder(quota)
            .url(&server.url())
            .prefix("http-leased")
            .timeout(Duration::from_millis(200))
            .build()
            .await
            .unwrap(),
    );
    let rules = [
        Rule::new_async("synced", Arc::clone(&synced)),
        Rule::new_async("leased", Arc::clone(&leased)),
    ];
    for rule in rules {
        let name = rule.name().to_string();
        let layer = with_fields(rule);
        let router = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone());
        let mut client = Client::connect(serve(router).await).await;
        let key = [("x-api-key", "acct-1")];
        let mut statuses = Vec::new();
        for _ in 0..6 {
            let r = client.send("GET", "/", &key).await;
            if r.status == 200 {
                assert_eq!(r.num("x-ratelimit-limit"), 4, "{name}: {r:?}");
            } else {
                assert!(r.num("retry-after") >= 1, "{name}: {r:?}");
            }
            statuses.push(r.status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 200, 429, 429], "{name}");
        let stats = layer.stats();
        assert_eq!((stats.allowed, stats.limited), (4, 2), "{name}");
    }
}
