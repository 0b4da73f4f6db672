//! ClusterResourceSet payload ConfigMaps through a real kube-apiserver with the chart's own
//! webhook registrations (issue 33, item 5): CAPI gives a payload ConfigMap no marker, so the
//! chart's `crs-payload-configmaps` webhooks pick them with a matchCondition that must send
//! every ConfigMap stackgate's payload reader would parse, and nothing else.
//!
//! The webhooks are taken from the chart as `.ci/chart.sh` renders it
//! (`target/chart-render/default.yaml`), with two changes: the client config points at a
//! `stackgate serve` child process, and `failurePolicy: Fail`, so that a call that did not
//! happen cannot pass for an admission. What is checked: a payload with serial calls `false`
//! is refused with stackgate's message; one without the key is stored with it added; an
//! unrelated manifest ConfigMap, a 1 MiB one that holds `kind` but no site and one of 10,000
//! such keys are stored untouched and never reach stackgate (its request counter does not
//! move), so the condition's cost stays within the apiserver's limit at the largest ConfigMap
//! it stores; one of 10,001 keys is sent without a look, and admitted by stackgate.
//!
//! Needs `KUBE_APISERVER_BIN` and `ETCD_BIN`, and the chart render; without them the test
//! prints why and passes. `tests/chart.rs` checks the same condition against the engine's
//! reader with a CEL interpreter, without an apiserver.

mod common;
#[path = "support/real_apiserver.rs"]
mod real_apiserver;

use std::net::SocketAddr;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::time::Instant;

use real_apiserver::{binaries, chart_render, chart_webhook, start_apiserver, start_stackgate};

const NS: &str = "cluster-a";
/// How long a new webhook configuration may take to reach the apiserver's admission chain.
const WEBHOOK_DEADLINE: Duration = Duration::from_secs(30);

/// A ConfigMap whose `resources` key embeds the cloud-config Secret a ClusterResourceSet
/// applies to the workload cluster.
fn payload(name: &str, load_balancer: &str) -> Value {
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         stringData:\n  cloud.conf: |\n    [Global]\n    auth-url = https://keystone.example:5000/v3\n\
         \n    [LoadBalancer]\n{load_balancer}    floating-network-id = 7d3a0f5e-3c55-4f1a-9a0e-1d2c3b4a5f60\n"
    );
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": {"resources": manifest}})
}

fn configmaps() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps")
}

async fn requests_answered(admin: SocketAddr) -> u64 {
    let (_, _, body) = common::admin_get(admin, "/metrics").await.unwrap();
    body.lines()
        .filter(|l| l.starts_with("stackgate_admission_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_configmaps_are_sent_by_the_charts_condition_and_others_are_not() {
    let (apiserver_bin, etcd_bin) = match binaries() {
        Ok(found) => found,
        Err(why) => {
            eprintln!(
                "skipped: {why} (set KUBE_APISERVER_BIN and ETCD_BIN to run against a real \
                 kube-apiserver; tests/chart.rs checks the condition with a CEL interpreter)"
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
    let (addr, admin, ca) = (stackgate.addr, stackgate.admin, stackgate.ca.clone());

    let namespaces = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "Namespace"),
        "namespaces",
    );
    let ns: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &namespaces)
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    for (kind, plural) in [
        (
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
        (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
    ] {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        );
        let config: DynamicObject = serde_json::from_value(chart_webhook(
            &render,
            kind,
            "crs-payload-configmaps.",
            addr,
            &ca,
        ))
        .unwrap();
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .create(&PostParams::default(), &config)
            .await
            .unwrap_or_else(|e| panic!("the apiserver accepts the chart's {kind}: {e}"));
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &configmaps());
    let create = |object: Value| {
        let api = api.clone();
        async move {
            let object: DynamicObject = serde_json::from_value(object).unwrap();
            api.create(&PostParams::default(), &object).await
        }
    };

    // A payload holding `false`: refused by stackgate, once the configuration is active.
    let deadline = Instant::now() + WEBHOOK_DEADLINE;
    let refusal = loop {
        let name = format!("ccm-off-{}", deadline.elapsed().as_millis());
        match create(payload(
            &name,
            "    provider-requires-serial-api-calls = false\n",
        ))
        .await
        {
            Err(kube::Error::Api(status)) => break status.message,
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "a payload with false is still stored: {}",
                    stackgate.proc.tail()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create: {e}"),
        }
    };
    assert!(
        refusal.contains("provider-requires-serial-api-calls")
            && refusal.contains("ClusterResourceSet payload"),
        "{refusal}"
    );

    // A payload without the key: stored with it, in the embedded manifest only.
    let stored = create(payload("ccm-missing", "")).await.expect("admitted");
    let resources = stored.data["data"]["resources"].as_str().unwrap();
    assert!(
        resources.contains("provider-requires-serial-api-calls = true"),
        "{resources}"
    );
    assert!(resources.contains("floating-network-id"), "{resources}");

    // Not payloads: never sent. A manifest without any site, and 900 KiB holding `kind`.
    let before = requests_answered(admin).await;
    let cni = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cni", "namespace": NS},
        "data": {"calico.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: calico-node\n"}});
    let stored = create(cni.clone())
        .await
        .expect("the CNI payload is stored");
    assert_eq!(stored.data["data"], cni["data"]);
    // The largest data a ConfigMap may hold (1 MiB), with `kind` but no site: the costliest
    // look the condition makes, within the apiserver's limit.
    let large_text = format!(
        "kind: List\n{}",
        "# padding line\n".repeat((1024 * 1024 - 200) / 15)
    );
    let large = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "large", "namespace": NS},
        "data": {"list.yaml": large_text}});
    create(large)
        .await
        .expect("a 1 MiB ConfigMap without a site is stored (the condition stays in budget)");
    // 10,000 keys of 95 bytes holding `kind`: the most keys the condition looks into.
    let keys: serde_json::Map<String, Value> = (0..10_000)
        .map(|i| {
            (
                format!("k{i:05}"),
                json!(format!("kind {}", "x".repeat(90))),
            )
        })
        .collect();
    create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "many-keys", "namespace": NS}, "data": keys}))
    .await
    .expect("10,000 keys without a site are stored (the condition stays in budget)");
    assert_eq!(
        requests_answered(admin).await,
        before,
        "ConfigMaps that hold no site reached stackgate"
    );

    // More keys than that are sent without looking (the look could pass the cost limit, and
    // then the failure policy, not stackgate, would decide): stackgate reads and admits it.
    let keys: serde_json::Map<String, Value> = (0..10_001)
        .map(|i| (format!("k{i}"), json!("kind x")))
        .collect();
    create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "more-keys", "namespace": NS}, "data": keys}))
    .await
    .expect("a ConfigMap of 10,001 keys without a site is admitted by stackgate");
    assert!(
        requests_answered(admin).await > before,
        "a ConfigMap of 10,001 keys was not sent"
    );
}
