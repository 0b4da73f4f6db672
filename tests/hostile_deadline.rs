//! Work stops at the deadline (issue 22, item 2): a review that is slow to evaluate, sent with
//! a `?timeout=` shorter than the evaluation, gets its deadline answer, and then the server
//! stops working on it: the child's CPU time (`/proc/<pid>/stat`, utime + stime) hardly
//! grows after the answer, and a following large review is evaluated, not refused with 429 because the
//! abandoned evaluation still holds the large-evaluation permit.
//!
//! Against the real binary as a child (`stackgate serve --kube off`), debug build: the shapes
//! take far longer than the 100 ms budget of `?timeout=200ms` there. Bounds are generous
//! for a shared 2-core machine; the target (CPU stops within 50 ms of the answer) is
//! measured on the release build (BENCHMARKS.md). Linux only: elsewhere the tests print why
//! they skip.

#[path = "../benches/support/procfs.rs"]
#[allow(dead_code)]
mod procfs;

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{ChildServer, Client, ClientOptions, has_proc_status, json_or_text};
use serde_json::{Value, json};

/// CPU the server may use in the second after a deadline answer: an evaluation that keeps
/// running uses up to a whole second of one core there. Half of it, because other builds
/// share the machine's two cores and slow the child down (the evaluation's own end after the
/// answer, and the answer's logging, count too). The decisive check is the permit: with one
/// large-evaluation permit, a large review sent a second after the answer is refused with 429
/// for as long as the abandoned evaluation holds it.
const AFTER_ANSWER_CPU: Duration = Duration::from_millis(500);

fn review(kind: (&str, &str, &str), resource: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "deadline-1",
            "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
            "resource": {"group": kind.0, "version": kind.1, "resource": resource},
            "name": "x", "namespace": "tenant", "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": object, "oldObject": null, "dryRun": true,
        }
    }))
    .expect("serializes")
}

/// A ClusterResourceSet payload Secret whose ~950 KiB payload repeats the cloud-config Secret
/// and a CCM DaemonSet thousands of times: thousands of embedded sites and objects to
/// evaluate (a CRS payload, YAML reader and object rules; no Helm values).
fn crs_payload_repeat() -> Vec<u8> {
    let site = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                namespace: kube-system\nstringData:\n  cloud.conf: \"[Global]\\n[LoadBalancer]\\n\
                create-monitor=maybe\\n\"\n";
    let ccm = "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: occm\nspec:\n  \
               template:\n    spec:\n      containers:\n      - image: \
               openstack-cloud-controller-manager\n        args: [--concurrent-service-syncs=4]\n";
    let mut payload = String::new();
    while payload.len() < 950 * 1024 {
        payload.push_str(site);
        payload.push_str(ccm);
    }
    review(
        ("", "v1", "Secret"),
        "secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "type": "addons.cluster.x-k8s.io/resource-set",
            "metadata": {"name": "crs", "namespace": "default"},
            "data": {"p.yaml": base64::engine::general_purpose::STANDARD.encode(&payload)},
        }),
    )
}

/// A HelmChart of the CCM chart with 20,000 `spec.set` entries (the values pipeline).
fn helmchart_set() -> Vec<u8> {
    let set: serde_json::Map<String, Value> = (0..20_000)
        .map(|i| (format!("cloudConfig.global.k{i:05}"), json!("v")))
        .collect();
    review(
        ("helm.cattle.io", "v1", "HelmChart"),
        "helmcharts",
        json!({
            "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager",
                     "targetNamespace": "kube-system", "set": set},
        }),
    )
}

/// A large (> 64 KiB) review that is quick to evaluate: a Deployment with a long annotation.
fn large_quick_review() -> Vec<u8> {
    review(
        ("apps", "v1", "Deployment"),
        "deployments",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "big", "namespace": "tenant",
                         "annotations": {"note": "x".repeat(200 * 1024)}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        }),
    )
}

fn cpu(pid: u32) -> Duration {
    Duration::from_secs_f64(procfs::cpu_ticks(pid) as f64 / procfs::clock_ticks_per_second())
}

/// Sends `slow` with `?timeout=200ms` (a 100 ms budget: the apiserver never sends less than
/// 1 s, but a fast quiet machine evaluated these shapes within 1 s), expects the deadline answer, then checks the CPU the
/// server uses in the next second and that a large review after it is evaluated.
async fn stops_at_the_deadline(slow: Vec<u8>) {
    if !has_proc_status() {
        return;
    }
    // The server's own deadline is long: the `?timeout=` is what cuts it. One
    // large evaluation at a time, so an abandoned one that keeps its permit shows as a 429.
    let server =
        ChildServer::start(&["--request-timeout", "30s", "--max-large-evaluations", "1"]).await;
    let pid = server.child.id();
    let large = large_quick_review();
    let client = Client::connect(server.addr, &ClientOptions::trusting(&server.ca))
        .await
        .expect("connect");
    let sent = Instant::now();
    let (status, bytes) = tokio::time::timeout(
        Duration::from_secs(60),
        client.request(http::Method::POST, "/validate?timeout=200ms", slow),
    )
    .await
    .expect("answered")
    .expect("HTTP exchange");
    let took = sent.elapsed();
    let answer = json_or_text(&bytes);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["response"]["status"]["code"], 504, "{answer}");
    // At the deadline, not when the evaluation would have finished.
    assert!(took < Duration::from_secs(5), "answered after {took:?}");

    let at_answer = cpu(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = cpu(pid).saturating_sub(at_answer);
    eprintln!("answer after {took:?}; CPU in the next second: {after:?}");
    assert!(
        after < AFTER_ANSWER_CPU,
        "the evaluation kept running after its deadline answer: {after:?} of CPU in 1 s"
    );

    // The large-evaluation permit is free again: a large review is evaluated (200, allowed),
    // not refused with 429.
    let (status, bytes) = tokio::time::timeout(
        Duration::from_secs(60),
        client.request(http::Method::POST, "/validate?timeout=10s", large),
    )
    .await
    .expect("answered")
    .expect("HTTP exchange");
    let answer = json_or_text(&bytes);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crs_payload_past_its_deadline_stops_evaluating() {
    stops_at_the_deadline(crs_payload_repeat()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helmchart_with_20000_set_entries_past_its_deadline_stops_evaluating() {
    stops_at_the_deadline(helmchart_set()).await;
}
