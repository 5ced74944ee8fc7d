//! `rategate-rls`'s operations: gRPC over TLS (with and without client
//! certificates, the certificates made by `openssl` for the test), TLS
//! files that are refused, and the debug endpoints (`/metrics` counting
//! hits, over-limit, near-limit and shadow decisions per rule;
//! `/rlconfig`; `/healthcheck`).
#![cfg(feature = "rls")]

#[path = "support/certs.rs"]
mod certs;
#[path = "support/rls.rs"]
mod rls_support;

use certs::Certs;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rategate::rls::config::Config;
use rategate::rls::server::{self, ServeError};
use rategate::rls::service::{Options, RateLimitCore};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const YAML: &str = "domain: d
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: trial
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
";

async fn core() -> Arc<RateLimitCore> {
    let config = Config::from_sources(&[("c.yaml", YAML)], false).unwrap();
    Arc::new(
        RateLimitCore::new(config, Options::default())
            .await
            .unwrap(),
    )
}

/// A request in domain `d` of one descriptor `key=value`.
fn request(key: &str, value: &str) -> RateLimitRequest {
    rls_support::request("d", vec![rls_support::descriptor(&[(key, value)])])
}

/// Serves `core` over TLS on a free port; the stop handle ends it.
async fn serve_tls(
    core: Arc<RateLimitCore>,
    certs: &Certs,
    client_ca: bool,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let ca = certs.path("ca.pem");
    let tls = server::tls_config(
        Path::new(&certs.path("server.pem")),
        Path::new(&certs.path("server.key")),
        client_ca.then_some(Path::new(&ca)),
    )
    .expect("the certificate and key load");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve_on(core, listener, Some(tls), async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

async fn client(
    addr: SocketAddr,
    tls: ClientTlsConfig,
) -> Result<Channel, tonic::transport::Error> {
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await
}

/// A client that trusts the test's CA, for `localhost`.
fn trusting_ca(certs: &Certs) -> ClientTlsConfig {
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(certs.read("ca.pem")))
        .domain_name("localhost")
}

/// Whether a client with `tls` gets no decision: its handshake, or its
/// first call, fails.
async fn gets_none(addr: SocketAddr, tls: ClientTlsConfig) -> bool {
    match client(addr, tls).await {
        Err(_) => true,
        Ok(channel) => RateLimitServiceClient::new(channel)
            .should_rate_limit(request("user", "a"))
            .await
            .is_err(),
    }
}

/// Decisions over TLS; a client that does not trust the server's CA gets
/// none.
#[tokio::test]
async fn grpc_over_tls() {
    let certs = Certs::make();
    let (addr, _stop) = serve_tls(core().await, &certs, false).await;
    let mut rls = RateLimitServiceClient::new(client(addr, trusting_ca(&certs)).await.unwrap());
    let r = rls
        .should_rate_limit(request("user", "a"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, 9);
    // Trusting only the server's own certificate (not a CA) fails the
    // handshake: a call gets no decision.
    let untrusted = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(certs.read("server.pem")))
        .domain_name("localhost");
    assert!(
        gets_none(addr, untrusted).await,
        "an untrusted server is not used"
    );
    // Plain HTTP/2 to the TLS port gets no decision either.
    let plain = RateLimitServiceClient::connect(format!("http://{addr}")).await;
    if let Ok(mut plain) = plain {
        assert!(plain.should_rate_limit(request("user", "a")).await.is_err());
    }
}

/// With a client CA, a client without a certificate gets no decision and
/// one with a certificate the CA signed does.
#[tokio::test]
async fn client_certificates() {
    let certs = Certs::make();
    let (addr, _stop) = serve_tls(core().await, &certs, true).await;
    let anonymous = gets_none(addr, trusting_ca(&certs)).await;
    assert!(anonymous, "a client without a certificate is refused");
    let known = trusting_ca(&certs).identity(Identity::from_pem(
        certs.read("client.pem"),
        certs.read("client.key"),
    ));
    let mut rls = RateLimitServiceClient::new(client(addr, known).await.unwrap());
    let r = rls
        .should_rate_limit(request("user", "a"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
}

/// A missing file, a directory or a FIFO as a TLS file is refused with
/// its path, without blocking.
#[test]
fn bad_tls_files_are_refused() {
    let certs = Certs::make();
    let key = certs.path("server.key");
    let missing = certs.path("missing.pem");
    let e = server::tls_config(Path::new(&missing), Path::new(&key), None).unwrap_err();
    assert!(
        matches!(&e, ServeError::Tls(m) if m.contains("missing.pem")),
        "{e}"
    );
    let dir = std::env::temp_dir();
    assert!(matches!(
        server::tls_config(&dir, Path::new(&key), None),
        Err(ServeError::Tls(_))
    ));
    let fifo = certs.path("fifo.pem");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let e = server::tls_config(Path::new(&fifo), Path::new(&key), None).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}

/// A certificate without its key, an empty file or junk in PEM armour is
/// refused by `tls_config`, naming the files, before any server starts.
#[test]
fn tls_pairs_are_checked() {
    let certs = Certs::make();
    let (server, client_key) = (certs.path("server.pem"), certs.path("client.key"));
    let e = server::tls_config(Path::new(&server), Path::new(&client_key), None).unwrap_err();
    assert!(
        e.to_string().contains("not the certificate's") && e.to_string().contains("client.key"),
        "{e}"
    );
    let empty = certs.path("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let e = server::tls_config(Path::new(&empty), Path::new(&empty), None).unwrap_err();
    assert!(e.to_string().contains("no certificate"), "{e}");
    let junk = certs.path("junk.pem");
    std::fs::write(
        &junk,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let key = certs.path("server.key");
    assert!(server::tls_config(Path::new(&junk), Path::new(&key), None).is_err());
}

/// A client's `hits_addend` of u64::MAX cannot wrap the counters, and a
/// descriptor a refused request did not charge is not near its limit.
#[test]
fn metrics_hold_against_hostile_costs() {
    use envoy_types::pb::google::protobuf::UInt64Value;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n  - key: b\n    rate_limit: { unit: hour, requests_per_unit: 0 }\n";
    let config = Config::from_sources(&[("c.yaml", yaml)], false).unwrap();
    let core = metrics::with_local_recorder(&recorder, || {
        rt.block_on(RateLimitCore::new(config, Options::default()))
    })
    .unwrap();
    rt.block_on(async {
        // 9 of 10: near the limit.
        let mut nine = request("a", "1");
        nine.descriptors[0].hits_addend = Some(UInt64Value { value: 9 });
        assert_eq!(
            core.should_rate_limit(&nine).await.unwrap().overall_code,
            Code::Ok as i32
        );
        // b refuses: a is looked at (1 left), not charged, not counted near.
        let mut both = request("a", "1");
        both.descriptors
            .push(request("b", "1").descriptors.remove(0));
        assert_eq!(
            core.should_rate_limit(&both).await.unwrap().overall_code,
            Code::OverLimit as i32
        );
        let mut huge = request("a", "1");
        huge.descriptors[0].hits_addend = Some(UInt64Value { value: u64::MAX });
        core.should_rate_limit(&huge).await.unwrap();
    });
    let text = handle.render();
    let a = r#"domain="d",rule="d.a""#;
    let cap = f64::from(u32::MAX);
    assert_eq!(
        sample(&text, "rategate_rls_hits_total", a),
        Some(10.0 + cap),
        "{text}"
    );
    assert_eq!(sample(&text, "rategate_rls_over_limit_total", a), Some(cap));
    assert_eq!(sample(&text, "rategate_rls_near_limit_total", a), Some(9.0));
}

/// One GET on `addr`: the status line and the body.
async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let ask = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(ask.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The value of the `metric` line with `labels` in Prometheus text.
fn sample(text: &str, metric: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{metric}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// `/metrics` counts each rule's hits, over-limit, near-limit and shadow
/// decisions; `/rlconfig` lists the rules in force; `/healthcheck` is OK.
#[tokio::test]
async fn debug_endpoints() {
    let handle = server::install_metrics().expect("the first recorder of this test binary");
    let core = core().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve_debug(
        Arc::clone(&core),
        Some(handle),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    // 12 hits on 10 an hour: 2 over; remaining 1 or 0 after hits 9 and
    // 10 is near the limit (under a fifth left).
    for _ in 0..12 {
        core.should_rate_limit(&request("user", "u")).await.unwrap();
    }
    // The shadow rule: 1 an hour, 3 hits, 2 over in shadow mode.
    for _ in 0..3 {
        let r = core
            .should_rate_limit(&request("trial", "t"))
            .await
            .unwrap();
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
    let (status, text) = get(addr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    let user = r#"domain="d",rule="d.user""#;
    let trial = r#"domain="d",rule="d.trial""#;
    for (metric, labels, expected) in [
        ("rategate_rls_hits_total", user, 12.0),
        ("rategate_rls_over_limit_total", user, 2.0),
        ("rategate_rls_near_limit_total", user, 2.0),
        ("rategate_rls_shadow_mode_total", trial, 2.0),
        ("rategate_rls_over_limit_total", trial, 0.0),
    ] {
        assert_eq!(
            sample(&text, metric, labels),
            Some(expected),
            "{metric} {labels}\n{text}"
        );
    }
    let (status, rules) = get(addr, "/rlconfig").await;
    assert!(status.contains("200"), "{status}");
    assert!(rules.contains("d.user: 10/hour fixed_window"), "{rules}");
    assert!(
        rules.contains("d.trial: 1/hour fixed_window shadow_mode"),
        "{rules}"
    );
    let (status, body) = get(addr, "/healthcheck").await;
    assert!(
        status.contains("200") && body.contains("OK"),
        "{status} {body}"
    );
    let (status, _) = get(addr, "/nothing").await;
    assert!(status.contains("404"), "{status}");
    let _ = stop.send(());
}
