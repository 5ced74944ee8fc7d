//! The rate-limit layer called from several threads at once, in process
//! (no sockets): each thread its own clone of one layer around a service
//! that answers at once, and its own client address (its own key), so
//! what the threads share is the layer's configuration and counters and
//! the keyed limiter's map. Prints ns per request per thread for three
//! rounds, each on fresh threads.
//!
//! ```sh
//! cargo run --release --example layer_threads --features axum -- [THREADS] [REQUESTS]
//! ```
//!
//! THREADS defaults to 2, REQUESTS (per thread and round) to 2,000,000.

use http::Request;
use http_body_util::Empty;
use hyper::body::Bytes;
use rategate::Quota;
use rategate::http::RateLimitLayer;
use std::time::Instant;
use tower::{Layer, Service};

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: u8 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let requests: u32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    // A quota no run reaches: every request is admitted.
    let layer = RateLimitLayer::per_ip(Quota::per_second(1_000_000_000).unwrap()).unwrap();
    let inner = tower::service_fn(|_request: Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Empty::<Bytes>::new()))
    });
    for round in 1..=3 {
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mut service = layer.layer(inner);
                std::thread::spawn(move || {
                    let peer = std::net::SocketAddr::from(([192, 0, 2, t], 1));
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    for _ in 0..requests {
                        let mut request = Request::get("/").body(()).unwrap();
                        request.extensions_mut().insert(peer);
                        let mut future = std::pin::pin!(service.call(request));
                        // The service answers at once: one poll completes it.
                        let answer = future.as_mut().poll(&mut cx);
                        assert!(answer.is_ready());
                        let _ = std::hint::black_box(answer);
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        println!(
            "round {round}: {threads} threads, {:.1} ns per request per thread",
            start.elapsed().as_nanos() as f64 / f64::from(requests)
        );
    }
    let stats = layer.stats();
    assert_eq!(
        stats.allowed,
        3 * u64::from(threads) * u64::from(requests),
        "every request counted"
    );
}
