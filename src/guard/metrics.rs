//! Metrics of the control-plane load-balancer guard. Every label comes from a closed set;
//! names, namespaces, ids and addresses never become labels.
//!
//! | metric | labels |
//! |---|---|
//! | `stackgate_lb_guard_decisions_total` | `outcome`: admitted, denied, warned, audited, exempted, unknown_admitted, unknown_denied, not_applicable |
//! | `stackgate_lb_guard_unavailable_total` | `reason`: why the facts could not be gathered ([`super::GuardError::metric_reason`]) |
//! | `stackgate_lb_guard_gather_duration_seconds` | — (time to gather the facts of one review) |
//! | `stackgate_openstack_request_duration_seconds` | `service` (identity, load-balancer), `outcome` (ok, error) |
//! | `stackgate_openstack_request_errors_total` | `service`, `reason` ([`super::OpenStackError::metric_reason`]) |
//! | `stackgate_lb_guard_cache_lookups_total` | `cache` (token, status), `result` (hit, miss) |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::error::Service;
use crate::engine::{Finding, Verdict};
use crate::rules::lb_guard::{CODE_UNAVAILABLE, FAMILY, GuardFacts};

/// Labels of `stackgate_lb_guard_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// What the guard decided for one review.
    pub outcome: &'static str,
}

/// Labels of `stackgate_lb_guard_unavailable_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnavailableLabels {
    /// Why the facts could not be gathered.
    pub reason: &'static str,
}

/// Labels of `stackgate_openstack_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `identity` or `load-balancer`.
    pub service: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// Labels of `stackgate_openstack_request_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `identity` or `load-balancer`.
    pub service: &'static str,
    /// Error category.
    pub reason: &'static str,
}

/// Labels of `stackgate_lb_guard_cache_lookups_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `token` or `status`.
    pub cache: &'static str,
    /// `hit` or `miss`.
    pub result: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets from 5 ms to 5 s: the calls run within a sub-second deadline.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The guard's metrics. Cheap to clone (every part is shared).
#[derive(Clone, Debug)]
pub struct GuardMetrics {
    decisions: Family<DecisionLabels, Counter>,
    unavailable: Family<UnavailableLabels, Counter>,
    gather_seconds: Histogram,
    calls: HistogramFamily<CallLabels>,
    errors: Family<ErrorLabels, Counter>,
    cache: Family<CacheLabels, Counter>,
}

impl Default for GuardMetrics {
    fn default() -> Self {
        Self {
            decisions: Family::default(),
            unavailable: Family::default(),
            gather_seconds: histogram(),
            calls: Family::new_with_constructor(histogram),
            errors: Family::default(),
            cache: Family::default(),
        }
    }
}

impl GuardMetrics {
    /// Registers every metric (names get the registry's `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "lb_guard_decisions",
            "Control-plane Machine DELETE reviews decided by the load-balancer guard, by outcome",
            self.decisions.clone(),
        );
        registry.register(
            "lb_guard_unavailable",
            "Reviews for which the load-balancer facts could not be gathered, by reason",
            self.unavailable.clone(),
        );
        registry.register(
            "lb_guard_gather_duration_seconds",
            "Time spent gathering the load-balancer facts of one review (Kubernetes API, Keystone, Octavia)",
            self.gather_seconds.clone(),
        );
        registry.register(
            "openstack_request_duration_seconds",
            "Keystone and Octavia call latency, by service and outcome",
            self.calls.clone(),
        );
        registry.register(
            "openstack_request_errors",
            "Failed Keystone and Octavia calls, by service and reason",
            self.errors.clone(),
        );
        registry.register(
            "lb_guard_cache_lookups",
            "Token and status-tree cache lookups, by cache and result",
            self.cache.clone(),
        );
    }

    /// Records the guard's part of a verdict reached with `facts`.
    pub fn observe(&self, facts: &GuardFacts, verdict: &Verdict) {
        self.decisions
            .get_or_create(&DecisionLabels {
                outcome: outcome(facts, verdict),
            })
            .inc();
    }

    pub(crate) fn unavailable(&self, reason: &'static str) {
        self.unavailable
            .get_or_create(&UnavailableLabels { reason })
            .inc();
    }

    pub(crate) fn gathered(&self, seconds: f64) {
        self.gather_seconds.observe(seconds);
    }

    pub(crate) fn call(&self, service: Service, seconds: f64, error: Option<&'static str>) {
        self.calls
            .get_or_create(&CallLabels {
                service: service.as_str(),
                outcome: if error.is_some() { "error" } else { "ok" },
            })
            .observe(seconds);
        if let Some(reason) = error {
            self.errors
                .get_or_create(&ErrorLabels {
                    service: service.as_str(),
                    reason,
                })
                .inc();
        }
    }

    pub(crate) fn cache(&self, cache: &'static str, hit: bool) {
        self.cache
            .get_or_create(&CacheLabels {
                cache,
                result: if hit { "hit" } else { "miss" },
            })
            .inc();
    }
}

/// The guard's outcome label for a verdict reached with `facts`.
pub fn outcome(facts: &GuardFacts, verdict: &Verdict) -> &'static str {
    let ours = |f: &Finding| f.rule == FAMILY.id;
    let unknown = matches!(facts, GuardFacts::Unavailable { .. });
    if let Some(denial) = verdict.denials.iter().find(|f| ours(f)) {
        if denial.code == CODE_UNAVAILABLE {
            "unknown_denied"
        } else {
            "denied"
        }
    } else if verdict.exemptions.iter().any(|e| e.rule == FAMILY.id) {
        "exempted"
    } else if verdict.audits.iter().any(ours) {
        "audited"
    } else if unknown {
        "unknown_admitted"
    } else if verdict.warnings.iter().any(ours) {
        "warned"
    } else if matches!(facts, GuardFacts::NotApplicable { .. }) {
        "not_applicable"
    } else {
        "admitted"
    }
}
