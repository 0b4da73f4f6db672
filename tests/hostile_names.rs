//! A long `metadata.name` (issue 31, item 1): the apiserver calls mutating webhooks before it
//! validates names, so a review can name its object with a megabyte. Every finding names the
//! object; before, the name was copied into each finding's location and full text (491 MiB
//! for one ClusterResourceSet Secret with a 1 MiB name). The name is now cut where it enters
//! (`stackgate::short_text::ShortText`, 253 bytes), so the answer stays small and still names
//! the object, by the head of its name and its length.

mod common;

use std::io::Write as _;
use std::process::Command;

use base64::Engine as _;
use common::{TestServer, post};
use serde_json::{Value, json};
use stackgate::admission::{self, Webhook};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

const MIB: usize = 1024 * 1024;
/// What an answer about such an object may cost: findings are capped at 20 per list and
/// 4 KiB each, and the name is 253 bytes at most.
const SMALL_ANSWER: usize = 64 * 1024;

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

/// A name of `MIB` bytes, and the cut form every output must show instead.
fn long_name() -> (String, String) {
    let name = format!("crs-{}", "n".repeat(MIB - 4));
    let cut = stackgate::short_text::ShortText::name(&name).into_string();
    assert!(cut.ends_with("…(1048576 bytes)"), "{cut}");
    (name, cut)
}

fn review(kind: (&str, &str, &str), resource: &str, name: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "long-name-1",
            "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
            "resource": {"group": kind.0, "version": kind.1, "resource": resource},
            "name": name,
            "namespace": "tenant",
            "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": object,
            "oldObject": null,
            "dryRun": false,
        }
    }))
    .expect("serializes")
}

/// A ClusterResourceSet payload Secret named `name` whose payload embeds 20 cloud-config
/// Secrets without the serial setting and 20 CCM DaemonSets with a forbidden flag: dozens of
/// findings, each naming the object.
fn crs_secret(name: &str) -> Value {
    let mut payload = String::new();
    for i in 0..20 {
        payload.push_str(&format!(
            "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config-{i}\n  \
             namespace: kube-system\nstringData:\n  cloud.conf: \"[Global]\\nauth-url = \
             https://keystone\\n[LoadBalancer]\\nlb-method = ROUND_ROBIN\\n\"\n---\n\
             apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: occm-{i}\n  namespace: \
             kube-system\nspec:\n  template:\n    spec:\n      containers:\n      - name: occm\n        \
             image: registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0\n        \
             args: [--concurrent-service-syncs=4]\n"
        ));
    }
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "type": "addons.cluster.x-k8s.io/resource-set",
        "metadata": {"name": name, "namespace": "tenant"},
        "data": {"p.yaml": base64::engine::general_purpose::STANDARD.encode(&payload)},
    })
}

/// An Argo CD Application named `name` with 8 sources of the CCM chart, each with values
/// that leave out the serial setting.
fn argo_application(name: &str) -> Value {
    let sources: Vec<Value> = (0..8)
        .map(|i| {
            json!({
                "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "chart": "openstack-cloud-controller-manager",
                "targetRevision": "2.31.0",
                "helm": {"values": format!(
                    "cloudConfig:\n  global:\n    auth-url: https://keystone-{i}\n  \
                     loadBalancer:\n    lb-method: ROUND_ROBIN\n"
                )},
            })
        })
        .collect();
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "tenant"},
        "spec": {"sources": sources, "destination": {"namespace": "kube-system"}},
    })
}

fn crs_review(name: &str) -> Vec<u8> {
    review(("", "v1", "Secret"), "secrets", name, crs_secret(name))
}

fn argo_review(name: &str) -> Vec<u8> {
    review(
        ("argoproj.io", "v1alpha1", "Application"),
        "applications",
        name,
        argo_application(name),
    )
}

/// The answer's response: denial message, warnings, audit annotations.
fn findings_text(answer: &Value) -> String {
    answer["response"].to_string()
}

#[test]
fn the_engine_names_a_long_named_object_by_its_cut_name_in_a_small_answer() {
    let (name, cut) = long_name();
    let engine = engine();
    let metrics = Metrics::new();
    for (what, body) in [("crs", crs_review(&name)), ("argo", argo_review(&name))] {
        assert!(body.len() > MIB, "{what}: the review carries the name");
        for hook in [Webhook::Validate, Webhook::Mutate] {
            let reply = admission::handle(&engine, hook, &body, &metrics);
            assert_eq!(reply.status, 200, "{what}");
            assert!(
                reply.body.len() < SMALL_ANSWER,
                "{what} {hook:?}: answer of {} bytes",
                reply.body.len()
            );
            let answer: Value = serde_json::from_slice(&reply.body).expect("JSON answer");
            let text = findings_text(&answer);
            // Named by the head of the name (a warning is cut at kubectl's 256 characters,
            // before the marker), never by the whole of it.
            if hook == Webhook::Validate {
                assert!(
                    text.contains(&format!("tenant/{}", &cut[..200])),
                    "{what}: {text}"
                );
            }
            assert!(
                !text.contains(&name[..300]),
                "{what}: the whole name is shown"
            );
            if let Some(message) = answer["response"]["status"]["message"].as_str() {
                assert!(
                    message.contains(&format!("tenant/{cut}")),
                    "{what}: {message}"
                );
            }
        }
        // Through the engine itself, on the review as the webhook decodes it (the decoder is
        // where the names are cut): the findings name the object by the cut name, and their
        // text together is small however many there are.
        let decoded = admission::decode_review(
            &body,
            &engine.policies().sites,
            None,
            admission::MAX_DECODED_BYTES,
            &stackgate::budget::Cancel::never(),
        )
        .expect("decodes");
        let request = decoded.request;
        assert_eq!(request.name, cut, "{what}: the request's name");
        let object_name = request
            .object
            .as_ref()
            .and_then(|o| o.metadata.name.clone());
        assert_eq!(
            object_name.as_deref(),
            Some(cut.as_str()),
            "{what}: the object's"
        );
        let verdict = engine.evaluate(&admission::subject_of(&request));
        let findings: Vec<_> = verdict
            .denials
            .iter()
            .chain(&verdict.warnings)
            .chain(&verdict.audits)
            .chain(&verdict.mutations)
            .collect();
        assert!(findings.len() >= 8, "{what}: {} findings", findings.len());
        let total: usize = findings.iter().map(|f| f.denial_text().len()).sum();
        assert!(total < SMALL_ANSWER, "{what}: {total} bytes of findings");
        for f in &findings {
            assert_eq!(f.subject.name.as_str(), cut, "{what}");
            assert!(f.subject.name.as_str().len() <= 253);
        }
    }
}

#[tokio::test]
async fn validate_over_https_answers_a_long_named_object_briefly() {
    let (name, cut) = long_name();
    let server = TestServer::start().await;
    let client = server.client().await;
    for (what, body) in [("crs", crs_review(&name)), ("argo", argo_review(&name))] {
        let (status, answer) = post(&client, "/validate?timeout=30s", body).await;
        assert_eq!(status, 200, "{what}");
        let text = answer.to_string();
        assert!(
            text.len() < SMALL_ANSWER,
            "{what}: answer of {} bytes",
            text.len()
        );
        assert!(text.contains(&cut[..200]), "{what}: {text}");
        assert!(!text.contains(&name[..300]), "{what}: the whole name");
    }
}

#[test]
fn check_json_of_a_long_named_object_is_small() {
    let (name, cut) = long_name();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("crs.yaml");
    let mut file = std::fs::File::create(&path).expect("create");
    // JSON is YAML: the object as it would be committed.
    file.write_all(&serde_json::to_vec(&crs_secret(&name)).expect("serializes"))
        .expect("write");
    drop(file);
    let output = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(["check", "--format", "json"])
        .arg(&path)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.len() < 2 * SMALL_ANSWER,
        "check --format json wrote {} bytes",
        stdout.len()
    );
    assert!(
        stdout.contains(&cut),
        "{}",
        &stdout[..stdout.len().min(800)]
    );
    assert!(!stdout.contains(&name[..300]), "the whole name is written");
}
