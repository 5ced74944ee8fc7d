//! The `tracing` events of `src/metrics.rs` (feature `tracing`), seen by a
//! small recording subscriber: a `debug` event per enforced denial and a
//! `trace` event per shadow denial, with the policy and the key; nothing
//! for admissions; and with feature `redis` a `warn` event per Redis
//! failure.

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

use rategate::policy::TierId;
use rategate::policy::config::{PolicyFile, PolicyLimiter};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber, span};

/// One event: its level and its fields as text.
type Recorded = (Level, Vec<(String, String)>);

/// Records every event of target `rategate`.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Recorded>>>);

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "rategate"
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, fields.0));
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

fn field<'a>(event: &'a Recorded, name: &str) -> Option<&'a str> {
    event
        .1
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn denials_are_debug_events_and_shadow_denials_trace_events() {
    let file = PolicyFile::from_toml(
        "[policies.api]\nquota = \"2/h\"\n[policies.dry]\nquota = \"1/h\"\nshadow = true",
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let build = |name| {
        let policy = file.policy(name).unwrap();
        rt.block_on(PolicyLimiter::build(
            policy,
            Box::new(|_: &str| TierId::DEFAULT),
        ))
        .unwrap()
    };
    let (api, dry) = (build("api"), build("dry"));
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || {
        for _ in 0..3 {
            api.try_check_n("10.0.0.1", 1).unwrap().unwrap();
        }
        for _ in 0..2 {
            dry.try_check_n("10.0.0.2", 1).unwrap().unwrap();
        }
    });
    let events = recorder.0.lock().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, Level::DEBUG);
    assert_eq!(field(&events[0], "policy"), Some("api"));
    assert_eq!(field(&events[0], "key"), Some("10.0.0.1"));
    assert_eq!(events[1].0, Level::TRACE);
    assert_eq!(field(&events[1], "policy"), Some("dry"));
    assert!(field(&events[1], "message").is_some_and(|m| m.contains("shadow")));
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_failure_is_a_warn_event() {
    use rategate::redis::{RedisLimiter, Source};
    use rategate::{Quota, TokenBucket};
    use std::time::Duration;

    let mut server = redis_server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt.block_on(async {
            let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_hour(10).unwrap())
                .url(&server.url())
                .timeout(Duration::from_millis(100))
                .local_cache(false)
                .build()
                .await
                .unwrap();
            assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
            server.kill();
            assert_eq!(limiter.check("k").await.unwrap().source(), Source::FailOpen);
        })
    });
    let events = recorder.0.lock().unwrap();
    let warns: Vec<_> = events.iter().filter(|e| e.0 == Level::WARN).collect();
    assert_eq!(warns.len(), 1, "{events:?}");
    assert!(field(warns[0], "error").is_some(), "{events:?}");
}
