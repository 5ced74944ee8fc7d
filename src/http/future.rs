//! The response future of [`RateLimit`](super::RateLimit): a named type,
//! boxing nothing on the in-memory path.

use super::body::{BodyKind, Wrapped};
use super::decide::{Pending, Report};
use super::layer::{Config, Settled};
use crate::sync::Arc;
use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower::Service;

pin_project! {
    /// The response of a rate-limited request: the service's, with headers
    /// added, or the layer's own answer (its body typed as `K` says).
    pub struct ResponseFuture<S, ReqBody, K = Wrapped>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S::Future, S, ReqBody>,
        kind: PhantomData<fn() -> K>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, ReqBody> {
        /// The service is answering, and nothing is to be written into
        /// its response (the common admission): its response is returned
        /// as it comes (with `SameBody`, without a copy), and dropping
        /// this state drops the service's future alone.
        Serving {
            #[pin]
            future: F,
        },
        /// The service is answering; `fields` become headers (the report
        /// boxed: a report is a few hundred bytes that every admitted
        /// request would otherwise carry in its future, and copy at each
        /// move, without one).
        Reporting {
            #[pin]
            future: F,
            fields: Fields,
        },
        /// The layer answered (429, no key); taken once.
        Answered {
            response: Option<Response<Bytes>>,
        },
        /// An async backend is deciding; then the ready service is called
        /// (boxed, as the backend's future is: the in-memory path's
        /// futures stay small).
        Waiting {
            waiting: Box<Waiting<S, ReqBody>>,
        },
    }
}

struct Waiting<S, ReqBody> {
    /// Boxed by the decision (verdicts stay small) and kept so: moving it
    /// out would copy it and free its box for nothing.
    pending: Box<Pending>,
    service: Option<S>,
    request: Option<Request<ReqBody>>,
    config: Arc<Config>,
}

/// A report to write into the service's response, with the configuration
/// that says which fields. Only a request with a report holds the
/// configuration: the common admission (no fields) takes no reference, so
/// no shared count is written for it.
struct Fields {
    report: Box<Report>,
    config: Arc<Config>,
}

/// The state that serves the service's `future`, with `report`'s fields
/// to write when there is one.
fn serve<F, S, ReqBody>(
    future: F,
    report: Option<Box<Report>>,
    config: &Arc<Config>,
) -> State<F, S, ReqBody> {
    match report {
        None => State::Serving { future },
        Some(report) => State::Reporting {
            future,
            fields: Fields {
                report,
                config: Arc::clone(config),
            },
        },
    }
}

impl<S, ReqBody, K> ResponseFuture<S, ReqBody, K>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) fn serving(
        future: S::Future,
        report: Option<Box<Report>>,
        config: &Arc<Config>,
    ) -> Self {
        ResponseFuture {
            state: serve(future, report, config),
            kind: PhantomData,
        }
    }

    pub(crate) fn answered(response: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Answered {
                response: Some(response),
            },
            kind: PhantomData,
        }
    }

    pub(crate) fn waiting(
        pending: Box<Pending>,
        service: S,
        request: Request<ReqBody>,
        config: Arc<Config>,
    ) -> Self {
        ResponseFuture {
            state: State::Waiting {
                waiting: Box::new(Waiting {
                    pending,
                    service: Some(service),
                    request: Some(request),
                    config,
                }),
            },
            kind: PhantomData,
        }
    }
}

impl<S, ReqBody, ResBody, K> Future for ResponseFuture<S, ReqBody, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    K: BodyKind<ResBody>,
{
    type Output = Result<Response<K::Body>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Serving { future } => return K::poll_response(future, cx),
                StateProj::Reporting { future, fields } => {
                    return future
                        .poll(cx)
                        .map_ok(|response| fields.config.finish::<_, K>(response, &fields.report));
                }
                StateProj::Answered { response } => {
                    // Polled again after completion: an empty 500 rather
                    // than a panic.
                    let response = response.take().unwrap_or_else(|| {
                        let mut r = Response::new(Bytes::new());
                        *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                        r
                    });
                    return Poll::Ready(Ok(response.map(K::full)));
                }
                StateProj::Waiting { waiting } => {
                    let Waiting {
                        pending,
                        service,
                        request,
                        config,
                    } = &mut **waiting;
                    let result = ready!(pending.future.as_mut().poll(cx));
                    let verdict = pending.finish(result);
                    let (Some(mut service), Some(request)) = (service.take(), request.take())
                    else {
                        // Only a poll after completion gets here.
                        this.state.set(State::Answered { response: None });
                        continue;
                    };
                    let next = match config.settle(verdict) {
                        Settled::Serve(report) => serve(service.call(request), report, config),
                        Settled::Answer(response) => State::Answered {
                            response: Some(response),
                        },
                        // A finished check settles to serve or answer.
                        Settled::Wait(_) | Settled::Defer(_) => State::Answered { response: None },
                    };
                    this.state.set(next);
                }
            }
        }
    }
}
