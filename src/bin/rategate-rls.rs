//! `rategate-rls`: Envoy's global rate-limit service (RLS v3) on
//! rategate, configured in envoyproxy/ratelimit's YAML.
//!
//! ```text
//! cargo run --release --features rls --bin rategate-rls -- --config examples/rls/config.yaml
//! ```

use clap::{Parser, ValueEnum};
use rategate::rls::server::{self, Source};
use rategate::rls::service::{Charge, Headers, Options, RateLimitCore};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// A request's decision allocates its protobuf messages, HTTP/2 frames and
// buffers; mimalloc's thread-local pages serve them cheaper than glibc's
// malloc (paired runs of `measure/rls_load.rs`, 64 in flight, one thread:
// 5 to 9% less server CPU per decision on Redis).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Envoy's global rate-limit service on rategate.
#[derive(Debug, Parser)]
#[command(name = "rategate-rls", version)]
struct Args {
    /// The configuration: a YAML file, or a directory of them (one domain
    /// each).
    #[arg(long, env = "RLS_CONFIG")]
    config: PathBuf,
    /// The gRPC address.
    #[arg(long, env = "RLS_LISTEN", default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// Which counters a request is charged to: all-or-nothing (none when
    /// one descriptor is over) or every-match (envoyproxy/ratelimit's).
    #[arg(long, env = "RLS_CHARGE", value_enum, default_value_t = ChargeArg::AllOrNothing)]
    charge: ChargeArg,
    /// Decide and count, but always answer OK.
    #[arg(long, env = "RLS_SHADOW_MODE")]
    shadow_mode: bool,
    /// Rate-limit headers for Envoy to add to responses.
    #[arg(long, env = "RLS_HEADERS", value_enum, default_value_t = HeadersArg::Off)]
    headers: HeadersArg,
    /// Let several files add to one domain.
    #[arg(long, env = "RLS_MERGE_DOMAINS")]
    merge_domains: bool,
    /// How often the configuration's files are checked for changes, in
    /// milliseconds (0: never reload).
    #[arg(long, env = "RLS_RELOAD_MS", default_value_t = 1000)]
    reload_ms: u64,
    /// The most keys one rule holds in memory.
    #[arg(long, env = "RLS_MAX_KEYS_PER_RULE", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_keys_per_rule: u32,
    /// Threads deciding requests (1: one thread does everything, with no
    /// hand-offs between threads; the default is one per core).
    #[arg(long, env = "RLS_THREADS", default_value_t = default_threads(),
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: u32,
    /// The debug HTTP address: `/metrics` (Prometheus), `/rlconfig` (the
    /// rules in force), `/healthcheck`; `off` for none.
    #[arg(long, env = "RLS_DEBUG_LISTEN", default_value = "127.0.0.1:6070", value_parser = listen_or_off)]
    debug_listen: Listen,
    /// Serve gRPC over TLS with this certificate chain (PEM); needs
    /// --tls-key.
    #[arg(long, env = "RLS_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "RLS_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM); needs
    /// --tls-cert.
    #[arg(long, env = "RLS_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
}

fn default_threads() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1024))
}

/// An address to listen on, or none.
#[derive(Debug, Clone, Copy)]
struct Listen(Option<SocketAddr>);

fn listen_or_off(text: &str) -> Result<Listen, String> {
    if text == "off" {
        return Ok(Listen(None));
    }
    text.parse()
        .map(|a| Listen(Some(a)))
        .map_err(|e| format!("{e} (an address such as 127.0.0.1:6070, or off)"))
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ChargeArg {
    AllOrNothing,
    EveryMatch,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HeadersArg {
    Off,
    Draft,
    Ietf,
}

fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = Args::parse();
    // One thread: a current-thread runtime, no wake-ups across threads.
    let runtime = match args.threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.try_into().unwrap_or(usize::MAX))
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let source = Source {
        path: args.config.clone(),
        merge_domains: args.merge_domains,
    };
    let options = Options {
        charge: match args.charge {
            ChargeArg::AllOrNothing => Charge::AllOrNothing,
            ChargeArg::EveryMatch => Charge::EveryMatch,
        },
        shadow_mode: args.shadow_mode,
        headers: match args.headers {
            HeadersArg::Off => Headers::Off,
            HeadersArg::Draft => Headers::Draft,
            HeadersArg::Ietf => Headers::Ietf,
        },
        max_keys_per_rule: usize::try_from(args.max_keys_per_rule).unwrap_or(usize::MAX),
        ..Options::default()
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(server::tls_config(
            cert,
            key,
            args.tls_client_ca.as_deref(),
        )?),
        _ => None,
    };
    // Bound first: a taken port fails before any backend is connected,
    // and "serving" is logged only once the address is held.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| server::ServeError::Bind(args.listen, e))?;
    let metrics = server::install_metrics();
    let core = Arc::new(RateLimitCore::new(source.load()?, options).await?);
    let config = core.config();
    for domain in config.domains() {
        if let Some(backend) = domain.backend.as_ref().filter(|b| b.kind != "memory") {
            // A shared store checks each descriptor's counter on its own:
            // all-or-nothing holds in memory only.
            tracing::info!(
                domain = %domain.name,
                backend = %backend.kind,
                "every matched descriptor is charged by its own check on this backend"
            );
        }
    }
    let bound = listener.local_addr().unwrap_or(args.listen);
    tracing::info!(
        listen = %bound,
        tls = tls.is_some(),
        config = %args.config.display(),
        domains = config.domains().count(),
        "serving"
    );
    let watcher = (args.reload_ms > 0).then(|| {
        server::watch(
            Arc::clone(&core),
            source,
            Duration::from_millis(args.reload_ms),
        )
    });
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let debug = match args.debug_listen.0 {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on {addr} (--debug-listen): {e}"))?;
            tracing::info!(listen = %addr, "debug endpoints: /metrics, /rlconfig, /healthcheck");
            let mut stopped = stopped.clone();
            Some(tokio::spawn(server::serve_debug(
                Arc::clone(&core),
                metrics,
                listener,
                async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                },
            )))
        }
        None => None,
    };
    let shutdown = async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = ctrl_c => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutting down: finishing the calls in flight");
        let _ = stop.send(true);
    };
    let served = server::serve_on(core, listener, tls, shutdown).await;
    if let Some(w) = watcher {
        w.abort();
    }
    if let Some(d) = debug {
        d.abort();
    }
    served?;
    Ok(())
}
