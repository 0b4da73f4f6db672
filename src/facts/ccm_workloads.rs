//! The `CcmConfigSource` fact as a watched fact: every Deployment and DaemonSet in the
//! cluster is listed and watched, each version folded at once into what its CCM containers
//! read ([`CcmConfigReads::add_workload`]; a workload that runs no CCM adds nothing) and
//! dropped. One [`CcmConfigReads`] is kept per resource; the fact hands reviews their union.
//!
//! Bounded: the fact keeps at most [`super::ccm_config::MAX_READS`] config keys (past it a
//! workload is counted as not kept and the fact is not [`CcmConfigReads::complete`]); the
//! objects themselves are never kept.

use std::sync::Arc;

use kube::core::DynamicObject;

use super::ccm_config::{CcmConfigReads, WorkloadKey};
use super::ccm_workload::CcmMarkers;
use super::{FactId, Resource, Target, WatchedFact};

/// `apps/v1` Deployments.
pub const DEPLOYMENTS: Resource = Resource {
    group: "apps",
    version: "v1",
    kind: "Deployment",
    plural: "deployments",
};

/// `apps/v1` DaemonSets.
pub const DAEMONSETS: Resource = Resource {
    group: "apps",
    version: "v1",
    kind: "DaemonSet",
    plural: "daemonsets",
};

/// What the CCM containers of the cluster's Deployments and DaemonSets read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CcmConfigFact {
    /// Not known: the derived sites are not checked, and why (not listed yet, refused).
    Unknown(String),
    /// Every CCM workload's config keys, shared with reviews without copying.
    Known(Arc<CcmConfigReads>),
}

impl CcmConfigFact {
    /// Before the first complete list.
    pub fn not_listed_yet() -> Self {
        CcmConfigFact::Unknown("Deployments and DaemonSets have not been listed yet".to_owned())
    }

    /// The reads, when known.
    pub fn reads(&self) -> Option<&Arc<CcmConfigReads>> {
        match self {
            CcmConfigFact::Known(reads) => Some(reads),
            CcmConfigFact::Unknown(_) => None,
        }
    }
}

/// The watched fact: the cluster's Deployments and DaemonSets, read with the policy set's CCM
/// recognition (`ccmImages`, `ccmArgs` of the `ccm-concurrency` policy), taken once at start.
#[derive(Debug, Clone, Default)]
pub struct CcmWorkloads {
    images: Vec<String>,
    args: Vec<String>,
}

impl CcmWorkloads {
    /// Recognises CCM containers by `images` and `args` substrings (empty: the defaults).
    pub fn new(images: Vec<String>, args: Vec<String>) -> Self {
        CcmWorkloads { images, args }
    }

    fn markers(&self) -> CcmMarkers<'_> {
        CcmMarkers::new(&self.images, &self.args)
    }
}

impl WatchedFact for CcmWorkloads {
    type Fact = CcmConfigFact;
    type State = CcmConfigReads;
    const ID: FactId = FactId::CcmConfigSource;
    const METRICS: &'static str = "ccm_config_source";
    const SYNCS_HELP: &'static str = "CCM workload (Deployment, DaemonSet) watcher outcomes: \
                                      lists, events, deletions, refusals, errors";
    const KNOWN_HELP: &'static str = "1 while every CCM workload's config objects are known \
                                      (listed, and within the fact's bound), else 0";
    const LOG_LABEL: &'static str = "ccm config source";
    const TASK: &'static str = "ccm-config-source watcher";
    const WITHOUT: &'static str = "a Secret or ConfigMap a CCM reads is checked only when it \
                                   is a named or labelled site";
    const REFUSAL_IS_ERROR: bool = true;

    fn targets(&self) -> Vec<Target> {
        vec![Target::All(DEPLOYMENTS), Target::All(DAEMONSETS)]
    }

    fn describe(&self) -> String {
        "Deployments and DaemonSets (cluster-wide)".to_owned()
    }

    fn apply(&self, resource: &Resource, state: &mut Self::State, object: &DynamicObject) -> bool {
        let gvk = resource.gvk();
        let key = WorkloadKey::of(&gvk, object);
        let before = state.workload(&key).map(<[_]>::to_vec);
        let complete = state.complete();
        state.add_workload(&gvk, object, &self.markers());
        state.workload(&key) != before.as_deref() || state.complete() != complete
    }

    fn delete(&self, resource: &Resource, state: &mut Self::State, object: &DynamicObject) -> bool {
        let key = WorkloadKey::of(&resource.gvk(), object);
        let kept = state.workload(&key).is_some();
        state.remove(&key);
        kept
    }

    fn fact(&self, states: &[Self::State]) -> Self::Fact {
        let mut union = CcmConfigReads::default();
        for state in states {
            union.extend(state);
        }
        CcmConfigFact::Known(Arc::new(union))
    }

    fn refused(&self, code: u16) -> Self::Fact {
        CcmConfigFact::Unknown(format!(
            "Deployments and DaemonSets cannot be listed by stackgate (HTTP {code}: RBAC)"
        ))
    }

    fn is_known(fact: &Self::Fact) -> bool {
        fact.reads().is_some_and(|reads| reads.complete())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sites::SiteKind;
    use serde_json::json;

    fn daemonset(name: &str, secret: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"template": {"spec": {
                "containers": [{"name": "occm",
                    "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
                    "args": ["--cloud-config=/etc/config/cloud.conf"],
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config"}]}],
                "volumes": [{"name": "cfg", "secret": {"secretName": secret}}]}}}
        }))
        .unwrap()
    }

    fn other(name: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
        }))
        .unwrap()
    }

    fn names(fact: &CcmConfigFact) -> Vec<String> {
        fact.reads()
            .expect("known")
            .reads()
            .map(|r| format!("{}:{}", r.object.name, r.object.key))
            .collect()
    }

    /// Each event changes the state only when a CCM workload's reads change: an unrelated
    /// Deployment is not stored again; a CCM that switches its Secret is; a deletion forgets.
    #[test]
    fn events_change_the_state_only_when_a_ccm_workloads_reads_do() {
        let fact = CcmWorkloads::default();
        let mut states = [CcmConfigReads::default(), CcmConfigReads::default()];
        assert!(!fact.apply(&DEPLOYMENTS, &mut states[0], &other("web")));
        assert!(!fact.delete(&DEPLOYMENTS, &mut states[0], &other("web")));
        assert!(fact.apply(&DAEMONSETS, &mut states[1], &daemonset("occm", "a")));
        assert!(!fact.apply(&DAEMONSETS, &mut states[1], &daemonset("occm", "a")));
        assert!(fact.apply(&DAEMONSETS, &mut states[1], &daemonset("occm", "b")));
        // The same name as a Deployment is another workload.
        assert!(fact.apply(&DEPLOYMENTS, &mut states[0], &daemonset("occm", "c")));
        assert_eq!(names(&fact.fact(&states)), ["b:cloud.conf", "c:cloud.conf"]);
        let read = fact
            .fact(&states)
            .reads()
            .unwrap()
            .reads_of(SiteKind::Secret, "kube-system", "b")
            .count();
        assert_eq!(read, 1);
        assert!(fact.delete(&DAEMONSETS, &mut states[1], &daemonset("occm", "b")));
        assert!(!fact.delete(&DAEMONSETS, &mut states[1], &daemonset("occm", "b")));
        assert_eq!(names(&fact.fact(&states)), ["c:cloud.conf"]);
        assert!(CcmWorkloads::is_known(&fact.fact(&states)));
        assert!(!CcmWorkloads::is_known(&fact.refused(403)));
        assert!(!CcmWorkloads::is_known(&CcmConfigFact::not_listed_yet()));
    }

    /// The union of the per-resource states stays within MAX_READS: past it a workload is
    /// dropped and the fact is no longer known (complete).
    #[test]
    fn the_union_is_bounded() {
        let fact = CcmWorkloads::default();
        let mut states = [CcmConfigReads::default(), CcmConfigReads::default()];
        let half = crate::facts::ccm_config::MAX_READS / 2;
        for i in 0..half {
            fact.apply(
                &DEPLOYMENTS,
                &mut states[0],
                &daemonset(&format!("d{i}"), "x"),
            );
            fact.apply(
                &DAEMONSETS,
                &mut states[1],
                &daemonset(&format!("s{i}"), "x"),
            );
        }
        let union = fact.fact(&states);
        assert!(CcmWorkloads::is_known(&union));
        assert_eq!(union.reads().unwrap().reads().count(), 2 * half);
        assert!(fact.apply(&DAEMONSETS, &mut states[1], &daemonset("one-more", "x")));
        let union = fact.fact(&states);
        assert_eq!(union.reads().unwrap().reads().count(), 2 * half);
        assert!(!CcmWorkloads::is_known(&union));
    }
}
