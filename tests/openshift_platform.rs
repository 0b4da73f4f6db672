//! The cluster's platform as a fact (issue 14): the watcher of the OpenShift `Infrastructure`
//! object `cluster` against kube-rs's mock API (`tower_test::mock::pair`, as in
//! tests/cloud_config_source.rs), and the fact source wired into the HTTPS server, judging
//! `openshift-config/cloud-provider-config` ConfigMap reviews.
//!
//! The configs are the shapes of tests/platforms.rs (domain-facts §8: YAML on vSphere, a GCE
//! gcfg on GCP), written here, not captured from a cluster.

mod common;
#[path = "support/kube_mock.rs"]
mod kube_mock;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube_mock::{Handle, encoded, list_response, status_response};
use serde_json::{Value, json};
use stackgate::engine::Platform;
use stackgate::platform::watcher::{self, PlatformMetrics};
use stackgate::platform::{PlatformCell, PlatformFact, PlatformSource};
use tokio::sync::oneshot;
use tower_test::mock;

const PATH: &str = "/apis/config.openshift.io/v1/infrastructures";
const TEST_TIMEOUT: Duration = Duration::from_secs(20);

const VSPHERE_YAML: &str = "global:\n  user: \"\"\n  password: \"\"\n  server: \"\"\n  port: 443\n  insecureFlag: true\n  secretName: vsphere-creds\n  secretNamespace: kube-system\nvcenter:\n  vcenter.example.com:\n    server: vcenter.example.com\n    datacenters:\n      - DC0\n";
const GCE_INI: &str = "[global]\nproject-id      = example-project\nregional        = true\nmultizone       = true\nnode-tags       = example-worker\nsubnetwork-name = example-worker-subnet\n";
const OPENSTACK_INI: &str = "[Global]\nsecret-name = openstack-credentials\nsecret-namespace = kube-system\n\n[LoadBalancer]\nuse-octavia = true\n";

fn infrastructure(platform_type: &str, resource_version: &str) -> Value {
    json!({"apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
        "metadata": {"name": "cluster", "resourceVersion": resource_version},
        "spec": {"platformSpec": {"type": platform_type}},
        "status": {"platform": platform_type, "platformStatus": {"type": platform_type},
            "infrastructureName": "example-7xk2p"}})
}

fn list(items: &[Value]) -> Response<Body> {
    list_response("config.openshift.io/v1", "InfrastructureList", items)
}

fn status(code: u16, reason: &str) -> Response<Body> {
    status_response(
        code,
        reason,
        "the server could not find the requested resource",
    )
}

/// Waits for the next request: a GET of the Infrastructures selected by name.
async fn expect(handle: &mut Handle, watch: bool) -> mock::SendResponse<Response<Body>> {
    kube_mock::expect_get(handle, PATH, "cluster", watch).await
}

struct Running {
    cell: PlatformCell,
    first: oneshot::Receiver<()>,
    registry: prometheus_client::registry::Registry,
    task: tokio::task::JoinHandle<()>,
}

fn start() -> (Running, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let cell = PlatformCell::default();
    let metrics = PlatformMetrics::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
    metrics.register(&mut registry);
    let (tx, first) = oneshot::channel();
    let task = tokio::spawn(watcher::run(client, cell.clone(), metrics, move || {
        let _ = tx.send(());
    }));
    (
        Running {
            cell,
            first,
            registry,
            task,
        },
        handle,
    )
}

fn configmap(text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
        "data": {"config": text}})
}

fn review(text: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "platform-1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cloud-provider-config", "namespace": "openshift-config",
            "operation": "UPDATE", "userInfo": {"username": "system:admin"}, "dryRun": false,
            "object": configmap(text), "oldObject": configmap(text)
        }
    }))
    .expect("serializes")
}

async fn server_with(cell: &PlatformCell) -> TestServer {
    let state = default_state().with_fact_source(Arc::new(PlatformSource::new(cell.clone())));
    TestServer::start_with(|_| {}, state).await
}

/// The mutate and validate responses for a cloud-provider-config holding `text`.
async fn answers(server: &TestServer, text: &str) -> (Value, Value) {
    let client = server.client().await;
    let (status, mutate) = post(&client, "/mutate?timeout=10s", review(text)).await;
    assert_eq!(status, StatusCode::OK, "{mutate}");
    let (status, validate) = post(&client, "/validate?timeout=10s", review(text)).await;
    assert_eq!(status, StatusCode::OK, "{validate}");
    (mutate["response"].clone(), validate["response"].clone())
}

fn assert_untouched(what: &str, (mutate, validate): &(Value, Value)) {
    assert_eq!(mutate["allowed"], true, "{what}: {mutate}");
    assert!(
        decoded_patch(mutate).is_none(),
        "{what}: not patched: {mutate}"
    );
    assert!(mutate.get("warnings").is_none(), "{what}: {mutate}");
    assert_eq!(validate["allowed"], true, "{what}: {validate}");
    assert!(validate.get("warnings").is_none(), "{what}: {validate}");
}

#[tokio::test]
async fn the_watched_platform_decides_cloud_provider_config_over_https() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start();
        assert!(run.cell.get().platform().is_none(), "unknown until listed");
        let server = server_with(&run.cell).await;

        // Unknown: the content decides; an OpenStack-looking config is fixed.
        let (mutate, _) = answers(&server, OPENSTACK_INI).await;
        assert!(
            decoded_patch(&mutate).is_some(),
            "content decides: {mutate}"
        );

        // 1. The list says GCP: the same config is not an OpenStack site any more.
        expect(&mut handle, false)
            .await
            .send_response(list(&[infrastructure("GCP", "7")]));
        (&mut run.first).await.expect("first list reported");
        assert_eq!(
            *run.cell.get(),
            PlatformFact::Known(Platform::Other("GCP".into()))
        );
        assert_untouched(
            "OpenStack-looking on GCP",
            &answers(&server, OPENSTACK_INI).await,
        );
        assert_untouched("GCE gcfg on GCP", &answers(&server, GCE_INI).await);
        // A broken INI is no syntax error of ours on GCP either.
        assert_untouched(
            "broken INI on GCP",
            &answers(&server, "[Global]\nauth-url http://x\n").await,
        );

        // 2. A watch event says OpenStack: the config is fixed again, a vSphere YAML still
        // left alone (the fact never adds a site).
        let send = expect(&mut handle, true).await;
        let event = json!({"type": "MODIFIED", "object": infrastructure("OpenStack", "8")});
        let mut body = serde_json::to_vec(&event).unwrap();
        body.push(b'\n');
        send.send_response(Response::new(Body::from(body)));
        eventually("the event to reach the cell", || {
            let cell = run.cell.clone();
            async move { (cell.get().platform() == Some(&Platform::OpenStack)).then_some(()) }
        })
        .await;
        let (mutate, validate) = answers(&server, OPENSTACK_INI).await;
        let patch = decoded_patch(&mutate).expect("OpenStack config still fixed");
        assert!(patch.to_string().contains("serial"), "{patch}");
        assert_eq!(validate["allowed"], true, "{validate}");
        assert_untouched(
            "vSphere YAML on OpenStack",
            &answers(&server, VSPHERE_YAML).await,
        );
        assert_untouched("GCE gcfg on OpenStack", &answers(&server, GCE_INI).await);

        let metrics = encoded(&run.registry);
        for sample in [
            "stackgate_openshift_platform_syncs_total{outcome=\"list\"} 1",
            "stackgate_openshift_platform_syncs_total{outcome=\"event\"} 1",
            "stackgate_openshift_platform_known 1",
        ] {
            // Whole lines: the known gauge's HELP text also reads "..._known 1 while ...".
            assert!(
                metrics.lines().any(|line| line == sample),
                "{sample} in {metrics}"
            );
        }
        run.task.abort();
    })
    .await
    .expect("test finished in time");
}

#[tokio::test]
async fn vsphere_and_gce_configs_are_admitted_unpatched_on_their_platforms() {
    let cell = PlatformCell::default();
    let server = server_with(&cell).await;
    cell.set(PlatformFact::Known(Platform::Other("VSphere".into())));
    assert_untouched("vSphere YAML", &answers(&server, VSPHERE_YAML).await);
    cell.set(PlatformFact::Known(Platform::Other("GCP".into())));
    assert_untouched("GCE gcfg", &answers(&server, GCE_INI).await);
}

#[tokio::test]
async fn no_openshift_api_is_one_request_and_unknown() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start();
        expect(&mut handle, false)
            .await
            .send_response(status(404, "NotFound"));
        (&mut run.first).await.expect("a 404 opens readiness");
        match &*run.cell.get() {
            PlatformFact::Unknown(why) => assert!(why.contains("not served"), "{why}"),
            other => panic!("{other:?}"),
        }
        // The watch ends: nothing is retried against a cluster without the API.
        (&mut run.task).await.expect("the watcher returns");
        let metrics = encoded(&run.registry);
        assert!(
            metrics.contains("stackgate_openshift_platform_syncs_total{outcome=\"absent\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics
                .lines()
                .any(|line| line == "stackgate_openshift_platform_known 0"),
            "{metrics}"
        );
        // And the content decides as before.
        let server = server_with(&run.cell).await;
        let (mutate, _) = answers(&server, OPENSTACK_INI).await;
        assert!(decoded_patch(&mutate).is_some(), "{mutate}");
        drop(handle);
    })
    .await
    .expect("test finished in time");
}

#[tokio::test]
async fn a_refusal_or_a_missing_object_leaves_the_platform_unknown() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start();
        expect(&mut handle, false)
            .await
            .send_response(status(403, "Forbidden"));
        (&mut run.first).await.expect("a refusal opens readiness");
        match &*run.cell.get() {
            PlatformFact::Unknown(why) => assert!(why.contains("HTTP 403"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Retried (backoff), then listed without the object.
        expect(&mut handle, false).await.send_response(list(&[]));
        eventually("the empty list to reach the cell", || {
            let cell = run.cell.clone();
            async move {
                matches!(&*cell.get(), PlatformFact::Unknown(w) if w.contains("does not exist"))
                    .then_some(())
            }
        })
        .await;
        let metrics = encoded(&run.registry);
        assert!(
            metrics.contains("stackgate_openshift_platform_syncs_total{outcome=\"forbidden\"} 1"),
            "{metrics}"
        );
        run.task.abort();
    })
    .await
    .expect("test finished in time");
}
