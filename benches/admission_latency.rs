//! Latency of ConfigMap creates on a real kube-apiserver with each way of running stackgate's
//! ConfigMap rule (issue 35, Measure c): **none** (no admission of ours), **static** admission
//! manifests (KEP-5793, read from disk at start-up), **registered** admission policies
//! (created through the API, as `stackgate policies --output admission-policies` prints them),
//! and the **webhook** (`stackgate serve` over HTTPS, validating and mutating).
//!
//! ```text
//! KUBE_APISERVER_BIN=/path/to/kube-apiserver ETCD_BIN=/usr/bin/etcd \
//!   cargo bench --bench admission_latency -- [--rounds 400] [--warmup 40]
//! ```
//!
//! Without `KUBE_APISERVER_BIN` it prints why and exits 0. `STACKGATE_BIN` picks the webhook
//! binary (default: the one built for this bench). One apiserver (1.36 or later: static
//! manifests need `ManifestBasedAdmissionControlConfig`) serves all four: each mode has its
//! own namespace, and the bindings and webhook configurations select only theirs
//! (`namespaceSelector`), so the four run in the same process under the same load. Rounds are
//! interleaved: each round creates one ConfigMap per mode, in an order that rotates every
//! round. Every ConfigMap is a labelled cloud-config site (`stackgate.dev/cloud-config`) whose
//! config already holds the serial setting: every mode evaluates it in full and admits it
//! unchanged. Latency is client-side (request sent → response read), one request at a time,
//! on a kube client with a kept-alive connection; p50/p99/max per mode.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use serde_json::{Value, json};
use stackgate::admission_policies::served::{ApiChoice, ServedApis, choose, choose_static};
use stackgate::admission_policies::static_manifests::StaticManifests;
use stackgate::admission_policies::{KubeVersion, generate};
use stackgate::policy::PolicySet;

const TOKEN: &str = "admission-latency-bench";
/// The label each mode's namespace carries, and the bindings and webhooks select on.
const MODE_LABEL: &str = "bench.stackgate.dev/mode";
const MODES: [&str; 4] = ["none", "static", "registered", "webhook"];
const CONFIG: &str = "[Global]\nregion = bench\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\nlb-provider = amphora\n";

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

fn spawn(command: &mut Command, log: &Path) -> Proc {
    let out = std::fs::File::create(log).expect("log file");
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log file"))
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    Proc(child)
}

/// Number after `--name` in the bench's arguments, or `default`.
fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A CA and a serving certificate for 127.0.0.1: the CA PEM, and the files written.
fn write_pki(dir: &Path) -> (String, PathBuf, PathBuf) {
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "admission latency CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("server key");
    let mut leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("server params");
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf.signed_by(&key, &issuer).expect("server certificate");
    let (cert, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, leaf.pem()).expect("write tls.crt");
    std::fs::write(&key_file, key.serialize_pem()).expect("write tls.key");
    (ca_cert.pem(), cert, key_file)
}

/// Restricts a binding to the namespaces of `mode`.
fn select_mode(objects: &mut [Value], mode: &str) {
    for o in objects {
        if o["kind"].as_str().is_some_and(|k| k.ends_with("Binding")) {
            o["spec"]["matchResources"]["namespaceSelector"] =
                json!({"matchLabels": {MODE_LABEL: mode}});
        }
    }
}

/// Writes the static manifests (bound to the `static` namespace) and returns the
/// `AdmissionConfiguration` file.
fn write_static(dir: &Path, version: KubeVersion) -> PathBuf {
    let generated = generate(&PolicySet::embedded().expect("embedded policies"));
    let served = ServedApis::default_server(version);
    let choice = choose_static(&generated, &served, None).expect("1.36 serves both in v1");
    let mut manifests = StaticManifests::new(&generated, version, "bench:break-glass", choice)
        .expect("static manifests");
    let root = dir.join("static");
    for plugin in &mut manifests.dirs {
        select_mode(&mut plugin.objects, "static");
        let sub = root.join(plugin.subdir);
        std::fs::create_dir_all(&sub).expect("static dir");
        std::fs::write(
            sub.join("stackgate.yaml"),
            StaticManifests::manifest_yaml(plugin),
        )
        .expect("write static manifest");
    }
    let file = root.join("admission-configuration.yaml");
    let configuration = manifests
        .admission_configuration(&root.to_string_lossy())
        .expect("admission configuration");
    std::fs::write(&file, configuration).expect("write admission configuration");
    file
}

/// Starts etcd and the apiserver (static manifests on) in `dir`; returns them and the port.
fn start_apiserver(apiserver: &Path, dir: &Path, admission_config: &Path) -> (Proc, Proc, u16) {
    let etcd_bin = std::env::var_os("ETCD_BIN").unwrap_or_else(|| "etcd".into());
    let (client, peer, secure) = (free_port(), free_port(), free_port());
    let etcd = spawn(
        Command::new(etcd_bin)
            .args(["--name", "default", "--data-dir"])
            .arg(dir.join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}")),
        &dir.join("etcd.log"),
    );
    let sa = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("service account key");
    std::fs::write(dir.join("sa.key"), sa.serialize_pem()).expect("write sa.key");
    std::fs::write(dir.join("sa.pub"), sa.public_key_pem()).expect("write sa.pub");
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{TOKEN},admin,admin,system:masters\n"),
    )
    .expect("write tokens");
    let file = |name: &str| dir.join(name).display().to_string();
    let server = spawn(
        Command::new(apiserver)
            .arg(format!("--etcd-servers=http://127.0.0.1:{client}"))
            .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
            .arg(format!("--secure-port={secure}"))
            .arg(format!("--cert-dir={}", file("certs")))
            .arg(format!("--token-auth-file={}", file("tokens.csv")))
            .arg("--authorization-mode=RBAC")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!("--service-account-key-file={}", file("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                file("sa.key")
            ))
            .args([
                "--service-cluster-ip-range=10.96.0.0/16",
                "--endpoint-reconciler-type=none",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--feature-gates=ManifestBasedAdmissionControlConfig=true",
            ])
            .arg(format!(
                "--admission-control-config-file={}",
                admission_config.display()
            )),
        &dir.join("apiserver.log"),
    );
    (etcd, server, secure)
}

fn client(port: u16) -> kube::Client {
    let mut config = kube::Config::new(
        format!("https://127.0.0.1:{port}")
            .parse()
            .expect("apiserver URL"),
    );
    config.accept_invalid_certs = true;
    config.headers.push((
        http::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse().expect("token header"),
    ));
    kube::Client::try_from(config).expect("kube client")
}

async fn post(client: &kube::Client, path: &str, body: &Value) -> Result<Value, String> {
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).expect("JSON"))
        .expect("request");
    client
        .request::<Value>(request)
        .await
        .map_err(|e| e.to_string())
}

fn configmap(name: &str, config: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
        "data": {"cloud.conf": config},
    })
}

/// Polls `check` every 200 ms for up to `limit`; panics with `what` if it never holds.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn readyz(admin: SocketAddr) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut tcp) = std::net::TcpStream::connect(admin) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(1)));
    let mut head = [0u8; 12];
    tcp.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .is_ok()
        && tcp.read_exact(&mut head).is_ok()
        && head.starts_with(b"HTTP/1.1 200")
}

/// The validating and mutating webhook configurations of the `webhook` mode, as the chart
/// registers the labelled cloud-config webhook (`/validate`, `/mutate`, failurePolicy Fail).
fn webhook_configurations(port: u16, ca_pem: &str) -> Vec<(String, Value)> {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    ["validate", "mutate"]
        .into_iter()
        .map(|verb| {
            let kind = if verb == "validate" {
                "ValidatingWebhookConfiguration"
            } else {
                "MutatingWebhookConfiguration"
            };
            let mut webhook = json!({
                "name": format!("cloud-config-labelled.{verb}.stackgate.dev"),
                "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/{verb}"), "caBundle": ca},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                           "resources": ["configmaps", "secrets"], "scope": "Namespaced"}],
                "objectSelector": {"matchExpressions": [
                    {"key": "stackgate.dev/cloud-config", "operator": "Exists"}]},
                "namespaceSelector": {"matchLabels": {MODE_LABEL: "webhook"}},
            });
            if verb == "mutate" {
                webhook["reinvocationPolicy"] = json!("Never");
            }
            let path = format!(
                "/apis/admissionregistration.k8s.io/v1/{}s",
                kind.to_ascii_lowercase()
            );
            (
                path,
                json!({
                    "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                    "metadata": {"name": format!("bench-stackgate-{verb}")},
                    "webhooks": [webhook],
                }),
            )
        })
        .collect()
}

/// p-th percentile (nearest rank) of sorted `samples`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let Some(apiserver) = std::env::var_os("KUBE_APISERVER_BIN").map(PathBuf::from) else {
        println!(
            "admission_latency: skipped: KUBE_APISERVER_BIN is not set (a kube-apiserver 1.36 \
             or later; ETCD_BIN for etcd)"
        );
        return;
    };
    let stackgate_bin = std::env::var_os("STACKGATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_stackgate")));
    let rounds = arg("--rounds", 400);
    let warmup = arg("--warmup", 40);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(&apiserver, &stackgate_bin, rounds, warmup));
}

async fn run(apiserver: &Path, stackgate_bin: &Path, rounds: usize, warmup: usize) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let version: KubeVersion = "1.36".parse().expect("version");
    let admission_config = write_static(dir.path(), version);
    let (_etcd, _apiserver, port) = start_apiserver(apiserver, dir.path(), &admission_config);
    let admin = client(port);
    let log = dir.path().join("apiserver.log");
    wait_for("the apiserver ready", Duration::from_secs(90), || {
        let admin = admin.clone();
        async move {
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("request");
            admin.request_text(request).await.is_ok_and(|t| t == "ok")
        }
    })
    .await;
    let version_info = admin.apiserver_version().await.expect("/version");

    // The webhook.
    let (ca_pem, cert, key) = write_pki(dir.path());
    let (listen, admin_listen) = (free_port(), free_port());
    let admin_addr: SocketAddr = format!("127.0.0.1:{admin_listen}")
        .parse()
        .expect("address");
    let _webhook = spawn(
        Command::new(stackgate_bin)
            .args(["serve", "--kube", "off", "--log-level", "warn"])
            .arg(format!("--listen=127.0.0.1:{listen}"))
            .arg(format!("--admin-listen={admin_addr}"))
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key),
        &dir.path().join("stackgate.log"),
    );
    wait_for("stackgate serve ready", Duration::from_secs(30), || async {
        readyz(admin_addr)
    })
    .await;

    for mode in MODES {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("bench-{mode}"), "labels": {MODE_LABEL: mode}}});
        post(&admin, "/api/v1/namespaces", &namespace)
            .await
            .expect("create namespace");
    }
    // The registered policies, as the command line prints them for this server.
    let generated = generate(&PolicySet::embedded().expect("embedded policies"));
    let choice: ApiChoice = choose(&generated, &ServedApis::default_server(version), None)
        .expect("1.36 serves both kinds");
    let mut objects = generated.objects_for(choice);
    select_mode(&mut objects, "registered");
    for o in &objects {
        let kind = o["kind"].as_str().expect("kind").to_ascii_lowercase();
        let plural = match kind.strip_suffix("policy") {
            Some(stem) => format!("{stem}policies"),
            None => format!("{kind}s"),
        };
        let path = format!("/apis/{}/{plural}", o["apiVersion"].as_str().expect("api"));
        post(&admin, &path, o).await.expect("register policy");
    }
    for (path, configuration) in webhook_configurations(listen, &ca_pem) {
        post(&admin, &path, &configuration)
            .await
            .expect("register webhook");
    }
    // Every mode in force before measuring: a config with the serial setting missing gets it
    // (the mutating half) in every mode but `none`. Policies and webhook configurations load
    // asynchronously.
    let plain = "[Global]\nregion = bench\n";
    for mode in MODES {
        let path = format!("/api/v1/namespaces/bench-{mode}/configmaps?dryRun=All");
        wait_for(
            &format!("mode {mode} in force (log: {})", log.display()),
            Duration::from_secs(60),
            || {
                let (admin, path) = (admin.clone(), path.clone());
                async move {
                    let added = post(&admin, &path, &configmap("probe", plain))
                        .await
                        .is_ok_and(|o| o["data"]["cloud.conf"] != plain);
                    added == (mode != "none")
                }
            },
        )
        .await;
    }

    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); MODES.len()];
    let mut n = 0usize;
    for round in 0..warmup + rounds {
        for step in 0..MODES.len() {
            let m = (round + step) % MODES.len();
            n += 1;
            let path = format!("/api/v1/namespaces/bench-{}/configmaps", MODES[m]);
            let body = configmap(&format!("cm-{n}"), CONFIG);
            let start = Instant::now();
            let created = post(&admin, &path, &body).await;
            let took = start.elapsed();
            let created = created.unwrap_or_else(|e| panic!("{} create: {e}", MODES[m]));
            assert_eq!(
                created["data"]["cloud.conf"], CONFIG,
                "admitted unchanged ({})",
                MODES[m]
            );
            if round >= warmup {
                samples[m].push(took);
            }
        }
    }

    println!(
        "admission_latency: kube-apiserver {} ({}), {rounds} interleaved rounds after {warmup} \
         warm-up rounds, one ConfigMap create per mode per round",
        version_info.git_version,
        apiserver.display()
    );
    println!("| mode | creates | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    let p50_none = {
        let mut s = samples[0].clone();
        s.sort();
        percentile(&s, 50.0)
    };
    for (m, mode) in MODES.iter().enumerate() {
        let mut s = samples[m].clone();
        s.sort();
        let (p50, p99, max) = (percentile(&s, 50.0), percentile(&s, 99.0), s[s.len() - 1]);
        let over = p50.as_secs_f64() * 1000.0 - p50_none.as_secs_f64() * 1000.0;
        println!(
            "| {mode} | {} | {} ({over:+.2}) | {} | {} |",
            s.len(),
            ms(p50),
            ms(p99),
            ms(max)
        );
    }
}
