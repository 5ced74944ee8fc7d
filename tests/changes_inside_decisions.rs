//! `set_quota` and `reset` take lock stripes: called from code of the
//! application's own that runs inside a decision, they must not deadlock.
#![cfg(feature = "http")]

use rategate::algorithm::Adjustable;
use rategate::policy::{AllOf, Limit};
use rategate::{CheckError, Decision, FixedWindow, Quota, RateLimiter};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

type Plan = RateLimiter<Adjustable<FixedWindow>>;

/// An adaptive limit of the application's own: each check retunes an
/// `Adjustable` limiter (say, a plan whose quota follows load).
struct Adaptive {
    plan: Arc<Plan>,
}

impl Limit for Adaptive {
    fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
        self.plan.set_quota(Quota::per_hour(100).unwrap()).unwrap();
        self.plan.check_n(cost)
    }
    fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        self.plan.set_quota(Quota::per_hour(100).unwrap()).unwrap();
        self.plan.peek_n(cost)
    }
    fn quota(&self) -> Option<Quota> {
        Some(Quota::per_hour(100).unwrap())
    }
}

fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

#[test]
fn set_quota_from_a_limit_inside_all_of_does_not_deadlock() {
    let plan = Arc::new(Plan::new(Quota::per_hour(10).unwrap()).unwrap());
    let other = Arc::new(RateLimiter::<FixedWindow>::new(Quota::per_hour(10).unwrap()).unwrap());
    let all = AllOf::new([Arc::new(Adaptive { plan }) as Arc<dyn Limit>, other]);
    let done = within(5, move || all.check_n(1).unwrap().is_allowed());
    assert_eq!(
        done,
        Some(true),
        "AllOf::check_n deadlocked: set_quota inside a decision waits for the stripes the decision holds"
    );
}

/// The same through the HTTP layer: a `Backend` of the application's own.
#[cfg(feature = "axum")]
#[test]
fn set_quota_from_an_http_backend_does_not_deadlock() {
    use http::Request;
    use rategate::http::{Backend, ClientClass, KeyExtractor, RateLimitLayer, Rule};
    use std::convert::Infallible;
    use tower::{Layer, Service, ServiceExt};

    struct AdaptiveBackend {
        plan: Arc<Plan>,
    }
    impl Backend for AdaptiveBackend {
        fn check_n(&self, _key: &str, cost: u32) -> Result<Decision, CheckError> {
            self.plan.set_quota(Quota::per_hour(100).unwrap()).unwrap();
            self.plan.check_n(cost)
        }
        fn peek_n(&self, _key: &str, cost: u32) -> Result<Decision, CheckError> {
            self.plan.set_quota(Quota::per_hour(100).unwrap()).unwrap();
            self.plan.peek_n(cost)
        }
        fn quota(&self) -> Quota {
            Quota::per_hour(100).unwrap()
        }
    }
    let plan = Arc::new(Plan::new(Quota::per_hour(10).unwrap()).unwrap());
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global())
                .rule(Rule::new("adaptive", Arc::new(AdaptiveBackend { plan }))),
        )
        .build()
        .unwrap();
    let done = within(5, move || {
        let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(http::Response::new(()))
        }));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let request = Request::get("/").body(()).unwrap();
        rt.block_on(async { service.ready().await?.call(request).await })
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(
        done,
        Some(200),
        "the layer deadlocked: set_quota inside a user Backend waits for the stripes the decision holds"
    );
}

/// Same root (stripes are process-wide and not reentrant): a limit of the
/// application's own that resets a key of a keyed limiter (a "forgive on
/// success" limit) deadlocks when that key's stripe is one the decision
/// holds, which it always is for the request's own key.
#[test]
fn reset_from_a_limit_inside_all_of_does_not_deadlock() {
    use rategate::KeyedRateLimiter;
    use rategate::policy::KeyedLimit;
    type Keyed = KeyedRateLimiter<String, FixedWindow>;
    struct Forgiving(Arc<Keyed>, RateLimiter<FixedWindow>);
    impl Limit for Forgiving {
        fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
            self.0.reset("k");
            self.1.check_n(cost)
        }
        fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
            self.1.peek_n(cost)
        }
        fn quota(&self) -> Option<Quota> {
            None
        }
    }
    let keyed = Arc::new(Keyed::new(Quota::per_hour(10).unwrap()).unwrap());
    let all = AllOf::new([
        Arc::new(KeyedLimit::new(Arc::clone(&keyed), "k".to_string())) as Arc<dyn Limit>,
        Arc::new(Forgiving(
            keyed,
            RateLimiter::new(Quota::per_hour(10).unwrap()).unwrap(),
        )),
    ]);
    let done = within(5, move || all.check_n(1).unwrap().is_allowed());
    assert_eq!(done, Some(true), "AllOf::check_n deadlocked in reset");
}
