//! The admin router (plain HTTP, separate port): `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};

use super::AppState;

/// Content type of `/metrics`: prometheus-client's text encoder writes OpenMetrics.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const TEXT: &str = "text/plain; charset=utf-8";

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

/// Liveness: the process answers HTTP.
async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n".to_owned())
}

/// Readiness: 200 `ok` when certificates and policies are loaded, every readiness gate is
/// set and shutdown has not begun; otherwise 503 naming what is not ready.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let readiness = state.readiness();
    state.metrics.set_ready(readiness.is_ready());
    if readiness.is_ready() {
        text(StatusCode::OK, "ok\n".to_owned())
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", readiness.unready.join(", ")),
        )
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    // Refresh `stackgate_ready` so it is current even if nothing probes /readyz.
    state.metrics.set_ready(state.readiness().is_ready());
    let body = state.metrics.encode();
    (
        StatusCode::OK,
        [(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS))],
        body,
    )
        .into_response()
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found; the admin paths are /healthz, /readyz and /metrics\n".to_owned(),
    )
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(CONTENT_TYPE, HeaderValue::from_static(TEXT))],
        body,
    )
        .into_response()
}
