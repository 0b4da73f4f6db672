//! A real etcd + kube-apiserver for the tests that need one (`KUBE_APISERVER_BIN`, `ETCD_BIN`):
//! child processes on free loopback ports in the test's own directory, token auth with a
//! `system:masters` token, RBAC on, no controllers. The including test crate declares
//! `mod common;` (the test CA).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::time::Instant;

/// How long the apiserver may take to become ready on a loaded 2-core machine (3–6 s idle).
pub const START_DEADLINE: Duration = Duration::from_secs(90);

/// A child process killed (and reaped) on drop.
pub struct Proc {
    /// The process.
    pub child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `command` with its output in `log`.
    pub fn spawn(mut command: Command, log: PathBuf) -> Self {
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        Self { child, log }
    }

    /// The last lines of its output, for failure messages.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tenant: group `tenants`, no permission until a test grants one.
pub const TENANT: &str = "tenant-a";
/// A platform-team member: group `platform-team`, no permission until a test grants one.
pub const PLATFORM: &str = "platform";

/// The bearer token of `user` ([`TENANT`] or [`PLATFORM`]) in every apiserver started here.
pub fn user_token(user: &str) -> String {
    format!("{user}-token-{}", std::process::id())
}

/// A client of the apiserver behind `kubeconfig` acting as `user` ([`TENANT`] or
/// [`PLATFORM`]).
#[allow(dead_code)] // only the tests that act as these users call it
pub async fn client_as(kubeconfig: &Path, user: &str) -> kube::Client {
    let mut config = Kubeconfig::read_from(kubeconfig).unwrap();
    for auth in &mut config.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            info.token = Some(user_token(user).into());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A running `stackgate serve` ([`start_stackgate`]).
#[allow(dead_code)] // only the tests that run the binary use it
pub struct Stackgate {
    /// The process.
    pub proc: Proc,
    /// Its webhook address.
    pub addr: std::net::SocketAddr,
    /// Its admin address (`/readyz`, `/metrics`).
    pub admin: std::net::SocketAddr,
    /// The CA of its generated serving certificate (PEM).
    pub ca: String,
}

/// `stackgate serve ARGS` on free loopback ports, with its generated serving certificate's
/// CA written out, and `KUBECONFIG` when given; returns once `/readyz` answers 200.
#[allow(dead_code)] // only the tests that run the binary use it
pub async fn start_stackgate(dir: &Path, args: &[&str], kubeconfig: Option<&Path>) -> Stackgate {
    let (addr, admin): (std::net::SocketAddr, std::net::SocketAddr) = (
        ([127, 0, 0, 1], free_port()).into(),
        ([127, 0, 0, 1], free_port()).into(),
    );
    let ca_path = dir.join("stackgate-ca.pem");
    let mut command = Command::new(env!("CARGO_BIN_EXE_stackgate"));
    command
        .arg("serve")
        .args(args)
        .arg(format!("--listen={addr}"))
        .arg(format!("--admin-listen={admin}"))
        .arg("--generated-ca-out")
        .arg(&ca_path);
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    let proc = Proc::spawn(command, dir.join("stackgate.log"));
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if matches!(crate::common::admin_get(admin, "/readyz").await, Ok((s, _, _)) if s.is_success())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stackgate not ready: {}",
            proc.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ca = std::fs::read_to_string(&ca_path).unwrap();
    Stackgate {
        proc,
        addr,
        admin,
        ca,
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The binaries, or why the test does not run.
pub fn binaries() -> Result<(PathBuf, PathBuf), String> {
    let get = |name: &str| -> Result<PathBuf, String> {
        let path = std::env::var_os(name)
            .map(PathBuf::from)
            .ok_or_else(|| format!("{name} is not set"))?;
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{name}={} is not a file", path.display()))
        }
    };
    Ok((get("KUBE_APISERVER_BIN")?, get("ETCD_BIN")?))
}

/// etcd + kube-apiserver in `dir`; returns the processes and a client for the apiserver.
pub async fn start_apiserver(
    apiserver: &Path,
    etcd: &Path,
    dir: &Path,
) -> (Proc, Proc, kube::Client, PathBuf) {
    let ca = crate::common::Ca::new("real-apiserver test CA");
    let leaf = ca.server_leaf();
    let sa = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let (sa_key, sa_pub) = (sa.serialize_pem(), sa.public_key_pem());
    let token = format!("test-token-{}", std::process::id());
    for (name, content) in [
        ("ca.crt", ca.cert_pem.as_str()),
        ("apiserver.crt", leaf.chain_pem.as_str()),
        ("apiserver.key", leaf.key_pem.as_str()),
        ("sa.key", sa_key.as_str()),
        ("sa.pub", sa_pub.as_str()),
        (
            "tokens.csv",
            &format!(
                "{token},admin,admin-uid,system:masters\n{},{TENANT},tenant-uid,tenants\n\
                 {},{PLATFORM},platform-uid,platform-team\n",
                user_token(TENANT),
                user_token(PLATFORM)
            ),
        ),
    ] {
        std::fs::write(dir.join(name), content).unwrap();
    }
    let (client_port, peer_port, secure_port) = (free_port(), free_port(), free_port());
    let mut command = Command::new(etcd);
    command
        .arg("--data-dir")
        .arg(dir.join("etcd"))
        .args(["--name", "default"])
        .arg(format!(
            "--listen-client-urls=http://127.0.0.1:{client_port}"
        ))
        .arg(format!(
            "--advertise-client-urls=http://127.0.0.1:{client_port}"
        ))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
        ))
        .arg(format!(
            "--initial-cluster=default=http://127.0.0.1:{peer_port}"
        ));
    let etcd = Proc::spawn(command, dir.join("etcd.log"));
    let file = |name: &str| dir.join(name);
    let mut command = Command::new(apiserver);
    command
        .arg(format!("--etcd-servers=http://127.0.0.1:{client_port}"))
        .args([
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
        ])
        .arg(format!("--secure-port={secure_port}"))
        .arg("--tls-cert-file")
        .arg(file("apiserver.crt"))
        .arg("--tls-private-key-file")
        .arg(file("apiserver.key"))
        .arg("--client-ca-file")
        .arg(file("ca.crt"))
        .arg("--token-auth-file")
        .arg(file("tokens.csv"))
        .args(["--authorization-mode", "RBAC"])
        .args(["--service-account-issuer", "https://kubernetes.default.svc"])
        .arg("--service-account-key-file")
        .arg(file("sa.pub"))
        .arg("--service-account-signing-key-file")
        .arg(file("sa.key"))
        .args(["--service-cluster-ip-range", "10.96.0.0/16"])
        .args(["--endpoint-reconciler-type", "none"])
        .args(["--disable-admission-plugins", "ServiceAccount"])
        .arg("--enable-priority-and-fairness=false");
    let mut apiserver = Proc::spawn(command, dir.join("apiserver.log"));

    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    \
             server: https://127.0.0.1:{secure_port}\n    certificate-authority: {}\n\
             users:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: local\n  \
             context: {{cluster: local, user: admin}}\ncurrent-context: local\n",
            file("ca.crt").display()
        ),
    )
    .unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        let ready = client
            .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
            .await;
        if matches!(ready.as_deref(), Ok("ok")) {
            break;
        }
        let exited = apiserver.child.try_wait().ok().flatten();
        assert!(
            Instant::now() < deadline && exited.is_none(),
            "kube-apiserver not ready (exited: {exited:?}) within {START_DEADLINE:?}: {ready:?}\n--- apiserver\n{}\n--- etcd\n{}",
            apiserver.tail(),
            etcd.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (etcd, apiserver, client, kubeconfig)
}

/// The chart as `.ci/chart.sh` renders it (`target/chart-render/default.yaml`), or why it is
/// not there.
#[allow(dead_code)] // only the tests that register the chart's own webhooks call it
pub fn chart_render() -> Result<Vec<serde_json::Value>, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/chart-render/default.yaml");
    let text = std::fs::read_to_string(&path).map_err(|_| {
        format!(
            "{} is missing (run .ci/chart.sh first: it renders the chart with Helm)",
            path.display()
        )
    })?;
    Ok(serde_saphyr::from_multiple(&text).expect("the render is YAML"))
}

/// The render's webhook configuration of `kind` reduced to its one webhook whose name starts
/// with `prefix`, calling the stackgate at `addr` (CA `ca_pem`) and failing closed, so that a
/// call that did not happen cannot pass for an admission.
#[allow(dead_code)] // only the tests that register the chart's own webhooks call it
pub fn chart_webhook(
    render: &[serde_json::Value],
    kind: &str,
    prefix: &str,
    addr: std::net::SocketAddr,
    ca_pem: &str,
) -> serde_json::Value {
    use base64::Engine as _;
    use serde_json::{Value, json};
    let mut config = render
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("the render has no {kind}"))
        .clone();
    let webhooks: Vec<Value> = config["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|w| {
            let mut w = w.clone();
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap()
                .to_owned();
            w["clientConfig"] = json!({
                "url": format!("https://{addr}{path}"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            });
            w["failurePolicy"] = json!("Fail");
            w["timeoutSeconds"] = json!(10);
            w
        })
        .collect();
    assert_eq!(webhooks.len(), 1, "{kind}: one {prefix} webhook");
    config["webhooks"] = Value::Array(webhooks);
    config["metadata"] = json!({"name": "stackgate"});
    config
}
