//! Errors print each cause once: a message that includes the wrapped
//! error's text does not also return it from `source()` (so `anyhow` and
//! `{:#}` chains do not print it twice).

use rategate::{AnyAlgorithm, Quota};
use std::error::Error;

fn assert_printed_once(err: &dyn Error) {
    let mut seen = vec![err.to_string()];
    let mut next = err.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        for earlier in &seen {
            assert!(
                !earlier.contains(&text),
                "{text:?} printed again in {earlier:?}"
            );
        }
        seen.push(text);
        next = cause.source();
    }
}

#[test]
fn algorithm_errors_print_their_cause_once() {
    let quota = Quota::per_second(10).unwrap();
    let unknown = AnyAlgorithm::from_name("token_buckett", &quota).unwrap_err();
    assert!(unknown.to_string().contains("token_buckett"));
    assert_printed_once(&unknown);
    let too_big: Quota = "10r/s burst=9000".parse().unwrap();
    let refused = AnyAlgorithm::from_name("leaky_bucket", &too_big).unwrap_err();
    assert!(refused.to_string().contains("leaky_bucket"), "{refused}");
    assert_printed_once(&refused);
}

#[cfg(feature = "sim")]
#[test]
fn simulator_errors_print_their_cause_once() {
    let bad = "token:0/s".parse::<rategate::sim::LimitSpec>().unwrap_err();
    assert_printed_once(&bad);
}

#[cfg(all(feature = "http", feature = "serde"))]
#[tokio::test]
async fn policy_layer_errors_print_their_cause_once() {
    use rategate::http::RateLimitLayer;
    use rategate::policy::config::PolicyFile;
    let file = PolicyFile::from_toml("[policies.a]\nquota = \"10/s\"\nkey = \"user\"").unwrap();
    let err = RateLimitLayer::from_policies(&file, &["a"])
        .await
        .unwrap_err();
    assert_printed_once(&err);
    let err = RateLimitLayer::from_policies(&file, &["missing"])
        .await
        .unwrap_err();
    assert_printed_once(&err);
}
