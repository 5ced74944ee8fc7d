//! Bearer tokens past 256 bytes are kept as a SHA-256 digest: one key in
//! every extractor, and no plain key spells one.
#![cfg(feature = "http")]

use http::{Request, StatusCode};
use rategate::http::{ClientClass, KeyExtractor, RateLimitLayer, Rule};
use rategate::{FixedWindow, KeyedRateLimiter, Quota};
use std::convert::Infallible;
use std::sync::Arc;
use tower::{Layer, Service, ServiceExt};

type Keyed = KeyedRateLimiter<String, FixedWindow>;

fn bearer(token: &str) -> http::request::Parts {
    Request::get("/")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap()
        .into_parts()
        .0
}

fn jwt() -> String {
    format!(
        "eyJhbGciOiJIUzI1NiJ9.{}.sig",
        "eyJzdWIiOiJhbGljZSJ9".repeat(20)
    )
}

fn status(layer: &RateLimitLayer, token: &str) -> u16 {
    let mut service = layer
        .clone()
        .layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(http::Response::new(()))
        }));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let request = Request::get("/")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap();
    rt.block_on(async { service.ready().await?.call(request).await })
        .unwrap()
        .status()
        .as_u16()
}

/// Two layers (two routers, or two replicas of a service sharing one store)
/// keyed by `KeyExtractor::bearer_token()` over one limiter: a JWT is one
/// client, limited once. Each extractor draws its own random digest keys,
/// so the same long token is a different key in each: N layers, N budgets.
#[test]
fn a_long_token_is_one_key_whichever_extractor_reads_it() {
    let shared = Arc::new(Keyed::new(Quota::per_hour(1).unwrap()).unwrap());
    let layer = || {
        RateLimitLayer::builder()
            .class(
                ClientClass::new("signed-in", KeyExtractor::bearer_token())
                    .rule(Rule::new("user", Arc::clone(&shared))),
            )
            .build()
            .unwrap()
    };
    let (v1, v2) = (layer(), layer());
    let token = jwt();
    assert!(token.len() > 256);
    assert_eq!(status(&v1, &token), 200);
    assert_eq!(
        status(&v2, &token),
        StatusCode::TOO_MANY_REQUESTS.as_u16(),
        "the same token got a second budget through a second extractor"
    );
}

/// Same, seen at the extractor: two `bearer_token()` extractors disagree on
/// a long token's key (a short one is the same key in both).
#[test]
fn two_bearer_extractors_agree_on_a_long_tokens_key() {
    let token = jwt();
    let (a, b) = (KeyExtractor::bearer_token(), KeyExtractor::bearer_token());
    assert_eq!(
        a.extract(&bearer("short")).unwrap(),
        b.extract(&bearer("short")).unwrap()
    );
    assert_eq!(
        a.extract(&bearer(&token)).unwrap(),
        b.extract(&bearer(&token)).unwrap()
    );
}

/// A short token spelled like a digest (`#` and 32 hex digits) is not the
/// long token whose digest it spells: the two share one namespace, so a
/// client who learns a digest (it is logged as the key by the `tracing`
/// feature's denial events) spends the victim's budget.
#[test]
fn a_plain_key_shaped_like_a_digest_is_not_that_digest() {
    let extractor = KeyExtractor::bearer_token();
    let token = jwt();
    let digest = extractor.extract(&bearer(&token)).unwrap();
    assert!(digest.starts_with('#') && digest.len() == 33, "{digest}");
    assert_ne!(
        extractor.extract(&bearer(&digest)).unwrap(),
        digest,
        "the 33-byte token {digest:?} is the same key as a 300-byte JWT"
    );
}

/// Boundary: 256 bytes kept whole, 257 digested.
#[test]
fn boundary_256_257() {
    let extractor = KeyExtractor::bearer_token();
    let t256 = "a".repeat(256);
    let t257 = "a".repeat(257);
    assert_eq!(extractor.extract(&bearer(&t256)).unwrap(), t256);
    assert!(extractor.extract(&bearer(&t257)).unwrap().starts_with('#'));
}
