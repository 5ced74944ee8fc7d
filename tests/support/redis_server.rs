//! Real Redis servers for tests: `redis-server` started on free loopback
//! ports in a temporary directory, torn down on drop. A 3-master Redis
//! Cluster is created with `redis-cli --cluster create`.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tests' tokio runtime: two worker threads, timers and I/O.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A free loopback port: bind port 0, read it, release it.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}

/// A free port whose cluster-bus port (port + 10000) is free too.
pub fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A fresh directory under the system temp dir, unique to this process
/// and call; the caller removes it.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rategate-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs redis-cli against 127.0.0.1:`port`: its stdout, or None when it
/// could not run or failed (a Redis error reply still counts as output).
pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `redis-cli --cluster create` of the nodes at `addrs` with `replicas`
/// replicas per master, bounded: it waits for the nodes to join without a
/// limit, and a node that went away after answering (its cluster bus port
/// taken by another test's connection, say) would hang it for good; the
/// caller retries with fresh nodes like any other failure.
pub fn cluster_create(addrs: &[String], replicas: u32) -> Result<(), String> {
    let mut create = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-cli must be installed (apt-get install redis-tools)");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match create.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(_)) => return Err("redis-cli --cluster create failed".to_string()),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => {
                let _ = create.kill();
                let _ = create.wait();
                return Err("redis-cli --cluster create did not finish in 30 s".to_string());
            }
        }
    }
}

/// One `redis-server` process on 127.0.0.1.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::start_on(extra, free_port)
    }

    /// Starts a server on a port from `pick`; if the port was taken in the
    /// meantime (another test got it first), tries another.
    fn start_on(extra: &[&str], pick: fn() -> u16) -> RedisServer {
        let mut server = RedisServer {
            port: pick(),
            child: None,
            dir: temp_dir("redis"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for _ in 0..5 {
            if server.try_launch() {
                return server;
            }
            server.kill();
            server.port = pick();
        }
        panic!("could not start redis-server");
    }

    fn launch(&mut self) {
        assert!(
            self.try_launch(),
            "redis-server on port {} did not start",
            self.port
        );
    }

    /// Starts the process and waits until it answers PING. False if it
    /// exited (port taken) or another process answers on the port.
    fn try_launch(&mut self) -> bool {
        assert!(self.child.is_none());
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false; // exited: the port was taken
            }
            if let Some(info) = redis_cli(self.port, &["INFO", "server"]) {
                // Make sure it is our process answering, not another test's.
                return info.contains(&format!("process_id:{pid}\r"))
                    || info.contains(&format!("process_id:{pid}\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: nothing is saved).
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Runs a redis-cli command against this server.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        redis_cli(self.port, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A 3-master Redis Cluster on free loopback ports.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        Self::start_with(&[])
    }

    /// With `extra` arguments for every node (say
    /// `--cluster-require-full-coverage no`, so that the live masters keep
    /// serving while one is dead).
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        // Parallel tests pick ports independently: a node's cluster bus port
        // (port + 10,000) can be taken between the check and the start, and
        // `--cluster create` then fails. Retry with fresh nodes and ports.
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(extra) {
                Ok(cluster) => return cluster,
                Err(why) => last = why,
            }
        }
        panic!("{last} (3 attempts)");
    }

    fn try_start(extra: &[&str]) -> Result<RedisCluster, String> {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                let conf = format!("nodes-{i}.conf");
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "5000",
                ];
                args.extend_from_slice(extra);
                RedisServer::start_on(&args, free_cluster_port)
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        cluster_create(&addrs, 0)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        'wait: while Instant::now() < deadline {
            for node in &nodes {
                let info = node.cli(&["CLUSTER", "INFO"]).unwrap_or_default();
                if !info.contains("cluster_state:ok") {
                    std::thread::sleep(Duration::from_millis(50));
                    continue 'wait;
                }
            }
            return Ok(RedisCluster { nodes });
        }
        Err("the cluster did not reach cluster_state:ok".to_string())
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}
