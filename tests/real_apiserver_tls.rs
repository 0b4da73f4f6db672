//! Self-managed TLS through a real kube-apiserver: two `stackgate serve --tls-mode
//! self-managed` processes (two replicas: one elected writes the Secret and the `caBundle`,
//! both load from the Secret) behind a ValidatingWebhookConfiguration with `failurePolicy:
//! Fail` and one webhook per replica, while labelled ConfigMaps are written continuously. Every
//! write goes through both replicas; a handshake the apiserver refuses (a certificate it does
//! not trust, or an expired one) fails the write. The serving certificate renews several times
//! and the CA rotates once; the number of failed writes must be 0.
//!
//! Needs `KUBE_APISERVER_BIN` and `ETCD_BIN`; without them the test prints why and passes. It
//! is never the only test of the behaviour: `src/certs/rotation.rs` drives every transition
//! with a clock (`simulated_operation_never_serves_an_untrusted_or_expired_certificate`), and
//! `src/certs/pki.rs` verifies a whole rotation's chains with webpki.
//!
//! Lifetimes: short by default (serving 24 s, CA 72 s: about 90 s of writes);
//! `STACKGATE_TLS_SOAK=full` runs the measured configuration of BENCHMARKS.md (serving 2 min,
//! CA 10 min, writes until three serving renewals and one CA rotation are done, about 8 min).
//! The numbers are printed (`cargo test --test real_apiserver_tls -- --nocapture`).

mod common;
#[path = "support/real_apiserver.rs"]
mod real_apiserver;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::time::Instant;

use real_apiserver::{Proc, START_DEADLINE, binaries, free_port, start_apiserver};

const NS: &str = "default";
const SECRET: &str = "stackgate-certs";
const CONFIGURATION: &str = "stackgate";
const LOAD_LABEL: &str = "load.stackgate.dev/written";

/// Lifetimes and settings of one run.
struct Run {
    serving: &'static str,
    ca: &'static str,
    settle: &'static str,
    report: &'static str,
    /// Writes go on until this many serving renewals and CA rotations were seen...
    serving_renewals: usize,
    ca_rotations: usize,
    /// ...or this long has passed (then the test fails).
    limit: Duration,
}

const SHORT: Run = Run {
    serving: "24s",
    ca: "72s",
    settle: "3s",
    report: "1s",
    serving_renewals: 3,
    ca_rotations: 1,
    limit: Duration::from_secs(240),
};

const FULL: Run = Run {
    serving: "2m",
    ca: "10m",
    settle: "10s",
    report: "5s",
    serving_renewals: 3,
    ca_rotations: 1,
    limit: Duration::from_secs(15 * 60),
};

/// Writes per second the load aims at (the measurement asks for at least 20).
const WRITES_PER_SECOND: u64 = 25;

async fn start_replica(
    dir: &Path,
    kubeconfig: &Path,
    identity: &str,
    run: &Run,
) -> (Proc, SocketAddr) {
    let (addr, admin): (SocketAddr, SocketAddr) = (
        ([127, 0, 0, 1], free_port()).into(),
        ([127, 0, 0, 1], free_port()).into(),
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_stackgate"));
    command
        .env("KUBECONFIG", kubeconfig)
        .args(["serve", "--kube", "off", "--log-level", "info"])
        .arg(format!("--listen={addr}"))
        .arg(format!("--admin-listen={admin}"))
        .args(["--tls-mode", "self-managed", "--tls-namespace", NS])
        .args([
            "--tls-secret",
            SECRET,
            "--tls-webhook-configuration",
            CONFIGURATION,
        ])
        .args([
            "--tls-dns-names",
            "127.0.0.1,localhost",
            "--tls-identity",
            identity,
        ])
        .args(["--tls-lease-duration", "6s"])
        .args([
            "--tls-serving-lifetime",
            run.serving,
            "--tls-ca-lifetime",
            run.ca,
        ])
        .args([
            "--tls-bundle-settle",
            run.settle,
            "--tls-report-interval",
            run.report,
        ]);
    let child = Proc::spawn(command, dir.join(format!("stackgate-{identity}.log")));
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if matches!(common::admin_get(admin, "/readyz").await, Ok((s, _, _)) if s.is_success()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica {identity} never ready: {}",
            child.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (child, addr)
}

/// The ValidatingWebhookConfiguration as the chart renders it for self-managed TLS: labelled
/// part-of stackgate, no caBundle; one webhook per replica, every labelled ConfigMap write.
fn configuration(replicas: &[SocketAddr]) -> ValidatingWebhookConfiguration {
    let webhooks: Vec<_> = replicas
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            json!({"name": format!("replica-{i}.validate.stackgate.dev"),
                "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"url": format!("https://{addr}/validate")},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["configmaps"], "scope": "Namespaced"}],
                "objectSelector": {"matchExpressions": [{"key": LOAD_LABEL, "operator": "Exists"}]}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION, "labels": {"app.kubernetes.io/part-of": "stackgate"}},
        "webhooks": webhooks}))
    .unwrap()
}

fn config_map(n: u64) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("load-{n}"), "labels": {LOAD_LABEL: "true"}},
        "data": {"n": n.to_string()}}))
    .unwrap()
}

/// What the Secret holds: (serving certificate, signing CA), PEM.
async fn secret_state(secrets: &Api<Secret>) -> Option<(Vec<u8>, Vec<u8>)> {
    let secret = secrets.get_opt(SECRET).await.ok()??;
    let data = secret.data?;
    Some((
        data.get("tls.crt")?.0.clone(),
        data.get("signing-ca.crt")?.0.clone(),
    ))
}

/// The sum of the apiserver's `apiserver_admission_webhook_rejection_count` samples.
async fn apiserver_rejections(client: &kube::Client) -> f64 {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("apiserver_admission_webhook_rejection_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_fail_no_admission_call() {
    let (apiserver_bin, etcd_bin) = match binaries() {
        Ok(found) => found,
        Err(why) => {
            eprintln!(
                "skipped: {why} (set KUBE_APISERVER_BIN and ETCD_BIN to run against a real \
                 kube-apiserver; src/certs/rotation.rs covers the transitions with a clock)"
            );
            return;
        }
    };
    let run = match std::env::var("STACKGATE_TLS_SOAK").as_deref() {
        Ok("full") => FULL,
        _ => SHORT,
    };
    common::setup();
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, _apiserver, client, kubeconfig) =
        start_apiserver(&apiserver_bin, &etcd_bin, dir.path()).await;
    let (replica_a, addr_a) = start_replica(dir.path(), &kubeconfig, "replica-a", &run).await;
    let (replica_b, addr_b) = start_replica(dir.path(), &kubeconfig, "replica-b", &run).await;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configurations
        .create(&PostParams::default(), &configuration(&[addr_a, addr_b]))
        .await
        .unwrap();

    // Until the elected replica has patched the caBundle in and the apiserver admits a write
    // through both webhooks.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 0u64;
    loop {
        n += 1;
        let written = config_maps
            .create(&PostParams::default(), &config_map(n))
            .await;
        if written.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no write admitted: {written:?}\n--- replica-a\n{}\n--- replica-b\n{}",
            replica_a.tail(),
            replica_b.tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rejections_before = apiserver_rejections(&client).await;

    // The load: WRITES_PER_SECOND creates, each through both replicas; failures counted.
    let failures = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let load = {
        let (failures, writes, first_error) = (
            Arc::clone(&failures),
            Arc::clone(&writes),
            Arc::clone(&first_error),
        );
        let config_maps = config_maps.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_millis(1000 / WRITES_PER_SECOND));
            let mut in_flight = tokio::task::JoinSet::new();
            loop {
                ticker.tick().await;
                n += 1;
                let (config_maps, failures, writes, first_error) = (
                    config_maps.clone(),
                    Arc::clone(&failures),
                    Arc::clone(&writes),
                    Arc::clone(&first_error),
                );
                in_flight.spawn(async move {
                    let written = config_maps
                        .create(&PostParams::default(), &config_map(n))
                        .await;
                    writes.fetch_add(1, Ordering::SeqCst);
                    if let Err(error) = written {
                        failures.fetch_add(1, Ordering::SeqCst);
                        first_error.lock().unwrap().get_or_insert(error.to_string());
                    }
                });
                while in_flight.try_join_next().is_some() {}
            }
        })
    };

    // Watch the Secret until enough rotations happened.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    let (mut servings, mut cas) = (BTreeSet::new(), BTreeSet::new());
    loop {
        if let Some((serving, ca)) = secret_state(&secrets).await {
            servings.insert(serving);
            cas.insert(ca);
        }
        let (renewals, rotations) = (servings.len() - 1, cas.len().saturating_sub(1));
        if renewals >= run.serving_renewals && rotations >= run.ca_rotations {
            // A little longer: the old CA's removal from the bundle comes after the switch.
            tokio::time::sleep(Duration::from_secs(10)).await;
            break;
        }
        assert!(
            started.elapsed() < run.limit,
            "{renewals} serving renewals and {rotations} CA rotations in {:?}\n--- replica-a\n{}\n--- replica-b\n{}",
            run.limit,
            replica_a.tail(),
            replica_b.tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    load.abort();
    let seconds = started.elapsed().as_secs_f64();
    let (writes, failures) = (
        writes.load(Ordering::SeqCst),
        failures.load(Ordering::SeqCst),
    );
    let rejections = apiserver_rejections(&client).await - rejections_before;
    let bundle = configurations
        .get(CONFIGURATION)
        .await
        .unwrap()
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
        .collect::<Vec<_>>();
    println!(
        "self-managed TLS: {writes} writes in {seconds:.0} s ({:.1}/s), {failures} failed, \
         apiserver webhook rejections {rejections}; serving certificates seen {}, CAs seen {}; \
         caBundle now {} CA(s)",
        writes as f64 / seconds,
        servings.len(),
        cas.len(),
        bundle.first().map_or(0, |b| String::from_utf8_lossy(b)
            .matches("BEGIN CERTIFICATE")
            .count()),
    );
    assert!(
        writes as f64 / seconds >= 20.0,
        "{writes} writes in {seconds:.0} s: below 20/s"
    );
    assert_eq!(
        failures,
        0,
        "failed writes; the first: {:?}\n--- replica-a\n{}\n--- replica-b\n{}",
        first_error.lock().unwrap(),
        replica_a.tail(),
        replica_b.tail()
    );
    assert_eq!(rejections, 0.0, "apiserver webhook rejections");
    // Every webhook carries the same bundle, and base64 round-trips it (it is PEM).
    assert!(bundle.windows(2).all(|w| w[0] == w[1]));
    assert!(
        base64::engine::general_purpose::STANDARD
            .decode(base64::engine::general_purpose::STANDARD.encode(&bundle[0]))
            .is_ok()
    );
}
