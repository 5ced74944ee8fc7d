//! Policy files (feature `serde`): quotas and algorithm names as strings,
//! a file that loads into working limiters on each backend (the Redis ones
//! against a real `redis-server`, with feature `redis`), and bad files
//! whose errors name the policy and the field.

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

use rategate::policy::TierId;
use rategate::policy::config::{
    DEFAULT_MAX_KEYS, DEFAULT_SWEEP_INTERVAL, KeyKind, PolicyFile, PolicyLimiter, Store,
    TierLimiters,
};
use rategate::{AlgorithmKind, ManualClock, Quota};
use std::time::Duration;

const FILE: &str = r#"
[policies.api]
algorithm = "sliding_window_counter"
quota = "60/h"
key = "header:X-Api-Key"
backend = { kind = "memory", max_keys = 1000 }

[policies.api.tiers]
signed_in = "5000/h"
partner = "10000/h burst=500"

[policies.api.overrides]
"acme" = "partner"

[policies.login]
algorithm = "leaky-bucket"
quota = "1r/s burst=2 nodelay"
key = "ip"
shadow = true
"#;

#[test]
fn quotas_and_algorithms_serialise_as_the_strings_users_write() {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Row {
        quota: Quota,
        algorithm: AlgorithmKind,
    }
    let row: Row = toml::from_str("quota = \"100/m burst=20\"\nalgorithm = \"gcra\"").unwrap();
    assert_eq!(row.quota, "100/m burst=20".parse().unwrap());
    assert_eq!(row.algorithm, AlgorithmKind::TokenBucket);
    let text = toml::to_string(&row).unwrap();
    assert_eq!(
        text,
        "quota = \"100/1m burst=20\"\nalgorithm = \"token_bucket\"\n"
    );
    assert_eq!(toml::from_str::<Row>(&text).unwrap(), row);
    let bad = toml::from_str::<Row>("quota = \"100/m burst=0\"\nalgorithm = \"gcra\"").unwrap_err();
    assert!(bad.to_string().contains("burst"), "{bad}");
    let bad = toml::from_str::<Row>("quota = \"1/s\"\nalgorithm = \"buckets\"").unwrap_err();
    assert!(bad.to_string().contains("\"buckets\""), "{bad}");
}

#[test]
fn a_file_loads_with_every_field() {
    let file = PolicyFile::from_toml(FILE).unwrap();
    let names: Vec<_> = file.policies().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["api", "login"]);
    let api = file.policy("api").unwrap();
    assert_eq!(api.algorithm, AlgorithmKind::SlidingWindowCounter);
    assert_eq!(api.key, KeyKind::Header("x-api-key".into()));
    let tiers: Vec<_> = api
        .tiers
        .iter()
        .map(|(n, q)| (n.as_str(), q.to_string()))
        .collect();
    assert_eq!(
        tiers,
        [
            ("default", "60/1h".into()),
            ("partner", "10000/1h burst=500".into()),
            ("signed_in", "5000/1h".into())
        ]
    );
    assert_eq!(api.overrides, [("acme".to_string(), 1)]);
    assert_eq!(
        api.backend,
        Store::Memory {
            max_keys: Some(1000),
            sweep_interval: None,
        }
    );
    assert!(!api.shadow);
    let login = file.policy("login").unwrap();
    assert_eq!(
        (login.algorithm, &login.key, login.shadow),
        (AlgorithmKind::LeakyBucket, &KeyKind::Ip, true)
    );
    assert_eq!(
        login.backend,
        Store::Memory {
            max_keys: None,
            sweep_interval: None
        }
    );
}

#[test]
fn a_memory_policy_builds_working_tiers() {
    let file = PolicyFile::from_toml(FILE).unwrap();
    let api = file.policy("api").unwrap();
    let clock = ManualClock::new();
    let signed_in = api
        .tiers
        .iter()
        .position(|(n, _)| n == "signed_in")
        .unwrap();
    let tiers = api
        .memory_tiers(
            clock.clone(),
            Box::new(move |key: &str| {
                if key.starts_with("user:") {
                    TierId::new(signed_in)
                } else {
                    TierId::DEFAULT
                }
            }),
        )
        .unwrap();
    let passed = |key: &str, n| (0..n).filter(|_| tiers.check(key).is_allowed()).count();
    assert_eq!(passed("anon", 100), 60);
    assert_eq!(passed("user:1", 6000), 5000);
    // The override: acme is a partner (the sliding window counter's limit
    // is the quota's 10,000; it has no separate burst).
    assert_eq!(tiers.check("acme").limit(), 10_000);
    // The sliding window counter: one window on, the previous hour's 60
    // still weigh fully; two windows on, they are gone.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(passed("anon", 100), 0);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(passed("anon", 100), 60);
}

#[test]
fn shadow_mode_admits_what_it_would_deny() {
    let file = PolicyFile::from_toml(FILE).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let login = rt
        .block_on(PolicyLimiter::build(
            file.policy("login").unwrap(),
            Box::new(|_: &str| TierId::DEFAULT),
        ))
        .unwrap();
    assert_eq!(
        (login.name(), login.key_kind(), login.shadow()),
        ("login", &KeyKind::Ip, true)
    );
    let decisions: Vec<_> = (0..5)
        .map(|_| rt.block_on(login.check_n("10.1.1.1", 1)).unwrap())
        .collect();
    // burst=2 nodelay: three pass at once, then the limit denies, shadow admits.
    assert_eq!(
        decisions
            .iter()
            .filter(|d| d.decision().is_allowed())
            .count(),
        3
    );
    assert!(decisions.iter().all(|d| d.admit()));
    assert_eq!(decisions.iter().filter(|d| d.shadow_denied()).count(), 2);
    assert_eq!(login.record_live_keys(), 1);
}

/// Each bad file and the (policy, field) its error must name.
#[test]
fn bad_files_name_the_policy_and_the_field() {
    let cases: &[(&str, Option<&str>, Option<&str>, &str)] = &[
        (
            "[policies.a]\nquota = \"10/s\"\nquota2 = 1",
            Some("a"),
            Some("quota2"),
            "unknown field",
        ),
        (
            "[policies.a]\nkey = \"ip\"",
            Some("a"),
            Some("quota"),
            "missing",
        ),
        (
            "[policies.a]\nquota = \"10 per second\"",
            Some("a"),
            Some("quota"),
            "invalid quota",
        ),
        (
            "[policies.a]\nquota = 10",
            Some("a"),
            Some("quota"),
            "must be a string",
        ),
        (
            "[policies.a]\nquota = \"10/s\"\nalgorithm = \"sliding_window\"",
            Some("a"),
            Some("algorithm"),
            "\"sliding_window\"",
        ),
        (
            "[policies.a]\nquota = \"1/2h\"\nalgorithm = \"leaky_bucket\"",
            Some("a"),
            Some("quota"),
            "leaky_bucket",
        ),
        (
            "[policies.b]\nquota = \"10/s\"\n[policies.b.tiers]\ngold = \"x\"",
            Some("b"),
            Some("tiers.gold"),
            "invalid quota",
        ),
        (
            "[policies.b]\nquota = \"10/s\"\n[policies.b.overrides]\nk = \"gold\"",
            Some("b"),
            Some("overrides.k"),
            "default",
        ),
        (
            "[policies.c]\nquota = \"10/s\"\nshadow = \"yes\"",
            Some("c"),
            Some("shadow"),
            "true or false",
        ),
        (
            "[policies.c]\nquota = \"10/s\"\nkey = \"header:\"",
            Some("c"),
            Some("key"),
            "header",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = \"mongodb\"",
            Some("d"),
            Some("backend"),
            "mongodb",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\" }",
            Some("d"),
            Some("backend.url"),
            "missing",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"redis://x\", store_down = \"maybe\" }",
            Some("d"),
            Some("backend.store_down"),
            "maybe",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"redis://x\", store_down = \"local_share\" }",
            Some("d"),
            Some("backend.share"),
            "share",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"synced\", url = \"redis://x\", share = 1.5 }",
            Some("d"),
            Some("backend.share"),
            "0 < share",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nalgorithm = \"leaky_bucket\"\nbackend = { kind = \"synced\", url = \"redis://x\" }",
            Some("d"),
            Some("algorithm"),
            "cannot be synced",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"redis://x\", cluster = [\"redis://y\"] }",
            Some("d"),
            Some("backend.url"),
            "not several",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"leased\", cluster = [] }",
            Some("d"),
            Some("backend.cluster"),
            "list of strings",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"synced\", sentinels = [\"redis://s:26379\"] }",
            Some("d"),
            Some("backend.master"),
            "master's name",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"redis://x\", master = \"m\" }",
            Some("d"),
            Some("backend.master"),
            "only a Sentinel",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"rediss://x\", tls_cert = \"c.pem\" }",
            Some("d"),
            Some("backend.tls_key"),
            "needs its key",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"\" }",
            Some("d"),
            Some("backend.url"),
            "must not be empty",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", sentinels = [\"\"], master = \"m\" }",
            Some("d"),
            Some("backend.sentinels"),
            "empty URL",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", sentinels = [\"redis://s\"], master = \"m\", master_username = \"u\" }",
            Some("d"),
            Some("backend.master_password"),
            "needs its password",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", sentinels = [\"redis://s\"], master = \"m\", master_password = \"\" }",
            Some("d"),
            Some("backend.master_password"),
            "must not be empty",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"rediss://x\", tls_ca = \"\" }",
            Some("d"),
            Some("backend.tls_ca"),
            "must not be empty",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"memory\", url = \"redis://x\" }",
            Some("d"),
            Some("backend.url"),
            "not a field of a memory backend",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"memory\", max_keys = -1 }",
            Some("d"),
            Some("backend.max_keys"),
            "whole number",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"memory\", max_keys = 0 }",
            Some("d"),
            Some("backend.max_keys"),
            "at least 1",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"memory\", max_keys = 4294967296 }",
            Some("d"),
            Some("backend.max_keys"),
            "at most 4294967295",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"memory\", sweep_interval_ms = 0 }",
            Some("d"),
            Some("backend.sweep_interval_ms"),
            "at least 1 ms",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"memory\", sweep_interval_ms = 9223372036854775807 }",
            Some("d"),
            Some("backend.sweep_interval_ms"),
            "at most 86400000 (a day)",
        ),
        (
            "[policies.c]\nquota = \"10/s\"\nkey = \"header:Authorization\"",
            Some("c"),
            Some("key"),
            "key = \"bearer\"",
        ),
        (
            "[policies.c]\nquota = \"10/s\"\nkey = \"\"",
            Some("c"),
            Some("key"),
            "\"bearer\"",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"leased\", url = \"redis://x\", interval_ms = 0 }",
            Some("d"),
            Some("backend.interval_ms"),
            "at least 1 ms",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"leased\", url = \"redis://x\", wait_for_replicas = -1 }",
            Some("d"),
            Some("backend.wait_for_replicas"),
            "at least 0",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"leased\", url = \"redis://x\", wait_for_replicas = 4294967296 }",
            Some("d"),
            Some("backend.wait_for_replicas"),
            "not a replica count",
        ),
        (
            "[policies.d]\nquota = \"10/s\"\nbackend = { kind = \"redis\", url = \"redis://x\", wait_for_replicas = 1 }",
            Some("d"),
            Some("backend.wait_for_replicas"),
            "",
        ),
        ("[policies]\ne = 3", Some("e"), Some(""), "table"),
        (
            "[limits.a]\nquota = \"10/s\"",
            None,
            None,
            "unknown top-level field",
        ),
        ("[policies.a\nquota = \"10/s\"", None, None, ""),
    ];
    for &(text, policy, field, message) in cases {
        let err = PolicyFile::from_toml(text).expect_err(text);
        assert_eq!(
            (err.policy(), err.field_name()),
            (policy, field),
            "{text}\n{err}"
        );
        assert!(err.to_string().contains(message), "{text}\n{err}");
        if let Some(policy) = policy {
            assert!(
                err.to_string().contains(&format!("policy {policy:?}")),
                "{err}"
            );
        }
    }
}

/// The README's policy-file example: a header key and no backend line.
const README_EXAMPLE: &str = r#"
[policies.api]
algorithm = "sliding_window_counter"
quota = "100/m burst=20"
key = "header:x-api-key"

[policies.api.tiers]
signed_in = "5000/h"

[policies.api.overrides]
"partner-key" = "signed_in"
"#;

fn build(policy: &rategate::policy::config::Policy) -> PolicyLimiter {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(PolicyLimiter::build(
        policy,
        Box::new(|_: &str| TierId::DEFAULT),
    ))
    .unwrap()
}

/// Each tier's key cap, through the built limiter.
fn caps(limiter: &PolicyLimiter) -> Vec<Option<usize>> {
    let TierLimiters::Memory(tiers) = limiter.limiters() else {
        panic!("a memory policy");
    };
    tiers
        .tiers()
        .iter()
        .map(|t| t.limiter().max_keys())
        .collect()
}

#[test]
fn a_policy_without_a_backend_line_caps_every_tiers_keys_by_default() {
    assert_eq!(DEFAULT_MAX_KEYS, 1_000_000);
    let file = PolicyFile::from_toml(README_EXAMPLE).unwrap();
    let limiter = build(file.policy("api").unwrap());
    // Both tiers, the default and signed_in, capped.
    assert_eq!(caps(&limiter), [Some(DEFAULT_MAX_KEYS); 2]);
    // `backend = "memory"` without a table: the same.
    let file =
        PolicyFile::from_toml("[policies.a]\nquota = \"1/s\"\nkey = \"ip\"\nbackend = \"memory\"")
            .unwrap();
    assert_eq!(caps(&build(file.policy("a").unwrap())), [Some(1_000_000)]);
}

#[test]
fn a_cap_from_the_file_bounds_distinct_keys_in_every_tier() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.api]
        quota = "5/h"
        key = "header:x-api-key"
        backend = { kind = "memory", max_keys = 1000 }
        [policies.api.tiers]
        gold = "50/h"
        "#,
    )
    .unwrap();
    let limiter = build(file.policy("api").unwrap());
    assert_eq!(caps(&limiter), [Some(1000); 2]);
    // 3,000 invented keys from one client: 1,000 tracked, the other 2,000
    // share one overflow state at the quota (5 admitted among them).
    let admitted = (0..3000)
        .filter(|i| {
            limiter
                .try_check_n(&format!("invented-{i}"), 1)
                .unwrap()
                .unwrap()
                .admit()
        })
        .count();
    assert_eq!(limiter.record_live_keys(), 1000);
    assert_eq!(admitted, 1000 + 5);
    let TierLimiters::Memory(tiers) = limiter.limiters() else {
        panic!("a memory policy");
    };
    assert_eq!(tiers.tiers()[0].limiter().overflow_count(), 2000);

    // A tier the resolver picks is capped as well.
    let policy = file.policy("api").unwrap();
    let tiers = policy
        .memory_tiers(ManualClock::new(), Box::new(|_: &str| TierId::new(1)))
        .unwrap();
    for i in 0..3000 {
        tiers.check(&format!("gold-{i}"));
    }
    let lens: Vec<_> = tiers.tiers().iter().map(|t| t.limiter().len()).collect();
    assert_eq!(lens, [0, 1000]);
}

#[test]
fn max_keys_zero_is_an_error_naming_the_policy() {
    let text = "[policies.login]\nquota = \"5/m\"\nbackend = { kind = \"memory\", max_keys = 0 }";
    let err = PolicyFile::from_toml(text).unwrap_err();
    assert_eq!(
        (err.policy(), err.field_name()),
        (Some("login"), Some("backend.max_keys"))
    );
    assert!(err.message().contains("at least 1"), "{err}");
    assert!(err.to_string().starts_with("policy \"login\""), "{err}");

    // A policy made in code skips the file's checks: building refuses it.
    let mut policy = PolicyFile::from_toml("[policies.login]\nquota = \"5/m\"")
        .unwrap()
        .policy("login")
        .unwrap()
        .clone();
    policy.backend = Store::Memory {
        max_keys: Some(0),
        sweep_interval: None,
    };
    let err = policy
        .memory_tiers(ManualClock::new(), Box::new(|_: &str| TierId::DEFAULT))
        .unwrap_err();
    assert_eq!(
        (err.policy(), err.field_name()),
        (Some("login"), Some("backend.max_keys"))
    );
    policy.backend = Store::Memory {
        max_keys: None,
        sweep_interval: Some(Duration::ZERO),
    };
    let err = policy
        .memory_tiers(ManualClock::new(), Box::new(|_: &str| TierId::DEFAULT))
        .unwrap_err();
    assert_eq!(err.field_name(), Some("backend.sweep_interval_ms"));
}

/// Checks `n` fresh keys once each in the default tier.
fn touch(tiers: &rategate::policy::config::MemoryTiers<ManualClock>, prefix: &str, n: usize) {
    for i in 0..n {
        assert!(tiers.check(&format!("{prefix}-{i}")).is_allowed());
    }
}

#[test]
fn idle_keys_are_swept_by_themselves_every_ten_seconds_by_default() {
    assert_eq!(DEFAULT_SWEEP_INTERVAL, Duration::from_secs(10));
    // No backend line; a token bucket of 10/s: a key checked once is full,
    // so idle, 100 ms later.
    let file = PolicyFile::from_toml("[policies.api]\nquota = \"10/s\"\nkey = \"ip\"").unwrap();
    let clock = ManualClock::new();
    let tiers = file
        .policy("api")
        .unwrap()
        .memory_tiers(clock.clone(), Box::new(|_: &str| TierId::DEFAULT))
        .unwrap();
    touch(&tiers, "a", 500);
    // Idle for almost 9 s, but the first sweep is due at 10 s.
    clock.advance(Duration::from_secs(9));
    touch(&tiers, "b", 1);
    assert_eq!(tiers.len(), 501);
    // At 10 s the next check sweeps every idle key, without a call to
    // `sweep`.
    clock.advance(Duration::from_secs(1));
    touch(&tiers, "c", 1);
    assert!(tiers.len() <= 1, "{} keys left", tiers.len());
}

#[test]
fn the_sweep_interval_comes_from_the_file() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.api]
        quota = "10/s"
        key = "ip"
        backend = { kind = "memory", sweep_interval_ms = 1000 }
        "#,
    )
    .unwrap();
    let api = file.policy("api").unwrap();
    assert_eq!(
        api.backend,
        Store::Memory {
            max_keys: None,
            sweep_interval: Some(Duration::from_secs(1)),
        }
    );
    let clock = ManualClock::new();
    let tiers = api
        .memory_tiers(clock.clone(), Box::new(|_: &str| TierId::DEFAULT))
        .unwrap();
    assert_eq!(
        tiers.tiers()[0].limiter().max_keys(),
        Some(DEFAULT_MAX_KEYS)
    );
    touch(&tiers, "a", 500);
    // One token back per 100 ms: full, so idle, after a second; the next
    // check after the interval sweeps them.
    clock.advance(Duration::from_millis(1500));
    touch(&tiers, "b", 1);
    assert!(tiers.len() <= 1, "{} keys left", tiers.len());
}

#[test]
fn bearer_is_a_key_kind() {
    let file = PolicyFile::from_toml("[policies.signed-in]\nquota = \"5000/h\"\nkey = \"bearer\"")
        .unwrap();
    assert_eq!(file.policy("signed-in").unwrap().key, KeyKind::Bearer);
    // Another header keeps its own kind.
    let file =
        PolicyFile::from_toml("[policies.a]\nquota = \"1/s\"\nkey = \"header:X-Token\"").unwrap();
    assert_eq!(
        file.policy("a").unwrap().key,
        KeyKind::Header("x-token".into())
    );
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::redis_server::RedisServer;
    use rategate::policy::config::{RedisConnection, TierLimiters};

    fn file(url: &str) -> String {
        format!(
            r#"
            [policies.central]
            algorithm = "fixed_window"
            quota = "3/h"
            backend = {{ kind = "redis", url = "{url}", store_down = "closed", timeout_ms = 200 }}
            [policies.central.tiers]
            signed_in = "10/h"
            [policies.central.overrides]
            vip = "signed_in"

            [policies.synced]
            quota = "4/h"
            backend = {{ kind = "synced", url = "{url}", interval_ms = 50 }}

            [policies.leased]
            quota = "100/h"
            backend = {{ kind = "leased", url = "{url}", prefix = "lease-test" }}
            "#
        )
    }

    #[test]
    fn redis_synced_and_leased_policies_build_and_decide() {
        let server = RedisServer::start();
        let file = PolicyFile::from_toml(&file(&server.url())).unwrap();
        let central = file.policy("central").unwrap();
        assert_eq!(
            central.backend,
            Store::Redis {
                connection: RedisConnection::url(&server.url()),
                prefix: "central".into(),
                timeout: Some(Duration::from_millis(200)),
                store_down: rategate::policy::StoreDown::FailClosed,
            }
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let build = |name: &str| {
                PolicyLimiter::build(
                    file.policy(name).unwrap(),
                    Box::new(|_: &str| TierId::DEFAULT),
                )
            };
            let central = build("central").await.unwrap();
            assert!(matches!(central.limiters(), TierLimiters::Redis(_)));
            assert!(central.try_check_n("k", 1).is_none());
            let mut allowed = 0;
            for _ in 0..5 {
                allowed += usize::from(
                    central
                        .check_n("k", 1)
                        .await
                        .unwrap()
                        .decision()
                        .is_allowed(),
                );
            }
            assert_eq!(allowed, 3);
            let vip = central.check_n("vip", 1).await.unwrap();
            assert_eq!((vip.tier(), vip.decision().limit()), (TierId::new(1), 10));

            let synced = build("synced").await.unwrap();
            assert!(matches!(synced.limiters(), TierLimiters::Synced(_)));
            let allowed = (0..6)
                .filter(|_| {
                    synced
                        .try_check_n("s", 1)
                        .unwrap()
                        .unwrap()
                        .decision()
                        .is_allowed()
                })
                .count();
            assert_eq!(allowed, 4);
            assert_eq!(synced.record_live_keys(), 1);

            let leased = build("leased").await.unwrap();
            assert!(matches!(leased.limiters(), TierLimiters::Leased(_)));
            let d = leased.check_n("l", 1).await.unwrap();
            assert_eq!(d.decision().limit(), 100);
        });
    }

    #[test]
    fn an_unreachable_redis_is_named_as_the_url_field() {
        let port = redis_server::free_port();
        let text = format!(
            "[policies.x]\nquota = \"3/h\"\nbackend = {{ kind = \"redis\", url = \"redis://127.0.0.1:{port}/\", timeout_ms = 100 }}"
        );
        let file = PolicyFile::from_toml(&text).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt
            .block_on(PolicyLimiter::build(
                file.policy("x").unwrap(),
                Box::new(|_: &str| TierId::DEFAULT),
            ))
            .unwrap_err();
        assert_eq!(
            (err.policy(), err.field_name()),
            (Some("x"), Some("backend.url")),
            "{err}"
        );
    }
}

/// A policy's `Debug` (logged by users) prints no password: not the
/// master's, not one in a URL.
#[test]
fn debug_output_hides_passwords() {
    let file = PolicyFile::from_toml(
        r#"
        [policies.a]
        quota = "1/s"
        backend = { kind = "redis", url = "redis://user:hunter2@10.0.0.1:6379/0" }

        [policies.b]
        quota = "1/s"
        backend = { kind = "leased", sentinels = ["redis://:sentinelpw@10.0.0.1:26379"], master = "m", master_password = "masterpw" }

        [policies.c]
        quota = "1/s"
        backend = { kind = "synced", cluster = ["redis://:clusterpw@10.0.0.1:7000/"] }

        [policies.d]
        quota = "1/s"
        backend = { kind = "redis", url = "redis+unix:///tmp/s.sock?db=0&pass=unixpw" }

        [policies.e]
        quota = "1/s"
        backend = { kind = "redis", url = "redis://user:sl/as?hpw@10.0.0.1:6379/0" }
        "#,
    )
    .unwrap();
    let printed = format!("{file:?}");
    for secret in [
        "hunter2",
        "sentinelpw",
        "masterpw",
        "clusterpw",
        "unixpw",
        "sl/as",
        "hpw",
    ] {
        assert!(!printed.contains(secret), "{secret} in {printed}");
    }
    assert!(
        printed.contains("redis://user:***@10.0.0.1:6379/0"),
        "{printed}"
    );
}
