//! `rategate-rls` on its shared backends, against real `redis-server`s on
//! free loopback ports: one count across two servers on Redis and on a
//! Redis Cluster, every algorithm deciding as in memory, exact counting
//! under concurrent gRPC calls, overrides on Redis, synced and leased
//! domains, the store-down policy once Redis is killed, and backends that
//! are refused.
#![cfg(feature = "rls")]

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/redis_topology.rs"]
mod redis_topology;
#[path = "support/rls.rs"]
mod rls_support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rategate::rls::config::Config;
use rategate::rls::server;
use rategate::rls::service::{Charge, Options, RateLimitCore};
use redis_server::{RedisCluster, RedisServer};
use redis_topology::Node;
use rls_support::descriptor;
use std::sync::Arc;
use std::time::Duration;

const HOUR: i32 = 3;

fn config(yaml: &str) -> Config {
    Config::from_sources(&[("c.yaml", yaml)], false).expect("the configuration loads")
}

async fn core(yaml: &str) -> RateLimitCore {
    RateLimitCore::new(config(yaml), Options::default())
        .await
        .expect("its rules build")
}

/// A request in `domain` of one descriptor per list of entries.
fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    rls_support::request(domain, descriptors.iter().map(|e| descriptor(e)).collect())
}

/// Whether `core` admits one descriptor `key=value` in domain `d`.
async fn admits(core: &RateLimitCore, key: &str, value: &str) -> bool {
    let r = core
        .should_rate_limit(&request("d", &[&[(key, value)]]))
        .await
        .expect("a decision");
    r.overall_code == Code::Ok as i32
}

/// Domain `d` on `backend` (a YAML flow mapping) with one rule: `key`,
/// `per_hour` requests an hour.
fn one_rule(backend: &str, key: &str, per_hour: u32) -> String {
    format!(
        "domain: d\nbackend: {backend}\ndescriptors:\n  - key: {key}\n    rate_limit: {{ unit: hour, requests_per_unit: {per_hour} }}\n"
    )
}

/// A domain on `backend` (a YAML flow mapping) with one rule per
/// algorithm, 5 an hour each.
fn every_algorithm(backend: &str) -> String {
    let mut yaml = format!("domain: d\nbackend: {backend}\ndescriptors:\n");
    for algorithm in [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
        "leaky_bucket",
    ] {
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    rate_limit: {{ unit: hour, requests_per_unit: 5, algorithm: {algorithm} }}\n"
        ));
    }
    yaml
}

/// Every algorithm on Redis admits what it admits in memory, and two
/// servers on one Redis share its counts.
#[test]
fn redis_decides_as_memory_and_servers_share_counts() {
    let redis = RedisServer::start();
    redis_server::runtime().block_on(async {
        let backend = format!(
            "{{ kind: redis, url: \"{}\", timeout_ms: 1000 }}",
            redis.url()
        );
        let memory = core(&every_algorithm("{ kind: memory }")).await;
        let a = core(&every_algorithm(&backend)).await;
        let b = core(&every_algorithm(&backend)).await;
        for algorithm in [
            "fixed_window",
            "sliding_window_log",
            "sliding_window_counter",
            "token_bucket",
            "leaky_bucket",
        ] {
            let mut expected = Vec::new();
            let mut got = Vec::new();
            for i in 0..8 {
                expected.push(admits(&memory, algorithm, "k").await);
                // The two servers take turns on one counter.
                let server = if i % 2 == 0 { &a } else { &b };
                got.push(admits(server, algorithm, "k").await);
            }
            assert_eq!(got, expected, "{algorithm}");
            assert!(got[0], "{algorithm}: the first request passes");
            assert!(!got[7], "{algorithm}: the eighth of 5 an hour does not");
        }
    });
}

/// 50 concurrent gRPC calls on a 10-an-hour key admit exactly 10, on a
/// single Redis and on a Redis Cluster, each through two servers.
#[test]
fn exact_under_concurrency_on_redis_and_cluster() {
    let redis = RedisServer::start();
    let cluster = RedisCluster::start();
    let cluster_list = cluster
        .urls()
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    for backend in [
        format!("{{ kind: redis, url: \"{}\" }}", redis.url()),
        format!("{{ kind: redis, cluster: [{cluster_list}] }}"),
    ] {
        let yaml = one_rule(&backend, "user", 10);
        redis_server::runtime().block_on(async {
            let mut clients = Vec::new();
            let mut stops = Vec::new();
            for _ in 0..2 {
                let core = Arc::new(core(&yaml).await);
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                tokio::spawn(server::serve_on(core, listener, None, async {
                    let _ = stopped.await;
                }));
                stops.push(stop);
                clients.push(
                    RateLimitServiceClient::connect(format!("http://{addr}"))
                        .await
                        .unwrap(),
                );
            }
            let barrier = Arc::new(tokio::sync::Barrier::new(50));
            let calls: Vec<_> = (0..50)
                .map(|i| {
                    let mut client = clients[i % 2].clone();
                    let barrier = Arc::clone(&barrier);
                    tokio::spawn(async move {
                        barrier.wait().await;
                        let r = client
                            .should_rate_limit(request("d", &[&[("user", "hot")]]))
                            .await
                            .unwrap()
                            .into_inner();
                        r.overall_code == Code::Ok as i32
                    })
                })
                .collect();
            let mut admitted = 0;
            for call in calls {
                admitted += usize::from(call.await.unwrap());
            }
            assert_eq!(admitted, 10, "{backend}");
            drop(stops);
        });
    }
}

/// A `limit` override on a Redis domain counts in Redis, across servers.
#[test]
fn overrides_count_in_redis() {
    let redis = RedisServer::start();
    redis_server::runtime().block_on(async {
        let yaml = format!(
            "domain: d\nbackend: {{ kind: redis, url: \"{}\" }}\ndescriptors:\n  - key: k\n",
            redis.url()
        );
        let (a, b) = (core(&yaml).await, core(&yaml).await);
        let mut over = request("d", &[&[("k", "v")]]);
        over.descriptors[0].limit = Some(RateLimitOverride {
            requests_per_unit: 3,
            unit: HOUR,
        });
        let mut admitted = Vec::new();
        for i in 0..5 {
            let core = if i % 2 == 0 { &a } else { &b };
            let r = core.should_rate_limit(&over).await.unwrap();
            admitted.push(r.overall_code == Code::Ok as i32);
            assert_eq!(
                r.statuses[0]
                    .current_limit
                    .as_ref()
                    .unwrap()
                    .requests_per_unit,
                3
            );
        }
        assert_eq!(admitted, [true, true, true, false, false]);
        let keys = redis.cli(&["KEYS", "rategate-rls:*"]).unwrap_or_default();
        assert!(
            !keys.trim().is_empty(),
            "the override's counter is in Redis"
        );
    });
}

/// A request refused outright (a rule of 0 requests beside a limited one)
/// charges nothing on Redis with all-or-nothing, and every matched
/// descriptor with every-match.
#[test]
fn refused_outright_charges_nothing_on_redis() {
    let redis = RedisServer::start();
    redis_server::runtime().block_on(async {
        let yaml = format!(
            "domain: d\nbackend: {{ kind: redis, url: \"{}\" }}\ndescriptors:\n  - key: blocked\n    rate_limit: {{ unit: hour, requests_per_unit: 0 }}\n  - key: user\n    rate_limit: {{ unit: hour, requests_per_unit: 5 }}\n",
            redis.url()
        );
        for (charge, left) in [(Charge::AllOrNothing, 4), (Charge::EveryMatch, 2)] {
            let options = Options {
                charge,
                ..Options::default()
            };
            let core = RateLimitCore::new(config(&yaml), options).await.unwrap();
            let name = format!("{charge:?}");
            let both = request("d", &[&[("blocked", "x")], &[("user", &name)]]);
            for _ in 0..2 {
                let r = core.should_rate_limit(&both).await.unwrap();
                assert_eq!(r.overall_code, Code::OverLimit as i32);
            }
            let r = core
                .should_rate_limit(&request("d", &[&[("user", &name)]]))
                .await
                .unwrap();
            assert_eq!(r.statuses[0].limit_remaining, left, "{charge:?}");
        }
    });
}

/// Once Redis is killed, the domain's store-down policy decides:
/// `closed` refuses, `open` admits, within the timeout; each such decision
/// counts in `rategate_rls_store_down_total`.
#[test]
fn store_down_per_domain() {
    let mut redis = RedisServer::start();
    let rt = redis_server::runtime();
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let yaml = |down: &str| {
        format!(
            "domain: d\nbackend: {{ kind: redis, url: \"{}\", timeout_ms: 100, store_down: {down} }}\ndescriptors:\n  - key: user\n    rate_limit: {{ unit: hour, requests_per_unit: 5 }}\n",
            redis.url()
        )
    };
    let (closed, open) = metrics::with_local_recorder(&recorder, || {
        rt.block_on(async { (core(&yaml("closed")).await, core(&yaml("open")).await) })
    });
    rt.block_on(async {
        assert!(admits(&closed, "user", "a").await);
        assert!(admits(&open, "user", "b").await);
        redis.kill();
        let started = std::time::Instant::now();
        assert!(!admits(&closed, "user", "a").await, "closed refuses");
        assert!(admits(&open, "user", "b").await, "open admits");
        assert!(started.elapsed() < Duration::from_secs(2));
    });
    let text = handle.render();
    let line = r#"rategate_rls_store_down_total{domain="d",rule="d.user"} 2"#;
    assert!(text.lines().any(|l| l == line), "{text}");
}

/// A synced domain decides locally and learns the other server's counts
/// of a key at its next sync of the key; a leased one never admits more than the limit over
/// both servers.
#[test]
fn synced_and_leased_domains() {
    let redis = RedisServer::start();
    redis_server::runtime().block_on(async {
        let yaml = |kind: &str| {
            let backend = format!(
                "{{ kind: {kind}, url: \"{}\", interval_ms: 50 }}",
                redis.url()
            );
            one_rule(&backend, "user", 10)
        };
        let (a, b) = (core(&yaml("synced")).await, core(&yaml("synced")).await);
        let mut first = 0;
        for _ in 0..6 {
            first += usize::from(admits(&a, "user", "s").await);
        }
        assert_eq!(first, 6);
        tokio::time::sleep(Duration::from_millis(400)).await;
        // A key new to b is decided locally until b's first sync of it.
        assert!(admits(&b, "user", "s").await);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut second = 0;
        for _ in 0..10 {
            second += usize::from(admits(&b, "user", "s").await);
        }
        assert_eq!(second, 3, "b knows a's 6 after a sync");

        let (a, b) = (core(&yaml("leased")).await, core(&yaml("leased")).await);
        let mut admitted = 0;
        for i in 0..30 {
            let core = if i % 2 == 0 { &a } else { &b };
            admitted += usize::from(admits(core, "user", "l").await);
        }
        assert!(
            (1..=10).contains(&admitted),
            "leases bound the two servers: {admitted}"
        );
    });
}

/// A `backend:` that is not a backend, or whose Redis cannot be reached,
/// is refused by the domain and field; a synced domain refuses an
/// algorithm it cannot sync, by the rule.
#[test]
fn bad_backends_are_refused() {
    redis_server::runtime().block_on(async {
        let refused = |yaml: String| async move {
            RateLimitCore::new(config(&yaml), Options::default())
                .await
                .unwrap_err()
        };
        let rule = "descriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n";
        let e = refused(format!(
            "domain: d\nbackend: {{ kind: redis, url: \"redis://127.0.0.1:1/\", timeout_ms: nope }}\n{rule}"
        ))
        .await;
        assert_eq!(e.place, "d");
        assert!(e.message.starts_with("backend.timeout_ms"), "{e}");
        let e = refused(format!("domain: d\nbackend: {{ kind: redis }}\n{rule}")).await;
        assert_eq!(e.place, "d");
        assert!(e.message.contains("url"), "{e}");
        let port = redis_server::free_port();
        let e = refused(format!(
            "domain: d\nbackend: {{ kind: redis, url: \"redis://127.0.0.1:{port}/\", timeout_ms: 200 }}\n{rule}"
        ))
        .await;
        assert_eq!(e.place, "d.k");
        assert!(e.message.starts_with("backend.url"), "{e}");
        let e = refused(format!(
            "domain: d\nbackend: {{ kind: synced, url: \"redis://127.0.0.1:{port}/\" }}\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: hour, requests_per_unit: 5, algorithm: leaky_bucket }}\n"
        ))
        .await;
        assert!(e.message.contains("cannot be synced"), "{e}");
        let e = refused(format!(
            "domain: d\nbackend: {{ kind: memory, max_keys: 0 }}\n{rule}"
        ))
        .await;
        assert!(e.message.starts_with("backend.max_keys"), "{e}");
    });
}

/// The process's open file descriptors.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn with_override(entries: &[(&str, &str)], requests_per_unit: u32) -> RateLimitRequest {
    let mut r = request("d", &[entries]);
    r.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit,
        unit: HOUR,
    });
    r
}

/// An override sent to domain `x.y` never reaches domain `x`'s counters,
/// though `x.y` is also the place of `x`'s rule `y`.
#[test]
fn an_override_never_spends_another_domains_counter() {
    let redis = RedisServer::start();
    redis_server::runtime().block_on(async {
        let b = format!("{{ kind: redis, url: \"{}\" }}", redis.url());
        let config = Config::from_sources(
            &[
                ("x.yaml", &format!("domain: x\nbackend: {b}\ndescriptors:\n  - key: y\n    rate_limit: {{ unit: hour, requests_per_unit: 2 }}\n")),
                ("xy.yaml", &format!("domain: x.y\nbackend: {b}\ndescriptors:\n  - key: other\n    rate_limit: {{ unit: hour, requests_per_unit: 9 }}\n")),
            ],
            false,
        )
        .unwrap();
        let core = RateLimitCore::new(config, Options::default()).await.unwrap();
        let mut attack = request("x.y", &[&[("y", "victim")]]);
        attack.descriptors[0].limit = Some(RateLimitOverride {
            requests_per_unit: 2,
            unit: HOUR,
        });
        for _ in 0..3 {
            core.should_rate_limit(&attack).await.unwrap();
        }
        let victim = core
            .should_rate_limit(&request("x", &[&[("y", "victim")]]))
            .await
            .unwrap();
        assert_eq!(victim.statuses[0].limit_remaining, 1, "x's own counter");
    });
}

/// Override quotas on a Redis domain hold at most
/// `max_shared_overrides` limiters (two connections each); a new quota
/// beyond them is refused, and the rules keep deciding.
#[test]
fn override_quotas_on_redis_are_bounded() {
    let redis = RedisServer::start();
    redis_server::runtime().block_on(async {
        let yaml = one_rule(
            &format!("{{ kind: redis, url: \"{}\" }}", redis.url()),
            "k",
            5,
        );
        let options = Options {
            max_shared_overrides: 8,
            ..Options::default()
        };
        let core = RateLimitCore::new(config(&yaml), options).await.unwrap();
        let before = fds();
        let mut refused = 0;
        for n in 1..=200 {
            match core
                .should_rate_limit(&with_override(&[("k", "v")], n))
                .await
            {
                Ok(_) => {}
                Err(e) => {
                    assert!(e.to_string().contains("too many"), "{e}");
                    refused += 1;
                }
            }
        }
        assert_eq!(refused, 192);
        assert!(fds() <= before + 2 * 8 + 4, "{before} -> {}", fds());
        assert!(admits(&core, "k", "v").await);
    });
}

/// With Redis hung, a request with a new override quota fails
/// (`UNAVAILABLE`) within the backend's timeout, and the calls that come
/// after it within a second fail at once, connecting nothing.
#[test]
fn overrides_on_a_hung_redis_fail_fast() {
    let mut redis = Node::start(&[]);
    redis_server::runtime().block_on(async {
        let backend = format!(
            "{{ kind: redis, url: \"{}\", timeout_ms: 100 }}",
            redis.url()
        );
        let yaml = one_rule(&backend, "k", 5);
        let core = core(&yaml).await;
        redis.stop();
        let before = fds();
        let started = std::time::Instant::now();
        let calls = (0..100u32).map(|n| {
            let core = &core;
            async move {
                core.should_rate_limit(&with_override(&[("k", "v")], 1 + n % 3))
                    .await
                    .unwrap_err()
                    .to_string()
            }
        });
        let errors = futures_util::future::join_all(calls).await;
        let took = started.elapsed();
        let grew = fds().saturating_sub(before);
        redis.cont();
        assert!(
            errors.iter().all(|e| e.contains("unavailable")),
            "{errors:?}"
        );
        assert!(took < Duration::from_millis(600), "{took:?}");
        assert!(grew <= 4, "{grew} descriptors opened");
    });
}

/// A domain whose Redis hangs holds up only its own new override quotas:
/// another domain's build goes through meanwhile, and after a build whose
/// caller gave up (Envoy's deadline) the hung domain fails fast.
#[test]
fn a_hung_domain_holds_up_only_itself() {
    let (mut hung, healthy) = (Node::start(&[]), RedisServer::start());
    redis_server::runtime().block_on(async {
        let domain = |name: &str, url: String| {
            one_rule(
                &format!("{{ kind: redis, url: \"{url}\", timeout_ms: 2000 }}"),
                "k",
                5,
            )
            .replacen("domain: d", &format!("domain: {name}"), 1)
        };
        let (a, b) = (domain("a", hung.url()), domain("b", healthy.url()));
        let config = Config::from_sources(&[("a.yaml", &a), ("b.yaml", &b)], false).unwrap();
        let core = Arc::new(
            RateLimitCore::new(config, Options::default())
                .await
                .unwrap(),
        );
        let over = |domain: &str, n: u32| {
            let mut r = request(domain, &[&[("k", "v")]]);
            r.descriptors[0].limit = Some(RateLimitOverride {
                requests_per_unit: n,
                unit: HOUR,
            });
            r
        };
        hung.stop();
        let waiting = Arc::clone(&core);
        let building = tokio::spawn(async move { waiting.should_rate_limit(&over("a", 11)).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        assert!(core.should_rate_limit(&over("b", 12)).await.is_ok());
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        building.abort();
        let _ = building.await;
        // The abandoned build counts as failed: the next fails at once.
        let started = std::time::Instant::now();
        let e = core.should_rate_limit(&over("a", 13)).await.unwrap_err();
        assert!(e.to_string().contains("unavailable"), "{e}");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        hung.cont();
    });
}
