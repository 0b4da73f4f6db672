//! A ConfigMap or Secret labelled `stackgate.dev/ccm-values=<key>` (the CCM chart's Helm
//! values, e.g. a Flux `valuesFrom` source) through the webhook over real TLS on loopback:
//! checked where it is written, as one values source of the release.
//! The real values are openCenter's hardened values file
//! (`tests/fixtures/gitops/carriers/opencenter-labelled-values/`).

mod common;

#[path = "support/review.rs"]
mod support;

use base64::Engine as _;
use common::*;
use http::StatusCode;
use serde_json::{Value, json};

const SERIAL: &str = "provider-requires-serial-api-calls";
const LABEL: &str = "stackgate.dev/ccm-values";
const HARDENED: &str = include_str!(
    "fixtures/gitops/carriers/opencenter-labelled-values/helm-values/hardened-values-2.33.1.yaml"
);
/// A values file whose `cloudConfig.loadBalancer` lacks the serial-calls key; the credential
/// must never appear in an answer.
const WITHOUT_SERIAL: &str = "image:\n  tag: v1.33.0\ncloudConfig:\n  global:\n    \
    auth-url: https://keystone.example.test:5000/v3\n    \
    application-credential-secret: canary-values-secret-123\n  loadBalancer:\n    \
    lb-provider: amphora\n";

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// A Secret holding `text` under `key`, in `field` (`stringData` verbatim, `data` base64),
/// labelled with `label` (none: unlabelled).
fn secret(field: &str, key: &str, text: &str, label: Option<&str>) -> Value {
    let value = if field == "data" {
        b64().encode(text)
    } else {
        text.to_owned()
    };
    let mut metadata = json!({"name": "openstack-ccm-values-base", "namespace": "openstack-ccm"});
    if let Some(label) = label {
        metadata["labels"] = json!({LABEL: label});
    }
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
        field: {key: value}})
}

async fn review(client: &Client, path: &str, object: &Value) -> Value {
    let body = serde_json::to_vec(&support::review_for(object, "u-values")).expect("encode");
    let (status, review) = post(client, path, body).await;
    assert_eq!(status, StatusCode::OK, "{path}: {review}");
    assert_eq!(review["response"]["uid"], "u-values");
    review["response"].clone()
}

fn patch_of(response: &Value) -> Value {
    decoded_patch(response).unwrap_or_else(|| json!([]))
}

fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The object with `patch` applied.
fn patched(object: &Value, patch: &Value) -> Value {
    let mut out = object.clone();
    let patch: json_patch::Patch = serde_json::from_value(patch.clone()).expect("a JSON Patch");
    json_patch::patch(&mut out, &patch).expect("the patch applies");
    out
}

/// The values text with the one line the fix adds.
fn with_serial_line(text: &str) -> String {
    text.replace(
        "    lb-provider: amphora\n",
        &format!("    lb-provider: amphora\n    {SERIAL}: true\n"),
    )
}

#[tokio::test]
async fn labelled_values_without_serial_get_a_warning_and_a_one_line_patch() {
    let server = TestServer::start().await;
    let client = server.client().await;
    for field in ["stringData", "data"] {
        let object = secret(field, "values.yaml", WITHOUT_SERIAL, Some("values.yaml"));
        let v = review(&client, "/validate?timeout=10s", &object).await;
        assert_eq!(v["allowed"], true, "{field}: {v}");
        let warned = warnings(&v);
        let serial: Vec<&String> = warned
            .iter()
            .filter(|w| w.starts_with("stackgate serial-lb-api-calls: "))
            .collect();
        assert_eq!(serial.len(), 1, "{field}: {warned:?}");
        let w = serial[0];
        assert!(
            w.contains(&format!(
                "Secret openstack-ccm/openstack-ccm-values-base {field}[\"values.yaml\"] line 3: "
            )),
            "{w}"
        );
        // One values source of the release: said as such, not as what the CCM runs (the
        // warning is the first line; the rule's unit test has the rest).
        assert!(w.contains("is not set in these values."), "{w}");
        assert!(!w.contains("is not set, so the CCM"), "{w}");
        assert!(
            !v.to_string().contains("canary-values-secret"),
            "{field}: {v}"
        );

        let m = review(&client, "/mutate?timeout=10s", &object).await;
        assert_eq!(m["allowed"], true);
        let patch = patch_of(&m);
        let ops = patch.as_array().expect("ops");
        assert_eq!(ops.len(), 1, "{field}: {patch}");
        assert_eq!(ops[0]["op"], "replace");
        assert_eq!(ops[0]["path"], format!("/{field}/values.yaml"));
        let written = ops[0]["value"].as_str().expect("a string");
        let text = if field == "data" {
            String::from_utf8(b64().decode(written).expect("base64")).expect("UTF-8")
        } else {
            written.to_owned()
        };
        assert_eq!(text, with_serial_line(WITHOUT_SERIAL), "{field}");
        assert!(!m.to_string().contains("canary-values-secret"), "{field}");

        // Idempotent: the patched object gets no patch and no serial finding.
        let again = patched(&object, &patch);
        let m = review(&client, "/mutate?timeout=10s", &again).await;
        assert_eq!(patch_of(&m), json!([]), "{field}: {m}");
        let v = review(&client, "/validate?timeout=10s", &again).await;
        assert!(
            !warnings(&v)
                .iter()
                .any(|w| w.contains("serial-lb-api-calls")),
            "{field}: {v}"
        );
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn opencenter_hardened_values_are_admitted_untouched() {
    let server = TestServer::start().await;
    let client = server.client().await;
    for field in ["stringData", "data"] {
        let object = secret(field, "hardened.yaml", HARDENED, Some("hardened.yaml"));
        let v = review(&client, "/validate?timeout=10s", &object).await;
        assert_eq!(v["allowed"], true, "{field}: {v}");
        assert!(warnings(&v).is_empty(), "{field}: {v}");
        let m = review(&client, "/mutate?timeout=10s", &object).await;
        assert_eq!(patch_of(&m), json!([]), "{field}: {m}");
        assert!(warnings(&m).is_empty(), "{field}: {m}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn unlabelled_missing_unreadable_and_oversized_values() {
    let server = TestServer::start().await;
    let client = server.client().await;

    // Unlabelled: not a site, whatever it holds.
    let object = secret("stringData", "values.yaml", WITHOUT_SERIAL, None);
    for path in ["/validate?timeout=10s", "/mutate?timeout=10s"] {
        let r = review(&client, path, &object).await;
        assert_eq!(r["allowed"], true, "{r}");
        assert!(warnings(&r).is_empty(), "{r}");
        assert_eq!(patch_of(&r), json!([]), "{r}");
    }

    // The label names a key the Secret does not have: one clear warning, no patch.
    let object = secret(
        "stringData",
        "values.yaml",
        WITHOUT_SERIAL,
        Some("hardened.yaml"),
    );
    let v = review(&client, "/validate?timeout=10s", &object).await;
    assert_eq!(v["allowed"], true, "{v}");
    let warned = warnings(&v);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with(&format!(
            "stackgate cloud-config-integrity: Secret openstack-ccm/openstack-ccm-values-base: \
             no data[\"hardened.yaml\"], the key its label {LABEL} names. Fix: set the label"
        )),
        "{}",
        warned[0]
    );
    let m = review(&client, "/mutate?timeout=10s", &object).await;
    assert_eq!(patch_of(&m), json!([]), "{m}");

    // Not YAML: denied by validate with the reason, never the content; mutate admits it as is.
    let object = secret(
        "stringData",
        "values.yaml",
        "cloudConfig: [canary-values-secret-123\n",
        Some("values.yaml"),
    );
    let v = review(&client, "/validate?timeout=10s", &object).await;
    assert_eq!(v["allowed"], false, "{v}");
    let message = v["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("stringData[\"values.yaml\"] is not valid YAML"),
        "{message}"
    );
    assert!(!v.to_string().contains("canary-values-secret"), "{v}");
    let m = review(&client, "/mutate?timeout=10s", &object).await;
    assert_eq!(m["allowed"], true, "{m}");
    assert_eq!(patch_of(&m), json!([]), "{m}");

    // Over the 64 KiB values-text cap: one finding, nothing parsed, no patch.
    let big = format!("{WITHOUT_SERIAL}# {}\n", "x".repeat(70 * 1024));
    let object = secret("data", "values.yaml", &big, Some("values.yaml"));
    let v = review(&client, "/validate?timeout=10s", &object).await;
    let message = v["status"]["message"].as_str().unwrap_or_default();
    // Denials are separated by a blank line (each is several lines).
    let findings = message
        .split("\n\n")
        .filter(|d| !d.trim().is_empty())
        .count()
        + warnings(&v).len();
    assert_eq!(findings, 1, "{v}");
    assert!(
        message.contains("over stackgate's limit of 65536 bytes"),
        "{message}"
    );
    let m = review(&client, "/mutate?timeout=10s", &object).await;
    assert_eq!(patch_of(&m), json!([]), "{m}");
    server.stop().await.unwrap();
}
