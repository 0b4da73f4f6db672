//! The webhook router on the TLS listener: `POST /mutate` and `POST /validate`.
//!
//! Per request, in order:
//! 1. Route on the path only (the apiserver appends `?timeout=10s`). Another method on a
//!    webhook path is 405, any other path 404, both with a JSON `{"error": ...}` body.
//! 2. Deadline = min(`request_timeout`, apiserver `?timeout=` minus 200 ms).
//! 3. Body: a `Content-Length` above `max_body_bytes` is refused (413) before reading; the
//!    limit is enforced again while reading (chunked bodies). A body not complete by the
//!    deadline is answered 408.
//! 4. Concurrency: one of `max_concurrency` permits, waited for until the deadline. No
//!    permit in time (or the deadline already passed) is **overload**, answered like the
//!    webhook's failurePolicy would, but with a reason: see [`overload_reply`].
//! 5. Control-plane Machine DELETEs on `/validate`, when the load-balancer guard is on (see
//!    [`crate::guard`]): the guard gathers its facts (Kubernetes API, Keystone, Octavia) in a
//!    task bounded by the deadline less `GUARD_EVALUATION_RESERVE` (at most a quarter of
//!    the budget), holding the permit; the
//!    engine then evaluates with them. Every other review skips this step.
//! 6. Evaluation: [`AppState::review`]. Bodies up to [`INLINE_MAX_BYTES`] are evaluated
//!    inline on the async worker (decode + evaluate + encode take microseconds, and a
//!    thread hand-off would cost more than the work); larger bodies go to the blocking
//!    pool so that a multi-megabyte review cannot stall TLS handshakes and health checks
//!    on the same worker. The permit is held until evaluation ends either way, so
//!    `max_concurrency` bounds evaluations in flight, inline or blocking.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout_at};

use super::AppState;
use super::state::Gathered;
use crate::admission::{Reply, Webhook};
use crate::guard::GuardError;

/// Bodies up to this size are evaluated inline on the async worker; larger ones on the
/// blocking pool. Captured apiserver reviews are 5–20 KiB; 64 KiB of JSON decodes in well
/// under a millisecond.
pub const INLINE_MAX_BYTES: usize = 64 * 1024;

/// Taken off the apiserver's `?timeout=` so the answer arrives before it gives up.
pub const APISERVER_TIMEOUT_MARGIN: Duration = Duration::from_millis(200);

/// Most of the deadline kept for decoding, evaluating and encoding after the guard gathered
/// its facts (a quarter of the budget when that is less).
pub(crate) const GUARD_EVALUATION_RESERVE: Duration = Duration::from_millis(100);

/// Warning on a mutating review admitted unchanged because of overload.
pub const OVERLOAD_WARNING: &str = "stackgate overloaded; admitted without mutation";

/// Denial message of a validating review refused because of overload.
pub const OVERLOAD_DENIAL: &str = "stackgate is overloaded; retry";

/// What the webhook handlers share.
#[derive(Clone)]
pub(crate) struct Webhooks {
    pub(crate) state: Arc<AppState>,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) max_body_bytes: usize,
    pub(crate) request_timeout: Duration,
}

pub(crate) fn router(webhooks: Webhooks) -> Router {
    Router::new()
        .route("/mutate", post(mutate).fallback(method_not_allowed))
        .route("/validate", post(validate).fallback(method_not_allowed))
        .fallback(not_found)
        .with_state(webhooks)
}

async fn mutate(State(webhooks): State<Webhooks>, request: Request) -> Response {
    webhooks.review(Webhook::Mutate, request).await
}

async fn validate(State(webhooks): State<Webhooks>, request: Request) -> Response {
    webhooks.review(Webhook::Validate, request).await
}

async fn method_not_allowed(State(webhooks): State<Webhooks>, request: Request) -> Response {
    webhooks.state.metrics.http_rejection("method_not_allowed");
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!(
            "method {} is not allowed on {}; the apiserver sends POST",
            request.method(),
            request.uri().path()
        ),
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static("POST"));
    response
}

async fn not_found(State(webhooks): State<Webhooks>) -> Response {
    webhooks.state.metrics.http_rejection("not_found");
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint; the webhook paths are POST /mutate and POST /validate",
    )
}

impl Webhooks {
    async fn review(&self, webhook: Webhook, request: Request) -> Response {
        let metrics = &self.state.metrics;
        let budget = budget(request.uri().query(), self.request_timeout);
        let deadline = Instant::now() + budget;

        if declared_length(request.headers()).is_some_and(|n| n > self.max_body_bytes as u64) {
            metrics.http_rejection("body_too_large");
            return self.too_large();
        }
        let body = Limited::new(request.into_body(), self.max_body_bytes);
        let body: Bytes = match timeout_at(deadline, body.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                metrics.http_rejection("body_too_large");
                return self.too_large();
            }
            Ok(Err(_)) => {
                metrics.http_rejection("body_unreadable");
                return error(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                );
            }
            Err(_) => {
                metrics.http_rejection("deadline");
                return error(
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body did not arrive before the request deadline",
                );
            }
        };

        let permit = match timeout_at(deadline, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(permit)) if Instant::now() < deadline => permit,
            _ => {
                metrics.http_rejection("overloaded");
                return reply(overload_reply(webhook, &body));
            }
        };

        let gathered = match self.state.guard_for(webhook, &body) {
            None => None,
            Some((guard, machine)) => {
                let until = deadline
                    .checked_sub(evaluation_reserve(budget))
                    .unwrap_or(deadline);
                // A task of its own, so that a bug in the IO cannot take the handler down.
                let task = {
                    let (guard, machine) = (Arc::clone(&guard), machine.clone());
                    tokio::spawn(async move { guard.gather(&machine, until).await })
                };
                let facts = match task.await {
                    Ok(facts) => facts,
                    Err(_) => guard.unavailable(&machine, &GuardError::Internal),
                };
                Some(Gathered { guard, facts })
            }
        };

        let answered = if body.len() <= INLINE_MAX_BYTES {
            let answered = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.state.answer(webhook, &body, gathered)
            }))
            .ok();
            drop(permit);
            answered
        } else {
            let state = Arc::clone(&self.state);
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                state.answer(webhook, &body, gathered)
            })
            .await
            .ok()
        };
        match answered {
            Some(answer) => reply(answer),
            None => {
                // The review function broke its no-panic contract; the panic hook has
                // logged it. Answer without quoting anything from the request.
                metrics.http_rejection("internal_error");
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error while evaluating the review",
                )
            }
        }
    }

    fn too_large(&self) -> Response {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request body exceeds {} bytes", self.max_body_bytes),
        )
    }
}

/// Time kept for evaluation after the guard's facts: [`GUARD_EVALUATION_RESERVE`], or a
/// quarter of `budget` when that is less.
pub(crate) fn evaluation_reserve(budget: Duration) -> Duration {
    GUARD_EVALUATION_RESERVE.min(budget / 4)
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// The time a request may take: `request_timeout`, capped by the apiserver's `?timeout=`
/// less [`APISERVER_TIMEOUT_MARGIN`] (but never less than half of it).
pub(crate) fn budget(query: Option<&str>, request_timeout: Duration) -> Duration {
    let apiserver = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("timeout="))
        .and_then(parse_go_duration);
    match apiserver {
        Some(t) => request_timeout.min(t.saturating_sub(APISERVER_TIMEOUT_MARGIN).max(t / 2)),
        None => request_timeout,
    }
}

/// Parses a Go `time.Duration` string as the apiserver writes it (`10s`, `1m30s`, `1.5s`,
/// `500ms`).
fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut rest = s;
    let mut seconds = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if number_end == 0 {
            return None;
        }
        let n: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        seconds += n * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(seconds).ok()
}

#[derive(Deserialize)]
struct UidProbe {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    request: Option<UidProbeRequest>,
}

#[derive(Deserialize)]
struct UidProbeRequest {
    uid: Option<String>,
}

/// The answer to a review that could not get an evaluation slot before its deadline.
///
/// If the body has a readable `request.uid`, the answer is HTTP 200 with an
/// AdmissionReview that does what the webhook's `failurePolicy` would do, with a reason:
/// - mutate: `allowed: true`, no patch, warning [`OVERLOAD_WARNING`] (fails open, like
///   `failurePolicy: Ignore`; the validating webhook still enforces the final state);
/// - validate: `allowed: false`, status code 429, message [`OVERLOAD_DENIAL`] (fails
///   closed, like `failurePolicy: Fail`; clients retry).
///
/// Without a readable uid it is HTTP 503 with a JSON error, and the apiserver applies
/// `failurePolicy` itself. Counted as `stackgate_http_rejections_total{reason="overloaded"}`.
pub fn overload_reply(webhook: Webhook, body: &[u8]) -> Reply {
    let probe = serde_json::from_slice::<UidProbe>(body).ok();
    let Some((api_version, uid)) = probe.and_then(|p| {
        let uid = p.request?.uid.filter(|uid| !uid.is_empty())?;
        Some((p.api_version, uid))
    }) else {
        return Reply::error(StatusCode::SERVICE_UNAVAILABLE, OVERLOAD_DENIAL);
    };
    let mut response = AdmissionResponse::invalid(OVERLOAD_DENIAL);
    response.uid = uid;
    match webhook {
        Webhook::Mutate => {
            response.allowed = true;
            response.result = Status::default();
            response.warnings = Some(vec![OVERLOAD_WARNING.to_owned()]);
        }
        Webhook::Validate => {
            response.allowed = false;
            response.result = Status::failure(OVERLOAD_DENIAL, "TooManyRequests").with_code(429);
        }
    }
    if let Some(v) = api_version.filter(|v| v.starts_with("admission.k8s.io/")) {
        response.types.api_version = v;
    }
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => Reply {
            status: StatusCode::OK,
            body,
        },
        Err(_) => Reply::error(StatusCode::SERVICE_UNAVAILABLE, OVERLOAD_DENIAL),
    }
}

fn reply(reply: Reply) -> Response {
    json(reply.status, reply.body)
}

fn error(status: StatusCode, message: &str) -> Response {
    reply(Reply::error(status, message))
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        Body::from(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("s"), None);
        assert_eq!(parse_go_duration("10x"), None);
    }

    #[test]
    fn budget_is_capped_by_the_apiserver_timeout() {
        let two = Duration::from_secs(2);
        assert_eq!(budget(None, two), two);
        assert_eq!(budget(Some("timeout=10s"), two), two);
        assert_eq!(budget(Some("timeout=1s"), two), Duration::from_millis(800));
        assert_eq!(
            budget(Some("a=b&timeout=1s"), two),
            Duration::from_millis(800)
        );
        assert_eq!(
            budget(Some("timeout=100ms"), two),
            Duration::from_millis(50)
        );
        assert_eq!(budget(Some("timeout=junk"), two), two);
    }

    #[test]
    fn overload_answers() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1"}}"#;
        let m: serde_json::Value =
            serde_json::from_slice(&overload_reply(Webhook::Mutate, body).body).unwrap();
        assert_eq!(m["response"]["uid"], "u-1");
        assert_eq!(m["response"]["allowed"], true);
        assert_eq!(m["response"]["warnings"][0], OVERLOAD_WARNING);
        assert!(m["response"].get("patch").is_none());
        let v = overload_reply(Webhook::Validate, body);
        assert_eq!(v.status, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_slice(&v.body).unwrap();
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["response"]["allowed"], false);
        assert_eq!(v["response"]["status"]["code"], 429);
        assert_eq!(v["response"]["status"]["message"], OVERLOAD_DENIAL);
        let none = overload_reply(Webhook::Validate, b"{\"request\":{}}");
        assert_eq!(none.status, StatusCode::SERVICE_UNAVAILABLE);
        let junk = overload_reply(Webhook::Mutate, b"\xff\xfe");
        assert_eq!(junk.status, StatusCode::SERVICE_UNAVAILABLE);
    }
}
