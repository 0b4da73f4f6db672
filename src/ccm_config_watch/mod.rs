//! The `CcmConfigSource` fact in `serve`: which Secret and ConfigMap keys the cluster's CCM
//! containers read as their `--cloud-config`, so that a write of one of them is judged as a
//! cloud-config site whatever its name (patched when `provider-requires-serial-api-calls` is
//! missing, denied when it is `false`), with a note naming the workload that reads it.
//!
//! The fact, its fold and what to watch are data in [`crate::facts::ccm_workloads`]: every
//! Deployment and DaemonSet, cluster-wide, reduced at once to its CCM containers' reads by
//! the generic [`crate::fact_watcher`] (never kept; at most `MAX_READS` keys). The current fact
//! is kept in a [`CcmConfigCell`]; [`CcmConfigSource`] hands it to Secret and ConfigMap
//! reviews as [`Facts::of_ccm_reads`] (an `Arc` clone, no IO on the request path).
//!
//! The CCM recognition (`ccmImages`, `ccmArgs`) is the policy set's at start: the engine
//! snapshot the server swaps at run time changes only the release data, never the policies,
//! so it cannot go stale; new policies mean a new process (the chart rolls the pods when the
//! policy ConfigMap changes).
//!
//! Until the first complete list of both resources the fact is unknown and nothing is added:
//! the `ccm-config-source` readiness gate holds `/readyz` until then. A refusal (no RBAC for
//! `apps`) opens the gate too, logged at error with `stackgate_ccm_config_source_known 0`:
//! the named and labelled sites are still checked, the derived ones are not.

use std::sync::Arc;

use crate::admission::{FactSource, Gather, KnownFacts, Webhook, body_mentions};
use crate::engine::{Engine, Facts};
use crate::fact_watcher::FactCell;
pub use crate::facts::ccm_workloads::{CcmConfigFact, CcmWorkloads};

/// The current `CcmConfigSource` fact, shared by the watcher (writer) and the fact source
/// (readers). Starts unknown ("not listed yet").
pub type CcmConfigCell = FactCell<CcmConfigFact>;

impl Default for FactCell<CcmConfigFact> {
    fn default() -> Self {
        FactCell::holding(CcmConfigFact::not_listed_yet())
    }
}

/// The `CcmConfigSource` fact as a [`FactSource`]: wants Secret and ConfigMap reviews while
/// some CCM workload is known to read a config object, and answers from the cell at once.
#[derive(Debug, Clone)]
pub struct CcmConfigSource {
    cell: CcmConfigCell,
}

impl CcmConfigSource {
    /// The source over `cell` (filled by [`crate::fact_watcher::run`] over [`CcmWorkloads`]).
    pub fn new(cell: CcmConfigCell) -> Self {
        CcmConfigSource { cell }
    }
}

impl FactSource for CcmConfigSource {
    fn wants(&self, _webhook: Webhook, body: &[u8], _engine: &Engine) -> Option<Arc<dyn Gather>> {
        let fact = self.cell.get();
        let reads = fact.reads().filter(|reads| !reads.is_empty())?;
        // Cheap: a Secret or ConfigMap review names its kind.
        if !body_mentions(body, b"\"Secret\"") && !body_mentions(body, b"\"ConfigMap\"") {
            return None;
        }
        Some(Arc::new(KnownFacts(Facts::of_ccm_reads(Arc::clone(reads)))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::ccm_config::CcmConfigReads;
    use crate::facts::ccm_workload::CcmMarkers;
    use crate::policy::PolicySet;
    use kube::core::{DynamicObject, GroupVersionKind};

    fn review(kind: &str) -> Vec<u8> {
        format!(r#"{{"request":{{"kind":{{"group":"","version":"v1","kind":"{kind}"}}}}}}"#)
            .into_bytes()
    }

    fn reads_of_a_daemonset() -> CcmConfigReads {
        let daemonset: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"template": {"spec": {
                "containers": [{"name": "occm",
                    "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
                    "args": ["--cloud-config=/etc/config/cloud.conf"],
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config"}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "alt"}}]}}}
        }))
        .unwrap();
        let mut reads = CcmConfigReads::default();
        reads.add_workload(
            &GroupVersionKind::gvk("apps", "v1", "DaemonSet"),
            &daemonset,
            &CcmMarkers::new(&[], &[]),
        );
        assert!(!reads.is_empty());
        reads
    }

    /// Secret and ConfigMap reviews get the reads once some CCM is known to read a config;
    /// other kinds, and an unknown or empty fact, get nothing.
    #[test]
    fn wants_secret_and_configmap_reviews_while_reads_are_known() {
        let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
        let cell = CcmConfigCell::default();
        let source = CcmConfigSource::new(cell.clone());
        let wants = |kind: &str| {
            source
                .wants(Webhook::Validate, &review(kind), &engine)
                .is_some()
        };
        assert!(!wants("Secret"), "not listed yet");
        cell.set(CcmConfigFact::Known(Arc::new(CcmConfigReads::default())));
        assert!(!wants("Secret"), "no CCM reads anything");
        cell.set(CcmConfigFact::Known(Arc::new(reads_of_a_daemonset())));
        assert!(wants("Secret"));
        assert!(wants("ConfigMap"));
        assert!(!wants("Service"));
        cell.set(CcmConfigFact::Unknown("refused".to_owned()));
        assert!(!wants("ConfigMap"));
    }
}
