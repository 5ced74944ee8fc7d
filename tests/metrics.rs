//! The metrics of `src/metrics.rs` through a recording recorder
//! (`metrics-util`'s `DebuggingRecorder`): allowed / denied / shadow-denied
//! per policy, live keys, and with feature `redis` the store-down decisions
//! by source and the Redis latency histogram, against a real
//! `redis-server` that is killed mid-run.

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use rategate::policy::TierId;
use rategate::policy::config::{PolicyFile, PolicyLimiter};

/// One snapshot (taking it drains the recorder's values).
type Snapshot = Vec<(CompositeKey, DebugValue)>;

fn snapshot(recorder: &DebuggingRecorder) -> Snapshot {
    let snapshot = recorder.snapshotter().snapshot().into_vec();
    snapshot.into_iter().map(|(k, _, _, v)| (k, v)).collect()
}

/// The value of metric `name` whose labels include `label`, if recorded.
fn value<'a>(snapshot: &'a Snapshot, name: &str, label: (&str, &str)) -> Option<&'a DebugValue> {
    snapshot.iter().find_map(|(key, value)| {
        let key = key.key();
        let labelled = key.labels().any(|l| (l.key(), l.value()) == label);
        (key.name() == name && labelled).then_some(value)
    })
}

fn counter(snapshot: &Snapshot, name: &str, label: (&str, &str)) -> u64 {
    match value(snapshot, name, label) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        Some(other) => panic!("{name} is not a counter: {other:?}"),
    }
}

/// The samples of the `rategate_redis_seconds` histogram.
#[cfg(feature = "redis")]
fn redis_latencies(snapshot: &Snapshot) -> Vec<f64> {
    snapshot
        .iter()
        .find_map(|(key, value)| match value {
            DebugValue::Histogram(v) if key.key().name() == "rategate_redis_seconds" => {
                Some(v.iter().map(|s| s.into_inner()).collect())
            }
            _ => None,
        })
        .expect("a latency histogram")
}

const FILE: &str = r#"
[policies.enforced]
quota = "3/h"

[policies.dry_run]
quota = "2/h"
shadow = true
"#;

#[test]
fn policy_counters_move_as_documented() {
    let recorder = DebuggingRecorder::new();
    let file = PolicyFile::from_toml(FILE).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let build = |name| {
        rt.block_on(PolicyLimiter::build(
            file.policy(name).unwrap(),
            Box::new(|_: &str| TierId::DEFAULT),
        ))
        .unwrap()
    };
    let (enforced, dry_run) = (build("enforced"), build("dry_run"));
    metrics::with_local_recorder(&recorder, || {
        for _ in 0..5 {
            enforced.try_check_n("a", 1).unwrap().unwrap();
        }
        enforced.try_check_n("b", 1).unwrap().unwrap();
        for _ in 0..5 {
            dry_run.try_check_n("a", 1).unwrap().unwrap();
        }
        enforced.record_live_keys();
    });
    let snapshotter = snapshot(&recorder);
    let policy = |p| ("policy", p);
    // enforced: a passes 3 of 5, b passes 1.
    assert_eq!(
        counter(&snapshotter, "rategate_allowed_total", policy("enforced")),
        4
    );
    assert_eq!(
        counter(&snapshotter, "rategate_denied_total", policy("enforced")),
        2
    );
    assert_eq!(
        counter(
            &snapshotter,
            "rategate_shadow_denied_total",
            policy("enforced")
        ),
        0
    );
    // dry_run: 2 pass, 3 would be denied but are admitted; none enforced.
    assert_eq!(
        counter(&snapshotter, "rategate_allowed_total", policy("dry_run")),
        2
    );
    assert_eq!(
        counter(&snapshotter, "rategate_denied_total", policy("dry_run")),
        0
    );
    assert_eq!(
        counter(
            &snapshotter,
            "rategate_shadow_denied_total",
            policy("dry_run")
        ),
        3
    );
    match value(&snapshotter, "rategate_live_keys", policy("enforced")) {
        Some(DebugValue::Gauge(keys)) => assert_eq!(keys.into_inner(), 2.0),
        other => panic!("live keys: {other:?}"),
    }
}

#[cfg(feature = "redis")]
#[test]
fn store_down_decisions_and_redis_latency_are_recorded() {
    use rategate::policy::StoreDown;
    use rategate::redis::{RedisLimiter, Source};
    use rategate::{Quota, TokenBucket};
    use std::time::Duration;

    let recorder = DebuggingRecorder::new();
    let mut server = redis_server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let build = |down| {
                RedisLimiter::<TokenBucket>::builder(Quota::per_hour(100).unwrap())
                    .url(&server.url())
                    .timeout(Duration::from_millis(100))
                    .store_down(down)
                    .local_cache(false)
                    .build()
            };
            let open = build(StoreDown::FailOpen).await.unwrap();
            let closed = build(StoreDown::FailClosed).await.unwrap();
            for _ in 0..3 {
                assert_eq!(open.check("k").await.unwrap().source(), Source::Redis);
            }
            server.kill();
            for _ in 0..2 {
                assert_eq!(open.check("k").await.unwrap().source(), Source::FailOpen);
            }
            assert_eq!(
                closed.check("k").await.unwrap().source(),
                Source::FailClosed
            );
        })
    });
    let snapshotter = snapshot(&recorder);
    let source = |s| ("source", s);
    assert_eq!(
        counter(
            &snapshotter,
            "rategate_store_down_total",
            source("fail_open")
        ),
        2
    );
    assert_eq!(
        counter(
            &snapshotter,
            "rategate_store_down_total",
            source("fail_closed")
        ),
        1
    );
    assert_eq!(
        counter(
            &snapshotter,
            "rategate_store_down_total",
            source("local_share")
        ),
        0
    );
    let latencies = redis_latencies(&snapshotter);
    // Every script call: 3 answered, 3 failed.
    assert_eq!(latencies.len(), 6);
    assert!(latencies.iter().all(|&s| (0.0..5.0).contains(&s)));
}

/// A synced limiter counts each check of a key whose last sync failed
/// (held to the local share) and records every sync round's latency; a
/// leased limiter counts a request denied because its renewal failed.
#[cfg(feature = "redis")]
#[test]
fn synced_and_leased_store_down_are_recorded() {
    use rategate::redis::{LeasedLimiter, SyncedLimiter};
    use rategate::{Quota, TokenBucket};
    use std::time::Duration;

    let recorder = DebuggingRecorder::new();
    let mut server = redis_server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let quota = Quota::per_hour(100).unwrap();
            let synced = SyncedLimiter::<TokenBucket>::builder(quota)
                .url(&server.url())
                .timeout(Duration::from_millis(100))
                .local_share(0.5)
                .background(false)
                .build()
                .await
                .unwrap();
            let leased = LeasedLimiter::builder(quota)
                .url(&server.url())
                .timeout(Duration::from_millis(100))
                .background(false)
                .build()
                .await
                .unwrap();
            assert!(synced.check("k").is_allowed());
            assert!(synced.sync_now().await.is_ok());
            assert!(leased.acquire("k").await.unwrap().is_allowed());
            // Heard from Redis: not a store-down decision.
            assert!(synced.check("k").is_allowed());
            server.kill();
            assert!(synced.sync_now().await.is_err());
            for _ in 0..3 {
                assert!(synced.check("k").is_allowed());
            }
            // A key first seen during the outage is held to the share too.
            assert!(synced.check("fresh").is_allowed());
            // A key with no slice on this node cannot renew: denied.
            assert!(!leased.acquire("fresh").await.unwrap().is_allowed());
        })
    });
    let snapshot = snapshot(&recorder);
    let source = |s| ("source", s);
    let down = |s| counter(&snapshot, "rategate_store_down_total", source(s));
    assert_eq!(down("local_share"), 4);
    assert_eq!(down("lease_unrenewed"), 1);
    let rounds = redis_latencies(&snapshot).len();
    // Two sync rounds (one answered, one failed) and the leased limiter's
    // two renewals (one answered, one failed).
    assert_eq!(rounds, 4);
}
