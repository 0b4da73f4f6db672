//! `StackgateException` objects from a real kube-apiserver (issue 37): the chart's CRD file
//! (`charts/stackgate/files/crds/stackgateexceptions.stackgate.dev.yaml`) is applied, the
//! apiserver refuses what its schema refuses, and `serve`'s exception watcher
//! (`exceptions_watch::run`) feeds the webhook (over HTTPS, `TestServer`) so that a tenant's
//! denied HelmRelease is admitted once an exception for it is created, denied again once it is
//! deleted, and still denied under an expired one, whose name the denial gives.
//!
//! The webhook is called directly, not registered with the apiserver: what is under test is
//! the path from the apiserver's objects to the verdict. Needs `KUBE_APISERVER_BIN` and
//! `ETCD_BIN`; without them the test prints why and passes.

mod common;
#[path = "support/real_apiserver.rs"]
mod real_apiserver;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::exceptions_watch::{self, ExceptionCell, ExceptionMetrics, ExceptionSource};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::policy::exception::{ExceptionRules, ExceptionSet};
use stackgate::server::AppState;
use tokio::time::Instant;

use real_apiserver::{binaries, start_apiserver};

/// How long a new CRD may take until the apiserver serves its resource.
const CRD_DEADLINE: Duration = Duration::from_secs(30);

const VALIDATE: &str = "helmrelease/validate-create-openstack-cloud-controller-manager.json";

/// The captured Flux HelmRelease `kube-system/openstack-cloud-controller-manager`, written by
/// a tenant with serial calls `false`: a denial of policy serial-lb-api-calls.
fn denied_review() -> Value {
    let mut v: Value = serde_json::from_slice(&captured(VALIDATE)).expect("captured JSON");
    let object = &mut v["request"]["object"];
    object["spec"]["values"]
        .as_object_mut()
        .expect("values")
        .remove("controllerExtraArgs");
    object["spec"]["values"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"] =
        json!(false);
    v["request"]["userInfo"] = json!({"username": "tenant-a", "groups": ["tenants"]});
    v
}

fn exception(name: &str, names: &[&str], expires: Timestamp) -> Value {
    json!({
        "apiVersion": "stackgate.dev/v1alpha1",
        "kind": "StackgateException",
        "metadata": {"name": name, "namespace": "stackgate"},
        "spec": {
            "policy": "serial-lb-api-calls",
            "codes": ["false"],
            "match": {"kinds": ["HelmRelease"], "namespaces": ["kube-system"], "names": names},
            "reason": "Octavia provider fixed upstream",
            "ticket": "CHG-42",
            "expires": expires.to_string(),
        }
    })
}

async fn validate(client: &Client) -> Value {
    let body = serde_json::to_vec(&denied_review()).unwrap();
    let (status, out) = post(client, "/validate", body).await;
    assert_eq!(status, http::StatusCode::OK, "{out}");
    out["response"].clone()
}

/// Polls the webhook until `want(response)`, within the CRD deadline.
async fn until(client: &Client, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + CRD_DEADLINE;
    loop {
        let r = validate(client).await;
        if want(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "{what}: last answer {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_exception_object_turns_a_denial_into_an_admission_until_it_ends() {
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
    let (_etcd, _apiserver, kube, _kubeconfig) =
        start_apiserver(&apiserver_bin, &etcd_bin, dir.path()).await;

    // The chart's CRD file, as the chart installs it (without the chart's labels).
    let crd_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/stackgate/files/crds/stackgateexceptions.stackgate.dev.yaml"
    ))
    .unwrap();
    let crd: DynamicObject = serde_saphyr::from_str(&crd_text).expect("the CRD file is YAML");
    let crds = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    Api::<DynamicObject>::all_with(kube.clone(), &crds)
        .create(&PostParams::default(), &crd)
        .await
        .expect("the apiserver accepts the CRD");
    let namespaces = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "Namespace"),
        "namespaces",
    );
    let ns: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "stackgate"}}),
    )
    .unwrap();
    Api::<DynamicObject>::all_with(kube.clone(), &namespaces)
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let exceptions: Api<DynamicObject> =
        Api::namespaced_with(kube.clone(), "stackgate", &exceptions_watch::api_resource());
    let deadline = Instant::now() + CRD_DEADLINE;
    while exceptions.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "the CRD is not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // serve's pieces: the watcher fills the cell the webhook's source reads.
    let engine = Engine::new(PolicySet::embedded().unwrap());
    let cell = ExceptionCell::holding(ExceptionSet::default());
    let listed = Arc::new(AtomicBool::new(false));
    let first = Arc::clone(&listed);
    let watcher = tokio::spawn(exceptions_watch::run(
        kube.clone(),
        engine.clone(),
        ExceptionRules::default(),
        cell.clone(),
        ExceptionMetrics::default(),
        move || first.store(true, Ordering::SeqCst),
    ));
    let state = AppState::new(engine, Metrics::new())
        .with_fact_source(Arc::new(ExceptionSource::new(cell.clone())));
    let server = TestServer::start_with(|_| {}, state).await;
    let client = server.client().await;

    let r = validate(&client).await;
    assert_eq!(r["allowed"], false, "no exception yet: {r}");

    // The CRD's schema refuses a wildcard and an unknown field before stackgate sees them.
    let now = Timestamp::now();
    let in_30_days = now + SignedDuration::from_hours(24 * 30);
    for bad in [exception("wildcard", &["*"], in_30_days), {
        let mut e = exception("unknown", &["x"], in_30_days);
        e["spec"]["exemptAll"] = json!(true);
        e
    }] {
        let object: DynamicObject = serde_json::from_value(bad.clone()).unwrap();
        let refused = exceptions.create(&PostParams::default(), &object).await;
        let stored = exceptions
            .get_opt(object.metadata.name.as_deref().unwrap())
            .await
            .unwrap();
        // Unknown fields are pruned, not refused, without strict field validation: either way
        // nothing stored may exempt everything, and stackgate parses what is stored.
        if refused.is_ok() {
            let spec = &stored.expect("stored").data["spec"];
            assert!(spec.get("exemptAll").is_none(), "{spec}");
        } else {
            assert!(stored.is_none());
        }
    }
    let wildcard = exceptions.get_opt("wildcard").await.unwrap();
    assert!(wildcard.is_none(), "the schema refuses a wildcard name");
    exceptions
        .delete("unknown", &DeleteParams::default())
        .await
        .ok();

    // An exception for the HelmRelease: admitted once the watcher has it.
    let object: DynamicObject = serde_json::from_value(exception(
        "occm-serial",
        &["openstack-cloud-controller-manager"],
        in_30_days,
    ))
    .unwrap();
    exceptions
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let r = until(&client, "the exception admits", |r| r["allowed"] == true).await;
    assert_eq!(
        r["auditAnnotations"]["serial-lb-api-calls-excepted"],
        "StackgateException stackgate/occm-serial",
        "{r}"
    );
    assert!(
        listed.load(Ordering::SeqCst),
        "readiness opened on the list"
    );

    // Deleted: denied again.
    exceptions
        .delete("occm-serial", &DeleteParams::default())
        .await
        .unwrap();
    until(&client, "the deletion re-denies", |r| r["allowed"] == false).await;

    // Expired (it ended an hour ago): still denied, and the denial names it.
    let object: DynamicObject = serde_json::from_value(exception(
        "ended",
        &["openstack-cloud-controller-manager"],
        now - SignedDuration::from_hours(1),
    ))
    .unwrap();
    exceptions
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let r = until(&client, "the expired exception is read", |r| {
        r["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("StackgateException stackgate/ended expired at"))
    })
    .await;
    assert_eq!(r["allowed"], false, "{r}");
    watcher.abort();
}
