//! The AdmissionReview the apiserver would send for `kubectl create` of an object: what the
//! tests that compare the webhook with `stackgate check` post over HTTPS.

use serde_json::{Value, json};

/// A CREATE review (dry run) of `object` with request uid `uid`.
pub fn review_for(object: &Value, uid: &str) -> Value {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let gvr = json!({"group": group, "version": version, "resource": plural(kind)});
    let mut request = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": name,
        "operation": "CREATE",
        // The apiserver adds system:authenticated to every authenticated user's groups.
        "userInfo": {"username": "stackgate-check", "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": null,
        "dryRun": true,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    });
    if let (Some(ns), Some(r)) = (namespace, request.as_object_mut()) {
        r.insert("namespace".to_owned(), Value::String(ns.to_owned()));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// The resource name of a kind (lowercase plural), as good as the chart's webhook rules need.
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    // Azimuth's `Manifests` (addons.stackhpc.com) is its own plural.
    if lower == "manifests" {
        return lower;
    }
    if lower.ends_with('s') || lower.ends_with('x') {
        format!("{lower}es")
    } else if let Some(stem) = lower
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}
