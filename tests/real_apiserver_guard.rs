//! The control-plane guard through a real kube-apiserver: `kubectl delete machines -l
//! cluster.x-k8s.io/control-plane` (one DELETE per Machine, in turn) on a three-node control
//! plane with a healthy API load balancer must leave one Machine standing.
//!
//! Needs `KUBE_APISERVER_BIN` and `ETCD_BIN` (a kube-apiserver ≥ 1.30 and an etcd 3.4+);
//! without them the test prints why and passes. It is never the only test of this behaviour:
//! `tests/guard_openstack.rs` (`deleting_every_control_plane_machine_together_admits_only_what_the_lb_can_lose`,
//! `machines_already_being_deleted_do_not_count_as_serving`) covers it with fakes.
//!
//! What runs: etcd and kube-apiserver as child processes on free loopback ports (own temporary
//! directory, token auth with a `system:masters` token, no controllers), the `stackgate` binary
//! as a child (`serve --lb-guard on`, reading the apiserver through a kubeconfig), and a fake
//! Keystone + Octavia in this process answering with the shapes of `tests/fixtures/keystone`
//! and `tests/fixtures/octavia`. CRDs are minimal, schema-less stand-ins for CAPI's Machine and
//! Cluster and CAPO's OpenStackCluster; the Machines carry CAPI's finalizer, so a deleted
//! Machine stays with a `deletionTimestamp`, as with a running Cluster API.

mod common;
#[path = "support/real_apiserver.rs"]
mod real_apiserver;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode as AxumStatus;
use axum::response::{IntoResponse, Response as AxumResponse};
use axum::routing::{get, post};
use base64::Engine as _;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::time::Instant;

use real_apiserver::{START_DEADLINE, binaries, start_apiserver, start_stackgate};

const NS: &str = "cluster-a";
const LB_ID: &str = "a7f7b5c4-1e0d-4b8e-9c3f-6d2e1f0a9b87";
const LB_NAME: &str = "k8s-clusterapi-cluster-cluster-a-cluster-a-kubeapi";
const MACHINES: [&str; 3] = [
    "cluster-a-control-plane-m0",
    "cluster-a-control-plane-m1",
    "cluster-a-control-plane-m2",
];
/// How long a new webhook configuration may take to reach the apiserver's admission chain.
const WEBHOOK_DEADLINE: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------------------------------
// Fake Keystone + Octavia (shapes from tests/fixtures, as in tests/guard_openstack.rs)

struct Fake {
    base: String,
    octavia_calls: AtomicUsize,
}

fn fixture(rel: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

async fn tokens(State(fake): State<Arc<Fake>>) -> AxumResponse {
    let mut token = fixture("keystone/auth-application-credential-response.json");
    token["token"]["catalog"].as_array_mut().unwrap().push(
        json!({"type": "load-balancer", "name": "octavia", "id": "lb-service",
            "endpoints": [{"interface": "public", "region_id": "RegionOne", "region": "RegionOne",
                "url": format!("{}/load-balancer/", fake.base), "id": "e1"}]}),
    );
    (
        AxumStatus::CREATED,
        [("x-subject-token", "gAAAAABfake-token")],
        axum::Json(token),
    )
        .into_response()
}

/// Octavia's status tree: every control-plane member `ACTIVE` and `ONLINE`, named as CAPO
/// names them (`<pool>-<OpenStackMachine>`), with Octavia's own `health_monitor` key.
async fn lb_status(State(fake): State<Arc<Fake>>) -> AxumResponse {
    fake.octavia_calls.fetch_add(1, Ordering::SeqCst);
    let mut tree = fixture("octavia/loadbalancer-status-response.json");
    let pool_name = format!("{LB_NAME}-6443");
    let members: Vec<Value> = MACHINES
        .iter()
        .zip(11..)
        .map(|(machine, host)| {
            json!({"name": format!("{pool_name}-{machine}"), "address": format!("10.6.0.{host}"),
                "protocol_port": 6443, "id": format!("member-{host}"),
                "provisioning_status": "ACTIVE", "operating_status": "ONLINE"})
        })
        .collect();
    let lb = &mut tree["statuses"]["loadbalancer"];
    lb["id"] = json!(LB_ID);
    lb["name"] = json!(LB_NAME);
    for pointer in ["/listeners/0/pools/0", "/pools/0"] {
        let pool = lb.pointer_mut(pointer).unwrap();
        pool["name"] = json!(pool_name);
        pool["members"] = json!(members);
        if let Some(monitor) = pool.as_object_mut().unwrap().remove("healthmonitor") {
            pool["health_monitor"] = monitor;
        }
    }
    axum::Json(tree).into_response()
}

async fn fake_openstack() -> Arc<Fake> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fake = Arc::new(Fake {
        base: format!("http://{}", listener.local_addr().unwrap()),
        octavia_calls: AtomicUsize::new(0),
    });
    let router = Router::new()
        .route("/identity/v3/auth/tokens", post(tokens))
        .route(
            &format!("/load-balancer/v2/lbaas/loadbalancers/{LB_ID}/status"),
            get(lb_status),
        )
        .with_state(Arc::clone(&fake));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    fake
}

// ------------------------------------------------------------------------------------------
// Objects

fn crd(group: &str, kind: &str, plural: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                "listKind": format!("{kind}List")},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn machine(name: &str, host: u8) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": name, "namespace": NS,
            "finalizers": ["machine.cluster.x-k8s.io"],
            "labels": {"cluster.x-k8s.io/cluster-name": "cluster-a",
                "cluster.x-k8s.io/control-plane": "",
                "cluster.x-k8s.io/control-plane-name": "cluster-a-control-plane"}},
        "spec": {"clusterName": "cluster-a", "bootstrap": {"dataSecretName": name},
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "OpenStackMachine", "name": name, "namespace": NS}},
        "status": {"addresses": [{"type": "InternalIP", "address": format!("10.6.0.{host}")}]}})
}

async fn create(client: &kube::Client, ar: &ApiResource, namespace: Option<&str>, object: Value) {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", object.metadata.name));
}

/// The cluster: CRDs, namespace, identity Secret, Cluster, OpenStackCluster with the load
/// balancer in its status, three control-plane Machines.
async fn create_cluster(client: &kube::Client, fake: &Fake) {
    let crds = resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    for (group, kind, plural) in [
        ("cluster.x-k8s.io", "Machine", "machines"),
        ("cluster.x-k8s.io", "Cluster", "clusters"),
        (
            "infrastructure.cluster.x-k8s.io",
            "OpenStackCluster",
            "openstackclusters",
        ),
    ] {
        create(client, &crds, None, crd(group, kind, plural)).await;
    }
    let machines = resource("cluster.x-k8s.io", "v1beta1", "Machine", "machines");
    let deadline = Instant::now() + START_DEADLINE;
    // A CRD serves once it is Established: list until it answers.
    while Api::<DynamicObject>::all_with(client.clone(), &machines)
        .list(&ListParams::default())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the Machine CRD never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let namespaces = resource("", "v1", "Namespace", "namespaces");
    create(
        client,
        &namespaces,
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    let clouds = format!(
        "clouds:\n  openstack:\n    auth:\n      auth_url: {}/identity\n      \
         application_credential_id: 3e1f0a2b\n      application_credential_secret: s3cret\n    \
         auth_type: v3applicationcredential\n    region_name: RegionOne\n    interface: public\n",
        fake.base
    );
    let secrets = resource("", "v1", "Secret", "secrets");
    create(
        client,
        &secrets,
        Some(NS),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cluster-a-cloud-config", "namespace": NS},
            "data": {"clouds.yaml": base64::engine::general_purpose::STANDARD.encode(clouds)}}),
    )
    .await;
    let clusters = resource("cluster.x-k8s.io", "v1beta1", "Cluster", "clusters");
    create(
        client,
        &clusters,
        Some(NS),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "cluster-a", "namespace": NS},
            "spec": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "OpenStackCluster", "name": "cluster-a"}}}),
    )
    .await;
    let oscs = resource(
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "OpenStackCluster",
        "openstackclusters",
    );
    create(
        client,
        &oscs,
        Some(NS),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": "cluster-a", "namespace": NS},
            "spec": {"apiServerLoadBalancer": {"enabled": true},
                "identityRef": {"cloudName": "openstack", "name": "cluster-a-cloud-config"}},
            "status": {"ready": true, "apiServerLoadBalancer": {"id": LB_ID, "name": LB_NAME,
                "ip": "203.0.113.10", "internalIP": "10.6.0.53"}}}),
    )
    .await;
    for (name, host) in MACHINES.iter().zip(11..) {
        create(client, &machines, Some(NS), machine(name, host)).await;
    }
}

/// stackgate's webhook for control-plane Machine DELETEs, as the chart registers it (but
/// `failurePolicy: Fail`, so that a webhook not yet called cannot pass for an admission).
fn webhook(addr: SocketAddr, ca_pem: &str) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "stackgate"},
        "webhooks": [{"name": "control-plane-guard.validate.stackgate.dev",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": format!("https://{addr}/validate"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)},
            "rules": [{"apiGroups": ["cluster.x-k8s.io"], "apiVersions": ["v1beta1", "v1beta2"],
                "operations": ["DELETE"], "resources": ["machines"], "scope": "Namespaced"}],
            "objectSelector": {"matchExpressions": [
                {"key": "cluster.x-k8s.io/control-plane", "operator": "Exists"}]}}]})
}

// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_of_every_control_plane_machine_leaves_one_standing() {
    let (apiserver_bin, etcd_bin) = match binaries() {
        Ok(found) => found,
        Err(why) => {
            eprintln!(
                "skipped: {why} (set KUBE_APISERVER_BIN and ETCD_BIN to run against a real \
                 kube-apiserver; tests/guard_openstack.rs covers the behaviour with fakes)"
            );
            return;
        }
    };
    common::setup();
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, _apiserver, client, kubeconfig) =
        start_apiserver(&apiserver_bin, &etcd_bin, dir.path()).await;
    let fake = fake_openstack().await;
    create_cluster(&client, &fake).await;
    // `serve --lb-guard on` reading the apiserver through the kubeconfig; every review reads
    // Octavia (no cache), so the counter below proves the guard judged it.
    let stackgate = start_stackgate(
        dir.path(),
        &[
            "--kube",
            "off",
            "--lb-guard",
            "on",
            "--octavia-cache-ttl",
            "0s",
            "--log-level",
            "info",
        ],
        Some(&kubeconfig),
    )
    .await;
    let (addr, ca) = (stackgate.addr, stackgate.ca.clone());
    let vwcs = resource(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    create(&client, &vwcs, None, webhook(addr, &ca)).await;

    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &resource("cluster.x-k8s.io", "v1beta1", "Machine", "machines"),
    );
    // Until the apiserver calls the webhook: a server-side dry run of one deletion (judged,
    // never recorded by the guard, nothing changes) reads Octavia once it does.
    let deadline = Instant::now() + WEBHOOK_DEADLINE;
    while fake.octavia_calls.load(Ordering::SeqCst) == 0 {
        let dry = DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        };
        let answer = machines.delete(MACHINES[0], &dry).await;
        assert!(answer.is_ok(), "dry run refused: {answer:?}");
        assert!(
            Instant::now() < deadline,
            "the apiserver never called the webhook\n--- stackgate\n{}",
            stackgate.proc.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = machines.list(&ListParams::default()).await.unwrap();
    assert!(
        before
            .items
            .iter()
            .all(|m| m.metadata.deletion_timestamp.is_none()),
        "the dry runs deleted nothing"
    );

    // `kubectl delete machines -l cluster.x-k8s.io/control-plane`: list by the label, then one
    // DELETE per Machine in turn.
    let selected = machines
        .list(&ListParams::default().labels("cluster.x-k8s.io/control-plane"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 3);
    let mut refused = Vec::new();
    for m in &selected.items {
        let name = m.metadata.name.clone().unwrap();
        if let Err(e) = machines.delete(&name, &DeleteParams::default()).await {
            refused.push((name, e.to_string()));
        }
    }
    let after = machines.list(&ListParams::default()).await.unwrap();
    let standing: Vec<String> = after
        .items
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    assert_eq!(
        standing.len(),
        1,
        "one control-plane Machine must stay: standing {standing:?}, refused {refused:#?}\n--- stackgate\n{}",
        stackgate.proc.tail()
    );
    assert_eq!(refused.len(), 1, "{refused:#?}");
    let (name, message) = &refused[0];
    assert_eq!(name, &standing[0]);
    assert!(
        message.contains("control-plane-guard.validate.stackgate.dev")
            && message.contains(&format!(
                "Refusing to delete control-plane Machine {NS}/{name}"
            ))
            && message.contains("this Machine's member is the last one serving"),
        "{message}"
    );
    assert!(
        !message.contains("s3cret") && !stackgate.proc.tail().contains("s3cret"),
        "credential leaked"
    );
}
