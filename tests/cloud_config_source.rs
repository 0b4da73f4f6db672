//! The cluster's cloud config as a fact: the watcher of the one configured Secret against
//! kube-rs's mock API (`tower_test::mock::pair`, as in tests/releases_watcher.rs), and the
//! fact source wired into the HTTPS server, judging the captured-shape Service reviews.

mod common;
#[path = "support/kube_mock.rs"]
mod kube_mock;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube_mock::{Handle, encoded, list_response, status_response};
use serde_json::{Value, json};
use stackgate::cluster_config::watcher::{self, CloudConfigMetrics};
use stackgate::cluster_config::{CloudConfigSource, ConfigFactCell, ConfigObject};
use stackgate::rules::ovn_source_ranges::CloudConfigFact;
use tokio::sync::oneshot;
use tower_test::mock;

const PATH: &str = "/api/v1/namespaces/kube-system/secrets";
const TEST_TIMEOUT: Duration = Duration::from_secs(20);
const SERVICE_WITH_RANGES: &str = "service/validate-create-loadbalancer-source-ranges.json";

fn secret(ini: &str, resource_version: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "cloud-config", "namespace": "kube-system",
            "resourceVersion": resource_version},
        "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(ini)}})
}

const OVN: &str = "[Global]\napplication-credential-secret = canary-7f3a\n[LoadBalancer]\nlb-provider = ovn\nlb-method = SOURCE_IP_PORT\n";

fn list(items: &[Value]) -> Response<Body> {
    list_response("v1", "SecretList", items)
}

/// Waits for the next request: a GET of the Secrets in kube-system selected by name.
async fn expect(handle: &mut Handle, watch: bool) -> mock::SendResponse<Response<Body>> {
    kube_mock::expect_get(handle, PATH, "cloud-config", watch).await
}

struct Running {
    cell: ConfigFactCell,
    first: oneshot::Receiver<()>,
    registry: prometheus_client::registry::Registry,
    task: tokio::task::JoinHandle<()>,
}

fn start() -> (Running, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let object = ConfigObject::parse("Secret/kube-system/cloud-config", "cloud.conf").unwrap();
    let cell = ConfigFactCell::new(&object);
    let metrics = CloudConfigMetrics::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
    metrics.register(&mut registry);
    let (tx, first) = oneshot::channel();
    let task = tokio::spawn(watcher::run(
        client,
        object,
        cell.clone(),
        metrics,
        move || {
            let _ = tx.send(());
        },
    ));
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

async fn server_with(cell: &ConfigFactCell) -> TestServer {
    let state = default_state().with_fact_source(Arc::new(CloudConfigSource::new(cell.clone())));
    TestServer::start_with(|_| {}, state).await
}

async fn validate(server: &TestServer, rel: &str) -> Value {
    let client = server.client().await;
    let (status, out) = post(&client, "/validate?timeout=10s", captured(rel)).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    out["response"].clone()
}

#[tokio::test]
async fn the_watched_secret_decides_services_over_https() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start();
        assert!(matches!(*run.cell.get(), CloudConfigFact::Unavailable(_)));

        // 1. The list finds OVN without managed security groups.
        expect(&mut handle, false)
            .await
            .send_response(list(&[secret(OVN, "7")]));
        (&mut run.first).await.expect("first list reported");
        let server = server_with(&run.cell).await;
        let response = validate(&server, SERVICE_WITH_RANGES).await;
        assert_eq!(response["allowed"], false, "{response}");
        assert_eq!(response["status"]["code"], 403, "{response}");
        let message = response["status"]["message"].as_str().unwrap_or_default();
        for needle in [
            "Service web/ingress spec.loadBalancerSourceRanges",
            "Secret kube-system/cloud-config key cloud.conf",
            "manage-security-groups = true",
        ] {
            assert!(message.contains(needle), "{needle:?} not in {message}");
        }
        assert!(!response.to_string().contains("canary-7f3a"));
        let plain = validate(&server, "service/validate-create-loadbalancer.json").await;
        assert_eq!(plain["allowed"], true, "{plain}");
        assert!(plain.get("warnings").is_none(), "{plain}");

        // 2. A watch event turns security groups on: the same Service is admitted.
        let send = expect(&mut handle, true).await;
        let fixed = format!("{OVN}manage-security-groups = true\n");
        let event = json!({"type": "MODIFIED", "object": secret(&fixed, "8")});
        let mut body = serde_json::to_vec(&event).unwrap();
        body.push(b'\n');
        send.send_response(Response::new(Body::from(body)));
        eventually("the event to reach the cell", || {
            let cell = run.cell.clone();
            async move {
                matches!(&*cell.get(), CloudConfigFact::Known(s) if s.manage_security_groups)
                    .then_some(())
            }
        })
        .await;
        let response = validate(&server, SERVICE_WITH_RANGES).await;
        assert_eq!(response["allowed"], true, "{response}");
        assert!(response.get("warnings").is_none(), "{response}");

        let metrics = encoded(&run.registry);
        assert!(
            metrics.contains("stackgate_cloud_config_syncs_total{outcome=\"list\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("stackgate_cloud_config_syncs_total{outcome=\"event\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics
                .lines()
                .any(|line| line == "stackgate_cloud_config_known 1"),
            "{metrics}"
        );
        assert!(!metrics.contains("canary"), "{metrics}");
        run.task.abort();
    })
    .await
    .expect("test finished in time");
}

#[tokio::test]
async fn a_refusal_opens_readiness_and_the_rule_only_warns() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start();
        let send = expect(&mut handle, false).await;
        send.send_response(status_response(
            403,
            "Forbidden",
            "secrets \"cloud-config\" is forbidden",
        ));
        (&mut run.first).await.expect("a refusal opens readiness");
        match &*run.cell.get() {
            CloudConfigFact::Unavailable(why) => assert!(why.contains("HTTP 403"), "{why}"),
            other => panic!("{other:?}"),
        }
        let server = server_with(&run.cell).await;
        let response = validate(&server, SERVICE_WITH_RANGES).await;
        assert_eq!(response["allowed"], true, "{response}");
        let warning = response["warnings"][0].as_str().unwrap_or_default();
        assert!(warning.contains("ovn-source-ranges"), "{warning}");
        assert!(warning.contains("cannot see"), "{warning}");
        let metrics = encoded(&run.registry);
        assert!(
            metrics.contains("stackgate_cloud_config_syncs_total{outcome=\"forbidden\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics
                .lines()
                .any(|line| line == "stackgate_cloud_config_known 0"),
            "{metrics}"
        );
        run.task.abort();
    })
    .await
    .expect("test finished in time");
}

#[tokio::test]
async fn a_missing_object_is_unavailable_not_guessed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start();
        expect(&mut handle, false).await.send_response(list(&[]));
        (&mut run.first).await.expect("first list reported");
        match &*run.cell.get() {
            CloudConfigFact::Unavailable(why) => assert_eq!(
                why,
                "Secret kube-system/cloud-config key cloud.conf does not exist"
            ),
            other => panic!("{other:?}"),
        }
        run.task.abort();
    })
    .await
    .expect("test finished in time");
}
