//! The gRPC server: `ShouldRateLimit` over HTTP/2 (TLS optional),
//! `grpc.health.v1`, the configuration reloaded when its files change, a
//! graceful shutdown, and the debug HTTP server (`/metrics`, `/rlconfig`).

use super::config::Config;
use super::service::{RateLimitCore, RequestError};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use metrics_exporter_prometheus::PrometheusHandle;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tonic::transport::ServerTlsConfig;
use tonic::{Request, Response, Status};

/// The `RateLimitService` of [`RateLimitCore`], for a tonic server.
#[derive(Debug, Clone)]
pub struct Service(Arc<RateLimitCore>);

impl Service {
    /// The gRPC service deciding with `core`.
    pub fn new(core: Arc<RateLimitCore>) -> Service {
        Service(core)
    }

    /// Wrapped for `tonic::transport::Server::add_service`.
    pub fn into_server(self) -> RateLimitServiceServer<Service> {
        RateLimitServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        match self.0.should_rate_limit(request.get_ref()).await {
            Ok(response) => Ok(Response::new(response)),
            Err(e @ RequestError::Unavailable(_)) => Err(Status::unavailable(e.to_string())),
            Err(e @ RequestError::TooManyOverrides) => {
                Err(Status::resource_exhausted(e.to_string()))
            }
            Err(e) => Err(Status::invalid_argument(e.to_string())),
        }
    }
}

/// Serves `core` on `listen` until `shutdown` completes, then stops
/// accepting and lets the calls in flight finish. The health service
/// says SERVING for the rate-limit service and the server (`""`) until
/// then. With `tls`, only TLS connections are served.
///
/// # Errors
///
/// [`ServeError::Bind`] when the address cannot be bound,
/// [`ServeError::Transport`] when serving fails.
pub async fn serve(
    core: Arc<RateLimitCore>,
    listen: SocketAddr,
    tls: Option<ServerTlsConfig>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ServeError::Bind(listen, e))?;
    serve_on(core, listener, tls, shutdown)
        .await
        .map_err(ServeError::Transport)
}

/// The TLS settings of a server presenting the certificate chain in
/// `cert` and its key in `key` (PEM files), and, with `client_ca`,
/// requiring client certificates that CA signed.
///
/// # Errors
///
/// [`ServeError::Tls`] for a file that is not a regular file of at most
/// 1 MiB, or cannot be read.
pub fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<ServerTlsConfig, ServeError> {
    let read = |path: &Path| {
        crate::policy::config::read_pem(path)
            .map_err(|e| ServeError::Tls(format!("{}: {e}", path.display())))
    };
    let (cert_pem, key_pem) = (read(cert)?, read(key)?);
    check_identity(&cert_pem, &key_pem)
        .map_err(|e| ServeError::Tls(format!("{} and {}: {e}", cert.display(), key.display())))?;
    let mut config =
        ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(cert_pem, key_pem));
    if let Some(ca) = client_ca {
        config = config.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    Ok(config)
}

/// Why the server stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The listen address could not be bound.
    Bind(SocketAddr, std::io::Error),
    /// The transport failed (a bad certificate or key among its causes).
    Transport(tonic::transport::Error),
    /// A TLS file could not be read.
    Tls(String),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Bind(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
            ServeError::Transport(e) => write!(f, "gRPC transport: {e}"),
            ServeError::Tls(e) => write!(f, "TLS: {e}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Bind(_, e) => Some(e),
            ServeError::Transport(e) => Some(e),
            ServeError::Tls(_) => None,
        }
    }
}

/// As [`serve`], on a listener already bound (a test's port 0).
///
/// # Errors
///
/// The transport's, when serving fails or `tls` is not usable.
pub async fn serve_on(
    core: Arc<RateLimitCore>,
    listener: tokio::net::TcpListener,
    tls: Option<ServerTlsConfig>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    // No Nagle delay: a decision is one small frame, awaited by a request.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    builder
        .add_service(health)
        .add_service(Service::new(core).into_server())
        .serve_with_incoming_shutdown(incoming, async move {
            shutdown.await;
            reporter
                .set_not_serving::<RateLimitServiceServer<Service>>()
                .await;
        })
        .await
}

/// Whether `cert_pem` holds a certificate chain and `key_pem` its private
/// key: checked now, so that a bad pair is refused before the server
/// starts rather than by its first handshake.
fn check_identity(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate chain does not read: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the certificate file".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("the private key does not read: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("the private key is not usable: {e}"))?;
    rustls::sign::CertifiedKey::new(chain, signer)
        .keys_match()
        .map_err(|e| format!("the key is not the certificate's: {e}"))
}

/// Installs the process's Prometheus recorder (the `metrics` facade's
/// global one), which the service's counters and the crate's Redis
/// metrics then feed, and keeps its histograms drained every 5 s. `None`
/// if a recorder was installed before.
pub fn install_metrics() -> Option<PrometheusHandle> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .ok()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    Some(handle)
}

/// Serves the debug HTTP endpoints on `listener` until `shutdown`
/// completes: `/metrics` (Prometheus text from `metrics`, 404 without
/// one), `/rlconfig` (the rules in force,
/// [`RateLimitCore::effective_rules`]) and `/healthcheck`.
///
/// # Errors
///
/// The listener's, when serving fails.
pub async fn serve_debug(
    core: Arc<RateLimitCore>,
    metrics: Option<PrometheusHandle>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let router = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    match metrics {
                        Some(m) => (StatusCode::OK, m.render()),
                        None => (StatusCode::NOT_FOUND, "no metrics recorder\n".to_owned()),
                    }
                }
            }),
        )
        .route(
            "/rlconfig",
            get(move || {
                let core = Arc::clone(&core);
                async move { core.effective_rules() }
            }),
        )
        .route("/healthcheck", get(|| async { "OK\n" }));
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Where the configuration comes from, and how it is reloaded.
#[derive(Debug, Clone)]
pub struct Source {
    /// A file, or a directory of `.yaml` / `.yml` files.
    pub path: PathBuf,
    /// Whether several files may add to one domain.
    pub merge_domains: bool,
}

impl Source {
    /// Loads the configuration.
    ///
    /// # Errors
    ///
    /// The configuration's.
    pub fn load(&self) -> Result<Config, super::config::ConfigError> {
        Config::load(&self.path, self.merge_domains)
    }

    /// What changes when a file is changed, added or removed: the
    /// modification times and lengths of the files, by name.
    fn stamp(&self) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
        let mut files = Vec::new();
        let mut add = |p: &Path| {
            if let Ok(m) = std::fs::metadata(p) {
                files.push((p.to_owned(), m.modified().ok(), m.len()));
            }
        };
        add(&self.path);
        if let Ok(dir) = std::fs::read_dir(&self.path) {
            for entry in dir.flatten() {
                add(&entry.path());
            }
        }
        files.sort();
        files
    }
}

/// Reloads `core`'s configuration from `source` whenever its files change
/// (checked every `every`), until the returned task is aborted. A
/// configuration that does not load is refused with a log line, and the
/// one in force keeps serving.
pub fn watch(
    core: Arc<RateLimitCore>,
    source: Source,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut seen = source.stamp();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = source.stamp();
            if now == seen {
                continue;
            }
            seen = now;
            let loaded = match source.load() {
                Ok(config) => core.reload(config).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match loaded {
                Ok(()) => log_reload(&source.path, None),
                Err(e) => log_reload(&source.path, Some(&e)),
            }
        }
    })
}

fn log_reload(path: &Path, error: Option<&str>) {
    match error {
        None => tracing::info!(path = %path.display(), "configuration reloaded"),
        Some(e) => tracing::warn!(
            path = %path.display(),
            error = e,
            "configuration refused; the one in force keeps serving"
        ),
    }
}
