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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(Args::parse()).await {
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
    let core = Arc::new(RateLimitCore::new(source.load()?, options)?);
    let domains = core.config().domains().count();
    tracing::info!(listen = %args.listen, config = %args.config.display(), domains, "serving");
    let watcher = (args.reload_ms > 0).then(|| {
        server::watch(
            Arc::clone(&core),
            source,
            Duration::from_millis(args.reload_ms),
        )
    });
    let shutdown = async {
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
    };
    let served = server::serve(core, args.listen, shutdown).await;
    if let Some(w) = watcher {
        w.abort();
    }
    served?;
    Ok(())
}
