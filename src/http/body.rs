//! The response bodies of a rate-limited service: the inner service's
//! body, or the layer's own (a 429's problem details).
//!
//! A layered service's responses carry a [`ResponseBody`] (the default,
//! [`Wrapped`]), which holds any body; or, after
//! [`same_body`](super::RateLimitLayer::same_body) (what
//! `RateLimitLayer::around` uses for an axum `Router`), the service's own
//! body type ([`SameBody`]). Code names these types only where it names the
//! layered service's type.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The inner service's body `B`, or a complete body the layer wrote (a
    /// 429, a missing key).
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
        },
        Full {
            // All of it, then nothing.
            data: Option<Bytes>,
        },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        ResponseBody {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// Whether the layer wrote this body (the service was not called).
    pub fn is_from_layer(&self) -> bool {
        matches!(self.kind, Kind::Full { .. })
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Wrapped {}
    impl Sealed for super::SameBody {}
}

/// How [`RateLimit`](super::RateLimit) types its responses' bodies, given
/// the service's body type `B`: [`Wrapped`] (the default) or
/// [`SameBody`]. Sealed: these two are the only kinds.
pub trait BodyKind<B>: sealed::Sealed {
    /// The body of the layered service's responses.
    type Body;

    /// The service's own body.
    fn inner(body: B) -> Self::Body;

    /// A body the layer wrote (a 429's problem details, a missing key).
    fn full(data: Bytes) -> Self::Body;

    /// The service's own response, its body made [`inner`](Self::inner).
    fn response(response: http::Response<B>) -> http::Response<Self::Body> {
        response.map(Self::inner)
    }

    /// Polls the service's response future, the response made
    /// [`response`](Self::response).
    fn poll_response<F, E>(
        future: Pin<&mut F>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<http::Response<Self::Body>, E>>
    where
        F: Future<Output = Result<http::Response<B>, E>>,
    {
        future.poll(cx).map_ok(Self::response)
    }
}

/// The default [`BodyKind`]: responses carry a [`ResponseBody<B>`], which
/// holds any service body `B` or the layer's own bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wrapped;

impl<B> BodyKind<B> for Wrapped {
    type Body = ResponseBody<B>;

    fn inner(body: B) -> ResponseBody<B> {
        ResponseBody::inner(body)
    }

    fn full(data: Bytes) -> ResponseBody<B> {
        ResponseBody::full(data)
    }
}

/// The [`BodyKind`] of
/// [`RateLimitLayer::same_body`](super::RateLimitLayer::same_body):
/// responses keep the service's own body type `B`, and the layer writes
/// its answers into a `B` made from bytes (`B: From<Bytes>`: axum's
/// `Body`, `http_body_util::Full<Bytes>`). axum's `Router::layer` and
/// `axum::serve` then take the response as it is, where a
/// [`ResponseBody`] is boxed into a new `Body` (an allocation per
/// request).
#[derive(Debug, Clone, Copy, Default)]
pub struct SameBody;

impl<B: From<Bytes>> BodyKind<B> for SameBody {
    type Body = B;

    fn inner(body: B) -> B {
        body
    }

    /// The response as it is: `Response::map` with the identity would
    /// take it apart and build it again (code each admitted request runs).
    fn response(response: http::Response<B>) -> http::Response<B> {
        response
    }

    /// The service's poll itself: its answer is already of this type, and
    /// is written straight where the caller wants it rather than copied
    /// from the service's poll into the layer's.
    fn poll_response<F, E>(
        future: Pin<&mut F>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<http::Response<B>, E>>
    where
        F: Future<Output = Result<http::Response<B>, E>>,
    {
        future.poll(cx)
    }

    fn full(data: Bytes) -> B {
        B::from(data)
    }
}
