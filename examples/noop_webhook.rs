//! A do-nothing admission webhook on stackgate's own transport: the load-benchmark baseline.
//!
//! Same TLS/HTTP stack, limits, admin listener and flags (`--listen`, `--admin-listen`,
//! `--tls-cert`, `--tls-key`) as `stackgate serve`, but every review is decoded with the
//! kube admission types and answered `allowed: true` with no patch. The difference between
//! the two under the same load is the cost of stackgate's policies.
//!
//! ```text
//! cargo run --release --example noop_webhook -- --listen 127.0.0.1:9443 --admin-listen 127.0.0.1:9080
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use http::StatusCode;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use stackgate::admission::{Reply, Webhook};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::server::{self, AppState, ServerConfig, TlsSource};

/// Do-nothing admission webhook (benchmark baseline).
#[derive(Debug, Parser)]
struct Args {
    /// HTTPS address for the webhook endpoints.
    #[arg(long, default_value = "0.0.0.0:8443")]
    listen: SocketAddr,
    /// Plain-HTTP address for /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    admin_listen: SocketAddr,
    /// Serving certificate chain (PEM); without it a localhost certificate is generated.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key of the serving certificate (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Where the generated CA certificate is written when no certificate is given.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("stackgate-noop-ca.pem"))]
    generated_ca_out: PathBuf,
}

/// Decodes the review and admits it unchanged.
fn admit(_webhook: Webhook, body: &[u8]) -> Reply {
    let request = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
        .ok()
        .and_then(|review| TryInto::<AdmissionRequest<DynamicObject>>::try_into(review).ok());
    let Some(request) = request else {
        return Reply::error(
            StatusCode::BAD_REQUEST,
            "not an AdmissionReview with a request",
        );
    };
    match serde_json::to_vec(&AdmissionResponse::from(&request).into_review()) {
        Ok(body) => Reply {
            status: StatusCode::OK,
            body,
        },
        Err(_) => Reply::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the response",
        ),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let Args {
        listen,
        admin_listen,
        tls_cert,
        tls_key,
        generated_ca_out,
    } = Args::parse();
    let tls = match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => TlsSource::Files { cert, key },
        _ => TlsSource::Generated {
            ca_out: generated_ca_out,
        },
    };
    let config = ServerConfig {
        listen,
        admin_listen,
        tls,
        ..ServerConfig::default()
    };
    // The engine is required by AppState but unused: the handler replaces it.
    let engine = Engine::new(PolicySet::embedded()?);
    let state = AppState::new(engine, Metrics::new()).with_handler(Arc::new(admit));
    server::run(config, Arc::new(state), shutdown_signal()).await?;
    Ok(())
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
