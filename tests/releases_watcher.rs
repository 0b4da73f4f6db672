//! The OpenStackVersion watcher against kube-rs's mock API pattern: `tower_test::mock::pair`
//! gives a service and a handle, `kube::Client::new(service, "default")` a real client over
//! it, and a verifier task answers each request with canned JSON built from the real CRD
//! sample and the apiserver-stored objects in tests/fixtures (see SOURCES.md). Every test
//! runs under a timeout, so a missing or unexpected request fails it.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use stackgate::releases::Snapshot;
use stackgate::releases::metrics::ReleaseMetrics;
use stackgate::releases::watcher::{self, WatchConfig};
use tokio::sync::{mpsc, oneshot};
use tower_test::mock;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

const PATH: &str = "/apis/core.openstack.org/v1beta1/openstackversions";
const TEST_TIMEOUT: Duration = Duration::from_secs(10);

fn fixture_text(rel: &str) -> String {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The OpenStackVersion as the apiserver stored it after the captured status update:
/// target 18.0.0 = deployed, availableVersion 18.0.1, serviceDefaults {glanceWsgi: "true"}.
fn stored_osv() -> Value {
    let review: Value = serde_json::from_str(&fixture_text(
        "captured/openstackversion/validate-update-openstack-status-subresource.json",
    ))
    .unwrap();
    let mut object = review["request"]["object"].clone();
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    object
}

/// The upstream sample (config/samples/core_v1beta1_openstackversion.yaml) as created in
/// namespace `other`: no status yet.
fn sample_osv() -> Value {
    let mut object: Value = serde_saphyr::from_str(&fixture_text(
        "openstack-k8s-operators/sample-openstackversion.yaml",
    ))
    .expect("sample YAML");
    object["metadata"]["namespace"] = json!("other");
    object["metadata"]["resourceVersion"] = json!("90");
    object
}

fn list(resource_version: &str, items: &[Value]) -> Response<Body> {
    let body = json!({
        "apiVersion": "core.openstack.org/v1beta1",
        "kind": "OpenStackVersionList",
        "metadata": {"resourceVersion": resource_version},
        "items": items,
    });
    Response::new(Body::from(serde_json::to_vec(&body).unwrap()))
}

/// A watch response: one JSON event per line, then the stream ends.
fn watch_events(events: &[Value]) -> Response<Body> {
    let mut body = Vec::new();
    for e in events {
        body.extend(serde_json::to_vec(e).unwrap());
        body.push(b'\n');
    }
    Response::new(Body::from(body))
}

fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
           "message": reason, "reason": reason, "code": code})
}

fn error_response(code: u16, reason: &str) -> Response<Body> {
    let mut r = Response::new(Body::from(
        serde_json::to_vec(&status(code, reason)).unwrap(),
    ));
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r
}

/// Waits for the next request, checks it is a list (or a watch) of OpenStackVersions and
/// returns its query string and the responder.
async fn expect(handle: &mut Handle, watch: bool) -> (String, mock::SendResponse<Response<Body>>) {
    let (request, send) = handle
        .next_request()
        .await
        .expect("the watcher calls the API");
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), PATH, "{}", request.uri());
    let query = request.uri().query().unwrap_or("").to_owned();
    assert_eq!(query.contains("watch=true"), watch, "{query}");
    (query, send)
}

struct Running {
    snapshots: mpsc::UnboundedReceiver<Arc<Snapshot>>,
    first_list: oneshot::Receiver<()>,
    metrics: ReleaseMetrics,
    registry: prometheus_client::registry::Registry,
    task: tokio::task::JoinHandle<()>,
}

fn start(config: WatchConfig) -> (Running, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (tx, snapshots) = mpsc::unbounded_channel();
    let (first_tx, first_list) = oneshot::channel();
    let metrics = ReleaseMetrics::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
    metrics.register(&mut registry);
    let task = tokio::spawn(watcher::run(
        client,
        config,
        metrics.clone(),
        move |s| {
            let _ = tx.send(s);
        },
        move || {
            let _ = first_tx.send(());
        },
    ));
    (
        Running {
            snapshots,
            first_list,
            metrics,
            registry,
            task,
        },
        handle,
    )
}

fn fast() -> WatchConfig {
    WatchConfig {
        resync: Duration::from_secs(3600),
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
    }
}

fn encoded(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}

/// The value of a counter line such as `stackgate_release_catalog_syncs_total{outcome="list"}`.
fn counter(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A Glance CREATE (captured) evaluated with the embedded policies over `snapshot`; returns
/// the mutated object's annotations.
fn glance_annotations(snapshot: Arc<Snapshot>) -> Value {
    let review: Value =
        serde_json::from_str(&fixture_text("captured/glance/mutate-create-glance.json")).unwrap();
    let r: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone()).unwrap();
    let req: AdmissionRequest<DynamicObject> = r.try_into().unwrap();
    let engine = Engine::with_releases(PolicySet::embedded().unwrap(), snapshot);
    let verdict = engine.evaluate(&stackgate::admission::subject_of(&req));
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &json_patch::Patch(verdict.patch)).unwrap();
    let mut annotations = object["metadata"]["annotations"].clone();
    annotations
        .as_object_mut()
        .unwrap()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    annotations
}

#[tokio::test]
async fn list_watch_error_and_relist_drive_the_snapshots() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start(fast());

        // 1. Initial list: the stored object (namespace openstack) and the upstream sample.
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("100", &[stored_osv(), sample_osv()]));
        run.first_list.await.expect("first list reported");
        let first = run.snapshots.recv().await.unwrap();
        assert_eq!(first.len(), 2);
        let other = &first.namespace("other").unwrap()["openstack"];
        assert_eq!(other.target_version.as_deref(), Some("1.0.1"));
        assert_eq!(other.available_version, None);
        assert_eq!(
            glance_annotations(Arc::clone(&first)),
            json!({"glance.openstack.org/wsgi": "true", "glance.openstack.org/location-api": "false"})
        );

        // 2. Watch from the list's resourceVersion: the target moves to 18.0.1 (an update
        //    starts), then the apiserver expires the watch (410).
        let (query, send) = expect(&mut handle, true).await;
        assert!(query.contains("resourceVersion=100"), "{query}");
        let mut updating = stored_osv();
        updating["spec"]["targetVersion"] = json!("18.0.1");
        updating["metadata"]["resourceVersion"] = json!("101");
        send.send_response(watch_events(&[
            json!({"type": "MODIFIED", "object": updating}),
            json!({"type": "ERROR", "object": status(410, "Expired")}),
        ]));
        let second = run.snapshots.recv().await.unwrap();
        let osv = &second.namespace("openstack").unwrap()["openstack"];
        assert!(osv.updating());
        // Deployed 18.0.0 has glanceWsgi "false" in availableServiceDefaults: that is what a
        // Glance CREATE gets while the update is in progress.
        assert_eq!(
            glance_annotations(Arc::clone(&second)),
            json!({"glance.openstack.org/wsgi": "false", "glance.openstack.org/location-api": "false"})
        );

        // 3. 410 → relist. The sample is gone, so the new snapshot drops it.
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("200", &[updating.clone()]));
        let third = run.snapshots.recv().await.unwrap();
        assert_eq!(third.len(), 1);
        assert!(third.namespace("other").is_none());

        // 4. Watch again: the object is deleted.
        let (query, send) = expect(&mut handle, true).await;
        assert!(query.contains("resourceVersion=200"), "{query}");
        let mut deleted = updating;
        deleted["metadata"]["resourceVersion"] = json!("201");
        send.send_response(watch_events(&[json!({"type": "DELETED", "object": deleted})]));
        let fourth = run.snapshots.recv().await.unwrap();
        assert!(fourth.is_empty());
        assert_eq!(glance_annotations(fourth), json!({}));

        // The stream ended, so the watcher resumes watching; hold that request.
        let (query, _pending) = expect(&mut handle, true).await;
        assert!(query.contains("resourceVersion=201"), "{query}");

        let text = encoded(&run.registry);
        assert_eq!(counter(&text, "stackgate_release_catalog_syncs_total{outcome=\"list\"}"), 2);
        assert_eq!(counter(&text, "stackgate_release_catalog_syncs_total{outcome=\"event\"}"), 2);
        assert_eq!(counter(&text, "stackgate_release_catalog_syncs_total{outcome=\"error\"}"), 1);
        assert!(text.contains("stackgate_release_catalog_openstackversions 0"), "{text}");
        assert!(run.metrics.snapshot_age_seconds().is_some());
        run.task.abort();
    })
    .await
    .expect("scenario finished in time");
}

#[tokio::test]
async fn unreachable_api_server_keeps_the_last_snapshot_and_ages_it() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start(fast());
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("100", &[stored_osv()]));
        let first = run.snapshots.recv().await.unwrap();
        assert_eq!(first.len(), 1);
        // Every watch attempt fails; the watcher retries with backoff and publishes nothing.
        for _ in 0..3 {
            let (_, send) = expect(&mut handle, true).await;
            send.send_response(error_response(503, "ServiceUnavailable"));
        }
        let (_, _pending) = expect(&mut handle, true).await;
        assert!(
            run.snapshots.try_recv().is_err(),
            "no new snapshot while failing"
        );
        let age = run.metrics.snapshot_age_seconds().expect("an age");
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(run.metrics.snapshot_age_seconds().unwrap() > age);
        let text = encoded(&run.registry);
        assert_eq!(
            counter(
                &text,
                "stackgate_release_catalog_syncs_total{outcome=\"error\"}"
            ),
            3
        );
        assert!(
            text.contains("stackgate_release_catalog_snapshot_age_seconds "),
            "{text}"
        );
        run.task.abort();
    })
    .await
    .expect("scenario finished in time");
}

#[tokio::test]
async fn absent_crd_counts_as_an_empty_complete_list_and_is_retried() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start(fast());
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(error_response(404, "NotFound"));
        run.first_list
            .await
            .expect("readiness is not held by a missing CRD");
        assert!(run.snapshots.recv().await.unwrap().is_empty());
        // Still 404 on the retry: nothing new is published.
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(error_response(404, "NotFound"));
        // The CRD appears.
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("7", &[stored_osv()]));
        let s = run.snapshots.recv().await.unwrap();
        assert_eq!(s.len(), 1);
        let (_, _pending) = expect(&mut handle, true).await;
        let text = encoded(&run.registry);
        assert_eq!(
            counter(
                &text,
                "stackgate_release_catalog_syncs_total{outcome=\"crd-absent\"}"
            ),
            2
        );
        run.task.abort();
    })
    .await
    .expect("scenario finished in time");
}

#[tokio::test]
async fn forbidden_opens_readiness_without_publishing_and_is_retried() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start(fast());
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(error_response(403, "Forbidden"));
        run.first_list
            .await
            .expect("readiness is not held by missing RBAC");
        assert!(
            run.snapshots.try_recv().is_err(),
            "nothing is published: the engine keeps what it serves (the static table)"
        );
        // RBAC is fixed: the retry lists and publishes.
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("8", &[stored_osv()]));
        assert_eq!(run.snapshots.recv().await.unwrap().len(), 1);
        let (_, _pending) = expect(&mut handle, true).await;
        let text = encoded(&run.registry);
        assert_eq!(
            counter(
                &text,
                "stackgate_release_catalog_syncs_total{outcome=\"forbidden\"}"
            ),
            1
        );
        run.task.abort();
    })
    .await
    .expect("scenario finished in time");
}

#[tokio::test]
async fn periodic_resync_relists_and_republishes_only_changes() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let config = WatchConfig {
            resync: Duration::from_millis(150),
            ..fast()
        };
        let (mut run, mut handle) = start(config);
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("100", &[stored_osv()]));
        run.snapshots.recv().await.unwrap();
        let (_, _watch) = expect(&mut handle, true).await;
        // After `resync` the watcher restarts with a fresh list; same content, no publish.
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("150", &[stored_osv()]));
        let (query, _watch2) = expect(&mut handle, true).await;
        assert!(query.contains("resourceVersion=150"), "{query}");
        assert!(run.snapshots.try_recv().is_err());
        let text = encoded(&run.registry);
        assert_eq!(
            counter(
                &text,
                "stackgate_release_catalog_syncs_total{outcome=\"list\"}"
            ),
            2
        );
        run.task.abort();
    })
    .await
    .expect("scenario finished in time");
}

#[tokio::test]
async fn objects_without_a_namespace_are_skipped_not_fatal() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (mut run, mut handle) = start(fast());
        let mut broken = sample_osv();
        broken["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        let (_, send) = expect(&mut handle, false).await;
        send.send_response(list("100", &[broken, stored_osv()]));
        assert_eq!(run.snapshots.recv().await.unwrap().len(), 1);
        let (_, _pending) = expect(&mut handle, true).await;
        let text = encoded(&run.registry);
        assert_eq!(
            counter(
                &text,
                "stackgate_release_catalog_syncs_total{outcome=\"undecodable\"}"
            ),
            1
        );
        run.task.abort();
    })
    .await
    .expect("scenario finished in time");
}
