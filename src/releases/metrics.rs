//! Metrics of the release catalog: watcher syncs, snapshot age, annotations added and
//! contradictions seen. Labels come from closed sets or from catalog annotation keys
//! (bounded by the policy files); names, namespaces and values never become labels.

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::engine::{Finding, Verdict};
use crate::rules::release_annotations::{CODE_CONTRADICTION, CODE_UNPARSABLE, FAMILY};

/// Labels of `stackgate_release_catalog_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `list` (a complete list replaced the snapshot), `event` (a watch event changed it),
    /// `crd-absent` (the OpenStackVersion CRD is not installed: empty snapshot), `forbidden`
    /// (401/403: RBAC missing; readiness opens, the last snapshot serves), `error`
    /// (a list or watch failed; the last snapshot keeps serving), `undecodable` (an object
    /// was skipped).
    pub outcome: &'static str,
}

/// Labels of `stackgate_release_annotations_added_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabels {
    /// Annotation key from the catalog, e.g. `glance.openstack.org/wsgi`.
    pub annotation: String,
}

/// Labels of the per-annotation finding counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnnotationLabels {
    /// Annotation key from the catalog, e.g. `glance.openstack.org/wsgi`.
    pub annotation: String,
    /// `warned`, `denied` or `audited`.
    pub outcome: &'static str,
}

/// The release-catalog metrics. Cheap to clone (every part is shared), so `main` can keep
/// one copy for the admission path and hand another to the watcher task.
#[derive(Clone, Debug, Default)]
pub struct ReleaseMetrics {
    syncs: Family<SyncLabels, Counter>,
    versions: Gauge<i64, AtomicI64>,
    age: SnapshotAge,
    added: Family<KeyLabels, Counter>,
    contradictions: Family<AnnotationLabels, Counter>,
    unparsable: Family<AnnotationLabels, Counter>,
}

impl ReleaseMetrics {
    /// Registers every metric (names get the registry's `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "release_catalog_syncs",
            "OpenStackVersion watcher outcomes: complete lists, applied events, errors, absent CRD",
            self.syncs.clone(),
        );
        registry.register(
            "release_catalog_openstackversions",
            "OpenStackVersion objects in the served snapshot",
            self.versions.clone(),
        );
        registry.register(
            "release_catalog_snapshot_age_seconds",
            "Seconds since the served OpenStackVersion snapshot was last confirmed by a complete \
             list or a watch event (grows while the API server is unreachable; absent before the \
             first list)",
            self.age.clone(),
        );
        registry.register(
            "release_annotations_added",
            "Annotations added by the mutating webhook from the release's ServiceDefaults",
            self.added.clone(),
        );
        registry.register(
            "release_contradictions",
            "Annotation values that contradict the release's ServiceDefaults, by outcome",
            self.contradictions.clone(),
        );
        registry.register(
            "release_unparsable_annotations",
            "Annotation values Go strconv.ParseBool rejects, by outcome",
            self.unparsable.clone(),
        );
    }

    /// Counts one watcher outcome.
    pub fn sync(&self, outcome: &'static str) {
        self.syncs.get_or_create(&SyncLabels { outcome }).inc();
    }

    /// Marks the snapshot as confirmed now and publishes its size.
    pub fn confirmed(&self, versions: usize) {
        self.age.set_now();
        self.versions
            .set(i64::try_from(versions).unwrap_or(i64::MAX));
    }

    /// Seconds since the last confirmation, None before the first.
    pub fn snapshot_age_seconds(&self) -> Option<f64> {
        self.age.seconds()
    }

    /// Records what one verdict of the release-annotations rule did. Call it after
    /// `Engine::evaluate` with `mutate` true for the mutating webhook: additions are counted
    /// there (when a patch is returned), contradictions and unparsable values on the
    /// validating webhook, so each request is counted once.
    pub fn observe(&self, mutate: bool, verdict: &Verdict) {
        if mutate {
            if verdict.patch.is_empty() {
                return;
            }
            for m in verdict.mutations.iter().filter(|f| f.rule == FAMILY.id) {
                if let Some(annotation) = annotation_of(m.pointer()) {
                    // Debug, as each mutation's line is: the review's own line already names
                    // the policy, and the counter counts the annotation.
                    tracing::debug!(
                        policy = m.policy.as_str(),
                        annotation = annotation.as_str(),
                        "release annotation added"
                    );
                    self.added.get_or_create(&KeyLabels { annotation }).inc();
                }
            }
            return;
        }
        let groups: [(&[Finding], &'static str); 3] = [
            (&verdict.denials, "denied"),
            (&verdict.warnings, "warned"),
            (&verdict.audits, "audited"),
        ];
        for (findings, outcome) in groups {
            for f in findings.iter().filter(|f| f.rule == FAMILY.id) {
                let Some(annotation) = annotation_of(f.pointer()) else {
                    continue;
                };
                let family = match f.code {
                    CODE_CONTRADICTION => &self.contradictions,
                    CODE_UNPARSABLE => &self.unparsable,
                    _ => continue,
                };
                tracing::info!(
                    policy = f.policy.as_str(),
                    annotation = annotation.as_str(),
                    outcome,
                    "release annotation finding"
                );
                family
                    .get_or_create(&AnnotationLabels {
                        annotation,
                        outcome,
                    })
                    .inc();
            }
        }
    }
}

/// The annotation key from a finding's pointer `/metadata/annotations/<key>`.
fn annotation_of(pointer: Option<&str>) -> Option<String> {
    let pointer = jsonptr::Pointer::parse(pointer?).ok()?;
    let mut tokens = pointer.tokens();
    match (tokens.next(), tokens.next(), tokens.next(), tokens.next()) {
        (Some(m), Some(a), Some(key), None)
            if m.decoded() == "metadata" && a.decoded() == "annotations" =>
        {
            Some(key.decoded().into_owned())
        }
        _ => None,
    }
}

/// A gauge computed at scrape time from the instant of the last confirmation, so the age
/// keeps growing while nothing confirms the snapshot (the API server is gone).
#[derive(Clone, Debug, Default)]
struct SnapshotAge {
    last: Arc<Mutex<Option<Instant>>>,
}

impl SnapshotAge {
    fn set_now(&self) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    fn seconds(&self) -> Option<f64> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|t| t.elapsed().as_secs_f64())
    }
}

impl TypedMetric for SnapshotAge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for SnapshotAge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.seconds().unwrap_or(0.0))
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }

    fn is_empty(&self) -> bool {
        self.seconds().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_is_absent_before_the_first_sync_and_present_after() {
        let m = ReleaseMetrics::default();
        let mut registry = Registry::with_prefix("stackgate");
        m.register(&mut registry);
        let text = |r: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, r).unwrap();
            out
        };
        assert!(!text(&registry).contains("stackgate_release_catalog_snapshot_age_seconds "));
        m.confirmed(2);
        let out = text(&registry);
        assert!(
            out.contains("stackgate_release_catalog_snapshot_age_seconds "),
            "{out}"
        );
        assert!(
            out.contains("stackgate_release_catalog_openstackversions 2"),
            "{out}"
        );
    }

    #[test]
    fn pointer_unescapes_to_the_key() {
        assert_eq!(
            annotation_of(Some("/metadata/annotations/glance.openstack.org~1wsgi")).as_deref(),
            Some("glance.openstack.org/wsgi")
        );
        assert_eq!(annotation_of(Some("/metadata/annotations")), None);
        assert_eq!(annotation_of(None), None);
    }
}
