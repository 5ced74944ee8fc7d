//! A TCP proxy in front of a real server for tests: it forwards what the
//! client sends at once and what the server answers after a set delay, so
//! that commands written while a reply is held are visibly in flight
//! together; it records when each `EVALSHA` passed, with its script's SHA1,
//! and can cut every connection at once.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One `EVALSHA` seen on its way to the server.
#[derive(Debug, Clone)]
pub struct Evalsha {
    /// Which client connection (in the order accepted).
    pub connection: usize,
    pub at: Instant,
    pub sha: String,
    /// Its number of keys.
    pub keys: usize,
}

#[derive(Default)]
struct State {
    evalshas: Vec<Evalsha>,
    sockets: Vec<TcpStream>,
    accepted: usize,
}

pub struct DelayProxy {
    pub port: u16,
    /// The delay of the server's replies, in milliseconds.
    delay_ms: Arc<AtomicU64>,
    state: Arc<Mutex<State>>,
}

impl DelayProxy {
    /// A proxy on a free loopback port to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let state = Arc::new(Mutex::new(State::default()));
        let (delay, shared) = (Arc::clone(&delay_ms), Arc::clone(&state));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let id = {
                    let mut state = shared.lock().unwrap();
                    state.sockets.push(client.try_clone().unwrap());
                    state.sockets.push(server.try_clone().unwrap());
                    state.accepted += 1;
                    state.accepted - 1
                };
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || upward(id, c, s, &shared));
                let delay = Arc::clone(&delay);
                std::thread::spawn(move || downward(server, client, &delay));
            }
        });
        DelayProxy {
            port,
            delay_ms,
            state,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// Every `EVALSHA` so far, in the order seen.
    pub fn evalshas(&self) -> Vec<Evalsha> {
        self.state.lock().unwrap().evalshas.clone()
    }

    /// Shuts every connection so far down, both ways (new ones are
    /// accepted as before).
    pub fn cut(&self) {
        for socket in self.state.lock().unwrap().sockets.drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// Client to server, at once, noting each `EVALSHA` and its SHA1.
fn upward(id: usize, mut client: TcpStream, mut server: TcpStream, state: &Mutex<State>) {
    const HEAD: &[u8] = b"$7\r\nEVALSHA\r\n$40\r\n";
    let mut seen = Vec::new();
    let mut scanned = 0;
    let mut chunk = [0; 65536];
    loop {
        let n = match client.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let at = Instant::now();
        seen.extend_from_slice(&chunk[..n]);
        while let Some(found) = seen[scanned..]
            .windows(HEAD.len())
            .position(|w| w.eq_ignore_ascii_case(HEAD))
        {
            let sha_at = scanned + found + HEAD.len();
            // The SHA1, then `\r\n$<len>\r\n<number of keys>\r\n`.
            let Some((sha, keys, end)) = sha_and_keys(&seen, sha_at) else {
                break;
            };
            state.lock().unwrap().evalshas.push(Evalsha {
                connection: id,
                at,
                sha,
                keys,
            });
            scanned = end;
        }
        if server.write_all(&chunk[..n]).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
}

/// The SHA1 at `at`, the number of keys after it and where they end, once
/// all of it came.
fn sha_and_keys(seen: &[u8], at: usize) -> Option<(String, usize, usize)> {
    let sha = seen.get(at..at + 40)?;
    let rest = seen.get(at + 40..)?.strip_prefix(b"\r\n$")?;
    let len_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..len_end]).ok()?.parse().ok()?;
    let digits = rest.get(len_end + 2..len_end + 2 + len)?;
    let keys = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let end = at + 40 + 3 + len_end + 2 + len;
    Some((String::from_utf8_lossy(sha).into_owned(), keys, end))
}

/// Server to client, each chunk held until the delay since it came has
/// passed.
fn downward(mut server: TcpStream, mut client: TcpStream, delay: &AtomicU64) {
    let (send, held) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = std::thread::spawn(move || {
        for (due, bytes) in held {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if client.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = client.shutdown(Shutdown::Both);
    });
    let mut chunk = [0; 65536];
    loop {
        let n = match server.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let due = Instant::now() + Duration::from_millis(delay.load(Ordering::Relaxed));
        if send.send((due, chunk[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(send);
    let _ = writer.join();
}
