//! Client keys over real HTTP: a spoofed `X-Forwarded-For` from an
//! untrusted peer is ignored and honoured from a trusted proxy (right-most
//! untrusted hop), `Forwarded` and `X-Real-IP`, IPv6 grouped by prefix,
//! axum's `MockConnectInfo`, an IPv6 peer, API-key headers.

#[path = "support/http.rs"]
mod support;

use axum::Router;
use axum::extract::connect_info::MockConnectInfo;
use axum::routing::get;
use rategate::http::{ClientClass, ClientIp, ForwardedHeader, KeyExtractor, RateLimitLayer, Rule};
use rategate::{FixedWindow, KeyedRateLimiter};
use std::net::SocketAddr;
use std::sync::Arc;
use support::{Client, serve, try_serve};

type Keyed = KeyedRateLimiter<String, FixedWindow>;

fn limiter(quota: &str) -> Arc<Keyed> {
    Arc::new(Keyed::new(quota.parse().unwrap()).unwrap())
}

fn app(client_ip: ClientIp, limiter: Arc<Keyed>) -> Router {
    let layer = RateLimitLayer::new(KeyExtractor::client_ip(client_ip), Rule::new("ip", limiter));
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

async fn status(client: &mut Client, headers: &[(&str, &str)]) -> u16 {
    client.send("GET", "/", headers).await.status.as_u16()
}

#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let limits = limiter("2/h");
    // Trusts a proxy range the test client (127.0.0.1) is not in.
    let client_ip = ClientIp::new().trust_proxies(["10.0.0.0/8"]).unwrap();
    let mut client = Client::connect(serve(app(client_ip, limits.clone())).await).await;
    // A client rotating its own X-Forwarded-For still counts as 127.0.0.1.
    assert_eq!(
        status(&mut client, &[("x-forwarded-for", "1.1.1.1")]).await,
        200
    );
    assert_eq!(
        status(&mut client, &[("x-forwarded-for", "2.2.2.2")]).await,
        200
    );
    assert_eq!(
        status(&mut client, &[("x-forwarded-for", "3.3.3.3")]).await,
        429
    );
    assert_eq!(limits.len(), 1);
    assert_eq!(limits.peek_n("127.0.0.1", 0).unwrap().remaining(), 0);
}

#[tokio::test]
async fn forwarded_for_from_a_trusted_proxy_is_honoured() {
    let limits = limiter("2/h");
    let client_ip = ClientIp::new()
        .trust_proxies(["127.0.0.1/32", "10.0.0.0/8"])
        .unwrap();
    let mut proxy = Client::connect(serve(app(client_ip, limits.clone())).await).await;
    let from = |xff: &'static str| [("x-forwarded-for", xff)];
    assert_eq!(status(&mut proxy, &from("203.0.113.1")).await, 200);
    assert_eq!(status(&mut proxy, &from("203.0.113.1")).await, 200);
    assert_eq!(status(&mut proxy, &from("203.0.113.1")).await, 429);
    // Another client behind the same proxy has its own budget.
    assert_eq!(status(&mut proxy, &from("203.0.113.2")).await, 200);
    // A client writing its own X-Forwarded-For: the proxy appends the
    // address it saw, and the right-most untrusted hop counts, not the
    // forged left part.
    assert_eq!(status(&mut proxy, &from("6.6.6.6, 203.0.113.1")).await, 429);
    // Trusted hops between are skipped.
    assert_eq!(
        status(&mut proxy, &from("6.6.6.6, 203.0.113.1, 10.1.2.3")).await,
        429
    );
    // A hop the proxies could not name: their own address is the key.
    assert_eq!(status(&mut proxy, &from("6.6.6.6, unknown")).await, 200);
    assert_eq!(limits.peek_n("127.0.0.1", 0).unwrap().remaining(), 1);
    assert_eq!(
        limits.peek_n("6.6.6.6", 0).unwrap().remaining(),
        2,
        "the forged hop is never charged"
    );
}

#[tokio::test]
async fn forwarded_and_x_real_ip_when_configured() {
    let limits = limiter("1/h");
    let client_ip = ClientIp::new()
        .trust_proxies(["127.0.0.1"])
        .unwrap()
        .header(ForwardedHeader::Forwarded);
    let mut proxy = Client::connect(serve(app(client_ip, limits.clone())).await).await;
    let fwd = [(
        "forwarded",
        r#"for=198.51.100.1, for="[2001:db8::9]:4711";proto=https"#,
    )];
    assert_eq!(status(&mut proxy, &fwd).await, 200);
    assert_eq!(status(&mut proxy, &fwd).await, 429);
    assert_eq!(limits.peek_n("2001:db8::/64", 0).unwrap().remaining(), 0);
    // Only the configured header: X-Forwarded-For is ignored here.
    assert_eq!(
        status(&mut proxy, &[("x-forwarded-for", "192.0.2.1")]).await,
        200
    );
    assert_eq!(limits.peek_n("127.0.0.1", 0).unwrap().remaining(), 0);

    let limits = limiter("1/h");
    let client_ip = ClientIp::new()
        .trust_proxies(["127.0.0.1"])
        .unwrap()
        .header(ForwardedHeader::XRealIp);
    let mut proxy = Client::connect(serve(app(client_ip, limits.clone())).await).await;
    assert_eq!(status(&mut proxy, &[("x-real-ip", "192.0.2.7")]).await, 200);
    assert_eq!(status(&mut proxy, &[("x-real-ip", "192.0.2.7")]).await, 429);
    assert_eq!(status(&mut proxy, &[("x-real-ip", "192.0.2.8")]).await, 200);
    // Garbage from the proxy: the proxy's own address.
    assert_eq!(
        status(&mut proxy, &[("x-real-ip", "not an address")]).await,
        200
    );
    assert_eq!(limits.peek_n("127.0.0.1", 0).unwrap().remaining(), 0);
}

#[tokio::test]
async fn ipv6_clients_are_grouped_by_prefix() {
    let limits = limiter("2/h");
    let client_ip = ClientIp::new().trust_proxies(["127.0.0.1"]).unwrap();
    let mut proxy = Client::connect(serve(app(client_ip, limits.clone())).await).await;
    let from = |xff: &'static str| [("x-forwarded-for", xff)];
    // Two addresses of one /64 share a budget.
    assert_eq!(status(&mut proxy, &from("2001:db8:1:2::1")).await, 200);
    assert_eq!(
        status(&mut proxy, &from("2001:db8:1:2:ffff:ffff:ffff:ffff")).await,
        200
    );
    assert_eq!(status(&mut proxy, &from("2001:db8:1:2::abcd")).await, 429);
    // The next /64 is another client.
    assert_eq!(status(&mut proxy, &from("2001:db8:1:3::1")).await, 200);
    assert_eq!(
        limits.peek_n("2001:db8:1:2::/64", 0).unwrap().remaining(),
        0
    );

    // A shorter prefix groups more.
    let limits = limiter("2/h");
    let client_ip = ClientIp::new()
        .trust_proxies(["127.0.0.1"])
        .unwrap()
        .ipv6_prefix(48);
    let mut proxy = Client::connect(serve(app(client_ip, limits.clone())).await).await;
    assert_eq!(status(&mut proxy, &from("2001:db8:1:2::1")).await, 200);
    assert_eq!(status(&mut proxy, &from("2001:db8:1:3::1")).await, 200);
    assert_eq!(status(&mut proxy, &from("2001:db8:1:ffff::1")).await, 429);
    assert_eq!(status(&mut proxy, &from("2001:db8:2::1")).await, 200);
    // IPv4 whole by default.
    assert_eq!(status(&mut proxy, &from("192.0.2.1")).await, 200);
    assert_eq!(status(&mut proxy, &from("192.0.2.2")).await, 200);
}

#[tokio::test]
async fn an_ipv6_peer_is_keyed_by_its_64() {
    let limits = limiter("1/h");
    let Some(addr) = try_serve(app(ClientIp::new(), limits.clone()), true).await else {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    };
    let mut client = Client::connect(addr).await;
    assert_eq!(status(&mut client, &[]).await, 200);
    assert_eq!(status(&mut client, &[]).await, 429);
    assert_eq!(limits.peek_n("::/64", 0).unwrap().remaining(), 0);
}

#[tokio::test]
async fn mock_connect_info_is_the_peer() {
    let limits = limiter("1/h");
    let peer: SocketAddr = "192.0.2.44:5555".parse().unwrap();
    let router = app(ClientIp::new(), limits.clone()).layer(MockConnectInfo(peer));
    // Served without connect info: only the mock says who the peer is.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let mut client = Client::connect(addr).await;
    assert_eq!(status(&mut client, &[]).await, 200);
    assert_eq!(status(&mut client, &[]).await, 429);
    assert_eq!(limits.peek_n("192.0.2.44", 0).unwrap().remaining(), 0);
}

#[tokio::test]
async fn api_keys_from_a_header_with_an_ip_fallback() {
    let by_key = limiter("2/h");
    let by_ip = limiter("1/h");
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new(
                "api-key",
                KeyExtractor::header(http::HeaderName::from_static("x-api-key")).max_len(16),
            )
            .rule(Rule::new("key", by_key.clone())),
        )
        .class(ClientClass::new("ip", KeyExtractor::peer_ip()).rule(Rule::new("ip", by_ip.clone())))
        .build()
        .unwrap();
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let mut client = Client::connect(serve(router).await).await;
    assert_eq!(status(&mut client, &[("x-api-key", "k-1")]).await, 200);
    assert_eq!(status(&mut client, &[("x-api-key", "k-1")]).await, 200);
    assert_eq!(status(&mut client, &[("x-api-key", "k-1")]).await, 429);
    assert_eq!(status(&mut client, &[("x-api-key", "k-2")]).await, 200);
    // An oversized key is not stored: the request falls to the IP tier.
    let long = "x".repeat(17);
    assert_eq!(status(&mut client, &[("x-api-key", &long)]).await, 200);
    assert_eq!(status(&mut client, &[("x-api-key", &long)]).await, 429);
    assert_eq!(by_key.len(), 2);
    assert_eq!(by_ip.peek_n("127.0.0.1", 0).unwrap().remaining(), 0);
}

fn bearer_parts(token: &str) -> http::request::Parts {
    http::Request::get("/")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap()
        .into_parts()
        .0
}

/// A JWT-sized bearer token is a key: the application's check sees it
/// whole, and the limiter holds a short digest of it, one per token.
#[test]
fn a_jwt_sized_bearer_token_is_a_key_kept_as_a_digest() {
    let jwt = |claims: &str| {
        format!(
            "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.{}.{}",
            claims.repeat(8),
            "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c".repeat(8)
        )
    };
    let (alice, bob) = (jwt("eyJzdWIiOiJhbGljZSJ9"), jwt("eyJzdWIiOiJib2IifQ"));
    assert!(alice.len() > rategate::http::DEFAULT_MAX_KEY_LEN);
    let issued = alice.clone();
    let extractor = KeyExtractor::bearer_token().validate(move |token| token == issued);
    let key = extractor.extract(&bearer_parts(&alice)).unwrap();
    assert!(key.len() <= rategate::http::DEFAULT_MAX_KEY_LEN, "{key}");
    assert_eq!(extractor.extract(&bearer_parts(&alice)).unwrap(), key);
    // Another token is checked whole, and refused.
    assert!(extractor.extract(&bearer_parts(&bob)).is_err());
    // Without a check, two tokens are two keys.
    let any = KeyExtractor::bearer_token();
    assert_ne!(
        any.extract(&bearer_parts(&alice)).unwrap(),
        any.extract(&bearer_parts(&bob)).unwrap()
    );
    // Past the token limit, no key.
    let huge = "a".repeat(rategate::http::DEFAULT_MAX_TOKEN_LEN + 1);
    assert!(any.extract(&bearer_parts(&huge)).is_err());
}
