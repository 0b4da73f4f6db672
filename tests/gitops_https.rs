//! HelmRelease, Argo CD Application and RKE2 HelmChart reviews through the webhook over real
//! TLS on loopback. The bodies are the captured kube-apiserver v1.26.0 requests
//! (`tests/fixtures/captured/{helmrelease,application,helmchart}/`), some with one value
//! changed to exercise the other branch.

mod common;

use common::*;
use http::StatusCode;
use serde_json::{Value, json};

const SERIAL: &str = "provider-requires-serial-api-calls";

/// Posts `body` to `path` and returns the `response` of the AdmissionReview.
async fn review(client: &Client, path: &str, body: Vec<u8>) -> Value {
    let uid = uid_of(&body);
    let (status, review) = post(client, path, body).await;
    assert_eq!(status, StatusCode::OK, "{path}: {review}");
    assert_eq!(review["response"]["uid"], uid.as_str());
    review["response"].clone()
}

fn patch_of(response: &Value) -> Value {
    decoded_patch(response).unwrap_or_else(|| json!([]))
}

fn edit(rel: &str, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&captured(rel)).expect("captured JSON");
    f(&mut v["request"]["object"]);
    serde_json::to_vec(&v).expect("encode")
}

fn serial_messages(response: &Value) -> Vec<String> {
    let mut out: Vec<String> = response["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .split("\n\n")
        .filter(|m| m.contains("rule serial-lb-api-calls"))
        .map(str::to_owned)
        .collect();
    out.extend(
        response["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|w| w.starts_with("stackgate serial-lb-api-calls"))
            .map(str::to_owned),
    );
    out
}

#[tokio::test]
async fn helmrelease_reviews() {
    let server = TestServer::start().await;
    let client = server.client().await;
    // As captured: serial calls on, so nothing to add and nothing to deny for this rule.
    let m = review(
        &client,
        "/mutate?timeout=10s",
        captured("helmrelease/mutate-create-openstack-cloud-controller-manager.json"),
    )
    .await;
    assert_eq!(m["allowed"], true);
    assert!(!patch_of(&m).to_string().contains(SERIAL), "{m}");
    let v = review(
        &client,
        "/validate?timeout=10s",
        captured("helmrelease/validate-create-openstack-cloud-controller-manager.json"),
    )
    .await;
    assert!(serial_messages(&v).is_empty(), "{v}");

    // Without the key: the mutating webhook adds it to the values with a JSON Patch `add`.
    let body = edit(
        "helmrelease/mutate-create-openstack-cloud-controller-manager.json",
        |o| {
            o["spec"]["values"]["cloudConfig"]["loadBalancer"]
                .as_object_mut()
                .map(|m| m.remove(SERIAL));
        },
    );
    let m = review(&client, "/mutate?timeout=10s", body).await;
    assert_eq!(m["allowed"], true);
    let patch = patch_of(&m);
    assert!(
        patch.as_array().into_iter().flatten().any(|op| op
            == &json!({"op": "add", "path": format!("/spec/values/cloudConfig/loadBalancer/{SERIAL}"), "value": true})),
        "{patch}"
    );

    // Explicitly false: denied, naming the values path; no credential in the answer.
    let body = edit(
        "helmrelease/validate-create-openstack-cloud-controller-manager.json",
        |o| {
            o["spec"]["values"]["cloudConfig"]["loadBalancer"][SERIAL] = json!(false);
        },
    );
    let v = review(&client, "/validate?timeout=10s", body).await;
    assert_eq!(v["allowed"], false);
    let message = v["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "HelmRelease kube-system/openstack-cloud-controller-manager spec.values: [LoadBalancer] "
        ) && message.contains(&format!("\nAt cloudConfig.loadBalancer.{SERIAL}.\n")),
        "{message}"
    );
    assert!(!v.to_string().contains("fake-app-cred-secret"));

    // DELETE is admitted untouched.
    let v = review(
        &client,
        "/validate?timeout=10s",
        captured("helmrelease/validate-delete-openstack-cloud-controller-manager.json"),
    )
    .await;
    assert_eq!(v["allowed"], true);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn application_reviews() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let v = review(
        &client,
        "/validate?timeout=10s",
        captured("application/validate-create-occm-valuesobject.json"),
    )
    .await;
    assert!(serial_messages(&v).is_empty(), "{v}");
    // `kubectl apply` with serial calls switched off: the mutating webhook leaves an explicit
    // false alone, the validating webhook denies it and names the valuesObject path.
    let m = review(
        &client,
        "/mutate?timeout=10s",
        captured("application/mutate-update-occm-valuesobject-serial-false.json"),
    )
    .await;
    assert_eq!(m["allowed"], true);
    assert!(!patch_of(&m).to_string().contains(SERIAL));
    let v = review(
        &client,
        "/validate?timeout=10s",
        captured("application/validate-update-occm-valuesobject-serial-false.json"),
    )
    .await;
    assert_eq!(v["allowed"], false, "{v}");
    assert_eq!(v["status"]["code"], 403);
    let message = v["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Application argocd/occm-valuesobject spec.source.helm.valuesObject: ")
            && message.contains(&format!("\nAt cloudConfig.loadBalancer.{SERIAL}.\n")),
        "{message}"
    );
    // The same values as a YAML string in `helm.values`, without the key: one line is added
    // to the string, nothing else changes.
    let values = "cloudConfig:\n  global:\n    region: RegionOne   # keep\n  loadBalancer:\n    subnet-id: 9c018814-f2a8-45dd-9679-5400d49b333a\n# end\n";
    let body = edit("application/mutate-create-occm-valuesobject.json", |o| {
        o["spec"]["source"]["helm"] =
            json!({"releaseName": "openstack-cloud-controller-manager", "values": values});
    });
    let m = review(&client, "/mutate?timeout=10s", body).await;
    let expected = values.replace(
        "9c018814-f2a8-45dd-9679-5400d49b333a\n",
        &format!("9c018814-f2a8-45dd-9679-5400d49b333a\n    {SERIAL}: true\n"),
    );
    assert_eq!(
        patch_of(&m),
        json!([{"op": "replace", "path": "/spec/source/helm/values", "value": expected}])
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn helmchart_reviews() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let v = review(
        &client,
        "/validate?timeout=10s",
        captured("helmchart/validate-create-openstack-cloud-controller-manager.json"),
    )
    .await;
    assert!(serial_messages(&v).is_empty(), "{v}");
    // Re-applied with `false` inside `spec.valuesContent`: mutate leaves it, validate denies
    // with the values path and the line inside the values string.
    let body =
        captured("helmchart/mutate-update-openstack-cloud-controller-manager-serial-false.json");
    let m = review(&client, "/mutate?timeout=10s", body.clone()).await;
    assert!(!patch_of(&m).to_string().contains(SERIAL));
    let v = review(&client, "/validate?timeout=10s", body).await;
    assert_eq!(v["allowed"], false, "{v}");
    let message = v["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "HelmChart kube-system/openstack-cloud-controller-manager spec.valuesContent line 15: "
        ) && message.contains(&format!("\nAt cloudConfig.loadBalancer.{SERIAL}.\n")),
        "{message}"
    );
    assert!(!v.to_string().contains("fake-app-cred-secret"));
    // Without the key: `spec.valuesContent` is replaced by the same text plus one line.
    let mut original = String::new();
    let body = edit(
        "helmchart/mutate-create-openstack-cloud-controller-manager.json",
        |o| {
            let text = o["spec"]["valuesContent"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let without: String = text
                .lines()
                .filter(|l| !l.contains(SERIAL))
                .map(|l| format!("{l}\n"))
                .collect();
            original = without.clone();
            o["spec"]["valuesContent"] = json!(without);
        },
    );
    let m = review(&client, "/mutate?timeout=10s", body).await;
    let patch = patch_of(&m);
    assert_eq!(patch[0]["op"], "replace");
    assert_eq!(patch[0]["path"], "/spec/valuesContent");
    let new = patch[0]["value"].as_str().unwrap_or_default();
    let added: Vec<&str> = new
        .lines()
        .filter(|l| !original.lines().any(|o| o == *l))
        .collect();
    assert_eq!(added, vec![format!("    {SERIAL}: true").as_str()]);
    assert_eq!(
        new.lines()
            .filter(|l| !l.contains(SERIAL))
            .collect::<Vec<_>>(),
        original.lines().collect::<Vec<_>>()
    );
    server.stop().await.unwrap();
}

/// Issue 14: an RKE2 HelmChart with `spec.set` turning serial calls off is denied, naming the
/// `spec.set` entry; `spec.set` on top of a `valuesContent` that sets it true wins.
#[tokio::test]
async fn helmchart_spec_set_is_read_over_values_content() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let set_false = |o: &mut Value| {
        o["spec"]["set"] = json!({format!("cloudConfig.loadBalancer.{SERIAL}"): "false"});
    };
    let body = edit(
        "helmchart/validate-create-openstack-cloud-controller-manager.json",
        set_false,
    );
    let v = review(&client, "/validate?timeout=10s", body).await;
    assert_eq!(v["allowed"], false, "{v}");
    let message = v["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("HelmChart kube-system/openstack-cloud-controller-manager spec.set: ")
            && message.contains(&format!(
                "\nAt spec.set[\"cloudConfig.loadBalancer.{SERIAL}\"].\n"
            )),
        "{message}"
    );
    assert!(!v.to_string().contains("fake-app-cred-secret"));
    // The mutating webhook leaves an explicit false alone, and does not edit valuesContent
    // (which `spec.set` would override).
    let body = edit(
        "helmchart/mutate-create-openstack-cloud-controller-manager.json",
        set_false,
    );
    let m = review(&client, "/mutate?timeout=10s", body).await;
    assert_eq!(m["allowed"], true);
    assert!(!patch_of(&m).to_string().contains(SERIAL), "{m}");
    // `spec.set` turning it on over a valuesContent without it: nothing to add or deny.
    let body = edit(
        "helmchart/mutate-create-openstack-cloud-controller-manager.json",
        |o| {
            let values = o["spec"]["valuesContent"].as_str().unwrap_or_default();
            let without: String = values
                .lines()
                .filter(|l| !l.contains(SERIAL))
                .map(|l| format!("{l}\n"))
                .collect();
            o["spec"]["valuesContent"] = json!(without);
            o["spec"]["set"] = json!({format!("cloudConfig.loadBalancer.{SERIAL}"): "true"});
        },
    );
    let m = review(&client, "/mutate?timeout=10s", body).await;
    assert_eq!(patch_of(&m), json!([]), "{m}");
    server.stop().await.unwrap();
}

/// Issue 14: Argo CD `helm.parameters` win over `helm.valuesObject`, as `--set` wins in Helm.
#[tokio::test]
async fn argo_parameters_override_values_object() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let body = edit("application/validate-create-occm-valuesobject.json", |o| {
        o["spec"]["source"]["helm"]["parameters"] = json!([
            {"name": "image.tag", "value": "v1.31.1"},
            {"name": format!("cloudConfig.loadBalancer.{SERIAL}"), "value": "false"}
        ]);
    });
    let v = review(&client, "/validate?timeout=10s", body).await;
    assert_eq!(v["allowed"], false, "{v}");
    let message = v["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Application argocd/occm-valuesobject spec.source.helm.parameters[1]: ")
            && message.contains(&format!(
                "\nAt spec.source.helm.parameters[1] (cloudConfig.loadBalancer.{SERIAL}).\n"
            )),
        "{message}"
    );
    // `forceString: true` makes it the string "false", which the chart renders the same way.
    let body = edit("application/validate-create-occm-valuesobject.json", |o| {
        o["spec"]["source"]["helm"]["parameters"] = json!([
            {"name": format!("cloudConfig.loadBalancer.{SERIAL}"), "value": "false", "forceString": true}
        ]);
    });
    let v = review(&client, "/validate?timeout=10s", body).await;
    assert_eq!(v["allowed"], false, "{v}");
    server.stop().await.unwrap();
}

/// Issue 14: a HelmRelease whose values come from `valuesFrom` is admitted with a warning
/// that names what the webhook cannot see, and no claim about the chart's defaults.
#[tokio::test]
async fn helmrelease_values_from_is_a_warning_about_what_cannot_be_seen() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let body = edit(
        "helmrelease/validate-create-openstack-cloud-controller-manager.json",
        |o| {
            o["spec"]["values"] =
                json!({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}});
            o["spec"]["valuesFrom"] =
                json!([{"kind": "Secret", "name": "occm-values", "valuesKey": "values.yaml"}]);
        },
    );
    let v = review(&client, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(v["allowed"], true, "{v}");
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("spec.valuesFrom: values come from Secret occm-values key values.yaml, which this run cannot see"),
        "{warnings}"
    );
    assert!(!warnings.contains("default"), "{warnings}");
    let m = review(&client, "/mutate?timeout=10s", body).await;
    assert_eq!(patch_of(&m), json!([]), "{m}");
    server.stop().await.unwrap();
}

/// Everything a review says: the denial message and the warnings.
fn said(response: &Value) -> String {
    format!(
        "{}\n{}",
        response["status"]["message"], response["warnings"]
    )
}

/// Issue 14: an umbrella chart's HelmChart whose `valuesContent` holds the CCM's values under
/// the subchart key. The missing serial setting is reported there, the mutating webhook adds
/// it under that key (not at the top, which the umbrella chart ignores), and the patched
/// object is clean.
#[tokio::test]
async fn umbrella_helmchart_values_content_is_read_and_patched_under_the_subchart_key() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let umbrella = |o: &mut Value| {
        let values = o["spec"]["valuesContent"].as_str().unwrap_or_default();
        let nested: String = values
            .lines()
            .filter(|l| !l.contains(SERIAL))
            .map(|l| format!("  {l}\n"))
            .collect();
        o["spec"]["chart"] = json!("cluster-addons");
        o["spec"]["valuesContent"] = json!(format!(
            "cloudConfig: {{}}\nopenstack-cloud-controller-manager:\n{nested}"
        ));
    };
    let v = review(
        &client,
        "/validate?timeout=10s",
        edit(
            "helmchart/validate-create-openstack-cloud-controller-manager.json",
            umbrella,
        ),
    );
    let v = v.await;
    let serial = serial_messages(&v);
    assert_eq!(serial.len(), 1, "{v}");
    assert!(
        // Line 6 is under the subchart key (line 1 is the umbrella's own `cloudConfig`).
        serial[0].contains("spec.valuesContent line 6: "),
        "{serial:?}"
    );
    assert!(!v.to_string().contains("fake-app-cred-secret"));
    let body = edit(
        "helmchart/mutate-create-openstack-cloud-controller-manager.json",
        umbrella,
    );
    let m = review(&client, "/mutate?timeout=10s", body.clone()).await;
    let patch = patch_of(&m);
    let ops = patch.as_array().cloned().unwrap_or_default();
    assert_eq!(ops.len(), 1, "{patch}");
    assert_eq!(ops[0]["path"], "/spec/valuesContent");
    let text = ops[0]["value"].as_str().unwrap_or_default();
    assert!(
        text.contains("    floating-network-id: 80c9fc78-a2be-45d5-a85b-f17a6c98df92\n")
            && text.contains(&format!("      {SERIAL}: true\n")),
        "{text}"
    );
    assert!(text.starts_with("cloudConfig: {}\nopenstack-cloud-controller-manager:\n"));
    // The patched object, reviewed again: nothing left to say about serial calls.
    let mut review_body: Value = serde_json::from_slice(&body).unwrap();
    let p: json_patch::Patch = serde_json::from_value(patch).unwrap();
    json_patch::patch(&mut review_body["request"]["object"], &p).unwrap();
    let again = review(
        &client,
        "/validate?timeout=10s",
        serde_json::to_vec(&review_body).unwrap(),
    )
    .await;
    assert!(serial_messages(&again).is_empty(), "{again}");
    assert_eq!(again["allowed"], true, "{again}");
    server.stop().await.unwrap();
}

/// Issue 14: `spec.set` paths are read as Helm's strvals parser reads them. A list path
/// outside cloudConfig changes no finding; a path Helm cannot read is said to be unreadable
/// (never taken as something else); `controllerExtraArgs` set there is what ccm-concurrency
/// reads, pointed at the entry.
#[tokio::test]
async fn helmchart_set_list_paths_unreadable_paths_and_controller_args() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let validate = "helmchart/validate-create-openstack-cloud-controller-manager.json";
    let mutate = "helmchart/mutate-create-openstack-cloud-controller-manager.json";
    // A list path naming the serial key outside cloudConfig: still serial, still admitted.
    let list_path = |o: &mut Value| {
        o["spec"]["set"] = json!({
            format!("extraEnv[0].{SERIAL}"): "false",
            "tolerations[1].key": "node-role.kubernetes.io/control-plane"
        });
    };
    let v = review(&client, "/validate?timeout=10s", edit(validate, list_path)).await;
    assert_eq!(v["allowed"], true, "{v}");
    assert!(serial_messages(&v).is_empty(), "{v}");
    let m = review(&client, "/mutate?timeout=10s", edit(mutate, list_path)).await;
    assert_eq!(patch_of(&m), json!([]), "{m}");
    // A path Helm cannot read: said so, no claim about the CCM, nothing patched.
    let unreadable = |o: &mut Value| {
        o["spec"]["set"] = json!({format!("cloudConfig.loadBalancer[x].{SERIAL}"): "false"});
    };
    let v = review(&client, "/validate?timeout=10s", edit(validate, unreadable)).await;
    assert_eq!(v["allowed"], true, "{v}");
    let all = said(&v);
    assert!(
        all.contains(&format!(
            "spec.set[\\\"cloudConfig.loadBalancer[x].{SERIAL}\\\"] is not a --set entry Helm \
             can read (a list index is not a number from 0 to 65536)"
        )),
        "{all}"
    );
    assert!(serial_messages(&v).is_empty(), "{v}");
    let m = review(&client, "/mutate?timeout=10s", edit(mutate, unreadable)).await;
    assert!(!patch_of(&m).to_string().contains(SERIAL), "{m}");
    // controllerExtraArgs through spec.set (the chart's shape: a YAML list in a string).
    let args = |o: &mut Value| {
        let values = o["spec"]["valuesContent"].as_str().unwrap_or_default();
        let without: String = values
            .lines()
            .filter(|l| !l.contains("concurrent-service-syncs"))
            .map(|l| format!("{l}\n"))
            .collect();
        o["spec"]["valuesContent"] = json!(without);
        o["spec"]["set"] = json!({"controllerExtraArgs": "- --concurrent-service-syncs=4"});
    };
    let v = review(&client, "/validate?timeout=10s", edit(validate, args)).await;
    let all = said(&v);
    assert!(
        all.contains(
            "spec.set[\\\"controllerExtraArgs\\\"][0]: --concurrent-service-syncs=4 lets the CCM \
             reconcile 4 Services"
        ),
        "{all}"
    );
    server.stop().await.unwrap();
}
