//! The leased limiter against a real `redis-server` started on a free
//! loopback port: nodes racing for one key's budget never exceed it, idle
//! nodes give their slices back, slices die with their window, and an
//! outage never lets a node admit more than it holds.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

use rategate::redis::LeasedLimiter;
use rategate::{ManualClock, Quota};
use redis_server::RedisServer;
use redis_server::runtime;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

async fn node(
    server: &RedisServer,
    quota: Quota,
    clock: &ManualClock,
    background: bool,
) -> LeasedLimiter<ManualClock> {
    LeasedLimiter::builder(quota)
        .url(&server.url())
        .prefix("lease")
        .clock(clock.clone())
        .interval(Duration::from_millis(5))
        .timeout(Duration::from_millis(200))
        .min_slice(2)
        .max_slice(10)
        .background(background)
        .build()
        .await
        .unwrap()
}

fn granted(server: &RedisServer, key: &str, window: u64) -> u64 {
    // The policy segment (the quota) sits between the prefix and the key.
    let name = format!("lease:*:{{{key}}}:lease:{window}");
    let found = server.cli(&["KEYS", &name]).unwrap();
    let Some(stored) = found.lines().next().filter(|l| !l.is_empty()) else {
        return 0;
    };
    let v = server.cli(&["GET", stored]).unwrap();
    v.trim().parse().unwrap_or(0)
}

/// Four nodes, four tasks each, take one key's budget (checks and
/// acquires, costs 1 to 3) while the background tasks renew and return
/// slices every 5 ms; node `n` stops after `300 (n + 1)` ms, so idle nodes
/// give their slices back while the others still race. `pace`: a pause
/// between a task's requests (none: as fast as it can). Returns what was
/// admitted and what idle nodes returned, after checking that Redis's
/// granted total, once every node has shut down, is exactly what was
/// admitted (no unit used twice, none lost).
async fn race(limit: u32, pace: Option<Duration>) -> (u64, u64) {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::per_hour(limit).unwrap();
    let mut nodes = Vec::new();
    for _ in 0..4 {
        nodes.push(node(&server, quota, &clock, true).await);
    }
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        let deadline = start + Duration::from_millis(300 * (n as u64 + 1));
        for t in 0..4 {
            let (node, admitted) = (node.clone(), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                let mut i = n * 7 + t;
                while Instant::now() < deadline {
                    i += 1;
                    let cost = 1 + (i % 3) as u32;
                    let d = if i % 5 == 0 {
                        node.acquire_n("k", cost).await.unwrap()
                    } else {
                        node.check_n("k", cost).unwrap()
                    };
                    if d.is_allowed() {
                        admitted.fetch_add(u64::from(cost), Ordering::Relaxed);
                    }
                    match pace {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None if i % 16 == 0 => tokio::task::yield_now().await,
                        None => {}
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(
        admitted <= u64::from(limit),
        "admitted {admitted} of {limit}"
    );
    assert!(granted(&server, "k", 0) <= u64::from(limit));
    let mut returned = 0;
    for node in &nodes {
        returned += node.stats().returned;
        node.shutdown().await.unwrap();
        assert_eq!(node.held_total(), 0);
    }
    assert_eq!(granted(&server, "k", 0), admitted);
    (admitted, returned)
}

/// Racing for a small budget: all of it is used, never more.
#[test]
fn racing_nodes_never_exceed_the_limit() {
    let (admitted, _) = runtime().block_on(race(3_000, None));
    assert_eq!(admitted, 3_000, "the whole budget is used, none stranded");
}

/// Racing at a steady pace for a large budget: nodes that go idle return
/// their slices during the race, and the accounting still balances.
#[test]
fn idle_nodes_return_slices_while_others_race() {
    let (admitted, returned) =
        runtime().block_on(race(1_000_000, Some(Duration::from_micros(500))));
    assert!(admitted > 0 && admitted < 1_000_000);
    assert!(returned > 0, "stopped nodes gave slices back");
}

#[test]
fn idle_node_holds_no_quota_after_returning_its_slice() {
    runtime().block_on(async {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        let quota = Quota::per_hour(100).unwrap();
        let a = node(&server, quota, &clock, false).await;
        let b = node(&server, quota, &clock, false).await;
        // No slice yet: acquire renews on the spot (the smallest slice, 2).
        assert!(a.acquire("k").await.unwrap().is_allowed());
        assert_eq!(a.held("k"), 1);
        assert!(a.check("k").is_allowed());
        assert!(!a.check("k").is_allowed(), "spent: deny, never exceed");
        // A regular round sizes the slice to twice the demand (2 admitted,
        // 2 denied).
        a.sync_now().await.unwrap();
        assert_eq!(a.held("k"), 8);
        assert!(a.check("k").is_allowed());
        a.sync_now().await.unwrap();
        // A round with no traffic gives everything back.
        a.sync_now().await.unwrap();
        assert_eq!(a.held("k"), 0);
        assert_eq!(granted(&server, "k", 0), 3, "Redis holds only what a used");
        assert!(a.is_empty(), "the idle key is dropped");
        let stats = a.stats();
        assert_eq!(stats.granted - stats.returned, 3);
        // The rest of the budget is b's for the taking, and no more.
        let mut got = 0;
        while b.acquire("k").await.unwrap().is_allowed() {
            got += 1;
            assert!(got <= 97);
        }
        assert_eq!(got, 97);
        let denied = b.check("k");
        assert!(!denied.is_allowed());
        assert_eq!(
            denied.retry_after(),
            Duration::from_secs(3_600),
            "until the window ends"
        );
        assert!(!a.acquire("k").await.unwrap().is_allowed());
        assert_eq!(granted(&server, "k", 0), 100);
    });
}

#[test]
fn slices_die_with_their_window_and_the_next_is_prefetched() {
    runtime().block_on(async {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        let quota = Quota::per_minute(10).unwrap();
        let a = node(&server, quota, &clock, false).await;
        clock.set(1_000_000_000);
        assert!(a.acquire_n("k", 2).await.unwrap().is_allowed());
        a.sync_now().await.unwrap(); // demand 2 (+2 denied): slice of 8
        assert_eq!(a.held("k"), 8);
        // Window 1: window 0's units are worthless here.
        clock.set(60_000_000_000);
        assert_eq!(a.held("k"), 0);
        assert!(!a.check("k").is_allowed());
        assert!(a.acquire("k").await.unwrap().is_allowed());
        assert_eq!(granted(&server, "k", 0), 10, "window 0's slice died unused");
        assert!(granted(&server, "k", 1) >= 1);
        // Near the end of window 1 (within a tick and two round trips), a
        // busy key's round also fills the next window's slot.
        clock.set(119_999_000_000);
        assert!(a.check("k").is_allowed());
        a.sync_now().await.unwrap();
        assert!(granted(&server, "k", 2) > 0, "window 2 was prefetched");
        clock.set(120_000_000_000);
        assert!(
            a.check("k").is_allowed(),
            "window 2 starts with a slice in hand"
        );
    });
}

#[test]
fn outage_never_lets_a_node_exceed_what_it_holds() {
    runtime().block_on(async {
        let mut server = RedisServer::start();
        let clock = ManualClock::new();
        let quota = Quota::per_hour(100).unwrap();
        let a = node(&server, quota, &clock, false).await;
        assert!(a.acquire("k").await.unwrap().is_allowed());
        a.sync_now().await.unwrap();
        let held = a.held("k");
        assert_eq!(held, 4);
        server.kill();
        let started = Instant::now();
        let mut admitted = 0;
        for _ in 0..12 {
            admitted += u64::from(a.acquire("k").await.unwrap().is_allowed());
        }
        assert_eq!(admitted, held, "only what it held");
        assert!(a.sync_now().await.is_err());
        assert!(started.elapsed() < Duration::from_secs(20));
        assert!(a.stats().errors >= 1);
        server.restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !a.acquire("k").await.unwrap().is_allowed() {
            assert!(Instant::now() < deadline, "never renewed after the restart");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        a.shutdown().await.unwrap();
    });
}

/// A cost above the largest slice (a quarter of the limit by default) but
/// within the limit passes once the window's budget allows it: at 100 a
/// minute a fresh key used to admit cost 25 and never 26, 50 or 100; at
/// limit 3, cost 2 never, with a denial saying "retry after 1 ms". A cost
/// the window can no longer cover is told to wait for the next window.
#[test]
fn costs_above_the_largest_slice_pass_and_denials_say_when() {
    runtime().block_on(async {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        // 10 s into window 1000: 50 s left in it.
        clock.set(60_010_000_000_000);
        let build = |limit| {
            LeasedLimiter::builder(Quota::per_minute(limit).unwrap())
                .url(&server.url())
                .prefix("big")
                .clock(clock.clone())
                .background(false)
                .build()
        };
        let a = build(100).await.unwrap();
        for (key, cost) in [("k26", 26), ("k50", 50), ("k100", 100)] {
            let d = a.acquire_n(key, cost).await.unwrap();
            assert!(d.is_allowed(), "{key}: {d:?}");
        }
        assert!(a.acquire_n("k26", 50).await.unwrap().is_allowed());
        // 76 of 100 used: 25 is fine, 100 not before the next window.
        let d = a.acquire_n("k26", 100).await.unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), Duration::from_secs(50), "{d:?}");
        assert!(a.acquire_n("k26", 24).await.unwrap().is_allowed());

        let small = build(3).await.unwrap();
        let d = small.acquire_n("s", 2).await.unwrap();
        assert!(d.is_allowed(), "{d:?}");
        let d = small.acquire_n("s", 2).await.unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), Duration::from_secs(50), "{d:?}");
        assert!(small.acquire_n("s", 1).await.unwrap().is_allowed());
        // Without acquire: the first check asks, the next round grants.
        let d = small.check_n("t", 3).unwrap();
        assert!(!d.is_allowed());
        small.sync_now().await.unwrap();
        assert!(small.check_n("t", 3).unwrap().is_allowed());
    });
}
