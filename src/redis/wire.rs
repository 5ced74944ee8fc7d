//! The batching task's own connection to a single server (which a lone
//! caller borrows for its own decision).
//!
//! The driver task is the only user of the socket while it holds it, so
//! it needs no multiplexing: it writes its commands and reads their
//! replies on its own socket, in its own task; with a few batches in
//! flight, the replies come in the order the commands were written
//! ([`Wire::write`], [`Wire::read`]). Through redis-rs's multiplexed
//! connection every batch takes two more task hops (the command to
//! redis-rs's socket task, its reply back): paired, the same driver on
//! redis-rs's `ConnectionManager` made 152,000 decisions/s against
//! 173,000 on this socket at 64 tasks (medians of three interleaved turns
//! of `cargo run --release --features redis --example redis_throughput`),
//! and the same at 1 and 16. The connection is opened on first use and
//! after any failure or timeout (a late reply would answer a later
//! request), with the URL's user, password and database; RESP2; over TLS
//! (rustls, feature `redis-tls`) for a `rediss://` URL, verifying the
//! server's certificate against the limiter's [`Tls`] roots.

use super::RedisError;
use super::connection::Tls;
use super::single::Single;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind};
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The socket.
enum Stream {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
    #[cfg(feature = "redis-tls")]
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

impl Stream {
    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes).await,
            #[cfg(unix)]
            Stream::Unix(s) => s.write_all(bytes).await,
            #[cfg(feature = "redis-tls")]
            Stream::Tls(s) => s.write_all(bytes).await,
        }
    }

    async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_buf(buf).await,
            #[cfg(unix)]
            Stream::Unix(s) => s.read_buf(buf).await,
            #[cfg(feature = "redis-tls")]
            Stream::Tls(s) => s.read_buf(buf).await,
        }
    }
}

/// One reply (the kinds the driver's commands get).
#[derive(Debug, PartialEq)]
pub(crate) enum Reply {
    /// `+...` or `:...`: a status or an integer, as text.
    Simple(Vec<u8>),
    /// `$...`: the bytes are in the connection's buffer, from `start` for
    /// `len` (valid until the next request).
    Bulk { start: usize, len: usize },
    /// `-...`: the message.
    Error(String),
    /// `*...` of at most six integers (a decision script's reply): the
    /// values and how many there were.
    Ints([i64; 6], usize),
}

/// The driver's connection.
pub(crate) struct Wire {
    info: ConnectionInfo,
    /// Through Sentinel: where `info` comes from when a socket opens, and
    /// who is told when one fails.
    follow: Option<Single>,
    /// For a `rediss://` address: how to verify the server.
    #[cfg(feature = "redis-tls")]
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    stream: Option<Stream>,
    /// Replies owed on this socket: commands written whose reply has not
    /// been read whole. The driver keeps up to its batches in flight
    /// owed and reads them in order; whoever takes the connection with
    /// replies still owed (a lone caller's call dropped mid-way) opens a
    /// new socket instead ([`claim`](Wire::claim)).
    owed: usize,
    /// Bytes read; replies are parsed from `pos`.
    buf: Vec<u8>,
    /// Where the next reply starts in `buf`.
    pos: usize,
    /// Whether the socket has given a reply since it opened.
    answered: bool,
    /// A write was dropped mid-way: the server may hold part of a command.
    writing: bool,
    /// Sockets in a row that failed to open (refused, TLS, `AUTH`), failed
    /// before their first reply (a proxy that accepts and closes, a server
    /// that dies at once) or answered `READONLY`, and until when no new
    /// one is opened: 10 ms doubled per such socket, at most 1 s. Meanwhile requests fail at once, and the store-down policy
    /// decides without a connection a request.
    dead_opens: u32,
    retry_at: Option<tokio::time::Instant>,
}

impl Wire {
    /// A connection to the server `info` names, opened on first use.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] for an address it cannot open (TLS).
    pub(crate) fn new(info: ConnectionInfo, tls: &Tls) -> Result<Wire, RedisError> {
        Wire::following(info, tls, None)
    }

    /// A connection to the master `follow` names (now `info`), opened on
    /// first use and after a failure with the master's address then.
    pub(crate) fn following(
        info: ConnectionInfo,
        tls: &Tls,
        follow: Option<Single>,
    ) -> Result<Wire, RedisError> {
        let _ = tls;
        #[cfg(feature = "redis-tls")]
        let mut config = None;
        match info.addr() {
            ConnectionAddr::Tcp(..) => {}
            #[cfg(unix)]
            ConnectionAddr::Unix(_) => {}
            #[cfg(feature = "redis-tls")]
            ConnectionAddr::TcpTls { insecure, .. } => {
                if *insecure {
                    return Err(RedisError::Tls(
                        "the batching connection verifies the server's certificate: \
                         remove #insecure from the URL, or give the CA with tls()"
                            .into(),
                    ));
                }
                config = Some(tls_config(tls)?);
            }
            _ => {
                return Err(RedisError::Config(
                    "batching needs a TCP, TLS or Unix socket address",
                ));
            }
        }
        Ok(Wire {
            info,
            follow,
            #[cfg(feature = "redis-tls")]
            tls: config,
            stream: None,
            owed: 0,
            buf: Vec::with_capacity(4096),
            pos: 0,
            answered: false,
            writing: false,
            dead_opens: 0,
            retry_at: None,
        })
    }

    /// The bytes of a [`Reply::Bulk`] (valid until the next read).
    pub(crate) fn bulk(&self, start: usize, len: usize) -> &[u8] {
        self.buf.get(start..start + len).unwrap_or_default()
    }

    /// Drops a socket that failed (an I/O error, or no reply in time):
    /// as [`reset`](Wire::reset), and a socket that never answered holds
    /// off the next ([`dead_open`](Wire::dead_open)).
    pub(crate) fn fail(&mut self) {
        if self.stream.is_some() && !self.answered {
            self.dead_open();
        }
        self.reset();
    }

    /// Drops the socket: the next request opens a new one. For requests
    /// abandoned mid-way (a caller that gave up), whose replies may still
    /// come.
    pub(crate) fn reset(&mut self) {
        if let Some(follow) = &self.follow {
            follow.search();
        }
        self.stream = None;
        self.owed = 0;
        self.writing = false;
        self.buf.clear();
        self.pos = 0;
    }

    /// Counts a socket that failed before its first reply, and holds off
    /// the next for 10 ms doubled per such socket in a row, at most 1 s.
    fn dead_open(&mut self) {
        self.dead_opens = self.dead_opens.saturating_add(1);
        let backoff = Duration::from_millis(10)
            .saturating_mul(1 << self.dead_opens.min(7))
            .min(Duration::from_secs(1));
        self.retry_at = Some(tokio::time::Instant::now() + backoff);
    }

    /// Called by whoever takes the connection. Replies still owed belong
    /// to a holder that gave up mid-way and would answer the new holder's
    /// commands: they are read and dropped (by `deadline`, if given; the
    /// socket is kept, so callers that give up early do not open a socket
    /// each). A command written only in part would run with the next
    /// one's bytes as its own: that socket is replaced, as are owed
    /// replies that do not come by `deadline`. Cancel safe: dropped, it
    /// leaves the replies it did not read owed.
    pub(crate) async fn claim(&mut self, deadline: Option<tokio::time::Instant>) {
        if self.writing {
            self.reset();
            return;
        }
        while self.owed > 0 {
            let read = match deadline {
                Some(at) => tokio::time::timeout_at(at, self.read()).await,
                None => Ok(self.read().await),
            };
            match read {
                Ok(Ok(_)) => {}
                // `read` dropped the socket.
                Ok(Err(_)) => return,
                Err(_) => {
                    self.fail();
                    return;
                }
            }
        }
    }

    /// Sends one packed command and reads its reply, connecting first if
    /// needed (the caller bounds it in time). Any failure drops the
    /// socket.
    pub(crate) async fn request(&mut self, packed: &[u8]) -> Result<Reply, redis::RedisError> {
        self.claim(None).await;
        self.write(packed).await?;
        self.read().await
    }

    /// Writes one packed command, connecting first if needed; its reply
    /// is owed until [`read`](Wire::read) returns it (replies come in the
    /// order the commands were written). Any failure drops the socket.
    pub(crate) async fn write(&mut self, packed: &[u8]) -> Result<(), redis::RedisError> {
        let result = self.write_inner(packed).await;
        if result.is_err() {
            self.fail();
        }
        result
    }

    async fn write_inner(&mut self, packed: &[u8]) -> Result<(), redis::RedisError> {
        if self.stream.is_none() {
            if let Some(follow) = &self.follow
                && follow.info().addr() != self.info.addr()
            {
                // Sentinel names another master: the backoff was for the
                // old one.
                self.retry_at = None;
                self.dead_opens = 0;
            }
            if self
                .retry_at
                .is_some_and(|at| tokio::time::Instant::now() < at)
            {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the last connections closed before answering; retrying shortly",
                )
                .into());
            }
            if let Err(e) = self.open().await {
                // The connect failed (a refusal, no route), or the TLS
                // handshake, or `AUTH` / `SELECT` were refused (a rotated
                // password): the next socket would fare the same.
                self.dead_open();
                self.stream = None;
                return Err(e);
            }
        }
        self.put(packed).await
    }

    /// Writes on the open socket.
    async fn put(&mut self, packed: &[u8]) -> Result<(), redis::RedisError> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::from(io::ErrorKind::NotConnected).into());
        };
        // Counted before the write: a write dropped mid-way leaves the
        // socket with a command (maybe) sent and its reply owed, and
        // `writing` says it may be incomplete.
        self.owed += 1;
        self.writing = true;
        stream.write_all(packed).await?;
        self.writing = false;
        Ok(())
    }

    /// Reads the oldest owed reply. Cancel safe: dropped while waiting for
    /// bytes, it keeps what it read, and the next call reads the same
    /// reply. Any failure drops the socket.
    pub(crate) async fn read(&mut self) -> Result<Reply, redis::RedisError> {
        let result = self.read_inner().await;
        match &result {
            Err(_) => self.fail(),
            // A master turned replica (a failover, or a restart that came
            // back as one): its replies that follow would be the same, so
            // the socket is dropped and the next opens where the master is
            // (at once when Sentinel names another; else after the
            // backoff, as a server that is no master stays one a while).
            Ok(Reply::Error(message)) if message.contains("READONLY") => {
                self.dead_open();
                self.reset();
            }
            Ok(_) => self.dead_opens = 0,
        }
        result
    }

    async fn read_inner(&mut self) -> Result<Reply, redis::RedisError> {
        if self.owed == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no reply owed").into());
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::from(io::ErrorKind::NotConnected).into());
        };
        loop {
            match parse_reply(&self.buf[self.pos..]) {
                Ok(Some((reply, used))) => {
                    let at = self.pos;
                    self.pos += used;
                    self.owed -= 1;
                    self.answered = true;
                    return Ok(match reply {
                        Reply::Bulk { start, len } => Reply::Bulk {
                            start: at + start,
                            len,
                        },
                        other => other,
                    });
                }
                Ok(None) => {}
                Err(what) => {
                    return Err((ErrorKind::Parse, "malformed reply", what.to_owned()).into());
                }
            }
            // Replies read are consumed; what is left is the start of the
            // next one. Moved to the front before reading more, so the
            // buffer stays one reply or two long.
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            // Cancel safe: `read_buf` reads nothing when dropped before it
            // completes, and what it read is in `buf`.
            if stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
        }
    }

    /// Connects, then `AUTH` and `SELECT` as the URL asks.
    async fn open(&mut self) -> Result<(), redis::RedisError> {
        if let Some(follow) = &self.follow {
            self.info = follow.info();
        }
        let stream = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let socket = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                socket.set_nodelay(true)?;
                Stream::Tcp(socket)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                Stream::Unix(tokio::net::UnixStream::connect(path).await?)
            }
            #[cfg(feature = "redis-tls")]
            ConnectionAddr::TcpTls { host, port, .. } => {
                let Some(config) = self.tls.clone() else {
                    return Err(io::Error::from(io::ErrorKind::Unsupported).into());
                };
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let socket = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                socket.set_nodelay(true)?;
                let stream = tokio_rustls::TlsConnector::from(config)
                    .connect(name, socket)
                    .await?;
                Stream::Tls(Box::new(stream))
            }
            _ => return Err(io::Error::from(io::ErrorKind::Unsupported).into()),
        };
        self.stream = Some(stream);
        self.answered = false;
        let settings = self.info.redis_settings().clone();
        let mut command = redis::Cmd::new();
        if let Some(password) = settings.password() {
            command.arg("AUTH");
            if let Some(user) = settings.username() {
                command.arg(user);
            }
            command.arg(password);
            self.expect_ok(&command).await?;
        }
        if settings.db() != 0 {
            command.clear();
            command.arg("SELECT").arg(settings.db());
            self.expect_ok(&command).await?;
        }
        Ok(())
    }

    async fn expect_ok(&mut self, command: &redis::Cmd) -> Result<(), redis::RedisError> {
        self.put(&command.get_packed_command()).await?;
        match self.read_inner().await? {
            Reply::Error(message) => Err(server_error(message)),
            _ => Ok(()),
        }
    }
}

/// The rustls configuration for `tls`: its roots (else the system's) and
/// its client certificate, on the ring provider.
#[cfg(feature = "redis-tls")]
fn tls_config(tls: &Tls) -> Result<std::sync::Arc<rustls::ClientConfig>, RedisError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: &dyn std::fmt::Display| RedisError::Tls(format!("{what}: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    match &tls.root_cert {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| bad("the root certificate", &e))?;
                roots
                    .add(cert)
                    .map_err(|e| bad("the root certificate", &e))?;
            }
            if roots.is_empty() {
                return Err(RedisError::Tls(
                    "the root certificate holds no PEM certificate".into(),
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            // Certificates the system has but rustls cannot read are
            // skipped, as redis-rs's own connection skips them.
            let _ = roots.add_parsable_certificates(found.certs);
        }
    }
    // ring, not aws-lc-rs: no C toolchain (cmake) to build. rustls
    // 0.23.48 deprecates ring's provider for its lack of post-quantum key
    // exchange, which TLS to Redis does not need.
    #[allow(deprecated)]
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("the TLS versions", &e))?
        .with_root_certificates(roots);
    let config = match &tls.client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad("the client certificate", &e))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("the client key", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("the client certificate", &e))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(std::sync::Arc::new(config))
}

/// An error reply as redis-rs's error.
pub(crate) fn server_error(message: String) -> redis::RedisError {
    (ErrorKind::Extension, "error reply", message).into()
}

/// One complete reply at the start of `buf` and its length in bytes,
/// `None` while incomplete.
fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, &'static str> {
    let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let (kind, line) = match buf.split_first() {
        Some((&kind, _)) => (kind, &buf[1..line_end]),
        None => return Ok(None),
    };
    match kind {
        b'+' | b':' => Ok(Some((Reply::Simple(line.to_vec()), line_end + 2))),
        b'-' => Ok(Some((
            Reply::Error(String::from_utf8_lossy(line).into_owned()),
            line_end + 2,
        ))),
        b'$' => {
            let len = std::str::from_utf8(line)
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or("bad bulk length")?;
            let start = line_end + 2;
            if buf.len() < start + len + 2 {
                return Ok(None);
            }
            if &buf[start + len..start + len + 2] != b"\r\n" {
                return Err("bulk string not ended");
            }
            Ok(Some((Reply::Bulk { start, len }, start + len + 2)))
        }
        b'*' => {
            let count = std::str::from_utf8(line)
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n <= 6)
                .ok_or("bad array length (a decision has six integers)")?;
            let mut values = [0; 6];
            let mut rest = &buf[line_end + 2..];
            for value in values.iter_mut().take(count) {
                let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                *value = rest[..end]
                    .strip_prefix(b":")
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .and_then(|n| n.parse::<i64>().ok())
                    .ok_or("an array element that is not an integer")?;
                rest = &rest[end + 2..];
            }
            let used = buf.len() - rest.len();
            Ok(Some((Reply::Ints(values, count), used)))
        }
        _ => Err("unexpected reply type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_whole_or_not_at_all() {
        assert_eq!(parse_reply(b""), Ok(None));
        assert_eq!(parse_reply(b"+OK"), Ok(None));
        assert_eq!(
            parse_reply(b"+OK\r\n"),
            Ok(Some((Reply::Simple(b"OK".to_vec()), 5)))
        );
        assert_eq!(
            parse_reply(b":12\r\n"),
            Ok(Some((Reply::Simple(b"12".to_vec()), 5)))
        );
        assert_eq!(
            parse_reply(b"-NOSCRIPT No matching script\r\n"),
            Ok(Some((
                Reply::Error("NOSCRIPT No matching script".to_owned()),
                30
            )))
        );
        assert_eq!(parse_reply(b"$5\r\nab\r\n"), Ok(None));
        assert_eq!(parse_reply(b"$5\r\nab\r\nd"), Ok(None));
        assert_eq!(
            parse_reply(b"$5\r\nab\r\nd\r\n"),
            Ok(Some((Reply::Bulk { start: 4, len: 5 }, 11)))
        );
        assert_eq!(
            parse_reply(b"$0\r\n\r\n"),
            Ok(Some((Reply::Bulk { start: 4, len: 0 }, 6)))
        );
        assert!(parse_reply(b"$5\r\nabcdefg").is_err());
        assert!(parse_reply(b"$x\r\n").is_err());
        assert!(parse_reply(b"$-1\r\n").is_err());
        assert_eq!(parse_reply(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(parse_reply(b"*2\r\n:1\r\n:-5"), Ok(None));
        assert_eq!(
            parse_reply(b"*2\r\n:1\r\n:-5\r\n"),
            Ok(Some((Reply::Ints([1, -5, 0, 0, 0, 0], 2), 13)))
        );
        assert!(parse_reply(b"*7\r\n").is_err());
        assert!(parse_reply(b"*1\r\n$1\r\nx\r\n").is_err());
        assert!(parse_reply(b"*1\r\n:x\r\n").is_err());
    }

    #[test]
    fn pipelined_replies_are_read_one_after_the_other() {
        let buf = b"$3\r\nabc\r\n-NOSCRIPT x\r\n*1\r\n:7\r\n+OK\r\n$2\r\nd";
        let mut at = 0;
        let mut replies = Vec::new();
        while let Ok(Some((reply, used))) = parse_reply(&buf[at..]) {
            replies.push(reply);
            at += used;
        }
        assert_eq!(
            replies,
            [
                Reply::Bulk { start: 4, len: 3 },
                Reply::Error("NOSCRIPT x".to_owned()),
                Reply::Ints([7, 0, 0, 0, 0, 0], 1),
                Reply::Simple(b"OK".to_vec()),
            ]
        );
        assert_eq!(&buf[at..], b"$2\r\nd");
    }
}
