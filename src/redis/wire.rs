//! The batching task's own connection to a single server (which a lone
//! caller borrows for its own decision).
//!
//! Through redis-rs's multiplexed connection, every batch took two more
//! task hops (the command to redis-rs's socket task, its reply back) and a
//! parse of the reply into `Value`s; that machinery was about a third of
//! the client's time under 16 concurrent callers (`perf`). The driver task
//! only ever has one request on the wire, so it needs no multiplexing: it
//! writes the command and reads the reply on its own socket, in its own
//! task. The connection is opened on first use and after any failure or
//! timeout (a late reply would answer the next request), with the URL's
//! user, password and database; RESP2, no TLS (a `rediss://` URL is
//! refused when the limiter is built).

use super::RedisError;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The socket.
enum Stream {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

impl Stream {
    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes).await,
            #[cfg(unix)]
            Stream::Unix(s) => s.write_all(bytes).await,
        }
    }

    async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_buf(buf).await,
            #[cfg(unix)]
            Stream::Unix(s) => s.read_buf(buf).await,
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
    stream: Option<Stream>,
    /// A request was started and its reply not read whole: its future was
    /// dropped mid-way (a lone caller's, cancelled), so the socket may yet
    /// deliver that reply. The next request opens a new socket.
    in_flight: bool,
    /// Bytes read; a reply is parsed from the start.
    buf: Vec<u8>,
}

impl Wire {
    /// A connection to the server `info` names, opened on first use.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] for an address it cannot open (TLS).
    pub(crate) fn new(info: ConnectionInfo) -> Result<Wire, RedisError> {
        match info.addr() {
            ConnectionAddr::Tcp(..) => {}
            #[cfg(unix)]
            ConnectionAddr::Unix(_) => {}
            _ => {
                return Err(RedisError::Config(
                    "batching needs a plain TCP or Unix socket address",
                ));
            }
        }
        Ok(Wire {
            info,
            stream: None,
            in_flight: false,
            buf: Vec::with_capacity(4096),
        })
    }

    /// The bytes of a [`Reply::Bulk`].
    pub(crate) fn bulk(&self, start: usize, len: usize) -> &[u8] {
        self.buf.get(start..start + len).unwrap_or_default()
    }

    /// Drops the socket: the next request opens a new one. For a request
    /// abandoned mid-way (a timeout), whose reply may still come.
    pub(crate) fn reset(&mut self) {
        self.stream = None;
        self.in_flight = false;
    }

    /// Sends one packed command and reads its reply, connecting first if
    /// needed. Any failure drops the socket.
    pub(crate) async fn request(&mut self, packed: &[u8]) -> Result<Reply, redis::RedisError> {
        if self.in_flight {
            self.reset();
        }
        self.in_flight = true;
        let result = self.exchange(packed).await;
        match result {
            Ok(_) => self.in_flight = false,
            Err(_) => self.reset(),
        }
        result
    }

    async fn exchange(&mut self, packed: &[u8]) -> Result<Reply, redis::RedisError> {
        if self.stream.is_none() {
            self.open().await?;
        }
        self.send(packed).await
    }

    async fn send(&mut self, packed: &[u8]) -> Result<Reply, redis::RedisError> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::from(io::ErrorKind::NotConnected).into());
        };
        stream.write_all(packed).await?;
        self.buf.clear();
        loop {
            match parse_reply(&self.buf) {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(what) => {
                    return Err((ErrorKind::Parse, "malformed reply", what.to_owned()).into());
                }
            }
            if stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
        }
    }

    /// Connects, then `AUTH` and `SELECT` as the URL asks.
    async fn open(&mut self) -> Result<(), redis::RedisError> {
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
            _ => return Err(io::Error::from(io::ErrorKind::Unsupported).into()),
        };
        self.stream = Some(stream);
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
        match self.send(&command.get_packed_command()).await? {
            Reply::Error(message) => Err(server_error(message)),
            _ => Ok(()),
        }
    }
}

/// An error reply as redis-rs's error.
pub(crate) fn server_error(message: String) -> redis::RedisError {
    (ErrorKind::Extension, "error reply", message).into()
}

/// One complete reply at the start of `buf`, `None` while incomplete.
fn parse_reply(buf: &[u8]) -> Result<Option<Reply>, &'static str> {
    let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let (kind, line) = match buf.split_first() {
        Some((&kind, _)) => (kind, &buf[1..line_end]),
        None => return Ok(None),
    };
    match kind {
        b'+' | b':' => Ok(Some(Reply::Simple(line.to_vec()))),
        b'-' => Ok(Some(Reply::Error(
            String::from_utf8_lossy(line).into_owned(),
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
            Ok(Some(Reply::Bulk { start, len }))
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
            Ok(Some(Reply::Ints(values, count)))
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
            Ok(Some(Reply::Simple(b"OK".to_vec())))
        );
        assert_eq!(
            parse_reply(b":12\r\n"),
            Ok(Some(Reply::Simple(b"12".to_vec())))
        );
        assert_eq!(
            parse_reply(b"-NOSCRIPT No matching script\r\n"),
            Ok(Some(Reply::Error("NOSCRIPT No matching script".to_owned())))
        );
        assert_eq!(parse_reply(b"$5\r\nab\r\n"), Ok(None));
        assert_eq!(parse_reply(b"$5\r\nab\r\nd"), Ok(None));
        assert_eq!(
            parse_reply(b"$5\r\nab\r\nd\r\n"),
            Ok(Some(Reply::Bulk { start: 4, len: 5 }))
        );
        assert_eq!(
            parse_reply(b"$0\r\n\r\n"),
            Ok(Some(Reply::Bulk { start: 4, len: 0 }))
        );
        assert!(parse_reply(b"$5\r\nabcdefg").is_err());
        assert!(parse_reply(b"$x\r\n").is_err());
        assert!(parse_reply(b"$-1\r\n").is_err());
        assert_eq!(parse_reply(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(parse_reply(b"*2\r\n:1\r\n:-5"), Ok(None));
        assert_eq!(
            parse_reply(b"*2\r\n:1\r\n:-5\r\n"),
            Ok(Some(Reply::Ints([1, -5, 0, 0, 0, 0], 2)))
        );
        assert!(parse_reply(b"*7\r\n").is_err());
        assert!(parse_reply(b"*1\r\n$1\r\nx\r\n").is_err());
        assert!(parse_reply(b"*1\r\n:x\r\n").is_err());
    }
}
