//! Recognising a control-plane Machine DELETE review cheaply, before the full decode.
//!
//! Every review on `/validate` passes here when the guard is on, so the common case must
//! cost next to nothing: two substring scans reject any body that does not contain both
//! `DELETE` and the control-plane label key, without allocating. Only bodies that pass are
//! parsed (into a handful of fields).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::rules::lb_guard::{CAPI_GROUP, CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};

/// What the guard needs to know about a control-plane Machine DELETE to gather facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineDelete {
    /// Namespace of the Machine (and of its Cluster).
    pub namespace: String,
    /// Machine name (for logs).
    pub name: String,
    /// API version of the request (`v1beta1`, `v1beta2`); the Cluster is read at the same one.
    pub version: String,
    /// Cluster name: the `cluster.x-k8s.io/cluster-name` label, else `spec.clusterName`.
    pub cluster: Option<String>,
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
    old_object: Option<Machine>,
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

/// The control-plane Machine DELETE in `body`, or `None` for any other review (or a body
/// that is not an `admission.k8s.io/v1` review at all; the normal path answers those).
pub fn probe(body: &[u8]) -> Option<MachineDelete> {
    if !contains(body, b"DELETE") || !contains(body, CONTROL_PLANE_LABEL.as_bytes()) {
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
    let machine = request.old_object?;
    let labels = machine.metadata.labels.unwrap_or_default();
    if !labels.contains_key(CONTROL_PLANE_LABEL) {
        return None;
    }
    let cluster = labels
        .get(CLUSTER_NAME_LABEL)
        .filter(|c| !c.is_empty())
        .cloned()
        .or(machine.spec.cluster_name.filter(|c| !c.is_empty()));
    Some(MachineDelete {
        namespace: request.namespace.unwrap_or_default(),
        name: request.name,
        version: request.kind.version,
        cluster,
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
    }
}
