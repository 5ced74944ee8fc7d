//! Real Redis topologies for tests and fault measurements: single nodes
//! that can crash, hang and come back; one master with two replicas
//! watched by three Sentinels; a Redis Cluster of three masters with one
//! replica each; a TCP proxy that can partition its clients from a server.
//!
//! Everything listens on 127.0.0.1 on free ports (never fixed ones, so
//! tests can run in parallel); every process is killed and every temporary
//! directory removed on drop. Plain std only: this file is also included
//! by the `measure/redis_faults.rs` example, next to `redis_server.rs`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::redis_server::{free_cluster_port, free_port, temp_dir};

/// The longest a `Node::cli` call waits for its answer. A stopped
/// (SIGSTOP) process still completes TCP handshakes in the kernel but never
/// replies, so an unbounded redis-cli would wait for it forever.
const CLI_LIMIT: Duration = Duration::from_secs(5);

/// The longest one probe inside a polling loop waits: a node that does not
/// answer within it counts as not answering this round.
const PROBE_LIMIT: Duration = Duration::from_secs(1);

/// Pause between two rounds of a polling loop.
const POLL: Duration = Duration::from_millis(20);

/// Runs redis-cli against 127.0.0.1:`port`, killed after `limit`: its
/// stdout, or None when it could not run, failed or ran out of time. A
/// Redis error reply is output like any other (redis-cli exits 0).
fn cli(port: u16, args: &[&str], limit: Duration) -> Option<String> {
    let out = Command::new("timeout")
        .args(["-s", "KILL", &format!("{:.3}", limit.as_secs_f64())])
        .arg("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of `name:value` in an `INFO` reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
}

/// The port of an `ip:port` or `ip:port@busport[,hostname]` address.
fn port_of(addr: &str) -> Option<u16> {
    let rest = addr.rsplit_once(':')?.1;
    rest.split(['@', ',']).next()?.parse().ok()
}

/// redis-cli's output for a reply that is an array of maps (as `SENTINEL
/// replicas` gives): without a terminal it prints every element on its own
/// line, flattened, so keys and values alternate and each map starts with
/// its `name` key.
fn maps(reply: &str) -> Vec<HashMap<String, String>> {
    let lines: Vec<&str> = reply.lines().map(str::trim_end).collect();
    let mut out: Vec<HashMap<String, String>> = Vec::new();
    for pair in lines.chunks(2) {
        let [key, value] = pair else { break };
        if *key == "name" || out.is_empty() {
            out.push(HashMap::new());
        }
        out.last_mut()
            .unwrap()
            .insert(key.to_string(), value.to_string());
    }
    out
}

/// Runs `check` every `POLL` until it gives a value or `timeout` passed.
fn poll<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// What a `Node` runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `redis-server` with its settings on the command line.
    Server,
    /// `redis-sentinel DIR/sentinel.conf`: Sentinel keeps what it learns
    /// (replicas, other sentinels, the current master, epochs) by rewriting
    /// that file, so a restarted sentinel remembers it.
    Sentinel,
}

/// One `redis-server` (or `redis-sentinel`) process on 127.0.0.1, with its
/// own temporary directory. The port, directory and arguments never change,
/// so `restart` brings back the same node: what it kept on disk (an AOF,
/// `nodes.conf`, a sentinel's config) survives, nothing else does. Killed
/// and its directory removed on drop.
pub struct Node {
    port: u16,
    child: Option<Child>,
    dir: PathBuf,
    /// The arguments after the defaults, which they override.
    extra: Vec<String>,
    kind: Kind,
    /// Set by `stop`, cleared by `cont` and by anything that kills.
    stopped: bool,
}

impl Node {
    /// Starts `redis-server` on a free port with `--save "" --appendonly
    /// no` (nothing persisted) and `--repl-diskless-sync-delay 0` (a
    /// replica's full sync starts at once, not after the default 5 s wait
    /// for more replicas), followed by `extra`, and waits until it
    /// answers and is this process (not another test's on a port reused in
    /// between). If the port was taken meanwhile, tries another.
    pub fn start(extra: &[&str]) -> Node {
        Self::start_on(extra, free_port)
    }

    /// `start` with ports from `pick` (`free_cluster_port` for cluster
    /// nodes, whose bus port must be free too).
    fn start_on(extra: &[&str], pick: fn() -> u16) -> Node {
        let mut node = Node {
            port: pick(),
            child: None,
            dir: temp_dir("node"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            kind: Kind::Server,
            stopped: false,
        };
        for _ in 0..5 {
            if node.try_launch() {
                return node;
            }
            node.kill9();
            node.port = pick();
        }
        panic!("could not start redis-server {extra:?}");
    }

    /// Starts `redis-sentinel` with the config `config(port, dir)` written
    /// to `DIR/sentinel.conf`, on a free port, retried like `start`.
    fn start_sentinel(config: impl Fn(u16, &str) -> String) -> Node {
        let mut node = Node {
            port: 0,
            child: None,
            dir: temp_dir("sentinel"),
            extra: Vec::new(),
            kind: Kind::Sentinel,
            stopped: false,
        };
        for _ in 0..5 {
            node.port = free_port();
            let text = config(node.port, node.dir.to_str().unwrap());
            std::fs::write(node.dir.join("sentinel.conf"), text).unwrap();
            if node.try_launch() {
                return node;
            }
            node.kill9();
        }
        panic!("could not start redis-sentinel");
    }

    /// Starts the process and waits until it answers `INFO` with its own
    /// pid and has loaded its data. False if it exited (port taken),
    /// another process answers on the port, or 10 s passed.
    fn try_launch(&mut self) -> bool {
        assert!(self.child.is_none());
        let mut command = match self.kind {
            Kind::Server => {
                let mut c = Command::new("redis-server");
                c.args(["--port", &self.port.to_string()])
                    .args(["--bind", "127.0.0.1"])
                    .args(["--save", ""])
                    .args(["--appendonly", "no"])
                    .args(["--repl-diskless-sync-delay", "0"])
                    .args(["--dir", self.dir.to_str().unwrap()])
                    .args(&self.extra);
                c
            }
            Kind::Sentinel => {
                let mut c = Command::new("redis-sentinel");
                c.arg(self.dir.join("sentinel.conf"));
                c
            }
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{:?} must be installed (apt-get install redis-server redis-sentinel): {e}",
                    command.get_program()
                )
            });
        let pid = child.id();
        self.child = Some(child);
        self.stopped = false;
        let ours = format!("process_id:{pid}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false; // exited: the port was taken
            }
            if let Some(info) = cli(self.port, &["INFO"], PROBE_LIMIT) {
                if !info.lines().any(|l| l.trim_end() == ours) {
                    return false; // someone else's server
                }
                // A server loading its AOF already answers INFO.
                if info_field(&info, "loading").is_none_or(|v| v == "0") {
                    return true;
                }
            }
            std::thread::sleep(POLL);
        }
        false
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The process id while it runs (stopped counts as running); None once
    /// killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is there and not stopped, that is whether it can
    /// answer.
    pub fn is_running(&self) -> bool {
        self.child.is_some() && !self.stopped
    }

    /// Kills the process with SIGKILL, as a crash: nothing is flushed, the
    /// kernel closes its connections (clients see FIN/RST at once). Works on
    /// a stopped process too.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stopped = false;
    }

    /// Freezes the process with SIGSTOP: a hang, not a crash. Its
    /// connections stay open and the kernel still accepts new ones, but
    /// nothing is answered (no RST, no FIN) until `cont`.
    pub fn stop(&mut self) {
        if let Some(pid) = self.pid() {
            signal("-STOP", pid);
            self.stopped = true;
        }
    }

    /// Resumes a process frozen by `stop` with SIGCONT.
    pub fn cont(&mut self) {
        if let Some(pid) = self.pid() {
            signal("-CONT", pid);
            self.stopped = false;
        }
    }

    /// Kills the process (if it runs) and starts it again on the same port,
    /// in the same directory, with the same arguments, waiting until it
    /// answers. A node started with `--appendonly yes --appendfsync always`
    /// comes back with every acknowledged write; one with the defaults comes
    /// back empty. Its role comes from its arguments and files again: a
    /// former master restarted in a Sentinel setup is a master until the
    /// sentinels turn it into a replica (about 10 s: they wait for its role
    /// to stay wrong across several INFO rounds); a cluster node rejoins
    /// from its `nodes.conf` as a replica of whoever took its slots.
    pub fn restart(&mut self) {
        self.kill9();
        assert!(
            self.try_launch(),
            "node on port {} did not come back",
            self.port
        );
    }

    /// Runs a redis-cli command against this node: its output (Redis
    /// error replies included), or None if it did not answer within 5 s.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        cli(self.port, args, CLI_LIMIT)
    }

    /// `cli` with its own time limit.
    pub fn cli_within(&self, args: &[&str], limit: Duration) -> Option<String> {
        cli(self.port, args, limit)
    }

    /// The first line of `ROLE`: `master`, `slave` or `sentinel`.
    pub fn role(&self) -> Option<String> {
        let reply = cli(self.port, &["ROLE"], PROBE_LIMIT)?;
        Some(reply.lines().next()?.trim_end().to_string())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `sig` (`-STOP`, `-CONT`) to `pid` with kill(1).
fn signal(sig: &str, pid: u32) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill(1) must be installed");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// The name the sentinels monitor the master under.
const MASTER_NAME: &str = "mymaster";

/// One master, two replicas and three sentinels (quorum 2), all on
/// 127.0.0.1. A master that does not answer for 1 s is subjectively down;
/// a failover may last 4 s, and Sentinel starts no automatic failover of
/// the same master within 8 s (twice that) of the previous one.
pub struct SentinelSetup {
    /// The master as started first, then the two replicas; roles change
    /// with failovers, the order does not.
    data: Vec<Node>,
    sentinels: Vec<Node>,
}

impl SentinelSetup {
    /// Starts everything and waits (30 s at most, then panics saying what
    /// was missing) until both replicas' links are up and every sentinel
    /// knows both replicas (connected, link ok) and the two other
    /// sentinels, so that a failover can start as soon as the master fails.
    pub fn start() -> SentinelSetup {
        let deadline = Instant::now() + Duration::from_secs(30);
        let master = Node::start(&[]);
        let master_port = master.port.to_string();
        let mut data = vec![master];
        for _ in 0..2 {
            data.push(Node::start(&["--replicaof", "127.0.0.1", &master_port]));
        }
        let linked = poll(deadline - Instant::now(), || {
            data[1..]
                .iter()
                .all(|r| {
                    cli(r.port, &["INFO", "replication"], PROBE_LIMIT)
                        .is_some_and(|i| info_field(&i, "master_link_status") == Some("up"))
                })
                .then_some(())
        });
        assert!(linked.is_some(), "the replicas' links did not come up");
        // Sentinels start after the replicas are linked: the master's first
        // INFO then lists both, and each sentinel connects to them at once.
        let sentinels = (0..3)
            .map(|_| {
                Node::start_sentinel(|port, dir| {
                    format!(
                        "port {port}\n\
                         bind 127.0.0.1\n\
                         dir {dir}\n\
                         sentinel announce-ip 127.0.0.1\n\
                         sentinel announce-port {port}\n\
                         sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                         sentinel failover-timeout {MASTER_NAME} 4000\n\
                         sentinel parallel-syncs {MASTER_NAME} 2\n"
                    )
                })
            })
            .collect();
        let setup = SentinelSetup { data, sentinels };
        let mut missing = Vec::new();
        let ready = poll(deadline.saturating_duration_since(Instant::now()), || {
            missing = setup.sentinels_missing();
            missing.is_empty().then_some(())
        });
        assert!(ready.is_some(), "sentinels not ready in 30 s: {missing:?}");
        setup
    }

    /// What each running sentinel still lacks before a failover can
    /// start; empty when nothing does.
    fn sentinels_missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            let ask = |what: &str| {
                cli(s.port, &["SENTINEL", what, MASTER_NAME], PROBE_LIMIT)
                    .map(|r| maps(&r))
                    .unwrap_or_default()
            };
            let replicas = ask("replicas")
                .iter()
                .filter(|r| {
                    r.get("flags").map(String::as_str) == Some("slave")
                        && r.get("master-link-status").map(String::as_str) == Some("ok")
                })
                .count();
            let others = ask("sentinels")
                .iter()
                .filter(|r| r.get("flags").map(String::as_str) == Some("sentinel"))
                .count();
            if replicas != 2 || others != 2 {
                missing.push(format!(
                    "sentinel {}: {replicas}/2 replicas, {others}/2 other sentinels",
                    s.port
                ));
            }
        }
        missing
    }

    /// The name the sentinels monitor the master under: `mymaster`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis://127.0.0.1:P/` for each sentinel, in start order.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Node::url).collect()
    }

    /// The master's port according to the first running sentinel that
    /// answers `SENTINEL get-master-addr-by-name`.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .find_map(|s| self.master_port_from(s))
    }

    /// The master's port according to sentinel `s`.
    fn master_port_from(&self, s: &Node) -> Option<u16> {
        let reply = cli(
            s.port,
            &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
            PROBE_LIMIT,
        )?;
        reply.lines().nth(1)?.trim_end().parse().ok()
    }

    /// The master or a replica by its port. Panics for any other port.
    pub fn node(&mut self, port: u16) -> &mut Node {
        self.data
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The master as started first, then the two replicas (roles change
    /// with failovers, this order does not).
    pub fn nodes(&self) -> &[Node] {
        &self.data
    }

    pub fn nodes_mut(&mut self) -> &mut [Node] {
        &mut self.data
    }

    /// The three sentinels.
    pub fn sentinels(&self) -> &[Node] {
        &self.sentinels
    }

    /// The three sentinels, to kill, stop or restart one.
    pub fn sentinels_mut(&mut self) -> &mut [Node] {
        &mut self.sentinels
    }

    /// Asks a sentinel for a failover (`SENTINEL FAILOVER mymaster`, no
    /// agreement with the others needed) and returns once one accepted.
    /// While a failover is in progress or no replica qualifies yet
    /// (`INPROG`, `NOGOODSLAVE`), asks again for up to 10 s, then panics
    /// with the last replies.
    pub fn failover(&self) {
        let mut replies = Vec::new();
        let accepted = poll(Duration::from_secs(10), || {
            replies.clear();
            for s in self.sentinels.iter().filter(|s| s.is_running()) {
                let reply = cli(s.port, &["SENTINEL", "FAILOVER", MASTER_NAME], PROBE_LIMIT);
                match reply {
                    Some(r) if r.trim_end() == "OK" => return Some(()),
                    other => replies.push(format!("{}: {other:?}", s.port)),
                }
            }
            std::thread::sleep(Duration::from_millis(100));
            None
        });
        assert!(
            accepted.is_some(),
            "no sentinel accepted FAILOVER: {replies:?}"
        );
    }

    /// Waits until every running sentinel names the same master other than
    /// `old_port` and that node answers `ROLE` as master: from then on a
    /// client asking any sentinel is sent to a node that takes writes. The
    /// new master's port, or None after `timeout`.
    pub fn wait_for_master_change(&self, old_port: u16, timeout: Duration) -> Option<u16> {
        poll(timeout, || {
            let mut named = None;
            for s in self.sentinels.iter().filter(|s| s.is_running()) {
                let port = self.master_port_from(s)?;
                if port == old_port || named.is_some_and(|n| n != port) {
                    return None;
                }
                named = Some(port);
            }
            let port = named?;
            let role = cli(port, &["ROLE"], PROBE_LIMIT)?;
            (role.lines().next()?.trim_end() == "master").then_some(port)
        })
    }

    /// Waits until every running sentinel names the same master, that
    /// master has every other running data node as a replica with its link
    /// up and its replication offset equal to the master's, and every
    /// running sentinel sees each of those replicas as a healthy replica of
    /// it (role reported `slave`, not down, link ok). Then a fault loses no
    /// acknowledged write by replication lag, and a failover started now
    /// picks among settled replicas: a sentinel still converting a
    /// restarted former master could otherwise undo the promotion of the
    /// very node another sentinel just chose, aborting that failover.
    /// Sentinels refresh a replica's reported role every 10 s, so after a
    /// former master's restart this takes about 20 s. False after
    /// `timeout`.
    pub fn wait_replicas_in_sync(&self, timeout: Duration) -> bool {
        poll(timeout, || {
            let running = || self.sentinels.iter().filter(|s| s.is_running());
            let master = self.master_port()?;
            let mut replicas = Vec::new();
            let info = cli(master, &["INFO", "replication"], PROBE_LIMIT)?;
            let offset = info_field(&info, "master_repl_offset")?.to_string();
            for n in self
                .data
                .iter()
                .filter(|n| n.is_running() && n.port != master)
            {
                let info = cli(n.port, &["INFO", "replication"], PROBE_LIMIT)?;
                let in_sync = info_field(&info, "role") == Some("slave")
                    && info_field(&info, "master_port") == Some(&master.to_string())
                    && info_field(&info, "master_link_status") == Some("up")
                    && info_field(&info, "slave_repl_offset") == Some(&offset);
                if !in_sync {
                    return None;
                }
                replicas.push(n.port.to_string());
            }
            for s in running() {
                if self.master_port_from(s)? != master {
                    return None;
                }
                let seen = cli(s.port, &["SENTINEL", "replicas", MASTER_NAME], PROBE_LIMIT)?;
                let seen = maps(&seen);
                let settled = replicas.iter().all(|port| {
                    seen.iter().any(|r| {
                        let is = |k: &str, v: &str| r.get(k).map(String::as_str) == Some(v);
                        is("port", port)
                            && is("flags", "slave")
                            && is("role-reported", "slave")
                            && is("master-link-status", "ok")
                            && is("master-port", &master.to_string())
                    })
                });
                if !settled {
                    return None;
                }
            }
            Some(())
        })
        .is_some()
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct ClusterEntry {
    id: String,
    port: u16,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, ...
    flags: Vec<String>,
    /// For a replica, its master's id.
    master_id: Option<String>,
    /// Inclusive slot ranges served (migration entries left out).
    slots: Vec<(u16, u16)>,
}

impl ClusterEntry {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }

    /// A master not marked failed by the cluster that serves slots.
    fn is_serving_master(&self) -> bool {
        self.has("master") && !self.has("fail") && !self.slots.is_empty()
    }
}

fn parse_cluster_nodes(text: &str) -> Vec<ClusterEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(ClusterEntry {
                id: fields[0].to_string(),
                port: port_of(fields[1])?,
                flags: fields[2].split(',').map(str::to_string).collect(),
                master_id: (fields[3] != "-").then(|| fields[3].to_string()),
                slots,
            })
        })
        .collect()
}

/// What a master served and which node replicated it, last seen.
#[derive(Debug, Clone)]
struct Shard {
    master: u16,
    replica: Option<u16>,
    slots: Vec<(u16, u16)>,
}

/// A Redis Cluster of six nodes on 127.0.0.1: three masters with one
/// replica each, `cluster-node-timeout` 1 s (a master unreachable that
/// long is suspected, then failed over once a majority of masters agree).
pub struct ClusterWithReplicas {
    nodes: Vec<Node>,
    /// The shards as last seen whole: `wait_for_failover` needs the dead
    /// master's slots and replica after the cluster may have forgotten them.
    known: Vec<Shard>,
}

impl ClusterWithReplicas {
    /// Starts six nodes, joins them with `redis-cli --cluster create
    /// --cluster-replicas 1`, and waits until every node reports
    /// `cluster_state:ok` and sees three masters serving slots with one
    /// replica each, none suspected, and every master has its replica
    /// connected and online. A node's cluster bus port (port + 10000) can
    /// be taken by another test between the check and the start, so a
    /// failed attempt is retried with fresh nodes (3 attempts, then panics).
    pub fn start() -> ClusterWithReplicas {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(cluster) => return cluster,
                Err(why) => last = why,
            }
        }
        panic!("{last} (3 attempts)");
    }

    fn try_start() -> Result<ClusterWithReplicas, String> {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
        ];
        let nodes: Vec<Node> = (0..6)
            .map(|_| Node::start_on(&args, free_cluster_port))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        crate::redis_server::cluster_create(&addrs, 1)?;
        let mut cluster = ClusterWithReplicas {
            nodes,
            known: Vec::new(),
        };
        let mut missing = String::new();
        let ready = poll(Duration::from_secs(30), || {
            match cluster.whole() {
                Ok(shards) => return Some(shards),
                Err(why) => missing = why,
            }
            None
        });
        match ready {
            Some(shards) => {
                cluster.known = shards;
                Ok(cluster)
            }
            None => Err(format!("the cluster was not whole in 30 s: {missing}")),
        }
    }

    /// The shards if every node reports `cluster_state:ok` and sees three
    /// serving masters each with one replica and nobody failed or
    /// suspected, and every master has its replica online; else what was
    /// missing.
    fn whole(&self) -> Result<Vec<Shard>, String> {
        let mut shards = Vec::new();
        for node in &self.nodes {
            let info = cli(node.port, &["CLUSTER", "INFO"], PROBE_LIMIT).unwrap_or_default();
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!("{}: not cluster_state:ok", node.port));
            }
            let text = cli(node.port, &["CLUSTER", "NODES"], PROBE_LIMIT).unwrap_or_default();
            let view = parse_cluster_nodes(&text);
            let bad = view
                .iter()
                .filter(|e| {
                    e.flags
                        .iter()
                        .any(|f| f.starts_with("fail") || f == "handshake")
                })
                .count();
            if view.len() != 6 || bad != 0 {
                return Err(format!(
                    "{}: sees {} nodes, {bad} failed or in handshake",
                    node.port,
                    view.len()
                ));
            }
            shards = view
                .iter()
                .filter(|e| e.is_serving_master())
                .map(|m| Shard {
                    master: m.port,
                    replica: view
                        .iter()
                        .find(|r| r.has("slave") && r.master_id.as_deref() == Some(&m.id))
                        .map(|r| r.port),
                    slots: m.slots.clone(),
                })
                .collect();
            if shards.len() != 3 || shards.iter().any(|s| s.replica.is_none()) {
                return Err(format!("{}: sees {shards:?}", node.port));
            }
        }
        for shard in &shards {
            let info = cli(shard.master, &["INFO", "replication"], PROBE_LIMIT).unwrap_or_default();
            let online = info_field(&info, "slave0").is_some_and(|s| s.contains("state=online"));
            if info_field(&info, "connected_slaves") != Some("1") || !online {
                return Err(format!("{}: its replica is not online", shard.master));
            }
        }
        Ok(shards)
    }

    /// `CLUSTER NODES` parsed, from the first running node that answers.
    fn view(&self) -> Option<Vec<ClusterEntry>> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .filter_map(|n| cli(n.port, &["CLUSTER", "NODES"], PROBE_LIMIT))
            .map(|text| parse_cluster_nodes(&text))
            .find(|view| !view.is_empty())
    }

    /// `redis://127.0.0.1:P/` for all six nodes, in start order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The ports of the masters serving slots and not marked failed, in
    /// the view of the first running node that answers; sorted. A master
    /// that died stays in this list until the cluster marks it failed.
    pub fn masters(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .view()
            .unwrap_or_default()
            .iter()
            .filter(|e| e.is_serving_master())
            .map(|e| e.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// The master serving `slot`, in the view of the first running node
    /// that answers.
    pub fn master_of_slot(&self, slot: u16) -> Option<u16> {
        let view = self.view()?;
        let owner = view.iter().find(|e| e.has("master") && e.serves(slot))?;
        Some(owner.port)
    }

    /// A replica of the master on `master_port` not marked failed, in the
    /// view of the first running node that answers.
    pub fn replica_of(&self, master_port: u16) -> Option<u16> {
        let view = self.view()?;
        let master = view.iter().find(|e| e.port == master_port)?;
        let replica = view.iter().find(|e| {
            e.has("slave") && !e.has("fail") && e.master_id.as_deref() == Some(&master.id)
        })?;
        Some(replica.port)
    }

    /// A node by its port. Panics for any other port.
    pub fn node(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// The six nodes, in start order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn nodes_mut(&mut self) -> &mut [Node] {
        &mut self.nodes
    }

    /// Waits until every running node reports `cluster_state:ok` and sees
    /// all the slots `dead_master_port` served now served by its former
    /// replica, as master. The slots and the replica are taken from the
    /// cluster's view if it still shows the dead master serving them, else
    /// from the last time this cluster saw that shard whole (at start or
    /// at an earlier failover). The new master's port, or None after
    /// `timeout` or if the dead master had no known replica.
    pub fn wait_for_failover(&mut self, dead_master_port: u16, timeout: Duration) -> Option<u16> {
        if let Some(view) = self.view() {
            if let Some(m) = view
                .iter()
                .find(|e| e.port == dead_master_port && e.is_serving_master())
            {
                let replica = view
                    .iter()
                    .find(|r| r.has("slave") && r.master_id.as_deref() == Some(&m.id))
                    .map(|r| r.port);
                self.known.retain(|s| s.master != dead_master_port);
                self.known.push(Shard {
                    master: dead_master_port,
                    replica,
                    slots: m.slots.clone(),
                });
            }
        }
        let shard = self
            .known
            .iter()
            .find(|s| s.master == dead_master_port)?
            .clone();
        let heir = shard.replica?;
        let nodes = &self.nodes;
        let took_over = poll(timeout, || {
            for n in nodes.iter().filter(|n| n.is_running()) {
                let info = cli(n.port, &["CLUSTER", "INFO"], PROBE_LIMIT)?;
                if info_field(&info, "cluster_state") != Some("ok") {
                    return None;
                }
                let view = parse_cluster_nodes(&cli(n.port, &["CLUSTER", "NODES"], PROBE_LIMIT)?);
                let entry = view.iter().find(|e| e.port == heir)?;
                let all = shard
                    .slots
                    .iter()
                    .all(|&(a, b)| entry.serves(a) && entry.serves(b));
                if !entry.has("master") || !all {
                    return None;
                }
            }
            Some(())
        });
        took_over?;
        for s in &mut self.known {
            if s.master == dead_master_port {
                *s = Shard {
                    master: heir,
                    replica: None,
                    slots: shard.slots.clone(),
                };
            }
        }
        Some(heir)
    }

    /// Waits until every serving master (in the view of the first running
    /// node that answers) has each of its replicas running, linked and at
    /// the master's replication offset: a restarted node has finished its
    /// resync and can be failed over to (a replica that never synced since
    /// it started refuses to). False after `timeout`.
    pub fn wait_replicas_in_sync(&self, timeout: Duration) -> bool {
        poll(timeout, || {
            let view = self.view()?;
            for m in view.iter().filter(|e| e.is_serving_master()) {
                let info = cli(m.port, &["INFO", "replication"], PROBE_LIMIT)?;
                let offset = info_field(&info, "master_repl_offset")?.to_string();
                for r in view
                    .iter()
                    .filter(|r| r.has("slave") && r.master_id.as_deref() == Some(&m.id))
                {
                    let info = cli(r.port, &["INFO", "replication"], PROBE_LIMIT)?;
                    let in_sync = info_field(&info, "master_port") == Some(&m.port.to_string())
                        && info_field(&info, "master_link_status") == Some("up")
                        && info_field(&info, "slave_repl_offset") == Some(&offset);
                    if !in_sync {
                        return None;
                    }
                }
            }
            Some(())
        })
        .is_some()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT` on the first running node
    /// that answers). Panics if none does.
    pub fn slot_of(&self, key: &str) -> u16 {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .filter_map(|n| cli(n.port, &["CLUSTER", "KEYSLOT", key], PROBE_LIMIT))
            .find_map(|r| r.trim_end().parse().ok())
            .expect("no running cluster node answered CLUSTER KEYSLOT")
    }
}

/// State shared by a `Blackhole` and its threads.
struct Hole {
    upstream: AtomicU16,
    /// Whether new connections are swallowed rather than forwarded.
    blackholed: AtomicBool,
    /// How many times `blackhole` was called. A forwarding connection keeps
    /// the count it started with and is dead for good once the count
    /// changes: bytes already dropped would leave the Redis protocol out of
    /// step if it forwarded again.
    cuts: AtomicU64,
    /// Set on drop: threads end instead of waiting.
    closed: AtomicBool,
    /// A clone of every socket of every live connection, by connection, so
    /// that drop can shut them all down and wake their threads.
    sockets: Mutex<HashMap<u64, Vec<TcpStream>>>,
    next_id: AtomicU64,
}

/// A TCP proxy on a free loopback port to `127.0.0.1:upstream`, threads
/// only (one accepting, two per forwarded connection, one per swallowed
/// one), that can cut its clients off the server as a network partition
/// would: no RST, no FIN, just silence.
pub struct Blackhole {
    port: u16,
    hole: Arc<Hole>,
    acceptor: Option<JoinHandle<()>>,
}

impl Blackhole {
    /// A proxy forwarding to `127.0.0.1:upstream`. A new connection opens
    /// one to the upstream; if that is refused the client's is closed.
    pub fn start(upstream: u16) -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().unwrap().port();
        let hole = Arc::new(Hole {
            upstream: AtomicU16::new(upstream),
            blackholed: AtomicBool::new(false),
            cuts: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            sockets: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        });
        let shared = Arc::clone(&hole);
        let acceptor = std::thread::spawn(move || accept(listener, &shared));
        Blackhole {
            port,
            hole,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Partitions: every connection open now reads and discards every byte
    /// in both directions from here on, for good (it stays open: no RST, no
    /// FIN either way), and connections accepted until `heal` are swallowed
    /// the same way without ever reaching the upstream.
    pub fn blackhole(&self) {
        self.hole.blackholed.store(true, Ordering::SeqCst);
        self.hole.cuts.fetch_add(1, Ordering::SeqCst);
    }

    /// Ends the partition for new connections only: those accepted from now
    /// on are forwarded again. Connections that were open at `blackhole`
    /// or accepted during it stay silent until the client closes them (or
    /// the proxy is dropped), as after a partition that outlived the
    /// client's view of the connection; clients must reconnect.
    pub fn heal(&self) {
        self.hole.blackholed.store(false, Ordering::SeqCst);
    }

    pub fn is_blackholed(&self) -> bool {
        self.hole.blackholed.load(Ordering::SeqCst)
    }

    /// Forwards new connections to `127.0.0.1:port` (to follow a failover);
    /// open connections keep their upstream.
    pub fn set_upstream(&self, port: u16) {
        self.hole.upstream.store(port, Ordering::SeqCst);
    }
}

impl Drop for Blackhole {
    /// Closes every connection (clients see FIN) and ends every thread:
    /// shut-down sockets wake the readers, a connection to itself wakes the
    /// acceptor.
    fn drop(&mut self) {
        self.hole.closed.store(true, Ordering::SeqCst);
        for socket in self
            .hole
            .sockets
            .lock()
            .unwrap()
            .drain()
            .flat_map(|(_, s)| s)
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Accepts until the proxy is dropped: forwards each connection, or
/// swallows it while blackholed.
fn accept(listener: TcpListener, hole: &Arc<Hole>) {
    for client in listener.incoming() {
        if hole.closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else {
            std::thread::sleep(POLL); // out of descriptors, say: no spin
            continue;
        };
        let id = hole.next_id.fetch_add(1, Ordering::SeqCst);
        // Read before the flag: a `blackhole` after the flag check still
        // changes the count, so the connection is cut either way.
        let cuts = hole.cuts.load(Ordering::SeqCst);
        if hole.blackholed.load(Ordering::SeqCst) {
            register(hole, id, vec![client.try_clone().unwrap()]);
            let hole = Arc::clone(hole);
            std::thread::spawn(move || {
                swallow(client);
                hole.sockets.lock().unwrap().remove(&id);
            });
            continue;
        }
        let upstream = hole.upstream.load(Ordering::SeqCst);
        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
            continue; // dropping `client` closes it, as a refusal
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        register(
            hole,
            id,
            vec![client.try_clone().unwrap(), server.try_clone().unwrap()],
        );
        let ended = Arc::new(AtomicUsize::new(0));
        for (from, to) in [
            (client.try_clone().unwrap(), server.try_clone().unwrap()),
            (server, client),
        ] {
            let (hole, ended) = (Arc::clone(hole), Arc::clone(&ended));
            std::thread::spawn(move || {
                pump(from, to, cuts, &hole);
                if ended.fetch_add(1, Ordering::SeqCst) == 1 {
                    hole.sockets.lock().unwrap().remove(&id);
                }
            });
        }
    }
}

fn register(hole: &Hole, id: u64, sockets: Vec<TcpStream>) {
    let mut all = hole.sockets.lock().unwrap();
    if hole.closed.load(Ordering::SeqCst) {
        for socket in &sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
    all.insert(id, sockets);
}

/// Reads and discards until the peer closes or the proxy is dropped.
fn swallow(mut from: TcpStream) {
    let mut chunk = [0; 16384];
    while let Ok(1..) = from.read(&mut chunk) {}
}

/// Copies `from` to `to` while the cut count is still `cuts`, then
/// discards. When forwarding ends by a close or an error it closes both
/// sides, as a proxy passes a close on; once cut, a close is not passed on
/// (a partition carries no FIN).
fn pump(mut from: TcpStream, mut to: TcpStream, cuts: u64, hole: &Hole) {
    let mut chunk = [0; 16384];
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if hole.cuts.load(Ordering::SeqCst) != cuts {
            continue;
        }
        if to.write_all(&chunk[..n]).is_err() {
            break;
        }
    }
    if hole.cuts.load(Ordering::SeqCst) == cuts || hole.closed.load(Ordering::SeqCst) {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    }
}
