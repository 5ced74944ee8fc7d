//! Redis Sentinel (feature `redis`): real `redis-server` and
//! `redis-sentinel` processes on loopback ports (one master, two replicas,
//! three sentinels). Every Redis limiter through the sentinels; decisions
//! that follow a failover, asked for and after a `kill -9`; leases that
//! keep their bound across a failover that loses writes; a policy file.

#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/redis_topology.rs"]
mod redis_topology;

use rategate::redis::{LeasedLimiter, RedisError, RedisLimiter, Sentinel, Source, SyncedLimiter};
use rategate::{FixedWindow, ManualClock, Quota, TokenBucket};
use redis_server::runtime;
use redis_topology::SentinelSetup;
use std::time::{Duration, Instant};

fn sentinel(setup: &SentinelSetup) -> Sentinel {
    Sentinel::new(setup.master_name(), &setup.sentinel_urls())
}

async fn redis_limiter(
    setup: &SentinelSetup,
    prefix: &str,
    batching: bool,
) -> RedisLimiter<FixedWindow> {
    RedisLimiter::<FixedWindow>::builder(Quota::per_hour(1_000).unwrap())
        .sentinel(sentinel(setup))
        .prefix(prefix)
        .batching(batching)
        .local_cache(false)
        .timeout(Duration::from_millis(300))
        .store_down(rategate::policy::StoreDown::FailClosed)
        .build()
        .await
        .unwrap()
}

/// Waits until the node on `port` answers `ROLE` as a replica: from then
/// on a write there fails with READONLY, so a decision made by Redis was
/// made on the new master.
fn wait_demoted(setup: &SentinelSetup, port: u16) {
    let node = setup.nodes().iter().find(|n| n.port() == port).unwrap();
    let start = Instant::now();
    while node.role().as_deref() != Some("slave") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the old master was not turned into a replica"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks `key` until Redis decides again, at most `limit`; the time it
/// took.
async fn until_redis_decides(
    limiter: &RedisLimiter<FixedWindow>,
    key: &str,
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if limiter.check(key).await.unwrap().source() == Source::Redis {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Every limiter finds the master through the sentinels, and its keys are
/// on the master.
#[test]
fn every_limiter_through_sentinel() {
    let setup = SentinelSetup::start();
    let master = setup.master_port().unwrap();
    runtime().block_on(async {
        for batching in [true, false] {
            let limiter = redis_limiter(&setup, &format!("s{batching}"), batching).await;
            let decided = limiter.check("k").await.unwrap();
            assert_eq!(decided.source(), Source::Redis);
            assert!(decided.is_allowed());
        }
        let clock = ManualClock::new();
        let synced = SyncedLimiter::<TokenBucket>::builder(Quota::per_hour(5).unwrap())
            .sentinel(sentinel(&setup))
            .prefix("synced")
            .clock(clock.clone())
            .background(false)
            .build()
            .await
            .unwrap();
        assert!(synced.check("k").is_allowed());
        synced.sync_now().await.unwrap();
        let leased = LeasedLimiter::builder(Quota::per_hour(5).unwrap())
            .sentinel(sentinel(&setup))
            .prefix("leased")
            .clock(clock)
            .background(false)
            .wait_for_replicas(2)
            .build()
            .await
            .unwrap();
        assert!(leased.acquire("k").await.unwrap().is_allowed());
    });
    let master = setup.nodes().iter().find(|n| n.port() == master).unwrap();
    let keys = master.cli(&["KEYS", "*"]).unwrap_or_default();
    for prefix in ["strue:", "sfalse:", "synced:", "leased:"] {
        assert!(keys.contains(prefix), "{prefix} not on the master: {keys}");
    }
}

/// A master name the sentinels do not know, and sentinels that do not
/// answer: typed errors that say so.
#[test]
fn a_master_that_cannot_be_found_is_an_error() {
    let setup = SentinelSetup::start();
    runtime().block_on(async {
        let e = RedisLimiter::<FixedWindow>::builder(Quota::per_hour(10).unwrap())
            .sentinel(Sentinel::new("nosuchmaster", &setup.sentinel_urls()))
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(&e, RedisError::Sentinel(m) if m.contains("nosuchmaster")),
            "{e}"
        );
        let closed = format!("redis://127.0.0.1:{}/", redis_server::free_port());
        let e = RedisLimiter::<FixedWindow>::builder(Quota::per_hour(10).unwrap())
            .sentinel(Sentinel::new("mymaster", &[closed]))
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, RedisError::Sentinel(_)), "{e}");
        let e = RedisLimiter::<FixedWindow>::builder(Quota::per_hour(10).unwrap())
            .sentinel(Sentinel::new("mymaster", &[] as &[&str]))
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, RedisError::Config(_)), "{e}");
    });
}

/// A failover asked of the sentinels, then a `kill -9` of the new master:
/// both the batched and the lone path decide on Redis again within
/// seconds, on the node that is master now, and the counts written before
/// a graceful failover are kept.
#[test]
fn decisions_follow_a_failover() {
    let mut setup = SentinelSetup::start();
    runtime().block_on(async {
        let batched = redis_limiter(&setup, "fb", true).await;
        let lone = redis_limiter(&setup, "fl", false).await;
        for _ in 0..3 {
            assert!(batched.check("k").await.unwrap().is_allowed());
            assert!(lone.check("k").await.unwrap().is_allowed());
        }
        assert!(setup.wait_replicas_in_sync(Duration::from_secs(10)));
        let first = setup.master_port().unwrap();
        setup.failover();
        let second = setup
            .wait_for_master_change(first, Duration::from_secs(20))
            .expect("a new master");
        wait_demoted(&setup, first);
        for limiter in [&batched, &lone] {
            let took = until_redis_decides(limiter, "k", Duration::from_secs(10)).await;
            assert!(took.is_some(), "no Redis decision after the failover");
            // Three before, one to find Redis again, one now: 995 left.
            // A call that timed out may still have run (one less); one
            // written to the old master in the moment before it stepped
            // down is lost with it (one more). A fresh master says 999.
            let decided = limiter.check("k").await.unwrap();
            assert_eq!(decided.source(), Source::Redis);
            let remaining = decided.decision().remaining();
            assert!(
                (990..=996).contains(&remaining),
                "{remaining}: the count did not move with the failover"
            );
        }
        // A crash of the new master: the sentinels agree it is down after
        // 1 s and promote a replica, once 8 s have passed since the last
        // failover began (twice the failover timeout).
        setup.node(second).kill9();
        let third = setup
            .wait_for_master_change(second, Duration::from_secs(30))
            .expect("a master after the crash");
        assert_ne!(third, second);
        for limiter in [&batched, &lone] {
            let took = until_redis_decides(limiter, "k", Duration::from_secs(10)).await;
            assert!(took.is_some(), "no Redis decision after the crash");
        }
    });
}

/// Replication is asynchronous: writes a master acknowledged and its
/// replicas never got are lost when a replica is promoted. The replicas
/// are stopped (`SIGSTOP`) while a node leases a slice, the master is
/// killed, the replicas resumed and one promoted: without
/// `wait_for_replicas` the node admits on the lost grant and the new
/// master grants the same units again, so the two nodes together admit
/// more than the limit; with it the grant was never used and the bound
/// holds. One replica is enough: Sentinel promotes the replica with the
/// most data, which holds every write any replica acknowledged.
#[test]
fn leases_keep_their_bound_across_a_failover_with_wait_for_replicas() {
    for wait in [false, true] {
        let admitted = lease_across_a_lossy_failover(wait);
        if wait {
            assert!(admitted <= 100, "{admitted} admitted of 100 with WAIT");
        } else {
            assert!(admitted > 100, "{admitted}: the lost grant was not used");
        }
    }
}

/// Two nodes sharing 100 per hour on one key; the units admitted by both,
/// one node before the failover, both after.
fn lease_across_a_lossy_failover(wait: bool) -> usize {
    let mut setup = SentinelSetup::start();
    let replicas: Vec<u16> = {
        let master = setup.master_port().unwrap();
        setup
            .nodes()
            .iter()
            .map(|n| n.port())
            .filter(|p| *p != master)
            .collect()
    };
    runtime().block_on(async {
        let clock = ManualClock::new();
        let node = || {
            LeasedLimiter::builder(Quota::per_hour(100).unwrap())
                .sentinel(sentinel(&setup))
                .prefix("lossy")
                .clock(clock.clone())
                .background(false)
                .timeout(Duration::from_millis(400))
                .max_slice(100)
                .min_slice(100)
                .wait_for_replicas(u32::from(wait))
                .build()
        };
        let a = node().await.unwrap();
        let b = node().await.unwrap();
        let master = setup.master_port().unwrap();
        // The replicas stop, and the master drops their links: what it
        // writes from now on reaches no replica (a stopped process still
        // receives into its socket, so the link itself must go).
        for &port in &replicas {
            setup.node(port).stop();
        }
        setup
            .node(master)
            .cli(&["CLIENT", "KILL", "TYPE", "replica"])
            .expect("the master drops its replicas");
        // The whole budget goes to `a`; with WAIT the grant is refused
        // for want of replicas, and `a` admits nothing on it.
        let mut admitted = usize::from(a.acquire("k").await.is_ok_and(|d| d.is_allowed()));
        let _ = a.sync_now().await;
        admitted += (0..200).filter(|_| a.check("k").is_allowed()).count();
        let before = admitted;
        setup.node(master).kill9();
        for &port in &replicas {
            setup.node(port).cont();
        }
        setup
            .wait_for_master_change(master, Duration::from_secs(30))
            .expect("a replica promoted");
        // `b` leases from the new master, which never saw `a`'s grant.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if b.acquire("k").await.is_ok_and(|d| d.is_allowed()) {
                admitted += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for _ in 0..3 {
            let _ = b.sync_now().await;
            let _ = a.sync_now().await;
        }
        let after = (0..200).filter(|_| b.check("k").is_allowed()).count()
            + (0..200).filter(|_| a.check("k").is_allowed()).count();
        // The new master grants: limiting goes on after the failover.
        assert!(
            admitted + after > before,
            "nothing admitted after the failover"
        );
        admitted += after;
        admitted
    })
}

/// A policy file names the sentinels and the master.
#[cfg(feature = "serde")]
#[test]
fn policy_file_through_sentinel() {
    use rategate::policy::TierId;
    use rategate::policy::config::{PolicyFile, PolicyLimiter};
    let setup = SentinelSetup::start();
    let sentinels: Vec<String> = setup
        .sentinel_urls()
        .iter()
        .map(|u| format!("{u:?}"))
        .collect();
    let file = PolicyFile::from_toml(&format!(
        r#"
        [policies.central]
        quota = "2/h"
        backend = {{ kind = "redis", sentinels = [{s}], master = "{m}" }}

        [policies.leased]
        quota = "2/h"
        backend = {{ kind = "leased", sentinels = [{s}], master = "{m}", wait_for_replicas = 2 }}

        [policies.too_many]
        quota = "2/h"
        backend = {{ kind = "leased", sentinels = [{s}], master = "{m}", wait_for_replicas = 3 }}
        "#,
        s = sentinels.join(", "),
        m = setup.master_name()
    ))
    .unwrap();
    runtime().block_on(async {
        let limiter = PolicyLimiter::build(
            file.policy("central").unwrap(),
            Box::new(|_: &str| TierId::DEFAULT),
        )
        .await
        .unwrap();
        // A master name the sentinels do not know names the field.
        let mut unknown = file.policy("central").unwrap().clone();
        if let rategate::policy::config::Store::Redis { connection, .. } = &mut unknown.backend {
            connection.server = rategate::policy::config::RedisServer::Sentinel {
                master: "nosuchmaster".into(),
                sentinels: setup.sentinel_urls(),
                username: None,
                password: None,
                db: 0,
            };
        }
        let e = PolicyLimiter::build(&unknown, Box::new(|_: &str| TierId::DEFAULT))
            .await
            .unwrap_err();
        assert_eq!(e.field_name(), Some("backend.master"), "{e}");
        let admitted = [
            limiter.check_n("k", 1).await.unwrap().admit(),
            limiter.check_n("k", 1).await.unwrap().admit(),
            limiter.check_n("k", 1).await.unwrap().admit(),
        ];
        assert_eq!(admitted, [true, true, false]);
        // Leases that wait for both replicas: granted and used.
        let leased = PolicyLimiter::build(
            file.policy("leased").unwrap(),
            Box::new(|_: &str| TierId::DEFAULT),
        )
        .await
        .unwrap();
        // The first check waits for a slice (a round that waits for both
        // replicas).
        assert!(leased.check_n("k", 1).await.unwrap().admit());
        // Three replicas of a master that has two: refused, by name.
        let e = PolicyLimiter::build(
            file.policy("too_many").unwrap(),
            Box::new(|_: &str| TierId::DEFAULT),
        )
        .await
        .unwrap_err();
        assert_eq!(e.field_name(), Some("backend.wait_for_replicas"), "{e}");
    });
}

/// A replica given as a plain `url()` is refused at build (it would
/// answer every decision with READONLY), and `wait_for_replicas` above
/// the replicas the master has is refused too (it would grant nothing).
#[test]
fn a_replica_or_missing_replicas_are_refused_at_build() {
    let setup = SentinelSetup::start();
    let master = setup.master_port().unwrap();
    let replica = setup
        .nodes()
        .iter()
        .find(|n| n.port() != master)
        .unwrap()
        .url();
    runtime().block_on(async {
        for batching in [true, false] {
            let e = RedisLimiter::<FixedWindow>::builder(Quota::per_hour(10).unwrap())
                .url(&replica)
                .batching(batching)
                .build()
                .await
                .unwrap_err();
            assert!(
                matches!(e, RedisError::Config(m) if m.contains("replica")),
                "{e}"
            );
        }
        let e = LeasedLimiter::builder(Quota::per_hour(10).unwrap())
            .sentinel(sentinel(&setup))
            .wait_for_replicas(3)
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(e, RedisError::Config(m) if m.contains("replicas")),
            "{e}"
        );
        LeasedLimiter::builder(Quota::per_hour(10).unwrap())
            .sentinel(sentinel(&setup))
            .wait_for_replicas(2)
            .build()
            .await
            .unwrap();
    });
}

/// A search for the master still running when its runtime shuts down
/// (a limiter built on one runtime, used on another) does not leave the
/// limiter unable to search again: it follows the next failover.
#[test]
fn a_search_cut_short_by_its_runtime_does_not_stop_the_next() {
    let mut setup = SentinelSetup::start();
    let first = runtime();
    let limiter = first.block_on(redis_limiter(&setup, "rt", false));
    // The first sentinel hangs: the search it starts takes the timeout
    // (300 ms) there before asking the next. The master hangs too, for
    // less than the sentinels take to call it down (1 s).
    let master = setup.master_port().unwrap();
    setup.sentinels_mut()[0].stop();
    setup.node(master).stop();
    first.block_on(async {
        // Dropped before its reply: connection trouble, a search starts.
        let _ = tokio::time::timeout(Duration::from_millis(100), limiter.check("k")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    });
    drop(first);
    setup.node(master).cont();
    setup.sentinels_mut()[0].cont();
    setup.failover();
    setup
        .wait_for_master_change(master, Duration::from_secs(20))
        .expect("a new master");
    wait_demoted(&setup, master);
    runtime().block_on(async {
        let took = until_redis_decides(&limiter, "k", Duration::from_secs(10)).await;
        assert!(took.is_some(), "the limiter no longer follows the master");
    });
}
