//! Captured Glance reviews through the HTTPS server, with the release catalog wired the way
//! `main` wires it: a readiness gate held until the OpenStackVersion watcher's first list,
//! and a sink that swaps the engine on every snapshot. The watcher talks to kube-rs's mock
//! API (tower-test); the reviews are the captured bodies in tests/fixtures/captured/glance.

mod common;

use base64::Engine as _;
use common::*;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::releases::watcher::WatchConfig;
use stackgate::server::AppState;
use tower_test::mock;

const WSGI: &str = "glance.openstack.org/wsgi";
const LOCATION: &str = "glance.openstack.org/location-api";

/// The OpenStackVersion as the apiserver stored it after the captured status update
/// (target = deployed = 18.0.0, serviceDefaults {glanceWsgi: "true"}).
fn stored_osv() -> Value {
    let review: Value = serde_json::from_slice(&captured(
        "openstackversion/validate-update-openstack-status-subresource.json",
    ))
    .unwrap();
    review["request"]["object"].clone()
}

/// A captured Glance review with `wsgi` set on its object.
fn glance_with_wsgi(rel: &str, wsgi: &str) -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&captured(rel)).unwrap();
    review["request"]["object"]["metadata"]["annotations"][WSGI] = json!(wsgi);
    serde_json::to_vec(&review).unwrap()
}

/// Applies a mutate response's patch to the review's object.
fn mutated_annotations(body: &[u8], response: &Value) -> Value {
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("a patch"))
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let review: Value = serde_json::from_slice(body).unwrap();
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).unwrap();
    object["metadata"]["annotations"].clone()
}

fn warnings(response: &Value) -> String {
    response["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn live_release_catalog_behind_the_https_webhook() {
    let metrics = Metrics::new();
    let release_metrics = metrics.releases().clone();
    let state = AppState::new(
        Engine::new(PolicySet::embedded().expect("embedded policies")),
        metrics,
    );
    let server = TestServer::start_with(|_| {}, state).await;

    // The watcher over a mocked API server, wired as main wires it. The mock answers nothing
    // until the verifier below runs, so the first list is still outstanding here.
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let watcher_task = server.state.watch_releases(
        kube::Client::new(service, "default"),
        WatchConfig::default(),
        release_metrics,
    );
    let (status, _, body) = server.admin_get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("release-catalog"), "{body}");
    let verifier = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("a list");
        assert!(!request.uri().to_string().contains("watch=true"));
        let list = json!({
            "apiVersion": "core.openstack.org/v1beta1",
            "kind": "OpenStackVersionList",
            "metadata": {"resourceVersion": "300"},
            "items": [stored_osv()],
        });
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&list).unwrap(),
        )));
        // Hold the watch open for the rest of the test.
        let (request, pending) = handle.next_request().await.expect("a watch");
        assert!(request.uri().to_string().contains("watch=true"));
        (handle, pending)
    });
    eventually("/readyz after the first OpenStackVersion list", || async {
        (server.admin_get("/readyz").await.0 == StatusCode::OK).then_some(())
    })
    .await;

    let client = server.client().await;

    // CREATE: the mutating webhook adds exactly the operator's annotations.
    let body = captured("glance/mutate-create-glance.json");
    let (status, review) = post(&client, "/mutate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{review}");
    let response = &review["response"];
    assert_eq!(response["uid"], uid_of(&body).as_str());
    assert_eq!(response["allowed"], true);
    let mut annotations = mutated_annotations(&body, response);
    annotations
        .as_object_mut()
        .unwrap()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    assert_eq!(annotations, json!({WSGI: "true", LOCATION: "false"}));
    assert!(
        warnings(response)
            .contains("stackgate added annotation glance.openstack.org/wsgi=\"true\""),
        "{response}"
    );

    // The validating call for the same CREATE, once mutated: clean.
    let mut validated: Value =
        serde_json::from_slice(&captured("glance/validate-create-glance.json")).unwrap();
    validated["request"]["object"]["metadata"]["annotations"][WSGI] = json!("true");
    validated["request"]["object"]["metadata"]["annotations"][LOCATION] = json!("false");
    let (status, review) = post(
        &client,
        "/validate?timeout=10s",
        serde_json::to_vec(&validated).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true, "{review}");
    assert!(review["response"]["warnings"].is_null(), "{review}");

    // A contradicting value: admitted with a warning (the embedded policy does not enforce
    // contradictions).
    let body = glance_with_wsgi("glance/validate-create-glance.json", "false");
    let (_, review) = post(&client, "/validate?timeout=10s", body).await;
    assert_eq!(review["response"]["allowed"], true, "{review}");
    let w = warnings(&review["response"]);
    assert!(w.contains("contradicts the release"), "{w}");

    // A value glance-operator cannot parse: denied with the accepted list.
    let body = glance_with_wsgi("glance/validate-create-glance.json", "yes");
    let (_, review) = post(&client, "/validate?timeout=10s", body).await;
    let response = &review["response"];
    assert_eq!(response["allowed"], false, "{review}");
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"),
        "{message}"
    );

    // DELETE is admitted untouched.
    let body = captured("glance/validate-delete-glance.json");
    let (_, review) = post(&client, "/validate?timeout=10s", body).await;
    assert_eq!(review["response"]["allowed"], true);

    let text = server.metrics().await;
    for (series, want) in [
        (
            "stackgate_release_catalog_syncs_total{outcome=\"list\"}",
            1.0,
        ),
        ("stackgate_release_catalog_openstackversions", 1.0),
        (
            "stackgate_release_annotations_added_total{annotation=\"glance.openstack.org/wsgi\"}",
            1.0,
        ),
        (
            "stackgate_release_annotations_added_total{annotation=\"glance.openstack.org/location-api\"}",
            1.0,
        ),
        (
            "stackgate_release_contradictions_total{annotation=\"glance.openstack.org/wsgi\",outcome=\"warned\"}",
            1.0,
        ),
        (
            "stackgate_release_unparsable_annotations_total{annotation=\"glance.openstack.org/wsgi\",outcome=\"denied\"}",
            1.0,
        ),
    ] {
        assert_eq!(metric(&text, series), want, "{series}\n{text}");
    }
    assert!(
        text.contains("stackgate_release_catalog_snapshot_age_seconds "),
        "{text}"
    );

    watcher_task.abort();
    drop(verifier.await.unwrap());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn static_table_serves_without_cluster_access() {
    // --kube off: no watcher, no gate; the policy names the release for the namespace.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("release-annotations.yaml"),
        "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: release-annotations\n\
         rule: release-annotations\nmode: enforce\ndescription: d\nsource: s\n\
         params: {namespaceReleases: {openstack: legacy}}\n",
    )
    .unwrap();
    let policies = PolicySet::load_dir(dir.path()).expect("policies load");
    let state = AppState::new(Engine::new(policies), Metrics::new());
    let server = TestServer::start_with(|_| {}, state).await;
    assert_eq!(server.admin_get("/readyz").await.0, StatusCode::OK);

    let client = server.client().await;
    let body = captured("glance/mutate-create-glance.json");
    let (status, review) = post(&client, "/mutate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let annotations = mutated_annotations(&body, &review["response"]);
    assert_eq!(annotations[WSGI], "false");
    assert_eq!(annotations[LOCATION], "false");

    // Manila (manila-operator's sample): the legacy release writes sharev1 "false".
    let body = manila_review(None);
    let (status, review) = post(&client, "/mutate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let annotations = mutated_annotations(&body, &review["response"]);
    assert_eq!(annotations, json!({SHAREV1: "false"}));
    // A value manila-operator's strconv.ParseBool rejects is refused by /validate.
    let body = manila_review(Some("on"));
    let (status, review) = post(&client, "/validate?timeout=10s", body).await;
    assert_eq!(status, StatusCode::OK);
    let response = &review["response"];
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("manila.openstack.org/sharev1=\"on\" cannot be parsed"),
        "{message}"
    );
    assert!(message.contains("IsShareV1Enabled"), "{message}");
    server.stop().await.unwrap();
}

const SHAREV1: &str = "manila.openstack.org/sharev1";

/// manila-operator's sample Manila CR in a CREATE review (tests/fixtures/SOURCES.md), with
/// `sharev1` as its only annotation when given.
fn manila_review(sharev1: Option<&str>) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/openstack-k8s-operators/sample-manila.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut object: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).expect("sample YAML");
    if let Some(v) = sharev1 {
        object["metadata"]["annotations"] = json!({SHAREV1: v});
    }
    let gvk = json!({"group": "manila.openstack.org", "version": "v1beta1", "kind": "Manila"});
    let resource =
        json!({"group": "manila.openstack.org", "version": "v1beta1", "resource": "manilas"});
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "5d2c3f0a-8f4e-4b0e-9a57-7a3b1c9e0d21",
            "kind": gvk, "requestKind": gvk, "resource": resource, "requestResource": resource,
            "name": "manila", "namespace": "openstack", "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin"}, "object": object, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    }))
    .unwrap()
}
