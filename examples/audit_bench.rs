//! Benchmark of `stackgate audit` against a mocked cluster (issue 15): 10,000 ConfigMaps and
//! Secrets of which 100 are labelled cloud configs, 1,000 HelmReleases of which 100 carry the
//! CCM chart's values, the CCM DaemonSet and its pod; `SCALE` multiplies every count.
//!
//! The API server is an in-process fake over `tower_test::mock` (as in tests/audit.rs): it
//! answers lists with `limit`/`continue` and label selectors like the real one (the selector
//! is applied on the server, so unlabelled ConfigMaps and Secrets never reach the audit) and
//! counts requests. Its objects live in this process, so the peak RSS of the audit itself is
//! measured as the growth over the resident set after setup (`/proc/self/clear_refs` resets
//! the high-water mark before the run).
//!
//! ```text
//! cargo run --release --example audit_bench -- [SCALE]
//! cargo run --release --example audit_bench -- labelled N   # issue 22: N labelled configs
//! cargo run --release --example audit_bench -- huge MIB     # issue 22: one MIB MiB object
//!
//! cargo run --release --example audit_bench -- namespaces N  # issue 31: N in distinct 60 KB namespaces
//! cargo run --release --example audit_bench -- drip          # issue 31: a page sent a byte every 2 s
//! ```
//!
//! The issue 22 shapes use a second fake that generates its objects on request (none are
//! stored, so the peak is the audit's own): `labelled N` serves N ConfigMaps labelled
//! `stackgate.dev/cloud-config`, each with serial calls off (a denial, a mutation note and a
//! fix diff each); `huge MIB` serves one labelled ConfigMap of MIB MiB, streamed in 64 KiB
//! chunks (the fake never holds it), before 1,000 small ones. Every other kind answers 404.
//!
//! The issue 31 shapes use the same fake: `namespaces N` serves the N labelled ConfigMaps
//! each in its own namespace of 60 KB (`BYTES` as a third argument changes it; no real API
//! server stores a namespace over 63 bytes, a hostile one in front of the audit can send
//! anything); `drip` answers the labelled ConfigMap list with one byte every 2 s, forever,
//! and gives the audit 90 s (its default request timeout is 30 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use base64::Engine as _;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Bytes;
use kube::client::Body;
use serde_json::{Value, json};
use stackgate::audit::{self, AuditOptions};
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use tower_test::mock;

const CLOUD_CONFIG: &str = "[Global]\nauth-url=https://keystone.example.test:5000/v3\nregion=RegionOne\n\n[LoadBalancer]\nsubnet-id=9c018814-f2a8-45dd-9679-5400d49b333a\nfloating-network-id=80c9fc78-a2be-45d5-a85b-f17a6c98df92\n";

/// Collections of the fake API server: path → objects (sorted by namespace/name).
struct Fake {
    collections: Vec<(String, Vec<Value>)>,
    requests: AtomicUsize,
}

fn status(code: u16) -> Response<Body> {
    let body = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                      "reason": "NotFound", "message": "not found"});
    let mut r = Response::new(Body::from(serde_json::to_vec(&body).unwrap_or_default()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::NOT_FOUND);
    r
}

fn param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.replace("%2F", "/").replace("%3D", "="))
}

impl Fake {
    fn answer(&self, path: &str, query: &str) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        // Named get: /api/v1/namespaces/NS/PLURAL/NAME.
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let base = if segments.first() == Some(&"api") {
            2
        } else {
            3
        };
        let (collection, namespace, name) = match &segments[base..] {
            [plural] => (
                format!("/{}/{plural}", segments[..base].join("/")),
                None,
                None,
            ),
            ["namespaces", ns, plural] => (
                format!("/{}/{plural}", segments[..base].join("/")),
                Some(*ns),
                None,
            ),
            ["namespaces", ns, plural, name] => (
                format!("/{}/{plural}", segments[..base].join("/")),
                Some(*ns),
                Some(*name),
            ),
            _ => return status(404),
        };
        let Some((_, objects)) = self.collections.iter().find(|(c, _)| *c == collection) else {
            return status(404);
        };
        let in_ns = |o: &Value| namespace.is_none_or(|ns| o["metadata"]["namespace"] == ns);
        if let Some(name) = name {
            return match objects
                .iter()
                .find(|o| in_ns(o) && o["metadata"]["name"] == name)
            {
                Some(o) => Response::new(Body::from(serde_json::to_vec(o).unwrap_or_default())),
                None => status(404),
            };
        }
        let selector = param(query, "labelSelector").unwrap_or_default();
        let selected = |o: &Value| {
            selector
                .split(',')
                .filter(|t| !t.is_empty())
                .all(|t| match t.split_once('=') {
                    Some((k, v)) => o["metadata"]["labels"][k] == v,
                    None => o["metadata"]["labels"].get(t).is_some(),
                })
        };
        // Field selectors as the API server applies them to these objects: `type` (Secrets) and
        // `metadata.name`; the audit lists ClusterResourceSet payload Secrets by `type`.
        let fields = param(query, "fieldSelector").unwrap_or_default();
        let field_selected = |o: &Value| {
            fields
                .split(',')
                .filter(|t| !t.is_empty())
                .all(|t| match t.split_once('=') {
                    Some(("type", v)) => o["type"] == v,
                    Some(("metadata.name", v)) => o["metadata"]["name"] == v,
                    _ => false,
                })
        };
        let start: usize = param(query, "continue")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let limit: usize = param(query, "limit")
            .and_then(|l| l.parse().ok())
            .unwrap_or(usize::MAX);
        let matching: Vec<&Value> = objects
            .iter()
            .filter(|o| in_ns(o) && selected(o) && field_selected(o))
            .skip(start)
            .take(limit.saturating_add(1))
            .collect();
        let more = matching.len() > limit;
        let page: Vec<&Value> = matching.into_iter().take(limit).collect();
        let mut metadata = json!({"resourceVersion": "1"});
        if more {
            metadata["continue"] = json!((start + limit).to_string());
        }
        let body = json!({"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": page});
        Response::new(Body::from(serde_json::to_vec(&body).unwrap_or_default()))
    }
}

fn cluster(scale: usize) -> Fake {
    let b64 = base64::engine::general_purpose::STANDARD.encode(CLOUD_CONFIG);
    let (mut configmaps, mut secrets, mut helmreleases) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..5_000 * scale {
        let ns = format!("ns-{}", i % 100);
        let cloud = i % 100 == 0; // 50 × scale labelled cloud configs of each kind
        let mut labels = json!({"app": "x"});
        if cloud {
            labels["stackgate.dev/cloud-config"] = json!("cloud.conf");
        }
        configmaps.push(
            json!({"metadata": {"name": format!("cm-{i}"), "namespace": ns, "labels": labels,
            "resourceVersion": "1"},
            "data": {"cloud.conf": if cloud { CLOUD_CONFIG.to_owned() } else { "x".repeat(512) }}}),
        );
        secrets.push(
            json!({"metadata": {"name": format!("secret-{i}"), "namespace": ns, "labels": labels,
            "resourceVersion": "1"},
            "data": {"cloud.conf": if cloud { b64.clone() } else { "eA==".repeat(128) }}}),
        );
    }
    for i in 0..1_000 * scale {
        let ccm = i % 10 == 0; // 100 × scale carry the CCM chart
        let chart = if ccm {
            "openstack-cloud-controller-manager"
        } else {
            "podinfo"
        };
        helmreleases.push(
            json!({"metadata": {"name": format!("hr-{i}"), "namespace": format!("ns-{}", i % 100),
            "resourceVersion": "1"},
            "spec": {"chart": {"spec": {"chart": chart}},
                     "values": {"cloudConfig": {"global": {"region": "RegionOne"},
                                                "loadBalancer": {"subnet-id": "s"}}}}}),
        );
    }
    let daemonset = json!({"metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system",
        "resourceVersion": "1"},
        "spec": {"selector": {"matchLabels": {"k8s-app": "occm"}}, "template": {"spec": {
            "containers": [{"name": "occm", "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0",
                            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config"}]}],
            "volumes": [{"name": "cfg", "secret": {"secretName": "cloud-config"}}]}}}});
    secrets.push(json!({"metadata": {"name": "cloud-config", "namespace": "kube-system", "resourceVersion": "1",
        "creationTimestamp": "2026-01-01T00:00:00Z"}, "data": {"cloud.conf": b64}}));
    let pod = json!({"metadata": {"name": "occm-1", "namespace": "kube-system", "labels": {"k8s-app": "occm"}},
        "status": {"startTime": "2025-12-01T00:00:00Z"}});
    Fake {
        collections: vec![
            ("/api/v1/configmaps".to_owned(), configmaps),
            ("/api/v1/secrets".to_owned(), secrets),
            (
                "/apis/helm.toolkit.fluxcd.io/v2/helmreleases".to_owned(),
                helmreleases,
            ),
            ("/apis/apps/v1/daemonsets".to_owned(), vec![daemonset]),
            ("/apis/apps/v1/deployments".to_owned(), Vec::new()),
            ("/api/v1/pods".to_owned(), vec![pod]),
        ],
        requests: AtomicUsize::new(0),
    }
}

/// `VmRSS` or `VmHWM` of this process, in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A small labelled cloud config with serial calls off, as one list item (JSON); with
/// `namespace_bytes`, in its own namespace of that many bytes.
fn generated_item(i: usize, namespace_bytes: usize) -> Vec<u8> {
    let namespace = if namespace_bytes > 0 {
        let mut ns = format!("ns-{i}-");
        let pad = namespace_bytes.saturating_sub(ns.len());
        ns.push_str(&"x".repeat(pad));
        ns
    } else {
        format!("ns-{}", i % 100)
    };
    serde_json::to_vec(&json!({"metadata": {"name": format!("cm-{i}"),
        "namespace": namespace, "resourceVersion": "1",
        "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
        "data": {"cloud.conf": "[Global]\nregion=RegionOne\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n"}}))
    .unwrap_or_default()
}

type Streamed = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// The issue 22 fake: `count` generated labelled ConfigMaps; with `huge_bytes`, item 0 is one
/// ConfigMap whose data value is that many bytes, streamed.
fn generated_answer(
    path: &str,
    query: &str,
    metadata_only: bool,
    count: usize,
    huge_bytes: usize,
    namespace_bytes: usize,
) -> Response<Streamed> {
    use http_body_util::BodyExt as _;
    let full = |body: Vec<u8>, code: u16| {
        let mut r = Response::new(http_body_util::Full::new(Bytes::from(body)).boxed_unsync());
        *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::NOT_FOUND);
        r
    };
    let labelled = param(query, "labelSelector").is_some_and(|s| s == "stackgate.dev/cloud-config");
    if path != "/api/v1/configmaps" || !labelled {
        let body = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                          "code": 404, "reason": "NotFound", "message": "not found"});
        return full(serde_json::to_vec(&body).unwrap_or_default(), 404);
    }
    let start: usize = param(query, "continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let limit: usize = param(query, "limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(usize::MAX);
    let end = start.saturating_add(limit).min(count);
    let mut chunks: Vec<Bytes> = Vec::new();
    let next = (end < count).then(|| end.to_string());
    let head = match &next {
        Some(t) => format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"metadata\":{{\"continue\":\"{t}\"}},\"items\":["
        ),
        None => "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"metadata\":{},\"items\":[".to_owned(),
    };
    chunks.push(Bytes::from(head));
    for i in start..end {
        if i > start {
            chunks.push(Bytes::from_static(b","));
        }
        if i == 0 && huge_bytes > 0 && metadata_only {
            // `Accept: …;as=PartialObjectMetadataList`: what the apiserver sends then.
            chunks.push(Bytes::from_static(
                b"{\"metadata\":{\"name\":\"huge\",\"namespace\":\"ns-huge\"}}",
            ));
        } else if i == 0 && huge_bytes > 0 {
            chunks.push(Bytes::from_static(
                b"{\"metadata\":{\"name\":\"huge\",\"namespace\":\"ns-huge\",\"labels\":{\"stackgate.dev/cloud-config\":\"cloud.conf\"}},\"data\":{\"cloud.conf\":\"",
            ));
            let block = Bytes::from(vec![b'x'; 64 * 1024]);
            let mut left = huge_bytes;
            while left > 0 {
                let n = left.min(block.len());
                chunks.push(block.slice(..n));
                left -= n;
            }
            chunks.push(Bytes::from_static(b"\"}}"));
        } else {
            chunks.push(Bytes::from(generated_item(i, namespace_bytes)));
        }
    }
    chunks.push(Bytes::from_static(b"]}"));
    let frames = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(c))),
    );
    Response::new(http_body_util::StreamBody::new(frames).boxed_unsync())
}

/// The labelled ConfigMap list sent one byte every 2 s, forever (issue 31).
fn dripped() -> Response<Streamed> {
    use http_body_util::BodyExt as _;
    let frames = futures::stream::unfold(0usize, |sent| async move {
        if sent > 0 {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
        let byte = b"{\"items\":[".get(sent).copied().unwrap_or(b' ');
        Some((
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(vec![byte]))),
            sent + 1,
        ))
    });
    Response::new(http_body_util::StreamBody::new(frames).boxed_unsync())
}

/// Runs the audit over the issue 22 fake and prints what it cost.
async fn hostile(shape: &str, n: usize, namespace_bytes: usize) {
    let (count, huge_bytes) = match shape {
        "labelled" | "namespaces" => (n, 0),
        "drip" => (0, 0),
        _ => (1_001, n * 1024 * 1024),
    };
    let drip = shape == "drip";
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Streamed>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            counter.fetch_add(1, Ordering::Relaxed);
            let (parts, body) = request.into_parts();
            let _ = body.collect().await;
            let metadata_only = parts
                .headers
                .get("accept")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("as=PartialObjectMetadataList"));
            let query = parts.uri.query().unwrap_or("");
            if drip
                && parts.uri.path() == "/api/v1/configmaps"
                && param(query, "labelSelector").is_some_and(|s| s == "stackgate.dev/cloud-config")
            {
                send.send_response(dripped());
                continue;
            }
            send.send_response(generated_answer(
                parts.uri.path(),
                query,
                metadata_only,
                count,
                huge_bytes,
                namespace_bytes,
            ));
        }
    });
    let client = kube::Client::new(service, "default");
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let baseline = status_kib("VmRSS:");
    let started = Instant::now();
    let options = AuditOptions::default();
    let mut progress = |_: &str, _: usize| {};
    let run = audit::audit(&client, &engine, &options, &mut progress);
    let Ok(audited) = tokio::time::timeout(std::time::Duration::from_secs(90), run).await else {
        println!(
            "{shape}: no report after {:.1} s (stopped waiting)",
            started.elapsed().as_secs_f64()
        );
        return;
    };
    let text = stackgate::report::render::text_as(&audited.report, true, &audit::AUDIT, true);
    let took = started.elapsed();
    let peak = status_kib("VmHWM:");
    let c = audited.report.counts();
    println!(
        "{shape} {n}: {count} labelled ConfigMaps{}",
        if huge_bytes > 0 {
            format!(", the first one {n} MiB")
        } else if namespace_bytes > 0 {
            format!(", each in its own {namespace_bytes}-byte namespace")
        } else if drip {
            ", their list dripped a byte every 2 s".to_owned()
        } else {
            String::new()
        }
    );
    println!(
        "audit: {:.2} s wall, {} API requests, {} objects evaluated, {} errors, {} input errors, {} entries listed, text report {} bytes",
        took.as_secs_f64(),
        requests.load(Ordering::Relaxed),
        c.objects,
        c.errors,
        c.problems,
        audited.report.files.len(),
        text.len()
    );
    println!(
        "memory: RSS after setup {:.1} MiB, peak during audit {:.1} MiB, audit's growth {:.1} MiB",
        baseline as f64 / 1024.0,
        peak as f64 / 1024.0,
        peak.saturating_sub(baseline) as f64 / 1024.0
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let first = std::env::args().nth(1).unwrap_or_default();
    if matches!(first.as_str(), "labelled" | "huge" | "namespaces" | "drip") {
        let n: usize = std::env::args()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or(100_000);
        let namespace_bytes = match first.as_str() {
            "namespaces" => std::env::args()
                .nth(3)
                .and_then(|s| s.parse().ok())
                .unwrap_or(60 * 1024),
            _ => 0,
        };
        return hostile(&first, n, namespace_bytes).await;
    }
    let scale: usize = first.parse().unwrap_or(1);
    let fake = Arc::new(cluster(scale));
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let server = fake.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let _ = body.collect().await;
            send.send_response(server.answer(parts.uri.path(), parts.uri.query().unwrap_or("")));
        }
    });
    let client = kube::Client::new(service, "default");
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
    // Reset the high-water mark: the peak below is the audit's, over the fake's objects.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let baseline = status_kib("VmRSS:");
    let started = Instant::now();
    let audited = audit::audit(
        &client,
        &engine,
        &AuditOptions::default(),
        &mut |_: &str, _: usize| {},
    )
    .await;
    let took = started.elapsed();
    let peak = status_kib("VmHWM:");
    let c = audited.report.counts();
    println!(
        "scale {scale}: {} ConfigMaps+Secrets ({} cloud configs), {} HelmReleases",
        10_000 * scale + 1,
        100 * scale + 1,
        1_000 * scale
    );
    println!(
        "audit: {:.3} s wall, {} API requests, {} objects evaluated, {} errors, {} warnings, {} restart findings",
        took.as_secs_f64(),
        fake.requests.load(Ordering::Relaxed),
        c.objects,
        c.errors,
        c.warnings,
        audited.restarts.len()
    );
    println!(
        "memory: RSS after setup {:.1} MiB, peak during audit {:.1} MiB, audit's growth {:.1} MiB",
        baseline as f64 / 1024.0,
        peak as f64 / 1024.0,
        peak.saturating_sub(baseline) as f64 / 1024.0
    );
}
