//! Prometheus metrics. Labels are low-cardinality by construction: they come from closed
//! sets (webhook, operation, decision, policy name, rule, reason) or from the resource kind
//! (bounded by the webhook registration). Names, namespaces, uids and contents never become
//! labels.
//!
//! `prometheus-client` (the official OpenMetrics client) over the older `prometheus` crate:
//! typed label sets, an explicit registry instead of process globals (so tests get their own),
//! and it is what kube-rs's reference controller and linkerd use.

use std::collections::HashSet;
use std::sync::atomic::AtomicI64;
use std::sync::{PoisonError, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of `stackgate_admission_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `mutate` or `validate`.
    pub webhook: &'static str,
    /// Resource kind, e.g. `ConfigMap` (empty when the body was unreadable).
    pub kind: String,
    /// CREATE, UPDATE, DELETE, CONNECT (empty when unreadable).
    pub operation: &'static str,
    /// `allowed`, `patched`, `denied`, `invalid`.
    pub decision: &'static str,
}

/// Labels of per-policy counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// Policy name (bounded by the policy set).
    pub policy: String,
    /// Rule family.
    pub rule: &'static str,
}

/// Labels of `stackgate_http_rejections_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why the transport refused or short-cut a request.
    pub reason: &'static str,
}

/// Labels of `stackgate_input_limits_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// Which cap on untrusted input was reached, a closed set: the engine's (`Limit::as_str`
    /// in `engine`: `cloud_config_bytes`, `values_text_bytes`, `yaml_nodes`,
    /// `yaml_alias_expansion`, `yaml_depth`, `values_carriers`, `findings`) and the adapter's
    /// (`decoded_bytes`, `json_depth`, `response_bytes`, `memory`: the per-review memory
    /// budget). `docs/limits.md` has one row each.
    pub limit: &'static str,
}

/// Labels of `stackgate_tls_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `success` or `failure`.
    pub outcome: &'static str,
}

/// The empty label set of the certificate gauges: a [`Family`] of them has no series until
/// one is set, where a plain [`Gauge`] would export 0.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NoLabels {}

/// Labels of `stackgate_connections_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    /// `webhook` or `admin`.
    pub listener: &'static str,
    /// `accepted`, or `refused` (the listener's connection cap was reached).
    pub outcome: &'static str,
}

/// Labels of `stackgate_connection_closes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionCloseLabels {
    /// `webhook` or `admin`.
    pub listener: &'static str,
    /// Why the server closed the connection: `no_request` (no request started within the
    /// header-read timeout, e.g. an HTTP/2 client that never sends its preface), `idle` (no
    /// request in flight for the idle timeout), `stalled` (a request in flight far past its
    /// deadline: the client stopped reading its response), `write_timeout` (a write to the
    /// socket made no progress for the write timeout).
    pub reason: &'static str,
}

/// Labels of `stackgate_connections_open`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `webhook` or `admin`.
    pub listener: &'static str,
}

/// Labels of `stackgate_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// Crate version.
    pub version: &'static str,
}

/// All metrics stackgate exports, with their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    evaluation_seconds: Histogram,
    mutations: Family<PolicyLabels, Counter>,
    denials: Family<PolicyLabels, Counter>,
    warnings: Family<PolicyLabels, Counter>,
    exemptions: Family<PolicyLabels, Counter>,
    rejections: Family<ReasonLabels, Counter>,
    input_limits: Family<LimitLabels, Counter>,
    tls_reloads: Family<OutcomeLabels, Counter>,
    /// notAfter / notBefore of the leaf certificate in service: families without labels so
    /// that no series exists until a certificate's validity has been read (a plain gauge
    /// would export 0, an expiry in 1970 that fires the expiry alert, before that).
    tls_not_after: Family<NoLabels, Gauge<i64, AtomicI64>>,
    tls_not_before: Family<NoLabels, Gauge<i64, AtomicI64>>,
    connections: Family<ConnectionLabels, Counter>,
    connection_closes: Family<ConnectionCloseLabels, Counter>,
    connections_open: Family<ListenerLabels, Gauge<i64, AtomicI64>>,
    body_bytes_in_flight: Gauge<i64, AtomicI64>,
    ready: Gauge<i64, AtomicI64>,
    build_info: Family<BuildLabels, Gauge<i64, AtomicI64>>,
    policies_loaded: Gauge<i64, AtomicI64>,
    releases: crate::releases::metrics::ReleaseMetrics,
    /// The `kind` label values seen so far: the kind comes from the request body, so the
    /// label set is capped at [`MAX_KIND_LABELS`] values (the rest count as `other`).
    kinds: RwLock<HashSet<String>>,
}

/// Most distinct `kind` label values on `stackgate_admission_requests_total`. The webhooks
/// are registered for a dozen kinds; a client that can reach the port (without
/// `--client-ca`) must not be able to grow the metric set without bound.
pub const MAX_KIND_LABELS: usize = 32;

/// A kind longer than this, or with characters outside `[A-Za-z0-9]`, counts as `other`.
const MAX_KIND_CHARS: usize = 63;

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered under the `stackgate` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("stackgate");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission reviews answered, by webhook, kind, operation and decision",
            requests.clone(),
        );
        // Evaluation is pure CPU work measured in microseconds; the buckets span 5 µs to
        // 50 ms so that both the normal case and a pathological input are visible.
        let evaluation_seconds = Histogram::new([
            0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5,
            0.005, 0.01, 0.05,
        ]);
        registry.register(
            "evaluation_duration_seconds",
            "Time spent decoding, evaluating and encoding one admission review",
            evaluation_seconds.clone(),
        );
        let mutations = Family::<PolicyLabels, Counter>::default();
        registry.register("mutations", "Objects patched, by policy", mutations.clone());
        let denials = Family::<PolicyLabels, Counter>::default();
        registry.register("denials", "Requests denied, by policy", denials.clone());
        let warnings = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "warnings",
            "Warnings returned to clients, by policy",
            warnings.clone(),
        );
        let exemptions = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "exemptions",
            "Findings admitted because of an exemption annotation, by policy",
            exemptions.clone(),
        );
        let rejections = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "http_rejections",
            "Requests refused or short-cut by the transport (body too large, overload, deadline, ...)",
            rejections.clone(),
        );
        let input_limits = Family::<LimitLabels, Counter>::default();
        registry.register(
            "input_limits",
            "Reviews in which a cap on untrusted input was reached (decoded bytes, cloud-config \
             or values size, YAML nodes / alias expansion / depth, findings, response size, \
             memory per review)",
            input_limits.clone(),
        );
        let tls_reloads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "tls_reloads",
            "Certificate reload attempts after a change on disk, by outcome",
            tls_reloads.clone(),
        );
        let tls_not_after = Family::<NoLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "tls_certificate_expiry_timestamp_seconds",
            "notAfter of the serving (leaf) certificate in service, Unix seconds; set at start \
             and on each successful reload, absent if it could not be read. Alert on \
             `stackgate_tls_certificate_expiry_timestamp_seconds - time() < 14 * 86400`",
            tls_not_after.clone(),
        );
        let tls_not_before = Family::<NoLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "tls_certificate_not_before_timestamp_seconds",
            "notBefore of the serving (leaf) certificate in service, Unix seconds (a value in \
             the future: clients reject the certificate as not yet valid)",
            tls_not_before.clone(),
        );
        let connections = Family::<ConnectionLabels, Counter>::default();
        registry.register(
            "connections",
            "Connections accepted, or refused because the listener's connection cap was reached",
            connections.clone(),
        );
        let connection_closes = Family::<ConnectionCloseLabels, Counter>::default();
        registry.register(
            "connection_closes",
            "Connections the server closed on its own (no request, idle, stalled, write timeout)",
            connection_closes.clone(),
        );
        let connections_open = Family::<ListenerLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "connections_open",
            "Connections open now, by listener",
            connections_open.clone(),
        );
        let body_bytes_in_flight = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "body_bytes_in_flight",
            "Request body bytes reserved by reviews being read or evaluated (bounded by --max-inflight-body-bytes)",
            body_bytes_in_flight.clone(),
        );
        let ready = Gauge::<i64, AtomicI64>::default();
        registry.register("ready", "1 when /readyz answers 200", ready.clone());
        let policies_loaded = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "policies_loaded",
            "Number of policies in the effective set",
            policies_loaded.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge<i64, AtomicI64>>::default();
        registry.register("build_info", "Build information", build_info.clone());
        let releases = crate::releases::metrics::ReleaseMetrics::default();
        releases.register(&mut registry);
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        Self {
            registry,
            requests,
            evaluation_seconds,
            mutations,
            denials,
            warnings,
            exemptions,
            rejections,
            input_limits,
            tls_reloads,
            tls_not_after,
            tls_not_before,
            connections,
            connection_closes,
            connections_open,
            body_bytes_in_flight,
            ready,
            build_info,
            policies_loaded,
            releases,
            kinds: RwLock::new(HashSet::new()),
        }
    }

    /// Text exposition format for `/metrics`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            // Writing into a String cannot fail; keep the endpoint answering regardless.
            out.clear();
        }
        out
    }

    /// Counts one answered review.
    pub fn request(&self, mut labels: RequestLabels, seconds: f64) {
        if !self.kind_label_allowed(&labels.kind) {
            labels.kind = "other".to_owned();
        }
        self.requests.get_or_create(&labels).inc();
        self.evaluation_seconds.observe(seconds);
    }

    /// Whether `kind` may be a label value: a plausible Kubernetes kind, already seen or
    /// within [`MAX_KIND_LABELS`].
    fn kind_label_allowed(&self, kind: &str) -> bool {
        if kind.len() > MAX_KIND_CHARS || !kind.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return false;
        }
        let seen = self.kinds.read().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(kind) {
            return true;
        }
        drop(seen);
        let mut seen = self.kinds.write().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_KIND_LABELS {
            return seen.contains(kind);
        }
        seen.insert(kind.to_owned());
        true
    }

    /// Counts a policy outcome.
    pub fn policy_outcome(&self, outcome: PolicyOutcome, policy: &str, rule: &'static str) {
        let family = match outcome {
            PolicyOutcome::Mutated => &self.mutations,
            PolicyOutcome::Denied => &self.denials,
            PolicyOutcome::Warned => &self.warnings,
            PolicyOutcome::Exempted => &self.exemptions,
        };
        family
            .get_or_create(&PolicyLabels {
                policy: policy.to_owned(),
                rule,
            })
            .inc();
    }

    /// Counts a transport-level refusal or short cut.
    pub fn http_rejection(&self, reason: &'static str) {
        self.rejections
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// The `stackgate_input_limits_total` family, for counters outside a review (the
    /// background audit's caps).
    pub fn input_limits(&self) -> Family<LimitLabels, Counter> {
        self.input_limits.clone()
    }

    /// Counts a review in which the cap `limit` on untrusted input was reached.
    pub fn input_limit(&self, limit: &'static str) {
        self.input_limits
            .get_or_create(&LimitLabels { limit })
            .inc();
    }

    /// Counts a certificate reload attempt.
    pub fn tls_reload(&self, ok: bool) {
        let outcome = if ok { "success" } else { "failure" };
        self.tls_reloads
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Publishes the validity period (Unix seconds) of the serving certificate now in service.
    pub fn set_tls_certificate_validity(&self, not_before: i64, not_after: i64) {
        self.tls_not_before
            .get_or_create(&NoLabels {})
            .set(not_before);
        self.tls_not_after
            .get_or_create(&NoLabels {})
            .set(not_after);
    }

    /// Withdraws the validity gauges: the certificate in service has a validity period that
    /// could not be read, and the previous one's would be wrong.
    pub fn clear_tls_certificate_validity(&self) {
        self.tls_not_before.clear();
        self.tls_not_after.clear();
    }

    /// Counts a connection accepted on `listener` (and opens it in `stackgate_connections_open`
    /// until [`Self::connection_ended`]).
    pub fn connection_accepted(&self, listener: &'static str) {
        self.connections
            .get_or_create(&ConnectionLabels {
                listener,
                outcome: "accepted",
            })
            .inc();
        self.connections_open
            .get_or_create(&ListenerLabels { listener })
            .inc();
    }

    /// Counts a connection refused because `listener` is at its connection cap.
    pub fn connection_refused(&self, listener: &'static str) {
        self.connections
            .get_or_create(&ConnectionLabels {
                listener,
                outcome: "refused",
            })
            .inc();
    }

    /// A connection counted by [`Self::connection_accepted`] ended.
    pub fn connection_ended(&self, listener: &'static str) {
        self.connections_open
            .get_or_create(&ListenerLabels { listener })
            .dec();
    }

    /// Counts a connection the server closed on its own, by reason.
    pub fn connection_closed_by_server(&self, listener: &'static str, reason: &'static str) {
        self.connection_closes
            .get_or_create(&ConnectionCloseLabels { listener, reason })
            .inc();
    }

    /// Adds `delta` (may be negative) to `stackgate_body_bytes_in_flight`.
    pub fn body_bytes_in_flight(&self, delta: i64) {
        self.body_bytes_in_flight.inc_by(delta);
    }

    /// Publishes readiness.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// Publishes the size of the effective policy set.
    pub fn set_policies_loaded(&self, n: usize) {
        self.policies_loaded
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The release-catalog metrics (watcher syncs, snapshot age, annotations added,
    /// contradictions); clone it for the watcher task.
    pub fn releases(&self) -> &crate::releases::metrics::ReleaseMetrics {
        &self.releases
    }

    /// Read access for extensions that register their own metrics at start-up.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The build-info family (kept so it is not dropped).
    pub fn build_info(&self) -> &Family<BuildLabels, Gauge<i64, AtomicI64>> {
        &self.build_info
    }
}

/// What a policy did to one request, for [`Metrics::policy_outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyOutcome {
    /// It patched the object.
    Mutated,
    /// It denied the request.
    Denied,
    /// It returned a warning.
    Warned,
    /// An exemption admitted what it would have denied or warned about.
    Exempted,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(metrics: &Metrics, kind: &str) {
        metrics.request(
            RequestLabels {
                webhook: "validate",
                kind: kind.to_owned(),
                operation: "CREATE",
                decision: "allowed",
            },
            0.0,
        );
    }

    #[test]
    fn kind_labels_are_bounded() {
        let metrics = Metrics::new();
        for i in 0..(MAX_KIND_LABELS * 3) {
            count(&metrics, &format!("Kind{i}"));
        }
        count(&metrics, "Kind0");
        count(&metrics, "Config Map\"} 1\nevil");
        let text = metrics.encode();
        let series: HashSet<&str> = text
            .lines()
            .filter(|l| l.starts_with("stackgate_admission_requests_total{"))
            .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(series.len(), MAX_KIND_LABELS + 1, "{series:?}");
        assert!(series.contains("other"));
        assert!(series.contains("Kind0"));
        assert!(!text.contains("evil"));
    }
}
