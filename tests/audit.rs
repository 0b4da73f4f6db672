//! `stackgate audit` against kube-rs's mock API (`tower_test::mock::pair`, as in
//! tests/releases_watcher.rs): a small fake API server answers lists (with `limit` and
//! `continue`, label selectors, 403 and 404 per resource), gets and JSON patches from an
//! in-memory set of objects, and records every request. The objects are the apiserver-stored
//! Secret and DaemonSet from tests/fixtures/captured, the GitOps fixtures, and hand-written
//! ones. Every test runs under a timeout.
//!
//! The golden report is rewritten with `UPDATE_GOLDEN=1 cargo test --test audit`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use kube::client::Body;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use stackgate::audit::{self, AuditOptions};
use stackgate::check::{FailOn, Format};
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use tower_test::mock;

#[path = "support/leak_inputs.rs"]
mod leak_inputs;

const TEST_TIMEOUT: Duration = Duration::from_secs(20);

const SECRETS: &str = "/api/v1/secrets";
const CONFIGMAPS: &str = "/api/v1/configmaps";
const PODS: &str = "/api/v1/pods";
const SERVICES: &str = "/api/v1/services";
const DAEMONSETS: &str = "/apis/apps/v1/daemonsets";
const DEPLOYMENTS: &str = "/apis/apps/v1/deployments";
const HELMRELEASES_V2: &str = "/apis/helm.toolkit.fluxcd.io/v2/helmreleases";
const HELMRELEASES_V2BETA2: &str = "/apis/helm.toolkit.fluxcd.io/v2beta2/helmreleases";
const APPLICATIONS: &str = "/apis/argoproj.io/v1alpha1/applications";
const HELMCHARTS: &str = "/apis/helm.cattle.io/v1/helmcharts";

fn fixture_text(rel: &str) -> String {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `request.object` of a captured review.
fn captured(rel: &str) -> Value {
    let review: Value = serde_json::from_str(&fixture_text(&format!("captured/{rel}"))).unwrap();
    review["request"]["object"].clone()
}

/// One request the fake API server answered.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: String,
    content_type: String,
    accept: String,
    body: String,
}

/// The fake API server: objects per collection (`/api/v1/secrets`), which collections are
/// served (others answer 404, as for an absent CRD) and which are forbidden (403).
#[derive(Default)]
struct Cluster {
    objects: Vec<(String, Value)>,
    served: BTreeSet<String>,
    forbidden: BTreeSet<String>,
    requests: Vec<Recorded>,
    next_resource_version: u64,
    /// Watch events (`collection`, event): a watch answers those whose object's
    /// resourceVersion is newer than the one it asks from.
    events: Vec<(String, Value)>,
    /// Reads of a collection (path prefix) answered only after this long: a slow audit.
    slow: Option<(String, Duration)>,
    /// Collections whose lists page in a hostile way.
    runaway: Vec<(String, Runaway)>,
    /// Lists of this collection (path) are answered one byte every 2 s, forever.
    drip: Option<String>,
}

/// A response body of the fake: whole, or dripped.
type Answer = http_body_util::combinators::UnsyncBoxBody<hyper::body::Bytes, kube::Error>;

/// A list answer that starts like one and then sends a space every 2 s, forever: a reader
/// that restarts its timeout with every byte never ends it.
fn dripped() -> Response<Answer> {
    let frames = futures::stream::unfold(0usize, |sent| async move {
        if sent > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let byte = b"{\"items\":[".get(sent).copied().unwrap_or(b' ');
        Some((
            Ok::<_, kube::Error>(hyper::body::Frame::data(hyper::body::Bytes::from(vec![
                byte,
            ]))),
            sent + 1,
        ))
    });
    Response::new(http_body_util::StreamBody::new(frames).boxed_unsync())
}

/// How a hostile API server pages a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runaway {
    /// Every page holds the collection's objects and a new continue token, forever.
    Endless,
    /// Every page holds the collection's objects and the same continue token.
    Repeated,
}

fn status(code: u16, reason: &str) -> Response<Body> {
    let body = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                      "message": reason, "reason": reason, "code": code});
    let mut r = Response::new(Body::from(serde_json::to_vec(&body).unwrap()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r
}

fn ok(body: &Value) -> Response<Body> {
    Response::new(Body::from(serde_json::to_vec(body).unwrap()))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

/// Whether `labels` match a selector of `key`, `key=value` and `key in (v)` terms.
fn selected(object: &Value, selector: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("=") {
            labels[k.trim_end_matches('=')].as_str() == Some(v.trim_start_matches('='))
        } else if let Some((k, vs)) = term.split_once(" in ") {
            let vs = vs.trim_matches(['(', ')']);
            vs.split(',').any(|v| labels[k].as_str() == Some(v.trim()))
        } else {
            labels.get(term).is_some()
        }
    })
}

/// Whether `object` matches a field selector of `field=value` terms, as the API server
/// answers for Secrets (`type`) and any kind (`metadata.name`, `metadata.namespace`).
fn field_selected(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (field, value) = term.split_once('=').expect("field=value");
        let pointer = format!("/{}", field.trim_end_matches('=').replace('.', "/"));
        object.pointer(&pointer).and_then(Value::as_str) == Some(value.trim_start_matches('='))
    })
}

impl Cluster {
    fn add(&mut self, collection: &str, mut object: Value) {
        self.served.insert(collection.to_owned());
        if object["metadata"]["resourceVersion"].is_null() {
            self.next_resource_version += 1;
            object["metadata"]["resourceVersion"] =
                json!(format!("{}", 100 + self.next_resource_version));
        }
        self.objects.push((collection.to_owned(), object));
    }

    fn serve(&mut self, collection: &str) {
        self.served.insert(collection.to_owned());
    }

    fn answer(&mut self, method: &str, path: &str, query: &str, body: &[u8]) -> Response<Body> {
        // /api/v1/... or /apis/group/version/...
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let base_len = if segments.first() == Some(&"api") {
            2
        } else {
            3
        };
        let base = format!("/{}", segments[..base_len].join("/"));
        let rest = &segments[base_len..];
        // API discovery of one group version: the resources served under it.
        if rest.is_empty() && method == "GET" {
            let resources: Vec<Value> = self
                .served
                .iter()
                .filter_map(|c| c.strip_prefix(&format!("{base}/")))
                .filter(|plural| !plural.contains('/'))
                .map(|plural| {
                    json!({"name": plural, "singularName": "", "namespaced": true, "kind": "",
                           "verbs": ["get", "list", "watch", "patch"]})
                })
                .collect();
            if resources.is_empty() {
                return status(404, "NotFound");
            }
            return ok(&json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": segments[1..].join("/"), "resources": resources}));
        }
        let (namespace, plural, name) = match rest {
            [plural] => (None, *plural, None),
            ["namespaces", ns, plural] => (Some(*ns), *plural, None),
            ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
            _ => return status(404, "NotFound"),
        };
        let collection = format!("{base}/{plural}");
        if self.forbidden.contains(&collection) {
            return status(403, "Forbidden");
        }
        if !self.served.contains(&collection) {
            return status(404, "NotFound");
        }
        let in_scope =
            |o: &Value| namespace.is_none_or(|ns| o["metadata"]["namespace"].as_str() == Some(ns));
        match (method, name) {
            ("GET", None) => {
                let selector = query_param(query, "labelSelector").unwrap_or_default();
                let fields = query_param(query, "fieldSelector").unwrap_or_default();
                let mut items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(c, o)| {
                        *c == collection
                            && in_scope(o)
                            && selected(o, &selector)
                            && field_selected(o, &fields)
                    })
                    .map(|(_, o)| {
                        // Items of a list carry neither apiVersion nor kind on the wire.
                        let mut o = o.clone();
                        let m = o.as_object_mut().unwrap();
                        m.remove("apiVersion");
                        m.remove("kind");
                        o
                    })
                    .collect();
                let start: usize = query_param(query, "continue")
                    .map(|c| {
                        c.trim_start_matches("endless-")
                            .trim_start_matches("again")
                            .parse()
                            .unwrap_or(0)
                    })
                    .unwrap_or(0);
                let limit: usize = query_param(query, "limit")
                    .map(|l| l.parse().unwrap())
                    .unwrap_or(usize::MAX);
                let runaway = self
                    .runaway
                    .iter()
                    .find(|(c, _)| *c == collection)
                    .map(|(_, r)| *r);
                let (page, next): (Vec<Value>, Option<String>) = match runaway {
                    Some(Runaway::Endless) => (items, Some(format!("endless-{}", start + 1))),
                    Some(Runaway::Repeated) => (items, Some("again".to_owned())),
                    None => {
                        let end = start.saturating_add(limit).min(items.len());
                        let more = end < items.len();
                        (
                            items.drain(start..end).collect(),
                            more.then(|| end.to_string()),
                        )
                    }
                };
                // `Accept: …;as=PartialObjectMetadataList`: metadata only, as the apiserver.
                let metadata_only = self
                    .requests
                    .last()
                    .is_some_and(|r| r.accept.contains("as=PartialObjectMetadataList"));
                let page: Vec<Value> = if metadata_only {
                    page.into_iter()
                        .map(|o| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": o["metadata"]}))
                        .collect()
                } else {
                    page
                };
                let mut metadata = json!({"resourceVersion": "1000"});
                if let Some(next) = next {
                    metadata["continue"] = json!(next);
                }
                ok(
                    &json!({"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": page}),
                )
            }
            ("GET", Some(name)) => match self.objects.iter().find(|(c, o)| {
                *c == collection && in_scope(o) && o["metadata"]["name"].as_str() == Some(name)
            }) {
                Some((_, o)) => ok(o),
                None => status(404, "NotFound"),
            },
            ("PATCH", Some(name)) => {
                let Some((_, object)) = self.objects.iter_mut().find(|(c, o)| {
                    *c == collection && in_scope(o) && o["metadata"]["name"].as_str() == Some(name)
                }) else {
                    return status(404, "NotFound");
                };
                let patch: json_patch::Patch = serde_json::from_slice(body).unwrap();
                let mut patched = object.clone();
                if json_patch::patch(&mut patched, &patch).is_err() {
                    // The apiserver answers a failed `test` with 422 Invalid.
                    return status(422, "Invalid");
                }
                self.next_resource_version += 1;
                patched["metadata"]["resourceVersion"] =
                    json!(format!("{}", 100 + self.next_resource_version));
                *object = patched.clone();
                ok(&patched)
            }
            ("POST", None) => {
                let mut object: Value = serde_json::from_slice(body).unwrap();
                let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
                if self.objects.iter().any(|(c, o)| {
                    *c == collection && in_scope(o) && o["metadata"]["name"] == name.as_str()
                }) {
                    return status(409, "AlreadyExists");
                }
                self.next_resource_version += 1;
                object["metadata"]["resourceVersion"] =
                    json!(format!("{}", 100 + self.next_resource_version));
                self.objects.push((collection, object.clone()));
                ok(&object)
            }
            ("PUT", Some(name)) => {
                let mut object: Value = serde_json::from_slice(body).unwrap();
                let Some((_, stored)) = self.objects.iter_mut().find(|(c, o)| {
                    *c == collection && in_scope(o) && o["metadata"]["name"].as_str() == Some(name)
                }) else {
                    return status(404, "NotFound");
                };
                // Optimistic concurrency: a replace must carry the stored resourceVersion.
                if object["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
                    return status(409, "Conflict");
                }
                self.next_resource_version += 1;
                object["metadata"]["resourceVersion"] =
                    json!(format!("{}", 100 + self.next_resource_version));
                *stored = object.clone();
                ok(&object)
            }
            _ => status(405, "MethodNotAllowed"),
        }
    }

    /// Server-side apply (`application/apply-patch+yaml`): create or replace the object.
    fn apply(&mut self, path: &str, body: &[u8]) -> Response<Body> {
        let object: Value = serde_json::from_slice(body).unwrap();
        let collection = path.rsplit_once('/').unwrap().0;
        // /apis/g/v/namespaces/ns/plural → /apis/g/v/plural
        let segments: Vec<&str> = collection.split('/').collect();
        let collection = match segments.iter().position(|s| *s == "namespaces") {
            Some(i) => [&segments[..i], &segments[i + 2..]].concat().join("/"),
            None => collection.to_owned(),
        };
        if !self.served.contains(&collection) {
            return status(404, "NotFound");
        }
        let name = object["metadata"]["name"].clone();
        let namespace = object["metadata"]["namespace"].clone();
        self.objects.retain(|(c, o)| {
            !(*c == collection
                && o["metadata"]["name"] == name
                && o["metadata"]["namespace"] == namespace)
        });
        self.objects.push((collection, object.clone()));
        ok(&object)
    }
}

/// `/api/v1/namespaces/ns/secrets` → `/api/v1/secrets`.
fn collection_of(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').collect();
    match segments.iter().position(|s| *s == "namespaces") {
        Some(i) => [&segments[..i], &segments[i + 2..]].concat().join("/"),
        None => path.to_owned(),
    }
}

/// Answers a watch once the cluster has events newer than the resourceVersion it asks from
/// (newline-delimited, as the API server streams them); the stream then ends and the
/// watcher watches again from the last event, as it does after a server-side timeout.
async fn answer_watch(
    cluster: Arc<Mutex<Cluster>>,
    path: String,
    query: String,
    send: tower_test::mock::SendResponse<Response<Answer>>,
) {
    let collection = collection_of(&path);
    let from: u64 = query_param(&query, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    loop {
        let lines: Vec<u8> = {
            let c = cluster.lock().unwrap();
            c.events
                .iter()
                .filter(|(col, e)| {
                    *col == collection
                        && e["object"]["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|v| v.parse::<u64>().ok())
                            .is_some_and(|v| v > from)
                })
                .flat_map(|(_, e)| {
                    let mut line = serde_json::to_vec(e).unwrap();
                    line.push(b'\n');
                    line
                })
                .collect()
        };
        if !lines.is_empty() {
            send.send_response(Response::new(Body::from(lines).boxed_unsync()));
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A kube client over the fake API server.
fn client(cluster: Arc<Mutex<Cluster>>) -> kube::Client {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Answer>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let path = parts.uri.path().to_owned();
            let query = parts.uri.query().unwrap_or("").to_owned();
            let method = parts.method.to_string();
            let mut c = cluster.lock().unwrap();
            c.requests.push(Recorded {
                method: method.clone(),
                path: path.clone(),
                query: query.clone(),
                content_type: parts
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
                accept: parts
                    .headers
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
                body: String::from_utf8_lossy(&body).into_owned(),
            });
            if query_param(&query, "watch").as_deref() == Some("true") {
                drop(c);
                tokio::spawn(answer_watch(cluster.clone(), path, query, send));
                continue;
            }
            if method == "GET" && c.drip.as_deref() == Some(collection_of(&path).as_str()) {
                send.send_response(dripped());
                continue;
            }
            let response = if method == "PATCH"
                && c.requests.last().unwrap().content_type == "application/apply-patch+yaml"
            {
                c.apply(&path, &body)
            } else {
                c.answer(&method, &path, &query, &body)
            }
            .map(http_body_util::BodyExt::boxed_unsync);
            let delay = c
                .slow
                .as_ref()
                .filter(|(prefix, _)| method == "GET" && path.starts_with(prefix.as_str()))
                .map(|(_, d)| *d);
            drop(c);
            match delay {
                Some(delay) => {
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        send.send_response(response);
                    });
                }
                None => send.send_response(response),
            }
        }
    });
    kube::Client::new(service, "default")
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies"))
}

/// The stored Secret `kube-system/cloud-config` as `kubectl create secret --from-file` made it
/// (captured): the CPO example config, without serial calls.
fn cloud_config_secret() -> Value {
    let mut s = captured("secret/mutate-create-cloud-config-from-file.json");
    s["metadata"]["creationTimestamp"] = json!("2026-11-22T03:39:21Z");
    s["metadata"]["resourceVersion"] = json!("219");
    s
}

/// The upstream DaemonSet as the apiserver stored it (captured).
fn ccm_daemonset() -> Value {
    let mut d = captured("daemonset/mutate-create-openstack-cloud-controller-manager.json");
    d["metadata"]["creationTimestamp"] = json!("2026-11-22T03:30:00Z");
    d
}

fn ccm_pod(name: &str, started: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system",
                     "labels": {"k8s-app": "openstack-cloud-controller-manager"}},
        "spec": {"containers": [{"name": "openstack-cloud-controller-manager", "image": "x"}]},
        "status": {"startTime": started, "containerStatuses": [{
            "name": "openstack-cloud-controller-manager", "image": "x", "imageID": "",
            "ready": true, "restartCount": 0, "state": {"running": {"startedAt": started}}}]}})
}

/// A labelled ConfigMap with serial calls explicitly off.
fn labelled_configmap() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "occm-config", "namespace": "tenant-a",
                     "labels": {"stackgate.dev/cloud-config": "cloud.conf"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "data": {"cloud.conf": "[Global]\nregion=RegionOne\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n"}})
}

fn helmrelease() -> Value {
    let text = fixture_text("gitops/repo/flux/occm-helmrelease.yaml");
    let docs: Vec<Value> = text
        .split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .collect();
    docs.into_iter()
        .find(|d| d["kind"] == "HelmRelease")
        .expect("the HelmRelease fixture")
}

fn clean_helmrelease(i: usize) -> Value {
    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": format!("app-{i}"), "namespace": "apps"},
        "spec": {"chart": {"spec": {"chart": "podinfo"}}, "values": {"replicaCount": 2}}})
}

/// The cluster of the golden test: one stale CCM, bad configs in three carriers, one kind
/// forbidden, and CRDs that are not installed.
fn standard_cluster() -> Cluster {
    let mut c = Cluster::default();
    c.add(SECRETS, cloud_config_secret());
    c.add(CONFIGMAPS, labelled_configmap());
    // Not a cloud config: a label selector keeps it out of the audit.
    c.add(
        CONFIGMAPS,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "unrelated", "namespace": "kube-system"},
               "data": {"x": "y"}}),
    );
    c.add(HELMRELEASES_V2, helmrelease());
    c.add(HELMRELEASES_V2, clean_helmrelease(1));
    c.add(DAEMONSETS, ccm_daemonset());
    c.serve(DEPLOYMENTS);
    c.serve(SERVICES);
    // Started before the Secret was written (03:39:21).
    c.add(
        PODS,
        ccm_pod(
            "openstack-cloud-controller-manager-abcde",
            "2026-11-22T03:35:00Z",
        ),
    );
    c.serve(APPLICATIONS);
    c.forbidden.insert(APPLICATIONS.to_owned());
    c
}

async fn run_audit(cluster: &Arc<Mutex<Cluster>>, options: &AuditOptions) -> (u8, String) {
    let client = client(cluster.clone());
    let engine = engine();
    let mut out = Vec::new();
    let mut progress = |_: &str, _: usize| {};
    let code = tokio::time::timeout(
        TEST_TIMEOUT,
        audit::run(&client, &engine, options, &mut out, &mut progress),
    )
    .await
    .expect("the audit finishes")
    .expect("the report is written");
    (code, String::from_utf8(out).unwrap())
}

fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    assert!(
        expected == actual,
        "{name} differs from the golden file (UPDATE_GOLDEN=1 rewrites it):\n--- expected\n{expected}\n--- actual\n{actual}"
    );
}

#[tokio::test]
async fn golden_text_report_of_a_cluster() {
    let cluster = Arc::new(Mutex::new(standard_cluster()));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    golden("audit.txt", &text);
    // A forbidden kind is an input error: exit code 2, like an unreadable file in check.
    assert_eq!(code, 2, "{text}");
    // Read-only: nothing but GETs.
    let c = cluster.lock().unwrap();
    assert!(
        c.requests.iter().all(|r| r.method == "GET"),
        "{:?}",
        c.requests
    );
    // The ConfigMap outside the label selector was never evaluated.
    assert!(!text.contains("unrelated"), "{text}");
}

#[tokio::test]
async fn every_format_names_objects_as_kind_namespace_name() {
    let cluster = Arc::new(Mutex::new(standard_cluster()));
    let json_options = AuditOptions {
        format: Format::Json,
        ..AuditOptions::default()
    };
    let (_, json_text) = run_audit(&cluster, &json_options).await;
    let doc: Value = serde_json::from_str(&json_text).unwrap();
    let files: BTreeSet<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["file"].as_str().unwrap())
        .collect();
    assert!(
        files.contains("Secret/kube-system/cloud-config"),
        "{files:?}"
    );
    assert!(
        files.contains("ConfigMap/tenant-a/occm-config"),
        "{files:?}"
    );
    assert!(
        files.contains("HelmRelease/kube-system/openstack-cloud-controller-manager"),
        "{files:?}"
    );
    assert!(
        files.contains("DaemonSet/kube-system/openstack-cloud-controller-manager"),
        "{files:?}"
    );
    assert_eq!(doc["summary"]["exitCode"], 2);
    let errors = doc["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("403 Forbidden")
    );

    let sarif_options = AuditOptions {
        format: Format::Sarif,
        ..AuditOptions::default()
    };
    let (_, sarif) = run_audit(&cluster, &sarif_options).await;
    let doc: Value = serde_json::from_str(&sarif).unwrap();
    let rules = doc["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    let restart = rules
        .iter()
        .find(|r| r["id"] == audit::RESTART_RULE)
        .expect("the restart rule is described");
    assert!(
        restart["fullDescription"]["text"]
            .as_str()
            .unwrap()
            .contains("reads its cloud config only at start")
    );

    let junit_options = AuditOptions {
        format: Format::Junit,
        ..AuditOptions::default()
    };
    let (_, junit) = run_audit(&cluster, &junit_options).await;
    assert!(
        junit.contains("<testsuites name=\"stackgate audit\""),
        "{junit}"
    );
    assert!(
        junit.contains("<testsuite name=\"Secret/kube-system/cloud-config\""),
        "{junit}"
    );
}

#[tokio::test]
async fn the_same_messages_as_the_webhook() {
    // Each object's findings are the engine's verdict on an UPDATE of itself.
    let cluster = Arc::new(Mutex::new(standard_cluster()));
    let (_, text) = run_audit(&cluster, &AuditOptions::default()).await;
    let engine = engine();
    let object: DynamicObject = serde_json::from_value(labelled_configmap()).unwrap();
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let subject = stackgate::engine::Subject {
        operation: stackgate::rules::Operation::Update,
        kind: &gvk,
        namespace: Some(stackgate::short_text::ShortText::name("tenant-a")),
        name: stackgate::short_text::ShortText::name("occm-config"),
        subresource: None,
        object: Some(&object),
        old_object: Some(&object),
        dry_run: true,
        requester: stackgate::engine::Requester::Unknown,
    };
    let verdict = engine.evaluate(&subject);
    assert!(!verdict.denials.is_empty());
    for denial in &verdict.denials {
        // The text report shows the message up to its attribution; the source is printed
        // once per rule at the end.
        let shown = denial.text.one_line();
        assert!(
            shown.len() < denial.denial_text().len(),
            "{}",
            denial.denial_text()
        );
        assert!(
            text.contains(&format!(
                "ConfigMap/tenant-a/occm-config: error [{}/{}] {shown}\n",
                denial.rule.as_str(),
                denial.code,
            )),
            "{text}"
        );
    }
}

#[tokio::test]
async fn pages_through_large_lists_one_page_at_a_time() {
    let mut c = Cluster::default();
    for i in 0..7 {
        c.add(HELMRELEASES_V2, clean_helmrelease(i));
    }
    c.add(HELMRELEASES_V2, helmrelease());
    let cluster = Arc::new(Mutex::new(c));
    let options = AuditOptions {
        page_size: 3,
        format: Format::Json,
        ..AuditOptions::default()
    };
    let (_, text) = run_audit(&cluster, &options).await;
    let doc: Value = serde_json::from_str(&text).unwrap();
    // Eight HelmReleases, each evaluated once.
    let entries: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["file"].as_str().unwrap())
        .collect();
    assert!(entries.contains(&"HelmRelease/kube-system/openstack-cloud-controller-manager"));
    let c = cluster.lock().unwrap();
    let lists: Vec<&Recorded> = c
        .requests
        .iter()
        .filter(|r| r.path == HELMRELEASES_V2)
        .collect();
    // 8 objects at 3 a page: 3 requests, the later ones with the previous continue token.
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert!(lists.iter().all(|r| r.query.contains("limit=3")));
    assert!(!lists[0].query.contains("continue="));
    assert!(lists[1].query.contains("continue=3"), "{}", lists[1].query);
    assert!(lists[2].query.contains("continue=6"), "{}", lists[2].query);
    assert_eq!(doc["summary"]["objects"], 8, "{text}");
}

#[tokio::test]
async fn rbac_denial_is_reported_and_the_run_goes_on() {
    let mut c = standard_cluster();
    c.forbidden.insert(SECRETS.to_owned());
    c.forbidden.insert(DAEMONSETS.to_owned());
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "Secret/kube-system/cloud-config: error [input] cannot read it: 403 Forbidden"
        ),
        "{text}"
    );
    assert!(
        text.contains("DaemonSet (apps/v1): error [input] cannot list daemonsets: 403 Forbidden"),
        "{text}"
    );
    assert!(text.contains("findings on them are ones this run cannot see"));
    // The other kinds were still audited.
    assert!(
        text.contains("ConfigMap/tenant-a/occm-config: error"),
        "{text}"
    );
    assert!(text.contains("HelmRelease/kube-system/openstack-cloud-controller-manager:"));
}

#[tokio::test]
async fn absent_crds_are_notes_and_served_older_versions_are_used() {
    let mut c = Cluster::default();
    let mut old = helmrelease();
    old["apiVersion"] = json!("helm.toolkit.fluxcd.io/v2beta2");
    c.add(HELMRELEASES_V2BETA2, old);
    c.serve(SECRETS);
    c.serve(CONFIGMAPS);
    c.serve(DAEMONSETS);
    c.serve(DEPLOYMENTS);
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    // No CRD of Argo CD, RKE2 or openstack-k8s-operators: one note for all of them, not
    // errors, and not one line each (on a plain cluster they would be most of the report).
    let folded: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("not served by this cluster"))
        .collect();
    assert_eq!(folded.len(), 1, "{text}");
    assert!(
        folded[0].starts_with("note [skipped] ")
            && folded[0].contains(" kinds not served by this cluster (no CRD installed)")
            && folded[0].contains("HelmChart (helm.cattle.io/v1), ")
            && folded[0].contains("Application (argoproj.io/v1alpha1)")
            && folded[0].ends_with("(--verbose: one line each, with what it is listed for)"),
        "{text}"
    );
    assert!(
        !text.contains("HelmChart (helm.cattle.io/v1): note"),
        "{text}"
    );
    assert!(!text.contains("error [input]"), "{text}");
    // A served kind's older version was used, so it is not among the folded ones.
    assert!(
        !folded[0].contains("HelmRelease (helm.toolkit.fluxcd.io"),
        "{text}"
    );
    let verbose = AuditOptions {
        verbose: true,
        ..AuditOptions::default()
    };
    let (_, each) = run_audit(&cluster, &verbose).await;
    assert!(
        each.contains(
            "HelmChart (helm.cattle.io/v1): note [skipped] not served by this cluster (404: the CRD is not installed), so there is nothing of this kind to audit (listed for "
        ),
        "{each}"
    );
    assert!(each.contains("Application (argoproj.io/v1alpha1): note [skipped]"));
    assert!(!each.contains("kinds not served by this cluster"), "{each}");
    // The HelmRelease came from v2beta2, after v2 answered 404.
    assert!(
        text.contains("HelmRelease/kube-system/openstack-cloud-controller-manager: warning"),
        "{text}"
    );
    // Findings are warnings (serial calls missing): exit 0 with --fail-on error.
    assert_eq!(code, 0, "{text}");
    let c = cluster.lock().unwrap();
    assert!(c.requests.iter().any(|r| r.path == HELMRELEASES_V2));
    assert!(c.requests.iter().any(|r| r.path == HELMRELEASES_V2BETA2));
}

#[tokio::test]
async fn a_ccm_pod_older_than_its_config_is_reported_with_the_restart_command() {
    let cluster = Arc::new(Mutex::new(standard_cluster()));
    let options = AuditOptions {
        fail_on: FailOn::Warning,
        ..AuditOptions::default()
    };
    let (_, text) = run_audit(&cluster, &options).await;
    let line = text
        .lines()
        .find(|l| l.starts_with("DaemonSet/kube-system/openstack-cloud-controller-manager: warning [ccm-restart-needed]"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("Secret kube-system/cloud-config data[cloud.conf] was last written at 2026-11-22T03:39:21Z by field manager \"kubectl-create\""),
        "{line}"
    );
    assert!(
        line.contains("openstack-cloud-controller-manager-abcde (started 2026-11-22T03:35:00Z)")
    );
    assert!(line.contains(
        "`kubectl -n kube-system rollout restart daemonset/openstack-cloud-controller-manager`"
    ));
    // The pods were found with the DaemonSet's selector.
    let c = cluster.lock().unwrap();
    let pods = c
        .requests
        .iter()
        .find(|r| r.path == "/api/v1/namespaces/kube-system/pods")
        .expect("pods listed");
    assert_eq!(
        query_param(&pods.query, "labelSelector").as_deref(),
        Some("k8s-app=openstack-cloud-controller-manager")
    );
}

#[tokio::test]
async fn a_ccm_restarted_after_the_change_is_not_reported() {
    let mut c = standard_cluster();
    c.objects.retain(|(col, _)| col != PODS);
    // Pod started before, but its CCM container was restarted after the write (03:39:21).
    let mut pod = ccm_pod(
        "openstack-cloud-controller-manager-abcde",
        "2026-11-22T03:35:00Z",
    );
    pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] =
        json!("2026-11-22T03:40:00Z");
    c.add(PODS, pod);
    // A later write by a manager that does not own the key does not count.
    let secret = c
        .objects
        .iter_mut()
        .find(|(col, _)| col == SECRETS)
        .map(|(_, o)| o)
        .unwrap();
    secret["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"manager": "kubectl-label", "operation": "Update", "apiVersion": "v1",
                     "time": "2026-11-23T00:00:00Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}),
        );
    let cluster = Arc::new(Mutex::new(c));
    let (_, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert!(!text.contains("ccm-restart-needed"), "{text}");
}

#[tokio::test]
async fn the_replace_time_of_the_key_counts() {
    // The captured `kubectl replace`: kubectl-create owns only `f:data` now, kubectl-replace
    // owns `f:data.f:cloud.conf` at 03:39:22.
    let mut c = standard_cluster();
    c.objects.retain(|(col, _)| col != SECRETS);
    let mut secret = captured("secret/mutate-update-cloud-config-replace-serial-true.json");
    secret["metadata"]["creationTimestamp"] = json!("2026-11-22T03:39:21Z");
    c.add(SECRETS, secret);
    c.objects.retain(|(col, _)| col != PODS);
    c.add(PODS, ccm_pod("occm-a", "2026-11-22T03:39:21Z"));
    let cluster = Arc::new(Mutex::new(c));
    let (_, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert!(
        text.contains(
            "was last written at 2026-11-22T03:39:22Z by field manager \"kubectl-replace\""
        ),
        "{text}"
    );
    assert!(
        text.contains("occm-a (started 2026-11-22T03:39:21Z)"),
        "{text}"
    );
}

#[tokio::test]
async fn fix_previews_without_writing() {
    let cluster = Arc::new(Mutex::new(standard_cluster()));
    let options = AuditOptions {
        fix: true,
        ..AuditOptions::default()
    };
    let (_, text) = run_audit(&cluster, &options).await;
    golden("audit-fix-preview.txt", &text);
    assert!(text.contains("preview only, nothing written"), "{text}");
    assert!(
        text.contains(
            "kubectl -n kube-system rollout restart daemonset/openstack-cloud-controller-manager"
        ),
        "{text}"
    );
    let c = cluster.lock().unwrap();
    assert!(c.requests.iter().all(|r| r.method == "GET"));
}

#[tokio::test]
async fn fix_yes_sends_the_webhooks_patch_behind_a_resource_version_test() {
    let mut c = Cluster::default();
    c.add(SECRETS, cloud_config_secret());
    c.serve(CONFIGMAPS);
    c.serve(DAEMONSETS);
    c.serve(DEPLOYMENTS);
    let cluster = Arc::new(Mutex::new(c));
    let options = AuditOptions {
        fix: true,
        yes: true,
        ..AuditOptions::default()
    };
    let (code, text) = run_audit(&cluster, &options).await;
    // The engine's patch for the stored object, as the mutating webhook computes it.
    let engine = engine();
    let stored: DynamicObject = serde_json::from_value(cloud_config_secret()).unwrap();
    let gvk = GroupVersionKind::gvk("", "v1", "Secret");
    let (result, _) = audit::evaluate_update(&engine, &ApiResource::from_gvk(&gvk), &gvk, &stored);
    assert!(!result.verdict.patch.is_empty());
    let mut expected =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": "219"})];
    expected.extend(
        serde_json::to_value(&result.verdict.patch)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .cloned(),
    );

    let c = cluster.lock().unwrap();
    let patches: Vec<&Recorded> = c.requests.iter().filter(|r| r.method == "PATCH").collect();
    assert_eq!(patches.len(), 1, "{:?}", c.requests);
    let patch = patches[0];
    assert_eq!(
        patch.path,
        "/api/v1/namespaces/kube-system/secrets/cloud-config"
    );
    assert_eq!(patch.content_type, "application/json-patch+json");
    assert_eq!(
        query_param(&patch.query, "fieldManager").as_deref(),
        Some("stackgate-audit")
    );
    let sent: Value = serde_json::from_str(&patch.body).unwrap();
    assert_eq!(sent, Value::Array(expected));
    // The report describes the object as written: serial calls now set, nothing left.
    assert!(
        text.contains("Secret/kube-system/cloud-config: fixed: patched through the API"),
        "{text}"
    );
    assert!(
        !text.contains("Secret/kube-system/cloud-config: warning"),
        "{text}"
    );
    assert_eq!(code, 0, "{text}");
    // The stored Secret now has the line, and only that line changed.
    let stored = c.objects.iter().find(|(col, _)| col == SECRETS).unwrap();
    let data = stored.1["data"]["cloud.conf"].as_str().unwrap();
    use base64::Engine as _;
    let after = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap();
    assert!(
        after.contains("provider-requires-serial-api-calls"),
        "{after}"
    );
}

#[tokio::test]
async fn fix_yes_never_overwrites_an_object_changed_since_it_was_read() {
    let mut c = Cluster::default();
    c.add(SECRETS, cloud_config_secret());
    c.serve(CONFIGMAPS);
    c.serve(DAEMONSETS);
    c.serve(DEPLOYMENTS);
    let cluster = Arc::new(Mutex::new(c));
    // Someone writes the Secret between the audit's read and its patch: the first PATCH
    // request sees resourceVersion 999.
    let client = client(cluster.clone());
    let engine = engine();
    let audited = audit::audit(
        &client,
        &engine,
        &AuditOptions {
            fix: true,
            yes: true,
            ..AuditOptions::default()
        },
        &mut |_: &str, _: usize| {},
    )
    .await;
    assert_eq!(audited.fixes.len(), 1);
    {
        let mut c = cluster.lock().unwrap();
        let secret = c
            .objects
            .iter_mut()
            .find(|(col, _)| col == SECRETS)
            .unwrap();
        secret.1["metadata"]["resourceVersion"] = json!("999");
    }
    let outcomes = audit::fix::apply(&client, &audited.fixes, true).await;
    assert!(
        matches!(&outcomes[0].result, audit::fix::FixResult::Failed(why) if why.contains("changed since the audit read it")),
        "{outcomes:?}"
    );
    let c = cluster.lock().unwrap();
    let stored = c.objects.iter().find(|(col, _)| col == SECRETS).unwrap();
    assert_eq!(
        stored.1["data"],
        cloud_config_secret()["data"],
        "nothing written"
    );
}

// Background audit --------------------------------------------------------------------------

const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";
const POLICYREPORTS: &str = "/apis/wgpolicyk8s.io/v1alpha2/policyreports";
const CLUSTERPOLICYREPORTS: &str = "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports";

fn background_config(identity: &str) -> audit::background::BackgroundConfig {
    audit::background::BackgroundConfig {
        period: Duration::from_secs(600),
        lease_namespace: "stackgate-system".to_owned(),
        lease_name: "stackgate-audit".to_owned(),
        identity: identity.to_owned(),
        lease_duration: Duration::from_secs(60),
        max_results: 500,
        page_size: 250,
        debounce: Duration::from_secs(5),
        limits: audit::page::ReadLimits::default(),
        report_api: audit::background::ReportApi::Auto,
        exceptions: None,
        max_evaluation_memory: stackgate::budget::DEFAULT_MAX_EVALUATION_MEMORY,
    }
}

fn background_cluster() -> Cluster {
    let mut c = standard_cluster();
    c.forbidden.clear();
    c.serve(LEASES);
    c.serve(CLUSTERPOLICYREPORTS);
    // A report of an earlier run, in a namespace that is clean now.
    c.add(
        POLICYREPORTS,
        json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
               "metadata": {"name": "stackgate", "namespace": "fixed-ns",
                            "labels": {"app.kubernetes.io/managed-by": "stackgate"}},
               "summary": {"fail": 1}, "results": [{"policy": "serial-lb-api-calls", "result": "fail"}]}),
    );
    c
}

fn stored<'a>(c: &'a Cluster, collection: &str, namespace: Option<&str>, name: &str) -> &'a Value {
    c.objects
        .iter()
        .find(|(col, o)| {
            col == collection
                && o["metadata"]["name"] == name
                && o["metadata"]["namespace"].as_str() == namespace
        })
        .map(|(_, o)| o)
        .unwrap_or_else(|| panic!("{collection} {namespace:?}/{name} not stored"))
}

#[tokio::test]
async fn background_round_takes_the_lease_and_publishes_policy_reports() {
    let cluster = Arc::new(Mutex::new(background_cluster()));
    let client = client(cluster.clone());
    let metrics = audit::background::AuditMetrics::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
    metrics.register(&mut registry);
    let config = background_config("stackgate-0");
    let leader = tokio::time::timeout(
        TEST_TIMEOUT,
        audit::background::round(&client, &engine(), &config, &metrics, true),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(leader);

    let c = cluster.lock().unwrap();
    // The Lease was created (POST) for this replica.
    let lease = stored(&c, LEASES, Some("stackgate-system"), "stackgate-audit");
    assert_eq!(lease["spec"]["holderIdentity"], "stackgate-0");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 60);
    assert!(c.requests.iter().any(|r| r.method == "POST"
        && r.path == "/apis/coordination.k8s.io/v1/namespaces/stackgate-system/leases"));

    // Every report write is a server-side apply with stackgate's field manager.
    let applies: Vec<&Recorded> = c.requests.iter().filter(|r| r.method == "PATCH").collect();
    assert!(!applies.is_empty());
    for a in &applies {
        assert_eq!(a.content_type, "application/apply-patch+yaml", "{a:?}");
        assert_eq!(
            query_param(&a.query, "fieldManager").as_deref(),
            Some("stackgate")
        );
        assert_eq!(query_param(&a.query, "force").as_deref(), Some("true"));
    }
    // Nothing else is written: no PUT, and POST only for the Lease.
    assert!(c.requests.iter().all(|r| r.method != "PUT"));
    assert_eq!(c.requests.iter().filter(|r| r.method == "POST").count(), 1);

    // kube-system: the Secret's and HelmRelease's warnings, the CCM restart; fail/warn only.
    let ks = stored(&c, POLICYREPORTS, Some("kube-system"), "stackgate");
    assert_eq!(ks["apiVersion"], "wgpolicyk8s.io/v1alpha2");
    assert_eq!(
        ks["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "stackgate"
    );
    let results = ks["results"].as_array().unwrap();
    assert_eq!(ks["summary"]["warn"], 3, "{ks:#}");
    assert_eq!(ks["summary"]["fail"], 0);
    assert!(
        results
            .iter()
            .all(|r| r["result"] == "warn" && r["source"] == "stackgate")
    );
    let secret_result = results
        .iter()
        .find(|r| r["resources"][0]["kind"] == "Secret")
        .expect("the Secret's result");
    assert_eq!(
        secret_result["resources"][0],
        json!({"apiVersion": "v1", "kind": "Secret", "namespace": "kube-system", "name": "cloud-config"})
    );
    assert_eq!(secret_result["policy"], "serial-lb-api-calls");
    assert!(
        results.iter().any(
            |r| r["policy"] == "ccm-restart-needed" && r["resources"][0]["kind"] == "DaemonSet"
        )
    );
    // tenant-a: the denial is a fail with high severity.
    let ta = stored(&c, POLICYREPORTS, Some("tenant-a"), "stackgate");
    assert_eq!(ta["summary"]["fail"], 1);
    assert_eq!(ta["results"][0]["result"], "fail");
    assert_eq!(ta["results"][0]["severity"], "high");
    // The namespace fixed since the last run: its report is emptied (it clears).
    let fixed = stored(&c, POLICYREPORTS, Some("fixed-ns"), "stackgate");
    assert_eq!(fixed["results"], json!([]));
    assert_eq!(fixed["summary"]["fail"], 0);
    // Cluster-scoped subjects: none, so an empty ClusterPolicyReport.
    let cluster_report = stored(&c, CLUSTERPOLICYREPORTS, None, "stackgate");
    assert_eq!(cluster_report["kind"], "ClusterPolicyReport");
    assert_eq!(cluster_report["results"], json!([]));
    drop(c);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("stackgate_audit_violations{policy=\"serial-lb-api-calls\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("stackgate_audit_violations{policy=\"ccm-restart-needed\"} 1"),
        "{text}"
    );
    assert!(text.contains("stackgate_audit_objects 5"), "{text}");
    assert!(text.contains("stackgate_audit_leader 1"), "{text}");
    assert!(
        text.contains("stackgate_audit_last_success_timestamp_seconds"),
        "{text}"
    );
}

#[tokio::test]
async fn a_lease_held_by_another_replica_is_respected_until_it_expires() {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut c = background_cluster();
    c.add(
        LEASES,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "stackgate-audit", "namespace": "stackgate-system"},
               "spec": {"holderIdentity": "stackgate-1", "leaseDurationSeconds": 60,
                        "renewTime": now.to_string(), "leaseTransitions": 2}}),
    );
    let cluster = Arc::new(Mutex::new(c));
    let client = client(cluster.clone());
    let metrics = audit::background::AuditMetrics::default();
    let config = background_config("stackgate-0");
    let leader = audit::background::round(&client, &engine(), &config, &metrics, true)
        .await
        .unwrap();
    assert!(!leader);
    {
        let c = cluster.lock().unwrap();
        // Only the Lease was read: no audit, no write.
        assert!(
            c.requests
                .iter()
                .all(|r| r.method == "GET" && r.path.contains("/leases/")),
            "{:?}",
            c.requests
        );
    }
    // The holder stopped renewing 61 s ago: the Lease is taken over with a replace.
    {
        let mut c = cluster.lock().unwrap();
        let lease = c.objects.iter_mut().find(|(col, _)| col == LEASES).unwrap();
        let old = now
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(61))
            .unwrap();
        lease.1["spec"]["renewTime"] = json!(old.to_string());
    }
    let leader = audit::background::round(&client, &engine(), &config, &metrics, false)
        .await
        .unwrap();
    assert!(leader);
    let c = cluster.lock().unwrap();
    let lease = stored(&c, LEASES, Some("stackgate-system"), "stackgate-audit");
    assert_eq!(lease["spec"]["holderIdentity"], "stackgate-0");
    assert_eq!(lease["spec"]["leaseTransitions"], 3);
    let put = c
        .requests
        .iter()
        .find(|r| r.method == "PUT")
        .expect("a replace");
    let body: Value = serde_json::from_str(&put.body).unwrap();
    // The replace carries the resourceVersion it read (optimistic concurrency).
    assert!(body["metadata"]["resourceVersion"].is_string(), "{body}");
}

#[test]
fn reports_are_capped_with_the_full_summary() {
    let results: Vec<Value> = (0..10)
        .map(|i| json!({"result": if i % 2 == 0 { "fail" } else { "warn" }, "message": "m"}))
        .collect();
    let r = audit::background::report_object(Some("ns"), results, 4);
    assert_eq!(r["results"].as_array().unwrap().len(), 4);
    // The summary counts every result; the annotation says how many are not listed.
    assert_eq!(r["summary"]["fail"], 5);
    assert_eq!(r["summary"]["warn"], 5);
    assert_eq!(
        r["metadata"]["annotations"]["stackgate.dev/results-left-out"],
        "6"
    );
}

/// Audits the background audit published so far: each audit applies the cluster report once.
fn audits(c: &Cluster) -> usize {
    c.requests
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/clusterpolicyreports/stackgate"))
        .count()
}

fn watching(c: &Cluster, path: &str) -> bool {
    c.requests
        .iter()
        .any(|r| r.path == path && query_param(&r.query, "watch").as_deref() == Some("true"))
}

/// Waits (in the test's paused time) until `ready` holds.
async fn wait_for(cluster: &Arc<Mutex<Cluster>>, ready: impl Fn(&Cluster) -> bool) {
    for _ in 0..600 {
        if ready(&cluster.lock().unwrap()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never ready: {:?}", cluster.lock().unwrap().requests);
}

fn helmrelease_event(resource_version: u64) -> Value {
    let mut object = helmrelease();
    object["metadata"]["resourceVersion"] = json!(resource_version.to_string());
    json!({"type": "MODIFIED", "object": object})
}

#[tokio::test(start_paused = true)]
async fn a_change_re_audits_before_the_period_and_changes_are_coalesced() {
    let mut c = background_cluster();
    // Forbidden (403) and absent (404) kinds: probed once, never retried in a loop.
    c.forbidden.insert(APPLICATIONS.to_owned());
    let cluster = Arc::new(Mutex::new(c));
    let client = client(cluster.clone());
    let config = background_config("stackgate-0");
    let task = tokio::spawn(audit::background::run(
        client,
        config,
        audit::background::AuditMetrics::default(),
        || Arc::new(engine()),
    ));
    // The first audit, then the holder's watches: HelmReleases, the labelled ConfigMaps, the
    // named Secret in its namespace (by field selector).
    wait_for(&cluster, |c| {
        audits(c) == 1
            && watching(c, HELMRELEASES_V2)
            && watching(c, CONFIGMAPS)
            && watching(c, "/api/v1/namespaces/kube-system/secrets")
            // ClusterResourceSet payload Secrets, by the audit's own field selector.
            && c.requests.iter().any(|r| {
                r.path == SECRETS
                    && query_param(&r.query, "watch").as_deref() == Some("true")
                    && query_param(&r.query, "fieldSelector").as_deref()
                        == Some("type=addons.cluster.x-k8s.io/resource-set")
            })
    })
    .await;
    {
        let c = cluster.lock().unwrap();
        let secret_watch = c
            .requests
            .iter()
            .find(|r| r.path == "/api/v1/namespaces/kube-system/secrets")
            .unwrap();
        assert_eq!(
            query_param(&secret_watch.query, "fieldSelector").as_deref(),
            Some("metadata.name=cloud-config")
        );
        // Metadata only: the watches ask for PartialObjectMetadata, not whole objects.
        for r in c.requests.iter().filter(|r| {
            r.path == HELMRELEASES_V2 && query_param(&r.query, "watch").as_deref() == Some("true")
        }) {
            assert!(r.accept.contains("as=PartialObjectMetadata"), "{r:?}");
        }
    }
    let started = tokio::time::Instant::now();
    // Three changes within two seconds.
    for rv in [2001, 2002, 2003] {
        cluster
            .lock()
            .unwrap()
            .events
            .push((HELMRELEASES_V2.to_owned(), helmrelease_event(rv)));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Still inside the debounce: no audit yet.
    assert_eq!(audits(&cluster.lock().unwrap()), 1);
    tokio::time::sleep(Duration::from_secs(10)).await;
    // One audit for the three changes, long before the 600 s period.
    assert_eq!(audits(&cluster.lock().unwrap()), 2);
    assert!(started.elapsed() < Duration::from_secs(60));
    tokio::time::sleep(Duration::from_secs(60)).await;
    let c = cluster.lock().unwrap();
    assert_eq!(audits(&c), 2, "no change, no audit");
    // Each audit lists them once, and the watch probed them once.
    for absent in [APPLICATIONS, HELMCHARTS] {
        let reads = c.requests.iter().filter(|r| r.path == absent).count();
        assert_eq!(reads, 3, "{absent}: {:?}", c.requests);
    }
    drop(c);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_renewed_during_a_slow_audit() {
    let mut c = background_cluster();
    // Listing DaemonSets takes 70 s: longer than the 60 s Lease.
    c.slow = Some((DAEMONSETS.to_owned(), Duration::from_secs(70)));
    let cluster = Arc::new(Mutex::new(c));
    let client = client(cluster.clone());
    let metrics = audit::background::AuditMetrics::default();
    // A slow answer, not a stuck one: within the request timeout.
    let config = audit::background::BackgroundConfig {
        limits: ReadLimits {
            request_timeout: Duration::from_secs(90),
            ..ReadLimits::default()
        },
        ..background_config("stackgate-0")
    };
    let leader = audit::background::round(&client, &engine(), &config, &metrics, true)
        .await
        .unwrap();
    assert!(leader);
    let c = cluster.lock().unwrap();
    let renewals = c
        .requests
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/leases/stackgate-audit"))
        .count();
    // Every 20 s during the 70 s list.
    assert_eq!(renewals, 3, "{:?}", c.requests);
    assert_eq!(audits(&c), 1);
    let lease = stored(&c, LEASES, Some("stackgate-system"), "stackgate-audit");
    assert_eq!(lease["spec"]["holderIdentity"], "stackgate-0");
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_during_the_audit_publishes_nothing() {
    let mut c = background_cluster();
    c.slow = Some((DAEMONSETS.to_owned(), Duration::from_secs(70)));
    let cluster = Arc::new(Mutex::new(c));
    let client = client(cluster.clone());
    let metrics = audit::background::AuditMetrics::default();
    let config = background_config("stackgate-0");
    let taker = cluster.clone();
    tokio::spawn(async move {
        // After 10 s another replica holds the Lease (as after a partition).
        tokio::time::sleep(Duration::from_secs(10)).await;
        let mut c = taker.lock().unwrap();
        let lease = c.objects.iter_mut().find(|(col, _)| col == LEASES).unwrap();
        lease.1["spec"]["holderIdentity"] = json!("stackgate-1");
        lease.1["spec"]["renewTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
    });
    let leader = audit::background::round(&client, &engine(), &config, &metrics, true)
        .await
        .unwrap();
    assert!(!leader);
    let c = cluster.lock().unwrap();
    assert!(
        c.requests.iter().all(|r| r.method != "PATCH"),
        "a replica that lost the Lease wrote reports: {:?}",
        c.requests
    );
    assert!(c.objects.iter().all(|(col, _)| col != CLUSTERPOLICYREPORTS));
}

/// The ClusterResourceSet payload Secret of the capo-crs fixture as the API server stores it:
/// `stringData` merged into base64 `data`.
fn crs_payload_secret() -> Value {
    use base64::Engine as _;
    let text = fixture_text("capo-crs/repo/ccm-crs.yaml");
    let mut secret = text
        .split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .find(|d| d["kind"] == "Secret")
        .expect("the CRS Secret fixture");
    let payload = secret["stringData"]["cloud-config-secret.yaml"]
        .as_str()
        .expect("payload")
        .to_owned();
    secret.as_object_mut().unwrap().remove("stringData");
    secret["data"] = json!({
        "cloud-config-secret.yaml": base64::engine::general_purpose::STANDARD.encode(payload)
    });
    secret["metadata"]["creationTimestamp"] = json!("2026-11-22T03:00:00Z");
    secret
}

#[tokio::test]
async fn clusterresourceset_payload_secrets_are_listed_by_their_type() {
    let mut c = standard_cluster();
    c.add(SECRETS, crs_payload_secret());
    // An ordinary Secret elsewhere: the field selector keeps it out of the audit.
    c.add(
        SECRETS,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "app-token", "namespace": "default"},
               "data": {"token": "c2VjcmV0"}}),
    );
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 2, "{text}");
    // The embedded kube-system/cloud-config lacks the serial setting: the engine's message,
    // located in the payload.
    assert!(
        text.contains(
            "Secret/default/ccm-demo-crs-1: warning [serial-lb-api-calls/missing] Secret \
             default/ccm-demo-crs-1 data[\"cloud-config-secret.yaml\"]: [LoadBalancer] \
             provider-requires-serial-api-calls is not set (default false). Fix: set it to \
             true. At ClusterResourceSet payload document 1 (Secret kube-system/cloud-config \
             stringData[\"cloud.conf\"])."
        ),
        "{text}"
    );
    // Its diff is masked like any Secret's: no value of the payload appears.
    assert!(!text.contains("keystone.example.test"), "{text}");
    assert!(!text.contains("RegionOne"), "{text}");
    assert!(!text.contains("app-token"), "{text}");
    {
        let c = cluster.lock().unwrap();
        let list = c
            .requests
            .iter()
            .find(|r| r.path == SECRETS && query_param(&r.query, "fieldSelector").is_some())
            .expect("a Secret list by field selector");
        assert_eq!(
            query_param(&list.query, "fieldSelector").as_deref(),
            Some("type=addons.cluster.x-k8s.io/resource-set")
        );
        assert!(query_param(&list.query, "limit").is_some(), "{list:?}");
    }

    // Without Secret list rights: an input error naming what was not seen; the run goes on.
    cluster.lock().unwrap().forbidden.insert(SECRETS.to_owned());
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.lines().any(|line| line
            .starts_with("Secret (v1): error [input] cannot list secrets: 403 Forbidden")
            && line.contains("findings on them are ones this run cannot see")
            && line.ends_with("(listed for ClusterResourceSet payload Secrets (sites))")),
        "{text}"
    );
    assert!(!text.contains("ccm-demo-crs-1"), "{text}");
    assert!(text.contains("HelmRelease/kube-system/openstack-cloud-controller-manager:"));
}

#[tokio::test]
async fn object_rules_run_on_the_ccm_daemonset_a_payload_secret_embeds() {
    use base64::Engine as _;
    let text = fixture_text("capo-crs/objects/ccm-objects.yaml");
    let mut secret = text
        .split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .find(|d| d["metadata"]["name"] == "ccm-concurrency-crs")
        .expect("the fixture's payload Secret");
    let payload = secret["stringData"]["ccm.yaml"]
        .as_str()
        .expect("payload")
        .to_owned();
    secret.as_object_mut().unwrap().remove("stringData");
    secret["data"] = json!({"ccm.yaml": base64::engine::general_purpose::STANDARD.encode(payload)});
    secret["metadata"]["creationTimestamp"] = json!("2026-11-22T03:00:00Z");
    let mut c = standard_cluster();
    c.add(SECRETS, secret);
    let cluster = Arc::new(Mutex::new(c));
    let (_, text) = run_audit(&cluster, &AuditOptions::default()).await;
    // The embedded DaemonSet's --concurrent-service-syncs=4, located in the payload (the
    // line of the decoded payload text), judged as the object the payload creates.
    assert!(
        text.contains(
            "Secret/default/ccm-concurrency-crs: warning [ccm-concurrency/parallel-syncs] Secret \
             default/ccm-concurrency-crs ClusterResourceSet payload data[\"ccm.yaml\"] \
             document 2 line 31: DaemonSet kube-system/openstack-cloud-controller-manager \
             container \"openstack-cloud-controller-manager\" args[5]: \
             --concurrent-service-syncs=4"
        ),
        "{text}"
    );
    assert_eq!(
        text.matches("ccm-concurrency-crs: warning [ccm-concurrency/")
            .count(),
        1,
        "{text}"
    );
    // The trimmed DaemonSet mounts no volume at its --cloud-config: said, once.
    assert_eq!(
        text.matches("ccm-concurrency-crs: warning [ccm-config-source/")
            .count(),
        1,
        "{text}"
    );
}

/// The Secret `kube-system/cloud-config` (a named site) holding `cloud.conf`, as stored.
fn cloud_config_secret_with(ini: &str) -> Value {
    use base64::Engine as _;
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "cloud-config", "namespace": "kube-system",
                     "creationTimestamp": "2026-11-22T03:00:00Z"},
        "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(ini)}})
}

fn load_balancer_service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["192.0.2.0/24"],
                 "ports": [{"port": 443}]}})
}

#[tokio::test]
async fn a_load_balancer_service_is_judged_against_the_clusters_cloud_config() {
    let ovn = "[Global]\nregion = RegionOne\n\n[LoadBalancer]\nlb-provider = ovn\n";
    let mut c = Cluster::default();
    c.add(SECRETS, cloud_config_secret_with(ovn));
    c.add(SERVICES, load_balancer_service());
    // Not a load balancer: no finding.
    c.add(
        SERVICES,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "internal", "namespace": "shop"},
               "spec": {"type": "ClusterIP", "loadBalancerSourceRanges": ["192.0.2.0/24"]}}),
    );
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 1, "{text}");

    // The engine's verdict with the Secret's settings as the fact, as the webhook has it.
    let engine = engine();
    let secret: DynamicObject = serde_json::from_value(cloud_config_secret_with(ovn)).unwrap();
    let secret_gvk = GroupVersionKind::gvk("", "v1", "Secret");
    let settings = stackgate::facts::cloud_config::settings_of(
        &secret_gvk,
        &secret,
        None,
        &engine.policies().sites,
    );
    assert_eq!(settings.len(), 1, "{settings:?}");
    let facts = stackgate::engine::Facts::of(
        stackgate::rules::ovn_source_ranges::FAMILY.id,
        stackgate::rules::ovn_source_ranges::CloudConfigFact::Known(settings[0].clone()),
    );
    let object: DynamicObject = serde_json::from_value(load_balancer_service()).unwrap();
    let gvk = GroupVersionKind::gvk("", "v1", "Service");
    let subject = stackgate::engine::Subject {
        operation: stackgate::rules::Operation::Update,
        kind: &gvk,
        namespace: Some(stackgate::short_text::ShortText::name("shop")),
        name: stackgate::short_text::ShortText::name("web"),
        subresource: None,
        object: Some(&object),
        old_object: Some(&object),
        dry_run: true,
        requester: stackgate::engine::Requester::Unknown,
    };
    let verdict = engine.evaluate_with(&subject, &facts);
    assert_eq!(verdict.denials.len(), 1, "{verdict:?}");
    let denial = &verdict.denials[0];
    assert!(
        denial
            .denial_text()
            .contains("lb-provider = ovn without manage-security-groups"),
        "{}",
        denial.denial_text()
    );
    let shown = denial.text.one_line();
    assert!(
        text.contains(&format!(
            "Service/shop/web: error [ovn-source-ranges/{}] {shown}\n",
            denial.code
        )),
        "{text}"
    );
    assert!(!text.contains("Service/shop/internal: error"), "{text}");
    assert!(!text.contains("RegionOne"), "{text}");
    {
        let c = cluster.lock().unwrap();
        let list = c
            .requests
            .iter()
            .find(|r| r.path == SERVICES)
            .expect("a Service list");
        assert!(query_param(&list.query, "limit").is_some(), "{list:?}");
    }

    // Security groups managed: the ranges are honoured, no finding on the Service.
    let managed = format!("{ovn}manage-security-groups = true\n");
    {
        let mut c = cluster.lock().unwrap();
        c.objects.retain(|(col, _)| col != SECRETS);
        c.add(SECRETS, cloud_config_secret_with(&managed));
    }
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert!(!text.contains("[ovn-source-ranges/"), "{text}");
    assert!(!text.contains("Service/shop/web: error"), "{text}");
    assert_ne!(code, 2, "{text}");

    // No cloud config in the cluster: the rule says it cannot see one, and does not deny.
    cluster
        .lock()
        .unwrap()
        .objects
        .retain(|(col, _)| col != SECRETS);
    let (_, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert!(
        text.lines().any(
            |l| l.starts_with("Service/shop/web: warning [ovn-source-ranges/")
                && l.contains("no cloud config is configured or found for this run")
        ),
        "{text}"
    );
    assert!(!text.contains("Service/shop/web: error"), "{text}");

    // Two cloud configs that disagree (the named Secret says OVN, a labelled ConfigMap
    // amphora): the audit cannot tell which one the CCM reads, so it warns and never denies.
    {
        let mut c = cluster.lock().unwrap();
        c.add(SECRETS, cloud_config_secret_with(ovn));
        let mut amphora = labelled_configmap();
        amphora["data"]["cloud.conf"] = json!("[LoadBalancer]\nlb-provider = amphora\n");
        c.add(CONFIGMAPS, amphora);
    }
    let (_, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert!(
        text.lines().any(
            |l| l.starts_with("Service/shop/web: warning [ovn-source-ranges/")
                && l.contains(
                    "this cluster holds 2 cloud configs whose load-balancer settings differ"
                )
                && l.contains("the audit cannot tell which one the CCM reads")
        ),
        "{text}"
    );
    assert!(!text.contains("Service/shop/web: error"), "{text}");
}

/// A Secret labelled `stackgate.dev/ccm-values=<key>` (the CCM chart's values, a Flux
/// `valuesFrom` source) is listed by its label selector and judged as one values source; an
/// unlabelled Secret with the same data is never read.
#[tokio::test]
async fn labelled_values_secrets_are_listed_and_judged() {
    let values = "cloudConfig:\n  global:\n    auth-url: https://keystone.example.test/v3\n  \
                  loadBalancer:\n    lb-provider: amphora\n";
    let secret = |name: &str, labelled: bool| {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": "flux-system",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "data": {"values.yaml": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, values)}});
        if labelled {
            s["metadata"]["labels"] = json!({"stackgate.dev/ccm-values": "values.yaml"});
        }
        s
    };
    let mut c = Cluster::default();
    c.add(SECRETS, secret("occm-values", true));
    c.add(SECRETS, secret("other-values", false));
    c.serve(CONFIGMAPS);
    c.serve(DAEMONSETS);
    c.serve(DEPLOYMENTS);
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert!(
        text.contains("Secret/flux-system/occm-values: warning [serial-lb-api-calls/"),
        "{text}"
    );
    assert!(
        text.contains("is not set in these values")
            && text.contains("These values are one values source"),
        "{text}"
    );
    assert!(!text.contains("other-values"), "{text}");
    assert_eq!(code, 0, "{text}");
    let c = cluster.lock().unwrap();
    assert!(
        c.requests.iter().any(|r| r.path == SECRETS
            && percent_decode(&r.query).contains("labelSelector=stackgate.dev/ccm-values")),
        "{:?}",
        c.requests
    );
}

// ---- Issue 22: an audit bounded by its page size, not by the cluster ----

use audit::page::ReadLimits;

const OPENREPORTS: &str = "/apis/openreports.io/v1alpha1/reports";
const CLUSTEROPENREPORTS: &str = "/apis/openreports.io/v1alpha1/clusterreports";

/// A ConfigMap labelled as a cloud config with serial calls off (a denial), padded with a
/// comment of `padding` bytes that holds a marker no report may show.
fn labelled_config(namespace: &str, name: &str, padding: usize) -> Value {
    let mut ini = String::from("[LoadBalancer]\nprovider-requires-serial-api-calls = false\n");
    if padding > 0 {
        ini.push_str("; CONTENT-MARKER ");
        ini.push_str(&"x".repeat(padding));
        ini.push('\n');
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
        "data": {"cloud.conf": ini}})
}

/// A small cluster: the ConfigMaps given, and the other kinds served empty.
fn configmap_cluster(configmaps: Vec<Value>) -> Cluster {
    let mut c = Cluster::default();
    for cm in configmaps {
        c.add(CONFIGMAPS, cm);
    }
    c.serve(SECRETS);
    c.serve(DAEMONSETS);
    c.serve(DEPLOYMENTS);
    c
}

/// The JSON bytes of a stored object as a list item (the fake server drops apiVersion and
/// kind from items, as the apiserver does).
fn item_bytes(c: &Cluster, name: &str) -> usize {
    let (_, o) = c
        .objects
        .iter()
        .find(|(_, o)| o["metadata"]["name"] == name)
        .unwrap();
    let mut o = o.clone();
    let m = o.as_object_mut().unwrap();
    m.remove("apiVersion");
    m.remove("kind");
    serde_json::to_vec(&o).unwrap().len()
}

fn list_requests(c: &Cluster, path: &str) -> usize {
    c.requests
        .iter()
        .filter(|r| r.method == "GET" && r.path == path)
        .count()
}

#[tokio::test]
async fn an_endless_continue_token_stops_the_kind_at_the_page_limit() {
    let mut c = standard_cluster();
    c.forbidden.clear();
    c.runaway
        .push((HELMRELEASES_V2.to_owned(), Runaway::Endless));
    let cluster = Arc::new(Mutex::new(c));
    let options = AuditOptions {
        limits: ReadLimits {
            max_list_pages: 25,
            ..ReadLimits::default()
        },
        max_report_objects: 10,
        ..AuditOptions::default()
    };
    let (code, text) = run_audit(&cluster, &options).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "HelmRelease (helm.toolkit.fluxcd.io/v2): error [input] stopped listing helmreleases \
             after 25 list requests (the limit, --max-list-pages): the API server kept answering \
             with another continue token; its objects were not audited"
        ),
        "{text}"
    );
    assert_eq!(list_requests(&cluster.lock().unwrap(), HELMRELEASES_V2), 25);
    // The kinds after it were audited, and the report is bounded: 10 entries listed, the
    // rest counted ("and N more").
    assert_eq!(list_requests(&cluster.lock().unwrap(), DAEMONSETS), 1);
    assert!(text.contains("more entries not listed"), "{text}");
    let listed: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with(['…', ' ', '+', '-', '@']) && l.contains(": "))
        .filter_map(|l| l.split(": ").next())
        .filter(|e| !e.starts_with("stackgate audit") && !e.starts_with("source of"))
        // Kind entries (`HelmRelease (helm.toolkit.fluxcd.io/v2)`) are always listed.
        .filter(|e| !e.contains(" ("))
        .collect();
    assert!(listed.len() <= 10, "{listed:?}");
}

#[tokio::test]
async fn a_repeated_continue_token_stops_the_kind_at_once() {
    let mut c = standard_cluster();
    c.forbidden.clear();
    c.runaway
        .push((HELMRELEASES_V2.to_owned(), Runaway::Repeated));
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "HelmRelease (helm.toolkit.fluxcd.io/v2): error [input] stopped listing helmreleases \
             after 2 list requests: the API server answered with a continue token it had already \
             given (a paging loop)"
        ),
        "{text}"
    );
    // The first page was audited; the second (the same token again) was the last request.
    assert_eq!(list_requests(&cluster.lock().unwrap(), HELMRELEASES_V2), 2);
    assert!(text.contains("HelmRelease/kube-system/openstack-cloud-controller-manager: warning"));
}

#[tokio::test]
async fn an_object_over_the_object_cap_is_named_and_skipped_at_the_limit_and_one_past_it() {
    let configs = vec![
        labelled_config("tenant-a", "before", 0),
        labelled_config("tenant-b", "huge", 200 * 1024),
        labelled_config("tenant-c", "after", 0),
    ];
    let c = configmap_cluster(configs);
    let size = item_bytes(&c, "huge");
    let cluster = Arc::new(Mutex::new(c));
    let at = |max_object_bytes| AuditOptions {
        limits: ReadLimits {
            max_object_bytes,
            ..ReadLimits::default()
        },
        ..AuditOptions::default()
    };
    // At the limit: read and judged like the others.
    let (code, text) = run_audit(&cluster, &at(size)).await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("ConfigMap/tenant-b/huge: error [serial-lb-api-calls/"),
        "{text}"
    );
    // One byte under its size: skipped, named with its size, content never shown.
    let (code, text) = run_audit(&cluster, &at(size - 1)).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(&format!(
            "ConfigMap/tenant-b/huge: error [input] not audited: the object is {size} bytes, over \
             the audit's limit of {} bytes per object (--max-object-bytes); its content was not read",
            size - 1
        )),
        "{text}"
    );
    assert!(!text.contains("CONTENT-MARKER"), "{text}");
    assert!(
        !text.contains("ConfigMap/tenant-b/huge: error [serial"),
        "{text}"
    );
    // The objects on the same page around it were audited.
    assert!(text.contains("ConfigMap/tenant-a/before: error [serial-lb-api-calls/"));
    assert!(text.contains("ConfigMap/tenant-c/after: error [serial-lb-api-calls/"));
}

#[tokio::test]
async fn a_page_over_the_page_cap_is_asked_again_smaller_and_a_lone_object_over_it_skipped() {
    let configs = vec![
        labelled_config("tenant-a", "before", 0),
        labelled_config("tenant-b", "huge", 200 * 1024),
        labelled_config("tenant-c", "after", 0),
    ];
    let cluster = Arc::new(Mutex::new(configmap_cluster(configs)));
    let options = AuditOptions {
        limits: ReadLimits {
            max_page_bytes: 128 * 1024,
            ..ReadLimits::default()
        },
        ..AuditOptions::default()
    };
    let (code, text) = run_audit(&cluster, &options).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "ConfigMap/tenant-b/huge: error [input] not audited: a list page of this object alone \
             is over the audit's limit of 131072 bytes per page (--max-page-bytes); its content \
             was not read"
        ),
        "{text}"
    );
    assert!(!text.contains("CONTENT-MARKER"), "{text}");
    assert!(
        text.contains("ConfigMap/tenant-a/before: error [serial-lb-api-calls/"),
        "{text}"
    );
    assert!(
        text.contains("ConfigMap/tenant-c/after: error [serial-lb-api-calls/"),
        "{text}"
    );
    let c = cluster.lock().unwrap();
    // The object was named through one metadata-only page, never read whole afterwards.
    let metadata_lists: Vec<&Recorded> = c
        .requests
        .iter()
        .filter(|r| r.accept.contains("as=PartialObjectMetadataList"))
        .collect();
    assert_eq!(metadata_lists.len(), 1, "{:?}", c.requests);
    assert_eq!(
        query_param(&metadata_lists[0].query, "limit").as_deref(),
        Some("1")
    );
}

#[tokio::test]
async fn many_objects_a_bounded_report_whose_summary_counts_them_all() {
    let configs: Vec<Value> = (0..300)
        .map(|i| labelled_config(&format!("ns-{}", i % 7), &format!("cm-{i}"), 0))
        .collect();
    let cluster = Arc::new(Mutex::new(configmap_cluster(configs)));
    let json_options = |max_report_objects| AuditOptions {
        format: Format::Json,
        max_report_objects,
        page_size: 40,
        ..AuditOptions::default()
    };
    let (full_code, full) = run_audit(&cluster, &json_options(10_000)).await;
    let (code, capped) = run_audit(&cluster, &json_options(50)).await;
    let full: Value = serde_json::from_str(&full).unwrap();
    let capped: Value = serde_json::from_str(&capped).unwrap();
    assert_eq!(code, full_code);
    assert_eq!(full["summary"]["errors"], 300);
    // The summary is true; the listing holds 50 entries; the rest are counted as not listed.
    for key in [
        "objects",
        "errors",
        "warnings",
        "notes",
        "inputErrors",
        "exitCode",
    ] {
        assert_eq!(capped["summary"][key], full["summary"][key], "{key}");
    }
    let listed: BTreeSet<&str> = capped["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["file"].as_str())
        .collect();
    assert!(listed.len() <= 50, "{}", listed.len());
    assert!(capped["summary"]["notListed"]["entries"].as_u64().unwrap() >= 250);
    // Findings cap: the same fold.
    let (_, text) = run_audit(
        &cluster,
        &AuditOptions {
            max_report_findings: 20,
            ..AuditOptions::default()
        },
    )
    .await;
    assert!(text.contains("more entries not listed (2"), "{text}");
    assert!(text.contains("300 errors"), "{text}");
    assert!(
        text.lines()
            .filter(|l| l.contains("error [serial-lb-api-calls/"))
            .count()
            <= 20
    );
}

#[tokio::test]
async fn policy_reports_are_bounded_and_their_summaries_count_every_finding() {
    let configs: Vec<Value> = (0..30)
        .map(|i| labelled_config("tenant-many", &format!("cm-{i}"), 0))
        .collect();
    let cluster = Arc::new(Mutex::new(configmap_cluster(configs)));
    let client = client(cluster.clone());
    let options = AuditOptions {
        max_report_objects: 5,
        ..AuditOptions::default()
    };
    let audited = audit::audit(&client, &engine(), &options, &mut |_: &str, _: usize| {}).await;
    let reports = audit::background::policy_reports(
        &audited.report,
        &audited.tally,
        3,
        k8s_openapi::jiff::Timestamp::now(),
    );
    let r = &reports[&Some("tenant-many".to_owned())];
    assert_eq!(r["results"].as_array().unwrap().len(), 3);
    assert_eq!(r["summary"]["fail"], 30);
    assert_eq!(
        r["metadata"]["annotations"]["stackgate.dev/results-left-out"],
        "27"
    );
    // Each result carries the finding's code.
    assert_eq!(r["results"][0]["properties"]["code"], "false", "{r:#}");
}

/// A background round against a cluster that serves `report_collections`.
async fn publish_round(served: &[&str], api: audit::background::ReportApi) -> Cluster {
    let mut c = standard_cluster();
    c.forbidden.clear();
    c.serve(LEASES);
    for s in served {
        c.serve(s);
    }
    let cluster = Arc::new(Mutex::new(c));
    let client = client(cluster.clone());
    let metrics = audit::background::AuditMetrics::default();
    let config = audit::background::BackgroundConfig {
        report_api: api,
        ..background_config("stackgate-0")
    };
    let leader = tokio::time::timeout(
        TEST_TIMEOUT,
        audit::background::round(&client, &engine(), &config, &metrics, true),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(leader);
    std::mem::take(&mut *cluster.lock().unwrap())
}

fn applied(c: &Cluster, collection_part: &str) -> usize {
    c.requests
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains(collection_part))
        .count()
}

#[tokio::test]
async fn reports_are_written_in_each_report_api_the_cluster_serves() {
    use audit::background::ReportApi;
    let both = [
        POLICYREPORTS,
        CLUSTERPOLICYREPORTS,
        OPENREPORTS,
        CLUSTEROPENREPORTS,
    ];
    // Both served, auto: both written, with the same results.
    let c = publish_round(&both, ReportApi::Auto).await;
    let wg = stored(&c, POLICYREPORTS, Some("tenant-a"), "stackgate");
    let or = stored(&c, OPENREPORTS, Some("tenant-a"), "stackgate");
    assert_eq!(or["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(or["kind"], "Report");
    assert_eq!(or["source"], "stackgate");
    assert_eq!(or["results"], wg["results"]);
    assert_eq!(or["summary"]["fail"], 1);
    assert_eq!(or["results"][0]["properties"]["code"], "false");
    let cluster_report = stored(&c, CLUSTEROPENREPORTS, None, "stackgate");
    assert_eq!(cluster_report["kind"], "ClusterReport");
    // Only openreports.io served, auto: only it (no write to an API that is not there).
    let c = publish_round(&[OPENREPORTS, CLUSTEROPENREPORTS], ReportApi::Auto).await;
    assert!(applied(&c, "/openreports.io/") > 0);
    assert_eq!(applied(&c, "/wgpolicyk8s.io/"), 0);
    // Only wgpolicyk8s.io served, auto: only it.
    let c = publish_round(&[POLICYREPORTS, CLUSTERPOLICYREPORTS], ReportApi::Auto).await;
    assert!(applied(&c, "/wgpolicyk8s.io/") > 0);
    assert_eq!(applied(&c, "/openreports.io/"), 0);
    // Chosen explicitly: only that one, whatever is served.
    let c = publish_round(&both, ReportApi::Wgpolicyk8s).await;
    assert!(applied(&c, "/wgpolicyk8s.io/") > 0);
    assert_eq!(applied(&c, "/openreports.io/"), 0);
    let c = publish_round(&both, ReportApi::Openreports).await;
    assert!(applied(&c, "/openreports.io/") > 0);
    assert_eq!(applied(&c, "/wgpolicyk8s.io/"), 0);
    // Neither served, auto: nothing written, and the round still succeeds (writing to an
    // API that is not there failed every round on a plain cluster).
    let c = publish_round(&[], ReportApi::Auto).await;
    assert_eq!(applied(&c, "/openreports.io/"), 0);
    assert_eq!(applied(&c, "/wgpolicyk8s.io/"), 0);
    assert!(c.requests.iter().any(|r| r.method == "GET"));
}

const K0S_CLUSTERCONFIGS: &str = "/apis/k0s.k0sproject.io/v1beta1/clusterconfigs";

/// Issue 23, faces drift: the webhook reads k0s ClusterConfigs, so the audit lists them; a
/// cluster without k0s answers 404, a note.
#[tokio::test]
async fn k0s_cluster_configs_are_listed_and_judged() {
    let mut c = configmap_cluster(Vec::new());
    c.add(
        K0S_CLUSTERCONFIGS,
        json!({"apiVersion": "k0s.k0sproject.io/v1beta1", "kind": "ClusterConfig",
            "metadata": {"name": "k0s", "namespace": "kube-system"},
            "spec": {"extensions": {"helm": {"charts": [
                {"name": "occm", "chartname": "openstack/openstack-cloud-controller-manager",
                 "values": "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n"}]}}}}),
    );
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("ClusterConfig/kube-system/k0s: error [serial-lb-api-calls/"),
        "{text}"
    );
    let (code, text) = run_audit(
        &Arc::new(Mutex::new(configmap_cluster(Vec::new()))),
        &AuditOptions::default(),
    )
    .await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("note [skipped] ")
            && l.contains("not served by this cluster")
            && l.contains("ClusterConfig (k0s.k0sproject.io/v1beta1)")),
        "{text}"
    );
}

/// The background audit counts the caps it reached in `stackgate_input_limits_total`, and its
/// reports' summaries still count what it could read.
#[tokio::test]
async fn the_background_audit_counts_its_caps_in_the_input_limits_metric() {
    let mut c = configmap_cluster(vec![
        labelled_config("tenant-a", "small", 0),
        labelled_config("tenant-b", "huge", 64 * 1024),
    ]);
    c.serve(LEASES);
    c.serve(POLICYREPORTS);
    c.serve(CLUSTERPOLICYREPORTS);
    let cluster = Arc::new(Mutex::new(c));
    let client = client(cluster.clone());
    let input_limits = prometheus_client::metrics::family::Family::<
        stackgate::metrics::LimitLabels,
        prometheus_client::metrics::counter::Counter,
    >::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
    registry.register("input_limits", "caps", input_limits.clone());
    let metrics = audit::background::AuditMetrics::default().counting_limits_in(input_limits);
    let config = audit::background::BackgroundConfig {
        limits: ReadLimits {
            max_object_bytes: 16 * 1024,
            ..ReadLimits::default()
        },
        ..background_config("stackgate-0")
    };
    let leader = tokio::time::timeout(
        TEST_TIMEOUT,
        audit::background::round(&client, &engine(), &config, &metrics, true),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(leader);
    let text = support_encoded(&registry);
    assert!(
        text.contains("stackgate_input_limits_total{limit=\"audit_object_bytes\"} 1"),
        "{text}"
    );
    let c = cluster.lock().unwrap();
    assert_eq!(
        stored(&c, POLICYREPORTS, Some("tenant-a"), "stackgate")["summary"]["fail"],
        1
    );
}

fn support_encoded(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}

/// A named site that also carries the site label is listed twice (by name, then by label)
/// and reported once: the audit remembers the selections it has listed, not the names.
#[tokio::test]
async fn an_object_two_targets_select_is_reported_once() {
    let mut named = labelled_config("openshift-config", "cloud-provider-config", 0);
    named["data"] =
        json!({"config": "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n"});
    named["metadata"]["labels"] = json!({"stackgate.dev/cloud-config": "config"});
    let cluster = Arc::new(Mutex::new(configmap_cluster(vec![named])));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 1, "{text}");
    let entries = text
        .lines()
        .filter(|l| l.starts_with("ConfigMap/openshift-config/cloud-provider-config: error"))
        .count();
    assert_eq!(entries, 1, "{text}");
    let c = cluster.lock().unwrap();
    // Read twice (a get by name, a labelled list), judged once.
    assert!(
        c.requests
            .iter()
            .any(|r| r.path.ends_with("/configmaps/cloud-provider-config"))
    );
    assert!(c.requests.iter().any(|r| r.path == CONFIGMAPS));
}

// Issue 31: bounded in time and by the namespaces' number and length ------------------------

/// A list page sent one byte every 2 s ends at the request timeout with an input error that
/// names the kind, and the kinds after it are still audited.
#[tokio::test]
async fn a_dripped_list_page_stops_at_the_request_timeout() {
    let mut c = configmap_cluster(vec![labelled_config("tenant-a", "occm", 0)]);
    c.add(SECRETS, cloud_config_secret());
    c.drip = Some(CONFIGMAPS.to_owned());
    let cluster = Arc::new(Mutex::new(c));
    let options = AuditOptions {
        limits: ReadLimits {
            request_timeout: Duration::from_secs(1),
            ..ReadLimits::default()
        },
        ..AuditOptions::default()
    };
    let (code, text) = run_audit(&cluster, &options).await;
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "ConfigMap (v1): error [input] stopped listing configmaps: list request 1 got no \
             complete answer within the audit's limit of 1s per request (--request-timeout); \
             its objects were not audited"
        ),
        "{text}"
    );
    // The Secrets, listed after the ConfigMaps, were audited.
    assert!(text.contains("Secret/kube-system/cloud-config"), "{text}");
    assert!(list_requests(&cluster.lock().unwrap(), SECRETS) >= 1);
}

/// The background audit reads through the same bounded reads: a dripped page ends its kind
/// at the request timeout, the round publishes, and the cap is counted.
#[tokio::test]
async fn the_background_audit_stops_a_dripped_page_and_counts_it() {
    let mut c = configmap_cluster(vec![labelled_config("tenant-a", "occm", 0)]);
    c.drip = Some(CONFIGMAPS.to_owned());
    c.serve(LEASES);
    c.serve(POLICYREPORTS);
    c.serve(CLUSTERPOLICYREPORTS);
    let cluster = Arc::new(Mutex::new(c));
    let client = client(cluster.clone());
    let input_limits = prometheus_client::metrics::family::Family::<
        stackgate::metrics::LimitLabels,
        prometheus_client::metrics::counter::Counter,
    >::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
    registry.register("input_limits", "caps", input_limits.clone());
    let metrics = audit::background::AuditMetrics::default().counting_limits_in(input_limits);
    let config = audit::background::BackgroundConfig {
        limits: ReadLimits {
            request_timeout: Duration::from_secs(1),
            ..ReadLimits::default()
        },
        ..background_config("stackgate-0")
    };
    let leader = tokio::time::timeout(
        TEST_TIMEOUT,
        audit::background::round(&client, &engine(), &config, &metrics, true),
    )
    .await
    .expect("the round ends")
    .expect("the round publishes");
    assert!(leader);
    let text = support_encoded(&registry);
    assert!(
        text.contains("stackgate_input_limits_total{limit=\"audit_request_timeout\"}"),
        "{text}"
    );
}

/// `count` labelled ConfigMaps (a denial each), each in its own namespace of `bytes` bytes.
fn configs_in_long_namespaces(count: usize, bytes: usize) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let mut ns = format!("ns-{i:05}-");
            ns.push_str(&"n".repeat(bytes - ns.len()));
            labelled_config(&ns, &format!("cm-{i}"), 0)
        })
        .collect()
}

async fn audit_of(configs: Vec<Value>, options: &AuditOptions) -> audit::Audit {
    let cluster = Arc::new(Mutex::new(configmap_cluster(configs)));
    let client = client(cluster);
    let mut progress = |_: &str, _: usize| {};
    tokio::time::timeout(
        Duration::from_secs(60),
        audit::audit(&client, &engine(), options, &mut progress),
    )
    .await
    .expect("the audit finishes")
}

/// Ten times the objects, each in its own 2 KB namespace: the report is the same size, the
/// namespaces are cut to Kubernetes' 63 bytes, the summary counts every object, and the
/// PolicyReports name the namespaces with the most findings and count the rest.
#[tokio::test]
async fn distinct_long_namespaces_give_a_report_bounded_whatever_their_number() {
    use audit::tally::MAX_NAMED_NAMESPACES;
    let options = AuditOptions {
        max_report_objects: 40,
        ..AuditOptions::default()
    };
    let few = 120;
    let many = MAX_NAMED_NAMESPACES + 200;
    let small = audit_of(configs_in_long_namespaces(few, 2048), &options).await;
    let large = audit_of(configs_in_long_namespaces(many, 2048), &options).await;
    let text =
        |a: &audit::Audit| stackgate::report::render::text_as(&a.report, true, &audit::AUDIT, true);
    let (small_text, large_text) = (text(&small), text(&large));
    assert_eq!(large.report.counts().errors, many);
    assert!(
        large_text.contains(&format!("{many} errors")),
        "{large_text}"
    );
    // Only the counts in the summary differ.
    assert!(
        large_text.len() <= small_text.len() + 64,
        "{} bytes for {many} objects, {} for {few}",
        large_text.len(),
        small_text.len()
    );
    // Each listed namespace is cut: its first 63 bytes and `…`, never the 2 KB.
    let first = configs_in_long_namespaces(1, 2048).remove(0);
    let namespace = first["metadata"]["namespace"].as_str().unwrap();
    assert!(!large_text.contains(&namespace[..64]), "not cut");
    assert!(
        large_text.contains(&format!("ConfigMap/{}…/cm-0", &namespace[..63])),
        "{large_text}"
    );
    // The tally names the namespaces with the most findings; the others are counted.
    let named = large.tally.named();
    assert_eq!(named.len(), MAX_NAMED_NAMESPACES);
    assert_eq!(large.tally.more_namespaces(), many - MAX_NAMED_NAMESPACES);
    let reports = audit::background::policy_reports(
        &large.report,
        &large.tally,
        10,
        k8s_openapi::jiff::Timestamp::now(),
    );
    assert_eq!(
        reports.len(),
        MAX_NAMED_NAMESPACES + 1,
        "and the cluster report"
    );
    assert_eq!(
        reports[&None]["metadata"]["annotations"][audit::background::NAMESPACES_LEFT_OUT],
        (many - MAX_NAMED_NAMESPACES).to_string()
    );
    assert!(
        reports
            .iter()
            .filter(|(ns, _)| ns.is_some())
            .all(|(_, r)| r["summary"]["fail"] == 1)
    );
}

/// Issue 32: an object the CCM reads as its `--cloud-config` is audited whatever its name:
/// the chart's `secret.create: false` with `secret.name: occm-cloud-config` mounts a Secret
/// no site names. The workloads are listed first; the Secret is then read by name, once, and
/// its finding names the DaemonSet that reads it.
#[tokio::test]
async fn the_object_a_ccm_reads_is_audited_whatever_its_name() {
    let mut c = Cluster::default();
    let mut daemonset = ccm_daemonset();
    let volumes = daemonset["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .expect("the captured DaemonSet has volumes");
    for volume in volumes.iter_mut() {
        if let Some(secret) = volume.get_mut("secret") {
            secret["secretName"] = json!("occm-cloud-config");
        }
    }
    c.add(DAEMONSETS, daemonset);
    c.add(
        SECRETS,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "occm-cloud-config", "namespace": "kube-system",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(
                "[Global]\nauth-url=https://keystone.example/v3\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n")}}),
    );
    // Another Secret in the namespace, read by nothing: never fetched.
    c.add(
        SECRETS,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "unrelated", "namespace": "kube-system"},
            "data": {"cloud.conf": "W0xvYWRCYWxhbmNlcl0K"}}),
    );
    c.serve(DEPLOYMENTS);
    c.serve(PODS);
    let cluster = Arc::new(Mutex::new(c));
    let (code, text) = run_audit(&cluster, &AuditOptions::default()).await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("Secret kube-system/occm-cloud-config")
            && text.contains("provider-requires-serial-api-calls is set to a false value")
            && text.contains("the CCM reads this config: DaemonSet kube-system/"),
        "{text}"
    );
    assert!(!text.contains("unrelated"), "{text}");
    // Read by name (the evaluation, then the restart check's read of the mounted config);
    // Secrets are never listed without a selector, and the unrelated one is never read.
    let c = cluster.lock().unwrap();
    assert!(
        c.requests
            .iter()
            .any(|r| r.path == "/api/v1/namespaces/kube-system/secrets/occm-cloud-config"),
        "{:?}",
        c.requests
    );
    assert!(
        !c.requests.iter().any(|r| r.path.contains("unrelated")
            || (r.path == "/api/v1/secrets" && !r.query.contains("Selector"))),
        "{:?}",
        c.requests
    );
}

// The leak matrix's audit faces --------------------------------------------------------------

/// Log lines written while a test runs, for the leak matrix.
#[derive(Clone, Default)]
struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The log lines of every test of this binary, at trace level for stackgate's own targets: a
/// process-wide subscriber, installed once, because the audit logs from whatever thread runs
/// it (a thread-local one misses those, and callsites other tests hit first stay disabled).
fn global_logs() -> &'static CapturedLogs {
    static LOGS: std::sync::OnceLock<CapturedLogs> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = CapturedLogs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("stackgate=trace")
            .with_ansi(false)
            .with_writer(logs.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the first subscriber");
        logs
    })
}

/// A cluster holding one leak-matrix input, as the apiserver stores it, with the kinds the
/// background audit writes.
fn leak_cluster(text: &str) -> Cluster {
    let mut c = Cluster::default();
    for object in leak_inputs::apiserver_objects(text) {
        match object["kind"].as_str() {
            Some("Secret") => c.add(SECRETS, object),
            Some("HelmRelease") => c.add(HELMRELEASES_V2, object),
            other => panic!("no collection for {other:?}"),
        }
    }
    for collection in [CONFIGMAPS, DAEMONSETS, DEPLOYMENTS, PODS, SERVICES] {
        c.serve(collection);
    }
    c.serve(LEASES);
    c.serve(POLICYREPORTS);
    c.serve(CLUSTERPOLICYREPORTS);
    c
}

/// The leak matrix (tests/leak_matrix.rs has `check` and the webhook): every Secret-fed input
/// × every `audit` format and the background audit's PolicyReports, with the logs at trace
/// level. No face shows the canary, in clear or base64, and each input's expected policy is
/// still reported (the input was read and evaluated).
#[tokio::test]
async fn a_canary_in_any_secret_input_appears_in_no_audit_face() {
    let logs = global_logs();
    let canary_b64 = base64::engine::general_purpose::STANDARD.encode(leak_inputs::CANARY);
    for (file, text, expected) in leak_inputs::inputs() {
        let cluster = Arc::new(Mutex::new(leak_cluster(&text)));
        for format in [Format::Text, Format::Json, Format::Sarif, Format::Junit] {
            let options = AuditOptions {
                format,
                ..AuditOptions::default()
            };
            let (_, report) = run_audit(&cluster, &options).await;
            assert!(!report.contains("CANARY"), "{file} {format:?}: {report}");
            assert!(!report.contains(&canary_b64), "{file} {format:?}: {report}");
            for policy in expected {
                assert!(report.contains(policy), "{file} {format:?}: {report}");
            }
        }
        let client = client(cluster.clone());
        let metrics = audit::background::AuditMetrics::default();
        let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
        metrics.register(&mut registry);
        let leader = tokio::time::timeout(
            TEST_TIMEOUT,
            audit::background::round(
                &client,
                &engine(),
                &background_config("stackgate-0"),
                &metrics,
                true,
            ),
        )
        .await
        .expect("the round ends")
        .expect("the round runs");
        assert!(leader);
        let c = cluster.lock().unwrap();
        let reports: String = c
            .objects
            .iter()
            .filter(|(col, _)| col == POLICYREPORTS || col == CLUSTERPOLICYREPORTS)
            .map(|(_, o)| o.to_string())
            .collect();
        drop(c);
        assert!(!reports.contains("CANARY"), "{file}: {reports}");
        assert!(!reports.contains(&canary_b64), "{file}: {reports}");
        for policy in expected {
            assert!(reports.contains(policy), "{file}: {reports}");
        }
        let mut exposition = String::new();
        prometheus_client::encoding::text::encode(&mut exposition, &registry).expect("metrics");
        assert!(!exposition.contains("CANARY"), "{file}: {exposition}");
    }
    let logged = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(
        logged.contains("stackgate::audit"),
        "the audit's logs were captured: {logged}"
    );
    assert!(!logged.contains("CANARY"), "a log line shows the canary");
    assert!(!logged.contains(&canary_b64), "a log line shows the canary");
}

// ------------------------------------------------------------------ StackgateExceptions

const EXCEPTIONS: &str = "/apis/stackgate.dev/v1alpha1/stackgateexceptions";

/// An exception for the labelled ConfigMap `tenant-a/occm-config` (its serial denial), as the
/// apiserver stores it: created 2026-11-20, ending 2026-12-10.
fn configmap_exception(name: &str, namespace: &str, extra_spec: Value) -> Value {
    let mut e = json!({"apiVersion": "stackgate.dev/v1alpha1", "kind": "StackgateException",
        "metadata": {"name": name, "namespace": namespace,
                     "creationTimestamp": "2026-11-20T00:00:00Z"},
        "spec": {"policy": "serial-lb-api-calls", "codes": ["false"],
                 "match": {"kinds": ["ConfigMap"], "namespaces": ["tenant-a"],
                           "names": ["occm-config"]},
                 "reason": "Octavia provider fixed upstream", "ticket": "CHG-42",
                 "expires": "2026-12-10T00:00:00Z"}});
    for (k, v) in extra_spec.as_object().into_iter().flatten() {
        e["spec"][k] = v.clone();
    }
    e
}

fn with_exceptions(now: &str) -> AuditOptions {
    AuditOptions {
        format: Format::Json,
        exceptions: Some(stackgate::policy::exception::ExceptionRules::default()),
        now: Some(now.parse().unwrap()),
        ..AuditOptions::default()
    }
}

/// `(kind, level)` of every result about `object`.
fn results_for(report: &Value, object: &str) -> Vec<(String, String)> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["object"] == object)
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_owned(),
                r["level"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn audit_applies_the_clusters_exceptions_until_they_expire() {
    let mut c = standard_cluster();
    c.forbidden.clear();
    c.add(
        EXCEPTIONS,
        configmap_exception("occm", "stackgate", json!({})),
    );
    let cluster = Arc::new(Mutex::new(c));
    const OBJECT: &str = "ConfigMap tenant-a/occm-config";

    // Before the warning window: excepted (a note), and the run does not fail for it.
    let (_, out) = run_audit(&cluster, &with_exceptions("2026-11-21T00:00:00Z")).await;
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        results_for(&report, OBJECT),
        vec![("excepted".to_owned(), "note".to_owned())],
        "{out}"
    );
    let message = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["object"] == OBJECT)
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("StackgateException stackgate/occm")
            && message.contains("until 2026-12-10T00:00:00Z"),
        "{message}"
    );
    // Only the namespaces the rules accept are listed.
    let listed: Vec<String> = cluster
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| r.path.contains("stackgateexceptions"))
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(
        listed,
        ["/apis/stackgate.dev/v1alpha1/namespaces/stackgate/stackgateexceptions"]
    );

    // Inside the window: a warning.
    let (_, out) = run_audit(&cluster, &with_exceptions("2026-12-05T00:00:00Z")).await;
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        results_for(&report, OBJECT),
        vec![("excepted".to_owned(), "warning".to_owned())]
    );

    // After it: the denial again, naming the exception that ended.
    let (code, out) = run_audit(&cluster, &with_exceptions("2026-12-10T00:00:00Z")).await;
    assert_eq!(code, 1, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        results_for(&report, OBJECT),
        vec![("denial".to_owned(), "error".to_owned())]
    );
    assert!(out.contains("StackgateException stackgate/occm expired at 2026-12-10T00:00:00Z"));
}

#[tokio::test]
async fn a_refused_or_foreign_exception_exempts_nothing_and_a_refused_one_is_an_input_error() {
    let mut c = standard_cluster();
    c.forbidden.clear();
    // Refused by the parser (a wildcard the CRD of an older chart let through).
    c.add(
        EXCEPTIONS,
        configmap_exception(
            "wildcard",
            "stackgate",
            json!({"match": {"kinds": ["ConfigMap"], "namespaces": ["*"]}}),
        ),
    );
    // In a namespace exceptions are not accepted in: never listed.
    c.add(
        EXCEPTIONS,
        configmap_exception("tenant", "tenant-a", json!({})),
    );
    let cluster = Arc::new(Mutex::new(c));
    let (code, out) = run_audit(&cluster, &with_exceptions("2026-11-21T00:00:00Z")).await;
    assert_eq!(code, 2, "an input error: {out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        results_for(&report, "ConfigMap tenant-a/occm-config"),
        vec![("denial".to_owned(), "error".to_owned())]
    );
    assert!(
        out.contains("StackgateException stackgate/wildcard: spec.match.namespaces")
            && out.contains("it exempts nothing"),
        "{out}"
    );
}

#[tokio::test]
async fn the_background_audit_reports_an_excepted_finding_as_skip_until_it_expires() {
    // The background audit judges at the system clock: the exceptions are dated from it.
    let now = k8s_openapi::jiff::Timestamp::now();
    let hours = |n: i64| k8s_openapi::jiff::SignedDuration::from_hours(n);
    let dated = |name: &str,
                 created: k8s_openapi::jiff::Timestamp,
                 expires: k8s_openapi::jiff::Timestamp| {
        let mut e = configmap_exception(name, "stackgate", json!({}));
        e["metadata"]["creationTimestamp"] = json!(created.to_string());
        e["spec"]["expires"] = json!(expires.to_string());
        e
    };
    let round = |exception: Value| async move {
        let mut c = background_cluster();
        c.add(EXCEPTIONS, exception);
        let cluster = Arc::new(Mutex::new(c));
        let client = client(cluster.clone());
        let config = audit::background::BackgroundConfig {
            exceptions: Some(stackgate::policy::exception::ExceptionRules::default()),
            ..background_config("stackgate-0")
        };
        let metrics = audit::background::AuditMetrics::default();
        tokio::time::timeout(
            TEST_TIMEOUT,
            audit::background::round(&client, &engine(), &config, &metrics, true),
        )
        .await
        .unwrap()
        .unwrap();
        let c = cluster.lock().unwrap();
        stored(&c, POLICYREPORTS, Some("tenant-a"), "stackgate").clone()
    };

    let ta = round(dated("occm", now - hours(24), now + hours(24 * 30))).await;
    assert_eq!(ta["summary"]["fail"], 0, "{ta:#}");
    assert_eq!(ta["summary"]["skip"], 1, "{ta:#}");
    let r = &ta["results"][0];
    assert_eq!(r["result"], "skip", "{ta:#}");
    assert_eq!(r["severity"], "info");
    assert_eq!(r["properties"]["exception"], "stackgate/occm");
    assert_eq!(r["properties"]["ticket"], "CHG-42");
    assert_eq!(r["properties"]["code"], "false");
    assert!(r["properties"]["expires"].is_string(), "{r}");

    // Ended an hour ago: fail again.
    let ta = round(dated("occm", now - hours(48), now - hours(1))).await;
    assert_eq!(ta["summary"]["fail"], 1, "{ta:#}");
    assert_eq!(ta["summary"]["skip"], 0, "{ta:#}");
    assert_eq!(ta["results"][0]["result"], "fail");
}
