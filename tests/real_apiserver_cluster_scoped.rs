//! A cluster-scoped delivery path through a real kube-apiserver with the chart's own webhook
//! registrations (issue 33): Sveltos' `ClusterProfile` carries the CCM chart's values like the
//! namespaced `Profile`, but a rule of `scope: Namespaced` never matches it. The chart
//! registers it in a rule of `scope: Cluster` (its registration's `scope` in
//! `sites::delivery`); this test checks that the apiserver then sends it: a ClusterProfile
//! whose values turn serial calls off is refused with stackgate's message, one that keeps them
//! on is stored, and a namespaced Profile is still refused.
//!
//! The webhooks are taken from the chart as `.ci/chart.sh` renders it
//! (`target/chart-render/default.yaml`), reduced to the `gitops.validate` webhook, with its
//! client config pointed at a `stackgate serve` child process and `failurePolicy: Fail`, so a
//! call that did not happen cannot pass for an admission. The two CRDs are minimal stand-ins
//! (group, kinds, scopes and version of Sveltos' `config.projectsveltos.io/v1beta1`, any
//! `spec`), enough for the apiserver to route writes through admission.
//!
//! Needs `KUBE_APISERVER_BIN` and `ETCD_BIN`, and the chart render; without them the test
//! prints why and passes. `tests/delivery_registry.rs` checks the rule's scope in the render
//! without an apiserver.

mod common;
#[path = "support/real_apiserver.rs"]
mod real_apiserver;

use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::time::Instant;

use real_apiserver::{binaries, chart_render, chart_webhook, start_apiserver, start_stackgate};

const NS: &str = "sveltos-profiles";
const GROUP: &str = "config.projectsveltos.io";
/// How long a new CRD or webhook configuration may take to be served and enforced.
const DEADLINE: Duration = Duration::from_secs(30);
const CHART: &str = "openstack-cloud-controller-manager";

/// A minimal CRD of Sveltos' group for `kind` with `scope`, any `spec`.
fn crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {"group": GROUP, "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_ascii_lowercase(),
                "listKind": format!("{kind}List")},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

/// A profile of `kind` deploying the CCM chart with `serial` as its serial-calls value.
fn profile(kind: &str, name: &str, namespace: Option<&str>, serial: bool) -> Value {
    let mut metadata = json!({"name": name});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({"apiVersion": format!("{GROUP}/v1beta1"), "kind": kind, "metadata": metadata,
        "spec": {"helmCharts": [{
            "repositoryURL": "https://kubernetes.github.io/cloud-provider-openstack",
            "repositoryName": "cpo", "chartName": format!("cpo/{CHART}"),
            "chartVersion": "2.31.1", "releaseName": "occm", "releaseNamespace": "kube-system",
            "helmChartAction": "Install",
            "values": format!(
                "cloudConfig:\n  global:\n    auth-url: https://keystone.example:5000/v3\n  \
                 loadBalancer:\n    provider-requires-serial-api-calls: {serial}\n")}]}})
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Creates `object` with `api`, retrying while the resource is not served yet (a new CRD)
/// and, with `until_refused`, while the apiserver still stores it (a new webhook
/// configuration): the refusal's message, or the stored object.
async fn create_when_ready(
    api: &Api<DynamicObject>,
    object: &Value,
    until_refused: bool,
) -> Result<DynamicObject, String> {
    let deadline = Instant::now() + DEADLINE;
    let mut n = 0;
    loop {
        let mut object = object.clone();
        if until_refused {
            // A fresh name each try: a try stored before the webhook was active stays stored.
            n += 1;
            let name = format!("{}-{n}", object["metadata"]["name"].as_str().unwrap());
            object["metadata"]["name"] = json!(name);
        }
        let typed: DynamicObject = serde_json::from_value(object).unwrap();
        match api.create(&PostParams::default(), &typed).await {
            Err(kube::Error::Api(status)) if status.code == 404 && Instant::now() < deadline => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {
                panic!("the CRD is still not served: {status:?}")
            }
            Err(kube::Error::Api(status)) => return Err(status.message),
            Err(e) => panic!("create: {e}"),
            Ok(stored) if until_refused && Instant::now() < deadline => drop(stored),
            Ok(stored) => return Ok(stored),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_profile_is_sent_by_the_charts_cluster_scoped_rule() {
    let (apiserver_bin, etcd_bin) = match binaries() {
        Ok(found) => found,
        Err(why) => {
            eprintln!(
                "skipped: {why} (set KUBE_APISERVER_BIN and ETCD_BIN to run against a real \
                 kube-apiserver; tests/delivery_registry.rs checks the rule's scope)"
            );
            return;
        }
    };
    let render = match chart_render() {
        Ok(render) => render,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    common::setup();
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, _apiserver, client, _kubeconfig) =
        start_apiserver(&apiserver_bin, &etcd_bin, dir.path()).await;
    let stackgate =
        start_stackgate(dir.path(), &["--kube", "off", "--log-level", "info"], None).await;

    let crds = Api::<DynamicObject>::all_with(
        client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    for (kind, plural, scope) in [
        ("ClusterProfile", "clusterprofiles", "Cluster"),
        ("Profile", "profiles", "Namespaced"),
    ] {
        let object: DynamicObject = serde_json::from_value(crd(kind, plural, scope)).unwrap();
        crds.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("the {kind} CRD: {e}"));
    }
    let namespaces = resource("", "v1", "Namespace", "namespaces");
    let ns: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &namespaces)
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cluster_profiles = Api::<DynamicObject>::all_with(
        client.clone(),
        &resource(GROUP, "v1beta1", "ClusterProfile", "clusterprofiles"),
    );
    // Served and not yet guarded: stored (so the refusal below is the webhook's doing).
    create_when_ready(
        &cluster_profiles,
        &profile("ClusterProfile", "before-webhook", None, false),
        false,
    )
    .await
    .expect("before the webhook is registered, the apiserver stores it");

    let config: DynamicObject = serde_json::from_value(chart_webhook(
        &render,
        "ValidatingWebhookConfiguration",
        "gitops.",
        stackgate.addr,
        &stackgate.ca,
    ))
    .unwrap();
    Api::<DynamicObject>::all_with(
        client.clone(),
        &resource(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
    )
    .create(&PostParams::default(), &config)
    .await
    .unwrap_or_else(|e| panic!("the apiserver accepts the chart's gitops webhook: {e}"));

    let refusal = create_when_ready(
        &cluster_profiles,
        &profile("ClusterProfile", "ccm-off", None, false),
        true,
    )
    .await
    .expect_err("a ClusterProfile turning serial calls off is refused");
    assert!(
        refusal.contains("provider-requires-serial-api-calls")
            && refusal.contains("ClusterProfile"),
        "{refusal}\n{}",
        stackgate.proc.tail()
    );
    create_when_ready(
        &cluster_profiles,
        &profile("ClusterProfile", "ccm-on", None, true),
        false,
    )
    .await
    .expect("a ClusterProfile keeping serial calls on is stored");

    let profiles = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &resource(GROUP, "v1beta1", "Profile", "profiles"),
    );
    let refusal = create_when_ready(
        &profiles,
        &profile("Profile", "ccm-off", Some(NS), false),
        false,
    )
    .await
    .expect_err("a namespaced Profile turning serial calls off is refused");
    assert!(
        refusal.contains("provider-requires-serial-api-calls"),
        "{refusal}"
    );
}
