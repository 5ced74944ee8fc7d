//! Real HTTP for the layer's tests: an axum server on 127.0.0.1 port 0
//! (recording each connection's peer address), and a hyper HTTP/1.1 client
//! on one kept-alive connection.
#![allow(dead_code)]

use axum::Router;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

/// Serves `router` on a free loopback port (`127.0.0.1`, or `[::1]` for
/// `ipv6`) and returns its address; `None` when the address family is not
/// available here.
pub async fn try_serve(router: Router, ipv6: bool) -> Option<SocketAddr> {
    let bind = if ipv6 { "[::1]:0" } else { "127.0.0.1:0" };
    let listener = TcpListener::bind(bind).await.ok()?;
    let addr = listener.local_addr().ok()?;
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
    Some(addr)
}

pub async fn serve(router: Router) -> SocketAddr {
    try_serve(router, false).await.expect("bind 127.0.0.1:0")
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header"))
    }

    pub fn num(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.headers))
            .parse()
            .expect("a number")
    }
}

/// One HTTP/1.1 connection to a server.
pub struct Client {
    sender: SendRequest<Empty<Bytes>>,
    addr: SocketAddr,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Client { sender, addr }
    }

    /// Sends `method path` with `headers` and reads the whole response.
    pub async fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Empty::new()).expect("request");
        self.sender.ready().await.expect("ready");
        let response = self.sender.send_request(request).await.expect("send");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub async fn get(&mut self, path: &str) -> Reply {
        self.send("GET", path, &[]).await
    }
}
