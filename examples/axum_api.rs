//! A small API behind rategate's tower layer, with the limits users know:
//!
//! * GitHub-style tiers: requests with `Authorization: Bearer <token>` are
//!   keyed by token at 5,000/h; anonymous ones by client IP at 60/h.
//! * Stripe-style read and write limits per key: 100 reads/s, 25 writes/s
//!   (signed in), checked together with the hourly limit, all or nothing.
//! * A GraphQL endpoint charged in points (a query's cost from its
//!   `first:` / `last:` arguments), 5,000 points/h signed in, 100
//!   anonymous, apart from the REST budget as GitHub does.
//!
//! As GitHub does, every response carries the rate-limit fields
//! (`x-ratelimit-*`, `ratelimit-policy`, `ratelimit`): the layer is built
//! with `.headers_on_allowed(true)`. The layer's default sends them on 429s
//! only, which costs a server far less per request.
//!
//! The server trusts a reverse proxy on the loopback address (as if nginx
//! ran on the same host), so `X-Forwarded-For` sent from 127.0.0.1 picks
//! the client; from anywhere else it is ignored.
//!
//! ```sh
//! cargo run --example axum_api --features axum          # 127.0.0.1:3000
//! curl -i localhost:3000/v1/charges
//! ```

#![allow(dead_code)] // shared with measure/axum_load.rs, which uses parts

use axum::Router;
use axum::routing::get;
use http::request::Parts;
use rategate::http::{
    ClientClass, ClientIp, KeyExtractor, Matcher, RateLimit, RateLimitLayer, RateLimitLayerBuilder,
    Rule, body::SameBody,
};
use rategate::{KeyedRateLimiter, Quota, TokenBucket};
use std::net::SocketAddr;
use std::sync::Arc;
use tower::Layer;

type Keyed = KeyedRateLimiter<String, TokenBucket>;

/// The quotas of the API.
pub struct Quotas {
    pub token_hourly: Quota,
    pub anonymous_hourly: Quota,
    pub reads: Quota,
    pub writes: Quota,
    pub token_points: Quota,
    pub anonymous_points: Quota,
    /// Keys each limiter holds at most (beyond, new keys share one limit).
    pub max_keys: usize,
}

impl Quotas {
    /// GitHub's and Stripe's numbers.
    pub fn production() -> Quotas {
        Quotas {
            token_hourly: Quota::per_hour(5000).unwrap(),
            anonymous_hourly: Quota::per_hour(60).unwrap(),
            reads: Quota::per_second(100).unwrap(),
            writes: Quota::per_second(25).unwrap(),
            token_points: Quota::per_hour(5000).unwrap(),
            anonymous_points: Quota::per_hour(100).unwrap(),
            max_keys: 100_000,
        }
    }
}

/// The limiters the layer checks; kept to report on them.
pub struct Limiters {
    pub token_hourly: Arc<Keyed>,
    pub anonymous_hourly: Arc<Keyed>,
    pub reads: Arc<Keyed>,
    pub writes: Arc<Keyed>,
    pub token_points: Arc<Keyed>,
    pub anonymous_points: Arc<Keyed>,
}

fn keyed(quota: Quota, max_keys: usize) -> Arc<Keyed> {
    Arc::new(Keyed::builder(quota).max_keys(max_keys).build().unwrap())
}

impl Limiters {
    pub fn new(q: &Quotas) -> Limiters {
        Limiters {
            token_hourly: keyed(q.token_hourly, q.max_keys),
            anonymous_hourly: keyed(q.anonymous_hourly, q.max_keys),
            reads: keyed(q.reads, q.max_keys),
            writes: keyed(q.writes, q.max_keys),
            token_points: keyed(q.token_points, q.max_keys),
            anonymous_points: keyed(q.anonymous_points, q.max_keys),
        }
    }

    /// Keys held, all limiters together.
    pub fn keys(&self) -> usize {
        [
            &self.token_hourly,
            &self.anonymous_hourly,
            &self.reads,
            &self.writes,
            &self.token_points,
            &self.anonymous_points,
        ]
        .iter()
        .map(|l| l.len())
        .sum()
    }

    /// The layer GitHub-style: the rate-limit fields on every response,
    /// not only on 429s (the default).
    pub fn layer(&self) -> RateLimitLayer {
        self.layer_from(RateLimitLayer::builder().headers_on_allowed(true))
    }

    /// The layer, from `builder` (header choices set on it).
    pub fn layer_from(&self, builder: RateLimitLayerBuilder) -> RateLimitLayer {
        // Built once; each rule holds a clone (an `Arc`).
        let graphql_path = Matcher::path_prefix("/graphql");
        let rest_path = !graphql_path.clone();
        let graphql = || graphql_path.clone();
        let rest = || rest_path.clone();
        let client_ip = ClientIp::new().trust_proxies(["127.0.0.1", "::1"]).unwrap();
        builder
            .class(
                ClientClass::new("signed-in", KeyExtractor::bearer_token())
                    .rule(Rule::new("hourly", self.token_hourly.clone()).when(rest()))
                    .rule(Rule::new("read", self.reads.clone()).when(rest().and(Matcher::reads())))
                    .rule(
                        Rule::new("write", self.writes.clone()).when(rest().and(Matcher::writes())),
                    )
                    .rule(
                        Rule::new("graphql", self.token_points.clone())
                            .when(graphql())
                            .cost(graphql_cost),
                    ),
            )
            .class(
                ClientClass::new("anonymous", KeyExtractor::client_ip(client_ip))
                    .rule(Rule::new("hourly", self.anonymous_hourly.clone()).when(rest()))
                    .rule(
                        Rule::new("graphql", self.anonymous_points.clone())
                            .when(graphql())
                            .cost(graphql_cost),
                    ),
            )
            .build()
            .unwrap()
    }
}

/// The API's routes, behind `layer` when given.
pub fn app(layer: Option<RateLimitLayer>) -> Router {
    let router = Router::new()
        .route(
            "/v1/charges",
            get(|| async { "{\"object\":\"list\",\"data\":[]}\n" })
                .post(|| async { "{\"id\":\"ch_1\",\"object\":\"charge\"}\n" }),
        )
        .route(
            "/graphql",
            get(|| async { "{\"data\":{\"viewer\":{\"login\":\"octocat\"}}}\n" }),
        );
    let router = match layer {
        // `same_body`: the responses keep axum's body type, so axum does
        // not box each one again.
        Some(layer) => router.layer(layer.same_body()),
        None => router,
    };
    // Each handler made its route once, as
    // `Router::into_make_service_with_connect_info` does: served through
    // `axum::ServiceExt` (a layer around the `Router`, the load test's
    // `serve`), a `Router` would build each route again per request, a
    // layered route with its layer again.
    router.with_state(())
}

/// The API's routes with `layer` wrapped once around the whole `Router`,
/// as `main` serves them (`RateLimitLayer::around`): the cheapest
/// placement, each request passing through the layer once, before
/// routing, rather than through a copy of it in each route.
pub fn limited_app(layer: RateLimitLayer) -> RateLimit<Router, SameBody> {
    layer.same_body().layer(app(None))
}

/// A GraphQL query's cost in points, GitHub's way roughly: one point, plus
/// one per hundred nodes its connections ask for (`first: 100` costs 1).
/// The query comes URL-encoded in `?query=`; a client cannot lower the
/// cost, only raise it.
pub fn graphql_cost(parts: &Parts) -> u32 {
    let Some(query) = parts.uri.query() else {
        return 1;
    };
    let text = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("query="))
        .map(percent_decode)
        .unwrap_or_default();
    let mut nodes: u64 = 0;
    for arg in ["first:", "last:"] {
        for (at, _) in text.match_indices(arg) {
            let digits: String = text[at + arg.len()..]
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .take(9)
                .collect();
            nodes = nodes.saturating_add(digits.parse().unwrap_or(0));
        }
    }
    u32::try_from(1 + nodes.div_ceil(100)).unwrap_or(u32::MAX)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::main]
async fn main() {
    let addr: SocketAddr = std::env::var("ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3000".into())
        .parse()
        .expect("ADDR like 127.0.0.1:3000");
    let limiters = Limiters::new(&Quotas::production());
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    println!("listening on http://{addr}");
    // The layer wrapped once around the whole `Router` (`limited_app`),
    // with each connection's peer address.
    axum::serve(listener, limiters.layer().around(app(None)))
        .await
        .expect("serve");
}
