//! Per-key quotas and tiers on a manual clock: GitHub's anonymous 60/h
//! against signed-in 5,000/h, a key promoted (and demoted) mid-stream,
//! overrides over the resolver, ids beyond the last tier, and, with a real
//! `redis-server` (feature `redis`), tiers of Redis limiters.

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

use rategate::policy::{TierError, TierId, Tiered};
use rategate::{AlgorithmKind, AnyAlgorithm, KeyedRateLimiter, ManualClock, Quota, TokenBucket};
use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

const ANONYMOUS: TierId = TierId::new(0);
const SIGNED_IN: TierId = TierId::new(1);

fn tier(clock: &ManualClock, quota: &str) -> KeyedRateLimiter<String, TokenBucket, ManualClock> {
    KeyedRateLimiter::builder(quota.parse().unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn passed(n: usize, mut check: impl FnMut() -> bool) -> usize {
    (0..n).filter(|_| check()).count()
}

type SignedIn = Arc<RwLock<HashSet<String>>>;
type GitHub = Tiered<
    KeyedRateLimiter<String, TokenBucket, ManualClock>,
    Box<dyn Fn(&str) -> TierId + Send + Sync>,
>;

/// GitHub's tiers: anonymous 60/h, signed in 5,000/h; a key is signed in
/// while it is in the returned set.
fn github() -> (GitHub, SignedIn, ManualClock) {
    let clock = ManualClock::new();
    let signed_in: Arc<RwLock<HashSet<String>>> = Arc::default();
    let users = Arc::clone(&signed_in);
    let limiter = Tiered::new(
        [
            ("anonymous", tier(&clock, "60/h")),
            ("signed_in", tier(&clock, "5000/h")),
        ],
        Box::new(move |key: &str| {
            if users.read().unwrap().contains(key) {
                SIGNED_IN
            } else {
                ANONYMOUS
            }
        }) as Box<dyn Fn(&str) -> TierId + Send + Sync>,
    )
    .unwrap();
    (limiter, signed_in, clock)
}

#[test]
fn anonymous_60_an_hour_signed_in_5000() {
    let (limiter, signed_in, clock) = github();
    assert_eq!(limiter.id("signed_in"), Some(SIGNED_IN));
    signed_in.write().unwrap().insert("alice".into());

    assert_eq!(passed(100, || limiter.check("10.0.0.1").is_allowed()), 60);
    assert_eq!(passed(6000, || limiter.check("alice").is_allowed()), 5000);
    // Another anonymous key has its own 60.
    let d = limiter.check("10.0.0.2");
    assert_eq!((d.limit(), d.remaining()), (60, 59));
    // An hour later both are full again.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(passed(100, || limiter.check("10.0.0.1").is_allowed()), 60);
    assert_eq!(passed(6000, || limiter.check("alice").is_allowed()), 5000);
}

#[test]
fn a_key_promoted_mid_stream_gets_the_new_quota_on_its_next_check() {
    let (limiter, signed_in, clock) = github();
    // Anonymous: 60 pass, the 61st is denied.
    assert_eq!(passed(60, || limiter.check("bob").is_allowed()), 60);
    assert!(!limiter.check("bob").is_allowed());
    clock.advance(Duration::from_secs(60));
    // Signs in: the very next check is in the signed-in tier, afresh.
    signed_in.write().unwrap().insert("bob".into());
    assert_eq!(limiter.tier_of("bob"), SIGNED_IN);
    let d = limiter.check("bob");
    assert!(d.is_allowed());
    assert_eq!((d.limit(), d.remaining()), (5000, 4999));
    assert_eq!(passed(5000, || limiter.check("bob").is_allowed()), 4999);
    // Signs out a minute later: back in the anonymous tier, whose usage
    // (60 at t = 0) is still there: two slots have refilled in two minutes
    // at 60/h (one a minute), so two pass now, not a fresh 60.
    clock.advance(Duration::from_secs(60));
    signed_in.write().unwrap().remove("bob");
    assert_eq!(passed(10, || limiter.check("bob").is_allowed()), 2);
    // Each tier keeps its own state: both hold bob.
    assert_eq!(limiter.len(), 2);
}

#[test]
fn overrides_take_precedence_and_can_be_cleared() {
    let clock = ManualClock::new();
    // No resolver: every key is anonymous unless overridden.
    let limiter = Tiered::new(
        [
            ("anonymous", tier(&clock, "2/h")),
            ("signed_in", tier(&clock, "5/h")),
            ("partner", tier(&clock, "10/h")),
        ],
        ANONYMOUS,
    )
    .unwrap();
    assert_eq!(limiter.check("acme").limit(), 2);
    limiter
        .set_tier("acme".to_string(), TierId::new(2))
        .unwrap();
    assert_eq!(limiter.check("acme").limit(), 10);
    assert_eq!(limiter.check("other").limit(), 2);
    assert!(limiter.clear_tier("acme"));
    assert!(!limiter.clear_tier("acme"));
    assert_eq!(limiter.check("acme").limit(), 2);
    assert_eq!(
        limiter.set_tier("acme".to_string(), TierId::new(3)),
        Err(TierError::UnknownTier(TierId::new(3)))
    );
}

#[test]
fn an_id_beyond_the_last_tier_means_the_first() {
    let clock = ManualClock::new();
    let limiter = Tiered::new(
        [("a", tier(&clock, "3/s")), ("b", tier(&clock, "7/s"))],
        |_: &str| TierId::new(9),
    )
    .unwrap();
    assert_eq!(limiter.check("k").limit(), 3);
}

#[test]
fn tiers_need_distinct_names_and_at_least_one() {
    let clock = ManualClock::new();
    let dup = Tiered::<_, _, String>::new(
        [("a", tier(&clock, "3/s")), ("a", tier(&clock, "7/s"))],
        ANONYMOUS,
    );
    assert_eq!(dup.err(), Some(TierError::DuplicateName("a".into())));
    let none = Tiered::<KeyedRateLimiter<String>, TierId, String>::new(
        Vec::<(String, KeyedRateLimiter<String>)>::new(),
        ANONYMOUS,
    );
    assert_eq!(none.err(), Some(TierError::NoTiers));
}

#[test]
fn tiers_may_use_different_algorithms_chosen_at_run_time() {
    let clock = ManualClock::new();
    let build = |kind, quota: &str| {
        let q: Quota = quota.parse().unwrap();
        KeyedRateLimiter::<String, AnyAlgorithm>::builder(q)
            .clock(clock.clone())
            .algorithm(AnyAlgorithm::new(kind, &q).unwrap())
            .build()
            .unwrap()
    };
    let limiter = Tiered::new(
        [
            ("free", build(AlgorithmKind::FixedWindow, "3/m")),
            ("paid", build(AlgorithmKind::SlidingWindowLog, "5/m")),
        ],
        |key: &str| {
            if key.starts_with("paid:") {
                TierId::new(1)
            } else {
                TierId::new(0)
            }
        },
    )
    .unwrap();
    assert_eq!(passed(10, || limiter.check("x").is_allowed()), 3);
    assert_eq!(passed(10, || limiter.check("paid:y").is_allowed()), 5);
    clock.advance(Duration::from_secs(61));
    assert_eq!(limiter.sweep(), 2);
    assert!(limiter.is_empty());
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::redis_server::RedisServer;
    use rategate::redis::{RedisLimiter, Source, TimeSource};

    #[test]
    fn redis_tiers_resolve_per_key_and_a_promotion_starts_afresh() {
        let server = RedisServer::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let clock = ManualClock::new();
            let build = |quota: &str| {
                RedisLimiter::<TokenBucket, _>::builder(quota.parse().unwrap())
                    .url(&server.url())
                    .prefix("tiers")
                    .time(TimeSource::Client(clock.clone()))
                    .local_cache(false)
                    .build()
            };
            let promoted = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = Arc::clone(&promoted);
            let limiter = Tiered::new(
                [
                    ("anonymous", build("3/h").await.unwrap()),
                    ("signed_in", build("10/h").await.unwrap()),
                ],
                move |_: &str| {
                    if flag.load(std::sync::atomic::Ordering::Relaxed) {
                        SIGNED_IN
                    } else {
                        ANONYMOUS
                    }
                },
            )
            .unwrap();
            let mut allowed = 0;
            for _ in 0..5 {
                let d = limiter.check("carol").await.unwrap();
                assert_eq!(d.source(), Source::Redis);
                allowed += usize::from(d.is_allowed());
            }
            assert_eq!(allowed, 3);
            promoted.store(true, std::sync::atomic::Ordering::Relaxed);
            let d = limiter.check("carol").await.unwrap();
            assert!(d.is_allowed());
            assert_eq!((d.decision().limit(), d.decision().remaining()), (10, 9));
        });
    }
}
