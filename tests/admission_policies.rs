//! The generated admission policies as objects: which exist for which policy set and
//! Kubernetes version, their modes, scopes and exemptions, the command line, and the chart's
//! copy. What their CEL decides is tested in `admission_policies_cel.rs`.

use std::process::Command;

use serde_json::Value;
use stackgate::admission_policies::served::ApiChoice;
use stackgate::admission_policies::{AdmissionPoliciesError, KubeVersion, generate};
use stackgate::policy::{Mode, PolicySet};

fn version(v: &str) -> KubeVersion {
    v.parse().unwrap()
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn expression_text(policy: &Value) -> String {
    serde_json::to_string(&policy["spec"]).unwrap()
}

#[test]
fn default_set_has_a_policy_and_binding_per_rule_and_carrier() {
    let generated = generate(&PolicySet::embedded().unwrap());
    let objects = generated.objects(version("1.36")).unwrap();
    for policy in ["serial-lb-api-calls", "known-bad-lb-settings"] {
        for group in ["configmaps", "chart-values"] {
            let name = format!("stackgate-{policy}-{group}");
            let vap = named(&objects, "ValidatingAdmissionPolicy", &name).expect(&name);
            assert_eq!(vap["apiVersion"], "admissionregistration.k8s.io/v1");
            assert_eq!(vap["spec"]["failurePolicy"], "Ignore", "{name}");
            let binding = named(&objects, "ValidatingAdmissionPolicyBinding", &name).expect(&name);
            assert_eq!(binding["spec"]["policyName"], name.as_str());
            assert_eq!(
                binding["spec"]["validationActions"],
                serde_json::json!(["Deny"])
            );
            let exempt = format!("stackgate.dev/exempt.{policy}");
            assert!(expression_text(vap).contains(&exempt), "{name}");
        }
    }
    for group in ["configmaps", "chart-values"] {
        let name = format!("stackgate-serial-lb-api-calls-{group}-add");
        let map = named(&objects, "MutatingAdmissionPolicy", &name).expect(&name);
        assert_eq!(map["spec"]["reinvocationPolicy"], "Never");
        assert!(named(&objects, "MutatingAdmissionPolicyBinding", &name).is_some());
    }
    // use-octavia is never added: only the serial setting is.
    assert!(
        objects
            .iter()
            .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
            .all(|o| o["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("stackgate-serial-lb-api-calls-"))
    );
}

#[test]
fn secrets_are_never_matched() {
    let generated = generate(&PolicySet::embedded().unwrap());
    for o in generated.objects(version("1.36")).unwrap() {
        let rules = &o["spec"]["matchConstraints"]["resourceRules"];
        for rule in rules.as_array().into_iter().flatten() {
            assert!(
                !rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == "secrets"),
                "{}",
                o["metadata"]["name"]
            );
        }
    }
}

#[test]
fn modes_become_validation_actions_and_off_generates_nothing() {
    let mut set = PolicySet::embedded().unwrap();
    let serial = set
        .policies
        .iter_mut()
        .find(|p| p.name == "serial-lb-api-calls")
        .unwrap();
    serial.mode = Mode::Warn;
    let objects = generate(&set).objects(version("1.36")).unwrap();
    let binding = named(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "stackgate-serial-lb-api-calls-configmaps",
    )
    .unwrap();
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Warn"])
    );
    // warn still mutates, as the webhook does.
    assert!(
        named(
            &objects,
            "MutatingAdmissionPolicy",
            "stackgate-serial-lb-api-calls-configmaps-add"
        )
        .is_some()
    );

    let serial = set
        .policies
        .iter_mut()
        .find(|p| p.name == "serial-lb-api-calls")
        .unwrap();
    serial.mode = Mode::Audit;
    let objects = generate(&set).objects(version("1.36")).unwrap();
    let binding = named(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "stackgate-serial-lb-api-calls-chart-values",
    )
    .unwrap();
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Audit"])
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "MutatingAdmissionPolicy"),
        "audit mode never mutates"
    );

    for p in &mut set.policies {
        p.mode = Mode::Off;
    }
    assert!(generate(&set).objects(version("1.36")).unwrap().is_empty());
}

#[test]
fn scope_and_exemption_follow_the_policy() {
    let mut set = PolicySet::embedded().unwrap();
    let serial = set
        .policies
        .iter_mut()
        .find(|p| p.name == "serial-lb-api-calls")
        .unwrap();
    serial.scope.namespaces = vec!["kube-system".to_owned()];
    serial.scope.exclude_namespaces = vec!["sandbox".to_owned()];
    serial.exemptions = Default::default();
    let objects = generate(&set).objects(version("1.30")).unwrap();
    let vap = named(
        &objects,
        "ValidatingAdmissionPolicy",
        "stackgate-serial-lb-api-calls-configmaps",
    )
    .unwrap();
    let variables = vap["spec"]["variables"].as_array().unwrap();
    let var = |name: &str| {
        variables.iter().find(|v| v["name"] == name).unwrap()["expression"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        var("inScope").contains("in ['kube-system']"),
        "{}",
        var("inScope")
    );
    assert!(var("inScope").contains("!("), "{}", var("inScope"));
    assert!(var("inScope").contains("['sandbox']"), "{}", var("inScope"));
    assert_eq!(var("exempt"), "false");
    assert!(
        !vap["spec"]["validations"][0]["message"]
            .as_str()
            .unwrap()
            .contains("To exempt")
    );
}

#[test]
fn versions_pick_the_api() {
    let generated = generate(&PolicySet::embedded().unwrap());
    let apis = |v: &str| -> Vec<(String, String)> {
        generated
            .objects(version(v))
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_owned(),
                    o["apiVersion"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let v1 = "admissionregistration.k8s.io/v1";
    let beta = "admissionregistration.k8s.io/v1beta1";
    assert!(apis("1.28").iter().all(|(_, a)| a == beta));
    assert!(
        apis("1.30")
            .iter()
            .all(|(k, a)| a == v1 && k.starts_with("Validating"))
    );
    assert!(
        apis("1.34")
            .iter()
            .all(|(k, a)| (k.starts_with("Validating") && a == v1)
                || (k.starts_with("Mutating") && a == beta))
    );
    assert!(apis("1.34").iter().any(|(k, _)| k.starts_with("Mutating")));
    assert!(apis("1.36").iter().all(|(_, a)| a == v1));
    assert!(matches!(
        generated.objects(version("1.27")),
        Err(AdmissionPoliciesError::Unsupported(_))
    ));
}

fn stackgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(args)
        .env_remove("STACKGATE_POLICIES")
        .env_remove("STACKGATE_KUBE_VERSION")
        .env_remove("STACKGATE_POLICIES_OUTPUT")
        .output()
        .unwrap()
}

#[test]
fn command_line_prints_the_objects_for_the_version() {
    let out = stackgate(&[
        "policies",
        "--output",
        "admission-policies",
        "--kube-version",
        "1.36",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = text
        .split("---\n")
        .skip(1)
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(docs.iter().any(|d| d["kind"] == "MutatingAdmissionPolicy"));
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
    );

    // 1.30 is the default, and serves no MutatingAdmissionPolicy: --only says so.
    let out = stackgate(&[
        "policies",
        "--output",
        "admission-policies",
        "--only",
        "validating",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("ValidatingAdmissionPolicy"));
    assert!(!text.contains("MutatingAdmissionPolicy"));

    let out = stackgate(&[
        "policies",
        "--output",
        "admission-policies",
        "--kube-version",
        "1.27",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1.27"));

    // The default output is still the policy set.
    let out = stackgate(&["policies"]);
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .starts_with("# effective policy set")
    );
}

/// The documents of `stackgate policies --output admission-policies` output.
fn documents(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .split("---\n")
        .skip(1)
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// `(kind, apiVersion)` of each document.
fn kinds_and_apis(docs: &[Value]) -> Vec<(String, String)> {
    docs.iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_owned(),
                d["apiVersion"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// No partial install: a target that does not serve a generated kind gets nothing (exit 2,
/// naming the kind and the flags), `--only` chooses a subset on purpose, and `--api-versions`
/// (as Helm takes it) adds what the server serves besides its version's defaults.
#[test]
fn command_line_writes_only_what_the_target_serves() {
    let refused = |args: &[&str], names: &[&str]| {
        let out = stackgate(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing is written");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for name in names {
            assert!(stderr.contains(name), "{args:?}: {name} in {stderr}");
        }
    };
    let ap = ["policies", "--output", "admission-policies"];
    let with = |more: &[&'static str]| -> Vec<&'static str> { [&ap[..], more].concat() };
    refused(
        &ap,
        &[
            "stackgate policies: Kubernetes 1.30 serves no MutatingAdmissionPolicy",
            "--only validating",
            "--api-versions",
        ],
    );
    // A default 1.34 serves no MutatingAdmissionPolicy: its v1beta1 needs a feature gate.
    refused(
        &with(&["--kube-version", "1.34"]),
        &[
            "MutatingAdmissionPolicy",
            "--feature-gates=MutatingAdmissionPolicy=true",
        ],
    );
    refused(
        &with(&["--kube-version", "1.29"]),
        &["ValidatingAdmissionPolicy ("],
    );
    // The policy kind without its binding kind is not enough.
    refused(
        &with(&[
            "--kube-version",
            "1.34",
            "--api-versions",
            "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy",
        ]),
        &["MutatingAdmissionPolicy"],
    );
    refused(
        &with(&["--api-versions", "not a version"]),
        &["\"not a version\""],
    );

    let out = stackgate(&with(&[
        "--kube-version",
        "1.34",
        "--api-versions",
        "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy",
        "--api-versions",
        "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicyBinding,apps/v1",
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kinds_and_apis(&documents(&out.stdout));
    let beta = "admissionregistration.k8s.io/v1beta1";
    assert!(
        got.iter()
            .any(|(k, _)| k == "MutatingAdmissionPolicyBinding")
    );
    assert!(
        got.iter()
            .all(|(k, a)| (k.starts_with("Mutating") && a == beta)
                || (k.starts_with("Validating") && a == "admissionregistration.k8s.io/v1"))
    );

    let out = stackgate(&with(&["--kube-version", "1.36", "--only", "mutating"]));
    assert!(out.status.success());
    let got = kinds_and_apis(&documents(&out.stdout));
    assert!(!got.is_empty() && got.iter().all(|(k, _)| k.starts_with("Mutating")));

    // Static manifests: v1 only, 1.36 only.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("static");
    let target = target.to_str().unwrap();
    let static_args = ["policies", "--output", "static-manifests", "--kube-version"];
    refused(
        &[&static_args[..], &["1.35", target]].concat(),
        &["Kubernetes 1.35 has no static admission manifests"],
    );
    assert!(!dir.path().join("static").exists(), "nothing written");
}

/// The chart ships the objects generated from the default set; regenerate with
/// `cargo run -- policies --output admission-policies --kube-version 1.36 >
/// charts/stackgate/files/admission-policies.yaml`.
#[test]
fn chart_copy_is_current() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/stackgate/files/admission-policies.yaml"
    );
    let shipped = std::fs::read_to_string(path).unwrap();
    let expected = generate(&PolicySet::embedded().unwrap()).to_yaml(
        ApiChoice {
            validating: Some("admissionregistration.k8s.io/v1"),
            mutating: Some("admissionregistration.k8s.io/v1"),
        },
        "Kubernetes 1.36",
    );
    assert!(
        shipped == expected,
        "{path} is stale: regenerate it with `cargo run -- policies --output admission-policies \
         --kube-version 1.36 > charts/stackgate/files/admission-policies.yaml`"
    );
}

// ---------------------------------------------------------------------------------------------
// End to end on a real kube-apiserver

/// A child process killed when the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// POSTs `body` to `path` (`?dryRun=All` when `dry_run`): the created object, or the
/// apiserver's refusal message.
async fn create(
    client: &kube::Client,
    path: &str,
    body: &Value,
    dry_run: bool,
) -> Result<Value, String> {
    let uri = if dry_run {
        format!("{path}?dryRun=All")
    } else {
        path.to_owned()
    };
    let request = http::Request::post(uri)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    client
        .request::<Value>(request)
        .await
        .map_err(|e| e.to_string())
}

/// Retries `create` (dry run) until `done` holds for its answer (policies load
/// asynchronously), for at most 60 s; returns the last answer.
async fn until(
    client: &kube::Client,
    path: &str,
    body: &Value,
    done: impl Fn(&Result<Value, String>) -> bool,
) -> Result<Value, String> {
    let mut last = create(client, path, body, true).await;
    for _ in 0..120 {
        if done(&last) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        last = create(client, path, body, true).await;
    }
    last
}

/// The admin token of [`Apiserver`] (group `system:masters`).
const ADMIN_TOKEN: &str = "stackgate-e2e-token";
/// A token of user `breakglass` in group [`BREAK_GLASS_GROUP`].
const BREAK_GLASS_TOKEN: &str = "stackgate-e2e-breakglass";
const BREAK_GLASS_GROUP: &str = "platform-team";

/// etcd and a kube-apiserver on free loopback ports, in a temporary directory, stopped when
/// dropped.
struct Apiserver {
    _etcd: Child,
    _apiserver: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Apiserver {
    /// Starts them (`ETCD_BIN`, default `etcd`; `openssl`), with `flags` added to the
    /// apiserver's and `prepare` run on the directory first; waits for `/readyz`.
    async fn start(
        apiserver: &std::ffi::OsStr,
        flags: &[String],
        prepare: impl FnOnce(&std::path::Path),
    ) -> Apiserver {
        let etcd = std::env::var_os("ETCD_BIN").unwrap_or_else(|| "etcd".into());
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let (etcd_port, peer_port, secure_port) = (free_port(), free_port(), free_port());
        let _etcd = Child(
            Command::new(&etcd)
                .args(["--name", "default", "--data-dir"])
                .arg(path("etcd"))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
                .arg(format!(
                    "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
                ))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
                ))
                .arg(format!(
                    "--initial-cluster=default=http://127.0.0.1:{peer_port}"
                ))
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(path("etcd.log")).unwrap())
                .spawn()
                .expect("ETCD_BIN (or etcd on PATH) runs"),
        );
        let key = Command::new("openssl")
            .args([
                "ecparam",
                "-genkey",
                "-name",
                "prime256v1",
                "-noout",
                "-out",
            ])
            .arg(path("sa.pem"))
            .status()
            .expect("openssl runs");
        assert!(key.success());
        std::fs::write(
            path("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},admin,admin,system:masters\n{BREAK_GLASS_TOKEN},breakglass,breakglass,{BREAK_GLASS_GROUP}\n"
            ),
        )
        .unwrap();
        prepare(dir.path());
        let _apiserver = Child(
            Command::new(apiserver)
                .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
                .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
                .arg(format!("--secure-port={secure_port}"))
                .arg(format!("--cert-dir={}", path("certs").display()))
                .arg(format!(
                    "--token-auth-file={}",
                    path("tokens.csv").display()
                ))
                .arg("--authorization-mode=RBAC")
                .arg("--service-account-issuer=https://kubernetes.default.svc")
                .arg(format!(
                    "--service-account-key-file={}",
                    path("sa.pem").display()
                ))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    path("sa.pem").display()
                ))
                .args([
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--endpoint-reconciler-type=none",
                    "--disable-admission-plugins=ServiceAccount",
                    "--enable-priority-and-fairness=false",
                ])
                .args(flags)
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(path("apiserver.log")).unwrap())
                .spawn()
                .expect("KUBE_APISERVER_BIN runs"),
        );
        let server = Apiserver {
            _etcd,
            _apiserver,
            port: secure_port,
            dir,
        };
        let client = server.client(ADMIN_TOKEN);
        let mut ready = false;
        for _ in 0..120 {
            let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
            if client
                .request_text(request)
                .await
                .is_ok_and(|t| t.trim() == "ok")
            {
                ready = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        assert!(
            ready,
            "the apiserver did not get ready: {}",
            std::fs::read_to_string(server.dir.path().join("apiserver.log")).unwrap_or_default()
        );
        server
    }

    /// A client sending `token`.
    fn client(&self, token: &str) -> kube::Client {
        let mut config =
            kube::Config::new(format!("https://127.0.0.1:{}", self.port).parse().unwrap());
        config.accept_invalid_certs = true;
        config.headers.push((
            http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        ));
        kube::Client::try_from(config).unwrap()
    }
}

fn configmap(name: &str, text: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
        "data": {"cloud.conf": text},
    })
}

fn helm_release(name: &str, load_balancer: Value) -> Value {
    serde_json::json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "interval": "10m",
            "chart": {"spec": {"chart": "openstack-cloud-controller-manager", "sourceRef": {"kind": "HelmRepository", "name": "cpo"}}},
            "values": {"cloudConfig": {"global": {"auth-url": "https://keystone:5000/v3"}, "loadBalancer": load_balancer}},
        },
    })
}

/// With no stackgate pod at all, a real kube-apiserver loaded with the generated policies
/// refuses an explicit false in a labelled ConfigMap and in a HelmRelease's structured values,
/// admits what the webhook admits, and (1.36, `KUBE_VERSION` >= 1.34 with the beta served)
/// adds the setting to a plain config and to structured values.
///
/// Skips unless `KUBE_APISERVER_BIN` names a kube-apiserver (1.30+; see the project's notes on
/// building one) and `ETCD_BIN` (default `etcd`) and `openssl` run. `KUBE_VERSION` (default
/// 1.36) picks the generated API versions.
#[tokio::test]
async fn real_apiserver_refuses_false_and_adds_the_setting() {
    let Some(apiserver) = std::env::var_os("KUBE_APISERVER_BIN") else {
        eprintln!("skipped: KUBE_APISERVER_BIN is not set");
        return;
    };
    let kube_version: KubeVersion = std::env::var("KUBE_VERSION")
        .unwrap_or_else(|_| "1.36".to_owned())
        .parse()
        .unwrap();
    let flags: Vec<String> = match kube_version.mutating_api() {
        Some("admissionregistration.k8s.io/v1beta1") => vec![
            "--feature-gates=MutatingAdmissionPolicy=true".to_owned(),
            "--runtime-config=admissionregistration.k8s.io/v1beta1=true".to_owned(),
        ],
        _ => vec![],
    };
    let server = Apiserver::start(&apiserver, &flags, |_| {}).await;
    let client = server.client(ADMIN_TOKEN);

    // A HelmRelease CRD (schemaless values, as Flux's).
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "helmreleases.helm.toolkit.fluxcd.io"},
        "spec": {
            "group": "helm.toolkit.fluxcd.io", "scope": "Namespaced",
            "names": {"kind": "HelmRelease", "plural": "helmreleases", "singular": "helmrelease", "listKind": "HelmReleaseList"},
            "versions": [{"name": "v2", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    create(
        &client,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
        false,
    )
    .await
    .unwrap();

    let objects = generate(&PolicySet::embedded().unwrap())
        .objects(kube_version)
        .unwrap();
    for object in &objects {
        let api = object["apiVersion"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap().to_ascii_lowercase();
        let plural = match kind.strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{kind}s"),
        };
        create(&client, &format!("/apis/{api}/{plural}"), object, false)
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", object["metadata"]["name"]));
    }

    let configmaps = "/api/v1/namespaces/kube-system/configmaps";
    let refused = |r: &Result<Value, String>| {
        r.as_ref()
            .is_err_and(|e| e.contains("provider-requires-serial-api-calls"))
    };
    // Refused: an explicit false, and Off after true (the last assignment wins).
    for (name, text) in [
        (
            "false",
            "[Global]\nregion = r\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        ),
        (
            "off-after-true",
            "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n[loadbalancer]\nprovider-requires-serial-api-calls = Off\n",
        ),
    ] {
        let answer = until(&client, configmaps, &configmap(name, text), refused).await;
        assert!(refused(&answer), "{name}: {answer:?}");
    }
    // Admitted unchanged: false then a later TRUE, and a config outside the gate.
    for (name, text) in [
        (
            "true-last",
            "[LoadBalancer]\nprovider-requires-serial-api-calls = false\nprovider-requires-serial-api-calls = TRUE\n",
        ),
        (
            "continuation",
            "[LoadBalancer]\nprovider-requires-serial-api-calls = false\\\n\n",
        ),
    ] {
        let answer = create(&client, configmaps, &configmap(name, text), true).await;
        let data = answer.unwrap_or_else(|e| panic!("{name}: {e}"))["data"]["cloud.conf"].clone();
        assert_eq!(data, text, "{name}");
    }
    let releases = "/apis/helm.toolkit.fluxcd.io/v2/namespaces/kube-system/helmreleases";
    let release = helm_release(
        "occm",
        serde_json::json!({"provider-requires-serial-api-calls": false}),
    );
    let answer = until(&client, releases, &release, refused).await;
    assert!(refused(&answer), "HelmRelease: {answer:?}");

    if kube_version.mutating_api().is_some() {
        let plain = "[Global]\nregion = r\n";
        let answer = until(&client, configmaps, &configmap("plain", plain), |r| {
            r.as_ref().is_ok_and(|o| o["data"]["cloud.conf"] != plain)
        })
        .await;
        assert_eq!(
            answer.unwrap()["data"]["cloud.conf"],
            format!("{plain}[LoadBalancer]\nprovider-requires-serial-api-calls = true\n")
        );
        let release = helm_release("occm-plain", serde_json::json!({"lb-provider": "amphora"}));
        let answer = until(&client, releases, &release, |r| {
            r.as_ref().is_ok_and(|o| {
                !o["spec"]["values"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"].is_null()
            })
        })
        .await;
        assert_eq!(
            answer.unwrap()["spec"]["values"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"],
            true
        );
    }
}

/// The plural resource of an admission policy kind.
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.strip_suffix("policy") {
        Some(stem) => format!("{stem}policies"),
        None => format!("{lower}s"),
    }
}

/// `stackgate policies --output admission-policies --from-cluster` against the server's
/// kubeconfig; returns the exit code, the documents and stderr.
fn from_cluster(server: &Apiserver, more: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let kubeconfig = server.dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: \
             https://127.0.0.1:{}\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  \
             user:\n    token: {ADMIN_TOKEN}\ncontexts:\n- name: e2e\n  context: {{cluster: e2e, \
             user: admin}}\ncurrent-context: e2e\n",
            server.port
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args([
            "policies",
            "--output",
            "admission-policies",
            "--from-cluster",
        ])
        .args(more)
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("STACKGATE_POLICIES")
        .env_remove("STACKGATE_KUBE_VERSION")
        .env_remove("STACKGATE_API_VERSIONS")
        .env_remove("STACKGATE_POLICIES_ONLY")
        .output()
        .unwrap();
    let docs = if out.status.success() {
        documents(&out.stdout)
    } else {
        Vec::new()
    };
    (
        out.status.code(),
        docs,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Creates every document (what `kubectl apply -f -` does on an empty cluster); panics on the
/// first the apiserver refuses.
async fn install(server: &Apiserver, docs: &[Value]) {
    let admin = server.client(ADMIN_TOKEN);
    for d in docs {
        let path = format!(
            "/apis/{}/{}",
            d["apiVersion"].as_str().unwrap(),
            plural(d["kind"].as_str().unwrap())
        );
        if let Err(e) = create(&admin, &path, d, false).await {
            panic!("{} {}: {e}", d["kind"], d["metadata"]["name"]);
        }
    }
}

/// No partial install, on a real apiserver: discovery from the kubeconfig's context picks
/// what it serves. A default 1.36 serves both policy kinds in v1 and takes the whole output;
/// a 1.36 with MutatingAdmissionPolicy switched off (`--runtime-config` and the admission
/// plugin) is refused with exit 2 and takes the `--only validating` output whole.
///
/// Skips unless `KUBE_APISERVER_BIN` names a kube-apiserver 1.36 or later (`KUBE_VERSION`).
#[tokio::test]
async fn real_apiserver_takes_the_whole_output_of_from_cluster() {
    let Some(apiserver) = std::env::var_os("KUBE_APISERVER_BIN") else {
        eprintln!("skipped: KUBE_APISERVER_BIN is not set");
        return;
    };
    let kube_version: KubeVersion = std::env::var("KUBE_VERSION")
        .unwrap_or_else(|_| "1.36".to_owned())
        .parse()
        .unwrap();
    if kube_version < version("1.36") {
        eprintln!("skipped: MutatingAdmissionPolicy v1 needs 1.36 (KUBE_VERSION {kube_version})");
        return;
    }
    let server = Apiserver::start(&apiserver, &[], |_| {}).await;
    let (code, docs, stderr) = from_cluster(&server, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let got = kinds_and_apis(&docs);
    assert!(
        got.iter()
            .any(|(k, _)| k == "MutatingAdmissionPolicyBinding")
    );
    assert!(
        got.iter()
            .all(|(_, a)| a == "admissionregistration.k8s.io/v1")
    );
    install(&server, &docs).await;
    drop(server);

    let flags = [
        "--runtime-config=admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,\
         admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false"
            .to_owned(),
        "--disable-admission-plugins=ServiceAccount,MutatingAdmissionPolicy".to_owned(),
    ];
    let server = Apiserver::start(&apiserver, &flags, |_| {}).await;
    let (code, docs, stderr) = from_cluster(&server, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(docs.is_empty());
    assert!(
        stderr.contains("serves no MutatingAdmissionPolicy")
            && stderr.contains("--only validating"),
        "{stderr}"
    );
    let (code, docs, stderr) = from_cluster(&server, &["--only", "validating"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!docs.is_empty());
    assert!(
        docs.iter()
            .all(|d| d["kind"].as_str().unwrap().starts_with("Validating"))
    );
    install(&server, &docs).await;
}

/// KEP-5793 on a real 1.36 apiserver started with the generated static directory, an empty
/// etcd and no stackgate process: the first write of a labelled ConfigMap with `false` is
/// refused, a plain one gets the setting, and deleting or weakening stackgate's
/// ValidatingWebhookConfiguration is refused for an admin (`system:masters`) and allowed for
/// the break-glass group.
///
/// Skips unless `KUBE_APISERVER_BIN` names a kube-apiserver 1.36 or later (with the
/// `ManifestBasedAdmissionControlConfig` gate; `KUBE_VERSION` below 1.36 skips too).
#[tokio::test]
async fn real_apiserver_enforces_static_manifests_before_any_object_exists() {
    let Some(apiserver) = std::env::var_os("KUBE_APISERVER_BIN") else {
        eprintln!("skipped: KUBE_APISERVER_BIN is not set");
        return;
    };
    let kube_version: KubeVersion = std::env::var("KUBE_VERSION")
        .unwrap_or_else(|_| "1.36".to_owned())
        .parse()
        .unwrap();
    if kube_version < version("1.36") {
        eprintln!("skipped: static admission manifests need 1.36 (KUBE_VERSION {kube_version})");
        return;
    }
    let manifests = tempfile::tempdir().unwrap();
    let out = stackgate(&[
        "policies",
        "--output",
        "static-manifests",
        "--kube-version",
        "1.36",
        "--break-glass-group",
        BREAK_GLASS_GROUP,
        manifests.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let configuration = manifests.path().join("admission-configuration.yaml");
    let flags = vec![
        "--feature-gates=ManifestBasedAdmissionControlConfig=true".to_owned(),
        format!(
            "--admission-control-config-file={}",
            configuration.display()
        ),
    ];
    let server = Apiserver::start(&apiserver, &flags, |_| {}).await;
    let admin = server.client(ADMIN_TOKEN);

    // Static policies are in force from the start: no dry-run retries needed.
    let configmaps = "/api/v1/namespaces/kube-system/configmaps";
    let refused = create(
        &admin,
        configmaps,
        &configmap(
            "false",
            "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        ),
        false,
    )
    .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains(".static.k8s.io")),
        "{refused:?}"
    );
    let plain = "[Global]\nregion = r\n";
    let added = create(&admin, configmaps, &configmap("plain", plain), false)
        .await
        .unwrap();
    assert_eq!(
        added["data"]["cloud.conf"],
        format!("{plain}[LoadBalancer]\nprovider-requires-serial-api-calls = true\n")
    );

    let webhooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let webhook = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "stackgate-validating", "labels": {"app.kubernetes.io/part-of": "stackgate"}},
        "webhooks": [{
            "name": "validate.stackgate.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore", "clientConfig": {"url": "https://127.0.0.1:9/validate"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}],
        }],
    });
    create(&admin, webhooks, &webhook, false).await.unwrap();
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "break-glass"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": BREAK_GLASS_GROUP}],
    });
    create(
        &admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &binding,
        false,
    )
    .await
    .unwrap();
    let send = |client: &kube::Client, request: http::Request<Vec<u8>>| {
        let client = client.clone();
        async move {
            client
                .request::<Value>(request)
                .await
                .map_err(|e| e.to_string())
        }
    };
    let one = format!("{webhooks}/stackgate-validating");
    let weaken = http::Request::patch(&one)
        .header("content-type", "application/json-patch+json")
        .body(br#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]"#.to_vec())
        .unwrap();
    let answer = send(&admin, weaken).await;
    assert!(
        answer
            .as_ref()
            .is_err_and(|e| e.contains("stackgate-self-protection")),
        "{answer:?}"
    );
    let delete = || http::Request::delete(&one).body(Vec::new()).unwrap();
    let answer = send(&admin, delete()).await;
    assert!(
        answer
            .as_ref()
            .is_err_and(|e| e.contains("stackgate-self-protection")),
        "{answer:?}"
    );
    let answer = send(&server.client(BREAK_GLASS_TOKEN), delete()).await;
    assert!(answer.is_ok(), "{answer:?}");
}
