//! The webhook router on the TLS listener: `POST /mutate` and `POST /validate`.
//!
//! Per request, in order:
//! 1. Route on the path only (the apiserver appends `?timeout=10s`). Another method on a
//!    webhook path is 405, any other path 404, both with a JSON `{"error": ...}` body.
//! 2. Deadline = min(`request_timeout`, apiserver `?timeout=` minus 200 ms).
//! 3. Body: a `Content-Length` above `max_body_bytes` is refused (413) before reading; the
//!    body's bytes are reserved from the in-flight body budget (`max_inflight_body_bytes`;
//!    by `Content-Length`, or chunk by chunk) before it is read; no budget by the deadline
//!    is 503 (not read, so no uid: the apiserver applies the failure policy). The size limit
//!    is enforced again while reading (chunked bodies). A body not complete by the deadline
//!    is answered 408. Early answers keep the unread body open until they are written, so
//!    HTTP/2 clients read the 413 instead of a stream reset.
//! 4. Concurrency: one of `max_concurrency` permits, waited for until the deadline. No
//!    permit in time (or the deadline already passed) is **overload**, answered like the
//!    webhook's failurePolicy would, but with a reason: see [`overload_reply`].
//! 5. Reviews a fact source wants (see [`crate::admission::FactSource`]; the control-plane
//!    load-balancer guard is one): the source gathers its facts in a task of its own, by the
//!    deadline less the evaluation reserve, before the pure evaluation.
//! 6. Evaluation: [`AppState::answer`] with a cancel flag. Bodies up to
//!    [`INLINE_MAX_BYTES`] are evaluated inline on the async worker (decode + evaluate +
//!    encode take microseconds, and a thread hand-off or a timer would cost more than the
//!    work); larger bodies go, one per core at most (`max_large_evaluations`), to the
//!    blocking pool so that a multi-megabyte review cannot stall TLS handshakes and health
//!    checks on the same worker, and are answered **at the deadline** if not done
//!    ([`deadline_reply`]: mutate
//!    admits unchanged with a warning, validate denies with 504), with the flag fired. The
//!    permit and the body's bytes are held until the evaluation actually returns, so
//!    `max_concurrency` and `max_inflight_body_bytes` bound evaluations in flight. The flag
//!    also fires when the handler is dropped (client gone, shutdown grace over).
//! 7. Memory: on either path the evaluation runs inside a [`MemoryScope`] of
//!    `max_evaluation_memory` bytes (the allocator's account of what decoding, evaluation and
//!    encoding hold on that thread); past it the evaluation stops at its next check and the
//!    review gets the "over stackgate's limit" answer (`admission`, mutate admits, validate
//!    413), never the deadline answer.

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
use http_body_util::BodyExt;
use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, timeout_at};

use super::AppState;
use crate::admission::{Reply, ReviewIdentity, Webhook};
use crate::budget::{Cancel, MemoryScope};

/// Bodies up to this size are evaluated inline on the async worker; larger ones on the
/// blocking pool. Captured apiserver reviews are 5–20 KiB; 64 KiB of JSON decodes in well
/// under a millisecond.
pub const INLINE_MAX_BYTES: usize = 64 * 1024;

/// Taken off the apiserver's `?timeout=` so the answer arrives before it gives up.
pub const APISERVER_TIMEOUT_MARGIN: Duration = Duration::from_millis(200);

/// Most of the deadline kept for decoding, evaluating and encoding after a fact source
/// gathered its facts (a quarter of the budget when that is less).
pub(crate) const EVALUATION_RESERVE: Duration = Duration::from_millis(100);

/// Warning on a mutating review admitted unchanged because of overload.
pub const OVERLOAD_WARNING: &str = "stackgate overloaded; admitted without mutation";

/// Denial message of a validating review refused because of overload.
pub const OVERLOAD_DENIAL: &str = "stackgate is overloaded; retry";

/// Warning on a mutating review admitted unchanged because its evaluation did not finish
/// by the request deadline.
pub const DEADLINE_WARNING: &str =
    "stackgate ran out of time evaluating this object; admitted without mutation";

/// Denial message of a validating review whose evaluation did not finish by the request
/// deadline (status code 504, reason `Timeout`).
pub const DEADLINE_DENIAL: &str =
    "stackgate ran out of time evaluating this object; retry, or make the object smaller";

/// Error of a review refused before its body was read because the in-flight body bytes
/// (`--max-inflight-body-bytes`) stayed taken until its deadline (HTTP 503: no uid was read,
/// so the apiserver applies the webhook's failure policy).
pub const BODY_BUDGET_UNAVAILABLE: &str =
    "stackgate is overloaded (too many large reviews in flight); retry";

/// How many evaluations of large bodies run at once: `configured`, or when it is 0 the number
/// of cores the process may use (at least one; Rust reads the cgroup CPU quota, so a pod with
/// `limits.cpu: 1` gets one). They are CPU-bound, so more would not finish sooner.
pub(crate) fn large_evaluation_slots(configured: usize) -> usize {
    match configured {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        n => n.min(Semaphore::MAX_PERMITS),
    }
}

/// What the webhook handlers share.
#[derive(Clone)]
pub(crate) struct Webhooks {
    pub(crate) state: Arc<AppState>,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) body_budget: BodyBudget,
    /// Evaluations of bodies over [`INLINE_MAX_BYTES`] running at once: one per core.
    pub(crate) large_evaluations: Arc<Semaphore>,
    pub(crate) max_body_bytes: usize,
    pub(crate) request_timeout: Duration,
    /// Bytes one evaluation may hold (`--max-evaluation-memory`).
    pub(crate) max_evaluation_memory: usize,
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
        // Fired when this handler ends for any reason, including being dropped (the client
        // went away, or the shutdown grace ran out): an evaluation still running on the
        // blocking pool then stops at its next check.
        let cancel = Cancel::new();
        let _cancel_on_drop = CancelOnDrop(cancel.clone());

        let declared = declared_length(request.headers());
        let mut incoming = request.into_body();
        if declared.is_some_and(|n| n > self.max_body_bytes as u64) {
            metrics.http_rejection("body_too_large");
            return self.too_large(incoming);
        }
        // Reserve the body's bytes before reading it (all of them when the length is
        // declared, chunk by chunk otherwise), so unread bodies wait in the client's socket
        // and not in our memory.
        let first = declared.map_or(BODY_BUDGET_STEP, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
        let Some(mut reserved) = self.body_budget.reserve(first, deadline, &self.state).await
        else {
            metrics.http_rejection("body_budget");
            return hold(
                error(StatusCode::SERVICE_UNAVAILABLE, BODY_BUDGET_UNAVAILABLE),
                incoming,
            );
        };
        let capacity = declared
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
            .min(self.max_body_bytes);
        let mut collected = Vec::with_capacity(capacity);
        loop {
            let frame = match timeout_at(deadline, incoming.frame()).await {
                Ok(None) => break,
                Ok(Some(Ok(frame))) => frame,
                Ok(Some(Err(_))) => {
                    metrics.http_rejection("body_unreadable");
                    return error(
                        StatusCode::BAD_REQUEST,
                        "the request body could not be read",
                    );
                }
                Err(_) => {
                    metrics.http_rejection("deadline");
                    return hold(
                        error(
                            StatusCode::REQUEST_TIMEOUT,
                            "the request body did not arrive before the request deadline",
                        ),
                        incoming,
                    );
                }
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            let total = collected.len().saturating_add(data.len());
            if total > self.max_body_bytes {
                metrics.http_rejection("body_too_large");
                return self.too_large(incoming);
            }
            if total > reserved.bytes() {
                let more = total.max(reserved.bytes() + BODY_BUDGET_STEP) - reserved.bytes();
                match self.body_budget.reserve(more, deadline, &self.state).await {
                    Some(extra) => reserved.merge(extra),
                    None => {
                        metrics.http_rejection("body_budget");
                        return hold(
                            error(StatusCode::SERVICE_UNAVAILABLE, BODY_BUDGET_UNAVAILABLE),
                            incoming,
                        );
                    }
                }
            }
            collected.extend_from_slice(&data);
        }
        drop(incoming);
        let body = Bytes::from(collected);

        let permit = match timeout_at(deadline, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(permit)) if Instant::now() < deadline => permit,
            _ => {
                metrics.http_rejection("overloaded");
                return reply(overload_reply(webhook, &body));
            }
        };

        let gathered = match self.state.gather_for(webhook, &body) {
            None => None,
            Some(gather) => {
                let until = deadline
                    .checked_sub(evaluation_reserve(budget))
                    .unwrap_or(deadline);
                // A task of its own, so that a bug in the IO cannot take the handler down.
                let task = tokio::spawn(Arc::clone(&gather).gather(until));
                Some(match task.await {
                    Ok(gathered) => gathered,
                    Err(_) => gather.failed(),
                })
            }
        };

        // The evaluation slot and the body's bytes stay taken until the evaluation returns,
        // also when the answer went out at the deadline without it.
        let held = (permit, reserved);
        let outcome = if body.len() <= INLINE_MAX_BYTES {
            // Inline, with no timer: a small body evaluates in microseconds (every rule is
            // linear; BENCHMARKS.md), and a timer task per review cost more than that.
            let answered = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let _account = MemoryScope::enter(self.max_evaluation_memory);
                self.state.answer(webhook, &body, gathered, &cancel)
            }));
            drop(held);
            match answered {
                Ok(answer) => Outcome::Answer(answer),
                Err(_) => Outcome::Panicked,
            }
        } else {
            // More CPU-bound evaluations than cores only adds memory: each one holds its
            // decoded object (up to the decoded-memory cap) while it waits for a core.
            let core = match timeout_at(
                deadline,
                Arc::clone(&self.large_evaluations).acquire_owned(),
            )
            .await
            {
                Ok(Ok(core)) if Instant::now() < deadline => core,
                _ => {
                    metrics.http_rejection("overloaded");
                    return reply(overload_reply(webhook, &body));
                }
            };
            let task = tokio::task::spawn_blocking({
                let (state, body, cancel) = (Arc::clone(&self.state), body.clone(), cancel.clone());
                let memory = self.max_evaluation_memory;
                move || {
                    let _held = (held, core);
                    let _account = MemoryScope::enter(memory);
                    state.answer(webhook, &body, gathered, &cancel)
                }
            });
            match timeout_at(deadline, task).await {
                Ok(Ok(answer)) => Outcome::Answer(answer),
                Ok(Err(_)) => Outcome::Panicked,
                Err(_) => {
                    cancel.cancel();
                    Outcome::Deadline
                }
            }
        };
        match outcome {
            Outcome::Answer(answer) => reply(answer),
            Outcome::Deadline => {
                metrics.http_rejection("evaluation_deadline");
                reply(deadline_reply(webhook, &body))
            }
            Outcome::Panicked => {
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

    /// 413, keeping the unread body open until the answer is out (see [`hold`]).
    fn too_large(&self, incoming: Body) -> Response {
        hold(
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body exceeds {} bytes", self.max_body_bytes),
            ),
            incoming,
        )
    }
}

/// How an evaluation ended.
enum Outcome {
    Answer(Reply),
    Deadline,
    Panicked,
}

/// Fires the cancel flag when dropped.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// `response`, with the request body it answers kept open until the response has been
/// written. Dropping an unread HTTP/2 request body before the response goes out resets the
/// stream (`CANCEL`) and the client never sees the answer; after it, hyper ends the stream
/// with `RST_STREAM(NO_ERROR)`, which clients read as "the server answered early".
fn hold(response: Response, incoming: Body) -> Response {
    response.map(|body| super::serve::with_guard(body, incoming))
}

/// Body bytes are reserved in units of this many bytes (a semaphore counts `u32` permits).
const BODY_BUDGET_UNIT: usize = 1024;

/// A chunked body (no `Content-Length`) reserves this much at a time as it arrives.
const BODY_BUDGET_STEP: usize = 256 * 1024;

/// The in-flight body bytes budget (`--max-inflight-body-bytes`).
#[derive(Clone)]
pub(crate) struct BodyBudget {
    units: Arc<Semaphore>,
    total_units: usize,
}

impl BodyBudget {
    /// A budget of `bytes` (at least one unit).
    pub(crate) fn new(bytes: usize) -> Self {
        let total_units = bytes
            .div_ceil(BODY_BUDGET_UNIT)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Self {
            units: Arc::new(Semaphore::new(total_units)),
            total_units,
        }
    }

    /// Reserves `bytes` (capped at the whole budget, so that one body larger than the
    /// budget can still be read alone), waiting until `deadline`; `None` when the deadline
    /// passed first.
    async fn reserve(
        &self,
        bytes: usize,
        deadline: Instant,
        state: &Arc<AppState>,
    ) -> Option<Reserved> {
        let units = bytes.div_ceil(BODY_BUDGET_UNIT).clamp(1, self.total_units);
        let n = u32::try_from(units).unwrap_or(u32::MAX);
        match timeout_at(deadline, Arc::clone(&self.units).acquire_many_owned(n)).await {
            Ok(Ok(permit)) => Some(Reserved::new(permit, state)),
            _ => None,
        }
    }
}

/// Body bytes reserved from the [`BodyBudget`]; given back (and taken off
/// `stackgate_body_bytes_in_flight`) when dropped.
struct Reserved {
    permit: OwnedSemaphorePermit,
    state: Arc<AppState>,
}

impl Reserved {
    fn new(permit: OwnedSemaphorePermit, state: &Arc<AppState>) -> Self {
        let reserved = Self {
            permit,
            state: Arc::clone(state),
        };
        reserved
            .state
            .metrics
            .body_bytes_in_flight(reserved.gauge());
        reserved
    }

    fn bytes(&self) -> usize {
        self.permit.num_permits().saturating_mul(BODY_BUDGET_UNIT)
    }

    fn gauge(&self) -> i64 {
        i64::try_from(self.bytes()).unwrap_or(i64::MAX)
    }

    /// Takes over `other`'s bytes (it then gives back nothing when dropped).
    fn merge(&mut self, mut other: Self) {
        if let Some(permit) = other.permit.split(other.permit.num_permits()) {
            self.permit.merge(permit);
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.state.metrics.body_bytes_in_flight(-self.gauge());
    }
}

/// Time kept for evaluation after a fact source gathered: [`EVALUATION_RESERVE`], or a
/// quarter of `budget` when that is less.
pub(crate) fn evaluation_reserve(budget: Duration) -> Duration {
    EVALUATION_RESERVE.min(budget / 4)
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
/// `500ms`), with Go's grammar ([`crate::cloudconf::parse_go_duration`]). A sign or a bare
/// `0`, which Go accepts but the apiserver never writes, is ignored like any unreadable
/// value, as it always was: a negative timeout (or `-0s`) must not shrink the budget.
pub(super) fn parse_go_duration(s: &str) -> Option<Duration> {
    if s == "0" || s.starts_with(['+', '-']) {
        return None;
    }
    let nanos = crate::cloudconf::parse_go_duration(s).ok()?;
    u64::try_from(nanos).ok().map(Duration::from_nanos)
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
    short_cut(
        webhook,
        body,
        ShortCut {
            warning: OVERLOAD_WARNING,
            denial: OVERLOAD_DENIAL,
            reason: "TooManyRequests",
            code: 429,
        },
    )
}

/// The answer to a review whose evaluation did not finish by the request deadline (the
/// evaluation is cancelled). Like [`overload_reply`]: mutate admits unchanged with warning
/// [`DEADLINE_WARNING`]; validate denies with status code 504 (reason `Timeout`, which
/// clients retry) and message [`DEADLINE_DENIAL`]; HTTP 503 without a readable uid.
/// Counted as `stackgate_http_rejections_total{reason="evaluation_deadline"}`.
pub fn deadline_reply(webhook: Webhook, body: &[u8]) -> Reply {
    short_cut(
        webhook,
        body,
        ShortCut {
            warning: DEADLINE_WARNING,
            denial: DEADLINE_DENIAL,
            reason: "Timeout",
            code: 504,
        },
    )
}

/// What a failure-policy answer says.
struct ShortCut {
    warning: &'static str,
    denial: &'static str,
    reason: &'static str,
    code: u16,
}

fn short_cut(webhook: Webhook, body: &[u8], how: ShortCut) -> Reply {
    let identity = ReviewIdentity::read(body);
    let Some((api_version, uid)) = identity.and_then(|i| {
        let uid = i.uid().filter(|uid| !uid.is_empty())?.to_owned();
        Some((i.api_version, uid))
    }) else {
        return Reply::error(StatusCode::SERVICE_UNAVAILABLE, how.denial);
    };
    let mut response = AdmissionResponse::invalid(how.denial);
    response.uid = uid;
    match webhook {
        Webhook::Mutate => {
            response.allowed = true;
            response.result = Status::default();
            response.warnings = Some(vec![how.warning.to_owned()]);
        }
        Webhook::Validate => {
            response.allowed = false;
            response.result = Status::failure(how.denial, how.reason).with_code(how.code);
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
        Err(_) => Reply::error(StatusCode::SERVICE_UNAVAILABLE, how.denial),
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
