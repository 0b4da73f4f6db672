//! The guard's IO, end to end: a fake Keystone + Octavia (axum on 127.0.0.1:0) answering
//! from the api-ref examples (Keystone's application-credential token response with a
//! load-balancer endpoint added to its catalog; Octavia's status tree adapted per case), a
//! kube-rs mock API (tower-test) serving Cluster, OpenStackCluster (the v1beta1 object
//! captured from a real apiserver, and the v1beta2 shape of CAPO's template) and the identity
//! Secret, and the captured Machine DELETE reviews. Last, the HTTPS server with the guard on.
//!
//! Timing: no sleeps. Hanging servers never answer; each test asserts the answer arrived
//! before a deadline.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::response::{IntoResponse, Response as AxumResponse};
use axum::routing::{get, post};
use base64::Engine as _;
use http::{Request, Response};
use kube::client::Body;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::engine::{Engine, Facts};
use stackgate::guard::{Guard, GuardConfig, MachineDelete, probe};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::rules::lb_guard::GuardFacts;
use stackgate::server::AppState;
use tokio::net::TcpListener;
use tokio::time::Instant;

const NS: &str = "cluster-a";
const LB_ID: &str = "a7f7b5c4-1e0d-4b8e-9c3f-6d2e1f0a9b87";
const LB_NAME: &str = "k8s-clusterapi-cluster-cluster-a-cluster-a-kubeapi";
const SECRET: &str = "cluster-a-cloud-config";
const CANARY: &str = "canary-appcred-secret-5b1e";
const CP_DELETE: &str =
    "machine/validate-delete-cluster-a-control-plane-b2m4d-control-plane-with-finalizer.json";
const WORKER_DELETE: &str = "machine/validate-delete-cluster-a-md-0-5f7c9-xk2lp-worker.json";
/// Slack for scheduling on a loaded 2-core machine when asserting "answered by the deadline".
const SLACK: Duration = Duration::from_millis(400);

// ------------------------------------------------------------------------------------------
// Fixtures

fn fixture(rel: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_fixture(rel: &str) -> Value {
    serde_json::from_slice(&fixture(rel)).unwrap()
}

/// A document of a CAPO cluster template, with the clusterctl variables we need filled in.
fn template_doc(file: &str, kind: &str) -> Value {
    let text = String::from_utf8(fixture(&format!("capo/{file}")))
        .unwrap()
        .replace("${CLUSTER_NAME}", "cluster-a")
        .replace("${OPENSTACK_CLOUD}", "openstack");
    let mut doc = text
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str::<Value>(d).unwrap())
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("{kind} in {file}"));
    doc["metadata"]["namespace"] = json!(NS);
    doc["metadata"]["uid"] = json!(format!("uid-{kind}"));
    doc
}

fn cluster_v1beta1() -> Value {
    template_doc("cluster-template-capi-v1beta1.yaml", "Cluster")
}

fn cluster_v1beta2() -> Value {
    template_doc("cluster-template-v1beta2.yaml", "Cluster")
}

/// The OpenStackCluster as a real apiserver stored it after CAPO-style status updates.
fn osc_v1beta1() -> Value {
    json_fixture("captured/openstackcluster/validate-update-cluster-a-status-subresource.json")
        ["request"]["object"]
        .clone()
}

fn osc_v1beta2() -> Value {
    let mut osc = template_doc("cluster-template-v1beta2.yaml", "OpenStackCluster");
    osc["status"] = json!({"ready": true, "apiServerManagedLoadBalancer": {
        "id": LB_ID, "name": LB_NAME, "ip": "203.0.113.10", "internalIP": "10.6.0.53"}});
    osc
}

fn app_credential_clouds(base: &str) -> String {
    format!(
        "clouds:\n  openstack:\n    auth:\n      auth_url: {base}/identity\n      \
         application_credential_id: 3e1f0a2b\n      application_credential_secret: {CANARY}\n    \
         auth_type: v3applicationcredential\n    region_name: RegionOne\n    interface: public\n"
    )
}

fn password_clouds(base: &str) -> String {
    format!(
        "clouds:\n  openstack:\n    auth:\n      auth_url: {base}/identity/v3\n      username: capo\n      \
         password: {CANARY}\n      project_name: demo\n      user_domain_name: Default\n      \
         project_domain_name: Default\n    region_name: RegionOne\n"
    )
}

fn secret(clouds_yaml: &str, cacert: Option<&str>) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut data = json!({"clouds.yaml": b64(clouds_yaml)});
    if let Some(ca) = cacert {
        data["cacert"] = json!(b64(ca));
    }
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": SECRET, "namespace": NS, "uid": "uid-secret", "resourceVersion": "7"},
        "data": data})
}

fn review(rel: &str) -> Value {
    json_fixture(&format!("captured/{rel}"))
}

/// The captured DELETE as if requested at `cluster.x-k8s.io/v1beta2`.
fn as_v1beta2(mut review: Value) -> Value {
    for key in ["kind", "requestKind", "resource", "requestResource"] {
        review["request"][key]["version"] = json!("v1beta2");
    }
    review["request"]["oldObject"]["apiVersion"] = json!("cluster.x-k8s.io/v1beta2");
    review
}

fn machine(review: &Value) -> MachineDelete {
    probe(&serde_json::to_vec(review).unwrap()).expect("a control-plane Machine DELETE")
}

fn request(review: &Value) -> AdmissionRequest<DynamicObject> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone()).unwrap();
    review.try_into().unwrap()
}

// ------------------------------------------------------------------------------------------
// Octavia status trees (the api-ref example, adapted)

type Member<'a> = (&'a str, &'a str, &'a str, &'a str);

fn status_tree(members: &[Member<'_>]) -> Value {
    let mut tree = json_fixture("octavia/loadbalancer-status-response.json");
    let pool_name = format!("{LB_NAME}-6443");
    let members: Vec<Value> = members
        .iter()
        .enumerate()
        .map(|(i, (machine, address, prov, op))| {
            json!({"name": format!("{pool_name}-{machine}"), "address": address,
                "protocol_port": 6443, "id": format!("m-{i}"),
                "provisioning_status": prov, "operating_status": op})
        })
        .collect();
    let lb = &mut tree["statuses"]["loadbalancer"];
    lb["id"] = json!(LB_ID);
    lb["name"] = json!(LB_NAME);
    for pointer in ["/listeners/0/pools/0", "/pools/0"] {
        let pool = lb
            .pointer_mut(pointer)
            .expect("pool in the api-ref example");
        pool["name"] = json!(pool_name);
        pool["members"] = json!(members);
    }
    tree
}

const DELETED: &str = "cluster-a-control-plane-b2m4d";

fn healthy() -> Value {
    status_tree(&[
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "ONLINE",
        ),
    ])
}

fn pending() -> Value {
    status_tree(&[
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "ONLINE",
        ),
        (
            "cluster-a-control-plane-n3w01",
            "10.6.0.13",
            "PENDING_CREATE",
            "OFFLINE",
        ),
    ])
}

const PEER: &str = "cluster-a-control-plane-7x9kq";
const NEWCOMER: &str = "cluster-a-control-plane-n3w01";

/// A replacement member whose creation failed: `provisioning_status = ERROR` (Octavia's
/// state for a failed change; the api-ref example's first member is `ERROR` by health).
fn errored() -> Value {
    status_tree(&[
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (PEER, "10.6.0.12", "ACTIVE", "ONLINE"),
        (NEWCOMER, "10.6.0.13", "ERROR", "OFFLINE"),
    ])
}

/// Every member provisioned, but only the deleted Machine's is serving: the peer fails its
/// health checks (operating_status ERROR, as the api-ref example's first member) and the
/// replacement is not yet online.
fn last_online() -> Value {
    status_tree(&[
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (PEER, "10.6.0.12", "ACTIVE", "ERROR"),
        (NEWCOMER, "10.6.0.13", "ACTIVE", "OFFLINE"),
    ])
}

/// A three-node control plane, all healthy: two ONLINE members stay.
fn all_healthy() -> Value {
    status_tree(&[
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (PEER, "10.6.0.12", "ACTIVE", "ONLINE"),
        (NEWCOMER, "10.6.0.13", "ACTIVE", "ONLINE"),
    ])
}

/// The deleted Machine's member is already gone from the pool (CAPO removed it); the rest
/// is healthy.
fn already_removed() -> Value {
    status_tree(&[
        (PEER, "10.6.0.12", "ACTIVE", "ONLINE"),
        (NEWCOMER, "10.6.0.13", "ACTIVE", "ONLINE"),
    ])
}

/// `tree` with its API pool turned into one without a health monitor (the api-ref example's
/// `source_ip_pool` shape, `"healthmonitor": {}`) and every ONLINE member `NO_MONITOR`.
fn without_monitor(mut tree: Value) -> Value {
    let lb = &mut tree["statuses"]["loadbalancer"];
    for pointer in ["/listeners/0/pools/0", "/pools/0"] {
        let pool = lb.pointer_mut(pointer).unwrap();
        pool["healthmonitor"] = json!({});
        for member in pool["members"].as_array_mut().unwrap() {
            if member["operating_status"] == "ONLINE" {
                member["operating_status"] = json!("NO_MONITOR");
            }
        }
    }
    tree
}

// ------------------------------------------------------------------------------------------
// Fake Keystone + Octavia

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keystone {
    /// 201 with the api-ref token (lifetime 1 h by Keystone's clock).
    Ok,
    /// 201 with a token whose expires_at equals issued_at (never cacheable).
    ShortLived,
    /// 201 without a load-balancer endpoint in the catalog.
    NoCatalog,
    /// 401.
    Unauthorized,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Octavia {
    Ok,
    /// Never answers.
    Hang,
    NotFound,
    /// Rejects the next call with 401, then answers normally.
    RejectOnce,
}

struct Fake {
    base: OnceLock<String>,
    keystone: Mutex<Keystone>,
    octavia: Mutex<Octavia>,
    tree: Mutex<Value>,
    keystone_calls: AtomicUsize,
    octavia_calls: AtomicUsize,
    auth_bodies: Mutex<Vec<Value>>,
    issued: Mutex<Vec<String>>,
}

impl Fake {
    fn set_keystone(&self, mode: Keystone) {
        *self.keystone.lock().unwrap() = mode;
    }
    fn set_octavia(&self, mode: Octavia) {
        *self.octavia.lock().unwrap() = mode;
    }
    fn set_tree(&self, tree: Value) {
        *self.tree.lock().unwrap() = tree;
    }
    fn calls(&self) -> (usize, usize) {
        (
            self.keystone_calls.load(Ordering::SeqCst),
            self.octavia_calls.load(Ordering::SeqCst),
        )
    }
    fn base(&self) -> String {
        self.base.get().cloned().unwrap_or_default()
    }
}

async fn tokens(State(fake): State<Arc<Fake>>, body: axum::body::Bytes) -> AxumResponse {
    let n = fake.keystone_calls.fetch_add(1, Ordering::SeqCst);
    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
        fake.auth_bodies.lock().unwrap().push(v);
    }
    let mode = *fake.keystone.lock().unwrap();
    if mode == Keystone::Unauthorized {
        let body = json!({"error": {"code": 401, "title": "Unauthorized",
            "message": "The request you have made requires authentication."}});
        return (AxumStatus::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let mut token = json_fixture("keystone/auth-application-credential-response.json");
    if mode != Keystone::NoCatalog
        && let Some(catalog) = token["token"]["catalog"].as_array_mut()
    {
        catalog.push(
            json!({"type": "load-balancer", "name": "octavia", "id": "lb-service",
            "endpoints": [
                {"interface": "internal", "region_id": "RegionOne", "region": "RegionOne",
                 "url": "http://192.0.2.1:9876", "id": "e1"},
                {"interface": "public", "region_id": "RegionTwo", "region": "RegionTwo",
                 "url": "http://192.0.2.2:9876", "id": "e2"},
                {"interface": "public", "region_id": "RegionOne", "region": "RegionOne",
                 "url": format!("{}/load-balancer/", fake.base()), "id": "e3"}]}),
        );
    }
    if mode == Keystone::ShortLived {
        token["token"]["expires_at"] = token["token"]["issued_at"].clone();
    }
    let value = format!("gAAAAABfake-token-{n}");
    fake.issued.lock().unwrap().push(value.clone());
    (
        AxumStatus::CREATED,
        [("x-subject-token", value)],
        axum::Json(token),
    )
        .into_response()
}

async fn lb_status(
    State(fake): State<Arc<Fake>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> AxumResponse {
    fake.octavia_calls.fetch_add(1, Ordering::SeqCst);
    let mode = *fake.octavia.lock().unwrap();
    let token = headers
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if mode == Octavia::Hang {
        std::future::pending::<()>().await;
    }
    if mode == Octavia::RejectOnce {
        fake.set_octavia(Octavia::Ok);
        return AxumStatus::UNAUTHORIZED.into_response();
    }
    if !fake.issued.lock().unwrap().contains(&token) {
        return AxumStatus::UNAUTHORIZED.into_response();
    }
    if mode == Octavia::NotFound || id != LB_ID {
        let body = json!({"faultcode": "Client", "faultstring": format!("Load Balancer {id} could not be found."), "debuginfo": null});
        return (AxumStatus::NOT_FOUND, axum::Json(body)).into_response();
    }
    axum::Json(fake.tree.lock().unwrap().clone()).into_response()
}

fn fake_router(fake: Arc<Fake>) -> Router {
    Router::new()
        .route("/identity/v3/auth/tokens", post(tokens))
        .route(
            "/load-balancer/v2/lbaas/loadbalancers/{id}/status",
            get(lb_status),
        )
        .with_state(fake)
}

fn new_fake() -> Arc<Fake> {
    Arc::new(Fake {
        base: OnceLock::new(),
        keystone: Mutex::new(Keystone::Ok),
        octavia: Mutex::new(Octavia::Ok),
        tree: Mutex::new(healthy()),
        keystone_calls: AtomicUsize::new(0),
        octavia_calls: AtomicUsize::new(0),
        auth_bodies: Mutex::new(Vec::new()),
        issued: Mutex::new(Vec::new()),
    })
}

/// A fake OpenStack over plain HTTP.
async fn fake_openstack() -> Arc<Fake> {
    let fake = new_fake();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _ = fake.base.set(format!("http://{addr}"));
    let router = fake_router(Arc::clone(&fake));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    fake
}

/// A fake OpenStack over HTTPS with a certificate from `ca`.
async fn fake_openstack_tls(ca: &common::Ca) -> Arc<Fake> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tower::ServiceExt as _;

    let fake = new_fake();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _ = fake.base.set(format!("https://{addr}"));
    let leaf = ca.server_leaf();
    let chain = CertificateDer::pem_slice_iter(leaf.chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let router = fake_router(Arc::clone(&fake));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req| router.clone().oneshot(req));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    fake
}

// ------------------------------------------------------------------------------------------
// Kubernetes API mock (tower-test, as in kube-rs's mock tests)

struct KubeMock {
    client: kube::Client,
    paths: Arc<Mutex<Vec<String>>>,
}

impl KubeMock {
    fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }
}

/// Answers GETs from `objects` (path → JSON; a `Status` object is answered with its `code`),
/// 404 for anything else; with `hang`, never answers at all.
fn kube_mock(objects: Vec<(String, Value)>, hang: bool) -> KubeMock {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let objects: HashMap<String, Value> = objects.into_iter().collect();
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&paths);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            assert_eq!(request.method(), http::Method::GET, "the guard only reads");
            let path = request.uri().path().to_owned();
            seen.lock().unwrap().push(path.clone());
            if hang {
                held.push(send);
                continue;
            }
            let (status, body) = match objects.get(&path) {
                Some(object) if object["kind"] == "Status" => (
                    u16::try_from(object["code"].as_u64().unwrap()).unwrap(),
                    object.clone(),
                ),
                Some(object) => (200, object.clone()),
                None => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": format!("{path} not found"),
                        "reason": "NotFound", "code": 404}),
                ),
            };
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap();
            send.send_response(response);
        }
    });
    KubeMock {
        client: kube::Client::new(service, "default"),
        paths,
    }
}

fn cluster_path(version: &str) -> String {
    format!("/apis/cluster.x-k8s.io/{version}/namespaces/{NS}/clusters/cluster-a")
}

fn osc_path(version: &str) -> String {
    format!(
        "/apis/infrastructure.cluster.x-k8s.io/{version}/namespaces/{NS}/openstackclusters/cluster-a"
    )
}

fn secret_path() -> String {
    format!("/api/v1/namespaces/{NS}/secrets/{SECRET}")
}

/// The list of the cluster's Machines (the guard asks with the control-plane selector).
fn machines_path(version: &str) -> String {
    format!("/apis/cluster.x-k8s.io/{version}/namespaces/{NS}/machines")
}

fn machine_path(version: &str, name: &str) -> String {
    format!("{}/{name}", machines_path(version))
}

/// The captured control-plane Machine (the DELETE's oldObject) renamed to `name`, its
/// OpenStackMachine too; `deleting` sets a deletionTimestamp.
fn cp_machine(name: &str, deleting: bool) -> Value {
    let mut m = review(CP_DELETE)["request"]["oldObject"].clone();
    m["metadata"]["name"] = json!(name);
    m["spec"]["infrastructureRef"]["name"] = json!(name);
    if deleting {
        m["metadata"]["deletionTimestamp"] = json!("2026-11-25T19:00:00Z");
    }
    m
}

fn machine_list(version: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "MachineList",
        "metadata": {"resourceVersion": "42"}, "items": items})
}

/// The three control-plane Machines of the cluster, none being deleted yet.
fn three_machines(version: &str) -> Value {
    machine_list(
        version,
        [DELETED, PEER, NEWCOMER]
            .iter()
            .map(|n| cp_machine(n, false))
            .collect(),
    )
}

/// The captured DELETE of control-plane Machine `name` (one of the three).
fn delete_of(name: &str) -> Value {
    let mut r = review(CP_DELETE);
    r["request"]["name"] = json!(name);
    r["request"]["uid"] = json!(format!("uid-{name}"));
    r["request"]["oldObject"] = cp_machine(name, false);
    r
}

/// The v1beta1 world: Cluster and OpenStackCluster at v1beta1, app-credential clouds.yaml.
fn v1beta1_objects(fake: &Fake) -> Vec<(String, Value)> {
    vec![
        (cluster_path("v1beta1"), cluster_v1beta1()),
        (osc_path("v1beta1"), osc_v1beta1()),
        (machines_path("v1beta1"), three_machines("v1beta1")),
        (
            secret_path(),
            secret(&app_credential_clouds(&fake.base()), None),
        ),
    ]
}

fn config(timeout: Duration, ttl: Duration) -> GuardConfig {
    GuardConfig {
        openstack_timeout: timeout,
        octavia_cache_ttl: ttl,
        system_roots: false,
    }
}

fn guard(kube: &KubeMock, timeout: Duration, ttl: Duration) -> Guard {
    Guard::new(kube.client.clone(), config(timeout, ttl))
}

fn in_5s() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn observed(facts: &GuardFacts) -> &stackgate::rules::lb_guard::LoadBalancerStatus {
    match facts {
        GuardFacts::Observed(o) => &o.load_balancer,
        other => panic!("expected Observed, got {other:?}"),
    }
}

fn unavailable(facts: &GuardFacts) -> &str {
    match facts {
        GuardFacts::Unavailable { reason } => {
            assert!(!reason.contains(CANARY), "credential in {reason}");
            reason
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().unwrap())
}

// ------------------------------------------------------------------------------------------
// Gathering

#[tokio::test]
async fn v1beta1_application_credential_pending_member_is_denied() {
    common::setup();
    let fake = fake_openstack().await;
    fake.set_tree(pending());
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let guard = guard(&kube, Duration::from_secs(2), Duration::from_secs(5));
    let review = review(CP_DELETE);
    let facts = guard.gather(&machine(&review), in_5s()).await;
    let lb = observed(&facts);
    assert_eq!(lb.id, LB_ID);
    assert_eq!(lb.pools[0].members.len(), 3);
    assert_eq!(
        kube.paths(),
        [
            cluster_path("v1beta1"),
            osc_path("v1beta1"),
            machines_path("v1beta1"),
            secret_path()
        ]
    );
    // The Keystone request is the documented application-credential body.
    let auth = fake.auth_bodies.lock().unwrap()[0].clone();
    assert_eq!(
        auth["auth"]["identity"]["methods"],
        json!(["application_credential"])
    );
    assert_eq!(
        auth["auth"]["identity"]["application_credential"],
        json!({"id": "3e1f0a2b", "secret": CANARY})
    );
    let verdict = engine().evaluate_with(
        &stackgate::admission::subject_of(&request(&review)),
        &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts),
    );
    assert_eq!(verdict.denials.len(), 1, "{verdict:#?}");
    assert!(verdict.denials[0].denial_text().contains("PENDING_CREATE"));
    assert!(!common::logs().contains(CANARY));
}

/// Gathers the facts for the captured control-plane DELETE from a fake Octavia serving
/// `tree` and evaluates them with the embedded policies.
async fn decide(tree: Value) -> (GuardFacts, stackgate::engine::Verdict) {
    let fake = fake_openstack().await;
    fake.set_tree(tree);
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let guard = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let review = review(CP_DELETE);
    let facts = guard.gather(&machine(&review), in_5s()).await;
    observed(&facts);
    assert_eq!(fake.calls(), (1, 1));
    let verdict = engine().evaluate_with(
        &stackgate::admission::subject_of(&request(&review)),
        &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts.clone()),
    );
    (facts, verdict)
}

fn denial(verdict: &stackgate::engine::Verdict) -> String {
    assert_eq!(verdict.denials.len(), 1, "{verdict:#?}");
    let message = verdict.denials[0].denial_text();
    assert!(
        message.starts_with(
            "Refusing to delete control-plane Machine cluster-a/cluster-a-control-plane-b2m4d of Cluster cluster-a"
        ) && message.contains(LB_NAME)
            && message.contains("#2763"),
        "{message}"
    );
    message
}

#[tokio::test]
async fn a_member_in_error_is_denied() {
    let (facts, verdict) = decide(errored()).await;
    let states: Vec<_> = observed(&facts).pools[0]
        .members
        .iter()
        .map(|m| m.provisioning_status.as_str())
        .collect();
    assert_eq!(states, ["ACTIVE", "ACTIVE", "ERROR"]);
    let message = denial(&verdict);
    assert!(
        message.contains(&format!(
            "member {LB_NAME}-6443-{NEWCOMER} (10.6.0.13:6443) is provisioning_status=ERROR, \
             operating_status=OFFLINE"
        )),
        "{message}"
    );
    // The healthy members are not blamed.
    assert!(!message.contains(PEER), "{message}");
}

#[tokio::test]
async fn deleting_the_last_online_member_is_denied() {
    let (_, verdict) = decide(last_online()).await;
    let message = denial(&verdict);
    assert!(
        message.contains(&format!(
            "pool {LB_NAME}-6443: this Machine's member is the last one serving \
             (operating_status ONLINE); no member would be left: \
             member {LB_NAME}-6443-{DELETED} (10.6.0.11:6443) is provisioning_status=ACTIVE, \
             operating_status=ONLINE; member {LB_NAME}-6443-{PEER} (10.6.0.12:6443) is \
             provisioning_status=ACTIVE, operating_status=ERROR; member \
             {LB_NAME}-6443-{NEWCOMER} (10.6.0.13:6443) is provisioning_status=ACTIVE, \
             operating_status=OFFLINE"
        )),
        "{message}"
    );
    // Same facts without a health monitor: NO_MONITOR counts as serving, and the last one
    // is still the deleted Machine's.
    let (_, verdict) = decide(without_monitor(last_online())).await;
    let message = denial(&verdict);
    assert!(
        message.contains("last one serving (operating_status ONLINE or NO_MONITOR)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_deletion_that_changes_nothing_serving_is_admitted() {
    // The deleted Machine's member is already gone and nothing else is serving: the API is
    // down already, and this deletion (a remediation, say) cannot make it worse. Refusing it
    // would block the repair for good.
    let (_, verdict) = decide(status_tree(&[
        (PEER, "10.6.0.12", "ACTIVE", "ERROR"),
        (NEWCOMER, "10.6.0.13", "ACTIVE", "OFFLINE"),
    ]))
    .await;
    assert!(verdict.denials.is_empty(), "{verdict:#?}");
}

#[tokio::test]
async fn healthy_without_the_deleted_member_is_admitted() {
    for (case, tree) in [
        ("all healthy", all_healthy()),
        ("own member already removed", already_removed()),
        ("no health monitor", without_monitor(all_healthy())),
    ] {
        let (_, verdict) = decide(tree).await;
        assert!(
            verdict.denials.is_empty() && verdict.warnings.is_empty(),
            "{case}: {verdict:#?}"
        );
    }
}

#[tokio::test]
async fn v1beta2_password_healthy_is_observed_and_admitted() {
    let fake = fake_openstack().await;
    let kube = kube_mock(
        vec![
            (cluster_path("v1beta2"), cluster_v1beta2()),
            (osc_path("v1beta2"), osc_v1beta2()),
            (machines_path("v1beta2"), three_machines("v1beta2")),
            (secret_path(), secret(&password_clouds(&fake.base()), None)),
        ],
        false,
    );
    let guard = guard(&kube, Duration::from_secs(2), Duration::from_secs(5));
    let review = as_v1beta2(review(CP_DELETE));
    let facts = guard.gather(&machine(&review), in_5s()).await;
    observed(&facts);
    // The v1beta2 Cluster names its infrastructure by apiGroup only: v1beta2 is tried first.
    assert_eq!(
        kube.paths(),
        [
            cluster_path("v1beta2"),
            osc_path("v1beta2"),
            machines_path("v1beta2"),
            secret_path()
        ]
    );
    let auth = fake.auth_bodies.lock().unwrap()[0].clone();
    assert_eq!(auth["auth"]["identity"]["methods"], json!(["password"]));
    assert_eq!(
        auth["auth"]["identity"]["password"]["user"],
        json!({"name": "capo", "domain": {"name": "Default"}, "password": CANARY})
    );
    assert_eq!(
        auth["auth"]["scope"]["project"],
        json!({"name": "demo", "domain": {"name": "Default"}})
    );
    let verdict = engine().evaluate_with(
        &stackgate::admission::subject_of(&request(&review)),
        &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts),
    );
    assert!(
        verdict.denials.is_empty() && verdict.warnings.is_empty(),
        "{verdict:#?}"
    );
}

#[tokio::test]
async fn a_v1beta1_reference_falls_back_to_the_served_version() {
    // After a CAPO upgrade that stopped serving v1beta1, the v1beta1 reference still works.
    let fake = fake_openstack().await;
    let kube = kube_mock(
        vec![
            (cluster_path("v1beta1"), cluster_v1beta1()),
            (osc_path("v1beta2"), osc_v1beta2()),
            (machines_path("v1beta1"), three_machines("v1beta1")),
            (
                secret_path(),
                secret(&app_credential_clouds(&fake.base()), None),
            ),
        ],
        false,
    );
    let guard = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    observed(&guard.gather(&machine(&review(CP_DELETE)), in_5s()).await);
    assert_eq!(
        kube.paths(),
        [
            cluster_path("v1beta1"),
            osc_path("v1beta1"),
            osc_path("v1beta2"),
            machines_path("v1beta1"),
            secret_path()
        ]
    );
}

#[tokio::test]
async fn tokens_and_status_trees_are_cached() {
    let fake = fake_openstack().await;
    let m = machine(&review(CP_DELETE));
    // Status cache on: one Keystone call for two reviews; Octavia is asked each time, because
    // the cached tree would admit (only a refusal may come from the cache).
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let cached = guard(&kube, Duration::from_secs(2), Duration::from_secs(60));
    observed(&cached.gather(&m, in_5s()).await);
    observed(&cached.gather(&m, in_5s()).await);
    assert_eq!(fake.calls(), (1, 2));
    // Status cache off: the token is still reused (Keystone's clock: 1 h lifetime, although
    // the api-ref token "expired" in 2018).
    let uncached = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    for _ in 0..3 {
        observed(&uncached.gather(&m, in_5s()).await);
    }
    assert_eq!(fake.calls(), (2, 5));
    // A token that lives for no time is never cached.
    fake.set_keystone(Keystone::ShortLived);
    let short = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    observed(&short.gather(&m, in_5s()).await);
    observed(&short.gather(&m, in_5s()).await);
    assert_eq!(fake.calls(), (4, 7));
    let metrics = {
        let mut m = Metrics::new();
        short.metrics().register(m.registry_mut());
        m.encode()
    };
    assert_eq!(
        common::metric(
            &metrics,
            "stackgate_lb_guard_cache_lookups_total{cache=\"token\",result=\"miss\"}"
        ),
        2.0
    );
}

#[tokio::test]
async fn a_rejected_cached_token_is_renewed_once() {
    let fake = fake_openstack().await;
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let guard = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let m = machine(&review(CP_DELETE));
    observed(&guard.gather(&m, in_5s()).await);
    fake.set_octavia(Octavia::RejectOnce);
    observed(&guard.gather(&m, in_5s()).await);
    assert_eq!(fake.calls(), (2, 3));
}

#[tokio::test]
async fn octavia_that_never_answers_is_cut_at_the_call_timeout() {
    let fake = fake_openstack().await;
    fake.set_octavia(Octavia::Hang);
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let timeout = Duration::from_millis(300);
    let guard = guard(&kube, timeout, Duration::from_secs(5));
    let started = Instant::now();
    let facts = guard.gather(&machine(&review(CP_DELETE)), in_5s()).await;
    assert!(
        started.elapsed() < timeout * 2 + SLACK,
        "{:?}",
        started.elapsed()
    );
    let reason = unavailable(&facts);
    assert!(
        reason.contains("Octavia did not answer within 300 ms"),
        "{reason}"
    );
    let mut metrics = Metrics::new();
    guard.metrics().register(metrics.registry_mut());
    let text = metrics.encode();
    assert_eq!(
        common::metric(
            &text,
            "stackgate_openstack_request_errors_total{service=\"load-balancer\",reason=\"timeout\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        common::metric(
            &text,
            "stackgate_lb_guard_unavailable_total{reason=\"octavia_timeout\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn the_request_deadline_bounds_every_call() {
    let fake = fake_openstack().await;
    fake.set_octavia(Octavia::Hang);
    let kube = kube_mock(v1beta1_objects(&fake), false);
    // The per-call timeout is far away: the request's deadline decides.
    let guard = guard(&kube, Duration::from_secs(30), Duration::from_secs(5));
    let budget = Duration::from_millis(500);
    let deadline = Instant::now() + budget;
    let facts = guard.gather(&machine(&review(CP_DELETE)), deadline).await;
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(late < SLACK, "returned {late:?} after the deadline");
    let reason = unavailable(&facts);
    assert!(reason.contains("Octavia did not answer within"), "{reason}");
}

#[tokio::test]
async fn a_kubernetes_api_that_never_answers_is_cut_at_the_deadline() {
    let kube = kube_mock(vec![], true);
    let guard = guard(&kube, Duration::from_secs(30), Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_millis(300);
    let facts = guard.gather(&machine(&review(CP_DELETE)), deadline).await;
    assert!(Instant::now().saturating_duration_since(deadline) < SLACK);
    let reason = unavailable(&facts);
    assert!(
        reason.contains("reading Cluster cluster-a/cluster-a") && reason.contains("deadline"),
        "{reason}"
    );
}

#[tokio::test]
async fn keystone_refusing_the_credentials_is_unavailable_without_leaking_them() {
    common::setup();
    let fake = fake_openstack().await;
    fake.set_keystone(Keystone::Unauthorized);
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let guard = guard(&kube, Duration::from_secs(2), Duration::from_secs(5));
    let facts = guard.gather(&machine(&review(CP_DELETE)), in_5s()).await;
    let reason = unavailable(&facts);
    assert!(
        reason.contains("Keystone at http://127.0.0.1:")
            && reason.contains("/identity/v3/auth/tokens answered HTTP 401")
            && reason.contains("check the credentials"),
        "{reason}"
    );
    assert!(!format!("{facts:?}").contains(CANARY));
    assert!(!common::logs().contains(CANARY));
}

#[tokio::test]
async fn what_is_not_guarded() {
    let fake = fake_openstack().await;
    let m = machine(&review(CP_DELETE));
    let not_applicable = |facts: GuardFacts, needle: &str| match facts {
        GuardFacts::NotApplicable { reason } => assert!(reason.contains(needle), "{reason}"),
        other => panic!("expected NotApplicable ({needle}), got {other:?}"),
    };
    // The Cluster is being deleted (its Machines go with it).
    let mut deleting = cluster_v1beta1();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-22T04:00:00Z");
    let kube = kube_mock(vec![(cluster_path("v1beta1"), deleting)], false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    not_applicable(g.gather(&m, in_5s()).await, "is being deleted");
    // No Cluster at all (or its version not served): unknown, not "nothing to guard".
    let kube = kube_mock(vec![], false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&m, in_5s()).await;
    assert_eq!(
        unavailable(&facts),
        "Cluster cluster-a/cluster-a was not found (at cluster.x-k8s.io/v1beta1)"
    );
    // Another infrastructure provider.
    let mut other = cluster_v1beta1();
    other["spec"]["infrastructureRef"] = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "AWSCluster", "name": "cluster-a"});
    let kube = kube_mock(vec![(cluster_path("v1beta1"), other)], false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    not_applicable(g.gather(&m, in_5s()).await, "not an OpenStackCluster");
    // No API load balancer.
    let mut no_lb = osc_v1beta1();
    no_lb["spec"]["apiServerLoadBalancer"] = json!({"enabled": false});
    no_lb["status"] = json!({"ready": true});
    let kube = kube_mock(
        vec![
            (cluster_path("v1beta1"), cluster_v1beta1()),
            (osc_path("v1beta1"), no_lb),
        ],
        false,
    );
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    not_applicable(g.gather(&m, in_5s()).await, "has no API load balancer");
    assert_eq!(fake.calls(), (0, 0), "OpenStack is not called");
}

#[tokio::test]
async fn missing_facts_are_named() {
    let fake = fake_openstack().await;
    let m = machine(&review(CP_DELETE));
    let base = v1beta1_objects(&fake);
    let with = |path: String, value: Option<Value>| -> Vec<(String, Value)> {
        let mut objects: Vec<_> = base.iter().filter(|(p, _)| *p != path).cloned().collect();
        if let Some(v) = value {
            objects.push((path, v));
        }
        objects
    };
    let gather = |objects: Vec<(String, Value)>| async {
        let kube = kube_mock(objects, false);
        let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
        g.gather(&m, in_5s()).await
    };
    // LB enabled but no id in the status yet.
    let mut no_id = osc_v1beta1();
    no_id["status"] = json!({"ready": false});
    let facts = gather(with(osc_path("v1beta1"), Some(no_id))).await;
    assert!(
        unavailable(&facts).contains("has no load balancer id in status.apiServerLoadBalancer.id")
    );
    // No identity Secret.
    let facts = gather(with(secret_path(), None)).await;
    assert!(
        unavailable(&facts)
            .contains("identity Secret cluster-a/cluster-a-cloud-config was not found")
    );
    // clouds.yaml without the cloud the identityRef names.
    let other_cloud = secret(
        &app_credential_clouds(&fake.base()).replace("  openstack:", "  other:"),
        None,
    );
    let facts = gather(with(secret_path(), Some(other_cloud))).await;
    assert!(unavailable(&facts).contains("no cloud named \"openstack\""));
    // Octavia does not know the load balancer.
    fake.set_octavia(Octavia::NotFound);
    let facts = gather(base.clone()).await;
    assert!(unavailable(&facts).contains("answered HTTP 404 (no such load balancer)"));
    fake.set_octavia(Octavia::Ok);
    // The catalog has no Octavia endpoint.
    fake.set_keystone(Keystone::NoCatalog);
    let facts = gather(base.clone()).await;
    assert!(unavailable(&facts).contains("no public load-balancer endpoint in region RegionOne"));
    // The identityRef names a Secret that could be in another namespace: refused.
    let mut sneaky = osc_v1beta1();
    sneaky["spec"]["identityRef"]["name"] = json!("../../kube-system/secrets/x");
    let facts = gather(with(osc_path("v1beta1"), Some(sneaky))).await;
    assert!(unavailable(&facts).contains("no usable spec.identityRef"));
}

/// The apiserver's answer when the ServiceAccount has no Role in the Secret's namespace
/// (controlPlaneGuard.secretNamespaces does not list it).
fn forbidden_secret() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("secrets \"{SECRET}\" is forbidden: User \"system:serviceaccount:stackgate:stackgate\" \
            cannot get resource \"secrets\" in API group \"\" in the namespace \"{NS}\""),
        "reason": "Forbidden", "details": {"name": SECRET, "kind": "secrets"}, "code": 403})
}

#[tokio::test]
async fn a_secret_namespace_not_granted_is_unknown_and_params_unknown_decides() {
    let fake = fake_openstack().await;
    let mut objects = v1beta1_objects(&fake);
    objects.retain(|(p, _)| *p != secret_path());
    objects.push((secret_path(), forbidden_secret()));
    let kube = kube_mock(objects, false);
    let guard = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let review = review(CP_DELETE);
    let facts = guard.gather(&machine(&review), in_5s()).await;
    let reason = unavailable(&facts).to_owned();
    assert!(
        reason.contains(&format!("{NS}/{SECRET}")) && reason.contains("HTTP 403 Forbidden"),
        "{reason}"
    );
    assert_eq!(fake.calls(), (0, 0), "OpenStack is not called");
    let mut metrics = Metrics::new();
    guard.metrics().register(metrics.registry_mut());
    assert_eq!(
        common::metric(
            &metrics.encode(),
            "stackgate_lb_guard_unavailable_total{reason=\"kube_error\"}"
        ),
        1.0
    );
    let facts = Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts);
    // Default (params.unknown: admit): admitted with a warning that says why.
    let verdict =
        engine().evaluate_with(&stackgate::admission::subject_of(&request(&review)), &facts);
    assert!(verdict.denials.is_empty(), "{verdict:#?}");
    assert_eq!(verdict.warnings.len(), 1, "{verdict:#?}");
    assert!(
        verdict.warnings[0]
            .denial_text()
            .starts_with("Admitted without checking the API load balancer")
            && verdict.warnings[0].denial_text().contains("HTTP 403"),
        "{verdict:#?}"
    );
    // params.unknown: deny refuses.
    let policy = include_str!("../policies/control-plane-lb-guard.yaml");
    assert!(policy.contains("unknown: admit"));
    let deny = PolicySet::from_files(
        vec![(
            "control-plane-lb-guard.yaml".to_owned(),
            policy.replace("unknown: admit", "unknown: deny"),
        )],
        "test".to_owned(),
    )
    .unwrap();
    let verdict = Engine::new(deny)
        .evaluate_with(&stackgate::admission::subject_of(&request(&review)), &facts);
    assert_eq!(verdict.denials.len(), 1, "{verdict:#?}");
    assert!(
        verdict.denials[0]
            .denial_text()
            .contains("params.unknown is deny")
            && verdict.denials[0].denial_text().contains("HTTP 403"),
        "{verdict:#?}"
    );
}

#[tokio::test]
async fn tls_trusts_the_identity_secrets_cacert() {
    let ca = common::Ca::new("fake OpenStack CA");
    let fake = fake_openstack_tls(&ca).await;
    fake.set_tree(pending());
    let with_ca = vec![
        (cluster_path("v1beta1"), cluster_v1beta1()),
        (osc_path("v1beta1"), osc_v1beta1()),
        (machines_path("v1beta1"), three_machines("v1beta1")),
        (
            secret_path(),
            secret(&app_credential_clouds(&fake.base()), Some(&ca.cert_pem)),
        ),
    ];
    let kube = kube_mock(with_ca, false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&machine(&review(CP_DELETE)), in_5s()).await;
    assert_eq!(observed(&facts).pools[0].members.len(), 3);
    // Without the CA the certificate is not trusted.
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&machine(&review(CP_DELETE)), in_5s()).await;
    let reason = unavailable(&facts);
    assert!(
        reason.contains("could not be reached") && reason.to_lowercase().contains("certificate"),
        "{reason}"
    );
}

#[test]
fn only_control_plane_machine_deletes_are_probed() {
    let bytes = |rel: &str| fixture(&format!("captured/{rel}"));
    assert!(probe(&bytes(CP_DELETE)).is_some());
    assert!(probe(&bytes(WORKER_DELETE)).is_none());
    assert!(probe(&bytes("machine/validate-update-cluster-a-control-plane-b2m4d-remove-finalizer-while-deleting.json")).is_none());
    assert!(
        probe(&bytes(
            "configmap/validate-create-cloud-provider-config.json"
        ))
        .is_none()
    );
    let m = probe(&bytes(CP_DELETE)).unwrap();
    assert_eq!(
        (
            m.namespace.as_str(),
            m.name.as_str(),
            m.version.as_str(),
            m.cluster.as_deref()
        ),
        (
            "cluster-a",
            "cluster-a-control-plane-b2m4d",
            "v1beta1",
            Some("cluster-a")
        )
    );
}

// ------------------------------------------------------------------------------------------
// Through the HTTPS server

async fn guarded_server(fake: &Fake, kube: &KubeMock, timeout: Duration) -> common::TestServer {
    let mut metrics = Metrics::new();
    let guard = Arc::new(guard(kube, timeout, Duration::ZERO));
    guard.metrics().register(metrics.registry_mut());
    let _ = fake;
    let state = AppState::new(engine(), metrics)
        .with_fact_source(Arc::new(stackgate::guard::GuardSource::new(guard)));
    common::TestServer::start_with(|_| {}, state).await
}

#[tokio::test]
async fn https_denies_a_pending_member_and_admits_when_healthy() {
    let fake = fake_openstack().await;
    fake.set_tree(pending());
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let server = guarded_server(&fake, &kube, Duration::from_secs(2)).await;
    let client = server.client().await;
    let body = fixture(&format!("captured/{CP_DELETE}"));
    let (status, answer) = common::post(&client, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(answer["response"]["status"]["code"], 403);
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("PENDING_CREATE") && message.contains("#2763"),
        "{message}"
    );

    fake.set_tree(healthy());
    let (_, answer) = common::post(&client, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        answer["response"]
            .get("warnings")
            .is_none_or(Value::is_null)
    );

    // /mutate and other reviews take the normal path: no Kubernetes or OpenStack call.
    let before = (kube.paths().len(), fake.calls());
    let (_, answer) = common::post(&client, "/mutate?timeout=10s", body).await;
    assert_eq!(answer["response"]["allowed"], true);
    let worker = fixture(&format!("captured/{WORKER_DELETE}"));
    let (_, answer) = common::post(&client, "/validate?timeout=10s", worker).await;
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!((kube.paths().len(), fake.calls()), before);

    let metrics = server.metrics().await;
    for (outcome, n) in [("denied", 1.0), ("admitted", 1.0)] {
        let sample = format!("stackgate_lb_guard_decisions_total{{outcome=\"{outcome}\"}}");
        assert_eq!(common::metric(&metrics, &sample), n, "{sample}\n{metrics}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn https_denies_an_errored_member_and_the_last_online_one() {
    let fake = fake_openstack().await;
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let server = guarded_server(&fake, &kube, Duration::from_secs(2)).await;
    let client = server.client().await;
    let body = fixture(&format!("captured/{CP_DELETE}"));
    for (tree, needles) in [
        (errored(), vec!["provisioning_status=ERROR", NEWCOMER]),
        (
            last_online(),
            vec!["this Machine's member is the last one serving"],
        ),
    ] {
        fake.set_tree(tree);
        let (status, answer) = common::post(&client, "/validate?timeout=10s", body.clone()).await;
        assert_eq!(status, http::StatusCode::OK);
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        assert_eq!(answer["response"]["status"]["code"], 403);
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        for needle in needles {
            assert!(message.contains(needle), "{needle}: {message}");
        }
    }
    for tree in [all_healthy(), already_removed()] {
        fake.set_tree(tree);
        let (_, answer) = common::post(&client, "/validate?timeout=10s", body.clone()).await;
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        assert!(
            answer["response"]
                .get("warnings")
                .is_none_or(Value::is_null)
        );
    }
    let metrics = server.metrics().await;
    for (outcome, n) in [("denied", 2.0), ("admitted", 2.0)] {
        let sample = format!("stackgate_lb_guard_decisions_total{{outcome=\"{outcome}\"}}");
        assert_eq!(common::metric(&metrics, &sample), n, "{sample}\n{metrics}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn https_answers_within_the_deadline_when_octavia_hangs() {
    let fake = fake_openstack().await;
    fake.set_octavia(Octavia::Hang);
    let kube = kube_mock(v1beta1_objects(&fake), false);
    // Per-call timeout far away: the apiserver's ?timeout=1s (budget 800 ms) decides.
    let server = guarded_server(&fake, &kube, Duration::from_secs(30)).await;
    let client = server.client().await;
    let body = fixture(&format!("captured/{CP_DELETE}"));
    let started = Instant::now();
    let (status, answer) = common::post(&client, "/validate?timeout=1s", body).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(800) + SLACK,
        "answered after {took:?}"
    );
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let warning = answer["response"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with(
            "stackgate control-plane-lb-guard: Admitted without checking the API load balancer"
        ),
        "{warning}"
    );
    let metrics = server.metrics().await;
    assert_eq!(
        common::metric(
            &metrics,
            "stackgate_lb_guard_decisions_total{outcome=\"unknown_admitted\"}"
        ),
        1.0,
        "{metrics}"
    );
    assert!(!metrics.contains(CANARY));
    server.stop().await.unwrap();
}

// ------------------------------------------------------------------------------------------
// Several control-plane Machines at once

/// POSTs the DELETE reviews of `names` to `/validate` all at once; the answers' `allowed`.
async fn delete_together(
    client: &common::Client,
    names: &[&str],
    dry_run: bool,
) -> Vec<(String, bool, String)> {
    let posts = names.iter().map(|name| {
        let mut review = delete_of(name);
        review["request"]["dryRun"] = json!(dry_run);
        let body = serde_json::to_vec(&review).unwrap();
        async move {
            let (status, answer) = common::post(client, "/validate?timeout=10s", body).await;
            assert_eq!(status, http::StatusCode::OK);
            let message = answer["response"]["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (
                (*name).to_owned(),
                answer["response"]["allowed"] == true,
                message,
            )
        }
    });
    futures::future::join_all(posts).await
}

#[tokio::test]
async fn deleting_every_control_plane_machine_together_admits_only_what_the_lb_can_lose() {
    let fake = fake_openstack().await;
    fake.set_tree(all_healthy());
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let server = guarded_server(&fake, &kube, Duration::from_secs(2)).await;
    let client = server.client().await;
    let all = [DELETED, PEER, NEWCOMER];
    // Dry runs (kubectl delete --dry-run=server) are judged but never count: all three pass,
    // and they leave nothing behind for the real deletions below.
    let answers = delete_together(&client, &all, true).await;
    assert!(
        answers.iter().all(|(_, allowed, _)| *allowed),
        "{answers:#?}"
    );
    // `kubectl delete machines -l cluster.x-k8s.io/control-plane`: three DELETE reviews at
    // once, every member ONLINE in Octavia, no deletionTimestamp set yet. One member must stay.
    let answers = delete_together(&client, &all, false).await;
    let admitted: Vec<&str> = answers
        .iter()
        .filter(|(_, allowed, _)| *allowed)
        .map(|(n, _, _)| n.as_str())
        .collect();
    assert_eq!(admitted.len(), 2, "{answers:#?}");
    let (refused, _, message) = answers.iter().find(|(_, allowed, _)| !allowed).unwrap();
    assert!(
        message.contains(&format!(
            "Refusing to delete control-plane Machine {NS}/{refused}"
        )) && message.contains("this Machine's member is the last one serving")
            && message.contains("already being deleted are gone")
            // The ledger keeps digests: Machines known from it are counted, never named.
            && message.contains("(2 whose deletion this replica admitted moments ago)"),
        "{message}"
    );
    // Cluster API retrying the refused one a moment later: still refused (the two admitted
    // deletions are remembered), and a denied review does not count against the others.
    let answers = delete_together(&client, &[refused.as_str()], false).await;
    assert!(!answers[0].1, "{answers:#?}");
    let metrics = server.metrics().await;
    assert_eq!(
        common::metric(
            &metrics,
            "stackgate_lb_guard_decisions_total{outcome=\"denied\"}"
        ),
        2.0,
        "{metrics}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn machines_already_being_deleted_do_not_count_as_serving() {
    let fake = fake_openstack().await;
    fake.set_tree(all_healthy());
    let review = review(CP_DELETE);
    // Another replica admitted the other two deletions: the API shows their deletionTimestamp
    // while Octavia still reports their members ONLINE.
    let mut objects = v1beta1_objects(&fake);
    objects.retain(|(p, _)| *p != machines_path("v1beta1"));
    let mut kube_objects = objects.clone();
    kube_objects.push((
        machines_path("v1beta1"),
        machine_list(
            "v1beta1",
            vec![
                cp_machine(DELETED, false),
                cp_machine(PEER, true),
                cp_machine(NEWCOMER, true),
            ],
        ),
    ));
    let kube = kube_mock(kube_objects, false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&machine(&review), in_5s()).await;
    let GuardFacts::Observed(o) = &facts else {
        panic!("{facts:?}")
    };
    let leaving: Vec<_> = o
        .leaving
        .iter()
        .map(|l| l.name.as_ref().map(|n| n.as_str()))
        .collect();
    assert_eq!(leaving, [Some(PEER), Some(NEWCOMER)]);
    let verdict = engine().evaluate_with(
        &stackgate::admission::subject_of(&request(&review)),
        &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts),
    );
    let message = denial(&verdict);
    assert!(
        message.contains(&format!(
            "already being deleted are gone ({PEER}, {NEWCOMER})"
        )),
        "{message}"
    );
    // One of them being deleted: one serving member stays, admitted.
    let mut kube_objects = objects;
    kube_objects.push((
        machines_path("v1beta1"),
        machine_list(
            "v1beta1",
            vec![
                cp_machine(DELETED, true),
                cp_machine(PEER, true),
                cp_machine(NEWCOMER, false),
            ],
        ),
    ));
    let kube = kube_mock(kube_objects, false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&machine(&review), in_5s()).await;
    let verdict = engine().evaluate_with(
        &stackgate::admission::subject_of(&request(&review)),
        &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts),
    );
    assert!(verdict.denials.is_empty(), "{verdict:#?}");
}

#[tokio::test]
async fn a_cached_status_tree_never_admits() {
    let fake = fake_openstack().await;
    fake.set_tree(all_healthy());
    let kube = kube_mock(v1beta1_objects(&fake), false);
    let g = guard(&kube, Duration::from_secs(2), Duration::from_secs(60));
    let review = review(CP_DELETE);
    let decide = |facts: GuardFacts| {
        engine().evaluate_with(
            &stackgate::admission::subject_of(&request(&review)),
            &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts),
        )
    };
    let m = machine(&review);
    assert!(decide(g.gather(&m, in_5s()).await).denials.is_empty());
    assert_eq!(fake.calls(), (1, 1));
    // Right after that cached read a peer's member goes PENDING_UPDATE: the next review
    // must not be admitted from the cached (healthy) tree.
    fake.set_tree(status_tree(&[
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (PEER, "10.6.0.12", "PENDING_UPDATE", "ONLINE"),
        (NEWCOMER, "10.6.0.13", "ACTIVE", "ONLINE"),
    ]));
    let verdict = decide(g.gather(&m, in_5s()).await);
    assert!(denial(&verdict).contains("PENDING_UPDATE"));
    assert_eq!(fake.calls(), (1, 2), "read again");
    // A cached tree that refuses is reused: the retry storm of a refused rollout costs no
    // Octavia call until the cache entry expires.
    let verdict = decide(g.gather(&m, in_5s()).await);
    assert!(denial(&verdict).contains("PENDING_UPDATE"));
    assert_eq!(fake.calls(), (1, 2), "served from the cache");
}

// ------------------------------------------------------------------------------------------
// DELETE without oldObject, ClusterIdentity, clouds.yaml values

#[tokio::test]
async fn a_delete_without_old_object_reads_the_machine() {
    let fake = fake_openstack().await;
    fake.set_tree(pending());
    let mut bare = review(CP_DELETE);
    bare["request"]["oldObject"] = Value::Null;
    let m = machine(&bare);
    assert_eq!((m.machine.as_ref(), m.cluster.as_deref()), (None, None));
    let mut objects = v1beta1_objects(&fake);
    objects.push((machine_path("v1beta1", DELETED), cp_machine(DELETED, false)));
    let kube = kube_mock(objects.clone(), false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&m, in_5s()).await;
    assert_eq!(kube.paths()[0], machine_path("v1beta1", DELETED));
    let verdict = engine().evaluate_with(
        &stackgate::admission::subject_of(&request(&bare)),
        &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts),
    );
    let message = &verdict.denials[0].denial_text();
    assert!(
        message.starts_with(&format!("Refusing to delete Machine {NS}/{DELETED}"))
            && message.contains("PENDING_CREATE"),
        "{message}"
    );
    // The Machine cannot be read: unknown, and params.unknown decides (deny refuses).
    let objects: Vec<_> = objects
        .into_iter()
        .filter(|(p, _)| *p != machine_path("v1beta1", DELETED))
        .collect();
    let kube = kube_mock(objects, false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&m, in_5s()).await;
    assert_eq!(
        unavailable(&facts),
        format!(
            "the DELETE review carries no oldObject and Machine {NS}/{DELETED} was not found \
             (at cluster.x-k8s.io/v1beta1)"
        )
    );
    let policy = include_str!("../policies/control-plane-lb-guard.yaml");
    let deny = PolicySet::from_files(
        vec![(
            "control-plane-lb-guard.yaml".to_owned(),
            policy.replace("unknown: admit", "unknown: deny"),
        )],
        "test".to_owned(),
    )
    .unwrap();
    let verdict = Engine::new(deny).evaluate_with(
        &stackgate::admission::subject_of(&request(&bare)),
        &Facts::of(stackgate::rules::lb_guard::FAMILY.id, facts),
    );
    assert!(
        verdict.denials[0]
            .denial_text()
            .contains("params.unknown is deny"),
        "{verdict:#?}"
    );
    // A worker Machine read from the API: nothing to guard.
    let mut worker = review(WORKER_DELETE)["request"]["oldObject"].clone();
    worker["metadata"]["name"] = json!(DELETED);
    let kube = kube_mock(vec![(machine_path("v1beta1", DELETED), worker)], false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    assert!(matches!(
        g.gather(&m, in_5s()).await,
        GuardFacts::NotApplicable { .. }
    ));
}

const IDENTITY_NS: &str = "capo-identities";

fn cluster_identity(selector: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "OpenStackClusterIdentity",
        "metadata": {"name": "shared-openstack", "uid": "uid-identity"},
        "spec": {"secretRef": {"name": "openstack-creds", "namespace": IDENTITY_NS},
                 "namespaceSelector": selector}})
}

#[tokio::test]
async fn a_cluster_identity_reads_its_secret_where_it_says() {
    let fake = fake_openstack().await;
    let mut osc = osc_v1beta2();
    osc["spec"]["identityRef"] =
        json!({"type": "ClusterIdentity", "name": "shared-openstack", "cloudName": "openstack"});
    let identity_path = "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/openstackclusteridentities/shared-openstack";
    let namespace_path = format!("/api/v1/namespaces/{NS}");
    let secret_at = format!("/api/v1/namespaces/{IDENTITY_NS}/secrets/openstack-creds");
    let objects = |tenant: &str| {
        vec![
            (cluster_path("v1beta2"), cluster_v1beta2()),
            (osc_path("v1beta2"), osc.clone()),
            (machines_path("v1beta2"), three_machines("v1beta2")),
            (
                identity_path.to_owned(),
                cluster_identity(json!({"matchLabels": {"openstack.example/tenant": "a"}})),
            ),
            (
                namespace_path.clone(),
                json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": NS, "labels": {"openstack.example/tenant": tenant}}}),
            ),
            (
                secret_at.clone(),
                secret(&app_credential_clouds(&fake.base()), None),
            ),
        ]
    };
    let kube = kube_mock(objects("a"), false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let review = as_v1beta2(review(CP_DELETE));
    observed(&g.gather(&machine(&review), in_5s()).await);
    assert_eq!(
        kube.paths(),
        [
            cluster_path("v1beta2"),
            osc_path("v1beta2"),
            machines_path("v1beta2"),
            identity_path.to_owned(),
            namespace_path.clone(),
            secret_at.clone()
        ]
    );
    // A namespace the identity's namespaceSelector does not select may not use it (CAPO
    // refuses it too): unknown, and OpenStack is never called with those credentials.
    let calls = fake.calls();
    let kube = kube_mock(objects("b"), false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&machine(&review), in_5s()).await;
    assert_eq!(
        unavailable(&facts),
        format!(
            "OpenStackClusterIdentity shared-openstack may not be used from namespace {NS} \
             (its namespaceSelector does not select it)"
        )
    );
    assert_eq!(fake.calls(), calls);
    // The identity itself refused (no RBAC for it): named without a namespace.
    let mut objects = objects("a");
    objects.retain(|(p, _)| p != identity_path);
    objects.push((
        identity_path.to_owned(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "forbidden", "reason": "Forbidden", "code": 403}),
    ));
    let kube = kube_mock(objects, false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&machine(&review), in_5s()).await;
    assert!(
        unavailable(&facts).starts_with(
            "reading OpenStackClusterIdentity shared-openstack from the Kubernetes API failed: HTTP 403"
        ),
        "{facts:?}"
    );
}

#[tokio::test]
async fn clouds_yaml_values_reach_keystone_as_capo_reads_them_and_url_credentials_never_show() {
    common::setup();
    let fake = fake_openstack().await;
    let base = fake.base();
    let with_userinfo = base.replace("http://", &format!("http://admin:{CANARY}@"));
    let clouds = format!(
        "clouds:\n  openstack:\n    auth:\n      auth_url: {with_userinfo}/identity/v3\n      \
         username: \"0123\"\n      password: ' {CANARY} 1e3 '\n      project_id: 0x1F\n      \
         user_domain_name: yes\n    region_name: RegionOne\n"
    );
    let mut objects = v1beta1_objects(&fake);
    objects.retain(|(p, _)| *p != secret_path());
    objects.push((secret_path(), secret(&clouds, None)));
    let kube = kube_mock(objects, false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let m = machine(&review(CP_DELETE));
    observed(&g.gather(&m, in_5s()).await);
    let auth = fake.auth_bodies.lock().unwrap()[0].clone();
    assert_eq!(
        auth["auth"]["identity"]["password"]["user"],
        json!({"name": "0123", "domain": {"name": "true"}, "password": format!(" {CANARY} 1e3 ")}),
        "quoted values exactly; plain ones as sigs.k8s.io/yaml turns them into strings"
    );
    assert_eq!(auth["auth"]["scope"]["project"], json!({"id": "31"}));
    // Keystone refusing: the reason names the URL without the credential in it.
    fake.set_keystone(Keystone::Unauthorized);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&m, in_5s()).await;
    let reason = unavailable(&facts);
    assert!(
        reason.starts_with(&format!(
            "Keystone at {base}/identity/v3/auth/tokens answered HTTP 401"
        )),
        "{reason}"
    );
    // An auth_url that is no URL at all is named masked.
    fake.set_keystone(Keystone::Ok);
    let broken = clouds.replace(
        &format!("{with_userinfo}/identity/v3"),
        &format!("admin:{CANARY}@nowhere"),
    );
    let mut objects = v1beta1_objects(&fake);
    objects.retain(|(p, _)| *p != secret_path());
    objects.push((secret_path(), secret(&broken, None)));
    let kube = kube_mock(objects, false);
    let g = guard(&kube, Duration::from_secs(2), Duration::ZERO);
    let facts = g.gather(&m, in_5s()).await;
    assert!(unavailable(&facts).contains("is not a valid http(s) URL"));
    assert!(!common::logs().contains(CANARY), "credential in the logs");
}
