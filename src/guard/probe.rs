//! Recognising a control-plane Machine DELETE review cheaply, before the full decode.
//!
//! Every review on `/validate` passes here when the guard is on, so the common case must
//! cost next to nothing: substring scans reject any body that does not contain `DELETE` and
//! either the control-plane label key or the Machine kind, without allocating. Only bodies
//! that pass are parsed (into a handful of fields).
//!
//! A Machine DELETE without `oldObject` (or with `null`) is taken too: nothing in the review
//! says whether it is a control-plane Machine, so the guard reads the Machine from the API.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::rules::lb_guard::{
    CAPI_GROUP, CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, MachineIdentity,
};

/// What the guard needs to know about a control-plane Machine DELETE to gather facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineDelete {
    /// Namespace of the Machine (and of its Cluster).
    pub namespace: String,
    /// Machine name.
    pub name: String,
    /// API version of the request (`v1beta1`, `v1beta2`); the Cluster is read at the same one.
    pub version: String,
    /// Cluster name: the `cluster.x-k8s.io/cluster-name` label, else `spec.clusterName`
    /// (None when the review carried no `oldObject`: the guard reads the Machine).
    pub cluster: Option<String>,
    /// The Machine from the review's `oldObject`; None when the review carried none.
    pub machine: Option<MachineIdentity>,
    /// A dry run (`kubectl delete --dry-run=server`): judged, but never counted as a
    /// deletion in flight.
    pub dry_run: bool,
}

#[derive(Deserialize)]
struct Review {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    request: Option<Request>,
}

#[derive(Deserialize)]
struct Request {
    kind: Gvk,
    operation: String,
    #[serde(rename = "subResource")]
    sub_resource: Option<String>,
    namespace: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(rename = "oldObject")]
    old_object: Option<serde_json::Value>,
    #[serde(rename = "dryRun")]
    dry_run: Option<bool>,
}

#[derive(Deserialize)]
struct Gvk {
    group: String,
    version: String,
    kind: String,
}

#[derive(Deserialize)]
struct Machine {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Spec,
}

#[derive(Deserialize, Default)]
struct Metadata {
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
struct Spec {
    #[serde(rename = "clusterName")]
    cluster_name: Option<String>,
}

/// Whether a Machine (its JSON) is a control-plane one, and the name of its Cluster.
pub(crate) fn control_plane_cluster(machine: &serde_json::Value) -> Option<Option<String>> {
    let machine = Machine::deserialize(machine).ok()?;
    let labels = machine.metadata.labels.unwrap_or_default();
    if !labels.contains_key(CONTROL_PLANE_LABEL) {
        return None;
    }
    Some(
        labels
            .get(CLUSTER_NAME_LABEL)
            .filter(|c| !c.is_empty())
            .cloned()
            .or(machine.spec.cluster_name.filter(|c| !c.is_empty())),
    )
}

/// The control-plane Machine DELETE in `body` (or a Machine DELETE without `oldObject`), or
/// `None` for any other review (or a body that is not an `admission.k8s.io/v1` review at all;
/// the normal path answers those).
pub fn probe(body: &[u8]) -> Option<MachineDelete> {
    if !contains(body, b"DELETE")
        || !(contains(body, CONTROL_PLANE_LABEL.as_bytes()) || contains(body, b"\"Machine\""))
    {
        return None;
    }
    let review: Review = serde_json::from_slice(body).ok()?;
    if review.api_version.as_deref() != Some(crate::admission::ADMISSION_V1) {
        return None;
    }
    let request = review.request?;
    if request.operation != "DELETE"
        || request.sub_resource.is_some()
        || request.kind.group != CAPI_GROUP
        || request.kind.kind != "Machine"
    {
        return None;
    }
    let (cluster, machine) = match request.old_object.filter(|o| !o.is_null()) {
        Some(old) => (
            control_plane_cluster(&old)?,
            Some(MachineIdentity::from_json(&old)),
        ),
        None => (None, None),
    };
    Some(MachineDelete {
        namespace: request.namespace.unwrap_or_default(),
        name: request.name,
        version: request.kind.version,
        cluster,
        machine,
        dry_run: request.dry_run.unwrap_or(false),
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_control_plane_machine_deletes() {
        let review = |op: &str, kind: &str, labels: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u",
                "kind":{{"group":"cluster.x-k8s.io","version":"v1beta2","kind":"{kind}"}},"operation":"{op}",
                "namespace":"ns","name":"m","object":null,"oldObject":{{"metadata":{{"labels":{labels}}},
                "spec":{{"clusterName":"from-spec"}}}}}}}}"#
            )
        };
        let cp = r#"{"cluster.x-k8s.io/control-plane":"","cluster.x-k8s.io/cluster-name":"c"}"#;
        let got = probe(review("DELETE", "Machine", cp).as_bytes()).unwrap();
        assert_eq!(got.cluster.as_deref(), Some("c"));
        assert_eq!(got.version, "v1beta2");
        assert_eq!(got.namespace, "ns");
        let cp_no_name = r#"{"cluster.x-k8s.io/control-plane":""}"#;
        let got = probe(review("DELETE", "Machine", cp_no_name).as_bytes()).unwrap();
        assert_eq!(got.cluster.as_deref(), Some("from-spec"));
        assert!(probe(review("UPDATE", "Machine", cp).as_bytes()).is_none());
        assert!(probe(review("DELETE", "MachineSet", cp).as_bytes()).is_none());
        assert!(
            probe(
                review(
                    "DELETE",
                    "Machine",
                    r#"{"x":"cluster.x-k8s.io/control-plane"}"#
                )
                .as_bytes()
            )
            .is_none()
        );
        assert!(probe(b"not json DELETE cluster.x-k8s.io/control-plane").is_none());
        assert!(!got.dry_run);
        assert_eq!(
            got.machine.as_ref().map(|m| m.infra_name.clone()),
            Some(None)
        );
        // Without oldObject (absent or null) any Machine DELETE is taken: the guard reads it.
        let bare = |old: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u",
                "kind":{{"group":"cluster.x-k8s.io","version":"v1beta1","kind":"Machine"}},"operation":"DELETE",
                "namespace":"ns","name":"m","dryRun":true{old}}}}}"#
            )
        };
        for old in ["", r#","oldObject":null"#] {
            let got = probe(bare(old).as_bytes()).unwrap();
            assert_eq!((got.cluster, got.machine, got.dry_run), (None, None, true));
        }
    }
}
