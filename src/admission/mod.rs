//! The adapter between the wire (`admission.k8s.io/v1` AdmissionReview JSON) and the engine.
//!
//! Invariant: any request with a readable uid gets HTTP 200 and an AdmissionReview; non-200
//! is reserved for a body that is not an AdmissionReview at all (the apiserver applies the
//! webhook's failurePolicy to those). Messages built here never quote the body, because a
//! body can carry Secret data.

use std::time::Instant;

use base64::Engine as _;

use http::StatusCode;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde::Deserialize;
use tracing::{Span, field};

mod decode;
mod facts;
mod observe;

pub use decode::{DecodeError, Decoded, MAX_DECODED_BYTES, MAX_JSON_DEPTH, decode_review};
pub use facts::{AllOf, FactSource, Gather, Gathered, KnownFacts, body_mentions};

use crate::budget::{Cancel, Exhausted};
use crate::engine::{self, Engine, Facts, Finding, Subject, Verdict};
use crate::json_text;
use crate::metrics::Metrics;
use crate::short_text::ShortText;

/// The only AdmissionReview version stackgate speaks.
pub const ADMISSION_V1: &str = "admission.k8s.io/v1";

/// Added to the warnings of a mutated cloud config: the change is stored, but the running
/// CCM reads its cloud config only at start (cloud-provider-openstack openstack.go l.181-192,
/// domain-facts §1.6), and the chart's `checksum/config` rolls its pods only for the chart's
/// own `cloudConfig` values. `stackgate audit` reports CCM pods older than their config.
pub const CCM_RESTART_WARNING: &str = "stackgate: the CCM reads its cloud config only at start \
(cloud-provider-openstack ReadConfig); restart it to apply this change, e.g. kubectl -n \
kube-system rollout restart daemonset/openstack-cloud-controller-manager (stackgate audit finds \
stale pods)";

/// Largest AdmissionReview answer stackgate sends, in bytes. An answer over it is replaced by
/// a short one (mutate: admitted without the patch, with a warning; validate: the first
/// denial and a pointer to `stackgate check`). The apiserver holds every webhook answer in
/// memory; a hostile object must not make it, or us, hold megabytes per request.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Which webhook endpoint a review came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    /// `POST /mutate`: answers with a patch and never denies (mutation fails open).
    Mutate,
    /// `POST /validate`: answers with denials and warnings, never a patch.
    Validate,
}

impl Webhook {
    /// `mutate` or `validate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Mutate => "mutate",
            Webhook::Validate => "validate",
        }
    }
}

/// An HTTP answer: status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// 200 for every review with a readable uid; 400 for a body that is not a review.
    pub status: StatusCode,
    /// JSON body.
    pub body: Vec<u8>,
}

impl Reply {
    /// A non-review error body: `{"error": message}`.
    pub fn error(status: StatusCode, message: &str) -> Self {
        let body = serde_json::to_vec(&serde_json::json!({ "error": message }))
            .unwrap_or_else(|_| b"{\"error\":\"unprintable error\"}".to_vec());
        Self { status, body }
    }
}

/// Just enough of a review to answer it without decoding it: when the full decode fails,
/// and when the server answers for the failure policy (overload, deadline).
#[derive(Debug, Deserialize)]
pub struct ReviewIdentity {
    /// The review's `apiVersion`, echoed in the answer.
    #[serde(rename = "apiVersion")]
    pub api_version: Option<String>,
    request: Option<IdentityRequest>,
}

#[derive(Debug, Deserialize)]
struct IdentityRequest {
    uid: Option<String>,
}

impl ReviewIdentity {
    /// Reads the identity of a review body, if it has the shape of one.
    pub fn read(body: &[u8]) -> Option<Self> {
        serde_json::from_slice(body).ok()
    }

    /// The request's uid, when it is a string (possibly empty).
    pub fn uid(&self) -> Option<&str> {
        self.request.as_ref()?.uid.as_deref()
    }
}

/// Decodes a review, evaluates it, encodes the answer, and records the span and metrics.
pub fn handle(engine: &Engine, webhook: Webhook, body: &[u8], metrics: &Metrics) -> Reply {
    handle_with(
        engine,
        webhook,
        body,
        metrics,
        &Facts::default(),
        &Cancel::never(),
    )
    .0
}

/// [`handle`] with facts an adapter gathered for this review (see [`Engine::evaluate_with`]).
/// Also returns the verdict, when the review was evaluated, for the adapter's own metrics.
pub fn handle_with(
    engine: &Engine,
    webhook: Webhook,
    body: &[u8],
    metrics: &Metrics,
    facts: &Facts,
    cancel: &Cancel,
) -> (Reply, Option<Verdict>) {
    let started = Instant::now();
    // The span is at debug: at info, creating and filling it for every review cost about as
    // much CPU as evaluating a pass-through review (BENCHMARKS.md). Reviews where something
    // happened get one info event that carries the same fields itself.
    let span = tracing::debug_span!(
        "review",
        webhook = webhook.as_str(),
        uid = field::Empty,
        kind = field::Empty,
        namespace = field::Empty,
        name = field::Empty,
        operation = field::Empty,
        dry_run = field::Empty,
        decision = field::Empty,
    );
    let _entered = span.enter();
    let (reply, seen, decision, verdict) =
        answer(engine, webhook, body, metrics, facts, cancel, &span);
    span.record("decision", decision);
    observe::answered(
        &observe::Answered {
            webhook,
            seen: &seen,
            decision,
            status: reply.status,
            verdict: verdict.as_ref(),
            seconds: started.elapsed().as_secs_f64(),
        },
        metrics,
    );
    (reply, verdict)
}

/// What identifies a review in logs and metrics; empty when the body was unreadable. Every
/// part is bounded ([`ShortText`]): a span field is written with every log line.
#[derive(Debug, Default)]
struct Seen {
    pub(super) uid: ShortText,
    pub(super) kind: ShortText,
    pub(super) namespace: ShortText,
    pub(super) name: ShortText,
    pub(super) operation: &'static str,
    pub(super) dry_run: bool,
}

fn answer(
    engine: &Engine,
    webhook: Webhook,
    body: &[u8],
    metrics: &Metrics,
    facts: &Facts,
    cancel: &Cancel,
    span: &Span,
) -> (Reply, Seen, &'static str, Option<Verdict>) {
    let policies = engine.policies();
    let decoded = match decode::decode_review(
        body,
        &policies.sites,
        facts.ccm_reads(),
        MAX_DECODED_BYTES,
        cancel,
    ) {
        Ok(d) => d,
        Err(error) => {
            let (reply, decision) = not_decoded(webhook, body, &error, metrics);
            return (reply, Seen::default(), decision, None);
        }
    };
    let api_version = decoded.api_version;
    let request = decoded.request;
    let seen = Seen {
        uid: ShortText::name(&request.uid),
        kind: ShortText::name(&request.kind.kind),
        namespace: ShortText::name(request.namespace.as_deref().unwrap_or_default()),
        name: ShortText::name(&request.name),
        operation: operation_str(&request.operation),
        dry_run: request.dry_run,
    };
    span.record("uid", seen.uid.as_str());
    span.record("kind", seen.kind.as_str());
    span.record("namespace", seen.namespace.as_str());
    span.record("name", seen.name.as_str());
    span.record("operation", seen.operation);
    span.record("dry_run", seen.dry_run);

    if api_version != ADMISSION_V1 {
        let mut response = AdmissionResponse::from(&request).deny(format!(
            "stackgate speaks {ADMISSION_V1} only, got {api_version:?}; register the webhook with \
             admissionReviewVersions: [\"v1\"]"
        ));
        response.result.code = 400;
        return (encode(response), seen, "invalid", None);
    }

    let verdict = match engine.evaluate_within(&subject_of(&request), facts, cancel) {
        Ok(verdict) => verdict,
        Err(e) => {
            let (reply, decision) = stopped(webhook, body, e, metrics);
            return (reply, seen, decision, None);
        }
    };
    let response = AdmissionResponse::from(&request);
    let (response, decision) = match webhook {
        Webhook::Mutate => mutate_response(response, &verdict),
        Webhook::Validate => validate_response(response, &verdict),
    };
    let reply = encode(response);
    if reply.body.len() <= MAX_RESPONSE_BYTES {
        return (reply, seen, decision, Some(verdict));
    }
    // Findings are capped by the engine, so only a patch that rewrites a large cloud config
    // gets here: JSON Patch can only replace the whole string.
    metrics.input_limit("response_bytes");
    let size = reply.body.len();
    let mut response = AdmissionResponse::from(&request);
    let decision = match webhook {
        Webhook::Mutate => {
            response.warnings = Some(vec![format!(
                "stackgate admitted this object without mutation: its answer would be {size} \
                 bytes, over the {MAX_RESPONSE_BYTES}-byte response cap (the patch rewrites a \
                 large cloud config); make the change yourself, the validating webhook still \
                 reports it"
            )]);
            "allowed"
        }
        Webhook::Validate if verdict.denied() => {
            let first = verdict
                .denials
                .first()
                .map(Finding::denial_text)
                .unwrap_or_default();
            response = response.deny(format!(
                "{first}\n… the full answer ({size} bytes) is over stackgate's \
                 {MAX_RESPONSE_BYTES}-byte response cap; run `stackgate check` on the object"
            ));
            response.result.code = 403;
            response.result.reason = "Forbidden".to_owned();
            "denied"
        }
        Webhook::Validate => "allowed",
    };
    (encode(response), seen, decision, Some(verdict))
}

/// The answer and decision label for a review [`decode::decode_review`] refused.
fn not_decoded(
    webhook: Webhook,
    body: &[u8],
    error: &DecodeError,
    metrics: &Metrics,
) -> (Reply, &'static str) {
    match error {
        DecodeError::Json(e) => (undecodable(webhook, body, e), "invalid"),
        DecodeError::NoRequest => (
            Reply::error(StatusCode::BAD_REQUEST, &error.to_string()),
            "invalid",
        ),
        DecodeError::TooComplex { .. } => {
            metrics.input_limit("decoded_bytes");
            let reason = format!(
                "{error}, so stackgate cannot tell whether it holds a known-bad setting \
                 (stackgate's decoded-memory cap, docs/limits.md); split the values or move \
                 them to a ConfigMap or Secret referenced by valuesFrom"
            );
            (
                unread(webhook, body, &reason, Some((413, "RequestEntityTooLarge"))),
                "too_complex",
            )
        }
        DecodeError::TooDeep { .. } => {
            metrics.input_limit("json_depth");
            let reason = format!(
                "{error}, so stackgate cannot tell whether it holds a known-bad setting \
                 (docs/limits.md)"
            );
            (
                unread(webhook, body, &reason, Some((413, "RequestEntityTooLarge"))),
                "too_complex",
            )
        }
        DecodeError::Exhausted(e) => stopped(webhook, body, *e, metrics),
    }
}

/// The answer and decision label for a review whose decoding or evaluation stopped early:
/// past the deadline (504, retry), or over the per-review memory budget (413 like the
/// decoded-bytes cap: a retry would stop again).
fn stopped(
    webhook: Webhook,
    body: &[u8],
    e: Exhausted,
    metrics: &Metrics,
) -> (Reply, &'static str) {
    match e {
        Exhausted::Deadline => (
            unread(
                webhook,
                body,
                &format!("{e}; retry"),
                Some((504, "Timeout")),
            ),
            "timeout",
        ),
        Exhausted::Memory { .. } => {
            metrics.input_limit("memory");
            let reason = format!(
                "{e}, so stackgate cannot tell whether it holds a known-bad setting \
                 (docs/limits.md); make the object smaller"
            );
            (
                unread(webhook, body, &reason, Some((413, "RequestEntityTooLarge"))),
                "too_complex",
            )
        }
    }
}

fn mutate_response(
    response: AdmissionResponse,
    verdict: &Verdict,
) -> (AdmissionResponse, &'static str) {
    let mut response = with_audit(response, verdict);
    if verdict.patch.is_empty() {
        return (response, "allowed");
    }
    let mut warnings: Vec<String> = verdict.mutations.iter().map(short).collect();
    if verdict
        .mutations
        .iter()
        .any(|f| f.rule.family().reads_cloud_configs())
    {
        warnings.push(CCM_RESTART_WARNING.to_owned());
    }
    response.warnings = Some(warnings);
    // The patch's bytes only: [`encode`] takes them out and writes the answer with
    // `patchType: JSONPatch` itself ([`write_patched`]), so kube-core's `with_patch` (which
    // would serialize the patch through serde to set that type) is not needed.
    match patch_json(&verdict.patch) {
        Ok(bytes) => {
            response.patch = Some(bytes);
            (response, "patched")
        }
        Err(error) => {
            // Serializing a patch of strings cannot fail in practice; if it does, admit
            // unchanged rather than fail the write (the validating webhook still enforces).
            tracing::error!(%error, "patch serialization failed; admitting unchanged");
            (response, "allowed")
        }
    }
}

/// A JSON Patch as `serde_json` writes `json_patch::Patch`, with each text value (the whole
/// cloud config of a site, an annotation) escaped by [`json_text`] rather than a byte at a
/// time (`tests::a_patch_is_written_as_serde_json_writes_it` pins the bytes). Operations with
/// other values are rare and go through serde.
fn patch_json(operations: &[json_patch::PatchOperation]) -> serde_json::Result<Vec<u8>> {
    use json_patch::{AddOperation, PatchOperation, ReplaceOperation, TestOperation};
    use serde_json::Value;

    let mut out = String::with_capacity(256);
    out.push('[');
    for (i, operation) in operations.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let (op, path, text) = match operation {
            PatchOperation::Add(AddOperation {
                path,
                value: Value::String(text),
            }) => ("add", path, text),
            PatchOperation::Replace(ReplaceOperation {
                path,
                value: Value::String(text),
            }) => ("replace", path, text),
            PatchOperation::Test(TestOperation {
                path,
                value: Value::String(text),
            }) => ("test", path, text),
            other => {
                out.push_str(&serde_json::to_string(other)?);
                continue;
            }
        };
        out.push_str("{\"op\":\"");
        out.push_str(op);
        out.push_str("\",\"path\":");
        json_text::push_quoted(&mut out, path.as_str());
        out.push_str(",\"value\":");
        json_text::push_quoted(&mut out, text);
        out.push('}');
    }
    out.push(']');
    Ok(out.into_bytes())
}

fn validate_response(
    response: AdmissionResponse,
    verdict: &Verdict,
) -> (AdmissionResponse, &'static str) {
    let mut response = with_audit(response, verdict);
    let mut warnings: Vec<String> = verdict.warnings.iter().map(short).collect();
    // Before it bites: every admitted write of an object an exception covers says, inside
    // the warning window, when the policy applies again (once per exception).
    for e in verdict
        .excepted
        .iter()
        .filter(|e| e.exception.expiring_in_days.is_some())
    {
        let warning = format!(
            "stackgate {}: {}",
            e.finding.policy,
            e.exception.describe(&e.finding.policy)
        );
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    if verdict.denied() {
        let message = verdict
            .denials
            .iter()
            .map(Finding::denial_text)
            .collect::<Vec<_>>()
            // Each denial is several lines (first line, why, exemption, attribution): a blank
            // line between two keeps them apart.
            .join("\n\n");
        let mut response = response.deny(message);
        response.result.code = 403;
        response.result.reason = "Forbidden".to_owned();
        return (response, "denied");
    }
    (response, "allowed")
}

fn with_audit(mut response: AdmissionResponse, verdict: &Verdict) -> AdmissionResponse {
    response.audit_annotations = verdict
        .audit_annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    response
}

/// A warning short enough for kubectl: the finding's [`Finding::warning_text`]
/// (`stackgate POLICY: <location>: <what>. Fix: <fix>`); `stackgate explain` has the rest.
/// Denials are not shortened.
fn short(f: &Finding) -> String {
    f.warning_text()
}

fn encode(mut response: AdmissionResponse) -> Reply {
    // kube-core serializes the patch bytes as a JSON array of numbers, one value per byte; the
    // API documents base64 (Go's []byte), which is also 3-4 times smaller. Take the bytes out
    // and write the review with them as one base64 string.
    let encoded = match response.patch.take() {
        Some(bytes) => write_patched(&response, &bytes),
        None => serde_json::to_vec(&response.into_review()),
    };
    match encoded {
        Ok(body) => Reply {
            status: StatusCode::OK,
            body,
        },
        Err(_) => Reply::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the admission response could not be encoded",
        ),
    }
}

/// A patched answer's JSON: the review of `response` with `patch` as one base64 string.
///
/// Written directly, its texts escaped by [`json_text`], rather than through a
/// `serde_json::Value` of the whole review (which cost a copy of every warning and annotation
/// per answer) or serde (which escapes a byte at a time), in the bytes that route wrote: keys
/// in sorted order at every level (`Value`'s objects sort them), `status` through a `Value` of
/// its own (its keys sorted too). `patchType` is `JSONPatch`: a patch here is
/// [`patch_json`]'s, set by `mutate_response`
/// (`tests::a_patched_answer_is_written_as_the_value_route_wrote_it` pins the bytes).
fn write_patched(response: &AdmissionResponse, patch: &[u8]) -> serde_json::Result<Vec<u8>> {
    let status = serde_json::to_string(&serde_json::to_value(&response.result)?)?;
    let texts: usize = response.warnings.iter().flatten().map(String::len).sum();
    let mut out = String::with_capacity(128 + patch.len() * 4 / 3 + texts + status.len());
    out.push_str("{\"apiVersion\":");
    json_text::push_quoted(&mut out, &response.types.api_version);
    out.push_str(",\"kind\":");
    json_text::push_quoted(&mut out, &response.types.kind);
    out.push_str(",\"response\":{\"allowed\":");
    out.push_str(if response.allowed { "true" } else { "false" });
    if !response.audit_annotations.is_empty() {
        let sorted: std::collections::BTreeMap<&str, &str> = response
            .audit_annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        out.push_str(",\"auditAnnotations\":{");
        for (i, (key, value)) in sorted.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_text::push_quoted(&mut out, key);
            out.push(':');
            json_text::push_quoted(&mut out, value);
        }
        out.push('}');
    }
    // Base64 needs no escaping.
    out.push_str(",\"patch\":\"");
    base64::engine::general_purpose::STANDARD.encode_string(patch, &mut out);
    out.push_str("\",\"patchType\":\"JSONPatch\",\"status\":");
    out.push_str(&status);
    out.push_str(",\"uid\":");
    json_text::push_quoted(&mut out, &response.uid);
    if let Some(warnings) = &response.warnings {
        out.push_str(",\"warnings\":[");
        for (i, warning) in warnings.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_text::push_quoted(&mut out, warning);
        }
        out.push(']');
    }
    out.push_str("}}");
    Ok(out.into_bytes())
}

/// The answer for a body that did not decode as an AdmissionReview. The serde error is
/// reduced to its category and position so that no body content is echoed.
///
/// When the uid is still readable the API server gets a review back: the mutating webhook
/// admits unchanged with a warning (mutation fails open, invariant 8), the validating webhook
/// refuses (validation enforces).
fn undecodable(webhook: Webhook, body: &[u8], error: &serde_json::Error) -> Reply {
    let what = match error.classify() {
        serde_json::error::Category::Io => "could not be read",
        serde_json::error::Category::Syntax => "is not valid JSON",
        serde_json::error::Category::Data => "does not have the shape of an AdmissionReview",
        serde_json::error::Category::Eof => "is truncated JSON",
    };
    let reason = format!(
        "request body {what} (line {}, column {}); stackgate expects an {ADMISSION_V1} AdmissionReview",
        error.line(),
        error.column()
    );
    unread(webhook, body, &reason, None)
}

/// The answer for a review stackgate could not read or finish reading (`reason` says why;
/// it never quotes the body). With a readable uid the API server gets a review back: the
/// mutating webhook admits unchanged with a warning (mutation fails open, invariant 8), the
/// validating webhook refuses, with `status` (code, reason) when given (validation enforces). Without one, HTTP 400 and the
/// API server applies the webhook's failurePolicy.
fn unread(webhook: Webhook, body: &[u8], reason: &str, status: Option<(u16, &str)>) -> Reply {
    let identity = ReviewIdentity::read(body);
    match identity
        .as_ref()
        .and_then(|i| Some((i.api_version.clone(), i.uid()?.to_owned())))
    {
        Some((api_version, uid)) => {
            let mut response = match webhook {
                Webhook::Mutate => {
                    let mut response = AdmissionResponse::invalid(reason);
                    response.allowed = true;
                    response.result = Default::default();
                    response.warnings = Some(vec![format!(
                        "stackgate could not read this review and admitted it without \
                         mutation: {reason}"
                    )]);
                    response
                }
                Webhook::Validate => {
                    let mut response = AdmissionResponse::invalid(reason);
                    if let Some((code, status_reason)) = status {
                        response.result.code = code;
                        response.result.reason = status_reason.to_owned();
                    }
                    response
                }
            };
            response.uid = uid;
            if let Some(v) = api_version {
                response.types.api_version = v;
            }
            encode(response)
        }
        None => Reply::error(StatusCode::BAD_REQUEST, reason),
    }
}

/// The engine's input for a decoded request: what `check` and `audit` build from their own
/// documents, the webhook builds from the review.
pub fn subject_of(request: &AdmissionRequest<DynamicObject>) -> Subject<'_> {
    Subject {
        operation: match request.operation {
            Operation::Create => engine::Operation::Create,
            Operation::Update => engine::Operation::Update,
            Operation::Delete => engine::Operation::Delete,
            Operation::Connect => engine::Operation::Connect,
        },
        kind: &request.kind,
        namespace: request.namespace.as_deref().map(ShortText::name),
        name: ShortText::name(&request.name),
        subresource: request.sub_resource.as_deref(),
        object: request.object.as_ref(),
        old_object: request.old_object.as_ref(),
        dry_run: request.dry_run,
        requester: engine::Requester::User {
            username: request.user_info.username.as_deref().unwrap_or(""),
            groups: request.user_info.groups.as_deref().unwrap_or(&[]),
        },
    }
}

fn operation_str(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use base64::Engine as _;
    use kube::core::DynamicObject;
    use kube::core::admission::{AdmissionResponse, AdmissionReview};

    use super::{encode, patch_json, write_patched};

    /// The patched answer as it was written before [`write_patched`]: the whole review as a
    /// `serde_json::Value`, its patch bytes replaced by one base64 string.
    fn through_a_value(mut response: AdmissionResponse) -> Vec<u8> {
        let patch = response.patch.take().expect("a patched response");
        let mut value = serde_json::to_value(response.into_review()).unwrap();
        value["response"]["patch"] = base64::engine::general_purpose::STANDARD
            .encode(patch)
            .into();
        serde_json::to_vec(&value).unwrap()
    }

    fn response(audit: &[(&str, &str)], warnings: Option<Vec<&str>>) -> AdmissionResponse {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "0c9a8d74-\"quoted\"-é", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "operation": "CREATE", "userInfo": {}, "object": null, "oldObject": null, "dryRun": false,
            },
        }))
        .unwrap();
        let request: kube::core::admission::AdmissionRequest<DynamicObject> =
            review.try_into().unwrap();
        let mut response = AdmissionResponse::from(&request);
        response.audit_annotations = audit
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<HashMap<_, _>>();
        response.warnings = warnings.map(|w| w.into_iter().map(str::to_owned).collect());
        response
    }

    /// Every shape of a patched answer (annotations or none, warnings or none, a status with
    /// fields, text that JSON escapes) is written byte for byte as the `Value` route wrote it.
    #[test]
    fn a_patched_answer_is_written_as_the_value_route_wrote_it() {
        let patch = json_patch::Patch(
            serde_json::from_value(serde_json::json!([
                {"op": "replace", "path": "/data/config", "value": "[Global]\nx = \"é\\u{1}\"\n"},
                {"op": "add", "path": "/metadata/annotations", "value": {}},
            ]))
            .unwrap(),
        );
        let mut with_status = response(&[("z-finding", "a"), ("a-exempted", "b\n\"c\"")], None);
        with_status.result.code = 403;
        with_status.result.message = "why \u{7f} <tag>".to_owned();
        with_status.result.reason = "Forbidden".to_owned();
        let shapes = [
            response(&[], None),
            response(&[], Some(vec![])),
            response(
                &[
                    ("serial-lb-api-calls-finding", "x"),
                    ("cloud-config-integrity-finding", "y"),
                ],
                Some(vec!["stackgate one: \"a\"", "two\ttabs"]),
            ),
            with_status,
        ];
        for shape in shapes {
            let patched = shape.with_patch(patch.clone()).unwrap();
            let mut taken = patched.clone();
            let bytes = taken.patch.take().unwrap();
            let direct = write_patched(&taken, &bytes).unwrap();
            let reference = through_a_value(patched.clone());
            assert_eq!(
                String::from_utf8(direct).unwrap(),
                String::from_utf8(reference.clone()).unwrap()
            );
            assert_eq!(encode(patched).body, reference);
        }
    }
    /// Every kind of operation, text values that JSON escapes (at word boundaries and inside
    /// multi-byte text) and values that are not text: the bytes serde writes for the patch.
    #[test]
    fn a_patch_is_written_as_serde_json_writes_it() {
        let texts = [
            "",
            "[Global]\nauth-url = \"http://k\\v3\"\r\n\t\u{1}\u{7f}é€",
            "1234567\"",
            "12345678\\",
            "a/b~c",
        ];
        let mut operations = Vec::new();
        for text in texts {
            for op in ["add", "replace", "test"] {
                let key = text.replace('~', "~0").replace('/', "~1");
                operations.push(
                    serde_json::json!({"op": op, "path": format!("/data/{key}"), "value": text}),
                );
            }
        }
        operations.extend([
            serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": {"b\"": "x", "a": [1, null, true]}}),
            serde_json::json!({"op": "replace", "path": "/spec/replicas", "value": 3}),
            serde_json::json!({"op": "test", "path": "/spec/paused", "value": false}),
            serde_json::json!({"op": "remove", "path": "/data/old~1key"}),
            serde_json::json!({"op": "move", "from": "/a", "path": "/b"}),
            serde_json::json!({"op": "copy", "from": "/a", "path": "/c"}),
        ]);
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::Value::Array(operations)).unwrap();
        for n in 0..=patch.0.len() {
            let some = &patch.0[..n];
            assert_eq!(
                String::from_utf8(patch_json(some).unwrap()).unwrap(),
                serde_json::to_string(&json_patch::Patch(some.to_vec())).unwrap()
            );
        }
    }
}
