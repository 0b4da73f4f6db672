//! The `CcmConfigSource` fact in `serve` (issue 32): the generic fact watcher over every
//! Deployment and DaemonSet against kube-rs's mock API (`tower_test::mock::pair`, as in
//! tests/openshift_platform.rs), and the fact source wired into the HTTPS server, judging
//! writes of the Secret a CCM DaemonSet reads as a cloud-config site whatever its name.
//!
//! The DaemonSet is the shape of the upstream openstack-cloud-controller-manager chart with
//! `secret.create: false, secret.name: occm-cloud-config` (case 4 of the issue): the CCM
//! reads `--cloud-config=$(CLOUD_CONFIG)` from a Secret the default sites do not name.
//! Written here, not captured from a cluster.

mod common;
#[path = "support/kube_mock.rs"]
// `expect_get` selects one object by name; these watches are cluster-wide.
#[allow(dead_code)]
mod kube_mock;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube_mock::{Handle, encoded, list_response, status_response};
use serde_json::{Value, json};
use stackgate::ccm_config_watch::{CcmConfigCell, CcmConfigFact, CcmConfigSource, CcmWorkloads};
use stackgate::fact_watcher::{self, FactMetrics};
use stackgate::server::AppState;
use tokio::sync::oneshot;
use tower_test::mock;

const DEPLOYMENTS: &str = "/apis/apps/v1/deployments";
const DAEMONSETS: &str = "/apis/apps/v1/daemonsets";
const TEST_TIMEOUT: Duration = Duration::from_secs(30);
const GATE: &str = "ccm-config-source";

const SERIAL_FALSE: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n";
const NO_SERIAL: &str =
    "[Global]\nauth-url = https://keystone.example:5000/v3\n\n[LoadBalancer]\nuse-octavia = true\n";

/// The chart's DaemonSet with `secret.name: occm-cloud-config`.
fn daemonset() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system",
            "resourceVersion": "7"},
        "spec": {"template": {"spec": {
            "containers": [{"name": "openstack-cloud-controller-manager",
                "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
                "args": ["/bin/openstack-cloud-controller-manager", "--v=1",
                    "--cloud-config=$(CLOUD_CONFIG)", "--cluster-name=$(CLUSTER_NAME)"],
                "env": [{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"},
                        {"name": "CLUSTER_NAME", "value": "kubernetes"}],
                "volumeMounts": [{"name": "cloud-config-volume", "mountPath": "/etc/config",
                    "readOnly": true}]}],
            "volumes": [{"name": "cloud-config-volume",
                "secret": {"secretName": "occm-cloud-config"}}]}}}})
}

fn unrelated_deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "8"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn secret(ini: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "occm-cloud-config", "namespace": "kube-system"},
        "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(ini)}})
}

fn review(ini: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "ccm-config-1", "kind": {"group": "", "version": "v1", "kind": "Secret"},
            "resource": {"group": "", "version": "v1", "resource": "secrets"},
            "name": "occm-cloud-config", "namespace": "kube-system",
            "operation": "CREATE", "userInfo": {"username": "system:admin"}, "dryRun": false,
            "object": secret(ini), "oldObject": null
        }
    }))
    .expect("serializes")
}

/// The mock API's requests, kept by path until the test answers them: list requests until
/// [`Api::answer_list`], watches until [`Api::send_event`].
struct Api {
    handle: Handle,
    lists: BTreeMap<&'static str, mock::SendResponse<Response<Body>>>,
    watches: BTreeMap<&'static str, mock::SendResponse<Response<Body>>>,
}

impl Api {
    /// Takes the watcher's next request and keeps it.
    async fn take_request(&mut self) {
        let (request, send) = self
            .handle
            .next_request()
            .await
            .expect("the watcher calls the API");
        let uri = request.uri().clone();
        let query = uri.query().unwrap_or("");
        let which = [DEPLOYMENTS, DAEMONSETS]
            .into_iter()
            .find(|p| *p == uri.path())
            .unwrap_or_else(|| panic!("unexpected request {uri}"));
        assert!(
            !query.contains("fieldSelector"),
            "cluster-wide, no selector: {uri}"
        );
        if query.contains("watch=true") {
            self.watches.insert(which, send);
        } else {
            assert!(query.contains("limit=100"), "listed in pages: {uri}");
            self.lists.insert(which, send);
        }
    }

    /// Answers the list of `path` with `answer`, once the watcher asks for it.
    async fn answer_list(&mut self, path: &'static str, answer: Response<Body>) {
        while !self.lists.contains_key(path) {
            self.take_request().await;
        }
        self.lists
            .remove(path)
            .expect("list asked")
            .send_response(answer);
    }

    /// Waits until the watcher watches `path`: it has handled that list's end.
    async fn await_watch(&mut self, path: &'static str) {
        while !self.watches.contains_key(path) {
            self.take_request().await;
        }
    }

    /// Waits for the watch of `path` and sends `event` on it (the watch then ends).
    async fn send_event(&mut self, path: &'static str, event: Value) {
        self.await_watch(path).await;
        let send = self.watches.remove(path).expect("watch open");
        let mut body = serde_json::to_vec(&event).unwrap();
        body.push(b'\n');
        send.send_response(Response::new(Body::from(body)));
    }
}

struct Running {
    cell: CcmConfigCell,
    first: oneshot::Receiver<()>,
    registry: prometheus_client::registry::Registry,
    task: tokio::task::JoinHandle<()>,
    api: Api,
    server: TestServer,
}

/// The watcher over the mock API, and the server with its fact source and readiness gate,
/// wired as `serve --ccm-config-source auto` wires them (src/compose.rs).
async fn start() -> Running {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let cell = CcmConfigCell::default();
    let metrics = FactMetrics::<CcmWorkloads>::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
    metrics.register(&mut registry);
    let state: AppState =
        default_state().with_fact_source(Arc::new(CcmConfigSource::new(cell.clone())));
    let gate = state.add_readiness_gate(GATE);
    let (tx, first) = oneshot::channel();
    let store = cell.clone();
    let task = tokio::spawn(fact_watcher::run(
        client,
        CcmWorkloads::default(),
        move |fact| store.set(fact),
        metrics,
        move || {
            gate.set(true);
            let _ = tx.send(());
        },
    ));
    let server = TestServer::start_with(|_| {}, state).await;
    Running {
        cell,
        first,
        registry,
        task,
        api: Api {
            handle,
            lists: BTreeMap::new(),
            watches: BTreeMap::new(),
        },
        server,
    }
}

/// The mutate and validate responses for a write of `occm-cloud-config` holding `ini`.
async fn answers(server: &TestServer, ini: &str) -> (Value, Value) {
    let client = server.client().await;
    let (status, mutate) = post(&client, "/mutate?timeout=10s", review(ini)).await;
    assert_eq!(status, StatusCode::OK, "{mutate}");
    let (status, validate) = post(&client, "/validate?timeout=10s", review(ini)).await;
    assert_eq!(status, StatusCode::OK, "{validate}");
    (mutate["response"].clone(), validate["response"].clone())
}

fn assert_not_a_site(what: &str, (mutate, validate): &(Value, Value)) {
    assert_eq!(mutate["allowed"], true, "{what}: {mutate}");
    assert!(decoded_patch(mutate).is_none(), "{what}: {mutate}");
    assert_eq!(validate["allowed"], true, "{what}: {validate}");
}

async fn readyz(server: &TestServer) -> (StatusCode, String) {
    let (status, _, body) = server.admin_get("/readyz").await;
    (status, body)
}

#[tokio::test]
async fn the_secret_a_ccm_daemonset_reads_is_a_site_until_the_daemonset_is_deleted() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut run = start().await;

        // Before the first list: not ready, and the Secret is not claimed to be checked.
        let (status, body) = readyz(&run.server).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains(GATE), "{body}");
        assert_not_a_site("not listed yet", &answers(&run.server, SERIAL_FALSE).await);

        // The DaemonSets are listed, the Deployments not yet: still not ready, still unknown
        // (a fact without the Deployments would miss their CCMs).
        run.api
            .answer_list(
                DAEMONSETS,
                list_response("apps/v1", "DaemonSetList", &[daemonset()]),
            )
            .await;
        assert!(run.cell.get().reads().is_none(), "{:?}", run.cell.get());
        let (status, body) = readyz(&run.server).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");

        run.api
            .answer_list(
                DEPLOYMENTS,
                list_response("apps/v1", "DeploymentList", &[unrelated_deployment()]),
            )
            .await;
        (&mut run.first).await.expect("first list reported");
        eventually("/readyz to answer 200", || {
            let admin = run.server.admin;
            async move {
                matches!(
                    admin_get(admin, "/readyz").await,
                    Ok((StatusCode::OK, _, _))
                )
                .then_some(())
            }
        })
        .await;

        // The Secret the DaemonSet reads: `false` is denied, a missing key is added, and the
        // finding names the DaemonSet.
        let (mutate, validate) = answers(&run.server, SERIAL_FALSE).await;
        assert_eq!(validate["allowed"], false, "{validate}");
        let message = validate["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("provider-requires-serial-api-calls"),
            "{message}"
        );
        assert!(
            validate
                .to_string()
                .contains("openstack-cloud-controller-manager"),
            "the note names the reader: {validate}"
        );
        assert!(
            !validate.to_string().contains("keystone.example"),
            "no config content in the answer: {validate}"
        );
        assert!(
            decoded_patch(&mutate).is_none(),
            "false is not patched: {mutate}"
        );
        let (mutate, validate) = answers(&run.server, NO_SERIAL).await;
        let patch = decoded_patch(&mutate).expect("the missing key is added");
        assert_eq!(patch[0]["path"], "/data/cloud.conf", "{patch}");
        let added = base64::engine::general_purpose::STANDARD
            .decode(patch[0]["value"].as_str().expect("base64 text"))
            .expect("base64");
        let added = String::from_utf8(added).expect("UTF-8");
        assert!(
            added.contains("provider-requires-serial-api-calls = true"),
            "{added}"
        );
        assert_eq!(validate["allowed"], true, "{validate}");

        // An unrelated Deployment changes nothing; deleting the DaemonSet forgets the site.
        run.api
            .send_event(
                DEPLOYMENTS,
                json!({"type": "MODIFIED", "object": unrelated_deployment()}),
            )
            .await;
        run.api
            .send_event(
                DAEMONSETS,
                json!({"type": "DELETED", "object": daemonset()}),
            )
            .await;
        eventually("the deletion to reach the cell", || {
            let cell = run.cell.clone();
            async move {
                cell.get()
                    .reads()
                    .is_some_and(|r| r.is_empty())
                    .then_some(())
            }
        })
        .await;
        assert_not_a_site(
            "DaemonSet deleted",
            &answers(&run.server, SERIAL_FALSE).await,
        );

        let metrics = encoded(&run.registry);
        for sample in [
            "stackgate_ccm_config_source_syncs_total{outcome=\"list\"} 2",
            "stackgate_ccm_config_source_syncs_total{outcome=\"deleted\"} 1",
            "stackgate_ccm_config_source_known 1",
        ] {
            assert!(
                metrics.lines().any(|line| line == sample),
                "{sample} in {metrics}"
            );
        }
        eventually("the unrelated event to be counted", || {
            let metrics = encoded(&run.registry);
            async move {
                metrics
                    .lines()
                    .any(|l| l == "stackgate_ccm_config_source_syncs_total{outcome=\"event\"} 1")
                    .then_some(())
            }
        })
        .await;
        run.task.abort();
    })
    .await
    .expect("test finished in time");
}

/// No RBAC for apps: the refusal opens readiness (never wedges it) and the fact stays
/// unknown, so nothing is claimed about the Secrets CCMs read; the named sites still apply.
#[tokio::test]
async fn a_refusal_opens_readiness_and_adds_no_site() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut run = start().await;
        run.api
            .answer_list(
                DEPLOYMENTS,
                status_response(403, "Forbidden", "deployments.apps is forbidden"),
            )
            .await;
        (&mut run.first).await.expect("a refusal opens readiness");
        match &*run.cell.get() {
            CcmConfigFact::Unknown(why) => assert!(why.contains("HTTP 403"), "{why}"),
            other => panic!("{other:?}"),
        }
        let (status, body) = readyz(&run.server).await;
        assert!(!body.contains(GATE), "{status} {body}");
        assert_not_a_site("refused", &answers(&run.server, SERIAL_FALSE).await);
        let metrics = encoded(&run.registry);
        assert!(
            metrics
                .lines()
                .any(|l| l == "stackgate_ccm_config_source_syncs_total{outcome=\"forbidden\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics
                .lines()
                .any(|l| l == "stackgate_ccm_config_source_known 0"),
            "{metrics}"
        );
        // The DaemonSets list alone does not replace the refusal with a partial fact.
        run.api
            .answer_list(
                DAEMONSETS,
                list_response("apps/v1", "DaemonSetList", &[daemonset()]),
            )
            .await;
        run.api.await_watch(DAEMONSETS).await;
        assert!(run.cell.get().reads().is_none(), "{:?}", run.cell.get());
        run.task.abort();
    })
    .await
    .expect("test finished in time");
}
