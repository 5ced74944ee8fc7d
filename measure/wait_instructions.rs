//! Instructions per call of the waiting APIs when a slot is free, for
//! `valgrind --tool=callgrind` (repeatable whatever the machine's load):
//! run with N calls of MODE, twice, and divide the difference.
//!
//! ```text
//! cargo build --release --features tokio --example wait_instructions
//! for n in 200000 2000000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/wait_instructions $n outbound 2>&1 | grep refs
//! done   # (second - first) / 1800000
//! ```
//!
//! MODE: `check`, `pacer_wait`, `pacer_until_ready`, `outbound` (an
//! `OutboundLimiter` with bursts on, so that no call waits),
//! `governor_check`, `governor_until_ready`. The quota is 1 per ns with a
//! burst of 2^20: it never runs out.

use rategate::{OutboundLimiter, Pacer, Quota, RateLimiter, TokenBucket};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Polls a future that must be ready at once.
fn ready<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("the slot was free"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .ok_or("usage: wait_instructions N MODE")?
        .parse()?;
    let mode = args.next().ok_or("usage: wait_instructions N MODE")?;
    let quota = Quota::with_period(1_000, Duration::from_nanos(1_000))?.burst(1 << 20)?;
    let limiter = || RateLimiter::<TokenBucket>::new(quota);
    match mode.as_str() {
        "check" => {
            let limiter = limiter()?;
            for _ in 0..n {
                black_box(limiter.check());
            }
        }
        "pacer_wait" => {
            let pacer = Pacer::new(limiter()?);
            for _ in 0..n {
                black_box(pacer.wait())?;
            }
        }
        "pacer_until_ready" => {
            let pacer = Pacer::new(limiter()?);
            for _ in 0..n {
                black_box(ready(pacer.until_ready()))?;
            }
        }
        "outbound" => {
            let guard = OutboundLimiter::builder(limiter()?).bursts(true).build();
            for _ in 0..n {
                black_box(ready(guard.until_ready()))?;
            }
        }
        "governor_check" | "governor_until_ready" => {
            let q = governor::Quota::with_period(Duration::from_nanos(1))
                .ok_or("zero period")?
                .allow_burst(std::num::NonZeroU32::new(1 << 20).ok_or("zero burst")?);
            let g = governor::RateLimiter::direct(q);
            for _ in 0..n {
                if mode == "governor_check" {
                    let _ = black_box(g.check());
                } else {
                    ready(g.until_ready());
                }
            }
        }
        other => return Err(format!("unknown mode {other:?}").into()),
    }
    Ok(())
}
