//! A limiter of the application's own that panics inside a decision
//! leaves no lock stripe locked (every later request on the key would
//! hang), and what it leaves charged is what the docs say.
#![cfg(feature = "axum")]

use http::{Request, StatusCode};
use rategate::http::{Backend, ClientClass, KeyExtractor, RateLimitLayer, Rule};
use rategate::{CheckError, Decision, FixedWindow, KeyedRateLimiter, Quota};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tower::{Layer, Service, ServiceExt};

struct Exploding {
    armed: AtomicBool,
    inner: rategate::RateLimiter<FixedWindow>,
}

impl Backend for Exploding {
    fn check_n(&self, _key: &str, _cost: u32) -> Result<Decision, CheckError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            panic!("backend exploded mid-decision");
        }
        self.inner.check_n(_cost)
    }
    fn peek_n(&self, _key: &str, cost: u32) -> Result<Decision, CheckError> {
        self.inner.peek_n(cost)
    }
    fn quota(&self) -> Quota {
        Quota::per_second(10).unwrap()
    }
}

#[test]
fn a_panicking_backend_leaves_no_stripe_locked() {
    let keyed = Arc::new(
        KeyedRateLimiter::<String, FixedWindow>::new(Quota::per_hour(100).unwrap()).unwrap(),
    );
    let exploding = Arc::new(Exploding {
        armed: AtomicBool::new(true),
        inner: rategate::RateLimiter::new(Quota::per_hour(100).unwrap()).unwrap(),
    });
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global())
                .rule(Rule::new("keyed", Arc::clone(&keyed)))
                .rule(Rule::new("exploding", exploding)),
        )
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let request = || Request::get("/").body(()).unwrap();
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async { service.ready().await?.call(request()).await })
    }));
    assert!(first.is_err(), "the backend's panic propagates");
    // The next request on the same key, from another thread, must finish.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let status = rt
            .block_on(async { service.ready().await?.call(request()).await })
            .unwrap()
            .status();
        let _ = tx.send(status);
    });
    let status = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the request after a panic hung: a stripe stayed locked");
    assert_eq!(status, StatusCode::OK);
    // The panic came after "keyed" was charged: no rollback runs (see
    // "What the guarantee does not cover" in the all-or-nothing docs), so
    // the panicking request and the served one took one each.
    assert_eq!(keyed.peek_n("global", 0).unwrap().remaining(), 98);
}
