//! Policy-file policies behind the layer, over real HTTP (an axum server on
//! a loopback port, a hyper client): a TOML file loaded into a layer
//! enforces exact 429 counts, per-key tier overrides give the tier's quota
//! in the headers, a shadow policy never answers 429, policies are tried
//! in the order given, a policy keyed on an application's own name is a
//! typed error (and works with an explicit extractor), a `"bearer"` policy
//! keys each token apart (and `"header:authorization"` points to it), and
//! (feature `redis`) Redis-backend, synced and leased policies decide
//! behind the layer against a real `redis-server`.

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/http.rs"]
mod support;

use axum::Router;
use axum::routing::get;
use rategate::http::{
    BuildError, ClientClass, KeyExtractor, PolicyLayerError, RateLimitLayer, Rule,
};
use rategate::policy::TierId;
use rategate::policy::config::{PolicyFile, PolicyLimiter, TierLimiters};
use std::sync::Arc;
use support::{Client, Reply, serve};

/// The policies `names` of `file` as a layer with the rate-limit fields on
/// every response (the tests read them from 200s).
async fn with_fields(file: &PolicyFile, names: &[&str]) -> RateLimitLayer {
    RateLimitLayer::builder()
        .headers_on_allowed(true)
        .validate_keys(|_, key| !key.starts_with("made-up"))
        .policies(file, names)
        .await
        .unwrap()
        .build()
        .unwrap()
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

async fn limiter(file: &PolicyFile, name: &str) -> Arc<PolicyLimiter> {
    let policy = file.policy(name).expect("policy in file");
    Arc::new(
        PolicyLimiter::build(policy, Box::new(|_: &str| TierId::DEFAULT))
            .await
            .unwrap(),
    )
}

/// Sends `n` requests with `headers`; returns the replies.
async fn send_n(client: &mut Client, n: usize, headers: &[(&str, &str)]) -> Vec<Reply> {
    let mut replies = Vec::with_capacity(n);
    for _ in 0..n {
        replies.push(client.send("GET", "/", headers).await);
    }
    replies
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status.as_u16()).collect()
}

const API: &str = r#"
[policies.api]
algorithm = "fixed_window"
quota = "3/h"
key = "header:X-Api-Key"

[policies.api.tiers]
partner = "5/h"

[policies.api.overrides]
"acme" = "partner"

[policies.anonymous]
algorithm = "fixed_window"
quota = "2/h"
key = "ip"
"#;

#[tokio::test]
async fn a_toml_file_loaded_into_a_layer_enforces_exact_429_counts() {
    let file = PolicyFile::from_toml(API).unwrap();
    let layer = with_fields(&file, &["api"]).await;
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    let key = [("x-api-key", "k-1")];
    let replies = send_n(&mut client, 5, &key).await;
    assert_eq!(statuses(&replies), [200, 200, 200, 429, 429]);
    for (n, r) in replies.iter().take(3).enumerate() {
        assert_eq!(r.num("x-ratelimit-limit"), 3);
        assert_eq!(r.num("x-ratelimit-remaining"), 2 - n as u64);
        assert_eq!(r.num("x-ratelimit-used"), n as u64 + 1);
        assert_eq!(r.header("ratelimit-policy"), Some(r#""api";q=3;w=3600"#));
        let state = r.header("ratelimit").unwrap();
        assert!(
            state.starts_with(&format!(r#""api";r={};t="#, 2 - n)),
            "{state}"
        );
    }
    let denied = &replies[3];
    assert!(denied.num("retry-after") >= 1);
    assert!(denied.body.contains(r#""policy":"api""#), "{}", denied.body);
    assert_eq!(denied.num("x-ratelimit-remaining"), 0);
    // Another key has its own budget; no key at all is a 400.
    let r = client.send("GET", "/", &[("x-api-key", "k-2")]).await;
    assert_eq!(
        (r.status.as_u16(), r.num("x-ratelimit-remaining")),
        (200, 2)
    );
    assert_eq!(client.get("/").await.status, 400);
    let stats = layer.stats();
    assert_eq!((stats.allowed, stats.limited, stats.no_key), (4, 2, 1));
}

#[tokio::test]
async fn a_key_overridden_into_a_tier_gets_that_tiers_quota_and_headers() {
    let file = PolicyFile::from_toml(API).unwrap();
    let layer = with_fields(&file, &["api"]).await;
    let mut client = Client::connect(serve(app(layer)).await).await;

    let partner = send_n(&mut client, 6, &[("x-api-key", "acme")]).await;
    assert_eq!(statuses(&partner), [200, 200, 200, 200, 200, 429]);
    for (n, r) in partner.iter().enumerate() {
        assert_eq!(r.num("x-ratelimit-limit"), 5, "{r:?}");
        assert_eq!(r.header("ratelimit-policy"), Some(r#""api";q=5;w=3600"#));
        assert_eq!(
            r.num("x-ratelimit-remaining"),
            4u64.saturating_sub(n as u64)
        );
    }

    // A key in the default tier, on the same layer, keeps the default quota.
    let plain = send_n(&mut client, 4, &[("x-api-key", "someone")]).await;
    assert_eq!(statuses(&plain), [200, 200, 200, 429]);
    for r in &plain {
        assert_eq!(r.num("x-ratelimit-limit"), 3);
        assert_eq!(r.header("ratelimit-policy"), Some(r#""api";q=3;w=3600"#));
    }
}

#[tokio::test]
async fn a_resolver_of_the_applications_own_picks_the_tier() {
    let file = PolicyFile::from_toml(API).unwrap();
    let policy = file.policy("api").unwrap();
    // Keys starting with "gold-" are partners too.
    let limiter = PolicyLimiter::build(
        policy,
        Box::new(|key: &str| {
            if key.starts_with("gold-") {
                TierId::new(1)
            } else {
                TierId::DEFAULT
            }
        }),
    )
    .await
    .unwrap();
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::from_policy(Arc::new(limiter))
                .unwrap()
                .validate(|key| key.starts_with("gold") || key.starts_with("key")),
        )
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    let gold = send_n(&mut client, 6, &[("x-api-key", "gold-1")]).await;
    assert_eq!(statuses(&gold), [200, 200, 200, 200, 200, 429]);
    assert_eq!(gold[0].num("x-ratelimit-limit"), 5);
}

#[tokio::test]
async fn policies_are_tried_in_the_order_given() {
    let file = PolicyFile::from_toml(API).unwrap();
    // With an API key by key (3/h), without one by address (2/h).
    let layer = with_fields(&file, &["api", "anonymous"]).await;
    let mut client = Client::connect(serve(app(layer)).await).await;
    let anonymous = send_n(&mut client, 3, &[]).await;
    assert_eq!(statuses(&anonymous), [200, 200, 429]);
    assert_eq!(
        anonymous[0].header("ratelimit-policy"),
        Some(r#""anonymous";q=2;w=3600"#)
    );
    assert!(anonymous[2].body.contains(r#""policy":"anonymous""#));
    let keyed = send_n(&mut client, 4, &[("x-api-key", "k-9")]).await;
    assert_eq!(statuses(&keyed), [200, 200, 200, 429]);
    assert_eq!(keyed[0].num("x-ratelimit-limit"), 3);
}

#[tokio::test]
async fn a_shadow_policy_never_answers_429_but_counts() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.search]
        algorithm = "fixed_window"
        quota = "2/h"
        key = "ip"
        shadow = true
        "#,
    )
    .unwrap();
    let layer = RateLimitLayer::from_policies(&file, &["search"])
        .await
        .unwrap();
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    let replies = send_n(&mut client, 6, &[]).await;
    assert_eq!(statuses(&replies), [200; 6]);
    // `from_policies` keeps the default: no fields on admitted requests,
    // and on the would-be 429s the fields the limit would have sent.
    for r in &replies[..2] {
        assert_eq!(r.header("x-ratelimit-remaining"), None, "{r:?}");
        assert_eq!(r.header("ratelimit"), None, "{r:?}");
    }
    assert_eq!(replies[2].num("x-ratelimit-remaining"), 0);
    assert_eq!(replies[5].num("x-ratelimit-remaining"), 0);
    assert_eq!(
        replies[5].header("ratelimit-policy"),
        Some(r#""search";q=2;w=3600"#)
    );
    assert_eq!(replies[5].header("retry-after"), None);
    let stats = layer.stats();
    assert_eq!(
        (stats.allowed, stats.shadow_limited, stats.limited),
        (2, 4, 0)
    );
}

#[tokio::test]
async fn a_shadow_rule_must_stand_alone_in_its_tier() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.new-limit]
        quota = "2/h"
        key = "ip"
        shadow = true

        [policies.old-limit]
        quota = "10/h"
        key = "ip"
        "#,
    )
    .unwrap();
    let tier = ClientClass::new("clients", KeyExtractor::peer_ip())
        .rule(Rule::from_policy(limiter(&file, "old-limit").await))
        .rule(Rule::from_policy(limiter(&file, "new-limit").await));
    let err = RateLimitLayer::builder().class(tier).build().unwrap_err();
    assert_eq!(
        err,
        BuildError::ShadowNotAlone {
            class: "clients".into(),
            rule: "new-limit".into()
        }
    );
}

#[tokio::test]
async fn policies_in_one_tier_are_all_or_nothing() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.hourly]
        algorithm = "fixed_window"
        quota = "3/h"
        key = "ip"

        [policies.burst]
        algorithm = "fixed_window"
        quota = "2/h"
        key = "ip"
        "#,
    )
    .unwrap();
    let hourly = limiter(&file, "hourly").await;
    let tier = ClientClass::new("clients", KeyExtractor::peer_ip())
        .rule(Rule::from_policy(Arc::clone(&hourly)))
        .rule(Rule::from_policy(limiter(&file, "burst").await));
    let layer = RateLimitLayer::builder()
        .class(tier)
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    let replies = send_n(&mut client, 4, &[]).await;
    assert_eq!(statuses(&replies), [200, 200, 429, 429]);
    assert_eq!(
        replies[1].header("ratelimit-policy"),
        Some(r#""hourly";q=3;w=3600, "burst";q=2;w=3600"#)
    );
    assert!(replies[3].body.contains(r#""policy":"burst""#));
    // The denials charged nothing to the hourly limit: one left there.
    let TierLimiters::Memory(tiers) = hourly.limiters() else {
        panic!("a memory policy");
    };
    let left = tiers.select("127.0.0.1").limiter().peek_n("127.0.0.1", 0);
    assert_eq!(left.unwrap().remaining(), 1);
}

#[tokio::test]
async fn a_named_key_kind_is_a_typed_error_and_works_with_an_explicit_extractor() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.per-user]
        algorithm = "fixed_window"
        quota = "2/h"
        key = "user"
        "#,
    )
    .unwrap();
    let err = RateLimitLayer::from_policies(&file, &["per-user"])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        PolicyLayerError::NamedKey {
            policy: "per-user".into(),
            name: "user".into()
        }
    );
    assert!(err.to_string().contains("explicit key extractor"), "{err}");
    let limiter = limiter(&file, "per-user").await;
    assert!(matches!(
        ClientClass::from_policy(Arc::clone(&limiter)),
        Err(PolicyLayerError::NamedKey { .. })
    ));
    assert_eq!(
        RateLimitLayer::from_policies(&file, &["nope"])
            .await
            .unwrap_err(),
        PolicyLayerError::UnknownPolicy("nope".into())
    );

    // The explicit extractor: the user id from a header set upstream.
    let by_user = KeyExtractor::from_fn(|parts| {
        parts
            .headers
            .get("x-user")?
            .to_str()
            .ok()
            .map(str::to_owned)
    });
    let layer = RateLimitLayer::builder()
        .class(ClientClass::new("users", by_user).rule(Rule::from_policy(limiter)))
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    let replies = send_n(&mut client, 3, &[("x-user", "alice")]).await;
    assert_eq!(statuses(&replies), [200, 200, 429]);
    assert_eq!(
        replies[0].header("ratelimit-policy"),
        Some(r#""per-user";q=2;w=3600"#)
    );
}

const SIGNED_IN: &str = r#"
[policies.signed-in]
algorithm = "fixed_window"
quota = "2/h"
key = "bearer"

[policies.anonymous]
algorithm = "fixed_window"
quota = "1/h"
key = "ip"
"#;

#[tokio::test]
async fn a_bearer_policy_keys_each_token_apart() {
    let file = PolicyFile::from_toml(SIGNED_IN).unwrap();
    let layer = RateLimitLayer::builder()
        .validate_keys(|_, token| token.starts_with("tok-"))
        .policies(&file, &["signed-in"])
        .await
        .unwrap()
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer.clone())).await).await;
    let alice = [("authorization", "Bearer tok-alice")];
    assert_eq!(
        statuses(&send_n(&mut client, 3, &alice).await),
        [200, 200, 429]
    );
    // Another token has its own budget.
    let bob = send_n(&mut client, 3, &[("authorization", "Bearer tok-bob")]).await;
    assert_eq!(statuses(&bob), [200, 200, 429]);
    assert!(
        bob[2].body.contains(r#""policy":"signed-in""#),
        "{}",
        bob[2].body
    );
    // No token, or not a bearer token: no key, 400 (the layer's default for
    // a missing or unusable header).
    assert_eq!(client.get("/").await.status, 400);
    let basic = [("authorization", "Basic dXNlcjpwYXNz")];
    assert_eq!(client.send("GET", "/", &basic).await.status, 400);
    let stats = layer.stats();
    assert_eq!((stats.allowed, stats.limited, stats.no_key), (4, 2, 2));
}

#[tokio::test]
async fn requests_without_a_token_fall_to_the_next_policy() {
    let file = PolicyFile::from_toml(SIGNED_IN).unwrap();
    let layer = RateLimitLayer::builder()
        .validate_keys(|_, token| token.starts_with("tok-"))
        .policies(&file, &["signed-in", "anonymous"])
        .await
        .unwrap()
        .build()
        .unwrap();
    let mut client = Client::connect(serve(app(layer)).await).await;
    let anonymous = send_n(&mut client, 2, &[]).await;
    assert_eq!(statuses(&anonymous), [200, 429]);
    assert!(anonymous[1].body.contains(r#""policy":"anonymous""#));
    // The same client with a token is keyed by it, not by its address.
    let token = [("authorization", "Bearer tok-carol")];
    assert_eq!(
        statuses(&send_n(&mut client, 3, &token).await),
        [200, 200, 429]
    );
}

#[test]
fn a_header_key_on_authorization_points_to_bearer() {
    let err = PolicyFile::from_toml(
        "[policies.signed-in]\nquota = \"2/h\"\nkey = \"header:authorization\"",
    )
    .unwrap_err();
    assert_eq!(
        (err.policy(), err.field_name()),
        (Some("signed-in"), Some("key"))
    );
    assert!(err.to_string().contains("use key = \"bearer\""), "{err}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_policy_decides_behind_the_layer() {
    let server = redis_server::RedisServer::start();
    let file = PolicyFile::from_toml(&format!(
        r#"
        [policies.shared]
        algorithm = "fixed_window"
        quota = "3/h"
        key = "header:x-api-key"
        backend = {{ kind = "redis", url = "{}", prefix = "http-policy", store_down = "closed" }}

        [policies.shared.tiers]
        partner = "5/h"

        [policies.shared.overrides]
        "acme" = "partner"
        "#,
        server.url()
    ))
    .unwrap();
    // Two app servers, one Redis budget.
    let first = with_fields(&file, &["shared"]).await;
    let second = with_fields(&file, &["shared"]).await;
    let mut a = Client::connect(serve(app(first)).await).await;
    let mut b = Client::connect(serve(app(second)).await).await;
    let key = [("x-api-key", "acct-1")];
    let mut seen = Vec::new();
    for n in 0..5 {
        let client = if n % 2 == 0 { &mut a } else { &mut b };
        let r = client.send("GET", "/", &key).await;
        if r.status == 200 {
            assert_eq!(r.num("x-ratelimit-limit"), 3);
            assert_eq!(r.num("x-ratelimit-remaining"), 2 - n as u64);
            assert_eq!(r.header("ratelimit-policy"), Some(r#""shared";q=3;w=3600"#));
        }
        seen.push(r.status.as_u16());
    }
    assert_eq!(seen, [200, 200, 200, 429, 429]);
    // The partner tier from the file, on Redis.
    let partner = send_n(&mut a, 6, &[("x-api-key", "acme")]).await;
    assert_eq!(statuses(&partner), [200, 200, 200, 200, 200, 429]);
    assert_eq!(partner[0].num("x-ratelimit-limit"), 5);
    assert_eq!(
        partner[0].header("ratelimit-policy"),
        Some(r#""shared";q=5;w=3600"#)
    );
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_and_leased_policies_decide_behind_the_layer() {
    let server = redis_server::RedisServer::start();
    let file = PolicyFile::from_toml(&format!(
        r#"
        [policies.synced]
        algorithm = "fixed_window"
        quota = "3/h"
        key = "header:x-api-key"
        backend = {{ kind = "synced", url = "{url}", prefix = "http-synced" }}

        [policies.leased]
        quota = "3/h"
        key = "header:x-api-key"
        backend = {{ kind = "leased", url = "{url}", prefix = "http-leased" }}
        "#,
        url = server.url()
    ))
    .unwrap();
    for name in ["synced", "leased"] {
        let layer = with_fields(&file, &[name]).await;
        let mut client = Client::connect(serve(app(layer)).await).await;
        let replies = send_n(&mut client, 5, &[("x-api-key", "acct-1")]).await;
        assert_eq!(statuses(&replies), [200, 200, 200, 429, 429], "{name}");
        assert_eq!(replies[0].num("x-ratelimit-limit"), 3, "{name}");
        assert_eq!(
            replies[0].header("ratelimit-policy"),
            Some(format!(r#""{name}";q=3;w=3600"#).as_str())
        );
    }
}

/// A client sending a new invented API key with every request must not get
/// a fresh budget each time: a header-keyed policy from a file is refused
/// without the application's key check, and with one the invented keys
/// fall through to the per-IP policy.
#[tokio::test]
async fn invented_api_keys_do_not_escape_the_per_ip_policy() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.api]
        quota = "1000/h"
        key = "header:x-api-key"

        [policies.anonymous]
        quota = "2/h"
        key = "ip"
        "#,
    )
    .unwrap();
    let refused = RateLimitLayer::from_policies(&file, &["api", "anonymous"]).await;
    match refused {
        Err(PolicyLayerError::Build(BuildError::UncheckedKeys { class })) => {
            assert_eq!(class, "api")
        }
        other => panic!("expected UncheckedKeys, got {other:?}"),
    }
    let layer = with_fields(&file, &["api", "anonymous"]).await;
    let addr = serve(app(layer)).await;
    let mut client = Client::connect(addr).await;
    let mut ok = 0;
    for n in 0..10 {
        let key = format!("made-up-{n}");
        let reply = client.send("GET", "/", &[("x-api-key", &key)]).await;
        ok += usize::from(reply.status == 200);
    }
    assert_eq!(
        ok, 2,
        "one address with invented keys got {ok} of 10 through"
    );
    // An issued key is its own budget.
    let issued = client.send("GET", "/", &[("x-api-key", "key-1")]).await;
    assert_eq!(issued.status, 200);
    // Accepting any key is an explicit choice.
    assert!(
        RateLimitLayer::builder()
            .validate_keys(|_, _| true)
            .policies(&file, &["api"])
            .await
            .unwrap()
            .build()
            .is_ok()
    );
}
