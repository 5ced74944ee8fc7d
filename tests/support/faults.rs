//! The fault harness: two application nodes (two limiters of one kind,
//! as two app servers would hold) decide a steady load on a few keys while
//! a fault hits Redis: a master killed, hung, restarted, paused, cut off.
//! Every decision is recorded; afterwards the same requests, at the same
//! times, go through one exact in-memory limiter of the same algorithm,
//! and the difference is what the fault let through (or held back).
//!
//! Loopback only, bounded in time: a run lasts `before + fault + after`
//! plus the topology's start, and every check is cut off at 5 s.
#![allow(dead_code)]

use crate::redis_topology::{Blackhole, ClusterWithReplicas, Node, SentinelSetup};
use rategate::policy::StoreDown;
use rategate::redis::{LeasedLimiter, RedisLimiter, Sentinel, Source, SyncedLimiter};
use rategate::{
    AlgorithmKind, AnyAlgorithm, Clock, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock,
    Quota, SlidingWindowCounter, SlidingWindowLog, TokenBucket, UnixClock,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What happens to Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Sentinel: `kill -9` of the master; a replica is promoted.
    KillMaster,
    /// Sentinel: the master stops (`SIGSTOP`: a hang without RST) for the
    /// fault's length, then resumes; the sentinels fail over meanwhile.
    Hang,
    /// One server without persistence: `kill -9`, restarted at once,
    /// empty.
    RestartEmpty,
    /// One server with `appendfsync always`: `kill -9`, restarted at once,
    /// with its data.
    RestartPersistent,
    /// Sentinel: `CLIENT PAUSE` of the master for the fault's length.
    ClientPause,
    /// One server behind a proxy that drops every byte for the fault's
    /// length (a partition of the application from Redis), then forwards
    /// new connections again.
    Partition,
    /// Cluster of 3 masters and 3 replicas: `kill -9` of the master of
    /// the first key's slot; its replica takes the slots over.
    ClusterKillMaster,
}

impl Fault {
    pub const ALL: [Fault; 7] = [
        Fault::KillMaster,
        Fault::Hang,
        Fault::ClientPause,
        Fault::Partition,
        Fault::RestartEmpty,
        Fault::RestartPersistent,
        Fault::ClusterKillMaster,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::KillMaster => "kill -9 master (Sentinel)",
            Fault::Hang => "SIGSTOP master (Sentinel)",
            Fault::RestartEmpty => "restart, no persistence",
            Fault::RestartPersistent => "restart, AOF always",
            Fault::ClientPause => "CLIENT PAUSE master (Sentinel)",
            Fault::Partition => "partition (blackhole)",
            Fault::ClusterKillMaster => "kill -9 master (Cluster)",
        }
    }

    pub fn parse(name: &str) -> Option<Fault> {
        Some(match name {
            "kill" => Fault::KillMaster,
            "hang" => Fault::Hang,
            "restart-empty" => Fault::RestartEmpty,
            "restart-aof" => Fault::RestartPersistent,
            "pause" => Fault::ClientPause,
            "partition" => Fault::Partition,
            "cluster-kill" => Fault::ClusterKillMaster,
            _ => return None,
        })
    }
}

/// Which limiter the application nodes hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `RedisLimiter` of this algorithm, `StoreDown::LocalShare(1/nodes)`.
    Redis(AlgorithmKind),
    /// `SyncedLimiter<TokenBucket>`, interval 100 ms, `local_share(1/nodes)`.
    Synced,
    /// `LeasedLimiter`, interval 100 ms, `wait_for_replicas(n)` with `n`
    /// every replica a master has (2 under Sentinel, 1 in the Cluster).
    Leased,
    /// The same with `wait_for_replicas(1)` where Redis has replicas.
    LeasedOneReplica,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Redis(AlgorithmKind::TokenBucket),
        Kind::Redis(AlgorithmKind::LeakyBucket),
        Kind::Redis(AlgorithmKind::FixedWindow),
        Kind::Redis(AlgorithmKind::SlidingWindowLog),
        Kind::Redis(AlgorithmKind::SlidingWindowCounter),
        Kind::Synced,
        Kind::Leased,
        Kind::LeasedOneReplica,
    ];

    pub fn name(self) -> String {
        match self {
            Kind::Redis(a) => format!("RedisLimiter {a}"),
            Kind::Synced => "SyncedLimiter token_bucket".into(),
            Kind::Leased => "LeasedLimiter, WAIT all replicas".into(),
            Kind::LeasedOneReplica => "LeasedLimiter, WAIT 1 replica".into(),
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "synced" => Kind::Synced,
            "leased" => Kind::Leased,
            "leased-1" => Kind::LeasedOneReplica,
            other => Kind::Redis(other.parse().ok()?),
        })
    }

    /// The algorithm of the exact reference.
    fn reference(self) -> AlgorithmKind {
        match self {
            Kind::Redis(a) => a,
            Kind::Synced => AlgorithmKind::TokenBucket,
            // Leases are fixed-window budgets.
            Kind::Leased | Kind::LeasedOneReplica => AlgorithmKind::FixedWindow,
        }
    }
}

/// The load and the timeline.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Application nodes (limiters), each with `tasks / nodes` tasks.
    pub nodes: usize,
    pub tasks: usize,
    pub keys: usize,
    /// Requests per second offered over all tasks, spread evenly.
    pub offered: u32,
    /// Each key's quota, per second.
    pub limit: u32,
    /// Steady load before the fault, the fault's length (hang, pause,
    /// partition; a restart's downtime), and the time observed after it.
    pub before: Duration,
    pub fault: Duration,
    pub after: Duration,
    /// Each Redis call's timeout.
    pub timeout: Duration,
}

impl Plan {
    /// The example's plan: 2 nodes, 16 tasks, 8 keys at 100/s each,
    /// 2,000 requests/s offered (2.5 times the limit), 2 s + 3 s + 4 s.
    pub fn full() -> Plan {
        Plan {
            nodes: 2,
            tasks: 16,
            keys: 8,
            offered: 2_000,
            limit: 100,
            before: Duration::from_secs(2),
            fault: Duration::from_secs(3),
            after: Duration::from_secs(4),
            timeout: Duration::from_millis(200),
        }
    }

    /// The test suite's: shorter, the same shape.
    pub fn quick() -> Plan {
        Plan {
            before: Duration::from_secs(1),
            fault: Duration::from_secs(2),
            after: Duration::from_secs(4),
            ..Plan::full()
        }
    }
}

/// One fault against one limiter.
#[derive(Clone, Debug)]
pub struct Row {
    pub fault: Fault,
    pub kind: Kind,
    pub requests: usize,
    pub admitted: usize,
    /// What one exact limiter admits of the same requests.
    pub reference: usize,
    /// `admitted - reference` over keys and seconds where it is positive:
    /// admitted over the limit.
    pub over: usize,
    /// The largest of those for one key in one second.
    pub worst_second_over: usize,
    /// `reference - admitted` where positive: held back below the limit.
    pub under: usize,
    /// Decisions made by the store-down policy (Redis limiter) .
    pub store_down: usize,
    /// Checks that returned an error, and Redis round trips that failed
    /// (the stats' errors).
    pub errors: u64,
    /// From the fault's start until the last decision not made by Redis
    /// (the Redis limiter) or the last failed round trip (synced, leased);
    /// `None` if none failed.
    pub recovered_after: Option<Duration>,
    /// Check latency from the fault's start to its recovery (or 1 s).
    pub p99_during: Duration,
    pub max_latency: Duration,
    /// Checks still unanswered after 5 s, and tasks that panicked.
    pub hung: usize,
    pub panics: usize,
}

/// One decision.
#[derive(Clone, Copy)]
struct Record {
    /// Since the run's start.
    at: Duration,
    /// Unix time, nanoseconds.
    unix: u64,
    key: usize,
    allowed: bool,
    store_down: bool,
    error: bool,
    hung: bool,
    latency: Duration,
}

/// Redis as the fault needs it.
enum Topology {
    Sentinel(SentinelSetup),
    Single(Node, Option<Blackhole>),
    Cluster(ClusterWithReplicas),
}

impl Topology {
    fn start(fault: Fault) -> Topology {
        match fault {
            Fault::KillMaster | Fault::Hang | Fault::ClientPause => {
                Topology::Sentinel(SentinelSetup::start())
            }
            Fault::RestartEmpty => Topology::Single(Node::start(&[]), None),
            Fault::RestartPersistent => Topology::Single(
                Node::start(&["--appendonly", "yes", "--appendfsync", "always"]),
                None,
            ),
            Fault::Partition => {
                let node = Node::start(&[]);
                let proxy = Blackhole::start(node.port());
                Topology::Single(node, Some(proxy))
            }
            Fault::ClusterKillMaster => Topology::Cluster(ClusterWithReplicas::start()),
        }
    }

    /// The replicas each master has.
    fn replicas(&self) -> u32 {
        match self {
            Topology::Sentinel(_) => 2,
            Topology::Single(..) => 0,
            Topology::Cluster(_) => 1,
        }
    }
}

/// The limiters of the application nodes.
enum Limiters {
    Redis(Vec<AnyRedis>),
    Synced(Vec<SyncedLimiter<TokenBucket>>),
    Leased(Vec<LeasedLimiter>),
}

enum AnyRedis {
    TokenBucket(RedisLimiter<TokenBucket>),
    LeakyBucket(RedisLimiter<LeakyBucket>),
    FixedWindow(RedisLimiter<FixedWindow>),
    SlidingWindowLog(RedisLimiter<SlidingWindowLog>),
    SlidingWindowCounter(RedisLimiter<SlidingWindowCounter>),
}

macro_rules! connect {
    ($builder:expr, $topology:expr) => {
        match $topology {
            Topology::Sentinel(setup) => {
                $builder.sentinel(Sentinel::new(setup.master_name(), &setup.sentinel_urls()))
            }
            Topology::Single(node, None) => $builder.url(&node.url()),
            Topology::Single(_, Some(proxy)) => $builder.url(&proxy.url()),
            Topology::Cluster(cluster) => $builder.cluster(&cluster.urls()),
        }
    };
}

macro_rules! redis_limiter {
    ($variant:ident, $alg:ty, $quota:expr, $topology:expr, $plan:expr) => {{
        let builder = RedisLimiter::<$alg>::builder($quota);
        let limiter = connect!(builder, $topology)
            .prefix("faults")
            .timeout($plan.timeout)
            .store_down(StoreDown::LocalShare(1.0 / $plan.nodes as f64))
            .build()
            .await
            .expect("a Redis limiter");
        AnyRedis::$variant(limiter)
    }};
}

impl Limiters {
    async fn build(kind: Kind, topology: &Topology, plan: &Plan) -> Limiters {
        let quota = Quota::per_second(plan.limit).unwrap();
        let share = 1.0 / plan.nodes as f64;
        match kind {
            Kind::Redis(algorithm) => {
                let mut nodes = Vec::new();
                for _ in 0..plan.nodes {
                    nodes.push(match algorithm {
                        AlgorithmKind::LeakyBucket => {
                            redis_limiter!(LeakyBucket, LeakyBucket, quota, topology, plan)
                        }
                        AlgorithmKind::FixedWindow => {
                            redis_limiter!(FixedWindow, FixedWindow, quota, topology, plan)
                        }
                        AlgorithmKind::SlidingWindowLog => {
                            redis_limiter!(
                                SlidingWindowLog,
                                SlidingWindowLog,
                                quota,
                                topology,
                                plan
                            )
                        }
                        AlgorithmKind::SlidingWindowCounter => redis_limiter!(
                            SlidingWindowCounter,
                            SlidingWindowCounter,
                            quota,
                            topology,
                            plan
                        ),
                        _ => redis_limiter!(TokenBucket, TokenBucket, quota, topology, plan),
                    });
                }
                Limiters::Redis(nodes)
            }
            Kind::Synced => {
                let mut nodes = Vec::new();
                for _ in 0..plan.nodes {
                    let builder =
                        SyncedLimiter::<TokenBucket>::builder(quota).clock(shared_clock());
                    nodes.push(
                        connect!(builder, topology)
                            .prefix("faults")
                            .interval(Duration::from_millis(100))
                            .timeout(plan.timeout)
                            .local_share(share)
                            .build()
                            .await
                            .expect("a synced limiter"),
                    );
                }
                Limiters::Synced(nodes)
            }
            Kind::Leased | Kind::LeasedOneReplica => {
                let replicas = match kind {
                    Kind::Leased => topology.replicas(),
                    _ => topology.replicas().min(1),
                };
                let mut nodes = Vec::new();
                for _ in 0..plan.nodes {
                    let builder = LeasedLimiter::builder(quota).clock(shared_clock());
                    nodes.push(
                        connect!(builder, topology)
                            .prefix("faults")
                            .interval(Duration::from_millis(100))
                            .timeout(plan.timeout)
                            .wait_for_replicas(replicas)
                            .build()
                            .await
                            .expect("a leased limiter"),
                    );
                }
                Limiters::Leased(nodes)
            }
        }
    }

    /// Node `node` decides one request for `key`: allowed, by the
    /// store-down policy, an error.
    async fn check(&self, node: usize, key: &str) -> (bool, bool, bool) {
        let redis = |d: Result<rategate::redis::RedisDecision, rategate::CheckError>| match d {
            Ok(d) => (
                d.is_allowed(),
                !matches!(d.source(), Source::Redis | Source::LocalCache),
                false,
            ),
            Err(_) => (false, false, true),
        };
        match self {
            Limiters::Redis(nodes) => match &nodes[node] {
                AnyRedis::TokenBucket(l) => redis(l.check(key).await),
                AnyRedis::LeakyBucket(l) => redis(l.check(key).await),
                AnyRedis::FixedWindow(l) => redis(l.check(key).await),
                AnyRedis::SlidingWindowLog(l) => redis(l.check(key).await),
                AnyRedis::SlidingWindowCounter(l) => redis(l.check(key).await),
            },
            Limiters::Synced(nodes) => (nodes[node].check(key).is_allowed(), false, false),
            Limiters::Leased(nodes) => (nodes[node].check(key).is_allowed(), false, false),
        }
    }

    /// Failed round trips so far, over all nodes.
    fn errors(&self) -> u64 {
        match self {
            Limiters::Redis(nodes) => nodes
                .iter()
                .map(|n| match n {
                    AnyRedis::TokenBucket(l) => l.stats().errors,
                    AnyRedis::LeakyBucket(l) => l.stats().errors,
                    AnyRedis::FixedWindow(l) => l.stats().errors,
                    AnyRedis::SlidingWindowLog(l) => l.stats().errors,
                    AnyRedis::SlidingWindowCounter(l) => l.stats().errors,
                })
                .sum(),
            Limiters::Synced(nodes) => nodes.iter().map(|n| n.stats().errors).sum(),
            Limiters::Leased(nodes) => nodes.iter().map(|n| n.stats().errors).sum(),
        }
    }

    async fn shutdown(self) {
        match self {
            Limiters::Redis(_) => {}
            Limiters::Synced(nodes) => {
                for n in nodes {
                    n.stop().await;
                }
            }
            Limiters::Leased(nodes) => {
                for n in nodes {
                    n.stop().await;
                }
            }
        }
    }
}

/// The one clock of every application node and of the records: the
/// limiters' windows and the seconds the records are counted in fall at
/// the same instants. (Nodes with clocks apart by `d` can each admit in a
/// window the other has closed: up to `d` times the rate over a window's
/// edge. That is the deployment's clock skew, not a fault's effect.)
fn shared_clock() -> UnixClock {
    static CLOCK: std::sync::OnceLock<UnixClock> = std::sync::OnceLock::new();
    CLOCK.get_or_init(UnixClock::new).clone()
}

fn unix_nanos() -> u64 {
    shared_clock().now()
}

/// Injects `fault` (a blocking thread: the topology's controls block).
fn inject(fault: Fault, topology: &mut Topology, length: Duration, first_key: &str) {
    match (fault, topology) {
        (Fault::KillMaster, Topology::Sentinel(setup)) => {
            let master = setup.master_port().expect("a master");
            setup.node(master).kill9();
        }
        (Fault::Hang, Topology::Sentinel(setup)) => {
            let master = setup.master_port().expect("a master");
            setup.node(master).stop();
            std::thread::sleep(length);
            setup.node(master).cont();
        }
        (Fault::ClientPause, Topology::Sentinel(setup)) => {
            let master = setup.master_port().expect("a master");
            let ms = length.as_millis().to_string();
            setup
                .node(master)
                .cli(&["CLIENT", "PAUSE", &ms, "ALL"])
                .expect("CLIENT PAUSE");
        }
        (Fault::RestartEmpty | Fault::RestartPersistent, Topology::Single(node, _)) => {
            node.kill9();
            std::thread::sleep(length.min(Duration::from_millis(500)));
            node.restart();
        }
        (Fault::Partition, Topology::Single(_, Some(proxy))) => {
            proxy.blackhole();
            std::thread::sleep(length);
            proxy.heal();
        }
        (Fault::ClusterKillMaster, Topology::Cluster(cluster)) => {
            let slot = cluster.slot_of(first_key);
            let master = cluster.master_of_slot(slot).expect("a master");
            cluster.node(master).kill9();
        }
        (fault, _) => panic!("{fault:?} on the wrong topology"),
    }
}

/// Runs `fault` against `kind` under `plan`'s load.
pub fn run(fault: Fault, kind: Kind, plan: &Plan) -> Row {
    let mut topology = Topology::start(fault);
    let runtime = crate::redis_server::runtime();
    let limiters = Arc::new(runtime.block_on(Limiters::build(kind, &topology, plan)));
    let keys: Arc<Vec<String>> = Arc::new((0..plan.keys).map(|k| format!("key{k}")).collect());
    let start = Instant::now();
    let end = plan.before + plan.fault + plan.after;
    let period = Duration::from_secs_f64(plan.tasks as f64 / f64::from(plan.offered));
    let tasks: Vec<_> = (0..plan.tasks)
        .map(|task| {
            let (limiters, keys) = (Arc::clone(&limiters), Arc::clone(&keys));
            let node = task % plan.nodes;
            runtime.spawn(async move {
                let mut records = Vec::new();
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut n = task;
                while start.elapsed() < end {
                    tick.tick().await;
                    let key = n % keys.len();
                    n += 1;
                    let (at, unix) = (start.elapsed(), unix_nanos());
                    let checked = tokio::time::timeout(
                        Duration::from_secs(5),
                        limiters.check(node, &keys[key]),
                    )
                    .await;
                    let latency = start.elapsed() - at;
                    let hung = checked.is_err();
                    let (allowed, store_down, error) = checked.unwrap_or((false, false, true));
                    records.push(Record {
                        at,
                        unix,
                        key,
                        allowed,
                        store_down,
                        error,
                        hung,
                        latency,
                    });
                }
                records
            })
        })
        .collect();
    // Failed round trips over time, sampled every 20 ms.
    let sampler = {
        let limiters = Arc::clone(&limiters);
        runtime.spawn(async move {
            let mut samples = Vec::new();
            while start.elapsed() < end {
                samples.push((start.elapsed(), limiters.errors()));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            samples
        })
    };
    std::thread::sleep(plan.before.saturating_sub(start.elapsed()));
    let fault_at = start.elapsed();
    inject(fault, &mut topology, plan.fault, &keys[0]);
    let mut records = Vec::new();
    let mut panics = 0;
    for task in tasks {
        match runtime.block_on(task) {
            Ok(r) => records.extend(r),
            Err(_) => panics += 1,
        }
    }
    let samples = runtime.block_on(sampler).unwrap_or_default();
    let errors = limiters.errors();
    if let Ok(limiters) = Arc::try_unwrap(limiters) {
        runtime.block_on(limiters.shutdown());
    }
    drop(runtime);
    drop(topology);
    summarize(
        fault, kind, plan, records, &samples, errors, fault_at, panics,
    )
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    fault: Fault,
    kind: Kind,
    plan: &Plan,
    mut records: Vec<Record>,
    samples: &[(Duration, u64)],
    errors: u64,
    fault_at: Duration,
    panics: usize,
) -> Row {
    records.sort_by_key(|r| r.unix);
    // The exact reference: the same requests at the same times, one
    // in-memory limiter, its clock on Unix time less whole periods (so
    // windows fall where Redis's do).
    let quota = Quota::per_second(plan.limit).unwrap();
    let clock = ManualClock::new();
    let base = records
        .first()
        .map_or(0, |r| r.unix / 1_000_000_000 * 1_000_000_000);
    let reference = KeyedRateLimiter::<usize, AnyAlgorithm>::builder(quota)
        .clock(clock.clone())
        .algorithm(AnyAlgorithm::new(kind.reference(), &quota).unwrap())
        .build()
        .unwrap();
    // Per key and Unix second: admitted, and the reference's.
    let mut seconds: std::collections::BTreeMap<(usize, u64), (usize, usize)> =
        std::collections::BTreeMap::new();
    let mut exact = 0;
    for r in &records {
        clock.set(r.unix - base);
        let ok = reference.check(&r.key).is_allowed();
        exact += usize::from(ok);
        let cell = seconds.entry((r.key, r.unix / 1_000_000_000)).or_default();
        cell.0 += usize::from(r.allowed);
        cell.1 += usize::from(ok);
    }
    let over: usize = seconds.values().map(|(a, e)| a.saturating_sub(*e)).sum();
    let under: usize = seconds.values().map(|(a, e)| e.saturating_sub(*a)).sum();
    let worst = seconds
        .values()
        .map(|(a, e)| a.saturating_sub(*e))
        .max()
        .unwrap_or(0);
    let last_bad = match kind {
        Kind::Redis(_) => records
            .iter()
            .filter(|r| r.store_down || r.error)
            .map(|r| r.at + r.latency)
            .max(),
        Kind::Synced | Kind::Leased | Kind::LeasedOneReplica => samples
            .windows(2)
            .filter(|w| w[1].1 > w[0].1)
            .map(|w| w[1].0)
            .max(),
    };
    let recovered_after = last_bad.map(|t| t.saturating_sub(fault_at));
    let until = fault_at
        + recovered_after
            .unwrap_or(Duration::ZERO)
            .max(Duration::from_secs(1));
    let mut during: Vec<Duration> = records
        .iter()
        .filter(|r| r.at >= fault_at && r.at <= until)
        .map(|r| r.latency)
        .collect();
    during.sort_unstable();
    let p99 = during
        .get((during.len() * 99 / 100).min(during.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default();
    Row {
        fault,
        kind,
        requests: records.len(),
        admitted: records.iter().filter(|r| r.allowed).count(),
        reference: exact,
        over,
        worst_second_over: worst,
        under,
        store_down: records.iter().filter(|r| r.store_down).count(),
        errors: errors + records.iter().filter(|r| r.error).count() as u64,
        recovered_after,
        p99_during: p99,
        max_latency: records.iter().map(|r| r.latency).max().unwrap_or_default(),
        hung: records.iter().filter(|r| r.hung).count(),
        panics,
    }
}

/// The table's header, markdown.
pub fn header() -> String {
    "| fault | limiter | requests | admitted / exact | over the limit | worst key-second over | under | store-down decisions | errors | back to normal after | p99 during | max latency |\n\
     |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        .to_owned()
}

/// One row of the table, markdown.
pub fn line(row: &Row) -> String {
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    format!(
        "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        row.fault.name(),
        row.kind.name(),
        row.requests,
        row.admitted,
        row.reference,
        row.over,
        row.worst_second_over,
        row.under,
        row.store_down,
        row.errors,
        row.recovered_after
            .map_or("no failure".to_owned(), |d| format!(
                "{:.2} s",
                d.as_secs_f64()
            )),
        ms(row.p99_during),
        ms(row.max_latency),
    )
}
