//! The layer against a hostile client: invented API keys and tokens,
//! requests of cost 0, and which rule an admitted response reports.

#[path = "support/http.rs"]
mod support;

use axum::Router;
use axum::routing::get;
use rategate::http::{ClientClass, KeyExtractor, Matcher, RateLimitLayer, Rule};
use rategate::{FixedWindow, KeyedRateLimiter, Quota};
use std::collections::HashSet;
use std::sync::Arc;
use support::{Client, serve};

type Keyed = KeyedRateLimiter<String, FixedWindow>;

fn limiter(quota: &str) -> Arc<Keyed> {
    Arc::new(Keyed::new(quota.parse().unwrap()).unwrap())
}

fn issued() -> HashSet<String> {
    ["token-1".to_string(), "token-2".to_string()].into()
}

/// GitHub's layout: signed-in requests by token, anonymous ones by IP.
fn app(signed_in: Arc<Keyed>, anonymous: Arc<Keyed>, reject_unknown: bool) -> Router {
    let issued = issued();
    let mut tokens = KeyExtractor::bearer_token().validate(move |token| issued.contains(token));
    if reject_unknown {
        tokens = tokens.reject_unknown();
    }
    let layer = RateLimitLayer::builder()
        .class(ClientClass::new("signed-in", tokens).rule(Rule::new("user", signed_in)))
        .class(
            ClientClass::new("anonymous", KeyExtractor::peer_ip()).rule(Rule::new("ip", anonymous)),
        )
        .build()
        .unwrap();
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

#[tokio::test]
async fn invented_tokens_fall_through_to_the_per_ip_limit() {
    let (signed_in, anonymous) = (limiter("100/h"), limiter("3/h"));
    let mut client =
        Client::connect(serve(app(signed_in.clone(), anonymous.clone(), false)).await).await;
    // Every request with a made-up token counts against the client's IP.
    let mut statuses = Vec::new();
    for n in 0..5 {
        let token = format!("Bearer made-up-{n}");
        let reply = client.send("GET", "/", &[("authorization", &token)]).await;
        statuses.push(reply.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(signed_in.len(), 0, "no invented token was tracked");
    // An issued token has its own budget.
    let reply = client
        .send("GET", "/", &[("authorization", "Bearer token-1")])
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(signed_in.len(), 1);
}

#[tokio::test]
async fn invented_tokens_can_be_answered_401() {
    let (signed_in, anonymous) = (limiter("100/h"), limiter("3/h"));
    let mut client =
        Client::connect(serve(app(signed_in.clone(), anonymous.clone(), true)).await).await;
    let reply = client
        .send("GET", "/", &[("authorization", "Bearer made-up")])
        .await;
    assert_eq!(reply.status, 401);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert!(reply.body.contains("not a known one"), "{}", reply.body);
    // Nothing was charged anywhere; a request without a token is anonymous.
    assert_eq!(signed_in.len() + anonymous.len(), 0);
    assert_eq!(client.get("/").await.status, 200);
    assert_eq!(anonymous.len(), 1);
}

#[tokio::test]
async fn cost_zero_serves_the_request_without_charging_it() {
    let hourly = limiter("2/h");
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global()).rule(
                Rule::new("hourly", hourly.clone())
                    .cost(|parts| u32::from(parts.uri.path() != "/free")),
            ),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/free", get(|| async { "ok" }))
        .layer(layer);
    let mut client = Client::connect(serve(app).await).await;
    assert_eq!(client.get("/").await.status, 200);
    assert_eq!(client.get("/").await.status, 200);
    assert_eq!(client.get("/").await.status, 429);
    // The budget is spent; cost-0 requests still pass and take nothing.
    for _ in 0..10 {
        assert_eq!(client.get("/free").await.status, 200);
    }
    assert_eq!(hourly.peek_n("global", 0).unwrap().remaining(), 0);
}

#[tokio::test]
async fn a_tier_names_the_rule_its_admitted_responses_report() {
    let build = |report: bool| {
        let hourly = limiter("5000/h");
        let per_second = Arc::new(Keyed::new(Quota::per_second(10).unwrap()).unwrap());
        let mut tier = ClientClass::new("signed-in", KeyExtractor::global())
            .rule(Rule::new("hourly", hourly))
            .rule(Rule::new("read", per_second).when(Matcher::reads()));
        if report {
            tier = tier.report("hourly");
        }
        let layer = RateLimitLayer::builder()
            .class(tier)
            .headers_on_allowed(true)
            .build()
            .unwrap();
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer)
    };
    // By default the rule with the fewest remaining: the per-second one.
    let mut client = Client::connect(serve(build(false)).await).await;
    assert_eq!(client.get("/").await.num("x-ratelimit-limit"), 10);
    // Named: the hourly budget, as GitHub's clients read it.
    let mut client = Client::connect(serve(build(true)).await).await;
    let reply = client.get("/").await;
    assert_eq!(reply.num("x-ratelimit-limit"), 5000);
    assert_eq!(reply.num("x-ratelimit-remaining"), 4999);
}

/// GraphQL: the handler reads the query, computes its points and charges
/// them; the request's other rule is charged with it, all or nothing.
#[tokio::test]
async fn graphql_points_are_charged_from_the_query() {
    use axum::Extension;
    use axum::response::IntoResponse;
    use axum::routing::post;
    use rategate::http::Charge;

    let (hourly, points) = (limiter("100/h"), limiter("10/h"));
    let layer = RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global())
                .rule(Rule::new("hourly", hourly.clone()))
                .rule(
                    Rule::new("graphql", points.clone())
                        .when(Matcher::path_prefix("/graphql"))
                        .charged_by_handler(),
                ),
        )
        .build()
        .unwrap();
    // The query's points: its number of fields, here the body's words; a
    // body that is not a query is refused before any charge.
    async fn graphql(
        Extension(charge): Extension<Charge>,
        query: String,
    ) -> axum::response::Response {
        if query.is_empty() {
            return (http::StatusCode::BAD_REQUEST, "no query").into_response();
        }
        let points = query.split_whitespace().count() as u32;
        match charge.charge(points) {
            Ok(()) => "data".into_response(),
            Err(rejected) => rejected.into_response(),
        }
    }
    let app = Router::new().route("/graphql", post(graphql)).layer(layer);
    let addr = serve(app).await;
    let client = reqwest_like(addr);
    assert_eq!(client("a b c d e f").await.0, 200);
    assert_eq!(points.peek_n("global", 0).unwrap().remaining(), 4);
    // Six more points do not fit: 429 with the usual fields, and the
    // hourly rule is not charged for it.
    let (status, headers) = client("a b c d e f").await;
    assert_eq!(status, 429);
    assert!(headers.get("retry-after").is_some());
    assert_eq!(headers.get("x-ratelimit-limit").unwrap(), "10");
    assert_eq!(hourly.peek_n("global", 0).unwrap().remaining(), 99);
    // A request the handler refuses before charging costs 1 on every rule
    // that applied, when the response is done.
    assert_eq!(client("").await.0, 400);
    assert_eq!(points.peek_n("global", 0).unwrap().remaining(), 3);
    assert_eq!(hourly.peek_n("global", 0).unwrap().remaining(), 98);
    // Three fit.
    assert_eq!(client("a b c").await.0, 200);
    assert_eq!(points.peek_n("global", 0).unwrap().remaining(), 0);
    assert_eq!(hourly.peek_n("global", 0).unwrap().remaining(), 97);
}

/// Sends a POST to /graphql with `body` on a fresh connection; the status
/// and headers.
fn reqwest_like(
    addr: std::net::SocketAddr,
) -> impl Fn(&'static str) -> std::pin::Pin<Box<dyn std::future::Future<Output = (u16, http::HeaderMap)>>>
{
    move |body| {
        Box::pin(async move {
            use http_body_util::{BodyExt, Full};
            use hyper_util::rt::TokioIo;
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake::<
                _,
                Full<hyper::body::Bytes>,
            >(TokioIo::new(stream))
            .await
            .unwrap();
            tokio::spawn(conn);
            let request = http::Request::post("/graphql")
                .header("host", addr.to_string())
                .body(Full::new(hyper::body::Bytes::from_static(body.as_bytes())))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let _ = response.into_body().collect().await;
            (status, headers)
        })
    }
}

mod door {
    use http::{Request, StatusCode};
    use rategate::http::{Charge, ClientClass, KeyExtractor, Matcher, RateLimitLayer, Rule};
    use rategate::{FixedWindow, KeyedRateLimiter};
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tower::{Layer, Service, ServiceExt};

    type Keyed = KeyedRateLimiter<String, FixedWindow>;

    /// A client whose budget is spent is refused at the door of a
    /// handler-charged route: its handler (parsing an attacker-chosen body)
    /// does not run.
    #[test]
    fn an_exhausted_client_is_refused_before_a_handler_charged_route_runs() {
        let hourly = Arc::new(Keyed::new("2/h".parse().unwrap()).unwrap());
        let points = Arc::new(Keyed::new("1000/h".parse().unwrap()).unwrap());
        let layer = RateLimitLayer::builder()
            .class(
                ClientClass::new("all", KeyExtractor::global())
                    .rule(Rule::new("hourly", Arc::clone(&hourly)))
                    .rule(
                        Rule::new("graphql", Arc::clone(&points))
                            .when(Matcher::path_prefix("/graphql"))
                            .charged_by_handler(),
                    ),
            )
            .build()
            .unwrap();
        let calls = Arc::new(AtomicU32::new(0));
        let handler_calls = Arc::clone(&calls);
        // The handler fails to parse the query: it returns 400 without charging.
        let mut service = layer.layer(tower::service_fn(move |request: Request<()>| {
            let calls = Arc::clone(&handler_calls);
            async move {
                assert!(request.extensions().get::<Charge>().is_some());
                calls.fetch_add(1, Ordering::SeqCst);
                let mut response = http::Response::new(());
                *response.status_mut() = StatusCode::BAD_REQUEST;
                Ok::<_, Infallible>(response)
            }
        }));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut statuses = Vec::new();
        for _ in 0..20 {
            let request = Request::post("/graphql").body(()).unwrap();
            let response = rt
                .block_on(async { service.ready().await?.call(request).await })
                .unwrap();
            statuses.push(response.status().as_u16());
        }
        // The hourly rule admits 2 requests an hour: the later ones must be
        // answered 429 by the layer, not served by the handler.
        assert_eq!(hourly.peek_n("global", 0).unwrap().remaining(), 0);
        assert_eq!(&statuses[2..], [429; 18]);
        assert!(
            calls.load(Ordering::SeqCst) <= 2,
            "the handler ran {} times on a budget of 2 (statuses {statuses:?})",
            calls.load(Ordering::SeqCst)
        );
    }
}
