//! The tower layer over real HTTP: an axum server on a free loopback port
//! and a hyper client. Headers on allowed and denied responses, exact 429
//! counts for every algorithm, `retry-after` never 0, tiers, read / write
//! separation, costs, all-or-nothing, shadow mode, missing keys, a custom
//! responder, and a plain hyper 1 server.

#[path = "support/http.rs"]
mod support;

use axum::Router;
use axum::routing::get;
use rategate::headers::ResetFormat;
use rategate::http::{
    ClientClass, KeyExtractor, LayerStats, Matcher, RateLimitLayer, Rejection, Rule,
};
use rategate::{
    Algorithm, FixedWindow, KeyedRateLimiter, LeakyBucket, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use support::{Client, serve};

type Keyed<A = TokenBucket> = KeyedRateLimiter<String, A>;

fn keyed<A: Algorithm>(quota: &str) -> Arc<Keyed<A>> {
    Arc::new(Keyed::<A>::new(quota.parse().unwrap()).unwrap())
}

fn app(layer: RateLimitLayer) -> Router {
    async fn ok() -> &'static str {
        "ok"
    }
    Router::new()
        .route("/", get(ok))
        .route("/items", get(ok).post(ok).delete(ok))
        .route("/charges", get(ok).post(ok))
        .route("/graphql", get(ok))
        .layer(layer)
}

/// One rule per peer IP, the fields on every response (opted in: most
/// tests read them from admitted requests).
fn per_ip(rule: Rule) -> RateLimitLayer {
    RateLimitLayer::builder()
        .class(ClientClass::new("default", KeyExtractor::peer_ip()).rule(rule))
        .headers_on_allowed(true)
        .build()
        .unwrap()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn headers_on_allowed_and_denied_responses() {
    let layer = per_ip(Rule::new("per-ip", keyed::<FixedWindow>("3/h")));
    let mut client = Client::connect(serve(app(layer)).await).await;
    for n in 1..=3u64 {
        let r = client.get("/").await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "ok");
        assert_eq!(r.num("x-ratelimit-limit"), 3);
        assert_eq!(r.num("x-ratelimit-remaining"), 3 - n);
        assert_eq!(r.num("x-ratelimit-used"), n);
        // Unix seconds: the window's end, within the hour to come.
        let reset = r.num("x-ratelimit-reset");
        assert!(reset > unix_now() && reset <= unix_now() + 3601, "{reset}");
        assert_eq!(r.header("ratelimit-policy"), Some(r#""per-ip";q=3;w=3600"#));
        let state = r.header("ratelimit").unwrap();
        assert!(
            state.starts_with(&format!(r#""per-ip";r={};t="#, 3 - n)),
            "{state}"
        );
        assert_eq!(r.header("retry-after"), None);
    }
    let denied = client.get("/").await;
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.header("content-type"),
        Some("application/problem+json")
    );
    let retry = denied.num("retry-after");
    assert!((1..=3600).contains(&retry), "{retry}");
    assert_eq!(denied.num("x-ratelimit-limit"), 3);
    assert_eq!(denied.num("x-ratelimit-remaining"), 0);
    assert_eq!(denied.num("x-ratelimit-used"), 3);
    assert!(
        denied
            .header("ratelimit")
            .unwrap()
            .starts_with(r#""per-ip";r=0;t="#)
    );
    assert!(denied.body.contains(r#""status":429"#), "{}", denied.body);
    assert!(
        denied.body.contains(r#""policy":"per-ip""#),
        "{}",
        denied.body
    );
    assert!(
        denied.body.contains(&format!(r#""retry_after":{retry}"#)),
        "{}",
        denied.body
    );
}

#[tokio::test]
async fn reset_as_seconds_from_now_and_headers_can_be_turned_off() {
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("t", KeyExtractor::peer_ip())
                .rule(Rule::new("p", keyed::<FixedWindow>("3/h"))),
        )
        .reset_format(ResetFormat::DeltaSeconds)
        .ietf_headers(false)
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    let r = client.get("/").await;
    let reset = r.num("x-ratelimit-reset");
    assert!((1..=3600).contains(&reset), "{reset}");
    assert_eq!(r.header("ratelimit"), None);
    assert_eq!(r.header("ratelimit-policy"), None);
}

/// `limit` requests pass in a burst, every later one is answered 429, and
/// the counters agree.
async fn exact_count<A: Algorithm>(quota: &str, limit: usize) {
    let layer = per_ip(Rule::new("p", keyed::<A>(quota)));
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    let mut statuses = Vec::new();
    for _ in 0..limit + 15 {
        statuses.push(client.get("/").await.status.as_u16());
    }
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((ok, limited), (limit, 15), "{quota}: {statuses:?}");
    // The admitted ones come first.
    assert!(statuses[..limit].iter().all(|&s| s == 200));
    let stats = layer.stats();
    let mut expected = LayerStats::default();
    expected.allowed = limit as u64;
    expected.limited = 15;
    assert_eq!(stats, expected);
}

#[tokio::test]
async fn exact_429_counts_for_every_algorithm() {
    exact_count::<TokenBucket>("10/h", 10).await;
    exact_count::<TokenBucket>("10/h burst=4", 4).await;
    exact_count::<FixedWindow>("10/h", 10).await;
    exact_count::<SlidingWindowLog>("10/h", 10).await;
    exact_count::<SlidingWindowCounter>("10/h", 10).await;
    // nginx limit_req: one at once plus a queue of 5.
    exact_count::<LeakyBucket>("10/h burst=5 nodelay", 6).await;
}

#[tokio::test]
async fn limit_header_is_the_quota_not_the_burst() {
    let layer = per_ip(Rule::new("p", keyed::<TokenBucket>("100/s burst=10")));
    let mut client = Client::connect(serve(app(layer)).await).await;
    let r = client.get("/").await;
    assert_eq!(r.num("x-ratelimit-limit"), 100);
    assert_eq!(r.num("x-ratelimit-remaining"), 9);
    assert_eq!(r.num("x-ratelimit-used"), 1);
    assert_eq!(r.header("ratelimit-policy"), Some(r#""p";q=100;w=1"#));
}

#[tokio::test]
async fn retry_after_is_never_zero() {
    // Waits of 10 ms and 500 ms: rounded up to 1 second, never down to 0.
    for quota in ["100/s burst=1", "2/s"] {
        let layer = per_ip(Rule::new("p", keyed::<TokenBucket>(quota)));
        let mut client = Client::connect(serve(app(layer)).await).await;
        let mut denials = 0;
        for _ in 0..40 {
            let r = client.get("/").await;
            if r.status == 429 {
                denials += 1;
                assert_eq!(r.num("retry-after"), 1, "{quota}: {r:?}");
            }
        }
        assert!(denials > 0, "{quota}: nothing denied");
    }
}

#[tokio::test]
async fn tiers_key_and_limit_each_class_of_client() {
    // GitHub-style: a token gets 5 per hour, anonymous clients 2 per IP.
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("signed-in", KeyExtractor::bearer_token())
                .rule(Rule::new("user", keyed::<TokenBucket>("5/h"))),
        )
        .class(
            ClientClass::new("anonymous", KeyExtractor::peer_ip())
                .rule(Rule::new("anon", keyed::<TokenBucket>("2/h"))),
        )
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    for _ in 0..2 {
        assert_eq!(client.get("/").await.status, 200);
    }
    let anon = client.get("/").await;
    assert_eq!(anon.status, 429);
    assert!(anon.body.contains(r#""policy":"anon""#));
    // Same address, signed in: its own budget, its own limit.
    let alice = [("authorization", "Bearer alice")];
    for n in 1..=5u64 {
        let r = client.send("GET", "/", &alice).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.num("x-ratelimit-limit"), 5);
        assert_eq!(r.num("x-ratelimit-remaining"), 5 - n);
    }
    assert_eq!(client.send("GET", "/", &alice).await.status, 429);
    // Another token is another key.
    let bob = client
        .send("GET", "/", &[("authorization", "Bearer bob")])
        .await;
    assert_eq!(
        (bob.status.as_u16(), bob.num("x-ratelimit-remaining")),
        (200, 4)
    );
    // A malformed token falls through to the anonymous tier (spent).
    let bad = client
        .send("GET", "/", &[("authorization", "Basic eA==")])
        .await;
    assert_eq!(bad.status, 429);
}

#[tokio::test]
async fn reads_and_writes_are_limited_apart() {
    let reads = keyed::<FixedWindow>("3/h");
    let writes = keyed::<FixedWindow>("2/h");
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("ip", KeyExtractor::peer_ip())
                .rule(Rule::new("read", reads).when(Matcher::reads()))
                .rule(Rule::new("write", writes).when(Matcher::writes())),
        )
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    for _ in 0..2 {
        assert_eq!(client.send("POST", "/items", &[]).await.status, 200);
    }
    let denied = client.send("DELETE", "/items", &[]).await;
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some(r#""write";q=2;w=3600"#)
    );
    // Writes spent; reads untouched.
    for n in 1..=3u64 {
        let r = client.get("/items").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.num("x-ratelimit-remaining"), 3 - n);
        assert_eq!(r.header("ratelimit-policy"), Some(r#""read";q=3;w=3600"#));
    }
    assert_eq!(client.get("/items").await.status, 429);
}

/// `?cost=N` charges N points (a GraphQL query's computed cost).
fn query_cost(parts: &http::request::Parts) -> u32 {
    parts
        .uri
        .query()
        .and_then(|q| q.strip_prefix("cost="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

#[tokio::test]
async fn costs_are_charged_from_the_request() {
    let points = keyed::<TokenBucket>("10/h");
    let layer = per_ip(
        Rule::new("graphql", points)
            .when(Matcher::path_prefix("/graphql"))
            .cost(query_cost),
    );
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    let r = client.get("/graphql?cost=4").await;
    assert_eq!(
        (r.status.as_u16(), r.num("x-ratelimit-remaining")),
        (200, 6)
    );
    let r = client.get("/graphql?cost=4").await;
    assert_eq!(
        (r.status.as_u16(), r.num("x-ratelimit-remaining")),
        (200, 2)
    );
    // 4 more do not fit; the denial consumes nothing, so 2 still do.
    let r = client.get("/graphql?cost=4").await;
    assert_eq!(
        (r.status.as_u16(), r.num("x-ratelimit-remaining")),
        (429, 2)
    );
    assert!(r.num("retry-after") >= 1);
    let r = client.get("/graphql?cost=2").await;
    assert_eq!(
        (r.status.as_u16(), r.num("x-ratelimit-remaining")),
        (200, 0)
    );
    // More than the limit can ever hold: 400, not a 429 to retry forever.
    let r = client.get("/graphql?cost=11").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.header("retry-after"), None);
    assert!(r.body.contains("cost of 11 can never pass"), "{}", r.body);
    // Other paths are not limited by this rule at all.
    let r = client.get("/").await;
    assert_eq!(
        (r.status.as_u16(), r.header("x-ratelimit-limit")),
        (200, None)
    );
    let stats = layer.stats();
    assert_eq!(
        (
            stats.allowed,
            stats.limited,
            stats.cost_too_high,
            stats.unlimited
        ),
        (3, 1, 1, 1)
    );
}

#[tokio::test]
async fn several_limits_are_all_or_nothing() {
    // Stripe-style: an hourly limit on everything, a write limit, and a
    // per-endpoint limit on creating charges.
    let hourly = keyed::<FixedWindow>("5/h");
    let writes = keyed::<FixedWindow>("3/h");
    let charges = keyed::<FixedWindow>("1/h");
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("ip", KeyExtractor::peer_ip())
                .rule(Rule::new("hourly", hourly.clone()))
                .rule(Rule::new("write", writes.clone()).when(Matcher::writes()))
                .rule(
                    Rule::new("charges", charges.clone())
                        .when(Matcher::path_prefix("/charges").and(Matcher::writes())),
                ),
        )
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    let r = client.send("POST", "/charges", &[]).await;
    assert_eq!(r.status, 200);
    // Every policy that applied is in the IETF fields.
    assert_eq!(
        r.header("ratelimit-policy"),
        Some(r#""hourly";q=5;w=3600, "write";q=3;w=3600, "charges";q=1;w=3600"#)
    );
    let state = r.header("ratelimit").unwrap();
    assert!(
        state.contains(r#""hourly";r=4;"#)
            && state.contains(r#""write";r=2;"#)
            && state.contains(r#""charges";r=0;"#),
        "{state}"
    );
    // x-ratelimit-* follow the tightest: charges, 0 left.
    assert_eq!(
        (r.num("x-ratelimit-limit"), r.num("x-ratelimit-remaining")),
        (1, 0)
    );

    // The endpoint limit is spent: denied, and neither the hourly nor the
    // write limit is charged for the denied requests.
    for _ in 0..3 {
        let denied = client.send("POST", "/charges", &[]).await;
        assert_eq!(denied.status, 429);
        assert!(
            denied.body.contains(r#""policy":"charges""#),
            "{}",
            denied.body
        );
        assert_eq!(
            (
                denied.num("x-ratelimit-limit"),
                denied.num("x-ratelimit-remaining")
            ),
            (1, 0)
        );
    }
    let key = "127.0.0.1";
    assert_eq!(hourly.peek_n(key, 0).unwrap().remaining(), 4);
    assert_eq!(writes.peek_n(key, 0).unwrap().remaining(), 2);
    // Other writes still have their 2.
    assert_eq!(client.send("POST", "/items", &[]).await.status, 200);
    assert_eq!(client.send("POST", "/items", &[]).await.status, 200);
    let denied = client.send("POST", "/items", &[]).await;
    assert_eq!(denied.status, 429);
    assert!(denied.body.contains(r#""policy":"write""#));
    assert_eq!(hourly.peek_n(key, 0).unwrap().remaining(), 2);
    // Reads only need the hourly limit.
    assert_eq!(client.get("/items").await.status, 200);
    assert_eq!(client.get("/items").await.status, 200);
    assert_eq!(client.get("/items").await.status, 429);
}

/// More rules than the layer keeps on the stack (four): the same
/// all-or-nothing decision, every rule in the headers.
#[tokio::test]
async fn five_rules_are_all_or_nothing_too() {
    let limits: Vec<_> = (1..=5)
        .map(|n| keyed::<FixedWindow>(&format!("{}/h", 6 - n)))
        .collect();
    let mut tier = ClientClass::new("ip", KeyExtractor::peer_ip());
    for (n, limit) in limits.iter().enumerate() {
        tier = tier.rule(Rule::new(&format!("r{}", n + 1), limit.clone()));
    }
    let layer = RateLimitLayer::builder()
        .class(tier)
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    let r = client.get("/items").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("ratelimit"),
        Some(
            r#""r1";r=4;t=3600, "r2";r=3;t=3600, "r3";r=2;t=3600, "r4";r=1;t=3600, "r5";r=0;t=3600"#
        )
    );
    let denied = client.get("/items").await;
    assert_eq!(denied.status, 429);
    assert!(denied.body.contains(r#""policy":"r5""#), "{}", denied.body);
    for (n, limit) in limits.iter().enumerate() {
        let left = limit.peek_n("127.0.0.1", 0).unwrap().remaining();
        assert_eq!(left as usize, 4 - n, "r{} charged once", n + 1);
    }
}

#[tokio::test]
async fn long_and_escaped_rule_names_give_exact_values() {
    // Longer than the values' stack buffer: the heap takes over mid-way.
    let name = format!("a\"b\\{}é", "x".repeat(300));
    let quoted = format!("\"a\\\"b\\\\{}_\"", "x".repeat(300));
    let layer = per_ip(Rule::new(&name, keyed::<FixedWindow>("2/h")));
    let mut client = Client::connect(serve(app(layer)).await).await;
    let r = client.get("/").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("ratelimit-policy"),
        Some(format!("{quoted};q=2;w=3600").as_str())
    );
    assert_eq!(
        r.header("ratelimit"),
        Some(format!("{quoted};r=1;t=3600").as_str())
    );
    assert_eq!(r.num("x-ratelimit-remaining"), 1);
    assert_eq!(r.num("x-ratelimit-used"), 1);
    client.get("/").await;
    let denied = client.get("/").await;
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.header("ratelimit"),
        Some(format!("{quoted};r=0;t=3600").as_str())
    );
    assert!(denied.num("retry-after") >= 1);
}

#[tokio::test]
async fn shadow_mode_serves_everything_and_counts_would_be_429s() {
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("ip", KeyExtractor::peer_ip())
                .rule(Rule::new("p", keyed::<FixedWindow>("2/h"))),
        )
        .shadow(true)
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    let mut remaining = Vec::new();
    for _ in 0..5 {
        let r = client.get("/").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "ok");
        assert_eq!(r.header("retry-after"), None);
        remaining.push(r.num("x-ratelimit-remaining"));
    }
    assert_eq!(remaining, [1, 0, 0, 0, 0]);
    let stats = layer.stats();
    assert_eq!(
        (stats.allowed, stats.shadow_limited, stats.limited),
        (2, 3, 0)
    );
}

const FIELDS: [&str; 6] = [
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-used",
    "ratelimit-policy",
    "ratelimit",
];

/// The default: no rate-limit field on an admitted response, every field
/// and `retry-after` on the 429; the same through every constructor.
#[tokio::test]
async fn by_default_the_fields_go_on_429s_only() {
    let limiter = || keyed::<FixedWindow>("2/h");
    let layers = [
        (
            "builder",
            RateLimitLayer::builder()
                .class(
                    ClientClass::new("ip", KeyExtractor::peer_ip()).rule(Rule::new("p", limiter())),
                )
                .build()
                .unwrap(),
        ),
        (
            "new",
            RateLimitLayer::new(KeyExtractor::peer_ip(), Rule::new("p", limiter())),
        ),
        (
            "per_ip",
            RateLimitLayer::per_ip(Quota::per_hour(2).unwrap()).unwrap(),
        ),
    ];
    for (how, layer) in layers {
        let policy = if how == "per_ip" { "per-ip" } else { "p" };
        let mut client = Client::connect(serve(app(layer.clone())).await).await;
        for _ in 0..2 {
            let r = client.get("/").await;
            assert_eq!(r.status, 200, "{how}: {r:?}");
            for name in FIELDS.into_iter().chain(["retry-after"]) {
                assert_eq!(r.header(name), None, "{how}: {name} on an allowed response");
            }
        }
        let denied = client.get("/").await;
        assert_eq!(denied.status, 429, "{how}");
        for name in FIELDS.into_iter().chain(["retry-after"]) {
            assert!(denied.header(name).is_some(), "{how}: no {name} on the 429");
        }
        assert_eq!(denied.num("x-ratelimit-limit"), 2);
        assert_eq!(denied.num("x-ratelimit-remaining"), 0);
        assert_eq!(denied.num("x-ratelimit-used"), 2);
        let reset = denied.num("x-ratelimit-reset");
        assert!(reset > unix_now() && reset <= unix_now() + 3601, "{reset}");
        assert_eq!(
            denied.header("ratelimit-policy"),
            Some(format!(r#""{policy}";q=2;w=3600"#).as_str())
        );
        assert!(
            denied
                .header("ratelimit")
                .unwrap()
                .starts_with(&format!(r#""{policy}";r=0;t="#)),
            "{how}: {denied:?}"
        );
        assert!(denied.num("retry-after") >= 1);
        assert_eq!(layer.stats().allowed, 2, "{how}");
    }

    // In shadow mode a would-be 429 is served, with its fields.
    let shadow = RateLimitLayer::builder()
        .class(
            ClientClass::new("ip", KeyExtractor::peer_ip())
                .rule(Rule::new("p", keyed::<FixedWindow>("1/h"))),
        )
        .shadow(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(shadow)).await).await;
    let first = client.get("/").await;
    for name in FIELDS {
        assert_eq!(
            first.header(name),
            None,
            "shadow: {name} on an allowed response"
        );
    }
    let over = client.get("/").await;
    assert_eq!(over.status, 200);
    assert_eq!(over.num("x-ratelimit-remaining"), 0);
    assert_eq!(over.header("ratelimit-policy"), Some(r#""p";q=1;w=3600"#));
    assert_eq!(over.header("retry-after"), None);
}

/// `headers_on_allowed(false)` said explicitly is the default.
#[tokio::test]
async fn headers_only_on_429s_when_asked() {
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("ip", KeyExtractor::peer_ip())
                .rule(Rule::new("p", keyed::<FixedWindow>("2/h"))),
        )
        .headers_on_allowed(true)
        .headers_on_allowed(false)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    for _ in 0..2 {
        let r = client.get("/").await;
        assert_eq!(r.status, 200);
        for name in FIELDS {
            assert_eq!(r.header(name), None, "{name} on an allowed response");
        }
    }
    let denied = client.get("/").await;
    assert_eq!(denied.status, 429);
    assert_eq!(denied.num("x-ratelimit-limit"), 2);
    assert_eq!(denied.num("x-ratelimit-remaining"), 0);
    assert_eq!(denied.header("ratelimit-policy"), Some(r#""p";q=2;w=3600"#));
    assert!(denied.num("retry-after") >= 1);
}

#[tokio::test]
async fn a_direct_limiter_is_one_global_limit() {
    let global = Arc::new(RateLimiter::<FixedWindow>::new(Quota::per_hour(3).unwrap()).unwrap());
    let layer = RateLimitLayer::new(KeyExtractor::global(), Rule::new("global", global));
    let addr = serve(app(layer)).await;
    let (mut a, mut b) = (Client::connect(addr).await, Client::connect(addr).await);
    assert_eq!(a.get("/").await.status, 200);
    assert_eq!(b.get("/").await.status, 200);
    assert_eq!(a.get("/").await.status, 200);
    assert_eq!(b.get("/").await.status, 429);
}

#[tokio::test]
async fn a_missing_key_gets_a_clear_answer() {
    // Served without recording peer addresses: a setup error, said so.
    let layer = per_ip(Rule::new("p", keyed::<TokenBucket>("5/h")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app(layer)).await.unwrap() });
    let mut client = Client::connect(addr).await;
    let r = client.get("/").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.body.contains("no peer address"), "{}", r.body);

    // An API key required and absent: 400, naming the header.
    let layer = RateLimitLayer::new(
        KeyExtractor::header(http::HeaderName::from_static("x-api-key")),
        Rule::new("p", keyed::<TokenBucket>("5/h")),
    );
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    let r = client.get("/").await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("x-api-key"), "{}", r.body);
    assert_eq!(
        client.send("GET", "/", &[("x-api-key", "k")]).await.status,
        200
    );
    assert_eq!(layer.stats().no_key, 1);
}

#[tokio::test]
async fn the_responder_is_replaceable() {
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("ip", KeyExtractor::peer_ip())
                .rule(Rule::new("p", keyed::<FixedWindow>("1/h"))),
        )
        .responder(|rejection| {
            let text = match rejection {
                Rejection::Limited {
                    policy,
                    retry_after_secs,
                    ..
                } => {
                    format!("slow down ({policy}, {retry_after_secs}s)")
                }
                other => format!("{other:?}"),
            };
            let mut response = http::Response::new(bytes::Bytes::from(text));
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            response
        })
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    assert_eq!(client.get("/").await.status, 200);
    let r = client.get("/").await;
    assert_eq!(r.status, 503);
    assert!(r.body.starts_with("slow down (p, "), "{}", r.body);
    // The layer still adds the headers.
    assert!(r.num("retry-after") >= 1);
    assert_eq!(r.num("x-ratelimit-remaining"), 0);
}

#[tokio::test]
async fn a_plain_hyper_server() {
    use hyper::server::conn::http1;
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use tower::{Layer, service_fn};

    let layer = per_ip(Rule::new("p", keyed::<FixedWindow>("2/h")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let service = layer.layer(service_fn(
                |_request: http::Request<hyper::body::Incoming>| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"hi")),
                    ))
                },
            ));
            // hyper gives no peer address: insert it for the key.
            let service = tower::ServiceBuilder::new()
                .map_request(move |mut request: http::Request<_>| {
                    request.extensions_mut().insert(peer);
                    request
                })
                .service(service);
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    let mut client = Client::connect(addr).await;
    let r = client.get("/").await;
    assert_eq!((r.status.as_u16(), r.body.as_str()), (200, "hi"));
    assert_eq!(r.num("x-ratelimit-remaining"), 1);
    assert_eq!(client.get("/").await.status, 200);
    assert_eq!(client.get("/").await.status, 429);
}

/// A 429 of a `per-ip` rule of `limit` per window, as the layer writes it:
/// the problem body, `retry-after` and the rate-limit fields.
fn assert_per_ip_429(denied: &support::Reply, limit: u64) {
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.header("content-type"),
        Some("application/problem+json")
    );
    assert!(denied.num("retry-after") >= 1);
    assert_eq!(denied.num("x-ratelimit-limit"), limit);
    assert_eq!(denied.num("x-ratelimit-remaining"), 0);
    assert!(denied.body.contains(r#""status":429"#), "{}", denied.body);
    assert!(
        denied.body.contains(r#""policy":"per-ip""#),
        "{}",
        denied.body
    );
}

/// `around(router)`: the layer wrapped once around the whole `Router` (with
/// `same_body()`: its responses are `Response<axum::body::Body>`, the type
/// `axum::serve` takes), and `same_body()` through `Router::layer`: the
/// same answers as the default body kind, the 429's problem body written
/// as axum's body.
#[tokio::test]
async fn same_body_serves_the_router_as_it_is() {
    let layer = per_ip(Rule::new("per-ip", keyed::<FixedWindow>("2/h")));
    let router = Router::new().route("/", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = layer.around(router);
    tokio::spawn(async move { axum::serve(listener, served).await.expect("serve") });
    let mut client = Client::connect(addr).await;
    for remaining in [1, 0] {
        let r = client.get("/").await;
        assert_eq!((r.status.as_u16(), r.body.as_str()), (200, "ok"));
        assert_eq!(r.num("x-ratelimit-remaining"), remaining);
    }
    assert_per_ip_429(&client.get("/").await, 2);
    assert_eq!(layer.stats().limited, 1);

    // Through `Router::layer`.
    let layer = per_ip(Rule::new("per-ip", keyed::<FixedWindow>("1/h"))).same_body();
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let mut client = Client::connect(serve(router).await).await;
    assert_eq!(client.get("/").await.status, 200);
    assert_per_ip_429(&client.get("/").await, 1);
}
