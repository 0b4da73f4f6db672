//! `stackgate rules`: every policy of the effective set with what it prevents, its source,
//! and an example denial produced by running the engine on a known-bad input (so the
//! documentation shows the real message, not a paraphrase). `docs/rules.md` is this output.

use std::fmt::Write as _;

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::{Value, json};

use crate::engine::{Engine, Facts};
use crate::policy::RuleId;
use crate::rules::lb_guard::{GuardFacts, LoadBalancerStatus, MemberStatus, PoolStatus};

/// A known-bad object for a rule family, as an admission request, or None when the family
/// has no self-contained example (it needs cluster facts).
fn example(rule: RuleId) -> Option<Value> {
    let configmap = |text: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
            "data": {"config": text}})
    };
    let object = match rule {
        RuleId::SerialLbApiCalls => configmap(
            "[Global]\nregion = RegionOne\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        ),
        RuleId::CloudConfigIntegrity => configmap(
            "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nmonitor-delay = 5\n",
        ),
        RuleId::KnownBadLbSettings => configmap(
            "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nlb-provider = ovn\n",
        ),
        RuleId::CredentialPlacement => configmap(
            "[Global]\napplication-credential-id = 0123\napplication-credential-secret = <not shown>\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        ),
        RuleId::CcmConcurrency => json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{
                "name": "occm",
                "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
                "args": ["--cloud-provider=openstack", "--concurrent-service-syncs=4"]}]}}}}),
        // An unparsable value is denied without any release data.
        RuleId::ReleaseAnnotations => json!({"apiVersion": "glance.openstack.org/v1beta1",
            "kind": "Glance",
            "metadata": {"name": "glance", "namespace": "openstack",
                "annotations": {"glance.openstack.org/wsgi": "yes"}},
            "spec": {}}),
        RuleId::ControlPlaneLbGuard => return Some(lb_guard_example()),
    };
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Some(json!({
        "uid": "example", "operation": "CREATE", "dryRun": false,
        "kind": {"group": group, "version": version, "kind": object["kind"]},
        "resource": {"group": group, "version": version, "resource": "example"},
        "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
        "userInfo": {}, "object": object
    }))
}

/// A control-plane Machine DELETE (the Machine is in `oldObject`).
fn lb_guard_example() -> Value {
    let machine = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "cluster-a-control-plane-b2m4d", "namespace": "cluster-a",
            "labels": {"cluster.x-k8s.io/cluster-name": "cluster-a",
                       "cluster.x-k8s.io/control-plane": ""}},
        "spec": {"clusterName": "cluster-a",
                 "infrastructureRef": {"name": "cluster-a-control-plane-b2m4d"}}});
    json!({
        "uid": "example", "operation": "DELETE", "dryRun": false,
        "kind": {"group": "cluster.x-k8s.io", "version": "v1beta1", "kind": "Machine"},
        "resource": {"group": "cluster.x-k8s.io", "version": "v1beta1", "resource": "machines"},
        "name": "cluster-a-control-plane-b2m4d", "namespace": "cluster-a",
        "userInfo": {}, "object": null, "oldObject": machine
    })
}

/// Facts for the example of `rule`: for the guard, an API load balancer whose new member is
/// still PENDING_CREATE (the incident of CAPO #2763).
fn example_facts(rule: RuleId) -> Facts {
    if rule != RuleId::ControlPlaneLbGuard {
        return Facts::default();
    }
    let lb = "k8s-clusterapi-cluster-cluster-a-cluster-a-kubeapi";
    let member = |machine: &str, address: &str, prov: &str, op: &str| MemberStatus {
        id: String::new(),
        name: format!("{lb}-6443-{machine}"),
        address: address.to_owned(),
        protocol_port: Some(6443),
        provisioning_status: prov.to_owned(),
        operating_status: op.to_owned(),
    };
    Facts {
        lb_guard: Some(GuardFacts::Observed(LoadBalancerStatus {
            id: "a7f7b5c4-1e0d-4b8e-9c3f-6d2e1f0a9b87".to_owned(),
            name: lb.to_owned(),
            provisioning_status: "ACTIVE".to_owned(),
            operating_status: "ONLINE".to_owned(),
            pools: vec![PoolStatus {
                id: String::new(),
                name: format!("{lb}-6443"),
                has_monitor: true,
                members: vec![
                    member(
                        "cluster-a-control-plane-b2m4d",
                        "10.6.0.11",
                        "ACTIVE",
                        "ONLINE",
                    ),
                    member(
                        "cluster-a-control-plane-7x9kq",
                        "10.6.0.12",
                        "ACTIVE",
                        "ONLINE",
                    ),
                    member(
                        "cluster-a-control-plane-n3w01",
                        "10.6.0.13",
                        "PENDING_CREATE",
                        "OFFLINE",
                    ),
                ],
            }],
        })),
    }
}

/// Markdown for every policy in `engine`'s set.
pub fn markdown(engine: &Engine) -> String {
    let mut out = String::from(
        "# stackgate rules\n\nGenerated by `stackgate rules` from the effective policy set; the example \
         denials are what the engine answers for the example input.\n",
    );
    for policy in &engine.policies().policies {
        let _ = write!(
            out,
            "\n## {}\n\n- rule family: `{}`\n- mode: `{}`\n- exemption: {}\n\n{}\n\nSource: {}\n",
            policy.name,
            policy.rule.as_str(),
            policy.mode.as_str(),
            policy.exemption_annotation().map_or_else(
                || "not allowed".to_owned(),
                |a| format!("annotation `{a}: \"<reason>\"`")
            ),
            policy.description.trim(),
            policy.source.trim(),
        );
        let denial = example(policy.rule)
            .and_then(|raw| serde_json::from_value::<AdmissionRequest<DynamicObject>>(raw).ok())
            .map(|req| engine.evaluate_with(&req, &example_facts(policy.rule)))
            .and_then(|verdict| {
                verdict
                    .denials
                    .into_iter()
                    .chain(verdict.warnings)
                    .find(|f| f.policy == policy.name)
            });
        if let Some(finding) = denial {
            let _ = write!(out, "\nExample:\n\n```text\n{}\n```\n", finding.message);
        }
    }
    out
}
