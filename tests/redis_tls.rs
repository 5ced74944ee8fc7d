//! TLS to Redis (feature `redis-tls`): a real `redis-server` with a TLS
//! port on loopback, its certificates made for the test by `openssl` (a
//! throwaway CA, valid two days, in a temporary directory). Every Redis
//! limiter over `rediss://`: the batched and the lone path of
//! `RedisLimiter`, `SyncedLimiter`, `LeasedLimiter`; client certificates;
//! certificates that do not verify.

#![cfg(feature = "redis-tls")]

#[path = "support/certs.rs"]
mod certs;
#[path = "support/redis_server.rs"]
mod redis_server;

use certs::Certs;

use rategate::redis::{LeasedLimiter, RedisError, RedisLimiter, Source, SyncedLimiter, Tls};
use rategate::{FixedWindow, ManualClock, Quota, TokenBucket};
use redis_server::runtime;
use redis_server::{RedisServer, free_port};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The test's certificates as the Redis limiters' TLS settings.
trait AsTls {
    fn trusted(&self) -> Tls;
    fn with_client(&self) -> Tls;
}

impl AsTls for Certs {
    fn trusted(&self) -> Tls {
        Tls::new().root_certificate(self.read("ca.pem"))
    }

    fn with_client(&self) -> Tls {
        self.trusted()
            .client_certificate(self.read("client.pem"), self.read("client.key"))
    }
}

/// A server with a plain port (for the harness) and a TLS port.
fn tls_server(certs: &Certs, clients: bool) -> (RedisServer, String) {
    let port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &certs.path("server.pem"),
        "--tls-key-file",
        &certs.path("server.key"),
        "--tls-ca-cert-file",
        &certs.path("ca.pem"),
        "--tls-auth-clients",
        if clients { "yes" } else { "no" },
    ]);
    (server, format!("rediss://127.0.0.1:{port}/"))
}

async fn limiter(
    url: &str,
    tls: Tls,
    prefix: &str,
) -> Result<RedisLimiter<TokenBucket>, RedisError> {
    RedisLimiter::<TokenBucket>::builder(Quota::per_hour(10).unwrap())
        .url(url)
        .tls(tls)
        .prefix(prefix)
        .timeout(Duration::from_secs(2))
        .local_cache(false)
        .build()
        .await
}

/// A lone caller (its own call on the batching connection) and 64
/// concurrent ones (batched) over TLS: exactly the limit is admitted.
#[test]
fn redis_limiter_batched_and_lone_over_tls() {
    let certs = Certs::make();
    let (server, url) = tls_server(&certs, false);
    runtime().block_on(async {
        let limiter = limiter(&url, certs.trusted(), "tls").await.unwrap();
        let lone = limiter.check("lone").await.unwrap();
        assert_eq!(lone.source(), Source::Redis);
        assert!(lone.is_allowed());
        let limiter = Arc::new(limiter);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move { limiter.check("shared").await.unwrap() })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            let decided = task.await.unwrap();
            assert_eq!(decided.source(), Source::Redis);
            admitted += usize::from(decided.is_allowed());
        }
        assert_eq!(admitted, 10);
    });
    // The state is on the server: the plain port sees the keys.
    let keys = server.cli(&["KEYS", "tls:*"]).unwrap();
    assert!(keys.contains("shared"), "{keys}");
}

/// The synced and the leased limiter over TLS.
#[test]
fn synced_and_leased_over_tls() {
    let certs = Certs::make();
    let (_server, url) = tls_server(&certs, false);
    runtime().block_on(async {
        let clock = ManualClock::new();
        let synced = SyncedLimiter::<FixedWindow>::builder(Quota::per_hour(5).unwrap())
            .url(&url)
            .tls(certs.trusted())
            .prefix("tls-synced")
            .clock(clock.clone())
            .background(false)
            .build()
            .await
            .unwrap();
        for _ in 0..5 {
            assert!(synced.check("k").is_allowed());
        }
        synced.sync_now().await.unwrap();
        assert!(!synced.check("k").is_allowed());
        let leased = LeasedLimiter::builder(Quota::per_hour(5).unwrap())
            .url(&url)
            .tls(certs.trusted())
            .prefix("tls-lease")
            .clock(clock.clone())
            .background(false)
            .build()
            .await
            .unwrap();
        // No slice yet: acquire leases one from Redis on the spot.
        assert!(leased.acquire("k").await.unwrap().is_allowed());
        leased.sync_now().await.unwrap();
        let admitted = 1 + (0..10).filter(|_| leased.check("k").is_allowed()).count();
        assert!((2..=5).contains(&admitted), "{admitted}");
    });
}

/// A server that asks for client certificates: refused without one,
/// served with one the CA signed.
#[test]
fn client_certificates() {
    let certs = Certs::make();
    let (_server, url) = tls_server(&certs, true);
    runtime().block_on(async {
        assert!(limiter(&url, certs.trusted(), "mtls").await.is_err());
        let limiter = limiter(&url, certs.with_client(), "mtls").await.unwrap();
        let decided = limiter.check("k").await.unwrap();
        assert_eq!(decided.source(), Source::Redis);
        assert!(decided.is_allowed());
    });
}

/// A CA that did not sign the server, garbage for a certificate, a
/// `rediss://` URL that says `#insecure`: typed errors, never a connection.
#[test]
fn certificates_that_do_not_verify_are_errors() {
    let certs = Certs::make();
    let other = Certs::make();
    let (_server, url) = tls_server(&certs, false);
    runtime().block_on(async {
        let e = limiter(&url, other.trusted(), "bad").await.unwrap_err();
        assert!(
            matches!(e, RedisError::Redis(_) | RedisError::Timeout),
            "{e}"
        );
        let e = limiter(
            &url,
            Tls::new().root_certificate(&b"not a certificate"[..]),
            "bad",
        )
        .await
        .unwrap_err();
        assert!(
            matches!(e, RedisError::Redis(_) | RedisError::Tls(_)),
            "{e}"
        );
        // The system's roots do not hold the test CA.
        assert!(limiter(&url, Tls::new(), "bad").await.is_err());
        let e = limiter(&format!("{url}#insecure"), certs.trusted(), "bad")
            .await
            .unwrap_err();
        // Refused by redis-rs (no `tls-rustls-insecure`) or by the
        // batching connection, which always verifies.
        assert!(
            matches!(e, RedisError::Tls(_) | RedisError::Redis(_)),
            "{e}"
        );
        assert!(e.to_string().contains("insecure"), "{e}");
    });
}

/// A policy file names the CA and the client certificate by path: every
/// Redis backend builds and decides over TLS; a file that cannot be read
/// is an error naming its field.
#[cfg(feature = "serde")]
#[test]
fn policy_files_over_tls() {
    use rategate::policy::TierId;
    use rategate::policy::config::{PolicyFile, PolicyLimiter};
    let certs = Certs::make();
    let (_server, url) = tls_server(&certs, true);
    let (ca, cert, key) = (
        certs.path("ca.pem"),
        certs.path("client.pem"),
        certs.path("client.key"),
    );
    let tls = format!(r#"url = "{url}", tls_ca = "{ca}", tls_cert = "{cert}", tls_key = "{key}""#);
    let file = PolicyFile::from_toml(&format!(
        r#"
        [policies.central]
        quota = "3/h"
        backend = {{ kind = "redis", {tls} }}

        [policies.synced]
        quota = "3/h"
        backend = {{ kind = "synced", {tls} }}

        [policies.leased]
        quota = "3/h"
        backend = {{ kind = "leased", {tls} }}

        [policies.missing]
        quota = "3/h"
        backend = {{ kind = "redis", url = "{url}", tls_ca = "/nonexistent/ca.pem" }}

        [policies.endless]
        quota = "3/h"
        backend = {{ kind = "redis", url = "{url}", tls_ca = "/dev/zero" }}
        "#
    ))
    .unwrap();
    runtime().block_on(async {
        let build = |name: &str| {
            PolicyLimiter::build(
                file.policy(name).unwrap(),
                Box::new(|_: &str| TierId::DEFAULT),
            )
        };
        for name in ["central", "synced", "leased"] {
            let limiter = build(name).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            // The leased backend denies until its first slice arrives
            // (the background task asks for it on the first check).
            let mut admitted = false;
            for _ in 0..100 {
                admitted = limiter.check_n("k", 1).await.unwrap().admit();
                if admitted {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(admitted, "{name}");
        }
        let e = build("missing").await.unwrap_err();
        assert_eq!(e.field_name(), Some("backend.tls_ca"), "{e}");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        // A device would be read forever: refused as not a regular file.
        let e = build("endless").await.unwrap_err();
        assert_eq!(e.field_name(), Some("backend.tls_ca"), "{e}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    });
}

/// Three cluster masters that speak TLS only (`--port 0`), their cluster
/// bus over TLS too; killed on drop.
struct TlsCluster {
    ports: Vec<u16>,
    children: Vec<std::process::Child>,
    dirs: Vec<PathBuf>,
}

impl TlsCluster {
    fn start(certs: &Certs) -> TlsCluster {
        let mut cluster = TlsCluster {
            ports: Vec::new(),
            children: Vec::new(),
            dirs: Vec::new(),
        };
        for _ in 0..3 {
            let port = redis_server::free_cluster_port();
            let dir = redis_server::temp_dir("tls-cluster");
            let child = Command::new("redis-server")
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--dir", dir.to_str().unwrap()])
                .args(["--tls-cert-file", &certs.path("server.pem")])
                .args(["--tls-key-file", &certs.path("server.key")])
                .args(["--tls-ca-cert-file", &certs.path("ca.pem")])
                .args(["--tls-auth-clients", "no", "--tls-cluster", "yes"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("redis-server must be installed");
            cluster.ports.push(port);
            cluster.children.push(child);
            cluster.dirs.push(dir);
        }
        let tls_cli = |port: u16, args: &[&str]| {
            Command::new("redis-cli")
                .args(["--tls", "--cacert", &certs.path("ca.pem")])
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        };
        let up = |port| {
            (0..200).any(|_| {
                let ok = tls_cli(port, &["PING"]).is_some_and(|r| r.contains("PONG"));
                if !ok {
                    std::thread::sleep(Duration::from_millis(25));
                }
                ok
            })
        };
        assert!(
            cluster.ports.iter().all(|&p| up(p)),
            "TLS nodes did not start"
        );
        let addrs: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let created = Command::new("timeout")
            .args([
                "30",
                "redis-cli",
                "--tls",
                "--cacert",
                &certs.path("ca.pem"),
            ])
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("redis-cli must be installed");
        assert!(
            created.success(),
            "redis-cli --cluster create over TLS failed"
        );
        let ok = |port| {
            (0..400).any(|_| {
                let ok = tls_cli(port, &["CLUSTER", "INFO"])
                    .is_some_and(|i| i.contains("cluster_state:ok"));
                if !ok {
                    std::thread::sleep(Duration::from_millis(25));
                }
                ok
            })
        };
        assert!(cluster.ports.iter().all(|&p| ok(p)), "TLS cluster not ok");
        cluster
    }

    fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("rediss://127.0.0.1:{p}/"))
            .collect()
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A Redis Cluster whose nodes speak TLS only: the Redis, synced and
/// leased limiters find the slots and decide over `rediss://`.
#[test]
fn a_cluster_over_tls() {
    let certs = Certs::make();
    let cluster = TlsCluster::start(&certs);
    runtime().block_on(async {
        let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(3).unwrap())
            .cluster(&cluster.urls())
            .tls(certs.trusted())
            .prefix("tls-cluster")
            .timeout(Duration::from_secs(2))
            .local_cache(false)
            .build()
            .await
            .unwrap();
        for key in ["a", "b", "c", "d"] {
            let admitted: Vec<bool> = [
                limiter.check(key).await.unwrap(),
                limiter.check(key).await.unwrap(),
                limiter.check(key).await.unwrap(),
                limiter.check(key).await.unwrap(),
            ]
            .iter()
            .map(|d| {
                assert_eq!(d.source(), Source::Redis);
                d.is_allowed()
            })
            .collect();
            assert_eq!(admitted, [true, true, true, false], "{key}");
        }
        let synced = SyncedLimiter::<FixedWindow>::builder(Quota::per_hour(5).unwrap())
            .cluster(&cluster.urls())
            .tls(certs.trusted())
            .prefix("tls-cluster-synced")
            .clock(ManualClock::new())
            .background(false)
            .build()
            .await
            .unwrap();
        assert!(synced.check("k").is_allowed());
        synced.sync_now().await.unwrap();
        let leased = LeasedLimiter::builder(Quota::per_hour(5).unwrap())
            .cluster(&cluster.urls())
            .tls(certs.trusted())
            .prefix("tls-cluster-lease")
            .clock(ManualClock::new())
            .background(false)
            .build()
            .await
            .unwrap();
        assert!(leased.acquire("k").await.unwrap().is_allowed());
    });
}
