//! `stackgate uninstall` (the chart's pre-delete hook) against a real kube-apiserver: it
//! deletes the webhook configurations, stackgate's reports, the audit's Lease, and only those
//! report CRDs its release installed that hold no other tool's report; a second run finds
//! nothing left and still succeeds.
//!
//! Needs `KUBE_APISERVER_BIN` and `ETCD_BIN` (a kube-apiserver ≥ 1.30 and an etcd 3.4+);
//! without them the test prints why and passes. The decision it relies on
//! (`uninstall::crd_removable`) also has unit tests, and the chart's RBAC for the hook is
//! checked in `tests/chart.rs` (`uninstall_hook_removes_webhooks_first_with_rbac_naming_each_object`).

mod common;
#[path = "support/real_apiserver.rs"]
mod real_apiserver;

use std::process::Command;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::time::Instant;

use real_apiserver::{binaries, start_apiserver};

/// How long a new CRD may take until the apiserver serves its resource.
const CRD_DEADLINE: Duration = Duration::from_secs(30);

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn create(client: &kube::Client, ar: &ApiResource, namespace: Option<&str>, object: Value) {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", ar.kind));
}

async fn exists(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> bool {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    api.get_opt(name).await.unwrap().is_some()
}

/// A schema-less wgpolicyk8s.io report CRD as the chart installs it: owned by the Helm
/// release `stackgate` in `stackgate`.
fn report_crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.wgpolicyk8s.io"),
            "annotations": {
                "meta.helm.sh/release-name": "stackgate",
                "meta.helm.sh/release-namespace": "stackgate",
                "helm.sh/resource-policy": "keep",
            },
        },
        "spec": {
            "group": "wgpolicyk8s.io",
            "names": {"kind": kind, "plural": plural},
            "scope": scope,
            "versions": [{"name": "v1alpha2", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

fn report(kind: &str, name: &str, namespace: Option<&str>, stackgate: bool) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ns) = namespace {
        meta["namespace"] = ns.into();
    }
    if stackgate {
        meta["labels"] = json!({"app.kubernetes.io/managed-by": "stackgate"});
    }
    json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": kind, "metadata": meta,
        "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}})
}

/// A webhook configuration named `stackgate` that matches nothing this test writes.
fn webhook_configuration(kind: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "stackgate"},
        "webhooks": [{
            "name": "cloud-config-secrets.stackgate.dev",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["secrets"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"stackgate-test": "never"}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    })
}

/// A copy of `kubeconfig` whose user acts as `user` (impersonation; the admin may).
fn acting_as(kubeconfig: &std::path::Path, user: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let at = text.find("    token: ").expect("a token user");
    let end = at + text[at..].find('\n').unwrap() + 1;
    let path = kubeconfig.with_extension(user.replace(':', "-"));
    std::fs::write(
        &path,
        format!("{}    as: {user}\n{}", &text[..end], &text[end..]),
    )
    .unwrap();
    path
}

fn uninstall(kubeconfig: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args([
            "uninstall",
            "--webhook-configuration=stackgate",
            "--release=stackgate",
            "--namespace=stackgate",
            "--lease-name=stackgate-audit",
            "--crds",
        ])
        .env("KUBECONFIG", kubeconfig)
        .env("STACKGATE_LOG_LEVEL", "off")
        .output()
        .expect("run stackgate uninstall");
    let text = String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap();
    (out.status.code(), text)
}

#[tokio::test]
async fn uninstall_leaves_nothing_of_stackgate_and_keeps_what_other_tools_own() {
    let (apiserver_bin, etcd_bin) = match binaries() {
        Ok(b) => b,
        Err(why) => {
            eprintln!(
                "skipped: {why} (set KUBE_APISERVER_BIN and ETCD_BIN to run against a real \
                 kube-apiserver)"
            );
            return;
        }
    };
    common::setup();
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, _apiserver, client, kubeconfig) =
        start_apiserver(&apiserver_bin, &etcd_bin, dir.path()).await;

    let crds = resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    create(
        &client,
        &crds,
        None,
        report_crd("PolicyReport", "policyreports", "Namespaced"),
    )
    .await;
    create(
        &client,
        &crds,
        None,
        report_crd("ClusterPolicyReport", "clusterpolicyreports", "Cluster"),
    )
    .await;
    let reports = resource(
        "wgpolicyk8s.io",
        "v1alpha2",
        "PolicyReport",
        "policyreports",
    );
    let cluster_reports = resource(
        "wgpolicyk8s.io",
        "v1alpha2",
        "ClusterPolicyReport",
        "clusterpolicyreports",
    );
    // The CRDs are served a moment after they are created.
    let deadline = Instant::now() + CRD_DEADLINE;
    loop {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &cluster_reports);
        if api.list(&Default::default()).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the report CRDs are not served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let namespaces = resource("", "v1", "Namespace", "namespaces");
    create(
        &client,
        &namespaces,
        None,
        json!({"metadata": {"name": "stackgate"}}),
    )
    .await;
    let vwc = resource(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    let mwc = resource(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    );
    create(
        &client,
        &vwc,
        None,
        webhook_configuration("ValidatingWebhookConfiguration"),
    )
    .await;
    create(
        &client,
        &mwc,
        None,
        webhook_configuration("MutatingWebhookConfiguration"),
    )
    .await;
    // stackgate's reports; another tool's report; another tool's report that happens to be
    // named `stackgate` (no managed-by label).
    for (ns, name, ours) in [
        ("kube-system", "stackgate", true),
        ("default", "stackgate", false),
        ("default", "kyverno-pod-security", false),
    ] {
        create(
            &client,
            &reports,
            Some(ns),
            report("PolicyReport", name, Some(ns), ours),
        )
        .await;
    }
    create(
        &client,
        &cluster_reports,
        None,
        report("ClusterPolicyReport", "stackgate", None, true),
    )
    .await;
    let leases = resource("coordination.k8s.io", "v1", "Lease", "leases");
    create(
        &client,
        &leases,
        Some("stackgate"),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "stackgate-audit", "namespace": "stackgate"},
            "spec": {"holderIdentity": "stackgate-0"}}),
    )
    .await;

    // Without rights: the first request fails, the run stops with exit code 2 and says which
    // request, and nothing is deleted.
    let (code, text) = uninstall(&acting_as(&kubeconfig, "no-rights"));
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("stackgate uninstall: deleting ValidatingWebhookConfiguration stackgate"),
        "{text}"
    );
    assert!(exists(&client, &vwc, None, "stackgate").await);

    let (code, text) = uninstall(&kubeconfig);
    assert_eq!(code, Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "stackgate uninstall: deleted ValidatingWebhookConfiguration stackgate",
            "stackgate uninstall: deleted MutatingWebhookConfiguration stackgate",
            "stackgate uninstall: deleted PolicyReport kube-system/stackgate",
            "stackgate uninstall: deleted ClusterPolicyReport stackgate",
            "stackgate uninstall: openreports.io/v1alpha1 Report: API not served (nothing to delete)",
            "stackgate uninstall: deleted Lease stackgate/stackgate-audit",
            "stackgate uninstall: kept CustomResourceDefinition policyreports.wgpolicyk8s.io: 1 report(s) of another tool still in it; delete the CRD yourself once none is left",
            "stackgate uninstall: deleted CustomResourceDefinition clusterpolicyreports.wgpolicyk8s.io",
        ],
        "{text}"
    );
    assert!(!exists(&client, &vwc, None, "stackgate").await);
    assert!(!exists(&client, &mwc, None, "stackgate").await);
    assert!(!exists(&client, &leases, Some("stackgate"), "stackgate-audit").await);
    assert!(!exists(&client, &reports, Some("kube-system"), "stackgate").await);
    assert!(
        exists(&client, &reports, Some("default"), "stackgate").await,
        "another tool's report"
    );
    assert!(exists(&client, &reports, Some("default"), "kyverno-pod-security").await);
    assert!(exists(&client, &crds, None, "policyreports.wgpolicyk8s.io").await);

    // Rights to delete the webhook configurations only: a refused list of reports is an
    // error, not an API the cluster does not serve.
    let roles = resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    );
    let bindings = resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    );
    create(
        &client,
        &roles,
        None,
        json!({"metadata": {"name": "webhooks-only"}, "rules": [{
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            "verbs": ["delete"], "resourceNames": ["stackgate"]}]}),
    )
    .await;
    create(
        &client,
        &bindings,
        None,
        json!({"metadata": {"name": "webhooks-only"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "webhooks-only"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                "name": "webhooks-only"}]}),
    )
    .await;
    let (code, text) = uninstall(&acting_as(&kubeconfig, "webhooks-only"));
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("stackgate uninstall: listing policyreports"),
        "{text}"
    );

    // Again: nothing left to delete, still a success (a retried hook must not fail).
    let (code, text) = uninstall(&kubeconfig);
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("deleted"), "{text}");
    assert!(
        text.contains("ValidatingWebhookConfiguration stackgate: not found (nothing to delete)"),
        "{text}"
    );
}
