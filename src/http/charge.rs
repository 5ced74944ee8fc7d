//! Costs the handler learns from the body: a request's charge left to its
//! handler ([`Rule::charged_by_handler`](super::Rule::charged_by_handler)).

use super::decide::{Deferred, decide_rules};
use super::layer::{Config, Settled};
use crate::sync::{Arc, AtomicBool, Ordering};
use bytes::Bytes;
use http::Response;
use std::fmt;

/// A request's charge, left to its handler: the layer puts one in the
/// request's extensions when a rule
/// [charged by the handler](super::Rule::charged_by_handler) applies, and
/// decides nothing until the handler calls [`charge`](Charge::charge).
///
/// With axum, take it as `Extension<Charge>`.
///
/// # Examples
///
/// ```
/// use rategate::http::{Charge, KeyExtractor, Matcher, RateLimitLayer, Rule, ClientClass};
/// use rategate::{KeyedRateLimiter, Quota, TokenBucket};
/// use std::sync::Arc;
///
/// let points = Arc::new(KeyedRateLimiter::<String, TokenBucket>::new(Quota::per_hour(5000)?)?);
/// let layer = RateLimitLayer::builder()
///     .class(ClientClass::new("clients", KeyExtractor::bearer_token())
///         .rule(Rule::new("graphql", points).when(Matcher::path_prefix("/graphql")).charged_by_handler()))
///     .build()?;
///
/// // In the handler, once the query is parsed and its points known:
/// fn handle(charge: &Charge, points: u32) -> Result<String, http::Response<bytes::Bytes>> {
///     charge.charge(points).map_err(|rejected| rejected.into_inner())?;
///     Ok("the query's result".to_string())
/// }
/// # let _ = (layer, handle);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Charge {
    inner: Arc<Pending>,
}

/// The deferred decision, shared by the clones of a request's [`Charge`].
struct Pending {
    config: Arc<Config>,
    deferred: Deferred,
    /// Whether the handler charged the request at least once.
    charged: AtomicBool,
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Charge")
            .field("charged", &self.inner.charged.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A charge that did not fit: the `429` (or `400` for a cost no limit can
/// ever admit) the layer would have sent, with its usual fields. Return it
/// as the handler's response.
#[derive(Debug)]
pub struct Rejected {
    response: Box<Response<Bytes>>,
}

impl Rejected {
    /// The response to send (with feature `axum`, `IntoResponse` gives it
    /// as axum's response).
    pub fn into_inner(self) -> Response<Bytes> {
        *self.response
    }

    /// Its status.
    pub fn status(&self) -> http::StatusCode {
        self.response.status()
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the request's charge was refused ({})", self.status())
    }
}

impl std::error::Error for Rejected {}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Rejected {
    fn into_response(self) -> axum::response::Response {
        self.response.map(axum::body::Body::from)
    }
}

impl Charge {
    pub(crate) fn new(config: Arc<Config>, deferred: Deferred) -> Charge {
        Charge {
            inner: Arc::new(Pending {
                config,
                deferred,
                charged: AtomicBool::new(false),
            }),
        }
    }

    /// Charges the request `cost` on the rules its handler charges, and
    /// its other rules at their own costs, all or nothing. Each call
    /// charges: call it once per request.
    ///
    /// # Errors
    ///
    /// [`Rejected`] when the rules do not admit the request (nothing is
    /// charged anywhere then), with the response to send.
    pub fn charge(&self, cost: u32) -> Result<(), Rejected> {
        // Relaxed: a flag read only by the drop of the last clone, which
        // the `Arc`'s own counting orders after every call.
        self.inner.charged.store(true, Ordering::Relaxed);
        self.inner.decide(cost)
    }
}

impl Pending {
    fn decide(&self, cost: u32) -> Result<(), Rejected> {
        let Some(class) = self.config.classes.get(self.deferred.class) else {
            return Ok(());
        };
        let rules = self.deferred.rules.iter().filter_map(|&(at, own)| {
            let rule = class.rules.get(at)?;
            Some((rule, own.unwrap_or(cost)))
        });
        let verdict = decide_rules(class, rules, &self.deferred.key, false, true);
        match self.config.settle(verdict) {
            Settled::Answer(response) => Err(Rejected {
                response: Box::new(response),
            }),
            // `decide_rules` decides in memory: it neither waits nor
            // defers.
            Settled::Serve(_) | Settled::Wait(_) | Settled::Defer(_) => Ok(()),
        }
    }
}

impl Drop for Pending {
    /// A request the handler never charged costs 1: a handler that fails
    /// before its charge (a query that does not parse) is not free.
    fn drop(&mut self) {
        if !self.charged.load(Ordering::Relaxed) {
            let _ = self.decide(1);
        }
    }
}
