//! Who may exempt, through a real kube-apiserver and stackgate registered as its validating
//! webhook (issue 37, Measure): two users from the apiserver's token file, a tenant (group
//! `tenants`) and a platform-team member (group `platform-team`), the policy's
//! `exemptions.annotation.allowedGroups` set to `[platform-team]`.
//!
//! - the tenant's self-exemption (the annotation on its own labelled cloud-config ConfigMap,
//!   holding `provider-requires-serial-api-calls = false`) is refused, and the refusal names
//!   why;
//! - the platform member's same write is admitted; the tenant's later edit of that approved
//!   object passes (the stored annotation counts), changing its reason does not;
//! - a StackgateException the platform member creates with a lifetime of one minute admits the
//!   tenant's write, and within a few seconds after its `expires` the tenant's next write is
//!   refused again, without any event: each review is judged at its own instant.
//!
//! The webhook runs in this process (`TestServer`) with `serve`'s exception watcher
//! (`exceptions_watch::run`) reading the apiserver; the apiserver calls it over HTTPS as it
//! calls any webhook. Needs `KUBE_APISERVER_BIN` and `ETCD_BIN`; without them the test prints
//! why and passes. Takes about 90 s (the exception's minute).

mod common;
#[path = "support/real_apiserver.rs"]
mod real_apiserver;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::exceptions_watch::{self, ExceptionCell, ExceptionMetrics, ExceptionSource};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::policy::exception::{ExceptionRules, ExceptionSet};
use stackgate::server::AppState;
use tokio::time::Instant;

use real_apiserver::{PLATFORM, TENANT, binaries, client_as, start_apiserver};

const NS: &str = "tenant-a";
const ANNOTATION: &str = "stackgate.dev/exempt.serial-lb-api-calls";
/// How long a new CRD or webhook configuration may take to be served.
const DEADLINE: Duration = Duration::from_secs(30);

fn gvk(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn create_as_admin(client: &kube::Client, ar: &ApiResource, ns: Option<&str>, v: Value) {
    let object: DynamicObject = serde_json::from_value(v).unwrap();
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", ar.kind));
}

/// A labelled cloud-config ConfigMap holding `false`, with the exemption annotation when
/// `reason` is given.
fn configmap(name: &str, reason: Option<&str>, comment: &str) -> DynamicObject {
    let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS,
            "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
        "data": {"cloud.conf": format!(
            "# {comment}\n[Global]\nregion = RegionOne\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n")}});
    if let Some(reason) = reason {
        v["metadata"]["annotations"] = json!({ANNOTATION: reason});
    }
    serde_json::from_value(v).unwrap()
}

/// The message of a refused write, or None when it was stored.
async fn write(api: &Api<DynamicObject>, object: &DynamicObject, update: bool) -> Option<String> {
    let result = if update {
        let mut object = object.clone();
        let stored = api
            .get(object.metadata.name.as_deref().unwrap())
            .await
            .unwrap();
        object.metadata.resource_version = stored.metadata.resource_version;
        api.replace(
            object.metadata.name.as_deref().unwrap(),
            &PostParams::default(),
            &object,
        )
        .await
    } else {
        api.create(&PostParams::default(), object).await
    };
    match result {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.message),
        Err(e) => panic!("write: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_platform_team_exempts_and_an_exception_ends_at_its_expiry() {
    let (apiserver_bin, etcd_bin) = match binaries() {
        Ok(found) => found,
        Err(why) => {
            eprintln!(
                "skipped: {why} (set KUBE_APISERVER_BIN and ETCD_BIN to run against a real \
                 kube-apiserver; tests/exceptions_matrix.rs covers the cells without one)"
            );
            return;
        }
    };
    common::setup();
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, _apiserver, admin, kubeconfig) =
        start_apiserver(&apiserver_bin, &etcd_bin, dir.path()).await;

    // The chart's CRD, the namespaces, and RBAC: both users write ConfigMaps in tenant-a; only
    // the platform team writes exceptions (in stackgate's namespace).
    let crd_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/stackgate/files/crds/stackgateexceptions.stackgate.dev.yaml"
    ))
    .unwrap();
    let crd: Value = serde_saphyr::from_str(&crd_text).unwrap();
    let crds = gvk(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    create_as_admin(&admin, &crds, None, crd).await;
    let namespaces = gvk("", "v1", "Namespace", "namespaces");
    for ns in [NS, "stackgate"] {
        create_as_admin(
            &admin,
            &namespaces,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    let roles = gvk("rbac.authorization.k8s.io", "v1", "Role", "roles");
    let bindings = gvk(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    );
    for (ns, group, resource, subjects) in [
        (NS, "", "configmaps", vec!["tenants", "platform-team"]),
        (
            "stackgate",
            "stackgate.dev",
            "stackgateexceptions",
            vec!["platform-team"],
        ),
    ] {
        create_as_admin(
            &admin,
            &roles,
            Some(ns),
            json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "writers", "namespace": ns},
            "rules": [{"apiGroups": [group], "resources": [resource],
                "verbs": ["get", "list", "create", "update", "patch", "delete"]}]}),
        )
        .await;
        let subjects: Vec<Value> = subjects
            .iter()
            .map(|g| json!({"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"}))
            .collect();
        create_as_admin(
            &admin,
            &bindings,
            Some(ns),
            json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "writers", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writers"},
            "subjects": subjects}),
        )
        .await;
    }
    let exceptions_api: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        "stackgate",
        &exceptions_watch::api_resource(),
    );
    let deadline = Instant::now() + DEADLINE;
    while exceptions_api.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "the CRD is not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The chart's policies, with the platform team as the group whose annotation counts.
    let policies = tempfile::tempdir().unwrap();
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/stackgate/files/policies"
    );
    for entry in std::fs::read_dir(source).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let text = if path.ends_with("serial-lb-api-calls.yaml") {
            assert!(text.contains("allowedGroups: [system:masters]"), "{text}");
            text.replace(
                "allowedGroups: [system:masters]",
                "allowedGroups: [platform-team]",
            )
        } else {
            text
        };
        std::fs::write(policies.path().join(path.file_name().unwrap()), text).unwrap();
    }
    let engine = Engine::new(PolicySet::load_dir(policies.path()).unwrap());

    // serve's pieces: the exception watcher fills the cell the webhook reads.
    let cell = ExceptionCell::holding(ExceptionSet::default());
    let _watcher = tokio::spawn(exceptions_watch::run(
        admin.clone(),
        engine.clone(),
        ExceptionRules::default(),
        cell.clone(),
        ExceptionMetrics::default(),
        || {},
    ));
    let state = AppState::new(engine, Metrics::new())
        .with_fact_source(Arc::new(ExceptionSource::new(cell)));
    let server = TestServer::start_with(|_| {}, state).await;
    let webhooks = gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    // As the chart registers labelled cloud-config objects, failing closed.
    create_as_admin(
        &admin,
        &webhooks,
        None,
        json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "stackgate"},
        "webhooks": [{"name": "cloud-config-labelled.validate.stackgate.dev",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": format!("https://{}/validate", server.addr),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&server.ca.cert_pem)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["configmaps"], "scope": "Namespaced"}],
            "objectSelector": {"matchExpressions": [
                {"key": "stackgate.dev/cloud-config", "operator": "Exists"}]}}]}),
    )
    .await;

    let configmaps = gvk("", "v1", "ConfigMap", "configmaps");
    let tenant: Api<DynamicObject> =
        Api::namespaced_with(client_as(&kubeconfig, TENANT).await, NS, &configmaps);
    let platform_client = client_as(&kubeconfig, PLATFORM).await;
    let platform: Api<DynamicObject> =
        Api::namespaced_with(platform_client.clone(), NS, &configmaps);

    // 1. The tenant's self-exemption: refused (once the configuration is active), named.
    let deadline = Instant::now() + DEADLINE;
    let refusal = loop {
        let name = format!("self-{}", deadline.elapsed().as_millis());
        let object = configmap(&name, Some("we know better"), "self");
        match write(&tenant, &object, false).await {
            Some(message) => break message,
            None => {
                assert!(
                    Instant::now() < deadline,
                    "the tenant's self-exemption is stored"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(
        refusal.contains("not allowed to exempt") && refusal.contains("platform-team"),
        "{refusal}"
    );

    // 2. The platform member's same write: admitted. The tenant's later edit passes; a new
    //    reason from the tenant does not.
    let approved = configmap("approved", Some("Octavia fixed, CHG-42"), "v1");
    assert_eq!(write(&platform, &approved, false).await, None);
    let edited = configmap("approved", Some("Octavia fixed, CHG-42"), "v2");
    assert_eq!(write(&tenant, &edited, true).await, None);
    let reworded = configmap("approved", Some("my own reason"), "v3");
    let refusal = write(&tenant, &reworded, true)
        .await
        .expect("a tenant's new reason is refused");
    assert!(refusal.contains("not allowed to exempt"), "{refusal}");

    // 3. An exception with a lifetime of one minute, created by the platform member.
    let denied = configmap("excepted", None, "v1");
    assert!(write(&tenant, &denied, false).await.is_some());
    let expires = Timestamp::now() + SignedDuration::from_secs(60);
    let exception: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "stackgate.dev/v1alpha1", "kind": "StackgateException",
        "metadata": {"name": "excepted", "namespace": "stackgate"},
        "spec": {"policy": "serial-lb-api-calls", "codes": ["false"],
            "match": {"kinds": ["ConfigMap"], "namespaces": [NS], "names": ["excepted"]},
            "reason": "Octavia provider fixed upstream", "ticket": "CHG-43",
            "expires": expires.to_string()}}))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(
        platform_client,
        "stackgate",
        &exceptions_watch::api_resource(),
    )
    .create(&PostParams::default(), &exception)
    .await
    .expect("the platform team may create exceptions");
    let deadline = Instant::now() + DEADLINE;
    while write(&tenant, &denied, false).await.is_some() {
        assert!(Instant::now() < deadline, "the exception never admitted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Until `expires` the tenant's writes pass; after it, refused within a few seconds.
    let mut version = 2;
    loop {
        let object = configmap("excepted", None, &format!("v{version}"));
        version += 1;
        let refused = write(&tenant, &object, true).await;
        let at = Timestamp::now();
        match refused {
            None => assert!(
                at < expires + SignedDuration::from_secs(5),
                "still admitted at {at}, the exception expired at {expires}"
            ),
            Some(message) => {
                assert!(
                    at >= expires,
                    "refused at {at} before the exception's expiry {expires}: {message}"
                );
                assert!(
                    message.contains("StackgateException stackgate/excepted expired at"),
                    "{message}"
                );
                eprintln!(
                    "refused {:.1} s after the exception's expiry",
                    expires.duration_until(at).as_secs_f64()
                );
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
