//! The response body of a rate-limited service: the inner service's body,
//! or the layer's own (a 429's problem details).

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The inner service's body `B`, or a complete body the layer wrote.
    #[project = ResponseBodyProj]
    #[derive(Debug)]
    pub enum ResponseBody<B> {
        /// The inner service answered.
        Inner {
            /// The service's body.
            #[pin]
            body: B,
        },
        /// The layer answered (a 429, or no key).
        Full {
            /// What is left to send: all of it, then nothing.
            data: Option<Bytes>,
        },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        ResponseBody::Inner { body }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        ResponseBody::Full {
            data: (!data.is_empty()).then_some(data),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project() {
            ResponseBodyProj::Inner { body } => body.poll_frame(cx),
            ResponseBodyProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Inner { body } => body.is_end_stream(),
            ResponseBody::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Inner { body } => body.size_hint(),
            ResponseBody::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
