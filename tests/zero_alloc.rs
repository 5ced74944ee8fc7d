//! The decision path allocates nothing: a direct check, and a keyed check
//! of a key already in the map, on the allowed and on the denied path, for
//! every algorithm.
//!
//! A counting global allocator counts allocations per thread (a
//! thread-local counter), so tests running in parallel in this binary do
//! not see each other's allocations. Not a timing test.

use rategate::{
    Algorithm, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Allocations (alloc, alloc_zeroed, realloc) made by this thread.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: the thread-local may already be gone while the thread
    // exits; such allocations are not counted.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations this thread makes in the second of two runs of `workload`.
///
/// The first run brings the state to its steady size: the sliding window
/// log's ring of entries grows (doubling, capped at the limit) as admissions
/// arrive, so a key's first window may allocate; after that a check
/// allocates nothing. The other algorithms' states never allocate.
fn steady_allocations(mut workload: impl FnMut()) -> u64 {
    workload();
    let before = ALLOCATIONS.with(Cell::get);
    workload();
    ALLOCATIONS.with(Cell::get) - before
}

/// Checks per run; with the manual clock moving 1 ms per check a run spans
/// one period of the quota.
const CHECKS: u64 = 1_000;
const STEP_NANOS: u64 = 1_000_000;

/// Runs one test body per algorithm.
trait PerAlgorithm {
    fn run<A: Algorithm>(&mut self, name: &'static str);
}

/// Every algorithm tested: one line each.
fn for_each_algorithm(body: &mut impl PerAlgorithm) {
    body.run::<TokenBucket>("token_bucket");
    // One line per algorithm.
    body.run::<FixedWindow>("fixed_window");
    body.run::<SlidingWindowCounter>("sliding_window_counter");
    body.run::<SlidingWindowLog>("sliding_window_log");
    body.run::<LeakyBucket>("leaky_bucket");
}

/// 5 per second: with the manual clock moving 1 ms per check, some checks
/// are admitted and most denied, so both paths run.
fn quota() -> Quota {
    Quota::per_second(5).unwrap()
}

/// Counts `(allowed, denied)` decisions.
#[derive(Default)]
struct Tally(u64, u64);

impl Tally {
    fn add(&mut self, allowed: bool) {
        if allowed {
            self.0 += 1;
        } else {
            self.1 += 1;
        }
    }

    fn assert_both(&self, name: &str) {
        assert!(
            self.0 > 0 && self.1 > 0,
            "{name}: {} allowed, {} denied: a path was not exercised",
            self.0,
            self.1
        );
    }
}

struct Direct;

impl PerAlgorithm for Direct {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        // Default clock: the real decision path, clock read and clamp
        // included (these checks are mostly denials).
        let limiter = RateLimiter::<A>::new(quota()).unwrap();
        let n = steady_allocations(|| {
            for _ in 0..CHECKS {
                limiter.check();
            }
            let _ = limiter.check_n(1);
            let _ = limiter.peek();
            let _ = limiter.peek_n(1);
        });
        assert_eq!(n, 0, "{name}: direct check allocated {n} times");

        // Manual clock: admissions and denials.
        let clock = ManualClock::new();
        let limiter = RateLimiter::<A, _>::with_clock(quota(), clock.clone()).unwrap();
        let mut tally = Tally::default();
        let n = steady_allocations(|| {
            for _ in 0..CHECKS {
                clock.advance_nanos(STEP_NANOS);
                tally.add(limiter.check().is_allowed());
            }
        });
        assert_eq!(n, 0, "{name}: direct check allocated {n} times");
        tally.assert_both(name);
    }
}

struct Keyed;

impl PerAlgorithm for Keyed {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        // Default clock, 100 known `u64` keys.
        let limiter = KeyedRateLimiter::<u64, A>::new(quota()).unwrap();
        for key in 0..100 {
            limiter.check(&key);
        }
        let n = steady_allocations(|| {
            for i in 0..CHECKS {
                limiter.check(&(i % 100));
            }
            let _ = limiter.check_n(&7, 1);
            let _ = limiter.peek(&7);
        });
        assert_eq!(
            n, 0,
            "{name}: keyed check of a known key allocated {n} times"
        );
        assert_eq!(limiter.len(), 100);

        // Manual clock, a `String` key looked up by `&str` (no owned key is
        // built for a known key): admissions and denials.
        let clock = ManualClock::new();
        let limiter = KeyedRateLimiter::<String, A>::builder(quota())
            .clock(clock.clone())
            .build()
            .unwrap();
        limiter.check("known");
        let mut tally = Tally::default();
        let n = steady_allocations(|| {
            for _ in 0..CHECKS {
                clock.advance_nanos(STEP_NANOS);
                tally.add(limiter.check("known").is_allowed());
            }
        });
        assert_eq!(
            n, 0,
            "{name}: keyed check of a known key allocated {n} times"
        );
        tally.assert_both(name);

        // The counter does see this thread's allocations: a new key
        // allocates its `String` and its map slot.
        let before = ALLOCATIONS.with(Cell::get);
        limiter.check("new key");
        let n = ALLOCATIONS.with(Cell::get) - before;
        assert!(n > 0, "{name}: the allocation counter saw nothing");
    }
}

#[test]
fn direct_check_allocates_nothing() {
    for_each_algorithm(&mut Direct);
}

#[test]
fn keyed_check_of_known_key_allocates_nothing() {
    for_each_algorithm(&mut Keyed);
}

/// The HTTP layer admits a request of a known key without allocating: one
/// rule (a client IP), two rules all or nothing (a bearer token, `AllOf`
/// over two keyed limiters), fields on 429s only (the default). A layer
/// that puts the fields on every response allocates (its report and the
/// header values): the counter sees the layer's allocations.
#[cfg(feature = "http")]
#[test]
fn the_http_layer_admits_without_allocating() {
    use http_body_util::Full;
    use rategate::http::{ClientClass, ClientIp, KeyExtractor, Matcher, RateLimitLayer, Rule};
    use std::convert::Infallible;
    use std::future::Future;
    use std::net::SocketAddr;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};
    use tower::{Layer, Service};

    type Keyed = KeyedRateLimiter<String, TokenBucket>;
    let keyed = || Arc::new(Keyed::new(Quota::per_second(1_000_000).unwrap()).unwrap());
    let builder = || {
        RateLimitLayer::builder()
            .class(
                ClientClass::new("signed-in", KeyExtractor::bearer_token())
                    .rule(Rule::new("hourly", keyed()))
                    .rule(Rule::new("read", keyed()).when(Matcher::reads())),
            )
            .class(
                ClientClass::new("anonymous", KeyExtractor::client_ip(ClientIp::new()))
                    .rule(Rule::new("hourly", keyed()).when(!Matcher::path_prefix("/graphql"))),
            )
    };
    let peer: SocketAddr = "203.0.113.9:4000".parse().unwrap();
    let request = |signed_in: bool| {
        let mut builder = http::Request::get("/v1/charges");
        if signed_in {
            builder = builder.header("authorization", "Bearer tok_alice");
        }
        let mut request = builder.body(()).unwrap();
        request.extensions_mut().insert(peer);
        request
    };
    // Allocations while the layer decides and serves `requests` (built
    // beforehand: building a request allocates) and their responses are
    // dropped; the second of two batches, the first having stored the keys.
    let allocations = |layer: RateLimitLayer, signed_in: bool| {
        let inner = tower::service_fn(|_: http::Request<()>| {
            std::future::ready(Ok::<_, Infallible>(http::Response::new(
                Full::<bytes::Bytes>::default(),
            )))
        });
        let mut service = layer.same_body().layer(inner);
        let mut cx = Context::from_waker(Waker::noop());
        let mut batch = |requests: Vec<http::Request<()>>| {
            let before = ALLOCATIONS.with(Cell::get);
            for request in requests {
                assert!(service.poll_ready(&mut cx).is_ready());
                let mut future = pin!(service.call(request));
                let Poll::Ready(Ok(response)) = future.as_mut().poll(&mut cx) else {
                    panic!("an in-memory decision is ready at once");
                };
                assert_eq!(response.status(), http::StatusCode::OK);
            }
            ALLOCATIONS.with(Cell::get) - before
        };
        batch((0..10).map(|_| request(signed_in)).collect());
        batch((0..1_000).map(|_| request(signed_in)).collect())
    };
    let default = || builder().build().unwrap();
    assert_eq!(allocations(default(), false), 0, "one rule allocated");
    assert_eq!(allocations(default(), true), 0, "two rules allocated");
    let every_response = || builder().headers_on_allowed(true).build().unwrap();
    assert!(allocations(every_response(), false) >= 1_000);
    assert!(allocations(every_response(), true) >= 1_000);
}
