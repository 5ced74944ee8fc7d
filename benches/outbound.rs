//! Waiting when a slot is free: what `Pacer::until_ready` (async, polled
//! once with a no-op waker, so no runtime is measured), `Pacer::wait`
//! (blocking) and `OutboundLimiter::until_ready` add to a plain `check`,
//! on a token bucket of one per nanosecond that never runs out, next to
//! governor's `until_ready` on the same quota.

mod common;

use common::{allow_quota, config, governor_allow_quota};
use criterion::{Criterion, criterion_group, criterion_main};
use rategate::policy::{AllOf, Limit};
use rategate::{OutboundLimiter, Pacer, RateLimiter, TokenBucket};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Polls a future that must be ready at once.
fn ready<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("the slot was free"),
    }
}

fn free_slot(c: &mut Criterion) {
    let mut group = c.benchmark_group("free_slot");
    let quota = allow_quota::<TokenBucket>();

    let limiter = RateLimiter::<TokenBucket>::new(quota).unwrap();
    group.bench_function("check", |b| b.iter(|| black_box(limiter.check())));

    let pacer = Pacer::new(RateLimiter::<TokenBucket>::new(quota).unwrap());
    group.bench_function("pacer_until_ready", |b| {
        b.iter(|| black_box(ready(pacer.until_ready())))
    });
    group.bench_function("pacer_wait", |b| b.iter(|| black_box(pacer.wait())));

    let own = Arc::new(RateLimiter::<TokenBucket>::new(quota).unwrap());
    let guard = OutboundLimiter::builder(AllOf::new([own as Arc<dyn Limit>]))
        .bursts(true)
        .build();
    group.bench_function("outbound_until_ready", |b| {
        b.iter(|| black_box(ready(guard.until_ready())))
    });

    let governor = governor::RateLimiter::direct(governor_allow_quota());
    group.bench_function("governor_until_ready", |b| {
        b.iter(|| ready(governor.until_ready()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = free_slot
}
criterion_main!(benches);
