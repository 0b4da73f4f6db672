//! The observer: turns one answered review into its metrics and its log lines, so that both
//! are written in one place from the same fields of the verdict (never from message text).

use http::StatusCode;

use super::{Seen, Webhook};
use crate::engine::{Finding, Verdict};
use crate::metrics::{Metrics, PolicyOutcome, RequestLabels};

/// One answered review.
pub(super) struct Answered<'a> {
    pub(super) webhook: Webhook,
    pub(super) seen: &'a Seen,
    /// The decision label (`allowed`, `patched`, `denied`, `invalid`, `timeout`, ...).
    pub(super) decision: &'static str,
    pub(super) status: StatusCode,
    /// The verdict, when the review was evaluated.
    pub(super) verdict: Option<&'a Verdict>,
    /// Time from receipt to answer.
    pub(super) seconds: f64,
}

/// Records the metrics and writes the log lines of one answered review.
pub(super) fn answered(a: &Answered<'_>, metrics: &Metrics) {
    let seen = a.seen;
    if let Some(verdict) = a.verdict {
        verdict_outcomes(a, verdict, metrics);
    }
    let fired = a
        .verdict
        .map(|v| fired_policies(a.webhook, v))
        .unwrap_or_default();
    // Most reviews the webhook sees are pass-through (it is registered for every ConfigMap and
    // Secret): they log at debug. The request metrics still count every review.
    if a.decision == "allowed" && fired.is_empty() && a.status == StatusCode::OK {
        tracing::debug!(status = a.status.as_u16(), "review answered");
    } else {
        // Text fields as `&str`, not `%` (Display): the same JSON, without a trip through
        // `fmt` per field on the line every patched review writes.
        tracing::info!(
            webhook = a.webhook.as_str(),
            uid = seen.uid.as_str(),
            kind = seen.kind.as_str(),
            namespace = seen.namespace.as_str(),
            name = seen.name.as_str(),
            operation = seen.operation,
            dry_run = seen.dry_run,
            decision = a.decision,
            status = a.status.as_u16(),
            policies = fired.as_str(),
            "review answered"
        );
    }
    metrics.request(
        RequestLabels {
            webhook: a.webhook.as_str(),
            kind: seen.kind.to_string(),
            operation: seen.operation,
            decision: a.decision,
        },
        a.seconds,
    );
}

/// Per-policy outcomes, input limits, the release catalog's counters, and the lines for
/// exemptions and audit findings.
fn verdict_outcomes(a: &Answered<'_>, verdict: &Verdict, metrics: &Metrics) {
    let seen = a.seen;
    let mutate = a.webhook == Webhook::Mutate;
    metrics.releases().observe(mutate, verdict);
    for limit in &verdict.limits {
        metrics.input_limit(limit.as_str());
    }
    let outcome = |kind, f: &Finding| metrics.policy_outcome(kind, &f.policy, f.rule.as_str());
    if mutate {
        if !verdict.patch.is_empty() {
            for m in &verdict.mutations {
                outcome(PolicyOutcome::Mutated, m);
                tracing::debug!(policy = %m.policy, code = m.code, line = m.line(), "mutation");
            }
        }
    } else {
        for w in &verdict.warnings {
            outcome(PolicyOutcome::Warned, w);
        }
        for d in &verdict.denials {
            outcome(PolicyOutcome::Denied, d);
            tracing::debug!(policy = %d.policy, code = d.code, line = d.line(), "denied");
        }
    }
    for e in &verdict.exemptions {
        metrics.policy_outcome(PolicyOutcome::Exempted, &e.policy, e.rule.as_str());
        // The reason is the user's own justification, recorded for audit; it is not object data.
        tracing::info!(
            uid = %seen.uid,
            kind = %seen.kind,
            namespace = %seen.namespace,
            name = %seen.name,
            policy = %e.policy,
            reason = %e.reason,
            "exemption honoured"
        );
    }
    for f in &verdict.audits {
        tracing::info!(
            uid = %seen.uid,
            kind = %seen.kind,
            namespace = %seen.namespace,
            name = %seen.name,
            policy = %f.policy,
            code = f.code,
            line = f.line(),
            "audit finding"
        );
    }
}

/// The policies whose findings this webhook acted on, comma-separated and de-duplicated in
/// order: mutations for `/mutate`, denials and warnings for `/validate`, plus exemptions and
/// audit findings for both.
fn fired_policies(webhook: Webhook, verdict: &Verdict) -> String {
    let acted: Vec<&Finding> = match webhook {
        Webhook::Mutate => verdict.mutations.iter().collect(),
        Webhook::Validate => verdict.denials.iter().chain(&verdict.warnings).collect(),
    };
    let mut names: Vec<&str> = Vec::new();
    let all = acted
        .into_iter()
        .map(|f| f.policy.as_str())
        .chain(verdict.exemptions.iter().map(|e| e.policy.as_str()))
        .chain(verdict.audits.iter().map(|a| a.policy.as_str()));
    for name in all {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(",")
}
