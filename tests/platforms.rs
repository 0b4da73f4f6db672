//! OpenShift keeps every platform's cloud config in `openshift-config/cloud-provider-config`
//! (and its operator copy): stackgate checks and edits it only when it is recognisably the
//! OpenStack CCM's, in the webhook and in `stackgate check` alike (issue 14).
//!
//! The non-OpenStack configs below are written after the shapes in domain-facts §8 (YAML on
//! vSphere, JSON on Nutanix, a GCE gcfg on GCP) and the AWS provider's `[Global]` keys; they
//! are not captured from a cluster.

use serde_json::{Value, json};
use stackgate::admission::{Webhook, handle};
use stackgate::check::check_text;
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

const VSPHERE_YAML: &str = "global:\n  user: \"\"\n  password: \"\"\n  server: \"\"\n  port: 443\n  insecureFlag: true\n  secretName: vsphere-creds\n  secretNamespace: kube-system\nvcenter:\n  vcenter.example.com:\n    server: vcenter.example.com\n    datacenters:\n      - DC0\n";
const NUTANIX_JSON: &str = "{\"prismCentral\":{\"address\":\"pc.example.com\",\"port\":9440,\"credentialRef\":{\"kind\":\"Secret\",\"name\":\"nutanix-credentials\",\"namespace\":\"openshift-cloud-controller-manager\"}},\"topologyDiscovery\":{\"type\":\"Prism\"}}\n";
const GCE_INI: &str = "[global]\nproject-id      = example-project\nregional        = true\nmultizone       = true\nnode-tags       = example-worker\nsubnetwork-name = example-worker-subnet\n";
const AWS_INI: &str = "[Global]\nDisableSecurityGroupIngress = false\n";
const OPENSTACK_INI: &str = "[Global]\nsecret-name = openstack-credentials\nsecret-namespace = kube-system\n\n[LoadBalancer]\nuse-octavia = true\n";

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn object(text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
        "data": {"config": text}})
}

fn review(text: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "p", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cloud-provider-config", "namespace": "openshift-config",
            "operation": "UPDATE", "userInfo": {"username": "t"}, "dryRun": false,
            "object": object(text), "oldObject": object(text)
        }
    }))
    .expect("serializes")
}

fn answer(engine: &Engine, webhook: Webhook, text: &str) -> Value {
    let reply = handle(engine, webhook, &review(text), &Metrics::new());
    let body: Value = serde_json::from_slice(&reply.body).expect("JSON answer");
    body["response"].clone()
}

#[test]
fn other_platforms_configs_are_admitted_unchanged_and_unreported() {
    let engine = engine();
    for (platform, text) in [
        ("vSphere", VSPHERE_YAML),
        ("Nutanix", NUTANIX_JSON),
        ("GCP", GCE_INI),
        ("AWS", AWS_INI),
    ] {
        let mutate = answer(&engine, Webhook::Mutate, text);
        assert_eq!(mutate["allowed"], true, "{platform}: {mutate}");
        assert!(
            mutate.get("patch").is_none(),
            "{platform}: never patched: {mutate}"
        );
        assert!(mutate.get("warnings").is_none(), "{platform}: {mutate}");
        let validate = answer(&engine, Webhook::Validate, text);
        assert_eq!(validate["allowed"], true, "{platform}: {validate}");
        assert!(validate.get("warnings").is_none(), "{platform}: {validate}");

        let yaml = serde_json::to_string(&object(text)).expect("JSON is YAML");
        let checked = check_text(&engine, "cm.yaml", &yaml, None);
        assert!(
            checked.problems.is_empty(),
            "{platform}: {:?}",
            checked.problems
        );
        assert_eq!(checked.objects.len(), 1, "{platform}");
        assert!(
            checked.objects[0].items.is_empty(),
            "{platform}: {:?}",
            checked.objects[0].items
        );
        assert!(
            checked.fixed.is_none(),
            "{platform}: --fix must not touch it"
        );
    }
}

#[test]
fn an_openstack_config_there_is_still_checked_and_fixed() {
    let engine = engine();
    let mutate = answer(&engine, Webhook::Mutate, OPENSTACK_INI);
    assert!(mutate.get("patch").is_some(), "serial line added: {mutate}");
    // A broken INI there is still the syntax error it is.
    let validate = answer(&engine, Webhook::Validate, "[Global]\nauth-url http://x\n");
    assert_eq!(validate["allowed"], false, "{validate}");
    let message = validate["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("gcfg syntax error"), "{message}");
}

#[test]
fn a_labelled_configmap_is_openstack_whatever_it_holds() {
    // Whoever sets the label says the object holds an OpenStack cloud config.
    let engine = engine();
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "occm", "namespace": "kube-system",
            "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
        "data": {"cloud.conf": AWS_INI}});
    let checked = check_text(&engine, "cm.yaml", &object.to_string(), None);
    assert!(checked.fixed.is_some(), "the serial line is added");
}
