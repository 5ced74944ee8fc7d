//! Batched script calls for the synced and leased limiters: one round trip
//! per Redis node for a whole batch of keys.
//!
//! A batch is a list of *records*, each a few keys of one user key (so in
//! one Cluster slot) and a few integer arguments, run through one Lua script
//! that loops over them. On a single server the records go out as one
//! pipeline of `EVALSHA` calls, each over up to [`RECORDS_PER_CALL`]
//! records: usually one call. On a Redis Cluster a script may only touch
//! keys of one slot, so records are grouped by slot, slots by the master
//! that owns them (from `CLUSTER SLOTS`), and each master gets one pipeline
//! with one call per slot: one round trip per node, sent concurrently.
//!
//! Every round trip has the store's timeout. A failed node fails only its
//! own records; the caller decides what a failure means for them.

use super::super::RedisError;
use super::super::connection::{Connection, Target, Tls, connect};
use super::super::single::Single;
use crate::sync::{Arc, Mutex};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ErrorKind, ServerErrorKind, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// The most records one script call carries, so that no call holds Redis
/// for long (a call over 512 records runs in well under a millisecond).
pub(crate) const RECORDS_PER_CALL: usize = 512;

/// A Lua script and its source (kept to load it on Cluster nodes that
/// answer `NOSCRIPT`).
#[derive(Debug, Clone)]
pub(crate) struct Lua {
    script: redis::Script,
    code: &'static str,
}

impl Lua {
    pub(crate) fn new(code: &'static str) -> Lua {
        Lua {
            script: redis::Script::new(code),
            code,
        }
    }
}

/// One key's share of a batch: its Redis keys (all with the same hash tag)
/// and the script arguments that go with them.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<i64>,
}

/// What a batch returned.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Per record, its `outs` integers, or `None` when its node failed.
    pub(crate) replies: Vec<Option<Vec<i64>>>,
    /// Round trips made (pipelines sent, retries included).
    pub(crate) round_trips: u64,
    /// Script calls made.
    pub(crate) calls: u64,
    /// Failed round trips, and of them those that timed out.
    pub(crate) errors: u64,
    pub(crate) timeouts: u64,
    /// The first failure, for the caller to return.
    pub(crate) error: Option<RedisError>,
    /// Per record, what its master answered in a round trip that too few
    /// replicas acknowledged ([`RedisError::NotReplicated`]): done on the
    /// master, not to be used (the caller may undo it).
    pub(crate) unreplicated: Vec<Option<Vec<i64>>>,
    /// Slot ranges (inclusive) whose node answered, and whose node failed:
    /// a single server is the whole range `0..=16383`.
    pub(crate) ok_slots: Vec<(u16, u16)>,
    pub(crate) failed_slots: Vec<(u16, u16)>,
}

/// Every slot: what a single server serves.
pub(crate) const ALL_SLOTS: (u16, u16) = (0, 16_383);

impl Outcome {
    fn fail(&mut self, error: RedisError) {
        self.errors += 1;
        if matches!(error, RedisError::Timeout) {
            self.timeouts += 1;
        }
        self.error.get_or_insert(error);
    }
}

/// A master and the slots it serves.
#[derive(Debug, Clone)]
struct SlotRange {
    start: u16,
    end: u16,
    host: String,
    port: u16,
}

/// The cached slot map and whether it should be fetched again.
#[derive(Default)]
struct SlotMap {
    ranges: Option<Arc<Vec<SlotRange>>>,
    stale: bool,
}

/// A connection to a single Redis or a Cluster, with the per-call timeout.
pub(crate) struct Store {
    connection: Connection,
    timeout: Duration,
    /// The Cluster's slot owners, fetched when first needed and marked
    /// stale after any failure (a resharding or failover) to be fetched
    /// again; a stale map is still used when fetching fails (a dead node
    /// must not stop the live ones).
    slots: Mutex<SlotMap>,
    /// Replicas that must hold a pipeline's writes before its replies
    /// count (`WAIT` after the script calls); `None`: none.
    wait: Option<u32>,
}

/// The refusal of a `wait_for_replicas` above the replicas a master has.
pub(crate) const TOO_FEW_REPLICAS: &str =
    "wait_for_replicas asks for more replicas than a master has connected";

impl Store {
    /// From now on, a pipeline's replies count only once `replicas`
    /// replicas of the node hold its writes (`WAIT`, bounded by half the
    /// timeout); otherwise the round trip fails with
    /// [`RedisError::NotReplicated`] and its replies are dropped.
    pub(crate) fn wait_for_replicas(&mut self, replicas: u32) {
        self.wait = (replicas > 0).then_some(replicas);
    }

    /// Whether every master has at least `replicas` replicas connected
    /// now (`INFO replication`): a master with fewer could never
    /// acknowledge a grant. (Connected replicas still in their first sync
    /// count: they acknowledge once it ends, seconds later; refusing them
    /// would fail a build made while a deployment starts.)
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] when one has fewer; the errors of the calls.
    pub(crate) async fn check_replicas(&self, replicas: u32) -> Result<(), RedisError> {
        if replicas == 0 {
            return Ok(());
        }
        let info = redis::cmd("INFO").arg("replication").clone();
        let mut replies: Vec<String> = Vec::new();
        match &self.connection {
            Connection::Single(single) => {
                let mut single = single.clone();
                replies.push(
                    tokio::time::timeout(self.timeout, info.query_async(&mut single))
                        .await
                        .map_err(|_| RedisError::Timeout)?
                        .map_err(convert)?,
                );
            }
            Connection::Cluster(cluster) => {
                for master in self.masters(cluster).await? {
                    let route = RoutingInfo::SingleNode(master);
                    let mut connection = cluster.clone();
                    let value = tokio::time::timeout(
                        self.timeout,
                        connection.route_command(info.clone(), route),
                    )
                    .await
                    .map_err(|_| RedisError::Timeout)?
                    .map_err(convert)?;
                    replies.push(
                        redis::from_redis_value(value)
                            .map_err(|e| RedisError::BadReply(e.to_string()))?,
                    );
                }
            }
        }
        for reply in replies {
            let connected = reply
                .lines()
                .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            if connected < replicas {
                return Err(RedisError::Config(TOO_FEW_REPLICAS));
            }
        }
        Ok(())
    }

    /// Each call's timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The `WAIT` for `replicas` appended to a pipeline: replicas and
    /// milliseconds.
    fn wait_for(&self, replicas: Option<u32>) -> Option<(u32, u64)> {
        let ms = u64::try_from(self.timeout.as_millis() / 2).unwrap_or(u64::MAX);
        replicas.map(|replicas| (replicas, ms.max(1)))
    }

    /// Connects and loads `scripts` (on a single server; on a Cluster each
    /// node loads a script the first time it answers `NOSCRIPT`).
    pub(crate) async fn connect(
        target: Option<Target>,
        tls: &Tls,
        timeout: Duration,
        scripts: &[&Lua],
    ) -> Result<Store, RedisError> {
        crate::redis::connection::check_wait(
            timeout,
            "the Redis timeout must be above zero and at most a day",
        )?;
        let loads: Vec<&redis::Script> = scripts.iter().map(|lua| &lua.script).collect();
        let connection = connect(target, tls, timeout, &loads).await?;
        let store = Store {
            connection,
            timeout,
            slots: Mutex::new(SlotMap::default()),
            wait: None,
        };
        if let Connection::Cluster(cluster) = &store.connection {
            // Load the scripts on every master now, so that the first batch
            // is one round trip per node too (a node that forgets them later
            // answers NOSCRIPT and is reloaded then).
            for master in store.masters(cluster).await? {
                for lua in scripts {
                    let route = RoutingInfo::SingleNode(master.clone());
                    let load = redis::cmd("SCRIPT").arg("LOAD").arg(lua.code).clone();
                    let mut connection = cluster.clone();
                    tokio::time::timeout(timeout, connection.route_command(load, route))
                        .await
                        .map_err(|_| RedisError::Timeout)?
                        .map_err(convert)?;
                }
            }
        }
        Ok(store)
    }

    /// Runs `script` over `records`: `KEYS` are the records' keys in order,
    /// `ARGV` is `header` followed by the records' arguments in order, and
    /// the script returns `outs` integers per record, in order.
    pub(crate) async fn run(
        &self,
        lua: &Lua,
        header: &[i64],
        records: &[Record],
        outs: usize,
    ) -> Outcome {
        self.run_waiting(lua, header, records, outs, self.wait)
            .await
    }

    /// As [`run`](Store::run), without `WAIT`: for writes that only ever
    /// lower what is counted (undoing grants), whose loss in a failover
    /// errs on the side of the limit.
    pub(crate) async fn run_unwaited(
        &self,
        lua: &Lua,
        header: &[i64],
        records: &[Record],
        outs: usize,
    ) -> Outcome {
        self.run_waiting(lua, header, records, outs, None).await
    }

    async fn run_waiting(
        &self,
        lua: &Lua,
        header: &[i64],
        records: &[Record],
        outs: usize,
        wait: Option<u32>,
    ) -> Outcome {
        let mut outcome = Outcome {
            replies: vec![None; records.len()],
            unreplicated: vec![None; records.len()],
            ..Outcome::default()
        };
        if records.is_empty() {
            return outcome;
        }
        match &self.connection {
            Connection::Single(manager) => {
                let all: Vec<usize> = (0..records.len()).collect();
                let calls = calls_for(&all);
                let pipe = pipeline(&lua.script, header, records, &calls, self.wait_for(wait));
                outcome.calls += calls.len() as u64;
                let mut manager = manager.clone();
                let reply = self
                    .single_round_trip(&mut manager, &lua.script, &pipe, &mut outcome)
                    .await;
                match reply.and_then(|values| split(values, &calls, outs, records.len(), wait)) {
                    Ok((replies, None)) => {
                        outcome.replies = replies;
                        outcome.ok_slots.push(ALL_SLOTS);
                    }
                    Ok((replies, Some(error))) => {
                        outcome.unreplicated = replies;
                        // A master without the replicas it had: Sentinel
                        // may have promoted one of them meanwhile.
                        manager.search();
                        outcome.fail(error);
                        outcome.failed_slots.push(ALL_SLOTS);
                    }
                    Err(error) => {
                        outcome.fail(error);
                        outcome.failed_slots.push(ALL_SLOTS);
                    }
                }
            }
            Connection::Cluster(cluster) => {
                self.run_cluster(cluster, lua, header, records, outs, wait, &mut outcome)
                    .await;
            }
        }
        outcome
    }

    /// One pipeline on the single server, reloading the script once after
    /// `NOSCRIPT` (a restart or `SCRIPT FLUSH`: nothing ran, so a retry
    /// cannot apply anything twice).
    async fn single_round_trip(
        &self,
        manager: &mut Single,
        script: &redis::Script,
        pipe: &redis::Pipeline,
        outcome: &mut Outcome,
    ) -> Result<Vec<Value>, RedisError> {
        let mut reloaded = false;
        loop {
            outcome.round_trips += 1;
            let sent = tokio::time::timeout(self.timeout, pipe.query_async::<Vec<Value>>(manager))
                .await
                .map_err(|_| RedisError::Timeout)?;
            match sent {
                Err(e) if is_noscript(&e) && !reloaded => {
                    reloaded = true;
                    // The load is a round trip of its own, as on a Cluster.
                    outcome.round_trips += 1;
                    tokio::time::timeout(self.timeout, script.prepare_invoke().load_async(manager))
                        .await
                        .map_err(|_| RedisError::Timeout)?
                        .map_err(convert)?;
                }
                other => return other.map_err(convert),
            }
        }
    }

    // The batch's parts as `run_waiting` takes them, and where they go.
    #[allow(clippy::too_many_arguments)]
    async fn run_cluster(
        &self,
        cluster: &ClusterConnection,
        lua: &Lua,
        header: &[i64],
        records: &[Record],
        outs: usize,
        wait: Option<u32>,
        outcome: &mut Outcome,
    ) {
        let slots = match self.slot_map(cluster).await {
            Ok(slots) => slots,
            Err(error) => {
                outcome.round_trips += 1;
                outcome.fail(error);
                outcome.failed_slots.push(ALL_SLOTS);
                return;
            }
        };
        // Node index -> slot -> records, in record order within a slot.
        let mut by_node: BTreeMap<usize, BTreeMap<u16, Vec<usize>>> = BTreeMap::new();
        for (index, record) in records.iter().enumerate() {
            let slot = record.keys.first().map_or(0, |k| key_slot(k.as_bytes()));
            match slots.iter().position(|r| r.start <= slot && slot <= r.end) {
                Some(node) => by_node
                    .entry(node)
                    .or_default()
                    .entry(slot)
                    .or_default()
                    .push(index),
                None => outcome.fail(RedisError::Config("a slot has no master")),
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (node, by_slot) in by_node {
            let range = &slots[node];
            let span = (range.start, range.end);
            let mut calls: Vec<Vec<usize>> = Vec::new();
            for indices in by_slot.values() {
                calls.extend(calls_for(indices));
            }
            let pipe = pipeline(&lua.script, header, records, &calls, self.wait_for(wait));
            outcome.calls += calls.len() as u64;
            let route = SingleNodeRoutingInfo::ByAddress {
                host: range.host.clone(),
                port: range.port,
            };
            let connection = cluster.clone();
            let code = lua.code;
            let timeout = self.timeout;
            let waits = wait.is_some();
            tasks.spawn(async move {
                let count = calls.len() + usize::from(waits);
                let (reply, trips) =
                    cluster_round_trip(connection, code, pipe, count, route, timeout).await;
                (calls, reply, trips, span)
            });
        }
        let mut failed = false;
        while let Some(joined) = tasks.join_next().await {
            let Ok((calls, reply, trips, span)) = joined else {
                failed = true;
                outcome.fail(RedisError::Config("a batch task stopped"));
                continue;
            };
            outcome.round_trips += trips;
            match reply.and_then(|values| split(values, &calls, outs, records.len(), wait)) {
                Ok((replies, None)) => {
                    outcome.ok_slots.push(span);
                    for (slot, reply) in outcome.replies.iter_mut().zip(replies) {
                        if reply.is_some() {
                            *slot = reply;
                        }
                    }
                }
                Ok((replies, Some(error))) => {
                    failed = true;
                    for (slot, reply) in outcome.unreplicated.iter_mut().zip(replies) {
                        if reply.is_some() {
                            *slot = reply;
                        }
                    }
                    outcome.fail(error);
                    outcome.failed_slots.push(span);
                }
                Err(error) => {
                    failed = true;
                    outcome.fail(error);
                    outcome.failed_slots.push(span);
                }
            }
        }
        if failed {
            // The topology may have changed: ask again next time.
            self.slots.lock().stale = true;
        }
    }

    /// Each master of the Cluster once, as a route.
    async fn masters(
        &self,
        cluster: &ClusterConnection,
    ) -> Result<Vec<SingleNodeRoutingInfo>, RedisError> {
        let slots = self.slot_map(cluster).await?;
        let mut masters: Vec<(&str, u16)> =
            slots.iter().map(|r| (r.host.as_str(), r.port)).collect();
        masters.sort_unstable();
        masters.dedup();
        Ok(masters
            .into_iter()
            .map(|(host, port)| SingleNodeRoutingInfo::ByAddress {
                host: host.to_owned(),
                port,
            })
            .collect())
    }

    async fn slot_map(
        &self,
        cluster: &ClusterConnection,
    ) -> Result<Arc<Vec<SlotRange>>, RedisError> {
        let cached = {
            let map = self.slots.lock();
            match &map.ranges {
                Some(ranges) if !map.stale => return Ok(Arc::clone(ranges)),
                ranges => ranges.clone(),
            }
        };
        match self.fetch_slot_map(cluster).await {
            Ok(slots) => {
                *self.slots.lock() = SlotMap {
                    ranges: Some(Arc::clone(&slots)),
                    stale: false,
                };
                Ok(slots)
            }
            // The node asked may be the dead one: the last map still routes
            // the live nodes' slots (and is asked for again next time).
            Err(error) => cached.ok_or(error),
        }
    }

    async fn fetch_slot_map(
        &self,
        cluster: &ClusterConnection,
    ) -> Result<Arc<Vec<SlotRange>>, RedisError> {
        let mut connection = cluster.clone();
        let reply = tokio::time::timeout(
            self.timeout,
            connection.route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            ),
        )
        .await
        .map_err(|_| RedisError::Timeout)?
        .map_err(convert)?;
        Ok(Arc::new(parse_slots(&reply)?))
    }
}

/// One node's pipeline, reloading the script on that node once after
/// `NOSCRIPT`. Returns the reply and the round trips made.
async fn cluster_round_trip(
    mut connection: ClusterConnection,
    code: &'static str,
    pipe: redis::Pipeline,
    count: usize,
    route: SingleNodeRoutingInfo,
    timeout: Duration,
) -> (Result<Vec<Value>, RedisError>, u64) {
    let mut trips = 0;
    let mut reloaded = false;
    loop {
        trips += 1;
        let sent = tokio::time::timeout(
            timeout,
            connection.route_pipeline(pipe.clone(), 0, count, route.clone()),
        )
        .await;
        let sent = match sent {
            Err(_) => return (Err(RedisError::Timeout), trips),
            Ok(sent) => sent,
        };
        let noscript = match &sent {
            Err(e) => is_noscript(e),
            Ok(values) => values
                .iter()
                .any(|v| matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))),
        };
        if noscript && !reloaded {
            reloaded = true;
            trips += 1;
            let load = redis::cmd("SCRIPT").arg("LOAD").arg(code).clone();
            let loaded = tokio::time::timeout(
                timeout,
                connection.route_command(load, RoutingInfo::SingleNode(route.clone())),
            )
            .await;
            match loaded {
                Err(_) => return (Err(RedisError::Timeout), trips),
                Ok(Err(e)) => return (Err(convert(e)), trips),
                Ok(Ok(_)) => continue,
            }
        }
        return (sent.map_err(convert), trips);
    }
}

/// Splits record indices into script calls of at most [`RECORDS_PER_CALL`].
fn calls_for(indices: &[usize]) -> Vec<Vec<usize>> {
    indices
        .chunks(RECORDS_PER_CALL)
        .map(<[usize]>::to_vec)
        .collect()
}

/// A pipeline with one `EVALSHA` per call, then `WAIT replicas ms` when
/// `wait` is set.
fn pipeline(
    script: &redis::Script,
    header: &[i64],
    records: &[Record],
    calls: &[Vec<usize>],
    wait: Option<(u32, u64)>,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for call in calls {
        let mut invocation = script.prepare_invoke();
        for &index in call {
            for key in &records[index].keys {
                invocation.key(key);
            }
        }
        for arg in header {
            invocation.arg(*arg);
        }
        for &index in call {
            for arg in &records[index].args {
                invocation.arg(*arg);
            }
        }
        pipe.invoke_script(&invocation);
    }
    if let Some((replicas, ms)) = wait {
        pipe.cmd("WAIT").arg(replicas).arg(ms);
    }
    pipe
}

/// Per record, its replies: distributed from the calls' replies.
type Replies = Vec<Option<Vec<i64>>>;

/// Distributes the calls' replies to their records, and says when the
/// pipeline's `WAIT` found too few replicas ([`RedisError::NotReplicated`]:
/// the replies are what the master did).
fn split(
    mut values: Vec<Value>,
    calls: &[Vec<usize>],
    outs: usize,
    records: usize,
    wait: Option<u32>,
) -> Result<(Replies, Option<RedisError>), RedisError> {
    let mut short = None;
    if let Some(wanted) = wait {
        // The pipeline ends with WAIT: its count of replicas that hold
        // every write before it.
        let acked = match values.pop() {
            Some(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
            other => return Err(RedisError::BadReply(format!("WAIT answered {other:?}"))),
        };
        if acked < wanted {
            short = Some(RedisError::NotReplicated { acked, wanted });
        }
    }
    if values.len() != calls.len() {
        return Err(RedisError::BadReply(format!(
            "{} replies for {} calls",
            values.len(),
            calls.len()
        )));
    }
    let mut replies = vec![None; records];
    for (value, call) in values.into_iter().zip(calls) {
        if let Value::ServerError(e) = value {
            return Err(RedisError::Redis(e.into()));
        }
        let numbers: Vec<i64> =
            redis::from_redis_value(value).map_err(|e| RedisError::BadReply(e.to_string()))?;
        if numbers.len() != call.len() * outs {
            return Err(RedisError::BadReply(format!(
                "{} integers for {} records",
                numbers.len(),
                call.len()
            )));
        }
        for (chunk, &index) in numbers.chunks(outs.max(1)).zip(call) {
            replies[index] = Some(chunk.to_vec());
        }
    }
    Ok((replies, short))
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

fn convert(e: redis::RedisError) -> RedisError {
    if e.is_timeout() {
        RedisError::Timeout
    } else {
        RedisError::Redis(e)
    }
}

/// Parses a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, ..],
/// replicas..], ..]`.
fn parse_slots(reply: &Value) -> Result<Vec<SlotRange>, RedisError> {
    let bad = || RedisError::BadReply(format!("CLUSTER SLOTS: {reply:?}"));
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut slots = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let (Some(start), Some(end), Some(Value::Array(master))) = (
            fields.first().and_then(int),
            fields.get(1).and_then(int),
            fields.get(2),
        ) else {
            return Err(bad());
        };
        let (Some(host), Some(port)) = (master.first().and_then(text), master.get(1).and_then(int))
        else {
            return Err(bad());
        };
        slots.push(SlotRange {
            start,
            end,
            host,
            port,
        });
    }
    Ok(slots)
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// text between the first `{` and the next `}`, if not empty) or of the
/// whole key, modulo 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .map(|close| &rest[..close])
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16(tagged) % 16384
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as Redis
/// Cluster specifies.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_spec() {
        // The reference value from the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        // Hash tags: only the first {...} counts, an empty one does not.
        assert_eq!(key_slot(b"p:{user1000}:sync:7"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn replies_go_back_to_their_records() {
        let calls = vec![vec![2, 0], vec![1]];
        let values = vec![
            Value::Array(vec![
                Value::Int(20),
                Value::Int(21),
                Value::Int(0),
                Value::Int(1),
            ]),
            Value::Array(vec![Value::Int(10), Value::Int(11)]),
        ];
        let (replies, _) = split(values, &calls, 2, 3, None).unwrap();
        assert_eq!(
            replies,
            vec![Some(vec![0, 1]), Some(vec![10, 11]), Some(vec![20, 21])]
        );
        let short = vec![Value::Array(vec![Value::Int(1)])];
        assert!(split(short, &[vec![0]], 2, 1, None).is_err());
    }
}
