//! `rategate-rls` over loopback with a real gRPC client: envoyproxy/
//! ratelimit's README examples, hits_addend, shadow mode, replaces,
//! wildcards, overrides, the two ways of charging, every algorithm, hot
//! reload and health.

#![cfg(feature = "rls")]

#[path = "support/rls.rs"]
mod rls_support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use rategate::rls::config::Config;
use rategate::rls::server;
use rategate::rls::service::{Charge, Headers, Options, RateLimitCore};
use rls_support::{descriptor, request};
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

/// A server on a free loopback port; stopped when dropped.
struct Rls {
    client: RateLimitServiceClient<Channel>,
    core: Arc<RateLimitCore>,
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start_with(yaml: &[&str], options: Options) -> Rls {
    let sources: Vec<(String, &str)> = yaml
        .iter()
        .enumerate()
        .map(|(i, y)| (format!("config{i}.yaml"), *y))
        .collect();
    let sources: Vec<(&str, &str)> = sources.iter().map(|(n, y)| (n.as_str(), *y)).collect();
    let config = Config::from_sources(&sources, false).expect("the configuration loads");
    let core = Arc::new(
        RateLimitCore::new(config, options)
            .await
            .expect("its rules build"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve_on(Arc::clone(&core), listener, None, async {
        let _ = stopped.await;
    }));
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("a gRPC connection");
    Rls {
        client,
        core,
        addr,
        stop: Some(stop),
    }
}

async fn start(yaml: &str) -> Rls {
    start_with(&[yaml], Options::default()).await
}

impl Rls {
    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(request)
            .await
            .expect("a decision")
            .into_inner()
    }

    /// One descriptor of `entries` in `domain`: its status.
    async fn one(&mut self, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
        let r = self.ask(request(domain, vec![descriptor(entries)])).await;
        assert_eq!(r.statuses.len(), 1);
        r.statuses.into_iter().next().unwrap()
    }
}

fn ok(s: &DescriptorStatus) -> bool {
    s.code == Code::Ok as i32
}

fn limit_of(s: &DescriptorStatus) -> Option<(u32, i32)> {
    s.current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit))
}

const MINUTE: i32 = 2;
const SECOND: i32 = 1;
const DAY: i32 = 4;

/// envoyproxy/ratelimit README example 1: each value its own counter.
#[tokio::test]
async fn readme_example_1_per_value_counters() {
    let mut rls = start(
        r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"#,
    )
    .await;
    let users = rls.one("mongo_cps", &[("database", "users")]).await;
    assert!(ok(&users));
    assert_eq!(limit_of(&users), Some((500, SECOND)));
    assert_eq!(users.limit_remaining, 499);
    let default = rls.one("mongo_cps", &[("database", "default")]).await;
    assert_eq!(default.limit_remaining, 499, "a counter of its own");
    let other = rls.one("mongo_cps", &[("database", "other")]).await;
    assert!(ok(&other));
    assert_eq!(other.current_limit, None, "no rule: no limit");
}

/// README example 2: nested and key-only rules; both descriptors in one
/// request; the overall code is over when one is.
#[tokio::test]
async fn readme_example_2_nested_and_overall_code() {
    let mut rls = start(
        r#"
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
"#,
    )
    .await;
    let marketing = descriptor(&[("message_type", "marketing"), ("to_number", "2061111111")]);
    let any = descriptor(&[("to_number", "2061111111")]);
    for i in 0..5 {
        let r = rls
            .ask(request("messaging", vec![marketing.clone(), any.clone()]))
            .await;
        assert_eq!(r.overall_code, Code::Ok as i32, "request {i}");
        assert_eq!(limit_of(&r.statuses[0]), Some((5, DAY)));
        assert_eq!(r.statuses[0].limit_remaining, 4 - i);
        assert_eq!(limit_of(&r.statuses[1]), Some((100, DAY)));
    }
    let r = rls
        .ask(request("messaging", vec![marketing.clone(), any.clone()]))
        .await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(r.statuses[1].code, Code::Ok as i32);
    // All or nothing (the default): the refused request took nothing
    // from the 100/day counter.
    let alone = rls.one("messaging", &[("to_number", "2061111111")]).await;
    assert_eq!(alone.limit_remaining, 100 - 6);
    // Another number has its own counters.
    let other = rls
        .one(
            "messaging",
            &[("message_type", "marketing"), ("to_number", "2062222222")],
        )
        .await;
    assert_eq!(other.limit_remaining, 4);
    // A key alone matches nothing at the marketing level.
    let bare = rls.one("messaging", &[("message_type", "marketing")]).await;
    assert_eq!(bare.current_limit, None);
}

/// envoyproxy/ratelimit's way of charging: a refused request is still
/// counted by every descriptor it matched.
#[tokio::test]
async fn every_match_charges_refused_requests() {
    let config = r#"
domain: d
descriptors:
  - key: ip
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: global
    rate_limit: { unit: minute, requests_per_unit: 100 }
"#;
    for (charge, expected) in [(Charge::AllOrNothing, 99), (Charge::EveryMatch, 97)] {
        let mut rls = start_with(
            &[config],
            Options {
                charge,
                ..Options::default()
            },
        )
        .await;
        for _ in 0..3 {
            rls.ask(request(
                "d",
                vec![
                    descriptor(&[("ip", "1.2.3.4")]),
                    descriptor(&[("global", "all")]),
                ],
            ))
            .await;
        }
        let global = rls.one("d", &[("global", "all")]).await;
        assert_eq!(global.limit_remaining, expected - 1, "{charge:?}");
    }
}

/// README example 3: a rule of 0 requests refuses everything.
#[tokio::test]
async fn zero_requests_is_a_blocklist() {
    let mut rls = start(
        r#"
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
"#,
    )
    .await;
    let blocked = rls
        .one("edge_proxy_per_ip", &[("remote_address", "50.0.0.5")])
        .await;
    assert_eq!(blocked.code, Code::OverLimit as i32);
    assert_eq!(blocked.limit_remaining, 0);
    let fine = rls
        .one("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")])
        .await;
    assert!(ok(&fine));
    assert_eq!(fine.limit_remaining, 9);
}

/// README example 5: unlimited; example 6: a shadow rule never refuses.
#[tokio::test]
async fn unlimited_and_shadow_rules() {
    let mut rls = start(
        r#"
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: service
    value: auth-service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: { unit: second, requests_per_unit: 1 }
      - key: user
        value: user-b
        rate_limit: { unit: second, requests_per_unit: 1 }
"#,
    )
    .await;
    let ldap = rls.one("internal", &[("ldap", "x")]).await;
    assert!(ok(&ldap));
    assert_eq!(ldap.limit_remaining, u32::MAX);
    assert_eq!(ldap.current_limit, None);
    let azure = rls.one("internal", &[("azure", "x")]).await;
    assert_eq!(limit_of(&azure), Some((100, MINUTE)));
    for _ in 0..3 {
        let a = rls
            .one(
                "internal",
                &[("service", "auth-service"), ("user", "user-a")],
            )
            .await;
        assert!(ok(&a), "shadow: never over");
    }
    let a = rls
        .one(
            "internal",
            &[("service", "auth-service"), ("user", "user-a")],
        )
        .await;
    assert_eq!(a.limit_remaining, 0, "but counted");
    assert!(ok(&rls
        .one(
            "internal",
            &[("service", "auth-service"), ("user", "user-b")]
        )
        .await));
    assert!(!ok(&rls
        .one(
            "internal",
            &[("service", "auth-service"), ("user", "user-b")]
        )
        .await));
}

/// Global shadow mode: the overall code is OK, the statuses still say
/// which descriptor was over.
#[tokio::test]
async fn global_shadow_mode() {
    let mut rls = start_with(
        &["domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n"],
        Options {
            shadow_mode: true,
            ..Options::default()
        },
    )
    .await;
    rls.one("d", &[("k", "v")]).await;
    let r = rls.ask(request("d", vec![descriptor(&[("k", "v")])])).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
}

/// README example 7: a matched rule's `replaces` drops the named rule.
#[tokio::test]
async fn replaces_drops_the_named_rule() {
    let mut rls = start(
        r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        rate_limit:
          name: specific_limit
          unit: second
          requests_per_unit: 5
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        rate_limit:
          replaces:
            - name: specific_limit
          unit: second
          requests_per_unit: 10
"#,
    )
    .await;
    let one = rls
        .one("example7", &[("key_1", "value_1"), ("user", "bkthomps")])
        .await;
    assert_eq!(limit_of(&one), Some((5, SECOND)));
    assert_eq!(one.current_limit.as_ref().unwrap().name, "specific_limit");
    let r = rls
        .ask(request(
            "example7",
            vec![
                descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]),
                descriptor(&[("key_2", "value_2"), ("user", "bkthomps")]),
            ],
        ))
        .await;
    assert_eq!(r.statuses[0].current_limit, None, "replaced");
    assert_eq!(limit_of(&r.statuses[1]), Some((10, SECOND)));
}

/// README example 4: a rule matches a request exactly as deep as it is;
/// a deeper request finds the nested key-only rule, or nothing.
#[tokio::test]
async fn readme_example_4_depth() {
    let shallow = "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
";
    let nested = "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
";
    let deep = [("key", "value"), ("subkey", "subvalue")];
    let mut rls = start(shallow).await;
    let s = rls.one("example4", &deep).await;
    assert_eq!(s.current_limit, None, "a rule one level up does not match");
    let s = rls.one("example4", &[("key", "value")]).await;
    assert_eq!(
        (limit_of(&s), s.limit_remaining),
        (Some((300, SECOND)), 299)
    );
    let mut rls = start(nested).await;
    let s = rls.one("example4", &deep).await;
    assert_eq!(
        (limit_of(&s), s.limit_remaining),
        (Some((300, SECOND)), 299)
    );
    let s = rls.one("example4", &[("key", "value")]).await;
    assert_eq!(s.current_limit, None, "the parent has no rule of its own");
}

/// README example 8: a key's value rule before its key-only rule; other
/// values get the key-only limit, each its own counter
/// (`detailed_metric` names metrics only).
#[tokio::test]
async fn readme_example_8_value_before_key() {
    let mut rls = start(
        "domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    )
    .await;
    let s = rls.one("example8", &[("key1", "value1")]).await;
    assert_eq!((limit_of(&s), s.limit_remaining), (Some((20, MINUTE)), 19));
    for value in ["unspecified_value", "unspecified_value2"] {
        let s = rls.one("example8", &[("key1", value)]).await;
        assert_eq!((limit_of(&s), s.limit_remaining), (Some((10, MINUTE)), 9));
    }
}

/// README example 10: three levels of keys, and a wildcard value in the
/// middle (`value_to_metric` names metrics only).
#[tokio::test]
async fn readme_example_10_nested_and_wildcard() {
    let mut rls = start_with(
        &[
            "domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
",
            "domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
",
        ],
        Options::default(),
    )
    .await;
    let three = [
        ("route", "draw"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    let s = rls.one("example10", &three).await;
    assert_eq!((limit_of(&s), s.limit_remaining), (Some((60, MINUTE)), 59));
    let other = [
        ("route", "draw"),
        ("http_method", "GET"),
        ("subject_id", "456"),
    ];
    assert_eq!(rls.one("example10", &other).await.limit_remaining, 59);
    let two = rls.one("example10", &three[..2]).await;
    assert_eq!(two.current_limit, None, "too shallow");
    let read = [
        ("user", "alice"),
        ("action", "readFile"),
        ("resource", "r1"),
    ];
    let s = rls.one("example10_wildcard", &read).await;
    assert_eq!((limit_of(&s), s.limit_remaining), (Some((100, MINUTE)), 99));
    let write = [
        ("user", "alice"),
        ("action", "writeFile"),
        ("resource", "r1"),
    ];
    let s = rls.one("example10_wildcard", &write).await;
    assert_eq!(s.current_limit, None, "the wildcard does not match");
}

/// README example 9 and 11: wildcards, each value its own counter, or
/// one shared counter with `share_threshold`.
#[tokio::test]
async fn wildcards_and_share_threshold() {
    let mut rls = start(
        r#"
domain: example9
descriptors:
  - key: path
    value: "/api/*/action"
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: files
    value: "files/*"
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 10 }
"#,
    )
    .await;
    let a = rls.one("example9", &[("path", "/api/123/action")]).await;
    assert_eq!((limit_of(&a), a.limit_remaining), (Some((20, MINUTE)), 19));
    let b = rls.one("example9", &[("path", "/api/456/action")]).await;
    assert_eq!(b.limit_remaining, 19, "a counter per value");
    let none = rls.one("example9", &[("path", "/api/123/other")]).await;
    assert_eq!(none.current_limit, None);
    for f in ["files/a.pdf", "files/b.csv"] {
        for _ in 0..5 {
            assert!(ok(&rls.one("example9", &[("files", f)]).await));
        }
    }
    let c = rls.one("example9", &[("files", "files/c.txt")]).await;
    assert_eq!(c.code, Code::OverLimit as i32, "one shared counter");
}

/// `hits_addend` on the request and per descriptor (0: look, do not
/// charge); a cost above the limit is over.
#[tokio::test]
async fn hits_addend() {
    let mut rls = start("domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n").await;
    let mut r = request("d", vec![descriptor(&[("k", "v")])]);
    r.hits_addend = 4;
    assert_eq!(rls.ask(r).await.statuses[0].limit_remaining, 6);
    let mut look = descriptor(&[("k", "v")]);
    look.hits_addend = Some(UInt64Value { value: 0 });
    let r = rls.ask(request("d", vec![look])).await;
    assert_eq!(r.statuses[0].limit_remaining, 6, "0 hits: nothing charged");
    let mut three = descriptor(&[("k", "v")]);
    three.hits_addend = Some(UInt64Value { value: 3 });
    assert_eq!(
        rls.ask(request("d", vec![three])).await.statuses[0].limit_remaining,
        3
    );
    let mut huge = descriptor(&[("k", "v")]);
    huge.hits_addend = Some(UInt64Value { value: u64::MAX });
    let r = rls.ask(request("d", vec![huge])).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(rls.one("d", &[("k", "v")]).await.limit_remaining, 2);
}

/// The per-descriptor `limit` override replaces the rules, for a known
/// domain; an unset unit is refused.
#[tokio::test]
async fn limit_override() {
    let mut rls = start("domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n").await;
    let mut over = descriptor(&[("k", "v")]);
    over.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: MINUTE,
    });
    let s = &rls.ask(request("d", vec![over.clone()])).await.statuses[0];
    assert_eq!((limit_of(s), s.limit_remaining), (Some((2, MINUTE)), 1));
    let s = &rls
        .ask(request("unknown", vec![over.clone()]))
        .await
        .statuses[0];
    assert_eq!(s.current_limit, None, "unknown domain: no limit");
    over.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: 0,
    });
    let e = rls
        .client
        .should_rate_limit(request("d", vec![over]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

/// Requests without a domain or descriptors are refused by code.
#[tokio::test]
async fn bad_requests() {
    let mut rls = start("domain: d\ndescriptors:\n  - key: k\n").await;
    let e = rls
        .client
        .should_rate_limit(request("", vec![descriptor(&[("k", "v")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("domain"), "{}", e.message());
    let e = rls
        .client
        .should_rate_limit(request("d", vec![]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

/// Every algorithm behind the protocol: a token bucket with a burst, a
/// sliding window log, a leaky bucket.
#[tokio::test]
async fn every_algorithm() {
    let mut rls = start(
        r#"
domain: algos
descriptors:
  - key: fw
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: tb
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 2 }
  - key: swl
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: sliding_window_log }
  - key: swc
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: sliding_window_counter }
  - key: lb
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: leaky_bucket, burst: 2 }
"#,
    )
    .await;
    for (key, admitted) in [("fw", 3), ("tb", 2), ("swl", 3), ("swc", 3), ("lb", 3)] {
        let mut n = 0;
        for _ in 0..6 {
            n += usize::from(ok(&rls.one("algos", &[(key, "x")]).await));
        }
        assert_eq!(n, admitted, "{key}");
    }
}

/// The draft headers from the binding status.
#[tokio::test]
async fn response_headers() {
    let mut rls = start_with(
        &["domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n"],
        Options {
            headers: Headers::Draft,
            ..Options::default()
        },
    )
    .await;
    let r = rls.ask(request("d", vec![descriptor(&[("k", "v")])])).await;
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(headers[0], ("X-RateLimit-Limit".into(), "2".into()));
    assert_eq!(headers[1], ("X-RateLimit-Remaining".into(), "1".into()));
    let reset: u64 = headers[2].1.parse().unwrap();
    assert!((1..=3600).contains(&reset), "{reset}");
}

/// A reload keeps the counts of unchanged rules, and a bad configuration
/// is refused while the old one keeps serving.
#[tokio::test]
async fn hot_reload() {
    let dir = std::env::temp_dir().join(format!("rategate-rls-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("d.yaml");
    let v1 = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n";
    std::fs::write(&file, v1).unwrap();
    let source = server::Source {
        path: dir.clone(),
        merge_domains: false,
    };
    let mut rls = start(v1).await;
    rls.core.reload(source.load().unwrap()).await.unwrap();
    let watcher = server::watch(Arc::clone(&rls.core), source, Duration::from_millis(20));
    assert_eq!(rls.one("d", &[("k", "v")]).await.limit_remaining, 4);
    // A new rule beside the unchanged one: the old counts stay.
    std::fs::write(
        &file,
        format!("{v1}  - key: j\n    rate_limit: {{ unit: hour, requests_per_unit: 7 }}\n"),
    )
    .unwrap();
    wait_for(|| {
        rls.core
            .config()
            .domain("d")
            .unwrap()
            .matching(&[("j", "x")])
            .is_some()
    })
    .await;
    assert_eq!(rls.one("d", &[("k", "v")]).await.limit_remaining, 3);
    assert_eq!(rls.one("d", &[("j", "x")]).await.limit_remaining, 6);
    // A bad change: refused, the old configuration keeps serving.
    std::fs::write(
        &file,
        "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rls.one("d", &[("j", "x")]).await.limit_remaining, 5);
    watcher.abort();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = rls.addr;
}

async fn wait_for(mut done: impl FnMut() -> bool) {
    for _ in 0..250 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not reloaded within 5 s");
}

/// `grpc.health.v1` says SERVING for the service.
#[tokio::test]
async fn health() {
    let rls = start("domain: d\ndescriptors:\n  - key: k\n").await;
    let channel = Channel::from_shared(format!("http://{}", rls.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

/// One counter sent several times in a request is charged once per copy:
/// more copies than the limit are over, and charge nothing.
#[tokio::test]
async fn copies_of_one_descriptor_add_up() {
    let mut rls = start("domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n").await;
    let copies = vec![descriptor(&[("k", "v")]); 4];
    let r = rls.ask(request("d", copies)).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(
        rls.one("d", &[("k", "v")]).await.limit_remaining,
        2,
        "nothing charged"
    );
    let r = rls
        .ask(request("d", vec![descriptor(&[("k", "v")]); 2]))
        .await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(
        rls.one("d", &[("k", "v")]).await.code,
        Code::OverLimit as i32
    );
}

/// A shadow rule that is over holds back nothing: the enforced rules
/// beside it still refuse, and it is not the headers' binding limit.
#[tokio::test]
async fn an_over_shadow_rule_does_not_disable_the_others() {
    let mut rls = start_with(
        &[r#"
domain: d
descriptors:
  - key: trial
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: real
    rate_limit: { unit: minute, requests_per_unit: 3 }
"#],
        Options {
            headers: Headers::Draft,
            ..Options::default()
        },
    )
    .await;
    let mut admitted = 0;
    for _ in 0..10 {
        let r = rls
            .ask(request(
                "d",
                vec![descriptor(&[("trial", "x")]), descriptor(&[("real", "x")])],
            ))
            .await;
        admitted += usize::from(r.overall_code == Code::Ok as i32);
        if admitted == 2 {
            let limit = &r.response_headers_to_add[0];
            assert_eq!(
                (limit.key.as_str(), limit.value.as_str()),
                ("X-RateLimit-Limit", "3")
            );
        }
    }
    assert_eq!(admitted, 3);
}

/// A request refused by a rule of 0 requests, or by a cost no counter
/// can take, charges none of its other limits.
#[tokio::test]
async fn a_request_refused_outright_charges_nothing() {
    let mut rls = start(
        r#"
domain: d
descriptors:
  - key: blocked
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: global
    rate_limit: { unit: minute, requests_per_unit: 10 }
"#,
    )
    .await;
    let mut huge = descriptor(&[("global", "all")]);
    huge.hits_addend = Some(UInt64Value { value: 1 << 40 });
    for descriptors in [
        vec![
            descriptor(&[("blocked", "x")]),
            descriptor(&[("global", "all")]),
        ],
        vec![huge, descriptor(&[("global", "all")])],
    ] {
        let r = rls.ask(request("d", descriptors)).await;
        assert_eq!(r.overall_code, Code::OverLimit as i32);
    }
    assert_eq!(rls.one("d", &[("global", "all")]).await.limit_remaining, 9);
}

/// Rules whose places coincide (key `a_b`, and key `a` with value `b`;
/// domain `x` with key `y.z`, and domain `x.y` with key `z`) keep
/// limiters of their own.
#[tokio::test]
async fn rules_of_one_place_keep_their_own_limits() {
    let mut rls = start_with(
        &[
            "domain: d
descriptors:
  - key: a_b
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: a
    value: b
    rate_limit: { unit: hour, requests_per_unit: 100 }
",
            "domain: x
descriptors:
  - key: y.z
    rate_limit: { unit: hour, requests_per_unit: 1 }
",
            "domain: x.y
descriptors:
  - key: z
    rate_limit: { unit: hour, requests_per_unit: 0 }
",
        ],
        Options::default(),
    )
    .await;
    assert!(ok(&rls.one("d", &[("a_b", "x")]).await));
    let second = rls.one("d", &[("a_b", "x")]).await;
    assert_eq!(second.code, Code::OverLimit as i32, "1 an hour");
    let ab = rls.one("d", &[("a", "b")]).await;
    assert_eq!(ab.limit_remaining, 99, "a counter of its own");
    assert!(
        ok(&rls.one("x", &[("y.z", "v")]).await),
        "not domain x.y's 0"
    );
    let z = rls.one("x.y", &[("z", "v")]).await;
    assert_eq!(z.code, Code::OverLimit as i32);
}

/// Requests larger than any gateway sends are refused by code.
#[tokio::test]
async fn oversized_requests_are_refused() {
    let mut rls = start("domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n").await;
    let too_many = request("d", vec![descriptor(&[("k", "v")]); 257]);
    let long = "x".repeat(4097);
    let too_long = request("d", vec![descriptor(&[("k", long.as_str())])]);
    for r in [too_many, too_long] {
        let e = rls.client.should_rate_limit(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{}", e.message());
    }
    assert_eq!(rls.one("d", &[("k", "v")]).await.limit_remaining, 2);
}
