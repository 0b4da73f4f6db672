//! The per-review memory budget (issue 31): the counting allocator keeps an account of what a
//! review's decoding, evaluation and encoding hold, and a review over
//! `--max-evaluation-memory` is answered "over stackgate's limit" (mutate admits unchanged
//! with a warning, validate refuses with 413), counted in
//! `stackgate_input_limits_total{limit="memory"}`.
//!
//! In process (this test binary installs the counting allocator, as `src/main.rs` does) and
//! against the real binary, with a shape no cap of the old code bounded: a ClusterResourceSet
//! payload Secret with many embedded cloud configs and a long `metadata.name`, which every
//! finding repeats (issue 31, item 1).

mod common;

use std::hint::black_box;

use alloc_account::Counting;
use base64::Engine as _;
use common::{ChildServer, Client, ClientOptions, admin_get, captured, metric, post};
use serde_json::{Value, json};
use stackgate::admission::{self, Webhook};
use stackgate::budget::{Cancel, Exhausted, MemoryScope};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

#[global_allocator]
static ALLOCATOR: Counting = Counting::SYSTEM;

const MIB: usize = 1024 * 1024;

/// A ClusterResourceSet payload Secret named `name_len` × `n`, embedding `sites` copies of
/// the `kube-system/cloud-config` Secret with a known-bad cloud config (each one a denial, a
/// warning and a patch that name the outer object).
fn payload_with_long_name(name_len: usize, sites: usize) -> Vec<u8> {
    let site = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                namespace: kube-system\nstringData:\n  cloud.conf: \"[LoadBalancer]\\nuse-octavia = false\\n\"\n";
    let payload = site.repeat(sites);
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "long-name-1",
            "kind": {"group": "", "version": "v1", "kind": "Secret"},
            "resource": {"group": "", "version": "v1", "resource": "secrets"},
            "name": "n".repeat(name_len),
            "namespace": "tenant",
            "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": {
                "apiVersion": "v1", "kind": "Secret",
                "type": "addons.cluster.x-k8s.io/resource-set",
                "metadata": {"name": "n".repeat(name_len), "namespace": "tenant"},
                "data": {"p.yaml": base64::engine::general_purpose::STANDARD.encode(&payload)},
            },
            "oldObject": null,
            "dryRun": false,
        }
    }))
    .expect("serializes")
}

/// A budget under the long-named payload's peak (about 3× its 70 KB body).
const BUDGET: usize = 128 * 1024;

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies"))
}

/// The answer and the account's peak of one review under a budget of `limit` bytes.
fn answer_within(
    engine: &Engine,
    webhook: Webhook,
    body: &[u8],
    limit: usize,
    metrics: &Metrics,
) -> (Value, usize) {
    let account = MemoryScope::enter(limit);
    let reply = admission::handle(engine, webhook, body, metrics);
    let peak = alloc_account::usage().expect("scope active").peak;
    drop(account);
    assert_eq!(reply.status, 200);
    (serde_json::from_slice(&reply.body).expect("JSON"), peak)
}

#[test]
fn check_stops_with_memory_once_the_account_passes_its_limit() {
    let cancel = Cancel::never();
    assert_eq!(cancel.check(), Ok(()), "no account, nothing to be over");
    let account = MemoryScope::enter(64 * 1024);
    let small = black_box(vec![0u8; 1024]);
    assert_eq!(cancel.check(), Ok(()));
    let big = black_box(vec![0u8; 128 * 1024]);
    assert_eq!(cancel.check(), Err(Exhausted::Memory { limit: 64 * 1024 }));
    assert!(cancel.is_cancelled());
    drop((small, big));
    assert!(cancel.check().is_err(), "over the limit once is over it");
    drop(account);
    assert_eq!(cancel.check(), Ok(()));
    // Memory is told apart from the deadline, and named first.
    let fired = Cancel::new();
    fired.cancel();
    assert_eq!(fired.check(), Err(Exhausted::Deadline));
    let _account = MemoryScope::enter(0);
    let _one = black_box(vec![0u8; 1]);
    assert!(matches!(fired.check(), Err(Exhausted::Memory { .. })));
}

#[test]
fn ordinary_reviews_hold_a_small_part_of_the_default_budget() {
    let engine = engine();
    let metrics = Metrics::new();
    for (webhook, file) in [
        (
            Webhook::Mutate,
            "configmap/mutate-update-cloud-provider-config-serial-false.json",
        ),
        (
            Webhook::Mutate,
            "configmap/mutate-create-cloud-provider-config.json",
        ),
    ] {
        let body = captured(file);
        let (answer, peak) = answer_within(
            &engine,
            webhook,
            &body,
            stackgate::server::DEFAULT_MAX_EVALUATION_MEMORY,
            &metrics,
        );
        assert_eq!(answer["response"]["allowed"], true, "{file}");
        eprintln!("{file}: {} bytes body, peak {peak} bytes", body.len());
        assert!(peak < MIB, "{file}: peak {peak} bytes");
    }
    assert_eq!(
        metric(
            &metrics.encode(),
            "stackgate_input_limits_total{limit=\"memory\"}"
        ),
        0.0
    );
}

#[test]
fn a_long_name_on_a_payload_is_stopped_by_the_budget_and_counted() {
    let engine = engine();
    let metrics = Metrics::new();
    let body = payload_with_long_name(32 * 1024, 20);
    let (unbounded, peak) = answer_within(&engine, Webhook::Validate, &body, usize::MAX, &metrics);
    eprintln!("{} bytes body: peak {peak} bytes", body.len());
    assert_eq!(
        unbounded["response"]["allowed"], false,
        "the known-bad config is denied"
    );
    // Names are cut when they enter (ShortText), so the name no longer multiplies into
    // every finding; the payload's 20 sites still cost several times the body. A budget
    // under that peak stops it, whichever shape caused it.
    assert!(peak > 2 * body.len(), "the shape amplifies: peak {peak}");

    let (validate, _) = answer_within(&engine, Webhook::Validate, &body, BUDGET, &metrics);
    let response = &validate["response"];
    assert_eq!(response["uid"], "long-name-1");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 413);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("over stackgate's limit"), "{message}");
    assert!(message.contains("131072 bytes of memory"), "{message}");
    assert!(!message.contains("ran out of time"), "{message}");

    let (mutate, _) = answer_within(&engine, Webhook::Mutate, &body, BUDGET, &metrics);
    let response = &mutate["response"];
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("admitted it without mutation"),
        "{warning}"
    );
    assert!(warning.contains("over stackgate's limit"), "{warning}");
    assert_eq!(
        metric(
            &metrics.encode(),
            "stackgate_input_limits_total{limit=\"memory\"}"
        ),
        2.0
    );
}

/// The real binary: both webhook paths (inline for bodies up to 64 KiB, the blocking pool
/// above) run under the budget; an ordinary review is answered as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_answers_over_the_budget_on_both_endpoints_and_counts_it() {
    let server = ChildServer::start(&[
        "--request-timeout",
        "30s",
        "--max-evaluation-memory",
        "98304",
    ])
    .await;
    let inline = payload_with_long_name(16 * 1024, 20);
    assert!(inline.len() <= 64 * 1024);
    let large = payload_with_long_name(256 * 1024, 20);
    assert!(large.len() > 64 * 1024);
    let client = Client::connect(server.addr, &ClientOptions::trusting(&server.ca))
        .await
        .expect("connect");

    for body in [&inline, &large] {
        let (status, answer) = post(&client, "/validate?timeout=30s", body.clone()).await;
        assert_eq!(status, 200, "{answer}");
        let response = &answer["response"];
        assert_eq!(response["allowed"], false, "{answer}");
        assert_eq!(response["status"]["code"], 413, "{answer}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("over stackgate's limit"), "{message}");

        let (status, answer) = post(&client, "/mutate?timeout=30s", body.clone()).await;
        assert_eq!(status, 200, "{answer}");
        let response = &answer["response"];
        assert_eq!(response["allowed"], true, "{answer}");
        assert!(response.get("patch").is_none(), "{answer}");
        let warning = response["warnings"][0].as_str().unwrap();
        assert!(warning.contains("over stackgate's limit"), "{warning}");
    }

    let ordinary = captured("configmap/mutate-update-cloud-provider-config-serial-false.json");
    let (status, answer) = post(&client, "/mutate?timeout=30s", ordinary.clone()).await;
    assert_eq!(status, 200, "{answer}");
    let unbounded = admission::handle(&engine(), Webhook::Mutate, &ordinary, &Metrics::new());
    let unbounded: Value = serde_json::from_slice(&unbounded.body).expect("JSON");
    assert_eq!(
        answer, unbounded,
        "the budget changes nothing for an ordinary review"
    );

    let (_, _, text) = admin_get(server.admin, "/metrics").await.expect("metrics");
    assert_eq!(
        metric(&text, "stackgate_input_limits_total{limit=\"memory\"}"),
        4.0,
        "{text}"
    );
}

/// The audit evaluates each stored object inside the same budget (issue 31: the background
/// audit runs in the webhook's process): the long-named payload is not evaluated under a
/// budget below its peak ([`Exhausted::Memory`], which the audit reports as an input error
/// naming the object and counts as `limit="memory"`), and is under the default one.
#[test]
fn the_audit_evaluates_each_object_inside_the_budget() {
    let engine = engine();
    let review: Value = serde_json::from_slice(&payload_with_long_name(1000, 20)).unwrap();
    let object: kube::core::DynamicObject =
        serde_json::from_value(review["request"]["object"].clone()).unwrap();
    let gvk = kube::core::GroupVersionKind::gvk("", "v1", "Secret");
    let ar = kube::core::ApiResource::from_gvk(&gvk);
    let facts = stackgate::engine::Facts::default();
    let over =
        stackgate::audit::evaluate_update_bounded(&engine, &ar, &gvk, &object, &facts, BUDGET);
    assert_eq!(
        over.err(),
        Some(Exhausted::Memory { limit: BUDGET }),
        "stopped by the budget"
    );
    let (result, _) = stackgate::audit::evaluate_update_bounded(
        &engine,
        &ar,
        &gvk,
        &object,
        &facts,
        stackgate::budget::DEFAULT_MAX_EVALUATION_MEMORY,
    )
    .expect("inside the default budget");
    assert!(!result.items.is_empty(), "the payload's findings");
}

/// `check` evaluates each object inside the same budget (`--max-evaluation-memory`): the
/// long-named payload, as a file, is an input error naming the object under a budget below
/// its peak (exit code 2), and is evaluated with its findings under the default.
#[test]
fn check_evaluates_each_object_inside_the_budget() {
    let review: Value = serde_json::from_slice(&payload_with_long_name(1000, 20)).unwrap();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("payload.json");
    std::fs::write(&path, review["request"]["object"].to_string()).expect("write");
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_stackgate"))
            .arg("check")
            .args(extra)
            .arg(&path)
            .env_remove("STACKGATE_POLICIES")
            .env_remove("STACKGATE_CHECK_MAX_EVALUATION_MEMORY")
            .output()
            .expect("stackgate runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = run(&[&format!("--max-evaluation-memory={BUDGET}")]);
    assert_eq!(code, Some(2), "an input error: {text}");
    assert!(
        text.contains(&format!(
            "not evaluated: evaluating this object needed more than {BUDGET} bytes of memory"
        )),
        "{text}"
    );
    assert!(
        !text.contains("serial-lb-api-calls"),
        "not evaluated: {text}"
    );
    let (code, text) = run(&[]);
    assert_eq!(code, Some(1), "the payload's denials: {text}");
    assert!(text.contains("serial-lb-api-calls"), "{text}");
}
