//! The HTTP layer's all-or-nothing decisions while the states they decide
//! on change under them (a sweep or a reset frees room in a full key map,
//! a run-time quota change): a refused request is charged nothing.
#![cfg(feature = "axum")]

use http::{Request, StatusCode};
use rategate::http::{ClientClass, KeyExtractor, RateLimitLayer, Rule};
use rategate::{Clock, KeyedRateLimiter, Quota, TokenBucket};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tower::{Layer, Service, ServiceExt};

/// A clock the test drives: each reading returns `time` and then advances
/// it by `step` nanoseconds.
#[derive(Clone, Default)]
struct StepClock {
    time: Arc<AtomicU64>,
    step: Arc<AtomicU64>,
}

impl Clock for StepClock {
    fn now(&self) -> u64 {
        self.time
            .fetch_add(self.step.load(Ordering::SeqCst), Ordering::SeqCst)
    }
}

fn send(layer: &RateLimitLayer, key: &str) -> StatusCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let request = Request::builder()
        .uri("/")
        .header("x-key", key)
        .body(())
        .unwrap();
    rt.block_on(async { service.ready().await?.call(request).await })
        .unwrap()
        .status()
}

/// Two rules on one keyed limiter (cost 6 each, capacity 10), the map full
/// (`max_keys(1)`). Within one decision the first rule's reservation finds
/// the map full and peeks the shared overflow state; the second rule's
/// reservation, a moment later, runs the elected full sweep, which frees
/// the idle key, and inserts the request's key with a fresh state of its
/// own. The decision must settle both on one state, refuse 6 + 6 on a
/// capacity of 10, and charge nothing.
#[test]
fn a_sweep_freeing_room_mid_decision_charges_no_refused_request() {
    let clock = StepClock::default();
    let limiter = Arc::new(
        KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_second(10).unwrap())
            .clock(clock.clone())
            .max_keys(1)
            .build()
            .unwrap(),
    );
    // t = 0: "other" fills the map; a second new key elects the first full
    // sweep (nothing idle), pushing the next one to t = 1 s.
    assert!(limiter.check("other").is_allowed());
    assert!(limiter.check("elect-sweep").is_allowed());
    assert_eq!(limiter.len(), 1);
    let rule = |name: &str| Rule::new(name, Arc::clone(&limiter)).cost(|_| 6);
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new(
                "clients",
                KeyExtractor::header(http::HeaderName::from_static("x-key")),
            )
            .rule(rule("a"))
            .rule(rule("b")),
        )
        .build()
        .unwrap();
    // Just before the next full sweep is due, each reading 1 ns later: the
    // first rule's reservations read t < 1 s, the second rule's t >= 1 s,
    // when "other" (one token spent at t = 0) is idle again.
    clock.time.store(1_000_000_000 - 2, Ordering::SeqCst);
    clock.step.store(1, Ordering::SeqCst);
    let status = send(&layer, "victim");
    clock.step.store(0, Ordering::SeqCst);
    // 6 + 6 never fit in a capacity of 10: the request must be refused
    // (400, a cost no limit can hold, or 429)...
    assert_ne!(status, StatusCode::OK);
    // ... and, refused, charged nothing.
    let left = limiter.peek_n("victim", 0).unwrap().remaining();
    assert_eq!(left, 10, "a refused request took {} tokens", 10 - left);
}

/// The same race under a real clock, with no test-driven time:
/// another thread frees a slot of the key map (`reset` of another key,
/// which takes only that key's stripe) between the two rules'
/// reservations of one decision. Every request costs 6 + 6 on a capacity
/// of 10, so every one is refused; none may be charged.
#[test]
fn a_reset_of_another_key_mid_decision_charges_no_refused_request() {
    use rategate::Overflow;
    let limiter = Arc::new(
        KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_second(10).unwrap())
            .max_keys(1)
            .overflow(Overflow::Allow)
            .build()
            .unwrap(),
    );
    let rule = |name: &str| Rule::new(name, Arc::clone(&limiter)).cost(|_| 6);
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new(
                "clients",
                KeyExtractor::header(http::HeaderName::from_static("x-key")),
            )
            .rule(rule("a"))
            .rule(rule("b")),
        )
        .build()
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let toggler = {
        let (limiter, stop) = (Arc::clone(&limiter), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                limiter.check("filler");
                limiter.reset("filler");
            }
        })
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let (mut charged, mut admitted) = (0u32, 0u32);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut i = 0u64;
    while std::time::Instant::now() < deadline && charged == 0 {
        i += 1;
        let key = format!("victim-{i}");
        let request = Request::builder()
            .uri("/")
            .header("x-key", key.as_str())
            .body(())
            .unwrap();
        let status = rt
            .block_on(async { service.ready().await?.call(request).await })
            .unwrap()
            .status();
        admitted += u32::from(status == StatusCode::OK);
        charged += u32::from(limiter.peek_n(key.as_str(), 0).unwrap().remaining() < 10);
        limiter.reset(key.as_str());
    }
    stop.store(true, Ordering::Relaxed);
    toggler.join().unwrap();
    assert_eq!(admitted, 0);
    assert_eq!(charged, 0, "refused requests charged (of {i} sent)");
}

/// A run-time quota change (`set_quota` on an `Adjustable` keyed limiter,
/// "a plan downgraded") racing two-rule requests: it waits for decisions
/// in progress, so every 429 leaves "other" untouched.
#[test]
fn set_quota_racing_two_rule_requests_charges_no_refused_request() {
    use rategate::FixedWindow;
    use rategate::algorithm::Adjustable;
    let big = Quota::per_hour(1_000_000).unwrap();
    let small = Quota::per_hour(1).unwrap();
    let adjustable = Arc::new(
        KeyedRateLimiter::<String, Adjustable<FixedWindow>>::builder(big)
            .build()
            .unwrap(),
    );
    let other = Arc::new(
        KeyedRateLimiter::<String, FixedWindow>::new(Quota::per_hour(1_000_000_000).unwrap())
            .unwrap(),
    );
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new(
                "clients",
                KeyExtractor::header(http::HeaderName::from_static("x-key")),
            )
            .rule(Rule::new("other", Arc::clone(&other)))
            .rule(Rule::new("plan", Arc::clone(&adjustable))),
        )
        .build()
        .unwrap();
    // "k" has used 5: admitted under the big quota, denied under the small.
    assert!(adjustable.check_n("k", 5).unwrap().is_allowed());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let toggler = {
        let (adjustable, stop) = (Arc::clone(&adjustable), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                adjustable.set_quota(small).unwrap();
                adjustable.set_quota(big).unwrap();
            }
        })
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let used = || 1_000_000_000 - other.peek_n("k", 0).unwrap().remaining();
    let (mut admitted, mut sent) = (0u32, 0u32);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < deadline && used() == admitted {
        sent += 1;
        let request = Request::builder()
            .uri("/")
            .header("x-key", "k")
            .body(())
            .unwrap();
        let status = rt
            .block_on(async { service.ready().await?.call(request).await })
            .unwrap()
            .status();
        admitted += u32::from(status == StatusCode::OK);
    }
    stop.store(true, Ordering::Relaxed);
    toggler.join().unwrap();
    assert_eq!(
        used(),
        admitted,
        "\"other\" charged {} for {admitted} admitted ({sent} sent)",
        used()
    );
}
