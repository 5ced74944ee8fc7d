//! What a slow, demoted or misconfigured Redis must not cause: a new
//! connection per call on the batching socket (callers that give up
//! early, a master turned replica, a rotated password), a leased
//! `acquire` that waits for round after round, or lease rounds whose
//! unusable grants spend the window's budget.

#![cfg(feature = "redis")]

#[path = "support/delay_proxy.rs"]
mod delay_proxy;
#[path = "support/redis_server.rs"]
mod redis_server;

use rategate::policy::StoreDown;
use rategate::redis::{LeasedLimiter, RedisLimiter, Source};
use rategate::{FixedWindow, Quota};
use redis_server::{RedisServer, runtime};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections the server has accepted so far.
fn accepted(server: &RedisServer, auth: &[&str]) -> u64 {
    let mut args = auth.to_vec();
    args.extend(["INFO", "stats"]);
    server
        .cli(&args)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("total_connections_received:"))
        .unwrap()
        .parse()
        .unwrap()
}

/// Sends `sig` (`-STOP`, `-CONT`) to the process `pid`.
fn signal(sig: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

fn pid(server: &RedisServer) -> String {
    server
        .cli(&["INFO", "server"])
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("process_id:").map(str::to_owned))
        .unwrap()
}

async fn batching_limiter(url: &str, prefix: &str) -> RedisLimiter<FixedWindow> {
    RedisLimiter::<FixedWindow>::builder(Quota::per_hour(1_000_000).unwrap())
        .url(url)
        .prefix(prefix)
        .local_cache(false)
        .timeout(Duration::from_millis(300))
        .store_down(StoreDown::FailClosed)
        .build()
        .await
        .unwrap()
}

/// Callers that give up before a slow Redis answers: the replies they
/// leave owed are read and dropped by the next caller, on the same socket.
#[test]
fn callers_that_give_up_keep_the_socket() {
    let server = RedisServer::start();
    let proxy = delay_proxy::DelayProxy::start(server.port);
    runtime().block_on(async {
        let limiter = batching_limiter(&proxy.url(), "slow").await;
        proxy.set_delay(Duration::from_millis(20));
        let before = accepted(&server, &[]);
        let start = Instant::now();
        let mut dropped = 0;
        while start.elapsed() < Duration::from_secs(1) {
            let check = limiter.check("k");
            if tokio::time::timeout(Duration::from_millis(5), check)
                .await
                .is_err()
            {
                dropped += 1;
            }
        }
        let opened = accepted(&server, &[]) - before;
        assert!(dropped > 50, "only {dropped} calls given up");
        assert!(
            opened <= 5,
            "{opened} connections for {dropped} calls given up"
        );
        proxy.set_delay(Duration::ZERO);
        assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
    });
}

/// A master turned replica, with no Sentinel to name another: every
/// socket answers `READONLY`, and new ones are opened after a backoff, not
/// one per call.
#[test]
fn a_demoted_master_is_not_hammered() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    runtime().block_on(async {
        let limiter = batching_limiter(&a.url(), "ro").await;
        assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
        a.cli(&["REPLICAOF", "127.0.0.1", &b.port.to_string()]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = accepted(&a, &[]);
        let start = Instant::now();
        let mut checks = 0;
        while start.elapsed() < Duration::from_secs(2) {
            let _ = limiter.check("k").await;
            checks += 1;
        }
        let opened = accepted(&a, &[]) - before;
        assert!(opened <= 30, "{opened} connections for {checks} checks");
        // Promoted back: decided by Redis again.
        a.cli(&["REPLICAOF", "NO", "ONE"]);
        let start = Instant::now();
        while limiter.check("k").await.unwrap().source() != Source::Redis {
            assert!(start.elapsed() < Duration::from_secs(3), "not back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// A password rotated after build: `AUTH` fails on every new socket, which
/// counts as a failed open (backoff), not as a socket that worked.
#[test]
fn a_rotated_password_is_not_hammered() {
    let server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "requirepass", "old"]);
    runtime().block_on(async {
        let url = format!("redis://:old@127.0.0.1:{}/", server.port);
        let limiter = batching_limiter(&url, "pw").await;
        assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
        server.cli(&["-a", "old", "CONFIG", "SET", "requirepass", "new"]);
        server.cli(&["-a", "new", "CLIENT", "KILL", "TYPE", "normal"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = accepted(&server, &["-a", "new"]);
        let start = Instant::now();
        let mut checks = 0;
        while start.elapsed() < Duration::from_secs(2) {
            let _ = limiter.check("k").await;
            checks += 1;
        }
        let opened = accepted(&server, &["-a", "new"]) - before;
        assert!(opened <= 30, "{opened} connections for {checks} checks");
    });
}

/// Concurrent `acquire`s on a hung master share one round: none waits
/// much past one timeout.
#[test]
fn leased_acquires_share_a_round() {
    let server = RedisServer::start();
    let pid = pid(&server);
    runtime().block_on(async {
        let limiter = Arc::new(
            LeasedLimiter::builder(Quota::per_hour(100_000).unwrap())
                .url(&server.url())
                .prefix("hung")
                .timeout(Duration::from_millis(300))
                .build()
                .await
                .unwrap(),
        );
        signal("-STOP", &pid);
        let mut tasks = Vec::new();
        for i in 0..32 {
            let l = Arc::clone(&limiter);
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                let _ = l.acquire(&format!("key{i}")).await;
                t.elapsed()
            }));
        }
        let mut worst = Duration::ZERO;
        for task in tasks {
            worst = worst.max(task.await.unwrap());
        }
        signal("-CONT", &pid);
        assert!(
            worst < Duration::from_millis(800),
            "an acquire waited {worst:?} (timeout 300 ms)"
        );
    });
}

/// A replica that stalls: rounds fail `NotReplicated`, their grants are
/// given back, and the rounds back off; the window's budget is still
/// there when the replica is back.
#[test]
fn a_stalled_replica_does_not_spend_the_budget() {
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let start = Instant::now();
    while !master
        .cli(&["INFO", "replication"])
        .unwrap()
        .contains("state=online")
    {
        assert!(start.elapsed() < Duration::from_secs(10), "no replica");
        std::thread::sleep(Duration::from_millis(50));
    }
    let replica_pid = pid(&replica);
    runtime().block_on(async {
        let limiter = Arc::new(
            LeasedLimiter::builder(Quota::per_hour(1000).unwrap())
                .url(&master.url())
                .prefix("stall")
                .timeout(Duration::from_millis(200))
                .wait_for_replicas(1)
                .build()
                .await
                .unwrap(),
        );
        signal("-STOP", &replica_pid);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let l = Arc::clone(&limiter);
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < Duration::from_secs(3) {
                    let _ = l.acquire("k").await;
                    tokio::task::yield_now().await;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        signal("-CONT", &replica_pid);
        let counted: u64 = limiter
            .redis_keys("k")
            .iter()
            .filter_map(|k| master.cli(&["GET", k]))
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum();
        assert!(
            counted <= 100,
            "{counted} of 1000 units spent on unusable grants"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut allowed = 0;
        for _ in 0..50 {
            allowed += usize::from(limiter.acquire("k").await.unwrap().is_allowed());
        }
        assert_eq!(allowed, 50, "the budget is back with the replica");
    });
}
