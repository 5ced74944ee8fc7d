//! Policy-file limiters behind the layer while keys change tiers, and
//! hostile policy files.
#![cfg(all(feature = "axum", feature = "serde"))]

use http::{Request, StatusCode};
use rategate::http::{ClientClass, KeyExtractor, RateLimitLayer, Rule};
use rategate::policy::TierId;
use rategate::policy::config::{PolicyFile, PolicyLimiter};
use rategate::{FixedWindow, KeyedRateLimiter, Quota};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use tower::{Layer, Service, ServiceExt};

fn send(layer: &RateLimitLayer, key: &str) -> StatusCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let request = Request::builder()
        .uri("/")
        .header("x-api-key", key)
        .body(())
        .unwrap();
    rt.block_on(async { service.ready().await?.call(request).await })
        .unwrap()
        .status()
}

const PLANS: &str = r#"
[policies.api]
algorithm = "fixed_window"
quota = "1/h"
key = "header:x-api-key"

[policies.api.tiers]
partner = "100/h"
"#;

/// A key's tier changing between a decision's peek and its check (a plan
/// downgraded by the application's resolver, or `set_tier` / `clear_tier`)
/// does not move the check: it lands on the tier the peek chose, so a
/// refused request is charged nothing.
///
/// Deterministic here: the resolver answers "partner" once (the
/// reservation), then "default" (the check), as a downgrade at that
/// instant would.
#[test]
fn a_tier_change_between_peek_and_check_charges_no_refused_request() {
    let file = PolicyFile::from_toml(PLANS).unwrap();
    // 0: default tier; 1: answer "partner" once, then default.
    let plan = Arc::new(AtomicU8::new(0));
    let resolver_plan = Arc::clone(&plan);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let policy = rt
        .block_on(PolicyLimiter::build(
            file.policy("api").unwrap(),
            Box::new(move |_: &str| {
                if resolver_plan
                    .compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    TierId::new(1)
                } else {
                    TierId::DEFAULT
                }
            }),
        ))
        .unwrap();
    let other = Arc::new(
        KeyedRateLimiter::<String, FixedWindow>::new(Quota::per_hour(1000).unwrap()).unwrap(),
    );
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new(
                "api",
                KeyExtractor::header(http::HeaderName::from_static("x-api-key")),
            )
            .rule(Rule::new("other", Arc::clone(&other)))
            .rule(Rule::from_policy(Arc::new(policy))),
        )
        .build()
        .unwrap();
    // The default tier's one request an hour, spent.
    assert_eq!(send(&layer, "k"), StatusCode::OK);
    assert_eq!(send(&layer, "k"), StatusCode::TOO_MANY_REQUESTS);
    let before = other.peek("k").remaining();
    // The downgrade races the next request.
    plan.store(1, Ordering::SeqCst);
    let status = send(&layer, "k");
    assert_eq!(
        plan.load(Ordering::SeqCst),
        2,
        "the resolver answered partner once"
    );
    let after = other.peek("k").remaining();
    if status == StatusCode::TOO_MANY_REQUESTS {
        assert_eq!(
            after, before,
            "a request answered 429 was charged on rule \"other\""
        );
    }
}

/// Hostile policy files: each must load to a typed error (or a policy),
/// never a panic, and a loaded one must build and decide without panics.
#[test]
fn hostile_policy_files_never_panic() {
    let quotas = [
        "4294967295/1ns",
        "4294967295/1ns burst=4294967295",
        "1/18446744073709551615ns",
        "1/18446744073709551615d",
        "99999999999999999999/s",
        "0/s",
        "-1/s",
        "1/0s",
        "1/0ns",
        "1/-1s",
        "NaN/s",
        "inf/s",
        "1e9/s",
        "1/s burst=0",
        "1/s burst=-1",
        "1/s burst=4294967295",
        "1/s burst=99999999999",
        "1/s delay=4294967295",
        "1/s burst=1 burst=2",
        "1/s nodelay delay=1",
        "1/ s",
        "/s",
        "1/",
        "1/1",
        "r/s",
        "1r/ms",
        "１/s",
        "1/ｓ",
        "1/s\u{0}",
        "1/213503d",
        "1/213504d",
        "4294967295/213503d burst=4294967295",
        "1/1ns burst=4294967295",
    ];
    let algorithms = [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
        "leaky_bucket",
        "gcra",
        "",
        "nope",
    ];
    let backends = [
        "",
        r#"backend = { kind = "memory", max_keys = 0 }"#,
        r#"backend = { kind = "memory", max_keys = 18446744073709551615 }"#,
        r#"backend = { kind = "memory", max_keys = -1 }"#,
        r#"backend = { kind = "memory", sweep_interval_ms = 0 }"#,
        r#"backend = { kind = "memory", sweep_interval_ms = 18446744073709551615 }"#,
        r#"backend = { kind = "memory", sweep_interval_ms = 9223372036854775807 }"#,
        r#"backend = { kind = "memory", sweep_interval_ms = -5 }"#,
        r#"backend = { kind = "memory", sweep_interval_ms = 1.5 }"#,
        r#"backend = { kind = "memory", max_keys = 1, bogus = 1 }"#,
        r#"backend = { kind = "nope" }"#,
        r#"backend = { }"#,
        r#"backend = "memory""#,
    ];
    let keys = [
        "ip",
        "global",
        "bearer",
        "header:x-api-key",
        "header:",
        "header:bad name",
        "header:\u{e9}",
        "user",
        "",
    ];
    let long_name = "p".repeat(100_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut files = Vec::new();
    for quota in quotas {
        for algorithm in algorithms {
            files.push(format!(
                "[policies.a]\nalgorithm = {algorithm:?}\nquota = {quota:?}\nkey = \"ip\"\n"
            ));
        }
    }
    for backend in backends {
        for key in keys {
            files.push(format!(
                "[policies.a]\nquota = \"5/s\"\nkey = {key:?}\n{backend}\n"
            ));
        }
    }
    files.extend([
        String::new(),
        "policies = 1".to_string(),
        "[policies]".to_string(),
        "[policies.a]".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a]\nquota = \"6/s\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\nquota = \"6/s\"\n".to_string(),
        "[policies.a]\nquota = 5\nkey = \"ip\"\n".to_string(),
        "[policies.a]\nquota = nan\nkey = \"ip\"\n".to_string(),
        "[policies.a]\nquota = inf\nkey = \"ip\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\nshadow = \"yes\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\nunknown = 1\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a.tiers]\ndefault = \"1/s\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a.tiers]\n\"\" = \"1/s\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a.tiers]\nx = \"0/s\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a.overrides]\nk = \"missing\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a.overrides]\nk = \"default\"\n".to_string(),
        "[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a.overrides]\nk = 1\n".to_string(),
        format!("[policies.{long_name}]\nquota = \"5/s\"\nkey = \"ip\"\n"),
        format!("[policies.a]\nquota = \"5/s\"\nkey = \"header:{long_name}\"\n"),
        format!("[policies.a]\nquota = \"5/s\"\nkey = \"ip\"\n[policies.a.tiers]\n{long_name} = \"1/s\"\n"),
        "[policies.\"a\\\"b\"]\nquota = \"5/s\"\nkey = \"ip\"\n".to_string(),
        "[policies.\"\"]\nquota = \"5/s\"\nkey = \"ip\"\n".to_string(),
        "[policies.\"\u{202e}evil\\n\\r\"]\nquota = \"5/s\"\nkey = \"global\"\n".to_string(),
        "[[a]]\n".repeat(10_000),
        format!("x = {}1{}\n", "[".repeat(5_000), "]".repeat(5_000)),
    ]);
    let mut panics = Vec::new();
    let built = std::cell::Cell::new(0usize);
    for text in &files {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let Ok(file) = PolicyFile::from_toml(text) else {
                return;
            };
            let names: Vec<String> = file.policies().iter().map(|p| p.name.clone()).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let Ok(builder) = rt.block_on(RateLimitLayer::builder().policies(&file, &names)) else {
                return;
            };
            let Ok(layer) = builder.headers_on_allowed(true).build() else {
                return;
            };
            built.set(built.get() + 1);
            let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
                Ok::<_, Infallible>(http::Response::new(()))
            }));
            for _ in 0..3 {
                let mut request = Request::builder()
                    .uri("/")
                    .header("x-api-key", "k")
                    .header("authorization", "Bearer t")
                    .body(())
                    .unwrap();
                request
                    .extensions_mut()
                    .insert(std::net::SocketAddr::from(([192, 0, 2, 1], 1234)));
                let _ = rt.block_on(async { service.ready().await?.call(request).await });
            }
        }));
        if outcome.is_err() {
            panics.push(text.chars().take(200).collect::<String>());
        }
    }
    assert!(
        panics.is_empty(),
        "{} files panicked: {panics:#?}",
        panics.len()
    );
    eprintln!(
        "{} of {} hostile files built a layer",
        built.get(),
        files.len()
    );
    assert!(built.get() > 20, "the battery exercised few layers");
}

/// The realistic form of the tier race above: the application moves a key
/// between tiers at run time (`set_tier` / `clear_tier`, a plan upgrade and
/// its undo) while the key's requests are decided. Every 429 must leave
/// rule "other" untouched: what "other" was charged is what was admitted.
#[test]
fn set_tier_racing_requests_charges_no_refused_request() {
    use rategate::policy::config::TierLimiters;
    let file = PolicyFile::from_toml(PLANS).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let policy = Arc::new(
        rt.block_on(PolicyLimiter::build(
            file.policy("api").unwrap(),
            Box::new(|_: &str| TierId::DEFAULT),
        ))
        .unwrap(),
    );
    let other = Arc::new(
        KeyedRateLimiter::<String, FixedWindow>::new(Quota::per_hour(1_000_000_000).unwrap())
            .unwrap(),
    );
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new(
                "api",
                KeyExtractor::header(http::HeaderName::from_static("x-api-key")),
            )
            .rule(Rule::new("other", Arc::clone(&other)))
            .rule(Rule::from_policy(Arc::clone(&policy))),
        )
        .build()
        .unwrap();
    // The default tier (1/h) spent for "k"; partner (100/h) is fresh.
    assert_eq!(send(&layer, "k"), StatusCode::OK);
    assert_eq!(1_000_000_000 - other.peek_n("k", 0).unwrap().remaining(), 1);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let toggler = {
        let (policy, stop) = (Arc::clone(&policy), Arc::clone(&stop));
        std::thread::spawn(move || {
            let TierLimiters::Memory(tiers) = policy.limiters() else {
                unreachable!()
            };
            while !stop.load(Ordering::Relaxed) {
                tiers.set_tier("k".to_string(), TierId::new(1)).unwrap();
                tiers.clear_tier("k");
            }
        })
    };
    let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let mut admitted = 1u32; // the first request above
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut sent = 0;
    while std::time::Instant::now() < deadline && sent < 200_000 {
        sent += 1;
        let request = Request::builder()
            .uri("/")
            .header("x-api-key", "k")
            .body(())
            .unwrap();
        let status = rt
            .block_on(async { service.ready().await?.call(request).await })
            .unwrap()
            .status();
        admitted += u32::from(status == StatusCode::OK);
        let used = 1_000_000_000 - other.peek_n("k", 0).unwrap().remaining();
        if used != admitted {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    toggler.join().unwrap();
    let used = 1_000_000_000 - other.peek_n("k", 0).unwrap().remaining();
    assert_eq!(
        used, admitted,
        "\"other\" charged {used} for {admitted} admitted requests ({sent} sent)"
    );
}
