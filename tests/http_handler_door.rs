//! The door of handler-charged routes: a spent client is refused before
//! its handler runs, except in shadow mode, where the handler gets its
//! `Charge` as always.
#![cfg(feature = "http")]

use http::{Request, StatusCode};
use rategate::http::{Charge, ClientClass, KeyExtractor, RateLimitLayer, Rule};
use rategate::{FixedWindow, KeyedRateLimiter, Quota};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tower::{Layer, Service, ServiceExt};

type Keyed = KeyedRateLimiter<String, FixedWindow>;

/// Sends `n` requests through `layer` to a handler that records whether it
/// found a `Charge`, and charges `cost` when it did. Returns (statuses,
/// handler calls, handler calls without a Charge).
fn drive(layer: RateLimitLayer, n: usize, cost: u32) -> (Vec<u16>, u32, u32) {
    let calls = Arc::new(AtomicU32::new(0));
    let missing = Arc::new(AtomicU32::new(0));
    let (c, m) = (Arc::clone(&calls), Arc::clone(&missing));
    let mut service = layer.layer(tower::service_fn(move |request: Request<()>| {
        let (c, m) = (Arc::clone(&c), Arc::clone(&m));
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            let mut response = http::Response::new(());
            match request.extensions().get::<Charge>() {
                Some(charge) => {
                    if let Err(rejected) = charge.charge(cost) {
                        *response.status_mut() = rejected.status();
                    }
                }
                None => {
                    // axum's Extension<Charge> would answer 500 here.
                    m.fetch_add(1, Ordering::SeqCst);
                    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                }
            }
            Ok::<_, Infallible>(response)
        }
    }));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut statuses = Vec::new();
    for _ in 0..n {
        let request = Request::post("/graphql").body(()).unwrap();
        let response = rt
            .block_on(async { service.ready().await?.call(request).await })
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    (
        statuses,
        calls.load(Ordering::SeqCst),
        missing.load(Ordering::SeqCst),
    )
}

/// Shadow mode (the layer's): nothing is ever refused, and a handler-charged
/// route's handler always finds its `Charge` (it did before the door peek).
#[test]
fn shadow_layer_handler_always_gets_its_charge() {
    let points = Arc::new(Keyed::new(Quota::per_hour(2).unwrap()).unwrap());
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global())
                .rule(Rule::new("graphql", points).charged_by_handler()),
        )
        .shadow(true)
        .build()
        .unwrap();
    let (statuses, calls, missing) = drive(layer, 5, 1);
    assert_eq!(calls, 5);
    assert_eq!(
        missing, 0,
        "in shadow mode the handler ran without its Charge (statuses {statuses:?})"
    );
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
}

/// A shadow rule charged by its handler, alone in its class: same.
#[test]
fn shadow_rule_handler_always_gets_its_charge() {
    let points = Arc::new(Keyed::new(Quota::per_hour(2).unwrap()).unwrap());
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global()).rule(
                Rule::new("graphql", points)
                    .shadow(true)
                    .charged_by_handler(),
            ),
        )
        .build()
        .unwrap();
    let (statuses, calls, missing) = drive(layer, 5, 1);
    assert_eq!(calls, 5);
    assert_eq!(
        missing, 0,
        "a shadow rule's handler ran without its Charge (statuses {statuses:?})"
    );
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
}

/// A client whose budget is spent is refused at the door even for a query
/// its handler would charge 0: the door cannot know the handler's cost,
/// and an uncharged request costs 1.
#[test]
fn a_spent_client_is_refused_at_the_door_whatever_its_handler_would_charge() {
    let points = Arc::new(Keyed::new(Quota::per_hour(1).unwrap()).unwrap());
    points.check_n("global", 1).unwrap();
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global())
                .rule(Rule::new("graphql", points).charged_by_handler()),
        )
        .build()
        .unwrap();
    let (statuses, calls, _) = drive(layer, 1, 0);
    assert_eq!((statuses, calls), (vec![429], 0));
}
