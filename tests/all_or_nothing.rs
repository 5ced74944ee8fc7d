//! The HTTP layer's all or nothing under races: a request the layer refuses
//! consumes nothing, whichever decisions run beside it (one-rule and
//! two-rule requests, keys past a key cap, a limiter shared by two layers),
//! in process and over real HTTP.

#[path = "support/http.rs"]
mod support;

use axum::Router;
use axum::routing::get;
use http::{Request, StatusCode};
use rategate::http::{ClientClass, KeyExtractor, Matcher, RateLimitLayer, Rule};
use rategate::{FixedWindow, KeyedRateLimiter, Quota, TokenBucket};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::{Client, serve};
use tower::{Layer, Service, ServiceExt};

type Keyed<A> = KeyedRateLimiter<String, A>;

/// A budget refilled fast enough that its last slot is fought over for the
/// whole run (the race lives at that edge).
fn hourly(max_keys: Option<usize>) -> Arc<Keyed<TokenBucket>> {
    let builder = Keyed::<TokenBucket>::builder(Quota::per_second(2_000).unwrap());
    let builder = match max_keys {
        Some(n) => builder.max_keys(n),
        None => builder,
    };
    Arc::new(builder.build().unwrap())
}

/// A budget never reached: what it was charged is what it admitted.
fn write(max_keys: Option<usize>) -> Arc<Keyed<FixedWindow>> {
    let builder = Keyed::<FixedWindow>::builder(Quota::per_hour(1_000_000_000).unwrap());
    let builder = match max_keys {
        Some(n) => builder.max_keys(n),
        None => builder,
    };
    Arc::new(builder.build().unwrap())
}

/// How much of `write`'s budget `key` has used (a new key past the cap
/// reads the overflow state).
fn used(write: &Keyed<FixedWindow>, key: &str) -> u64 {
    u64::from(1_000_000_000 - write.peek(key).remaining()) - 1
}

fn key() -> KeyExtractor {
    KeyExtractor::header(http::HeaderName::from_static("x-key"))
}

/// `hourly` on every request, `write` on writes: the README's layout.
fn layer(hourly: &Arc<Keyed<TokenBucket>>, write: &Arc<Keyed<FixedWindow>>) -> RateLimitLayer {
    RateLimitLayer::builder()
        .class(
            ClientClass::new("clients", key())
                .rule(Rule::new("hourly", Arc::clone(hourly)))
                .rule(Rule::new("write", Arc::clone(write)).when(Matcher::writes())),
        )
        .build()
        .unwrap()
}

/// Sends `method` with key `key` through `layer` until `stop`, from one
/// thread; returns how many were admitted.
fn hammer(layer: RateLimitLayer, method: &'static str, key: String, stop: Arc<AtomicBool>) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let mut admitted = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let request = Request::builder()
            .method(method)
            .uri("/v1/things")
            .header("x-key", key.as_str())
            .body(())
            .unwrap();
        let response = rt
            .block_on(async { service.ready().await?.call(request).await })
            .unwrap();
        admitted += u64::from(response.status() == StatusCode::OK);
    }
    admitted
}

/// Runs a GET thread through `gets` and a POST thread through `posts` for
/// up to 200,000 requests in all (or 2 s); returns the admitted POSTs.
fn race(gets: RateLimitLayer, get_key: &str, posts: RateLimitLayer, post_key: &str) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let (get_key, post_key) = (get_key.to_string(), post_key.to_string());
    let g = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || hammer(gets, "GET", get_key, stop))
    };
    let p = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || hammer(posts, "POST", post_key, stop))
    };
    let posted = p.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    g.join().unwrap();
    posted
}

#[test]
fn a_refused_write_charges_nothing_beside_one_rule_reads() {
    let (hourly, write) = (hourly(None), write(None));
    let posted = race(
        layer(&hourly, &write),
        "alice",
        layer(&hourly, &write),
        "alice",
    );
    assert!(posted > 0);
    assert_eq!(used(&write, "alice"), posted);
}

#[test]
fn a_refused_write_charges_nothing_with_a_limiter_shared_by_two_layers() {
    let (hourly, write) = (hourly(None), write(None));
    // Reads through a layer of their own that holds `hourly` alone.
    let reads = RateLimitLayer::builder()
        .class(ClientClass::new("readers", key()).rule(Rule::new("hourly", Arc::clone(&hourly))))
        .build()
        .unwrap();
    let posted = race(reads, "alice", layer(&hourly, &write), "alice");
    assert!(posted > 0);
    assert_eq!(used(&write, "alice"), posted);
}

#[test]
fn a_refused_write_charges_nothing_for_keys_past_the_key_cap() {
    // One key fills each map: "reader" and "writer" both go to the overflow
    // states, on different stripes of their own.
    let (hourly, write) = (hourly(Some(1)), write(Some(1)));
    assert!(hourly.check("seed").is_allowed());
    assert!(write.check("seed").is_allowed());
    let posted = race(
        layer(&hourly, &write),
        "reader",
        layer(&hourly, &write),
        "writer",
    );
    assert!(posted > 0);
    // A new key reads the overflow state "writer" was charged in.
    assert_eq!(used(&write, "someone-else"), posted);
    assert_eq!(write.len(), 1);
}

/// Over real HTTP: one client thread reading, one writing, on kept-alive
/// connections to a server on 127.0.0.1, 3,000 requests each at most.
#[test]
fn over_http_a_refused_write_charges_nothing() {
    let (hourly, write) = (
        Arc::new(
            Keyed::<TokenBucket>::builder(Quota::per_second(300).unwrap())
                .build()
                .unwrap(),
        ),
        write(None),
    );
    let app = Router::new()
        .route("/v1/things", get(|| async { "ok" }).post(|| async { "ok" }))
        .layer(layer(&hourly, &write));
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = server_rt.block_on(serve(app));
    let client = |method: &'static str| {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut client = Client::connect(addr).await;
                let deadline = Instant::now() + Duration::from_secs(3);
                let mut admitted = 0u64;
                for _ in 0..3_000 {
                    if Instant::now() > deadline {
                        break;
                    }
                    let reply = client
                        .send(method, "/v1/things", &[("x-key", "alice")])
                        .await;
                    admitted += u64::from(reply.status == StatusCode::OK);
                }
                admitted
            })
        })
    };
    let (reads, writes) = (client("GET"), client("POST"));
    reads.join().unwrap();
    let posted = writes.join().unwrap();
    assert!(posted > 0);
    assert_eq!(used(&write, "alice"), posted);
}
